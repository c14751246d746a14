/* trainer/train/supervision.h — the student's inputs and targets for each stage.
 *
 * Given a batch of B data samples of n tokens, sup_build returns everything a
 * student step needs: its layout, a model_input (tokens, noise z, tau) and
 * one target per logit row. Kinds (docs/architecture.md "Reference model",
 * paper sections 3.2 and appendix C):
 *
 *   SUP_AR            next token: context x[0..n-1), target x[t+1].
 *   SUP_DISTILL_AR    forward distillation from a frozen AR teacher into a
 *                     PFLM(k): context x[0..n-k), per-sample tau, targets =
 *                     the teacher's inverse-CDF sample of logits/tau at z
 *                     (float64 softmax + cumsum, sample_icdf op). For k > 1
 *                     the k tokens are the teacher's exact sequential sample
 *                     x_{t+j} = F^-1(z_j | x<=t, x_{t+1..t+j-1}) (k teacher
 *                     passes; the paper's stage 1 is k = 1).
 *   SUP_SELF_FORCING  PFLM(k/2) teacher -> PFLM(k) student: round 1 argmax of
 *                     the teacher's SingleForward on z[0:k/2]; round 2 argmax
 *                     of its DoubleForward (context K/V of round 1 reused) on
 *                     z[k/2:k]; context x[0..n-k).
 *   SUP_NI_CAUSAL     noise inversion (variant B): targets are the real tokens
 *                     x[t+1+j]; z_j is uniform inside that token's CDF bin
 *                     under the AR teacher's softmax(logits/tau), the CDF
 *                     taken over the vocabulary sorted by descending
 *                     probability as the release's noise_inversion does
 *                     (sup_icdf_bin_sorted); fully causal layout.
 *   SUP_NI_MTP        the same supervision for the standard-MTP model
 *                     (variant A): one noise token per position carrying
 *                     z_1..z_k; targets head-major.
 *   SUP_MDLM          masked diffusion (MDLM: SUBS parameterisation, log-linear
 *                     schedule, continuous time): sample b draws its time t
 *                     (sup_mdlm_time), each of its n positions is replaced by
 *                     mask_id with probability (1 - eps) t (sigma(t) =
 *                     -log1p(-(1 - eps) t), eps = 1e-3), and the student (a
 *                     bidirectional model, layout_ar(n): row t's logits
 *                     predict token t) learns the masked positions' tokens,
 *                     their dlogits weighted by dsigma / expm1(sigma) (= 1/t;
 *                     model_input.loss_w). Unmasked positions are carried over
 *                     by SUBS: loss 0, target -1. The loss is averaged over
 *                     every valid position, masked or not (n_targets), as
 *                     MDLM's token NELBO; pads are attended as MDLM does.
 *   SUP_MEDUSA        k Medusa heads on a frozen AR model (model.h
 *                     HEAD_MEDUSA; Medusa-1): context x[0..n-1) as SUP_AR;
 *                     head J (1..k) of row t learns the real token x[t+1+J]
 *                     (-1 past the sample), head 0 (the AR's own) nothing;
 *                     targets head-major. No teacher passes: the teacher is
 *                     the model (train.c loads it as the student's weights).
 *
 * Randomness: every z, tau and inversion draw is common/rng.h Philox keyed by
 * (seed, keys[b], index) with index = purpose << 56 | t << 16 | j, where
 * keys[b] identifies the draw of sample b (the trainer uses a global id that
 * is unique per epoch and sample, e.g. epoch * n_samples + sample_index). So
 * targets depend neither on the batch a sample is in nor on the rank count;
 * teacher passes are per-sample deterministic (kernels.h determinism rule).
 *
 * Positions past a sample's valid_len (pad data) get target -1.
 */
#ifndef KF_TRAINER_TRAIN_SUPERVISION_H
#define KF_TRAINER_TRAIN_SUPERVISION_H

#include <stdint.h>

#include "trainer/model/layout.h"
#include "trainer/model/model.h"

typedef enum {
    SUP_AR = 0,
    SUP_DISTILL_AR,
    SUP_SELF_FORCING,
    SUP_NI_CAUSAL,
    SUP_NI_MTP,
    SUP_MDLM,
    SUP_MEDUSA
} sup_kind;

