/* kernels/cpu/cpu_head.c — the decode-time output layer (head_pack, head_fwd).
 *
 * Decoding runs the [V, H] output layer on a few rows per step. Through
 * OpenBLAS every call re-packs all of W (12.8 MB for GPT-2 at H = 64), which
 * costs as much as the product itself at batch 16, then writes the logits and
 * adds the bias in another pass. Here W is packed once, in panels of 32
 * vocabulary entries by H ([V/32][H][32]), and a register-blocked kernel
 * (4 rows x 32 entries) computes each logit as one fused multiply-add chain
 * over h = 0..H-1 followed by the bias: the same sum for any row count,
 * batch split or thread count. An argmax alone never materialises the
 * logits: per-lane maxima are kept as the panels go by, or, with AVX-512
 * VNNI, an int8 screen (cpu_head_screen.c) leaves only a few logits to
 * compute exactly.
 */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_head.h"
#include "kernels/cpu/cpu_internal.h"

#define PANEL CPU_HEAD_PANEL
#define ROWS CPU_HEAD_ROWS

void *cpu_head_pack(kf_backend *b, const float *W, const float *bias, int64_t V, int64_t H,
                    int64_t mask_col, float mask_value) {
    KF_CHECK(V >= 1 && H >= 1 && mask_col < V, "head_pack: V = %lld, H = %lld, mask %lld",
             (long long)V, (long long)H, (long long)mask_col);
    cpu_head *hd = kf_calloc(1, sizeof *hd);
    hd->V = V;
    hd->H = H;
    hd->panels = (V + PANEL - 1) / PANEL;
    size_t nw = (size_t)(hd->panels * H * PANEL), nb = (size_t)(hd->panels * PANEL);
    hd->w = kf_alloc_stream(nw * sizeof(float), 0);
    hd->bias = kf_alloc_stream(nb * sizeof(float), 0);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < hd->panels; p++)
        for (int64_t j = 0; j < PANEL; j++) {
            int64_t v = p * PANEL + j;
            const float *wv = W + v * H;
            for (int64_t h = 0; h < H; h++)
                hd->w[(p * H + h) * PANEL + j] = v < V && v != mask_col ? wv[h] : 0.0f;
        }
    for (int64_t v = 0; v < hd->panels * PANEL; v++)
        hd->bias[v] = v >= V ? NAN : v == mask_col ? mask_value : bias ? bias[v] : 0.0f;
    cpu_head_screen_pack(hd);
    return hd;
}

void cpu_head_free(kf_backend *b, void *head) {
    cpu_head *hd = head;
    if (!hd) return;
    cpu_head_screen_free(hd);
    free(hd->w);
    free(hd->bias);
    free(hd);
}

/* Running per-lane maxima of one row: the lane's best value and its id. */
typedef struct lane_best {
    v16f val;
    v16i id;
} lane_best;

/* best = first maximum: a later id replaces only a strictly greater value, so
 * each lane keeps its first maximum (ids grow along a lane); NaN never wins. */
CPU_INLINE void lane_update(lane_best *best, v16f val, v16i id) {
    v16i gt = val > best->val;
    best->val = (v16f)(((v16i)val & gt) | ((v16i)best->val & ~gt));
    best->id = (id & gt) | (best->id & ~gt);
}

/* Logits of the rows xp [nblk * ROWS, H] (zero-padded) for panels [p0, p1),
 * panel by panel so a panel stays in L1 while every row block uses it:
 * stored for rows < `rows` and v < V when out != NULL, folded into
 * best[row * 2 + half] when best != NULL. */
