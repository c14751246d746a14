/* kernels/cpu/cpu_pointwise.c — elementwise ops: GELU (tanh / erf), add, scale,
 * column fill, 16-bit rounding and 16-bit copies. Every element is independent. */
#include <math.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

/* tanh(u) = 1 - 2/(exp(2u) + 1) through the vectorisable cpu_expf: absolute
 * error ~1e-7 (GELU only needs 1 + tanh to that precision), exact limits ±1. */
CPU_INLINE float tanh_fast(float u) { return 1.0f - 2.0f / (cpu_expf(2.0f * u) + 1.0f); }

/* The tanh GELU and its derivative over one block, compiled per SIMD level
 * (the baseline build is SSE: a quarter of AVX-512's width). AVX2 and
 * AVX-512 contract the same products into FMAs, so their results are bitwise
 * the same; the SSE baseline differs in the last bits, as every
 * multiversioned kernel's does. */
CPU_INLINE int gelu_tanh_fwd_body(float *y, const float *x, int64_t rows, int64_t n, int64_t ld) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            float v = x[r * ld + i];
            y[r * ld + i] = 0.5f * v * (1.0f + tanh_fast(GELU_C * (v + GELU_A * v * v * v)));
        }
    return 0;
}
CPU_MULTIVERSION(int, gelu_tanh_fwd,
                 (float *y, const float *x, int64_t rows, int64_t n, int64_t ld),
                 (y, x, rows, n, ld))

CPU_INLINE int gelu_tanh_bwd_body(float *dx, const float *dy, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tanh_fast(GELU_C * (v + GELU_A * v * v * v));
        float d =
            0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * d;
    }
    return 0;
}
CPU_MULTIVERSION(int, gelu_tanh_bwd, (float *dx, const float *dy, const float *x, int64_t n),
                 (dx, dy, x, n))

/* blocks of elements the threads share out */
#define GELU_BLOCK 4096

/* One call for the rows of a decoding product's panel: per-row calls of a
 * 32-element loop cost twice the GELU itself (a 124M K-Forcing step at AVX2
 * spent 1.9% of its time there). */
void cpu_gelu_serial(float *y, const float *x, int64_t rows, int64_t n, int64_t ld,
                     kf_gelu_kind kind) {
    if (kind == KF_GELU_TANH) gelu_tanh_fwd(y, x, rows, n, ld);
    else
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++)
                y[r * ld + i] = 0.5f * x[r * ld + i] * (1.0f + erff(x[r * ld + i] * INV_SQRT2));
}

void cpu_gelu_fwd(kf_backend *b, float *y, const float *x, int64_t n, kf_gelu_kind kind) {
    /* erf's libm call costs more than tanh's polynomial: threads pay sooner */
    int64_t par = kind == KF_GELU_TANH ? KF_CPU_PAR_MIN : KF_CPU_PAR_MIN / 8;
#pragma omp parallel for schedule(static) if (n >= par)
    for (int64_t i = 0; i < n; i += GELU_BLOCK)
        cpu_gelu_serial(y + i, x + i, 1, n - i < GELU_BLOCK ? n - i : GELU_BLOCK, 0, kind);
}

void cpu_gelu_bwd(kf_backend *b, float *dx, const float *dy, const float *x, int64_t n,
                  kf_gelu_kind kind) {
    if (kind == KF_GELU_TANH) {
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i += GELU_BLOCK)
            gelu_tanh_bwd(dx + i, dy + i, x + i, n - i < GELU_BLOCK ? n - i : GELU_BLOCK);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            float d = 0.5f * (1.0f + erff(v * INV_SQRT2)) + v * expf(-0.5f * v * v) * INV_SQRT_2PI;
            dx[i] = dy[i] * d;
        }
    }
}

void cpu_add_inplace(kf_backend *b, float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_scale(kf_backend *b, float *x, float alpha, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= alpha;
}

void cpu_fill_column(kf_backend *b, float *x, int64_t rows, int64_t cols, int64_t col,
                     float value) {
    for (int64_t r = 0; r < rows; r++) x[r * cols + col] = value;
}

void cpu_round_lowp(kf_backend *b, float *x, int64_t n) {
    if (b->precision != KF_PREC_FP32) cpu_round_lowp_copy(x, x, n, b->precision);
}

void cpu_copy_to16(kf_backend *b, void *dst16, const float *src, int64_t n) {
    KF_CHECK(b->precision != KF_PREC_FP32, "copy_to16: a 16-bit copy in fp32 mode");
    cpu_to16(dst16, src, n, b->precision);
}
