/* trainer/infer/mdlm_sample.h — completions from a masked-diffusion (MDLM) model.
 *
 * The sampler the paper compares against (its Table 3, "MDLM k = 1/2"), in
 * the practice it follows (LLaDA's low-confidence remasking): a row starts as
 * its prefix followed by n_new mask tokens; each forward pass of the
 * bidirectional model (model_config.bidir) over the whole row samples every
 * masked position at temperature tau (1 in the paper) and unmasks the k
 * positions whose sampled token is most probable under the model's softmax at
 * tau = 1, keeping the others masked. Unmasked tokens and the prefix never
 * change (MDLM's SUBS carry-over). The last pass unmasks what is left (fewer
 * than k when k does not divide n_new), so a row takes ceil(n_new / k)
 * forward passes: its NFE.
 *
 * Draws: the token of generated position i in pass s of row b is the
 * inverse-CDF sample (kernels.h sample_icdf) at z = rng_uniform01(seed,
 * keys[b], s << 32 | i). Ties in confidence go to the lower position. The
 * passes run batch-invariant (kernels.h), so a row's tokens depend on its
 * prefix, key, seed, n_new, k and tau alone: not on the batch it is in, the
 * thread count or the SIMD level.
 *
 * Usage:
 *   mdlm_sample_opts o = {.n_new = 960, .k = 2, .seed = 1, .tau = 1.0};
 *   if (mdlm_sample_run(m, prefixes, B, P, &o, NULL, tokens, nfe, &err)) ...
 */
#ifndef KF_TRAINER_INFER_MDLM_SAMPLE_H
#define KF_TRAINER_INFER_MDLM_SAMPLE_H

#include <stdint.h>

#include "common/error.h"
#include "trainer/model/model.h"

typedef struct mdlm_sample_opts {
    int64_t n_new; /* tokens to generate after each prefix (>= 1) */
    int64_t k;     /* positions unmasked per forward pass (>= 1) */
    uint64_t seed;
    double tau;     /* sampling temperature (> 0); 0 means 1 */
    int32_t *trace; /* NULL, or [nfe x B x (P + n_new)]: every row, prefix included, after
                       each pass (the mask id where still masked) */
} mdlm_sample_opts;

/** Generates o->n_new tokens after each of the B prefixes [B x P] (P >= 0)
 *  with the bidirectional model m (its mask_id is the mask token).
 *  keys [B] (NULL: 0..B-1) identify each row's draws, so a caller that splits
 *  a batch passes each row's own key. tokens [B x n_new] receives the
 *  completions; nfe [B] (may be NULL) each row's forward passes. The backend's
 *  precision is the caller's. @return 0, or -1 with err (a causal model, no
 *  mask token, a prefix holding it or an id outside the vocabulary, bad
 *  options). */
int mdlm_sample_run(model *m, const int32_t *prefixes, int64_t B, int64_t P,
                    const mdlm_sample_opts *o, const uint64_t *keys, int32_t *tokens, int64_t *nfe,
                    kf_err *err);

/** Forward passes mdlm_sample_run takes for n_new tokens at k per pass:
 *  ceil(n_new / k). */
int64_t mdlm_sample_nfe(int64_t n_new, int64_t k);

#endif
