/* kernels/cpu/cpu_linear_packed.c — decode-time linear layers (linear_pack,
 * linear_pack_free, linear_packed_fwd).
 *
 * A decoding step runs every weight on a few rows. Through cpu_gemm_fixed
 * each call transposes all of W [out, in] into column panels first, which
 * costs several times the product itself at one row (it reads W, writes the
 * panels and reads them again). Here W is packed once, in panels of 32
 * outputs by `in` ([panels][in][32], zero past out), and a kernel per SIMD
 * level streams the panels with one register block per few rows (AVX-512: up
 * to 8 rows x 32 outputs, AVX2 + FMA: 1-2 x 32 or up to 6 x 16 in passes
 * over chunks of the panel, baseline: 4 x 32 through fmaf): each weight is
 * read from memory once, at its bandwidth.
 *
 * Every output is cpu_gemm_fixed's chain, fma over k = 0..in-1 in order from
 * +0, then alpha*s (alpha 1) or fma(beta, C, alpha*s), so the results are
 * bitwise linear_act's for any row count, row block, thread count and SIMD
 * level. In bf16 mode the panels hold the bf16 weights (half the bytes),
 * widened to fp32 exactly as they are read: the products equal the fp32
 * chain over the rounded operands that cpu_gemm_fixed computes. A k's 32
 * bf16 are stored as 16 pairs (output j, output j + 16), so one 32-bit lane
 * widens to two fp32 by a shift (j) and a mask (j + 16), a single-port
 * operation each, where zero-extending 16-bit values costs a shuffle on the
 * port the FMAs need. (vdpbf16ps
 * would read the same bytes but adds pairs of products before the
 * accumulator, another order, which no AVX2 kernel could reproduce.)
 */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

#define LP_PANEL 32 /* outputs per panel: two AVX-512 vectors, four AVX2 ones */

/* where output j of a panel's k-row lives in bf16 mode: pairs (j, j + 16),
 * j first, in the low half of a little-endian 32-bit lane */
static inline int lp_bf16_at(int j) { return 2 * (j % 16) + j / 16; }

typedef struct cpu_linear {
    int64_t in, out, panels;
    const float *w; /* as given: the reference path's operands */
    const void *w16;
    kf_precision prec; /* the backend's precision at packing */
    float *p32;        /* [panels][in][PANEL]: fp32 and fp16 modes (values cpu_lowp'd) */
    uint16_t *p16;     /* [panels][in][PANEL]: bf16 mode, the bf16 bits, pairs (lp_bf16_at) */
} cpu_linear;

void *cpu_linear_pack(kf_backend *b, const float *w, const void *w16, int64_t in, int64_t out) {
    KF_CHECK(in >= 1 && out >= 1, "linear_pack: in = %lld, out = %lld", (long long)in,
             (long long)out);
    cpu_linear *L = kf_calloc(1, sizeof *L);
    *L = (cpu_linear){.in = in,
                      .out = out,
                      .panels = (out + LP_PANEL - 1) / LP_PANEL,
                      .w = w,
                      .w16 = w16,
                      .prec = b->precision};
    size_t n = (size_t)(L->panels * in * LP_PANEL);
    int bf = L->prec == KF_PREC_BF16;
    if (bf) L->p16 = kf_alloc_stream(n * sizeof(uint16_t), 0);
    else L->p32 = kf_alloc_stream(n * sizeof(float), 0);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < L->panels; p++)
        for (int64_t j = 0; j < LP_PANEL; j++) {
            int64_t o = p * LP_PANEL + j;
            for (int64_t k = 0; k < in; k++) {
                float v = o < out ? cpu_lowp(w[o * in + k], L->prec) : 0.0f;
                size_t row = (size_t)((p * in + k) * LP_PANEL);
                if (bf) {
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    L->p16[row + lp_bf16_at((int)j)] = (uint16_t)(u >> 16); /* exact: bf16 */
                } else {
                    L->p32[row + j] = v;
                }
            }
        }
    return L;
}

