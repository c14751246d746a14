/* trainer/train/dist.c — MPI / NCCL collectives with a watchdog (see dist.h). */
#include "trainer/train/dist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef KF_MPI
#include <mpi.h>
#endif
#ifdef KF_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/cuda_backend.h"
#endif

#include "common/clock.h"

/* Floats per chain segment: large enough to amortise latency, small enough
 * that the chain's ranks work in a pipeline. */
#define CHAIN_SEG (1 << 18)

typedef struct bucket {
    int64_t off, count;
} bucket;

typedef struct dist_impl {
    pthread_t wd;
    int wd_running;
    pthread_mutex_t mu;
    double deadline;  /* monotonic seconds; 0 = no collective in flight */
    const char *what; /* the collective in flight */
    int stop;
    float *seg; /* receive buffer of one chain segment */
    /* overlapped gradient all-reduce (dist_grads_*), set by the main thread */
    int active;  /* between dist_grads_begin and dist_grads_wait */
    int gpu;     /* the buffer is on the CUDA backend */
    int scatter; /* ZeRO-1: reduce-scatter instead of all-reduce */
    kf_backend *gb;
    float *gbuf;
    int64_t gn, gcap; /* buffer and bucket sizes (floats) */
    int64_t covered;  /* floats reported ready */
    int64_t lo, hi;   /* ready range not yet launched (lo == hi: none) */
    /* launched buckets, in launch order; the comm thread reduces q[ndone..nq) */
    pthread_mutex_t qmu;
    pthread_cond_t qwork, qdone;
    bucket *q;
    int nq, qcap, ndone;
    int serialized; /* MPI allows calls from a second thread, one at a time */
    pthread_t comm;
    int comm_running, comm_stop;
#ifdef KF_CUDA
    ncclComm_t nccl;
    int have_nccl;
    cudaStream_t nstream; /* NCCL's stream, ordered after the compute stream by events */
    cudaEvent_t ev_ready, ev_bwd, ev_done;
#endif
} dist_impl;

static void *watchdog_main(void *arg) {
    dist *d = arg;
    dist_impl *im = d->impl;
    for (;;) {
        usleep(500 * 1000);
        pthread_mutex_lock(&im->mu);
        int stop = im->stop;
        double dl = im->deadline;
        const char *what = im->what;
        int rank = d->rank, world = d->world;
        pthread_mutex_unlock(&im->mu);
        if (stop) return NULL;
        if (dl > 0 && clock_now_s() > dl) {
            /* The main thread is blocked inside MPI/NCCL, so only a hard exit
             * ends it; the launcher sees status 1 and stops the other ranks. */
            fprintf(stderr,
                    "kf: error: rank %d/%d: %s blocked for more than %.0f s: a rank died or "
                    "its node is unreachable; exiting so the job ends (resume from the last "
                    "checkpoint with --resume)\n",
                    rank, world, what, d->timeout);
            fflush(stderr);
            _exit(KF_EXIT_ERROR);
        }
    }
}

static inline void arm(dist *d, const char *what) {
    dist_impl *im = d->impl;
    pthread_mutex_lock(&im->mu);
    im->deadline = clock_now_s() + d->timeout;
    im->what = what;
    pthread_mutex_unlock(&im->mu);
}

static inline void disarm(dist *d) {
    dist_impl *im = d->impl;
    pthread_mutex_lock(&im->mu);
    im->deadline = 0;
    pthread_mutex_unlock(&im->mu);
}

/* arm() for the main thread's collectives, which must not run while the
 * comm thread may be inside MPI (at most one thread in MPI at a time). */
static inline void arm_main(dist *d, const char *what) {
    dist_impl *im = d->impl;
    KF_CHECK(!im->active,
             "dist: %s during an overlapped gradient all-reduce (call dist_grads_wait "
             "first)",
             what);
    arm(d, what);
}

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

/* This process's rank as the launcher says (0 when not under a launcher):
 * the watchdog's messages need it before MPI can be asked. */
