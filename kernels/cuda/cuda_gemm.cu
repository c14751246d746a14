/* kernels/cuda/cuda_gemm.cu — matmul (cuBLAS, or a fixed-tiling kernel in
 * batch-invariant mode), bias add and bias gradient.
 *
 * Precision (kernels.h): fp32 mode is true fp32 — CUBLAS_COMPUTE_32F_PEDANTIC,
 * so neither TF32 nor any reduced-precision path is used. fp16 and bf16
 * modes convert A and B to the 16-bit format in scratch (cu_to16; inputs are
 * never modified; an op that uses an operand twice converts it once and
 * calls cu_matmul16), multiply on the tensor cores with fp32 accumulation
 * (CUBLAS_COMPUTE_32F), and round C to the format afterwards, exactly the
 * steps the CPU backend emulates.
 *
 * Batch invariance: cuBLAS picks kernels (tilings, split-K) by problem size,
 * so a row of C may change when M changes. In batch_invariant mode fixed-
 * tiling kernels are used instead: every C element is summed over k-tiles in
 * k order, with tiles that do not depend on M, N or the batch count. fp32
 * runs the SIMT kernel (k_gemm_invariant: one fmaf chain per element, also
 * the reference); fp16 and bf16 run k_gemm_invariant_mma on the tensor cores
 * (mma.sync m16n8k16, fp32 accumulation, cp.async double buffering; fp32
 * operands rounded to the format as they are packed from the shared-memory
 * stage, 16-bit copies staged as they are and loaded by ldmatrix),
 * guarded like the tensor-core attention (cuda_tc_guard.cu): compared with
 * the SIMT kernel at its first use per precision, which it falls back to
 * with a warning on a failed launch or a difference; KF_CUDA_TC=0 keeps the
 * SIMT kernel. It has run only under the emulation harness (docs/cuda.md).
 * Both kernels store through one epilogue (ig_store, cu_epi), which also
 * finishes a linear layer's output (bias, GELU, the 16-bit copy;
 * cuda_linear.cu), so no pass over an fp32 product follows them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_mma.cuh"

/* dst = src in the 16-bit format: __half or __nv_bfloat16 by lowp. */
__global__ void k_to_16(void *dst, const float *src, int64_t n, int lowp) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cu_store16(dst, i, src[i], lowp);
}

/* dst = the values of the 16-bit copy src (format lowp) as floats: exact. */
__global__ void k_from16(float *dst, const void *src, int64_t n, int lowp) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (lowp == KF_PREC_BF16) dst[i] = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
        else dst[i] = __half2float(((const __half *)src)[i]);
    }
}

/* Elements an operand spans across the batch (strides may be 0: broadcast). */
static int64_t span(int64_t one, int64_t batch, int64_t stride) {
    return stride > 0 ? (batch - 1) * stride + one : one;
}

#define IG_TILE 64
#define IG_BK 16

/* The epilogue of both batch-invariant kernels (cu_epi): element i, in
 * column col, of the product whose accumulator is acc. The bias add and the
 * derivative's product are __fadd_rn and __fmul_rn so that no FMA
 * contraction reaches across the rounding: the separate passes' bits. */
__device__ __forceinline__ void ig_store(const cu_epi &e, int64_t i, int64_t col, float acc,
                                         float alpha, float beta, int lowp) {
    float v = alpha * acc;
    if (beta != 0.0f) v += beta * e.y[i];
    v = cu_lowp(v, lowp);
    if (e.bias) v = __fadd_rn(v, e.bias[col]);
    if (e.act != KF_ACT_NONE) {
        int erf_kind = e.act == KF_ACT_GELU_ERF;
        if (e.dgrad) {
            v = __fmul_rn(v, cu_gelu_grad(e.pre[i], erf_kind));
        } else {
            e.pre[i] = v;
            v = cu_gelu(v, erf_kind);
        }
    }
    if (e.y) e.y[i] = v;
    if (e.y16) cu_store16(e.y16, i, v, lowp);
}

/* C = alpha op(A) op(B) + beta C through the epilogue e (ig_store). C tile
 * 64x64 per block of 256 threads, each thread 4x4 outputs (rows ty*4.., cols
 * tx + 16*j). The k loop runs in order 0..K-1 for every output. */
