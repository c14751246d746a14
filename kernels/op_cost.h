/* kernels/op_cost.h — what each op of kernels.h costs: FLOPs and bytes moved.
 *
 * One function per op, kernels_cost_NAME, declared from the op list
 * (KF_BACKEND_OPS) with the op's own parameters, so an op added there is a
 * link error until its cost is written here. The recording backend
 * (kernels/record.h) calls it on every op it sees; `kf bench train
 * --roofline` turns the counts into a time on a named GPU (bench/roofline/roofline.h).
 *
 * Conventions (each function in op_cost.c documents its own formula):
 *  - flops: floating-point operations of the op's arithmetic, a multiply-add
 *    counted as 2. A GEMM is 2*M*N*K; attention counts its products only
 *    (forward 4*head_dim per (query, key) pair and head: Q K^T and P V;
 *    backward 10: S recomputed, dP, dV, dQ, dK); softmax, exp and
 *    transcendental functions count 1 per use, as listed per op.
 *  - bytes: what a single-pass kernel must read and write: every input once,
 *    every output once (an accumulated output is read and written), at the
 *    op's storage precision. Activations and weights are fp32 buffers in
 *    every precision mode (kernels.h: fp16 mode only rounds through half), so
 *    floats cost 4 bytes, int32 4, doubles 8, except the 16-bit copies
 *    (kernels.h), 2. The passes today's CUDA backend adds around an fp16
 *    GEMM (and the tensor-core attention) to convert its operands are
 *    counted apart, in convert_bytes, so the estimate shows what they cost
 *    as built and what more half-precision
 *    storage would save.
 *  - unit: which peak bounds the op's arithmetic (see kf_cost_unit).
 *  - b is only read for b->precision (fp16 mode moves GEMM and attention to
 *    the tensor units) and b->batch_invariant (its fixed-tiling GEMM converts
 *    as it loads, and stays on the fp32 units in fp32; the attention runs the
 *    same kernels in either mode), and is never called.
 */
#ifndef KF_KERNELS_OP_COST_H
#define KF_KERNELS_OP_COST_H

#include <stdint.h>

#include "kernels/kernels.h"

typedef enum {
    KF_COST_NONE = 0, /* host bookkeeping (alloc, free, set_precision): no device work */
    KF_COST_HOST,     /* a host <-> device transfer: bytes cross the bus */
    KF_COST_SIMT,     /* elementwise, row and reduction work: fp32 units, usually memory-bound */
    KF_COST_GEMM,     /* dense products: tensor units in fp16/bf16 mode, fp32 units otherwise
                         (batch-invariant fp32 products are KF_COST_SIMT) */
    KF_COST_ATTN /* attention products: tensor units in fp16/bf16 mode with tensor-core kernels */
} kf_cost_unit;

typedef struct kf_op_cost {
    double flops;
    double bytes;
    kf_cost_unit unit;
    int lowp;             /* b->precision was 16-bit (fp16 or bf16) at the call */
    int host_sync;        /* the host waits for the device (download, reductions, sync) */
    double convert_bytes; /* bytes of the separate fp16/bf16 conversion passes today's CUDA
                             backend runs around the op (see kernels_cost_matmul,
                             kernels_cost_attn_fwd and _bwd); not
                             part of bytes, the op's own single pass */
    char shape[96];       /* the op's sizes, e.g. "M=16368 N=2304 K=768 tb" */
} kf_op_cost;

/** Layout the recording backend's head_pack handles start with, so
 *  kernels_cost_head_fwd can size an opaque packed head. */
typedef struct kf_head_shape {
    int64_t V, H;
} kf_head_shape;

/** (query, key) pairs a kf_mask scores per head over B samples: query rows
 *  [q_start, L), each against the keys kernels.h's mask lets it see
 *  (valid_len included). */
double kernels_mask_pairs(const kf_mask *m, int64_t B);

#define KF_COST_DECL(ret, name, params, args) kf_op_cost kernels_cost_##name params;
KF_BACKEND_OPS(KF_COST_DECL)
#undef KF_COST_DECL

#endif
