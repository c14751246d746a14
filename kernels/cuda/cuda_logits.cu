/* kernels/cuda/cuda_logits.cu — ops over logits rows [rows, V]: softmax
 * cross-entropy, argmax, float64 inverse-CDF sampling and CDF bins, frequency
 * penalty. One block per row: a row's result never depends on the batch.
 *
 * Cross-entropy reads the row for its max, again for the sum of exponentials,
 * and writes the gradient in a third pass that recomputes each exponential;
 * probabilities are never stored. xent16 keeps the first two passes and
 * writes the gradient in 16 bits column-wise, so it can sum the bias
 * gradient in bias_grad's order in the same pass. The inverse-CDF ops give each thread a
 * contiguous slice of the vocabulary; slice sums are prefix-summed in slice
 * order by one thread, so the CDF is a fixed sequence of float64 additions
 * (the same one in sample_icdf and icdf_bin).
 */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

#define ROW_THREADS 512

/* Element v of a row's cross-entropy gradient, from the row's max mx and g =
 * grad_scale / (sum of exponentials); is_t: v is the target. One function
 * so that xent and xent16 compute the same bits. */
__device__ __forceinline__ float xent_grad(float x, float mx, float g, int is_t, float grad_scale) {
    float e = expf(x - mx) * g;
    return is_t ? e - grad_scale : e;
}

/* stats (NULL: none) gets each counted row's max and sum: stats[2r], [2r+1]. */
__global__ void __launch_bounds__(ROW_THREADS)
    k_xent(float *losses, float *dlogits, float *stats, const float *logits, const int32_t *targets,
           int64_t V, const float *grad_scale_d) {
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    const float *x = logits + r * V;
    float *d = dlogits ? dlogits + r * V : NULL;
    int32_t t = targets[r];
    if (t < 0 || t >= V) { /* ignored row (targets >= V are a caller bug: also ignored) */
        if (losses && threadIdx.x == 0) losses[r] = 0.0f;
        if (d)
            for (int64_t v = threadIdx.x; v < V; v += blockDim.x) d[v] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, x[v]);
    mx = block_max(mx, sh, -INFINITY);
    float s = 0.0f;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += expf(x[v] - mx);
    float sum = block_sum(s, sh); /* ends with a barrier: x[t] is read before d overwrites it */
    float xt = x[t];
    if (losses && threadIdx.x == 0) losses[r] = mx + logf(sum) - xt;
    if (stats && threadIdx.x == 0) stats[2 * r] = mx, stats[2 * r + 1] = sum;
    if (!d) return;
    __syncthreads();
    float grad_scale = grad_scale_d ? *grad_scale_d : 1.0f;
    float g = grad_scale / sum;
    /* d may alias x: each element read then written by one thread */
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        d[v] = xent_grad(x[v], mx, g, v == t, grad_scale);
}

void cu_xent(kf_backend *b, float *losses, float *dlogits, const float *logits,
             const int32_t *targets, int64_t rows, int64_t V, const float *grad_scale) {
    if (rows <= 0) return;
    k_xent<<<(unsigned)rows, ROW_THREADS, 0, cu_stream(b)>>>(losses, dlogits, (float *)NULL, logits,
                                                             targets, V, grad_scale);
    CUDA_LAUNCHED();
}

/* xent16's gradient from k_xent's row statistics, a column per thread as
 * k_dact_cols walks dy in linear_bwd: each element as xent writes it, times
 * its row's weight, the mask column zero, stored in the 16-bit format
 * lowp, and part[ch, col] = the sum of the fp32 values over chunk ch's
 * rows in order (part NULL: none). */
__global__ void k_xent16_cols(void *d16, int lowp, float *part, const float *logits,
                              const int32_t *targets, const float *stats, const float *row_w,
                              int64_t rows, int64_t V, const float *grad_scale_d,
                              int64_t mask_col) {
    int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (col >= V) return;
    float grad_scale = grad_scale_d ? *grad_scale_d : 1.0f;
    for (int64_t ch = blockIdx.y; ch * CUDA_ROW_CHUNK < rows; ch += gridDim.y) {
        int64_t r1 = min(rows, (ch + 1) * CUDA_ROW_CHUNK);
        float s = 0.0f;
        for (int64_t r = ch * CUDA_ROW_CHUNK; r < r1; r++) {
            int32_t t = targets[r];
            float v = 0.0f;
            if (t >= 0 && t < V)
                v = xent_grad(logits[r * V + col], stats[2 * r], grad_scale / stats[2 * r + 1],
                              col == t, grad_scale);
            if (row_w) v *= row_w[r];
            if (col == mask_col) v = 0.0f;
            cu_store16(d16, r * V + col, v, lowp);
            s += v;
        }
        if (part) part[ch * V + col] = s;
    }
}

