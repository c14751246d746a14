/* tests/unit/test_cuda_ops.c — every op of the CUDA backend against the CPU
 * reference backend, forward and backward, with per-op tolerances; plus
 * determinism (two GPU runs bitwise equal) and batch invariance (a sample's
 * result alone equals its result inside a larger batch).
 *
 * Runs only under `make test-cuda` (a GPU is needed; a missing GPU is a
 * failure there, not a skip). Inputs are fresh random numbers (fixed seed),
 * never zeros; each comparison prints its relative error
 * ||gpu - cpu|| / ||cpu|| so a drift is visible before it fails.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/kernels_test_util.h"

static kf_backend *be[2]; /* 0: cpu reference, 1: cuda */

typedef struct {
    void *p[2];
    size_t bytes;
} buf2;

/* Runs `call` on the CPU backend then on the GPU; inside it, P(x) is buffer
 * x on the backend being run and BE that backend. */
#define BOTH(call)                                                                                 \
    do {                                                                                           \
        for (int side_ = 0; side_ < 2; side_++) {                                                  \
            kf_backend *BE = be[side_];                                                            \
            (void)BE;                                                                              \
            call;                                                                                  \
        }                                                                                          \
    } while (0)
#define P(x) ((x).p[side_])
#define PF(x) ((float *)(x).p[side_])
#define PI(x) ((int32_t *)(x).p[side_])
#define PD(x) ((double *)(x).p[side_])
#define PF1(x) ((float *)(x).p[1]) /* the GPU's buffer */
#define PI1(x) ((int32_t *)(x).p[1])

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* xorshift64*: uniform in [0, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { return (float)(2.0 * urand() - 1.0); }

static buf2 mk(const void *host, size_t bytes) {
    buf2 x = {{NULL, NULL}, bytes};
    for (int s = 0; s < 2; s++) {
        x.p[s] = be[s]->alloc(be[s], bytes);
        if (host) be[s]->upload(be[s], x.p[s], host, bytes);
    }
    return x;
}

static buf2 mk_rand(int64_t n, float amp) {
    float *h = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = amp * nrand();
    buf2 x = mk(h, (size_t)n * sizeof(float));
    free(h);
    return x;
}

static buf2 mk_ints(const int32_t *h, int64_t n) { return mk(h, (size_t)n * sizeof(int32_t)); }
static buf2 mk_doubles(const double *h, int64_t n) { return mk(h, (size_t)n * sizeof(double)); }

static void drop(buf2 *x) {
    for (int s = 0; s < 2; s++) be[s]->free(be[s], x->p[s]);
}

static void *down(const buf2 *x, int side) {
    void *h = malloc(x->bytes ? x->bytes : 1);
    be[side]->download(be[side], h, x->p[side], x->bytes);
    return h;
}

/* A new buffer holding x's CPU-side contents on both sides. */
static buf2 mk_copy(const buf2 *x) {
    void *h = down(x, 0);
    buf2 y = mk(h, x->bytes);
    free(h);
    return y;
}

/* A 16-bit copy (kernels.h) of x's first n CPU-side values in the format of
 * prec, on both sides. */
static buf2 mk16(const buf2 *x, int64_t n, kf_precision prec) {
    float *h = down(x, 0);
    uint16_t *h16 = tu_to16(h, n, prec);
    buf2 c = mk(h16, (size_t)n * 2);
    free(h), free(h16);
    return c;
}

/* Relative L2 error of the GPU's floats against the CPU's (n floats from offset 0). */
static double rel_err(const buf2 *x, int64_t n, int *nonfinite) {
    float *c = down(x, 0), *g = down(x, 1);
    double num = 0, den = 0;
    *nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(g[i]) && isfinite(c[i])) (*nonfinite)++;
        double d = (double)g[i] - (double)c[i];
        num += d * d;
        den += (double)c[i] * c[i];
    }
    free(c);
    free(g);
    return sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}

static void check_close(const char *what, const buf2 *x, int64_t n, double tol) {
    int bad;
    double e = rel_err(x, n, &bad);
    printf("  %-44s rel err %.3g (tol %.1g)\n", what, e, tol);
    T_EQ_INT(bad, 0, "%s: non-finite values", what);
    T_CHECK(e <= tol, "%s: rel err %.3g > %.3g", what, e, tol);
}

/* Tolerance of a GPU result against the CPU's at precision prec: bf16's
 * unit roundoff is 8x fp16's. */
static double tol_at(kf_precision prec, double fp32, double fp16) {
    return prec == KF_PREC_FP32 ? fp32 : prec == KF_PREC_FP16 ? fp16 : 8 * fp16;
}

/* In a 16-bit mode every GPU output value (n floats from float offset `from`)
 * must be one the format can hold: this tells a bf16 result from an fp16 one,
 * which the loose bf16 tolerance alone would not. */
static void check_representable(const char *what, const buf2 *x, int64_t from, int64_t n,
                                kf_precision prec) {
    if (prec == KF_PREC_FP32) return;
    float *g = down(x, 1);
    int64_t bad = 0, first = -1;
    for (int64_t i = from; i < from + n; i++) {
        float r = prec == KF_PREC_FP16 ? tu_fp16(g[i]) : tu_bf16(g[i]);
        if (r != g[i] && !isnan(g[i])) {
            if (first < 0) first = i;
            bad++;
        }
    }
    T_EQ_INT(bad, 0, "%s: got %lld values not representable in %s (first at %lld: %.9g), want 0",
             what, (long long)bad, kernels_precision_name(prec), (long long)first,
             first >= 0 ? g[first] : 0.0f);
    free(g);
}

static void check_same_bytes(const char *what, const buf2 *x) {
    char *c = down(x, 0), *g = down(x, 1);
    T_CHECK(memcmp(c, g, x->bytes) == 0, "%s: cuda differs from cpu", what);
    printf("  %-44s %s\n", what, memcmp(c, g, x->bytes) == 0 ? "identical" : "DIFFERENT");
    free(c);
    free(g);
}

/* ---- dense algebra ---- */

/* invariant: 0 cuBLAS, 1 the batch-invariant kernels (tensor cores in fp16 and
 * bf16), 2 those of a KF_CUDA_TC=0 backend (SIMT); names only: the mode is
 * the backend's */
static void test_matmul(kf_precision prec, int invariant) {
    int64_t M = 67, N = 45, K = 131;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            buf2 A = mk_rand(M * K, 1), B = mk_rand(K * N, 1), C = mk_rand(M * N, 1);
            BOTH(BE->matmul(BE, PF(C), PF(A), PF(B), M, N, K, ta, tb, 0.7f, 0.5f));
            char w[96];
            snprintf(w, sizeof w, "matmul %s%s ta=%d tb=%d", kernels_precision_name(prec),
                     invariant == 2 ? " inv-simt"
                     : invariant    ? " inv"
                                    : "",
                     ta, tb);
            check_close(w, &C, M * N, tol_at(prec, 2e-6, 2e-3));
            check_representable(w, &C, 0, M * N, prec);
            drop(&A), drop(&B), drop(&C);
        }
    int64_t batch = 3;
    buf2 A = mk_rand(batch * M * K, 1), B = mk_rand(K * N, 1), C = mk_rand(batch * M * N, 1);
    BOTH(BE->matmul_batched(BE, PF(C), PF(A), PF(B), M, N, K, 0, 1, 1.0f, 0.0f, batch, M * N, M * K,
                            0));
    char w[96];
    snprintf(w, sizeof w, "matmul_batched %s (B broadcast)", kernels_precision_name(prec));
    check_close(w, &C, batch * M * N, tol_at(prec, 2e-6, 2e-3));
    check_representable(w, &C, 0, batch * M * N, prec);
    drop(&A), drop(&B), drop(&C);
}

/* An empty product (K = 0): C = beta*C in each matrix of the batch, 0 where
 * beta is 0 even over NaN, and the elements between strided matrices untouched
 * — with cuBLAS and with the fixed-tiling kernel. */
static void test_matmul_empty(void) {
    int64_t M = 5, N = 7, batch = 2, sc = M * N + 3;
    float hc[2 * (5 * 7 + 3)];
    for (int64_t i = 0; i < batch * sc; i++) hc[i] = i % 3 ? NAN : (float)i;
    buf2 A = mk_rand(M, 1), B = mk_rand(N, 1), C = mk(hc, sizeof hc), C2 = mk(hc, sizeof hc);
    for (int inv = 0; inv < 2; inv++) {
        be[1]->batch_invariant = inv;
        BOTH(BE->upload(BE, P(C), hc, sizeof hc));
        BOTH(BE->matmul_batched(BE, PF(C), PF(A), PF(B), M, N, 0, 0, 1, 1.0f, 0.0f, batch, sc, 0,
                                0));
        check_same_bytes(inv ? "matmul K=0 beta=0 over NaN (inv)" : "matmul K=0 beta=0 over NaN",
                         &C);
        BOTH(BE->upload(BE, P(C2), hc, sizeof hc));
        BOTH(BE->fill_column(BE, PF(C2), 2 * sc, 1, 0, 3.0f)); /* finite everywhere */
        BOTH(BE->matmul_batched(BE, PF(C2), PF(A), PF(B), M, N, 0, 0, 1, 1.0f, 0.5f, batch, sc, 0,
                                0));
        check_same_bytes(
            inv ? "matmul K=0 beta=0.5, gaps kept (inv)" : "matmul K=0 beta=0.5, gaps kept", &C2);
    }
    be[1]->batch_invariant = 0;
    drop(&A), drop(&B), drop(&C), drop(&C2);
}

/* Batch invariance of the fixed-tiling GEMM: the first 5 rows of a 300-row
 * product equal the same 5 rows computed alone, bit for bit. */
static void test_matmul_invariance(kf_precision prec) {
    kf_backend *g = be[1];
    g->set_precision(g, prec);
    int64_t M = 300, N = 96, K = 768;
    buf2 A = mk_rand(M * K, 1), B = mk_rand(N * K, 1), C1 = mk_rand(M * N, 1),
         C2 = mk_rand(5 * N, 1);
    g->batch_invariant = 1;
    g->matmul(g, C1.p[1], A.p[1], B.p[1], M, N, K, 0, 1, 1.0f, 0.0f);
    g->matmul(g, C2.p[1], A.p[1], B.p[1], 5, N, K, 0, 1, 1.0f, 0.0f);
    g->batch_invariant = 0;
    float *c1 = down(&C1, 1), *c2 = down(&C2, 1);
    T_CHECK(memcmp(c1, c2, (size_t)(5 * N) * sizeof(float)) == 0,
            "batch-invariant matmul (%s): rows differ alone vs in a batch of %lld",
            kernels_precision_name(prec), (long long)M);
    free(c1), free(c2);
    g->set_precision(g, KF_PREC_FP32);
    drop(&A), drop(&B), drop(&C1), drop(&C2);
}

/* FNV-1a of n bytes, folded into h: the digests the emulated runs print, so
 * runs in different KF_CUDA_EMU_ORDERs can be compared. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* Rows [0, m) of C = 0.7 op(A) op(B) + 0.5 C0 on the GPU in batch-invariant
 * mode, op(A) given row-major as a [m][K] (laid out for trans_a), B as b
 * ([K][N], or [N][K] when tb) and C0 as c0 ([m][N]); returns C (malloc'd). */
static float *inv_rows(const float *a, const float *bh, const float *c0, int64_t m, int64_t N,
                       int64_t K, int ta, int tb) {
    kf_backend *g = be[1];
    float *ha = malloc((size_t)(m * K) * sizeof(float)), *hc = malloc((size_t)(m * N) * 4);
    for (int64_t i = 0; i < m; i++)
        for (int64_t k = 0; k < K; k++) ha[ta ? k * m + i : i * K + k] = a[i * K + k];
    float *da = g->alloc(g, (size_t)(m * K) * 4), *db = g->alloc(g, (size_t)(K * N) * 4),
          *dc = g->alloc(g, (size_t)(m * N) * 4);
    g->upload(g, da, ha, (size_t)(m * K) * 4);
    g->upload(g, db, bh, (size_t)(K * N) * 4);
    g->upload(g, dc, c0, (size_t)(m * N) * 4);
    g->batch_invariant = 1;
    g->matmul(g, dc, da, db, m, N, K, ta, tb, 0.7f, 0.5f);
    g->batch_invariant = 0;
    g->download(g, hc, dc, (size_t)(m * N) * 4);
    g->free(g, da), g->free(g, db), g->free(g, dc);
    free(ha);
    return hc;
}

/* Elements of the first n floats of got that differ in bits from want. */
static int64_t n_differ(const float *got, const float *want, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    return bad;
}

/* Batch invariance of the 16-bit batch-invariant GEMM (the tensor-core
 * kernel by default), bit for bit: rows [0, m) computed alone equal the same
 * rows of a 200-row product, for m = 1, 5, 64, 65, 130 and each transpose
 * (ta gives every m its own leading dimension, aligned or not: both staging
 * paths), with alpha and beta; and a matrix of a batch of 3 (B broadcast,
 * strided C) equals the same product alone. Prints a digest of the results
 * (compare across KF_CUDA_EMU_ORDERs). */
static void test_matmul_tc_invariance(kf_precision prec) {
    kf_backend *g = be[1];
    g->set_precision(g, prec);
    const char *pn = kernels_precision_name(prec);
    int64_t R = 200, N = 72, K = 100;
    float *a = malloc((size_t)(R * K) * 4), *bh = malloc((size_t)(K * N) * 4),
          *c0 = malloc((size_t)(R * N) * 4);
    for (int64_t i = 0; i < R * K; i++) a[i] = nrand();
    for (int64_t i = 0; i < K * N; i++) bh[i] = nrand();
    for (int64_t i = 0; i < R * N; i++) c0[i] = nrand();
    uint64_t h = 0xcbf29ce484222325ull;
    const int64_t ms[] = {1, 5, 64, 65, 130};
    for (int tr = 0; tr < 4; tr++) {
        int ta = tr & 1, tb = tr >> 1;
        float *all = inv_rows(a, bh, c0, R, N, K, ta, tb);
        h = fnv(h, all, (size_t)(R * N) * 4);
        for (int i = 0; i < 5; i++) {
            float *part = inv_rows(a, bh, c0, ms[i], N, K, ta, tb);
            int64_t bad = n_differ(part, all, ms[i] * N);
            T_EQ_INT(bad, 0,
                     "batch-invariant matmul %s ta=%d tb=%d: got %lld of %lld elements of %lld "
                     "rows alone differing from a batch of %lld rows, want 0",
                     pn, ta, tb, (long long)bad, (long long)(ms[i] * N), (long long)ms[i],
                     (long long)R);
            free(part);
        }
        free(all);
    }
    /* batched: matrix z of A [3][R][K] times the shared B^T, C strided */
    int64_t nb = 3, scs = R * N + 8;
    float *ab = malloc((size_t)(nb * R * K) * 4), *hc = malloc((size_t)(nb * scs) * 4);
    for (int64_t i = 0; i < nb * R * K; i++) ab[i] = nrand();
    for (int64_t i = 0; i < nb * scs; i++) hc[i] = nrand();
    float *da = g->alloc(g, (size_t)(nb * R * K) * 4), *db = g->alloc(g, (size_t)(K * N) * 4),
          *dc = g->alloc(g, (size_t)(nb * scs) * 4);
    g->upload(g, da, ab, (size_t)(nb * R * K) * 4);
    g->upload(g, db, bh, (size_t)(K * N) * 4);
    g->upload(g, dc, hc, (size_t)(nb * scs) * 4);
    g->batch_invariant = 1;
    g->matmul_batched(g, dc, da, db, R, N, K, 0, 1, 0.7f, 0.5f, nb, scs, R * K, 0);
    g->batch_invariant = 0;
    float *got = malloc((size_t)(nb * scs) * 4);
    g->download(g, got, dc, (size_t)(nb * scs) * 4);
    h = fnv(h, got, (size_t)(nb * scs) * 4);
    for (int64_t z = 0; z < nb; z++) {
        float *one = inv_rows(ab + z * R * K, bh, hc + z * scs, 5, N, K, 0, 1);
        int64_t bad = n_differ(got + z * scs, one, 5 * N);
        T_EQ_INT(bad, 0,
                 "batch-invariant matmul_batched %s: matrix %lld of %lld: got %lld elements of "
                 "its first 5 rows differing from the product alone, want 0",
                 pn, (long long)z, (long long)nb, (long long)bad);
        free(one);
    }
    printf("  batch-invariant matmul %s digest %016llx\n", pn, (unsigned long long)h);
    g->free(g, da), g->free(g, db), g->free(g, dc);
    free(a), free(bh), free(c0), free(ab), free(hc), free(got);
    g->set_precision(g, KF_PREC_FP32);
}

/* The batch-invariant GEMM against the CPU at edge sizes: M, N, K not
 * multiples of the tiles (64 x 64, k by 32 and 16), K = 1, one element,
 * each transpose, alpha and beta. */
static void test_matmul_inv_edges(kf_precision prec) {
    const int64_t sz[][3] = {{1, 1, 1}, {17, 9, 1}, {65, 63, 33}, {3, 130, 47}, {129, 65, 16}};
    BOTH(BE->set_precision(BE, prec));
    be[1]->batch_invariant = 1;
    for (int i = 0; i < 5; i++)
        for (int tr = 0; tr < 4; tr++) {
            int64_t M = sz[i][0], N = sz[i][1], K = sz[i][2];
            int ta = tr & 1, tb = tr >> 1;
            buf2 A = mk_rand(M * K, 1), B = mk_rand(K * N, 1), C = mk_rand(M * N, 1);
            BOTH(BE->matmul(BE, PF(C), PF(A), PF(B), M, N, K, ta, tb, 0.7f, 0.5f));
            char w[96];
            snprintf(w, sizeof w, "matmul %s inv %lldx%lldx%lld ta=%d tb=%d",
                     kernels_precision_name(prec), (long long)M, (long long)N, (long long)K, ta,
                     tb);
            check_close(w, &C, M * N, tol_at(prec, 2e-6, 2e-3));
            check_representable(w, &C, 0, M * N, prec);
            drop(&A), drop(&B), drop(&C);
        }
    be[1]->batch_invariant = 0;
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
}

