/* kernels/cuda/cuda_attn_mask.cuh — the kf_mask structure on the device, shared
 * by the attention kernels (cuda_attention.cu: fp32 SIMT; cuda_attention_tc.cu:
 * fp16 tensor cores). See cuda_attention.cu for what each query row sees. */
#ifndef KF_KERNELS_CUDA_ATTN_MASK_CUH
#define KF_KERNELS_CUDA_ATTN_MASK_CUH

/* cuda_internal.h first, in its own block (clang-format sorts within a block):
 * it includes kernels.h and error.h as C */
#include "kernels/cuda/cuda_internal.h"

#include "kernels/attn_mask.h"

struct mask_dev {
    int64_t L, n_ctx, group, q_start;
    const int32_t *valid_len; /* device copy, or NULL */
    int bidir;                /* context rows see every valid context key */
};

__device__ __forceinline__ int64_t mask_vl(const mask_dev &m, int64_t b) {
    return kf_mask_valid_ctx(m.valid_len, m.n_ctx, b);
}

/* What query row r sees, precomputed once per row so the per-element test
 * needs no division: key c is visible iff c < ctx || (c >= grp && c <= r)
 * (a causal row's ctx is at most r + 1; a bidirectional one's is vl). */
struct row_mask {
    int r, ctx, grp;
};

__device__ __forceinline__ row_mask mask_row(const mask_dev &m, int64_t vl, int64_t r, int64_t r_lo,
                                             int64_t r_hi) {
    row_mask q;
    q.r = (int)r;
    if (r < r_lo || r >= r_hi || r >= m.L) { /* not a query here: sees nothing */
        q.r = -1;
        q.ctx = 0;
        q.grp = 0x7fffffff;
    } else {
        int64_t ctx, grp;
        q.grp =
            kf_mask_row_keys(m.n_ctx, m.group, m.bidir, vl, r, &ctx, &grp) ? (int)grp : 0x7fffffff;
        q.ctx = (int)ctx;
    }
    return q;
}

__device__ __forceinline__ bool row_sees(const row_mask &q, int c) {
    return c < q.ctx || (c >= q.grp && c <= q.r);
}

/* The key tiles (T keys each) the query tile [r0, r1) visits: those over the
 * context keys [0, ctx_hi), then those over the group keys [grp_lo, grp_hi). */
struct key_tiles {
    int64_t ctx_hi, grp_lo, grp_hi;
    int64_t n_ctx; /* tiles over the context range */
    int64_t n;     /* tiles in all */
};

template <int T>
__device__ __forceinline__ key_tiles mask_key_tiles(const mask_dev &m, int64_t vl, int64_t r0,
                                                    int64_t r1) {
    key_tiles k;
    int64_t hi = 0;
    if (r0 < min(m.n_ctx, vl)) /* rows r < vl see [0, r] (bidir: [0, vl)) */
        hi = m.bidir ? vl : min(min(r1, m.n_ctx), vl);
    k.grp_lo = k.grp_hi = 0;
    if (r1 > m.n_ctx) {
        int64_t g_last = (r1 - 1 - m.n_ctx) / m.group;
        hi = max(hi, min(g_last + 1, vl));
        int64_t g_first = (max(r0, m.n_ctx) - m.n_ctx) / m.group;
        k.grp_lo = m.n_ctx + g_first * m.group;
        k.grp_hi = r1;
    }
    k.ctx_hi = hi;
    k.n_ctx = (k.ctx_hi + T - 1) / T;
    k.n = k.n_ctx + (k.grp_hi - k.grp_lo + T - 1) / T;
    return k;
}

/* Tile t of k: its first key *c0 and the keys [*kmin, *kmax) it counts (a
 * tile may run past its range into the other one: each key counts once). */
template <int T>
__device__ __forceinline__ void key_tile(const key_tiles &k, int64_t t, int64_t *c0, int *kmin,
                                         int *kmax) {
    bool ctx = t < k.n_ctx;
    *c0 = ctx ? t * T : k.grp_lo + (t - k.n_ctx) * T;
    *kmin = ctx ? 0 : (int)k.grp_lo;
    *kmax = ctx ? (int)k.ctx_hi : (int)k.grp_hi;
}

/* Query ranges that see some key of the tile [c0, c1), clipped to
 * [q_start, L), sorted and merged; returns how many (at most 3). */
static inline __device__ int mask_key_tile_queries(const mask_dev &m, int64_t vl, int64_t c0,
                                                   int64_t c1, int64_t lo[3], int64_t hi[3]) {
    int64_t a[3], z[3];
    int n = 0;
    if (c0 < min(m.n_ctx, vl)) { /* context keys: later context rows (bidir: all valid
                                    ones) and groups g >= c */
        a[n] = m.bidir ? 0 : c0;
        z[n++] = vl;
        a[n] = m.n_ctx + c0 * m.group;
        z[n++] = m.L;
    }
    if (c1 > m.n_ctx) { /* group keys: the rest of their own groups */
        int64_t k0 = max(c0, m.n_ctx);
        int64_t g_last = (c1 - 1 - m.n_ctx) / m.group;
        a[n] = k0;
        z[n++] = min(m.L, m.n_ctx + (g_last + 1) * m.group);
    }
    for (int i = 1; i < n; i++) /* sort by start (a tile across n_ctx has all three) */
        for (int j = i; j > 0 && a[j] < a[j - 1]; j--) {
            int64_t t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
            t = z[j];
            z[j] = z[j - 1];
            z[j - 1] = t;
        }
    int out = 0;
    for (int i = 0; i < n; i++) {
        int64_t s = max(a[i], m.q_start), e = min(z[i], m.L);
        if (s >= e) continue;
        if (out > 0 && s <= hi[out - 1]) {
            hi[out - 1] = max(hi[out - 1], e);
        } else {
            lo[out] = s;
            hi[out++] = e;
        }
    }
    return out;
}

/** Checks m and returns its device form (valid_len copied to the device
 *  unless the caller gave its copy, valid_len_d). */
mask_dev mask_to_dev(kf_backend *b, const kf_mask *m, int64_t B);

#endif
