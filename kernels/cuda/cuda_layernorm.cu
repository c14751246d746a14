/* kernels/cuda/cuda_layernorm.cu — LayerNorm forward/backward (with or without bias), fp32.
 *
 * Forward: one block per row (batch-invariant by construction), writing y,
 * its 16-bit copy (kernels.h), or both. Backward, in
 * two independent launches: dx with one block per row (the row's two sums
 * as block_sum's fixed tree), and the weight (and bias) gradient as
 * partials over chunks of CUDA_ROW_CHUNK rows — one thread per (chunk,
 * column) summing its rows in order in a register — added in chunk order by
 * cu_col_finish. No atomics, no read-modify-write of global partials.
 */
#include "kernels/cuda/cuda_internal.h"

__global__ void __launch_bounds__(256)
    k_ln_fwd(float *y, void *y16, int lowp, float *mean, float *rstd, const float *x,
             const float *w, const float *bias, int64_t cols, float eps) {
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    const float *xr = x + r * cols;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    float mu = block_sum(s, sh) / (float)cols;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = xr[c] - mu;
        ss += d * d;
    }
    float rs = 1.0f / sqrtf(block_sum(ss, sh) / (float)cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = (xr[c] - mu) * rs * w[c];
        if (bias) v += bias[c];
        if (y) y[r * cols + c] = v;
        if (y16) cu_store16(y16, r * cols + c, v, lowp);
    }
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

void cu_layernorm_fwd(kf_backend *b, float *y, void *y16, float *mean, float *rstd, const float *x,
                      const float *w, const float *bias, int64_t rows, int64_t cols, float eps) {
    if (rows <= 0) return;
    KF_CHECK(rows <= 0x7fffffff, "layernorm: too many rows");
    KF_CHECK(!y16 || b->precision != KF_PREC_FP32, "layernorm_fwd: a 16-bit copy in fp32 mode");
    k_ln_fwd<<<(unsigned)rows, 256, 0, cu_stream(b)>>>(y, y16, b->precision, mean, rstd, x, w, bias,
                                                       cols, eps);
    CUDA_LAUNCHED();
}

__global__ void __launch_bounds__(256)
    k_ln_bwd_dx(float *dx, void *dx16, int lowp, const float *dy, const float *x, const float *w,
                const float *mean, const float *rstd, int64_t rows, int64_t cols) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols, *dyr = dy + r * cols;
        float *dxr = dx + r * cols;
        float mu = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float xh = (xr[c] - mu) * rs, g = dyr[c] * w[c];
            sg += g;
            sgx += g * xh;
        }
        float a = block_sum(sg, sh) / (float)cols;
        float bb = block_sum(sgx, sh) / (float)cols;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float xh = (xr[c] - mu) * rs;
            float v = dxr[c] + rs * (dyr[c] * w[c] - a - xh * bb);
            dxr[c] = v;
            if (dx16) cu_store16(dx16, r * cols + c, v, lowp);
        }
    }
}

/* pw[ch, c] = sum over chunk ch's rows r (in order) of dy[r, c] * xhat[r, c];
 * pb the same of dy[r, c] (when not NULL). */
__global__ void k_ln_bwd_dw(float *pw, float *pb, const float *dy, const float *x,
                            const float *mean, const float *rstd, int64_t rows, int64_t cols,
                            int64_t nchunk) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int64_t ch = blockIdx.y; ch < nchunk; ch += gridDim.y) {
        int64_t r1 = min(rows, (ch + 1) * CUDA_ROW_CHUNK);
        float sw = 0.0f, sb = 0.0f;
        for (int64_t r = ch * CUDA_ROW_CHUNK; r < r1; r++) {
            float d = dy[r * cols + c], xh = (x[r * cols + c] - mean[r]) * rstd[r];
            sw += d * xh;
            sb += d;
        }
        pw[ch * cols + c] = sw;
        if (pb) pb[ch * cols + c] = sb;
    }
}

void cu_layernorm_bwd(kf_backend *b, float *dx, float *dw, float *dbias, const float *dy,
                      const float *x, const float *w, const float *mean, const float *rstd,
                      int64_t rows, int64_t cols, void *dx16) {
    KF_CHECK(!dx16 || b->precision != KF_PREC_FP32, "layernorm_bwd: a 16-bit copy in fp32 mode");
    int64_t nchunk = (rows + CUDA_ROW_CHUNK - 1) / CUDA_ROW_CHUNK;
    if (nchunk == 0) return;
    cudaStream_t s = cu_stream(b);
    float *pw = (float *)cu_scratch(b, CU_SCRATCH_C, (size_t)(nchunk * cols) * sizeof(float));
    float *pb = dbias
                    ? (float *)cu_scratch(b, CU_SCRATCH_D, (size_t)(nchunk * cols) * sizeof(float))
                    : NULL;
    k_ln_bwd_dx<<<(unsigned)min(rows, (int64_t)1 << 20), 256, 0, s>>>(dx, dx16, b->precision, dy, x,
                                                                      w, mean, rstd, rows, cols);
    CUDA_LAUNCHED();
    dim3 grid((unsigned)((cols + 255) / 256), (unsigned)min(nchunk, (int64_t)65535));
    k_ln_bwd_dw<<<grid, 256, 0, s>>>(pw, pb, dy, x, mean, rstd, rows, cols, nchunk);
    CUDA_LAUNCHED();
    cu_col_finish(b, dw, pw, nchunk, cols);
    if (dbias) cu_col_finish(b, dbias, pb, nchunk, cols);
}