/* kernels_cuda_tc_launches, and whether the emulation harness runs the
 * backend (it counts host waits); the program also links without CUDA,
 * where main stops before any CUDA check. */
static int64_t tc_launches(kf_backend *b, kf_cuda_tc path) {
#ifdef KF_CUDA
    return kernels_cuda_tc_launches(b, path);
#else
    (void)b, (void)path;
    return -1;
#endif
}
static int emulated(void) {
#ifdef KF_CUDA
    return kernels_cuda_host_syncs() >= 0;
#else
    return 0;
#endif
}

/* Which kernel runs the 16-bit batch-invariant products of backend x (a
 * fresh one): the tensor-core launches (kernels_cuda_tc_launches) of its
 * first fp16 product and of the next, then of its first bf16 product, must
 * be want[0..3) (a check runs 8 launches, two per transpose: on the fp32
 * operands and on their 16-bit copies, or stops at the first failing
 * pair); and its bits equal ref's (a KF_CUDA_TC=0 backend): always when x's
 * products run on the SIMT kernel (!tc), and under the emulation harness on
 * the tensor cores too, whose emulated mma sums each product exactly in k
 * order as the SIMT kernel's fmaf chain does (a fragment layout or staging
 * error shows there); on a GPU the tensor cores' bits are only counted. */
static void gemm_paths(kf_backend *x, kf_backend *ref, const int64_t want[3], int tc,
                       const char *what) {
    int64_t M = 100, N = 72, K = 160;
    float *ha = malloc((size_t)(M * K) * 4), *hb = malloc((size_t)(K * N) * 4);
    for (int64_t i = 0; i < M * K; i++) ha[i] = nrand();
    for (int64_t i = 0; i < K * N; i++) hb[i] = nrand();
    kf_backend *bs[2] = {x, ref};
    const char *step[3] = {"first fp16 product", "second fp16 product", "first bf16 product"};
    float *c[2][3];
    for (int p = 0; p < 2; p++) {
        kf_backend *g = bs[p];
        float *da = g->alloc(g, (size_t)(M * K) * 4), *db = g->alloc(g, (size_t)(K * N) * 4),
              *dc = g->alloc(g, (size_t)(M * N) * 4);
        g->upload(g, da, ha, (size_t)(M * K) * 4);
        g->upload(g, db, hb, (size_t)(K * N) * 4);
        g->batch_invariant = 1;
        for (int i = 0; i < 3; i++) {
            g->set_precision(g, i < 2 ? KF_PREC_FP16 : KF_PREC_BF16);
            int64_t n0 = tc_launches(g, KF_CUDA_TC_GEMM);
            g->matmul(g, dc, da, db, M, N, K, 0, 1, 1.0f, 0.0f);
            int64_t n = tc_launches(g, KF_CUDA_TC_GEMM) - n0;
            if (p == 0)
                T_EQ_INT(n, want[i], "batch-invariant matmul %s, %s: tensor-core launches", what,
                         step[i]);
            c[p][i] = malloc((size_t)(M * N) * 4);
            g->download(g, c[p][i], dc, (size_t)(M * N) * 4);
        }
        g->batch_invariant = 0;
        g->set_precision(g, KF_PREC_FP32);
        g->free(g, da), g->free(g, db), g->free(g, dc);
    }
    for (int i = 0; i < 3; i++) {
        int64_t bad = n_differ(c[0][i], c[1][i], M * N);
        printf("  batch-invariant matmul %s, %s: %lld of %lld elements differ from "
               "KF_CUDA_TC=0's\n",
               what, step[i], (long long)bad, (long long)(M * N));
        if (emulated() || !tc)
            T_EQ_INT(bad, 0,
                     "batch-invariant matmul %s, %s: got %lld elements differing from "
                     "KF_CUDA_TC=0's, want 0",
                     what, step[i], (long long)bad);
        free(c[0][i]), free(c[1][i]);
    }
    free(ha), free(hb);
}

static void test_bias(void) {
    int64_t rows = 300, cols = 77;
    buf2 y = mk_rand(rows * cols, 1), bias = mk_rand(cols, 1), db = mk_rand(cols, 1);
    BOTH(BE->add_bias(BE, PF(y), PF(bias), rows, cols));
    check_close("add_bias", &y, rows * cols, 1e-7);
    BOTH(BE->bias_grad(BE, PF(db), PF(y), rows, cols));
    check_close("bias_grad (accumulating)", &db, cols, 1e-6);
    drop(&y), drop(&bias), drop(&db);
}

/* Bitwise equality of the GPU's values of x and y (n floats each). */
static void check_gpu_same(const char *what, const buf2 *x, const buf2 *y, int64_t n) {
    float *a = down(x, 1), *c = down(y, 1);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &c[i], sizeof(float))) {
            if (first < 0) first = i;
            bad++;
        }
    T_EQ_INT(bad, 0,
             "%s: got %lld elements differing from the separate ops (first at %lld: %.9g "
             "vs %.9g), want 0",
             what, (long long)bad, (long long)first, first >= 0 ? a[first] : 0.0f,
             first >= 0 ? c[first] : 0.0f);
    free(a), free(c);
}

/* The linear layer's fused epilogue (linear_act) and the gradient through it
 * (linear_act_dgrad) at precision prec and invariant mode inv: against the
 * CPU, and bitwise against the GPU's own separate ops (matmul, add_bias,
 * gelu_fwd; matmul, gelu_bwd, bias_grad), which kernels.h says they equal.
 * 150 rows: bias partials over chunks of 64, 64 and 22. */
static void test_linear_act(kf_precision prec, int inv) {
    int64_t R = 150, in = 67, out = 45;
    kf_backend *g = be[1];
    BOTH(BE->set_precision(BE, prec));
    g->batch_invariant = inv;
    buf2 x = mk_rand(R * in, 1), w = mk_rand(out * in, 1), bias = mk_rand(out, 1);
    buf2 y = mk_rand(R * out, 1), pre = mk_rand(R * out, 1), y2 = mk_rand(R * out, 1),
         pre2 = mk_rand(R * out, 1);
    buf2 dy = mk_rand(R * out, 1), dpre = mk_rand(R * in, 1), dpre2 = mk_rand(R * in, 1),
         xpre = mk_rand(R * in, 2), db = mk_rand(in, 1), db2 = mk_rand(in, 1);
    float *hdb = down(&db, 0); /* the GPU's two dbias start equal */
    g->upload(g, db2.p[1], hdb, db.bytes);
    free(hdb);
    for (int act = KF_ACT_NONE; act <= KF_ACT_GELU_ERF; act++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            char wn[96];
            snprintf(wn, sizeof wn, "linear_act %s%s act=%d%s", kernels_precision_name(prec),
                     inv ? " inv" : "", act, with_bias ? " bias" : "");
            const float *bp = with_bias ? (float *)bias.p[1] : NULL;
            BOTH(BE->linear_act(BE, PF(y), NULL, act ? PF(pre) : NULL, PF(x), NULL, PF(w),
                                with_bias ? PF(bias) : NULL, R, in, out, (kf_act)act, 0.0f, NULL));
            check_close(wn, &y, R * out, tol_at(prec, 2e-6, 2e-3));
            /* the GPU's separate ops on the same inputs */
            float *t = act ? (float *)pre2.p[1] : (float *)y2.p[1];
            g->matmul(g, t, x.p[1], w.p[1], R, out, in, 0, 1, 1.0f, 0.0f);
            if (bp) g->add_bias(g, t, bp, R, out);
            if (act)
                g->gelu_fwd(g, (float *)y2.p[1], t, R * out,
                            act == KF_ACT_GELU_ERF ? KF_GELU_ERF : KF_GELU_TANH);
            check_gpu_same(wn, &y, &y2, R * out);
            if (act) {
                strcat(wn, " (pre)");
                check_close(wn, &pre, R * out, tol_at(prec, 2e-6, 2e-3));
                check_gpu_same(wn, &pre, &pre2, R * out);
            }
            snprintf(wn, sizeof wn, "linear_act_dgrad %s%s act=%d%s", kernels_precision_name(prec),
                     inv ? " inv" : "", act, with_bias ? " dbias" : "");
            BOTH(BE->linear_act_dgrad(BE, PF(dpre), NULL, with_bias ? PF(db) : NULL, PF(dy), PF(w),
                                      PF(xpre), R, in, out, (kf_act)act, NULL, NULL));
            check_close(wn, &dpre, R * in, tol_at(prec, 2e-6, 2e-3));
            g->matmul(g, (float *)dpre2.p[1], dy.p[1], w.p[1], R, in, out, 0, 0, 1.0f, 0.0f);
            if (act)
                g->gelu_bwd(g, (float *)dpre2.p[1], (float *)dpre2.p[1], (float *)xpre.p[1], R * in,
                            act == KF_ACT_GELU_ERF ? KF_GELU_ERF : KF_GELU_TANH);
            if (with_bias) g->bias_grad(g, (float *)db2.p[1], (float *)dpre2.p[1], R, in);
            check_gpu_same(wn, &dpre, &dpre2, R * in);
            if (with_bias) {
                strcat(wn, " (dbias)");
                check_close(wn, &db, in, tol_at(prec, 1e-5, 2e-3));
                check_gpu_same(wn, &db, &db2, in);
            }
        }
    g->batch_invariant = 0;
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&x), drop(&w), drop(&bias), drop(&y), drop(&pre), drop(&y2), drop(&pre2);
    drop(&dy), drop(&dpre), drop(&dpre2), drop(&xpre), drop(&db), drop(&db2);
}

/* A linear layer's backward (linear_bwd) at precision prec and invariant
 * mode inv, with and without dbias and dx, dx overwritten and accumulated:
 * against the CPU, and bitwise against the GPU's own separate ops (matmul,
 * bias_grad, matmul), which convert dy once each where linear_bwd converts
 * it once for both. 300 rows: bias partials over chunks of 64 (the last 44),
 * and a weight-gradient product the emulated cuBLAS splits over k. */
static void test_linear_bwd(kf_precision prec, int inv) {
    int64_t R = 300, in = 67, out = 45;
    kf_backend *g = be[1];
    BOTH(BE->set_precision(BE, prec));
    g->batch_invariant = inv;
    buf2 dy = mk_rand(R * out, 1), x = mk_rand(R * in, 1), w = mk_rand(out * in, 1);
    for (int with_bias = 0; with_bias < 2; with_bias++)
        for (int dx_mode = 0; dx_mode < 3; dx_mode++) { /* none, beta 0, beta 1 */
            buf2 dw = mk_rand(out * in, 1), db = mk_rand(out, 1), dx = mk_rand(R * in, 1);
            /* the separate ops' outputs start as the op's do */
            buf2 dw2 = mk_copy(&dw), db2 = mk_copy(&db), dx2 = mk_copy(&dx);
            float beta = dx_mode == 2 ? 1.0f : 0.0f;
            char wn[96];
            snprintf(wn, sizeof wn, "linear_bwd %s%s%s%s", kernels_precision_name(prec),
                     inv ? " inv" : "", with_bias ? " dbias" : "",
                     dx_mode == 0   ? ""
                     : dx_mode == 1 ? " dx"
                                    : " dx+=");
            BOTH(BE->linear_bwd(BE, dx_mode ? PF(dx) : NULL, PF(dw), with_bias ? PF(db) : NULL,
                                PF(dy), NULL, PF(x), NULL, PF(w), R, in, out, beta, NULL, NULL));
            g->matmul(g, (float *)dw2.p[1], dy.p[1], x.p[1], out, in, R, 1, 0, 1.0f, 1.0f);
            if (with_bias) g->bias_grad(g, (float *)db2.p[1], (float *)dy.p[1], R, out);
            if (dx_mode)
                g->matmul(g, (float *)dx2.p[1], dy.p[1], w.p[1], R, in, out, 0, 0, 1.0f, beta);
            char part[128];
            snprintf(part, sizeof part, "%s (dw)", wn);
            check_close(part, &dw, out * in, tol_at(prec, 2e-6, 2e-3));
            check_gpu_same(part, &dw, &dw2, out * in);
            snprintf(part, sizeof part, "%s (dbias)", wn);
            check_close(part, &db, out, tol_at(prec, 1e-5, 2e-3));
            check_gpu_same(part, &db, &db2, out);
            snprintf(part, sizeof part, "%s (dx)", wn);
            check_close(part, &dx, R * in, tol_at(prec, 2e-6, 2e-3));
            check_gpu_same(part, &dx, &dx2, R * in);
            drop(&dw), drop(&db), drop(&dx), drop(&dw2), drop(&db2), drop(&dx2);
        }
    g->batch_invariant = 0;
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&dy), drop(&x), drop(&w);
}

/* The 16-bit copy c (n values, side `side`) holds exactly the fp32 values of
 * x on side xside, rounded to prec. */
static void check_copy16(const char *what, const buf2 *c, int side, const buf2 *x, int xside,
                         int64_t n, kf_precision prec) {
    float *xf = down(x, xside);
    uint16_t *want = tu_to16(xf, n, prec), *got = down(c, side);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (first < 0) first = i;
            bad++;
        }
    T_EQ_INT(bad, 0,
             "%s: got %lld values differing from the rounded fp32 output (first at %lld: "
             "0x%04x, want 0x%04x), want 0",
             what, (long long)bad, (long long)first, first >= 0 ? got[first] : 0,
             first >= 0 ? want[first] : 0);
    printf("  %-44s %s\n", what, bad ? "DIFFERENT" : "identical");
    free(xf), free(want), free(got);
}

/* 16-bit copies (kernels.h) at precision prec and invariant mode inv: a copy
 * written by layernorm_fwd and linear_act holds their fp32 output rounded,
 * with or without that output; linear_act and linear_bwd reading a copy of x
 * made from x give bitwise the GPU's separate ops on x (the conversion they
 * skip made the same values), as do linear_bwd on a copy of dy and
 * linear_act_dgrad writing its output as a copy (dbias from the fp32
 * values); beta 1 adds the layer to y as matmul does.
 * Both backends; the CPU's copies against its own fp32 outputs too. */
