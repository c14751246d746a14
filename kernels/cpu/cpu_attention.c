/* kernels/cpu/cpu_attention.c — attention over a kf_mask structure, and decode attention.
 *
 * No L×L mask or score matrix exists: for each query row the visible keys are
 * at most two contiguous ranges derived from the structure (a context prefix
 * and the row's own group, see mask_ranges), and only those are visited, so
 * the cost is the number of visible (query, key) pairs. The forward keeps the
 * log-sum-exp per row; the backward recomputes probabilities from it.
 *
 * Parallelism: each (sample, head) is one task for one thread, which walks
 * its queries in order (each output row, and each dK/dV sum, has a fixed
 * order for any thread count). Keys (and values in the backward) are
 * transposed per head so that scoring vectorises over keys; score and
 * weighted-sum loops run whole VB-wide vectors in independent chains.
 *
 * fp16 mode rounds every float input (q, k, v; out and dout in the backward)
 * and every float output (out, dqkv) through _Float16; lse stays fp32. The
 * 16-bit copies (kernels.h) of out and dqkv hold those rounded values.
 * Rows with no visible key (context rows at or past valid_len) get out = 0,
 * lse = 0 and no gradient.
 */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/attn_mask.h"
#include "kernels/cpu/cpu_internal.h"

/* Visible keys of query row r (sample with valid context length vl) as up to
 * two ranges [lo, hi); returns how many. */
static int mask_ranges(const kf_mask *m, int64_t vl, int64_t r, int64_t lo[2], int64_t hi[2]) {
    int64_t ctx, grp;
    int in_group = kf_mask_row_keys(m->n_ctx, m->group, m->bidir, vl, r, &ctx, &grp);
    int n = 0;
    if (ctx > 0) {
        lo[n] = 0;
        hi[n++] = ctx;
    }
    if (in_group) {
        lo[n] = grp;
        hi[n++] = r + 1;
    }
    return n;
}

/* Width of the register-resident accumulators (one AVX-512 vector). Chunking
 * keeps every sum in the same order as a plain loop would. */
#define VB 16
_Static_assert(VB == CPU_LANES, "attn_row's sum folds VB-wide chunks as CPU_LANES lanes");

/* Leading dimension of n transposed keys: room for a full VB-wide chunk that
 * starts anywhere before n, so scoring never needs a scalar tail. */
static int64_t kt_ld(int64_t n) { return (n + VB - 1) / VB * VB + VB; }

/* dst[c * ldd + r] = src[r * lds + c] for a 16 x 16 tile: within each
 * 128-bit lane, 4 x 4 transposes of each group of 4 rows (unpack, shuffle),
 * then the lanes gathered across the four groups. */