__global__ void __launch_bounds__(256)
    k_gemm_invariant(cu_epi e, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                     int ta, int tb, float alpha, float beta, int64_t sc, int64_t sa, int64_t sb,
                     int lowp) {
    __shared__ float As[IG_BK][IG_TILE + 1];
    __shared__ float Bs[IG_BK][IG_TILE + 1];
    int64_t z = blockIdx.z, c0 = z * sc;
    A += z * sa;
    B += z * sb;
    int64_t m0 = (int64_t)blockIdx.y * IG_TILE, n0 = (int64_t)blockIdx.x * IG_TILE;
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += IG_BK) {
        for (int i = threadIdx.x; i < IG_BK * IG_TILE; i += 256) {
            int kk, mm;
            /* consecutive threads walk the operand's contiguous dimension */
            if (ta) {
                kk = i / IG_TILE;
                mm = i % IG_TILE;
            } else {
                mm = i / IG_BK;
                kk = i % IG_BK;
            }
            int64_t gm = m0 + mm, gk = k0 + kk;
            float v = 0.0f;
            if (gm < M && gk < K) v = ta ? A[gk * M + gm] : A[gm * K + gk];
            As[kk][mm] = cu_lowp(v, lowp);
            int nn;
            if (tb) {
                nn = i / IG_BK;
                kk = i % IG_BK;
            } else {
                kk = i / IG_TILE;
                nn = i % IG_TILE;
            }
            int64_t gn = n0 + nn;
            gk = k0 + kk;
            v = 0.0f;
            if (gn < N && gk < K) v = tb ? B[gn * K + gk] : B[gk * N + gn];
            Bs[kk][nn] = cu_lowp(v, lowp);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < IG_BK; kk++) {
            float a[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t gm = m0 + ty * 4 + i;
        if (gm >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t gn = n0 + tx + 16 * j;
            if (gn < N) ig_store(e, c0 + gm * N + gn, gn, acc[i][j], alpha, beta, lowp);
        }
    }
}

/* ---- the batch-invariant GEMM of the 16-bit modes on the tensor cores ---- */

#define TG_TILE 64 /* C tile: 64 x 64 per block, 32 x 32 per warp */
#define TG_BK 32   /* k per stage: two mma k-steps */
#define TG_THREADS 128
/* a staged tile's bytes: 64 x 32 or 32 x 64 elements (fp32, or the 16-bit
 * bits of a copy), rows padded by 16 bytes (tg_pitch); the largest, fp32
 * 64 x 36 */
#define TG_STAGE (TG_TILE * (TG_BK + 4) * 4)
#define TG_SMEM (4 * TG_STAGE) /* two stages of A and B: 36 KiB */

/* The row pitch, in elements E, of a staged tile of `cols` columns: padded
 * by 16 bytes, so rows stay 16-byte aligned (cp.async, ldmatrix) and the
 * fragment reads of 8 rows spread over the banks. */
template <typename E> __device__ __forceinline__ constexpr int tg_pitch(int cols) {
    return cols + 16 / (int)sizeof(E);
}

/* Queues the copy of the R x Cn tile at (r0, c0) of the row-major rows x cols
 * matrix X of E (float, or uint16_t: a 16-bit copy's bits) into s (row pitch
 * tg_pitch); elements outside X are zeros. vec: X is 16-byte aligned and
 * cols a multiple of 16 bytes' elements, so cp.async moves 16 bytes at a
 * time; otherwise plain loads (the same values, staged synchronously). */
template <int R, int Cn, typename E>
__device__ __forceinline__ void tg_stage(E *s, const E *X, int64_t rows, int64_t cols, int64_t r0,
                                         int64_t c0, int vec) {
    const int V = 16 / (int)sizeof(E), P = tg_pitch<E>(Cn);
    if (vec) {
        for (int i = threadIdx.x; i < R * Cn / V; i += TG_THREADS) {
            int r = i / (Cn / V), c = i % (Cn / V) * V;
            bool in = r0 + r < rows && c0 + c < cols;
            cp_async16(&s[r * P + c], in ? X + (r0 + r) * cols + c0 + c : X, in);
        }
    } else {
        for (int i = threadIdx.x; i < R * Cn; i += TG_THREADS) {
            int r = i / Cn, c = i % Cn;
            bool in = r0 + r < rows && c0 + c < cols;
            s[r * P + c] = in ? X[(r0 + r) * cols + c0 + c] : (E)0;
        }
    }
}

/* k-tile k0 of an operand X into s as it lies in memory: its `outer` rows
 * of op(A) (or columns of op(B)) from o0, kmajor: stored [k][outer] (A with
 * ta, B without tb), else [outer][k]. */
template <typename E>
__device__ __forceinline__ void tg_stage_op(E *s, const E *X, int kmajor, int64_t outer, int64_t K,
                                            int64_t o0, int64_t k0, int vec) {
    if (kmajor) tg_stage<TG_BK, TG_TILE>(s, X, K, outer, k0, o0, vec);
    else tg_stage<TG_TILE, TG_BK>(s, X, outer, K, o0, k0, vec);
}

/* The mma registers of the 16 x 16 (outer x k) block at (o, k) of a staged
 * tile (tg_stage_op's layout): r[q] holds the 8 x 8 block at (o + 8 (q % 2),
 * k + 8 (q / 2)), lane (g, t) its elements (g, 2t) and (g, 2t + 1). That is
 * an A operand as it is, and the B operands of two 8-column tiles, (r[0],
 * r[2]) and (r[1], r[3]) (cuda_mma.cuh). fp32 tiles are rounded to T here. */
template <typename T>
__device__ __forceinline__ void tg_frag(uint32_t r[4], const float *s, int kmajor, int o, int k) {
    int P = tg_pitch<float>(kmajor ? TG_TILE : TG_BK), g = threadIdx.x % 32 / 4,
        t = threadIdx.x % 4;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        int oo = o + 8 * (q % 2) + g, kk = k + 8 * (q / 2) + 2 * t;
        r[q] = kmajor ? mma_pack<T>(s[kk * P + oo], s[(kk + 1) * P + oo])
                      : mma_pack<T>(s[oo * P + kk], s[oo * P + kk + 1]);
    }
}
/* ... and of a 16-bit tile, whose values are the format's already: ldmatrix
 * (.trans when stored [k][outer]), lane l naming row l % 8 of block l / 8. */