static void test_copies16(kf_precision prec, int inv) {
    int64_t R = 150, in = 67, out = 45;
    kf_backend *g = be[1];
    BOTH(BE->set_precision(BE, prec));
    g->batch_invariant = inv;
    char wn[128];
    const char *pn = kernels_precision_name(prec), *iv = inv ? " inv" : "";
    /* layernorm_fwd */
    buf2 x = mk_rand(R * in, 2), lw = mk_rand(in, 1), mean = mk_rand(R, 1), rstd = mk_rand(R, 1);
    buf2 ln = mk_rand(R * in, 1), ln16 = mk(NULL, (size_t)(R * in) * 2),
         ln16b = mk(NULL, (size_t)(R * in) * 2);
    BOTH(BE->layernorm_fwd(BE, PF(ln), P(ln16), PF(mean), PF(rstd), PF(x), PF(lw), NULL, R, in,
                           1e-5f));
    BOTH(BE->layernorm_fwd(BE, NULL, P(ln16b), PF(mean), PF(rstd), PF(x), PF(lw), NULL, R, in,
                           1e-5f));
    for (int side = 0; side < 2; side++) {
        snprintf(wn, sizeof wn, "layernorm_fwd y16 %s%s (%s)", pn, iv, side ? "cuda" : "cpu");
        check_copy16(wn, &ln16, side, &ln, side, R * in, prec);
        strcat(wn, " alone");
        check_copy16(wn, &ln16b, side, &ln, side, R * in, prec);
    }
    /* linear_act on x16 made from x, writing y16 */
    buf2 x16 = mk16(&x, R * in, prec);
    buf2 w = mk_rand(out * in, 1), bias = mk_rand(out, 1), y = mk_rand(R * out, 1),
         pre = mk_rand(R * out, 1), y16 = mk(NULL, (size_t)(R * out) * 2),
         y16b = mk(NULL, (size_t)(R * out) * 2), y2 = mk_rand(R * out, 1),
         pre2 = mk_rand(R * out, 1);
    for (int act = KF_ACT_NONE; act <= KF_ACT_GELU_TANH; act++) {
        snprintf(wn, sizeof wn, "linear_act x16 y16 %s%s act=%d", pn, iv, act);
        BOTH(BE->linear_act(BE, PF(y), P(y16), act ? PF(pre) : NULL, NULL, P(x16), PF(w), PF(bias),
                            R, in, out, (kf_act)act, 0.0f, NULL));
        BOTH(BE->linear_act(BE, NULL, P(y16b), act ? PF(pre) : NULL, NULL, P(x16), PF(w), PF(bias),
                            R, in, out, (kf_act)act, 0.0f, NULL));
        check_close(wn, &y, R * out, tol_at(prec, 2e-6, 2e-3));
        float *t = act ? (float *)pre2.p[1] : (float *)y2.p[1];
        g->matmul(g, t, x.p[1], w.p[1], R, out, in, 0, 1, 1.0f, 0.0f);
        g->add_bias(g, t, (float *)bias.p[1], R, out);
        if (act) g->gelu_fwd(g, (float *)y2.p[1], t, R * out, KF_GELU_TANH);
        check_gpu_same(wn, &y, &y2, R * out);
        for (int side = 0; side < 2; side++) {
            char c[160];
            snprintf(c, sizeof c, "%s (y16, %s)", wn, side ? "cuda" : "cpu");
            check_copy16(c, &y16, side, &y, side, R * out, prec);
            strcat(c, " alone");
            check_copy16(c, &y16b, side, &y, side, R * out, prec);
        }
    }
    /* beta 1: the layer added to y (the residual stream), x16 read; with
     * and without a bias (then the epilogue only rounds the sum) */
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        snprintf(wn, sizeof wn, "linear_act x16 +C %s%s%s", pn, iv, with_bias ? " bias" : "");
        float *hy = down(&y, 1);
        g->upload(g, y2.p[1], hy, y.bytes);
        free(hy);
        BOTH(BE->linear_act(BE, PF(y), NULL, NULL, NULL, P(x16), PF(w), with_bias ? PF(bias) : NULL,
                            R, in, out, KF_ACT_NONE, 1.0f, NULL));
        g->matmul(g, (float *)y2.p[1], x.p[1], w.p[1], R, out, in, 0, 1, 1.0f, 1.0f);
        if (with_bias) g->add_bias(g, (float *)y2.p[1], (float *)bias.p[1], R, out);
        check_gpu_same(wn, &y, &y2, R * out);
        check_close(wn, &y, R * out, tol_at(prec, 2e-6, 2e-3));
    }
    /* linear_bwd on x16 */
    buf2 dy = mk_rand(R * out, 1), dw = mk_rand(out * in, 1), db = mk_rand(out, 1),
         dx = mk_rand(R * in, 1);
    buf2 dw2 = mk_copy(&dw), db2 = mk_copy(&db);
    snprintf(wn, sizeof wn, "linear_bwd x16 %s%s", pn, iv);
    BOTH(BE->linear_bwd(BE, PF(dx), PF(dw), PF(db), PF(dy), NULL, NULL, P(x16), PF(w), R, in, out,
                        0.0f, NULL, NULL));
    g->matmul(g, (float *)dw2.p[1], dy.p[1], x.p[1], out, in, R, 1, 0, 1.0f, 1.0f);
    g->bias_grad(g, (float *)db2.p[1], (float *)dy.p[1], R, out);
    char c[160];
    snprintf(c, sizeof c, "%s (dw)", wn);
    check_close(c, &dw, out * in, tol_at(prec, 2e-6, 2e-3));
    check_gpu_same(c, &dw, &dw2, out * in);
    snprintf(c, sizeof c, "%s (dbias)", wn);
    check_gpu_same(c, &db, &db2, out);
    /* linear_bwd on dy16 made from dy (no bias gradient) */
    buf2 dy16 = mk16(&dy, R * out, prec), dx2 = mk_copy(&dx);
    snprintf(wn, sizeof wn, "linear_bwd dy16 %s%s", pn, iv);
    BOTH(BE->linear_bwd(BE, PF(dx), PF(dw), NULL, NULL, P(dy16), PF(x), NULL, PF(w), R, in, out,
                        0.0f, NULL, NULL));
    g->matmul(g, (float *)dw2.p[1], dy.p[1], x.p[1], out, in, R, 1, 0, 1.0f, 1.0f);
    g->matmul(g, (float *)dx2.p[1], dy.p[1], w.p[1], R, in, out, 0, 0, 1.0f, 0.0f);
    snprintf(c, sizeof c, "%s (dw)", wn);
    check_gpu_same(c, &dw, &dw2, out * in);
    snprintf(c, sizeof c, "%s (dx)", wn);
    check_close(c, &dx, R * in, tol_at(prec, 2e-6, 2e-3));
    check_gpu_same(c, &dx, &dx2, R * in);
    /* linear_act_dgrad writing dpre16 (the layer below's dy), with dbias */
    buf2 dp16 = mk(NULL, (size_t)(R * in) * 2), dp16b = mk(NULL, (size_t)(R * in) * 2),
         dbi = mk_rand(in, 1), dbi2 = mk_copy(&dbi), dbi3 = mk_copy(&dbi);
    snprintf(wn, sizeof wn, "linear_act_dgrad dpre16 %s%s", pn, iv);
    BOTH(BE->linear_act_dgrad(BE, PF(dx), P(dp16), PF(dbi), PF(dy), PF(w), PF(x), R, in, out,
                              KF_ACT_GELU_TANH, NULL, NULL));
    BOTH(BE->linear_act_dgrad(BE, NULL, P(dp16b), PF(dbi3), PF(dy), PF(w), PF(x), R, in, out,
                              KF_ACT_GELU_TANH, NULL, NULL));
    g->matmul(g, (float *)dx2.p[1], dy.p[1], w.p[1], R, in, out, 0, 0, 1.0f, 0.0f);
    g->gelu_bwd(g, (float *)dx2.p[1], (float *)dx2.p[1], (float *)x.p[1], R * in, KF_GELU_TANH);
    g->bias_grad(g, (float *)dbi2.p[1], (float *)dx2.p[1], R, in);
    check_gpu_same(wn, &dx, &dx2, R * in);
    snprintf(c, sizeof c, "%s (dbias)", wn);
    check_gpu_same(c, &dbi, &dbi2, in);
    strcat(c, " alone");
    check_gpu_same(c, &dbi3, &dbi2, in);
    for (int side = 0; side < 2; side++) {
        snprintf(c, sizeof c, "%s (dpre16, %s)", wn, side ? "cuda" : "cpu");
        check_copy16(c, &dp16, side, &dx, side, R * in, prec);
        strcat(c, " alone");
        check_copy16(c, &dp16b, side, &dx, side, R * in, prec);
    }
    /* linear_bwd writing dx16 (attn_out's, the attention's dout), with and
     * without dx: dx as the separate matmul gives it, rounded */
    buf2 dx16 = mk(NULL, (size_t)(R * in) * 2), dx16b = mk(NULL, (size_t)(R * in) * 2);
    snprintf(wn, sizeof wn, "linear_bwd dx16 %s%s", pn, iv);
    BOTH(BE->linear_bwd(BE, PF(dx), PF(dw), PF(db), PF(dy), NULL, PF(x), NULL, PF(w), R, in, out,
                        0.0f, NULL, P(dx16)));
    BOTH(BE->linear_bwd(BE, NULL, PF(dw), PF(db), PF(dy), NULL, PF(x), NULL, PF(w), R, in, out,
                        0.0f, NULL, P(dx16b)));
    g->matmul(g, (float *)dx2.p[1], dy.p[1], w.p[1], R, in, out, 0, 0, 1.0f, 0.0f);
    check_gpu_same(wn, &dx, &dx2, R * in);
    for (int side = 0; side < 2; side++) { /* each side's copies against its own dx */
        snprintf(c, sizeof c, "%s (%s)", wn, side ? "cuda" : "cpu");
        check_copy16(c, &dx16, side, &dx, side, R * in, prec);
        strcat(c, " alone");
        check_copy16(c, &dx16b, side, &dx, side, R * in, prec);
    }
    drop(&dx16), drop(&dx16b);
    /* linear_act_dgrad reading dy16 made from dy (the residual stream's
     * copy, layernorm_bwd's dx16), with dbias; the fp32 dy given is another
     * matrix (x), which the op must not read */
    buf2 dbd = mk_rand(in, 1), dbd2 = mk_copy(&dbd);
    snprintf(wn, sizeof wn, "linear_act_dgrad dy16 %s%s", pn, iv);
    BOTH(BE->linear_act_dgrad(BE, PF(dx), NULL, PF(dbd), PF(x), PF(w), PF(x), R, in, out,
                              KF_ACT_GELU_TANH, NULL, P(dy16)));
    g->linear_act_dgrad(g, (float *)dx2.p[1], NULL, (float *)dbd2.p[1], (float *)dy.p[1],
                        (float *)w.p[1], (float *)x.p[1], R, in, out, KF_ACT_GELU_TANH, NULL, NULL);
    check_close(wn, &dx, R * in, tol_at(prec, 2e-6, 2e-3));
    check_gpu_same(wn, &dx, &dx2, R * in);
    snprintf(c, sizeof c, "%s (dbias)", wn);
    check_gpu_same(c, &dbd, &dbd2, in);
    drop(&dbd), drop(&dbd2);
    drop(&dy16), drop(&dx2), drop(&dp16), drop(&dp16b), drop(&dbi), drop(&dbi2), drop(&dbi3);
    g->batch_invariant = 0;
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&x), drop(&lw), drop(&mean), drop(&rstd), drop(&ln), drop(&ln16), drop(&ln16b);
    drop(&x16), drop(&w), drop(&bias), drop(&y), drop(&pre), drop(&y16), drop(&y16b), drop(&y2);
    drop(&pre2), drop(&dy), drop(&dw), drop(&db), drop(&dx), drop(&dw2), drop(&db2);
}

/* One of the ops that read a weight, with W w and its 16-bit copy w16 (NULL:
 * none), on side `side`: 0 linear_act (GELU), 1 linear_act adding to o
 * (beta 1), 2 linear_act_dgrad, 3 linear_bwd's dx; the output in o. */
static void w16_op(int op, int side_, buf2 *o, buf2 *pre, const buf2 *x, const buf2 *w,
                   const void *w16, const buf2 *bias, const buf2 *dy, buf2 *dw, int64_t R,
                   int64_t in, int64_t out) {
    kf_backend *BE = be[side_];
    if (op == 0)
        BE->linear_act(BE, PF(*o), NULL, PF(*pre), PF(*x), NULL, PF(*w), PF(*bias), R, in, out,
                       KF_ACT_GELU_TANH, 0.0f, w16);
    else if (op == 1)
        BE->linear_act(BE, PF(*o), NULL, NULL, PF(*x), NULL, PF(*w), PF(*bias), R, in, out,
                       KF_ACT_NONE, 1.0f, w16);
    else if (op == 2)
        BE->linear_act_dgrad(BE, PF(*o), NULL, NULL, PF(*dy), PF(*w), PF(*x), R, in, out,
                             KF_ACT_GELU_TANH, w16, NULL);
    else
        BE->linear_bwd(BE, PF(*o), PF(*dw), NULL, PF(*dy), NULL, PF(*x), NULL, PF(*w), R, in, out,
                       0.0f, w16, NULL);
}

/* The weights' 16-bit copy (w16) at precision prec and invariant mode inv:
 * copy_to16 writes W rounded (both backends), and each op that reads a
 * weight gives bitwise, on the GPU, its results without the copy (and the
 * CPU's within tolerance). The GPU reads the copy in place of converting
 * W (cuBLAS, and in batch-invariant mode the tensor-core kernel; its SIMT
 * fallback reads the fp32 W): given the copy of another matrix W2, an op
 * gives its results on W2. */
static void test_weights16(kf_precision prec, int inv) {
    static const char *ops[] = {"linear_act gelu", "linear_act +C", "linear_act_dgrad dgelu",
                                "linear_bwd dx"};
    int64_t R = 150, in = 67, out = 45;
    kf_backend *g = be[1];
    BOTH(BE->set_precision(BE, prec));
    g->batch_invariant = inv;
    char wn[128];
    const char *pn = kernels_precision_name(prec), *iv = inv ? " inv" : "";
    buf2 x = mk_rand(R * in, 2), w = mk_rand(out * in, 1), w2 = mk_rand(out * in, 1),
         bias = mk_rand(out, 1), dy = mk_rand(R * out, 1), dw = mk_rand(out * in, 1),
         pre = mk_rand(R * out, 1), w16 = mk(NULL, (size_t)(out * in) * 2);
    BOTH(BE->copy_to16(BE, P(w16), PF(w), out * in));
    for (int side = 0; side < 2; side++) {
        snprintf(wn, sizeof wn, "copy_to16 %s%s (%s)", pn, iv, side ? "cuda" : "cpu");
        check_copy16(wn, &w16, side, &w, side, out * in, prec);
    }
    for (int op = 0; op < 4; op++) {
        int64_t n = op < 2 ? R * out : R * in;
        buf2 o = mk_rand(n, 1), o2 = mk_copy(&o);
        snprintf(wn, sizeof wn, "%s w16 %s%s", ops[op], pn, iv);
        for (int side = 0; side < 2; side++)
            w16_op(op, side, &o, &pre, &x, &w, w16.p[side], &bias, &dy, &dw, R, in, out);
        check_close(wn, &o, n, tol_at(prec, 2e-6, 2e-3));
        w16_op(op, 1, &o2, &pre, &x, &w, NULL, &bias, &dy, &dw, R, in, out);
        check_gpu_same(wn, &o, &o2, n);
        drop(&o), drop(&o2);
    }
    g->copy_to16(g, w16.p[1], (const float *)w2.p[1], out * in);
    for (int op = 0; op < 4; op++) {
        int64_t n = op < 2 ? R * out : R * in;
        buf2 o = mk_rand(n, 1), o2 = mk_copy(&o);
        snprintf(wn, sizeof wn, "%s w16 of W2 %s%s", ops[op], pn, iv);
        w16_op(op, 1, &o, &pre, &x, &w, w16.p[1], &bias, &dy, &dw, R, in, out);
        w16_op(op, 1, &o2, &pre, &x, &w2, NULL, &bias, &dy, &dw, R, in, out);
        check_gpu_same(wn, &o, &o2, n);
        drop(&o), drop(&o2);
    }
    g->batch_invariant = 0;
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&x), drop(&w), drop(&w2), drop(&bias), drop(&dy), drop(&dw), drop(&pre), drop(&w16);
}

/* A GPU buffer of n random values rounded to prec (r) and their 16-bit copy
 * (c), both from the host. */
static void gpu_rounded(kf_backend *g, int64_t n, kf_precision prec, float **r, void **c) {
    float *h = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = nrand();
    uint16_t *h16 = tu_to16(h, n, prec);
    for (int64_t i = 0; i < n; i++) h[i] = prec == KF_PREC_FP16 ? tu_fp16(h[i]) : tu_bf16(h[i]);
    *r = g->alloc(g, (size_t)n * 4), *c = g->alloc(g, (size_t)n * 2);
    g->upload(g, *r, h, (size_t)n * 4);
    g->upload(g, *c, h16, (size_t)n * 2);
    free(h), free(h16);
}

/* The check, named "who: what", that n floats at g's device pointers a and
 * b are bitwise equal. */
static void check_dev_same(kf_backend *g, const char *who, const char *what, const float *a,
                           const float *b, int64_t n) {
    float *ha = malloc((size_t)n * 4), *hb = malloc((size_t)n * 4);
    g->download(g, ha, a, (size_t)n * 4);
    g->download(g, hb, b, (size_t)n * 4);
    int64_t bad = n_differ(ha, hb, n);
    T_EQ_INT(bad, 0, "%s: %s: got %lld of %lld elements differing, want 0", who, what,
             (long long)bad, (long long)n);
    free(ha), free(hb);
}

/* The batch-invariant products reading 16-bit copies as they are (the
 * tensor-core kernel, cuda_gemm.cu): linear_act on x16 and w16,
 * linear_act_dgrad on dy16 and w16, linear_bwd on dy16, x16 and w16 give
 * bitwise their results on the fp32 values of the copies (which the kernel
 * rounds as it packs them), each product on the tensor cores; and a row
 * alone gives bitwise its row in the batch. At in 67, out 45 the copies are
 * staged by plain loads, at 64 and 48 by cp.async. */
static void test_gemm_copies(kf_precision prec) {
    kf_backend *g = be[1];
    const char *pn = kernels_precision_name(prec);
    g->set_precision(g, prec);
    g->batch_invariant = 1;
    const int64_t R = 150, sizes[2][2] = {{67, 45}, {64, 48}};
    for (int sz = 0; sz < 2; sz++) {
        int64_t in = sizes[sz][0], out = sizes[sz][1];
        char who[64];
        snprintf(who, sizeof who, "copies %s in=%lld", pn, (long long)in);
        float *x, *w, *dy, *y[2], *dx[2], *dw[2];
        void *x16, *w16, *dy16;
        gpu_rounded(g, R * in, prec, &x, &x16);
        gpu_rounded(g, out * in, prec, &w, &w16);
        gpu_rounded(g, R * out, prec, &dy, &dy16);
        for (int p = 0; p < 2; p++) {
            y[p] = g->alloc(g, (size_t)(R * out) * 4);
            dx[p] = g->alloc(g, (size_t)(R * in) * 4);
            dw[p] = g->alloc(g, (size_t)(out * in) * 4);
            g->zero(g, dw[p], (size_t)(out * in) * 4);
        }
        /* p 0: the copies, 1: the fp32 values */
        int64_t n0 = tc_launches(g, KF_CUDA_TC_GEMM);
        g->linear_act(g, y[0], NULL, NULL, NULL, x16, w, NULL, R, in, out, KF_ACT_NONE, 0.0f, w16);
        g->linear_act(g, y[1], NULL, NULL, x, NULL, w, NULL, R, in, out, KF_ACT_NONE, 0.0f, NULL);
        g->linear_act_dgrad(g, dx[0], NULL, NULL, NULL, w, NULL, R, in, out, KF_ACT_NONE, w16,
                            dy16);
        g->linear_act_dgrad(g, dx[1], NULL, NULL, dy, w, NULL, R, in, out, KF_ACT_NONE, NULL, NULL);
        check_dev_same(g, who, "linear_act x16 w16 vs fp32", y[0], y[1], R * out);
        check_dev_same(g, who, "linear_act_dgrad dy16 w16 vs fp32", dx[0], dx[1], R * in);
        g->linear_bwd(g, dx[0], dw[0], NULL, NULL, dy16, NULL, x16, w, R, in, out, 0.0f, w16, NULL);
        g->linear_bwd(g, dx[1], dw[1], NULL, dy, NULL, x, NULL, w, R, in, out, 0.0f, NULL, NULL);
        check_dev_same(g, who, "linear_bwd dw from dy16 x16 vs fp32", dw[0], dw[1], out * in);
        check_dev_same(g, who, "linear_bwd dx from dy16 w16 vs fp32", dx[0], dx[1], R * in);
        if (tc_launches(g, KF_CUDA_TC_GEMM) >= 0)
            T_EQ_INT(tc_launches(g, KF_CUDA_TC_GEMM) - n0, 8,
                     "copies %s in=%lld: tensor-core launches of the 8 products", pn,
                     (long long)in);
        /* row 0 alone (the copies from row 0 of the batch's) */
        g->linear_act(g, y[1], NULL, NULL, NULL, x16, w, NULL, 1, in, out, KF_ACT_NONE, 0.0f, w16);
        check_dev_same(g, who, "linear_act x16 w16, a row alone vs in the batch", y[0], y[1], out);
        for (int p = 0; p < 2; p++) g->free(g, y[p]), g->free(g, dx[p]), g->free(g, dw[p]);
        g->free(g, x), g->free(g, w), g->free(g, dy);
        g->free(g, x16), g->free(g, w16), g->free(g, dy16);
    }
    g->batch_invariant = 0;
    g->set_precision(g, KF_PREC_FP32);
}

/* 150 rows: chunks of 64, 64 and 22 for the weight gradient's partials;
 * 300 columns: two blocks of columns there, and more columns than threads
 * in the per-row kernels */