static int launcher_rank(void) {
    const char *v[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (getenv(v[i]) && *getenv(v[i])) return env_int(v[i], 0);
    return 0;
}

static void start_watchdog(dist *d) {
    dist_impl *im = d->impl;
    KF_CHECK(pthread_create(&im->wd, NULL, watchdog_main, d) == 0, "dist: cannot start watchdog");
    im->wd_running = 1;
}

/* Ranks the launcher says it started (1 when not under a launcher). */
static int launcher_world(void) {
    int w = env_int("OMPI_COMM_WORLD_SIZE", 0);
    if (!w) w = env_int("PMI_SIZE", 0);
    if (!w && getenv("PMIX_RANK")) w = env_int("SLURM_NTASKS", 1); /* srun --mpi=pmix */
    return w > 0 ? w : 1;
}

const char *dist_build_info(void) {
#ifdef KF_MPI
    return "MPI";
#else
    return "no MPI (single process only)";
#endif
}

int dist_init(dist *d, int *argc, char ***argv, double timeout, kf_err *err) {
    memset(d, 0, sizeof *d);
    KF_CHECK(timeout > 0, "dist_init: timeout must be positive");
    d->world = d->local_world = 1;
    d->timeout = timeout;
    dist_impl *im = kf_calloc(1, sizeof *im);
    d->impl = im;
    pthread_mutex_init(&im->mu, NULL);
    pthread_mutex_init(&im->qmu, NULL);
    pthread_cond_init(&im->qwork, NULL);
    pthread_cond_init(&im->qdone, NULL);
    int lw = launcher_world();
#ifdef KF_MPI
    if (lw > 1 || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK")) {
        /* SERIALIZED: the comm thread runs the gradient chain while the main
         * thread computes; the two never call MPI at the same time. */
        /* The start-up is a collective too: a peer that never starts, or a
         * transport that cannot reach it (a wrong OMPI_MCA_btl_tcp_if_include),
         * blocks MPI_Init's exchange or the first message, in
         * MPI_Comm_split_type; the watchdog ends that like any other. */
        d->rank = launcher_rank(), d->world = lw;
        if (lw > 1) start_watchdog(d);
        arm(d, "MPI start-up (MPI_Init, MPI_Comm_split_type)");
        int provided, rank, world;
        MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        im->serialized = provided >= MPI_THREAD_SERIALIZED;
        /* Errors return to us instead of aborting inside MPI, so a failed
         * peer becomes a message and exit 1 (KF_CHECK below). */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        pthread_mutex_lock(&im->mu); /* the watchdog reads them for its message */
        d->rank = rank, d->world = world;
        pthread_mutex_unlock(&im->mu);
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
        MPI_Comm_rank(local, &d->local_rank);
        MPI_Comm_size(local, &d->local_world);
        MPI_Comm_free(&local);
        disarm(d);
        d->mpi = 1;
        im->seg = kf_malloc(CHAIN_SEG * sizeof(float));
    }
#else
    (void)argc, (void)argv;
    if (lw > 1) {
        dist_finalize(d);
        return kf_err_set(err,
                          "launched as %d ranks, but this kf was built without MPI (install "
                          "libopenmpi-dev and rebuild); it can only run as one process",
                          lw);
    }
#endif
    if (d->world > 1 && !im->wd_running) start_watchdog(d);
    return 0;
}

#ifdef KF_MPI
#define MPI_OK(call, what)                                                                         \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char s_[MPI_MAX_ERROR_STRING];                                                         \
            int n_;                                                                                \
            MPI_Error_string(rc_, s_, &n_);                                                        \
            KF_FATAL("rank %d: %s failed: %s (a rank died?)", d->rank, what, s_);                  \
        }                                                                                          \
    } while (0)
#endif

