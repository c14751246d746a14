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
 * so a row of C may change when M changes. In batch_invariant mode a plain
 * tiled kernel is used instead: every C element is one dot product summed in
 * k order, whatever M, N or the batch count. In the fp16 phase with
 * KF_CUDA_TC=1 that kernel is a WMMA one (half operands, fp32 accumulation,
 * fixed 64x64x32 tiles, k-tiles in order: still independent of M); it awaits
 * its first GPU run (docs/cuda.md), hence opt-in. bf16 uses the plain tiled
 * kernel, rounding to bf16 where fp16 rounds to half.
 */
#include <mma.h>

#include "kernels/cuda/cuda_internal.h"

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

const float *cu_input16(kf_backend *b, int slot, const float *x, const void *x16, int64_t n) {
    if (!x16 || n <= 0) return x;
    float *t = (float *)cu_scratch(b, slot, (size_t)n * 4);
    cu_from16(b, t, x16, n);
    return t;
}

/* Elements an operand spans across the batch (strides may be 0: broadcast). */
static int64_t span(int64_t one, int64_t batch, int64_t stride) {
    return stride > 0 ? (batch - 1) * stride + one : one;
}

#define IG_TILE 64
#define IG_BK 16

/* C tile 64x64 per block of 256 threads, each thread 4x4 outputs (rows
 * ty*4.., cols tx + 16*j). The k loop runs in order 0..K-1 for every output. */
__global__ void __launch_bounds__(256)
    k_gemm_invariant(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                     int ta, int tb, float alpha, float beta, int64_t sc, int64_t sa, int64_t sb,
                     int lowp) {
    __shared__ float As[IG_BK][IG_TILE + 1];
    __shared__ float Bs[IG_BK][IG_TILE + 1];
    int64_t z = blockIdx.z;
    C += z * sc;
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
            if (gn >= N) continue;
            float *c = C + gm * N + gn;
            float v = alpha * acc[i][j];
            if (beta != 0.0f) v += beta * *c;
            *c = cu_lowp(v, lowp);
        }
    }
}

#define TG_TILE 64
#define TG_BK 32

/* fp16 batch-invariant GEMM on the tensor cores: a 64x64 C tile per block of
 * 4 warps, each warp 32x32 (2x2 fragments); operands rounded to half while
 * staged in shared memory; epilogue alpha*acc + beta*C rounded to half. */
