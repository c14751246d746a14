/* kernels/cuda/cuda_attention_tc.cu — the attention kernels of the fp16 and
 * bf16 phases on the tensor cores (PTX mma.sync m16n8k16 with 16-bit
 * operands and fp32 accumulation, kernels/cuda/cuda_mma.cuh), for head_dim 64
 * and 128. Same structure walk, tiles and determinism as the fp32 kernels in
 * cuda_attention.cu (which run the fp32 phase and other head dims): only the
 * key tiles a query tile sees are visited, every output is owned by one
 * warp and summed in a fixed order, and no row depends on another sample.
 *
 *  - q, k, v (and dout in the backward) are read as 16-bit copies
 *    (kernels.h) that rope_fwd (and attn_out's linear_bwd) wrote, or else
 *    rounded to the 16-bit format once per call, into scratch (the CPU
 *    backend's rounding points); tiles are copied from there with cp.async,
 *    the next tile while this one is used; the forward writes out and/or
 *    its 16-bit copy;
 *    operands read down a column of a tile come through ldmatrix.trans;
 *  - forward: a block per (64-query tile, head, sample), 4 warps of 16 rows;
 *    S = Q K^T, the masked online softmax, P and O never leave registers
 *    (the accumulator layout tells each lane its rows);
 *  - backward dK/dV: a block per 64-key tile, each warp 16 keys whose dK, dV
 *    stay in registers over the query tiles that see them (S^T = K Q^T,
 *    dP^T = V dO^T, then dV += P^T dO, dK += dS^T Q);
 *  - backward dQ: a block per query tile, each warp 16 rows (dQ += dS K).
 * P and dS are rounded to the 16-bit format as tensor-core operands, which
 * the CPU does not do: the difference is within the 16-bit tolerances.
 *
 * Batch-invariant: a block reads and writes one sample (blockIdx.z) only;
 * the tiles it visits and their order depend on the mask and that sample's
 * valid_len, never on B or the other samples, and the 16-bit rounding of
 * the inputs is elementwise. So batch-invariant mode (the teacher's 16-bit
 * passes) runs these kernels too (test_cuda_ops: a sample alone equals it
 * in a batch, bitwise, forward and backward).
 *
 * Status: the default of the 16-bit phases (KF_CUDA_TC=0 switches it off),
 * guarded: these kernels have run only under the emulation harness, so at
 * their first use per precision and head dim cuda_attention_guard.cu runs
 * them against the SIMT kernels on a small fixed problem and falls back to
 * the SIMT kernels, with a warning, when they disagree or fail to launch.
 * test_cuda_ops runs every 16-bit attention case through both paths;
 * `kf bench attention` times them (--simt: the SIMT kernels).
 */
#include "kernels/cuda/cuda_attention_tc.h"
#include "kernels/cuda/cuda_attn_mask.cuh"
#include "kernels/cuda/cuda_mma.cuh"

#define TC_TILE 64
#define TC_THREADS 128
/* 32-bit words of row padding: rows stay 16-byte aligned for cp.async, and
 * the 16-byte shift per row puts the 8 rows a fragment load reads in
 * distinct banks */
#define FA_PAD 4

/* ---- tiles and fragments, shared by the forward and the backward ---- */

/* Shared tiles as 32-bit words, two 16-bit values each (low one first): the
 * layout mma's operand registers take. K and V are double-buffered. */
template <int D> struct fa_fwd_smem {
    uint32_t q[TC_TILE][D / 2 + FA_PAD];
    uint32_t k[2][TC_TILE][D / 2 + FA_PAD], v[2][TC_TILE][D / 2 + FA_PAD];
};

/* Queues the copy of rows [r0, r0+64) of one head of the 16-bit qkv (row
 * stride ld elements) into s; rows at or past `end` are zero-filled. */
template <int D>
__device__ __forceinline__ void fa_load(uint32_t (*s)[D / 2 + FA_PAD], const uint16_t *base,
                                        int64_t ld, int64_t r0, int64_t end) {
    for (int i = threadIdx.x; i < TC_TILE * D / 8; i += TC_THREADS) {
        int r = i / (D / 8), c = (i % (D / 8)) * 8;
        bool in = r0 + r < end;
        cp_async16(&s[r][c / 2], base + (in ? (r0 + r) * ld + c : 0), in);
    }
}