__attribute__((target("avx512f"))) static void tile16_avx512(float *dst, int64_t ldd,
                                                             const float *src, int64_t lds) {
    __m512 r[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int g = 0; g < 4; g++) {
        __m512 t0 = _mm512_unpacklo_ps(r[4 * g], r[4 * g + 1]);
        __m512 t1 = _mm512_unpackhi_ps(r[4 * g], r[4 * g + 1]);
        __m512 t2 = _mm512_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]);
        __m512 t3 = _mm512_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
        /* u[4g + c], lane L: rows 4g..4g+3 at column 4L + c */
        u[4 * g] = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 1] = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * g + 2] = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 3] = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; c++) {
        __m512 s0 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 s1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 s2 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
        __m512 s3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
        _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(s0, s1, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_ps(dst + (4 + c) * ldd,
                         _mm512_shuffle_f32x4(s0, s1, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_storeu_ps(dst + (8 + c) * ldd,
                         _mm512_shuffle_f32x4(s2, s3, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_ps(dst + (12 + c) * ldd,
                         _mm512_shuffle_f32x4(s2, s3, _MM_SHUFFLE(3, 1, 3, 1)));
    }
}

/* The same for an 8 x 8 tile with AVX's two 128-bit lanes. */
__attribute__((target("avx"))) static void tile8_avx(float *dst, int64_t ldd, const float *src,
                                                     int64_t lds) {
    __m256 r[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int g = 0; g < 2; g++) {
        __m256 t0 = _mm256_unpacklo_ps(r[4 * g], r[4 * g + 1]);
        __m256 t1 = _mm256_unpackhi_ps(r[4 * g], r[4 * g + 1]);
        __m256 t2 = _mm256_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]);
        __m256 t3 = _mm256_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
        u[4 * g] = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 1] = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * g + 2] = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 3] = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
        _mm256_storeu_ps(dst + (4 + c) * ldd, _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
}

/* Kt[d * kt_ld(n) + j] = K row j, column d, rounded by cpu_lowp(., lowp),
 * for rows [0, n), zero past n: keys transposed so that scoring one query
 * against many keys vectorises over them (decoding rounds its cached keys
 * here, not in a copy of the cache first). Whole VB-row blocks move as
 * register tiles: element by element, the strided reads made this transpose
 * 6% of a 124M bf16 K-Forcing decode step. */
CPU_INLINE void transpose_keys(float *Kt, const float *k, int64_t ld, int64_t n, int64_t D,
                               int lowp) {
    int64_t ldt = kt_ld(n);
    int lvl = cpu_simd_level(), t = lvl >= CPU_SIMD_AVX512 ? 16 : lvl >= CPU_SIMD_AVX2 ? 8 : 0;
    for (int64_t j0 = 0; j0 < n; j0 += VB) { /* VB x D blocks: rows stay in cache */
        int64_t jn = n - j0 < VB ? n - j0 : VB, d = 0;
        if (t && jn == VB)
            for (; d + t <= D; d += t)
                for (int64_t jj = 0; jj < VB; jj += t) {
                    float *dst = Kt + d * ldt + j0 + jj;
                    const float *src = k + (j0 + jj) * ld + d;
                    if (t == 16) tile16_avx512(dst, ldt, src, ld);
                    else tile8_avx(dst, ldt, src, ld);
                }
        for (; d < D; d++) /* columns past the tiles; a last block of fewer rows */
            for (int64_t j = j0; j < j0 + jn; j++) Kt[d * ldt + j] = k[j * ld + d];
    }
    for (int64_t d = 0; d < D; d++) {
        float *row = Kt + d * ldt;
        if (lowp)
            for (int64_t j = 0; j < n; j++) row[j] = cpu_lowp(row[j], lowp);
        memset(row + n, 0, (size_t)(ldt - n) * sizeof(float));
    }
}

/* s[j - lo] = scale * q · K_j for j in [lo, hi), with K transposed in Kt
 * (leading dimension kt_ld(...)). Whole VB chunks are scored, so up to VB-1
 * values past hi - lo are written too: s needs that much room. */
CPU_INLINE void scores(float *s, const float *q, const float *Kt, int64_t ldt, int64_t lo,
                       int64_t hi, int64_t D, float scale) {
    int64_t n = hi - lo, j = 0;
    /* four chunks at once: independent accumulator chains, same per-element order */
    for (; j + 4 * VB <= n; j += 4 * VB) {
        float a0[VB] = {0}, a1[VB] = {0}, a2[VB] = {0}, a3[VB] = {0};
        for (int64_t d = 0; d < D; d++) {
            float qd = q[d];
            const float *kt = Kt + d * ldt + lo + j;
#pragma omp simd
            for (int i = 0; i < VB; i++) {
                a0[i] += qd * kt[i];
                a1[i] += qd * kt[VB + i];
                a2[i] += qd * kt[2 * VB + i];
                a3[i] += qd * kt[3 * VB + i];
            }
        }
#pragma omp simd
        for (int i = 0; i < VB; i++) {
            s[j + i] = a0[i] * scale;
            s[j + VB + i] = a1[i] * scale;
            s[j + 2 * VB + i] = a2[i] * scale;
            s[j + 3 * VB + i] = a3[i] * scale;
        }
    }
    for (; j < n; j += VB) {
        float acc[VB] = {0};
        for (int64_t d = 0; d < D; d++) {
            float qd = q[d];
            const float *kt = Kt + d * ldt + lo + j;
#pragma omp simd
            for (int i = 0; i < VB; i++) acc[i] += qd * kt[i];
        }
#pragma omp simd
        for (int i = 0; i < VB; i++) s[j + i] = acc[i] * scale;
    }
}

/* out[c * 8, (c + 1) * 8) for c < nv += sum_{j in [lo, hi)} p[j - lo] * v_j
 * there: nv chains of 8 floats at once (nv is a constant where it is
 * called, so the accumulators are registers). */
CPU_INLINE void weighted_cols(float *out, const float *p, const float *v, int64_t ldv, int64_t lo,
                              int64_t hi, int nv) {
    v8f acc[8];
    for (int c = 0; c < nv; c++) memcpy(&acc[c], out + 8 * c, sizeof acc[c]);
    for (int64_t j = lo; j < hi; j++) {
        const float *vj = v + j * ldv;
        float pj = p[j - lo];
        for (int c = 0; c < nv; c++) {
            v8f x;
            memcpy(&x, vj + 8 * c, sizeof x);
            acc[c] += pj * x;
        }
    }
    for (int c = 0; c < nv; c++) memcpy(out + 8 * c, &acc[c], sizeof acc[c]);
}

/* out[D] += sum_{j in [lo, hi)} p[j - lo] * v_j (value row j at v + j*ldv):
 * up to 64 columns in one pass over j (8 chains hide the FMA latency; head
 * dim 64 in one pass, 48 in 32 + 16), each output a chain over j. */
CPU_INLINE void weighted_rows(float *out, const float *p, const float *v, int64_t ldv, int64_t lo,
                              int64_t hi, int64_t D) {
    int64_t d = 0;
    for (; d + 64 <= D; d += 64) weighted_cols(out + d, p, v + d, ldv, lo, hi, 8);
    if (d + 32 <= D) {
        weighted_cols(out + d, p, v + d, ldv, lo, hi, 4);
        d += 32;
    }
    if (d + 16 <= D) {
        weighted_cols(out + d, p, v + d, ldv, lo, hi, 2);
        d += 16;
    }
    if (d + 8 <= D) {
        weighted_cols(out + d, p, v + d, ldv, lo, hi, 1);
        d += 8;
    }
    for (; d < D; d++) {
        float acc = out[d];
        for (int64_t j = lo; j < hi; j++) acc += p[j - lo] * v[j * ldv + d];
        out[d] = acc;
    }
}

/* out[D] = softmax(s[0, n)) V over the key ranges [lo, hi) (value row j at
 * v + j*ldv), for scores s (scaled) written to whole VB chunks past n, which
 * this pads with -inf. Returns the log-sum-exp of the scores. */
CPU_INLINE float softmax_rows(float *out, float *s, int64_t n, const float *v, int64_t ldv,
                              const int64_t *lo, const int64_t *hi, int nr, int64_t D) {
    /* pad to whole vectors with -inf (exp gives 0) so no scalar tail runs */
    int64_t npad = (n + VB - 1) / VB * VB;
    for (int64_t i = n; i < npad; i++) s[i] = -INFINITY;
    float mx = -INFINITY, acc[CPU_LANES] = {0};
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < npad; i++) mx = s[i] > mx ? s[i] : mx;
    for (int64_t i0 = 0; i0 < npad; i0 += VB) /* fixed lanes: the same sum at every SIMD level */
        for (int i = 0; i < VB; i++) {
            s[i0 + i] = cpu_expf(s[i0 + i] - mx);
            acc[i] += s[i0 + i];
        }
    float sum = cpu_lanes_sumf(acc);
    for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
    n = 0;
    for (int t = 0; t < nr; t++) {
        weighted_rows(out, s + n, v, ldv, lo[t], hi[t], D);
        n += hi[t] - lo[t];
    }
    float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; d++) out[d] *= inv;
    return mx + logf(sum);
}

