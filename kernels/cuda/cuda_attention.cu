/* kernels/cuda/cuda_attention.cu — fused attention over a kf_mask structure
 * (flash-style forward and backward), and decode attention over a KV cache.
 *
 * Structure (kernels.h kf_mask): query row r of a sample with valid context
 * length vl sees
 *   r <  n_ctx: keys [0, r] (bidir: [0, vl)) when r < vl, nothing otherwise;
 *   r >= n_ctx: g = (r - n_ctx) / group: context keys [0, min(g+1, vl)) and
 *               the keys [n_ctx + g*group, r] of its own group.
 * A 64-row query tile therefore needs at most two key ranges — a context
 * prefix and the span of its groups — and a 64-key tile is seen by at most
 * three query ranges (mask_key_tile_queries). Only tiles inside those ranges
 * are visited, so a SingleForward(k) over N context tokens costs about
 * (k+1)·N²/2 scored pairs instead of the dense (k+1)²·N²/2; the element mask
 * inside a visited tile is evaluated from the structure, never stored.
 *
 * Forward: one block per (query tile, head, sample), online softmax over the
 * visited key tiles, Q/K/V tiles and the probability tile in shared memory.
 * Backward (deterministic, no atomics): D_i = dout_i·out_i, then one kernel
 * where each block owns a key tile and accumulates its dK and dV over the
 * query tiles that see it, in a fixed order, and one kernel where each block
 * owns a query tile and accumulates its dQ over its key tiles.
 * Rows with no visible key get out = 0, lse = 0 and no gradient (as the CPU
 * backend). fp16 and bf16 modes round q, k, v (and out, dout in the
 * backward) to the 16-bit format on load and round the outputs, with fp32
 * arithmetic in between — the rounding points of kernels/cpu/cpu_attention.c.
 * Every row's result depends only on its own sample: batch-invariant.
 * In the fp16 and bf16 phases, head dims 64 and 128 run on the tensor cores
 * instead (cuda_attention_tc.cu: same walk, mma.sync products), unless
 * switched off or their check failed (cuda_attention_guard.cu), in
 * batch-invariant mode (the teacher's 16-bit passes) too, as they are
 * batch-invariant alike; these SIMT kernels serve the fp32 phase, the other
 * head dims and that fallback.
 */
#include <math.h>

#include "kernels/cuda/cuda_attention_tc.h"

#define TILE 64     /* query rows and key rows per tile */
#define THREADS 256 /* 16 x 16 threads; each owns 4 rows x (4 or D/16) columns */

__device__ __forceinline__ float ld_round(const float *p, int lowp) { return cu_lowp(*p, lowp); }

/* An input of the attention: fp32 (f) or its 16-bit copy (h, kernels.h) in
 * the format lowp. at(i) is the value the kernels use, rounded in a 16-bit
 * mode (a copy's values are already), so either form gives the same bits. */
struct attn_in {
    const float *f;
    const void *h;
    int lowp;
    __device__ __forceinline__ float at(int64_t i) const {
        if (!h) return cu_lowp(f[i], lowp);
        if (lowp == KF_PREC_BF16) return __bfloat162float(((const __nv_bfloat16 *)h)[i]);
        return __half2float(((const __half *)h)[i]);
    }
    __host__ __device__ attn_in operator+(int64_t o) const {
        return {f ? f + o : f, h ? (const uint16_t *)h + o : h, lowp};
    }
};

/* Loads rows [r0, r0+TILE) of one head (row stride ld) into s[TILE][D+1];
 * rows at or past L are zero. */
template <int D>
__device__ __forceinline__ void load_tile(float (*s)[D + 1], attn_in base, int64_t ld, int64_t r0,
                                          int64_t L) {
    for (int i = threadIdx.x; i < TILE * D; i += THREADS) {
        int r = i / D, d = i % D;
        s[r][d] = r0 + r < L ? base.at((r0 + r) * ld + d) : 0.0f;
    }
}

/* Sum over the 16 lanes that share a row group, then lane 0 of the group's
 * value everywhere (so all lanes use the identical number). */
