/* trainer/train/loader.c — global-order data stream with a prefetch thread (see loader.h).
 *
 * The ring holds nslots = depth + 1 micro-batches: the one handed out by the
 * last loader_next stays untouched until the next call, the producer fills
 * the others ahead. Micro-batches are numbered q = 0, 1, ... from the step
 * the stream was (re)started at; q maps to (step, micro) and so to stream
 * positions, which makes the producer stateless apart from q. */
#include "trainer/train/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

struct loader {
    loader_opts o;
    int64_t accum, n_samples, seq_len;
    shard_set *ss;

    pthread_mutex_t perm_mu; /* the permutation cache is shared with loader_sample_at */
    int64_t perm_epoch;      /* epoch held in perm, -1 none */
    uint32_t *perm;

    pthread_t th;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nslots;
    loader_batch *slots;
    int64_t start_step; /* step of q = 0 */
    int64_t head, tail; /* next q to hand out / to produce */
    int outstanding;    /* slot head-1 is held by the caller */
    int stop;
};

static void perm_fill(loader *l, int64_t epoch) {
    int64_t n = l->n_samples;
    for (int64_t i = 0; i < n; i++) l->perm[i] = (uint32_t)i;
    if (l->o.shuffle)
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j =
                (int64_t)rng_below(l->o.seed, LOADER_STREAM(epoch), (uint64_t)i, (uint64_t)i + 1);
            uint32_t t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    l->perm_epoch = epoch;
}

int64_t loader_sample_at(loader *l, int64_t p) {
    int64_t e = p / l->n_samples;
    pthread_mutex_lock(&l->perm_mu);
    if (e != l->perm_epoch) perm_fill(l, e);
    int64_t s = l->perm[p % l->n_samples];
    pthread_mutex_unlock(&l->perm_mu);
    return s;
}

static void produce(loader *l, int64_t q, loader_batch *b) {
    int64_t G = l->o.global_batch, mb = l->o.micro_batch;
    b->step = l->start_step + q / l->accum;
    b->micro = q % l->accum;
    int64_t base = b->step * G + ((int64_t)l->o.rank * l->accum + b->micro) * mb;
    for (int64_t i = 0; i < mb; i++) {
        kf_err err = {{0}};
        b->pos[i] = base + i;
        b->sample[i] = loader_sample_at(l, base + i);
        if (shard_set_get(l->ss, b->sample[i], b->ids + i * l->seq_len, &b->len[i], &err))
            KF_FATAL("data loader (%s, %s split): %s", l->o.data_dir, l->o.split, err.msg);
    }
}

static void *prefetch_main(void *arg) {
    loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->tail - l->head + l->outstanding >= l->nslots)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        int64_t q = l->tail;
        loader_batch *b = &l->slots[q % l->nslots];
        pthread_mutex_unlock(&l->mu);
        produce(l, q, b);
        pthread_mutex_lock(&l->mu);
        l->tail = q + 1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void start(loader *l, int64_t step) {
    l->start_step = step;
    l->head = l->tail = 0;
    l->outstanding = 0;
    l->stop = 0;
    KF_CHECK(pthread_create(&l->th, NULL, prefetch_main, l) == 0, "loader: cannot start thread");
    l->running = 1;
}

static void halt(loader *l) {
    if (!l->running) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->th, NULL);
    l->running = 0;
}

int loader_open(const loader_opts *o, loader **out, kf_err *err) {
    KF_CHECK(o->world >= 1 && o->rank >= 0 && o->rank < o->world && o->depth >= 1 &&
                 o->micro_batch >= 1,
             "loader_open: bad rank/world/depth/micro_batch");
    if (o->global_batch % ((int64_t)o->world * o->micro_batch))
        return kf_err_set(err,
                          "global batch %lld is not a multiple of ranks (%d) x micro_batch (%lld)",
                          (long long)o->global_batch, o->world, (long long)o->micro_batch);
    shard_set *ss;
    if (shard_set_open(o->data_dir, o->split, &ss, err)) return -1;
    int64_t n = shard_set_count(ss);
    if (n < 1 || n > (int64_t)UINT32_MAX) {
        shard_set_close(ss);
        return kf_err_set(err, "%s: %s split has %lld samples (need 1..2^32-1)", o->data_dir,
                          o->split, (long long)n);
    }
    loader *l = kf_calloc(1, sizeof *l);
    l->o = *o;
    l->ss = ss;
    l->n_samples = n;
    l->seq_len = shard_set_seq_len(ss);
    l->accum = o->global_batch / ((int64_t)o->world * o->micro_batch);
    l->perm = kf_malloc((size_t)n * sizeof *l->perm);
    l->perm_epoch = -1;
    pthread_mutex_init(&l->perm_mu, NULL);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->nslots = o->depth + 1;
    l->slots = kf_calloc((size_t)l->nslots, sizeof *l->slots);
    for (int i = 0; i < l->nslots; i++) {
        loader_batch *b = &l->slots[i];
        b->n = o->micro_batch;
        b->seq_len = l->seq_len;
        b->ids = kf_malloc((size_t)(b->n * b->seq_len) * sizeof *b->ids);
        b->len = kf_malloc((size_t)b->n * sizeof *b->len);
        b->sample = kf_malloc((size_t)b->n * sizeof *b->sample);
        b->pos = kf_malloc((size_t)b->n * sizeof *b->pos);
    }
    start(l, 0);
    *out = l;
    return 0;
}

int64_t loader_accum(const loader *l) { return l->accum; }

const shard_set *loader_shards(const loader *l) { return l->ss; }

const loader_batch *loader_next(loader *l) {
    pthread_mutex_lock(&l->mu);
    if (l->outstanding) l->outstanding = 0; /* the previous batch is released */
    pthread_cond_broadcast(&l->cv);
    while (l->tail <= l->head) pthread_cond_wait(&l->cv, &l->mu);
    loader_batch *b = &l->slots[l->head % l->nslots];
    l->head++;
    l->outstanding = 1;
    pthread_mutex_unlock(&l->mu);
    return b;
}

int64_t loader_cursor(const loader *l) {
    /* Steps whose first micro-batch was handed out count as started. */
    int64_t started = (l->head + l->accum - 1) / l->accum;
    return (l->start_step + started) * l->o.global_batch;
}

void loader_seek(loader *l, int64_t cursor) {
    KF_CHECK(cursor >= 0 && cursor % l->o.global_batch == 0,
             "loader_seek: cursor %lld is not at a step boundary (global batch %lld)",
             (long long)cursor, (long long)l->o.global_batch);
    halt(l);
    start(l, cursor / l->o.global_batch);
}

void loader_close(loader *l) {
    if (!l) return;
    halt(l);
    for (int i = 0; i < l->nslots; i++) {
        free(l->slots[i].ids), free(l->slots[i].len);
        free(l->slots[i].sample), free(l->slots[i].pos);
    }
    free(l->slots);
    free(l->perm);
    pthread_mutex_destroy(&l->perm_mu);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    shard_set_close(l->ss);
    free(l);
}