/* x rounded to T, its bits (q, k, v as the CPU backend rounds them). */
template <typename T> __global__ void k_to_lowp(uint16_t *y, const float *x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (uint16_t)mma_bits(mma_cvt<T>(x[i]));
}

/* acc[j] (16 x 8 tiles over [16 rows][D]) += A X with A the 16 x 64 operand
 * packed from the lane's 8 accumulator tiles a (P or dS, rounded to T) and X
 * a row-major 64 x D tile, whose B registers for two 8-column tiles come from
 * one ldmatrix.trans (lane l names row l % 8 of the 8 x 8 tile l / 8: rows
 * +8 for odd l / 8, the second column tile for l >= 16). */
template <int D, typename T>
__device__ __forceinline__ void fa_acc_ax(float (*acc)[4], const float (*a)[4],
                                          const uint32_t (*X)[D / 2 + FA_PAD], int g, int t) {
    int l = g * 4 + t, lr = l % 8 + 8 * (l / 8 % 2), lc = l / 16 * 4; /* row, word of l's row */
#pragma unroll
    for (int kc = 0; kc < TC_TILE / 16; kc++) {
        uint32_t pa[4] = {mma_pack<T>(a[2 * kc][0], a[2 * kc][1]),
                          mma_pack<T>(a[2 * kc][2], a[2 * kc][3]),
                          mma_pack<T>(a[2 * kc + 1][0], a[2 * kc + 1][1]),
                          mma_pack<T>(a[2 * kc + 1][2], a[2 * kc + 1][3])};
#pragma unroll
        for (int j = 0; j < D / 8; j += 2) {
            uint32_t xb[4];
            ldmatrix_x4_trans(xb, &X[kc * 16 + lr][j * 4 + lc]);
            mma_16816<T>(acc[j], pa, xb);
            mma_16816<T>(acc[j + 1], pa, xb + 2);
        }
    }
}

/* s (8 tiles of 16 x 8) = A Y^T for the warp's 16 rows of the row-major
 * tile A (this lane's are wr and wr + 8) and the 64 rows of the row-major
 * tile Y. */
template <int D, typename T>
__device__ __forceinline__ void fa_abt(float (*s)[4], const uint32_t (*A)[D / 2 + FA_PAD], int wr,
                                       const uint32_t (*Y)[D / 2 + FA_PAD], int g, int t) {
#pragma unroll
    for (int j = 0; j < TC_TILE / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4] = {A[wr][kk * 8 + t], A[wr + 8][kk * 8 + t], A[wr][kk * 8 + 4 + t],
                         A[wr + 8][kk * 8 + 4 + t]};
#pragma unroll
        for (int j = 0; j < TC_TILE / 8; j++) {
            uint32_t yb[2] = {Y[j * 8 + g][kk * 8 + t], Y[j * 8 + g][kk * 8 + 4 + t]};
            mma_16816<T>(s[j], a, yb);
        }
    }
}

/* ---- forward: S and O in registers ---- */

/* One block per (64-query tile, head, sample), 4 warps of 16 query rows. Lane
 * (g, t) = (lane / 4, lane % 4) holds rows g and g+8 of its warp's rows
 * (cuda_mma.cuh): S = Q K^T for a 64-key tile in 8 accumulator tiles, the
 * masked online softmax on them (a row's max and sum over the 4 lanes of its
 * group by two xor shuffles, the same bits on all 4), P packed to T straight
 * from S's registers as the A operand of O += P V, O rescaled in registers.
 * K/V tile t+1 is copied (cp.async) while tile t is used. */