__device__ __forceinline__ float group16_sum(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, threadIdx.x & 16);
}

__device__ __forceinline__ float group16_max(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <int D> struct fwd_smem {
    float q[TILE][D + 1], k[TILE][D + 1], v[TILE][D + 1], p[TILE][TILE + 1];
};

template <int D>
__global__ void __launch_bounds__(THREADS)
    k_attn_fwd(float *out, void *out16, float *lse, attn_in qkv, mask_dev m, int64_t n_head,
               float scale, int lowp) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fwd_smem<D> &S = *reinterpret_cast<fwd_smem<D> *>(smem_raw);
    constexpr int DJ = D / 16;
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t r0 = m.q_start + (int64_t)blockIdx.x * TILE, r1 = min(m.L, r0 + TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    attn_in base = qkv + (b * m.L * ld + h * D);
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

    load_tile<D>(S.q, base, ld, r0, m.L);
    float mrow[4], lrow[4], acc[4][DJ];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < DJ; j++) acc[i][j] = 0.0f;
    }
    row_mask rm[4];
#pragma unroll
    for (int i = 0; i < 4; i++) rm[i] = mask_row(m, vl, r0 + ty * 4 + i, r0, r1);
    key_tiles tiles = mask_key_tiles<TILE>(m, vl, r0, r1);
    for (int64_t t = 0; t < tiles.n; t++) {
        int64_t c0;
        int kmin, kmax;
        key_tile<TILE>(tiles, t, &c0, &kmin, &kmax);
        __syncthreads(); /* previous tile's k/v/p fully consumed */
        load_tile<D>(S.k, base + H, ld, c0, m.L);
        load_tile<D>(S.v, base + 2 * H, ld, c0, m.L);
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; d++) {
            float qv[4], kv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) qv[i] = S.q[ty * 4 + i][d];
#pragma unroll
            for (int j = 0; j < 4; j++) kv[j] = S.k[tx + 16 * j][d];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int c = (int)c0 + tx + 16 * j;
                s[i][j] = c >= kmin && c < kmax && row_sees(rm[i], c) ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            float mnew = fmaxf(mrow[i], group16_max(mx));
            float ps = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = mnew == -INFINITY ? 0.0f : __expf(s[i][j] - mnew);
                S.p[ty * 4 + i][tx + 16 * j] = p;
                ps += p;
            }
            float alpha = mrow[i] == -INFINITY ? 0.0f : __expf(mrow[i] - mnew);
            lrow[i] = lrow[i] * alpha + group16_sum(ps);
            mrow[i] = mnew;
#pragma unroll
            for (int j = 0; j < DJ; j++) acc[i][j] *= alpha;
        }
        __syncthreads();
#pragma unroll 8
        for (int c = 0; c < TILE; c++) {
            float pv[4], vv[DJ];
#pragma unroll
            for (int i = 0; i < 4; i++) pv[i] = S.p[ty * 4 + i][c];
#pragma unroll
            for (int j = 0; j < DJ; j++) vv[j] = S.v[c][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < DJ; j++) acc[i][j] = fmaf(pv[i], vv[j], acc[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t r = r0 + ty * 4 + i;
        if (r >= r1) continue;
        float inv = lrow[i] > 0.0f ? 1.0f / lrow[i] : 0.0f;
        int64_t o = (b * m.L + r) * H + h * D;
#pragma unroll
        for (int j = 0; j < DJ; j++) {
            float v = acc[i][j] * inv;
            if (out) out[o + tx + 16 * j] = cu_lowp(v, lowp);
            if (out16) cu_store16(out16, o + tx + 16 * j, v, lowp);
        }
        if (tx == 0)
            lse[(b * n_head + h) * m.L + r] = lrow[i] > 0.0f ? mrow[i] + logf(lrow[i]) : 0.0f;
    }
}

/* delta[b, h, r] = dout_r · out_r (inputs rounded in fp16/bf16 mode); one warp per row. */
__global__ void k_attn_delta(float *delta, attn_in dout, attn_in out, int64_t rows, int64_t L,
                             int64_t n_head, int64_t D) {
    int lane = threadIdx.x & 31;
    for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; w < rows * n_head;
         w += (int64_t)gridDim.x * blockDim.x / 32) {
        int64_t row = w / n_head, h = w % n_head; /* row = b*L + r */
        attn_in a = dout + (row * n_head * D + h * D), c = out + (row * n_head * D + h * D);
        float s = 0.0f;
        for (int64_t d = lane; d < D; d += 32) s += a.at(d) * c.at(d);
        s = warp_sum(s);
        int64_t b = row / L, r = row % L;
        if (lane == 0) delta[(b * n_head + h) * L + r] = s;
    }
}

