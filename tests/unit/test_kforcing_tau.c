/* Temperature control of a PFLM: a PFLM(1) forward-distilled
 * from an AR teacher with per-sample tau ~ U[0.01, 1] is decoded many times
 * from one prefix with different noise; at tau = 0.01 the draws are (nearly)
 * identical (the teacher's argmax), at tau = 1 they are diverse. The test
 * counts distinct first tokens, and also the teacher's own AR draws at the
 * same temperatures for reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/model_fit.h"
#include "trainer/infer/decode.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

enum { V = 12, NTOK = 12, DRAWS = 128, P = 5 };

/* Tokens follow a fixed random bigram table, so the teacher has something to learn. */
static void bigram_data(int32_t *tok, int64_t B, int64_t n, const uint64_t *keys) {
    for (int64_t b = 0; b < B; b++) {
        int32_t x = (int32_t)rng_below(5, keys[b], 0, V - 1);
        for (int64_t t = 0; t < n; t++) {
            tok[b * n + t] = x;
            /* next: one of three successors of x, with probabilities .5 .3 .2 */
            double u = rng_uniform01(5, keys[b], (uint64_t)t + 1);
            int s = u < 0.5 ? 0 : u < 0.8 ? 1 : 2;
            x = (int32_t)((x * 5 + 3 * s + 1) % (V - 1));
        }
    }
}

static int distinct(model *m, double tau) {
    int32_t prefix[DRAWS * P], out[DRAWS];
    uint64_t keys[DRAWS];
    int32_t base[P];
    bigram_data(base, 1, P, (uint64_t[]){777});
    for (int d = 0; d < DRAWS; d++) {
        memcpy(prefix + d * P, base, sizeof base);
        keys[d] = (uint64_t)d;
    }
    decode_opts o = {.k = 1, .tau = tau, .max_new = 1, .seed = 11};
    decode_run(m, NULL, prefix, DRAWS, P, &o, keys, out);
    int seen[V] = {0}, n = 0;
    for (int d = 0; d < DRAWS; d++) n += !seen[out[d]]++;
    return n;
}

int main(void) {
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    kf_backend *be = kernels_cpu_create();
    model_config base = {.hidden = 32,
                         .heads = 2,
                         .blocks = 2,
                         .vocab = V,
                         .mask_id = V - 1,
                         .seq_len = NTOK,
                         .kind = MODEL_AR,
                         .head = HEAD_SHARED,
                         .k_train = 1};
    kf_err err;
    sup_config sa = {.kind = SUP_AR, .k = 1, .tau_min = 1, .tau_max = 1, .seed = 1};
    model *ar = model_create(be, &base);
    model_init(ar, 3);
    sup_ctx *s = sup_create(&sa, NULL, &err);
    double l0 = fit_run(ar, s, bigram_data, 32, NTOK, 300, 3e-3f, 0);
    sup_free(s);
    sup_config sd = {.kind = SUP_DISTILL_AR, .k = 1, .tau_min = 0.01, .tau_max = 1.0, .seed = 2};
    model_config pc = sup_student_config(&sd, &base);
    model *pf = model_create(be, &pc);
    model_init(pf, 4);
    model_copy_matching(pf, ar);
    s = sup_create(&sd, ar, &err);
    double l1 = fit_run(pf, s, bigram_data, 32, NTOK, 400, 3e-3f, 1u << 20);
    sup_free(s);
    int ar_lo = distinct(ar, 0.01), ar_hi = distinct(ar, 1.0);
    int pf_lo = distinct(pf, 0.01), pf_hi = distinct(pf, 1.0);
    printf("AR teacher loss %.3f, PFLM(1) distillation loss %.3f\n", l0, l1);
    printf("distinct next tokens over %d draws: AR tau=0.01 -> %d, tau=1 -> %d; "
           "PFLM(1) tau=0.01 -> %d, tau=1 -> %d\n",
           DRAWS, ar_lo, ar_hi, pf_lo, pf_hi);
    T_EQ_INT(ar_lo, 1, "AR at tau=0.01 gave %d distinct tokens", ar_lo);
    T_CHECK(pf_lo <= 2, "PFLM at tau=0.01 gave %d distinct tokens (want nearly identical)", pf_lo);
    T_CHECK(pf_hi >= 3, "PFLM at tau=1 gave only %d distinct tokens (want diverse)", pf_hi);
    model_free(ar);
    model_free(pf);
    be->destroy(be);
    return T_DONE();
}
