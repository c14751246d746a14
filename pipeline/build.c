/* pipeline/build.c — one shard set: reader thread -> unit queue -> workers ->
 * committers -> shards -> manifest (design and resume rules: build.h; CPU
 * slots: build_slots.c; queues: build_queues.c; the output directory:
 * build_outdir.c). */
#include "pipeline/build.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "pipeline/build_outdir.h"
#include "pipeline/build_state.h"
#include "pipeline/doc_reader.h"
#include "pipeline/manifest.h"
#include "pipeline/packer.h"
#include "pipeline/shard_format.h"
#include "tokenize/tokenizer.h"

enum { TRAIN = 0, VALID = 1 };
enum { READ_AHEAD = 64 << 20 }; /* bytes of units the reader may queue before setup ends */
static const char *const split_names[2] = {"train", "valid"};

/* ---- document lists ---- */

static void doclist_add(doclist *d, const char *text, size_t len) {
    if (!d->off) {
        d->capn = 64;
        d->off = kf_malloc(sizeof *d->off * (size_t)(d->capn + 1));
        d->off[0] = 0;
    }
    if (d->len + len > d->cap) {
        d->cap = (d->len + len) * 2;
        d->text = kf_realloc(d->text, d->cap);
    }
    if (len) memcpy(d->text + d->len, text, len);
    d->len += len;
    if (d->n == d->capn) {
        d->capn *= 2;
        d->off = kf_realloc(d->off, sizeof *d->off * (size_t)(d->capn + 1));
    }
    d->off[++d->n] = d->len;
}

static void doclist_free(doclist *d) {
    free(d->text);
    free(d->off);
    d->text = NULL;
    d->off = NULL;
}

/* ---- workers ---- */

static void shard_path(const builder *b, int split, int64_t index, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s/shard-%05" PRId64 ".lmdb", b->c->out, split_names[split], index);
}

/* sha256 over the unit's documents (length-prefixed) and its empty count:
 * equal exactly when the unit's input is. */
static void unit_source_hash(const unit *u, char out[65]) {
    const doclist *d = &u->docs;
    sha256_ctx h;
    sha256_init(&h);
    for (int64_t i = 0; i < d->n; i++) {
        uint64_t n = d->off[i + 1] - d->off[i];
        uint8_t le[8];
        for (int k = 0; k < 8; k++) le[k] = (uint8_t)(n >> (8 * k));
        sha256_update(&h, le, 8);
        sha256_update(&h, d->text + d->off[i], n);
    }
    uint8_t le[8];
    for (int k = 0; k < 8; k++) le[k] = (uint8_t)((uint64_t)u->empties >> (8 * k));
    sha256_update(&h, le, 8);
    uint8_t digest[32];
    sha256_final(&h, digest);
    sha256_to_hex(digest, out);
}

/* The computing part of a unit, run holding slot `slot`: reuses a matching
 * shard (*wp = NULL) or writes the unit's samples into a new shard *wp, left
 * for the caller to commit with *stats. */
static int pack_unit(builder *b, int slot, unit *u, shard_writer **wp, shard_meta *stats,
                     kf_err *err) {
    char path[4096];
    shard_path(b, u->split, u->index, path, sizeof path);
    *wp = NULL;
    memset(stats, 0, sizeof *stats);
    unit_source_hash(u, stats->source_sha256);
    memcpy(stats->config_sha256, b->m.config_sha256, sizeof stats->config_sha256);
    if (!b->force && fs_exists(path)) {
        shard_meta old;
        kf_err verr;
        if (shard_verify(path, &old, &verr) == 0 &&
            !strcmp(old.source_sha256, stats->source_sha256) &&
            !strcmp(old.config_sha256, stats->config_sha256)) {
            u->meta = old;
            u->reused = 1;
            __atomic_add_fetch(&b->tokens_done, old.tokens, __ATOMIC_RELAXED);
            return 0;
        }
    }
    if (!b->packers[slot]) b->packers[slot] = packer_new(b->toks[slot], b->c, &b->m.special);
    packer *p = b->packers[slot];
    shard_meta fmt;
    memset(&fmt, 0, sizeof fmt);
    snprintf(fmt.tokenizer, sizeof fmt.tokenizer, "%s", b->m.tokenizer);
    memcpy(fmt.vocab_sha256, b->m.vocab_sha256, sizeof fmt.vocab_sha256);
    fmt.vocab_size = b->m.vocab_size;
    fmt.seq_len = b->m.seq_len;
    snprintf(fmt.packing, sizeof fmt.packing, "%s", b->m.packing);
    shard_writer *w;
    if (shard_writer_open(path, &fmt, &w, err)) return -1;
    stats->empty_docs = u->empties;
    const doclist *d = &u->docs;
    stats->raw_bytes = (int64_t)d->len;
    packer_begin(p, w, stats);
    for (int64_t i = 0; i < d->n; i++) {
        if (packer_add(p, d->text + d->off[i], d->off[i + 1] - d->off[i], err)) {
            shard_writer_abort(w);
            return -1;
        }
    }
    packer_end(p);
    /* once per unit: the counter shares a cache line with the reader's */
    __atomic_add_fetch(&b->tokens_done, stats->tokens, __ATOMIC_RELAXED);
    *wp = w;
    return 0;
}

