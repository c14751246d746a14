/* kernels/cuda/emu/include/nccl.h — the NCCL subset the project uses, for the
 * CPU emulation harness (emu_nccl.c): one rank in-process, or one rank per
 * MPI process (mpirun -np N) through MPI_Allreduce, MPI_Reduce, MPI_Bcast and
 * MPI_Send/MPI_Recv in builds with MPI. */
#ifndef KF_CUDA_EMU_NCCL_H
#define KF_CUDA_EMU_NCCL_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5
} ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 } ncclRedOp_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef struct emu_nccl *ncclComm_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
const char *ncclGetErrorString(ncclResult_t r);

#ifdef __cplusplus
}
#endif

#endif