/* One query row: out[D] = softmax(scale q·K^T) V over the key ranges [lo, hi)
 * (keys transposed in Kt with leading dimension ldt; value row j at v + j*ldv);
 * s has room for the scores plus VB. Returns the log-sum-exp of the scaled scores. */
CPU_INLINE float attn_row(float *out, const float *q, const float *Kt, int64_t ldt, const float *v,
                          int64_t ldv, const int64_t *lo, const int64_t *hi, int nr, int64_t D,
                          float scale, float *s) {
    int64_t n = 0;
    for (int t = 0; t < nr; t++) {
        scores(s + n, q, Kt, ldt, lo[t], hi[t], D, scale);
        n += hi[t] - lo[t];
    }
    return softmax_rows(out, s, n, v, ldv, lo, hi, nr, D);
}

static void count_pairs(kf_backend *b, int64_t pairs) {
#pragma omp atomic
    ((cpu_impl *)b->impl)->attn_pairs += pairs;
}

/* Forward for query rows [r0, r1) of one (sample, head); base = the sample's qkv
 * rows, o/l = its out rows and lse row for this head. Returns the pairs scored. */
CPU_INLINE int64_t fwd_block_body(float *o, int64_t ldo, float *l, const float *base, int64_t H,
                                  const kf_mask *m, int64_t vl, int64_t r0, int64_t r1, int64_t D,
                                  int lowp, float *Kt, float *s) {
    int64_t ld = 3 * H, pairs = 0;
    float scale = 1.0f / sqrtf((float)D);
    transpose_keys(Kt, base + H, ld, r1, D, 0); /* base is rounded already */
    int64_t ldt = kt_ld(r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t lo[2], hi[2];
        int nr = mask_ranges(m, vl, r, lo, hi);
        float *orow = o + r * ldo;
        if (nr == 0) {
            memset(orow, 0, (size_t)D * sizeof(float));
            l[r] = 0.0f;
            continue;
        }
        for (int t = 0; t < nr; t++) pairs += hi[t] - lo[t];
        l[r] = attn_row(orow, base + r * ld, Kt, ldt, base + 2 * H, ld, lo, hi, nr, D, scale, s);
        if (lowp)
            for (int64_t d = 0; d < D; d++) orow[d] = cpu_lowp(orow[d], lowp);
    }
    return pairs;
}
CPU_MULTIVERSION(int64_t, fwd_block,
                 (float *o, int64_t ldo, float *l, const float *base, int64_t H, const kf_mask *m,
                  int64_t vl, int64_t r0, int64_t r1, int64_t D, int lowp, float *Kt, float *s),
                 (o, ldo, l, base, H, m, vl, r0, r1, D, lowp, Kt, s))