void cpu_linear_pack_free(kf_backend *b, void *lin) {
    cpu_linear *L = lin;
    if (!L) return;
    free(L->p32);
    free(L->p16);
    free(L);
}

/* The part of the next panel a block prefetches into L2 as it goes: from
 * p, step / 65536 bytes a k. When several row blocks pass over a panel,
 * only the first reads memory and the others compute from L2; the 4
 * KiB-ahead prefetch alone left memory idle in those (time = reads +
 * products, where it could be the larger of the two: 8 rows at AVX2 ran at
 * 38 GFLOP/s streaming against 67 from L2). Each pass then takes its share
 * of the next panel, so the reads go on under every pass. A panel's only
 * block reads the panels in order, a chunk at a time, and whether the next
 * panel's prefetch helps it depends on the CPU and the block
 * (cpu_lone_block_ahead): on the Xeon, and on Zen 4 for blocks that compute
 * as long as they read, the line prefetch alone left memory idle; on Zen 5
 * the next panel's, issued at the FMAs' pace, only competed with it. */
typedef struct lp_ahead {
    /* NULL: none; set where other blocks pass over the panel, or
     * cpu_lone_block_ahead() */
    const char *p;
    int64_t step;
} lp_ahead;

/* lines: how many 64-byte lines the share of one k may span; a prefetch
 * more than that costs a load slot for nothing (AVX2, 8 rows: 7% of the
 * time with two where one does) */
static inline __attribute__((always_inline)) void lp_ahead_k(lp_ahead a, int64_t k, int lines) {
    const char *q = a.p + (((k * a.step) >> 16) & ~(int64_t)63);
    _mm_prefetch(q, _MM_HINT_T1);
    if (lines > 1) _mm_prefetch(q + 64, _MM_HINT_T1);
}

/* One block of R rows of x ([R][K], row stride K) against one panel (w or
 * h: fp32 or bf16 [K][PANEL]) into c (row stride ldc), the GEMM's epilogue
 * with alpha 1, prefetching `ah` on the way; a kernel that makes several
 * passes over the panel makes them chunk k's at a time. */
typedef void lp_fn(int R, const float *x, int64_t K, const float *w, const uint16_t *h, float *c,
                   int64_t ldc, float beta, lp_ahead ah, int64_t chunk);

/* ------------------------------------------------------- AVX-512: 8 x 32 */
#define LP512 __attribute__((target("avx512f,avx512bw,fma")))

/* outputs 16q..16q+15 of row k of a panel */
LP512 static inline __attribute__((always_inline)) __m512
lp512_load(const float *w, const uint16_t *h, int64_t k, int q) {
    if (!h) return _mm512_loadu_ps(w + k * LP_PANEL + q * 16);
    __m512i u = _mm512_loadu_si512(h + k * LP_PANEL);
    if (q) return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xFFFF0000u)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

LP512 static inline __attribute__((always_inline)) void
lp512_body(int R, const float *x, int64_t K, const float *w, const uint16_t *h, float *c,
           int64_t ldc, float beta, lp_ahead ah) {
    __m512 r[8][2];
    for (int i = 0; i < R; i++) r[i][0] = r[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const char *pf = h ? (const char *)(h + k * LP_PANEL) : (const char *)(w + k * LP_PANEL);
        _mm_prefetch(pf + CPU_PREFETCH_BYTES, _MM_HINT_T0);
        if (!h) _mm_prefetch(pf + CPU_PREFETCH_BYTES + 64, _MM_HINT_T0);
        if (ah.p) lp_ahead_k(ah, k, 2);
        __m512 b0 = lp512_load(w, h, k, 0), b1 = lp512_load(w, h, k, 1);
        for (int i = 0; i < R; i++) {
            __m512 a = _mm512_set1_ps(x[i * K + k]);
            r[i][0] = _mm512_fmadd_ps(a, b0, r[i][0]);
            r[i][1] = _mm512_fmadd_ps(a, b1, r[i][1]);
        }
    }
    __m512 va = _mm512_set1_ps(1.0f), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < R; i++)
        for (int q = 0; q < 2; q++) {
            float *ci = c + i * ldc + q * 16;
            __m512 v = _mm512_mul_ps(va, r[i][q]);
            if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), v);
            _mm512_storeu_ps(ci, v);
        }
}

