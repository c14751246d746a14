/* clock_median against a count-based definition on seeded random arrays of
 * every length 1..64 (with repeated values and negative ones), and both
 * clocks never going back over many readings. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "tests/test.h"

/* elements of v[0..n) below and above m */
static void count(const double *v, int n, double m, int *lt, int *gt) {
    *lt = *gt = 0;
    for (int i = 0; i < n; i++) {
        *lt += v[i] < m;
        *gt += v[i] > m;
    }
}

/* whether some element of v equals x */
static int has(const double *v, int n, double x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

int main(void) {
    uint32_t s = 20261201;
    double v[64], t[64];
    int bad_odd = 0, bad_even = 0, bad_perm = 0;
    for (int round = 0; round < 50; round++)
        for (int n = 1; n <= 64; n++) {
            for (int i = 0; i < n; i++) {
                s = s * 1664525u + 1013904223u;
                /* few distinct values in half the rounds: ties */
                v[i] = round % 2 ? (double)(s >> 29) - 3 : (double)(s >> 8) / 1e3 - 8e3;
            }
            memcpy(t, v, sizeof(double) * (size_t)n);
            double m = clock_median(t, n);
            int lt, gt;
            if (n % 2) {
                /* an element with at most n/2 below it and at most n/2 above */
                count(v, n, m, &lt, &gt);
                bad_odd += !has(v, n, m) || lt > n / 2 || gt > n / 2;
            } else {
                /* the mean of a and b, the (n/2)th and (n/2+1)th smallest */
                double a = 0, b = 0;
                for (int i = 0; i < n; i++) {
                    count(v, n, v[i], &lt, &gt);
                    if (lt <= n / 2 - 1 && gt <= n / 2) a = v[i];
                    if (lt <= n / 2 && gt <= n / 2 - 1) b = v[i];
                }
                bad_even += m != (a + b) / 2;
            }
            /* t holds v's values, sorted */
            for (int i = 0; i < n; i++) {
                count(v, n, t[i], &lt, &gt);
                bad_perm += lt > i || gt > n - 1 - i;
            }
        }
    T_EQ_INT(bad_odd, 0, "odd lengths: %d medians not the middle element", bad_odd);
    T_EQ_INT(bad_even, 0, "even lengths: %d medians not the mean of the middle two", bad_even);
    T_EQ_INT(bad_perm, 0, "%d elements out of sorted order after clock_median", bad_perm);
    double one = 4.5;
    T_CHECK(clock_median(&one, 1) == 4.5, "median of {4.5}: got %g", clock_median(&one, 1));

    int back_now = 0, back_cpu = 0;
    double n0 = clock_now_s(), c0 = clock_cpu_s();
    for (int i = 0; i < 100000; i++) {
        double n1 = clock_now_s(), c1 = clock_cpu_s();
        back_now += n1 < n0;
        back_cpu += c1 < c0;
        n0 = n1, c0 = c1;
    }
    T_EQ_INT(back_now, 0, "clock_now_s went back %d times", back_now);
    T_EQ_INT(back_cpu, 0, "clock_cpu_s went back %d times", back_cpu);
    return T_DONE();
}
