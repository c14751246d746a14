/* Optimizer step: warmup, precision schedule, the fp16 loss scaler (skip +
 * backoff on inf/nan, growth after the interval), clipping and the EMA, on
 * the CPU backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/train/optim.h"

enum { N = 1000 };

static runconfig_opts opts(void) {
    runconfig_opts o = runconfig_opts_default(RC_KIND_AR);
    o.lr = 1e-2, o.warmup = 4, o.beta1 = 0.9, o.beta2 = 0.999, o.eps = 1e-6, o.ema = 0.5;
    o.clip = 1.0;
    o.n_phases = 2;
    o.phases[0] = (runconfig_phase){6, RC_PREC_FP16};
    o.phases[1] = (runconfig_phase){-1, RC_PREC_FP32};
    o.scale_init = 1024, o.scale_growth_interval = 3, o.scale_growth = 2, o.scale_backoff = 0.5;
    return o;
}

/* One optimizer step as train_step runs it: the check and the update on the
 * device, the one read of the check, the host's update of the state. */
static optim_result step(kf_backend *b, const runconfig_opts *o, optim_state *st, int64_t s,
                         float *p, const float *g, float *m, float *v, float *e) {
    kf_grad_ctl *ctl = b->alloc(b, sizeof *ctl), got;
    optim_factors(b, o, st, s, 1.0, ctl); /* before the step, as train_step */
    optim_check(b, o, ctl, g, N);
    optim_apply(b, o, st, s, ctl, p, g, m, v, e, N);
    b->download(b, &got, ctl, sizeof got);
    b->free(b, ctl);
    return optim_settle(o, st, s, &got);
}

