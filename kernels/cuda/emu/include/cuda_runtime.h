/* kernels/cuda/emu/include/cuda_runtime.h — the CUDA runtime API subset the
 * project uses, for the CPU emulation harness (make EMU=1; docs/cuda_emulation.md).
 * Valid C and C++: C files of trainer/ include it too. Device memory is host memory,
 * every stream and event is synchronous. In C++ the device language
 * (emu_device.h) comes with it, as with nvcc. */
#ifndef KF_CUDA_EMU_RUNTIME_H
#define KF_CUDA_EMU_RUNTIME_H

#include <stddef.h>

/* this is the emulator's runtime (kernels/cuda code may ask for its counters) */
#define KF_CUDA_EMU 1

#ifdef __cplusplus
#include "kernels/cuda/emu/emu_device.h"
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNoDevice = 100,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 } cudaDeviceAttr;
typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8
} cudaFuncAttribute;

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
typedef struct emu_graph *cudaGraph_t;
typedef struct emu_graph_exec *cudaGraphExec_t;

typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
} cudaStreamCaptureMode;
typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
} cudaStreamCaptureStatus;

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
    int multiProcessorCount, major, minor, warpSize, maxThreadsPerBlock, clockRate, memoryClockRate,
        memoryBusWidth;
    int maxThreadsDim[3], maxGridSize[3];
} cudaDeviceProp;

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaStreamQuery(cudaStream_t s);

/* Stream capture (CUDA graphs). The harness records the work queued on a
 * capturing stream, and on the streams an event recorded in the capture
 * joined to it, and replays it in issue order at each cudaGraphLaunch; see
 * docs/cuda_emulation.md for what fails a capture. */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

/* emulator internals shared with the library stand-ins (emu_blas.cc, emu_nccl.c) */
/** 1 when [p, p+bytes) lies inside one cudaMalloc allocation. */
int emu_is_device(const void *p, size_t bytes);
/** 1 when s is the default stream or a live created stream. */
int emu_stream_valid(cudaStream_t s);
/** 1 when s takes part in a stream capture (its work is recorded, not run):
 *  the library stand-ins that do not model capture (NCCL) refuse it. */
int emu_stream_capturing(cudaStream_t s);
/** Host synchronisations so far: calls that block the host until queued
 *  device work is done, or may on a GPU — cudaDeviceSynchronize,
 *  cudaStreamSynchronize, cudaEventSynchronize, cudaMemcpy, cudaMemcpyAsync
 *  with pageable (not cudaMallocHost) host memory, cudaMalloc, cudaFree,
 *  cudaMallocHost, cudaFreeHost. */
long long emu_host_syncs(void);
/** Aborts with "cuda-emu: error: <msg>". */
void emu_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), __noreturn__));

#ifdef __cplusplus
}

/* typed pointers, as the real runtime's C++ overloads */
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) {
    return cudaMalloc((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes) {
    return cudaMallocHost((void **)p, bytes);
}

cudaError_t emu_func_set_attribute(const void *f, cudaFuncAttribute a, int v);
template <typename F>
static inline cudaError_t cudaFuncSetAttribute(F *f, cudaFuncAttribute a, int v) {
    return emu_func_set_attribute((const void *)f, a, v);
}
#endif

#endif
