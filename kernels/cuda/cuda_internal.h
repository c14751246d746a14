/* kernels/cuda/cuda_internal.h — what the CUDA backend's files share.
 *
 * Each cuda_*.cu file implements one family of ops from kernels.h; the table
 * is filled in cuda_backend.cu. All work is queued on the backend's one
 * stream (im->stream), so ops are ordered among themselves and b->sync (or a
 * download) waits for them.
 *
 * The host waits for the device only in cu_wait (b->sync, downloads, the
 * host-returned reductions) and when a buffer grows: uploads go through
 * pinned staging memory as asynchronous copies, frees are deferred to the
 * next cu_wait, and checks made on the device (CU_ERR_*) are reported there.
 * A training step therefore queues its forward and backward without
 * stopping (test_cuda_train counts the waits under the emulation harness).
 *
 * Determinism rules used throughout (kernels.h "Determinism"):
 *  - every output element is written by exactly one thread; no float atomics;
 *  - reductions over rows go through fixed-size row chunks whose partials are
 *    added in chunk order by a second kernel (CUDA_ROW_CHUNK);
 *  - per-row ops (norms, softmax, sampling) use one block per row, so a row's
 *    result never depends on the other rows of the batch.
 */
#ifndef KF_KERNELS_CUDA_INTERNAL_H
#define KF_KERNELS_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* common/error.h uses C11's `noreturn` macro, which C++ spells as an attribute. */
#include <stdnoreturn.h>
#ifndef noreturn
#define noreturn [[noreturn]]
#endif
extern "C" {
#include "common/error.h"
#include "kernels/kernels.h"
}

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) KF_FATAL("CUDA: %s: %s", #call, cudaGetErrorString(e_));            \
    } while (0)

#define CUBLAS_OK(call)                                                                            \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            KF_FATAL("cuBLAS: %s: %s", #call, cublasGetStatusString(s_));                          \
    } while (0)

/** Checks the last launch (a bad configuration shows up here, not later). */
#define CUDA_LAUNCHED() CUDA_OK(cudaGetLastError())

/** Rows per partial sum in row reductions (bias/LayerNorm weight gradients). */
#define CUDA_ROW_CHUNK 64

/** Scratch slots owned by the backend (grown on demand, never shrunk). */
enum {
    CU_SCRATCH_A,
    CU_SCRATCH_B,
    CU_SCRATCH_C,
    CU_SCRATCH_D,
    CU_SCRATCH_X16, /* cu_input16's floats (the SIMT batch-invariant kernel) */
    CU_SCRATCH_DY16,
    CU_SCRATCH_VLEN, /* attention's device copy of valid_len */
    CU_SCRATCH_N
};

/** Bits of the device-side error word, set by kernels, raised at cu_wait. */
enum { CU_ERR_EMBED_ID = 1 /* embed_bwd: a token id outside [0, vocab) */ };

/** A tensor-core path and its check against the SIMT kernels
 *  (cuda_tc_guard.cu): on unless KF_CUDA_TC=0 or a check failed; checked, a
 *  bit per case checked; force -1, or the path a check itself runs (0 SIMT,
 *  1 tensor cores); err, a launch error seen during a check; launches, the
 *  path's ops run on the tensor cores (kernels_cuda_tc_launches). */
typedef struct cu_tc_guard {
    const char *name; /* "attention", "batch-invariant GEMM" */
    int on, checked, force;
    cudaError_t err;
    int64_t launches;
} cu_tc_guard;

