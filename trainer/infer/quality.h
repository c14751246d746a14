/* trainer/infer/quality.h — sample-quality metrics of generated completions
 * (the paper's appendix "Evaluation Protocol"):
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
 *   distinct-n over all truncated completions together, the number of
 *              distinct n-grams divided by the number of n-grams (n = 1, 2,
 *              3; n-grams never cross completions).
 *   entropy    the repetition measure of MDLM and its successors (the
 *              paper's unigram entropy): for each truncated completion, the
 *              Shannon entropy in nats of its own token histogram,
 *              -sum_v p_v ln p_v with p_v = count(v) / length; the mean over
 *              completions, an empty one counting 0 (a model that stops at
 *              once has repeated nothing, but said nothing either).
 *   length     the mean number of tokens before the first EOS (mask tokens
 *              not counted).
 *
 * The evaluator must share the completions' tokenizer (re-tokenisation
 * between vocabularies, as the paper does for LM1B, is not done here).
 *
 * Exposed as `kf eval --completions FILE.jsonl --evaluator CKPT`
 * (trainer/cli/cli_eval_completions.c).
 */
#ifndef KF_TRAINER_INFER_QUALITY_H
#define KF_TRAINER_INFER_QUALITY_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "trainer/model/model.h"

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
    double nll_sum; /* natural-log NLL summed over scored tokens */
    int64_t tokens; /* scored tokens */
    double ppl;     /* exp(nll_sum / tokens); NaN when tokens == 0 */
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

/** The sample statistics that need no evaluator. */
typedef struct quality_stats {
    int64_t samples;
    double distinct[3]; /* distinct-1, -2, -3 (NaN when there are no n-grams) */
    double entropy;     /* mean per-completion unigram entropy, nats (NaN: no samples) */
    double mean_len;    /* mean tokens before EOS (NaN: no samples) */
} quality_stats;

/** distinct-1..3, entropy and mean length of n samples (see the top of this
 *  file), cleaned with eos and strip as quality_clean does. */
void quality_stats_compute(const quality_sample *s, int64_t n, int32_t eos, int32_t strip,
                           quality_stats *out);

/* The margins of AR's quality within which a K-Forcing row reads as matching
 * its teacher: Gen-PPL at most 1.3x AR's, entropy and mean length
 * at least 0.9x AR's. Outside them the row is flagged. */
#define QUALITY_MAX_PPL_RATIO 1.3
#define QUALITY_MIN_ENTROPY_RATIO 0.9
#define QUALITY_MIN_LENGTH_RATIO 0.9

/** One row of a quality table: Gen-PPL under the AR teacher and the stats. */
typedef struct quality_row {
    double gen_ppl; /* NaN when not measured */
    quality_stats st;
} quality_row;

/** Writes into buf the reasons row r falls outside the margins of ar (e.g.
 *  "Gen-PPL 2.31x AR; entropy 0.52x AR"), "" when it is within them or when
 *  a figure is missing (NaN) on either side. @return the number of reasons. */
int quality_flag(const quality_row *r, const quality_row *ar, char *buf, size_t cap);

/** The column titles of quality_format, for a table header. */
const char *quality_header(void);

/** Formats r's quality columns (Gen-PPL, entropy, distinct-2/3, length) as
 *  quality_header names them, then "  FLAG: reasons" when quality_flag finds
 *  any against ar (ar may be r itself or NULL: no flag). */
void quality_format(const quality_row *r, const quality_row *ar, char *buf, size_t cap);

#endif
