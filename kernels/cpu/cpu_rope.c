/* kernels/cpu/cpu_rope.c — rotary position embedding, rotate-half convention.
 *
 * For head dim D and i < D/2: inv_freq_i = base^(-2i/D); the angle
 * pos * inv_freq_i is computed in double and its cos/sin rounded to float,
 * so every backend that does the same gets identical rotation factors:
 *   a = (double)pos * pow((double)base, -(double)(2*i) / (double)D)
 *   c = (float)cos(a), s = (float)sin(a)
 *   x_i' = x_i*c - x_{i+D/2}*s,   x_{i+D/2}' = x_{i+D/2}*c + x_i*s   (fp32)
 * Applied to the q and k columns of qkv; v is untouched. The backward applies
 * the transpose (inverse) rotation to dq and dk.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

/* The cos/sin table [pos][D/2][2] covering the rows' positions: the
 * backend's (cpu_impl.rope_cs), extended to the largest position when a
 * call needs more (an AR step recomputed it for every call: pow and sincos
 * took 4% of a tiny model's training step) and rebuilt for another D or
 * base. Each entry is the formula above, so the factors are the same bits
 * whichever call computed them. */
static const float *rope_table(kf_backend *b, const int32_t *pos, int64_t L, int64_t D,
                               float base) {
    cpu_impl *im = b->impl;
    int64_t half = D / 2, need = 0;
    for (int64_t l = 0; l < L; l++) {
        KF_CHECK(pos[l] >= 0 && pos[l] < (1 << 24), "rope: position %d outside [0, 2^24)",
                 (int)pos[l]);
        if (pos[l] + 1 > need) need = pos[l] + 1;
    }
    if (im->rope_D != D || im->rope_base != base) im->rope_npos = 0;
    if (need > im->rope_npos) {
        /* doubling, by at most 4096 positions past the need at a time */
        int64_t from = im->rope_npos, n = need > 2 * from ? need : 2 * from;
        if (n > need + 4096) n = need + 4096;
        float *t = kf_malloc((size_t)(2 * n * half) * sizeof(float));
        if (from) memcpy(t, im->rope_cs, (size_t)(2 * from * half) * sizeof(float));
        free(im->rope_cs);
#pragma omp parallel for schedule(static) if ((n - from) * half >= KF_CPU_PAR_MIN / 16)
        for (int64_t p = from; p < n; p++)
            for (int64_t i = 0; i < half; i++) {
                double a = (double)p * pow((double)base, -(double)(2 * i) / (double)D);
                t[(p * half + i) * 2] = (float)cos(a);
                t[(p * half + i) * 2 + 1] = (float)sin(a);
            }
        im->rope_cs = t, im->rope_npos = n, im->rope_D = D, im->rope_base = base;
    }
    return im->rope_cs;
}

/* dir = +1 forward rotation, -1 inverse. */
static void rope_apply(kf_backend *b, float *qkv, const int32_t *pos, int64_t B, int64_t L,
                       int64_t n_head, int64_t D, float base, float dir) {
    KF_CHECK(D % 2 == 0, "rope needs an even head_dim, got %lld", (long long)D);
    int64_t half = D / 2, H = n_head * D;
    const float *t = rope_table(b, pos, L, D, base);
#pragma omp parallel for schedule(static) if (B * L * H >= KF_CPU_PAR_MIN)
    for (int64_t row = 0; row < B * L; row++) {
        const float *tr = t + pos[row % L] * half * 2;
        for (int64_t part = 0; part < 2; part++) /* q, then k */
            for (int64_t h = 0; h < n_head; h++) {
                float *x = qkv + row * 3 * H + part * H + h * D;
                for (int64_t i = 0; i < half; i++) {
                    float c = tr[2 * i], s = dir * tr[2 * i + 1];
                    float x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * c - x2 * s;
                    x[i + half] = x2 * c + x1 * s;
                }
            }
    }
}

/* y16 (NULL: none): the result as a 16-bit copy; with qkv NULL, the input
 * as well (rotated through floats: the copy's values are exact in fp32). */
static void rope(kf_backend *b, float *qkv, const int32_t *pos, int64_t B, int64_t L,
                 int64_t n_head, int64_t D, float base, float dir, void *y16) {
    KF_CHECK(!y16 || b->precision != KF_PREC_FP32, "rope: a 16-bit copy in fp32 mode");
    KF_CHECK(qkv || y16, "rope: neither qkv nor its 16-bit copy");
    int64_t n = B * L * 3 * n_head * D;
    if (!qkv) {
        qkv = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)n);
        cpu_from16(qkv, y16, n, b->precision);
    }
    rope_apply(b, qkv, pos, B, L, n_head, D, base, dir);
    if (y16) cpu_to16(y16, qkv, n, b->precision);
}

void cpu_rope_fwd(kf_backend *b, float *qkv, const int32_t *pos, int64_t B, int64_t L,
                  int64_t n_head, int64_t head_dim, float base, void *qkv16) {
    rope(b, qkv, pos, B, L, n_head, head_dim, base, 1.0f, qkv16);
}

void cpu_rope_bwd(kf_backend *b, float *dqkv, const int32_t *pos, int64_t B, int64_t L,
                  int64_t n_head, int64_t head_dim, float base, void *dqkv16) {
    rope(b, dqkv, pos, B, L, n_head, head_dim, base, -1.0f, dqkv16);
}