/* One unit -> one shard, left to the committers: the commit's system calls
 * may wait for the disk. */
static int process_unit(builder *b, int *slot, unit *u, kf_err *err) {
    int rc = pack_unit(b, *slot, u, &u->w, &u->stats, err);
    if (!rc && u->w) build_commit_enqueue(b, u, slot);
    return rc;
}

static int batch_doc(void *ctx, const char *text, size_t len, kf_err *err) {
    doclist_add(ctx, text, len);
    return 0;
}

static int batch_empty(void *ctx, kf_err *err) { return batch_doc(ctx, NULL, 0, err); }

/* Decodes a batch's archive into its documents (unless a worker failed:
 * the build stops) and tells the reader. When the reader waits for just this
 * batch, the worker's slot goes with it: the reader goes on at once. */
static void decode_batch(builder *b, int *slot, batch *bt) {
    kf_err err;
    int rc;
    if (build_failed(b)) {
        rc = kf_err_set(&err, "a worker failed");
    } else {
        doc_sink sink = {batch_doc, batch_empty, NULL, NULL, &bt->docs};
        rc = docs_read_member(bt->in, bt->name, bt->data, bt->size, &sink, &err);
    }
    free(bt->data);
    bt->data = NULL;
    pthread_mutex_lock(&b->mu);
    bt->rc = rc;
    if (rc) bt->err = err;
    bt->done = 1;
    if (b->reader_awaits == bt) {
        b->handed_slot = *slot;
        *slot = -1;
    }
    pthread_cond_broadcast(&b->batch_done);
    pthread_mutex_unlock(&b->mu);
}

typedef struct worker_arg {
    builder *b;
    pthread_t th;
} worker_arg;

/* Commits packed shards (after a failure: drops them) and fsyncs them. */
static void *committer(void *arg) {
    pthread_setname_np(pthread_self(), "kf-commit"); /* for top -H, perf */
    builder *b = arg;
    kf_err err;
    unit *u;
    int sync;
    while ((u = build_commit_dequeue(b, &sync)) != NULL) {
        if (sync) {
            if (build_failed(b)) continue;
            char path[4096];
            shard_path(b, u->split, u->index, path, sizeof path);
            if (fs_fsync_path(path, &err)) build_fail(b, &err);
            else u->synced = 1;
            continue;
        }
        shard_writer *w = u->w;
        u->w = NULL;
        if (build_failed(b)) shard_writer_abort(w);
        else if (shard_writer_commit(w, &u->stats, &u->meta, &err)) build_fail(b, &err);
        else build_sync_enqueue(b, u);
    }
    return NULL;
}

/* Units only arrive after setup succeeded, so every slot has its tokenizer
 * by then; packers are made on first use. */
static void *worker(void *arg) {
    pthread_setname_np(pthread_self(), "kf-worker"); /* for top -H, perf */
    worker_arg *a = arg;
    builder *b = a->b;
    kf_err err;
    /* After a failure every worker keeps draining, so the reader never
     * blocks on a full queue or a batch. */
    batch *bt;
    unit *u;
    int slot = -1;
    while (build_dequeue(b, &slot, &bt, &u)) {
        if (bt) {
            decode_batch(b, &slot, bt);
            continue;
        }
        if (!build_failed(b) && process_unit(b, &slot, u, &err)) build_fail(b, &err);
        doclist_free(&u->docs); /* its record stays for the manifest */
    }
    return NULL;
}

/* ---- the reader side ---- */

