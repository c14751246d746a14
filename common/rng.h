/* common/rng.h — deterministic counter-based random numbers (Philox4x32-10).
 *
 * Every random number in kforcing is a pure function of (seed, stream, index):
 * no hidden state, so results do not depend on thread count, batch split or
 * the order in which work is done, and a checkpoint stores integers only.
 * Convention (callers pick streams; document them where they are chosen):
 * the seed comes from the config, the stream names the purpose (e.g. weight
 * init of tensor #i, noise for rank r), the index numbers the draws.
 *
 * The generator is Philox4x32 with 10 rounds (Salmon et al., SC'11, "Parallel
 * random numbers: as easy as 1, 2, 3"), bit-identical to Random123's
 * philox4x32_10: rng_philox(key, hi, lo) equals philox4x32_10 with
 * ctr = {lo & 0xffffffff, lo >> 32, hi & 0xffffffff, hi >> 32} and
 * key = {key & 0xffffffff, key >> 32}, output words in the same order.
 * The same function is easy to write in CUDA, so GPU kernels can draw the
 * same numbers as the CPU reference.
 */
#ifndef KF_COMMON_RNG_H
#define KF_COMMON_RNG_H

#include <stdint.h>

/** One Philox4x32-10 block: 128 random bits for (key, counter_hi:counter_lo). */
void rng_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]);

/** 64 random bits: words 0 and 1 of rng_philox(seed, stream, index), word 1 high. */
uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index);

/** A double uniform in the OPEN interval (0, 1) with 53 random bits:
 * k / 2^53 with k = rng_u64 >> 11, except that k = 0 gives 2^-54. Never 0 or
 * 1 (the largest value is 1 - 2^-53), so log(u) and inverse-CDF searches are
 * safe. */
double rng_uniform01(uint64_t seed, uint64_t stream, uint64_t index);

/** The mapping rng_uniform01 applies to 64 random bits (exposed so other
 * generators, e.g. CUDA kernels, can be checked against it). */
double rng_open01(uint64_t bits);

/** An integer uniform in [0, n) (n >= 1): the high 64 bits of rng_u64 * n.
 * The bias is below n / 2^64, negligible for every n used here. */
uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n);

/** A standard normal N(0, 1) draw (Box-Muller on the two 64-bit halves of
 * one Philox block, each mapped to (0,1) as rng_uniform01 does; the cosine
 * branch). Used for weight initialisation. */
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/** Sequential drawing for code that naturally consumes numbers one after
 * another. The state is three integers: save them to checkpoint, restore
 * them to resume exactly. Draw k of a state is the stateless function at
 * index = the counter before the draw, so mixing both styles is well defined. */
typedef struct rng_state {
    uint64_t seed;
    uint64_t stream;
    uint64_t counter; /* index of the next draw */
} rng_state;

/** A state at the start of (seed, stream). */
rng_state rng_state_make(uint64_t seed, uint64_t stream);

/** Next draws; each advances s->counter by exactly 1. */
uint64_t rng_next_u64(rng_state *s);
double rng_next_uniform01(rng_state *s);
uint64_t rng_next_below(rng_state *s, uint64_t n);
double rng_next_normal(rng_state *s);

#endif
