/* kernels/cpu/cpu_logits.c — ops over logits rows [rows, V]: softmax
 * cross-entropy, argmax, float64 inverse-CDF sampling and CDF bins, frequency
 * penalty. Rows are independent; each row is handled by one thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

/* One row of softmax cross-entropy; d may alias x. The sum of exponentials
 * runs in CPU_LANES fixed lanes (the same bits at every SIMD level). */
CPU_INLINE int xent_row_body(float *loss, float *d, const float *x, int32_t t, int64_t V,
                             float grad_scale) {
    float mx = -INFINITY, acc[CPU_LANES] = {0}, xt = x[t];
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    int64_t v0 = 0;
    for (; v0 + CPU_LANES <= V; v0 += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) {
            float e = cpu_expf(x[v0 + l] - mx);
            if (d) d[v0 + l] = e;
            acc[l] += e;
        }
    for (int l = 0; v0 + l < V; l++) {
        float e = cpu_expf(x[v0 + l] - mx);
        if (d) d[v0 + l] = e;
        acc[l] += e;
    }
    float sum = cpu_lanes_sumf(acc);
    if (d) {
        float g = grad_scale / sum;
#pragma omp simd
        for (int64_t v = 0; v < V; v++) d[v] *= g;
        d[t] -= grad_scale;
    }
    if (loss) *loss = mx + logf(sum) - xt;
    return 0;
}
CPU_MULTIVERSION(int, xent_row,
                 (float *loss, float *d, const float *x, int32_t t, int64_t V, float grad_scale),
                 (loss, d, x, t, V, grad_scale))

void cpu_xent(kf_backend *b, float *losses, float *dlogits, const float *logits,
              const int32_t *targets, int64_t rows, int64_t V, const float *grad_scale) {
    float gs = grad_scale ? *grad_scale : 1.0f;
    for (int64_t r = 0; r < rows; r++)
        KF_CHECK(targets[r] < V, "xent: target %d outside the vocabulary of %lld", targets[r],
                 (long long)V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *d = dlogits ? dlogits + r * V : NULL;
        if (targets[r] < 0) {
            if (losses) losses[r] = 0.0f;
            if (d) memset(d, 0, (size_t)V * sizeof(float));
            continue;
        }
        xent_row(losses ? losses + r : NULL, d, logits + r * V, targets[r], V, gs);
    }
}

/* The composition kernels.h states, through scratch fp32 dlogits. */
void cpu_xent16(kf_backend *b, float *losses, void *dlogits16, float *dbias, const float *logits,
                const int32_t *targets, const float *row_w, int64_t rows, int64_t V,
                const float *grad_scale, int64_t mask_col) {
    KF_CHECK(b->precision != KF_PREC_FP32, "xent16: a 16-bit copy in fp32 mode");
    float *d = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(rows * V));
    cpu_xent(b, losses, d, logits, targets, rows, V, grad_scale);
    if (row_w)
        for (int64_t r = 0; r < rows; r++) cpu_scale(b, d + r * V, row_w[r], V);
    if (mask_col >= 0) cpu_fill_column(b, d, rows, V, mask_col, 0.0f);
    if (dbias) cpu_bias_grad(b, dbias, d, rows, V);
    cpu_to16(dlogits16, d, rows * V, b->precision);
}

/* First index of the row maximum, as the scan "v replaces best when x[v] >
 * x[best]" gives it (NaNs never win; a NaN at 0 is never replaced), in two
 * vector passes: the maximum (exact whatever the lane order), then the first
 * block of ARGMAX_BLOCK values holding it, scanned in order. */
#define ARGMAX_BLOCK 256
CPU_INLINE int64_t argmax_row_body(const float *x, int64_t V) {
    if (x[0] != x[0]) return 0;
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int64_t v0 = 0; v0 < V; v0 += ARGMAX_BLOCK) {
        int64_t v1 = v0 + ARGMAX_BLOCK < V ? v0 + ARGMAX_BLOCK : V;
        int hit = 0;
#pragma omp simd reduction(| : hit)
        for (int64_t v = v0; v < v1; v++) hit |= x[v] == mx;
        if (hit)
            for (int64_t v = v0; v < v1; v++)
                if (x[v] == mx) return v;
    }
    return 0;
}
CPU_MULTIVERSION(int64_t, argmax_row, (const float *x, int64_t V), (x, V))

void cpu_argmax(kf_backend *b, int32_t *ids, const float *logits, int64_t rows, int64_t V) {
#pragma omp parallel for schedule(static) if (rows * V >= KF_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) ids[r] = (int32_t)argmax_row(logits + r * V, V);
}