template <int D> struct bwd_smem {
    float q[TILE][D + 1], k[TILE][D + 1], v[TILE][D + 1], dout[TILE][D + 1];
    float p[TILE][TILE + 1], ds[TILE][TILE + 1];
    float lse[TILE], delta[TILE];
};

/* For the query tile at row r0 (in S.q/S.dout/S.lse/S.delta; its rows outside
 * [r_lo, r_hi) are not queries here) against key rows c0.. (S.k/S.v; keys
 * outside [kmin, kmax) are not counted from this tile): writes
 * P and dS = P*(dP - delta)*scale into S.p and S.ds, with rows = queries
 * (ty*4+i) and columns = keys (tx+16j). */
template <int D>
__device__ __forceinline__ void bwd_scores(bwd_smem<D> &S, const mask_dev &m, int64_t vl,
                                           int64_t r0, int64_t r_lo, int64_t r_hi, int64_t c0,
                                           int kmin, int kmax, float scale) {
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float s[4][4], dp[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < D; d++) {
        float qv[4], ov[4], kv[4], vv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            qv[i] = S.q[ty * 4 + i][d];
            ov[i] = S.dout[ty * 4 + i][d];
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            kv[j] = S.k[tx + 16 * j][d];
            vv[j] = S.v[tx + 16 * j][d];
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
                dp[i][j] = fmaf(ov[i], vv[j], dp[i][j]);
            }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        row_mask rm = mask_row(m, vl, r0 + ty * 4 + i, r_lo, r_hi);
        float l = S.lse[ty * 4 + i], dl = S.delta[ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = (int)c0 + tx + 16 * j;
            bool vis = c >= kmin && c < kmax && row_sees(rm, c);
            float p = vis ? __expf(s[i][j] * scale - l) : 0.0f;
            S.p[ty * 4 + i][tx + 16 * j] = p;
            S.ds[ty * 4 + i][tx + 16 * j] = vis ? p * (dp[i][j] - dl) * scale : 0.0f;
        }
    }
}

/* Loads a query tile's q, dout, lse and delta. */
template <int D>
__device__ __forceinline__ void bwd_load_queries(bwd_smem<D> &S, attn_in base, attn_in dout,
                                                 const float *lse, const float *delta, int64_t ld,
                                                 int64_t H, int64_t r0, int64_t L) {
    load_tile<D>(S.q, base, ld, r0, L);
    load_tile<D>(S.dout, dout, H, r0, L);
    for (int i = threadIdx.x; i < TILE; i += THREADS) {
        S.lse[i] = r0 + i < L ? lse[r0 + i] : 0.0f;
        S.delta[i] = r0 + i < L ? delta[r0 + i] : 0.0f;
    }
}