static void test_layernorm(int with_bias) {
    int64_t rows = 150, cols = 300;
    buf2 x = mk_rand(rows * cols, 2), w = mk_rand(cols, 1), bias = mk_rand(cols, 1);
    buf2 y = mk_rand(rows * cols, 1), mean = mk_rand(rows, 1), rstd = mk_rand(rows, 1);
    buf2 dy = mk_rand(rows * cols, 1), dx = mk_rand(rows * cols, 1), dw = mk_rand(cols, 1),
         db = mk_rand(cols, 1);
    BOTH(BE->layernorm_fwd(BE, PF(y), NULL, PF(mean), PF(rstd), PF(x), PF(w),
                           with_bias ? PF(bias) : NULL, rows, cols, 1e-5f));
    check_close(with_bias ? "layernorm_fwd y (bias)" : "layernorm_fwd y", &y, rows * cols, 1e-6);
    check_close("layernorm_fwd mean", &mean, rows, 1e-6);
    check_close("layernorm_fwd rstd", &rstd, rows, 1e-6);
    BOTH(BE->layernorm_bwd(BE, PF(dx), PF(dw), with_bias ? PF(db) : NULL, PF(dy), PF(x), PF(w),
                           PF(mean), PF(rstd), rows, cols, NULL));
    check_close("layernorm_bwd dx", &dx, rows * cols, 1e-5);
    check_close("layernorm_bwd dw", &dw, cols, 1e-5);
    if (with_bias) check_close("layernorm_bwd dbias", &db, cols, 1e-6);
    /* dx16: the sum dx rounded, dx itself as without the copy (dx2 from the
     * GPU's same start) */
    kf_backend *g = be[1];
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++) {
        BOTH(BE->set_precision(BE, (kf_precision)prec));
        char wn[96];
        snprintf(wn, sizeof wn, "layernorm_bwd dx16 %s%s",
                 kernels_precision_name((kf_precision)prec), with_bias ? " (bias)" : "");
        buf2 dx2 = mk_copy(&dx), dw2 = mk_copy(&dw), dx16 = mk(NULL, (size_t)(rows * cols) * 2);
        float *hdx = down(&dx, 1);
        g->upload(g, dx2.p[1], hdx, dx.bytes);
        free(hdx);
        BOTH(BE->layernorm_bwd(BE, PF(dx), PF(dw), NULL, PF(dy), PF(x), PF(w), PF(mean), PF(rstd),
                               rows, cols, P(dx16)));
        g->layernorm_bwd(g, (float *)dx2.p[1], (float *)dw2.p[1], NULL, (float *)dy.p[1],
                         (float *)x.p[1], (float *)w.p[1], (float *)mean.p[1], (float *)rstd.p[1],
                         rows, cols, NULL);
        check_gpu_same(wn, &dx, &dx2, rows * cols);
        for (int side = 0; side < 2; side++) {
            char c[128];
            snprintf(c, sizeof c, "%s (%s)", wn, side ? "cuda" : "cpu");
            check_copy16(c, &dx16, side, &dx, side, rows * cols, (kf_precision)prec);
        }
        drop(&dx2), drop(&dw2), drop(&dx16);
    }
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&x), drop(&w), drop(&bias), drop(&y), drop(&mean), drop(&rstd), drop(&dy), drop(&dx),
        drop(&dw), drop(&db);
}

/* Positions first .. first + 49: inside the CUDA backend's table of rotation
 * factors (first = 0), or around its end at 4096, past which it computes
 * them per element (first = 4070). */
static void rope_case(const char *what, int32_t first) {
    int64_t B = 2, L = 37, nh = 3, D = 64, H = nh * D;
    int32_t pos[37];
    for (int i = 0; i < L; i++) pos[i] = first + (i * 7) % 50;
    buf2 p = mk_ints(pos, L), x = mk_rand(B * L * 3 * H, 1);
    char name[64];
    snprintf(name, sizeof name, "rope_fwd%s", what);
    BOTH(BE->rope_fwd(BE, PF(x), PI(p), B, L, nh, D, 10000.0f, NULL));
    check_close(name, &x, B * L * 3 * H, 1e-6);
    snprintf(name, sizeof name, "rope_bwd%s", what);
    BOTH(BE->rope_bwd(BE, PF(x), PI(p), B, L, nh, D, 10000.0f, NULL));
    check_close(name, &x, B * L * 3 * H, 1e-6);
    /* the 16-bit copy of the result (the attention's operands, qkv's dy16):
     * the fp32 result unchanged, the copy that result rounded; and the copy
     * rotated in place (no fp32 qkv) */
    kf_backend *g = be[1];
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++)
        for (int dir = 0; dir < 2; dir++) {
            BOTH(BE->set_precision(BE, (kf_precision)prec));
            float *hx = down(&x, 1); /* the GPU's input, for its separate op */
            buf2 x2 = mk(hx, x.bytes), c16 = mk(NULL, (size_t)(B * L * 3 * H) * 2);
            free(hx);
            char w[96];
            snprintf(w, sizeof w, "rope_%s%s %s +y16", dir ? "bwd" : "fwd", what,
                     kernels_precision_name((kf_precision)prec));
            if (dir) {
                BOTH(BE->rope_bwd(BE, PF(x), PI(p), B, L, nh, D, 10000.0f, P(c16)));
                g->rope_bwd(g, (float *)x2.p[1], (int32_t *)p.p[1], B, L, nh, D, 10000.0f, NULL);
            } else {
                BOTH(BE->rope_fwd(BE, PF(x), PI(p), B, L, nh, D, 10000.0f, P(c16)));
                g->rope_fwd(g, (float *)x2.p[1], (int32_t *)p.p[1], B, L, nh, D, 10000.0f, NULL);
            }
            check_gpu_same(w, &x, &x2, B * L * 3 * H);
            for (int side = 0; side < 2; side++) {
                char c[128];
                snprintf(c, sizeof c, "%s (%s)", w, side ? "cuda" : "cpu");
                check_copy16(c, &c16, side, &x, side, B * L * 3 * H, (kf_precision)prec);
            }
            /* the copy alone (qkv NULL), rotated in place: on each side the
             * copy of the rotation of its values (r, x rounded) */
            BOTH(BE->copy(BE, P(x2), P(x), x.bytes));
            BOTH(BE->round_lowp(BE, PF(x2), B * L * 3 * H));
            BOTH(BE->copy_to16(BE, P(c16), PF(x2), B * L * 3 * H));
            if (dir) {
                BOTH(BE->rope_bwd(BE, NULL, PI(p), B, L, nh, D, 10000.0f, P(c16)));
                BOTH(BE->rope_bwd(BE, PF(x2), PI(p), B, L, nh, D, 10000.0f, NULL));
            } else {
                BOTH(BE->rope_fwd(BE, NULL, PI(p), B, L, nh, D, 10000.0f, P(c16)));
                BOTH(BE->rope_fwd(BE, PF(x2), PI(p), B, L, nh, D, 10000.0f, NULL));
            }
            for (int side = 0; side < 2; side++) {
                char c[128];
                snprintf(c, sizeof c, "%s in place (%s)", w, side ? "cuda" : "cpu");
                check_copy16(c, &c16, side, &x2, side, B * L * 3 * H, (kf_precision)prec);
            }
            drop(&x2), drop(&c16);
        }
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&p), drop(&x);
}

static void test_rope(void) {
    rope_case("", 0);
    rope_case(" (positions 4070..4119)", 4070);
}

/* ---- attention ---- */

/* The attention's 16-bit copies on the GPU at precision prec (set): attn_fwd
 * reading qkv16 = qkv rounded gives bitwise out and lse of qkv, and writes
 * out16 (with or without out) = that out rounded in the query rows;
 * attn_bwd reading dout16, out16 and qkv16 gives bitwise the dqkv of dout,
 * out and qkv (the conversions they skip make the same values), and writes
 * dqkv16 (with or without dqkv) = that dqkv rounded. */
static void attn_copies16(const char *name, const kf_mask *m, int64_t B, int64_t nh, int64_t D,
                          kf_precision prec, const buf2 *qkv, const buf2 *out, const buf2 *lse,
                          const buf2 *dout) {
    kf_backend *g = be[1];
    int64_t L = kf_mask_len(m), H = nh * D, nq = (L - m->q_start) * H;
    float *hq = down(qkv, 1), *hd = down(dout, 1);
    uint16_t *q16h = tu_to16(hq, B * L * 3 * H, prec), *d16h = tu_to16(hd, B * L * H, prec);
    buf2 q16 = mk(q16h, (size_t)(B * L * 3 * H) * 2), d16 = mk(d16h, (size_t)(B * L * H) * 2);
    free(hq), free(hd), free(q16h), free(d16h);
    buf2 o1 = mk_copy(out), o2 = mk_copy(out), l1 = mk_copy(lse), l2 = mk_copy(lse);
    buf2 o16 = mk(NULL, (size_t)(B * L * H) * 2), o16b = mk(NULL, (size_t)(B * L * H) * 2);
    char w[160];
    snprintf(w, sizeof w, "attn_fwd %s qkv16 +y16", name);
    g->attn_fwd(g, o1.p[1], l1.p[1], NULL, m, B, nh, D, q16.p[1], o16.p[1]);
    g->attn_fwd(g, NULL, l1.p[1], NULL, m, B, nh, D, q16.p[1], o16b.p[1]);
    g->attn_fwd(g, o2.p[1], l2.p[1], qkv->p[1], m, B, nh, D, NULL, NULL);
    uint16_t *c16 = down(&o16, 1), *c16b = down(&o16b, 1);
    float *f = down(&o2, 1);
    uint16_t *want = tu_to16(f, B * L * H, prec);
    int64_t bad = 0, bad_b = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t r0 = (b * L + m->q_start) * H;
        for (int64_t i = r0; i < r0 + nq; i++)
            bad += c16[i] != want[i], bad_b += c16b[i] != want[i];
    }
    printf("  %-44s %lld, %lld of out16 differ\n", w, (long long)bad, (long long)bad_b);
    T_EQ_INT(bad, 0, "%s: got %lld values of out16 differing from out rounded, want 0", w,
             (long long)bad);
    T_EQ_INT(bad_b, 0, "%s (without out): got %lld values differing, want 0", w, (long long)bad_b);
    float *a = down(&o1, 1);
    int64_t badf = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t r0 = (b * L + m->q_start) * H;
        badf += memcmp(a + r0, f + r0, (size_t)nq * 4) != 0;
    }
    T_EQ_INT(badf, 0, "%s: out of qkv16 differs from out of qkv in %lld samples, want 0", w,
             (long long)badf);
    check_gpu_same(w, &l1, &l2, B * nh * L);
    free(a), free(f), free(c16), free(c16b);
    /* the backward on the copies, out16 the forward's */
    buf2 o16w = mk(want, (size_t)(B * L * H) * 2), g1 = mk_rand(B * L * 3 * H, 1),
         g2 = mk_rand(B * L * 3 * H, 1);
    free(want);
    snprintf(w, sizeof w, "attn_bwd %s dout16 out16 qkv16", name);
    g->attn_bwd(g, g1.p[1], NULL, NULL, l2.p[1], NULL, m, B, nh, D, d16.p[1], o16w.p[1], q16.p[1],
                NULL);
    g->attn_bwd(g, g2.p[1], dout->p[1], o2.p[1], l2.p[1], qkv->p[1], m, B, nh, D, NULL, NULL, NULL,
                NULL);
    check_gpu_same(w, &g1, &g2, B * L * 3 * H);
    /* ... and its dqkv16 beside dqkv, then alone: g2 rounded */
    buf2 dq16a = mk(NULL, (size_t)(B * L * 3 * H) * 2),
         dq16b = mk(NULL, (size_t)(B * L * 3 * H) * 2);
    g->attn_bwd(g, g1.p[1], NULL, NULL, l2.p[1], NULL, m, B, nh, D, d16.p[1], o16w.p[1], q16.p[1],
                dq16a.p[1]);
    snprintf(w, sizeof w, "attn_bwd %s copies +dqkv16", name);
    check_gpu_same(w, &g1, &g2, B * L * 3 * H);
    g->attn_bwd(g, NULL, NULL, NULL, l2.p[1], NULL, m, B, nh, D, d16.p[1], o16w.p[1], q16.p[1],
                dq16b.p[1]);
    check_copy16(w, &dq16a, 1, &g2, 1, B * L * 3 * H, prec);
    snprintf(w, sizeof w, "attn_bwd %s copies, dqkv16 alone", name);
    check_copy16(w, &dq16b, 1, &g2, 1, B * L * 3 * H, prec);
    drop(&q16), drop(&d16), drop(&o1), drop(&o2), drop(&l1), drop(&l2), drop(&o16), drop(&o16b);
    drop(&o16w), drop(&g1), drop(&g2), drop(&dq16a), drop(&dq16b);
}

static void attn_case(const char *name, kf_mask m, int64_t B, int64_t nh, int64_t D,
                      kf_precision prec) {
    int64_t L = kf_mask_len(&m), H = nh * D;
    double tol_f = tol_at(prec, 2e-5, 2e-3), tol_b = tol_at(prec, 1e-4, 4e-3);
    buf2 qkv = mk_rand(B * L * 3 * H, 1.5f), out = mk_rand(B * L * H, 1),
         lse = mk_rand(B * nh * L, 1);
    buf2 dout = mk_rand(B * L * H, 1), dqkv = mk_rand(B * L * 3 * H, 1);
    char w[160];
    BOTH(BE->set_precision(BE, prec));
    BOTH(BE->attn_fwd(BE, PF(out), PF(lse), PF(qkv), &m, B, nh, D, NULL, NULL));
    /* rows before q_start are not written: compare only the rest */
    float *oc = down(&out, 0), *og = down(&out, 1), *lc = down(&lse, 0), *lg = down(&lse, 1);
    double num = 0, den = 0, lnum = 0, lden = 0;
    int nonfinite = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = m.q_start; r < L; r++) {
            for (int64_t c = 0; c < H; c++) {
                int64_t i = (b * L + r) * H + c;
                nonfinite += !isfinite(og[i]);
                num += ((double)og[i] - oc[i]) * ((double)og[i] - oc[i]);
                den += (double)oc[i] * oc[i];
            }
            for (int64_t h = 0; h < nh; h++) {
                int64_t i = (b * nh + h) * L + r;
                lnum += ((double)lg[i] - lc[i]) * ((double)lg[i] - lc[i]);
                lden += (double)lc[i] * lc[i];
            }
        }
    double e = sqrt(num) / sqrt(den > 0 ? den : 1), el = sqrt(lnum) / sqrt(lden > 0 ? lden : 1);
    printf("  attn_fwd %-35s out %.3g lse %.3g\n", name, e, el);
    T_CHECK(!nonfinite, "attn_fwd %s: non-finite values", name);
    T_CHECK(e <= tol_f, "attn_fwd %s: out err %.3g > %.3g", name, e, tol_f);
    T_CHECK(el <= tol_f, "attn_fwd %s: lse err %.3g > %.3g", name, el, tol_f);
    free(oc), free(og), free(lc), free(lg);
    snprintf(w, sizeof w, "attn_fwd %s", name);
    check_representable(w, &out, m.q_start * H, (L - m.q_start) * H, prec);
    /* the backward reads the forward's out/lse: give both sides the CPU's */
    float *ho = down(&out, 0), *hl = down(&lse, 0);
    be[1]->upload(be[1], out.p[1], ho, out.bytes);
    be[1]->upload(be[1], lse.p[1], hl, lse.bytes);
    free(ho), free(hl);
    BOTH(BE->attn_bwd(BE, PF(dqkv), PF(dout), PF(out), PF(lse), PF(qkv), &m, B, nh, D, NULL, NULL,
                      NULL, NULL));
    snprintf(w, sizeof w, "attn_bwd %s", name);
    check_close(w, &dqkv, B * L * 3 * H, tol_b);
    check_representable(w, &dqkv, 0, B * L * 3 * H, prec);
    /* determinism: a second GPU backward is bitwise identical */
    buf2 d2 = mk_rand(B * L * 3 * H, 1);
    be[1]->attn_bwd(be[1], d2.p[1], dout.p[1], out.p[1], lse.p[1], qkv.p[1], &m, B, nh, D, NULL,
                    NULL, NULL, NULL);
    float *a1 = down(&dqkv, 1), *a2 = down(&d2, 1);
    T_CHECK(memcmp(a1, a2, dqkv.bytes) == 0, "attn_bwd %s: two runs differ", name);
    if (prec != KF_PREC_FP32) { /* dqkv16 alone (dqkv NULL): the model's 16-bit backward */
        buf2 c16 = mk(NULL, (size_t)(B * L * 3 * H) * 2);
        BOTH(BE->attn_bwd(BE, (float *)NULL, PF(dout), PF(out), PF(lse), PF(qkv), &m, B, nh, D,
                          NULL, NULL, NULL, c16.p[side_]));
        for (int side = 0; side < 2; side++) { /* dqkv checked against the CPU's above */
            snprintf(w, sizeof w, "attn_bwd %s dqkv16 alone %s", name, side ? "gpu" : "cpu");
            check_copy16(w, &c16, side, &dqkv, side, B * L * 3 * H, prec);
        }
        drop(&c16);
    }
    free(a1), free(a2);
    /* batch invariance: sample 0 alone gives the same out as inside the batch */
    if (B > 1) {
        kf_mask m1 = m;
        buf2 o1 = mk_rand(L * H, 1), l1 = mk_rand(nh * L, 1);
        be[1]->attn_fwd(be[1], out.p[1], lse.p[1], qkv.p[1], &m, B, nh, D, NULL, NULL);
        be[1]->attn_fwd(be[1], o1.p[1], l1.p[1], qkv.p[1], &m1, 1, nh, D, NULL, NULL);
        float *fb = down(&out, 1), *f1 = down(&o1, 1);
        T_CHECK(memcmp(fb + m.q_start * H, f1 + m.q_start * H,
                       (size_t)((L - m.q_start) * H) * sizeof(float)) == 0,
                "attn_fwd %s: sample 0 alone differs from inside the batch", name);
        free(fb), free(f1);
        drop(&o1), drop(&l1);
    }
    if (prec != KF_PREC_FP32) attn_copies16(name, &m, B, nh, D, prec, &qkv, &out, &lse, &dout);
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&qkv), drop(&out), drop(&lse), drop(&dout), drop(&dqkv), drop(&d2);
}

/* The 16-bit attention cases (head dims 64 and 128: the tensor-core path
 * when the backend runs it), names prefixed with tag. */
