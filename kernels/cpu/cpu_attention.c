/* kernels/cpu/cpu_attention.c — attention over a kf_mask structure, and decode attention.
 *
 * No L×L mask or score matrix exists: for each query row the visible keys are
 * at most two contiguous ranges derived from the structure (a context prefix
 * and the row's own group, see mask_ranges), and only those are visited, so
 * the cost is the number of visible (query, key) pairs. The forward keeps the
 * log-sum-exp per row; the backward recomputes probabilities from it.
 *
 * Parallelism: the forward and decode split query rows over threads (each
 * output row is computed by one thread); the backward gives each (sample,
 * head) to one thread, which walks its queries in order, so the dK/dV sums
 * have a fixed order for any thread count.
 *
 * fp16 mode rounds every float input (q, k, v; out and dout in the backward)
 * and every float output (out, dqkv) through _Float16; lse stays fp32.
 * Rows with no visible key (context rows at or past valid_len) get out = 0,
 * lse = 0 and no gradient.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

/* Visible keys of query row r (sample with valid context length vl) as up to
 * two ranges [lo, hi); returns how many. */
static int mask_ranges(const kf_mask *m, int64_t vl, int64_t r, int64_t lo[2], int64_t hi[2]) {
    if (r < m->n_ctx) {
        if (r >= vl) return 0;
        lo[0] = 0;
        hi[0] = r + 1;
        return 1;
    }
    int64_t g = (r - m->n_ctx) / m->group;
    int64_t ctx = g + 1 < vl ? g + 1 : vl;
    int n = 0;
    if (ctx > 0) {
        lo[n] = 0;
        hi[n++] = ctx;
    }
    lo[n] = m->n_ctx + g * m->group;
    hi[n++] = r + 1;
    return n;
}

static int64_t valid_ctx(const kf_mask *m, int64_t b) {
    if (!m->valid_len) return m->n_ctx;
    int64_t vl = m->valid_len[b];
    return vl < 0 ? 0 : vl > m->n_ctx ? m->n_ctx : vl;
}

static void check_mask(const kf_mask *m) {
    KF_CHECK(m->n_ctx >= 0 && m->n_groups >= 0 && m->group >= 0, "attention: negative mask sizes");
    KF_CHECK(m->n_groups == 0 || m->group > 0, "attention: n_groups > 0 needs group > 0");
    KF_CHECK(m->q_start >= 0 && m->q_start <= kf_mask_len(m), "attention: q_start out of range");
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One query row: out[D] = softmax(q·K^T * scale) V over the given key ranges
 * (key row j at k + j*ld, value row j at v + j*ld); s is room for the scores.
 * Returns the log-sum-exp of the scaled scores. */
static float attn_row(float *out, const float *q, const float *k, const float *v, int64_t ld,
                      const int64_t *lo, const int64_t *hi, int nr, int64_t D, float scale,
                      float *s) {
    int64_t n = 0;
    float mx = -INFINITY;
    for (int t = 0; t < nr; t++)
        for (int64_t j = lo[t]; j < hi[t]; j++) {
            float x = dot(q, k + j * ld, D) * scale;
            s[n++] = x;
            mx = x > mx ? x : mx;
        }
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        s[i] = expf(s[i] - mx);
        sum += s[i];
    }
    for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
    n = 0;
    for (int t = 0; t < nr; t++)
        for (int64_t j = lo[t]; j < hi[t]; j++) {
            const float *vj = v + j * ld;
            float p = s[n++];
            for (int64_t d = 0; d < D; d++) out[d] += p * vj[d];
        }
    float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; d++) out[d] *= inv;
    return mx + logf(sum);
}

static void count_pairs(kf_backend *b, int64_t pairs) {
#pragma omp atomic
    ((cpu_impl *)b->impl)->attn_pairs += pairs;
}

/* Query rows are handed out in blocks so small batches still use every thread. */
#define ATTN_ROW_BLOCK 16