template <typename T>
__device__ __forceinline__ void tg_frag(uint32_t r[4], const uint16_t *s, int kmajor, int o,
                                        int k) {
    int P = tg_pitch<uint16_t>(kmajor ? TG_TILE : TG_BK), q = threadIdx.x % 32 / 8,
        i = threadIdx.x % 8;
    if (kmajor) ldmatrix_x4_trans(r, &s[(k + 8 * (q / 2) + i) * P + o + 8 * (q % 2)]);
    else ldmatrix_x4(r, &s[(o + 8 * (q % 2) + i) * P + k + 8 * (q / 2)]);
}

/* Batch-invariant C = alpha op(A) op(B) + beta C, written through the
 * epilogue e (ig_store), with T (__half or __nv_bfloat16) operands on the
 * tensor cores (mma.sync m16n8k16, fp32 accumulation; cuda_mma.cuh): a
 * 64 x 64 C tile per block of 4 warps, each warp 32 x 32 (2 x 4
 * accumulator tiles of 16 x 8). An operand is fp32 (EA,
 * EB float; rounded to T as its fragments are packed) or a 16-bit copy's
 * bits (uint16_t; its fragments loaded by ldmatrix): the same T values
 * either way, so the same bits. Both are staged in shared memory 32 k at a
 * time, double-buffered (the next k-tile is copied, with cp.async when
 * aligned, while this one is multiplied); the k-tiles are accumulated in
 * order. Nothing in an element's sum depends on M, N or the batch: the
 * tiling is fixed, and k beyond K is zero-filled. */
