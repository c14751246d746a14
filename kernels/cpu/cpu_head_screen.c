/* kernels/cpu/cpu_head_screen.c — the decode-time argmax through an int8 screen.
 *
 * K-Forcing's tokens are argmaxes, so a step needs the largest logit of each
 * row, not all V of them. An int8 product gives every logit within a
 * rigorous bound E: with AVX-512 VNNI vpdpbusd (four times the multiply-adds
 * of fp32 per instruction, a quarter of the bytes of W); with AVX2
 * vpmaddubsw + vpmaddwd, whose 16-bit pair sums cannot saturate because x is
 * quantised to 6 bits + sign there (|qx| <= 63: 2 * 127 * 127 < 2^15):
 *
 *   x = sx*qx + ex, w = sw*qw + ew (per-row and per-entry scales, |qx| <= QX, |qw| <= 127)
 *   x.w - sx*sw*(qx.qw) = (sx*qx).ew + ex.w, so |error| <= max|sx*qx| * |ew|_1 + max|ex| * |w|_1
 *
 * plus a slack of 2^-14 * (max|x| * |w|_1 + |bias|) that covers, ten times
 * over, the float rounding of the screen and of the exact kernel's own sum
 * (at most (H+2) * 2^-24 of the same quantity for H <= 64, and still
 * covered up to H of several thousand). With T the largest lower bound seen
 * (approx - E), an entry whose upper bound (approx + E) is below T cannot be
 * the maximum; the few that reach T are computed by the exact kernel's
 * multiply-add chain, bit for bit, and the first maximum among them is the
 * answer: ids equal the exact kernel's on every input (rows the screen
 * cannot bound, with a non-finite value or too many candidates, go to the
 * exact kernel). KF_CPU_HEAD_SCREEN=0 turns the screen off (for A/B runs).
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_head.h"
#include "kernels/cpu/cpu_internal.h"

#define PANEL CPU_HEAD_PANEL
#define ROWS CPU_HEAD_ROWS
#define CHUNK 16 /* panels per unit of work; candidates are scanned per chunk */
#define CAP 1024 /* candidates a thread keeps per row (compacted when full) */
#define SLACK 0x1p-14

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
#define BW_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))

/* x's int8 range and u8 offset per level: vpdpbusd multiplies u8 x by s8 w
 * in 32 bits; vpmaddubsw sums two such products in 16 bits, so x keeps 6
 * bits + sign there. */
typedef struct screen_level {
    int qx;     /* |qx| <= qx */
    int offset; /* x is stored as qx + offset (u8) */
} screen_level;

static screen_level level_params(int kind) {
    return kind == CPU_SCREEN_VNNI ? (screen_level){127, 128} : (screen_level){63, 64};
}

/* x rounded up to a float (bounds must not shrink when stored). */
static float round_up(double x) {
    float f = (float)x;
    return (double)f < x ? nextafterf(f, INFINITY) : f;
}

static int clamp127(long q) { return q > 127 ? 127 : q < -127 ? -127 : (int)q; }