/* x rounded as a 16-bit mode rounds the attention's inputs, or the values
 * of its 16-bit copy x16 (the same numbers), in scratch slot `slot`. */
static const float *attn_input(kf_backend *b, int slot, const float *x, const void *x16,
                               int64_t n) {
    float *h = cpu_scratch(b, slot, (size_t)n);
    if (x16) cpu_from16(h, x16, n, b->precision);
    else cpu_round_lowp_copy(h, x, n, b->precision);
    return h;
}

void cpu_attn_fwd(kf_backend *b, float *out, float *lse, const float *qkv, const kf_mask *m,
                  int64_t B, int64_t n_head, int64_t head_dim, const void *qkv16, void *out16) {
    kf_mask_check(m);
    int64_t L = kf_mask_len(m), H = n_head * head_dim, D = head_dim, ld = 3 * H;
    int lowp = b->precision;
    KF_CHECK(lowp || !(qkv16 || out16), "attn_fwd: a 16-bit copy in fp32 mode");
    if (lowp) qkv = attn_input(b, CPU_SCRATCH_A, qkv, qkv16, B * L * ld);
    if (!out) out = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(B * L * H));
    int64_t pairs = 0;
#pragma omp parallel reduction(+ : pairs)
    {
        float *s = kf_malloc((size_t)(L + VB) * sizeof(float));
        float *Kt = kf_malloc((size_t)(kt_ld(L) * D) * sizeof(float));
#pragma omp for schedule(dynamic) collapse(2)
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t h = 0; h < n_head; h++)
                pairs += fwd_block(out + bi * L * H + h * D, H, lse + (bi * n_head + h) * L,
                                   qkv + bi * L * ld + h * D, H, m,
                                   kf_mask_valid_ctx(m->valid_len, m->n_ctx, bi), m->q_start, L, D,
                                   lowp, Kt, s);
        free(s);
        free(Kt);
    }
    if (out16) /* the query rows of each sample */
        for (int64_t bi = 0; bi < B; bi++) {
            int64_t r0 = (bi * L + m->q_start) * H;
            cpu_to16((uint16_t *)out16 + r0, out + r0, (L - m->q_start) * H, lowp);
        }
    count_pairs(b, pairs);
}

/* Backward of one (sample, head), queries in order: dq rows are complete per
 * query; dK/dV rows accumulate over queries in a fixed order. base/dbase =
 * the sample's qkv/dqkv rows at this head's column; dout/out/l likewise. */
