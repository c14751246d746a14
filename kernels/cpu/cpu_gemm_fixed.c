/* kernels/cpu/cpu_gemm_fixed.c — the project's own fp32 GEMM, whose
 * summation order is fixed here and nowhere else.
 *
 * Every element is one fused multiply-add chain over k = 0..K-1 in order,
 * started from +0, then combined with C:
 *
 *   s = fma(a[i][K-1], b[K-1][j], ... fma(a[i][0], b[0][j], +0))
 *   C[i][j] = beta == 0 ? alpha*s : fma(beta, C[i][j], alpha*s)
 *
 * Vectors run across j (columns of C), never across k, so the vector width,
 * the register blocking, the K blocking (partial chains are stored and
 * reloaded exactly), the tile a thread gets and the number of rows M cannot
 * change a result: the same bits on every x86-64 level (AVX-512, AVX2 + FMA,
 * and the scalar baseline through fmaf, which glibc computes exactly), for any
 * thread count, batch split or OpenBLAS version. OpenBLAS gives none of that
 * (its kernels split K differently per CPU and per thread count).
 *
 * Layout: op(A) is packed into panels of MR rows ([k][MR]), op(B) into panels
 * of NR columns ([k][NR]), zero-padded past M and N (padding only feeds
 * results that are thrown away, never a kept element's chain). A thread owns
 * a tile of C (MC x NC), walks K in blocks of KC so a block of A stays in L2
 * and a panel of B in L1, and keeps partial chains in its own workspace.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

#define KC 256              /* k per block: a B panel (KC x NR) stays in L1 */
#define MC_PANELS 8         /* A panels per tile */
#define NC_PANELS 8         /* B panels per tile */
#define DIRECT_MAX_COLS 128 /* at most this many columns of B: A is read in place */

enum { UKR_FIRST = 1, UKR_LAST = 2 };

/* One MR x NR tile over kc values of k: op(A)[i][k] is a[k*ks + i*is] (a
 * packed panel: ks = MR, is = 1; A read in place: its strides), op(B) a
 * packed panel [kc][NR]. Partial chains come from / go to acc ([MR][NR])
 * unless FIRST / LAST; on LAST the result is combined with C (ldc) as the
 * contract says. */
typedef void ukr_fn(const float *a, int64_t ks, int64_t is, const float *b, int64_t kc, float *acc,
                    int flags, float *c, int64_t ldc, float alpha, float beta);

/* ------------------------------------------------------------ AVX-512 8x32 */
#define AVX512_TARGET __attribute__((target("avx512f,fma")))

AVX512_TARGET static void ukr_avx512(const float *a, int64_t ks, int64_t is, const float *b,
                                     int64_t kc, float *acc, int flags, float *c, int64_t ldc,
                                     float alpha, float beta) {
    enum { MR = 8 };
    __m512 r[MR][2];
    const float *ar[MR];
    for (int i = 0; i < MR; i++) ar[i] = a + i * is;
    for (int i = 0; i < MR; i++)
        for (int h = 0; h < 2; h++)
            r[i][h] =
                flags & UKR_FIRST ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * 32 + h * 16);
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);
        for (int i = 0; i < MR; i++) {
            __m512 ai = _mm512_set1_ps(ar[i][k * ks]);
            r[i][0] = _mm512_fmadd_ps(ai, b0, r[i][0]);
            r[i][1] = _mm512_fmadd_ps(ai, b1, r[i][1]);
        }
    }
    if (!(flags & UKR_LAST)) {
        for (int i = 0; i < MR; i++)
            for (int h = 0; h < 2; h++) _mm512_storeu_ps(acc + i * 32 + h * 16, r[i][h]);
        return;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < MR; i++)
        for (int h = 0; h < 2; h++) {
            float *ci = c + i * ldc + h * 16;
            __m512 v = _mm512_mul_ps(va, r[i][h]);
            if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), v);
            _mm512_storeu_ps(ci, v);
        }
}

/* --------------------------------------------------------------- AVX2 6x16 */
#define AVX2_TARGET __attribute__((target("avx2,fma")))

