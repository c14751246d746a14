/* tests/unit/kernels_test_util.h — helpers shared by the test_kernels_*.c programs:
 * deterministic test data, double-precision comparisons and a gradient error measure. */
#ifndef KF_TESTS_KERNELS_TEST_UTIL_H
#define KF_TESTS_KERNELS_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "tests/test.h"

static uint64_t tu_state = 0x9E3779B97F4A7C15ull;

/* Uniform in [-1, 1) from a fixed xorshift stream (test data only). */
static inline double tu_rand(void) {
    tu_state ^= tu_state << 13;
    tu_state ^= tu_state >> 7;
    tu_state ^= tu_state << 17;
    return (double)(tu_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static inline float *tu_randf(int64_t n, double scale) {
    float *x = kf_malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(tu_rand() * scale);
    return x;
}

static inline double *tu_tod(const float *x, int64_t n) {
    double *d = kf_malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* The test's own roundings, written apart from the backend's: fp16 through
 * the compiler's _Float16; bf16 by picking the nearer of the two bf16
 * neighbours in double (ties to the even one), with 2^128 standing for the
 * pattern past the largest finite value, so overflow follows IEEE rounding. */
static inline float tu_fp16(float x) { return (float)(_Float16)x; }

static inline float tu_bf16(float x) {
    if (!isfinite(x)) return x;
    uint32_t u, lo, hi;
    memcpy(&u, &x, 4);
    lo = u & 0xffff0000u;
    hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    double dhi = (hi & 0x7fffffffu) == 0x7f800000u ? copysign(ldexp(1, 128), x) : fhi;
    double dl = fabs((double)x - flo), dh = fabs(dhi - x);
    return dl < dh || (dl == dh && !(lo >> 16 & 1u)) ? flo : fhi;
}

/* n floats as a 16-bit copy (kernels.h) in the format of prec (fp16 or
 * bf16), rounded by the test's own roundings; malloc'd. */
static inline uint16_t *tu_to16(const float *x, int64_t n, kf_precision prec) {
    uint16_t *d = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        float r = prec == KF_PREC_FP16 ? tu_fp16(x[i]) : tu_bf16(x[i]);
        if (prec == KF_PREC_FP16) {
            _Float16 h = (_Float16)r;
            memcpy(&d[i], &h, 2);
        } else {
            uint32_t u;
            memcpy(&u, &r, 4);
            d[i] = (uint16_t)(u >> 16);
        }
    }
    return d;
}

/* GELU in double (tanh form, or erf): the reference the GELU ops and the
 * fused linear epilogue are checked against. */
static inline double tu_gelu(double x, kf_gelu_kind kind) {
    if (kind == KF_GELU_TANH)
        return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}

/* max |a-b| / max(max|b|, floor): error relative to the tensor's scale. */
static inline double tu_relerr(const float *a, const double *b, int64_t n, double floor) {
    double num = 0, den = floor;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= num)) num = e; /* NaN propagates as a failure */
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

/* Checks and prints an error measure against its bound. */
#define TU_ERR(what, err, bound)                                                                   \
    do {                                                                                           \
        double e_ = (err);                                                                         \
        printf("  %-44s max rel err %.3g (bound %.0e)\n", (what), e_, (double)(bound));            \
        T_CHECK(e_ <= (bound), "%s: relative error %.3g above %g", (what), e_, (double)(bound));   \
    } while (0)

#endif