int dist_attach_backend(dist *d, kf_backend *b, kf_err *err) {
    if (strcmp(b->name, "cuda")) return 0;
#ifdef KF_CUDA
    dist_impl *im = d->impl;
    if (d->world == 1) return 0;
    ncclUniqueId id;
    if (d->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
        return kf_err_set(err, "ncclGetUniqueId failed");
    dist_bcast(d, &id, sizeof id, 0);
    arm_main(d, "ncclCommInitRank");
    ncclResult_t r = ncclCommInitRank(&im->nccl, d->world, id, d->rank);
    disarm(d);
    if (r != ncclSuccess) return kf_err_set(err, "ncclCommInitRank: %s", ncclGetErrorString(r));
    im->have_nccl = 1;
    /* on the backend's device (kernels_cuda_create made it current); at the
     * highest priority, so that a bucket's all-reduce is scheduled ahead of
     * the backward kernels it overlaps and the wait after the backward shrinks */
    int least, greatest;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess ||
        cudaStreamCreateWithPriority(&im->nstream, cudaStreamNonBlocking, greatest) !=
            cudaSuccess ||
        cudaEventCreateWithFlags(&im->ev_ready, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreate(&im->ev_bwd) != cudaSuccess || cudaEventCreate(&im->ev_done) != cudaSuccess)
        return kf_err_set(err, "dist: cannot create the NCCL stream and its events");
    return 0;
#else
    return kf_err_set(err, "the cuda backend needs a build with CUDA=1");
#endif
}

dist_range dist_shard(const dist *d, int64_t n, int rank) {
    int64_t per = (n + d->world - 1) / d->world;
    per = (per + KF_SUM_PART - 1) / KF_SUM_PART * KF_SUM_PART;
    int64_t lo = (int64_t)rank * per < n ? (int64_t)rank * per : n;
    int64_t hi = lo + per < n ? lo + per : n;
    return (dist_range){lo, hi - lo};
}

#if defined(KF_MPI) || defined(KF_CUDA)
/* The part of [off, off + count) in rank r's shard of the gradient buffer. */
static dist_range owned(dist *d, int64_t off, int64_t count, int r) {
    dist_range sh = dist_shard(d, ((dist_impl *)d->impl)->gn, r);
    int64_t lo = off > sh.off ? off : sh.off, hi = off + count;
    if (hi > sh.off + sh.count) hi = sh.off + sh.count;
    return (dist_range){lo, hi > lo ? hi - lo : 0};
}
#endif

#ifdef KF_MPI
/* MPI counts are int: ranges go in pieces of at most 2^30 elements. */
#define MPI_PIECE (1 << 30)

/* The length of the piece of [0, n) that starts at o. */
static int piece_len(int64_t n, int64_t o) { return (int)(n - o < MPI_PIECE ? n - o : MPI_PIECE); }

/* Broadcasts x[0, n) from root, piece by piece. */
static void bcast_range(dist *d, float *x, int64_t n, int root, const char *what) {
    for (int64_t o = 0; o < n; o += MPI_PIECE)
        MPI_OK(MPI_Bcast(x + o, piece_len(n, o), MPI_FLOAT, root, MPI_COMM_WORLD), what);
}

/* ((g0 + g1) + g2) + ...: rank r receives the partial sum of ranks < r for
 * each segment, adds its own values (partial + own, in that order) and passes
 * it on; the last rank then holds the total and broadcasts it, or (ZeRO-1)
 * sends each owner its part. */
static void chain_allreduce(dist *d, float *buf, int64_t off, int64_t n) {
    dist_impl *im = d->impl;
    for (int64_t o = 0; o < n; o += CHAIN_SEG) {
        int cnt = (int)(n - o < CHAIN_SEG ? n - o : CHAIN_SEG);
        float *x = buf + off + o;
        if (d->rank > 0) {
            MPI_OK(MPI_Recv(im->seg, cnt, MPI_FLOAT, d->rank - 1, 7, MPI_COMM_WORLD,
                            MPI_STATUS_IGNORE),
                   "all-reduce (receive)");
            for (int i = 0; i < cnt; i++) x[i] = im->seg[i] + x[i];
        }
        if (d->rank < d->world - 1)
            MPI_OK(MPI_Send(x, cnt, MPI_FLOAT, d->rank + 1, 7, MPI_COMM_WORLD),
                   "all-reduce (send)");
    }
    if (!im->scatter) {
        bcast_range(d, buf + off, n, d->world - 1, "all-reduce (bcast)");
        return;
    }
    for (int r = 0; r < d->world - 1; r++) {
        if (d->rank != r && d->rank != d->world - 1) continue;
        dist_range p = owned(d, off, n, r);
        for (int64_t o = 0; o < p.count; o += MPI_PIECE) {
            int cnt = piece_len(p.count, o);
            float *x = buf + p.off + o;
            if (d->rank == r)
                MPI_OK(
                    MPI_Recv(x, cnt, MPI_FLOAT, d->world - 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                    "reduce-scatter (receive)");
            else MPI_OK(MPI_Send(x, cnt, MPI_FLOAT, r, 8, MPI_COMM_WORLD), "reduce-scatter (send)");
        }
    }
}
#endif

#ifdef KF_MPI
/* One bucket's chain, under the watchdog's deadline. */
static void reduce_bucket(dist *d, bucket q) {
    dist_impl *im = d->impl;
    arm(d, im->scatter ? "reduce-scatter(grads)" : "all-reduce(grads)");
    chain_allreduce(d, im->gbuf, q.off, q.count);
    disarm(d);
}

/* Reduces launched buckets in launch order (the same on every rank, so the
 * ranks' chains match up) while the main thread goes on with the backward. */
static void *comm_main(void *arg) {
    dist *d = arg;
    dist_impl *im = d->impl;
    pthread_mutex_lock(&im->qmu);
    for (;;) {
        while (!im->comm_stop && im->ndone == im->nq) pthread_cond_wait(&im->qwork, &im->qmu);
        if (im->comm_stop) break;
        bucket q = im->q[im->ndone];
        pthread_mutex_unlock(&im->qmu);
        reduce_bucket(d, q);
        pthread_mutex_lock(&im->qmu);
        im->ndone++;
        pthread_cond_signal(&im->qdone);
    }
    pthread_mutex_unlock(&im->qmu);
    return NULL;
}
#endif

#ifdef KF_CUDA
#define CUDA_OK(call, what) KF_CHECK((call) == cudaSuccess, "dist: %s failed", what)
#endif

/* Starts the all-reduce of grads[off, off + count). */
static void launch(dist *d, int64_t off, int64_t count) {
    dist_impl *im = d->impl;
#ifdef KF_CUDA
    if (im->gpu) {
        /* NCCL's stream waits for the backward ops issued so far, then
         * reduces while the compute stream runs the rest of the backward. */
        cudaStream_t cs = (cudaStream_t)kernels_cuda_stream(im->gb);
        CUDA_OK(cudaEventRecord(im->ev_ready, cs), "cudaEventRecord");
        CUDA_OK(cudaStreamWaitEvent(im->nstream, im->ev_ready, 0), "cudaStreamWaitEvent");
        ncclResult_t r;
        if (!im->scatter) {
            arm(d, "ncclAllReduce(grads)");
            r = ncclAllReduce(im->gbuf + off, im->gbuf + off, (size_t)count, ncclFloat, ncclSum,
                              im->nccl, im->nstream);
        } else { /* one reduce per owner of a part of the bucket */
            arm(d, "ncclReduce(grads)");
            r = ncclGroupStart();
            for (int o = 0; o < d->world && r == ncclSuccess; o++) {
                dist_range p = owned(d, off, count, o);
                if (p.count)
                    r = ncclReduce(im->gbuf + p.off, im->gbuf + p.off, (size_t)p.count, ncclFloat,
                                   ncclSum, o, im->nccl, im->nstream);
            }
            ncclResult_t e = ncclGroupEnd();
            if (r == ncclSuccess) r = e;
        }
        disarm(d);
        KF_CHECK(r == ncclSuccess, "NCCL gradient reduction: %s", ncclGetErrorString(r));
        return;
    }
#endif
    pthread_mutex_lock(&im->qmu);
    if (im->nq == im->qcap) {
        im->qcap = im->qcap ? 2 * im->qcap : 64;
        im->q = kf_realloc(im->q, (size_t)im->qcap * sizeof *im->q);
    }
    im->q[im->nq++] = (bucket){off, count};
    pthread_cond_signal(&im->qwork);
    pthread_mutex_unlock(&im->qmu);
}

static void flush(dist *d) {
    dist_impl *im = d->impl;
    if (im->hi > im->lo) launch(d, im->lo, im->hi - im->lo);
    im->lo = im->hi = 0;
}

void dist_grads_begin(dist *d, kf_backend *b, float *buf, int64_t n, int64_t bucket_floats,
                      int scatter) {
    if (d->world == 1) return;
    dist_impl *im = d->impl;
    KF_CHECK(!im->active, "dist_grads_begin: the previous all-reduce was not waited for");
    KF_CHECK(bucket_floats > 0, "dist_grads_begin: bucket size must be positive");
    im->gpu = !strcmp(b->name, "cuda");
#ifdef KF_CUDA
    KF_CHECK(!im->gpu || im->have_nccl, "dist: NCCL not set up (call dist_attach_backend)");
#endif
#ifdef KF_MPI
    KF_CHECK(im->gpu || !strcmp(b->name, "cpu"), "dist: backend %s has no all-reduce path",
             b->name);
    if (!im->gpu && im->serialized && !im->comm_running) {
        KF_CHECK(pthread_create(&im->comm, NULL, comm_main, d) == 0,
                 "dist: cannot start comm thread");
        im->comm_running = 1;
    }
#endif
    im->gb = b, im->gbuf = buf, im->gn = n, im->gcap = bucket_floats;
    im->scatter = scatter;
    im->covered = 0, im->lo = im->hi = 0;
    pthread_mutex_lock(&im->qmu);
    im->nq = im->ndone = 0;
    pthread_mutex_unlock(&im->qmu);
    im->active = 1;
}

void dist_grads_ready(dist *d, int64_t off, int64_t count) {
    if (d->world == 1 || count == 0) return;
    dist_impl *im = d->impl;
    KF_CHECK(im->active && off >= 0 && count > 0 && off + count <= im->gn,
             "dist_grads_ready: [%lld, +%lld) outside an active all-reduce", (long long)off,
             (long long)count);
    im->covered += count;
    /* grow the pending range when adjacent, else launch it and start anew */
    if (im->hi > im->lo && off + count == im->lo) im->lo = off;
    else if (im->hi > im->lo && off == im->hi) im->hi = off + count;
    else {
        flush(d);
        im->lo = off, im->hi = off + count;
    }
    if (im->hi - im->lo >= im->gcap) flush(d);
}

double dist_grads_wait(dist *d) {
    if (d->world == 1) return 0;
    dist_impl *im = d->impl;
    KF_CHECK(im->active, "dist_grads_wait: no all-reduce in flight");
    flush(d);
    KF_CHECK(im->covered == im->gn, "dist_grads_wait: %lld of %lld gradients reported ready",
             (long long)im->covered, (long long)im->gn);
    double t0 = clock_now_s();
#ifdef KF_CUDA
    if (im->gpu) {
        cudaStream_t cs = (cudaStream_t)kernels_cuda_stream(im->gb);
        CUDA_OK(cudaEventRecord(im->ev_bwd, cs), "cudaEventRecord");
        CUDA_OK(cudaEventRecord(im->ev_done, im->nstream), "cudaEventRecord");
        CUDA_OK(cudaStreamWaitEvent(cs, im->ev_done, 0), "cudaStreamWaitEvent");
        /* the host blocks here (not in a later sync) so a dead peer trips the watchdog */
        arm(d, im->scatter ? "ncclReduce(grads)" : "ncclAllReduce(grads)");
        CUDA_OK(cudaEventSynchronize(im->ev_done), "cudaEventSynchronize(NCCL)");
        disarm(d);
        CUDA_OK(cudaEventSynchronize(im->ev_bwd), "cudaEventSynchronize");
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, im->ev_bwd, im->ev_done), "cudaEventElapsedTime");
        im->active = 0;
        return ms > 0 ? ms * 1e-3 : 0;
    }
#endif
#ifdef KF_MPI
    if (im->comm_running) {
        pthread_mutex_lock(&im->qmu);
        while (im->ndone < im->nq) pthread_cond_wait(&im->qdone, &im->qmu);
        pthread_mutex_unlock(&im->qmu);
    } else { /* no second thread allowed in MPI: reduce everything now */
        for (; im->ndone < im->nq; im->ndone++) reduce_bucket(d, im->q[im->ndone]);
    }
#endif
    im->active = 0;
    return clock_now_s() - t0;
}

