/* ZeRO-1's pieces of trainer/train/dist.h on the CPU backend.
 *
 * Alone: the shard layout (contiguous, in rank order, covering the buffer, on
 * KF_SUM_PART boundaries) for several world sizes, and sumsq_parts against
 * sumsq (their sum in order is sumsq bitwise; a buffer cut on part
 * boundaries gives the whole buffer's parts piece by piece).
 *
 * Under mpirun -np N (tests/scripts/test_trainer_zero1.sh runs it with 2):
 * each rank's random gradients, summed by the all-reduce and by the
 * reduce-scatter in other buckets; this rank's shard of the second is
 * bitwise the first's, dist_sumsq from the shards is bitwise sumsq of the
 * all-reduced buffer, dist_allgather hands every rank every shard, and
 * dist_gather_root hands rank 0 every shard (the others keep their buffers). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/train/dist.h"

/* A fixed pseudo-random float in about [-1, 1], different per (seed, i). */
static float noise(uint64_t seed, int64_t i) {
    uint64_t x = (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xBF58476D1CE4E5B9ull);
    x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
    return (float)((double)(x >> 11) / (double)(1ull << 52) - 1.0);
}

static int64_t differing(const float *a, const float *b, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += memcmp(&a[i], &b[i], sizeof *a) != 0;
    return c;
}

static void shard_layout(void) {
    const int64_t ns[] = {0, 1, 4095, 4096, 4097, 27000, 100003, 1 << 20};
    const int worlds[] = {1, 2, 3, 8};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        for (size_t j = 0; j < sizeof worlds / sizeof *worlds; j++) {
            dist d = {.world = worlds[j]};
            int64_t n = ns[i], next = 0, bad_align = 0, shorter = 0;
            for (int r = 0; r < d.world; r++) {
                dist_range s = dist_shard(&d, n, r);
                T_EQ_INT(s.off, next, "n %lld world %d: rank %d starts where rank %d ends",
                         (long long)n, d.world, r, r - 1);
                bad_align += s.count && s.off % KF_SUM_PART != 0;
                /* only the last non-empty shard may be shorter than a whole number of parts */
                if (s.count % KF_SUM_PART) shorter++;
                next = s.off + s.count;
            }
            T_EQ_INT(next, n, "n %lld world %d: the shards cover the buffer", (long long)n,
                     d.world);
            T_EQ_INT(bad_align, 0, "n %lld world %d: non-empty shards starting off a part boundary",
                     (long long)n, d.world);
            T_CHECK(shorter <= 1, "n %lld world %d: %lld shards are not whole parts, want <= 1",
                    (long long)n, d.world, (long long)shorter);
        }
}

static void parts(kf_backend *b) {
    enum { N = 3 * KF_SUM_PART + 1000 };
    float *x = malloc(N * sizeof *x);
    for (int64_t i = 0; i < N; i++) x[i] = noise(7, i);
    double whole[4], cut[4], s = 0;
    b->sumsq_parts(b, whole, x, N);
    for (int i = 0; i < 4; i++) s += whole[i];
    double want = b->sumsq(b, x, N);
    T_CHECK(s == want, "sumsq = its parts added in order: got %.17g want %.17g", s, want);
    b->sumsq_parts(b, cut, x, 2 * KF_SUM_PART);
    b->sumsq_parts(b, cut + 2, x + 2 * KF_SUM_PART, N - 2 * KF_SUM_PART);
    for (int i = 0; i < 4; i++)
        T_CHECK(cut[i] == whole[i], "part %d of a buffer cut at 2 parts: got %.17g want %.17g", i,
                cut[i], whole[i]);
    free(x);
}

/* The collectives across the ranks of this mpirun. */
static void collectives(dist *d, kf_backend *b) {
    const int64_t n = 1000003;
    size_t bytes = (size_t)n * sizeof(float);
    float *g = malloc(bytes), *all = malloc(bytes), *sc = malloc(bytes);
    for (int64_t i = 0; i < n; i++) g[i] = noise(100 + (uint64_t)d->rank, i);
    /* all-reduce in buckets of 50000, reported from the end (as a backward does) */
    memcpy(all, g, bytes);
    dist_grads_begin(d, b, all, n, 50000, 0);
    for (int64_t hi = n; hi > 0; hi -= 7919)
        dist_grads_ready(d, hi > 7919 ? hi - 7919 : 0, hi > 7919 ? 7919 : hi);
    dist_grads_wait(d);
    /* reduce-scatter in other buckets: 30011-float ranges, one not adjacent */
    memcpy(sc, g, bytes);
    dist_grads_begin(d, b, sc, n, 100000, 1);
    for (int64_t hi = n; hi > 0; hi -= 30011)
        dist_grads_ready(d, hi > 30011 ? hi - 30011 : 0, hi > 30011 ? 30011 : hi);
    dist_grads_wait(d);
    dist_range me = dist_shard(d, n, d->rank);
    T_CHECK(me.count > 0, "rank %d's shard of %lld is empty", d->rank, (long long)n);
    T_EQ_INT(differing(sc + me.off, all + me.off, me.count), 0,
             "rank %d: shard elements of the reduce-scatter unlike the all-reduce's", d->rank);
    double got = dist_sumsq(d, b, sc, n), want = b->sumsq(b, all, n);
    T_CHECK(got == want, "dist_sumsq from the shards: got %.17g want %.17g (sumsq)", got, want);
    /* all-gather: each rank's shard holds the all-reduced values, the rest junk */
    for (int64_t i = 0; i < n; i++) sc[i] = -1.0f - (float)d->rank;
    memcpy(sc + me.off, all + me.off, (size_t)me.count * sizeof(float));
    dist_allgather(d, b, sc, n);
    T_EQ_INT(differing(sc, all, n), 0, "rank %d: elements after the all-gather unlike the sum",
             d->rank);
    /* gather to rank 0: from each rank's own shard buffer into rank 0's full
     * one (junk before); the shard buffers are left as they were */
    float *own = malloc((size_t)(me.count ? me.count : 1) * sizeof *own);
    memcpy(own, all + me.off, (size_t)me.count * sizeof(float));
    for (int64_t i = 0; i < n; i++) sc[i] = -1.0f - (float)d->rank;
    dist_gather_root(d, b, d->rank == 0 ? sc : NULL, own, n);
    if (d->rank == 0)
        T_EQ_INT(differing(sc, all, n), 0, "rank 0: elements after the gather unlike the sum");
    T_EQ_INT(differing(own, all + me.off, me.count), 0, "rank %d: its shard changed by the gather",
             d->rank);
    free(g), free(all), free(sc), free(own);
}

int main(int argc, char **argv) {
    kf_backend *b = kernels_cpu_create();
    dist d;
    kf_err err = {{0}};
    T_EQ_INT(dist_init(&d, &argc, &argv, 60, &err), 0, "dist_init: %s", err.msg);
    if (d.rank == 0) {
        shard_layout();
        parts(b);
    }
    if (d.world > 1) collectives(&d, b);
    else printf("one rank: the collectives run under mpirun (test_trainer_zero1.sh)\n");
    dist_finalize(&d);
    b->destroy(b);
    return T_DONE();
}