template <int D>
__global__ void __launch_bounds__(THREADS)
    k_attn_bwd_kv(float *dqkv, void *dqkv16, attn_in dout, const float *lse, const float *delta,
                  attn_in qkv, mask_dev m, int64_t n_head, float scale, int lowp) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bwd_smem<D> &S = *reinterpret_cast<bwd_smem<D> *>(smem_raw);
    constexpr int DJ = D / 16;
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t c0 = (int64_t)blockIdx.x * TILE, c1 = min(m.L, c0 + TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    attn_in base = qkv + (b * m.L * ld + h * D), dob = dout + (b * m.L * H + h * D);
    const float *lb = lse + (b * n_head + h) * m.L, *db = delta + (b * n_head + h) * m.L;
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

    load_tile<D>(S.k, base + H, ld, c0, m.L);
    load_tile<D>(S.v, base + 2 * H, ld, c0, m.L);
    float dk[4][DJ], dv[4][DJ];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < DJ; j++) dk[i][j] = dv[i][j] = 0.0f;
    int64_t lo[3], hi[3];
    int nr = mask_key_tile_queries(m, vl, c0, c1, lo, hi);
    for (int q = 0; q < nr; q++)
        for (int64_t r0 = lo[q]; r0 < hi[q]; r0 += TILE) {
            __syncthreads();
            bwd_load_queries<D>(S, base, dob, lb, db, ld, H, r0, hi[q]);
            __syncthreads();
            bwd_scores<D>(S, m, vl, r0, r0, hi[q], c0, (int)c0, (int)c1, scale);
            __syncthreads();
            /* dV[c] += sum_r P[r][c] dout[r];  dK[c] += sum_r dS[r][c] q[r]  (rows in order) */
#pragma unroll 4
            for (int r = 0; r < TILE; r++) {
                float pv[4], sv[4], ov[DJ], qv[DJ];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    pv[i] = S.p[r][ty * 4 + i];
                    sv[i] = S.ds[r][ty * 4 + i];
                }
#pragma unroll
                for (int j = 0; j < DJ; j++) {
                    ov[j] = S.dout[r][tx + 16 * j];
                    qv[j] = S.q[r][tx + 16 * j];
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < DJ; j++) {
                        dv[i][j] = fmaf(pv[i], ov[j], dv[i][j]);
                        dk[i][j] = fmaf(sv[i], qv[j], dk[i][j]);
                    }
            }
        }
    int64_t o = b * m.L * ld + h * D;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t c = c0 + ty * 4 + i;
        if (c >= c1) continue;
#pragma unroll
        for (int j = 0; j < DJ; j++) {
            int64_t e = o + c * ld + tx + 16 * j;
            dqkv_store(dqkv, dqkv16, e + H, dk[i][j], lowp);
            dqkv_store(dqkv, dqkv16, e + 2 * H, dv[i][j], lowp);
        }
    }
}

template <int D>
__global__ void __launch_bounds__(THREADS)
    k_attn_bwd_q(float *dqkv, void *dqkv16, attn_in dout, const float *lse, const float *delta,
                 attn_in qkv, mask_dev m, int64_t n_head, float scale, int lowp) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bwd_smem<D> &S = *reinterpret_cast<bwd_smem<D> *>(smem_raw);
    constexpr int DJ = D / 16;
    int64_t b = blockIdx.z, h = blockIdx.y;
    int64_t r0 = (int64_t)blockIdx.x * TILE, r1 = min(m.L, r0 + TILE);
    int64_t H = n_head * D, ld = 3 * H, vl = mask_vl(m, b);
    attn_in base = qkv + (b * m.L * ld + h * D);
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float dq[4][DJ];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < DJ; j++) dq[i][j] = 0.0f;
    /* rows before q_start are not queries: their dq stays zero */
    int64_t q0 = max(r0, m.q_start);
    if (q0 < r1) {
        bwd_load_queries<D>(S, base, dout + (b * m.L * H + h * D), lse + (b * n_head + h) * m.L,
                            delta + (b * n_head + h) * m.L, ld, H, r0, m.L);
        key_tiles tiles = mask_key_tiles<TILE>(m, vl, q0, r1);
        for (int64_t t = 0; t < tiles.n; t++) {
            int64_t c0;
            int kmin, kmax;
            key_tile<TILE>(tiles, t, &c0, &kmin, &kmax);
            __syncthreads();
            load_tile<D>(S.k, base + H, ld, c0, m.L);
            load_tile<D>(S.v, base + 2 * H, ld, c0, m.L);
            __syncthreads();
            bwd_scores<D>(S, m, vl, r0, q0, r1, c0, kmin, kmax, scale);
            __syncthreads();
#pragma unroll 4
            for (int c = 0; c < TILE; c++) {
                float sv[4], kv[DJ];
#pragma unroll
                for (int i = 0; i < 4; i++) sv[i] = S.ds[ty * 4 + i][c];
#pragma unroll
                for (int j = 0; j < DJ; j++) kv[j] = S.k[c][tx + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < DJ; j++) dq[i][j] = fmaf(sv[i], kv[j], dq[i][j]);
            }
        }
    }
    int64_t o = b * m.L * ld + h * D;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t r = r0 + ty * 4 + i;
        if (r >= r1) continue;