#ifdef KF_CUDA
/* Starts a collective on NCCL's stream: after the compute stream's work so
 * far, under the watchdog (what: its name). Returns the compute stream. */
static cudaStream_t nccl_enter(dist *d, kf_backend *b, const char *what) {
    dist_impl *im = d->impl;
    KF_CHECK(im->have_nccl, "dist: NCCL not set up (call dist_attach_backend)");
    cudaStream_t cs = (cudaStream_t)kernels_cuda_stream(b);
    CUDA_OK(cudaEventRecord(im->ev_ready, cs), "cudaEventRecord");
    CUDA_OK(cudaStreamWaitEvent(im->nstream, im->ev_ready, 0), "cudaStreamWaitEvent");
    arm_main(d, what);
    return cs;
}

/* Ends it: the NCCL group's results r (its calls) and e (ncclGroupEnd)
 * checked, then the compute stream and the host wait for it, the host under
 * the watchdog. */
static void nccl_leave(dist *d, cudaStream_t cs, ncclResult_t r, ncclResult_t e, const char *what) {
    dist_impl *im = d->impl;
    KF_CHECK(r == ncclSuccess && e == ncclSuccess, "%s: %s", what,
             ncclGetErrorString(r != ncclSuccess ? r : e));
    CUDA_OK(cudaEventRecord(im->ev_done, im->nstream), "cudaEventRecord");
    CUDA_OK(cudaStreamWaitEvent(cs, im->ev_done, 0), "cudaStreamWaitEvent");
    CUDA_OK(cudaEventSynchronize(im->ev_done), "cudaEventSynchronize(NCCL)");
    disarm(d);
}
#endif