static void attn_cases16(const char *tag) {
    int32_t vl[3] = {75, 40, 1};
    char name[96];
    kf_mask causal = {.n_ctx = 75};
    snprintf(name, sizeof name, "%scausal N=75 D=64 fp16", tag);
    attn_case(name, causal, 2, 2, 64, KF_PREC_FP16);
    kf_mask causal200 = {.n_ctx = 200};
    snprintf(name, sizeof name, "%scausal N=200 D=128 fp16", tag);
    attn_case(name, causal200, 1, 2, 128, KF_PREC_FP16);
    kf_mask cpad = {.n_ctx = 75, .valid_len = vl};
    snprintf(name, sizeof name, "%scausal valid_len fp16", tag);
    attn_case(name, cpad, 3, 2, 64, KF_PREC_FP16);
    kf_mask bpad = {.n_ctx = 75, .valid_len = vl, .bidir = 1};
    snprintf(name, sizeof name, "%sbidirectional valid_len fp16", tag);
    attn_case(name, bpad, 3, 2, 64, KF_PREC_FP16);
    for (int k = 1; k <= 4; k *= 2) {
        kf_mask sf = {.n_ctx = 70, .group = k, .n_groups = 70, .valid_len = k == 2 ? vl : NULL};
        snprintf(name, sizeof name, "%sSingleForward k=%d fp16%s", tag, k,
                 k == 2 ? " valid_len" : "");
        attn_case(name, sf, k == 2 ? 3 : 2, 2, 64, KF_PREC_FP16);
        kf_mask df = {.n_ctx = 70, .group = 2 * k, .n_groups = 70, .q_start = 70};
        snprintf(name, sizeof name, "%sDoubleForward k=%d fp16", tag, k);
        attn_case(name, df, 2, 2, k == 4 ? 128 : 64, KF_PREC_FP16);
    }
    kf_mask dfq = {.n_ctx = 50, .group = 4, .n_groups = 50, .q_start = 37};
    snprintf(name, sizeof name, "%sq_start=37 inside the context fp16", tag);
    attn_case(name, dfq, 2, 1, 64, KF_PREC_FP16);
    /* bf16 operands: outputs must keep to bf16's rounding */
    snprintf(name, sizeof name, "%scausal N=75 D=64 bf16", tag);
    attn_case(name, causal, 2, 2, 64, KF_PREC_BF16);
    kf_mask sfb = {.n_ctx = 70, .group = 2, .n_groups = 70, .valid_len = vl};
    snprintf(name, sizeof name, "%sSingleForward k=2 valid_len bf16", tag);
    attn_case(name, sfb, 3, 2, 64, KF_PREC_BF16);
    kf_mask dfb = {.n_ctx = 70, .group = 4, .n_groups = 70, .q_start = 70};
    snprintf(name, sizeof name, "%sDoubleForward k=2 bf16 D=128", tag);
    attn_case(name, dfb, 2, 2, 128, KF_PREC_BF16);
}

static void test_attention(void) {
    int32_t vl[3] = {75, 40, 1};
    kf_mask causal = {.n_ctx = 75};
    attn_case("causal N=75 D=64", causal, 2, 2, 64, KF_PREC_FP32);
    kf_mask cpad = {.n_ctx = 75, .valid_len = vl};
    attn_case("causal N=75 valid_len D=32", cpad, 3, 2, 32, KF_PREC_FP32);
    kf_mask bpad = {.n_ctx = 75, .valid_len = vl, .bidir = 1};
    attn_case("bidirectional N=75 valid_len D=64", bpad, 3, 2, 64, KF_PREC_FP32);
    kf_mask causal200 = {.n_ctx = 200};
    attn_case("causal N=200 D=128", causal200, 1, 2, 128, KF_PREC_FP32);
    attn_case("causal N=200 D=16", causal200, 2, 1, 16, KF_PREC_FP32);
    for (int k = 1; k <= 4; k *= 2) {
        char name[80];
        kf_mask sf = {.n_ctx = 70, .group = k, .n_groups = 70};
        snprintf(name, sizeof name, "SingleForward k=%d N=70", k);
        attn_case(name, sf, 2, 2, 64, KF_PREC_FP32);
        kf_mask df = {.n_ctx = 70, .group = 2 * k, .n_groups = 70, .q_start = 70};
        snprintf(name, sizeof name, "DoubleForward k=%d q_start=70", k);
        attn_case(name, df, 2, 2, 64, KF_PREC_FP32);
        kf_mask sfp = {.n_ctx = 75, .group = k, .n_groups = 75, .valid_len = vl};
        snprintf(name, sizeof name, "SingleForward k=%d valid_len", k);
        attn_case(name, sfp, 3, 1, 32, KF_PREC_FP32);
    }
    kf_mask dfq = {.n_ctx = 50, .group = 4, .n_groups = 50, .q_start = 37};
    attn_case("q_start=37 inside the context", dfq, 2, 1, 64, KF_PREC_FP32);
    /* 16-bit head dims other than 64 and 128: the SIMT kernels */
    attn_case("causal N=200 D=32 fp16", causal200, 2, 1, 32, KF_PREC_FP16);
    /* the 16-bit phases on the default backend: the tensor-core kernels */
    attn_cases16("");
}

/* Compares n floats of sample s alone (got) with the batch's (want) bitwise:
 * one check, the count of differing values. */
static void check_alone(const char *what, const char *name, int64_t s, const float *got,
                        const float *want, int64_t n) {
    int64_t bad = n_differ(got, want, n);
    T_EQ_INT(bad, 0,
             "batch-invariant attn %s %s: sample %lld alone: got %lld of %lld values differing "
             "from inside the batch, want 0",
             name, what, (long long)s, (long long)bad, (long long)n);
}

/* The 16-bit attention in batch-invariant mode (the teacher's passes) on the
 * tensor cores: each sample of a batch of 3 with different valid_len, run
 * alone, gives bitwise the batch's out and lse (query rows) and dqkv (the
 * backward from the batch's out and lse), for a causal, a SingleForward and
 * a DoubleForward structure; every call runs the tensor-core kernels
 * (kernels_cuda_tc_launches). Prints a digest of the batch's results
 * (compare across KF_CUDA_EMU_ORDERs). */
static void test_attn_tc_invariance(kf_precision prec) {
    kf_backend *g = be[1];
    const char *pn = kernels_precision_name(prec);
    g->set_precision(g, prec);
    g->batch_invariant = 1;
    const kf_mask ms[3] = {{.n_ctx = 75},
                           {.n_ctx = 70, .group = 2, .n_groups = 70},
                           {.n_ctx = 70, .group = 8, .n_groups = 70, .q_start = 70}};
    const char *mn[3] = {"causal D=64", "SingleForward k=2 D=64", "DoubleForward k=4 D=128"};
    const int64_t Ds[3] = {64, 64, 128};
    const int64_t B = 3, nh = 2;
    uint64_t hash = 0xcbf29ce484222325ull;
    for (int i = 0; i < 3; i++) {
        int32_t vl[3] = {(int32_t)ms[i].n_ctx, 40, 1};
        kf_mask m = ms[i];
        m.valid_len = vl;
        char name[96];
        snprintf(name, sizeof name, "%s %s", mn[i], pn);
        int64_t D = Ds[i], L = kf_mask_len(&m), H = nh * D, q0 = m.q_start;
        int64_t nq = L * 3 * H, no = L * H, nl = nh * L; /* per sample */
        buf2 qkv = mk_rand(B * nq, 1.5f), dout = mk_rand(B * no, 1), out = mk_rand(B * no, 1),
             lse = mk_rand(B * nl, 1), dqkv = mk_rand(B * nq, 1), o1 = mk_rand(no, 1),
             l1 = mk_rand(nl, 1), d1 = mk_rand(nq, 1);
        float *q = qkv.p[1], *dd = dout.p[1], *o = out.p[1], *l = lse.p[1], *dq = dqkv.p[1];
        int64_t n0 = tc_launches(g, KF_CUDA_TC_ATTN);
        g->attn_fwd(g, o, l, q, &m, B, nh, D, NULL, NULL);
        g->attn_bwd(g, dq, dd, o, l, q, &m, B, nh, D, NULL, NULL, NULL, NULL);
        T_EQ_INT(tc_launches(g, KF_CUDA_TC_ATTN) - n0, 2,
                 "batch-invariant attn %s, the batch's forward and backward: tensor-core launches",
                 name);
        float *ho = down(&out, 1), *hl = down(&lse, 1), *hd = down(&dqkv, 1);
        hash = fnv(hash, ho, out.bytes), hash = fnv(hash, hl, lse.bytes);
        hash = fnv(hash, hd, dqkv.bytes);
        for (int64_t s = 0; s < B; s++) {
            kf_mask m1 = m;
            m1.valid_len = vl + s;
            n0 = tc_launches(g, KF_CUDA_TC_ATTN);
            g->attn_fwd(g, o1.p[1], l1.p[1], q + s * nq, &m1, 1, nh, D, NULL, NULL);
            g->attn_bwd(g, d1.p[1], dd + s * no, o + s * no, l + s * nl, q + s * nq, &m1, 1, nh, D,
                        NULL, NULL, NULL, NULL);
            T_EQ_INT(tc_launches(g, KF_CUDA_TC_ATTN) - n0, 2,
                     "batch-invariant attn %s, sample %lld alone: tensor-core launches", name,
                     (long long)s);
            float *go = down(&o1, 1), *gl = down(&l1, 1), *gd = down(&d1, 1);
            check_alone("out", name, s, go + q0 * H, ho + s * no + q0 * H, (L - q0) * H);
            for (int64_t h = 0; h < nh; h++)
                check_alone("lse", name, s, gl + h * L + q0, hl + s * nl + h * L + q0, L - q0);
            check_alone("dqkv", name, s, gd, hd + s * nq, nq);
            free(go), free(gl), free(gd);
        }
        printf("  batch-invariant attn %-32s 3 samples alone == in the batch\n", name);
        free(ho), free(hl), free(hd);
        drop(&qkv), drop(&dout), drop(&out), drop(&lse), drop(&dqkv), drop(&o1), drop(&l1),
            drop(&d1);
    }
    printf("  batch-invariant attn %s digest %016llx\n", pn, (unsigned long long)hash);
    g->batch_invariant = 0;
    g->set_precision(g, KF_PREC_FP32);
}

/* One output of op from two backends (n floats a and c): the same bits, or
 * (same 0) different ones. */
static void attn_bits(const char *op, const float *a, const float *c, int64_t n, int same,
                      const char *what, kf_precision prec, int64_t D) {
    T_CHECK((memcmp(a, c, (size_t)n * 4) == 0) == same, "%s %s %s D=%lld: got %s bits, want %s", op,
            what, kernels_precision_name(prec), (long long)D, same ? "different" : "the same",
            same ? "the same" : "different");
}

/* Backends x and y give the same bits for a 16-bit attention, forward and
 * backward, or (same 0) different ones: the tensor-core kernels round P
 * (and dS) to the 16-bit format, so some bit of out (and dqkv) differs from
 * the SIMT kernels', which would pass the tolerance checks just as well.
 * Each backend works on buffers of its own, on its own stream (backends do
 * not order their streams against each other), and both backwards start
 * from y's forward. */
static void attn_paths(kf_backend *x, kf_backend *y, kf_precision prec, int64_t D, int same,
                       const char *what) {
    kf_mask m = {.n_ctx = 75};
    int64_t nh = 2, L = 75, H = nh * D, nq = L * 3 * H, no = L * H, nl = nh * L;
    float *hq = malloc((size_t)nq * 4), *hd = malloc((size_t)no * 4), *ho[2], *hl[2], *hg[2];
    for (int64_t i = 0; i < nq; i++) hq[i] = 1.5f * nrand();
    for (int64_t i = 0; i < no; i++) hd[i] = nrand();
    kf_backend *bs[2] = {x, y};
    float *q[2], *o[2], *l[2], *dq[2], *dd[2];
    for (int p = 0; p < 2; p++) {
        kf_backend *g = bs[p];
        g->set_precision(g, prec);
        q[p] = g->alloc(g, (size_t)nq * 4), dq[p] = g->alloc(g, (size_t)nq * 4);
        o[p] = g->alloc(g, (size_t)no * 4), dd[p] = g->alloc(g, (size_t)no * 4);
        l[p] = g->alloc(g, (size_t)nl * 4);
        g->upload(g, q[p], hq, (size_t)nq * 4);
        g->upload(g, dd[p], hd, (size_t)no * 4);
        g->attn_fwd(g, o[p], l[p], q[p], &m, 1, nh, D, NULL, NULL);
        ho[p] = malloc((size_t)no * 4), hl[p] = malloc((size_t)nl * 4);
        g->download(g, ho[p], o[p], (size_t)no * 4);
        g->download(g, hl[p], l[p], (size_t)nl * 4);
    }
    attn_bits("attn_fwd", ho[0], ho[1], no, same, what, prec, D);
    for (int p = 0; p < 2; p++) {
        kf_backend *g = bs[p];
        g->upload(g, o[p], ho[1], (size_t)no * 4);
        g->upload(g, l[p], hl[1], (size_t)nl * 4);
        g->attn_bwd(g, dq[p], dd[p], o[p], l[p], q[p], &m, 1, nh, D, NULL, NULL, NULL, NULL);
        hg[p] = malloc((size_t)nq * 4);
        g->download(g, hg[p], dq[p], (size_t)nq * 4);
    }
    attn_bits("attn_bwd", hg[0], hg[1], nq, same, what, prec, D);
    for (int p = 0; p < 2; p++) {
        kf_backend *g = bs[p];
        g->free(g, q[p]), g->free(g, dq[p]), g->free(g, o[p]), g->free(g, dd[p]), g->free(g, l[p]);
        g->set_precision(g, KF_PREC_FP32);
        free(ho[p]), free(hl[p]), free(hg[p]);
    }
    free(hq), free(hd);
}

/* A CUDA backend created with the environment variable name set to value
 * (name NULL: none); NULL if there is none. */
static kf_backend *cuda_with(const char *name, const char *value) {
    char msg[256] = "";
    if (name) setenv(name, value, 1);
    kf_backend *b = kernels_cuda_create(0, msg, sizeof msg);
    if (name) unsetenv(name);
    T_CHECK(b != NULL, "CUDA backend with %s=%s: %s", name ? name : "-", value ? value : "-", msg);
    return b;
}

/* Which kernels run the 16-bit attention: the default backend (be[1]) the
 * tensor-core ones (their check passed), in batch-invariant mode too,
 * KF_CUDA_TC=0 the SIMT ones, which run every 16-bit case here too; a check
 * broken on purpose (KF_CUDA_TC_CHECK_BREAK, in the forward or the
 * backward) falls back to the SIMT kernels. The same for the 16-bit
 * batch-invariant GEMM: the default's bits differ from KF_CUDA_TC=0's (the
 * tensor-core kernel runs), a broken check (KF_CUDA_TC_CHECK_BREAK=gemm)
 * gives KF_CUDA_TC=0's; and the SIMT kernel against the CPU. */
static void test_tensor_cores(void) {
    kf_backend *tc = be[1], *simt = cuda_with("KF_CUDA_TC", "0");
    if (!simt) return;
    be[1] = simt;
    attn_cases16("simt: ");
    be[1] = tc;
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++)
        for (int64_t D = 64; D <= 128; D *= 2) {
            attn_paths(tc, simt, (kf_precision)prec, D, 0, "default vs KF_CUDA_TC=0");
            tc->batch_invariant = 1;
            attn_paths(tc, simt, (kf_precision)prec, D, 0, "batch-invariant vs KF_CUDA_TC=0");
            tc->batch_invariant = 0;
        }
    const char *brk[] = {"fwd", "bwd"};
    for (int i = 0; i < 2; i++) {
        setenv("KF_CUDA_TC_CHECK_BREAK", brk[i], 1); /* read by the check, at the first call */
        kf_backend *broken = cuda_with(NULL, NULL);
        char what[64];
        snprintf(what, sizeof what, "check broken in the %s vs KF_CUDA_TC=0", brk[i]);
        if (broken) attn_paths(broken, simt, KF_PREC_FP16, 64, 1, what);
        unsetenv("KF_CUDA_TC_CHECK_BREAK");
        if (broken) broken->destroy(broken);
    }
    /* the attention's check run first in batch-invariant mode (a 16-bit
     * teacher's first pass), where the products read 16-bit copies as they
     * are: it widens dqkv itself, and the kernels it keeps are the tensor
     * cores' */
    kf_backend *bi = cuda_with(NULL, NULL);
    if (bi) {
        bi->batch_invariant = tc->batch_invariant = 1;
        attn_paths(bi, tc, KF_PREC_FP16, 64, 1, "first call batch-invariant vs batch-invariant");
        tc->batch_invariant = 0;
        bi->destroy(bi);
    }
    /* two SIMT backends, one fresh: the same bits (what the broken checks'
     * comparison above relies on) */
    kf_backend *simt2 = cuda_with("KF_CUDA_TC", "0");
    if (simt2) {
        attn_paths(simt2, simt, KF_PREC_FP16, 64, 1, "fresh KF_CUDA_TC=0 vs KF_CUDA_TC=0");
        simt2->destroy(simt2);
    }
    /* the batch-invariant GEMM: tensor cores by default, SIMT with
     * KF_CUDA_TC=0 and after a failed check */
    kf_backend *fresh = cuda_with(NULL, NULL);
    if (fresh) { /* a check (8 launches) and the product, then the product */
        gemm_paths(fresh, simt, (const int64_t[3]){9, 1, 9}, 1, "default");
        fresh->destroy(fresh);
    }
    gemm_paths(simt, simt, (const int64_t[3]){0, 0, 0}, 0, "KF_CUDA_TC=0");
    /* "gemm" breaks the tensor cores' result on the fp32 operands, "gemm16"
     * the 16-bit copies the check makes (a check not running the copies
     * passes then) */
    const char *gbrk[2] = {"gemm", "gemm16"};
    for (int i = 0; i < 2; i++) {
        setenv("KF_CUDA_TC_CHECK_BREAK", gbrk[i], 1); /* read by the check, at the first call */
        kf_backend *broken = cuda_with(NULL, NULL);
        if (broken) { /* the check's first two launches fail it: the SIMT kernel from then on */
            char what[64];
            snprintf(what, sizeof what, "check broken (%s)", gbrk[i]);
            gemm_paths(broken, simt, (const int64_t[3]){2, 0, 0}, 0, what);
            broken->destroy(broken);
        }
        unsetenv("KF_CUDA_TC_CHECK_BREAK");
    }
    be[1] = simt;
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++) {
        BOTH(BE->set_precision(BE, (kf_precision)prec));
        be[1]->batch_invariant = 1;
        test_matmul((kf_precision)prec, 2);
        be[1]->batch_invariant = 0;
    }
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    be[1] = tc;
    simt->destroy(simt);
}

