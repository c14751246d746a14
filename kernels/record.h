/* kernels/record.h — a backend that records every op called on it.
 *
 * Each call is logged as the op's name and its cost (kernels/op_cost.h:
 * shape, precision, FLOPs, bytes), in call order. The recorder either
 * forwards every call to a real backend, or, "dry", computes nothing:
 *
 *  - alloc hands out distinct fake device addresses (never to be
 *    dereferenced; an access faults) and records their sizes, so the live
 *    and peak device bytes of a run are known without holding them: a 124M
 *    model's training step runs dry in a few MB of host memory;
 *  - download writes zeros to the host, sum / sumsq / count_nonfinite
 *    return 0 (sumsq_parts writes zeros), head_pack returns a handle that
 *    only carries its shape;
 *  - every other op does nothing;
 *  - attn_decode with a device length (len) is priced at the value of the
 *    latest upload to len's address (over a real backend: the value there,
 *    read back), the kernel's work, rather than at its bound P.
 *
 * So the model's real code (trainer/model/model.c, the optimizer, the teacher
 * passes) runs through it unchanged: `kf bench train --roofline` records the
 * op shapes one training step issues and prices them on a named GPU
 * (bench/roofline/roofline.h). Wrapping a real backend gives the same op sequence
 * with real results (tests compare the two), and `timed` brackets each
 * forwarded op with the inner backend's sync and the host clock, so on a GPU
 * each op has a measured time beside its estimate.
 *
 * The recorder's slots are generated from KF_BACKEND_OPS (kernels.h) like
 * every backend's. b->precision and b->batch_invariant are the recorder's
 * own and are passed on to the inner backend before each forwarded call.
 */
#ifndef KF_KERNELS_RECORD_H
#define KF_KERNELS_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/op_cost.h"

typedef struct kf_op_rec {
    const char *op; /* the op's name in KF_BACKEND_OPS */
    kf_op_cost cost;
    double seconds; /* timed recorders: host time of the call between two syncs; else 0 */
} kf_op_rec;

/** Creates a recorder over inner (owned: destroyed with the recorder), or a
 *  dry one when inner is NULL (name "dry"; else "record"). */
kf_backend *kernels_record_create(kf_backend *inner, int timed);

/** 1 when b was made by kernels_record_create. */
int kernels_record_is(const kf_backend *b);

/** The calls recorded since creation or the last clear, in call order;
 *  *n receives their number. Valid until the next call on b. */
const kf_op_rec *kernels_record_ops(const kf_backend *b, int64_t *n);

/** Forgets the recorded calls and restarts the peak at the live bytes. */
void kernels_record_clear(kf_backend *b);

/** Device bytes allocated through b and not freed: now, and at most since
 *  creation or the last clear. */
size_t kernels_record_live_bytes(const kf_backend *b);
size_t kernels_record_peak_bytes(const kf_backend *b);

#endif