void dist_allgather(dist *d, kf_backend *b, float *buf, int64_t n) {
    if (d->world == 1) return;
#ifdef KF_CUDA
    dist_impl *im = d->impl;
    if (!strcmp(b->name, "cuda")) {
        /* the compute stream waits for it, and so does the host, under the
         * watchdog */
        cudaStream_t cs = nccl_enter(d, b, "ncclBroadcast(weights)");
        ncclResult_t r = ncclGroupStart();
        for (int o = 0; o < d->world && r == ncclSuccess; o++) {
            dist_range sh = dist_shard(d, n, o);
            if (sh.count)
                r = ncclBroadcast(buf + sh.off, buf + sh.off, (size_t)sh.count, ncclFloat, o,
                                  im->nccl, im->nstream);
        }
        nccl_leave(d, cs, r, ncclGroupEnd(), "ncclBroadcast");
        return;
    }
#endif
#ifdef KF_MPI
    KF_CHECK(!strcmp(b->name, "cpu"), "dist: backend %s has no all-gather path", b->name);
    arm_main(d, "all-gather(weights)");
    for (int o = 0; o < d->world; o++) {
        dist_range sh = dist_shard(d, n, o);
        bcast_range(d, buf + sh.off, sh.count, o, "all-gather (bcast)");
    }
    disarm(d);
#else
    (void)b, (void)buf, (void)n;
#endif
}

