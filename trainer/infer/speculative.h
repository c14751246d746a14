/* trainer/infer/speculative.h — speculative decoding: a draft model proposes
 * k tokens, one pass of the AR verifier keeps the longest prefix it accepts
 * and adds one token of its own, so the output distribution is the AR's
 * exactly (lossless; Leviathan et al. 2023, Chen et al. 2023).
 *
 * Drafts (spec_draft_of says which a model is):
 *
 *   SPEC_MEDUSA  a Medusa model (model.h HEAD_MEDUSA: the verifier's weights
 *                plus k heads, a `medusa` stage), Medusa-1 style: one pass
 *                of it per iteration feeds the uncached tokens and the k
 *                drafts; head 0 (the AR's output layer) verifies the drafts,
 *                and Medusa head J at the last accepted row drafts the token
 *                J after the next one. d_J is sampled from q_J =
 *                softmax(head_J / tau) (its inverse CDF in id order at a
 *                uniform of its own), so q is exactly the distribution the
 *                draft is drawn from; it is accepted with probability
 *                min(1, p(d_J) / q_J(d_J)), and the first rejected one is
 *                replaced by a draw from norm(max(0, p - q_J)); k accepted
 *                drafts get a bonus token from p (the standard rule;
 *                lossless because q_J depends on nothing the verifier sees
 *                after the drafting row). The uniforms are Philox counters
 *                keyed by (purpose, iteration, index): fresh per iteration.
 *                Its head 0 must be the verifier bit for bit (spec_check;
 *                spec_medusa_attach makes it so: a stage's EMA may round
 *                the frozen weights by an ulp).
 *   SPEC_PTP     a fully causal PFLM (HEAD_SHARED; the noise-inversion
 *                ablation variant B, `noise_inversion_causal`, is PTP's draft
 *                model): one pass feeds the uncached tokens plus k noise rows
 *                and drafts d_j = argmax of its head on noise row j, with
 *                z_j = z(n + j), where z(i) = rng_uniform01(seed, keys[b], i
 *                - P) is the uniform of output position i and tau conditions
 *                the noise encoder. Given the noise a draft is deterministic:
 *                q_j is the point mass on d_j. Verification is coupled to the
 *                same uniforms, as PTP's: the AR's token at position i is
 *                x_i = F^-1(z(i) | p_i), the inverse CDF of p_i =
 *                softmax(logits_i / tau) over the ids sorted by descending
 *                probability (ties: lower id first; the order noise
 *                inversion trains the draft on, sup_icdf_bin_sorted), and d_j
 *                is accepted iff it equals x_i. Every emitted token is
 *                therefore F^-1(z(i) | p_i) of its own uniform, whatever the
 *                drafts were: the output IS the AR's inverse-CDF sample path
 *                of the uniforms z (lossless, and the same tokens at any k or
 *                batch), and a draft is accepted with probability
 *                P(F^-1(z) = d_j), near 1 for a draft that learnt the map,
 *                where the uncoupled test min(1, p/q) = p(d_j) of a point
 *                mass would accept far less.
 *
 * Greedy (o->greedy; any draft): the drafts are made as above and d_j is
 * accepted iff it is the first maximum of the verifier's logits at its
 * position; a rejected draft is replaced by that argmax and a fully accepted
 * block gets the argmax after it: the tokens are the AR's greedy tokens
 * exactly (the verifier's logits of a row do not depend on how many rows its
 * step feeds).
 *
 * An iteration = a draft and a verification over the row's uncached tokens
 * and its k drafts (the first iteration's passes include the prefix; a
 * Medusa model's first has no drafts yet). It emits (accepted drafts) + 1
 * tokens: the first rejected draft's replacement, or the bonus token after
 * k accepted ones. The verifier keeps the accepted drafts' K/V and rewinds
 * past the rejected ones (model_cache_rewind). NFE is counted as the
 * paper's Table 3 does: 2 per iteration (draft + verify), although a Medusa
 * iteration runs one pass (spec_stats.passes says what ran); near max_new
 * an iteration drafts only the tokens still missing, so nothing is
 * generated past max_new.
 *
 * Ragged acceptance: rows accept different numbers of drafts, so their
 * caches grow at different rates. Rows are decoded one after another, each
 * over caches of one sequence (B = 1, rewound for the next row, so their
 * step graphs serve every row): per-row cache lengths with no padding, no
 * masking and no wasted rows, and a row's tokens and counts do not depend on
 * the batch, at the price of batching — a pass reads every weight for one
 * sequence instead of B (bench/spec_cost.sh measures it against batched AR
 * decoding).
 */
