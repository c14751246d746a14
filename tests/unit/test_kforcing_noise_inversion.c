/* Noise inversion (ablation variants A and B): the CDF runs
 * over the vocabulary sorted by descending probability, as the release's
 * noise_inversion (probs.sort(descending=True).cumsum) does, not in id order.
 * (a) sup_icdf_bin_sorted against an explicit sort + cumsum;
 * (b) sup_build's noise for both variants lies in those bins of the AR
 *     teacher's distribution (and, the test's teeth, not in the id-order ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

enum { V = 40, B = 3, N = 12, K = 2 };

static const double *cmp_p;
static int by_prob_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (cmp_p[x] != cmp_p[y]) return cmp_p[x] > cmp_p[y] ? -1 : 1;
    return x - y;
}

/* The reference: softmax, sort by descending probability, cumsum. */
static void ref_bin(const float *lg, double tau, int t, double *lo, double *hi, double *id_lo) {
    double p[V], mx = -1e300, sum = 0, cum = 0;
    int order[V];
    *lo = *hi = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, lg[v] / tau);
    for (int v = 0; v < V; v++) sum += p[v] = exp(lg[v] / tau - mx);
    for (int v = 0; v < V; v++) p[v] /= sum, order[v] = v;
    cmp_p = p;
    qsort(order, V, sizeof *order, by_prob_desc);
    for (int i = 0; i < V; i++) {
        if (order[i] == t) {
            *lo = cum;
            *hi = cum + p[t];
        }
        cum += p[order[i]];
    }
    *id_lo = 0;
    for (int v = 0; v < t; v++) *id_lo += p[v];
}

static void randomize(model *m) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(rng_uniform01(8, 1, (uint64_t)i) - 0.5);
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

int main(void) {
    /* (a) the bin of every token of random rows, at two temperatures */
    float lg[V];
    double err = 0;
    int argmax_at_zero = 1, differ = 0;
    for (int r = 0; r < 20; r++) {
        double tau = r % 2 ? 0.5 : 1.0;
        int best = 0;
        for (int v = 0; v < V; v++) {
            lg[v] = (float)(4 * rng_uniform01(2, (uint64_t)r, (uint64_t)v));
            if (lg[v] > lg[best]) best = v;
        }
        lg[7] = lg[9]; /* a tie: lower id first */
        for (int t = 0; t < V; t++) {
            double lo, hi, rlo, rhi, idlo;
            sup_icdf_bin_sorted(lg, V, tau, t, &lo, &hi);
            ref_bin(lg, tau, t, &rlo, &rhi, &idlo);
            err = fmax(err, fmax(fabs(lo - rlo), fabs(hi - rhi)));
            if (t == best) argmax_at_zero &= lo == 0.0;
            differ += fabs(idlo - rlo) > 1e-9;
        }
    }
    printf("(a) sorted-CDF bins: max abs err %.3g against sort + cumsum; %d of %d bins differ from "
           "id order\n",
           err, differ, 20 * V);
    T_CHECK(err < 1e-12, "(a) bins: max abs err %.3g (want < 1e-12)", err);
    T_CHECK(argmax_at_zero, "(a) the most probable token's bin starts at 0");
    T_CHECK(differ > 0, "(a) precondition: sorted and id-order bins differ somewhere");

    /* (b) sup_build's noise for variants B (causal) and A (MTP) */
    kf_backend *be = kernels_cpu_create();
    model_config c = {.hidden = 16,
                      .heads = 2,
                      .blocks = 1,
                      .vocab = V,
                      .mask_id = -1,
                      .seq_len = N,
                      .kind = MODEL_AR,
                      .head = HEAD_SHARED,
                      .k_train = 1};
    model *ar = model_create(be, &c);
    randomize(ar);
    int32_t tok[B * N];
    uint64_t keys[B];
    for (int b = 0; b < B; b++) {
        keys[b] = (uint64_t)b + 10;
        for (int t = 0; t < N; t++)
            tok[b * N + t] = (int32_t)rng_below(3, (uint64_t)b, (uint64_t)t, V);
    }
    /* the teacher's logits for rows 0..N-2 of each sample */
    model_ws *ws = model_ws_create(ar);
    layout la;
    layout_ar(&la, N - 1);
    int32_t ctx[B * (N - 1)];
    for (int b = 0; b < B; b++) memcpy(ctx + b * (N - 1), tok + b * N, (N - 1) * sizeof(int32_t));
    model_input in = {.lay = &la, .B = B, .ids = ctx};
    const float *logits = model_forward(ar, ws, &in, 0, NULL);
    float *tl = malloc((size_t)(B * (N - 1) * V) * sizeof(float));
    memcpy(tl, logits, (size_t)(B * (N - 1) * V) * sizeof(float));
    const sup_kind kinds[2] = {SUP_NI_CAUSAL, SUP_NI_MTP};
    for (int ki = 0; ki < 2; ki++) {
        sup_config sc = {.kind = kinds[ki], .k = K, .tau_min = 0.7, .tau_max = 0.7, .seed = 5};
        kf_err e;
        sup_ctx *s = sup_create(&sc, ar, &e);
        sup_batch sb;
        sup_build(s, &sb, tok, B, N, NULL, keys);
        int64_t np = sb.n_ctx, L = sb.lay->L, inside = 0, inside_id = 0, total = 0;
        for (int b = 0; b < B; b++)
            for (int64_t t = 0; t < np; t++)
                for (int j = 0; j < K; j++) {
                    int64_t p = t + j; /* teacher row predicting x[p+1] */
                    double z = ki == 0 ? sb.in.z[b * L + layout_group_row(np, K, t, j)]
                                       : sb.in.z[(b * L + layout_group_row(np, 1, t, 0)) * K + j];
                    double rlo, rhi, idlo;
                    const float *row = tl + (b * (N - 1) + p) * V;
                    ref_bin(row, 0.7, tok[b * N + p + 1], &rlo, &rhi, &idlo);
                    inside += z >= rlo - 1e-12 && z <= rhi + 1e-12;
                    inside_id += z >= idlo - 1e-12 && z <= idlo + (rhi - rlo) + 1e-12;
                    total++;
                }
        printf(
            "(b) %s: %lld of %lld noise values in their sorted-CDF bin, %lld in the id-order one\n",
            ki == 0 ? "variant B (causal)" : "variant A (MTP)", (long long)inside, (long long)total,
            (long long)inside_id);
        T_EQ_INT(inside, total,
                 "(b) kind %d: %lld of %lld noise values in the sorted bins (want all)", ki,
                 (long long)inside, (long long)total);
        T_CHECK(inside_id < total,
                "(b) kind %d: precondition: id-order bins differ (%lld of %lld inside)", ki,
                (long long)inside_id, (long long)total);
        sup_free(s);
    }
    free(tl);
    layout_free(&la);
    model_ws_free(ws);
    model_free(ar);
    be->destroy(be);
    return T_DONE();
}
