/* kernels/cpu/cpu_gemm.c — matmul, bias add and bias gradient.
 *
 * Two GEMMs. By default (b->batch_invariant, which the CPU backend sets
 * unless KF_CPU_GEMM=openblas) every product goes through the project's own
 * kernel (cpu_gemm_fixed.c), whose summation order the project fixes: a
 * row's result does not depend on the row count, the thread count, the SIMD
 * level or the OpenBLAS build. Training, teacher passes, evaluation and
 * decoding all rely on that for their bitwise guarantees (resume, -np 1 vs
 * -np 2, batch-invariant targets, the same weights on every CPU).
 *
 * With KF_CPU_GEMM=openblas (speed comparisons only; teacher passes still
 * switch batch_invariant on) products go to OpenBLAS, whose kernels split
 * K per CPU model and per thread count, and whose "small matrix" kernel
 * (M*N*K up to 100^3 on Skylake-X) sums in another order: such a product is
 * padded with zero rows past the threshold to keep rows independent of M
 * on that CPU at least.
 *
 * fp16/bf16 mode: A and B are rounded to the 16-bit format (inputs are
 * never modified) and C is rounded after the product: a 16-bit GEMM with
 * fp32 accumulation.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define OPENBLAS_SMALL_MNK 1000000.0

/* One row-major sgemm with explicit leading dimension of A (ldb, ldc dense). */
static void sgemm_raw(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                      int64_t lda, int trans_a, int trans_b, float alpha, float beta) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
                (int)(trans_b ? K : N), beta, C, (int)N);
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
    else memcpy(pa, A, (size_t)(M * K) * sizeof(float));
    memcpy(pc, C, (size_t)(M * N) * sizeof(float));
    memset(pc + M * N, 0, (size_t)((Mp - M) * N) * sizeof(float));
    sgemm_raw(pc, pa, B, Mp, N, K, trans_a ? Mp : K, trans_a, trans_b, alpha, beta);
    memcpy(C, pc, (size_t)(M * N) * sizeof(float));
}

/* C[M,N] = alpha op(A) op(B) + beta C with dense operands. */
static void sgemm(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                  int64_t K, int trans_a, int trans_b, float alpha, float beta) {
    if (K == 0) { /* empty sum: C = beta*C (BLAS would reject lda = 0) */
        for (int64_t i = 0; i < M * N; i++) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    if ((double)M * (double)N * (double)K <= OPENBLAS_SMALL_MNK)
        sgemm_padded(b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta);
    else sgemm_raw(C, A, B, M, N, K, trans_a ? M : K, trans_a, trans_b, alpha, beta);
}

void cpu_matmul(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                int64_t K, int trans_a, int trans_b, float alpha, float beta) {
    cpu_matmul_batched(b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta, 1, 0, 0, 0);
}

void cpu_matmul_batched(kf_backend *b, float *C, const float *A, const float *B, int64_t M,
                        int64_t N, int64_t K, int trans_a, int trans_b, float alpha, float beta,
                        int64_t batch, int64_t stride_c, int64_t stride_a, int64_t stride_b) {
    if (M <= 0 || N <= 0) return;
    int lowp = b->precision;
    for (int64_t i = 0; i < batch; i++) {
        float *c = C + i * stride_c;
        const float *a = A + i * stride_a, *bb = B + i * stride_b;
        if (b->batch_invariant) {
            cpu_gemm_fixed(b, c, a, bb, M, N, K, trans_a, trans_b, alpha, beta, lowp);
            if (lowp) cpu_round_lowp_copy(c, c, M * N, lowp);
            continue;
        }
        if (lowp) {
            float *ha = cpu_scratch(b, CPU_SCRATCH_A, (size_t)(M * K));
            float *hb = cpu_scratch(b, CPU_SCRATCH_B, (size_t)(K * N));
            cpu_round_lowp_copy(ha, a, M * K, lowp);
            cpu_round_lowp_copy(hb, bb, K * N, lowp);
            a = ha;
            bb = hb;
        }
        sgemm(b, c, a, bb, M, N, K, trans_a, trans_b, alpha, beta);
        if (lowp) cpu_round_lowp_copy(c, c, M * N, lowp);
    }
}

void cpu_add_bias(kf_backend *b, float *y, const float *bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= KF_CPU_PAR_MIN)
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
