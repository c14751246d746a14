/* jobs/sample.h — the last step of `kf jobs run`: completions from the
 * trained chain with their quality and decoding speed.
 *
 * `kf sample` runs at tau 1 on the AR stage's final weights (one token per
 * step; without an `ar` stage, the imported teacher of a distill_ar stage)
 * and on every PFLM stage's at k = 1, 2, 4, ... up to its k, 16
 * completions (one batch) for each of a few fixed text prompts
 * (RUN/samples/prefixes.jsonl). The prompts are encoded with the vocabulary of
 * the shard set that data.train names (its `vocab:` and `tokenizer:` in the
 * config's `shards:` section) after the BOS token that starts every training
 * sample (CLS for BERT), and cut to half the model's context; the
 * completions take what the context leaves, at most 64 tokens, a multiple of
 * the largest k. Each run's JSONL goes to RUN/samples/STAGE-kK.jsonl and is
 * scored by `kf eval --completions` under the AR stage's weights. A table on
 * stdout gives per model and k: tokens/s and the ratio to AR, Gen-PPL,
 * unigram entropy, distinct-2/3, mean length before EOS, the corpus-word rate
 * and distinct words against the training split of data.train
 * (jobs/corpus_words.h), and a FLAG with the reasons when a row falls outside
 * trainer/infer/quality.h's margins of AR's or misses corpus_words.h's word
 * targets; then the first completion of each.
 */
#ifndef KF_JOBS_SAMPLE_H
#define KF_JOBS_SAMPLE_H

#include "common/error.h"
#include "common/runconfig.h"

/** Samples from the complete run in run (rc: its frozen config) with the
 * binary kf. A build without `kf sample`, a config whose shards do not name
 * the vocabulary, or a chain without an AR (an `ar` stage or an imported
 * distill_ar teacher) is skipped with a note
 * (returns 0). @return 0, or -1 with err set. */
int sample_run(const char *run, const runconfig *rc, const char *kf, kf_err *err);

#endif