void cu_xent16(kf_backend *b, float *losses, void *dlogits16, float *dbias, const float *logits,
               const int32_t *targets, const float *row_w, int64_t rows, int64_t V,
               const float *grad_scale, int64_t mask_col) {
    KF_CHECK(b->precision != KF_PREC_FP32, "xent16: a 16-bit copy in fp32 mode");
    if (rows <= 0 || V <= 0) return;
    float *stats = (float *)cu_scratch(b, CU_SCRATCH_A, (size_t)(2 * rows) * sizeof(float));
    k_xent<<<(unsigned)rows, ROW_THREADS, 0, cu_stream(b)>>>(losses, (float *)NULL, stats, logits,
                                                             targets, V, grad_scale);
    CUDA_LAUNCHED();
    int64_t nchunk = (rows + CUDA_ROW_CHUNK - 1) / CUDA_ROW_CHUNK;
    float *part = dbias ? (float *)cu_scratch(b, CU_SCRATCH_C, (size_t)(nchunk * V) * 4) : NULL;
    dim3 grid((unsigned)((V + 255) / 256), (unsigned)min(nchunk, (int64_t)65535));
    k_xent16_cols<<<grid, 256, 0, cu_stream(b)>>>(dlogits16, b->precision, part, logits, targets,
                                                  stats, row_w, rows, V, grad_scale, mask_col);
    CUDA_LAUNCHED();
    if (dbias) cu_col_finish(b, dbias, part, nchunk, V);
}