template <typename T, typename EA, typename EB>
__global__ void __launch_bounds__(TG_THREADS)
    k_gemm_invariant_mma(cu_epi e, const EA *A, const EB *B, int64_t M, int64_t N, int64_t K,
                         int ta, int tb, float alpha, float beta, int64_t sc, int64_t sa_,
                         int64_t sb_, int vec_a, int vec_b, int lowp) {
    extern __shared__ __align__(16) unsigned char tg_smem[]; /* TG_SMEM bytes: sa[2], sb[2] */
    EA *sa[2] = {(EA *)tg_smem, (EA *)(tg_smem + TG_STAGE)};
    EB *sb[2] = {(EB *)(tg_smem + 2 * TG_STAGE), (EB *)(tg_smem + 3 * TG_STAGE)};
    int64_t z = blockIdx.z, c0 = z * sc;
    A += z * sa_;
    B += z * sb_;
    int64_t m0 = (int64_t)blockIdx.y * TG_TILE, n0 = (int64_t)blockIdx.x * TG_TILE;
    int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    int wm = warp / 2 * 32, wn = warp % 2 * 32; /* the warp's corner in the C tile */
    float acc[2][4][4] = {};
    int64_t nk = (K + TG_BK - 1) / TG_BK;
    tg_stage_op(sa[0], A, ta, M, K, m0, 0, vec_a);
    tg_stage_op(sb[0], B, !tb, N, K, n0, 0, vec_b);
    cp_async_commit();
    for (int64_t kt = 0; kt < nk; kt++) {
        int buf = (int)(kt & 1);
        if (kt + 1 < nk) { /* the other buffer: freed by the barrier ending the last k-tile */
            tg_stage_op(sa[buf ^ 1], A, ta, M, K, m0, (kt + 1) * TG_BK, vec_a);
            tg_stage_op(sb[buf ^ 1], B, !tb, N, K, n0, (kt + 1) * TG_BK, vec_b);
        }
        cp_async_commit();
        cp_async_wait<1>(); /* k-tile kt is in (this thread's copies) */
        __syncthreads();    /* ... and every thread's */
#pragma unroll
        for (int kk = 0; kk < TG_BK; kk += 16) {
            uint32_t fa[2][4], fb[2][4]; /* fb[jj]: tiles 2 jj (0, 2) and 2 jj + 1 (1, 3) */
#pragma unroll
            for (int i = 0; i < 2; i++) tg_frag<T>(fa[i], sa[buf], ta, wm + i * 16, kk);
#pragma unroll
            for (int jj = 0; jj < 2; jj++) tg_frag<T>(fb[jj], sb[buf], !tb, wn + jj * 16, kk);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t b2[2] = {fb[j / 2][j % 2], fb[j / 2][j % 2 + 2]};
                    mma_16816<T>(acc[i][j], fa[i], b2);
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                int64_t gm = m0 + wm + i * 16 + g + 8 * (q / 2),
                        gn = n0 + wn + j * 8 + 2 * t + q % 2;
                if (gm < M && gn < N)
                    ig_store(e, c0 + gm * N + gn, gn, acc[i][j][q], alpha, beta, lowp);
            }
}

/* An empty product (K = 0): C = beta*C, and 0 where beta is 0 whatever C held
 * (BLAS reads no C then), rounded in fp16/bf16 mode — the CPU backend's
 * steps. Each element walks the batch's matrices in order, so strides that
 * overlap or leave gaps give the CPU's result too. */
__global__ void k_scale_c(float *C, float beta, int64_t mn, int64_t batch, int64_t sc, int lowp) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < mn;
         i += (int64_t)gridDim.x * blockDim.x)
        for (int64_t z = 0; z < batch; z++) {
            float *c = C + z * sc + i;
            float v = beta == 0.0f ? 0.0f : beta * *c;
            *c = cu_lowp(v, lowp);
        }
}

/* Row-major C = alpha op(A) op(B) + beta C through cuBLAS, which is
 * column-major: C^T = op(B)^T op(A)^T. A and B of type ab, C of type ct. */
static void cublas_rowmajor(kf_backend *b, void *C, cudaDataType ct, const void *A, const void *B,
                            cudaDataType ab, int64_t M, int64_t N, int64_t K, int trans_a,
                            int trans_b, float alpha, float beta, int64_t batch, int64_t stride_c,
                            int64_t stride_a, int64_t stride_b, cublasComputeType_t compute) {
    int lda = (int)(trans_a ? M : K), ldb = (int)(trans_b ? K : N);
    CUBLAS_OK(cublasGemmStridedBatchedEx(
        cu_impl(b)->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        (int)N, (int)M, (int)K, &alpha, B, ab, ldb, stride_b, A, ab, lda, stride_a, &beta, C, ct,
        (int)N, stride_c, (int)batch, compute, CUBLAS_GEMM_DEFAULT));
}

void cu_copy16(kf_backend *b, void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    k_to_16<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(dst, src, n, b->precision);
    CUDA_LAUNCHED();
}

void *cu_to16(kf_backend *b, int slot, const float *src, int64_t n) {
    void *dst = cu_scratch(b, slot, (size_t)n * 2);
    cu_copy16(b, dst, src, n);
    return dst;
}

/* The op copy_to16: cu_to16's conversion into the caller's buffer, so the
 * GEMMs that read it (w16) give bitwise what converting at each call gave. */
void cu_copy_to16(kf_backend *b, void *dst16, const float *src, int64_t n) {
    KF_CHECK(b->precision != KF_PREC_FP32, "copy_to16: a 16-bit copy in fp32 mode");
    if (n <= 0) return;
    k_to_16<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(dst16, src, n, b->precision);
    CUDA_LAUNCHED();
}

/* cuBLAS on A16 and B16, in the 16-bit format of b->precision, with fp32
 * accumulation, into C of type ct: fp32, or the same 16-bit format (then
 * beta must be 0). */
static void gemm16(kf_backend *b, void *C, cudaDataType ct, const void *A16, const void *B16,
                   int64_t M, int64_t N, int64_t K, int trans_a, int trans_b, float alpha,
                   float beta, int64_t batch, int64_t stride_c, int64_t stride_a,
                   int64_t stride_b) {
    cublas_rowmajor(b, C, ct, A16, B16, b->precision == KF_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F, M,
                    N, K, trans_a, trans_b, alpha, beta, batch, stride_c, stride_a, stride_b,
                    CUBLAS_COMPUTE_32F);
}