/* e[v] = exp(l_v/tau - max) in float64; returns their sum, so that p_v =
 * e[v] / sum is softmax(logits/tau). The normaliser is summed in CPU_LANES
 * fixed lanes (the same bits at every SIMD level); the CDF itself is then
 * accumulated strictly in id order. l_v/tau is divided once and kept in e:
 * the division, not the exp, bounds these loops, and at tau = 1 (the default
 * temperature) it is skipped, since l/1 == l exactly (same bits). */
CPU_INLINE double icdf_weights_body(double *e, const float *x, double tau, int64_t V) {
    double mx = -INFINITY, acc[CPU_LANES] = {0};
    if (tau == 1.0) {
#pragma omp simd reduction(max : mx)
        for (int64_t v = 0; v < V; v++) {
            e[v] = (double)x[v];
            mx = e[v] > mx ? e[v] : mx;
        }
    } else {
#pragma omp simd reduction(max : mx)
        for (int64_t v = 0; v < V; v++) {
            e[v] = (double)x[v] / tau;
            mx = e[v] > mx ? e[v] : mx;
        }
    }
    int64_t v0 = 0;
    for (; v0 + CPU_LANES <= V; v0 += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) {
            e[v0 + l] = cpu_exp(e[v0 + l] - mx);
            acc[l] += e[v0 + l];
        }
    for (int l = 0; v0 + l < V; l++) {
        e[v0 + l] = cpu_exp(e[v0 + l] - mx);
        acc[l] += e[v0 + l];
    }
    return cpu_lanes_sum(acc);
}
CPU_MULTIVERSION(double, icdf_weights, (double *e, const float *x, double tau, int64_t V),
                 (e, x, tau, V))

/* A zero-probability token is never returned: for z <= 0 the lower bound
 * would otherwise be id 0 even when p_0 == 0. */
void cpu_sample_icdf(kf_backend *b, int32_t *ids, const float *logits, const double *tau,
                     const double *z, int64_t rows, int64_t V) {
#pragma omp parallel
    {
        double *e = kf_malloc((size_t)V * sizeof(double));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            double sum = icdf_weights(e, logits + r * V, tau[r], V);
            double c = 0.0;
            int64_t pick = -1, last = 0;
            for (int64_t v = 0; v < V; v++) {
                double p = e[v] / sum;
                if (p <= 0.0) continue;
                c += p;
                last = v;
                if (c >= z[r]) {
                    pick = v;
                    break;
                }
            }
            ids[r] = (int32_t)(pick >= 0 ? pick : last);
        }
        free(e);
    }
}

void cpu_icdf_bin(kf_backend *b, double *lo, double *hi, const float *logits, const double *tau,
                  const int32_t *targets, int64_t rows, int64_t V) {
    for (int64_t r = 0; r < rows; r++)
        KF_CHECK(targets[r] >= 0 && targets[r] < V, "icdf_bin: target %d outside [0, %lld)",
                 targets[r], (long long)V);
#pragma omp parallel
    {
        double *e = kf_malloc((size_t)V * sizeof(double));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            double sum = icdf_weights(e, logits + r * V, tau[r], V);
            double c = 0.0; /* same sequence of additions as cpu_sample_icdf */
            for (int64_t v = 0; v < targets[r]; v++) {
                double p = e[v] / sum;
                if (p > 0.0) c += p;
            }
            lo[r] = c;
            hi[r] = c + e[targets[r]] / sum;
        }
        free(e);
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Each distinct id is penalised once by penalty*count (not count separate
 * subtractions), so the result does not depend on the history's order. Ids
 * outside [0, V) (padding) are ignored. */
void cpu_freq_penalty(kf_backend *b, float *logits, const int32_t *hist, int64_t n_hist,
                      int64_t rows, int64_t V, float penalty) {
    if (n_hist <= 0) return;
#pragma omp parallel
    {
        int32_t *h = kf_malloc((size_t)n_hist * sizeof(int32_t));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < n_hist; j++) h[j] = hist[j * rows + r];
            qsort(h, (size_t)n_hist, sizeof(int32_t), cmp_i32);
            for (int64_t j = 0; j < n_hist;) {
                int64_t k = j;
                while (k < n_hist && h[k] == h[j]) k++;
                if (h[j] >= 0 && h[j] < V) logits[r * V + h[j]] -= penalty * (float)(k - j);
                j = k;
            }
        }
        free(h);
    }
}

/* Serial on purpose: the order is the one model_loss's host sum had. */
void cpu_loss_sum(kf_backend *b, double *acc, const float *losses, const int32_t *targets,
                  int64_t rows) {
    double s = 0;
    for (int64_t r = 0; r < rows; r++)
        if (targets[r] >= 0) s += losses[r];
    acc[0] += s;
}