template <int D, typename T>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_fwd_mma(float *out, void *out16, float *lse, const uint16_t *qkv, mask_dev m,
                   int64_t n_head, float scale, int lowp) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    fa_fwd_smem<D> &S = *reinterpret_cast<fa_fwd_smem<D> *>(smem_raw);
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t r0 = m.q_start + (int64_t)blockIdx.x * TC_TILE, r1 = min(m.L, r0 + TC_TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    const uint16_t *base = qkv + b * m.L * ld + h * D;
    int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    int wr = warp * 16 + g; /* this lane's first row in the tile; the second is wr + 8 */

    key_tiles tiles = mask_key_tiles<TC_TILE>(m, vl, r0, r1);
    fa_load<D>(S.q, base, ld, r0, m.L);
    cp_async_commit();
    int64_t c0;
    int kmin, kmax;
    if (tiles.n > 0) {
        key_tile<TC_TILE>(tiles, 0, &c0, &kmin, &kmax);
        fa_load<D>(S.k[0], base + H, ld, c0, m.L);
        fa_load<D>(S.v[0], base + 2 * H, ld, c0, m.L);
    }
    cp_async_commit();
    row_mask rm[2] = {mask_row(m, vl, r0 + wr, r0, r1), mask_row(m, vl, r0 + wr + 8, r0, r1)};
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    for (int64_t it = 0; it < tiles.n; it++) {
        int buf = (int)(it & 1);
        key_tile<TC_TILE>(tiles, it, &c0, &kmin, &kmax);
        if (it + 1 < tiles.n) { /* prefetch the next tile into the other buffer */
            int64_t n0;
            int nmin, nmax;
            key_tile<TC_TILE>(tiles, it + 1, &n0, &nmin, &nmax);
            fa_load<D>(S.k[buf ^ 1], base + H, ld, n0, m.L);
            fa_load<D>(S.v[buf ^ 1], base + 2 * H, ld, n0, m.L);
        }
        cp_async_commit();
        cp_async_wait<1>();      /* Q and tile it are in (this thread's copies) */
        __syncthreads();         /* ... and every thread's */
        float s[TC_TILE / 8][4]; /* S = Q K^T: tile j holds keys c0 + 8j + 2t, +1 */
        fa_abt<D, T>(s, S.q, wr, S.k[buf], g, t);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < TC_TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = (int)c0 + j * 8 + 2 * t + (e & 1);
                bool vis = col >= kmin && col < kmax && row_sees(rm[e >> 1], col);
                s[j][e] = vis ? s[j][e] * scale : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
            }
        float alpha[2], mnew[2], ps[2] = {0.0f, 0.0f};
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
            mnew[hr] = fmaxf(mrow[hr], mx[hr]);
            alpha[hr] = mrow[hr] == -INFINITY ? 0.0f : __expf(mrow[hr] - mnew[hr]);
        }
#pragma unroll
        for (int j = 0; j < TC_TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int hr = e >> 1;
                s[j][e] = mnew[hr] == -INFINITY ? 0.0f : __expf(s[j][e] - mnew[hr]);
                ps[hr] += s[j][e];
            }
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            ps[hr] += __shfl_xor_sync(0xffffffffu, ps[hr], 1); /* a+b on both lanes: identical */
            ps[hr] += __shfl_xor_sync(0xffffffffu, ps[hr], 2);
            lrow[hr] = lrow[hr] * alpha[hr] + ps[hr];
            mrow[hr] = mnew[hr];
        }
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }
        fa_acc_ax<D, T>(o, s, S.v[buf], g, t); /* O += P V */
        __syncthreads(); /* every warp is done with buffer buf before it is refilled */
    }
    cp_async_wait<0>(); /* Q's group, when no key tile was visited */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int64_t r = r0 + wr + 8 * hr;
        if (r >= r1) continue;
        float l = lrow[hr], inv = l > 0.0f ? 1.0f / l : 0.0f;
        int64_t o0 = (b * m.L + r) * H + h * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float v = o[j][2 * hr + e] * inv;
                int64_t c = o0 + j * 8 + 2 * t + e;
                if (out) out[c] = cu_lowp(v, lowp);
                if (out16) cu_store16(out16, c, v, lowp);
            }
        if (t == 0) lse[(b * n_head + h) * m.L + r] = l > 0.0f ? mrow[hr] + logf(l) : 0.0f;
    }
}