void cu_matmul16_unrounded(kf_backend *b, float *C, const void *A16, const void *B16, int64_t M,
                           int64_t N, int64_t K, int trans_a, int trans_b, float alpha,
                           float beta) {
    KF_CHECK(b->precision != KF_PREC_FP32 && !b->batch_invariant && K > 0,
             "cu_matmul16: needs a 16-bit mode outside batch-invariant mode and K > 0");
    if (M <= 0 || N <= 0) return;
    gemm16(b, C, CUDA_R_32F, A16, B16, M, N, K, trans_a, trans_b, alpha, beta, 1, 0, 0, 0);
}

void cu_matmul16(kf_backend *b, float *C, const void *A16, const void *B16, int64_t M, int64_t N,
                 int64_t K, int trans_a, int trans_b, float alpha, float beta) {
    cu_matmul16_unrounded(b, C, A16, B16, M, N, K, trans_a, trans_b, alpha, beta);
    if (M > 0 && N > 0) cu_round_lowp(b, C, M * N);
}

void cu_from16(kf_backend *b, float *dst, const void *src16, int64_t n) {
    if (n <= 0) return;
    k_from16<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(dst, src16, n, b->precision);
    CUDA_LAUNCHED();
}

void cu_matmul(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
               int64_t K, int trans_a, int trans_b, float alpha, float beta) {
    cu_matmul_batched(b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta, 1, 0, 0, 0);
}

/* cp.async can stage operand X of esize-byte elements (leading dimension ld,
 * batch stride stride): every row of every matrix starts 16-byte aligned. */
static int tg_vec(const void *X, int esize, int64_t ld, int64_t stride, int64_t batch) {
    int64_t v = 16 / esize;
    return (uintptr_t)X % 16 == 0 && ld % v == 0 && (batch == 1 || stride % v == 0);
}

/* The epilogue of a plain product: C alone. */
static cu_epi epi_c(float *C) { return {C, NULL, NULL, NULL, KF_ACT_NONE, 0}; }

/* A product's output (C, or a linear layer's epilogue), shape and scalars
 * (matmul_batched's arguments). */
struct tg_args {
    cu_epi e;
    int64_t M, N, K;
    int ta, tb;
    float alpha, beta;
    int64_t batch, sc, sa, sb;
};

/* Launches the SIMT kernel k_gemm_invariant on a's product (batch <= 65535),
 * rounding as lowp. */
static void ig_launch(kf_backend *b, const tg_args &a, const float *A, const float *B, int lowp) {
    KF_CHECK(a.batch <= 65535, "matmul_batched: batch %lld too large", (long long)a.batch);
    dim3 grid((unsigned)((a.N + IG_TILE - 1) / IG_TILE), (unsigned)((a.M + IG_TILE - 1) / IG_TILE),
              (unsigned)a.batch);
    k_gemm_invariant<<<grid, 256, 0, cu_stream(b)>>>(a.e, A, B, a.M, a.N, a.K, a.ta, a.tb, a.alpha,
                                                     a.beta, a.sc, a.sa, a.sb, lowp);
    CUDA_LAUNCHED();
}

void cu_matmul_fixed(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                     int64_t K, int trans_a, int trans_b, float alpha, float beta, int64_t batch,
                     int64_t stride_c, int64_t stride_a, int64_t stride_b, int lowp) {
    cu_epi e = epi_c(C);
    tg_args a = {e, M, N, K, trans_a, trans_b, alpha, beta, batch, stride_c, stride_a, stride_b};
    ig_launch(b, a, A, B, lowp);
}

/* Launches k_gemm_invariant_mma<T, EA, EB> on a's product (batch <= 65535). */
template <typename T, typename EA, typename EB>
static void tg_launch(kf_backend *b, const tg_args &a, const EA *A, const EB *B) {
    dim3 grid((unsigned)((a.N + TG_TILE - 1) / TG_TILE), (unsigned)((a.M + TG_TILE - 1) / TG_TILE),
              (unsigned)a.batch);
    int va = tg_vec(A, sizeof(EA), a.ta ? a.M : a.K, a.sa, a.batch),
        vb = tg_vec(B, sizeof(EB), a.tb ? a.K : a.N, a.sb, a.batch);
    /* through a pointer: the emulation harness's launch macro takes one name */
    auto kernel = k_gemm_invariant_mma<T, EA, EB>;
    kernel<<<grid, TG_THREADS, TG_SMEM, cu_stream(b)>>>(a.e, A, B, a.M, a.N, a.K, a.ta, a.tb,
                                                        a.alpha, a.beta, a.sc, a.sa, a.sb, va, vb,
                                                        b->precision);
}
/* ... with B's copy B16 when given, else the fp32 B */
template <typename T, typename EA>
static void tg_launch_b(kf_backend *b, const tg_args &a, const EA *A, const float *B,
                        const void *B16) {
    if (B16) tg_launch<T, EA, uint16_t>(b, a, A, (const uint16_t *)B16);
    else tg_launch<T, EA, float>(b, a, A, B);
}