#pragma unroll
        for (int j = 0; j < DJ; j++)
            dqkv_store(dqkv, dqkv16, o + r * ld + tx + 16 * j, dq[i][j], lowp);
    }
}

mask_dev mask_to_dev(kf_backend *b, const kf_mask *m, int64_t B) {
    kf_mask_check(m);
    mask_dev d;
    d.L = kf_mask_len(m);
    d.n_ctx = m->n_ctx;
    d.group = m->group > 0 ? m->group : 1;
    d.q_start = m->q_start;
    d.bidir = m->bidir;
    d.valid_len = m->valid_len_d;
    if (m->valid_len && !m->valid_len_d) {
        int32_t *v = (int32_t *)cu_scratch(b, CU_SCRATCH_VLEN, (size_t)B * sizeof(int32_t));
        cu_upload_async(b, v, m->valid_len, (size_t)B * sizeof(int32_t));
        d.valid_len = v;
    }
    return d;
}

/* Launches kernel K<D> for the supported head dims with `smem` dynamic bytes. */
#define ATTN_DISPATCH(D_, KERNEL, SMEM_T, GRID, ...)                                               \
    do {                                                                                           \
        switch (D_) {                                                                              \
        case 16: ATTN_LAUNCH(16, KERNEL, SMEM_T, GRID, __VA_ARGS__); break;                        \
        case 32: ATTN_LAUNCH(32, KERNEL, SMEM_T, GRID, __VA_ARGS__); break;                        \
        case 64: ATTN_LAUNCH(64, KERNEL, SMEM_T, GRID, __VA_ARGS__); break;                        \
        case 128: ATTN_LAUNCH(128, KERNEL, SMEM_T, GRID, __VA_ARGS__); break;                      \
        default:                                                                                   \
            KF_FATAL("attention: head_dim %lld unsupported on cuda (16, 32, 64, 128)",             \
                     (long long)(D_));                                                             \
        }                                                                                          \
    } while (0)

#define ATTN_LAUNCH(DV, KERNEL, SMEM_T, GRID, ...)                                                 \
    do {                                                                                           \
        size_t bytes_ = sizeof(SMEM_T<DV>);                                                        \
        CUDA_OK(cudaFuncSetAttribute(KERNEL<DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,      \
                                     (int)bytes_));                                                \
        KERNEL<DV><<<GRID, THREADS, bytes_, cu_stream(b)>>>(__VA_ARGS__);                          \
        CUDA_LAUNCHED();                                                                           \
    } while (0)

void cu_attn_fwd(kf_backend *b, float *out, float *lse, const float *qkv, const kf_mask *m,
                 int64_t B, int64_t n_head, int64_t head_dim, const void *qkv16, void *out16) {
    int lowp = b->precision;
    KF_CHECK(lowp || !(qkv16 || out16), "attn_fwd: a 16-bit copy in fp32 mode");
    int tc = attn_tc_supported(b, head_dim); /* first: its check uses the scratch */
    mask_dev md = mask_to_dev(b, m, B);
    int64_t nq = md.L - md.q_start;
    if (nq <= 0 || B <= 0) return;
    KF_CHECK(B <= 65535 && n_head <= 65535, "attention: batch or heads too large");
    if (tc) {
        attn_tc_launched(b, attn_fwd_tc(b, out, out16, lse, qkv, qkv16, &md, B, n_head, head_dim));
        return;
    }
    dim3 grid((unsigned)((nq + TILE - 1) / TILE), (unsigned)n_head, (unsigned)B);
    float scale = 1.0f / sqrtf((float)head_dim);
    attn_in qin = {qkv, qkv16, lowp};
    ATTN_DISPATCH(head_dim, k_attn_fwd, fwd_smem, grid, out, out16, lse, qin, md, n_head, scale,
                  lowp);
}