/* one copy per row count, so the register block is unrolled */
#define LP_ROWS_CASES(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#define LP512_R(n)                                                                                 \
    LP512 static void lp512_##n(const float *x, int64_t K, const float *w, const uint16_t *h,      \
                                float *c, int64_t ldc, float beta, lp_ahead ah) {                  \
        if (h) lp512_body(n, x, K, NULL, h, c, ldc, beta, ah);                                     \
        else lp512_body(n, x, K, w, NULL, c, ldc, beta, ah);                                       \
    }
LP_ROWS_CASES(LP512_R)

static void lp_avx512(int R, const float *x, int64_t K, const float *w, const uint16_t *h, float *c,
                      int64_t ldc, float beta, lp_ahead ah, int64_t chunk) {
    switch (R) {
#define LP512_CASE(n)                                                                              \
    case n: lp512_##n(x, K, w, h, c, ldc, beta, ah); break;
        LP_ROWS_CASES(LP512_CASE)
    default: KF_FATAL("lp_avx512: %d rows", R);
    }
}

/* ---------------------------------------------------------- AVX2: 2 x 32 */
#define LP256 __attribute__((target("avx2,fma")))

/* outputs 8q..8q+7 of row k of a panel (bf16: the lanes of q & 1, their
 * low halves for q < 2) */
LP256 static inline __attribute__((always_inline)) __m256
lp256_load(const float *w, const uint16_t *h, int64_t k, int q) {
    if (!h) return _mm256_loadu_ps(w + k * LP_PANEL + q * 8);
    __m256i u = _mm256_loadu_si256((const __m256i *)(h + k * LP_PANEL + (q & 1) * 16));
    if (q >= 2)
        return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xFFFF0000u)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* 1-2 rows over k's [k0, k0 + kn) of the whole panel, 8 accumulators (Zen 4
 * and Intel's two FMA pipes of 4 cycles' latency): from +0 where k0 is 0,
 * else from the partial chains in acc; the epilogue into c after the last
 * k, else the chains back into acc. pf: prefetch the lines 4 KiB ahead. */
LP256 static inline __attribute__((always_inline)) void
lp256_span(int R, const float *x, int64_t K, int64_t k0, int64_t kn, const float *w,
           const uint16_t *h, float *acc, float *c, int64_t ldc, float beta, int pf, lp_ahead ah,
           int ah_lines) {
    __m256 r0[4], r1[4];
    for (int q = 0; q < 4; q++) {
        r0[q] = k0 ? _mm256_loadu_ps(acc + q * 8) : _mm256_setzero_ps();
        r1[q] = k0 && R > 1 ? _mm256_loadu_ps(acc + 32 + q * 8) : _mm256_setzero_ps();
    }
    const float *x1 = x + (R > 1 ? K : 0);
    for (int64_t k = k0; k < k0 + kn; k++) {
        const char *pk = h ? (const char *)(h + k * LP_PANEL) : (const char *)(w + k * LP_PANEL);
        if (pf) _mm_prefetch(pk + CPU_PREFETCH_BYTES, _MM_HINT_T0);
        if (pf && !h) _mm_prefetch(pk + CPU_PREFETCH_BYTES + 64, _MM_HINT_T0);
        if (ah.p) lp_ahead_k(ah, k, ah_lines);
        __m256 a0 = _mm256_broadcast_ss(x + k), a1 = _mm256_broadcast_ss(x1 + k);
        for (int q = 0; q < 4; q++) {
            __m256 bq = lp256_load(w, h, k, q);
            r0[q] = _mm256_fmadd_ps(a0, bq, r0[q]);
            if (R > 1) r1[q] = _mm256_fmadd_ps(a1, bq, r1[q]);
        }
    }
    if (k0 + kn < K) {
        for (int q = 0; q < 4; q++) {
            _mm256_storeu_ps(acc + q * 8, r0[q]);
            if (R > 1) _mm256_storeu_ps(acc + 32 + q * 8, r1[q]);
        }
        return;
    }
    __m256 va = _mm256_set1_ps(1.0f), vb = _mm256_set1_ps(beta);
    for (int i = 0; i < R; i++)
        for (int q = 0; q < 4; q++) {
            float *ci = c + i * ldc + q * 8;
            __m256 v = _mm256_mul_ps(va, i ? r1[q] : r0[q]);
            if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), v);
            _mm256_storeu_ps(ci, v);
        }
}