static unit *current(builder *b, int split) {
    if (b->cur[split]) return b->cur[split];
    unit *u = kf_calloc(1, sizeof *u);
    u->split = split;
    u->index = b->nunits[split];
    if (b->nunits[split] == b->capunits[split]) {
        b->capunits[split] = b->capunits[split] ? 2 * b->capunits[split] : 64;
        b->units[split] = kf_realloc(b->units[split], sizeof(unit *) * (size_t)b->capunits[split]);
    }
    b->units[split][b->nunits[split]++] = u;
    return b->cur[split] = u;
}

/* Appends a document to the split's current unit; hands the unit to the
 * workers when it is full. */
static int add_doc(builder *b, int split, const char *text, size_t len, int64_t empties_before,
                   kf_err *err) {
    unit *u = current(b, split);
    u->empties += empties_before;
    doclist_add(&u->docs, text, len);
    if (u->docs.n == b->c->docs_per_shard) {
        b->cur[split] = NULL;
        build_unit_enqueue(b, u, 1);
        if (build_failed(b)) return kf_err_set(err, "a worker failed");
    }
    return 0;
}

/* "valid: {last: N}" in one pass: the newest N documents wait in a FIFO;
 * one that is pushed out is certainly a training document, and what is left
 * at the end is the validation split. An empty document belongs to the unit
 * of the next non-empty one (trailing empties to the last split's last unit). */
static int take_doc(builder *b, const char *text, size_t len, kf_err *err) {
    b->docs_read++;
    b->raw_bytes += (int64_t)len;
    if (b->phase == 1) return add_doc(b, VALID, text, len, 0, err);
    if (b->c->valid_last == 0) return add_doc(b, TRAIN, text, len, 0, err);
    held *h = &b->fifo[(b->fifo_head + b->fifo_n) % b->fifo_cap];
    h->text = kf_malloc(len);
    memcpy(h->text, text, len);
    h->len = len;
    h->empties = b->pending_empties;
    b->pending_empties = 0;
    if (++b->fifo_n <= b->c->valid_last) return 0;
    h = &b->fifo[b->fifo_head];
    b->fifo_head = (b->fifo_head + 1) % b->fifo_cap;
    b->fifo_n--;
    b->train_docs++;
    int rc = add_doc(b, TRAIN, h->text, h->len, h->empties, err);
    free(h->text);
    return rc;
}

static void take_empty(builder *b) {
    if (b->phase == 0 && b->c->valid_last > 0) b->pending_empties++;
    else current(b, b->phase == 1 ? VALID : TRAIN)->empties++;
}

static void batch_free(batch *bt) {
    free(bt->name);
    free(bt->data);
    doclist_free(&bt->docs);
    free(bt);
}

/* Takes the documents of decoded batches in input order: those at the head
 * that are done, waiting for more while over `keep` are pending. */
static int take_batches(builder *b, int keep, kf_err *err) {
    while (b->pend_head) {
        batch *bt = b->pend_head;
        pthread_mutex_lock(&b->mu);
        if (!bt->done && b->npend > keep) {
            build_reader_pause_locked(b);
            b->reader_awaits = bt;
            while (!bt->done) pthread_cond_wait(&b->batch_done, &b->mu);
            b->reader_awaits = NULL;
            if (b->handed_slot >= 0) b->reader_slot = b->handed_slot, b->handed_slot = -1;
            else build_reader_resume_locked(b);
        }
        int done = bt->done;
        pthread_mutex_unlock(&b->mu);
        if (!done) return 0;
        b->pend_head = bt->later;
        if (!b->pend_head) b->pend_tail = NULL;
        b->npend--;
        int rc = bt->rc;
        if (rc) *err = bt->err;
        for (int64_t i = 0; !rc && i < bt->docs.n; i++) {
            size_t len = bt->docs.off[i + 1] - bt->docs.off[i];
            if (len) rc = take_doc(b, bt->docs.text + bt->docs.off[i], len, err);
            else take_empty(b);
        }
        batch_free(bt);
        if (rc) return -1;
    }
    return 0;
}

/* After a reader error: waits for the workers to finish the pending batches
 * (the reader holds no slot) and frees them. */
static void drop_batches(builder *b) {
    while (b->pend_head) {
        batch *bt = b->pend_head;
        pthread_mutex_lock(&b->mu);
        while (!bt->done) pthread_cond_wait(&b->batch_done, &b->mu);
        pthread_mutex_unlock(&b->mu);
        b->pend_head = bt->later;
        batch_free(bt);
    }
    b->pend_tail = NULL;
    b->npend = 0;
}