CPU_INLINE int head_panels_body(const cpu_head *hd, const float *xp, int64_t nblk, int64_t rows,
                                float *out, lane_best *best, int64_t p0, int64_t p1) {
    int64_t H = hd->H, V = hd->V;
    v16i lane;
    for (int j = 0; j < 16; j++) lane[j] = j;
    for (int64_t p = p0; p < p1; p++) {
        const float *w = hd->w + p * H * PANEL;
        v16f b0, b1;
        memcpy(&b0, hd->bias + p * PANEL, sizeof b0);
        memcpy(&b1, hd->bias + p * PANEL + 16, sizeof b1);
        int64_t v0 = p * PANEL, n = V - v0 < PANEL ? V - v0 : PANEL;
        v16i id0 = lane + (int32_t)v0, id1 = id0 + 16;
        for (int64_t blk = 0; blk < nblk; blk++) {
            const float *x = xp + blk * ROWS * H;
            v16f acc[ROWS][2];
            for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = (v16f){0};
            for (int64_t h = 0; h < H; h++) {
                v16f w0, w1;
                memcpy(&w0, w + h * PANEL, sizeof w0);
                memcpy(&w1, w + h * PANEL + 16, sizeof w1);
                for (int r = 0; r < ROWS; r++) {
                    float xr = x[r * H + h];
                    acc[r][0] += xr * w0;
                    acc[r][1] += xr * w1;
                }
            }
            for (int r = 0; r < ROWS; r++) {
                int64_t row = blk * ROWS + r;
                v16f l0 = acc[r][0] + b0, l1 = acc[r][1] + b1;
                if (out && row < rows) {
                    float *o = out + row * V + v0;
                    if (n == PANEL) {
                        memcpy(o, &l0, sizeof l0);
                        memcpy(o + 16, &l1, sizeof l1);
                    } else {
                        float tmp[PANEL];
                        memcpy(tmp, &l0, sizeof l0);
                        memcpy(tmp + 16, &l1, sizeof l1);
                        memcpy(o, tmp, (size_t)n * sizeof(float));
                    }
                }
                if (best) {
                    lane_update(&best[row * 2], l0, id0);
                    lane_update(&best[row * 2 + 1], l1, id1);
                }
            }
        }
    }
    return 0;
}
/* AVX2 has 16 registers: head_panels_body's 4 rows x 32 entries would need
 * 16 accumulators alone, and gcc's lowering of its 64-byte vectors spilled
 * them all (1.5 GFLOP/s). Here each panel runs as two halves of 16 entries:
 * 4 rows x 2 registers of accumulators, 2 of weights, 1 broadcast. Each
 * logit is the same fma chain over h plus the bias as the AVX-512 kernel's,
 * so logits and ids are bitwise the same. */
__attribute__((target("avx2,fma"))) static void head_lanes_avx2(lane_best *best, __m256 l,
                                                                __m256i id, int half8) {
    float *bv = (float *)&best->val + 8 * half8;
    int32_t *bi = (int32_t *)&best->id + 8 * half8;
    __m256 v = _mm256_loadu_ps(bv);
    __m256i i = _mm256_loadu_si256((const __m256i *)bi);
    __m256 gt = _mm256_cmp_ps(l, v, _CMP_GT_OQ); /* NaN never wins */
    _mm256_storeu_ps(bv, _mm256_blendv_ps(v, l, gt));
    _mm256_storeu_si256((__m256i *)bi, _mm256_castps_si256(_mm256_blendv_ps(
                                           _mm256_castsi256_ps(i), _mm256_castsi256_ps(id), gt)));
}

/* The epilogue of 8 logits of one row, panel entries j..j+7 (j = 0, 8, 16
 * or 24) of the panel at v0 with n valid entries: the bias added, those
 * within n written to o + j (o: the row's panel in out, or NULL), and folded
 * into the row's lane maxima best[0..1]. Every AVX2 kernel ends this way. */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
head_out8_avx2(const cpu_head *hd, __m256 acc, int64_t v0, int j, int64_t n, float *o,
               lane_best *best) {
    __m256 l = _mm256_add_ps(acc, _mm256_loadu_ps(hd->bias + v0 + j));
    int64_t m = n - j < 8 ? n - j : 8;
    if (o && m == 8) _mm256_storeu_ps(o + j, l);
    else if (o && m > 0) {
        float t[8];
        _mm256_storeu_ps(t, l);
        memcpy(o + j, t, (size_t)m * sizeof(float));
    }
    if (best) {
        __m256i id = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                      _mm256_set1_epi32((int32_t)(v0 + j)));
        head_lanes_avx2(&best[j / 16], l, id, (j / 8) & 1);
    }
}

/* One or two rows (decoding at batch 1 or 2): each panel in one pass, R x 32
 * entries of accumulators (8 registers at most) and 4 of weights, not
 * padded to the 4 rows of the half-panel kernels below: on a Zen 4, whose
 * reads are fast against its FMAs, a row through the whole-half passes
 * took 1.7x the blocks' time per byte at batch 1. The same fma chain per
 * logit: logits and ids bitwise the same. */
