/* pipeline/build_state.h — the state of one build (pipeline/build.h), shared
 * by its three parts: build.c (the reader, the workers, the committers and
 * the builder's life), build_slots.c (who may compute: `jobs` CPU slots) and
 * build_queues.c (the work queue, the commit queue and the fsync queue).
 * Internal to pipeline/build*.c. */
#ifndef KF_PIPELINE_BUILD_STATE_H
#define KF_PIPELINE_BUILD_STATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "pipeline/build_config.h"
#include "pipeline/manifest.h"
#include "pipeline/packer.h"
#include "pipeline/shard_writer.h"
#include "tokenize/tokenizer.h"

/* Documents back to back: doc i = text[off[i] .. off[i+1]). */
typedef struct doclist {
    char *text;
    size_t len, cap;
    size_t *off;
    int64_t n, capn;
} doclist;

/* A shard unit: its documents, then its packed shard waiting for the commit,
 * then its shard's record. */
typedef struct unit {
    int split;
    int64_t index;
    doclist docs;
    int64_t empties;
    shard_writer *w; /* packed, not committed yet */
    shard_meta stats;
    shard_meta meta;
    int reused, synced;
    struct unit *next;
} unit;

/* A FIFO of units. */
typedef struct ufifo {
    unit *head, *tail;
    int len;
} ufifo;

/* A nested archive (OpenWebText's urlsf_subset*.xz, doc_sink.member) that a
 * worker decodes into documents (empty ones included) while the reader goes
 * on; the reader then takes them in input order, as if it had read them. */
typedef struct batch {
    const build_input *in;
    char *name;
    void *data; /* the archive's bytes, until decoded */
    size_t size;
    doclist docs;
    int done, rc;
    kf_err err;
    struct batch *next;  /* in the work queue */
    struct batch *later; /* in the reader's list, input order */
} batch;

/* A document held back while it may still belong to the valid split. */
typedef struct held {
    char *text;
    size_t len;
    int64_t empties; /* empty documents just before it */
} held;

typedef struct builder {
    const build_config *c;
    int force;
    manifest m;
    /* work queue (bounded, so reading never runs far ahead of the workers);
     * batches go first: the reader waits for them */
    pthread_mutex_t mu;
    pthread_cond_t has_item, has_space, batch_done;
    ufifo work;
    int qcap, closed;
    /* setup (loading the tokenizer, preparing the output directory) runs on
     * its own thread while the reader starts; units wait for `ready` (set
     * when setup ends, failed or not), and until then the reader may queue
     * up to READ_AHEAD bytes of units (when jobs > 1: a slot is free for it) */
    int ready;
    int64_t queued_bytes, read_ahead;
    int lock_fd; /* OUT/.build.lock, taken by setup */
    batch *bhead, *btail;
    /* packed shards waiting for their commit, which `jobs` committer
     * threads do, so a worker never waits for the disk; then waiting for
     * their fsync, which the committers do when idle, a few shards behind
     * (by then the write-back started at commit is mostly done, and the
     * fsync finds little to wait for) */
    pthread_cond_t has_commit, commit_space;
    ufifo commits, unsynced;
    int ccap, sync_lag, commits_closed;
    int failed;
    kf_err err; /* the first worker error */
    /* CPU slots: at most `jobs` threads (the reader included) compute at any
     * moment, so --jobs N means N cores and --jobs 1 is a sequential build.
     * Slot i owns tokenizer toks[i] and a packer, so an encoder's cache stays
     * with the slot, not with whichever worker thread holds it. There are
     * `jobs` workers: while the reader holds a slot, one of them waits. */
    int jobs;
    tok **toks;
    packer **packers;
    char *slot_busy;
    /* A freed slot wakes one thread (not all: each wake-up costs an idle
     * CPU a while): the reader if it waits (reader_freed; it is the serial
     * part, so it gets the next free slot), else one worker (token_freed). */
    pthread_cond_t token_freed, reader_freed;
    int reader_slot;
    int reader_waiting;
    /* the batch the reader waits for, and the slot its worker handed over */
    batch *reader_awaits;
    int handed_slot;
    /* every unit, per split, in order */
    unit **units[2];
    int64_t nunits[2], capunits[2];
    /* reader state */
    batch *pend_head, *pend_tail; /* handed to workers, not yet taken */
    int npend, max_pend;
    unit *cur[2];
    int phase;  /* 0: main inputs, 1: separate validation inputs */
    held *fifo; /* valid.last: the newest documents (ring) */
    int64_t fifo_cap, fifo_head, fifo_n, pending_empties, train_docs;
    /* counters for progress */
    int64_t docs_read, tokens_done, disk_bytes;
    int64_t raw_bytes;
    /* the threads builder_start started (builder_stop joins them) */
    struct worker_arg *ws;
    pthread_t *cs, setup_th;
    int started, cstarted, setting_up, reading;
    tok **own; /* the tokenizers when the caller passed none */
    double t0;
} builder;

/* ---- CPU slots (build_slots.c) ---- */

/** Takes a free slot; returns its index. reader: take precedence over
 * waiting workers. _locked: the caller holds b->mu. */
int build_slot_take(builder *b, int reader);
int build_slot_take_locked(builder *b, int reader);
/** Gives slot s back and wakes whoever should take it next. */
void build_slot_give(builder *b, int s);
void build_slot_give_locked(builder *b, int s);
/** The reader gives its slot back for a wait (under b->mu) ... */
void build_reader_pause_locked(builder *b);
/** ... and takes one back before any waiting worker. */
void build_reader_resume_locked(builder *b);

/* ---- queues (build_queues.c) ---- */

/** Appends unit u to the work queue, waiting while it is full;
 * reader_holds_slot: the reader gives its slot back for that wait. */
void build_unit_enqueue(builder *b, unit *u, int reader_holds_slot);
/** Appends a batch to the work queue (never waits). */
void build_batch_enqueue(builder *b, batch *bt);
/** A worker's next batch (*bt) or else unit (*u), with a CPU slot in *slot;
 * 0 once the queue is closed and empty (*slot given back). */
int build_dequeue(builder *b, int *slot, batch **bt, unit **u);
/** No more units: workers drain the queue and stop. */
void build_queue_close(builder *b);
/** Hands a packed shard to the committers (may give the worker's slot back). */
void build_commit_enqueue(builder *b, unit *u, int *slot);
/** The next shard to commit (*sync = 0) or to fsync (*sync = 1); NULL once
 * closed and both are done. */
unit *build_commit_dequeue(builder *b, int *sync);
/** A committed shard waits for its fsync. */
void build_sync_enqueue(builder *b, unit *u);
/** No more commits: committers finish the fsyncs and stop. */
void build_commits_close(builder *b);
/** Whether a thread of the build failed. */
int build_failed(builder *b);
/** Records a thread's error (the first one is reported). */
void build_fail(builder *b, const kf_err *err);

#endif