void dist_gather_root(dist *d, kf_backend *b, float *full, const float *shard, int64_t n) {
    dist_range me = dist_shard(d, n, d->rank);
    if (d->rank == 0 && me.count)
        b->copy(b, full + me.off, shard, (size_t)me.count * sizeof(float));
    if (d->world == 1) return;
#ifdef KF_CUDA
    dist_impl *im = d->impl;
    if (!strcmp(b->name, "cuda")) {
        cudaStream_t cs = nccl_enter(d, b, "ncclSend/ncclRecv(checkpoint shards)");
        ncclResult_t r = ncclGroupStart();
        for (int o = 1; o < d->world && r == ncclSuccess; o++) {
            dist_range sh = dist_shard(d, n, o);
            if (!sh.count) continue;
            if (d->rank == 0)
                r = ncclRecv(full + sh.off, (size_t)sh.count, ncclFloat, o, im->nccl, im->nstream);
            else if (d->rank == o)
                r = ncclSend(shard, (size_t)sh.count, ncclFloat, 0, im->nccl, im->nstream);
        }
        nccl_leave(d, cs, r, ncclGroupEnd(), "ncclSend/ncclRecv");
        return;
    }
#endif
#ifdef KF_MPI
    KF_CHECK(!strcmp(b->name, "cpu"), "dist: backend %s has no gather path", b->name);
    arm_main(d, "gather(checkpoint shards)");
    for (int o = 1; o < d->world; o++) {
        dist_range sh = dist_shard(d, n, o);
        for (int64_t p = 0; p < sh.count && (d->rank == 0 || d->rank == o); p += MPI_PIECE) {
            if (d->rank == 0)
                MPI_OK(MPI_Recv(full + sh.off + p, piece_len(sh.count, p), MPI_FLOAT, o, 9,
                                MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                       "gather (recv)");
            else
                MPI_OK(MPI_Send(shard + p, piece_len(sh.count, p), MPI_FLOAT, 0, 9, MPI_COMM_WORLD),
                       "gather (send)");
        }
    }
    disarm(d);
#else
    (void)full, (void)shard;
#endif
}

double dist_sumsq(dist *d, kf_backend *b, const float *buf, int64_t n) {
    if (d->world == 1) return b->sumsq(b, buf, n);
    int64_t np = (n + KF_SUM_PART - 1) / KF_SUM_PART;
    double *parts = kf_calloc((size_t)(np ? np : 1), sizeof *parts), s = 0.0;
    dist_range me = dist_shard(d, n, d->rank);
    if (me.count) b->sumsq_parts(b, parts + me.off / KF_SUM_PART, buf + me.off, me.count);
#ifdef KF_MPI
    KF_CHECK(np < INT32_MAX, "dist_sumsq: %lld parts is too many", (long long)np);
    int *cnt = kf_malloc((size_t)d->world * sizeof *cnt),
        *at = kf_malloc((size_t)d->world * sizeof *at);
    for (int r = 0; r < d->world; r++) {
        dist_range sh = dist_shard(d, n, r);
        at[r] = (int)(sh.off / KF_SUM_PART);
        cnt[r] = (int)((sh.count + KF_SUM_PART - 1) / KF_SUM_PART);
    }
    arm_main(d, "all-gather(norm)");
    MPI_OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, parts, cnt, at, MPI_DOUBLE,
                          MPI_COMM_WORLD),
           "allgatherv");
    disarm(d);
    free(cnt), free(at);
