/* kernels/cuda/cuda_optim.cu — reductions, the gradient check, AdamW and EMA.
 *
 * sum/count_nonfinite split x into at most RED_BLOCKS contiguous slices
 * (the split depends only on n), reduce each slice in a fixed block order in
 * double, and add the slice results on the host in slice order. sumsq does
 * the same over slices of KF_SUM_PART elements (kernels.h), its parts, which
 * sumsq_parts returns. grad_check adds those parts on the device and writes
 * its decision there, for adamw and ema to read without a host wait.
 * AdamW and EMA are one elementwise launch over the flat parameter buffer,
 * with the CPU backend's formulas; products and sums use the _rn intrinsics so
 * the compiler cannot fuse them into FMAs, which keeps the update bitwise equal
 * to the CPU backend's for equal inputs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

#define RED_BLOCKS 512
#define RED_THREADS 256

/* mode 0: sum, 1: sum of squares, 2: count of non-finite values */
__global__ void __launch_bounds__(RED_THREADS)
    k_reduce(double *part, const float *x, int64_t n, int64_t per, int mode) {
    __shared__ double sh[32];
    int64_t i0 = blockIdx.x * per, i1 = min(n, i0 + per);
    double s = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        double v = (double)x[i];
        s += mode == 0 ? v : mode == 1 ? v * v : (double)!isfinite(x[i]);
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

static double reduce(kf_backend *b, const float *x, int64_t n, int mode) {
    if (n <= 0) return 0.0;
    cuda_impl *im = cu_impl(b);
    int64_t per = (n + RED_BLOCKS - 1) / RED_BLOCKS;
    per = (per + RED_THREADS - 1) / RED_THREADS * RED_THREADS;
    int64_t g = (n + per - 1) / per;
    k_reduce<<<(unsigned)g, RED_THREADS, 0, im->stream>>>(im->red, x, n, per, mode);
    CUDA_LAUNCHED();
    CUDA_OK(cudaMemcpyAsync(im->red_host, im->red, (size_t)g * sizeof(double),
                            cudaMemcpyDeviceToHost, im->stream));
    cu_wait(b);
    double s = 0.0;
    for (int64_t i = 0; i < g; i++) s += im->red_host[i];
    return s;
}

double cu_sum(kf_backend *b, const float *x, int64_t n) { return reduce(b, x, n, 0); }

void cu_sumsq_parts(kf_backend *b, double *parts, const float *x, int64_t n) {
    if (n <= 0) return;
    int64_t g = (n + KF_SUM_PART - 1) / KF_SUM_PART;
    double *dev = (double *)cu_scratch(b, CU_SCRATCH_C, (size_t)g * sizeof(double));
    k_reduce<<<(unsigned)g, RED_THREADS, 0, cu_stream(b)>>>(dev, x, n, KF_SUM_PART, 1);
    CUDA_LAUNCHED();
    CUDA_OK(cudaMemcpyAsync(parts, dev, (size_t)g * sizeof(double), cudaMemcpyDeviceToHost,
                            cu_stream(b)));
    cu_wait(b);
}

double cu_sumsq(kf_backend *b, const float *x, int64_t n) {
    int64_t g = (n + KF_SUM_PART - 1) / KF_SUM_PART;
    if (g <= 0) return 0.0;
    double *parts = (double *)kf_malloc((size_t)g * sizeof(double)), s = 0.0;
    cu_sumsq_parts(b, parts, x, n);
    for (int64_t i = 0; i < g; i++) s += parts[i];
    free(parts);
    return s;
}

int64_t cu_count_nonfinite(kf_backend *b, const float *x, int64_t n) {
    return (int64_t)llround(reduce(b, x, n, 2));
}

/* The parts (when given) added in part order by one thread, as the host adds
 * sumsq's parts (the block stages them in shared memory), then the decision
 * in double with correctly rounded sqrt and divisions: the CPU backend's
 * arithmetic, bit for bit. */
__global__ void __launch_bounds__(RED_THREADS)
    k_grad_check(kf_grad_ctl *ctl, const double *parts, int64_t np, int from_grads, double clip) {
    __shared__ double sh[RED_THREADS];
    double s = 0.0;
    for (int64_t i0 = 0; i0 < np; i0 += RED_THREADS) {
        if (i0 + threadIdx.x < np) sh[threadIdx.x] = parts[i0 + threadIdx.x];
        __syncthreads();
        if (threadIdx.x == 0)
            for (int64_t i = i0; i < np && i < i0 + RED_THREADS; i++) s = __dadd_rn(s, sh[i - i0]);
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    if (from_grads) ctl->sumsq = s;
    double loss_scale = ctl->loss_scale;
    double norm = __ddiv_rn(__dsqrt_rn(ctl->sumsq), loss_scale);
    ctl->norm = norm;
    ctl->skip = !isfinite(ctl->sumsq);
    double c = clip > 0 && norm > clip ? __ddiv_rn(clip, norm) : 1.0;
    ctl->grad_scale = (float)__ddiv_rn(c, loss_scale);
}

void cu_grad_check(kf_backend *b, kf_grad_ctl *ctl, const float *grads, int64_t n, double clip) {
    int64_t g = grads ? (n + KF_SUM_PART - 1) / KF_SUM_PART : 0;
    double *parts = NULL;
    if (g > 0) {
        parts = (double *)cu_scratch(b, CU_SCRATCH_C, (size_t)g * sizeof(double));
        k_reduce<<<(unsigned)g, RED_THREADS, 0, cu_stream(b)>>>(parts, grads, n, KF_SUM_PART, 1);
        CUDA_LAUNCHED();
    }
    k_grad_check<<<1, RED_THREADS, 0, cu_stream(b)>>>(ctl, parts, g, grads != NULL, clip);
    CUDA_LAUNCHED();
}

/* f: the step factors, ctl's (device) or the host's (a kernel argument) */
__global__ void k_adamw(float *p, const float *grads, float *m, float *v, int64_t n, float beta1,
                        float beta2, float eps, kf_grad_ctl own, float grad_scale,
                        const kf_grad_ctl *ctl) {
    if (ctl && ctl->skip) return;
    if (ctl) grad_scale = ctl->grad_scale;
    const kf_grad_ctl *f = ctl ? ctl : &own;
    float step_size = f->step_size, bc2_sqrt = f->bc2_sqrt, decay = f->wd_decay;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float g = __fmul_rn(grads[i], grad_scale);
        float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, g));
        float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
        m[i] = mi;
        v[i] = vi;
        float den = __fadd_rn(__fdiv_rn(sqrtf(vi), bc2_sqrt), eps);
        p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), den));
    }
}

void cu_adamw(kf_backend *b, float *params, const float *grads, float *m, float *v, int64_t n,
              float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
              float grad_scale, const kf_grad_ctl *ctl) {
    kf_grad_ctl own;
    memset(&own, 0, sizeof own);
    if (!ctl) kernels_adamw_factors(&own, lr, beta1, beta2, weight_decay, step);
    if (n <= 0) return;
    k_adamw<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(params, grads, m, v, n, beta1, beta2, eps, own,
                                                    grad_scale, ctl);
    CUDA_LAUNCHED();
}

__global__ void k_ema(float *ema, const float *p, int64_t n, float decay, const kf_grad_ctl *ctl) {
    if (ctl && ctl->skip) return;
    if (ctl) decay = ctl->ema_decay;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ema[i] = __fadd_rn(__fmul_rn(decay, ema[i]), __fmul_rn(1.0f - decay, p[i]));
}

void cu_ema(kf_backend *b, float *ema, const float *params, int64_t n, float decay,
            const kf_grad_ctl *ctl) {
    if (n <= 0) return;
    k_ema<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(ema, params, n, decay, ctl);
    CUDA_LAUNCHED();
}