/* ---- backward: dK/dV and dQ in registers ---- */

/* Rows wr and wr+8 of the 16 x D accumulators acc, rounded by lowp, into the
 * rows row0 + wr (+8) below row_end of dqkv and/or dqkv16 from element off
 * (row stride ld). */
template <int D>
__device__ __forceinline__ void fa_store(float *dqkv, void *dqkv16, int64_t off, int64_t ld,
                                         int64_t row0, int64_t row_end, const float (*acc)[4],
                                         int wr, int t, int lowp) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int64_t r = row0 + wr + 8 * hr;
        if (r >= row_end) continue;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            int64_t e = off + r * ld + j * 8 + 2 * t;
            dqkv_store(dqkv, dqkv16, e, acc[j][2 * hr], lowp);
            dqkv_store(dqkv, dqkv16, e + 1, acc[j][2 * hr + 1], lowp);
        }
    }
}

template <int D> struct fa_kv_smem {
    uint32_t k[TC_TILE][D / 2 + FA_PAD], v[TC_TILE][D / 2 + FA_PAD];
    uint32_t q[2][TC_TILE][D / 2 + FA_PAD], dout[2][TC_TILE][D / 2 + FA_PAD];
    float lse[2][TC_TILE], delta[2][TC_TILE];
    row_mask rm[2][TC_TILE];
};

/* Query tile i of the ranges [lo, hi): its first row *r0 and the end *r1 of
 * its range (the tiles of range 0 first). */
__device__ __forceinline__ void fa_query_tile(int64_t i, const int64_t *lo, const int64_t *hi,
                                              int nr, int64_t *r0, int64_t *r1) {
    *r0 = *r1 = 0; /* i past the last tile: an empty one */
    for (int q = 0; q < nr; q++) {
        int64_t n = (hi[q] - lo[q] + TC_TILE - 1) / TC_TILE;
        if (i < n) {
            *r0 = lo[q] + i * TC_TILE;
            *r1 = hi[q];
            return;
        }
        i -= n;
    }
}

/* One block per 64-key tile: its queries' tiles (the ranges
 * mask_key_tile_queries gives, in order) stream through double-buffered Q
 * and dO tiles; each warp owns 16 keys and keeps their dK and dV in
 * registers: S^T = K Q^T and dP^T = V dO^T, then P^T and dS^T straight from
 * those registers as the A operands of dV += P^T dO and dK += dS^T Q. */