void cpu_head_screen_pack(cpu_head *hd) {
    if (!cpu_head_screen_on() || cpu_simd_level() < CPU_SIMD_AVX2) return;
    int64_t H = hd->H, np = hd->panels, n = np * PANEL, h4 = (H + 3) / 4 * 4, g = h4 / 4;
    for (int64_t i = 0; i < np * H * PANEL; i++)
        if (!isfinite(hd->w[i])) return;
    for (int64_t v = 0; v < hd->V; v++)
        if (!isfinite(hd->bias[v])) return;
    cpu_head_screen *s = kf_calloc(1, sizeof *s);
    int lvl = cpu_simd_level();
    s->kind = lvl >= CPU_SIMD_VNNI     ? CPU_SCREEN_VNNI
              : lvl >= CPU_SIMD_AVX512 ? CPU_SCREEN_AVX512BW
                                       : CPU_SCREEN_AVX2;
    s->h4 = h4;
    s->qw = kf_alloc_stream((size_t)(np * h4 * PANEL), 0);
    s->corr = aligned_alloc(64, (size_t)n * sizeof(int32_t));
    float **vecs[] = {&s->sw, &s->ew1, &s->w1, &s->bias, &s->babs};
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++)
        *vecs[i] = aligned_alloc(64, (size_t)n * sizeof(float));
    KF_CHECK(s->qw && s->corr && s->sw && s->ew1 && s->w1 && s->bias && s->babs,
             "out of memory packing the int8 screen of a %lld x %lld output layer",
             (long long)hd->V, (long long)H);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < np; p++)
        for (int64_t j = 0; j < PANEL; j++) {
            int64_t v = p * PANEL + j;
            const float *w = hd->w + p * H * PANEL + j; /* w[h * PANEL] */
            double amax = 0.0, e1 = 0.0, a1 = 0.0;
            for (int64_t h = 0; h < H; h++) amax = fmax(amax, fabs(w[h * PANEL]));
            float sw = amax > 0.0 ? (float)(amax / 127.0) : 1.0f;
            int32_t colsum = 0;
            for (int64_t h = 0; h < h4; h++) {
                double wv = h < H ? w[h * PANEL] : 0.0;
                int q = clamp127(lrint(wv / sw));
                s->qw[((p * g + h / 4) * PANEL + j) * 4 + h % 4] = (int8_t)q;
                colsum += q;
                e1 += fabs(wv - (double)sw * q); /* exact: sw*q has 31 bits */
                a1 += fabs(wv);
            }
            s->corr[v] = level_params(s->kind).offset * colsum;
            s->sw[v] = sw;
            s->ew1[v] = round_up(e1 * (1.0 + 1e-12));
            s->w1[v] = round_up(a1 * (1.0 + 1e-12));
            s->bias[v] = v < hd->V ? hd->bias[v] : -INFINITY;
            s->babs[v] = v < hd->V ? round_up(SLACK * fabs(hd->bias[v])) : 0.0f;
        }
    hd->screen = s;
}

int kernels_cpu_head_screened(const void *head) { return ((const cpu_head *)head)->screen != NULL; }

void cpu_head_screen_free(cpu_head *hd) {
    cpu_head_screen *s = hd->screen;
    if (!s) return;
    free(s->qw);
    free(s->corr);
    free(s->sw);
    free(s->ew1);
    free(s->w1);
    free(s->bias);
    free(s->babs);
    free(s);
    hd->screen = NULL;
}

/* Per-row screen constants: sx, A = max|sx*qx|, C = max|ex| + SLACK*max|x|
 * (rounded up); ok = 0 for a row the screen cannot bound. */
typedef struct row_q {
    float sx, A, C;
    int ok;
} row_q;

/* Quantises row x (H floats) into g quads of u8 (qx + offset) in xq. */
static row_q quantise_row(int32_t *xq, const float *x, int64_t H, int64_t g, screen_level lv) {
    row_q rq = {1.0f, 0.0f, 0.0f, 1};
    float xmax = 0.0f;
    for (int64_t h = 0; h < H; h++) xmax = fmaxf(xmax, fabsf(x[h]));
    if (!isfinite(xmax)) {
        rq.ok = 0;
        memset(xq, 0, (size_t)g * sizeof(int32_t));
        return rq;
    }
    if (xmax > 0.0f) rq.sx = xmax / (float)lv.qx;
    double qmax = 0.0, emax = 0.0;
    uint8_t *u = (uint8_t *)xq;
    for (int64_t h = 0; h < 4 * g; h++) {
        double xv = h < H ? x[h] : 0.0;
        long q = lrint(xv / rq.sx);
        q = q > lv.qx ? lv.qx : q < -lv.qx ? -lv.qx : q;
        u[h] = (uint8_t)(q + lv.offset);
        qmax = fmax(qmax, fabs((double)rq.sx * q));
        emax = fmax(emax, fabs(xv - (double)rq.sx * q));
    }
    rq.A = round_up(qmax);
    rq.C = round_up(emax + SLACK * xmax);
    return rq;
}

/* The same row of the next panel (g groups of 4 a panel), into the caches:
 * the panels are one stream, read once at a few rows, and the hardware
 * prefetcher alone left the screen at about 60% of the read bandwidth. */
