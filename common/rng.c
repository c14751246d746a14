/* common/rng.c — Philox4x32-10 and the draws built on it. */
#include "common/rng.h"

#include <math.h>

void rng_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        } /* key schedule: golden ratio, sqrt(3)-1 */
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Centring every cell ((k + 0.5) / 2^53) would need a 54th mantissa bit and
 * rounds the top cell to 1.0, hence the special case for k = 0 only. */
double rng_open01(uint64_t u) {
    uint64_t k = u >> 11;
    return (k ? (double)k : 0.5) * 0x1p-53;
}

uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t o[4];
    rng_philox(seed, stream, index, o);
    return (uint64_t)o[1] << 32 | o[0];
}

double rng_uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
    return rng_open01(rng_u64(seed, stream, index));
}

uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_u64(seed, stream, index) * n) >> 64);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t o[4];
    rng_philox(seed, stream, index, o);
    double u1 = rng_open01((uint64_t)o[1] << 32 | o[0]),
           u2 = rng_open01((uint64_t)o[3] << 32 | o[2]);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

rng_state rng_state_make(uint64_t seed, uint64_t stream) {
    return (rng_state){.seed = seed, .stream = stream, .counter = 0};
}

uint64_t rng_next_u64(rng_state *s) { return rng_u64(s->seed, s->stream, s->counter++); }
double rng_next_uniform01(rng_state *s) { return rng_uniform01(s->seed, s->stream, s->counter++); }
uint64_t rng_next_below(rng_state *s, uint64_t n) {
    return rng_below(s->seed, s->stream, s->counter++, n);
}
double rng_next_normal(rng_state *s) { return rng_normal(s->seed, s->stream, s->counter++); }