void cpu_attn_fwd(kf_backend *b, float *out, float *lse, const float *qkv, const kf_mask *m,
                  int64_t B, int64_t n_head, int64_t head_dim) {
    check_mask(m);
    int64_t L = kf_mask_len(m), H = n_head * head_dim, D = head_dim, ld = 3 * H;
    int half = b->precision == KF_PREC_FP16;
    if (half) {
        float *h = cpu_scratch(b, CPU_SCRATCH_A, (size_t)(B * L * ld));
        cpu_round_half_copy(h, qkv, B * L * ld);
        qkv = h;
    }
    float scale = 1.0f / sqrtf((float)D);
    int64_t nq = L - m->q_start, nblk = (nq + ATTN_ROW_BLOCK - 1) / ATTN_ROW_BLOCK;
    int64_t pairs = 0;
#pragma omp parallel reduction(+ : pairs)
    {
        float *s = kf_malloc((size_t)(L > 0 ? L : 1) * sizeof(float));
#pragma omp for schedule(dynamic) collapse(3)
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t h = 0; h < n_head; h++)
                for (int64_t blk = 0; blk < nblk; blk++) {
                    int64_t vl = valid_ctx(m, bi);
                    const float *base = qkv + bi * L * ld;
                    int64_t r0 = m->q_start + blk * ATTN_ROW_BLOCK;
                    int64_t r1 = r0 + ATTN_ROW_BLOCK < L ? r0 + ATTN_ROW_BLOCK : L;
                    for (int64_t r = r0; r < r1; r++) {
                        int64_t lo[2], hi[2];
                        int nr = mask_ranges(m, vl, r, lo, hi);
                        float *o = out + (bi * L + r) * H + h * D;
                        float *l = lse + (bi * n_head + h) * L + r;
                        if (nr == 0) {
                            memset(o, 0, (size_t)D * sizeof(float));
                            *l = 0.0f;
                            continue;
                        }
                        for (int t = 0; t < nr; t++) pairs += hi[t] - lo[t];
                        *l = attn_row(o, base + r * ld + h * D, base + H + h * D,
                                      base + 2 * H + h * D, ld, lo, hi, nr, D, scale, s);
                        if (half)
                            for (int64_t d = 0; d < D; d++) o[d] = cpu_half(o[d]);
                    }
                }
        free(s);
    }
    count_pairs(b, pairs);
}