__global__ void __launch_bounds__(128)
    k_gemm_invariant_tc(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                        int ta, int tb, float alpha, float beta, int64_t sc, int64_t sa,
                        int64_t sb) {
    using namespace nvcuda;
    __shared__ __align__(32) __half As[TG_TILE][TG_BK + 8];
    __shared__ __align__(32) __half Bs[TG_BK][TG_TILE + 8];
    __shared__ __align__(32) float Cs[TG_TILE][TG_TILE + 4];
    int64_t z = blockIdx.z;
    C += z * sc;
    A += z * sa;
    B += z * sb;
    int64_t m0 = (int64_t)blockIdx.y * TG_TILE, n0 = (int64_t)blockIdx.x * TG_TILE;
    int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int64_t k0 = 0; k0 < K; k0 += TG_BK) {
        for (int i = threadIdx.x; i < TG_TILE * TG_BK; i += 128) {
            int mm, kk;
            if (ta) {
                kk = i / TG_TILE;
                mm = i % TG_TILE;
            } else {
                mm = i / TG_BK;
                kk = i % TG_BK;
            }
            int64_t gm = m0 + mm, gk = k0 + kk;
            float v = gm < M && gk < K ? (ta ? A[gk * M + gm] : A[gm * K + gk]) : 0.0f;
            As[mm][kk] = __float2half_rn(v);
            int nn;
            if (tb) {
                nn = i / TG_BK;
                kk = i % TG_BK;
            } else {
                kk = i / TG_TILE;
                nn = i % TG_TILE;
            }
            int64_t gn = n0 + nn;
            gk = k0 + kk;
            v = gn < N && gk < K ? (tb ? B[gn * K + gk] : B[gk * N + gn]) : 0.0f;
            Bs[kk][nn] = __float2half_rn(v);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TG_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> bf[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(a[i], &As[wm * 32 + i * 16][kk], TG_BK + 8);
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(bf[j], &Bs[kk][wn * 32 + j * 16], TG_TILE + 8);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], bf[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&Cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], TG_TILE + 4,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < TG_TILE * TG_TILE; i += 128) {
        int64_t gm = m0 + i / TG_TILE, gn = n0 + i % TG_TILE;
        if (gm >= M || gn >= N) continue;
        float *c = C + gm * N + gn;
        float v = alpha * Cs[i / TG_TILE][i % TG_TILE];
        if (beta != 0.0f) v += beta * *c;
        *c = __half2float(__float2half_rn(v));
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

void cu_matmul_fixed(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                     int64_t K, int trans_a, int trans_b, float alpha, float beta, int64_t batch,
                     int64_t stride_c, int64_t stride_a, int64_t stride_b, int lowp) {
    KF_CHECK(batch <= 65535, "matmul_batched: batch %lld too large", (long long)batch);
    dim3 grid((unsigned)((N + IG_TILE - 1) / IG_TILE), (unsigned)((M + IG_TILE - 1) / IG_TILE),
              (unsigned)batch);
    k_gemm_invariant<<<grid, 256, 0, cu_stream(b)>>>(C, A, B, M, N, K, trans_a, trans_b, alpha,
                                                     beta, stride_c, stride_a, stride_b, lowp);
    CUDA_LAUNCHED();
}

void cu_matmul_batched(kf_backend *b, float *C, const float *A, const float *B, int64_t M,
                       int64_t N, int64_t K, int trans_a, int trans_b, float alpha, float beta,
                       int64_t batch, int64_t stride_c, int64_t stride_a, int64_t stride_b) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    cudaStream_t s = cu_stream(b);
    int lowp = b->precision;
    if (K <= 0) {
        k_scale_c<<<cu_blocks(M * N), 256, 0, s>>>(C, beta, M * N, batch, stride_c, lowp);
        CUDA_LAUNCHED();
        return;
    }
    if (b->batch_invariant) {
        KF_CHECK(batch <= 65535, "matmul_batched: batch %lld too large", (long long)batch);
        if (lowp == KF_PREC_FP16 && cu_impl(b)->tc) {
            dim3 grid((unsigned)((N + TG_TILE - 1) / TG_TILE),
                      (unsigned)((M + TG_TILE - 1) / TG_TILE), (unsigned)batch);
            k_gemm_invariant_tc<<<grid, 128, 0, s>>>(C, A, B, M, N, K, trans_a, trans_b, alpha,
                                                     beta, stride_c, stride_a, stride_b);
            CUDA_LAUNCHED();
            return;
        }
        cu_matmul_fixed(b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta, batch, stride_c,
                        stride_a, stride_b, lowp);
        return;
    }
    if (lowp == KF_PREC_FP32) {
        cublas_rowmajor(b, C, CUDA_R_32F, A, B, CUDA_R_32F, M, N, K, trans_a, trans_b, alpha, beta,
                        batch, stride_c, stride_a, stride_b, CUBLAS_COMPUTE_32F_PEDANTIC);
        return;
    }
    gemm16(b, C, CUDA_R_32F, cu_to16(b, CU_SCRATCH_A, A, span(M * K, batch, stride_a)),
           cu_to16(b, CU_SCRATCH_B, B, span(K * N, batch, stride_b)), M, N, K, trans_a, trans_b,
           alpha, beta, batch, stride_c, stride_a, stride_b);
    cu_round_lowp(b, C, span(M * N, batch, stride_c));
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
