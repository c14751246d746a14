/* trainer/dist.h — data-parallel communication: MPI between processes, NCCL
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
 * Dead ranks: every collective is bracketed by a deadline. A watchdog thread
 * checks it twice a second; when a collective has blocked for longer than
 * `timeout` seconds (a peer was killed, stopped, or its node vanished) the
 * process prints which collective and exits with status 1, and the launcher
 * (mpirun/srun) then tears the job down. mpirun also ends the job by itself as
 * soon as a rank exits abnormally; the watchdog covers peers that hang
 * without exiting.
 */
#ifndef KF_TRAINER_DIST_H
#define KF_TRAINER_DIST_H

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

/** Sums buf (n floats in b's memory) over all ranks, in place, in the fixed
 * order described above. No-op when world == 1. */
void dist_allreduce_grads(dist *d, kf_backend *b, float *buf, int64_t n);

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