LP256 static inline __attribute__((always_inline)) void
lp256_body(int R, const float *x, int64_t K, const float *w, const uint16_t *h, float *c,
           int64_t ldc, float beta, lp_ahead ah) {
    lp256_span(R, x, K, 0, K, w, h, NULL, c, ldc, beta, 1, ah, 2);
}

#define LP256_R(n)                                                                                 \
    LP256 static void lp256_##n(const float *x, int64_t K, const float *w, const uint16_t *h,      \
                                float *c, int64_t ldc, float beta, lp_ahead ah) {                  \
        if (h) lp256_body(n, x, K, NULL, h, c, ldc, beta, ah);                                     \
        else lp256_body(n, x, K, w, NULL, c, ldc, beta, ah);                                       \
    }
LP256_R(1)
LP256_R(2)

/* From 3 rows: up to cpu_avx2_block_rows() (6 or 12) in one block, as one
 * or two sub-blocks of up to 6 rows x 16 outputs, half a panel (row stride
 * 32) at a time: 12 accumulators + 2 weight vectors + 1 broadcast fill
 * AVX2's 16 registers and cover the FMAs' latency. Every sub-block and half
 * (a pass) runs over a chunk of LP_KC k's before the next chunk, partial
 * chains kept in a buffer: the chunk (4 KiB) comes from memory once and the
 * other passes re-read it from L1. Where the block prefetches the next
 * panel (`p` set), each pass takes its share into L2 as it goes. Named
 * variables, as in cpu_gemm_fixed's AVX2 kernel: gcc kept an array's copy
 * on the stack. */
