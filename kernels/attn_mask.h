/* kernels/attn_mask.h — what a kf_mask (kernels.h) lets each query row see,
 * shared by the CPU and CUDA attention so both read the structure the same
 * way. The functions marked KF_HD (kernels/hd.h) compile for host and device
 * under nvcc; CUDA files include kernels/cuda/cuda_internal.h first (it includes
 * kernels.h and error.h with C linkage). */
#ifndef KF_KERNELS_ATTN_MASK_H
#define KF_KERNELS_ATTN_MASK_H

#include <stdint.h>

#include "common/error.h"
#include "kernels/hd.h"
#include "kernels/kernels.h"

/** Checks the mask's sizes (invariants: a bad mask is a caller bug). */
static inline void kf_mask_check(const kf_mask *m) {
    KF_CHECK(m->n_ctx >= 0 && m->n_groups >= 0 && m->group >= 0, "attention: negative mask sizes");
    KF_CHECK(m->n_groups == 0 || m->group > 0, "attention: n_groups > 0 needs group > 0");
    KF_CHECK(m->q_start >= 0 && m->q_start <= kf_mask_len(m), "attention: q_start out of range");
    KF_CHECK(!m->bidir || m->n_groups == 0, "attention: a bidirectional mask has no groups");
}

/** Valid context length of sample b: valid_len[b] clamped to [0, n_ctx], or
 *  n_ctx when valid_len is NULL. */
static inline KF_HD int64_t kf_mask_valid_ctx(const int32_t *valid_len, int64_t n_ctx, int64_t b) {
    if (!valid_len) return n_ctx;
    int64_t vl = valid_len[b];
    return vl < 0 ? 0 : vl > n_ctx ? n_ctx : vl;
}

/** Keys seen by query row r (r < L) of a sample with valid context length
 *  vl: context keys [0, *ctx) and, when r is a group row (returns 1), its own
 *  group's keys [*grp, r]; a context row (returns 0) sees [0, r] (bidir:
 *  [0, vl)) if r < vl, nothing otherwise, and *grp is not set. */
static inline KF_HD int kf_mask_row_keys(int64_t n_ctx, int64_t group, int bidir, int64_t vl,
                                         int64_t r, int64_t *ctx, int64_t *grp) {
    if (r < n_ctx) {
        *ctx = r < vl ? (bidir ? vl : r + 1) : 0;
        return 0;
    }
    int64_t g = (r - n_ctx) / group;
    *ctx = g + 1 < vl ? g + 1 : vl;
    *grp = n_ctx + g * group;
    return 1;
}

#endif