/* Launches k_gemm_invariant_mma in the format of b->precision on each
 * operand's 16-bit copy (A16, B16) where given, else its fp32 form; returns
 * the launch's error. */
static cudaError_t gemm_tc(kf_backend *b, const tg_args &a, const float *A, const void *A16,
                           const float *B, const void *B16) {
    if (b->precision == KF_PREC_BF16) {
        if (A16) tg_launch_b<__nv_bfloat16>(b, a, (const uint16_t *)A16, B, B16);
        else tg_launch_b<__nv_bfloat16>(b, a, A, B, B16);
    } else {
        if (A16) tg_launch_b<__half>(b, a, (const uint16_t *)A16, B, B16);
        else tg_launch_b<__half>(b, a, A, B, B16);
    }
    return cudaGetLastError();
}

/* Relative L2 difference allowed between the tensor-core and SIMT
 * batch-invariant GEMMs in fp16, bf16 8x (its unit roundoff is 8x fp16's):
 * both round the operands alike and C once, and differ only in summation
 * order, which moves the fp32 sums far less than the format's rounding
 * step: a few elements of C change by an ulp. Under the emulation harness
 * they agree bitwise (its mma adds exact products in k order). */
#define GEMM_TC_TOL 2e-3

static void gemm(kf_backend *b, const tg_args &a, const float *A, const void *A16, const float *B,
                 const void *B16);

/* The guard's check (cuda_tc_guard.cu): both batch-invariant kernels on a
 * small batch of 2 with edge tiles in m, n and k, alpha and beta, each
 * transpose, the tensor-core one on the fp32 operands and on their 16-bit
 * copies, which must give the same bits (the same values in the same
 * products); the latter writes its C as a 16-bit copy too (the epilogue of
 * linear_act's y16), whose values are what is compared. 0 with the reason in
 * why when they disagree. */