static inline __attribute__((always_inline)) void screen_ahead(const int8_t *at, int64_t g) {
    _mm_prefetch((const char *)at + g * PANEL * 4, _MM_HINT_T0);
    _mm_prefetch((const char *)at + g * PANEL * 4 + 64, _MM_HINT_T0);
}

/* Upper bounds of panels [p0, p1) for every row (up [rows][CHUNK*PANEL]) and
 * the running per-lane maxima of the lower bounds (lo [rows][16]), with
 * AVX-512: whole panels, 4 rows x 2 accumulators. One source for two
 * kernels that differ in the int8 dot step DOT(acc, x, w): VNNI's vpdpbusd,
 * or AVX-512BW's vpmaddubsw + vpmaddwd (16-bit pair sums, |qx| <= 63). */
#define SCREEN_PANELS_512(NAME, TARGET, DOT)                                                       \
    TARGET static void NAME(const cpu_head *hd, const int32_t *xq, const row_q *rq, int64_t nblk,  \
                            int64_t p0, int64_t p1, float *up, float *lo) {                        \
        const cpu_head_screen *s = hd->screen;                                                     \
        int64_t g = s->h4 / 4;                                                                     \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const int8_t *q = s->qw + p * g * PANEL * 4;                                           \
            int64_t o = p * PANEL;                                                                 \
            __m512i corr[2];                                                                       \
            __m512 sw[2], bias[2], ew1[2], w1[2], babs[2];                                         \
            for (int j = 0; j < 2; j++) {                                                          \
                corr[j] = _mm512_loadu_si512(s->corr + o + 16 * j);                                \
                sw[j] = _mm512_loadu_ps(s->sw + o + 16 * j);                                       \
                bias[j] = _mm512_loadu_ps(s->bias + o + 16 * j);                                   \
                ew1[j] = _mm512_loadu_ps(s->ew1 + o + 16 * j);                                     \
                w1[j] = _mm512_loadu_ps(s->w1 + o + 16 * j);                                       \
                babs[j] = _mm512_loadu_ps(s->babs + o + 16 * j);                                   \
            }                                                                                      \
            for (int64_t blk = 0; blk < nblk; blk++) {                                             \
                const int32_t *xb = xq + blk * ROWS * g;                                           \
                __m512i acc[ROWS][2];                                                              \
                for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();     \
                for (int64_t k = 0; k < g; k++) {                                                  \
                    screen_ahead(q + k * PANEL * 4, g);                                            \
                    __m512i w0 = _mm512_loadu_si512(q + k * PANEL * 4);                            \
                    __m512i w1v = _mm512_loadu_si512(q + k * PANEL * 4 + 64);                      \
                    for (int r = 0; r < ROWS; r++) {                                               \
                        __m512i xv = _mm512_set1_epi32(xb[r * g + k]);                             \
                        acc[r][0] = DOT(acc[r][0], xv, w0);                                        \
                        acc[r][1] = DOT(acc[r][1], xv, w1v);                                       \
                    }                                                                              \
                }                                                                                  \
                for (int r = 0; r < ROWS; r++) {                                                   \
                    int64_t row = blk * ROWS + r;                                                  \
                    __m512 sx = _mm512_set1_ps(rq[row].sx), A = _mm512_set1_ps(rq[row].A);         \
                    __m512 C = _mm512_set1_ps(rq[row].C);                                          \
                    for (int j = 0; j < 2; j++) {                                                  \
                        __m512 d = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][j], corr[j]));       \
                        __m512 approx = _mm512_fmadd_ps(d, _mm512_mul_ps(sx, sw[j]), bias[j]);     \
                        __m512 e = _mm512_fmadd_ps(A, ew1[j], _mm512_fmadd_ps(C, w1[j], babs[j])); \
                        _mm512_storeu_ps(lo + row * 16,                                            \
                                         _mm512_max_ps(_mm512_loadu_ps(lo + row * 16),             \
                                                       _mm512_sub_ps(approx, e)));                 \
                        _mm512_storeu_ps(up + row * CHUNK * PANEL + (p - p0) * PANEL + 16 * j,     \
                                         _mm512_add_ps(approx, e));                                \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

#define DOT_VNNI(acc, x, w) _mm512_dpbusd_epi32(acc, x, w)
#define DOT_BW(acc, x, w)                                                                          \
    _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(x, w), _mm512_set1_epi16(1)))