#define HEAD_FEW_FMA(r)                                                                            \
    xr = _mm256_broadcast_ss(x + (r)*H + h);                                                       \
    a##r##0 = _mm256_fmadd_ps(xr, w0, a##r##0);                                                    \
    a##r##1 = _mm256_fmadd_ps(xr, w1, a##r##1);                                                    \
    a##r##2 = _mm256_fmadd_ps(xr, w2, a##r##2);                                                    \
    a##r##3 = _mm256_fmadd_ps(xr, w3, a##r##3);
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
head_few_avx2(int R, const cpu_head *hd, const float *x, float *out, lane_best *best, int64_t p0,
              int64_t p1) {
    int64_t H = hd->H, V = hd->V;
    for (int64_t p = p0; p < p1; p++) {
        const float *w = hd->w + p * H * PANEL;
        int64_t v0 = p * PANEL, n = V - v0 < PANEL ? V - v0 : PANEL;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
               a12 = a00, a13 = a00, xr;
        for (int64_t h = 0; h < H; h++) {
            _mm_prefetch((const char *)(w + h * PANEL) + CPU_PREFETCH_BYTES, _MM_HINT_T0);
            _mm_prefetch((const char *)(w + h * PANEL) + CPU_PREFETCH_BYTES + 64, _MM_HINT_T0);
            __m256 w0 = _mm256_loadu_ps(w + h * PANEL), w1 = _mm256_loadu_ps(w + h * PANEL + 8),
                   w2 = _mm256_loadu_ps(w + h * PANEL + 16),
                   w3 = _mm256_loadu_ps(w + h * PANEL + 24);
            HEAD_FEW_FMA(0)
            if (R > 1) {
                HEAD_FEW_FMA(1)
            }
        }
        __m256 acc[2][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}};
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 4; q++)
                head_out8_avx2(hd, acc[r][q], v0, 8 * q, n, out ? out + r * V + v0 : NULL,
                               best ? best + r * 2 : NULL);
    }
}
#undef HEAD_FEW_FMA

/* Step h of a 4-row x 16-entry block (the half-panel kernels below): rows
 * x, x + H, x + 2H, x + 3H against weights w0, w1, into a00..a31. */
#define HEAD_4X16_FMA                                                                              \
    __m256 xr = _mm256_broadcast_ss(x + h);                                                        \
    a00 = _mm256_fmadd_ps(xr, w0, a00);                                                            \
    a01 = _mm256_fmadd_ps(xr, w1, a01);                                                            \
    xr = _mm256_broadcast_ss(x + H + h);                                                           \
    a10 = _mm256_fmadd_ps(xr, w0, a10);                                                            \
    a11 = _mm256_fmadd_ps(xr, w1, a11);                                                            \
    xr = _mm256_broadcast_ss(x + 2 * H + h);                                                       \
    a20 = _mm256_fmadd_ps(xr, w0, a20);                                                            \
    a21 = _mm256_fmadd_ps(xr, w1, a21);                                                            \
    xr = _mm256_broadcast_ss(x + 3 * H + h);                                                       \
    a30 = _mm256_fmadd_ps(xr, w0, a30);                                                            \
    a31 = _mm256_fmadd_ps(xr, w1, a31);

/* Three or four rows (one register block): each panel's two halves take
 * turns over chunks of HEAD_KC h's (4 KiB), the partial chains kept in a
 * buffer, so a chunk comes from memory once and the second half re-reads it
 * from L1; each half also prefetches its share of the next panel into L2.
 * With whole-panel halves memory idled while the second half ran from L2:
 * AR at batch 4 ran the output layer at 0.54 of the memory rate. The same
 * fma chain per logit: logits and ids bitwise the same. */