static int check_gemm(kf_backend *b, const void *arg, char *why, size_t why_len) {
    (void)arg;
    cu_tc_guard *gd = &cu_impl(b)->gemm_tc;
    const int64_t M = 70, N = 72, K = 100, batch = 2, nab = batch * M * K, nc = batch * M * N;
    int64_t nh = 2 * nab + nc;
    float *h = (float *)kf_malloc((size_t)(nh + 3 * nc) * sizeof(float)),
          *hc[3] = {h + nh, h + nh + nc, h + nh + 2 * nc};
    uint32_t s = 12345u;
    for (int64_t i = 0; i < nh; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = 2.0f * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    float *x = (float *)cu_alloc(b, (size_t)nh * sizeof(float)), *c[3];
    cu_upload(b, x, h, (size_t)nh * sizeof(float));
    for (int p = 0; p < 3; p++) c[p] = (float *)cu_alloc(b, (size_t)nc * sizeof(float));
    /* x's 16-bit copies (B's batch reaches past 2 nab), made from x's values
     * uploaded again: moved by 0.05 when the check named gemm16 is broken on
     * purpose, which only a check that runs the copies sees */
    char *x16 = (char *)cu_alloc(b, (size_t)nh * 2), *c16 = (char *)cu_alloc(b, (size_t)nc * 2);
    float *t = (float *)kf_malloc((size_t)nh * sizeof(float)),
          *tx = (float *)cu_alloc(b, (size_t)nh * sizeof(float));
    memcpy(t, h, (size_t)nh * sizeof(float));
    cu_tc_check_break("gemm16", t, nh);
    cu_upload(b, tx, t, (size_t)nh * sizeof(float));
    cu_copy16(b, x16, tx, nh);
    double scale = b->precision == KF_PREC_BF16 ? 8 : 1;
    int ok = 1;
    for (int tr = 0; tr < 4 && ok; tr++) {
        int ta = tr & 1, tb = tr >> 1;
        /* 0: SIMT, 1: tensor cores, 2: tensor cores on the copies */
        for (int p = 0; p < 3; p++) {
            cu_upload(b, c[p], h + 2 * nab, (size_t)nc * sizeof(float));
            gd->force = p > 0;
            tg_args a = {epi_c(c[p]), M, N, K, ta, tb, 0.7f, 0.5f, batch, M * N, M * K, K * N};
            if (p == 2) a.e.y16 = c16;
            gemm(b, a, x, p == 2 ? x16 : NULL, x + nab, p == 2 ? x16 + 2 * nab : NULL);
            gd->force = -1;
            if (p == 2) cu_from16(b, c[p], c16, nc);
            cu_download(b, hc[p], c[p], (size_t)nc * sizeof(float));
        }
        cu_tc_check_break("gemm", hc[1], nc);
        double e = cu_rel_l2(hc[1], hc[0], nc);
        ok = 0;
        if (gd->err != cudaSuccess)
            snprintf(why, why_len, "failed to launch (%s)", cudaGetErrorString(gd->err));
        else if (!(e <= GEMM_TC_TOL * scale))
            snprintf(why, why_len,
                     "differs from the SIMT kernel (ta=%d tb=%d): %.3g (tolerance %.3g)", ta, tb, e,
                     GEMM_TC_TOL * scale);
        else if (memcmp(hc[2], hc[1], (size_t)nc * sizeof(float)))
            snprintf(why, why_len, "on 16-bit copies differs from it on fp32 (ta=%d tb=%d)", ta,
                     tb);
        else ok = 1;
    }
    for (int p = 0; p < 3; p++) cu_free(b, c[p]);
    cu_free(b, x16);
    cu_free(b, c16);
    cu_free(b, tx);
    cu_free(b, x);
    free(t);
    free(h);
    return ok;
}

/* 1 when the tensor-core kernel runs this batch-invariant product: a 16-bit
 * mode, KF_CUDA_TC not 0, and its check passed for the precision. */
static int gemm_tc_supported(kf_backend *b) {
    if (b->precision == KF_PREC_FP32) return 0;
    return cu_tc_guard_use(b, &cu_impl(b)->gemm_tc, 1 << (b->precision == KF_PREC_BF16),
                           kernels_precision_name(b->precision), check_gemm, NULL);
}

/* 1 when a batch-invariant product in this mode reads 16-bit copies as they
 * are (the tensor-core kernel); else they are read widened (cu_input16). */
static int gemm_reads16(kf_backend *b) { return b->batch_invariant && gemm_tc_supported(b); }

const float *cu_input16(kf_backend *b, int slot, const float *x, const void *x16, int64_t n) {
    if (!x16 || n <= 0 || gemm_reads16(b)) return x;
    float *t = (float *)cu_scratch(b, slot, (size_t)n * 4);
    cu_from16(b, t, x16, n);
    return t;
}

/* matmul_batched into a.e (an epilogue beyond {C} only in batch-invariant
 * mode, K > 0: cu_matmul_epi), reading A16 and B16 (NULL: none; 16-bit
 * copies of A and B) in place of A and B on the tensor cores and through
 * cuBLAS; the SIMT kernel and fp32 mode read A and B. */
static void gemm(kf_backend *b, const tg_args &a, const float *A, const void *A16, const float *B,
                 const void *B16) {
    if (a.M <= 0 || a.N <= 0 || a.batch <= 0) return;
    cudaStream_t s = cu_stream(b);
    int lowp = b->precision;
    if (a.K <= 0) {
        k_scale_c<<<cu_blocks(a.M * a.N), 256, 0, s>>>(a.e.y, a.beta, a.M * a.N, a.batch, a.sc,
                                                       lowp);
        CUDA_LAUNCHED();
        return;
    }
    if (b->batch_invariant) {
        KF_CHECK(a.batch <= 65535, "matmul_batched: batch %lld too large", (long long)a.batch);
        if (gemm_tc_supported(b)) {
            cu_tc_guard_launched(&cu_impl(b)->gemm_tc, gemm_tc(b, a, A, A16, B, B16));
            return;
        }
        ig_launch(b, a, A, B, lowp);
        return;
    }
    if (lowp == KF_PREC_FP32) {
        cublas_rowmajor(b, a.e.y, CUDA_R_32F, A, B, CUDA_R_32F, a.M, a.N, a.K, a.ta, a.tb, a.alpha,
                        a.beta, a.batch, a.sc, a.sa, a.sb, CUBLAS_COMPUTE_32F_PEDANTIC);
        return;
    }
    gemm16(b, a.e.y, CUDA_R_32F,
           A16 ? A16 : cu_to16(b, CU_SCRATCH_A, A, span(a.M * a.K, a.batch, a.sa)),
           B16 ? B16 : cu_to16(b, CU_SCRATCH_B, B, span(a.K * a.N, a.batch, a.sb)), a.M, a.N, a.K,
           a.ta, a.tb, a.alpha, a.beta, a.batch, a.sc, a.sa, a.sb);
    cu_round_lowp(b, a.e.y, span(a.M * a.N, a.batch, a.sc));
}

void cu_matmul_batched(kf_backend *b, float *C, const float *A, const float *B, int64_t M,
                       int64_t N, int64_t K, int trans_a, int trans_b, float alpha, float beta,
                       int64_t batch, int64_t stride_c, int64_t stride_a, int64_t stride_b) {
    cu_epi e = epi_c(C);
    tg_args a = {e, M, N, K, trans_a, trans_b, alpha, beta, batch, stride_c, stride_a, stride_b};
    gemm(b, a, A, NULL, B, NULL);
}

void cu_matmul_copies(kf_backend *b, float *C, const float *A, const void *A16, const float *B,
                      const void *B16, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
                      float alpha, float beta) {
    tg_args a = {epi_c(C), M, N, K, trans_a, trans_b, alpha, beta, 1, 0, 0, 0};
    gemm(b, a, A, A16, B, B16);
}

void cu_matmul_epi(kf_backend *b, const cu_epi *e, const float *A, const void *A16, const float *B,
                   const void *B16, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
                   float alpha, float beta) {
    KF_CHECK(b->batch_invariant && K > 0, "cu_matmul_epi: needs batch-invariant mode and K > 0");
    tg_args a = {*e, M, N, K, trans_a, trans_b, alpha, beta, 1, 0, 0, 0};
    gemm(b, a, A, A16, B, B16);
}

void cu_matmul_to16(kf_backend *b, void *C16, const void *A16, const void *B16, int64_t M,
                    int64_t N, int64_t K, int trans_a, int trans_b) {
    KF_CHECK(b->precision != KF_PREC_FP32 && !b->batch_invariant && K > 0,
             "cu_matmul_to16: needs a 16-bit mode outside batch-invariant mode and K > 0");
    if (M <= 0 || N <= 0) return;
    gemm16(b, C16, b->precision == KF_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F, A16, B16, M, N, K,
           trans_a, trans_b, 1.0f, 0.0f, 1, 0, 0, 0);
}

__global__ void k_add_bias(float *y, const float *bias, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[i % cols];
}

void cu_add_bias(kf_backend *b, float *y, const float *bias, int64_t rows, int64_t cols) {
    if (rows * cols <= 0) return;
    k_add_bias<<<cu_blocks(rows * cols), 256, 0, cu_stream(b)>>>(y, bias, rows, cols);
    CUDA_LAUNCHED();
}

/* part[ch, c] = sum of dy[r, c] over the rows of chunk ch, in row order. */
__global__ void k_col_partials(float *part, const float *dy, int64_t rows, int64_t cols) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t ch = blockIdx.y;
    if (c >= cols) return;
    int64_t r0 = ch * CUDA_ROW_CHUNK, r1 = min(rows, r0 + CUDA_ROW_CHUNK);
    float s = 0.0f;
    for (int64_t r = r0; r < r1; r++) s += dy[r * cols + c];
    part[ch * cols + c] = s;
}