SCREEN_PANELS_512(screen_panels_vnni, VNNI_TARGET, DOT_VNNI)
SCREEN_PANELS_512(screen_panels_avx512bw, BW_TARGET, DOT_BW)

/* The same with AVX2, half a panel (16 entries) at a time: 4 rows x 2
 * accumulators. vpmaddubsw gives u8*s8 pair sums in 16 bits (no saturation:
 * |qx| <= 63), vpmaddwd against ones adds the pairs into 32 bits. */
AVX2_TARGET static void screen_panels_avx2(const cpu_head *hd, const int32_t *xq, const row_q *rq,
                                           int64_t nblk, int64_t p0, int64_t p1, float *up,
                                           float *lo) {
    const cpu_head_screen *s = hd->screen;
    int64_t g = s->h4 / 4;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t p = p0; p < p1; p++)
        for (int half = 0; half < 2; half++) {
            const int8_t *q = s->qw + p * g * PANEL * 4 + half * 64;
            int64_t o = p * PANEL + 16 * half;
            for (int64_t blk = 0; blk < nblk; blk++) {
                const int32_t *xb = xq + blk * ROWS * g;
                __m256i acc[ROWS][2];
                for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
                for (int64_t k = 0; k < g; k++) {
                    screen_ahead(q + k * PANEL * 4, g);
                    __m256i w0 = _mm256_loadu_si256((const __m256i *)(q + k * PANEL * 4));
                    __m256i w1 = _mm256_loadu_si256((const __m256i *)(q + k * PANEL * 4 + 32));
                    for (int r = 0; r < ROWS; r++) {
                        __m256i xv = _mm256_set1_epi32(xb[r * g + k]);
                        acc[r][0] = _mm256_add_epi32(
                            acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(xv, w0), ones));
                        acc[r][1] = _mm256_add_epi32(
                            acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(xv, w1), ones));
                    }
                }
                for (int r = 0; r < ROWS; r++) {
                    int64_t row = blk * ROWS + r;
                    __m256 sx = _mm256_set1_ps(rq[row].sx), A = _mm256_set1_ps(rq[row].A);
                    __m256 C = _mm256_set1_ps(rq[row].C);
                    for (int j = 0; j < 2; j++) {
                        int64_t e8 = o + 8 * j;
                        __m256i corr = _mm256_loadu_si256((const __m256i *)(s->corr + e8));
                        __m256 d = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][j], corr));
                        __m256 approx =
                            _mm256_fmadd_ps(d, _mm256_mul_ps(sx, _mm256_loadu_ps(s->sw + e8)),
                                            _mm256_loadu_ps(s->bias + e8));
                        __m256 e = _mm256_fmadd_ps(A, _mm256_loadu_ps(s->ew1 + e8),
                                                   _mm256_fmadd_ps(C, _mm256_loadu_ps(s->w1 + e8),
                                                                   _mm256_loadu_ps(s->babs + e8)));
                        float *l = lo + row * 16 + 8 * j;
                        _mm256_storeu_ps(
                            l, _mm256_max_ps(_mm256_loadu_ps(l), _mm256_sub_ps(approx, e)));
                        _mm256_storeu_ps(up + row * CHUNK * PANEL + (p - p0) * PANEL + 16 * half +
                                             8 * j,
                                         _mm256_add_ps(approx, e));
                    }
                }
            }
        }
}

static void screen_panels(const cpu_head *hd, const int32_t *xq, const row_q *rq, int64_t nblk,
                          int64_t p0, int64_t p1, float *up, float *lo) {
    switch (hd->screen->kind) {
    case CPU_SCREEN_VNNI: screen_panels_vnni(hd, xq, rq, nblk, p0, p1, up, lo); break;
    case CPU_SCREEN_AVX512BW: screen_panels_avx512bw(hd, xq, rq, nblk, p0, p1, up, lo); break;
    default: screen_panels_avx2(hd, xq, rq, nblk, p0, p1, up, lo);
    }
}

