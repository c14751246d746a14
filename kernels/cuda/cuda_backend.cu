/* kernels/cuda/cuda_backend.cu — the CUDA backend's table, memory ops, scratch
 * buffers and kernels_cuda_create(). The ops live in the other cuda_*.cu files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"

/* Partials of host-returned reductions (cuda_optim.cu uses at most this many). */
#define CU_RED_SLOTS 1024

void *cu_scratch(kf_backend *b, int slot, size_t bytes) {
    cuda_impl *im = cu_impl(b);
    if (im->scratch_len[slot] < bytes) {
        CUDA_OK(cudaStreamSynchronize(im->stream));
        if (slot == CU_SCRATCH_HOST) {
            if (im->scratch[slot]) CUDA_OK(cudaFreeHost(im->scratch[slot]));
            CUDA_OK(cudaMallocHost(&im->scratch[slot], bytes));
        } else {
            if (im->scratch[slot]) CUDA_OK(cudaFree(im->scratch[slot]));
            CUDA_OK(cudaMalloc(&im->scratch[slot], bytes));
        }
        im->scratch_len[slot] = bytes;
    }
    return im->scratch[slot];
}

void *cu_alloc(kf_backend *b, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    KF_CHECK(e == cudaSuccess, "out of GPU memory allocating %zu bytes: %s", bytes,
             cudaGetErrorString(e));
    CUDA_OK(cudaMemsetAsync(p, 0, bytes, cu_stream(b)));
    return p;
}

void cu_free(kf_backend *b, void *p) {
    if (!p) return;
    CUDA_OK(cudaStreamSynchronize(cu_stream(b))); /* queued ops may still read it */
    CUDA_OK(cudaFree(p));
}

void cu_upload(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream(b)));
    CUDA_OK(cudaStreamSynchronize(cu_stream(b)));
}

void cu_download(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream(b)));
    CUDA_OK(cudaStreamSynchronize(cu_stream(b)));
}

void cu_copy(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(b)));
}

void cu_zero(kf_backend *b, void *dst, size_t bytes) {
    if (bytes) CUDA_OK(cudaMemsetAsync(dst, 0, bytes, cu_stream(b)));
}

void cu_sync(kf_backend *b) { CUDA_OK(cudaStreamSynchronize(cu_stream(b))); }

void cu_set_precision(kf_backend *b, kf_precision p) { b->precision = p; }

void cu_destroy(kf_backend *b) {
    cuda_impl *im = cu_impl(b);
    CUDA_OK(cudaStreamSynchronize(im->stream));
    for (int i = 0; i < CU_SCRATCH_N; i++) {
        if (!im->scratch[i]) continue;
        if (i == CU_SCRATCH_HOST)
            cudaFreeHost(im->scratch[i]);
        else
            cudaFree(im->scratch[i]);
    }
    cudaFree(im->red);
    cudaFreeHost(im->red_host);
    cublasDestroy(im->blas);
    cudaStreamDestroy(im->stream);
    free(im);
    free(b);
}

extern "C" void *kernels_cuda_stream(kf_backend *b) {
    KF_CHECK(strcmp(b->name, "cuda") == 0, "kernels_cuda_stream needs the cuda backend");
    return (void *)cu_stream(b);
}

extern "C" int kernels_cuda_device(kf_backend *b) {
    KF_CHECK(strcmp(b->name, "cuda") == 0, "kernels_cuda_device needs the cuda backend");
    return cu_impl(b)->device;
}

extern "C" kf_backend *kernels_cuda_create(int device, char *err_msg, size_t err_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0 || device < 0 || device >= n) {
        if (err_msg && err_len)
            snprintf(err_msg, err_len, "no usable CUDA device %d (%d found%s%s)", device, n,
                     e != cudaSuccess ? ": " : "", e != cudaSuccess ? cudaGetErrorString(e) : "");
        cudaGetLastError(); /* reset the runtime's last-error state for later callers */
        return NULL;
    }
    CUDA_OK(cudaSetDevice(device));
    kf_backend *b = (kf_backend *)kf_calloc(1, sizeof *b);
    cuda_impl *im = (cuda_impl *)kf_calloc(1, sizeof *im);
    b->name = "cuda";
    b->precision = KF_PREC_FP32;
    b->batch_invariant = 0;
    b->impl = im;
    im->device = device;
    CUDA_OK(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
    CUBLAS_OK(cublasCreate(&im->blas));
    CUBLAS_OK(cublasSetStream(im->blas, im->stream));
    /* fp32 means fp32 (no TF32; issue 7, the fp32 phase): asked per call with
     * CUBLAS_COMPUTE_32F_PEDANTIC (cuda_gemm.cu). Pedantic math on the whole
     * handle would also hold the fp16 GEMMs to it, off the tensor cores. */
    CUBLAS_OK(cublasSetMathMode(im->blas, CUBLAS_DEFAULT_MATH));
    CUDA_OK(cudaDeviceGetAttribute(&im->sm_count, cudaDevAttrMultiProcessorCount, device));
    const char *tc = getenv("KF_CUDA_TC");
    im->tc = tc && !strcmp(tc, "1");
    CUDA_OK(cudaMalloc(&im->red, CU_RED_SLOTS * sizeof(double)));
    CUDA_OK(cudaMallocHost(&im->red_host, CU_RED_SLOTS * sizeof(double)));

    /* every op slot from the one op list: a missing cu_NAME fails to link */
#define CU_OP_SLOT(ret, name, params) b->name = cu_##name;
    KF_BACKEND_OPS(CU_OP_SLOT)
#undef CU_OP_SLOT
    return b;
}
