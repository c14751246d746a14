/* kernels/cuda/cuda_attention_tc.h — the tensor-core attention kernels of the
 * 16-bit phases (cuda_attention_tc.cu), called by cuda_attention.cu. */
#ifndef KF_KERNELS_CUDA_ATTENTION_TC_H
#define KF_KERNELS_CUDA_ATTENTION_TC_H

#include "kernels/cuda/cuda_attn_mask.cuh"

/** Element i of the backward's dqkv and/or its 16-bit copy dqkv16 (either
 *  NULL: not written), the SIMT and tensor-core kernels alike: v rounded to
 *  the format lowp (fp32: v). */
__device__ __forceinline__ void dqkv_store(float *dqkv, void *dqkv16, int64_t i, float v,
                                           int lowp) {
    if (dqkv) dqkv[i] = cu_lowp(v, lowp);
    if (dqkv16) cu_store16(dqkv16, i, v, lowp);
}

/** 1 when the tensor-core kernels handle this call (cuda_attention_guard.cu):
 *  fp16 or bf16 precision (batch-invariant mode too), head_dim 64 or 128,
 *  not switched off (KF_CUDA_TC=0), and their check against the SIMT kernels
 *  passed for this precision and head dim; the check runs here at the first
 *  such call (it waits for the device). Call it before anything else of the
 *  op is queued: the check uses the backend's scratch. */
int attn_tc_supported(kf_backend *b, int64_t head_dim);

/** Dies on a launch error of the tensor-core kernels, except in the check,
 *  which records it and falls back (cuda_attention_guard.cu). */
void attn_tc_launched(kf_backend *b, cudaError_t e);

/** Forward over md (as cu_attn_fwd: qkv or its 16-bit copy qkv16, out
 *  and/or its copy out16); converting qkv uses scratch slot CU_SCRATCH_A.
 *  Returns the launch's error (cudaSuccess). */
cudaError_t attn_fwd_tc(kf_backend *b, float *out, void *out16, float *lse, const float *qkv,
                        const void *qkv16, const mask_dev *md, int64_t B, int64_t n_head,
                        int64_t head_dim);

/** Backward (as cu_attn_bwd: dqkv and/or its copy dqkv16) given delta[b, h, r] = dout_r · out_r;
 *  converting qkv and dout, when not given as 16-bit copies, uses scratch
 *  slots CU_SCRATCH_A and CU_SCRATCH_B. Returns the launches' error. */
cudaError_t attn_bwd_tc(kf_backend *b, float *dqkv, void *dqkv16, const float *dout,
                        const void *dout16, const float *lse, const float *delta, const float *qkv,
                        const void *qkv16, const mask_dev *md, int64_t B, int64_t n_head,
                        int64_t head_dim);

#endif