/* What test_linear_fused's cases share: the backend g under test (tc: the
 * default one, else KF_CUDA_TC=0's), its name in the checks, the sizes and
 * the buffers (their GPU sides: inputs, their 16-bit copies, the fused ops'
 * outputs and the separate ops' results, r). */
typedef struct {
    kf_backend *g;
    int tc;
    const char *who;
    kf_precision prec;
    int64_t R, in, out;
    buf2 x, x16, w, w16, bias, dy, dy16, xpre; /* inputs */
    buf2 y, y16, pre, yr, prer, y0;            /* [R, out] */
    buf2 dpre, dpre16, dpr, db, dbr, db0;      /* [R, in] and [in] */
} fused_ctx;

/* The checks of fused op `what`: its tensor-core launches on f->g since n0
 * (1 on the default backend, 0 on KF_CUDA_TC=0's: the op ran on the kernel
 * named); with om's bits (out_tag) its fp32 output o bitwise r, its copy
 * o16 (named by tag16) r rounded; n values. */
static void fused_outputs(const fused_ctx *f, int64_t n0, const char *what, int om, const buf2 *o,
                          const buf2 *o16, const buf2 *r, int64_t n, const char *tag16) {
    kf_backend *g = f->g;
    if (tc_launches(g, KF_CUDA_TC_GEMM) >= 0)
        T_EQ_INT(tc_launches(g, KF_CUDA_TC_GEMM) - n0, f->tc, "%s: tensor-core launches", what);
    g->sync(g); /* be[1] downloads what g wrote (two streams) */
    if (om & 1) check_gpu_same(what, o, r, n);
    char c[192];
    snprintf(c, sizeof c, "%s (%s)", what, tag16);
    if (om & 2) check_copy16(c, o16, 1, r, 1, n, f->prec);
}

static kf_gelu_kind gelu_of(int act) { return act == KF_ACT_GELU_ERF ? KF_GELU_ERF : KF_GELU_TANH; }

/* The outputs' names: bit 0 the fp32 output, bit 1 its 16-bit copy. */
static const char *out_tag(int om) { return om == 1 ? " y" : om == 2 ? " y16" : " y y16"; }

/* linear_act with act and a bias or none, on fp32 operands or their copies,
 * writing y, y16 or both (zeroed first): against matmul, add_bias,
 * gelu_fwd. */
static void fused_act(fused_ctx *f, int act, int with_bias, int copies) {
    kf_backend *g = f->g;
    int64_t R = f->R, in = f->in, out = f->out;
    size_t ny = (size_t)(R * out) * 4;
    float *t = act ? PF1(f->prer) : PF1(f->yr), *bias = with_bias ? PF1(f->bias) : NULL;
    g->matmul(g, t, PF1(f->x), PF1(f->w), R, out, in, 0, 1, 1.0f, 0.0f);
    if (bias) g->add_bias(g, t, bias, R, out);
    if (act) g->gelu_fwd(g, PF1(f->yr), t, R * out, gelu_of(act));
    for (int om = 1; om <= 3; om++) {
        char wn[160], c[176];
        snprintf(wn, sizeof wn, "%s linear_act act=%d%s%s%s", f->who, act, bias ? " bias" : "",
                 copies ? " x16 w16" : "", out_tag(om));
        g->zero(g, PF1(f->y), ny), g->zero(g, PF1(f->pre), ny), g->zero(g, f->y16.p[1], ny / 2);
        int64_t n0 = tc_launches(g, KF_CUDA_TC_GEMM);
        g->linear_act(g, om & 1 ? PF1(f->y) : NULL, om & 2 ? f->y16.p[1] : NULL,
                      act ? PF1(f->pre) : NULL, copies ? NULL : PF1(f->x),
                      copies ? f->x16.p[1] : NULL, PF1(f->w), bias, R, in, out, (kf_act)act, 0.0f,
                      copies ? f->w16.p[1] : NULL);
        fused_outputs(f, n0, wn, om, &f->y, &f->y16, &f->yr, R * out, "y16");
        snprintf(c, sizeof c, "%s (pre)", wn);
        if (act) check_gpu_same(c, &f->pre, &f->prer, R * out);
    }
}

/* linear_act adding the layer to y (beta 1), with a bias or none, writing
 * y16 too or not: against matmul (beta 1) and add_bias. */
static void fused_beta(fused_ctx *f, int with_bias, int om) {
    kf_backend *g = f->g;
    int64_t R = f->R, in = f->in, out = f->out;
    size_t ny = (size_t)(R * out) * 4;
    float *bias = with_bias ? PF1(f->bias) : NULL;
    char wn[160];
    snprintf(wn, sizeof wn, "%s linear_act +C%s%s", f->who, bias ? " bias" : "", out_tag(om));
    g->copy(g, PF1(f->y), PF1(f->y0), ny), g->copy(g, PF1(f->yr), PF1(f->y0), ny);
    g->matmul(g, PF1(f->yr), PF1(f->x), PF1(f->w), R, out, in, 0, 1, 1.0f, 1.0f);
    if (bias) g->add_bias(g, PF1(f->yr), bias, R, out);
    int64_t n0 = tc_launches(g, KF_CUDA_TC_GEMM);
    g->linear_act(g, PF1(f->y), om & 2 ? f->y16.p[1] : NULL, NULL, PF1(f->x), NULL, PF1(f->w), bias,
                  R, in, out, KF_ACT_NONE, 1.0f, NULL);
    fused_outputs(f, n0, wn, om, &f->y, &f->y16, &f->yr, R * out, "y16");
}

/* linear_act_dgrad with act and dbias or none, on fp32 operands or their
 * copies, writing dpre, dpre16 or both (zeroed first): against matmul,
 * gelu_bwd, bias_grad (dbias starting from the same values). */
static void fused_dgrad(fused_ctx *f, int act, int with_bias, int copies) {
    kf_backend *g = f->g;
    int64_t R = f->R, in = f->in, out = f->out;
    size_t nd = (size_t)(R * in) * 4;
    g->matmul(g, PF1(f->dpr), PF1(f->dy), PF1(f->w), R, in, out, 0, 0, 1.0f, 0.0f);
    if (act) g->gelu_bwd(g, PF1(f->dpr), PF1(f->dpr), PF1(f->xpre), R * in, gelu_of(act));
    g->copy(g, PF1(f->dbr), PF1(f->db0), f->db0.bytes);
    if (with_bias) g->bias_grad(g, PF1(f->dbr), PF1(f->dpr), R, in);
    for (int om = 1; om <= 3; om++) {
        char wn[160], c[176];
        snprintf(wn, sizeof wn, "%s linear_act_dgrad act=%d%s%s%s", f->who, act,
                 with_bias ? " dbias" : "", copies ? " dy16 w16" : "", out_tag(om));
        g->zero(g, PF1(f->dpre), nd), g->zero(g, f->dpre16.p[1], nd / 2);
        g->copy(g, PF1(f->db), PF1(f->db0), f->db0.bytes);
        int64_t n0 = tc_launches(g, KF_CUDA_TC_GEMM);
        g->linear_act_dgrad(g, om & 1 ? PF1(f->dpre) : NULL, om & 2 ? f->dpre16.p[1] : NULL,
                            with_bias ? PF1(f->db) : NULL, copies ? NULL : PF1(f->dy), PF1(f->w),
                            PF1(f->xpre), R, in, out, (kf_act)act, copies ? f->w16.p[1] : NULL,
                            copies ? f->dy16.p[1] : NULL);
        fused_outputs(f, n0, wn, om, &f->dpre, &f->dpre16, &f->dpr, R * in, "dpre16");
        snprintf(c, sizeof c, "%s (dbias)", wn);
        if (with_bias) check_gpu_same(c, &f->db, &f->dbr, in);
    }
}

/* Batch-invariant linear_act and linear_act_dgrad finish their product in
 * the fixed-tiling kernel's own epilogue (cuda_gemm.cu, cu_epi), on the
 * tensor cores (the default backend) and on the SIMT kernel (KF_CUDA_TC=0):
 * on each, bitwise that backend's separate ops for each act, with and
 * without a bias, on fp32 operands and on copies, writing either output or
 * both, and adding to y (fused_act, fused_beta, fused_dgrad), one
 * tensor-core launch an op on the default backend and none on the other;
 * row 130 alone gives its row of the batch of 150; and under the emulation
 * harness the two backends give the same bits. */
static void test_linear_fused(kf_precision prec) {
    const int64_t R = 150, in = 67, out = 45, r1 = 130;
    kf_backend *bk[2] = {be[1], cuda_with("KF_CUDA_TC", "0")};
    if (!bk[1]) return;
    fused_ctx f = {.prec = prec, .R = R, .in = in, .out = out};
    f.x = mk_rand(R * in, 1), f.w = mk_rand(out * in, 1), f.bias = mk_rand(out, 1);
    f.dy = mk_rand(R * out, 1), f.xpre = mk_rand(R * in, 2), f.y0 = mk_rand(R * out, 1);
    f.x16 = mk16(&f.x, R * in, prec), f.w16 = mk16(&f.w, out * in, prec);
    f.dy16 = mk16(&f.dy, R * out, prec), f.db0 = mk_rand(in, 1);
    buf2 *o[] = {&f.y, &f.pre, &f.yr, &f.prer, &f.dpre, &f.dpr, &f.db, &f.dbr};
    for (int i = 0; i < 8; i++)
        *o[i] = mk(NULL, (size_t)(i < 4 ? R * out : i < 6 ? R * in : in) * 4);
    f.y16 = mk(NULL, (size_t)(R * out) * 2), f.dpre16 = mk(NULL, (size_t)(R * in) * 2);
    const char *pn = kernels_precision_name(prec);
    float *row[2];
    for (f.tc = 1; f.tc >= 0; f.tc--) {
        kf_backend *g = f.g = bk[!f.tc];
        char who[64];
        snprintf(who, sizeof who, "fused %s %s", pn, f.tc ? "tc" : "simt");
        f.who = who;
        g->set_precision(g, prec);
        g->batch_invariant = 1;
        for (int act = KF_ACT_NONE; act <= KF_ACT_GELU_ERF; act++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
                for (int copies = 0; copies < 2; copies++) {
                    fused_act(&f, act, with_bias, copies);
                    fused_dgrad(&f, act, with_bias, copies);
                }
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int om = 1; om <= 3; om += 2) fused_beta(&f, with_bias, om);
        /* the batch, then row r1 alone into yr, on the copies with GELU and
         * a bias (the teacher's fc1) */
        const float *b = PF1(f.bias);
        g->linear_act(g, PF1(f.y), NULL, PF1(f.pre), NULL, f.x16.p[1], PF1(f.w), b, R, in, out,
                      KF_ACT_GELU_TANH, 0.0f, f.w16.p[1]);
        g->linear_act(g, PF1(f.yr), NULL, PF1(f.prer), NULL, (char *)f.x16.p[1] + r1 * in * 2,
                      PF1(f.w), b, 1, in, out, KF_ACT_GELU_TANH, 0.0f, f.w16.p[1]);
        g->sync(g);
        check_dev_same(be[1], who, "linear_act row 130 alone vs in the batch", PF1(f.yr),
                       PF1(f.y) + r1 * out, out);
        check_dev_same(be[1], who, "linear_act row 130 alone vs in the batch (pre)", PF1(f.prer),
                       PF1(f.pre) + r1 * out, out);
        row[f.tc] = down(&f.y, 1);
        g->batch_invariant = 0;
        g->set_precision(g, KF_PREC_FP32);
    }
    if (emulated())
        T_EQ_INT(n_differ(row[1], row[0], R * out), 0,
                 "fused %s: linear_act tc vs simt: got %lld of %lld elements differing, want 0", pn,
                 (long long)n_differ(row[1], row[0], R * out), (long long)(R * out));
    free(row[0]), free(row[1]);
    buf2 *all[] = {&f.x,    &f.x16,    &f.w,   &f.w16, &f.bias, &f.dy,   &f.dy16,
                   &f.xpre, &f.y,      &f.y16, &f.pre, &f.yr,   &f.prer, &f.y0,
                   &f.dpre, &f.dpre16, &f.dpr, &f.db,  &f.dbr,  &f.db0};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) drop(all[i]);
    bk[1]->destroy(bk[1]);
}

static void test_attn_decode(void) {
    int64_t B = 2, cap = 90, P = 61, Q = 4, nh = 2, D = 64, H = nh * D, qs = 3 * H;
    buf2 q = mk_rand(B * Q * qs, 1), kc = mk_rand(B * cap * H, 1), vc = mk_rand(B * cap * H, 1);
    buf2 out = mk_rand(B * Q * H, 1);
    for (int prec = KF_PREC_FP32; prec <= KF_PREC_BF16; prec++) {
        char w[64];
        snprintf(w, sizeof w, "attn_decode %s", kernels_precision_name((kf_precision)prec));
        BOTH(BE->set_precision(BE, (kf_precision)prec));
        BOTH(BE->attn_decode(BE, PF(out), PF(q), qs, PF(kc), PF(vc), B, cap, P, NULL, Q, nh, D));
        check_close(w, &out, B * Q * H, tol_at((kf_precision)prec, 1e-5, 2e-3));
        check_representable(w, &out, 0, B * Q * H, (kf_precision)prec);
    }
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&q), drop(&kc), drop(&vc), drop(&out);
}

/* The cache rows model_decode.c launches attn_decode for: the power of two
 * at or above P + Q, at most cap. */
static int64_t decode_bucket(int64_t rows, int64_t cap) {
    int64_t t = 1;
    while (t < rows) t *= 2;
    return t < cap ? t : cap;
}

/* The first n GPU floats of x that differ in bits from want's. */
static int64_t dev_differ(const buf2 *x, const float *want, int64_t n) {
    float *g = down(x, 1);
    int64_t d = n_differ(g, want, n);
    free(g);
    return d;
}

/* attn_decode reading the cache length from the device (len), launched for
 * its bucket's bound as model_decode.c does, over lengths crossing the
 * buckets and the splits of the keys: against the CPU (same len); bitwise the
 * GPU's with the length as a host value (the bound changes nothing); a graph
 * recorded at one length and launched at the next of its bucket gives
 * bitwise the direct call's; one sample alone gives bitwise its row of the
 * batch; a length past the bound gives NaN. */
static void test_attn_decode_len(void) {
    int64_t B = 3, cap = 70, Q = 2, nh = 2, D = 40, H = nh * D, qs = 3 * H;
    buf2 q = mk_rand(B * Q * qs, 1), kc = mk_rand(B * cap * H, 1), vc = mk_rand(B * cap * H, 1);
    buf2 out = mk_rand(B * Q * H, 1), len = mk(NULL, sizeof(int32_t));
    int64_t n = B * Q * H, lens[] = {0, 1, 5, 6, 7, 13, 14, 15, 17, 29, 30, 31, 33, 61, 62, 68};
    int64_t nl = (int64_t)(sizeof lens / sizeof *lens);
    void *graph = NULL;
    int64_t graph_bucket = -1;
    for (int64_t t = 0; t < nl; t++) {
        int64_t P = lens[t], bound = decode_bucket(P + Q, cap) - Q;
        int32_t p32 = (int32_t)P;
        char w[96];
        snprintf(w, sizeof w, "attn_decode len %lld (bound %lld)", (long long)P, (long long)bound);
        BOTH(BE->upload(BE, P(len), &p32, sizeof p32));
        BOTH(BE->attn_decode(BE, PF(out), PF(q), qs, PF(kc), PF(vc), B, cap, bound, PI(len), Q, nh,
                             D));
        check_close(w, &out, n, 1e-5);
        float *dev = down(&out, 1);
        be[1]->attn_decode(be[1], PF1(out), PF1(q), qs, PF1(kc), PF1(vc), B, cap, P, NULL, Q, nh,
                           D);
        int64_t d = dev_differ(&out, dev, n);
        T_EQ_INT(d, 0, "%s: got %lld of %lld values unlike the host length's, want 0", w,
                 (long long)d, (long long)n);
        /* sample 1 alone: its q rows, its cache */
        be[1]->attn_decode(be[1], PF1(out), PF1(q) + Q * qs, qs, PF1(kc) + cap * H,
                           PF1(vc) + cap * H, 1, cap, bound, PI1(len), Q, nh, D);
        d = dev_differ(&out, dev + Q * H, Q * H);
        T_EQ_INT(d, 0, "%s: sample 1 alone: got %lld of %lld values unlike the batch's, want 0", w,
                 (long long)d, (long long)(Q * H));
        if (graph && graph_bucket == bound) { /* recorded at an earlier length */
            be[1]->graph_launch(be[1], graph);
            d = dev_differ(&out, dev, n);
            T_EQ_INT(d, 0,
                     "%s: graph recorded at a shorter length: got %lld of %lld values unlike the "
                     "direct call's, want 0",
                     w, (long long)d, (long long)n);
        } else {
            be[1]->graph_free(be[1], graph);
            be[1]->graph_begin(be[1]);
            be[1]->attn_decode(be[1], PF1(out), PF1(q), qs, PF1(kc), PF1(vc), B, cap, bound,
                               PI1(len), Q, nh, D);
            graph = be[1]->graph_end(be[1]);
            graph_bucket = bound;
            T_CHECK(graph != NULL, "%s: no graph recorded", w);
        }
        free(dev);
    }
    /* a length past the bound (a graph launched after the cache outgrew it) */
    int32_t past = 9;
    be[1]->upload(be[1], PI1(len), &past, sizeof past);
    be[1]->attn_decode(be[1], PF1(out), PF1(q), qs, PF1(kc), PF1(vc), B, cap, 8, PI1(len), Q, nh,
                       D);
    float *g = down(&out, 1);
    int64_t nan = 0;
    for (int64_t i = 0; i < n; i++) nan += isnan(g[i]);
    free(g);
    T_EQ_INT(nan, n, "attn_decode len 9 past the bound 8: got %lld NaN of %lld, want all",
             (long long)nan, (long long)n);
    be[1]->graph_free(be[1], graph);
    drop(&q), drop(&kc), drop(&vc), drop(&out), drop(&len);
}