CPU_INLINE int64_t bwd_head_body(float *dbase, const float *base, const float *dout,
                                 const float *out, const float *l, int64_t H, int64_t L,
                                 const kf_mask *m, int64_t vl, int64_t D, float *Kt, float *Vt,
                                 float *p, float *dp) {
    int64_t ld = 3 * H, pairs = 0;
    float scale = 1.0f / sqrtf((float)D);
    const float *k = base + H;
    float *dk = dbase + H, *dv = dbase + 2 * H;
    transpose_keys(Kt, k, ld, L, D, 0);
    transpose_keys(Vt, base + 2 * H, ld, L, D, 0);
    int64_t ldt = kt_ld(L);
    for (int64_t r = m->q_start; r < L; r++) {
        int64_t lo[2], hi[2];
        int nr = mask_ranges(m, vl, r, lo, hi);
        if (nr == 0) continue;
        const float *q = base + r * ld, *dor = dout + r * H, *orow = out + r * H;
        float *dq = dbase + r * ld;
        float Di = 0.0f, lr = l[r];
        for (int64_t d = 0; d < D; d++) Di += dor[d] * orow[d];
        int64_t n = 0;
        for (int t = 0; t < nr; t++) {
            scores(p + n, q, Kt, ldt, lo[t], hi[t], D, scale);
            scores(dp + n, dor, Vt, ldt, lo[t], hi[t], D, 1.0f);
            n += hi[t] - lo[t];
        }
        pairs += n;
        /* p_j = exp(s_j - lse); dS_j = p_j (dout·v_j - D_i), pre-scaled; whole
         * vectors (scores() filled them), the values past n are never used */
        int64_t npad = (n + VB - 1) / VB * VB;
#pragma omp simd
        for (int64_t i = 0; i < npad; i++) {
            p[i] = cpu_expf(p[i] - lr);
            dp[i] = p[i] * (dp[i] - Di) * scale;
        }
        /* dq += dS K; dK_j += dS_j q; dV_j += p_j dout — q, dout and dq held in
         * registers (head dims 32/48/64: all column chunks in one pass over j) */
        if (D % VB == 0 && D >= 2 * VB && D <= 4 * VB) {
            float aq[4][VB], qv[4][VB], ov[4][VB];
            int64_t nc = D / VB;
            for (int64_t c = 0; c < nc; c++)
                for (int i = 0; i < VB; i++)
                    aq[c][i] = dq[c * VB + i], qv[c][i] = q[c * VB + i], ov[c][i] = dor[c * VB + i];
            n = 0;
            for (int t = 0; t < nr; t++)
                for (int64_t j = lo[t]; j < hi[t]; j++, n++) {
                    const float *kj = k + j * ld;
                    float *dkj = dk + j * ld, *dvj = dv + j * ld;
                    float g = dp[n], pj = p[n];
                    for (int64_t c = 0; c < nc; c++) {
#pragma omp simd
                        for (int i = 0; i < VB; i++) {
                            aq[c][i] += g * kj[c * VB + i];
                            dkj[c * VB + i] += g * qv[c][i];
                            dvj[c * VB + i] += pj * ov[c][i];
                        }
                    }
                }
            for (int64_t c = 0; c < nc; c++)
                for (int i = 0; i < VB; i++) dq[c * VB + i] = aq[c][i];
            continue;
        }
        for (int64_t d0 = 0; d0 < D; d0 += VB) {
            int64_t w = D - d0 < VB ? D - d0 : VB;
            float aq[VB] = {0}, qv[VB] = {0}, ov[VB] = {0};
            for (int64_t i = 0; i < w; i++)
                aq[i] = dq[d0 + i], qv[i] = q[d0 + i], ov[i] = dor[d0 + i];
            n = 0;
            for (int t = 0; t < nr; t++)
                for (int64_t j = lo[t]; j < hi[t]; j++, n++) {
                    const float *kj = k + j * ld + d0;
                    float *dkj = dk + j * ld + d0, *dvj = dv + j * ld + d0;
                    float g = dp[n], pj = p[n];
                    if (w == VB) {
#pragma omp simd
                        for (int i = 0; i < VB; i++) {
                            aq[i] += g * kj[i];
                            dkj[i] += g * qv[i];
                            dvj[i] += pj * ov[i];
                        }
                    } else {
#pragma omp simd
                        for (int64_t i = 0; i < w; i++) {
                            aq[i] += g * kj[i];
                            dkj[i] += g * qv[i];
                            dvj[i] += pj * ov[i];
                        }
                    }
                }
            for (int64_t i = 0; i < w; i++) dq[d0 + i] = aq[i];
        }
    }
    return pairs;
}
CPU_MULTIVERSION(int64_t, bwd_head,
                 (float *dbase, const float *base, const float *dout, const float *out,
                  const float *l, int64_t H, int64_t L, const kf_mask *m, int64_t vl, int64_t D,
                  float *Kt, float *Vt, float *p, float *dp),
                 (dbase, base, dout, out, l, H, L, m, vl, D, Kt, Vt, p, dp))

