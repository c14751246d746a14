/* trainer/model/layout.h — the row layout of one sample for each kind of pass.
 *
 * A pass runs the backbone over L rows per sample. Each row is either a token
 * (embedded from vocab_embed) or a noise variable (embedded by the PFLM noise
 * encoder), has a RoPE position, and the attention structure is a kf_mask
 * (kernels/kernels.h). The layouts (docs/architecture.md "Reference model"):
 *
 *   layout_ar(n)           n context tokens, causal; every row gives logits
 *                          (row t predicts token t+1). Positions 0..n-1.
 *   layout_single(n, k)    SingleForward: n context tokens, then n groups of k
 *                          noise rows; row n + t*k + j is noise j of position
 *                          t, at RoPE position t+1+j; logits from the noise
 *                          rows in (t, j) order. The standard-MTP baseline
 *                          uses layout_single(n, 1) (one noise token carries
 *                          all k noise values; see model.h HEAD_MTP).
 *   layout_double(n, k)    DoubleForward (teacher round 2): n context rows
 *                          (not computed: q_start = n, their K/V come from
 *                          round 1), then n groups of 2k rows: k Future-1
 *                          TOKEN rows (round-1 outputs, positions t+1..t+k)
 *                          then k Future-2 NOISE rows (positions
 *                          t+k+1..t+2k); logits from the F2 rows, (t, j)
 *                          order.
 *   layout_blocks(n, k)    layout_single with TOKEN group rows: group t holds
 *                          k tokens following context position t (positions
 *                          t+1..t+k). Used to compute an AR model's exact
 *                          k-token inverse-CDF blocks (supervision.h) and
 *                          teacher-forced AR losses; logits from every
 *                          group row, (t, j) order.
 *
 * All layouts are per sample: the model repeats them over the batch.
 */
#ifndef KF_TRAINER_MODEL_LAYOUT_H
#define KF_TRAINER_MODEL_LAYOUT_H

#include <stdint.h>

#include "kernels/kernels.h"

typedef struct layout {
    kf_mask mask;      /* structure; mask.valid_len is set per batch by the model */
    int64_t L;         /* rows per sample (kf_mask_len(&mask)) */
    int32_t *pos;      /* [L] RoPE position of each row */
    uint8_t *noise;    /* [L] 1: noise row, 0: token row */
    int64_t n_out;     /* rows per sample that produce logits */
    int32_t *out_rows; /* [n_out] those rows, in output order */
} layout;

void layout_ar(layout *l, int64_t n);
void layout_single(layout *l, int64_t n, int64_t k);
void layout_double(layout *l, int64_t n, int64_t k);
void layout_blocks(layout *l, int64_t n, int64_t k);

/** Releases the arrays of l (l itself is the caller's). */
void layout_free(layout *l);

/** Row of group member j of context position t in a grouped layout with n
 *  context rows and groups of g rows. */
static inline int64_t layout_group_row(int64_t n, int64_t g, int64_t t, int64_t j) {
    return n + t * g + j;
}

#endif