typedef struct cuda_impl {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *scratch[CU_SCRATCH_N];
    size_t scratch_len[CU_SCRATCH_N];
    double *red;      /* device partials for host-returned reductions */
    double *red_host; /* pinned landing buffer for them */
    int *err_dev;     /* CU_ERR_* bits (device) */
    int *err_host;    /* pinned copy read at cu_wait */
    char *stage;      /* pinned staging for uploads since the last cu_wait */
    size_t stage_cap, stage_used;
    void **retired;    /* staging buffers and device pointers released at cu_wait */
    int *retired_host; /* 1: pinned host memory (cudaFreeHost), 0: device */
    int n_retired, cap_retired;
    float *rope_tab; /* RoPE cos/sin for positions [0, rope_cap) (cuda_rope.cu) */
    int64_t rope_cap, rope_D;
    float rope_base;
    int sm_count;
    /* the tensor-core attention of the 16-bit phases (cuda_attention_tc.cu;
     * a bit per precision and head dim) and batch-invariant GEMM (cuda_gemm.cu;
     * a bit per precision), each behind its check (cuda_tc_guard.cu) */
    cu_tc_guard attn_tc, gemm_tc;
    int graphs;    /* graph_end makes graphs (KF_CUDA_GRAPHS unset or not 0; cuda_graph.cu) */
    int capturing; /* between graph_begin and graph_end */
    int64_t n_graphs, n_graph_launches; /* graphs alive; launches, graph_end's included */
    int64_t n_graph_records;            /* graphs made by graph_end */
    void *blas_ws; /* cuBLAS's workspace, set on the handle: nothing allocated in a capture */
} cuda_impl;

static inline cuda_impl *cu_impl(kf_backend *b) { return (cuda_impl *)b->impl; }
static inline cudaStream_t cu_stream(kf_backend *b) { return cu_impl(b)->stream; }

/** Device scratch slot `slot` with room for `bytes` (contents undefined).
 *  Growing retires the old buffer until the next cu_wait, so earlier queued
 *  users still find it. */
void *cu_scratch(kf_backend *b, int slot, size_t bytes);

/** Queues a copy of `bytes` host bytes at src to device memory dst. src may
 *  be reused as soon as this returns (small copies are staged in pinned
 *  memory; large ones, above CU_STAGE_MAX, copy from src directly, which
 *  waits for the stream). */
void cu_upload_async(kf_backend *b, void *dst, const void *src, size_t bytes);

/** Waits for everything queued on the stream, then releases deferred frees
 *  and staging, and dies naming the op if a device-side check failed. The
 *  one place the backend's ops block the host. */
void cu_wait(kf_backend *b);

/** Uploads larger than this copy straight from the caller's memory. */
#define CU_STAGE_MAX ((size_t)16 << 20)

/** Blocks for a grid-stride loop over n elements with 256 threads. */
static inline unsigned cu_blocks(int64_t n, int threads = 256) {
    int64_t g = (n + threads - 1) / threads;
    if (g < 1) g = 1;
    if (g > 65535 * 16) g = 65535 * 16;
    return (unsigned)g;
}

/** Warp sum in a fixed butterfly order (every lane gets the same result). */
template <typename T> __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T> __device__ __forceinline__ T warp_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/** Block-wide sum, same fixed order every call; all threads get the result.
 *  blockDim.x must be a multiple of 32 (at most 1024); sh has 32 slots.
 *  Ends with a barrier, so sh can be reused right after. */
template <typename T> __device__ __forceinline__ T block_sum(T v, T *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    T t = lane < nw ? sh[lane] : (T)0;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

template <typename T> __device__ __forceinline__ T block_max(T v, T *sh, T lowest) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    T t = lane < nw ? sh[lane] : lowest;
    t = warp_max(t);
    __syncthreads();
    return t;
}

/** A value of the fp16 format as a float, a NaN as the canonical 0x7fffffff
 *  (the CPU backend's cpu_fp16_value): the conversion instructions' own NaN
 *  bits are the hardware's. */
__device__ __forceinline__ float cu_fp16_value(float v) {
    return v != v ? __int_as_float(0x7fffffff) : v;
}

/** v rounded to the 16-bit format of precision lowp (a kf_precision: IEEE
 *  half or bfloat16, round to nearest even, as the CPU backend's cpu_lowp);
 *  KF_PREC_FP32 returns v. */
