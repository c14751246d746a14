/* kernels/cuda/cuda_layernorm.cu — LayerNorm forward/backward (with or without bias), fp32.
 *
 * Forward: one block per row (batch-invariant by construction). Backward: one
 * block per CUDA_ROW_CHUNK rows; each block writes dx for its rows and one
 * partial row of dw (and dbias) summed over its rows in order; the partials
 * are then added in chunk order (cu_col_finish). No atomics anywhere.
 */
#include "kernels/cuda/cuda_internal.h"

__global__ void __launch_bounds__(256) k_ln_fwd(float *y, float *mean, float *rstd, const float *x,
                                                const float *w, const float *bias, int64_t cols,
                                                float eps) {
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
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
        yr[c] = bias ? v + bias[c] : v;
    }
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

void cu_layernorm_fwd(kf_backend *b, float *y, float *mean, float *rstd, const float *x,
                      const float *w, const float *bias, int64_t rows, int64_t cols, float eps) {
    if (rows <= 0) return;
    KF_CHECK(rows <= 0x7fffffff, "layernorm: too many rows");
    k_ln_fwd<<<(unsigned)rows, 256, 0, cu_stream(b)>>>(y, mean, rstd, x, w, bias, cols, eps);
    CUDA_LAUNCHED();
}

__global__ void __launch_bounds__(256) k_ln_bwd(float *dx, float *pw, float *pb, const float *dy,
                                                const float *x, const float *w, const float *mean,
                                                const float *rstd, int64_t rows, int64_t cols) {
    __shared__ float sh[32];
    int64_t ch = blockIdx.x;
    float *pwc = pw + ch * cols, *pbc = pb ? pb + ch * cols : NULL;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        pwc[c] = 0.0f;
        if (pbc) pbc[c] = 0.0f;
    }
    int64_t r1 = min(rows, (ch + 1) * CUDA_ROW_CHUNK);
    for (int64_t r = ch * CUDA_ROW_CHUNK; r < r1; r++) {
        const float *xr = x + r * cols, *dyr = dy + r * cols;
        float *dxr = dx + r * cols;
        float mu = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float xh = (xr[c] - mu) * rs, g = dyr[c] * w[c];
            sg += g;
            sgx += g * xh;
            pwc[c] += dyr[c] * xh; /* this thread owns column c of the partial */
            if (pbc) pbc[c] += dyr[c];
        }
        float a = block_sum(sg, sh) / (float)cols;
        float bb = block_sum(sgx, sh) / (float)cols;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float xh = (xr[c] - mu) * rs;
            dxr[c] += rs * (dyr[c] * w[c] - a - xh * bb);
        }
    }
}

void cu_layernorm_bwd(kf_backend *b, float *dx, float *dw, float *dbias, const float *dy,
                      const float *x, const float *w, const float *mean, const float *rstd,
                      int64_t rows, int64_t cols) {
    int64_t nchunk = (rows + CUDA_ROW_CHUNK - 1) / CUDA_ROW_CHUNK;
    if (nchunk == 0) return;
    float *pw = (float *)cu_scratch(b, CU_SCRATCH_C, (size_t)(nchunk * cols) * sizeof(float));
    float *pb = dbias ? (float *)cu_scratch(b, CU_SCRATCH_D, (size_t)(nchunk * cols) * sizeof(float))
                      : NULL;
    k_ln_bwd<<<(unsigned)nchunk, 256, 0, cu_stream(b)>>>(dx, pw, pb, dy, x, w, mean, rstd, rows,
                                                         cols);
    CUDA_LAUNCHED();
    cu_col_finish(b, dw, pw, nchunk, cols);
    if (dbias) cu_col_finish(b, dbias, pb, nchunk, cols);
}
