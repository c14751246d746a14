/* K-Forcing forward structures against their definitions:
 * (a) SingleForward: the logits of noise group t equal a plain causal forward
 *     over context[0..t] followed by that group's noise tokens;
 * (b) DoubleForward (context K/V reused from round 1, q_start = n) equals the
 *     second of two sequential passes: a plain forward over context[0..t],
 *     the k round-1 tokens and the k round-2 noise tokens;
 * and both cost exactly the visible (query, key) pairs of their structure
 * (the paper's O(k), counted by the CPU backend);
 * (c) a mask token inside the data's vocabulary (LM1B's [MASK] = 103, issue
 *     16 item 7) gets logit -1000 in the forward and is never decoded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"
#include <omp.h>

#include "tests/test.h"
#include "trainer/infer/decode.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

enum { B = 2, N = 9, K = 3, V = 13 };

static void randomize(model *m) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(0.8 * (rng_uniform01(3, 7, (uint64_t)i) - 0.5));
    for (int t = 0; t < m->n_tensors; t++)
        if (strstr(m->tensors[t].name, "norm") && strstr(m->tensors[t].name, ".weight"))
            for (int64_t e = 0; e < m->tensors[t].numel; e++) h[m->tensors[t].offset + e] += 1.0f;
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

/* Plain causal pass over rows: ctx[0..t], then `ntok` tokens, then `nz` noise
 * rows; returns the logits of the noise rows (host, nz*V) for sample b. */
static void plain(model *m, model_ws *ws, const int32_t *ctx, int64_t t, const int32_t *toks,
                  int64_t ntok, const double *z, int64_t nz, double tau, float *out) {
    layout l;
    layout_ar(&l, t + 1 + ntok + nz);
    int32_t ids[64] = {0};
    double zz[64] = {0};
    for (int64_t i = 0; i <= t; i++) ids[i] = ctx[i];
    for (int64_t i = 0; i < ntok; i++) ids[t + 1 + i] = toks[i];
    for (int64_t i = 0; i < nz; i++) {
        l.noise[t + 1 + ntok + i] = 1;
        zz[t + 1 + ntok + i] = z[i];
    }
    l.n_out = nz;
    for (int64_t i = 0; i < nz; i++) l.out_rows[i] = (int32_t)(t + 1 + ntok + i);
    model_input in = {.lay = &l, .B = 1, .ids = ids, .z = zz, .tau = &tau};
    const float *lg = model_forward(m, ws, &in, 0, NULL);
    m->be->download(m->be, out, lg, (size_t)(nz * V) * sizeof(float));
    layout_free(&l);
}

