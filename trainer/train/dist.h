/* trainer/train/dist.h — data-parallel communication: MPI between processes, NCCL
 * between GPUs, a watchdog that turns a dead peer into a prompt exit.
 *
 * Launch: under `mpirun`/`srun` (detected from the launcher's environment:
 * OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE) MPI is initialised and each
 * process is one rank; started directly, the process is rank 0 of 1 and MPI
 * is never touched (no singleton start-up). A build without MPI (no mpicc)
 * runs single-process and says so when started under a launcher with more
 * than one rank (dist_init fails rather than training N copies silently).
 *
 * Gradient all-reduce on the CPU backend is a chain in rank order: the sum
 * of every element is ((g0 + g1) + g2) + ... exactly, computed by passing
 * partial sums from rank 0 to rank W-1 in segments, then broadcast from rank
 * W-1. Results are therefore bitwise reproducible and equal to a single
 * process accumulating the same micro-batches in the same order. With the
 * CUDA backend (KF_CUDA) the device buffer is reduced by ncclAllReduce (the
 * communicator's unique id comes from rank 0 by MPI_Bcast; each rank drives
 * the GPU numbered by its node-local rank); NCCL's order is fixed for a given
 * topology, not across topologies.
 *
 * ZeRO-1 (resources.zero1): the gradients are reduce-scattered instead of
 * all-reduced, each rank updates only its shard of the flat parameters (and
 * holds the optimizer state of that shard alone), and the updated shards are
 * all-gathered. On the CPU backend each bucket runs the same rank-order
 * chain, and rank W-1 sends each owner its part instead of broadcasting the
 * whole: the shard's sums are bitwise the all-reduce's. With CUDA, a bucket
 * is one ncclReduce per owner whose shard it touches (grouped), and the
 * all-gather one ncclBroadcast per shard from its owner (grouped): the
 * shards are contiguous and of unequal length (below), which
 * ncclReduceScatter / ncclAllGather (W equal pieces of one buffer) cannot
 * express without padding the model's buffers, and a bucket, a range of the
 * backward's order, seldom starts on a shard.
 *
 * Dead ranks: every collective, MPI's start-up included (MPI_Init and the
 * first exchange, which block when a peer never starts or the transport
 * cannot reach it), is bracketed by a deadline. A watchdog thread
 * checks it twice a second; when a collective has blocked for longer than
 * `timeout` seconds (a peer was killed, stopped, or its node vanished) the
 * process prints which collective and exits with status 1, and the launcher
 * (mpirun/srun) then tears the job down. mpirun also ends the job by itself as
 * soon as a rank exits abnormally; the watchdog covers peers that hang
 * without exiting.
 */
#ifndef KF_TRAINER_TRAIN_DIST_H
#define KF_TRAINER_TRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/kernels.h"

typedef struct dist {
    int rank, world;             /* global */
    int local_rank, local_world; /* on this node */
    int mpi;                     /* 1: MPI initialised */
    double timeout;              /* seconds a collective may block */
    void *impl;
} dist;

/** Initialises communication (MPI when launched by a launcher).
 * @param timeout collective deadline in seconds (> 0).
 * @return 0, or -1 with err set (a multi-rank launch of a non-MPI build). */
int dist_init(dist *d, int *argc, char ***argv, double timeout, kf_err *err);

/** Whether this build has MPI ("MPI" or "no MPI (single process only)"). */
const char *dist_build_info(void);

/** Sets up NCCL for the CUDA backend b (after dist_init; no-op for CPU). */
int dist_attach_backend(dist *d, kf_backend *b, kf_err *err);