void cu_attn_bwd(kf_backend *b, float *dqkv, const float *dout, const float *out, const float *lse,
                 const float *qkv, const kf_mask *m, int64_t B, int64_t n_head, int64_t head_dim,
                 const void *dout16, const void *out16, const void *qkv16, void *dqkv16) {
    int lowp = b->precision;
    KF_CHECK(lowp || !(dout16 || out16 || qkv16 || dqkv16), "attn_bwd: a 16-bit copy in fp32 mode");
    KF_CHECK(dqkv || dqkv16, "attn_bwd: neither dqkv nor its 16-bit copy");
    int tc = attn_tc_supported(b, head_dim); /* first: its check uses the scratch */
    mask_dev md = mask_to_dev(b, m, B);
    int64_t L = md.L;
    if (L <= 0 || B <= 0) return;
    KF_CHECK(B <= 65535 && n_head <= 65535, "attention: batch or heads too large");
    float scale = 1.0f / sqrtf((float)head_dim);
    float *delta = (float *)cu_scratch(b, CU_SCRATCH_D, (size_t)(B * n_head * L) * sizeof(float));
    int64_t warps = B * L * n_head;
    attn_in din = {dout, dout16, lowp}, oin = {out, out16, lowp}, qin = {qkv, qkv16, lowp};
    k_attn_delta<<<cu_blocks(warps * 32), 256, 0, cu_stream(b)>>>(delta, din, oin, B * L, L, n_head,
                                                                  head_dim);
    CUDA_LAUNCHED();
    if (tc) {
        attn_tc_launched(b, attn_bwd_tc(b, dqkv, dqkv16, dout, dout16, lse, delta, qkv, qkv16, &md,
                                        B, n_head, head_dim));
        return;
    }
    dim3 grid((unsigned)((L + TILE - 1) / TILE), (unsigned)n_head, (unsigned)B);
    ATTN_DISPATCH(head_dim, k_attn_bwd_kv, bwd_smem, grid, dqkv, dqkv16, din, lse, delta, qin, md,
                  n_head, scale, lowp);
    ATTN_DISPATCH(head_dim, k_attn_bwd_q, bwd_smem, grid, dqkv, dqkv16, din, lse, delta, qin, md,
                  n_head, scale, lowp);
}

/* Decode attention, split over the keys (flash-decoding): a query's T = P+i+1
 * visible cache rows are cut into DEC_SPLITS parts of ceil(T / DEC_SPLITS)
 * rows, one block each, so a step of one sample still fills the GPU; a
 * second kernel adds the parts in split order. The cut depends on T alone,
 * not on the batch, the bound or the order blocks run in: the result is a
 * function of the query's inputs. P comes from device memory (len) when given,
 * so a graph replays with the length of the step; `bound` (>= P) sizes the
 * parts' shared memory, and a length past it writes NaN. */
enum { DEC_SPLITS = KF_DECODE_SPLITS, DEC_THREADS = 128 };

/* Query i's visible rows T, or -1 when the length exceeds the bound. */
__device__ __forceinline__ int64_t dec_rows(const int32_t *len, int64_t bound, int64_t i) {
    int64_t P = len ? (int64_t)*len : bound;
    return P <= bound ? P + i + 1 : -1;
}
/* The rows of each part of T rows (the last may have fewer). */
__device__ __forceinline__ int64_t dec_part_rows(int64_t T) {
    return (T + DEC_SPLITS - 1) / DEC_SPLITS;
}
/* Part s of query i (length known to be within the bound): its first row,
 * its end in *j1 (j1 <= j0: an empty part, which writes no record). */
__device__ __forceinline__ int64_t dec_part(const int32_t *len, int64_t bound, int64_t i, int64_t s,
                                            int64_t *j1) {
    int64_t T = dec_rows(len, bound, i), n = dec_part_rows(T), j0 = s * n;
    *j1 = j0 + n < T ? j0 + n : T;
    return j0;
}