/* A document read in line comes after every pending batch's. */
static int sink_doc(void *ctx, const char *text, size_t len, kf_err *err) {
    builder *b = ctx;
    if (take_batches(b, 0, err)) return -1;
    return take_doc(b, text, len, err);
}

static int sink_empty(void *ctx, kf_err *err) {
    builder *b = ctx;
    if (take_batches(b, 0, err)) return -1;
    take_empty(b);
    return 0;
}

/* A nested archive goes to the workers; at most max_pend wait decoded or
 * not taken, which bounds the memory they hold. */
static int sink_member(void *ctx, const build_input *in, const char *name, void *data, size_t size,
                       kf_err *err) {
    builder *b = ctx;
    batch *bt = kf_calloc(1, sizeof *bt);
    bt->in = in;
    bt->name = kf_strdup(name);
    bt->data = data;
    bt->size = size;
    if (b->pend_tail) b->pend_tail->later = bt;
    else b->pend_head = bt;
    b->pend_tail = bt;
    b->npend++;
    build_batch_enqueue(b, bt);
    return take_batches(b, b->max_pend, err);
}

/* End of the main inputs with a `last: N` rule: the FIFO is the valid split. */
static int flush_fifo(builder *b, kf_err *err) {
    int rc = 0;
    if (b->train_docs == 0)
        rc = kf_err_set(err,
                        "shards.%s.valid.last: %" PRId64 " but the inputs hold only %" PRId64
                        " documents (the training split would be empty)",
                        b->c->name, b->c->valid_last, b->fifo_n);
    for (; b->fifo_n > 0; b->fifo_n--) {
        held *h = &b->fifo[b->fifo_head];
        b->fifo_head = (b->fifo_head + 1) % b->fifo_cap;
        if (!rc) rc = add_doc(b, VALID, h->text, h->len, h->empties, err);
        free(h->text);
    }
    if (!rc && b->pending_empties) current(b, VALID)->empties += b->pending_empties;
    return rc;
}

static void sink_progress(void *ctx, int64_t disk_bytes) {
    builder *b = ctx;
    b->disk_bytes = disk_bytes;
    char extra[128];
    snprintf(extra, sizeof extra, "docs %" PRId64 " tok %.1fM", b->docs_read,
             __atomic_load_n(&b->tokens_done, __ATOMIC_RELAXED) / 1e6);
    progress_update((double)disk_bytes, extra);
}

/* Makes every shard of the set durable before the manifest lists it
 * (shard_writer_commit leaves that to its caller): the committers synced
 * those they wrote; this syncs reused ones (the build that wrote them may
 * have been killed before its sync). */
static int sync_shards(const builder *b, kf_err *err) {
    char path[4096];
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; i < b->nunits[s]; i++) {
            if (b->units[s][i]->synced) continue;
            shard_path(b, s, i, path, sizeof path);
            if (fs_fsync_path(path, err)) return -1;
        }
    }
    return 0;
}

/* ---- the build ---- */

static void report(const builder *b, const build_result *r) {
    for (int s = 0; s < 2; s++) {
        const manifest_split *sp = s ? &b->m.valid : &b->m.train;
        kf_log_info("shards %s %s: %" PRId64 " documents -> %" PRId64
                    " samples in %d shards, %" PRId64 " tokens; empty documents %" PRId64
                    ", invalid UTF-8 replaced %" PRId64 ", truncated %" PRId64
                    ", dropped tokens %" PRId64,
                    b->c->name, split_names[s], sp->docs, sp->samples, sp->nshards, sp->tokens,
                    sp->empty_docs, sp->replaced, sp->truncated, sp->dropped_tokens);
    }
    kf_log_info("shards %s: %" PRId64 " shards built, %" PRId64
                " reused; %.1f MB of text in %.2f s (%.2f MB/s) -> %s",
                b->c->name, r->shards_built, r->shards_reused, r->raw_bytes / 1e6, r->seconds,
                r->seconds > 0 ? r->raw_bytes / 1e6 / r->seconds : 0.0, b->c->out);
}