#define HEAD_KC 32
__attribute__((target("avx2,fma"))) static void head_block_avx2(const cpu_head *hd, const float *x,
                                                                int64_t rows, float *out,
                                                                lane_best *best, int64_t p0,
                                                                int64_t p1) {
    int64_t H = hd->H, V = hd->V, pbytes = H * PANEL * (int64_t)sizeof(float);
    /* the share of the next panel each half prefetches a k: step / 65536 bytes */
    int64_t step = (pbytes / 2 << 16) / H;
    float acc[2][ROWS][16];
    for (int64_t p = p0; p < p1; p++) {
        const float *w = hd->w + p * H * PANEL;
        const char *next = (const char *)w + (p + 1 < hd->panels ? pbytes : 0);
        int64_t v0 = p * PANEL, n = V - v0 < PANEL ? V - v0 : PANEL;
        for (int64_t k0 = 0; k0 < H; k0 += HEAD_KC) {
            int64_t k1 = H - k0 < HEAD_KC ? H : k0 + HEAD_KC;
            for (int half = 0; half < 2; half++) {
                const float *wh = w + 16 * half;
                const char *ahead = next + half * (pbytes / 2);
                __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00,
                       a21 = a00, a30 = a00, a31 = a00;
                if (k0) {
                    float(*s)[16] = acc[half];
                    a00 = _mm256_loadu_ps(s[0]), a01 = _mm256_loadu_ps(s[0] + 8);
                    a10 = _mm256_loadu_ps(s[1]), a11 = _mm256_loadu_ps(s[1] + 8);
                    a20 = _mm256_loadu_ps(s[2]), a21 = _mm256_loadu_ps(s[2] + 8);
                    a30 = _mm256_loadu_ps(s[3]), a31 = _mm256_loadu_ps(s[3] + 8);
                }
                for (int64_t h = k0; h < k1; h++) {
                    /* one line of row h + 32 each: the chunk after next's */
                    _mm_prefetch((const char *)(w + h * PANEL) + CPU_PREFETCH_BYTES + 64 * half,
                                 _MM_HINT_T0);
                    _mm_prefetch(ahead + (((h * step) >> 16) & ~(int64_t)63), _MM_HINT_T1);
                    __m256 w0 = _mm256_loadu_ps(wh + h * PANEL),
                           w1 = _mm256_loadu_ps(wh + h * PANEL + 8);
                    HEAD_4X16_FMA
                }
                __m256 a[ROWS][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
                for (int r = 0; r < ROWS; r++) {
                    if (k1 < H) {
                        _mm256_storeu_ps(acc[half][r], a[r][0]);
                        _mm256_storeu_ps(acc[half][r] + 8, a[r][1]);
                        continue;
                    }
                    float *o = out && r < rows ? out + r * V + v0 : NULL;
                    lane_best *bt = best ? best + r * 2 : NULL;
                    head_out8_avx2(hd, a[r][0], v0, 16 * half, n, o, bt);
                    head_out8_avx2(hd, a[r][1], v0, 16 * half + 8, n, o, bt);
                }
            }
        }
    }
}
#undef HEAD_KC

/* Five rows and more: block by block over whole half panels, the second
 * half from L2 (from 8 rows the FMAs, not the reads, bound the product). */
__attribute__((target("avx2,fma"))) static int head_panels_avx2(const cpu_head *hd, const float *xp,
                                                                int64_t nblk, int64_t rows,
                                                                float *out, lane_best *best,
                                                                int64_t p0, int64_t p1) {
    int64_t H = hd->H, V = hd->V;
    if (rows <= 2) {
        if (rows == 1) head_few_avx2(1, hd, xp, out, best, p0, p1);
        else head_few_avx2(2, hd, xp, out, best, p0, p1);
        return 0;
    }
    if (nblk == 1) {
        head_block_avx2(hd, xp, rows, out, best, p0, p1);
        return 0;
    }
    for (int64_t p = p0; p < p1; p++)
        for (int half = 0; half < 2; half++) {
            const float *w = hd->w + p * H * PANEL + 16 * half;
            int64_t v0 = p * PANEL, n = V - v0 < PANEL ? V - v0 : PANEL;
            for (int64_t blk = 0; blk < nblk; blk++) {
                const float *x = xp + blk * ROWS * H;
                __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00,
                       a21 = a00, a30 = a00, a31 = a00;
                for (int64_t h = 0; h < H; h++) {
                    if (!half) { /* both lines of the row: the second half reads them from L2 */
                        _mm_prefetch((const char *)(w + h * PANEL) + CPU_PREFETCH_BYTES,
                                     _MM_HINT_T0);
                        _mm_prefetch((const char *)(w + h * PANEL) + CPU_PREFETCH_BYTES + 64,
                                     _MM_HINT_T0);
                    }
                    __m256 w0 = _mm256_loadu_ps(w + h * PANEL),
                           w1 = _mm256_loadu_ps(w + h * PANEL + 8);
                    HEAD_4X16_FMA
                }
                __m256 acc[ROWS][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
                for (int r = 0; r < ROWS; r++) {
                    int64_t row = blk * ROWS + r;
                    float *o = out && row < rows ? out + row * V + v0 : NULL;
                    lane_best *bt = best ? best + row * 2 : NULL;
                    head_out8_avx2(hd, acc[r][0], v0, 16 * half, n, o, bt);
                    head_out8_avx2(hd, acc[r][1], v0, 16 * half + 8, n, o, bt);
                }
            }
        }
    return 0;
}
#undef HEAD_4X16_FMA

/* AVX-512: 4 rows x one whole panel (2 registers) of accumulators. The fma
 * is written out, as in the AVX2 kernel: a contraction left to gcc happens
 * at -O2 and not at -O1, and both levels must give the same bits. */
__attribute__((target("avx512f,fma"))) static void head_lanes_avx512(lane_best *best, __m512 l,
                                                                     __m512i id) {
    __m512 v = _mm512_loadu_ps(&best->val);
    __mmask16 gt = _mm512_cmp_ps_mask(l, v, _CMP_GT_OQ); /* NaN never wins */
    _mm512_storeu_ps(&best->val, _mm512_mask_mov_ps(v, gt, l));
    _mm512_storeu_si512(&best->id, _mm512_mask_mov_epi32(_mm512_loadu_si512(&best->id), gt, id));
}

__attribute__((target("avx512f,fma"))) static int
head_panels_avx512(const cpu_head *hd, const float *xp, int64_t nblk, int64_t rows, float *out,
                   lane_best *best, int64_t p0, int64_t p1) {
    int64_t H = hd->H, V = hd->V;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t p = p0; p < p1; p++) {
        const float *w = hd->w + p * H * PANEL;
        int64_t v0 = p * PANEL, n = V - v0 < PANEL ? V - v0 : PANEL;
        __m512 b0 = _mm512_loadu_ps(hd->bias + v0), b1 = _mm512_loadu_ps(hd->bias + v0 + 16);
        __m512i id0 = _mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)v0));
        __m512i id1 = _mm512_add_epi32(id0, _mm512_set1_epi32(16));
        for (int64_t blk = 0; blk < nblk; blk++) {
            const float *x = xp + blk * ROWS * H;
            __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
                   a30 = a00, a31 = a00;
            for (int64_t h = 0; h < H; h++) {
                _mm_prefetch((const char *)(w + h * PANEL) + CPU_PREFETCH_BYTES, _MM_HINT_T0);
                _mm_prefetch((const char *)(w + h * PANEL) + CPU_PREFETCH_BYTES + 64, _MM_HINT_T0);
                __m512 w0 = _mm512_loadu_ps(w + h * PANEL),
                       w1 = _mm512_loadu_ps(w + h * PANEL + 16);
                __m512 xr = _mm512_set1_ps(x[h]);
                a00 = _mm512_fmadd_ps(xr, w0, a00);
                a01 = _mm512_fmadd_ps(xr, w1, a01);
                xr = _mm512_set1_ps(x[H + h]);
                a10 = _mm512_fmadd_ps(xr, w0, a10);
                a11 = _mm512_fmadd_ps(xr, w1, a11);
                xr = _mm512_set1_ps(x[2 * H + h]);
                a20 = _mm512_fmadd_ps(xr, w0, a20);
                a21 = _mm512_fmadd_ps(xr, w1, a21);
                xr = _mm512_set1_ps(x[3 * H + h]);
                a30 = _mm512_fmadd_ps(xr, w0, a30);
                a31 = _mm512_fmadd_ps(xr, w1, a31);
            }
            __m512 acc[ROWS][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
            for (int r = 0; r < ROWS; r++) {
                int64_t row = blk * ROWS + r;
                __m512 l0 = _mm512_add_ps(acc[r][0], b0), l1 = _mm512_add_ps(acc[r][1], b1);
                if (out && row < rows) {
                    float *o = out + row * V + v0;
                    if (n == PANEL) {
                        _mm512_storeu_ps(o, l0);
                        _mm512_storeu_ps(o + 16, l1);
                    } else {
                        float tmp[PANEL];
                        _mm512_storeu_ps(tmp, l0);
                        _mm512_storeu_ps(tmp + 16, l1);
                        memcpy(o, tmp, (size_t)n * sizeof(float));
                    }
                }
                if (best) {
                    head_lanes_avx512(&best[row * 2], l0, id0);
                    head_lanes_avx512(&best[row * 2 + 1], l1, id1);
                }
            }
        }
    }
    return 0;
}

