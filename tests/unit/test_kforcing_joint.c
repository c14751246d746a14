/* Joint, not marginal (the paper's Theorem 1 example).
 *
 * Language: blocks "SEP a b c d" where (a b c d) is a uniformly random
 * permutation of 4 symbols (24 valid blocks). An AR teacher is trained to
 * near-zero excess loss (the entropy is known exactly), then distilled
 * AR -> PFLM(1) -> PFLM(2) -> PFLM(4) (forward distillation, then two rounds
 * of self-forcing). Blocks of 4 tokens decoded by PFLM(4) from noise, with
 * the KV-cached sampler, after a fixed prefix ending in SEP, must be within
 * total variation 0.05 of the teacher's exact joint (by enumeration of all
 * 4^4 continuations); drawing the 4 positions independently from the
 * teacher's per-position marginals must be >= 0.3 away. Both are printed,
 * with the sampling error of the estimate (< 0.02 by the sample count). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <omp.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/model_fit.h"
#include "trainer/infer/decode.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

enum { SYM = 4, SEP = 4, V = 5, BLK = 5, NTOK = 10, BATCH = 64, DRAWS = 65536 };

static void perm_data(int32_t *tok, int64_t B, int64_t n, const uint64_t *keys) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < n; s += BLK) {
            int32_t p[SYM] = {0, 1, 2, 3};
            for (int i = SYM - 1; i > 0; i--) { /* Fisher-Yates */
                int j = (int)rng_below(99, keys[b], (uint64_t)(s * 8 + i), (uint64_t)(i + 1));
                int32_t t = p[i];
                p[i] = p[j];
                p[j] = t;
            }
            tok[b * n + s] = SEP;
            for (int i = 0; i < SYM && s + 1 + i < n; i++) tok[b * n + s + 1 + i] = p[i];
        }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static model *stage(kf_backend *be, model *teacher, const model_config *base, sup_kind kind,
                    int64_t k, int64_t steps, float lr, const char *what, double floor) {
    /* floor >= 0: the stage's loss must come within 0.01 nats of it */
    kf_err err;
    sup_config sc = {
        .kind = kind, .k = k, .tau_min = 1.0, .tau_max = 1.0, .seed = 42 + (uint64_t)k};
    model_config mc = sup_student_config(&sc, base);
    model *m = model_create(be, &mc);
    model_init(m, 7);
    if (teacher) model_copy_matching(m, teacher);
    sup_ctx *sup = sup_create(&sc, teacher, &err);
    KF_CHECK(sup != NULL, "%s", err.msg);
    double t0 = now();
    double loss = fit_run(m, sup, perm_data, BATCH, NTOK, steps, lr, (uint64_t)k << 32);
    printf("%-22s %4lld steps: final loss %.4f (%.1fs)\n", what, (long long)steps, loss,
           now() - t0);
    if (floor >= 0) {
        printf("%-22s entropy floor %.4f, excess %.4f\n", "", floor, loss - floor);
        T_CHECK(loss - floor < 0.01, "%s: excess loss %.4f is not near zero", what, loss - floor);
    }
    sup_free(sup);
    return m;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* a model this small is faster on one thread, OpenMP and OpenBLAS alike
     * (results do not depend on the thread count) */
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    kf_backend *be = kernels_cpu_create();
    /* four blocks: position j of a window composes j-1 earlier token choices,
     * which two blocks approximate poorly */
    model_config base = {.hidden = 32,
                         .heads = 2,
                         .blocks = 4,
                         .vocab = V,
                         .mask_id = -1,
                         .seq_len = NTOK,
                         .kind = MODEL_AR,
                         .head = HEAD_SHARED,
                         .k_train = 1};
    /* per-token entropy of the AR targets x[1..NTOK): within a block log 4,
     * log 3, log 2, 0, then SEP (0) */
    double floor = (NTOK / BLK) * (log(4) + log(3) + log(2)) / (NTOK - 1);
    /* the teacher's excess loss bounds how regular its inverse-CDF map is, so
     * it is trained longest */
    model *ar = stage(be, NULL, &base, SUP_AR, 1, 1500, 3e-3f, "AR teacher", floor);
    model *k1 = stage(be, ar, &base, SUP_DISTILL_AR, 1, 500, 3e-3f, "PFLM(1) from AR", -1);
    model *k2 = stage(be, k1, &base, SUP_SELF_FORCING, 2, 600, 2e-3f, "PFLM(2) self-forcing", -1);
    model *k4 = stage(be, k2, &base, SUP_SELF_FORCING, 4, 800, 3e-3f, "PFLM(4) self-forcing", -1);

    /* the teacher's exact joint after a prefix, by enumerating 4^4 continuations */
    enum { P = 6, NC = SYM * SYM * SYM * SYM };
    int32_t prefix[P] = {SEP, 2, 0, 3, 1, SEP};
    layout l;
    layout_ar(&l, P + 4);
    int32_t *seqs = malloc(sizeof(int32_t) * NC * (P + 4));
    for (int c = 0; c < NC; c++) {
        memcpy(seqs + c * (P + 4), prefix, sizeof prefix);
        for (int j = 0, x = c; j < 4; j++, x /= SYM) seqs[c * (P + 4) + P + j] = x % SYM;
    }
    model_ws *ws = model_ws_create(ar);
    model_input in = {.lay = &l, .B = NC, .ids = seqs};
    const float *lg = model_forward(ar, ws, &in, 0, NULL);
    float *h = malloc(sizeof(float) * NC * (P + 4) * V);
    be->download(be, h, lg, sizeof(float) * NC * (P + 4) * V);
    double joint[NC], marg[4][SYM] = {{0}};
    for (int c = 0; c < NC; c++) {
        double p = 1;
        for (int j = 0; j < 4; j++) {
            const float *row = h + ((int64_t)c * (P + 4) + P - 1 + j) * V;
            double mx = row[0], s = 0;
            for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
            for (int v = 0; v < V; v++) s += exp(row[v] - mx);
            p *= exp(row[seqs[c * (P + 4) + P + j]] - mx) / s;
        }
        joint[c] = p;
    }
    for (int c = 0; c < NC; c++)
        for (int j = 0, x = c; j < 4; j++, x /= SYM) marg[j][x % SYM] += joint[c];
    double tv_marg = 0, mass = 0;
    for (int c = 0; c < NC; c++) {
        double q = 1;
        for (int j = 0, x = c; j < 4; j++, x /= SYM) q *= marg[j][x % SYM];
        tv_marg += fabs(q - joint[c]);
        mass += joint[c];
    }
    /* mass outside the 4^4 symbol blocks (SEP inside a block) counts too */
    tv_marg = 0.5 * (tv_marg + (1 - mass));

    /* PFLM(4): DRAWS blocks from noise with the KV-cached sampler */
    int32_t *pre = malloc(sizeof(int32_t) * DRAWS * P), *out = malloc(sizeof(int32_t) * DRAWS * 4);
    uint64_t *keys = malloc(sizeof(uint64_t) * DRAWS);
    for (int d = 0; d < DRAWS; d++) {
        memcpy(pre + d * P, prefix, sizeof prefix);
        keys[d] = (uint64_t)d;
    }
    decode_opts o = {.k = 4, .tau = 1.0, .max_new = 4, .seed = 2024};
    kf_err err;
    T_EQ_INT(decode_check(k4, &o, P, &err), 0, "%s", err.msg);
    decode_run(k4, NULL, pre, DRAWS, P, &o, keys, out);
    double emp[NC] = {0}, other = 0;
    int valid = 0;
    for (int d = 0; d < DRAWS; d++) {
        int c = 0, ok = 1, seen = 0;
        for (int j = 3; j >= 0; j--) {
            int32_t t = out[d * 4 + j];
            if (t >= SYM) ok = 0;
            else {
                c = c * SYM + t;
                seen |= 1 << t;
            }
        }
        if (ok) emp[c] += 1.0 / DRAWS;
        else other += 1.0 / DRAWS;
        valid += ok && seen == 15;
    }
    double tv = other;
    for (int c = 0; c < NC; c++) tv += fabs(emp[c] - joint[c]);
    tv = 0.5 * (tv + (1 - mass));
    /* sampling error of the TV estimate: E|p^-p| summed, sqrt(2/pi) sqrt(p(1-p)/n) */
    double serr = 0;
    for (int c = 0; c < NC; c++) serr += sqrt(2 / M_PI) * sqrt(joint[c] * (1 - joint[c]) / DRAWS);
    serr *= 0.5;
    printf("teacher: P(valid permutation block) = %.4f\n", mass);
    printf("PFLM(4) blocks: %.2f%% valid permutations over %d draws\n", 100.0 * valid / DRAWS,
           DRAWS);
    printf("TV(PFLM(4) joint, teacher joint)      = %.4f (sampling error ~%.4f)\n", tv, serr);
    printf("TV(product of marginals, teacher joint) = %.4f\n", tv_marg);
    T_CHECK(serr < 0.02, "sampling error %.4f >= 0.02: draw more samples", serr);
    T_CHECK(tv <= 0.05, "PFLM(4) joint is %.4f from the teacher's (bound 0.05)", tv);
    T_CHECK(tv_marg >= 0.3, "the marginal product is only %.4f from the joint", tv_marg);

    free(pre);
    free(out);
    free(keys);
    free(seqs);
    free(h);
    layout_free(&l);
    model_ws_free(ws);
    model_free(ar);
    model_free(k1);
    model_free(k2);
    model_free(k4);
    be->destroy(be);
    return T_DONE();
}
