/* trainer/model/layout.c — per-sample row layouts (see layout.h). */
#include "trainer/model/layout.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static void alloc_rows(layout *l, int64_t n_ctx, int64_t group, int64_t n_groups, int64_t q_start,
                       int64_t n_out) {
    memset(l, 0, sizeof *l);
    l->mask.n_ctx = n_ctx;
    l->mask.group = group;
    l->mask.n_groups = n_groups;
    l->mask.q_start = q_start;
    l->L = kf_mask_len(&l->mask);
    l->pos = kf_calloc((size_t)l->L, sizeof *l->pos);
    l->noise = kf_calloc((size_t)l->L, 1);
    l->n_out = n_out;
    l->out_rows = kf_calloc((size_t)(n_out ? n_out : 1), sizeof *l->out_rows);
    for (int64_t t = 0; t < n_ctx; t++) l->pos[t] = (int32_t)t;
}

void layout_ar(layout *l, int64_t n) {
    KF_CHECK(n >= 1, "layout_ar: n = %lld", (long long)n);
    alloc_rows(l, n, 0, 0, 0, n);
    for (int64_t t = 0; t < n; t++) l->out_rows[t] = (int32_t)t;
}

/* Groups of k rows after each context position t at positions t+1..t+k. */
static void grouped(layout *l, int64_t n, int64_t k, uint8_t noise) {
    KF_CHECK(n >= 1 && k >= 1, "layout: n = %lld, k = %lld", (long long)n, (long long)k);
    alloc_rows(l, n, k, n, 0, n * k);
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < k; j++) {
            int64_t r = layout_group_row(n, k, t, j);
            l->pos[r] = (int32_t)(t + 1 + j);
            l->noise[r] = noise;
            l->out_rows[t * k + j] = (int32_t)r;
        }
}

void layout_single(layout *l, int64_t n, int64_t k) { grouped(l, n, k, 1); }

void layout_blocks(layout *l, int64_t n, int64_t k) { grouped(l, n, k, 0); }

void layout_double(layout *l, int64_t n, int64_t k) {
    KF_CHECK(n >= 1 && k >= 1, "layout_double: n = %lld, k = %lld", (long long)n, (long long)k);
    alloc_rows(l, n, 2 * k, n, n, n * k);
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < 2 * k; j++) {
            int64_t r = layout_group_row(n, 2 * k, t, j);
            l->pos[r] = (int32_t)(t + 1 + j);
            l->noise[r] = j >= k;
            if (j >= k) l->out_rows[t * k + (j - k)] = (int32_t)r;
        }
}

void layout_free(layout *l) {
    free(l->pos);
    free(l->noise);
    free(l->out_rows);
    memset(l, 0, sizeof *l);
}