/* Part s of every query i of (b, h): its rows' max score m, sum of
 * exp(score - m) l and the unnormalised sum of exp(score - m) v, at part +
 * ((b*nh + h)*Q + i)*DEC_SPLITS + s records of D + 2 floats (m, l, o). The
 * block reads the union of the queries' parts (they differ: each query cuts
 * its own T) once, each row's K into its warp's buffer and V into a thread's
 * register, and gives it to every query whose part holds it. A query's
 * arithmetic is the one-query kernel's: warp w scores rows j0+w, j0+w+4, ...
 * (lanes over d, summed in warp_sum's order; which warp scores a row does
 * not change its bits), its max and sum strided from its own j0, and thread
 * d sums o[d] in row order. */
__global__ void k_attn_decode_part(float *part, const float *q, int64_t q_stride, const float *kc,
                                   const float *vc, int64_t cap, const int32_t *len, int64_t bound,
                                   int64_t Q, int64_t n_head, int64_t D, float scale, int lowp) {
    /* q [Q][D], o [Q][D], a K row per warp [warps][D], then scores [Q][ns] */
    extern __shared__ float sm[];
    __shared__ float sh[32];
    int64_t h = blockIdx.y, b = blockIdx.x / DEC_SPLITS, s = blockIdx.x % DEC_SPLITS;
    if (dec_rows(len, bound, 0) < 0) return; /* the combination writes NaN */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int64_t ns = dec_part_rows(bound + Q), H = n_head * D, J0 = INT64_MAX, J1 = 0;
    for (int64_t i = 0; i < Q; i++) {
        int64_t j1, j0 = dec_part(len, bound, i, s, &j1);
        if (j0 < j1) J0 = j0 < J0 ? j0 : J0, J1 = j1 > J1 ? j1 : J1;
    }
    if (J0 >= J1) return;
    const float *kb = kc + b * cap * H + h * D, *vb = vc + b * cap * H + h * D;
    float *qs = sm, *os = qs + Q * D, *kw = os + Q * D + warp * D, *sc = os + Q * D + warps * D;
    for (int64_t x = threadIdx.x; x < Q * D; x += blockDim.x)
        qs[x] = ld_round(q + (b * Q + x / D) * q_stride + h * D + x % D, lowp);
    __syncthreads();
    for (int64_t j = J0 + warp; j < J1; j += warps) {
        for (int64_t d = lane; d < D; d += 32) kw[d] = ld_round(kb + j * H + d, lowp);
        for (int64_t i = 0; i < Q; i++) { /* lane reads only the kw[d] it wrote */
            int64_t j1, j0 = dec_part(len, bound, i, s, &j1);
            if (j < j0 || j >= j1) continue;
            float acc = 0.0f;
            for (int64_t d = lane; d < D; d += 32) acc += qs[i * D + d] * kw[d];
            acc = warp_sum(acc);
            if (lane == 0) sc[i * ns + j - j0] = acc * scale;
        }
    }
    __syncthreads();
    for (int64_t i = 0; i < Q; i++) {
        int64_t j1, j0 = dec_part(len, bound, i, s, &j1), m = j1 - j0;
        if (m <= 0) continue; /* the same for the whole block */
        float *si = sc + i * ns, mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) mx = fmaxf(mx, si[j]);
        mx = block_max(mx, sh, -INFINITY);
        float ps = 0.0f;
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
            float e = __expf(si[j] - mx);
            si[j] = e;
            ps += e;
        }
        float l = block_sum(ps, sh); /* its barriers also publish si */
        float *rec = part + (((b * n_head + h) * Q + i) * DEC_SPLITS + s) * (D + 2);
        if (threadIdx.x == 0) rec[0] = mx, rec[1] = l;
    }
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        for (int64_t i = 0; i < Q; i++) os[i * D + d] = 0.0f;
        for (int64_t j = J0; j < J1; j++) {
            float v = ld_round(vb + j * H + d, lowp);
            for (int64_t i = 0; i < Q; i++) {
                int64_t j1, j0 = dec_part(len, bound, i, s, &j1);
                if (j >= j0 && j < j1) os[i * D + d] = fmaf(sc[i * ns + j - j0], v, os[i * D + d]);
            }
        }
        for (int64_t i = 0; i < Q; i++) {
            int64_t j1, j0 = dec_part(len, bound, i, s, &j1);
            if (j0 < j1)
                part[(((b * n_head + h) * Q + i) * DEC_SPLITS + s) * (D + 2) + 2 + d] =
                    os[i * D + d];
        }
    }
}

