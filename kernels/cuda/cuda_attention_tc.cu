/* kernels/cuda/cuda_attention_tc.cu — the fp16-phase attention kernels on the
 * tensor cores (WMMA, half operands, fp32 accumulation), for head_dim 64 and
 * 128. Same structure walk, tiles and determinism as the fp32 kernels in
 * cuda_attention.cu (which run the fp32 phase and other head dims):
 *
 *  - forward: a block per (64-query tile, head, sample), 4 warps, each warp
 *    owns 16 query rows: S = Q K^T on the tensor cores into shared memory,
 *    masked online softmax by its lanes (2 per row), P rounded to half, then
 *    O += P V on the tensor cores with O kept in shared memory (rescaled by
 *    the row's softmax correction before each product);
 *  - backward dK/dV: a block per 64-key tile, each warp owns 16 keys and keeps
 *    their dK, dV fragments in registers over the query tiles that see them
 *    (S^T = K Q^T, dP^T = V dO^T, then dV += P^T dO, dK += dS^T Q);
 *  - backward dQ: a block per query tile, each warp 16 rows (dQ += dS K).
 * q, k, v, out and dout are rounded to half on load (the CPU backend's fp16
 * rounding points); P and dS are also half as tensor-core operands, which
 * the CPU does not round: the difference is within fp16 tolerances.
 *
 * Status: opt-in (KF_CUDA_TC=1 when the backend is created) until
 * test_cuda_ops has passed with it on a GPU — the session that wrote these
 * kernels ran out of GPU time before it could run them. test_cuda_ops runs
 * every fp16 attention case through this path too; `kf bench attention --tc`
 * times it. Once verified, make it the default in kernels_cuda_create.
 */
#include <mma.h>

#include "kernels/cuda/cuda_attention_tc.h"
#include "kernels/cuda/cuda_attn_mask.cuh"
#include "kernels/cuda/cuda_mma.cuh"

using namespace nvcuda;

#define TC_TILE 64
#define TC_THREADS 128
#define HP 8 /* half row padding (keeps 32-byte fragment alignment, spreads banks) */
#define FP 4 /* float row padding */

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> frag_b_col;

/* Rows [r0, r0+64) of one head (row stride ld floats) into s as half; rows at
 * or past L are zero. 16-byte loads (D and the row strides are multiples of 4). */
