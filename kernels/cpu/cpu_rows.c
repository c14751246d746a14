/* kernels/cpu/cpu_rows.c — row movement, token embedding and the PFLM noise features. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/noise_freq.h"

void cpu_gather_rows(kf_backend *b, float *dst, const float *src, const int32_t *idx, int64_t n,
                     int64_t dim) {
#pragma omp parallel for schedule(static) if (n * dim >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * dim, src + (int64_t)idx[i] * dim, (size_t)dim * sizeof(float));
}

void cpu_scatter_rows(kf_backend *b, float *dst, const float *src, const int32_t *idx, int64_t n,
                      int64_t dim) {
#pragma omp parallel for schedule(static) if (n * dim >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (int64_t)idx[i] * dim, src + i * dim, (size_t)dim * sizeof(float));
}

void cpu_scatter_ids(kf_backend *b, int32_t *dst, const int32_t *src, const int32_t *idx,
                     int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[idx[i]] = src[i];
}

void cpu_gather_ids(kf_backend *b, int32_t *dst, const int32_t *src, const int32_t *idx,
                    int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = idx[i] >= 0 ? src[idx[i]] : -1;
}

void cpu_embed_fwd(kf_backend *b, float *out, const int32_t *ids, const int32_t *row_idx,
                   const float *table, int64_t n, int64_t dim) {
#pragma omp parallel for schedule(static) if (n * dim >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        int64_t r = row_idx ? row_idx[i] : i;
        memcpy(out + r * dim, table + (int64_t)ids[i] * dim, (size_t)dim * sizeof(float));
    }
}

/* Columns are split over threads in fixed 16-float blocks and each thread adds
 * the rows in order i = 0..n-1, so every table element is summed in the same
 * order whatever the thread count. */
#define EMBED_COL_BLOCK 16

void cpu_embed_bwd(kf_backend *b, float *dtable, const float *dout, const int32_t *ids,
                   const int32_t *row_idx, int64_t n, int64_t dim, int64_t vocab) {
    for (int64_t i = 0; i < n; i++)
        KF_CHECK(ids[i] >= 0 && ids[i] < vocab, "embed_bwd: token id %d outside [0, %lld)", ids[i],
                 (long long)vocab);
    int64_t nblk = (dim + EMBED_COL_BLOCK - 1) / EMBED_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * EMBED_COL_BLOCK;
        int64_t c1 = c0 + EMBED_COL_BLOCK < dim ? c0 + EMBED_COL_BLOCK : dim;
        for (int64_t i = 0; i < n; i++) {
            const float *src = dout + (row_idx ? row_idx[i] : i) * dim;
            float *dst = dtable + (int64_t)ids[i] * dim;
            for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}

/* out[r] = [cos(z g), sin(z g), cos(tau f), sin(tau f)] (kernels.h), all in
 * float64 and rounded to float at the end. */
void cpu_noise_features(kf_backend *b, float *out, const double *z, const double *tau, int64_t n,
                        int64_t H, int64_t cycles) {
    KF_CHECK(H % 2 == 0, "noise_features needs an even hidden size, got %lld", (long long)H);
    KF_CHECK(cycles >= 0, "noise_features: cycles %lld < 0", (long long)cycles);
    int64_t half = H / 2;
#pragma omp parallel for schedule(static) if (n * H >= KF_CPU_PAR_MIN / 16) /* trig: costly */
    for (int64_t r = 0; r < n; r++) {
        float *o = out + r * 2 * H;
        for (int64_t i = 0; i < half; i++) {
            double az = z[r] * kf_noise_freq(i, half, cycles),
                   at = tau[r] * kf_noise_freq(i, half, 0);
            o[i] = (float)cos(az);
            o[half + i] = (float)sin(az);
            o[H + i] = (float)cos(at);
            o[H + half + i] = (float)sin(at);
        }
    }
}
