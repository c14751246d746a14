/* kernels/cpu/cpu_gemm.c — matmul through OpenBLAS, bias add and bias gradient.
 *
 * Threading: OpenBLAS runs single-threaded (set in kernels_cpu_create) and the
 * backend splits each product over OpenMP threads itself, in blocks of rows
 * of C (or of columns when C is wide and short). With OpenBLAS's own pthreads
 * next to OpenMP's, the two pools spin against each other on a small machine;
 * one pool avoids that. Every C element is still one dot product over K in
 * OpenBLAS's fixed blocked order, whatever the block it falls in, so results
 * do not depend on the thread count (tested bitwise for 1, 2 and 3 threads).
 *
 * Batch invariance: OpenBLAS routes tiny products (M*N*K up to 100^3 on the
 * Skylake-X kernels) to a "small matrix" kernel whose summation order differs
 * from the blocked kernel, so a row of C could change with the number of rows
 * M (e.g. one decoding sample vs a batch). Blocks are never made that small,
 * and a product that small is padded with zero rows past the threshold, so
 * every element is computed by the blocked kernel (tested for the model's
 * shapes).
 *
 * fp16 mode: A and B are rounded through _Float16 into scratch copies (inputs
 * are never modified) and C is rounded after the product: a half GEMM with
 * fp32 accumulation.
 */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define OPENBLAS_SMALL_MNK 1000000.0

/* One row-major sgemm with explicit leading dimensions. */
static void sgemm_raw(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                      int64_t lda, int64_t ldb, int64_t ldc, int trans_a, int trans_b,
                      float alpha, float beta) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda,
                B, (int)ldb, beta, C, (int)ldc);
}

/* A product below the small-matrix threshold, padded with zero rows past it. */
static void sgemm_padded(kf_backend *b, float *C, const float *A, const float *B, int64_t M,
                         int64_t N, int64_t K, int trans_a, int trans_b, float alpha, float beta) {
    int64_t Mp = (int64_t)(OPENBLAS_SMALL_MNK / ((double)N * (double)K)) + 1;
    float *pa = cpu_scratch(b, CPU_SCRATCH_C, (size_t)(Mp * K));
    float *pc = cpu_scratch(b, CPU_SCRATCH_D, (size_t)(Mp * N));
    memset(pa, 0, (size_t)(Mp * K) * sizeof(float));
    if (trans_a) /* A stored [K, M] -> [K, Mp] */
        for (int64_t k = 0; k < K; k++) memcpy(pa + k * Mp, A + k * M, (size_t)M * sizeof(float));
    else
        memcpy(pa, A, (size_t)(M * K) * sizeof(float));
    memcpy(pc, C, (size_t)(M * N) * sizeof(float));
    memset(pc + M * N, 0, (size_t)((Mp - M) * N) * sizeof(float));
    sgemm_raw(pc, pa, B, Mp, N, K, trans_a ? Mp : K, trans_b ? K : N, N, trans_a, trans_b, alpha,
              beta);
    memcpy(C, pc, (size_t)(M * N) * sizeof(float));
}

/* C[M,N] (ldc = N, dense A and B) split over the OpenMP threads. */
static void sgemm(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                  int64_t K, int trans_a, int trans_b, float alpha, float beta) {
    double mnk = (double)M * (double)N * (double)K;
    if (K == 0) { /* empty sum: C = beta*C (BLAS would reject lda = 0) */
        for (int64_t i = 0; i < M * N; i++) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    if (mnk <= OPENBLAS_SMALL_MNK) {
        sgemm_padded(b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta);
        return;
    }
    int by_cols = N > M; /* split the longer side of C */
    int64_t len = by_cols ? N : M;
    int64_t nblk = omp_get_max_threads();
    int64_t most = (int64_t)(mnk / (2.0 * OPENBLAS_SMALL_MNK)); /* keep blocks well above it */
    nblk = nblk < most ? nblk : most;
    nblk = nblk < len ? nblk : len;
    if (nblk <= 1) {
        sgemm_raw(C, A, B, M, N, K, trans_a ? M : K, trans_b ? K : N, N, trans_a, trans_b, alpha,
                  beta);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nblk)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t i0 = blk * len / nblk, i1 = (blk + 1) * len / nblk;
        if (by_cols) /* columns [i0, i1) of C: columns of op(B) */
            sgemm_raw(C + i0, A, trans_b ? B + i0 * K : B + i0, M, i1 - i0, K, trans_a ? M : K,
                      trans_b ? K : N, N, trans_a, trans_b, alpha, beta);
        else /* rows [i0, i1) of C: rows of op(A) */
            sgemm_raw(C + i0 * N, trans_a ? A + i0 : A + i0 * K, B, i1 - i0, N, K,
                      trans_a ? M : K, trans_b ? K : N, N, trans_a, trans_b, alpha, beta);
    }
}

void cpu_matmul(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                int64_t K, int trans_a, int trans_b, float alpha, float beta) {
    cpu_matmul_batched(b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta, 1, 0, 0, 0);
}

void cpu_matmul_batched(kf_backend *b, float *C, const float *A, const float *B, int64_t M,
                        int64_t N, int64_t K, int trans_a, int trans_b, float alpha, float beta,
                        int64_t batch, int64_t stride_c, int64_t stride_a, int64_t stride_b) {
    if (M <= 0 || N <= 0) return;
    int half = b->precision == KF_PREC_FP16;
    for (int64_t i = 0; i < batch; i++) {
        float *c = C + i * stride_c;
        const float *a = A + i * stride_a, *bb = B + i * stride_b;
        if (half) {
            float *ha = cpu_scratch(b, CPU_SCRATCH_A, (size_t)(M * K));
            float *hb = cpu_scratch(b, CPU_SCRATCH_B, (size_t)(K * N));
            cpu_round_half_copy(ha, a, M * K);
            cpu_round_half_copy(hb, bb, K * N);
            a = ha;
            bb = hb;
        }
        sgemm(b, c, a, bb, M, N, K, trans_a, trans_b, alpha, beta);
        if (half) cpu_round_half_copy(c, c, M * N);
    }
}

void cpu_add_bias(kf_backend *b, float *y, const float *bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * cols;
        for (int64_t c = 0; c < cols; c++) yr[c] += bias[c];
    }
}

void cpu_bias_grad(kf_backend *b, float *dbias, const float *dy, int64_t rows, int64_t cols) {
    int64_t nchunk = (rows + KF_CPU_ROW_CHUNK - 1) / KF_CPU_ROW_CHUNK;
    if (nchunk == 0) return;
    float *part = cpu_scratch(b, CPU_SCRATCH_C, (size_t)(nchunk * cols));
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < nchunk; ch++) {
        float *p = part + ch * cols;
        int64_t r1 = (ch + 1) * KF_CPU_ROW_CHUNK < rows ? (ch + 1) * KF_CPU_ROW_CHUNK : rows;
        for (int64_t c = 0; c < cols; c++) p[c] = 0.0f;
        for (int64_t r = ch * KF_CPU_ROW_CHUNK; r < r1; r++) {
            const float *d = dy + r * cols;
            for (int64_t c = 0; c < cols; c++) p[c] += d[c];
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < cols; c++) {
        float s = 0.0f;
        for (int64_t ch = 0; ch < nchunk; ch++) s += part[ch * cols + c];
        dbias[c] += s;
    }
}
