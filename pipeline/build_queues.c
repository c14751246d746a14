/* pipeline/build_queues.c — the queues of one build: units and batches to
 * the workers, packed shards to the committers, committed shards to their
 * fsync (fields: build_state.h). */
#include <pthread.h>
#include <stdint.h>

#include "pipeline/build_state.h"

static void ufifo_push(ufifo *q, unit *u) {
    u->next = NULL;
    if (q->tail) q->tail->next = u;
    else q->head = u;
    q->tail = u;
    q->len++;
}

static unit *ufifo_pop(ufifo *q) {
    unit *u = q->head;
    if (u) {
        q->head = u->next;
        if (!q->head) q->tail = NULL;
        q->len--;
    }
    return u;
}

/* More than cap units queued (before setup ends: and READ_AHEAD bytes). */
static int queue_over(const builder *b, int cap) {
    return b->work.len > cap && (b->ready || b->queued_bytes >= b->read_ahead);
}

/* Appends u. A full queue is waited on until half of it is done, so the
 * reader refills it in bursts (fewer hand-offs of its slot).
 * reader_holds_slot: the reader gives its slot back for that wait. */
void build_unit_enqueue(builder *b, unit *u, int reader_holds_slot) {
    pthread_mutex_lock(&b->mu);
    if (queue_over(b, b->qcap - 1)) {
        if (reader_holds_slot) build_reader_pause_locked(b);
        while (queue_over(b, b->qcap / 2)) pthread_cond_wait(&b->has_space, &b->mu);
        if (reader_holds_slot) build_reader_resume_locked(b);
    }
    b->queued_bytes += (int64_t)u->docs.len;
    ufifo_push(&b->work, u);
    pthread_cond_signal(&b->has_item);
    pthread_mutex_unlock(&b->mu);
}

/* Appends a batch (never waits: the reader bounds their number). */
void build_batch_enqueue(builder *b, batch *bt) {
    pthread_mutex_lock(&b->mu);
    bt->next = NULL;
    if (b->btail) b->btail->next = bt;
    else b->bhead = bt;
    b->btail = bt;
    pthread_cond_signal(&b->has_item);
    pthread_mutex_unlock(&b->mu);
}

/* The next batch (*bt) or else unit (*u), with a CPU slot in *slot; returns
 * 0 once the queue is closed and empty (*slot given back). A worker keeps
 * its slot from one item to the next (a slot handed from thread to thread
 * stays idle while the next one wakes up: 0.1-0.5 ms here, hundreds of
 * times per build); it gives it back only to wait for work, or to the
 * reader when the reader waits for one. */
int build_dequeue(builder *b, int *slot, batch **bt, unit **u) {
    pthread_mutex_lock(&b->mu);
    while (!b->bhead && !(b->ready && b->work.head) && !(b->ready && b->closed)) {
        if (*slot >= 0) build_slot_give_locked(b, *slot), *slot = -1;
        pthread_cond_wait(&b->has_item, &b->mu);
    }
    *bt = b->bhead;
    *u = NULL;
    if (*bt) {
        b->bhead = (*bt)->next;
        if (!b->bhead) b->btail = NULL;
    } else if ((*u = ufifo_pop(&b->work)) != NULL) {
        b->queued_bytes -= (int64_t)(*u)->docs.len;
        if (!queue_over(b, b->qcap / 2)) pthread_cond_signal(&b->has_space);
    }
    int got = *bt || *u;
    if (*slot >= 0 && (!got || b->reader_waiting)) build_slot_give_locked(b, *slot), *slot = -1;
    if (got && *slot < 0) *slot = build_slot_take_locked(b, 0);
    pthread_mutex_unlock(&b->mu);
    return got;
}

void build_queue_close(builder *b) {
    pthread_mutex_lock(&b->mu);
    b->closed = 1;
    pthread_cond_broadcast(&b->has_item);
    pthread_mutex_unlock(&b->mu);
}

/* Hands a packed shard to the committers, waiting while ccap are queued
 * (and giving the worker's slot back for that wait). */
void build_commit_enqueue(builder *b, unit *u, int *slot) {
    pthread_mutex_lock(&b->mu);
    if (b->commits.len >= b->ccap && *slot >= 0) build_slot_give_locked(b, *slot), *slot = -1;
    while (b->commits.len >= b->ccap) pthread_cond_wait(&b->commit_space, &b->mu);
    ufifo_push(&b->commits, u);
    pthread_cond_signal(&b->has_commit);
    pthread_mutex_unlock(&b->mu);
}

/* The next shard to commit (*sync = 0) or else to fsync (*sync = 1);
 * NULL once closed and both are done. */
unit *build_commit_dequeue(builder *b, int *sync) {
    pthread_mutex_lock(&b->mu);
    for (;;) {
        unit *u = ufifo_pop(&b->commits);
        if (u) {
            pthread_cond_signal(&b->commit_space);
            *sync = 0;
            pthread_mutex_unlock(&b->mu);
            return u;
        }
        if (b->unsynced.len > (b->commits_closed ? 0 : b->sync_lag)) {
            *sync = 1;
            u = ufifo_pop(&b->unsynced);
            pthread_mutex_unlock(&b->mu);
            return u;
        }
        if (b->commits_closed) break;
        pthread_cond_wait(&b->has_commit, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* A committed shard waits for its fsync. */
void build_sync_enqueue(builder *b, unit *u) {
    pthread_mutex_lock(&b->mu);
    ufifo_push(&b->unsynced, u);
    if (b->unsynced.len > b->sync_lag) pthread_cond_signal(&b->has_commit);
    pthread_mutex_unlock(&b->mu);
}

void build_commits_close(builder *b) {
    pthread_mutex_lock(&b->mu);
    b->commits_closed = 1;
    pthread_cond_broadcast(&b->has_commit);
    pthread_mutex_unlock(&b->mu);
}

int build_failed(builder *b) {
    pthread_mutex_lock(&b->mu);
    int f = b->failed;
    pthread_mutex_unlock(&b->mu);
    return f;
}

/* Records a worker's error (the first one is reported). */
void build_fail(builder *b, const kf_err *err) {
    pthread_mutex_lock(&b->mu);
    if (!b->failed) b->err = *err;
    b->failed = 1;
    pthread_mutex_unlock(&b->mu);
}
