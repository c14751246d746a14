/* kernels/cpu/cpu_gemm.c — matmul through OpenBLAS, bias add and bias gradient.
 *
 * Threading: OpenBLAS (Debian's pthreads build) threads each product itself,
 * splitting over M/N, never over K, so each C element is one dot product in a
 * fixed order whatever its thread count (the unit test checks 1, 2 and 3
 * threads bitwise). Splitting products over OpenMP threads instead was tried
 * and rejected: concurrent calls into the pthreads build are ~10x slower.
 * On a small loaded machine OMP_WAIT_POLICY=passive keeps idle OpenMP threads
 * from spinning against OpenBLAS's.
 *
 * Batch invariance: OpenBLAS routes tiny products (M*N*K up to 100^3 on the
 * Skylake-X kernels) to a "small matrix" kernel whose summation order differs
 * from the blocked kernel, so a row of C could change with the number of rows
 * M (e.g. one decoding sample vs a batch). A product that small is padded with
 * zero rows past the threshold, so every element is computed by the blocked
 * kernel (tested for the model's shapes).
 *
 * fp16 mode: A and B are rounded through _Float16 into scratch copies (inputs
 * are never modified) and C is rounded after the product: a half GEMM with
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
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda,
                B, (int)(trans_b ? K : N), beta, C, (int)N);
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
    else
        sgemm_raw(C, A, B, M, N, K, trans_a ? M : K, trans_a, trans_b, alpha, beta);
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
