/* trainer/infer/decode.h — KV-cached decoding of AR and PFLM (K-Forcing) models.
 *
 * AR: one token per step; the prefix is prefilled in one step, then each step
 * feeds the last token. Token i of sequence b is the inverse-CDF sample of
 * softmax(logits / tau) at z = rng_uniform01(seed, keys[b], i) (float64,
 * sample_icdf op), so a fixed seed gives fixed completions.
 *
 * PFLM (paper Algorithm "K-Forcing Inference with KV Cache"): the first step
 * feeds the prefix plus k noise tokens; every later step feeds the k tokens
 * produced last step plus k fresh noise tokens (RoPE positions continue, so
 * noise j after context position t sits at t+1+j exactly as in training).
 * Only the token rows' K/V stay in the cache; the noise rows' are discarded.
 * Output j is the argmax of the head on noise token j. Any k <= k_train. The
 * HEAD_MTP baseline feeds one noise token carrying k values and reads k heads.
 * Noise j of step s for sequence b is rng_uniform01(seed, keys[b], s*k + j);
 * tau conditions the noise encoder. The noise is known before the steps
 * that feed it, so the noise encoder runs once for the noise rows of
 * decode_noise_steps steps, ahead of the first of them, and not on each
 * step's few rows (which read its weights every step).
 *
 * Every sequence of a batch advances by exactly k tokens per step (fixed
 * stride), so all share one prefix length and one cache length. When k does
 * not divide max_new, the last step feeds only the noise rows of the tokens
 * still missing and emits those (the released sampler likewise emits
 * min(k, remaining) tokens in its last step), so prefix + max_new tokens fit
 * a context of exactly that many positions: the paper's LM1B protocol,
 * 6 -> 128 tokens, runs in a 128-token model at k = 3 and 4.
 *
 * Position temperatures (off by default; not the released sampler): with
 * position_temp, output j of every step is the argmax when position_temp[j]
 * == 0 and otherwise the inverse-CDF sample of the head's softmax at
 * temperature position_temp[j], at z = rng_uniform01(seed, keys[b],
 * DECODE_POSITION_DRAWS + i) for token i (a counter range the noise never
 * uses). An older commit of the release (847fd9a, "adding a hack for pflm")
 * decoded OWT with 0, 0.3, 0.5, 0.7 and LM1B with 0, 0.2, 0.4, 0.6 "to avoid
 * repetition caused by imperfect training"; its next commit replaced that by
 * the frequency penalty below, and its current sampler is argmax at every
 * position with that penalty (the paper's push-forward decoding).
 *
 * Frequency penalty (the released sampler's; `kf sample` and `kf bench
 * decode` default to its 0.5 for PFLM checkpoints): before each emitted
 * token is chosen, its logits get -= penalty * (occurrences of each id among
 * the tokens this sequence has generated so far, including earlier outputs
 * of the same step).
 */
#ifndef KF_TRAINER_INFER_DECODE_H
#define KF_TRAINER_INFER_DECODE_H

#include <stdint.h>

#include "common/error.h"
#include "trainer/model/model.h"

/** The released sampler's frequency penalty, the PFLM default of `kf sample`
 *  and `kf bench decode`. */
#define DECODE_FREQ_PENALTY_DEFAULT 0.5

/** The frequency penalty the release's sampling scripts use for a PFLM
 *  emitting k tokens a step on dataset `table` ("lm1b": 0.2, 0.4, 0.5 and
 *  "owt": 0.3, 0.5, 0.5 for k = 2, 3, 4; DECODE_FREQ_PENALTY_DEFAULT at any
 *  other k), `kf sample --freq-penalty-table`. -1 when table is neither. */
double decode_release_penalty(const char *table, int64_t k);

/** Noise rows decode_run encodes in one pass of the noise encoder, at
 *  least (with fewer rows than steps left). At a 124M model's 4 rows a
 *  step, encoding each step's rows read the encoder's 23.6 MB every step,
 *  3.6% of a K-Forcing step at batch 1 on one AVX2 thread; at 64 rows its
 *  products run at the blocks' large-row rate. */
#define DECODE_NOISE_ROWS 64

/** Steps whose noise rows decode_run encodes in one pass, for per_step
 *  noise rows a step (all samples'): the fewest that make
 *  DECODE_NOISE_ROWS rows (1 from there on). Passes begin at steps 0, n,
 *  2n, ... and the last covers the steps left. */
int64_t decode_noise_steps(int64_t per_step);

/** First RNG counter of the position-temperature draws (see above). */
#define DECODE_POSITION_DRAWS ((uint64_t)1 << 62)

typedef struct decode_opts {
    int64_t k;                   /* tokens per step (AR: 1; PFLM: 1..k_train) */
    double tau;                  /* temperature (> 0) */
    float freq_penalty;          /* 0: off */
    const double *position_temp; /* [n_position_temp >= k] or NULL (PFLM only) */
    int64_t n_position_temp;
    int64_t max_new; /* tokens to generate per sequence */
    uint64_t seed;
    /* NULL, or called before each step's first op with on_step_ctx, the
     * step's index (0: the prefill) and the cache rows before it: `kf bench
     * decode --roofline` finds a step's ops in a recorder's log by it */
    void (*on_step)(void *ctx, int64_t step, int64_t cache_len);
    void *on_step_ctx;
} decode_opts;

/** Checks opts against the model (k range, tau > 0, max_new >= 1, position
 *  temperatures: PFLM only, one >= 0 per output position) and the
 *  prefix length against the model's context (prefix + generated tokens +
 *  noise rows must fit in seq_len positions). @return 0 or -1 with err. */
int decode_check(const model *m, const decode_opts *o, int64_t prefix_len, kf_err *err);

/** Generates o->max_new tokens for B sequences with prefixes prefix [B*P]
 *  (P >= 1 tokens each) into out [B*max_new]. keys [B] seed the draws of each
 *  sequence. heads: m's output layers packed by model_heads_pack, kept across
 *  runs by callers that decode many batches (NULL: packed for this run).
 *  Dies on invalid arguments (call decode_check first). */
void decode_run(model *m, const model_heads *heads, const int32_t *prefix, int64_t B, int64_t P,
                const decode_opts *o, const uint64_t *keys, int32_t *out);

/** Rows of KV cache decode_run needs for prefix length P. */
int64_t decode_cache_rows(const model *m, const decode_opts *o, int64_t P);

#endif