__device__ __forceinline__ float cu_lowp(float v, int lowp) {
    if (lowp == KF_PREC_FP16) return cu_fp16_value(__half2float(__float2half_rn(v)));
    if (lowp == KF_PREC_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

/** Element i of a 16-bit copy (kernels.h) in the format lowp: v rounded
 *  (cu_lowp's value), stored as IEEE half (a NaN as 0x7fff) or bfloat16. */
__device__ __forceinline__ void cu_store16(void *p, int64_t i, float v, int lowp) {
    if (lowp == KF_PREC_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((__half *)p)[i] = v != v ? __ushort_as_half(0x7fff) : __float2half_rn(v);
}

/** Element i of a 16-bit copy in the format lowp, as a float (exact). */
__device__ __forceinline__ float cu_load16(const void *p, int64_t i, int lowp) {
    if (lowp == KF_PREC_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return cu_fp16_value(__half2float(((const __half *)p)[i]));
}

/** GELU and its derivative (tanh form, or erf when erf_kind), the formulas of
 *  kernels/cpu/cpu_pointwise.c; shared by the pointwise ops and the linear
 *  layer's epilogue so both give the same bits. */
#define CU_GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define CU_GELU_A 0.044715f
__device__ __forceinline__ float cu_gelu(float v, int erf_kind) {
    return erf_kind ? 0.5f * v * (1.0f + erff(v * 0.7071067811865476f))
                    : 0.5f * v * (1.0f + tanhf(CU_GELU_C * (v + CU_GELU_A * v * v * v)));
}
__device__ __forceinline__ float cu_gelu_grad(float v, int erf_kind) {
    if (erf_kind)
        return 0.5f * (1.0f + erff(v * 0.7071067811865476f)) +
               v * expf(-0.5f * v * v) * 0.3989422804014327f;
    float t = tanhf(CU_GELU_C * (v + CU_GELU_A * v * v * v));
    return 0.5f * (1.0f + t) +
           0.5f * v * (1.0f - t * t) * CU_GELU_C * (1.0f + 3.0f * CU_GELU_A * v * v);
}

/** out[c] += sum over chunks of part[ch * cols + c], chunks in order (the
 *  second half of every row reduction; cuda_gemm.cu). */
void cu_col_finish(kf_backend *b, float *out, const float *part, int64_t nchunk, int64_t cols);

/** Runs both paths of a guard on a small fixed problem (`arg` its case);
 *  returns 1 when they agree, else 0 with the reason in why. */
typedef int (*cu_tc_check_fn)(kf_backend *b, const void *arg, char *why, size_t why_len);

/** 1 when g's tensor-core path may run case `bit` (`what` names the case):
 *  g->force while a check runs; 0 when g is off or a graph is being
 *  captured before the case was checked; else check runs at the case's
 *  first call (it waits for the device) and a failure logs one warning and
 *  turns g off. Call it before anything else of the op is queued: a check
 *  may use the backend's scratch. */
int cu_tc_guard_use(kf_backend *b, cu_tc_guard *g, int bit, const char *what, cu_tc_check_fn check,
                    const void *arg);

/** Counts an op of g's tensor-core kernels; dies on their launch error e,
 *  except while a check runs them (g->force == 1): then e is recorded in
 *  g->err. */
void cu_tc_guard_launched(cu_tc_guard *g, cudaError_t e);

/** ||a - ref|| / ||ref|| over n values; infinity when a has a non-finite one. */
double cu_rel_l2(const float *a, const float *ref, int64_t n);

/** The checks' test hook: when KF_CUDA_TC_CHECK_BREAK is `name`, adds 0.05 to
 *  x[0..n) (a tensor-core result the check named `name` compares). */
void cu_tc_check_break(const char *name, float *x, int64_t n);

/* ---- op implementations: cu_NAME for every KF_BACKEND_OPS entry, filled
 * into the table by cuda_backend.cu ---- */
#define CU_OP_DECL(ret, name, params, args) ret cu_##name params;
KF_BACKEND_OPS(CU_OP_DECL)
#undef CU_OP_DECL

/** What the batch-invariant GEMM kernels (cuda_gemm.cu) write for each
 *  element of their product: v = alpha acc + beta y (y not read when beta
 *  is 0), rounded as matmul rounds C (the mode's format); then, in
 *  k_bias_act's and k_dact_cols's order (cuda_linear.cu), so with their bits,
 *  v += bias[column] and, with an act, forward pre = v, v = act(v), or
 *  (dgrad) v *= act'(pre); y = v and y16 = v as a 16-bit copy. A plain
 *  product is {C}. Element (z, r, c) of a batch is z stride_c + r N + c in
 *  every output. */
typedef struct cu_epi {
    float *y;          /* the fp32 output, C; NULL: none */
    void *y16;         /* its 16-bit copy (a 16-bit mode); NULL: none */
    float *pre;        /* with an act: written (forward) or read (dgrad) */
    const float *bias; /* [N]; NULL: none */
    int act;           /* kf_act */
    int dgrad;         /* multiply by act'(pre) instead of applying act */
} cu_epi;

/** cu_matmul_copies in batch-invariant mode with K > 0, its output the
 *  epilogue e (e->y is C): the linear layer's epilogue in the product's own
 *  kernel (tensor-core or SIMT), no pass over an fp32 product. */
void cu_matmul_epi(kf_backend *b, const cu_epi *e, const float *A, const void *A16, const float *B,
                   const void *B16, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
                   float alpha, float beta);

/** matmul_batched through the fixed-tiling kernel whatever the backend's mode:
 *  each C element one dot product summed in k order, so a row of C never
 *  depends on M; lowp (a kf_precision): operands and C rounded by cu_lowp. */
void cu_matmul_fixed(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                     int64_t K, int trans_a, int trans_b, float alpha, float beta, int64_t batch,
                     int64_t stride_c, int64_t stride_a, int64_t stride_b, int lowp);

/** C16 [M, N] = op(A) op(B) through cuBLAS on A16 and B16 (in the 16-bit
 *  format of b->precision: cu_to16's, or 16-bit copies), written in that
 *  format (fp32 accumulation, rounded once, as matmul's C): what matmul
 *  computes, at half the bytes, for an epilogue to read. Only in a 16-bit
 *  mode outside batch-invariant mode, with K > 0. */
void cu_matmul_to16(kf_backend *b, void *C16, const void *A16, const void *B16, int64_t M,
                    int64_t N, int64_t K, int trans_a, int trans_b);

/** x, or when x16 (a 16-bit copy, kernels.h) is given its values as floats
 *  in scratch slot `slot`: the fp32 view of an input for the paths that
 *  read fp32 (batch-invariant mode's SIMT kernel). x as it is when the
 *  products read x16 itself (the tensor-core kernel, cu_matmul_copies). */
const float *cu_input16(kf_backend *b, int slot, const float *x, const void *x16, int64_t n);

/** cu_matmul reading A16 and B16 (NULL: none; A and B as 16-bit copies,
 *  kernels.h) in place of A and B where the product runs on the tensor
 *  cores (batch-invariant mode's k_gemm_invariant_mma; cuBLAS in a 16-bit
 *  mode): no conversion pass. The SIMT kernel and fp32 mode read A and B,
 *  which must then hold the copies' values (cu_input16 gives them). */
void cu_matmul_copies(kf_backend *b, float *C, const float *A, const void *A16, const float *B,
                      const void *B16, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
                      float alpha, float beta);

/** src [n] converted to the 16-bit format of b->precision (round to nearest
 *  even, cu_lowp's values) in scratch slot `slot`; returns it. Valid until
 *  the slot is used again. */
void *cu_to16(kf_backend *b, int slot, const float *src, int64_t n);

/** dst [n] = src as a 16-bit copy (kernels.h) in the format of b->precision. */
void cu_copy16(kf_backend *b, void *dst, const float *src, int64_t n);

/** matmul (batch 1) on operands already in the 16-bit format of
 *  b->precision (cu_to16's, or a 16-bit copy written by their producer):
 *  fp32 accumulation, C rounded to the format, so C is what matmul gives on
 *  the fp32 operands those copies were made from. Only in a 16-bit mode
 *  outside batch-invariant mode, with K > 0. */
void cu_matmul16(kf_backend *b, float *C, const void *A16, const void *B16, int64_t M, int64_t N,
                 int64_t K, int trans_a, int trans_b, float alpha, float beta);

/** cu_matmul16 without its rounding pass: C = alpha op(A) op(B) + beta C in
 *  fp32, for an epilogue that rounds C to the format as it reads it (the
 *  value cu_matmul16 stores) and so saves that pass over C. */
void cu_matmul16_unrounded(kf_backend *b, float *C, const void *A16, const void *B16, int64_t M,
                           int64_t N, int64_t K, int trans_a, int trans_b, float alpha, float beta);

/** dst [n] = the values of the 16-bit copy src16 (format of b->precision) as
 *  floats: exact. */
void cu_from16(kf_backend *b, float *dst, const void *src16, int64_t n);

#endif
