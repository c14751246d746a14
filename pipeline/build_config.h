/* pipeline/build_config.h — the `shards:` section of a run config: which
 * shard sets `kf shards build` makes, from which inputs, and how.
 *
 *   shards:
 *     owt-tiny:                          # set name: [A-Za-z0-9._-]+
 *       out: data/shards/owt-tiny        # output directory (required)
 *       tokenizer: gpt2                  # gpt2 | bert (required)
 *       vocab: data/vocab/gpt2           # vocabulary directory (required)
 *       packing: wrap                    # wrap | pad (required)
 *       seq_len: 128                     # tokens per sample, >= 3 (required)
 *       detok: none                      # none | lm1b | wikitext (default none)
 *       allow_special: false             # gpt2: literal <|endoftext|> -> id (default false)
 *       docs_per_shard: 4096             # documents per shard unit (default 8192)
 *       inputs:                          # required, non-empty, read in order
 *         - {path: data/text/owt.jsonl, format: jsonl, text_field: text}
 *       valid: {last: 1000}              # last N >= 1 documents of inputs, or
 *       # valid: {inputs: [...]}         # separate inputs (same shape as above);
 *                                        # without `valid:` the set has no valid split
 *
 * A build fails when a split that training reads (train; valid when `valid:`
 * is given) holds 0 samples, and warns when more than 1% of a split's input
 * bytes are invalid UTF-8 (replaced by U+FFFD).
 *
 * Paths (out, vocab, inputs) are relative to the current directory, like
 * every path on kf's command line.
 *
 * An input's `path` is a file, a directory or an archive; `format` says how a
 * file's bytes become documents:
 *   lines   every line is a document (LM1B's news.en-*); empty lines counted
 *   text    the whole file is one document (OWT's .txt files)
 *   jsonl   every line is a JSON object; its `text_field` string is a document
 * Containers: a directory is walked recursively in byte order of names and
 * every regular file whose name ends in `suffix` (default ".txt"; "" = all) is
 * read; an archive (.tar .tar.gz .tgz .tar.xz .txz .tar.bz2 .xz .gz .bz2, by
 * name) is read with libarchive, and members that are themselves archives
 * (OWT: urlsf_subset*.xz inside openwebtext.tar.xz) are opened recursively;
 * other members are read when their name ends in `suffix` (a bare .xz/.gz
 * member that is not a tar is one file). Default format: text for directories
 * and archives, jsonl for *.jsonl, lines otherwise.
 *
 * Shard units: documents (non-empty ones; empties are only counted) are cut
 * into groups of docs_per_shard in input order; group k becomes shard k. In
 * `wrap` mode the concatenation runs within a group and its remainder (fewer
 * than seq_len-2 tokens) is dropped at the group's end, so every shard is a
 * pure function of its own documents: this is what makes the output
 * independent of --jobs and lets a resumed build keep finished shards.
 */
#ifndef KF_PIPELINE_BUILD_CONFIG_H
#define KF_PIPELINE_BUILD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "common/error.h"
#include "common/runconfig.h"

typedef enum { FMT_LINES, FMT_TEXT, FMT_JSONL } input_format;
typedef enum { DETOK_NONE, DETOK_LM1B, DETOK_WIKITEXT } detok_kind;

typedef struct build_input {
    const char *path; /* as written (owned by the cfg tree) */
    input_format format;
    const char *text_field; /* jsonl */
    const char *suffix;     /* directory / archive member filter */
} build_input;

typedef struct build_inputs {
    int n;
    build_input *v;
} build_inputs;

typedef struct build_config {
    const char *name, *out, *tokenizer, *vocab, *packing;
    int32_t seq_len;
    detok_kind detok;
    bool allow_special;
    int64_t docs_per_shard;
    build_inputs inputs;
    int64_t valid_last;        /* > 0: last N documents of inputs are the valid split */
    build_inputs valid_inputs; /* n > 0: separate validation inputs */
} build_config;

/** Reads and validates every set under root's `shards:` mapping (strictly:
 * unknown keys, wrong types, missing fields and bad values fail with
 * FILE:LINE:COL and the key path), and checks every input path exists and is
 * readable. Strings stay owned by root.
 * @return the number of sets (>= 1) in *out (free with build_config_free),
 * or -1. */
int build_config_read(cfg_node *root, build_config **out, kf_err *err);

/** Frees the n sets build_config_read returned (NULL: nothing). */
void build_config_free(build_config *sets, int n);

/** sha256 (hex) of the settings that determine the shards' contents
 * (tokenizer, vocabulary hash, packing, seq_len, detok, allow_special,
 * docs_per_shard, input formats and the validation rule; not paths). */
void build_config_hash(const build_config *c, const char *vocab_sha256, char out[65]);

/** The `vocab:` and `tokenizer:` of the `shards:` set in rc's canonical
 * config whose `out:` is data.train: the vocabulary the run's token ids come
 * from. Both NULL when no set builds data.train.
 * @return 0, or -1 when the `shards:` section does not read (err says why).
 * Free both strings with free(). */
int build_config_train_vocab(const runconfig *rc, char **vocab, char **kind, kf_err *err);

#endif