/* The exact kernel's logit v of row x: the same multiply-add chain, bit for bit. */
__attribute__((target("fma"))) static float exact_logit(const cpu_head *hd, const float *x,
                                                        int64_t v) {
    const float *w = hd->w + (v / PANEL) * hd->H * PANEL + v % PANEL;
    float acc = 0.0f;
    for (int64_t h = 0; h < hd->H; h++) acc = fmaf(x[h], w[h * PANEL], acc);
    return acc + hd->bias[v];
}

/* One thread's state for every row. */
typedef struct screen_ws {
    float *up;     /* [rows][CHUNK*PANEL] upper bounds of the current chunk */
    float *lo;     /* [rows][16] per-lane maxima of the lower bounds */
    float *T;      /* [rows] best lower bound */
    int32_t *cv;   /* [rows][CAP] candidate ids */
    float *cu;     /* [rows][CAP] their upper bounds */
    int32_t *n;    /* [rows] candidates kept */
    int32_t *full; /* [rows] 1: more candidates than CAP (exact kernel) */
} screen_ws;

/* Adds entry v (upper bound u) to the row's candidates; returns 1 when they
 * cannot all be kept (the row goes to the exact kernel). */
CPU_INLINE int push_candidate(screen_ws *w, int64_t row, int32_t v, float u, float T) {
    int32_t *cv = w->cv + row * CAP;
    float *cu = w->cu + row * CAP;
    if (w->n[row] == CAP) { /* compact against the bound known now */
        int32_t k = 0;
        for (int32_t c = 0; c < CAP; c++)
            if (cu[c] >= T) {
                cv[k] = cv[c];
                cu[k++] = cu[c];
            }
        w->n[row] = k;
        if (k == CAP) return w->full[row] = 1;
    }
    cv[w->n[row]] = v;
    cu[w->n[row]++] = u;
    return 0;
}

/* Keeps the candidates of the chunk starting at panel p0 whose upper bound
 * reaches T, 16 bounds tested at once (most groups have none). */
__attribute__((target("avx512f"))) static void screen_collect_512(screen_ws *w, int64_t row,
                                                                  int64_t p0, int64_t np) {
    float T = w->T[row] = fmaxf(w->T[row], _mm512_reduce_max_ps(_mm512_loadu_ps(w->lo + row * 16)));
    const float *up = w->up + row * CHUNK * PANEL;
    __m512 t = _mm512_set1_ps(T);
    for (int64_t i = 0; i < np * PANEL; i += 16)
        for (__mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(up + i), t, _CMP_GE_OQ); m;
             m &= m - 1) {
            int l = __builtin_ctz(m);
            if (push_candidate(w, row, (int32_t)(p0 * PANEL + i + l), up[i + l], T)) return;
        }
}

AVX2_TARGET static void screen_collect_avx2(screen_ws *w, int64_t row, int64_t p0, int64_t np) {
    const float *lo = w->lo + row * 16;
    __m256 l8 = _mm256_max_ps(_mm256_loadu_ps(lo), _mm256_loadu_ps(lo + 8));
    float l[8], T = w->T[row];
    _mm256_storeu_ps(l, l8);
    for (int i = 0; i < 8; i++) T = fmaxf(T, l[i]);
    w->T[row] = T;
    const float *up = w->up + row * CHUNK * PANEL;
    __m256 t = _mm256_set1_ps(T);
    for (int64_t i = 0; i < np * PANEL; i += 16) {
        unsigned m =
            (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(up + i), t, _CMP_GE_OQ)) |
            (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(up + i + 8), t, _CMP_GE_OQ))
                << 8;
        for (; m; m &= m - 1) {
            int b = __builtin_ctz(m);
            if (push_candidate(w, row, (int32_t)(p0 * PANEL + i + b), up[i + b], T)) return;
        }
    }
}

