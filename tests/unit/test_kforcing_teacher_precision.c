/* Teacher passes run in the stage's teacher precision (sup_config
 * teacher_precision; fp32 by default, as the release's stage-1 teacher) whatever the student's
 * precision phase: a student step in the fp16 phase gets exactly the targets of the fp32 phase, and
 * the backend is back in fp16 afterwards. The precondition check shows the test has teeth: the same
 * teacher run in fp16 changes some inverse-CDF targets (a sample lands in the neighbouring bin when
 * the CDF moves by fp16 rounding). A 16-bit teacher is fixed the same way: its targets are those of
 * a 16-bit pass in either student phase, and a sample's targets are the same
 * built alone as inside the batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

enum { V = 512, B = 16, N = 65 };

/* Every weight U(-a, a): model_init zeroes the output layer, whose logits
 * would then be uniform and their CDF exact in any precision. */
static void randomize(model *m, float a) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)((2 * rng_uniform01(3, 0, (uint64_t)i) - 1) * a);
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

static void targets_at(sup_ctx *s, kf_backend *be, kf_precision p, const int32_t *tok,
                       const uint64_t *keys, int32_t *out, int64_t *rows) {
    be->set_precision(be, p);
    sup_batch sb;
    sup_build(s, &sb, tok, B, N, NULL, keys);
    T_EQ_INT(be->precision, p,
             "sup_build leaves the backend in the caller's precision: got %d want %d",
             (int)be->precision, (int)p);
    memcpy(out, sup_host_targets(s, &sb), (size_t)sb.rows * sizeof(int32_t));
    *rows = sb.rows;
}

/* A direct teacher pass (sup_ar_blocks, 1 token) in precision p into out. */
static void direct_pass(model *ar, model_ws *ws, kf_precision p, const int32_t *ctx, int64_t n,
                        const double *z, const double *tau, int32_t *out) {
    kf_backend *be = ar->be;
    int32_t *picks = be->alloc(be, (size_t)(B * n) * sizeof(int32_t));
    be->set_precision(be, p);
    sup_ar_blocks(ar, ws, NULL, ctx, B, n, 1, z, tau, picks, out);
    be->free(be, picks);
}