__global__ void __launch_bounds__(ROW_THREADS)
    k_argmax(int32_t *ids, const float *logits, int64_t V) {
    __shared__ float shv[ROW_THREADS];
    __shared__ int64_t shi[ROW_THREADS];
    const float *x = logits + blockIdx.x * V;
    float best = -INFINITY;
    int64_t bi = -1;
    /* NaNs never win (the CPU's scan): one taken as a slice's first value
     * would hide the slice's real maximum */
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        if (x[v] == x[v] && (bi < 0 || x[v] > best)) {
            best = x[v];
            bi = v;
        }
    shv[threadIdx.x] = best;
    shi[threadIdx.x] = bi;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
            float ov = shv[threadIdx.x + st];
            int64_t oi = shi[threadIdx.x + st];
            /* larger value wins; on ties (or an empty slot) the smaller index */
            if (oi >= 0 && (shi[threadIdx.x] < 0 || ov > shv[threadIdx.x] ||
                            (ov == shv[threadIdx.x] && oi < shi[threadIdx.x]))) {
                shv[threadIdx.x] = ov;
                shi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    /* as the scan from index 0: a NaN there is never replaced; all NaN: 0 */
    if (threadIdx.x == 0) ids[blockIdx.x] = (int32_t)(shi[0] < 0 || x[0] != x[0] ? 0 : shi[0]);
}

void cu_argmax(kf_backend *b, int32_t *ids, const float *logits, int64_t rows, int64_t V) {
    if (rows <= 0) return;
    k_argmax<<<(unsigned)rows, ROW_THREADS, 0, cu_stream(b)>>>(ids, logits, V);
    CUDA_LAUNCHED();
}

/* Shared setup of the inverse-CDF ops for row x: returns 1/sum and this
 * thread's slice [v0, v1) with the CDF just before v0 in *before. Inside a
 * slice the CDF is before + (p_v0 + ... + p_v), the sum taken from 0 in the
 * order that gave the slice's share, so a slice's last bin ends exactly where
 * the next slice's first begins (adding to `before` one p at a time would
 * round differently from the prefix and leave gaps or overlaps of an ulp). */
struct icdf_row {
    double mx, inv_sum, before;
    int64_t v0, v1;
};

__device__ icdf_row icdf_prepare(const float *x, double tau, int64_t V, double *sh, double *pref) {
    icdf_row R;
    int64_t per = (V + blockDim.x - 1) / blockDim.x;
    R.v0 = min(V, (int64_t)threadIdx.x * per);
    R.v1 = min(V, R.v0 + per);
    double mx = -INFINITY;
    for (int64_t v = R.v0; v < R.v1; v++) mx = fmax(mx, (double)x[v] / tau);
    R.mx = block_max(mx, sh, (double)-INFINITY);
    double s = 0.0;
    for (int64_t v = R.v0; v < R.v1; v++) s += exp((double)x[v] / tau - R.mx);
    double sum = block_sum(s, sh);
    R.inv_sum = 1.0 / sum;
    double ps = 0.0; /* this slice's share of the CDF, same additions as the scan below */
    for (int64_t v = R.v0; v < R.v1; v++) {
        double p = exp((double)x[v] / tau - R.mx) * R.inv_sum;
        if (p > 0.0) ps += p;
    }
    pref[threadIdx.x] = ps;
    __syncthreads();
    if (threadIdx.x == 0) {
        double c = 0.0;
        for (unsigned i = 0; i < blockDim.x; i++) {
            double t = pref[i];
            pref[i] = c;
            c += t;
        }
    }
    __syncthreads();
    R.before = pref[threadIdx.x];
    return R;
}

#define ICDF_THREADS 256

__global__ void __launch_bounds__(ICDF_THREADS)
    k_sample_icdf(int32_t *ids, const float *logits, const double *tau, const double *z,
                  int64_t V) {
    __shared__ double sh[32];
    __shared__ double pref[ICDF_THREADS];
    __shared__ long long pick, last;
    int64_t r = blockIdx.x;
    const float *x = logits + r * V;
    if (threadIdx.x == 0) {
        pick = V;
        last = 0;
    }
    icdf_row R = icdf_prepare(x, tau[r], V, sh, pref);
    double c = 0.0, zr = z[r];
    int64_t my_pick = V, my_last = -1;
    for (int64_t v = R.v0; v < R.v1; v++) {
        double p = exp((double)x[v] / tau[r] - R.mx) * R.inv_sum;
        if (p <= 0.0) continue;
        c += p;
        my_last = v;
        if (R.before + c >= zr) {
            my_pick = v;
            break;
        }
    }
    /* integer min/max: order-independent, so atomics are deterministic here */
    if (my_pick < V) atomicMin(&pick, (long long)my_pick);
    if (my_last >= 0) atomicMax(&last, (long long)my_last);
    __syncthreads();
    if (threadIdx.x == 0) ids[r] = (int32_t)(pick < V ? pick : last);
}

void cu_sample_icdf(kf_backend *b, int32_t *ids, const float *logits, const double *tau,
                    const double *z, int64_t rows, int64_t V) {
    if (rows <= 0) return;
    k_sample_icdf<<<(unsigned)rows, ICDF_THREADS, 0, cu_stream(b)>>>(ids, logits, tau, z, V);
    CUDA_LAUNCHED();
}

__global__ void __launch_bounds__(ICDF_THREADS)
    k_icdf_bin(double *lo, double *hi, const float *logits, const double *tau,
               const int32_t *targets, int64_t V) {
    __shared__ double sh[32];
    __shared__ double pref[ICDF_THREADS];
    int64_t r = blockIdx.x;
    const float *x = logits + r * V;
    icdf_row R = icdf_prepare(x, tau[r], V, sh, pref);
    int64_t t = targets[r];
    if (t < R.v0 || t >= R.v1) return; /* the owner of the target's slice writes */
    double c = 0.0;
    for (int64_t v = R.v0; v < t; v++) {
        double p = exp((double)x[v] / tau[r] - R.mx) * R.inv_sum;
        if (p > 0.0) c += p;
    }
    double p = exp((double)x[t] / tau[r] - R.mx) * R.inv_sum;
    lo[r] = R.before + c;
    hi[r] = R.before + (p > 0.0 ? c + p : c);
}

void cu_icdf_bin(kf_backend *b, double *lo, double *hi, const float *logits, const double *tau,
                 const int32_t *targets, int64_t rows, int64_t V) {
    if (rows <= 0) return;
    k_icdf_bin<<<(unsigned)rows, ICDF_THREADS, 0, cu_stream(b)>>>(lo, hi, logits, tau, targets, V);
    CUDA_LAUNCHED();
}

/* Thread per history slot; the first slot holding an id applies penalty*count
 * for it (as the CPU backend: one subtraction per distinct id). */
__global__ void k_freq_penalty(float *logits, const int32_t *hist, int64_t n_hist, int64_t rows,
                               int64_t V, float penalty) {
    int64_t r = blockIdx.x;
    const int32_t *h = hist + r; /* position j at h[j * rows] */
    for (int64_t j = threadIdx.x; j < n_hist; j += blockDim.x) {
        int32_t id = h[j * rows];
        if (id < 0 || id >= V) continue;
        bool first = true;
        for (int64_t k = 0; k < j && first; k++) first = h[k * rows] != id;
        if (!first) continue;
        int64_t cnt = 0;
        for (int64_t k = j; k < n_hist; k++) cnt += h[k * rows] == id;
        logits[r * V + id] -= penalty * (float)cnt;
    }
}

void cu_freq_penalty(kf_backend *b, float *logits, const int32_t *hist, int64_t n_hist,
                     int64_t rows, int64_t V, float penalty) {
    if (n_hist <= 0 || rows <= 0) return;
    k_freq_penalty<<<(unsigned)rows, 128, 0, cu_stream(b)>>>(logits, hist, n_hist, rows, V,
                                                             penalty);
    CUDA_LAUNCHED();
}

/* One thread: the CPU backend's row order, so the sum is bitwise its. The
 * rows are a micro-batch's (tens of microseconds), in place of a wait. */
__global__ void k_loss_sum(double *acc, const float *losses, const int32_t *targets, int64_t rows) {
    double s = 0;
    for (int64_t r = 0; r < rows; r++)
        if (targets[r] >= 0) s += (double)losses[r];
    acc[0] += s;
}

void cu_loss_sum(kf_backend *b, double *acc, const float *losses, const int32_t *targets,
                 int64_t rows) {
    k_loss_sum<<<1, 1, 0, cu_stream(b)>>>(acc, losses, targets, rows);
    CUDA_LAUNCHED();
}
