/* Data loader: the global sample order does not depend on the rank count or
 * the micro-batch split, each epoch is a permutation of the split, epochs
 * differ, and a cursor restored with loader_seek continues the same stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test.h"
#include "tests/unit/trainer_fixture.h"
#include "trainer/train/loader.h"

enum { N = 100, G = 12, STEPS = 20, SEQ = 8, V = 50 };

static loader *open_l(const char *dir, int rank, int world, int64_t micro) {
    loader_opts o = {.data_dir = dir,
                     .split = "train",
                     .seed = 42,
                     .shuffle = 1,
                     .global_batch = G,
                     .micro_batch = micro,
                     .rank = rank,
                     .world = world,
                     .depth = 3};
    loader *l;
    kf_err err = {{0}};
    if (loader_open(&o, &l, &err)) {
        fprintf(stderr, "loader_open: %s\n", err.msg);
        exit(2);
    }
    return l;
}

/* Reads `steps` steps from every rank of a world (rank-major within a step)
 * into out[step*G + j]: the global sequence of sample ids. */
static void read_world(const char *dir, int world, int64_t micro, int64_t from_step, int steps,
                       int64_t *out) {
    loader *l[4];
    for (int r = 0; r < world; r++) {
        l[r] = open_l(dir, r, world, micro);
        if (from_step) loader_seek(l[r], from_step * G);
    }
    int64_t accum = G / (world * micro);
    for (int s = 0; s < steps; s++) {
        int64_t j = 0;
        for (int r = 0; r < world; r++)
            for (int64_t a = 0; a < accum; a++) {
                const loader_batch *b = loader_next(l[r]);
                T_EQ_INT(b->step, from_step + s, "step/micro tags");
                T_EQ_INT(b->micro, a, "step/micro tags");
                for (int64_t i = 0; i < b->n; i++) {
                    /* the sample's data really is sample b->sample[i] (fixture ids) */
                    T_EQ_INT(b->ids[i * SEQ], (int32_t)((b->sample[i] * 7) % V), "sample content");
                    T_EQ_INT(b->len[i], SEQ, "sample content");
                    out[s * G + j++] = b->sample[i];
                }
            }
        T_EQ_INT(j, G, "a step holds G samples");
    }
    for (int r = 0; r < world; r++) {
        T_EQ_INT(loader_cursor(l[r]), (from_step + steps) * G, "cursor after reading");
        loader_close(l[r]);
    }
}

int main(void) {
    char dir[] = "/tmp/kf_loader_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    fixture_shards(dir, N, 10, SEQ, V);

    int64_t *a = malloc(sizeof(int64_t) * G * STEPS), *b = malloc(sizeof(int64_t) * G * STEPS);
    read_world(dir, 1, G, 0, STEPS, a);     /* np=1, one micro-batch */
    read_world(dir, 2, G / 2, 0, STEPS, b); /* np=2 */
    T_CHECK(!memcmp(a, b, sizeof(int64_t) * G * STEPS),
            "np=1 and np=2 consume the same global sample ids");
    read_world(dir, 1, G / 2, 0, STEPS, b); /* np=1, two micro-batches */
    T_CHECK(!memcmp(a, b, sizeof(int64_t) * G * STEPS), "accumulation split gives the same ids");
    read_world(dir, 3, G / 6, 0, STEPS, b); /* np=3 with accumulation 2 */
    T_CHECK(!memcmp(a, b, sizeof(int64_t) * G * STEPS),
            "np=3 x 2 micro-batches gives the same ids");

    /* cursor restore: steps 7.. read after a seek equal the uninterrupted stream */
    read_world(dir, 2, G / 2, 7, STEPS - 7, b);
    T_CHECK(!memcmp(a + 7 * G, b, sizeof(int64_t) * G * (STEPS - 7)),
            "seek(7*G) continues the stream");

    /* epochs: positions [0, N) and [N, 2N) are permutations of 0..N-1, different ones */
    loader *l = open_l(dir, 0, 1, G);
    int seen0[N] = {0}, seen1[N] = {0}, same = 0, identity = 0;
    for (int64_t p = 0; p < N; p++) {
        int64_t s0 = loader_sample_at(l, p), s1 = loader_sample_at(l, N + p);
        if (s0 >= 0 && s0 < N) seen0[s0]++;
        if (s1 >= 0 && s1 < N) seen1[s1]++;
        same += s0 == s1;
        identity += s0 == p;
    }
    int perm0 = 1, perm1 = 1;
    for (int i = 0; i < N; i++) perm0 &= seen0[i] == 1, perm1 &= seen1[i] == 1;
    T_CHECK(perm0, "each epoch visits every sample exactly once");
    T_CHECK(perm1, "each epoch visits every sample exactly once");
    T_CHECK(same < N / 4, "epochs are shuffled differently (%d same, %d fixed)", same, identity);
    T_CHECK(identity < N / 4, "epochs are shuffled differently (%d same, %d fixed)", same,
            identity);
    T_EQ_INT(loader_sample_at(l, 5), a[5], "sample_at agrees with the stream");
    loader_close(l);

    /* a different seed gives a different order */
    loader_opts o = {.data_dir = dir,
                     .split = "train",
                     .seed = 43,
                     .shuffle = 1,
                     .global_batch = G,
                     .micro_batch = G,
                     .rank = 0,
                     .world = 1,
                     .depth = 1};
    kf_err err = {{0}};
    T_EQ_INT(loader_open(&o, &l, &err), 0, "open: %s", err.msg);
    int diff = 0;
    for (int p = 0; p < G; p++) diff += loader_sample_at(l, p) != a[p];
    T_CHECK(diff > G / 2, "seed changes the order");
    loader_close(l);

    /* a split that does not divide is refused */
    o.world = 5, o.micro_batch = 1, o.rank = 0;
    T_EQ_INT(loader_open(&o, &l, &err), -1, "bad split refused: %s", err.msg);
    T_CHECK(strstr(err.msg, "not a multiple"), "bad split refused: %s", err.msg);

    free(a), free(b);
    fs_rm_rf(dir, &err);
    return T_DONE();
}