void cpu_attn_bwd(kf_backend *b, float *dqkv, const float *dout, const float *out, const float *lse,
                  const float *qkv, const kf_mask *m, int64_t B, int64_t n_head, int64_t head_dim,
                  const void *dout16, const void *out16, const void *qkv16, void *dqkv16) {
    kf_mask_check(m);
    int64_t L = kf_mask_len(m), H = n_head * head_dim, D = head_dim, ld = 3 * H;
    int lowp = b->precision;
    KF_CHECK(lowp || !(dout16 || out16 || qkv16 || dqkv16), "attn_bwd: a 16-bit copy in fp32 mode");
    KF_CHECK(dqkv || dqkv16, "attn_bwd: neither dqkv nor its 16-bit copy");
    if (lowp) {
        qkv = attn_input(b, CPU_SCRATCH_A, qkv, qkv16, B * L * ld);
        dout = attn_input(b, CPU_SCRATCH_B, dout, dout16, B * L * H);
        out = attn_input(b, CPU_SCRATCH_C, out, out16, B * L * H);
    }
    if (!dqkv) dqkv = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(B * L * ld));
    memset(dqkv, 0, (size_t)(B * L * ld) * sizeof(float));
    int64_t pairs = 0;
#pragma omp parallel reduction(+ : pairs)
    {
        float *Kt = kf_malloc((size_t)(2 * kt_ld(L) * D) * sizeof(float)), *Vt = Kt + kt_ld(L) * D;
        float *p = kf_malloc((size_t)(2 * (L + VB)) * sizeof(float)), *dp = p + L + VB;
#pragma omp for schedule(dynamic) collapse(2)
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t h = 0; h < n_head; h++) {
                int64_t off = bi * L * H + h * D;
                pairs += bwd_head(dqkv + bi * L * ld + h * D, qkv + bi * L * ld + h * D, dout + off,
                                  out + off, lse + (bi * n_head + h) * L, H, L, m,
                                  kf_mask_valid_ctx(m->valid_len, m->n_ctx, bi), D, Kt, Vt, p, dp);
            }
        free(Kt);
        free(p);
    }
    if (lowp) cpu_round_lowp_copy(dqkv, dqkv, B * L * ld, lowp);
    if (dqkv16) cpu_to16(dqkv16, dqkv, B * L * ld, lowp);
    count_pairs(b, pairs);
}

/* Query rows decoding scores together: each chunk of transposed keys is
 * loaded once for all of them, and their QG chains overlap where one
 * query's chain over d waits on each FMA (one query at a time, with its
 * last chunks latency-bound, the decode attention took 5-6% of a 124M
 * K-Forcing step at AVX2). */
#define QG 4

/* s[g * lds + j] = scale * q_g · K_j (q_g = q + g * q_stride) for the queries
 * g < nq and the keys j < n, in whole VB chunks (up to VB - 1 scores past n):
 * per score the chain over d of scores(), so it does not depend on the group. */
CPU_INLINE void scores_group(float *s, int64_t lds, const float *q, int64_t q_stride, int nq,
                             const float *Kt, int64_t ldt, int64_t n, int64_t D, float scale) {
    const float *q0 = q, *q1 = q + (nq > 1) * q_stride, *q2 = q + (nq > 2) * 2 * q_stride,
                *q3 = q + (nq > 3) * 3 * q_stride; /* spare queries score the first again */
    for (int64_t j = 0; j < n; j += VB) {
        /* a VB chunk as two 8-float halves: GCC keeps 8-float vectors in AVX2
         * registers, where it spills 16-float ones through the stack */
        v8f a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0};
        const float *kt = Kt + j;
        for (int64_t d = 0; d < D; d++, kt += ldt) {
            v8f ka, kb;
            memcpy(&ka, kt, sizeof ka);
            memcpy(&kb, kt + 8, sizeof kb);
            a0 += q0[d] * ka;
            b0 += q0[d] * kb;
            a1 += q1[d] * ka;
            b1 += q1[d] * kb;
            a2 += q2[d] * ka;
            b2 += q2[d] * kb;
            a3 += q3[d] * ka;
            b3 += q3[d] * kb;
        }
        v8f out[QG][2] = {{a0 * scale, b0 * scale},
                          {a1 * scale, b1 * scale},
                          {a2 * scale, b2 * scale},
                          {a3 * scale, b3 * scale}};
        for (int g = 0; g < nq; g++) memcpy(s + g * lds + j, out[g], sizeof out[g]);
    }
}

