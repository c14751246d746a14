/* pipeline/build.h — `kf shards build` for one shard set: read, tokenize and
 * pack in parallel, write shards, then the manifest.
 *
 * Work split: the calling thread reads documents (doc_reader.h) and cuts them
 * into shard units of docs_per_shard documents (build_config.h); worker
 * threads each take a whole unit and turn it into one shard. Nested archives
 * (OpenWebText's urlsf_subset*.xz inside the outer .tar.xz) are handed whole
 * to the workers, which decompress and split them while the reader goes on;
 * the reader takes their documents back in input order. At most `jobs`
 * threads (the reader included, which goes first) compute at once, and there
 * are `jobs` workers. A packed shard's commit (LMDB's last writes, starting
 * its write-back, naming it: system calls that may wait for the disk) is
 * left to `jobs` committer threads, so a worker goes on with the next unit at
 * once and never hands its core over for that wait (each hand-over leaves a
 * core idle for a while). The committers also fsync each shard, a few
 * commits later, so every shard is durable before the manifest is written
 * without a wait at the end. A worker keeps its CPU slot from one unit to
 * the next unless the reader wants one. A shard is a pure function of its
 * unit's documents and the config, so the output does not depend on `jobs`
 * or on scheduling, and the manifest (written last) is byte identical
 * across runs.
 *
 * Start-up: the tokenizer is loaded (once per vocabulary; the other slots
 * get tok_clone's) and the output directory prepared on a setup thread while
 * the reader already reads: with jobs > 1 it may queue up to 64 MiB of units
 * before the tokenizer is there. The output directory is touched only after
 * the tokenizer has loaded, so a bad vocabulary leaves an old set intact.
 *
 * Resume: at start the old manifest and stale temp files are removed. A unit
 * whose shard file already exists is kept when the file verifies (every
 * sample's hash recomputed) and its record names the same source hash (sha256
 * over the unit's documents) and config hash; otherwise it is rebuilt. So
 * after `kill -9` at any moment, rerunning the same command redoes only the
 * unfinished units and ends with the same manifest. Shard files beyond the
 * new counts (left by an earlier, larger build) are removed before the
 * manifest is written.
 */
#ifndef KF_PIPELINE_BUILD_H
#define KF_PIPELINE_BUILD_H

#include <stdint.h>

#include "common/error.h"
#include "pipeline/build_config.h"

struct tok; /* tokenize/tokenizer.h */

/** What one build did (beyond what the manifest records). */
typedef struct build_result {
    int64_t shards_built, shards_reused;
    int64_t raw_bytes; /* document bytes of both splits */
    double seconds;
} build_result;

/** Builds the set c with jobs worker threads (>= 1). force: rebuild every
 * shard even when an existing one matches (e.g. after changing tokenizer
 * code, which the config hash cannot see). Prints a progress bar on a
 * terminal (plain periodic lines otherwise) and a report at the end.
 * @param toks NULL, or an array of `jobs` tokenizers for c's tokenizer and
 *        vocabulary, one per CPU slot; NULL entries are filled and stored
 *        back (the first loaded, the others tok_clone'd from it), so a
 *        caller building several sets with one vocabulary loads it once and
 *        keeps the encoders' caches warm. The caller frees them.
 * @return 0, or -1 with err set (input error, write error); on failure no
 *         manifest exists in c->out. */
int shards_build(const build_config *c, int jobs, int force, struct tok **toks, build_result *res,
                 kf_err *err);

/** Whether c->out holds a finished build of set c as c is configured now:
 * its manifest reads and records c's config hash over the vocabulary's
 * current sha256 (loads the tokenizer: tens of milliseconds). The inputs are
 * not read, so an edited input file goes unnoticed here (shards_build
 * notices: each shard records its source's hash).
 * @return 1 current; 0 not, with why (cap bytes) saying what differs; -1
 *         with err when the vocabulary cannot be loaded. */
int shards_current(const build_config *c, char *why, size_t cap, kf_err *err);

#endif