void cpu_attn_bwd(kf_backend *b, float *dqkv, const float *dout, const float *out,
                  const float *lse, const float *qkv, const kf_mask *m, int64_t B, int64_t n_head,
                  int64_t head_dim) {
    check_mask(m);
    int64_t L = kf_mask_len(m), H = n_head * head_dim, D = head_dim, ld = 3 * H;
    int half = b->precision == KF_PREC_FP16;
    if (half) {
        float *hq = cpu_scratch(b, CPU_SCRATCH_A, (size_t)(B * L * ld));
        float *hd = cpu_scratch(b, CPU_SCRATCH_B, (size_t)(B * L * H));
        float *ho = cpu_scratch(b, CPU_SCRATCH_C, (size_t)(B * L * H));
        cpu_round_half_copy(hq, qkv, B * L * ld);
        cpu_round_half_copy(hd, dout, B * L * H);
        cpu_round_half_copy(ho, out, B * L * H);
        qkv = hq;
        dout = hd;
        out = ho;
    }
    memset(dqkv, 0, (size_t)(B * L * ld) * sizeof(float));
    float scale = 1.0f / sqrtf((float)D);
    int64_t pairs = 0;
#pragma omp parallel reduction(+ : pairs)
    {
        float *ds = kf_malloc((size_t)(L > 0 ? L : 1) * sizeof(float));
#pragma omp for schedule(dynamic) collapse(2)
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t h = 0; h < n_head; h++) {
                int64_t vl = valid_ctx(m, bi);
                const float *base = qkv + bi * L * ld;
                const float *k = base + H + h * D, *v = base + 2 * H + h * D;
                float *dbase = dqkv + bi * L * ld;
                float *dk = dbase + H + h * D, *dv = dbase + 2 * H + h * D;
                for (int64_t r = m->q_start; r < L; r++) {
                    int64_t lo[2], hi[2];
                    int nr = mask_ranges(m, vl, r, lo, hi);
                    if (nr == 0) continue;
                    const float *q = base + r * ld + h * D;
                    const float *dor = dout + (bi * L + r) * H + h * D;
                    const float *orow = out + (bi * L + r) * H + h * D;
                    float *dq = dbase + r * ld + h * D;
                    float l = lse[(bi * n_head + h) * L + r];
                    float Di = dot(dor, orow, D);
                    int64_t n = 0;
                    /* dS_j = p_j (dout·v_j - D_i); dV_j += p_j dout */
                    for (int t = 0; t < nr; t++)
                        for (int64_t j = lo[t]; j < hi[t]; j++) {
                            float p = expf(dot(q, k + j * ld, D) * scale - l);
                            float *dvj = dv + j * ld;
                            for (int64_t d = 0; d < D; d++) dvj[d] += p * dor[d];
                            ds[n++] = p * (dot(dor, v + j * ld, D) - Di) * scale;
                        }
                    pairs += n;
                    n = 0;
                    for (int t = 0; t < nr; t++)
                        for (int64_t j = lo[t]; j < hi[t]; j++) {
                            float g = ds[n++];
                            const float *kj = k + j * ld;
                            float *dkj = dk + j * ld;
                            for (int64_t d = 0; d < D; d++) {
                                dq[d] += g * kj[d];
                                dkj[d] += g * q[d];
                            }
                        }
                }
            }
        free(ds);
    }
    if (half) cpu_round_half_copy(dqkv, dqkv, B * L * ld);
    count_pairs(b, pairs);
}

void cpu_attn_decode(kf_backend *b, float *out, const float *q, int64_t q_stride,
                     const float *kcache, const float *vcache, int64_t B, int64_t cap, int64_t P,
                     int64_t Q, int64_t n_head, int64_t head_dim) {
    int64_t H = n_head * head_dim, D = head_dim, T = P + Q;
    KF_CHECK(T <= cap, "attn_decode: %lld cached rows exceed the cache capacity %lld",
             (long long)T, (long long)cap);
    int half = b->precision == KF_PREC_FP16;
    int64_t kstride = cap * H; /* per-sample stride of the caches */
    if (half) {
        float *hq = cpu_scratch(b, CPU_SCRATCH_A, (size_t)(B * Q * H));
        float *hk = cpu_scratch(b, CPU_SCRATCH_B, (size_t)(B * T * H));
        float *hv = cpu_scratch(b, CPU_SCRATCH_C, (size_t)(B * T * H));
        for (int64_t i = 0; i < B * Q; i++) cpu_round_half_copy(hq + i * H, q + i * q_stride, H);
        for (int64_t bi = 0; bi < B; bi++) {
            cpu_round_half_copy(hk + bi * T * H, kcache + bi * kstride, T * H);
            cpu_round_half_copy(hv + bi * T * H, vcache + bi * kstride, T * H);
        }
        q = hq;
        q_stride = H;
        kcache = hk;
        vcache = hv;
        kstride = T * H;
    }
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel
    {
        float *s = kf_malloc((size_t)(T > 0 ? T : 1) * sizeof(float));
#pragma omp for schedule(static) collapse(3)
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t h = 0; h < n_head; h++)
                for (int64_t i = 0; i < Q; i++) {
                    int64_t lo = 0, hi = P + i + 1;
                    float *o = out + (bi * Q + i) * H + h * D;
                    attn_row(o, q + (bi * Q + i) * q_stride + h * D, kcache + bi * kstride + h * D,
                             vcache + bi * kstride + h * D, H, &lo, &hi, 1, D, scale, s);
                    if (half)
                        for (int64_t d = 0; d < D; d++) o[d] = cpu_half(o[d]);
                }
        free(s);
    }
}