template <int D>
__device__ __forceinline__ void load_half_tile(__half (*s)[D + HP], const float *base, int64_t ld,
                                               int64_t r0, int64_t L) {
    for (int i = threadIdx.x; i < TC_TILE * D / 4; i += TC_THREADS) {
        int r = i / (D / 4), d = (i % (D / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + r < L) v = *reinterpret_cast<const float4 *>(base + (r0 + r) * ld + d);
        s[r][d] = __float2half_rn(v.x);
        s[r][d + 1] = __float2half_rn(v.y);
        s[r][d + 2] = __float2half_rn(v.z);
        s[r][d + 3] = __float2half_rn(v.w);
    }
}

__device__ __forceinline__ float round_h(float v) { return __half2float(__float2half_rn(v)); }

/* ---- forward: mma.sync with S and O in registers ---- */

#define FA_PAD                                                                                     \
    4 /* 32-bit words of row padding: rows stay 16-byte aligned for                                \
       * cp.async, and the 16-byte shift per row puts the 8 rows a                                 \
       * fragment load reads in distinct banks */

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

/* One block per (64-query tile, head, sample), 4 warps of 16 query rows. Lane
 * (g, t) = (lane / 4, lane % 4) holds rows g and g+8 of its warp's rows
 * (cuda_mma.cuh): S = Q K^T for a 64-key tile in 8 accumulator tiles, the
 * masked online softmax on them (a row's max and sum over the 4 lanes of its
 * group by two xor shuffles, the same bits on all 4), P packed to T straight
 * from S's registers as the A operand of O += P V, O rescaled in registers.
 * K/V tile t+1 is copied (cp.async) while tile t is used. */
template <int D, typename T>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_fwd_mma(float *out, float *lse, const uint16_t *qkv, mask_dev m, int64_t n_head,
                   float scale, int lowp) {
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
    uint32_t qa[D / 16][4];
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
        cp_async_wait<1>(); /* Q and tile it are in (this thread's copies) */
        __syncthreads();    /* ... and every thread's */
        if (it == 0)
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                qa[kk][0] = S.q[wr][kk * 8 + t];
                qa[kk][1] = S.q[wr + 8][kk * 8 + t];
                qa[kk][2] = S.q[wr][kk * 8 + 4 + t];
                qa[kk][3] = S.q[wr + 8][kk * 8 + 4 + t];
            }
        float s[TC_TILE / 8][4]; /* S = Q K^T: tile j holds keys c0 + 8j + 2t, +1 */
#pragma unroll
        for (int j = 0; j < TC_TILE / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t kb[2] = {S.k[buf][j * 8 + g][kk * 8 + t],
                                  S.k[buf][j * 8 + g][kk * 8 + 4 + t]};
                mma_16816<T>(s[j], qa[kk], kb);
            }
        }
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
#pragma unroll
        for (int kc = 0; kc < TC_TILE / 16; kc++) { /* O += P V over 16 keys at a time */
            uint32_t pa[4] = {mma_pack<T>(s[2 * kc][0], s[2 * kc][1]),
                              mma_pack<T>(s[2 * kc][2], s[2 * kc][3]),
                              mma_pack<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                              mma_pack<T>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
            const uint32_t(*V)[D / 2 + FA_PAD] = S.v[buf];
            int kr = kc * 16 + 2 * t;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                int w = j * 4 + g / 2, sh = (g & 1) * 16; /* column j*8 + g: one 16-bit half */
                uint32_t vb[2] = {(V[kr][w] >> sh & 0xffffu) | (V[kr + 1][w] >> sh) << 16,
                                  (V[kr + 8][w] >> sh & 0xffffu) | (V[kr + 9][w] >> sh) << 16};
                mma_16816<T>(o[j], pa, vb);
            }
        }
        __syncthreads(); /* every warp is done with buffer buf before it is refilled */
    }
    cp_async_wait<0>(); /* Q's group, when no key tile was visited */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int64_t r = r0 + wr + 8 * hr;
        if (r >= r1) continue;
        float l = lrow[hr], inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *orow = out + (b * m.L + r) * H + h * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            orow[j * 8 + 2 * t] = cu_lowp(o[j][2 * hr] * inv, lowp);
            orow[j * 8 + 2 * t + 1] = cu_lowp(o[j][2 * hr + 1] * inv, lowp);
        }
        if (t == 0) lse[(b * n_head + h) * m.L + r] = l > 0.0f ? mrow[hr] + logf(l) : 0.0f;
    }
}

/* ---- backward: WMMA, fp16 ---- */

template <int D> struct tc_bwd_smem {
    __half q[TC_TILE][D + HP], dout[TC_TILE][D + HP], k[TC_TILE][D + HP], v[TC_TILE][D + HP];
    __half p[TC_TILE][TC_TILE + HP], ds[TC_TILE][TC_TILE + HP];
    float s[TC_TILE][TC_TILE + FP], dp[TC_TILE][TC_TILE + FP];
    float lse[TC_TILE], delta[TC_TILE];
    row_mask rm[TC_TILE];
};

/* dst[r][*] = A_w B^T for the warp's 16 rows: A (16 x D, row-major half) times
 * the transpose of B (64 x D, row-major half) into a float tile. */