/* ---- pointwise and rows ---- */

static void test_pointwise(void) {
    int64_t n = 10007;
    buf2 x = mk_rand(n, 4), y = mk_rand(n, 1), dy = mk_rand(n, 1), dx = mk_rand(n, 1);
    for (int kind = 0; kind < 2; kind++) {
        BOTH(BE->gelu_fwd(BE, PF(y), PF(x), n, (kf_gelu_kind)kind));
        check_close(kind ? "gelu_fwd erf" : "gelu_fwd tanh", &y, n, 1e-6);
        BOTH(BE->gelu_bwd(BE, PF(dx), PF(dy), PF(x), n, (kf_gelu_kind)kind));
        check_close(kind ? "gelu_bwd erf" : "gelu_bwd tanh", &dx, n, 1e-6);
    }
    float *hy = down(&y, 0); /* the elementwise ops below start from equal inputs */
    be[1]->upload(be[1], y.p[1], hy, y.bytes);
    free(hy);
    BOTH(BE->add_inplace(BE, PF(y), PF(x), n));
    check_same_bytes("add_inplace", &y);
    BOTH(BE->scale(BE, PF(y), 0.37f, n));
    check_same_bytes("scale", &y);
    BOTH(BE->fill_column(BE, PF(y), 100, 100, 17, -1000.0f));
    check_same_bytes("fill_column", &y);
    /* 16-bit rounding: random values, then the edges (ties, overflow to inf,
     * subnormals, NaN); fp32 mode leaves x as it is */
    float *hx = down(&x, 0);
    const float edge[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 2048, 65519.0f,
                          65520.0f,          3.3961776e38f,     3.40282347e38f,     1e-40f,
                          -2.9e-8f,          5.96e-8f,          INFINITY,           -NAN};
    memcpy(hx, edge, sizeof edge);
    for (int prec = KF_PREC_FP32; prec <= KF_PREC_BF16; prec++) {
        char w[64];
        snprintf(w, sizeof w, "round_lowp %s", kernels_precision_name((kf_precision)prec));
        BOTH(BE->upload(BE, P(x), hx, x.bytes));
        BOTH(BE->set_precision(BE, (kf_precision)prec));
        BOTH(BE->round_lowp(BE, PF(x), n));
        check_same_bytes(w, &x);
        check_representable(w, &x, 0, n, (kf_precision)prec);
        if (prec == KF_PREC_FP32) {
            float *g = down(&x, 1);
            T_CHECK(memcmp(g, hx, x.bytes) == 0, "round_lowp fp32: changed x, want it untouched");
            free(g);
        }
    }
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    free(hx);
    drop(&x), drop(&y), drop(&dy), drop(&dx);
}

/* 16-bit rows moved as floats of two values each (model.c's K/V hand-over):
 * the words are signalling NaNs, subnormals and -0 as floats, which a move
 * through a float conversion would quiet or flush; on each side the rows
 * must come back bit for bit. */
static void test_rows16(void) {
    enum { N = 6, DIM = 40 };
    static const uint16_t pat[] = {0x7c01, 0x7f80, 0x0001, 0x8000, 0x3c00, 0xffff, 0x0000, 0x7fa0};
    uint16_t h[N * 2 * DIM];
    for (int i = 0; i < N * 2 * DIM; i++) h[i] = (uint16_t)(pat[i % 8] ^ (i / 8));
    int32_t idx[N] = {3, 0, 5, 1, 4, 2};
    buf2 src = mk(h, sizeof h), bidx = mk_ints(idx, N), g = mk(h, sizeof h), sc = mk(h, sizeof h);
    BOTH(BE->gather_rows(BE, PF(g), PF(src), PI(bidx), N, DIM));
    BOTH(BE->scatter_rows(BE, PF(sc), PF(src), PI(bidx), N, DIM));
    for (int side = 0; side < 2; side++) {
        uint16_t *gg = down(&g, side), *ss = down(&sc, side);
        int gbad = 0, sbad = 0;
        for (int i = 0; i < N; i++) {
            gbad += memcmp(gg + i * 2 * DIM, h + idx[i] * 2 * DIM, 2 * DIM * 2) != 0;
            sbad += memcmp(ss + idx[i] * 2 * DIM, h + i * 2 * DIM, 2 * DIM * 2) != 0;
        }
        T_EQ_INT(gbad, 0,
                 "gather_rows of 16-bit rows on side %d: %d of %d rows not bitwise, want 0", side,
                 gbad, N);
        T_EQ_INT(sbad, 0,
                 "scatter_rows of 16-bit rows on side %d: %d of %d rows not bitwise, want 0", side,
                 sbad, N);
        free(gg), free(ss);
    }
    drop(&src), drop(&bidx), drop(&g), drop(&sc);
}

static void test_rows(void) {
    int64_t n = 300, dim = 96, vocab = 50;
    int32_t ids[300], idx[300];
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)(urand() * (i % 3 ? vocab : 4)); /* many repeats */
        idx[i] = (int32_t)((i * 7) % n);                   /* a permutation (7 coprime to 300) */
    }
    buf2 bid = mk_ints(ids, n), bidx = mk_ints(idx, n);
    buf2 table = mk_rand(vocab * dim, 1), out = mk_rand(n * dim, 1), src = mk_rand(n * dim, 1);
    buf2 dtable = mk_rand(vocab * dim, 1);
    BOTH(BE->gather_rows(BE, PF(out), PF(src), PI(bidx), n, dim));
    check_same_bytes("gather_rows", &out);
    BOTH(BE->scatter_rows(BE, PF(out), PF(src), PI(bidx), n, dim));
    check_same_bytes("scatter_rows", &out);
    buf2 oid = mk_ints(ids, n);
    BOTH(BE->scatter_ids(BE, PI(oid), PI(bidx), PI(bidx), n / 2)); /* oid[idx[i]] = idx[i] */
    check_same_bytes("scatter_ids", &oid);
    drop(&oid);
    int32_t gi[300];
    for (int i = 0; i < n; i++) gi[i] = i % 5 ? idx[i] : -1; /* rows not counted */
    buf2 gid = mk_ints(ids, n), bgi = mk_ints(gi, n);
    BOTH(BE->gather_ids(BE, PI(gid), PI(bid), PI(bgi), n));
    check_same_bytes("gather_ids", &gid);
    drop(&gid), drop(&bgi);
    BOTH(BE->embed_fwd(BE, PF(out), PI(bid), PI(bidx), PF(table), n, dim));
    check_same_bytes("embed_fwd (row_idx)", &out);
    BOTH(BE->embed_bwd(BE, PF(dtable), PF(src), PI(bid), PI(bidx), n, dim, vocab));
    check_same_bytes("embed_bwd (row_idx, repeated ids)", &dtable);
    BOTH(BE->embed_bwd(BE, PF(dtable), PF(src), PI(bid), NULL, n, dim, vocab));
    check_same_bytes("embed_bwd", &dtable);
    double z[40], tau[40];
    for (int i = 0; i < 40; i++) z[i] = urand(), tau[i] = urand();
    buf2 bz = mk_doubles(z, 40), bt = mk_doubles(tau, 40), feat = mk_rand(40 * 2 * 128, 1);
    BOTH(BE->noise_features(BE, PF(feat), PD(bz), PD(bt), 40, 128, 0));
    check_close("noise_features", &feat, 40 * 2 * 128, 1e-6);
    BOTH(BE->noise_features(BE, PF(feat), PD(bz), PD(bt), 40, 128, 300));
    check_close("noise_features (cycles 300)", &feat, 40 * 2 * 128, 1e-6);
    drop(&bid), drop(&bidx), drop(&table), drop(&out), drop(&src), drop(&dtable), drop(&bz),
        drop(&bt), drop(&feat);
    test_rows16();
}

/* ---- logits ---- */

/* xent16 at precision prec, with and without row weights and a bias
 * gradient: on each backend its losses, 16-bit dlogits and bias gradient
 * are bitwise those of the backend's separate ops (xent, scale per row,
 * fill_column, bias_grad; the copy is the fp32 dlogits rounded), and the
 * GPU's close to the CPU's. 150 rows: chunks of 64, 64 and 22 for the bias
 * sums; 700 columns: three blocks of columns, the mask column in the
 * first. */
static void test_xent16(kf_precision prec) {
    int64_t rows = 150, V = 700, mask = 5;
    BOTH(BE->set_precision(BE, prec));
    const char *pn = kernels_precision_name(prec);
    int32_t tg[150];
    float hw[150];
    for (int i = 0; i < rows; i++) {
        tg[i] = i % 7 == 3 ? -1 : (int32_t)(urand() * V);
        hw[i] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? 0.5f : 1.75f;
    }
    float quarter = 0.25f;
    buf2 logits = mk_rand(rows * V, 6), t = mk_ints(tg, rows), rw = mk(hw, sizeof hw),
         gs = mk(&quarter, sizeof quarter); /* grad_scale: a device float */
    for (int var = 0; var < 2; var++) {     /* 1: row weights and a bias gradient */
        buf2 losses = mk_rand(rows, 1), d16 = mk(NULL, (size_t)(rows * V) * 2), db = mk_rand(V, 1),
             losses2 = mk_rand(rows, 1), d = mk_rand(rows * V, 1), db2 = mk_copy(&db);
        BOTH(BE->xent16(BE, PF(losses), P(d16), var ? PF(db) : NULL, PF(logits), PI(t),
                        var ? PF(rw) : NULL, rows, V, PF(gs), mask));
        /* the separate ops, on each backend */
        for (int side_ = 0; side_ < 2; side_++) {
            kf_backend *BE = be[side_];
            BE->xent(BE, PF(losses2), PF(d), PF(logits), PI(t), rows, V, PF(gs));
            if (var)
                for (int r = 0; r < rows; r++) BE->scale(BE, PF(d) + r * V, hw[r], V);
            BE->fill_column(BE, PF(d), rows, V, mask, 0.0f);
            if (var) BE->bias_grad(BE, PF(db2), PF(d), rows, V);
        }
        char wn[96], c[128];
        snprintf(wn, sizeof wn, "xent16 %s%s", pn, var ? " row_w dbias" : "");
        for (int side = 0; side < 2; side++) {
            snprintf(c, sizeof c, "%s (dlogits16, %s)", wn, side ? "cuda" : "cpu");
            check_copy16(c, &d16, side, &d, side, rows * V, prec);
        }
        snprintf(c, sizeof c, "%s (losses)", wn);
        check_close(c, &losses, rows, 1e-6);
        check_gpu_same(c, &losses, &losses2, rows);
        float *lc = down(&losses, 0), *lc2 = down(&losses2, 0);
        T_CHECK(!memcmp(lc, lc2, (size_t)rows * 4), "%s: the CPU's losses differ from xent's", c);
        free(lc), free(lc2);
        if (var) {
            snprintf(c, sizeof c, "%s (dbias)", wn);
            check_close(c, &db, V, 1e-5);
            check_gpu_same(c, &db, &db2, V);
            float *bc = down(&db, 0), *bc2 = down(&db2, 0);
            T_CHECK(!memcmp(bc, bc2, (size_t)V * 4), "%s: the CPU's dbias differs from bias_grad's",
                    c);
            free(bc), free(bc2);
        }
        drop(&losses), drop(&d16), drop(&db), drop(&losses2), drop(&d), drop(&db2);
    }
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    drop(&logits), drop(&t), drop(&rw), drop(&gs);
}

static void test_logits(void) {
    int64_t rows = 24, V = 5003;
    buf2 logits = mk_rand(rows * V, 6), losses = mk_rand(rows, 1), dl = mk_rand(rows * V, 1);
    int32_t tg[24];
    for (int i = 0; i < rows; i++) tg[i] = i % 7 == 3 ? -1 : (int32_t)(urand() * V);
    float quarter = 0.25f;
    buf2 t = mk_ints(tg, rows), gs = mk(&quarter, sizeof quarter);
    BOTH(BE->xent(BE, PF(losses), PF(dl), PF(logits), PI(t), rows, V, PF(gs)));
    check_close("xent losses", &losses, rows, 1e-6);
    check_close("xent dlogits", &dl, rows * V, 1e-6);
    buf2 lcopy = mk_rand(rows * V, 1);
    BOTH(BE->copy(BE, P(lcopy), P(logits), lcopy.bytes));
    BOTH(BE->xent(BE, NULL, PF(lcopy), PF(lcopy), PI(t), rows, V, (float *)NULL));
    check_close("xent dlogits aliasing logits", &lcopy, rows * V, 1e-6);

    /* argmax with planted ties: the first index must win */
    float *h = down(&logits, 0);
    for (int r = 0; r < rows; r++) h[r * V + 100 + r] = h[r * V + 4000] = 50.0f;
    BOTH(BE->upload(BE, P(logits), h, logits.bytes));
    free(h);
    buf2 ids = mk_ints(NULL, rows);
    BOTH(BE->argmax(BE, PI(ids), PF(logits), rows, V));
    check_same_bytes("argmax (ties)", &ids);

    /* NaNs never win: one at the start of a GPU thread's slice (v < 512) must
     * not hide the row maximum later in that slice; a NaN at 0 gives 0 */
    h = down(&logits, 0);
    for (int r = 0; r < rows; r++) {
        h[r * V + 7 + r] = NAN;
        h[r * V + 7 + r + 512] = 60.0f;
    }
    h[0] = NAN;
    BOTH(BE->upload(BE, P(logits), h, logits.bytes));
    free(h);
    BOTH(BE->argmax(BE, PI(ids), PF(logits), rows, V));
    check_same_bytes("argmax (NaNs)", &ids);
    int32_t *ia = down(&ids, 1);
    T_EQ_INT(ia[0], 0, "argmax (NaNs): row 0");
    T_EQ_INT(ia[1], 7 + 1 + 512, "argmax (NaNs): row 1");
    free(ia);

    double z[24], tau[24];
    buf2 l2 = mk_rand(rows * V, 4);
    for (int i = 0; i < rows; i++) z[i] = urand(), tau[i] = i == 0 ? 0.01 : 0.2 + urand();
    z[1] = 0.0, z[2] = 1.0;
    buf2 bz = mk_doubles(z, rows), bt = mk_doubles(tau, rows);
    BOTH(BE->sample_icdf(BE, PI(ids), PF(l2), PD(bt), PD(bz), rows, V));
    check_same_bytes("sample_icdf", &ids);
    buf2 lo = mk_doubles(z, rows), hi = mk_doubles(z, rows);
    BOTH(BE->icdf_bin(BE, PD(lo), PD(hi), PF(l2), PD(bt), PI(ids), rows, V));
    double *loc = down(&lo, 0), *log_ = down(&lo, 1), *hic = down(&hi, 0), *hig = down(&hi, 1);
    double md = 0;
    for (int i = 0; i < rows; i++)
        md = fmax(md, fmax(fabs(loc[i] - log_[i]), fabs(hic[i] - hig[i])));
    printf("  %-44s max abs err %.3g\n", "icdf_bin", md);
    T_CHECK(md < 1e-12, "icdf_bin: max abs err %.3g", md);
    free(loc), free(log_), free(hic), free(hig);

    /* CDF bins tile [0, 1): the bin of token t ends exactly where t+1's begins
     * (one row repeated, target r in row r), also across the GPU's slices */
    {
        int64_t Vb = 600;
        buf2 one = mk_rand(Vb, 4);
        float *h1 = down(&one, 0), *hb = malloc((size_t)(Vb * Vb) * sizeof(float));
        int32_t *tb = malloc((size_t)Vb * sizeof(int32_t));
        double *taub = malloc((size_t)Vb * sizeof(double));
        for (int64_t r = 0; r < Vb; r++) {
            memcpy(hb + r * Vb, h1, (size_t)Vb * sizeof(float));
            tb[r] = (int32_t)r;
            taub[r] = 0.7;
        }
        buf2 lb = mk(hb, (size_t)(Vb * Vb) * sizeof(float)), tgb = mk_ints(tb, Vb);
        buf2 taubb = mk_doubles(taub, Vb), lob = mk_doubles(taub, Vb), hib = mk_doubles(taub, Vb);
        for (int side = 0; side < 2; side++) {
            kf_backend *bk = be[side];
            bk->icdf_bin(bk, lob.p[side], hib.p[side], lb.p[side], taubb.p[side], tgb.p[side], Vb,
                         Vb);
            double *lo_h = down(&lob, side), *hi_h = down(&hib, side);
            int64_t gaps = 0, first = -1;
            for (int64_t t = 0; t + 1 < Vb; t++)
                if (hi_h[t] != lo_h[t + 1]) gaps++, first = first < 0 ? t : first;
            printf("  %-44s %lld bin edges differ\n",
                   side ? "icdf_bin tiling (cuda)" : "icdf_bin tiling (cpu)", (long long)gaps);
            T_EQ_INT(gaps, 0,
                     "icdf_bin tiling (%s): got %lld bins whose hi != the next lo (first at "
                     "t = %lld: %.17g vs %.17g), want 0",
                     side ? "cuda" : "cpu", (long long)gaps, (long long)first,
                     first < 0 ? 0.0 : hi_h[first], first < 0 ? 0.0 : lo_h[first + 1]);
            free(lo_h), free(hi_h);
        }
        free(h1), free(hb), free(tb), free(taub);
        drop(&one), drop(&lb), drop(&tgb), drop(&taubb), drop(&lob), drop(&hib);
    }

    int64_t nh = 40;
    int32_t hist[24 * 40];
    for (int i = 0; i < rows * nh; i++) hist[i] = i % 5 == 0 ? -1 : (int32_t)(urand() * 30);
    buf2 bh = mk_ints(hist, rows * nh);
    BOTH(BE->freq_penalty(BE, PF(l2), PI(bh), nh, rows, V, 0.3f));
    check_same_bytes("freq_penalty", &l2);
    /* loss_sum: the counted rows in order, added to the accumulator */
    double a0 = 0.1;
    /* counted rows 1e30, u, -1e30, u, u, ...: in order u + u + ..., reversed 0
     * (the small ones fall below 1e30's ulp); the ignored rows 1e30 */
    float rlh[24];
    for (int i = 0, c = 0; i < rows; i++)
        rlh[i] = tg[i] < 0 ? 1e30f : c == 0 ? 1e30f : c == 2 ? -1e30f : urand(), c += tg[i] >= 0;
    buf2 acc = mk_doubles(&a0, 1), rl = mk(rlh, sizeof rlh);
    BOTH(BE->loss_sum(BE, PD(acc), PF(rl), PI(t), rows));
    check_same_bytes("loss_sum", &acc);
    drop(&acc), drop(&rl);
    drop(&logits), drop(&losses), drop(&dl), drop(&t), drop(&gs), drop(&lcopy), drop(&ids),
        drop(&l2), drop(&bz), drop(&bt), drop(&lo), drop(&hi), drop(&bh);
}