int shards_current(const build_config *c, char *why, size_t cap, kf_err *err) {
    manifest m;
    kf_err merr;
    if (manifest_read(c->out, &m, NULL, &merr)) {
        snprintf(why, cap, "%s", merr.msg);
        return 0;
    }
    tok *t = tok_load(c->tokenizer, c->vocab, err);
    int rc = -1;
    if (t) {
        char want[65];
        build_config_hash(c, tok_vocab_sha256(t), want);
        rc = !strcmp(m.config_sha256, want);
        if (!rc)
            snprintf(why, cap,
                     "%s/" MANIFEST_FILE " was built with other settings than shards.%s has now "
                     "(config_sha256 %.12s..., now %.12s...)",
                     c->out, c->name, m.config_sha256, want);
        tok_free(t);
    }
    manifest_free(&m);
    return rc;
}

/* Gives every slot its tokenizer (slot 0's loaded unless the caller has it,
 * the others cloned from it: shared tables, own caches) and fills the
 * manifest's format fields and config hash. */
static int setup(builder *b, const build_config *c, tok **toks, kf_err *err) {
    if (!toks[0] && !(toks[0] = tok_load(c->tokenizer, c->vocab, err))) return -1;
    tok *t = toks[0];
    for (int i = 1; i < b->jobs; i++)
        if (!toks[i]) toks[i] = tok_clone(t);
    manifest *m = &b->m;
    snprintf(m->name, sizeof m->name, "%s", c->name);
    snprintf(m->tokenizer, sizeof m->tokenizer, "%s", tok_name(t));
    snprintf(m->vocab_sha256, sizeof m->vocab_sha256, "%s", tok_vocab_sha256(t));
    m->vocab_size = tok_vocab_size(t);
    m->seq_len = c->seq_len;
    snprintf(m->packing, sizeof m->packing, "%s", c->packing);
    m->id_bytes = shard_id_bytes(m->vocab_size);
    build_config_hash(c, m->vocab_sha256, m->config_sha256);
    return packer_specials(t, c, &m->special, err);
}

/* Setup on its own thread, so the reader starts at once (loading a GPT-2
 * vocabulary takes ~30 ms, a core's worth of reading). Its error stops the
 * build as a worker's would; the output directory is touched only once the
 * tokenizer has loaded. */
static void *setup_main(void *arg) {
    pthread_setname_np(pthread_self(), "kf-setup"); /* for top -H, perf */
    builder *b = arg;
    kf_err err;
    int slot = build_slot_take(b, 0);
    int rc = setup(b, b->c, b->toks, &err);
    build_slot_give(b, slot);
    if (!rc && ((b->lock_fd = build_out_lock(b->c, &err)) < 0 || build_out_prepare(b->c, &err)))
        rc = -1;
    if (rc) build_fail(b, &err);
    pthread_mutex_lock(&b->mu);
    b->ready = 1;
    pthread_cond_broadcast(&b->has_item);
    pthread_cond_broadcast(&b->has_space);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- the builder: new -> run (start -> read -> stop -> commit) -> free ---- */

static builder *builder_new(const build_config *c, int jobs, int force, tok **toks) {
    builder *b = kf_calloc(1, sizeof *b);
    b->t0 = clock_now_s();
    b->c = c;
    b->force = force;
    b->qcap = 4 * jobs; /* refilled from half: at least 2 * jobs units ready */
    b->ccap = 8 * jobs; /* rides out a disk that stalls for 100 ms (seen) */
    b->sync_lag = 2 * jobs;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->has_item, NULL);
    pthread_cond_init(&b->has_space, NULL);
    pthread_cond_init(&b->has_commit, NULL);
    pthread_cond_init(&b->commit_space, NULL);
    pthread_cond_init(&b->token_freed, NULL);
    pthread_cond_init(&b->reader_freed, NULL);
    pthread_cond_init(&b->batch_done, NULL);
    b->max_pend = 2 * jobs;
    b->jobs = jobs;
    b->slot_busy = kf_calloc((size_t)jobs, 1);
    b->handed_slot = -1;
    b->lock_fd = -1;
    b->read_ahead = jobs > 1 ? READ_AHEAD : 0;
    b->packers = kf_calloc((size_t)jobs, sizeof *b->packers);
    b->ws = kf_calloc((size_t)jobs, sizeof *b->ws);
    b->cs = kf_calloc((size_t)jobs, sizeof *b->cs);
    if (!toks) toks = b->own = kf_calloc((size_t)jobs, sizeof *b->own);
    b->toks = toks;
    return b;
}

/* Starts the workers, then the committers, then the setup thread; -1 when
 * one cannot start (builder_stop stops those that did). */
