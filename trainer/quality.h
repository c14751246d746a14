/* trainer/quality.h — sample-quality metrics of generated completions
 * (issue 8 item 3; the paper's appendix "Evaluation Protocol"):
 *
 *   Gen-PPL    completions scored by an evaluator AR checkpoint the user
 *              chooses: each completion is truncated at its first EOS (the
 *              EOS and everything after it dropped) and stripped of the
 *              evaluator's mask token; its tokens are scored with the prefix
 *              as (unscored) context; corpus-level perplexity =
 *              exp(sum of token NLLs / number of tokens). A sequence longer
 *              than the evaluator's context is scored in consecutive windows
 *              of seq_len tokens (each window restarts the context, as MDLM's
 *              generative-perplexity code does).
 *   distinct-n the repetition measure: over all truncated completions
 *              together, the number of distinct n-grams divided by the number
 *              of n-grams (n = 1, 2, 3; n-grams never cross completions).
 *
 * The evaluator must share the completions' tokenizer (re-tokenisation
 * between vocabularies, as the paper does for LM1B, is not done here).
 *
 * Exposed as `kf eval --completions FILE.jsonl --evaluator CKPT` (a dispatch in
 * trainer/cli_eval.c calls quality_eval_main).
 */
#ifndef KF_TRAINER_QUALITY_H
#define KF_TRAINER_QUALITY_H

#include <stdint.h>

#include "common/error.h"
#include "trainer/model.h"

/** One generated sample: its prefix (context) and completion ids. */
typedef struct quality_sample {
    const int32_t *prefix;
    int64_t n_prefix;
    const int32_t *completion;
    int64_t n_completion;
} quality_sample;

/** Copies completion ids up to (not including) the first eos (eos < 0: no
 *  truncation) into out, leaving out every id equal to strip (strip < 0:
 *  none). @return the number of ids written (out needs n entries). */
int64_t quality_clean(const int32_t *ids, int64_t n, int32_t eos, int32_t strip, int32_t *out);

/** Corpus-level Gen-PPL result. */
typedef struct quality_ppl {
    double nll_sum;  /* natural-log NLL summed over scored tokens */
    int64_t tokens;  /* scored tokens */
    double ppl;      /* exp(nll_sum / tokens); NaN when tokens == 0 */
} quality_ppl;

/** Scores n samples (completions cleaned by quality_clean with eos and the
 *  evaluator's mask id) under the AR model ev, batch windows at a time
 *  (fewer when their logits would exceed 1 GiB).
 *  @return 0, or -1 with err (ev not AR, an id outside ev's vocabulary). */
int quality_genppl(model *ev, const quality_sample *s, int64_t n, int32_t eos, int64_t batch,
                   quality_ppl *out, kf_err *err);

/** distinct-n for n = 1..nmax (nmax <= 3) over the cleaned completions:
 *  out[n-1] = distinct n-grams / n-grams (NaN when there are none). */
void quality_distinct(const quality_sample *s, int64_t n, int32_t eos, int32_t strip, int nmax,
                      double *out);

/** `kf eval --completions FILE.jsonl --evaluator CKPT [--eos ID] [--batch B]
 *  [--json OUT]`. FILE is `kf sample` output: one JSON object per line with
 *  "prefix" (array of ids, optional) and "completion" (array of ids; also
 *  accepted: "completion_ids"). Prints one JSON object (samples, tokens,
 *  gen_ppl, nll, distinct_1..3) on stdout. */
int quality_eval_main(int argc, char **argv);

#endif
