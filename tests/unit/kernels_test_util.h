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