static int builder_start(builder *b, kf_err *err) {
    for (; b->started < b->jobs; b->started++) {
        b->ws[b->started].b = b;
        if (pthread_create(&b->ws[b->started].th, NULL, worker, &b->ws[b->started]))
            return kf_err_set(err, "cannot start worker thread %d: %s", b->started,
                              strerror(errno));
    }
    for (; b->cstarted < b->jobs; b->cstarted++)
        if (pthread_create(&b->cs[b->cstarted], NULL, committer, b))
            return kf_err_set(err, "cannot start committer thread %d: %s", b->cstarted,
                              strerror(errno));
    if (pthread_create(&b->setup_th, NULL, setup_main, b))
        return kf_err_set(err, "cannot start the setup thread: %s", strerror(errno));
    b->setting_up = 1;
    return 0;
}

/* The main inputs; with `valid: {last: N}` the FIFO becomes the valid split
 * at their end. The reader holds a CPU slot while it reads. */
static int read_main(builder *b, const doc_sink *sink, kf_err *err) {
    b->reader_slot = build_slot_take(b, 1); /* the reader computes too */
    int rc = docs_read(&b->c->inputs, sink, err);
    if (!rc) rc = take_batches(b, 0, err);
    if (!rc && b->c->valid_last > 0) rc = flush_fifo(b, err);
    build_slot_give(b, b->reader_slot);
    return rc;
}

/* The separate validation inputs, after the main inputs' last units. */
static int read_valid(builder *b, const doc_sink *sink, kf_err *err) {
    for (int s = 0; s < 2; s++) /* the main inputs' last units are complete */
        if (b->cur[s]) build_unit_enqueue(b, b->cur[s], 0), b->cur[s] = NULL;
    b->phase = 1;
    b->reader_slot = build_slot_take(b, 1);
    int rc = docs_read(&b->c->valid_inputs, sink, err);
    if (!rc) rc = take_batches(b, 0, err);
    build_slot_give(b, b->reader_slot);
    return rc;
}

/* The reader, on the calling thread, with a progress bar over the inputs' bytes. */
static int builder_read(builder *b, kf_err *err) {
    const build_config *c = b->c;
    b->reading = 1;
    if (c->valid_last > 0) {
        b->fifo_cap = c->valid_last + 1;
        b->fifo = kf_calloc((size_t)b->fifo_cap, sizeof *b->fifo);
    }
    doc_sink sink = {sink_doc, sink_empty, sink_progress, sink_member, b};
    char label[160];
    snprintf(label, sizeof label, "shards %s", c->name);
    double total = (double)(docs_input_bytes(&c->inputs) + docs_input_bytes(&c->valid_inputs));
    progress_begin(label, total, "B");
    int rc = read_main(b, &sink, err);
    if (!rc && c->valid_inputs.n) rc = read_valid(b, &sink, err);
    drop_batches(b); /* left by an error */
    return rc;
}

/* Lets every thread finish and joins it: the last units go to the workers
 * (after a read error they are dropped), then the queues close. */
static void builder_stop(builder *b, int read_failed) {
    if (b->setting_up) {
        pthread_join(b->setup_th, NULL);
    } else { /* let the workers drain and stop */
        pthread_mutex_lock(&b->mu);
        b->ready = 1;
        pthread_mutex_unlock(&b->mu);
    }
    for (int s = 0; s < 2; s++) {
        if (!b->cur[s]) continue;
        if (read_failed) doclist_free(&b->cur[s]->docs); /* never handed to a worker */
        else build_unit_enqueue(b, b->cur[s], 0);
        b->cur[s] = NULL;
    }
    build_queue_close(b);
    for (int i = 0; i < b->started; i++) pthread_join(b->ws[i].th, NULL);
    build_commits_close(b);
    for (int i = 0; i < b->cstarted; i++) pthread_join(b->cs[i], NULL);
    if (b->reading) {
        sink_progress(b, b->disk_bytes); /* the final token count */
        progress_end();
    }
}

/* Input that is mostly not text (binary garbage, another encoding) still
 * tokenizes, as U+FFFD: above this fraction of invalid UTF-8 the build warns. */
#define REPLACED_WARN 0.01

/* A split that training reads (train always, valid when the set has a
 * validation rule) must hold samples: the build fails rather than leave a
 * set that can never train. Warns about a split that is mostly replaced
 * bytes, naming its inputs. */
