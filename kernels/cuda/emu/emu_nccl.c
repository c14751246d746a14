/* kernels/cuda/emu/emu_nccl.c — NCCL for the CPU emulation harness
 * (docs/cuda_emulation.md): a communicator of one rank works in-process; one
 * of N ranks maps to MPI_COMM_WORLD (one rank per process, mpirun -np N) in
 * builds with MPI. Buffers must be device memory, as NCCL requires. */
#include <stdlib.h>
#include <string.h>

#include <nccl.h>
#ifdef KF_MPI
#include <mpi.h>
#endif

struct emu_nccl {
    int nranks, rank;
};

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    strcpy(id->internal, "cuda-emu");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || rank < 0 || rank >= nranks || strcmp(id.internal, "cuda-emu"))
        return ncclInvalidArgument;
    if (nranks > 1) {
#ifdef KF_MPI
        int init = 0, world = 0, me = 0;
        MPI_Initialized(&init);
        if (!init) return ncclInvalidUsage;
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        if (world != nranks || me != rank) return ncclInvalidUsage; /* one rank per MPI process */
#else
        return ncclInvalidUsage;
#endif
    }
    *comm = malloc(sizeof **comm);
    (*comm)->nranks = nranks;
    (*comm)->rank = rank;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    free(comm);
    return ncclSuccess;
}

/* Checks shared by the collectives: the float sum (or copy) the project
 * uses, a live stream that is not capturing (NCCL in a graph is not
 * modelled: the collective would run at capture, not at each launch),
 * device buffers; `recv` is only checked when used. */
static ncclResult_t check_args(const void *send, const void *recv, size_t count,
                               ncclDataType_t type, ncclComm_t comm, cudaStream_t s) {
    if (!comm || type != ncclFloat || !emu_stream_valid(s)) return ncclInvalidArgument;
    if (emu_stream_capturing(s)) return ncclInvalidUsage;
    size_t bytes = count * sizeof(float);
    if (count && (!emu_is_device(send, bytes) || (recv && !emu_is_device(recv, bytes))))
        return ncclInvalidArgument;
    return ncclSuccess;
}

/* The float sum over the ranks by MPI, to every rank (root < 0) or to root,
 * in pieces of at most 2^30 (MPI counts are int); `me`: this rank receives. */
static ncclResult_t mpi_sum(const void *send, void *recv, size_t count, int root, int me) {
#ifdef KF_MPI
    for (size_t off = 0; off < count; off += 1 << 30) {
        int n = (int)(count - off < (1u << 30) ? count - off : 1u << 30);
        const float *sp = (const float *)send + off;
        float *rp = me ? (float *)recv + off : NULL;
        const void *in = sp == rp ? MPI_IN_PLACE : sp;
        int rc = root < 0 ? MPI_Allreduce(in, rp, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
                          : MPI_Reduce(in, rp, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return ncclSystemError;
    }
    return ncclSuccess;
#else
    (void)send, (void)recv, (void)count, (void)root, (void)me;
    return ncclInvalidUsage;
#endif
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
    if (op != ncclSum) return ncclInvalidArgument; /* the one the project uses */
    ncclResult_t r = check_args(send, recv, count, type, comm, s);
    if (r != ncclSuccess || !count) return r;
    if (comm->nranks == 1) {
        if (send != recv) memmove(recv, send, count * sizeof(float));
        return ncclSuccess;
    }
    return mpi_sum(send, recv, count, -1, 1);
}

/* ZeRO-1's reduce-scatter, one reduce per owner (trainer/train/dist.c). */
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s) {
    if (op != ncclSum || !comm || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
    int me = comm->rank == root; /* recv is only the root's */
    ncclResult_t r = check_args(send, me ? recv : NULL, count, type, comm, s);
    if (r != ncclSuccess || !count) return r;
    if (comm->nranks == 1) {
        if (send != recv) memmove(recv, send, count * sizeof(float));
        return ncclSuccess;
    }
    return mpi_sum(send, recv, count, root, me);
}

/* ZeRO-1's all-gather, one broadcast per shard from its owner. */
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s) {
    if (!comm || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
    int me = comm->rank == root; /* send is only the root's */
    ncclResult_t r = check_args(me ? send : recv, recv, count, type, comm, s);
    if (r != ncclSuccess || !count) return r;
    if (me && send != recv) memmove(recv, send, count * sizeof(float));
    if (comm->nranks == 1) return ncclSuccess;
#ifdef KF_MPI
    for (size_t off = 0; off < count; off += 1 << 30) {
        int n = (int)(count - off < (1u << 30) ? count - off : 1u << 30);
        if (MPI_Bcast((float *)recv + off, n, MPI_FLOAT, root, MPI_COMM_WORLD) != MPI_SUCCESS)
            return ncclSystemError;
    }
    return ncclSuccess;
#else
    return ncclInvalidUsage;
#endif
}

/* Point to point, the checkpoint's gather of ZeRO-1 shards to rank 0: a
 * blocking MPI_Send/MPI_Recv pair per call, so the ranks must make their
 * calls in matching order (the project's gather does: rank 0 receives from
 * 1, 2, ... in turn, each other rank sends once). */
static ncclResult_t p2p(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                        cudaStream_t s, int send) {
    if (!comm || peer < 0 || peer >= comm->nranks || peer == comm->rank) return ncclInvalidArgument;
    ncclResult_t r = check_args(buf, NULL, count, type, comm, s);
    if (r != ncclSuccess || !count) return r;
#ifdef KF_MPI
    for (size_t off = 0; off < count; off += 1 << 30) {
        int n = (int)(count - off < (1u << 30) ? count - off : 1u << 30);
        float *p = (float *)buf + off;
        int rc = send ? MPI_Send(p, n, MPI_FLOAT, peer, 9, MPI_COMM_WORLD)
                      : MPI_Recv(p, n, MPI_FLOAT, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return ncclSystemError;
    }
    return ncclSuccess;
#else
    return ncclInvalidUsage;
#endif
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t s) {
    return p2p((void *)send, count, type, peer, comm, s, 1);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s) {
    return p2p(recv, count, type, peer, comm, s, 0);
}

/* Streams are synchronous here: each call of a group completes when made,
 * in the same order on every rank, so grouping changes nothing. */
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    }
    return "unknown result code";
}