/* ---- reductions and optimiser ---- */

/* The decode-time output layer: logits close to the CPU's; the argmax with
 * planted ties (first index) and with the mask token. Ids are compared only
 * where the CPU's best logit beats the runner-up by a margin the two
 * backends' roundings cannot bridge. */
static void test_head(void) {
    const int64_t V = 5003, H = 64, rows = 12, mask = 17;
    buf2 w = mk_rand(V * H, 0.2f), bias = mk_rand(V, 1.0f), x = mk_rand(rows * H, 1.0f);
    buf2 logits = mk(NULL, (size_t)(rows * V) * sizeof(float)), ids = mk_ints(NULL, rows);
    buf2 ids2 = mk_ints(NULL, rows);
    void *hd[2];
    BOTH(hd[side_] = BE->head_pack(BE, PF(w), PF(bias), V, H, mask, -1000.0f));
    BOTH(BE->head_fwd(BE, PF(logits), PI(ids), PF(x), hd[side_], rows));
    check_close("head_fwd logits", &logits, rows * V, 1e-5);
    BOTH(BE->head_fwd(BE, NULL, PI(ids2), PF(x), hd[side_], rows));
    float *lc = down(&logits, 0);
    int32_t *ic = down(&ids, 0), *ig = down(&ids, 1), *ig2 = down(&ids2, 1);
    int same = 1, compared = 0;
    for (int64_t r = 0; r < rows; r++) {
        float best = -INFINITY, second = -INFINITY;
        for (int64_t v = 0; v < V; v++) {
            float l = lc[r * V + v];
            if (l > best) second = best, best = l;
            else if (l > second) second = l;
        }
        if (best - second < 1e-4f * fmaxf(1.0f, fabsf(best))) continue;
        compared++;
        same &= ic[r] == ig[r] && ic[r] == ig2[r] && lc[r * V + mask] == -1000.0f;
    }
    printf("  %-44s %d of %lld rows compared\n", "head_fwd ids", compared, (long long)rows);
    T_CHECK(same, "head_fwd ids: cuda differs from cpu (%d rows compared)", compared);
    T_CHECK(compared >= rows / 2, "head_fwd ids: %d rows compared, want >= %d", compared,
            (int)(rows / 2));
    free(lc), free(ic), free(ig), free(ig2);
    BOTH(BE->head_free(BE, hd[side_]));
    drop(&w), drop(&bias), drop(&x), drop(&logits), drop(&ids), drop(&ids2);
}

/* The head's contract beyond test_head: in fp16 mode the logits are still
 * fp32 (no half rounding: close to the CPU's at fp32 tolerance), and outside
 * batch-invariant mode a row's logits alone equal the same row's inside a
 * batch of 65, bit for bit (a shape-dependent GEMM, e.g. split-K, breaks it). */
static void test_head_contract(void) {
    const int64_t V = 2000, H = 512, rows = 65;
    buf2 w = mk_rand(V * H, 0.05f), x = mk_rand(rows * H, 1.0f);
    buf2 logits = mk(NULL, (size_t)(rows * V) * sizeof(float));
    buf2 one = mk(NULL, (size_t)V * sizeof(float));
    void *hd[2];
    BOTH(hd[side_] = BE->head_pack(BE, PF(w), NULL, V, H, -1, 0.0f));
    BOTH(BE->set_precision(BE, KF_PREC_FP16));
    BOTH(BE->head_fwd(BE, PF(logits), NULL, PF(x), hd[side_], rows));
    check_close("head_fwd logits fp16 mode (fp32 logits)", &logits, rows * V, 1e-5);
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    kf_backend *g = be[1];
    g->head_fwd(g, logits.p[1], NULL, x.p[1], hd[1], rows);
    g->head_fwd(g, one.p[1], NULL, x.p[1], hd[1], 1);
    float *lb = down(&logits, 1), *l1 = down(&one, 1);
    int64_t diff = 0;
    for (int64_t v = 0; v < V; v++) diff += memcmp(&lb[v], &l1[v], sizeof(float)) != 0;
    printf("  %-44s %lld of %lld logits differ\n", "head_fwd row alone vs in a batch",
           (long long)diff, (long long)V);
    T_EQ_INT(diff, 0,
             "head_fwd: got %lld logits of row 0 that differ alone vs in a batch of %lld, want 0",
             (long long)diff, (long long)rows);
    free(lb), free(l1);
    BOTH(BE->head_free(BE, hd[side_]));
    drop(&w), drop(&x), drop(&logits), drop(&one);
}

static void test_optim(void) {
    int64_t n = 1000003;
    buf2 x = mk_rand(n, 3);
    double s[2], q[2];
    for (int i = 0; i < 2; i++) {
        s[i] = be[i]->sum(be[i], x.p[i], n);
        q[i] = be[i]->sumsq(be[i], x.p[i], n);
    }
    printf("  sum %.17g vs %.17g, sumsq %.17g vs %.17g\n", s[0], s[1], q[0], q[1]);
    T_CLOSE(s[1], s[0], 1e-9, "sum");
    T_CLOSE(q[1], q[0], 1e-12, "sumsq");
    /* sumsq is its parts added in order (kernels.h), on the GPU as on the CPU;
     * each part close to the CPU's */
    int64_t nparts = (n + KF_SUM_PART - 1) / KF_SUM_PART, far = 0;
    double *pp[2], fold = 0;
    for (int i = 0; i < 2; i++) {
        pp[i] = malloc((size_t)nparts * sizeof(double));
        be[i]->sumsq_parts(be[i], pp[i], x.p[i], n);
    }
    for (int64_t i = 0; i < nparts; i++) {
        far += fabs(pp[1][i] - pp[0][i]) > 1e-12 * fmax(1.0, fabs(pp[0][i]));
        fold += pp[1][i];
    }
    T_EQ_INT(far, 0, "sumsq_parts: parts of %lld not within 1e-12 of the cpu's", (long long)nparts);
    T_CHECK(fold == q[1], "sumsq (gpu) = its parts added in order: got %.17g want %.17g", q[1],
            fold);
    free(pp[0]), free(pp[1]);
    float *h = down(&x, 0);
    h[5] = INFINITY, h[77777] = NAN, h[n - 1] = -INFINITY;
    BOTH(BE->upload(BE, P(x), h, x.bytes));
    free(h);
    T_EQ_INT(be[1]->count_nonfinite(be[1], x.p[1], n), 3, "count_nonfinite: want 3");
    T_EQ_INT(be[0]->count_nonfinite(be[0], x.p[0], n), 3, "count_nonfinite (cpu): want 3");

    int64_t np = 100003;
    buf2 p = mk_rand(np, 1), g = mk_rand(np, 1), m = mk_rand(np, 0.1f), e = mk_rand(np, 1);
    float *hv = malloc((size_t)np * sizeof(float)); /* second moments are non-negative */
    for (int64_t i = 0; i < np; i++) hv[i] = 0.01f * nrand() * nrand();
    for (int64_t i = 0; i < np; i++) hv[i] *= hv[i];
    buf2 v = mk(hv, (size_t)np * sizeof(float));
    free(hv);
    for (int step = 1; step <= 3; step++) {
        BOTH(BE->adamw(BE, PF(p), PF(g), PF(m), PF(v), np, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, step,
                       0.5f, NULL));
        BOTH(BE->ema(BE, PF(e), PF(p), np, 0.999f, NULL));
    }
    check_close("adamw params", &p, np, 1e-6);
    check_close("adamw m", &m, np, 1e-6);
    check_close("adamw v", &v, np, 1e-6);
    check_close("ema", &e, np, 1e-6);
    drop(&x), drop(&p), drop(&g), drop(&m), drop(&v), drop(&e);
}

/* The GPU's gradient check: its sumsq is its sumsq_parts added in order and
 * its decision is the CPU's arithmetic on that sumsq (the CPU backend's
 * grad_check given it), each field bitwise; clipped and not, and an
 * uploaded non-finite sumsq skips. adamw and ema read a skip on the device
 * and change nothing; an applied ctl's grad_scale gives bitwise the update
 * with that grad_scale passed. */
static void check_ctl(const char *what, const kf_grad_ctl *got, const kf_grad_ctl *want) {
    T_CHECK(!memcmp(&got->sumsq, &want->sumsq, sizeof(double)), "%s: sumsq %.17g want %.17g", what,
            got->sumsq, want->sumsq);
    T_CHECK(!memcmp(&got->norm, &want->norm, sizeof(double)), "%s: norm %.17g want %.17g", what,
            got->norm, want->norm);
    T_CHECK(!memcmp(&got->grad_scale, &want->grad_scale, sizeof(float)),
            "%s: grad_scale %.9g want %.9g", what, got->grad_scale, want->grad_scale);
    T_EQ_INT(got->skip, want->skip, "%s: skip", what);
}

static void test_grad_check(void) {
    int64_t n = 1000003, nparts = (n + KF_SUM_PART - 1) / KF_SUM_PART;
    buf2 x = mk_rand(n, 3);
    double *parts = malloc((size_t)nparts * sizeof(double)), fold = 0;
    be[1]->sumsq_parts(be[1], parts, x.p[1], n);
    for (int64_t i = 0; i < nparts; i++) fold += parts[i];
    free(parts);
    kf_grad_ctl z = {.loss_scale = 1024.0}, got, want;
    buf2 c = mk(&z, sizeof z);
    double clips[3] = {1.0, 1e9, 0.0}; /* clipped, under the clip, none */
    for (int k = 0; k < 3; k++) {
        be[1]->grad_check(be[1], c.p[1], x.p[1], n, clips[k]);
        be[1]->download(be[1], &got, c.p[1], sizeof got);
        want = (kf_grad_ctl){.loss_scale = 1024.0, .sumsq = fold};
        be[0]->grad_check(be[0], &want, NULL, 0, clips[k]);
        char what[64];
        snprintf(what, sizeof what, "grad_check clip %g", clips[k]);
        check_ctl(what, &got, &want);
    }
    kf_grad_ctl bad = {.loss_scale = 1.0, .sumsq = INFINITY};
    be[1]->upload(be[1], c.p[1], &bad, sizeof bad);
    be[1]->grad_check(be[1], c.p[1], NULL, 0, 1.0);
    be[1]->download(be[1], &got, c.p[1], sizeof got);
    want = bad;
    be[0]->grad_check(be[0], &want, NULL, 0, 1.0);
    check_ctl("grad_check of an uploaded inf", &got, &want);

    /* adamw and ema reading the skip on the device */
    int64_t np = 100003;
    buf2 p = mk_rand(np, 1), g = mk_rand(np, 1), m = mk_rand(np, 0.1f), v = mk_rand(np, 0.1f),
         e = mk_rand(np, 1);
    float *p0 = down(&p, 1), *m0 = down(&m, 1), *v0 = down(&v, 1), *e0 = down(&e, 1);
    be[1]->adamw(be[1], p.p[1], g.p[1], m.p[1], v.p[1], np, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1,
                 1.0f, c.p[1]);
    be[1]->ema(be[1], e.p[1], p.p[1], np, 0.5f, c.p[1]);
    float *p1 = down(&p, 1), *m1 = down(&m, 1), *e1 = down(&e, 1);
    T_CHECK(!memcmp(p1, p0, p.bytes), "adamw skipped by ctl: params unchanged");
    T_CHECK(!memcmp(m1, m0, m.bytes), "adamw skipped by ctl: m unchanged");
    T_CHECK(!memcmp(e1, e0, e.bytes), "ema skipped by ctl: unchanged");
    free(p1), free(m1), free(e1);
    /* applied: the ctl's grad_scale, against a copy updated with it passed */
    kf_grad_ctl ok = {.sumsq = 4, .norm = 2, .grad_scale = 0.375f, .skip = 0};
    kernels_adamw_factors(&ok, 1e-3f, 0.9f, 0.999f, 0.01f, 1); /* the arguments' */
    ok.ema_decay = 0.5f;
    be[1]->upload(be[1], c.p[1], &ok, sizeof ok);
    buf2 q = mk(p0, p.bytes), mq = mk(m0, m.bytes), vq = mk(v0, v.bytes), eq = mk(e0, e.bytes);
    be[1]->adamw(be[1], p.p[1], g.p[1], m.p[1], v.p[1], np, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1,
                 1.0f, c.p[1]);
    be[1]->ema(be[1], e.p[1], p.p[1], np, 0.5f, c.p[1]);
    be[1]->adamw(be[1], q.p[1], g.p[1], mq.p[1], vq.p[1], np, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1,
                 0.375f, NULL);
    be[1]->ema(be[1], eq.p[1], q.p[1], np, 0.5f, NULL);
    p1 = down(&p, 1), e1 = down(&e, 1);
    float *q1 = down(&q, 1), *eq1 = down(&eq, 1);
    T_CHECK(!memcmp(p1, q1, p.bytes), "adamw under an applied ctl: bitwise its grad_scale passed");
    T_CHECK(memcmp(p1, p0, p.bytes) != 0, "adamw under an applied ctl: params moved");
    T_CHECK(!memcmp(e1, eq1, e.bytes), "ema under an applied ctl: bitwise without one");
    free(p1), free(e1), free(q1), free(eq1);
    /* ctl's factors, not the arguments', make the update: a later step's */
    kernels_adamw_factors(&ok, 5e-4f, 0.9f, 0.999f, 0.01f, 7);
    ok.ema_decay = 0.25f;
    be[1]->upload(be[1], c.p[1], &ok, sizeof ok);
    be[1]->adamw(be[1], p.p[1], g.p[1], m.p[1], v.p[1], np, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1,
                 1.0f, c.p[1]);
    be[1]->ema(be[1], e.p[1], p.p[1], np, 0.5f, c.p[1]);
    be[1]->adamw(be[1], q.p[1], g.p[1], mq.p[1], vq.p[1], np, 5e-4f, 0.9f, 0.999f, 1e-6f, 0.01f, 7,
                 0.375f, NULL);
    be[1]->ema(be[1], eq.p[1], q.p[1], np, 0.25f, NULL);
    p1 = down(&p, 1), e1 = down(&e, 1), q1 = down(&q, 1), eq1 = down(&eq, 1);
    T_CHECK(!memcmp(p1, q1, p.bytes), "adamw: ctl's factors replace lr's and step's (bitwise)");
    T_CHECK(!memcmp(e1, eq1, e.bytes), "ema: ctl's decay replaces the argument (bitwise)");
    free(p0), free(m0), free(e0), free(v0), free(p1), free(e1), free(q1), free(eq1);
    drop(&x), drop(&c), drop(&p), drop(&g), drop(&m), drop(&v), drop(&e);
    drop(&q), drop(&mq), drop(&vq), drop(&eq);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps every line printed before it */
    char msg[256] = "";
    be[0] = kernels_cpu_create();
    be[1] = kernels_cuda_create(0, msg, sizeof msg);
    T_CHECK(be[1] != NULL, "no CUDA backend: %s", msg);
    if (!be[1]) return T_DONE();
    test_matmul(KF_PREC_FP32, 0);
    BOTH(BE->set_precision(BE, KF_PREC_FP16));
    test_matmul(KF_PREC_FP16, 0);
    be[1]->batch_invariant = 1;
    test_matmul(KF_PREC_FP16, 1);
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    test_matmul(KF_PREC_FP32, 1);
    be[1]->batch_invariant = 0;
    BOTH(BE->set_precision(BE, KF_PREC_BF16));
    test_matmul(KF_PREC_BF16, 0);
    be[1]->batch_invariant = 1;
    test_matmul(KF_PREC_BF16, 1);
    be[1]->batch_invariant = 0;
    BOTH(BE->set_precision(BE, KF_PREC_FP32));
    test_matmul_invariance(KF_PREC_FP32);
    test_matmul_invariance(KF_PREC_FP16);
    test_matmul_invariance(KF_PREC_BF16);
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++) {
        test_matmul_tc_invariance((kf_precision)prec);
        test_matmul_inv_edges((kf_precision)prec);
    }
    test_matmul_empty();
    test_bias();
    for (int prec = KF_PREC_FP32; prec <= KF_PREC_BF16; prec++)
        for (int inv = 0; inv < 2; inv++) {
            test_linear_act((kf_precision)prec, inv);
            test_linear_bwd((kf_precision)prec, inv);
            if (prec != KF_PREC_FP32) test_copies16((kf_precision)prec, inv);
            if (prec != KF_PREC_FP32) test_weights16((kf_precision)prec, inv);
        }
    test_gemm_copies(KF_PREC_FP16);
    test_gemm_copies(KF_PREC_BF16);
    test_linear_fused(KF_PREC_FP16);
    test_linear_fused(KF_PREC_BF16);
    test_layernorm(0);
    test_layernorm(1);
    test_rope();
    test_attention();
    test_tensor_cores();
    test_attn_tc_invariance(KF_PREC_FP16);
    test_attn_tc_invariance(KF_PREC_BF16);
    test_attn_decode();
    test_attn_decode_len();
    test_pointwise();
    test_rows();
    test_logits();
    test_xent16(KF_PREC_FP16);
    test_xent16(KF_PREC_BF16);
    test_head();
    test_head_contract();
    test_optim();
    test_grad_check();
    be[0]->destroy(be[0]);
    be[1]->destroy(be[1]);
    return T_DONE();
}