static int check_split(const builder *b, int s, const manifest_split *sp, kf_err *err) {
    const build_config *c = b->c;
    const build_inputs *in = s && c->valid_inputs.n ? &c->valid_inputs : &c->inputs;
    char names[1024] = "";
    for (int i = 0, u = 0; i < in->n && u < (int)sizeof names - 1; i++)
        u += snprintf(names + u, sizeof names - (size_t)u, "%s%s", i ? ", " : "", in->v[i].path);
    if (sp->samples == 0 && (s == 0 || c->valid_last > 0 || c->valid_inputs.n))
        return kf_err_set(err,
                          "shards.%s: the %s split has 0 samples (%" PRId64 " documents, %" PRId64
                          " tokens from %s): nothing to %s; give it more text%s",
                          c->name, split_names[s], sp->docs, sp->tokens, names,
                          s ? "validate on" : "train on",
                          s ? " (valid: last: N documents, or valid: inputs:)" : "");
    if (sp->raw_bytes > 0 && (double)sp->replaced > REPLACED_WARN * (double)sp->raw_bytes)
        kf_log_warn("shards.%s %s: %.0f%% of the input bytes are invalid UTF-8 (%" PRId64
                    " replacements by U+FFFD in %" PRId64 " bytes) from %s: is it text?",
                    c->name, split_names[s], 100.0 * (double)sp->replaced / (double)sp->raw_bytes,
                    sp->replaced, sp->raw_bytes, names);
    return 0;
}

/* After a clean build: every shard durable, the manifest filled from the
 * units, shards beyond the new counts removed, the manifest written (last). */
static int builder_commit(builder *b, build_result *res, kf_err *err) {
    if (sync_shards(b, err)) return -1;
    build_result r = {0};
    for (int s = 0; s < 2; s++) {
        manifest_split *sp = s ? &b->m.valid : &b->m.train;
        sp->nshards = (int)b->nunits[s];
        sp->shards = kf_calloc((size_t)sp->nshards + 1, sizeof *sp->shards);
        for (int64_t i = 0; i < b->nunits[s]; i++) {
            sp->shards[i] = b->units[s][i]->meta;
            if (b->units[s][i]->reused) r.shards_reused++;
            else r.shards_built++;
        }
        manifest_split_sum(sp);
        if (check_split(b, s, sp, err)) return -1;
        r.raw_bytes += sp->raw_bytes;
        if (build_out_remove_orphans(b->c, split_names[s], b->nunits[s], err)) return -1;
    }
    if (manifest_write(b->c->out, &b->m, err)) return -1;
    r.seconds = clock_now_s() - b->t0;
    report(b, &r);
    if (res) *res = r;
    return 0;
}

static int builder_run(builder *b, build_result *res, kf_err *err) {
    int rc = builder_start(b, err);
    if (!rc) rc = builder_read(b, err);
    builder_stop(b, rc);
    if (b->failed) {
        *err = b->err; /* the worker's error explains a reader stop too */
        return -1;
    }
    return rc ? -1 : builder_commit(b, res, err);
}

static void builder_free(builder *b) {
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; i < b->nunits[s]; i++) free(b->units[s][i]);
        free(b->units[s]);
    }
    for (; b->fifo_n > 0; b->fifo_n--, b->fifo_head = (b->fifo_head + 1) % b->fifo_cap)
        free(b->fifo[b->fifo_head].text);
    free(b->fifo);
    manifest_free(&b->m);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->has_item);
    pthread_cond_destroy(&b->has_space);
    pthread_cond_destroy(&b->has_commit);
    pthread_cond_destroy(&b->commit_space);
    pthread_cond_destroy(&b->token_freed);
    pthread_cond_destroy(&b->reader_freed);
    pthread_cond_destroy(&b->batch_done);
    for (int i = 0; i < b->jobs; i++) packer_free(b->packers[i]);
    free(b->packers);
    free(b->slot_busy);
    for (int i = 0; b->own && i < b->jobs; i++) tok_free(b->own[i]);
    free(b->own);
    if (b->lock_fd >= 0) close(b->lock_fd);
    free(b->ws);
    free(b->cs);
    free(b);
}

int shards_build(const build_config *c, int jobs, int force, tok **toks, build_result *res,
                 kf_err *err) {
    KF_CHECK(jobs >= 1, "shards_build: jobs must be >= 1");
    builder *b = builder_new(c, jobs, force, toks);
    int rc = builder_run(b, res, err);
    builder_free(b);
    return rc;
}