#define LP_KC 32
#define LP256_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
LP256 static inline __attribute__((always_inline)) void
lp256_half(int R, int half, const float *x, int64_t K, int64_t k0, int64_t kn, const float *w,
           const uint16_t *h, float *acc, float *c, int64_t ldc, float beta, int pf_line,
           lp_ahead ah) {
    int first = k0 == 0, last = k0 + kn == K;
#define DECL(i)                                                                                    \
    __m256 s##i##0 = _mm256_setzero_ps(), s##i##1 = _mm256_setzero_ps();                           \
    if (R > i && !first) {                                                                         \
        s##i##0 = _mm256_loadu_ps(acc + i * 16);                                                   \
        s##i##1 = _mm256_loadu_ps(acc + i * 16 + 8);                                               \
    }                                                                                              \
    const float *x##i = x + (R > i ? i : 0) * K;
    LP256_ROWS(DECL)
#undef DECL
    for (int64_t k = k0; k < k0 + kn; k++) {
        const char *pf = h ? (const char *)(h + k * LP_PANEL) : (const char *)(w + k * LP_PANEL);
        if (pf_line >= 0) _mm_prefetch(pf + CPU_PREFETCH_BYTES + pf_line * 64, _MM_HINT_T0);
        if (ah.p) lp_ahead_k(ah, k, 1); /* the passes share a panel's 128 bytes a k */
        __m256 b0 = lp256_load(w, h, k, 2 * half), b1 = lp256_load(w, h, k, 2 * half + 1), a;
#define STEP(i)                                                                                    \
    if (R > i) {                                                                                   \
        a = _mm256_broadcast_ss(x##i + k);                                                         \
        s##i##0 = _mm256_fmadd_ps(a, b0, s##i##0);                                                 \
        s##i##1 = _mm256_fmadd_ps(a, b1, s##i##1);                                                 \
    }
        LP256_ROWS(STEP)
#undef STEP
    }
    if (last) {
        __m256 va = _mm256_set1_ps(1.0f), vb = _mm256_set1_ps(beta);
#define OUT(i)                                                                                     \
    if (R > i) cpu_avx2_out16(c + i * ldc, s##i##0, s##i##1, va, vb, beta);
        LP256_ROWS(OUT)
#undef OUT
        return;
    }
#define KEEP(i)                                                                                    \
    if (R > i) {                                                                                   \
        _mm256_storeu_ps(acc + i * 16, s##i##0);                                                   \
        _mm256_storeu_ps(acc + i * 16 + 8, s##i##1);                                               \
    }
    LP256_ROWS(KEEP)
#undef KEEP
}

/* 3-12 rows: up to 6 in one sub-block, more in two as even as can be,
 * but 8 as 6 + 2, the two rows in one pass over the whole width (3 passes
 * where 4 + 4 makes 4: 0.95-0.98x the time on Zen 5). Every pass inlined,
 * so a chunk's passes cost no calls (a call a pass of 32 k's passed 13
 * arguments, most through the stack). */
LP256 static inline __attribute__((always_inline)) void
lp256_chunks(int R0, int R1, const float *x, int64_t K, const float *w, const uint16_t *h, float *c,
             int64_t ldc, float beta, lp_ahead ah, int64_t chunk) {
    float acc[2][2][6 * 16];
    /* the passes' shares of the next panel, and of the lines 4 KiB ahead
     * (fp32: two lines a k, bf16: one) */
    int64_t npass = R1 == 2 ? 3
                    : R1    ? 4
                            : 2,
            share = (K * ah.step / npass) >> 16, st = ah.step / npass;
#define AH(pass) ((lp_ahead){ah.p ? ah.p + share * (pass) : NULL, st})
    for (int64_t k0 = 0; k0 < K; k0 += chunk) {
        int64_t kn = K - k0 < chunk ? K - k0 : chunk;
        lp256_half(R0, 0, x, K, k0, kn, w, h, acc[0][0], c, ldc, beta, 0, AH(0));
        lp256_half(R0, 1, x, K, k0, kn, w, h, acc[0][1], c + 16, ldc, beta, h ? -1 : 1, AH(1));
        if (!R1) continue;
        if (R1 == 2) {
            lp256_span(2, x + R0 * K, K, k0, kn, w, h, acc[1][0], c + R0 * ldc, ldc, beta, 0, AH(2),
                       1);
            continue;
        }
        lp256_half(R1, 0, x + R0 * K, K, k0, kn, w, h, acc[1][0], c + R0 * ldc, ldc, beta, -1,
                   AH(2));
        lp256_half(R1, 1, x + R0 * K, K, k0, kn, w, h, acc[1][1], c + R0 * ldc + 16, ldc, beta, -1,
                   AH(3));
    }
#undef AH
}

/* one copy per row split and weight type, so the register blocks unroll */
#define LP256C_CASES(X)                                                                            \
    X(3, 0) X(4, 0) X(5, 0) X(6, 0) X(4, 3) X(6, 2) X(5, 4) X(5, 5) X(6, 5) X(6, 6)
#define LP256C_R(r0, r1)                                                                           \
    LP256 static void lp256c_##r0##_##r1(const float *x, int64_t K, const float *w,                \
                                         const uint16_t *h, float *c, int64_t ldc, float beta,     \
                                         lp_ahead ah, int64_t chunk) {                             \
        if (h) lp256_chunks(r0, r1, x, K, NULL, h, c, ldc, beta, ah, chunk);                       \
        else lp256_chunks(r0, r1, x, K, w, NULL, c, ldc, beta, ah, chunk);                         \
    }
LP256C_CASES(LP256C_R)

static void lp_avx2(int R, const float *x, int64_t K, const float *w, const uint16_t *h, float *c,
                    int64_t ldc, float beta, lp_ahead ah, int64_t chunk) {
    switch (R) {
    case 1: lp256_1(x, K, w, h, c, ldc, beta, ah); break;
    case 2: lp256_2(x, K, w, h, c, ldc, beta, ah); break;
#define LP256C_CASE(r0, r1)                                                                        \
    case r0 + r1: lp256c_##r0##_##r1(x, K, w, h, c, ldc, beta, ah, chunk); break;
        LP256C_CASES(LP256C_CASE)
    default: KF_FATAL("lp_avx2: %d rows", R);
    }
}

/* ------------------------------------------------------ baseline: 4 x 32 */
/* CPUs without FMA: fmaf keeps the chain exact (cpu_gemm_fixed's ukr_base) */
static void lp_base(int R, const float *x, int64_t K, const float *w, const uint16_t *h, float *c,
                    int64_t ldc, float beta, lp_ahead ah, int64_t chunk) {
    float r[4][LP_PANEL] = {{0}};
    for (int64_t k = 0; k < K; k++)
        for (int j = 0; j < LP_PANEL; j++) {
            float wj;
            if (h) {
                uint32_t u = (uint32_t)h[k * LP_PANEL + lp_bf16_at(j)] << 16;
                memcpy(&wj, &u, 4);
            } else {
                wj = w[k * LP_PANEL + j];
            }
            for (int i = 0; i < R; i++) r[i][j] = fmaf(x[i * K + k], wj, r[i][j]);
        }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < LP_PANEL; j++) {
            float v = 1.0f * r[i][j];
            c[i * ldc + j] = beta != 0.0f ? fmaf(beta, c[i * ldc + j], v) : v;
        }
}

/* What an fp32 product's outputs get next, from the thread that computed
 * them, panel by panel: the bias, then the activation (c is pre, y its
 * GELU). Each element as cpu_linear_act's passes over the whole output
 * compute it, but threaded: at decoding's few rows those passes are below
 * their threshold for threads (a two-thread K-Forcing step at batch 1 spent
 * 4.7% of its time in them on one thread). */
typedef struct lp_epilogue {
    const float *bias;
    float *y;
    kf_act act;
} lp_epilogue;

static void lp_finish(const lp_epilogue *e, float *c, int64_t N, int64_t rows, int64_t j0,
                      int64_t nj) {
    if (e->bias)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < nj; j++) c[i * N + j0 + j] += e->bias[j0 + j];
    if (e->act != KF_ACT_NONE)
        cpu_gelu_serial(e->y + j0, c + j0, rows, nj, N,
                        e->act == KF_ACT_GELU_ERF ? KF_GELU_ERF : KF_GELU_TANH);
}

/* c [rows, out] = x [rows, in] W^T (+ beta c), then e's epilogue where
 * given: every panel, row block by row block while the panel is in cache; a
 * thread owns whole panels. */
static void lp_product(const cpu_linear *L, float *c, const float *x, int64_t rows, float beta,
                       const lp_epilogue *e) {
    int lvl = cpu_simd_level();
    lp_fn *fn = lvl >= CPU_SIMD_AVX512 ? lp_avx512 : lvl == CPU_SIMD_AVX2 ? lp_avx2 : lp_base;
    /* AVX2: up to cpu_avx2_block_rows() rows in one block, read in chunks
     * of LP_KC k's; more in blocks of up to 6, each over the whole panel
     * (each block re-reads the panel from L2 anyway, and such products are
     * bound by the FMAs: chunks cost 16 rows 0-7% and 32 rows 5-10% there) */
    int br = lvl == CPU_SIMD_AVX2 ? cpu_avx2_block_rows() : 0;
    int mr = lvl >= CPU_SIMD_AVX512 ? 8 : lvl == CPU_SIMD_AVX2 ? (rows > br ? 6 : br) : 4;
    /* blocks as even as mr allows */
    int64_t nb = (rows + mr - 1) / mr, chunk = nb == 1 ? LP_KC : L->in;
    int64_t K = L->in, N = L->out;
    /* a panel's only block: whether it prefetches the next panel (AVX2's
     * blocks of 3 rows or more make several passes, lp256_chunks) */
    int lone_ahead = nb == 1 && cpu_lone_block_ahead((int)rows, lvl == CPU_SIMD_AVX2 && rows >= 3,
                                                     L->p32 ? 4 : 2);
#pragma omp parallel for schedule(static) if (rows * K * N >= 16 * KF_CPU_PAR_MIN)
    for (int64_t p = 0; p < L->panels; p++) {
        size_t off = (size_t)(p * K * LP_PANEL);
        const float *w = L->p32 ? L->p32 + off : NULL;
        const uint16_t *h = L->p16 ? L->p16 + off : NULL;
        int64_t j0 = p * LP_PANEL, nj = N - j0 < LP_PANEL ? N - j0 : LP_PANEL;
        /* the blocks share out the next panel (the last one: itself, cached) */
        const char *cur = w ? (const char *)w : (const char *)h;
        int64_t pbytes = K * LP_PANEL * (w ? 4 : 2), share = pbytes / nb;
        const char *next = p + 1 < L->panels ? cur + pbytes : cur;
        for (int64_t ib = 0; ib < nb; ib++) {
            int R = (int)(rows / nb + (ib < rows % nb));
            int64_t i0 = ib * (rows / nb) + (ib < rows % nb ? ib : rows % nb);
            lp_ahead ah = {nb > 1 || lone_ahead ? next + ib * share : NULL, (share << 16) / K};
            if (nj == LP_PANEL) {
                fn(R, x + i0 * K, K, w, h, c + i0 * N + j0, N, beta, ah, chunk);
                continue;
            }
            /* the last, partial panel: the same combine on a copy */
            float edge[12 * LP_PANEL] = {0};
            for (int i = 0; i < R; i++)
                memcpy(edge + i * LP_PANEL, c + (i0 + i) * N + j0, (size_t)nj * sizeof(float));
            fn(R, x + i0 * K, K, w, h, edge, LP_PANEL, beta, ah, chunk);
            for (int i = 0; i < R; i++)
                memcpy(c + (i0 + i) * N + j0, edge + i * LP_PANEL, (size_t)nj * sizeof(float));
        }
        if (e) lp_finish(e, c, N, rows, j0, nj);
    }
}

void cpu_linear_packed_fwd(kf_backend *b, float *y, void *y16, float *pre, const float *x,
                           const void *x16, const void *lin, const float *bias, int64_t rows,
                           kf_act act, float beta) {
    const cpu_linear *L = lin;
    int64_t in = L->in, out = L->out;
    /* the packed values are the reference's operands only at the precision
     * they were packed in and with the fixed-order GEMM */
    if (!b->batch_invariant || b->precision != L->prec) {
        cpu_linear_act(b, y, y16, pre, x, x16, L->w, bias, rows, in, out, act, beta,
                       b->precision == L->prec ? L->w16 : NULL);
        return;
    }
    KF_CHECK(beta == 0.0f || (act == KF_ACT_NONE && y), "linear_act: beta needs y and no act");
    KF_CHECK(!y16 || b->precision != KF_PREC_FP32, "linear_act: a 16-bit copy in fp32 mode");
    if (rows <= 0) return;
    x = cpu_input16(b, CPU_SCRATCH_X16, x, x16, rows * in);
    if (L->prec != KF_PREC_FP32) { /* the GEMM's rounding of A as it packs it */
        float *xr = cpu_scratch(b, CPU_SCRATCH_GEMM_A, (size_t)(rows * in));
        cpu_round_lowp_copy(xr, x, rows * in, L->prec);
        x = xr;
    }
    if (!y) y = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(rows * out));
    float *t = act == KF_ACT_NONE ? y : pre;
    if (L->prec == KF_PREC_FP32) { /* no rounding before the bias (and no y16) */
        lp_product(L, t, x, rows, beta, &(lp_epilogue){bias, y, act});
        return;
    }
    lp_product(L, t, x, rows, beta, NULL);
    cpu_round_lowp_copy(t, t, rows * out, L->prec);
    if (bias) cpu_add_bias(b, t, bias, rows, out);
    if (act != KF_ACT_NONE)
        cpu_gelu_fwd(b, y, pre, rows * out, act == KF_ACT_GELU_ERF ? KF_GELU_ERF : KF_GELU_TANH);
    if (y16) cpu_to16(y16, y, rows * out, b->precision);
}
