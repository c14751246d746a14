/* kernels/cpu/cpu_layernorm.c — LayerNorm forward/backward (with or without bias), fp32.
 *
 * Rows are independent in the forward and in dx; dw/dbias are reduced over
 * rows in KF_CPU_ROW_CHUNK chunks whose partials are added in chunk order.
 */
#include <math.h>
#include <omp.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

/* Rows a thread normalises together: a row's sums are serial chains (the
 * fixed order), each waiting on its adds, so LN_ROWS rows' chains run
 * interleaved (decoding's 8 rows of 768, one after another, spent about 1%
 * of a 124M K-Forcing step waiting on them). Spare slots repeat a row. */
#define LN_ROWS 8

static void ln_rows(float *y, float *mean, float *rstd, const float *x, const float *w,
                    const float *bias, int64_t n, int64_t cols, float eps) {
    const float *xr[LN_ROWS];
    for (int i = 0; i < LN_ROWS; i++) xr[i] = x + (i < n ? i : n - 1) * cols;
    float s[LN_ROWS] = {0}, mu[LN_ROWS], ss[LN_ROWS] = {0};
    for (int64_t c = 0; c < cols; c++)
        for (int i = 0; i < LN_ROWS; i++) s[i] += xr[i][c];
    for (int i = 0; i < LN_ROWS; i++) mu[i] = s[i] / (float)cols;
    for (int64_t c = 0; c < cols; c++)
        for (int i = 0; i < LN_ROWS; i++) {
            float d = xr[i][c] - mu[i];
            ss[i] += d * d;
        }
    for (int64_t i = 0; i < n; i++) {
        float rs = 1.0f / sqrtf(ss[i] / (float)cols + eps), m = mu[i];
        const float *xi = xr[i];
        float *yr = y + i * cols;
        if (bias)
            for (int64_t c = 0; c < cols; c++) yr[c] = (xi[c] - m) * rs * w[c] + bias[c];
        else
            for (int64_t c = 0; c < cols; c++) yr[c] = (xi[c] - m) * rs * w[c];
        mean[i] = m;
        rstd[i] = rs;
    }
}

/* Rows go to the threads from 2 rows and 4096 values on, in even shares
 * (decoding's 8 rows took 16 us a call on one thread, 2.6% of a two-thread
 * K-Forcing step at batch 1); a row's result does not depend on its share. */
void cpu_layernorm_fwd(kf_backend *b, float *y, void *y16, float *mean, float *rstd, const float *x,
                       const float *w, const float *bias, int64_t rows, int64_t cols, float eps) {
    KF_CHECK(!y16 || b->precision != KF_PREC_FP32, "layernorm_fwd: a 16-bit copy in fp32 mode");
    if (!y) y = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(rows * cols));
#pragma omp parallel if (rows >= 2 && rows * cols >= KF_CPU_PAR_MIN / 8)
    {
        int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t r1 = rows * (t + 1) / nt;
        for (int64_t r = rows * t / nt; r < r1; r += LN_ROWS) {
            int64_t n = r1 - r < LN_ROWS ? r1 - r : LN_ROWS;
            ln_rows(y + r * cols, mean + r, rstd + r, x + r * cols, w, bias, n, cols, eps);
        }
    }
    if (y16) cpu_to16(y16, y, rows * cols, b->precision);
}

void cpu_layernorm_bwd(kf_backend *b, float *dx, float *dw, float *dbias, const float *dy,
                       const float *x, const float *w, const float *mean, const float *rstd,
                       int64_t rows, int64_t cols, void *dx16) {
    KF_CHECK(!dx16 || b->precision != KF_PREC_FP32, "layernorm_bwd: a 16-bit copy in fp32 mode");
    int64_t nchunk = (rows + KF_CPU_ROW_CHUNK - 1) / KF_CPU_ROW_CHUNK;
    if (nchunk == 0) return;
    float *pw = cpu_scratch(b, CPU_SCRATCH_C, (size_t)(nchunk * cols));
    float *pb = dbias ? cpu_scratch(b, CPU_SCRATCH_D, (size_t)(nchunk * cols)) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < nchunk; ch++) {
        float *pwc = pw + ch * cols, *pbc = pb ? pb + ch * cols : NULL;
        for (int64_t c = 0; c < cols; c++) pwc[c] = 0.0f;
        if (pbc)
            for (int64_t c = 0; c < cols; c++) pbc[c] = 0.0f;
        int64_t r1 = (ch + 1) * KF_CPU_ROW_CHUNK < rows ? (ch + 1) * KF_CPU_ROW_CHUNK : rows;
        for (int64_t r = ch * KF_CPU_ROW_CHUNK; r < r1; r++) {
            const float *xr = x + r * cols, *dyr = dy + r * cols;
            float *dxr = dx + r * cols;
            float mu = mean[r], rs = rstd[r];
            float sg = 0.0f, sgx = 0.0f;
            for (int64_t c = 0; c < cols; c++) {
                float xh = (xr[c] - mu) * rs, g = dyr[c] * w[c];
                sg += g;
                sgx += g * xh;
                pwc[c] += dyr[c] * xh;
            }
            if (pbc)
                for (int64_t c = 0; c < cols; c++) pbc[c] += dyr[c];
            float a = sg / (float)cols, bb = sgx / (float)cols;
            for (int64_t c = 0; c < cols; c++) {
                float xh = (xr[c] - mu) * rs;
                dxr[c] += rs * (dyr[c] * w[c] - a - xh * bb);
            }
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < cols; c++) {
        float s = 0.0f, sb = 0.0f;
        for (int64_t ch = 0; ch < nchunk; ch++) {
            s += pw[ch * cols + c];
            if (pb) sb += pb[ch * cols + c];
        }
        dw[c] += s;
        if (dbias) dbias[c] += sb;
    }
    if (dx16) cpu_to16(dx16, dx, rows * cols, b->precision);
}