/* 12 accumulators + 2 B vectors + 1 broadcast: AVX2's 16 registers. Named
 * variables, not an array: gcc kept an array's copy on the stack, storing
 * every accumulator on every k. */
#define AVX2_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

AVX2_TARGET static void ukr_avx2(const float *a, int64_t ks, int64_t is, const float *b, int64_t kc,
                                 float *acc, int flags, float *c, int64_t ldc, float alpha,
                                 float beta) {
    enum { MR = 6 };
    const float *a0 = a, *a1 = a + is, *a2 = a + 2 * is, *a3 = a + 3 * is, *a4 = a + 4 * is,
                *a5 = a + 5 * is;
#define DECL(i) __m256 r##i##0, r##i##1;
    AVX2_ROWS(DECL)
#undef DECL
    if (flags & UKR_FIRST) {
#define ZERO(i) r##i##0 = r##i##1 = _mm256_setzero_ps();
        AVX2_ROWS(ZERO)
#undef ZERO
    } else {
#define LOAD(i)                                                                                    \
    r##i##0 = _mm256_loadu_ps(acc + i * 16);                                                       \
    r##i##1 = _mm256_loadu_ps(acc + i * 16 + 8);
        AVX2_ROWS(LOAD)
#undef LOAD
    }
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * 16), b1 = _mm256_loadu_ps(b + k * 16 + 8), ai;
#define STEP(i)                                                                                    \
    ai = _mm256_broadcast_ss(a##i + k * ks);                                                       \
    r##i##0 = _mm256_fmadd_ps(ai, b0, r##i##0);                                                    \
    r##i##1 = _mm256_fmadd_ps(ai, b1, r##i##1);
        AVX2_ROWS(STEP)
#undef STEP
    }
    if (!(flags & UKR_LAST)) {
#define STORE(i)                                                                                   \
    _mm256_storeu_ps(acc + i * 16, r##i##0);                                                       \
    _mm256_storeu_ps(acc + i * 16 + 8, r##i##1);
        AVX2_ROWS(STORE)
#undef STORE
        return;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#define OUT(i) cpu_avx2_out16(c + i * ldc, r##i##0, r##i##1, va, vb, beta);
    AVX2_ROWS(OUT)
#undef OUT
}

/* ----------------------------------------------------------- baseline 4x4 */
/* CPUs without FMA (before 2013): fmaf keeps the chain exact, so results
 * equal the vector levels' bit for bit, at a fraction of their speed. */
static void ukr_base(const float *a, int64_t ks, int64_t is, const float *b, int64_t kc, float *acc,
                     int flags, float *c, int64_t ldc, float alpha, float beta) {
    enum { MR = 4, NR = 4 };
    float r[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) r[i][j] = flags & UKR_FIRST ? 0.0f : acc[i * NR + j];
    for (int64_t k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) r[i][j] = fmaf(a[k * ks + i * is], b[k * NR + j], r[i][j]);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            if (!(flags & UKR_LAST)) {
                acc[i * NR + j] = r[i][j];
                continue;
            }
            float v = alpha * r[i][j];
            c[i * ldc + j] = beta != 0.0f ? fmaf(beta, c[i * ldc + j], v) : v;
        }
}

typedef struct gemm_level {
    int mr, nr;
    ukr_fn *ukr;
} gemm_level;

static gemm_level level_for(int simd) {
    if (simd >= CPU_SIMD_AVX512) return (gemm_level){8, 32, ukr_avx512};
    if (simd >= CPU_SIMD_AVX2) return (gemm_level){6, 16, ukr_avx2};
    return (gemm_level){4, 4, ukr_base};
}

/* Panels [p0, p0 + np) of op(A) for k in [k0, k0 + kc): [np][kc][mr], zero
 * past M, rounded by cpu_lowp; op(A)[i][k] = trans ? A[k*M + i] : A[i*K + k]. (gcc would turn the
 * mr-float copies into memcpy calls, half of a transposed product's time.) */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static void
pack_a(float *dst, const float *A, int64_t M, int64_t K, int trans, int mr, int lowp, int64_t p0,
       int64_t np, int64_t k0, int64_t kc) {
    for (int64_t p = p0; p < p0 + np; p++, dst += kc * mr) {
        int64_t r0 = p * mr, m = M - r0 < mr ? M - r0 : mr;
        if (trans) /* rows of A [K, M] hold mr neighbours of a panel */
            for (int64_t k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * M + r0;
                for (int64_t i = 0; i < m; i++) dst[k * mr + i] = src[i];
                for (int64_t i = m; i < mr; i++) dst[k * mr + i] = 0.0f;
            }
        else
            for (int64_t i = 0; i < mr; i++) {
                const float *src = A + (r0 + i) * K + k0;
                for (int64_t k = 0; k < kc; k++) dst[k * mr + i] = i >= m ? 0.0f : src[k];
            }
        if (lowp) cpu_round_lowp_copy(dst, dst, kc * mr, lowp);
    }
}

/* Panels [0, np) of op(B) for k in [k0, k0 + kc): [np][kc][nr], zero past
 * N; op(B)[k][j] = trans ? B[j*K + k] : B[k*N + j]. Split over threads. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static void
pack_b(float *dst, const float *B, int64_t K, int64_t N, int trans, int nr, int lowp, int64_t np,
       int64_t k0, int64_t kc) {
#pragma omp for schedule(static)
    for (int64_t p = 0; p < np; p++) {
        float *d = dst + p * kc * nr;
        int64_t j0 = p * nr, n = N - j0 < nr ? N - j0 : nr;
        if (trans)
            for (int64_t j = 0; j < n; j++) {
                const float *src = B + (j0 + j) * K + k0;
                for (int64_t k = 0; k < kc; k++) d[k * nr + j] = src[k];
            }
        else
            for (int64_t k = 0; k < kc; k++) {
                const float *src = B + (k0 + k) * N + j0;
                for (int64_t j = 0; j < n; j++) d[k * nr + j] = src[j];
            }
        for (int64_t k = 0; k < kc; k++)
            for (int64_t j = n; j < nr; j++) d[k * nr + j] = 0.0f;
        /* rounded once packed, in a loop of its own: the copies above stay
         * plain moves (rounding 0 gives 0) */
        if (lowp) cpu_round_lowp_copy(d, d, kc * nr, lowp);
    }
}