/* Decode for one (sample, head): Q query rows over cache rows [0, P+i];
 * s holds QG rows of kt_ld(P + Q) scores. */
CPU_INLINE int decode_head_body(float *o, const float *q, int64_t q_stride, const float *k,
                                const float *v, int64_t H, int64_t P, int64_t Q, int64_t D,
                                int lowp, float *Kt, float *s) {
    int64_t T = P + Q, ldt = kt_ld(T);
    float scale = 1.0f / sqrtf((float)D);
    transpose_keys(Kt, k, H, T, D, lowp);
    for (int64_t i0 = 0; i0 < Q; i0 += QG) {
        int nq = Q - i0 < QG ? (int)(Q - i0) : QG;
        scores_group(s, ldt, q + i0 * q_stride, q_stride, nq, Kt, ldt, P + i0 + nq, D, scale);
        for (int g = 0; g < nq; g++) {
            int64_t lo = 0, hi = P + i0 + g + 1;
            float *orow = o + (i0 + g) * H;
            softmax_rows(orow, s + g * ldt, hi, v, H, &lo, &hi, 1, D);
            if (lowp)
                for (int64_t d = 0; d < D; d++) orow[d] = cpu_lowp(orow[d], lowp);
        }
    }
    return 0;
}
CPU_MULTIVERSION(int, decode_head,
                 (float *o, const float *q, int64_t q_stride, const float *k, const float *v,
                  int64_t H, int64_t P, int64_t Q, int64_t D, int lowp, float *Kt, float *s),
                 (o, q, q_stride, k, v, H, P, Q, D, lowp, Kt, s))

void cpu_attn_decode(kf_backend *b, float *out, const float *q, int64_t q_stride,
                     const float *kcache, const float *vcache, int64_t B, int64_t cap, int64_t P,
                     const int32_t *len, int64_t Q, int64_t n_head, int64_t head_dim) {
    KF_CHECK(P + Q <= cap, "attn_decode: %lld cached rows exceed the cache capacity %lld",
             (long long)(P + Q), (long long)cap);
    if (len) { /* device memory is the host's */
        KF_CHECK(*len >= 0 && *len <= P, "attn_decode: cache length %d outside the bound %lld",
                 (int)*len, (long long)P);
        P = *len;
    }
    int64_t H = n_head * head_dim, D = head_dim, T = P + Q;
    int lowp = b->precision;
    int64_t kstride = cap * H, vstride = kstride; /* per-sample strides of the caches */
    if (lowp) {
        float *hq = cpu_scratch(b, CPU_SCRATCH_A, (size_t)(B * Q * H));
        float *hv = cpu_scratch(b, CPU_SCRATCH_C, (size_t)(B * T * H));
        for (int64_t i = 0; i < B * Q; i++)
            cpu_round_lowp_copy(hq + i * H, q + i * q_stride, H, lowp);
        for (int64_t bi = 0; bi < B; bi++) /* keys: as they are transposed */
            cpu_round_lowp_copy(hv + bi * T * H, vcache + bi * kstride, T * H, lowp);
        q = hq;
        q_stride = H;
        vcache = hv;
        vstride = T * H;
    }
#pragma omp parallel if (B * n_head * Q * T * head_dim >= KF_CPU_PAR_MIN)
    {
        float *s = kf_malloc((size_t)(QG * kt_ld(T)) * sizeof(float));
        float *Kt = kf_malloc((size_t)(kt_ld(T) * D) * sizeof(float));
#pragma omp for schedule(static) collapse(2)
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t h = 0; h < n_head; h++)
                decode_head(out + bi * Q * H + h * D, q + bi * Q * q_stride + h * D, q_stride,
                            kcache + bi * kstride + h * D, vcache + bi * vstride + h * D, H, P, Q,
                            D, lowp, Kt, s);
        free(s);
        free(Kt);
    }
}