void cpu_head_screen_argmax(kf_backend *b, const cpu_head *hd, const float *xp, int64_t rows,
                            int32_t *ids) {
    int64_t H = hd->H, g = hd->screen->h4 / 4, nblk = (rows + ROWS - 1) / ROWS, rp = nblk * ROWS;
    int64_t nchunk = (hd->panels + CHUNK - 1) / CHUNK;
    int nt = omp_get_max_threads();
    /* scratch D: quantised rows and their constants; C: every thread's state
     * (kept between calls: decoding calls this every step) */
    size_t xq_f = (size_t)(rp * g), rq_f = (size_t)rp * sizeof(row_q) / sizeof(float);
    float *sd = cpu_scratch(b, CPU_SCRATCH_D, xq_f + rq_f);
    int32_t *xq = (int32_t *)sd;
    row_q *rq = (row_q *)(sd + xq_f);
    size_t per = (size_t)rp * (CHUNK * PANEL + 16 + 1 + 2 * CAP + 2) + 16;
    float *sc = cpu_scratch(b, CPU_SCRATCH_C, per * (size_t)nt);
    screen_level lv = level_params(hd->screen->kind);
    for (int64_t r = 0; r < rp; r++) rq[r] = quantise_row(xq + r * g, xp + r * H, H, g, lv);
    screen_ws *ws = kf_malloc((size_t)nt * sizeof *ws);
    int nused = 1;
#pragma omp parallel if (hd->V * rows * H >= 64 * KF_CPU_PAR_MIN)
    {
        int t = omp_get_thread_num();
#pragma omp single
        nused = omp_get_num_threads();
        screen_ws *w = &ws[t];
        float *base = sc + per * (size_t)t;
        base += (16 - ((uintptr_t)base / sizeof(float)) % 16) % 16; /* 64-byte aligned */
        w->lo = base;
        w->up = base + rp * 16;
        w->T = w->up + rp * CHUNK * PANEL;
        w->cu = w->T + rp;
        w->cv = (int32_t *)(w->cu + rp * CAP);
        w->n = w->cv + rp * CAP;
        w->full = w->n + rp;
        for (int64_t r = 0; r < rp; r++) {
            for (int l = 0; l < 16; l++) w->lo[r * 16 + l] = -INFINITY;
            w->T[r] = -INFINITY;
            w->n[r] = w->full[r] = 0;
        }
#pragma omp for schedule(static)
        for (int64_t c = 0; c < nchunk; c++) {
            int64_t p0 = c * CHUNK, p1 = p0 + CHUNK < hd->panels ? p0 + CHUNK : hd->panels;
            screen_panels(hd, xq, rq, nblk, p0, p1, w->up, w->lo);
            for (int64_t r = 0; r < rows; r++)
                if (rq[r].ok && !w->full[r]) {
                    if (hd->screen->kind != CPU_SCREEN_AVX2) screen_collect_512(w, r, p0, p1 - p0);
                    else screen_collect_avx2(w, r, p0, p1 - p0);
                }
        }
    }
    /* merge: the best lower bound over threads, then the exact logits of the
     * candidates that reach it (the first maximum, as the exact kernel) */
    int64_t nexact = 0;
    int32_t *exact_rows = kf_malloc((size_t)rows * sizeof(int32_t));
    for (int64_t r = 0; r < rows; r++) {
        float T = -INFINITY;
        int full = !rq[r].ok;
        for (int t = 0; t < nused; t++) {
            T = fmaxf(T, ws[t].T[r]);
            full |= ws[t].full[r];
        }
        float best = NAN;
        int32_t id = 0;
        for (int t = 0; t < nused && !full; t++)
            for (int32_t c = 0; c < ws[t].n[r]; c++) {
                if (ws[t].cu[r * CAP + c] < T) continue;
                int32_t v = ws[t].cv[r * CAP + c];
                cpu_head_best_merge(&best, &id, exact_logit(hd, xp + r * H, v), v);
            }
        ids[r] = id;
        if (full) exact_rows[nexact++] = (int32_t)r;
    }
    free(ws);
    if (nexact) { /* rows the screen could not bound */
        int64_t eb = (nexact + ROWS - 1) / ROWS;
        float *xe = kf_calloc((size_t)(eb * ROWS * H), sizeof(float));
        int32_t *ie = kf_malloc((size_t)nexact * sizeof(int32_t));
        for (int64_t i = 0; i < nexact; i++)
            memcpy(xe + i * H, xp + exact_rows[i] * H, (size_t)H * sizeof(float));
        cpu_head_exact_argmax(b, hd, xe, nexact, ie);
        for (int64_t i = 0; i < nexact; i++) ids[exact_rows[i]] = ie[i];
        free(xe);
        free(ie);
    }
    free(exact_rows);
}