#endif
    for (int64_t i = 0; i < np; i++) s += parts[i];
    free(parts);
    return s;
}

void dist_allreduce_sum_f64(dist *d, double *x, int n) {
    if (d->world == 1) return;
#ifdef KF_MPI
    /* Gathered to every rank and summed in rank order: fixed order, tiny n. */
    double *all = kf_malloc((size_t)n * d->world * sizeof *all);
    arm_main(d, "all-reduce(f64)");
    MPI_OK(MPI_Allgather(x, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD), "allgather");
    disarm(d);
    for (int i = 0; i < n; i++) {
        double s = all[i];
        for (int r = 1; r < d->world; r++) s += all[(size_t)r * n + i];
        x[i] = s;
    }
    free(all);
#endif
}

int dist_allreduce_max_int(dist *d, int x) {
    if (d->world == 1) return x;
    int y = x;
#ifdef KF_MPI
    arm_main(d, "all-reduce(max)");
    MPI_OK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "allreduce max");
    disarm(d);
#endif
    return y;
}

void dist_bcast(dist *d, void *buf, size_t bytes, int root) {
    if (d->world == 1) return;
#ifdef KF_MPI
    KF_CHECK(bytes < (1u << 31), "dist_bcast: %zu bytes is too large", bytes);
    arm_main(d, "broadcast");
    MPI_OK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
    disarm(d);
#else
    (void)buf, (void)bytes, (void)root;
#endif
}

void dist_barrier(dist *d) {
    if (d->world == 1) return;
#ifdef KF_MPI
    arm_main(d, "barrier");
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD), "barrier");
    disarm(d);
#endif
}

void dist_finalize(dist *d) {
    dist_impl *im = d->impl;
    if (!im) return;
    if (im->comm_running) {
        pthread_mutex_lock(&im->qmu);
        im->comm_stop = 1;
        pthread_cond_signal(&im->qwork);
        pthread_mutex_unlock(&im->qmu);
        pthread_join(im->comm, NULL);
    }
    if (im->wd_running) {
        pthread_mutex_lock(&im->mu);
        im->stop = 1;
        pthread_mutex_unlock(&im->mu);
        pthread_join(im->wd, NULL);
    }
#ifdef KF_CUDA
    if (im->have_nccl) {
        cudaEventDestroy(im->ev_ready), cudaEventDestroy(im->ev_bwd), cudaEventDestroy(im->ev_done);
        if (im->nstream) cudaStreamDestroy(im->nstream);
        ncclCommDestroy(im->nccl);
    }
#endif
#ifdef KF_MPI
    if (d->mpi) MPI_Finalize();
#endif
    pthread_mutex_destroy(&im->mu);
    pthread_mutex_destroy(&im->qmu);
    pthread_cond_destroy(&im->qwork);
    pthread_cond_destroy(&im->qdone);
    free(im->q);
    free(im->seg);
    free(im);
    d->impl = NULL;
}