template <int D>
__device__ __forceinline__ void tc_abt(float (*dst)[TC_TILE + FP], const __half (*A)[D + HP],
                                       const __half (*Bm)[D + HP], int warp) {
    frag_acc acc[4];
#pragma unroll
    for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
        frag_a a;
        wmma::load_matrix_sync(a, &A[warp * 16][kk], D + HP);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            frag_b_col bf;
            wmma::load_matrix_sync(bf, &Bm[j * 16][kk], D + HP);
            wmma::mma_sync(acc[j], a, bf, acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        wmma::store_matrix_sync(&dst[warp * 16][j * 16], acc[j], TC_TILE + FP, wmma::mem_row_major);
}

/* acc[j] += P_w (16 x 64, half) X (64 x D, half) for the warp's rows. */
template <int D>
__device__ __forceinline__ void tc_pv(frag_acc *acc, const __half (*P)[TC_TILE + HP],
                                      const __half (*X)[D + HP], int warp) {
#pragma unroll
    for (int kk = 0; kk < TC_TILE; kk += 16) {
        frag_a a;
        wmma::load_matrix_sync(a, &P[warp * 16][kk], TC_TILE + HP);
#pragma unroll
        for (int j = 0; j < D / 16; j++) {
            frag_b_row bf;
            wmma::load_matrix_sync(bf, &X[kk][j * 16], D + HP);
            wmma::mma_sync(acc[j], a, bf, acc[j]);
        }
    }
}

/* Writes fragments acc (the warp's 16 rows of a 64 x D tile) rounded to half
 * into dst rows [row0, row0+64) (stride ld), skipping rows >= row_end, through
 * the float staging area st [64][D+FP]. Ends with a barrier. */
template <int D>
__device__ __forceinline__ void tc_store_rows(float *dst, int64_t ld, int64_t row0, int64_t row_end,
                                              frag_acc *acc, float (*st)[D + FP], int warp) {
#pragma unroll
    for (int j = 0; j < D / 16; j++)
        wmma::store_matrix_sync(&st[warp * 16][j * 16], acc[j], D + FP, wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < TC_TILE * D; i += TC_THREADS) {
        int r = i / D, d = i % D;
        if (row0 + r < row_end) dst[(row0 + r) * ld + d] = round_h(st[r][d]);
    }
    __syncthreads();
}

template <int D>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_bwd_kv_tc(float *dqkv, const float *dout, const float *lse, const float *delta,
                     const float *qkv, mask_dev m, int64_t n_head, float scale) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    tc_bwd_smem<D> &S = *reinterpret_cast<tc_bwd_smem<D> *>(smem_raw);
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t c0 = (int64_t)blockIdx.x * TC_TILE, c1 = min(m.L, c0 + TC_TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    const float *base = qkv + b * m.L * ld + h * D;
    const float *dob = dout + b * m.L * H + h * D;
    const float *lb = lse + (b * n_head + h) * m.L, *db = delta + (b * n_head + h) * m.L;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int kr = warp * 16 + (lane >> 1), cpart = lane & 1; /* this lane's key row and query half */
    int key = (int)(c0 + kr);
    bool key_ok = c0 + kr < c1;

    load_half_tile<D>(S.k, base + H, ld, c0, m.L);
    load_half_tile<D>(S.v, base + 2 * H, ld, c0, m.L);
    frag_acc dk[D / 16], dv[D / 16];
#pragma unroll
    for (int j = 0; j < D / 16; j++) {
        wmma::fill_fragment(dk[j], 0.0f);
        wmma::fill_fragment(dv[j], 0.0f);
    }
    int64_t lo[3], hi[3];
    int nr = mask_key_tile_queries(m, vl, c0, c1, lo, hi);
    for (int qi = 0; qi < nr; qi++)
        for (int64_t r0 = lo[qi]; r0 < hi[qi]; r0 += TC_TILE) {
            __syncthreads();
            load_half_tile<D>(S.q, base, ld, r0, hi[qi]);
            load_half_tile<D>(S.dout, dob, H, r0, hi[qi]);
            for (int i = threadIdx.x; i < TC_TILE; i += TC_THREADS) {
                bool in = r0 + i < hi[qi];
                S.lse[i] = in ? lb[r0 + i] : 0.0f;
                S.delta[i] = in ? db[r0 + i] : 0.0f;
                S.rm[i] = mask_row(m, vl, r0 + i, r0, hi[qi]);
            }
            __syncthreads();
            tc_abt<D>(S.s, S.k, S.q, warp);     /* S^T: keys x queries */
            tc_abt<D>(S.dp, S.v, S.dout, warp); /* dP^T */
            __syncwarp();
#pragma unroll 4
            for (int c = 0; c < 32; c++) {
                int qc = cpart * 32 + c;
                bool vis = key_ok && row_sees(S.rm[qc], key);
                float p = vis ? __expf(S.s[kr][qc] * scale - S.lse[qc]) : 0.0f;
                float ds = vis ? p * (S.dp[kr][qc] - S.delta[qc]) * scale : 0.0f;
                S.p[kr][qc] = __float2half_rn(p);
                S.ds[kr][qc] = __float2half_rn(ds);
            }
            __syncwarp();
            tc_pv<D>(dv, S.p, S.dout, warp);
            tc_pv<D>(dk, S.ds, S.q, warp);
        }
    __syncthreads();
    float(*st)[D + FP] = reinterpret_cast<float(*)[D + FP]>(&S.q[0][0]); /* q..v are free now */
    float *dbase = dqkv + b * m.L * ld + h * D;
    tc_store_rows<D>(dbase + H, ld, c0, c1, dk, st, warp);
    tc_store_rows<D>(dbase + 2 * H, ld, c0, c1, dv, st, warp);
}

template <int D>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_bwd_q_tc(float *dqkv, const float *dout, const float *lse, const float *delta,
                    const float *qkv, mask_dev m, int64_t n_head, float scale) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    tc_bwd_smem<D> &S = *reinterpret_cast<tc_bwd_smem<D> *>(smem_raw);
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t r0 = (int64_t)blockIdx.x * TC_TILE, r1 = min(m.L, r0 + TC_TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    const float *base = qkv + b * m.L * ld + h * D;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int qr = warp * 16 + (lane >> 1), cpart = lane & 1;
    frag_acc dq[D / 16];
#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::fill_fragment(dq[j], 0.0f);
    int64_t q0 = max(r0, m.q_start); /* rows before q_start are not queries: dq stays 0 */
    if (q0 < r1) {
        load_half_tile<D>(S.q, base, ld, r0, m.L);
        load_half_tile<D>(S.dout, dout + b * m.L * H + h * D, H, r0, m.L);
        row_mask rm = mask_row(m, vl, r0 + qr, q0, r1);
        float l = r0 + qr < m.L ? lse[(b * n_head + h) * m.L + r0 + qr] : 0.0f;
        float dl = r0 + qr < m.L ? delta[(b * n_head + h) * m.L + r0 + qr] : 0.0f;
        key_tiles tiles = mask_key_tiles<TC_TILE>(m, vl, q0, r1);
        for (int64_t t = 0; t < tiles.n; t++) {
            int64_t c0;
            int kmin, kmax;
            key_tile<TC_TILE>(tiles, t, &c0, &kmin, &kmax);
            __syncthreads();
            load_half_tile<D>(S.k, base + H, ld, c0, m.L);
            load_half_tile<D>(S.v, base + 2 * H, ld, c0, m.L);
            __syncthreads();
            tc_abt<D>(S.s, S.q, S.k, warp);     /* S: queries x keys */
            tc_abt<D>(S.dp, S.dout, S.v, warp); /* dP */
            __syncwarp();
#pragma unroll 4
            for (int c = 0; c < 32; c++) {
                int kc = cpart * 32 + c, col = (int)c0 + kc;
                bool vis = col >= kmin && col < kmax && row_sees(rm, col);
                float p = vis ? __expf(S.s[qr][kc] * scale - l) : 0.0f;
                S.ds[qr][kc] = __float2half_rn(vis ? p * (S.dp[qr][kc] - dl) * scale : 0.0f);
            }
            __syncwarp();
            tc_pv<D>(dq, S.ds, S.k, warp);
        }
    }
    __syncthreads();
    float(*st)[D + FP] = reinterpret_cast<float(*)[D + FP]>(&S.q[0][0]);
    tc_store_rows<D>(dqkv + b * m.L * ld + h * D, ld, r0, r1, dq, st, warp);
}

#define TC_LAUNCH(DV, KERNEL, SMEM_T, GRID, ...)                                                   \
    do {                                                                                           \
        size_t bytes_ = sizeof(SMEM_T<DV>);                                                        \
        CUDA_OK(cudaFuncSetAttribute(KERNEL<DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,      \
                                     (int)bytes_));                                                \
        KERNEL<DV><<<GRID, TC_THREADS, bytes_, cu_stream(b)>>>(__VA_ARGS__);                       \
        CUDA_LAUNCHED();                                                                           \
    } while (0)

int attn_tc_fwd_supported(kf_backend *b, int64_t head_dim) {
    return cu_impl(b)->tc && b->precision != KF_PREC_FP32 && (head_dim == 64 || head_dim == 128);
}

int attn_tc_bwd_supported(kf_backend *b, int64_t head_dim, const void *const *bufs, int nbufs) {
    if (!attn_tc_fwd_supported(b, head_dim) || b->precision != KF_PREC_FP16) return 0;
    for (int i = 0; i < nbufs; i++) /* 16-byte tile loads */
        if ((uintptr_t)bufs[i] % 16) return 0;
    return 1;
}

/* q, k, v rounded to T once, then the forward over them. */
template <int D, typename T>
static void fa_fwd(kf_backend *b, float *out, float *lse, const float *qkv, const mask_dev *md,
                   int64_t B, int64_t n_head) {
    int64_t n = B * md->L * 3 * n_head * D, nq = md->L - md->q_start;
    uint16_t *q16 = (uint16_t *)cu_scratch(b, CU_SCRATCH_A, (size_t)n * sizeof(uint16_t));
    k_to_lowp<T><<<cu_blocks(n), 256, 0, cu_stream(b)>>>(q16, qkv, n);
    CUDA_LAUNCHED();
    dim3 grid((unsigned)((nq + TC_TILE - 1) / TC_TILE), (unsigned)n_head, (unsigned)B);
    size_t bytes = sizeof(fa_fwd_smem<D>);
    void (*k_fwd)(float *, float *, const uint16_t *, mask_dev, int64_t, float, int) =
        k_attn_fwd_mma<D, T>; /* a pointer: the launch syntax takes no template commas */
    CUDA_OK(cudaFuncSetAttribute(k_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    k_fwd<<<grid, TC_THREADS, bytes, cu_stream(b)>>>(out, lse, q16, *md, n_head,
                                                     1.0f / sqrtf((float)D), b->precision);
    CUDA_LAUNCHED();
}

void attn_fwd_tc(kf_backend *b, float *out, float *lse, const float *qkv, const mask_dev *md,
                 int64_t B, int64_t n_head, int64_t head_dim) {
    bool bf = b->precision == KF_PREC_BF16;
    if (head_dim == 64) {
        if (bf) fa_fwd<64, __nv_bfloat16>(b, out, lse, qkv, md, B, n_head);
        else fa_fwd<64, __half>(b, out, lse, qkv, md, B, n_head);
    } else {
        if (bf) fa_fwd<128, __nv_bfloat16>(b, out, lse, qkv, md, B, n_head);
        else fa_fwd<128, __half>(b, out, lse, qkv, md, B, n_head);
    }
}

void attn_bwd_tc(kf_backend *b, float *dqkv, const float *dout, const float *lse,
                 const float *delta, const float *qkv, const mask_dev *md, int64_t B,
                 int64_t n_head, int64_t head_dim) {
    dim3 grid((unsigned)((md->L + TC_TILE - 1) / TC_TILE), (unsigned)n_head, (unsigned)B);
    float scale = 1.0f / sqrtf((float)head_dim);
    if (head_dim == 64) {
        TC_LAUNCH(64, k_attn_bwd_kv_tc, tc_bwd_smem, grid, dqkv, dout, lse, delta, qkv, *md, n_head,
                  scale);
        TC_LAUNCH(64, k_attn_bwd_q_tc, tc_bwd_smem, grid, dqkv, dout, lse, delta, qkv, *md, n_head,
                  scale);
    } else {
        TC_LAUNCH(128, k_attn_bwd_kv_tc, tc_bwd_smem, grid, dqkv, dout, lse, delta, qkv, *md,
                  n_head, scale);
        TC_LAUNCH(128, k_attn_bwd_q_tc, tc_bwd_smem, grid, dqkv, dout, lse, delta, qkv, *md, n_head,
                  scale);
    }
}
