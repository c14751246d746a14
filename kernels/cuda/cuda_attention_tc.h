/* kernels/cuda/cuda_attention_tc.h — the tensor-core attention kernels of the
 * 16-bit phases (cuda_attention_tc.cu), called by cuda_attention.cu. */
#ifndef KF_KERNELS_CUDA_ATTENTION_TC_H
#define KF_KERNELS_CUDA_ATTENTION_TC_H

#include "kernels/cuda/cuda_attn_mask.cuh"

/** 1 when the tensor-core kernels handle this call: enabled on the backend
 *  (KF_CUDA_TC=1 at creation), fp16 or bf16 precision, head_dim 64 or 128. */
int attn_tc_supported(kf_backend *b, int64_t head_dim);

/** Forward over md (as cu_attn_fwd: qkv or its 16-bit copy qkv16, out
 *  and/or its copy out16); converting qkv uses scratch slot CU_SCRATCH_A. */
void attn_fwd_tc(kf_backend *b, float *out, void *out16, float *lse, const float *qkv,
                 const void *qkv16, const mask_dev *md, int64_t B, int64_t n_head,
                 int64_t head_dim);

/** Backward (as cu_attn_bwd) given delta[b, h, r] = dout_r · out_r;
 *  converting qkv and dout, when not given as 16-bit copies, uses scratch
 *  slots CU_SCRATCH_A and CU_SCRATCH_B. */
void attn_bwd_tc(kf_backend *b, float *dqkv, const float *dout, const void *dout16,
                 const float *lse, const float *delta, const float *qkv, const void *qkv16,
                 const mask_dev *md, int64_t B, int64_t n_head, int64_t head_dim);

#endif