static double maxdiff(const float *a, const float *b, int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

int main(void) {
    /* tiny models: one thread avoids OpenMP barrier waits on a loaded machine
     * (results do not depend on the thread count) */
    omp_set_num_threads(1);
    kf_backend *be = kernels_cpu_create();
    model_config cfg = {.hidden = 16,
                        .heads = 2,
                        .blocks = 2,
                        .vocab = V,
                        .mask_id = V - 1,
                        .seq_len = 16,
                        .kind = MODEL_PFLM,
                        .head = HEAD_SHARED,
                        .k_train = K};
    model *m = model_create(be, &cfg);
    randomize(m);
    model_ws *w1 = model_ws_create(m), *w2 = model_ws_create(m), *wp = model_ws_create(m);
    int32_t ctx[B * N];
    double z[B * N * K], z2[B * N * K], tau[B] = {0.9, 0.2};
    for (int i = 0; i < B * N; i++) ctx[i] = (int32_t)rng_below(1, 1, (uint64_t)i, V - 1);
    for (int i = 0; i < B * N * K; i++) {
        z[i] = rng_uniform01(1, 2, (uint64_t)i);
        z2[i] = rng_uniform01(1, 3, (uint64_t)i);
    }

    /* (a) SingleForward */
    layout ls;
    layout_single(&ls, N, K);
    int64_t L = ls.L;
    int32_t ids[B * (N + 2 * N * K)];
    double zz[B * (N + 2 * N * K)];
    memset(ids, 0, sizeof ids);
    memset(zz, 0, sizeof zz);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) {
            ids[b * L + t] = ctx[b * N + t];
            for (int j = 0; j < K; j++)
                zz[b * L + layout_group_row(N, K, t, j)] = z[(b * N + t) * K + j];
        }
    model_input in = {.lay = &ls, .B = B, .ids = ids, .z = zz, .tau = tau};
    int64_t p0 = kernels_cpu_attn_pairs(be);
    const float *lg = model_forward(m, w1, &in, MODEL_KEEP_CTX_KV, NULL);
    int64_t pairs = kernels_cpu_attn_pairs(be) - p0;
    int64_t want = 0;
    for (int t = 0; t < N; t++) want += (t + 1) + (int64_t)K * (t + 1) + K * (K + 1) / 2;
    T_EQ_INT(pairs, want * B * cfg.heads * cfg.blocks,
             "SingleForward scored %lld pairs, its structure has %lld", (long long)pairs,
             (long long)(want * B * cfg.heads * cfg.blocks));
    printf(
        "SingleForward N=%d k=%d: %lld pairs = N(N+1)/2*(1+k) + N*k(k+1)/2 (dense would be %lld)\n",
        N, K, (long long)pairs, (long long)(L * L * B * cfg.heads * cfg.blocks));
    float *single = malloc((size_t)(B * N * K * V) * sizeof(float));
    be->download(be, single, lg, (size_t)(B * N * K * V) * sizeof(float));
    double worst = 0;
    float ref[K * V];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) {
            plain(m, wp, ctx + b * N, t, NULL, 0, z + (b * N + t) * K, K, tau[b], ref);
            worst = fmax(worst, maxdiff(ref, single + (int64_t)(b * N + t) * K * V, K * V));
        }
    printf("(a) SingleForward vs plain forwards: max |diff| %.3g\n", worst);
    T_CHECK(worst < 2e-5, "(a) SingleForward group != plain forward (%.3g)", worst);

    /* (b) DoubleForward on round-1 argmax tokens, context K/V reused */
    int32_t x1[B * N * K];
    for (int r = 0; r < B * N * K; r++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (single[(int64_t)r * V + v] > single[(int64_t)r * V + best]) best = v;
        x1[r] = best;
    }
    layout ld;
    layout_double(&ld, N, K);
    int64_t L2 = ld.L;
    memset(ids, 0, sizeof ids);
    memset(zz, 0, sizeof zz);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++)
            for (int j = 0; j < K; j++) {
                ids[b * L2 + layout_group_row(N, 2 * K, t, j)] = x1[(b * N + t) * K + j];
                zz[b * L2 + layout_group_row(N, 2 * K, t, K + j)] = z2[(b * N + t) * K + j];
            }
    in.lay = &ld;
    p0 = kernels_cpu_attn_pairs(be);
    lg = model_forward(m, w2, &in, 0, w1);
    pairs = kernels_cpu_attn_pairs(be) - p0;
    want = 0;
    for (int t = 0; t < N; t++)
        want +=
            (int64_t)K * (t + 1) + K * (K + 1) / 2 + (int64_t)K * (t + 1) + K * K + K * (K + 1) / 2;
    T_EQ_INT(pairs, want * B * cfg.heads * cfg.blocks,
             "DoubleForward scored %lld pairs, its structure has %lld", (long long)pairs,
             (long long)(want * B * cfg.heads * cfg.blocks));
    printf("DoubleForward N=%d k=%d: %lld pairs (F1 and F2 queries only; context reused)\n", N, K,
           (long long)pairs);
    float *dbl = malloc((size_t)(B * N * K * V) * sizeof(float));
    be->download(be, dbl, lg, (size_t)(B * N * K * V) * sizeof(float));
    worst = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) {
            plain(m, wp, ctx + b * N, t, x1 + (b * N + t) * K, K, z2 + (b * N + t) * K, K, tau[b],
                  ref);
            worst = fmax(worst, maxdiff(ref, dbl + (int64_t)(b * N + t) * K * V, K * V));
        }
    printf("(b) DoubleForward vs sequential passes: max |diff| %.3g\n", worst);
    T_CHECK(worst < 2e-5, "(b) DoubleForward != sequential second pass (%.3g)", worst);

    /* the teacher helper gives the same tokens: round 1 = x1, round 2 = argmax(dbl) */
    int32_t out[B * N * 2 * K];
    int32_t *picks = be->alloc(be, sizeof out);
    sup_pflm_rounds(m, w1, w2, ctx, B, N, K, z, K, z2, tau, picks, out);
    be->free(be, picks);
    int same = 1;
    for (int r = 0; r < B * N; r++)
        for (int j = 0; j < K; j++) {
            same &= out[r * 2 * K + j] == x1[r * K + j];
            int best = 0;
            const float *row = dbl + ((int64_t)r * K + j) * V;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            same &= out[r * 2 * K + K + j] == best;
        }
    T_CHECK(same, "sup_pflm_rounds disagrees with SingleForward/DoubleForward argmax");

    free(single);
    free(dbl);
    layout_free(&ls);
    layout_free(&ld);
    model_ws_free(w1);
    model_ws_free(w2);
    model_ws_free(wp);
    model_free(m);

    /* (c) an AR model whose mask id (3) is an ordinary id of its vocabulary */
    model_config ac = {.hidden = 16,
                       .heads = 2,
                       .blocks = 1,
                       .vocab = V,
                       .mask_id = 3,
                       .seq_len = 16,
                       .kind = MODEL_AR,
                       .head = HEAD_SHARED,
                       .k_train = 1};
    m = model_create(be, &ac);
    randomize(m);
    model_ws *wa = model_ws_create(m);
    layout la;
    layout_ar(&la, N);
    model_input ia = {.lay = &la, .B = B, .ids = ctx};
    const float *la_logits = model_forward(m, wa, &ia, 0, NULL);
    int forced = 1;
    for (int64_t r = 0; r < B * N; r++) forced &= la_logits[r * V + 3] == -1000.0f;
    T_CHECK(forced, "(c) the mask id's logit is -1000 in every row");
    int32_t gen[B * 8];
    uint64_t keys[B] = {1, 2};
    decode_opts o = {.k = 1, .tau = 1.0, .max_new = 8, .seed = 4};
    decode_run(m, NULL, ctx, B, 4, &o, keys, gen);
    int never = 1;
    for (int i = 0; i < B * 8; i++) never &= gen[i] != 3;
    T_CHECK(never, "(c) the mask id is never sampled");
    layout_free(&la);
    model_ws_free(wa);
    model_free(m);
    be->destroy(be);
    return T_DONE();
}
