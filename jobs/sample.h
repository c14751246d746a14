/* jobs/sample.h — the last step of `kf jobs run`: completions from the
 * trained chain with their decoding speed.
 *
 * `kf sample` runs on the AR stage's final weights (one token per step) and on
 * the last PFLM stage's at k = 1, 2, 4, ... up to its k, from a few fixed text
 * prompts (RUN/samples/prefixes.jsonl). Each run's JSONL goes to
 * RUN/samples/STAGE-kK.jsonl; a table of tokens/s (and the speedup over AR)
 * with one completion per model is printed on stdout. The prompts are encoded
 * with the vocabulary of the shard set that data.train names (its `vocab:`
 * in the config's `shards:` section).
 */
#ifndef KF_JOBS_SAMPLE_H
#define KF_JOBS_SAMPLE_H

#include "common/error.h"
#include "common/runconfig.h"

/** Samples from the complete run in run (rc: its frozen config) with the
 * binary kf. A build without `kf sample`, or a config whose shards do not
 * name the vocabulary, is skipped with a note (returns 0). @return 0, or -1 with err set. */
int sample_run(const char *run, const runconfig *rc, const char *kf, kf_err *err);

#endif