static int64_t n_differ(const int32_t *a, const int32_t *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    model_config c = {.hidden = 64,
                      .heads = 2,
                      .blocks = 2,
                      .vocab = V,
                      .mask_id = -1,
                      .seq_len = N,
                      .kind = MODEL_AR,
                      .head = HEAD_SHARED,
                      .k_train = 1};
    model *ar = model_create(be, &c);
    randomize(ar, 0.5f);
    int32_t tok[B * N];
    uint64_t keys[B];
    for (int b = 0; b < B; b++) {
        keys[b] = (uint64_t)b;
        for (int t = 0; t < N; t++)
            tok[b * N + t] = (int32_t)rng_below(9, (uint64_t)b, (uint64_t)t, V);
    }

    /* precondition: a teacher pass in fp16 moves some targets */
    int64_t n = N - 1, rows = B * n;
    double *z = malloc((size_t)rows * sizeof(double)), tau[B];
    int32_t *ctx = malloc((size_t)rows * sizeof(int32_t));
    int32_t *t32 = malloc((size_t)rows * sizeof(int32_t)),
            *t16 = malloc((size_t)rows * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        tau[b] = 1.0;
        memcpy(ctx + b * n, tok + b * N, (size_t)n * sizeof(int32_t));
        for (int64_t t = 0; t < n; t++) z[b * n + t] = sup_uniform(1234, keys[b], SUP_RNG_Z, t, 0);
    }
    model_ws *ws = model_ws_create(ar);
    direct_pass(ar, ws, KF_PREC_FP32, ctx, n, z, tau, t32);
    direct_pass(ar, ws, KF_PREC_FP16, ctx, n, z, tau, t16);
    int64_t moved = n_differ(t32, t16, rows);
    printf("an fp16 teacher pass changes %lld of %lld targets (%.2f%%)\n", (long long)moved,
           (long long)rows, 100.0 * (double)moved / (double)rows);
    T_CHECK(moved > 0,
            "precondition: fp16 teacher targets differ from fp32 ones in %lld rows (want > 0)",
            (long long)moved);

    /* the fix: sup_build in the fp16 phase gives the fp32 targets */
    sup_config sc = {.kind = SUP_DISTILL_AR, .k = 1, .tau_min = 1.0, .tau_max = 1.0, .seed = 1234};
    kf_err err;
    sup_ctx *s = sup_create(&sc, ar, &err);
    int64_t r32 = 0, r16 = 0;
    targets_at(s, be, KF_PREC_FP32, tok, keys, t32, &r32);
    targets_at(s, be, KF_PREC_FP16, tok, keys, t16, &r16);
    T_EQ_INT(r32, rows, "rows got %lld / %lld want %lld", (long long)r32, (long long)r16,
             (long long)rows);
    T_EQ_INT(r16, rows, "rows got %lld / %lld want %lld", (long long)r32, (long long)r16,
             (long long)rows);
    int64_t diff = n_differ(t32, t16, rows);
    T_EQ_INT(diff, 0,
             "targets built in the fp16 phase differ from the fp32 phase's in %lld of %lld rows",
             (long long)diff, (long long)rows);

    sup_free(s);

    /* a bf16 teacher: the targets of a bf16 pass, in either student phase */
    int32_t *tb = malloc((size_t)rows * sizeof(int32_t));
    direct_pass(ar, ws, KF_PREC_BF16, ctx, n, z, tau, tb);
    int64_t moved_bf16 = n_differ(tb, t32, rows);
    printf("a bf16 teacher changes %lld of %lld targets (%.2f%%)\n", (long long)moved_bf16,
           (long long)rows, 100.0 * (double)moved_bf16 / (double)rows);
    T_CHECK(moved_bf16 > 0, "precondition: bf16 teacher targets differ from fp32 ones in %lld rows",
            (long long)moved_bf16);
    sc.teacher_precision = KF_PREC_BF16;
    s = sup_create(&sc, ar, &err);
    targets_at(s, be, KF_PREC_FP32, tok, keys, t32, &r32);
    targets_at(s, be, KF_PREC_FP16, tok, keys, t16, &r16);
    int64_t off32 = n_differ(t32, tb, rows), off16 = n_differ(t16, tb, rows);
    T_EQ_INT(off32, 0, "bf16 teacher, fp32 phase: %lld of %lld targets differ from a bf16 pass",
             (long long)off32, (long long)rows);
    T_EQ_INT(off16, 0, "bf16 teacher, fp16 phase: %lld of %lld targets differ from a bf16 pass",
             (long long)off16, (long long)rows);
    sup_free(s);

    /* teacher_follow: the teacher passes in the student's phase (the release's
     * self-forcing and noise-inversion teachers): an fp16 phase gives the
     * fp16 pass's targets, an fp32 phase the fp32 pass's */
    sc.teacher_precision = KF_PREC_FP32;
    sc.teacher_follow = 1;
    s = sup_create(&sc, ar, &err);
    int32_t *f32 = malloc((size_t)rows * sizeof(int32_t)),
            *f16 = malloc((size_t)rows * sizeof(int32_t));
    int32_t *d32 = malloc((size_t)rows * sizeof(int32_t)),
            *d16 = malloc((size_t)rows * sizeof(int32_t));
    direct_pass(ar, ws, KF_PREC_FP32, ctx, n, z, tau, d32);
    direct_pass(ar, ws, KF_PREC_FP16, ctx, n, z, tau, d16);
    targets_at(s, be, KF_PREC_FP32, tok, keys, f32, &r32);
    targets_at(s, be, KF_PREC_FP16, tok, keys, f16, &r16);
    T_EQ_INT(n_differ(f32, d32, rows), 0, "follow, fp32 phase: targets off an fp32 pass");
    T_EQ_INT(n_differ(f16, d16, rows), 0, "follow, fp16 phase: targets off an fp16 pass");
    free(f32), free(f16), free(d32), free(d16);
    sup_free(s);
    sc.teacher_follow = 0;

    /* batch invariance with 16-bit teachers: each sample alone == in the batch */
    for (int p = KF_PREC_FP16; p <= KF_PREC_BF16; p++) {
        sc.teacher_precision = (kf_precision)p;
        s = sup_create(&sc, ar, &err);
        be->set_precision(be, KF_PREC_FP32);
        sup_batch sb;
        sup_build(s, &sb, tok, B, N, NULL, keys);
        memcpy(t32, sup_host_targets(s, &sb), (size_t)rows * sizeof(int32_t));
        int64_t off = 0;
        for (int b = 0; b < B; b++) {
            sup_build(s, &sb, tok + b * N, 1, N, NULL, keys + b);
            const int32_t *tb = sup_host_targets(s, &sb);
            for (int64_t t = 0; t < n; t++) off += tb[t] != t32[b * n + t];
        }
        T_EQ_INT(off, 0,
                 "%s teacher: %lld of %lld targets differ built one sample at a time vs in a "
                 "batch of %d",
                 kernels_precision_name((kf_precision)p), (long long)off, (long long)rows, B);
        sup_free(s);
    }

    free(tb);
    model_ws_free(ws);
    model_free(ar);
    free(z);
    free(ctx);
    free(t32);
    free(t16);
    be->destroy(be);
    return T_DONE();
}
