/* kernels/cuda/cuda_pointwise.cu — elementwise ops: GELU (tanh / erf), add,
 * scale, column fill and half rounding. Same formulas as kernels/cpu/cpu_pointwise.c. */
#include "kernels/cuda/cuda_internal.h"

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_gelu_fwd(float *y, const float *x, int64_t n, int erf_kind) {
    GRID_STRIDE(i, n) y[i] = cu_gelu(x[i], erf_kind);
}

__global__ void k_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n, int erf_kind) {
    GRID_STRIDE(i, n) dx[i] = dy[i] * cu_gelu_grad(x[i], erf_kind);
}

__global__ void k_add(float *y, const float *x, int64_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }

__global__ void k_scale(float *x, float alpha, int64_t n) { GRID_STRIDE(i, n) x[i] *= alpha; }

__global__ void k_fill_column(float *x, int64_t rows, int64_t cols, int64_t col, float value) {
    GRID_STRIDE(r, rows) x[r * cols + col] = value;
}

__global__ void k_round_lowp(float *x, int64_t n, int lowp) {
    GRID_STRIDE(i, n) x[i] = cu_lowp(x[i], lowp);
}

void cu_gelu_fwd(kf_backend *b, float *y, const float *x, int64_t n, kf_gelu_kind kind) {
    if (n <= 0) return;
    k_gelu_fwd<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(y, x, n, kind == KF_GELU_ERF);
    CUDA_LAUNCHED();
}

void cu_gelu_bwd(kf_backend *b, float *dx, const float *dy, const float *x, int64_t n,
                 kf_gelu_kind kind) {
    if (n <= 0) return;
    k_gelu_bwd<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(dx, dy, x, n, kind == KF_GELU_ERF);
    CUDA_LAUNCHED();
}

void cu_add_inplace(kf_backend *b, float *y, const float *x, int64_t n) {
    if (n <= 0) return;
    k_add<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(y, x, n);
    CUDA_LAUNCHED();
}

void cu_scale(kf_backend *b, float *x, float alpha, int64_t n) {
    if (n <= 0) return;
    k_scale<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(x, alpha, n);
    CUDA_LAUNCHED();
}

void cu_fill_column(kf_backend *b, float *x, int64_t rows, int64_t cols, int64_t col, float value) {
    if (rows <= 0) return;
    k_fill_column<<<cu_blocks(rows), 256, 0, cu_stream(b)>>>(x, rows, cols, col, value);
    CUDA_LAUNCHED();
}

void cu_round_lowp(kf_backend *b, float *x, int64_t n) {
    if (n <= 0 || b->precision == KF_PREC_FP32) return;
    k_round_lowp<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(x, n, b->precision);
    CUDA_LAUNCHED();
}
