/* kernels/cuda/cuda_backend.h — CUDA-backend-only hooks for the trainer.
 *
 * The op table itself is created by kernels_cuda_create() (kernels/kernels.h).
 * This header adds what code outside kernels/ needs to cooperate with the
 * backend's stream, e.g. NCCL all-reduce in trainer/train/dist.c. Only meaningful
 * in builds with KF_CUDA; the functions die when given another backend.
 */
#ifndef KF_KERNELS_CUDA_BACKEND_H
#define KF_KERNELS_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernels.h"

/** The cudaStream_t (as void*) every op of backend b is queued on. Work
 *  queued on it by the caller (ncclAllReduce, cudaEventRecord) is ordered
 *  with the ops; b->sync waits for it too. */
void *kernels_cuda_stream(kf_backend *b);

/** The CUDA device ordinal backend b runs on. */
int kernels_cuda_device(kf_backend *b);

/** Graph launches on backend b so far (kernels.h's graph ops; graph_end's
 *  first run included): tests show with it that graphs were used. */
int64_t kernels_cuda_graph_launches(kf_backend *b);

/** Graphs recorded on backend b so far (graph_end's that made one): tests
 *  show with it when a graph was recorded again. */
int64_t kernels_cuda_graph_records(kf_backend *b);

/** The tensor-core paths that replace SIMT kernels behind a run-time check:
 *  the 16-bit attention (cuda_attention_tc.cu) and the 16-bit
 *  batch-invariant GEMM (cuda_gemm.cu). */
typedef enum { KF_CUDA_TC_ATTN, KF_CUDA_TC_GEMM } kf_cuda_tc;

/** Ops that path ran on the tensor cores on backend b so far (an attention
 *  forward or backward, a GEMM product), their checks' included: tests show
 *  with it which kernels ran, where the emulation harness gives both paths
 *  the same bits. */
int64_t kernels_cuda_tc_launches(kf_backend *b, kf_cuda_tc path);

/** Host synchronisations the process has made so far (cudaStreamSynchronize,
 *  cudaFree, a copy with pageable memory, ...: the list in
 *  kernels/cuda/emu/include/cuda_runtime.h), as counted by the CPU emulation
 *  harness; -1 on a real GPU, whose runtime keeps no such count. Tests take
 *  the difference around a piece of work to show it never stops the host. */
int64_t kernels_cuda_host_syncs(void);

#ifdef __cplusplus
}
#endif

#endif