void cpu_gemm_fixed(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                    int64_t K, int trans_a, int trans_b, float alpha, float beta, int lowp) {
    if (M <= 0 || N <= 0) return;
    if (K == 0) { /* the empty chain is +0 */
        for (int64_t i = 0; i < M * N; i++)
            C[i] = beta != 0.0f ? fmaf(beta, C[i], alpha * 0.0f) : alpha * 0.0f;
        return;
    }
    gemm_level lv = level_for(cpu_simd_level());
    const int mr = lv.mr, nr = lv.nr;
    int64_t mp = (M + mr - 1) / mr, np = (N + nr - 1) / nr, kcmax = K < KC ? K : KC;
    /* Tiles of mcp x ncp panels; smaller ones when there are too few to keep
     * every thread busy (the tiling never changes a result). */
    int par = M * N * K >= 64 * KF_CPU_PAR_MIN;
    int64_t want = par ? 2 * (int64_t)omp_get_max_threads() : 1, mcp = MC_PANELS, ncp = NC_PANELS;
    while (ncp > 1 && ((mp + mcp - 1) / mcp) * ((np + ncp - 1) / ncp) < want) ncp /= 2;
    while (mcp > 1 && ((mp + mcp - 1) / mcp) * ((np + ncp - 1) / ncp) < want) mcp /= 2;
    int64_t tm = (mp + mcp - 1) / mcp, tn = (np + ncp - 1) / ncp;
    /* With few B columns a packed A panel would serve only a few microkernel
     * calls, and packing costs as much as they do: read full panels of A in
     * place instead (fp32 only: a 16-bit mode rounds while packing). In
     * columns, not panels, so AVX2's 16-wide panels get what AVX-512's get
     * (the tiny model's 96-wide products: 1.3x at AVX2). */
    int direct = lowp == KF_PREC_FP32 && np * nr <= DIRECT_MAX_COLS;
    int64_t a_ks = direct ? (trans_a ? M : 1) : mr, a_is = direct ? (trans_a ? 1 : K) : 1;
    float *pb = cpu_scratch(b, CPU_SCRATCH_GEMM_B, (size_t)(np * nr * kcmax));
    /* partial chains of every tile between K blocks */
    float *ws = K > KC ? cpu_scratch(b, CPU_SCRATCH_GEMM_W, (size_t)(mp * mr * np * nr)) : NULL;
#pragma omp parallel if (par)
    {
        float *pa = aligned_alloc(64, (size_t)(mcp * mr * kcmax) * sizeof(float));
        KF_CHECK(pa, "out of memory in matmul");
        float edge[32 * 8]; /* one mr x nr tile of C past M or N */
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t kc = K - k0 < KC ? K - k0 : KC;
            int flags = (k0 == 0 ? UKR_FIRST : 0) | (k0 + kc == K ? UKR_LAST : 0);
            pack_b(pb, B, K, N, trans_b, nr, lowp, np, k0, kc); /* ends in a barrier */
            /* row-major tile order: C is written along its rows, and a
             * thread's consecutive tiles share their rows of A, packed once */
            int64_t packed = -1;
#pragma omp for schedule(static)
            for (int64_t t = 0; t < tm * tn; t++) {
                int64_t ip0 = (t / tn) * mcp, jp0 = (t % tn) * ncp;
                int64_t nip = ip0 + mcp < mp ? mcp : mp - ip0,
                        njp = jp0 + ncp < np ? ncp : np - jp0;
                if (ip0 != packed) {
                    if (!direct) pack_a(pa, A, M, K, trans_a, mr, lowp, ip0, nip, k0, kc);
                    else if (ip0 + nip == mp && M % mr) /* the last, partial panel */
                        pack_a(pa, A, M, K, trans_a, mr, lowp, mp - 1, 1, k0, kc);
                    packed = ip0;
                }
                for (int64_t jp = jp0; jp < jp0 + njp; jp++)
                    for (int64_t ip = ip0; ip < ip0 + nip; ip++) {
                        float *acc = ws ? ws + (jp * mp + ip) * mr * nr : NULL;
                        const float *bb = pb + jp * kc * nr, *a = pa + (ip - ip0) * kc * mr;
                        int64_t ks = mr, is = 1;
                        if (direct && (ip + 1) * mr <= M) {
                            a = trans_a ? A + k0 * M + ip * mr : A + ip * mr * K + k0;
                            ks = a_ks;
                            is = a_is;
                        } else if (direct) {
                            a = pa;
                        }
                        int64_t i0 = ip * mr, j0 = jp * nr;
                        int64_t mi = M - i0 < mr ? M - i0 : mr, nj = N - j0 < nr ? N - j0 : nr;
                        if (!(flags & UKR_LAST) || (mi == mr && nj == nr)) {
                            lv.ukr(a, ks, is, bb, kc, acc, flags, C + i0 * N + j0, N, alpha, beta);
                            continue;
                        }
                        /* edge tile: the same combine on a copy, valid part written back */
                        memset(edge, 0, sizeof edge);
                        for (int64_t i = 0; i < mi; i++)
                            memcpy(edge + i * nr, C + (i0 + i) * N + j0,
                                   (size_t)nj * sizeof(float));
                        lv.ukr(a, ks, is, bb, kc, acc, flags, edge, nr, alpha, beta);
                        for (int64_t i = 0; i < mi; i++)
                            memcpy(C + (i0 + i) * N + j0, edge + i * nr,
                                   (size_t)nj * sizeof(float));
                    }
            } /* its barrier: the next block's B must wait for every tile */
        }
        free(pa);
    }
}
