/* trainer/train/optim.h — one optimizer step over the model's flat parameter buffer:
 * the fp16 dynamic loss scaler, the global-norm clip, AdamW with linear LR
 * warmup, and the EMA of the weights, all through the backend's ops.
 *
 * Precision schedule (runconfig_opts.phases): in an fp16 phase the loss is
 * multiplied by the scaler's scale before backward, so gradients arrive
 * scaled; the optimizer unscales them (folded into AdamW's grad_scale together
 * with the clip factor). A step whose gradients hold an inf or NaN is
 * skipped (no AdamW, no EMA, no bias-correction tick), the scale is
 * multiplied by `backoff`, and the skip is counted; after `growth_interval`
 * consecutive good fp16 steps the scale is multiplied by `growth`. In an
 * fp32 or bf16 phase (bf16 has fp32's exponent range, so gradients neither
 * underflow nor overflow for want of a scale) the scale is 1 and never
 * changes (a non-finite gradient is still
 * skipped and counted: it must never reach the weights). The scaler state is
 * plain numbers, saved in checkpoints, so the schedule survives resume.
 */
#ifndef KF_TRAINER_TRAIN_OPTIM_H
#define KF_TRAINER_TRAIN_OPTIM_H

#include <stdint.h>

#include "common/runconfig.h"
#include "kernels/kernels.h"

/** Optimizer state besides the moment buffers (all checkpointed). */
typedef struct optim_state {
    int64_t adam_t;     /* AdamW updates applied so far (bias-correction step - 1) */
    double scale;       /* current fp16 loss scale */
    int64_t good_steps; /* consecutive finite fp16 steps since the last scale change */
    int64_t skipped;    /* steps skipped for non-finite gradients, in total */
} optim_state;

/** What one optimizer step did (for logs; optim_settle). */
typedef struct optim_result {
    int skipped;       /* 1: non-finite gradients, nothing applied */
    double grad_norm;  /* global L2 norm of the unscaled gradient (inf/nan when skipped) */
    double lr;         /* learning rate used */
    double scale_used; /* the loss scale the gradients carried */
} optim_result;

/** The scalars a training step leaves on the device, which the host reads in
 *  one transfer at the step's end. */
typedef struct optim_dev {
    kf_grad_ctl ctl; /* optim_check's */
    double loss;     /* the step's loss sum (model_loss_acc) */
} optim_dev;

/** A fresh state: scale = o->scale_init, counters 0. */
optim_state optim_init(const runconfig_opts *o);

/** The learning rate at 0-based step: lr * (step+1)/warmup during the
 *  warmup; then lr, or with lr_decay: cosine, lr_min + (lr - lr_min) *
 *  (1 + cos(pi t)) / 2 with t going from 0 at step+1 = warmup (1 without
 *  one) to 1 at step+1 = the stage's steps. */
double optim_lr(const runconfig_opts *o, int64_t step);

/** The EMA decay of optimizer update number `updates` (1-based: the first
 * applied update is 1): o->ema, or with o->ema_warmup MDLM's warm-up
 * min(o->ema, (1 + updates) / (10 + updates)), which lets the average
 * follow the early, fast-moving weights instead of keeping the initial ones. */
double optim_ema_decay(const runconfig_opts *o, int64_t updates);

/** The loss scale to multiply the loss by at this step: st->scale in an fp16
 * phase, 1 in an fp32 or bf16 phase. */
double optim_loss_scale(const optim_state *st, const runconfig_opts *o, int64_t step);

/** The backend precision (kernels.h) that runs a phase of mode p. */
kf_precision optim_precision(runconfig_prec p);

/** The backend precision a mode name ("fp32", "fp16", "bf16": the commands'
 *  --precision) selects, or -1 for any other name. */
int optim_precision_parse(const char *name);

/* One optimizer step at 0-based `step` runs in three calls, so that the
 * device never waits for the host inside it (its factors, optim_factors,
 * uploaded before the step's first op):
 *   optim_check  the gradient check (b->grad_check) into ctl, on the device;
 *   optim_apply  AdamW, then the EMA, reading ctl: a skipped step changes
 *                nothing;
 *   optim_settle once the host has read ctl (with the step's loss, at the
 *                step's end): the host state's update (skip count, loss
 *                scale, adam_t) and the step's result.
 * Between optim_check and optim_settle st must not change. */

/** Uploads the factors of step `step` (AdamW's for update st->adam_t + 1,
 * the EMA's decay, the loss scale, and the cross-entropy's gradient factor
 * loss_scale / norm, norm > 0 the step's target count) into the first
 * fields of ctl (device, kf_grad_ctl), where optim_check's and
 * optim_apply's ops and model_loss_acc (given &ctl->xent_scale) read them:
 * called before the step's first op. */
void optim_factors(kf_backend *b, const runconfig_opts *o, const optim_state *st, int64_t step,
                   double norm, kf_grad_ctl *ctl);

/** The gradient check of a step into ctl (device, its factors from
 * optim_factors, the loss scale among them): grads hold d(loss *
 * optim_loss_scale)/d(params) summed over every rank (the caller all-reduces
 * first, so all ranks take identical decisions), n elements, the whole
 * flat buffer. grads NULL: ctl->sumsq already holds their sum of squares
 * (ZeRO-1: dist_sumsq, uploaded). It gives the norm to clip by and decides
 * whether the step is skipped (non-finite). */
void optim_check(kf_backend *b, const runconfig_opts *o, kf_grad_ctl *ctl, const float *grads,
                 int64_t n);

/** Queues AdamW on params/m/v and then the EMA, as update st->adam_t + 1
 * (both skipped on the device when ctl says so), with the factors
 * optim_factors put in ctl. n: elements of the
 * buffers, the whole flat buffer or (ZeRO-1) this rank's shard of it. */
void optim_apply(kf_backend *b, const runconfig_opts *o, const optim_state *st, int64_t step,
                 const kf_grad_ctl *ctl, float *params, const float *grads, float *m, float *v,
                 float *ema, int64_t n);

/** The host's side of step `step` given its read ctl (host copy): a skipped
 * step counts, and in fp16 backs the scale off; an applied one ticks adam_t
 * and in fp16 grows the scale after growth_interval good steps. */
optim_result optim_settle(const runconfig_opts *o, optim_state *st, int64_t step,
                          const kf_grad_ctl *ctl);

#endif