typedef struct sup_config {
    sup_kind kind;
    int64_t k;               /* student window (SUP_AR: 1) */
    double tau_min, tau_max; /* per-sample tau ~ U[tau_min, tau_max] */
    uint64_t seed;
    kf_precision teacher_precision; /* the teacher passes' precision (0: fp32), whatever
                                       the student's phase */
    int teacher_follow;             /* 1: the teacher passes run in the backend's precision
                                       as the caller left it (the student's phase) */
    int64_t mask_id;                /* SUP_MDLM: the mask token (>= 0) */
    int64_t strata;                 /* SUP_MDLM: antithetic time sampling over this many
                                       stream positions (the global batch; 0: none) */
} sup_config;

/** Parses a stage kind name ("ar", "distill_ar", "self_forcing",
 *  "noise_inversion_causal", "noise_inversion_mtp", "mdlm", "medusa"); -1
 *  when unknown. */
int sup_kind_from_name(const char *name);

/** The name of a kind (sup_kind_from_name's inverse). */
const char *sup_kind_name(sup_kind kind);

/** One student batch. Arrays are owned by the sup_ctx and valid until its
 *  next sup_build. The targets, one per student logit row (model.h order,
 *  -1: not counted), are host data (SUP_AR, SUP_NI_*: targets) or, made by
 *  a teacher, left where its picks are, on the teacher's device (targets_d;
 *  targets is then NULL until sup_host_targets reads them back), so that a
 *  batch's teacher passes and the student's step that follows wait for the
 *  device only at the step's end. */
typedef struct sup_batch {
    const layout *lay;        /* the student's layout */
    model_input in;           /* student input (in.lay == lay) */
    const int32_t *targets;   /* [rows] host, or NULL (see targets_d) */
    const int32_t *targets_d; /* [rows] device (teacher kinds), or NULL */
    int64_t rows;
    int64_t n_targets; /* the loss's denominator, known on the host either way: the
                          targets >= 0 (SUP_MDLM: every valid position) */
    int64_t n_ctx;     /* context positions per sample (n - k, or n - 1 for AR) */
} sup_batch;

typedef struct sup_ctx sup_ctx;

/** A supervision builder. teacher (frozen, never written) may be NULL for
 *  SUP_AR; it must be MODEL_AR for DISTILL_AR / NI_*, a PFLM with
 *  k_train >= k/2 for SELF_FORCING (k even). Bad combinations return NULL
 *  with err set. */
sup_ctx *sup_create(const sup_config *cfg, model *teacher, kf_err *err);
void sup_free(sup_ctx *s);

/** Changes the range the per-sample tau is drawn from (a curriculum over a
 *  stage's steps); 0 < tau_min <= tau_max. */
void sup_set_tau(sup_ctx *s, double tau_min, double tau_max);

/** The model config a student of this supervision needs, derived from base
 *  (the architecture, e.g. train_base_config): kind, head and k_train set
 *  for the stage, noise_cycles kept for a PFLM and 0 otherwise. */
model_config sup_student_config(const sup_config *cfg, const model_config *base);

/** The config of the teacher this supervision learns from, derived from
 *  base as sup_student_config: a PFLM(k/2) for self_forcing, an AR model for
 *  every other kind (none is needed for ar and mdlm). For stand-in teachers
 *  (benchmarks, estimates) that the stage will accept. */
model_config sup_teacher_config(const sup_config *cfg, const model_config *base);

/** Builds the student batch for B samples of n tokens (host tokens [B*n];
 *  valid_len [B] or NULL; keys [B]). Runs the teacher passes. */
void sup_build(sup_ctx *s, sup_batch *out, const int32_t *tokens, int64_t B, int64_t n,
               const int32_t *valid_len, const uint64_t *keys);

/** sup_build for a caller's slot (a trainer's micro-batch, 0 <= slot < the
 *  slots of sup_set_graphs; -1: none, as sup_build): the teacher passes run
 *  as the slot's graph (kernels.h graph_begin) after all their uploads:
 *  self_forcing's two rounds or distill_ar's k passes, their picks and the
 *  targets' gather. A graph is recorded when the slot's previous
 *  build had the same samples, positions and device buffers (it ran
 *  eagerly, growing every buffer) and launched while those and
 *  model_allocs() stay the same. */
