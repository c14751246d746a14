/* bench/bench_kernels_cpu.c — CPU backend op timings at a model's shapes and
 * the share of a training step's time spent outside sgemm.
 *
 * Build and run (not part of make test):
 *   make bench BENCHES=kernels (builds build/bench/bench_kernels_cpu and runs it), or
 *   make build/bench/bench_kernels_cpu, then
 *   build/bench/bench_kernels_cpu [--cpu-time] [batch seq hidden heads blocks vocab]
 *   (default: the tiny model, 32 128 128 4 4 50258)
 * --cpu-time times with the process CPU clock instead of the wall clock: on a
 * loaded machine, run it with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for a
 * per-core figure that other processes do not distort. With 2 threads, set
 * OMP_WAIT_POLICY=passive (kf train does): otherwise idle OpenMP threads spin
 * against OpenBLAS's threads (about 2x slower steps measured on a loaded
 * 2-core machine).
 *
 * It measures OpenBLAS sgemm peak (a large square product), then one
 * synthetic training step made of exactly the ops and shapes the AR model
 * runs (forward, backward, AdamW, EMA), timing each op family. The step's
 * useful FLOPs are the GEMMs (2·M·N·K each) plus attention (4·pairs·head_dim
 * forward, 8·pairs·head_dim backward); the report gives FLOP/s as a fraction
 * of the measured sgemm peak.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"

static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now(void) {
    struct timespec t;
    clock_gettime(bench_clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { F_GEMM, F_ATTN, F_NORM, F_XENT, F_POINT, F_EMBED, F_OPT, F_N };
static const char *fam_name[F_N] = {"gemm",           "attention", "layernorm", "xent",
                                    "pointwise+rope", "embedding", "adamw+ema"};
static double fam_t[F_N], gemm_flops;
static kf_backend *be;

#define TIMED(fam, call)                                                                           \
    do {                                                                                           \
        double t0_ = now();                                                                        \
        call;                                                                                      \
        fam_t[fam] += now() - t0_;                                                                 \
    } while (0)

static float *buf(int64_t n) { return be->alloc(be, (size_t)n * sizeof(float)); }

static void mm(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K, int ta,
               int tb, float beta) {
    TIMED(F_GEMM, be->matmul(be, C, A, B, M, N, K, ta, tb, 1.0f, beta));
    gemm_flops += 2.0 * M * N * K;
}

static double sgemm_peak(void) {
    const int64_t n = 2048;
    float *a = buf(n * n), *b = buf(n * n), *c = buf(n * n);
    for (int64_t i = 0; i < n * n; i++) a[i] = b[i] = 0.001f * (float)(i % 997);
    be->matmul(be, c, a, b, n, n, n, 0, 0, 1, 0);
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        be->matmul(be, c, a, b, n, n, n, 0, 0, 1, 0);
        double f = 2.0 * n * n * n / (now() - t0);
        best = f > best ? f : best;
    }
    be->free(be, a);
    be->free(be, b);
    be->free(be, c);
    return best;
}

int main(int argc, char **argv) {
    int64_t Bt = 32, L = 128, H = 128, nh = 4, nb = 4, V = 50258;
    if (argc > 1 && strcmp(argv[1], "--cpu-time") == 0) {
        bench_clock = CLOCK_PROCESS_CPUTIME_ID;
        argc--;
        argv++;
    }
    if (argc == 7) {
        Bt = atoll(argv[1]);
        L = atoll(argv[2]);
        H = atoll(argv[3]);
        nh = atoll(argv[4]);
        nb = atoll(argv[5]);
        V = atoll(argv[6]);
    } else if (argc != 1) {
        fprintf(stderr,
                "usage: bench_kernels_cpu [--cpu-time] [batch seq hidden heads blocks vocab]\n");
        return 2;
    }
    be = kernels_cpu_create();
    int64_t T = Bt * L, D = H / nh, F = 4 * H;
    double peak = sgemm_peak();
    printf("%s clock, threads %d, sgemm peak %.1f GFLOP/s (2048^3)\n",
           bench_clock == CLOCK_MONOTONIC ? "wall" : "cpu", omp_get_max_threads(), peak / 1e9);
    printf("model: batch %lld seq %lld hidden %lld heads %lld blocks %lld vocab %lld\n",
           (long long)Bt, (long long)L, (long long)H, (long long)nh, (long long)nb, (long long)V);

    /* parameters (one flat buffer, as the trainer keeps them) */
    int64_t per_block = 3 * H * H + H * H + F * H + F + H * F + H + 2 * H;
    int64_t nparam = V * H + nb * per_block + H + V * H + V;
    float *P = buf(nparam), *G = buf(nparam), *M1 = buf(nparam), *M2 = buf(nparam),
          *E = buf(nparam);
    for (int64_t i = 0; i < nparam; i++)
        P[i] = 0.02f * (float)((i * 2654435761u) % 1000) / 1000.0f - 0.01f;
    /* activations saved per block */
    float *x = buf(T * H), *dx = buf(T * H), *tmp = buf(T * H), *dtmp = buf(T * H);
    float **ln1 = malloc(nb * sizeof *ln1), **qkv = malloc(nb * sizeof *qkv),
          **att = malloc(nb * sizeof *att);
    float **lse = malloc(nb * sizeof *lse), **ln2 = malloc(nb * sizeof *ln2),
          **h1 = malloc(nb * sizeof *h1);
    float **g1 = malloc(nb * sizeof *g1), **xin = malloc(nb * sizeof *xin),
          **xmid = malloc(nb * sizeof *xmid);
    float **mu = malloc(nb * 2 * sizeof *mu), **rs = malloc(nb * 2 * sizeof *rs);
    for (int64_t l = 0; l < nb; l++) {
        ln1[l] = buf(T * H);
        qkv[l] = buf(T * 3 * H);
        att[l] = buf(T * H);
        lse[l] = buf(Bt * nh * L);
        ln2[l] = buf(T * H);
        h1[l] = buf(T * F);
        g1[l] = buf(T * F);
        xin[l] = buf(T * H);
        xmid[l] = buf(T * H);
        mu[2 * l] = buf(T);
        mu[2 * l + 1] = buf(T);
        rs[2 * l] = buf(T);
        rs[2 * l + 1] = buf(T);
    }
    float *lnf = buf(T * H), *muf = buf(T), *rsf = buf(T), *logits = buf(T * V), *losses = buf(T);
    float *dqkv = buf(T * 3 * H), *dh = buf(T * F);
    int32_t *ids = malloc(T * 4), *tg = malloc(T * 4), *pos = malloc(L * 4);
    for (int64_t i = 0; i < T; i++)
        ids[i] = (int32_t)((i * 7919) % V), tg[i] = (int32_t)((i * 104729) % V);
    for (int64_t i = 0; i < L; i++) pos[i] = (int32_t)i;
    kf_mask mask = {.n_ctx = L};

    int reps = 2;
    for (int rep = -1; rep < reps; rep++) { /* rep -1 warms up */
        if (rep == 0) {
            memset(fam_t, 0, sizeof fam_t);
            gemm_flops = 0;
        }
        int64_t a0 = kernels_cpu_attn_pairs(be);
        float *emb = P, *w = P + V * H;
        TIMED(F_EMBED, be->embed_fwd(be, x, ids, NULL, emb, T, H));
        for (int64_t l = 0; l < nb; l++, w += per_block) {
            float *wn1 = w, *wqkv = w + H, *wo = wqkv + 3 * H * H, *wn2 = wo + H * H, *w0 = wn2 + H,
                  *b0 = w0 + F * H, *w2 = b0 + F, *b2 = w2 + H * F;
            be->copy(be, xin[l], x, T * H * 4);
            TIMED(F_NORM, be->layernorm_fwd(be, ln1[l], NULL, mu[2 * l], rs[2 * l], x, wn1, NULL, T,
                                            H, 1e-5f));
            mm(qkv[l], ln1[l], wqkv, T, 3 * H, H, 0, 1, 0);
            TIMED(F_POINT, be->rope_fwd(be, qkv[l], pos, Bt, L, nh, D, 10000.0f, NULL));
            TIMED(F_ATTN, be->attn_fwd(be, att[l], lse[l], qkv[l], &mask, Bt, nh, D, NULL, NULL));
            mm(x, att[l], wo, T, H, H, 0, 1, 1.0f); /* residual via beta = 1 */
            be->copy(be, xmid[l], x, T * H * 4);
            TIMED(F_NORM, be->layernorm_fwd(be, ln2[l], NULL, mu[2 * l + 1], rs[2 * l + 1], x, wn2,
                                            NULL, T, H, 1e-5f));
            mm(h1[l], ln2[l], w0, T, F, H, 0, 1, 0);
            TIMED(F_POINT, be->add_bias(be, h1[l], b0, T, F));
            TIMED(F_POINT, be->gelu_fwd(be, g1[l], h1[l], T * F, KF_GELU_TANH));
            mm(x, g1[l], w2, T, H, F, 0, 1, 1.0f);
            TIMED(F_POINT, be->add_bias(be, x, b2, T, H));
        }
        float *wnf = w, *wout = w + H, *bout = wout + V * H;
        TIMED(F_NORM, be->layernorm_fwd(be, lnf, NULL, muf, rsf, x, wnf, NULL, T, H, 1e-5f));
        mm(logits, lnf, wout, T, V, H, 0, 1, 0);
        TIMED(F_POINT, be->add_bias(be, logits, bout, T, V));
        TIMED(F_POINT, be->fill_column(be, logits, T, V, V - 1, -1000.0f));
        TIMED(F_XENT, be->xent(be, losses, logits, logits, tg, T, V, &(float){1.0f / T}));

        /* backward */
        be->zero(be, G, nparam * 4);
        float *gw = G + V * H + nb * per_block, *gwnf = gw, *gwout = gw + H, *gbout = gwout + V * H;
        TIMED(F_POINT, be->bias_grad(be, gbout, logits, T, V));
        mm(gwout, logits, lnf, V, H, T, 1, 0, 1.0f);
        mm(tmp, logits, wout, T, H, V, 0, 0, 0);
        be->zero(be, dx, T * H * 4);
        TIMED(F_NORM, be->layernorm_bwd(be, dx, gwnf, NULL, tmp, x, wnf, muf, rsf, T, H, NULL));
        for (int64_t l = nb - 1; l >= 0; l--) {
            float *wl = P + V * H + l * per_block, *gl = G + V * H + l * per_block;
            float *wn1 = wl, *wqkv = wl + H, *wo = wqkv + 3 * H * H, *wn2 = wo + H * H,
                  *w0 = wn2 + H, *w2 = w0 + F * H + F;
            float *gn1 = gl, *gqkv = gl + H, *go = gqkv + 3 * H * H, *gn2 = go + H * H,
                  *g0 = gn2 + H, *gb0 = g0 + F * H, *g2 = gb0 + F, *gb2 = g2 + H * F;
            TIMED(F_POINT, be->bias_grad(be, gb2, dx, T, H));
            mm(g2, dx, g1[l], H, F, T, 1, 0, 1.0f);
            mm(dh, dx, w2, T, F, H, 0, 0, 0);
            TIMED(F_POINT, be->gelu_bwd(be, dh, dh, h1[l], T * F, KF_GELU_TANH));
            TIMED(F_POINT, be->bias_grad(be, gb0, dh, T, F));
            mm(g0, dh, ln2[l], F, H, T, 1, 0, 1.0f);
            mm(dtmp, dh, w0, T, H, F, 0, 0, 0);
            TIMED(F_NORM, be->layernorm_bwd(be, dx, gn2, NULL, dtmp, xmid[l], wn2, mu[2 * l + 1],
                                            rs[2 * l + 1], T, H, NULL));
            mm(go, dx, att[l], H, H, T, 1, 0, 1.0f);
            mm(dtmp, dx, wo, T, H, H, 0, 0, 0);
            TIMED(F_ATTN, be->attn_bwd(be, dqkv, dtmp, att[l], lse[l], qkv[l], &mask, Bt, nh, D,
                                       NULL, NULL, NULL, NULL));
            TIMED(F_POINT, be->rope_bwd(be, dqkv, pos, Bt, L, nh, D, 10000.0f, NULL));
            mm(gqkv, dqkv, ln1[l], 3 * H, H, T, 1, 0, 1.0f);
            mm(dtmp, dqkv, wqkv, T, H, 3 * H, 0, 0, 0);
            TIMED(F_NORM, be->layernorm_bwd(be, dx, gn1, NULL, dtmp, xin[l], wn1, mu[2 * l],
                                            rs[2 * l], T, H, NULL));
        }
        TIMED(F_EMBED, be->embed_bwd(be, G, dx, ids, NULL, T, H, V));
        TIMED(F_OPT, be->sumsq(be, G, nparam));
        TIMED(F_OPT, be->adamw(be, P, G, M1, M2, nparam, 1e-4f, 0.9f, 0.999f, 1e-6f, 0.0f, rep + 2,
                               1.0f, NULL));
        TIMED(F_OPT, be->ema(be, E, P, nparam, 0.999f, NULL));
        if (rep == 0)
            printf("attention pairs per step (fwd+bwd, all heads): %lld\n",
                   (long long)(kernels_cpu_attn_pairs(be) - a0));
    }
    double total = 0;
    for (int f = 0; f < F_N; f++) total += fam_t[f];
    double step = total / reps, gf = gemm_flops / reps;
    int64_t pairs_fwd = nb * Bt * nh * L * (L + 1) / 2;
    double attn_flops = (double)pairs_fwd * D * 12.0;
    printf("\nper step: %.3f s\n", step);
    for (int f = 0; f < F_N; f++)
        printf("  %-16s %8.1f ms  %5.1f%%\n", fam_name[f], fam_t[f] / reps * 1e3,
               100 * fam_t[f] / total);
    printf("GEMM: %.1f GFLOP/step at %.1f GFLOP/s (%.0f%% of peak)\n", gf / 1e9,
           gf / (fam_t[F_GEMM] / reps) / 1e9, 100 * gf / (fam_t[F_GEMM] / reps) / peak);
    double useful = gf + attn_flops;
    printf("step FLOP/s (GEMM + attention = %.1f GFLOP): %.1f GFLOP/s = %.0f%% of sgemm peak\n",
           useful / 1e9, useful / step / 1e9, 100 * useful / step / peak);
    double six = 6.0 * nparam * T + attn_flops;
    printf("6*params*tokens + attention (%.1f GFLOP, params %lld incl. embedding): %.0f%% of sgemm "
           "peak\n",
           six / 1e9, (long long)nparam, 100 * six / step / peak);
    be->destroy(be);
    return 0;
}
