/* kernels/cuda/cuda_backend.cu — the CUDA backend's table, memory ops, scratch
 * buffers and kernels_cuda_create(). The ops live in the other cuda_*.cu files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"

/* Partials of host-returned reductions (cuda_optim.cu uses at most this many). */
/* cuBLAS's workspace (cublasSetWorkspace). */
#define CU_BLAS_WORKSPACE ((size_t)32 << 20)
#define CU_RED_SLOTS 1024

/* Keeps p until the next cu_wait: queued work may still use it. */
static void retire(cuda_impl *im, void *p, int host) {
    if (im->n_retired == im->cap_retired) {
        im->cap_retired = im->cap_retired ? 2 * im->cap_retired : 16;
        im->retired = (void **)kf_realloc(im->retired, (size_t)im->cap_retired * sizeof(void *));
        im->retired_host =
            (int *)kf_realloc(im->retired_host, (size_t)im->cap_retired * sizeof(int));
    }
    im->retired[im->n_retired] = p;
    im->retired_host[im->n_retired++] = host;
}

void *cu_scratch(kf_backend *b, int slot, size_t bytes) {
    cuda_impl *im = cu_impl(b);
    if (im->scratch_len[slot] < bytes) {
        if (im->scratch[slot]) retire(im, im->scratch[slot], 0);
        CUDA_OK(cudaMalloc(&im->scratch[slot], bytes));
        im->scratch_len[slot] = bytes;
    }
    return im->scratch[slot];
}

void cu_wait(kf_backend *b) {
    cuda_impl *im = cu_impl(b);
    CUDA_OK(cudaMemcpyAsync(im->err_host, im->err_dev, sizeof(int), cudaMemcpyDeviceToHost,
                            im->stream));
    CUDA_OK(cudaStreamSynchronize(im->stream));
    /* a graph replays the device addresses it was captured with, such as
     * scratch that has grown since: device memory waits for the last graph */
    int keep = 0;
    for (int i = 0; i < im->n_retired; i++) {
        if (im->retired_host[i]) CUDA_OK(cudaFreeHost(im->retired[i]));
        else if (im->n_graphs) im->retired[keep++] = im->retired[i];
        else CUDA_OK(cudaFree(im->retired[i]));
    }
    for (int i = 0; i < keep; i++) im->retired_host[i] = 0;
    im->n_retired = keep;
    im->stage_used = 0;
    KF_CHECK(!(*im->err_host & CU_ERR_EMBED_ID),
             "embed_bwd: a token id lies outside [0, vocab) (seen on the device, reported at the "
             "next synchronisation)");
}

/* `bytes` of pinned staging memory, free until the next cu_wait. A full
 * buffer is replaced by one that holds everything staged since the last
 * wait, so a step that repeats the previous one's uploads never grows it. */
static char *stage(cuda_impl *im, size_t bytes) {
    size_t need = (bytes + 255) & ~(size_t)255;
    if (im->stage_used + need > im->stage_cap) {
        size_t cap = im->stage_used + need;
        if (cap < 2 * im->stage_cap) cap = 2 * im->stage_cap;
        if (cap < ((size_t)1 << 20)) cap = (size_t)1 << 20;
        if (im->stage) retire(im, im->stage, 1);
        CUDA_OK(cudaMallocHost(&im->stage, cap));
        im->stage_cap = cap;
        im->stage_used = 0;
    }
    char *p = im->stage + im->stage_used;
    im->stage_used += need;
    return p;
}

void cu_upload_async(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_impl *im = cu_impl(b);
    /* a captured copy would read the staging memory at each launch, long
     * after it was reused */
    KF_CHECK(!im->capturing, "an upload between graph_begin and graph_end (kernels.h: inputs are "
                             "uploaded before the graph is launched)");
    if (bytes > CU_STAGE_MAX) { /* pageable: returns once src is consumed */
        CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->stream));
        return;
    }
    char *p = stage(im, bytes);
    memcpy(p, src, bytes);
    CUDA_OK(cudaMemcpyAsync(dst, p, bytes, cudaMemcpyHostToDevice, im->stream));
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
    if (p) retire(cu_impl(b), p, 0);
}

void cu_upload(kf_backend *b, void *dst, const void *src, size_t bytes) {
    cu_upload_async(b, dst, src, bytes);
}