/* Query (b, h, i)'s parts added in split order, each rescaled to their max. */
__global__ void k_attn_decode_combine(float *out, const float *part, const int32_t *len,
                                      int64_t bound, int64_t Q, int64_t n_head, int64_t D,
                                      int lowp) {
    int64_t i = blockIdx.z, h = blockIdx.y, b = blockIdx.x, T = dec_rows(len, bound, i);
    float *o = out + (b * Q + i) * n_head * D + h * D;
    if (T < 0) { /* a graph replayed past the length it was recorded for */
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = NAN;
        return;
    }
    int64_t parts = (T + dec_part_rows(T) - 1) / dec_part_rows(T);
    const float *rec = part + ((b * n_head + h) * Q + i) * DEC_SPLITS * (D + 2);
    float mx = -INFINITY, l = 0.0f;
    for (int64_t s = 0; s < parts; s++) mx = fmaxf(mx, rec[s * (D + 2)]);
    for (int64_t s = 0; s < parts; s++)
        l = fmaf(rec[s * (D + 2) + 1], __expf(rec[s * (D + 2)] - mx), l);
    float inv = 1.0f / l;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t s = 0; s < parts; s++)
            acc = fmaf(rec[s * (D + 2) + 2 + d], __expf(rec[s * (D + 2)] - mx), acc);
        o[d] = cu_lowp(acc * inv, lowp);
    }
}

void cu_attn_decode(kf_backend *b, float *out, const float *q, int64_t q_stride,
                    const float *kcache, const float *vcache, int64_t B, int64_t cap, int64_t P,
                    const int32_t *len, int64_t Q, int64_t n_head, int64_t head_dim) {
    KF_CHECK(P + Q <= cap, "attn_decode: %lld cached rows exceed the cache capacity %lld",
             (long long)(P + Q), (long long)cap);
    if (B <= 0 || Q <= 0) return;
    int64_t D = head_dim;
    /* q and o of every query, a K row per warp, then the scores of the
     * queries' parts at the bound (the kernel's layout) */
    size_t bytes =
        (size_t)(2 * Q * D + DEC_THREADS / 32 * D + Q * ((P + Q + DEC_SPLITS - 1) / DEC_SPLITS)) *
        sizeof(float);
    KF_CHECK(bytes <= 48 * 1024, "attn_decode: %lld cached rows of %lld queries is too many",
             (long long)(P + Q), (long long)Q);
    KF_CHECK(n_head <= 65535 && Q <= 65535 && B <= 0x7fffffff / DEC_SPLITS,
             "attn_decode: %lld heads, %lld queries or %lld samples is too many", (long long)n_head,
             (long long)Q, (long long)B);
    /* sized by the shape alone: a graph recorded at one bound allocates
     * nothing at the next */
    float *part = (float *)cu_scratch(
        b, CU_SCRATCH_D, (size_t)(B * n_head * Q * DEC_SPLITS * (D + 2)) * sizeof(float));
    dim3 grid((unsigned)(B * DEC_SPLITS), (unsigned)n_head);
    k_attn_decode_part<<<grid, DEC_THREADS, bytes, cu_stream(b)>>>(
        part, q, q_stride, kcache, vcache, cap, len, P, Q, n_head, D, 1.0f / sqrtf((float)D),
        b->precision);
    CUDA_LAUNCHED();
    dim3 rows((unsigned)B, (unsigned)n_head, (unsigned)Q);
    k_attn_decode_combine<<<rows, DEC_THREADS, 0, cu_stream(b)>>>(out, part, len, P, Q, n_head, D,
                                                                  b->precision);
    CUDA_LAUNCHED();
}