void sup_build_slot(sup_ctx *s, int64_t slot, sup_batch *out, const int32_t *tokens, int64_t B,
                    int64_t n, const int32_t *valid_len, const uint64_t *keys);

/** Gives s `slots` slots of graphs for sup_build_slot (0: none, the
 *  default; SUP_AR and noise inversion, whose teacher pass is read back at
 *  once, get none), freeing any graphs it holds. A backend whose graph_end
 *  returns NULL turns them off. */
void sup_set_graphs(sup_ctx *s, int64_t slots);

/** How many times sup_build_slot launched a recorded graph. */
int64_t sup_graph_launches(const sup_ctx *s);

/** The host targets of b, the last batch s built: read back from the
 *  device (a wait) when they are there only. For evaluation and tests. */
const int32_t *sup_host_targets(sup_ctx *s, sup_batch *b);

/** Teacher helper (used by sup_build, eval and the tests): the exact k-token
 *  inverse-CDF blocks of an AR model. ctx [B*n] context tokens, z [B*n*k],
 *  tau [B]; writes out [B*n*k] ((b, t, j) order): out[b,t,j] =
 *  F^-1(z[b,t,j] | ctx[b,0..t], out[b,t,0..j-1]) under softmax(logits/tau).
 *  picks: a device buffer (ar->be) of B*n*k ids, where each pass leaves its
 *  picks for the next one, so the k passes wait for the device once, at the
 *  read-back into out (out NULL: none; token j of block r is then
 *  picks[j * B*n + r]). Pass 0 runs over ws, passes 1..k-1 over ws2 (NULL
 *  when k = 1) in its input slots 0..k-2 (model_ws_set_slot), so that
 *  every pass's uploads come before the first pass's ops. */
void sup_ar_blocks(model *ar, model_ws *ws, model_ws *ws2, const int32_t *ctx, int64_t B, int64_t n,
                   int64_t k, const double *z, const double *tau, int32_t *picks, int32_t *out);

/** Teacher helper: one PFLM window of k tokens per position by SingleForward
 *  argmax (z [B*n*k]); when k2 > 0 a second round of k2 tokens per position by
 *  DoubleForward on z2 [B*n*k2] (requires k2 == k). out [B*n*(k+k2)].
 *  picks: a device buffer (pf->be) of B*n*(k+k2) ids, where round 1 leaves
 *  its picks for round 2, so the rounds wait for the device once, at the
 *  read-back into out (out NULL: none; token j of round i of block r is
 *  then picks[i * B*n*k + r*k + j]). */
void sup_pflm_rounds(model *pf, model_ws *ws1, model_ws *ws2, const int32_t *ctx, int64_t B,
                     int64_t n, int64_t k, const double *z, int64_t k2, const double *z2,
                     const double *tau, int32_t *picks, int32_t *out);

/** The noise-inversion bin of target under p = softmax(logits / tau) (V
 *  logits, float64), the CDF running over the ids sorted by descending
 *  probability (ties: lower id first): lo = the probability of every id
 *  ranked before target, hi = lo + p[target]. */
void sup_icdf_bin_sorted(const float *logits, int64_t V, double tau, int32_t target, double *lo,
                         double *hi);

/** SUP_MDLM's time of the sample at stream position key, in [1e-3, 1]:
 *  MDLM's _sample_t with antithetic sampling over cfg->strata positions,
 *  u = (U / S + (key mod S) / S) mod 1, t = (1 - 1e-3) u + 1e-3, with U the
 *  sample's own uniform draw (S = strata; 0: u = U). The global batch's
 *  positions are consecutive, so its times are stratified whatever its
 *  split over ranks and micro-batches (MDLM stratifies each device's batch). */
double sup_mdlm_time(const sup_config *cfg, uint64_t key);

/** The log-linear schedule at time t: the mask probability 1 - exp(-sigma)
 *  (*move) and the loss weight dsigma / expm1(sigma) (returned). */
double sup_mdlm_schedule(double t, double *move);

/** Philox draws used above (exposed for tests and decoding). */
enum { SUP_RNG_Z = 1, SUP_RNG_TAU = 2, SUP_RNG_INV = 3, SUP_RNG_MDLM_T = 4, SUP_RNG_MDLM_MASK = 5 };
double sup_uniform(uint64_t seed, uint64_t key, int purpose, int64_t t, int64_t j);

#endif