int main(void) {
    kf_backend *b = kernels_cpu_create();
    runconfig_opts o = opts();
    T_CLOSE(optim_lr(&o, 0), 2.5e-3, 1e-12, "warmup step 0");
    T_CLOSE(optim_lr(&o, 2), 7.5e-3, 1e-12, "warmup step 2");
    T_CLOSE(optim_lr(&o, 3), 1e-2, 1e-12, "after warmup");
    /* cosine over a 14-step stage: lr at step+1 = warmup (4), the mean of lr
     * and lr_min half way (step+1 = 9), lr_min at the last step */
    runconfig_opts c = o;
    c.lr_cosine = 1, c.lr_min = 1e-3, c.decay_steps = 14;
    T_CLOSE(optim_lr(&c, 1), 5e-3, 1e-12, "cosine: warmup step 1 unchanged");
    T_CLOSE(optim_lr(&c, 3), 1e-2, 1e-12, "cosine: lr at the end of the warmup");
    T_CLOSE(optim_lr(&c, 8), 5.5e-3, 1e-12, "cosine: (lr + lr_min) / 2 half way");
    T_CLOSE(optim_lr(&c, 13), 1e-3, 1e-12, "cosine: lr_min at the last step");
    T_CLOSE(optim_lr(&o, 13), 1e-2, 1e-12, "lr_decay none: constant after the warmup");
    T_EQ_INT(runconfig_precision_at(&o, 5), RC_PREC_FP16, "phase switch at until_step");
    T_EQ_INT(runconfig_precision_at(&o, 6), RC_PREC_FP32, "phase switch at until_step");

    float *p = b->alloc(b, N * 4), *g = b->alloc(b, N * 4), *m = b->alloc(b, N * 4),
          *v = b->alloc(b, N * 4), *e = b->alloc(b, N * 4);
    float *hp = malloc(N * 4), *hg = malloc(N * 4), *h0 = malloc(N * 4), *he = malloc(N * 4);
    for (int i = 0; i < N; i++) hp[i] = (float)sin(i), hg[i] = (float)cos(i) * 1e-3f;
    b->upload(b, p, hp, N * 4);
    b->upload(b, e, hp, N * 4);
    optim_state st = optim_init(&o);
    T_CLOSE(optim_loss_scale(&st, &o, 0), 1024, 0, "fp16 phase uses the scale");

    /* step 0: gradients carry the scale (as after backward of loss*scale) */
    for (int i = 0; i < N; i++) h0[i] = hg[i] * 1024.0f;
    b->upload(b, g, h0, N * 4);
    optim_result r = step(b, &o, &st, 0, p, g, m, v, e);
    double want_norm = 0;
    for (int i = 0; i < N; i++) want_norm += (double)hg[i] * hg[i];
    T_CHECK(!r.skipped, "finite step applied");
    T_EQ_INT(st.adam_t, 1, "finite step applied");
    T_CLOSE(r.grad_norm, sqrt(want_norm), 1e-5, "unscaled grad norm");
    b->download(b, h0, p, N * 4);
    int moved = 0;
    for (int i = 0; i < N; i++) moved += h0[i] != hp[i];
    T_CHECK(moved > N / 2, "params moved");

    /* step 1: an inf -> skipped, nothing changes, scale backs off */
    float *before = malloc(N * 4), *ebefore = malloc(N * 4);
    b->download(b, before, p, N * 4);
    b->download(b, ebefore, e, N * 4);
    h0[7] = INFINITY;
    b->upload(b, g, h0, N * 4);
    r = step(b, &o, &st, 1, p, g, m, v, e);
    b->download(b, h0, p, N * 4);
    b->download(b, he, e, N * 4);
    T_CHECK(r.skipped, "overflow step skipped");
    T_EQ_INT(st.skipped, 1, "overflow step skipped");
    T_EQ_INT(st.adam_t, 1, "overflow step skipped");
    T_CHECK(!memcmp(h0, before, N * 4), "skipped step leaves params and EMA");
    T_CHECK(!memcmp(he, ebefore, N * 4), "skipped step leaves params and EMA");
    T_CLOSE(st.scale, 512, 0, "backoff halves the scale");
    /* a NaN too */
    for (int i = 0; i < N; i++) h0[i] = hg[i] * 512.0f;
    h0[3] = NAN;
    b->upload(b, g, h0, N * 4);
    r = step(b, &o, &st, 2, p, g, m, v, e);
    T_CHECK(r.skipped, "nan skipped, scale %g", st.scale);
    T_NEAR(st.scale, 256, 0, "nan skipped, scale %g", st.scale);
    T_EQ_INT(st.skipped, 2, "nan skipped, scale %g", st.scale);

    /* growth after growth_interval (3) consecutive good fp16 steps */
    for (int s = 3; s < 6; s++) {
        for (int i = 0; i < N; i++) h0[i] = hg[i] * (float)st.scale;
        b->upload(b, g, h0, N * 4);
        r = step(b, &o, &st, s, p, g, m, v, e);
        T_CHECK(!r.skipped, "good step %d", s);
    }
    T_CLOSE(st.scale, 512, 0, "scale grows after the interval");
    T_EQ_INT(st.good_steps, 0, "counters after growth");
    T_EQ_INT(st.adam_t, 4, "counters after growth");

    /* fp32 phase: scale 1, scale no longer changes */
    T_CLOSE(optim_loss_scale(&st, &o, 6), 1, 0, "fp32 phase does not scale");
    for (int s = 6; s < 10; s++) {
        b->upload(b, g, hg, N * 4);
        r = step(b, &o, &st, s, p, g, m, v, e);
    }
    T_CLOSE(st.scale, 512, 0, "fp32 steps leave the scaler");

    /* clipping: a gradient of norm 100 is scaled to norm 1 before AdamW: the
     * first moment after one step from zero is (1-beta1) * g * clip/|g| */
    optim_state s2 = optim_init(&o);
    o.phases[0].until_step = -1, o.n_phases = 1, o.phases[0].mode = RC_PREC_FP32;
    for (int i = 0; i < N; i++) h0[i] = 0;
    h0[0] = 60, h0[1] = 80;
    b->upload(b, g, h0, N * 4);
    b->zero(b, m, N * 4);
    b->zero(b, v, N * 4);
    r = step(b, &o, &s2, 10, p, g, m, v, e);
    float hm[2];
    b->download(b, hm, m, 8);
    T_CLOSE(r.grad_norm, 100, 1e-6, "norm before clipping");
    T_CLOSE(hm[0], 0.1 * 0.6, 1e-5, "clipped moment 0");
    T_CLOSE(hm[1], 0.1 * 0.8, 1e-5, "clipped moment 1");

    /* EMA: ema = 0.5 ema + 0.5 params after a good step */
    b->download(b, before, e, N * 4);
    b->upload(b, g, hg, N * 4);
    r = step(b, &o, &s2, 11, p, g, m, v, e);
    b->download(b, h0, p, N * 4);
    b->download(b, he, e, N * 4);
    T_CLOSE(he[10], 0.5f * before[10] + 0.5f * h0[10], 1e-6, "EMA update");

    /* MDLM's EMA warm-up (models/ema.py): the decay of update u is
     * min(ema, (1+u)/(10+u)); off (the paper's setting) it is ema throughout */
    runconfig_opts w = opts();
    w.ema = 0.999;
    T_CLOSE(optim_ema_decay(&w, 1), 0.999, 0, "no warm-up: update 1");
    w.ema_warmup = 1;
    T_CLOSE(optim_ema_decay(&w, 1), 2.0 / 11.0, 1e-15, "warm-up: update 1");
    T_CLOSE(optim_ema_decay(&w, 10), 11.0 / 20.0, 1e-15, "warm-up: update 10");
    T_CLOSE(optim_ema_decay(&w, 8990), 0.999, 0, "warm-up: capped at ema by update 8990");
    T_CLOSE(optim_ema_decay(&w, 8000), 8001.0 / 8010.0, 1e-15, "warm-up: update 8000");
    /* in a step: the first update of a fresh state uses 2/11 */
    optim_state s3 = optim_init(&w);
    w.n_phases = 1;
    w.phases[0] = (runconfig_phase){-1, RC_PREC_FP32};
    b->download(b, before, e, N * 4);
    r = step(b, &w, &s3, 0, p, g, m, v, e);
    b->download(b, h0, p, N * 4);
    b->download(b, he, e, N * 4);
    T_CHECK(!r.skipped, "warm-up step applied");
    T_EQ_INT(s3.adam_t, 1, "warm-up step applied");
    T_CLOSE(he[10], (2.0 / 11.0) * before[10] + (9.0 / 11.0) * h0[10], 1e-6,
            "EMA update 1 with warm-up");

    /* bf16: fp32's exponent range, so no loss scale: 1 throughout, and a
     * non-finite step is skipped without touching the scaler */
    runconfig_opts bf = opts();
    bf.n_phases = 1;
    bf.phases[0] = (runconfig_phase){-1, RC_PREC_BF16};
    optim_state s4 = optim_init(&bf);
    T_CLOSE(optim_loss_scale(&s4, &bf, 0), 1, 0, "bf16 phase does not scale");
    T_EQ_INT(optim_precision(RC_PREC_BF16), KF_PREC_BF16, "bf16 phase runs the backend in bf16");
    T_EQ_INT(optim_precision(RC_PREC_FP16), KF_PREC_FP16, "fp16 phase runs the backend in fp16");
    T_EQ_INT(optim_precision(RC_PREC_FP32), KF_PREC_FP32, "fp32 phase runs the backend in fp32");
    T_EQ_INT(optim_precision_parse("bf16"), KF_PREC_BF16, "--precision bf16");
    T_EQ_INT(optim_precision_parse("fp16"), KF_PREC_FP16, "--precision fp16");
    T_EQ_INT(optim_precision_parse("fp32"), KF_PREC_FP32, "--precision fp32");
    T_EQ_INT(optim_precision_parse("FP16"), -1, "--precision names are lower case");
    for (int i = 0; i < N; i++) h0[i] = hg[i];
    b->upload(b, g, h0, N * 4);
    r = step(b, &bf, &s4, 0, p, g, m, v, e);
    T_CHECK(!r.skipped, "bf16 step applied");
    T_CLOSE(r.scale_used, 1, 0, "bf16 step unscaled");
    T_CLOSE(r.grad_norm, sqrt(want_norm), 1e-5, "bf16 grad norm, unscaled");
    T_EQ_INT(s4.good_steps, 0, "bf16 steps do not count toward growth");
    h0[7] = INFINITY;
    b->upload(b, g, h0, N * 4);
    r = step(b, &bf, &s4, 1, p, g, m, v, e);
    T_CHECK(r.skipped, "bf16 non-finite step skipped");
    T_CLOSE(s4.scale, 1024, 0, "bf16 skip leaves the (unused) scale");

    b->free(b, p), b->free(b, g), b->free(b, m), b->free(b, v), b->free(b, e);
    b->destroy(b);
    free(hp), free(hg), free(h0), free(he), free(before), free(ebefore);
    return T_DONE();
}