/* ---- gradient all-reduce, overlapped with the backward ----
 *
 * Sums buf (n floats in b's memory) over all ranks, in place, in the fixed
 * order described above, while the backward is still running:
 *
 *   dist_grads_begin(d, b, grads, n, bucket);
 *   model_backward_notify(m, ws, ready, ctx);  // ready -> dist_grads_ready
 *   dist_grads_wait(d);                        // before clipping / the optimizer
 *
 * Buckets: dist_grads_ready reports a range that is final; adjacent ranges
 * merge into a pending bucket, which is launched once it reaches `bucket`
 * floats, or when a range arrives that is not adjacent to it (then a new one
 * starts), or at dist_grads_wait. Buckets are thus contiguous, launched in
 * the order the backward finishes them, and the same on every rank (the
 * ranges reported must be: model_backward_notify's are). With bucket >= n
 * and ranges that grow one contiguous run (model_backward_notify's do), the
 * whole buffer is one all-reduce launched at the last range (no overlap).
 *
 * CPU backend: a communication thread runs the rank-order chain of each
 * bucket in launch order (MPI_THREAD_SERIALIZED: the main thread makes no
 * MPI call until dist_grads_wait; the other dist_* collectives die when
 * called in between). Every element is still ((g0 + g1) + g2) + ..., so the
 * result is bitwise that of one chain over the whole buffer, whatever the
 * buckets. If MPI does not provide SERIALIZED, the buckets are reduced in
 * dist_grads_wait (same result, no overlap). CUDA backend: each bucket is an
 * ncclAllReduce on a separate stream that first waits for an event recorded
 * on the backend's stream; dist_grads_wait makes the backend's stream wait
 * for the NCCL stream and blocks the host until it is done (so the watchdog
 * covers it). The watchdog's deadline brackets every bucket.
 *
 * All three are no-ops when world == 1. */

/** Starts an all-reduce of buf (n floats in b's memory) in buckets of about
 *  bucket_floats (> 0); nothing is launched until ranges are ready. With
 *  scatter (ZeRO-1) it is a reduce-scatter: after dist_grads_wait only this
 *  rank's shard of buf (dist_shard) holds the sums, bitwise those the
 *  all-reduce gives there; the rest of buf holds partial sums. */
void dist_grads_begin(dist *d, kf_backend *b, float *buf, int64_t n, int64_t bucket_floats,
                      int scatter);

/** buf[off, off + count) is final (on a GPU: its writes are queued on b's
 *  stream): launches every bucket this completes. */
void dist_grads_ready(dist *d, int64_t off, int64_t count);

/** Launches what is pending, waits until every bucket is reduced, and
 *  returns the seconds the all-reduce was exposed: the host's time blocked
 *  here on the CPU; on a GPU the time from the end of the backward's ops to
 *  the end of the last bucket on the device (0 when fully overlapped). Every
 *  float of buf must have been reported ready exactly once. */
double dist_grads_wait(dist *d);

/* ---- ZeRO-1's shards ---- */

/** A range of a flat buffer: [off, off + count). */
typedef struct dist_range {
    int64_t off, count;
} dist_range;

/** Rank `rank`'s shard of an n-element buffer: the ranks' shards are
 *  contiguous and in rank order; each is ceil(n / world) rounded up to a
 *  multiple of KF_SUM_PART long, except the last non-empty one (the rest)
 *  and any after it (empty). On KF_SUM_PART boundaries, so the shards'
 *  sumsq_parts are, in rank order, the whole buffer's (dist_sumsq). */
dist_range dist_shard(const dist *d, int64_t n, int rank);

/** Every rank's shard of buf (n floats in b's memory) copied to every rank,
 *  in place (each rank's own shard is the source). Blocks until done. */
void dist_allgather(dist *d, kf_backend *b, float *buf, int64_t n);

/** Every rank's shard of an n-element buffer gathered into rank 0's full
 *  (n floats in b's memory), each rank sending its own from `shard` (its
 *  dist_shard(d, n, rank).count floats in b's memory); full is only used on
 *  rank 0 and may be NULL elsewhere. Collective; blocks until done. What a
 *  checkpoint needs of ZeRO-1's optimizer state, which only rank 0 writes,
 *  without a full-size buffer on every rank (dist_allgather). */
void dist_gather_root(dist *d, kf_backend *b, float *full, const float *shard, int64_t n);

/** b->sumsq of the whole n-element buffer buf, bitwise, when each rank holds
 *  only its own shard of it: every rank's sumsq_parts of its shard, gathered
 *  and added in order. The same on every rank. */
double dist_sumsq(dist *d, kf_backend *b, const float *buf, int64_t n);

/** Sums n doubles (host) over ranks in rank order; every rank gets the result. */
void dist_allreduce_sum_f64(dist *d, double *x, int n);

/** Maximum of an int over ranks (the preemption agreement). */
int dist_allreduce_max_int(dist *d, int x);

/** Broadcasts bytes from root. */
void dist_bcast(dist *d, void *buf, size_t bytes, int root);

/** Waits for every rank. */
void dist_barrier(dist *d);

/** Finalises MPI (when initialised) and stops the watchdog. */
void dist_finalize(dist *d);

#endif