template <int D, typename T>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_bwd_kv_mma(float *dqkv, void *dqkv16, const uint16_t *dout, const float *lse,
                      const float *delta, const uint16_t *qkv, mask_dev m, int64_t n_head,
                      float scale, int lowp) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    fa_kv_smem<D> &S = *reinterpret_cast<fa_kv_smem<D> *>(smem_raw);
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t c0 = (int64_t)blockIdx.x * TC_TILE, c1 = min(m.L, c0 + TC_TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    const uint16_t *base = qkv + b * m.L * ld + h * D, *dob = dout + b * m.L * H + h * D;
    const float *lb = lse + (b * n_head + h) * m.L, *db = delta + (b * n_head + h) * m.L;
    int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    int wr = warp * 16 + g;
    int key[2] = {(int)(c0 + wr), (int)(c0 + wr + 8)};
    bool key_ok[2] = {c0 + wr < c1, c0 + wr + 8 < c1};

    int64_t lo[3], hi[3];
    int nr = mask_key_tile_queries(m, vl, c0, c1, lo, hi);
    int64_t n = 0;
    for (int q = 0; q < nr; q++) n += (hi[q] - lo[q] + TC_TILE - 1) / TC_TILE;
    fa_load<D>(S.k, base + H, ld, c0, m.L);
    fa_load<D>(S.v, base + 2 * H, ld, c0, m.L);
    cp_async_commit();
    int64_t r0 = 0, r1 = 0;
    if (n > 0) {
        fa_query_tile(0, lo, hi, nr, &r0, &r1);
        fa_load<D>(S.q[0], base, ld, r0, r1);
        fa_load<D>(S.dout[0], dob, H, r0, r1);
        for (int i = threadIdx.x; i < TC_TILE; i += TC_THREADS) {
            bool in = r0 + i < r1;
            S.lse[0][i] = in ? lb[r0 + i] : 0.0f;
            S.delta[0][i] = in ? db[r0 + i] : 0.0f;
            S.rm[0][i] = mask_row(m, vl, r0 + i, r0, r1);
        }
    }
    cp_async_commit();
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        dk[j][0] = dk[j][1] = dk[j][2] = dk[j][3] = 0.0f;
        dv[j][0] = dv[j][1] = dv[j][2] = dv[j][3] = 0.0f;
    }
    for (int64_t it = 0; it < n; it++) {
        int buf = (int)(it & 1);
        if (it + 1 < n) { /* the next query tile into the other buffers */
            int64_t n0, n1;
            fa_query_tile(it + 1, lo, hi, nr, &n0, &n1);
            fa_load<D>(S.q[buf ^ 1], base, ld, n0, n1);
            fa_load<D>(S.dout[buf ^ 1], dob, H, n0, n1);
            for (int i = threadIdx.x; i < TC_TILE; i += TC_THREADS) {
                bool in = n0 + i < n1;
                S.lse[buf ^ 1][i] = in ? lb[n0 + i] : 0.0f;
                S.delta[buf ^ 1][i] = in ? db[n0 + i] : 0.0f;
                S.rm[buf ^ 1][i] = mask_row(m, vl, n0 + i, n0, n1);
            }
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        float p[TC_TILE / 8][4], ds[TC_TILE / 8][4]; /* keys x queries */
        fa_abt<D, T>(p, S.k, wr, S.q[buf], g, t);
        fa_abt<D, T>(ds, S.v, wr, S.dout[buf], g, t);
#pragma unroll
        for (int j = 0; j < TC_TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qc = j * 8 + 2 * t + (e & 1), hr = e >> 1;
                bool vis = key_ok[hr] && row_sees(S.rm[buf][qc], key[hr]);
                float pe = vis ? __expf(p[j][e] * scale - S.lse[buf][qc]) : 0.0f;
                ds[j][e] = vis ? pe * (ds[j][e] - S.delta[buf][qc]) * scale : 0.0f;
                p[j][e] = pe;
            }
        fa_acc_ax<D, T>(dv, p, S.dout[buf], g, t);
        fa_acc_ax<D, T>(dk, ds, S.q[buf], g, t);
        __syncthreads(); /* every warp is done with buffer buf before it is refilled */
    }
    cp_async_wait<0>(); /* the K/V group, when no query tile was visited */
    int64_t o = b * m.L * ld + h * D;
    fa_store<D>(dqkv, dqkv16, o + H, ld, c0, c1, dk, wr, t, lowp);
    fa_store<D>(dqkv, dqkv16, o + 2 * H, ld, c0, c1, dv, wr, t, lowp);
}

template <int D> struct fa_q_smem {
    uint32_t q[TC_TILE][D / 2 + FA_PAD], dout[TC_TILE][D / 2 + FA_PAD];
    uint32_t k[2][TC_TILE][D / 2 + FA_PAD], v[2][TC_TILE][D / 2 + FA_PAD];
};

/* One block per 64-query tile, each warp 16 rows: S = Q K^T and dP = dO V^T
 * over the key tiles the rows see (as the forward), dS from their registers
 * as the A operand of dQ += dS K. */
