/* Philox4x32-10 against Random123's tests/kat_vectors, and the derived draws:
 * range, determinism, moments and independence of streams. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/rng.h"
#include "tests/test.h"

/* Random123 vector: counter words c[0..3], key words k[0..1], expected out. */
static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                uint32_t e0, uint32_t e1, uint32_t e2, uint32_t e3) {
    uint32_t o[4];
    rng_philox((uint64_t)k1 << 32 | k0, (uint64_t)c3 << 32 | c2, (uint64_t)c1 << 32 | c0, o);
    T_EQ_INT(
        o[0], e0,
        "philox(%08x %08x %08x %08x / %08x %08x) = %08x %08x %08x %08x, want %08x %08x %08x %08x",
        c0, c1, c2, c3, k0, k1, o[0], o[1], o[2], o[3], e0, e1, e2, e3);
    T_EQ_INT(
        o[1], e1,
        "philox(%08x %08x %08x %08x / %08x %08x) = %08x %08x %08x %08x, want %08x %08x %08x %08x",
        c0, c1, c2, c3, k0, k1, o[0], o[1], o[2], o[3], e0, e1, e2, e3);
    T_EQ_INT(
        o[2], e2,
        "philox(%08x %08x %08x %08x / %08x %08x) = %08x %08x %08x %08x, want %08x %08x %08x %08x",
        c0, c1, c2, c3, k0, k1, o[0], o[1], o[2], o[3], e0, e1, e2, e3);
    T_EQ_INT(
        o[3], e3,
        "philox(%08x %08x %08x %08x / %08x %08x) = %08x %08x %08x %08x, want %08x %08x %08x %08x",
        c0, c1, c2, c3, k0, k1, o[0], o[1], o[2], o[3], e0, e1, e2, e3);
}

int main(void) {
    kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
    kat(~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
    kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
        0x94fdcceb, 0x5001e420, 0x24126ea1);

    /* Uniforms: open interval, mean 1/2, variance 1/12, 10 equal bins. */
    enum { N = 400000 };
    double sum = 0, sum2 = 0, mn = 1, mx = 0;
    int bins[10] = {0};
    for (int i = 0; i < N; i++) {
        double u = rng_uniform01(42, 7, (uint64_t)i);
        sum += u;
        sum2 += u * u;
        mn = fmin(mn, u);
        mx = fmax(mx, u);
        bins[(int)(u * 10)]++;
    }
    T_CHECK(mn > 0, "uniform out of (0,1): min %g max %g", mn, mx);
    T_CHECK(mx < 1, "uniform out of (0,1): min %g max %g", mn, mx);
    T_CLOSE(sum / N, 0.5, 0.005, "uniform mean");
    T_CLOSE(sum2 / N - (sum / N) * (sum / N), 1.0 / 12, 0.005, "uniform variance");
    double chi2 = 0;
    for (int b = 0; b < 10; b++) chi2 += (bins[b] - N / 10.0) * (bins[b] - N / 10.0) / (N / 10.0);
    T_CHECK(chi2 < 30, "uniform chi2 over 10 bins = %g (9 dof, p<0.001 at 27.9)", chi2);
    T_CHECK(rng_uniform01(0, 0, 0) ==
                (double)(((uint64_t)0xe169c58d << 32 | 0x6627e8d5) >> 11) * 0x1p-53,
            "uniform01 is not built from words 0/1 of the block");
    T_CHECK(rng_open01(0) > 0, "(0,1) mapping end points: %a %a", rng_open01(0),
            rng_open01(UINT64_MAX));
    T_CHECK(rng_open01(UINT64_MAX) < 1, "(0,1) mapping end points: %a %a", rng_open01(0),
            rng_open01(UINT64_MAX));
    T_NEAR(rng_open01(UINT64_MAX), 1 - 0x1p-53, 0, "(0,1) mapping end points: %a %a", rng_open01(0),
           rng_open01(UINT64_MAX));
    T_NEAR(rng_open01(1ull << 11), 0x1p-53, 0, "(0,1) mapping end points: %a %a", rng_open01(0),
           rng_open01(UINT64_MAX));
    T_NEAR(rng_open01(2047), 0x1p-54, 0, "(0,1) mapping end points: %a %a", rng_open01(0),
           rng_open01(UINT64_MAX));

    /* Normals: mean 0, variance 1, kurtosis 3. */
    double m1 = 0, m2 = 0, m4 = 0;
    for (int i = 0; i < N; i++) {
        double z = rng_normal(1, 2, (uint64_t)i);
        m1 += z;
        m2 += z * z;
        m4 += z * z * z * z;
    }
    T_CHECK(fabs(m1 / N) < 0.01, "normal mean %g", m1 / N);
    T_CLOSE(m2 / N, 1.0, 0.01, "normal variance");
    T_CLOSE(m4 / N, 3.0, 0.05, "normal fourth moment");

    /* rng_below: in range and roughly uniform over 7 values. */
    int cnt[7] = {0}, inrange = 1;
    for (int i = 0; i < 70000; i++) {
        uint64_t v = rng_below(9, 9, (uint64_t)i, 7);
        inrange &= v < 7;
        if (v < 7) cnt[v]++;
    }
    T_CHECK(inrange, "rng_below out of range");
    for (int v = 0; v < 7; v++)
        T_CHECK(abs(cnt[v] - 10000) < 500, "rng_below(7) count[%d] = %d", v, cnt[v]);

    /* Different seeds and streams give different sequences; the same arguments the same value. */
    T_CHECK(rng_u64(1, 0, 5) != rng_u64(2, 0, 5), "seed/stream ignored");
    T_CHECK(rng_u64(1, 0, 5) != rng_u64(1, 1, 5), "seed/stream ignored");
    T_EQ_INT(rng_u64(3, 4, 5), rng_u64(3, 4, 5), "not deterministic");
    int corr_ok = 1;
    double c = 0;
    for (int i = 0; i < N; i++)
        c += (rng_uniform01(5, 0, (uint64_t)i) - 0.5) * (rng_uniform01(5, 1, (uint64_t)i) - 0.5);
    corr_ok = fabs(c / N * 12) < 0.01;
    T_CHECK(corr_ok, "streams 0 and 1 correlated: %g", c / N * 12);

    /* The stateful wrapper is the stateless function at consecutive indices,
     * and a copied state (checkpoint) continues identically. */
    rng_state s = rng_state_make(11, 3);
    int same = 1;
    for (uint64_t i = 0; i < 100; i++) same &= rng_next_u64(&s) == rng_u64(11, 3, i);
    T_CHECK(same, "rng_next_u64 != rng_u64 at the counter");
    T_EQ_INT(s.counter, 100, "rng_next_u64 != rng_u64 at the counter");
    rng_state saved = s;
    double a = rng_next_uniform01(&s), b = rng_next_normal(&s);
    uint64_t d = rng_next_below(&s, 1000);
    T_NEAR(a, rng_next_uniform01(&saved), 0, "restored state diverges");
    T_NEAR(b, rng_next_normal(&saved), 0, "restored state diverges");
    T_EQ_INT(d, rng_next_below(&saved, 1000), "restored state diverges");
    T_NEAR(a, rng_uniform01(11, 3, 100), 0, "stateful draws are not the stateless ones");
    T_NEAR(b, rng_normal(11, 3, 101), 0, "stateful draws are not the stateless ones");
    T_EQ_INT(d, rng_below(11, 3, 102, 1000), "stateful draws are not the stateless ones");
    return T_DONE();
}
