/* trainer/infer/paradigms.h — the decoding paradigms of the paper's quality–NFE
 * comparison (its Table 3: AR, MDLM, Medusa, PTP, K-Forcing), found in a run
 * directory and run behind one call that also counts the forward passes each
 * spends (`kf bench nfe`).
 *
 * Finding them in RUN (the stages of RUN/run.yaml; each stage's final/
 * weights resolved and verified by ckpt_resolve_teacher):
 *   AR         the first stage of kind `ar`, or of kind `import` whose
 *              weights are an AR model (the paper imports MDLM's for OWT);
 *              also the verifier of the speculative methods and the scorer
 *              of Gen-PPL
 *   K-Forcing  the PFLM stage (`distill_ar`, `self_forcing`) with the
 *              largest k, the last of equals: the paper decodes its
 *              PFLM(k=4) at k = 2, 3, 4
 *   PTP        the `noise_inversion_causal` stage (ablation variant B) with
 *              the largest k as the draft model, the AR stage as verifier
 *   Medusa     a `medusa` stage (k MTP heads on the frozen AR backbone)
 *   MDLM       an `mdlm` stage, or an `import` holding an MDLM model (a
 *              bidirectional one, model_config.bidir), at any k
 * The speculative methods are verified by the AR stage (speculative.h).
 * A paradigm is absent when the config has no such stage, when its final
 * weights are missing or do not verify, or when this build cannot decode it;
 * paradigm_set says why, and nothing is decoded in its place.
 *
 * NFE, as the paper's "Comparison design" counts it: one forward pass of a
 * full-size model counts one. decode_run's passes are counted as they run
 * (one per step: AR spends one per token, its prefill pass emitting the
 * first; K-Forcing ceil(n / k) for n tokens, the last step emitting the
 * tokens left); MDLM one per pass of its sampler (ceil(n / k),
 * mdlm_sample.h); a speculative method 2 per iteration (one draft pass, one
 * verifying AR pass), however many of its drafts the iteration accepted.
 */
#ifndef KF_TRAINER_INFER_PARADIGMS_H
#define KF_TRAINER_INFER_PARADIGMS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "common/runconfig.h"
#include "kernels/kernels.h"
#include "trainer/model/model.h"

/* In the order of the paper's table. */
typedef enum {
    PARADIGM_AR = 0,
    PARADIGM_MDLM,
    PARADIGM_MEDUSA,
    PARADIGM_PTP,
    PARADIGM_KF,
    PARADIGM_COUNT
} paradigm_id;

/** The paradigm as the paper's table names it: "AR", "MDLM", "Medusa", "PTP",
 *  "K-Forcing". */
const char *paradigm_name(paradigm_id id);

/** True for the draft-then-verify methods (Medusa, PTP). */
bool paradigm_speculative(paradigm_id id);

/** NFE of one completion that took `rounds` rounds: decoding steps, or the
 *  speculative iterations of a draft-then-verify method (2 passes each). */
double paradigm_nfe(paradigm_id id, double rounds);

/** One paradigm of a run: where its weights are and, when present, the
 *  loaded models (owned by the paradigm_set). */
typedef struct paradigm {
    paradigm_id id;
    bool present;
    char why[320];   /* absent: the reason */
    char stage[64];  /* the stage decoded (present) */
    char ver[64];    /* speculative: the verifying AR stage */
    int64_t k_max;   /* tokens per pass it was trained for (AR: 1) */
    model *m, *verm; /* the stage's model; the verifier's (speculative) */
    const model_heads *heads, *ver_heads;
} paradigm;

#define PARADIGM_MAX_MODELS 8

/** Every paradigm of a run, its models loaded once per stage. */
typedef struct paradigm_set {
    runconfig *rc;              /* RUN/run.yaml */
    paradigm p[PARADIGM_COUNT]; /* indexed by paradigm_id */
    int n_models;
    char names[PARADIGM_MAX_MODELS][64];
    model *models[PARADIGM_MAX_MODELS];
    model_heads *heads[PARADIGM_MAX_MODELS];
} paradigm_set;

/** Reads RUN/run.yaml, finds each paradigm (see the top of this file) and
 *  loads the present ones on be. A run without a usable AR stage is an
 *  error (it verifies the speculative methods and scores Gen-PPL).
 *  @return 0, or -1 with err (no run config, unreadable weights, no AR). */
int paradigm_set_open(paradigm_set *s, const char *run, kf_backend *be, kf_err *err);

/** Frees the models (s may be partly opened). */
void paradigm_set_close(paradigm_set *s);

/** How one paradigm decodes. */
typedef struct paradigm_opts {
    int64_t k;          /* tokens per pass (K-Forcing, MDLM) or drafts per iteration */
    double tau;         /* sampling temperature (> 0) */
    float freq_penalty; /* K-Forcing only (decode.h); 0: off */
    int64_t max_new;    /* tokens per completion */
    uint64_t seed;
} paradigm_opts;

/** Checks o against p's models and prefix length P (decode_check and its
 *  counterparts). @return 0, or -1 with err. */
int paradigm_check(const paradigm *p, const paradigm_opts *o, int64_t P, kf_err *err);

/** Completes B prefixes [B*P] into out [B*max_new] (keys [B] seed each
 *  sequence's draws: decode.h, speculative.h, mdlm_sample.h) and stores in
 *  rounds [B] the rounds each sequence took (decoding steps, or speculative
 *  iterations; paradigm_nfe turns them into NFE) and in accepted [B] the
 *  drafts each accepted (0 unless speculative). Call paradigm_check first.
 *  @return 0, or -1 with err (what the MDLM sampler refuses). */
int paradigm_generate(const paradigm *p, const int32_t *prefix, int64_t B, int64_t P,
                      const paradigm_opts *o, const uint64_t *keys, int32_t *out, int64_t *rounds,
                      int64_t *accepted, kf_err *err);

#endif