template <int D, typename T>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_bwd_q_mma(float *dqkv, void *dqkv16, const uint16_t *dout, const float *lse,
                     const float *delta, const uint16_t *qkv, mask_dev m, int64_t n_head,
                     float scale, int lowp) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    fa_q_smem<D> &S = *reinterpret_cast<fa_q_smem<D> *>(smem_raw);
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t r0 = (int64_t)blockIdx.x * TC_TILE, r1 = min(m.L, r0 + TC_TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    const uint16_t *base = qkv + b * m.L * ld + h * D;
    int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    int wr = warp * 16 + g;
    int64_t q0 = max(r0, m.q_start); /* rows before q_start are not queries: dq stays 0 */
    key_tiles tiles = mask_key_tiles<TC_TILE>(m, vl, q0, r1);
    int64_t n = q0 < r1 ? tiles.n : 0;
    fa_load<D>(S.q, base, ld, r0, m.L);
    fa_load<D>(S.dout, dout + b * m.L * H + h * D, H, r0, m.L);
    cp_async_commit();
    int64_t c0;
    int kmin, kmax;
    if (n > 0) {
        key_tile<TC_TILE>(tiles, 0, &c0, &kmin, &kmax);
        fa_load<D>(S.k[0], base + H, ld, c0, m.L);
        fa_load<D>(S.v[0], base + 2 * H, ld, c0, m.L);
    }
    cp_async_commit();
    row_mask rm[2] = {mask_row(m, vl, r0 + wr, q0, r1), mask_row(m, vl, r0 + wr + 8, q0, r1)};
    float l[2], dl[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int64_t r = r0 + wr + 8 * hr;
        l[hr] = r < m.L ? lse[(b * n_head + h) * m.L + r] : 0.0f;
        dl[hr] = r < m.L ? delta[(b * n_head + h) * m.L + r] : 0.0f;
    }
    float dq[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
    for (int64_t it = 0; it < n; it++) {
        int buf = (int)(it & 1);
        key_tile<TC_TILE>(tiles, it, &c0, &kmin, &kmax);
        if (it + 1 < n) {
            int64_t n0;
            int nmin, nmax;
            key_tile<TC_TILE>(tiles, it + 1, &n0, &nmin, &nmax);
            fa_load<D>(S.k[buf ^ 1], base + H, ld, n0, m.L);
            fa_load<D>(S.v[buf ^ 1], base + 2 * H, ld, n0, m.L);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        float p[TC_TILE / 8][4], ds[TC_TILE / 8][4]; /* queries x keys */
        fa_abt<D, T>(p, S.q, wr, S.k[buf], g, t);
        fa_abt<D, T>(ds, S.dout, wr, S.v[buf], g, t);
#pragma unroll
        for (int j = 0; j < TC_TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = (int)c0 + j * 8 + 2 * t + (e & 1), hr = e >> 1;
                bool vis = col >= kmin && col < kmax && row_sees(rm[hr], col);
                float pe = vis ? __expf(p[j][e] * scale - l[hr]) : 0.0f;
                ds[j][e] = vis ? pe * (ds[j][e] - dl[hr]) * scale : 0.0f;
            }
        fa_acc_ax<D, T>(dq, ds, S.k[buf], g, t);
        __syncthreads(); /* every warp is done with buffer buf before it is refilled */
    }
    cp_async_wait<0>();
    fa_store<D>(dqkv, dqkv16, b * m.L * ld + h * D, ld, r0, r1, dq, wr, t, lowp);
}

/* x (n floats) rounded to T in scratch slot `slot`. */
template <typename T>
static const uint16_t *fa_lowp(kf_backend *b, int slot, const float *x, int64_t n) {
    uint16_t *y = (uint16_t *)cu_scratch(b, slot, (size_t)n * sizeof(uint16_t));
    k_to_lowp<T><<<cu_blocks(n), 256, 0, cu_stream(b)>>>(y, x, n);
    CUDA_LAUNCHED();
    return y;
}

typedef void (*fa_fwd_kernel)(float *, void *, float *, const uint16_t *, mask_dev, int64_t, float,
                              int);
typedef void (*fa_bwd_kernel)(float *, void *, const uint16_t *, const float *, const float *,
                              const uint16_t *, mask_dev, int64_t, float, int);

/* Kernels go through pointers: the launch syntax takes no template commas. */
template <typename K> static cudaError_t fa_smem(K k, size_t bytes) {
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <int D, typename T>
static cudaError_t fa_fwd(kf_backend *b, float *out, void *out16, float *lse, const float *qkv,
                          const void *qkv16, const mask_dev *md, int64_t B, int64_t n_head) {
    const uint16_t *q16 = qkv16 ? (const uint16_t *)qkv16
                                : fa_lowp<T>(b, CU_SCRATCH_A, qkv, B * md->L * 3 * n_head * D);
    int64_t nq = md->L - md->q_start;
    dim3 grid((unsigned)((nq + TC_TILE - 1) / TC_TILE), (unsigned)n_head, (unsigned)B);
    size_t bytes = sizeof(fa_fwd_smem<D>);
    fa_fwd_kernel k_fwd = k_attn_fwd_mma<D, T>;
    cudaError_t e = fa_smem(k_fwd, bytes);
    if (e != cudaSuccess) return e;
    k_fwd<<<grid, TC_THREADS, bytes, cu_stream(b)>>>(out, out16, lse, q16, *md, n_head,
                                                     1.0f / sqrtf((float)D), b->precision);
    return cudaGetLastError();
}

template <int D, typename T>
static cudaError_t fa_bwd(kf_backend *b, float *dqkv, void *dqkv16, const float *dout,
                          const void *dout16, const float *lse, const float *delta,
                          const float *qkv, const void *qkv16, const mask_dev *md, int64_t B,
                          int64_t n_head) {
    const uint16_t *q16 = qkv16 ? (const uint16_t *)qkv16
                                : fa_lowp<T>(b, CU_SCRATCH_A, qkv, B * md->L * 3 * n_head * D);
    const uint16_t *do16 = dout16 ? (const uint16_t *)dout16
                                  : fa_lowp<T>(b, CU_SCRATCH_B, dout, B * md->L * n_head * D);
    dim3 grid((unsigned)((md->L + TC_TILE - 1) / TC_TILE), (unsigned)n_head, (unsigned)B);
    float scale = 1.0f / sqrtf((float)D);
    fa_bwd_kernel k_kv = k_attn_bwd_kv_mma<D, T>, k_q = k_attn_bwd_q_mma<D, T>;
    size_t kv_bytes = sizeof(fa_kv_smem<D>), q_bytes = sizeof(fa_q_smem<D>);
    cudaError_t e = fa_smem(k_kv, kv_bytes);
    if (e == cudaSuccess) e = fa_smem(k_q, q_bytes);
    if (e != cudaSuccess) return e;
    k_kv<<<grid, TC_THREADS, kv_bytes, cu_stream(b)>>>(dqkv, dqkv16, do16, lse, delta, q16, *md,
                                                       n_head, scale, b->precision);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    k_q<<<grid, TC_THREADS, q_bytes, cu_stream(b)>>>(dqkv, dqkv16, do16, lse, delta, q16, *md,
                                                     n_head, scale, b->precision);
    return cudaGetLastError();
}

cudaError_t attn_fwd_tc(kf_backend *b, float *out, void *out16, float *lse, const float *qkv,
                        const void *qkv16, const mask_dev *md, int64_t B, int64_t n_head,
                        int64_t head_dim) {
    bool bf = b->precision == KF_PREC_BF16;
#define FA_FWD(D, T) fa_fwd<D, T>(b, out, out16, lse, qkv, qkv16, md, B, n_head)
    if (head_dim == 64) return bf ? FA_FWD(64, __nv_bfloat16) : FA_FWD(64, __half);
    return bf ? FA_FWD(128, __nv_bfloat16) : FA_FWD(128, __half);
#undef FA_FWD
}

cudaError_t attn_bwd_tc(kf_backend *b, float *dqkv, void *dqkv16, const float *dout,
                        const void *dout16, const float *lse, const float *delta, const float *qkv,
                        const void *qkv16, const mask_dev *md, int64_t B, int64_t n_head,
                        int64_t head_dim) {
    bool bf = b->precision == KF_PREC_BF16;
#define FA_BWD(D, T)                                                                               \
    fa_bwd<D, T>(b, dqkv, dqkv16, dout, dout16, lse, delta, qkv, qkv16, md, B, n_head)
    if (head_dim == 64) return bf ? FA_BWD(64, __nv_bfloat16) : FA_BWD(64, __half);
    return bf ? FA_BWD(128, __nv_bfloat16) : FA_BWD(128, __half);
#undef FA_BWD
}
