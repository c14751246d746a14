/* trainer/train/loader.h — the training data stream over a split of LMDB shards.
 *
 * Order: the run's samples form one global stream; stream position p (0, 1,
 * 2, ...) is sample perm_e[p mod N] of epoch e = p div N, where perm_e is a
 * Fisher-Yates permutation of 0..N-1 drawn from common/rng.h with
 * (seed, LOADER_STREAM(e), i) — a function of (seed, epoch, manifest) only
 * (or the identity when shuffle is off, for validation). Optimizer step s
 * consumes positions [s*G, (s+1)*G) (G = global batch). Inside a step the
 * G samples are cut into world * accum micro-batches of micro_batch samples,
 * rank-major: rank r's micro-batch a holds positions
 *   s*G + (r*accum + a)*micro_batch + [0, micro_batch)
 * so each rank reads a contiguous slice, and the sequence of global sample
 * ids never depends on the number of ranks; with one rank and accum = W the
 * micro-batches come in the same order as the W ranks' batches.
 *
 * The cursor is the stream position of the next step (a multiple of G);
 * checkpoints save it and loader_seek restores it. A prefetch thread reads
 * ahead (depth micro-batches); the shard set is opened in loader_open, after
 * any fork, and only the prefetch thread reads it afterwards.
 */
#ifndef KF_TRAINER_TRAIN_LOADER_H
#define KF_TRAINER_TRAIN_LOADER_H

#include <stdint.h>

#include "common/error.h"
#include "pipeline/shard_reader.h"

/** Stream id of epoch e's permutation ("LOAD" in the high word). */
#define LOADER_STREAM(e) ((0x4C4F4144ull << 32) | (uint64_t)(e))

typedef struct loader loader;

typedef struct loader_opts {
    const char *data_dir; /* directory with manifest.yaml */
    const char *split;    /* "train" or "valid" */
    uint64_t seed;
    int shuffle;          /* 1: permutation per epoch; 0: identity order */
    int64_t global_batch; /* G */
    int64_t micro_batch;  /* samples per micro-batch */
    int rank, world;      /* G must equal world * accum * micro_batch */
    int depth;            /* micro-batches read ahead (>= 1) */
} loader_opts;

/** One micro-batch (owned by the loader, valid until the next loader_next). */
typedef struct loader_batch {
    int64_t n; /* samples (micro_batch) */
    int64_t seq_len;
    int32_t *ids;    /* [n * seq_len] token ids */
    int32_t *len;    /* [n] valid lengths (seq_len for `wrap` data) */
    int64_t *sample; /* [n] global sample indices in the split */
    int64_t *pos;    /* [n] stream positions (for seeding per-sample noise) */
    int64_t step;    /* optimizer step it belongs to */
    int64_t micro;   /* micro-batch index a within the step (0..accum-1) */
} loader_batch;

/** Opens the split and starts prefetching at cursor 0.
 * @return 0, or -1 with err set (shard set errors, or a batch split that does
 * not divide: "global batch G is not a multiple of ranks*micro_batch"). */
int loader_open(const loader_opts *o, loader **out, kf_err *err);

/** Micro-batches per rank per step (accum). */
int64_t loader_accum(const loader *l);

/** The open shard set (metadata: seq_len, vocab, tokenizer, manifest sha256).
 * Only for metadata getters: the prefetch thread owns reads. */
const shard_set *loader_shards(const loader *l);

/** Next micro-batch of this rank, in (step, micro) order. Dies on a read
 * error (the shards were verified when listed; a failing read is corruption
 * or I/O failure, and the message names the shard and index). */
const loader_batch *loader_next(loader *l);

/** Stream position of the next step that loader_next has not started
 * (a multiple of G when called between steps). */
int64_t loader_cursor(const loader *l);

/** Restarts the stream at cursor (a multiple of G: the start of a step). */
void loader_seek(loader *l, int64_t cursor);

/** The global sample index at stream position p (pure function of the
 * shuffle flag, seed and split size; exposed for tests). */
int64_t loader_sample_at(loader *l, int64_t p);

/** Stops the thread, closes the shards, frees l (NULL allowed). */
void loader_close(loader *l);

#endif