#ifndef KF_TRAINER_INFER_SPECULATIVE_H
#define KF_TRAINER_INFER_SPECULATIVE_H

#include <stdint.h>

#include "common/error.h"
#include "trainer/model/model.h"

typedef enum { SPEC_NONE = -1, SPEC_PTP = 0, SPEC_MEDUSA = 1 } spec_draft;

/** Which draft a model can be (SPEC_NONE: none). */
spec_draft spec_draft_of(const model *draft);

/** The draft's name as `kf sample --method` and reports spell it ("ptp",
 *  "medusa"). */
const char *spec_draft_name(spec_draft d);

typedef struct spec_opts {
    int64_t k;       /* tokens drafted per iteration (1..the draft's k_train:
                        PTP's window, Medusa's heads) */
    double tau;      /* the verifier's temperature (> 0; the draft's noise
                        encoder gets it too); unused when greedy */
    int greedy;      /* 1: the AR's greedy tokens */
    int64_t max_new; /* tokens to generate per sequence (>= 1) */
    uint64_t seed;
} spec_opts;

/** What one row's decode took. */
typedef struct spec_stats {
    int64_t iters;    /* draft-verify iterations */
    int64_t nfe;      /* 2 * iters: draft and verify passes, as the paper counts */
    int64_t passes;   /* forward passes run (PTP: 2 * iters; Medusa: iters) */
    int64_t drafted;  /* draft tokens proposed */
    int64_t accepted; /* draft tokens accepted: accepted / iters is the mean
                         accepted per iteration, max_new / iters the tokens */
} spec_stats;

/** Checks the pair and the options: verifier an AR model, draft one
 *  spec_draft_of knows with the verifier's vocabulary (a Medusa draft: the
 *  verifier's weights, compared bit for bit), k in range, tau > 0, max_new
 *  >= 1, prefix + max_new within both models' context.
 *  @return 0 or -1 with err. */
int spec_check(const model *verifier, const model *draft, const spec_opts *o, int64_t P,
               kf_err *err);

/** Generates o->max_new tokens for B sequences with prefixes prefix [B*P]
 *  into out [B*max_new]; keys [B] seed each row's draws. vheads, dheads:
 *  the models' packed layers (model_heads_pack; NULL: packed for this
 *  call). stats [B] (may be NULL) receives each row's counts. Dies on
 *  arguments spec_check refuses. */
void spec_run(model *verifier, const model_heads *vheads, model *draft, const model_heads *dheads,
              const int32_t *prefix, int64_t B, int64_t P, const spec_opts *o, const uint64_t *keys,
              int32_t *out, spec_stats *stats);

/** Copies the verifier's weights into the Medusa model d (every tensor
 *  but its heads'), before d's layers are packed (model_heads_pack): the
 *  heads were trained on the frozen verifier, which the stage's EMA may
 *  have moved by rounding. */
void spec_medusa_attach(model *d, const model *verifier);

/** The token at uniform z of softmax(logits / tau) (V logits, float64) by
 *  the inverse CDF over the ids sorted by descending probability (ties:
 *  lower id first): PTP's coupled verification, exposed for the tests. */
int32_t spec_icdf_sorted(const float *logits, int64_t V, double tau, double z);

#endif
