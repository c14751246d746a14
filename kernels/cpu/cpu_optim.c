/* kernels/cpu/cpu_optim.c — reductions, the gradient check, AdamW and EMA.
 *
 * sum/sumsq accumulate in double over fixed parts of KF_SUM_PART elements
 * (CPU_LANES fixed lanes inside a part), and the part sums are added in
 * part order, so the result depends on neither the thread count nor the
 * SIMD level.
 */
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

/* part[ch] = the sum (of squares) of x[ch * KF_SUM_PART, ...) */
static void part_sums(double *part, const float *x, int64_t n, int square) {
    int64_t nchunk = (n + KF_SUM_PART - 1) / KF_SUM_PART;
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < nchunk; ch++) {
        int64_t i1 = (ch + 1) * KF_SUM_PART < n ? (ch + 1) * KF_SUM_PART : n;
        double acc[CPU_LANES] = {0};
        int64_t i = ch * KF_SUM_PART; /* parts start at whole lanes */
        for (; i + CPU_LANES <= i1; i += CPU_LANES)
            for (int l = 0; l < CPU_LANES; l++)
                acc[l] += square ? (double)x[i + l] * (double)x[i + l] : (double)x[i + l];
        for (int l = 0; i + l < i1; l++)
            acc[l] += square ? (double)x[i + l] * (double)x[i + l] : (double)x[i + l];
        part[ch] = cpu_lanes_sum(acc);
    }
}

static double chunked_sum(const float *x, int64_t n, int square) {
    int64_t nchunk = (n + KF_SUM_PART - 1) / KF_SUM_PART;
    if (nchunk == 0) return 0.0;
    double *part = kf_malloc((size_t)nchunk * sizeof(double));
    part_sums(part, x, n, square);
    double s = 0.0;
    for (int64_t ch = 0; ch < nchunk; ch++) s += part[ch];
    free(part);
    return s;
}

double cpu_sum(kf_backend *b, const float *x, int64_t n) { return chunked_sum(x, n, 0); }

double cpu_sumsq(kf_backend *b, const float *x, int64_t n) { return chunked_sum(x, n, 1); }

void cpu_sumsq_parts(kf_backend *b, double *parts, const float *x, int64_t n) {
    part_sums(parts, x, n, 1);
}

int64_t cpu_count_nonfinite(kf_backend *b, const float *x, int64_t n) {
    int64_t c = 0;
#pragma omp parallel for schedule(static) reduction(+ : c)
    for (int64_t i = 0; i < n; i++) c += !isfinite(x[i]);
    return c;
}

/* The optimizer's decision (trainer/train/optim.h) in double, in this order:
 * the CUDA kernel repeats it operation for operation. */
void cpu_grad_check(kf_backend *b, kf_grad_ctl *ctl, const float *grads, int64_t n, double clip) {
    double loss_scale = ctl->loss_scale;
    if (grads) ctl->sumsq = chunked_sum(grads, n, 1);
    ctl->norm = sqrt(ctl->sumsq) / loss_scale;
    ctl->skip = !isfinite(ctl->sumsq);
    double c = clip > 0 && ctl->norm > clip ? clip / ctl->norm : 1.0;
    ctl->grad_scale = (float)(c / loss_scale);
}

/* PyTorch AdamW (torch.optim.AdamW, foreach=False):
 *   p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *   p -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)
 * with g = grad * grad_scale; bias corrections computed in double. */
void cpu_adamw(kf_backend *b, float *params, const float *grads, float *m, float *v, int64_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
               float grad_scale, const kf_grad_ctl *ctl) {
    if (ctl && ctl->skip) return;
    kf_grad_ctl own;
    if (ctl) grad_scale = ctl->grad_scale;
    else kernels_adamw_factors(&own, lr, beta1, beta2, weight_decay, step);
    const kf_grad_ctl *f = ctl ? ctl : &own;
    float step_size = f->step_size, bc2_sqrt = f->bc2_sqrt, decay = f->wd_decay;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        params[i] = params[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

void cpu_ema(kf_backend *b, float *ema, const float *params, int64_t n, float decay,
             const kf_grad_ctl *ctl) {
    if (ctl && ctl->skip) return;
    if (ctl) decay = ctl->ema_decay;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) ema[i] = decay * ema[i] + (1.0f - decay) * params[i];
}