/* CPUs without FMA: the portable body (products rounded separately). */
static int head_panels_base(const cpu_head *hd, const float *xp, int64_t nblk, int64_t rows,
                            float *out, lane_best *best, int64_t p0, int64_t p1) {
    return head_panels_body(hd, xp, nblk, rows, out, best, p0, p1);
}

static int head_panels(const cpu_head *hd, const float *xp, int64_t nblk, int64_t rows, float *out,
                       lane_best *best, int64_t p0, int64_t p1) {
    int lvl = cpu_simd_level();
    return lvl >= CPU_SIMD_AVX512 ? head_panels_avx512(hd, xp, nblk, rows, out, best, p0, p1)
           : lvl == CPU_SIMD_AVX2 ? head_panels_avx2(hd, xp, nblk, rows, out, best, p0, p1)
                                  : head_panels_base(hd, xp, nblk, rows, out, best, p0, p1);
}

#define CHUNK_PANELS 16 /* panels per unit of work (128 KB of W at H = 64) */

/* The exact kernel over every panel: logits and/or ids for rows of xp. */
static void head_exact(kf_backend *b, const cpu_head *hd, const float *xp, int64_t rows,
                       float *logits, int32_t *ids) {
    int64_t H = hd->H, nblk = (rows + ROWS - 1) / ROWS;
    int64_t nchunk = (hd->panels + CHUNK_PANELS - 1) / CHUNK_PANELS;
    float *bval = NULL;
    if (ids) {
        bval = kf_malloc((size_t)rows * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            bval[r] = NAN;
            ids[r] = 0; /* a row with no comparable logit */
        }
    }
    /* Threads split the panels: every logit is computed whole by one thread,
     * and the first maximum does not depend on the order maxima merge in. */
#pragma omp parallel if (hd->V * rows * H >= 64 * KF_CPU_PAR_MIN)
    {
        lane_best *best = NULL;
        if (ids) {
            best = aligned_alloc(64, (size_t)(nblk * ROWS * 2) * sizeof(lane_best));
            KF_CHECK(best, "out of memory in head_fwd");
            for (int64_t i = 0; i < nblk * ROWS * 2; i++) {
                /* -inf with id 0: a lane that never beats it loses to any
                 * greater logit, and when none is greater id 0 is the
                 * first maximum anyway */
                best[i].val = (v16f){0} - INFINITY;
                best[i].id = (v16i){0};
            }
        }
#pragma omp for schedule(static)
        for (int64_t c = 0; c < nchunk; c++) {
            int64_t p0 = c * CHUNK_PANELS;
            int64_t p1 = p0 + CHUNK_PANELS < hd->panels ? p0 + CHUNK_PANELS : hd->panels;
            head_panels(hd, xp, nblk, rows, logits, best, p0, p1);
        }
        if (best) {
#pragma omp critical(kf_head_best)
            for (int64_t r = 0; r < rows; r++)
                for (int j = 0; j < 32; j++)
                    cpu_head_best_merge(&bval[r], &ids[r], best[r * 2 + j / 16].val[j % 16],
                                        best[r * 2 + j / 16].id[j % 16]);
            free(best);
        }
    }
    free(bval);
}

void cpu_head_exact_argmax(kf_backend *b, const cpu_head *hd, const float *xp, int64_t rows,
                           int32_t *ids) {
    head_exact(b, hd, xp, rows, NULL, ids);
}

void cpu_head_fwd(kf_backend *b, float *logits, int32_t *ids, const float *x, const void *head,
                  int64_t rows) {
    const cpu_head *hd = head;
    int64_t H = hd->H, nblk = (rows + ROWS - 1) / ROWS;
    if (rows <= 0) return;
    /* rows padded to whole register blocks with zeros (their results are dropped) */
    float *xp = cpu_scratch(b, CPU_SCRATCH_A, (size_t)(nblk * ROWS * H));
    memcpy(xp, x, (size_t)(rows * H) * sizeof(float));
    memset(xp + rows * H, 0, (size_t)((nblk * ROWS - rows) * H) * sizeof(float));
    if (ids && !logits && hd->screen) cpu_head_screen_argmax(b, hd, xp, rows, ids);
    else head_exact(b, hd, xp, rows, logits, ids);
}
