/* trainer/train/optim.c — loss scaler, clipping, warmup, AdamW and EMA (see optim.h). */
#include "trainer/train/optim.h"

#include <math.h>
#include <stddef.h>

optim_state optim_init(const runconfig_opts *o) {
    return (optim_state){.adam_t = 0, .scale = o->scale_init, .good_steps = 0, .skipped = 0};
}

double optim_lr(const runconfig_opts *o, int64_t step) {
    if (o->warmup > 0 && step + 1 < o->warmup)
        return o->lr * (double)(step + 1) / (double)o->warmup;
    int64_t from = o->warmup > 0 ? o->warmup : 1, span = o->decay_steps - from;
    if (!o->lr_cosine || span <= 0) return o->lr;
    double t = (double)(step + 1 - from) / (double)span;
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    return o->lr_min + 0.5 * (o->lr - o->lr_min) * (1 + cos(M_PI * t));
}

double optim_ema_decay(const runconfig_opts *o, int64_t updates) {
    if (!o->ema_warmup) return o->ema;
    return fmin(o->ema, (1.0 + (double)updates) / (10.0 + (double)updates));
}

double optim_loss_scale(const optim_state *st, const runconfig_opts *o, int64_t step) {
    return runconfig_precision_at(o, step) == RC_PREC_FP16 ? st->scale : 1.0;
}

kf_precision optim_precision(runconfig_prec p) {
    return p == RC_PREC_FP16 ? KF_PREC_FP16 : p == RC_PREC_BF16 ? KF_PREC_BF16 : KF_PREC_FP32;
}

int optim_precision_parse(const char *name) {
    int p = runconfig_prec_parse(name);
    return p < 0 ? -1 : (int)optim_precision((runconfig_prec)p);
}

void optim_factors(kf_backend *b, const runconfig_opts *o, const optim_state *st, int64_t step,
                   double norm, kf_grad_ctl *ctl) {
    int64_t t = st->adam_t + 1;
    kf_grad_ctl f = {0};
    kernels_adamw_factors(&f, (float)optim_lr(o, step), (float)o->beta1, (float)o->beta2,
                          (float)o->weight_decay, t);
    f.ema_decay = (float)optim_ema_decay(o, t);
    f.loss_scale = optim_loss_scale(st, o, step);
    /* model_loss's factor: the loss scale as its float argument was */
    f.xent_scale = (float)((double)(float)f.loss_scale / norm);
    b->upload(b, ctl, &f, offsetof(kf_grad_ctl, sumsq)); /* the factors only */
}

void optim_check(kf_backend *b, const runconfig_opts *o, kf_grad_ctl *ctl, const float *grads,
                 int64_t n) {
    /* One pass decides both "finite?" and the norm: sumsq of a buffer with an
     * inf/NaN is itself non-finite, and double accumulation of fp32 squares
     * cannot overflow for finite inputs. */
    b->grad_check(b, ctl, grads, n, o->clip);
}

void optim_apply(kf_backend *b, const runconfig_opts *o, const optim_state *st, int64_t step,
                 const kf_grad_ctl *ctl, float *params, const float *grads, float *m, float *v,
                 float *ema, int64_t n) {
    int64_t t = st->adam_t + 1;
    /* grad_scale 1 is unused: ctl's replaces it, and ctl's factors lr's,
     * t's and the decay's */
    b->adamw(b, params, grads, m, v, n, (float)optim_lr(o, step), (float)o->beta1, (float)o->beta2,
             (float)o->eps, (float)o->weight_decay, t, 1.0f, ctl);
    b->ema(b, ema, params, n, (float)optim_ema_decay(o, t), ctl);
}

optim_result optim_settle(const runconfig_opts *o, optim_state *st, int64_t step,
                          const kf_grad_ctl *ctl) {
    int fp16 = runconfig_precision_at(o, step) == RC_PREC_FP16;
    optim_result r = {.skipped = ctl->skip,
                      .grad_norm = ctl->norm,
                      .lr = optim_lr(o, step),
                      .scale_used = fp16 ? st->scale : 1.0};
    if (r.skipped) {
        st->skipped++;
        if (fp16) {
            st->scale *= o->scale_backoff;
            st->good_steps = 0;
        }
        return r;
    }
    st->adam_t++;
    if (fp16 && ++st->good_steps >= o->scale_growth_interval) {
        st->scale *= o->scale_growth;
        st->good_steps = 0;
    }
    return r;
}