void cu_download(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_impl *im = cu_impl(b);
    if (bytes > CU_STAGE_MAX) {
        CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, im->stream));
        cu_wait(b);
        return;
    }
    char *p = stage(im, bytes);
    CUDA_OK(cudaMemcpyAsync(p, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    cu_wait(b);
    memcpy(dst, p, bytes);
}

void cu_copy(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(b)));
}

void cu_zero(kf_backend *b, void *dst, size_t bytes) {
    if (bytes) CUDA_OK(cudaMemsetAsync(dst, 0, bytes, cu_stream(b)));
}

void cu_sync(kf_backend *b) { cu_wait(b); }

void cu_set_precision(kf_backend *b, kf_precision p) { b->precision = p; }

void cu_destroy(kf_backend *b) {
    cuda_impl *im = cu_impl(b);
    cu_wait(b);
    free(im->retired);
    free(im->retired_host);
    cudaFreeHost(im->stage);
    cudaFree(im->err_dev);
    cudaFreeHost(im->err_host);
    cudaFree(im->rope_tab);
    for (int i = 0; i < CU_SCRATCH_N; i++) cudaFree(im->scratch[i]);
    cudaFree(im->red);
    cudaFree(im->blas_ws);
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

extern "C" int64_t kernels_cuda_graph_launches(kf_backend *b) {
    KF_CHECK(strcmp(b->name, "cuda") == 0, "kernels_cuda_graph_launches needs the cuda backend");
    return cu_impl(b)->n_graph_launches;
}

extern "C" int64_t kernels_cuda_graph_records(kf_backend *b) {
    KF_CHECK(strcmp(b->name, "cuda") == 0, "kernels_cuda_graph_records needs the cuda backend");
    return cu_impl(b)->n_graph_records;
}

extern "C" int64_t kernels_cuda_tc_launches(kf_backend *b, kf_cuda_tc path) {
    KF_CHECK(strcmp(b->name, "cuda") == 0, "kernels_cuda_tc_launches needs the cuda backend");
    cuda_impl *im = cu_impl(b);
    return (path == KF_CUDA_TC_ATTN ? im->attn_tc : im->gemm_tc).launches;
}

extern "C" int64_t kernels_cuda_host_syncs(void) {
#ifdef KF_CUDA_EMU
    return emu_host_syncs();
#else
    return -1;
#endif
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
    /* fp32 means fp32 (no TF32: the fp32 phase): asked per call with
     * CUBLAS_COMPUTE_32F_PEDANTIC (cuda_gemm.cu). Pedantic math on the whole
     * handle would also hold the fp16 GEMMs to it, off the tensor cores. */
    CUBLAS_OK(cublasSetMathMode(im->blas, CUBLAS_DEFAULT_MATH));
    /* a workspace of its own (32 MiB, what cuBLAS asks for on Hopper), so the
     * library allocates none inside a graph capture */
    CUDA_OK(cudaMalloc(&im->blas_ws, CU_BLAS_WORKSPACE));
    CUBLAS_OK(cublasSetWorkspace(im->blas, im->blas_ws, CU_BLAS_WORKSPACE));
    CUDA_OK(cudaDeviceGetAttribute(&im->sm_count, cudaDevAttrMultiProcessorCount, device));
    const char *tc = getenv("KF_CUDA_TC");
    int tc_on = !(tc && !strcmp(tc, "0"));
    im->attn_tc = {"attention", tc_on, 0, -1, cudaSuccess, 0};
    im->gemm_tc = {"batch-invariant GEMM", tc_on, 0, -1, cudaSuccess, 0};
    const char *graphs = getenv("KF_CUDA_GRAPHS");
    im->graphs = !graphs || strcmp(graphs, "0");
    CUDA_OK(cudaMalloc(&im->red, CU_RED_SLOTS * sizeof(double)));
    CUDA_OK(cudaMallocHost(&im->red_host, CU_RED_SLOTS * sizeof(double)));
    CUDA_OK(cudaMalloc(&im->err_dev, sizeof(int)));
    CUDA_OK(cudaMemsetAsync(im->err_dev, 0, sizeof(int), im->stream));
    CUDA_OK(cudaMallocHost(&im->err_host, sizeof(int)));

    /* every op slot from the one op list: a missing cu_NAME fails to link */
#define CU_OP_SLOT(ret, name, params, args) b->name = cu_##name;
    KF_BACKEND_OPS(CU_OP_SLOT)
#undef CU_OP_SLOT
    return b;
}