/* out[c] += sum over chunks of part[ch, c], in chunk order. */
__global__ void k_col_finish(float *out, const float *part, int64_t nchunk, int64_t cols) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int64_t ch = 0; ch < nchunk; ch++) s += part[ch * cols + c];
    out[c] += s;
}

void cu_col_finish(kf_backend *b, float *out, const float *part, int64_t nchunk, int64_t cols) {
    k_col_finish<<<(unsigned)((cols + 255) / 256), 256, 0, cu_stream(b)>>>(out, part, nchunk, cols);
    CUDA_LAUNCHED();
}

void cu_bias_grad(kf_backend *b, float *dbias, const float *dy, int64_t rows, int64_t cols) {
    int64_t nchunk = (rows + CUDA_ROW_CHUNK - 1) / CUDA_ROW_CHUNK;
    if (nchunk == 0 || cols == 0) return;
    KF_CHECK(nchunk <= 65535, "bias_grad: %lld rows is too many", (long long)rows);
    float *part = (float *)cu_scratch(b, CU_SCRATCH_C, (size_t)(nchunk * cols) * sizeof(float));
    cudaStream_t s = cu_stream(b);
    dim3 grid((unsigned)((cols + 255) / 256), (unsigned)nchunk);
    k_col_partials<<<grid, 256, 0, s>>>(part, dy, rows, cols);
    CUDA_LAUNCHED();
    cu_col_finish(b, dbias, part, nchunk, cols);
}
