/* kernels/cuda/cuda_rope.cu — rotary position embedding, rotate-half
 * convention, with the rotation factors computed exactly as
 * kernels/cpu/cpu_rope.c documents (angle in double, cos/sin rounded to float,
 * rotation in fp32).
 *
 * The factors come from a table of (cos, sin) per position p < rope_cap and
 * pair i, made once per (head_dim, base) by the same double-precision
 * formula (so the bits are those of computing it per element); a position
 * past the table (decoding a long context) is computed in place. One thread
 * per (row, q|k, head, pair), and with the result's 16-bit copy (kernels.h)
 * beside the fp32 qkv per (row, v, head, pair) as well, which copies v (a
 * copy rotated in place keeps its v). */
#include "kernels/cuda/cuda_internal.h"

/* Positions the table covers at least (more when a call has more rows). */
#define ROPE_MIN_CAP 4096

__device__ __forceinline__ void rope_factors(int64_t p, int64_t i, int64_t D, double base, float *c,
                                             float *s) {
    double a = (double)p * pow(base, -(double)(2 * i) / (double)D);
    *c = (float)cos(a);
    *s = (float)sin(a);
}

/* tab[(p * half + i) * 2 + {0, 1}] = cos, sin */
__global__ void k_rope_table(float *tab, int64_t cap, int64_t D, double base) {
    int64_t half = D / 2;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < cap * half;
         t += (int64_t)gridDim.x * blockDim.x)
        rope_factors(t / half, t % half, D, base, &tab[2 * t], &tab[2 * t + 1]);
}

/* y16 (NULL: none) gets the result as a 16-bit copy in the format lowp;
 * with qkv NULL y16 is the input too, q and k rotated in place (v as it is). */
__global__ void k_rope(float *qkv, void *y16, int lowp, const int32_t *pos, const float *tab,
                       int64_t cap, int64_t rows, int64_t L, int64_t n_head, int64_t D, double base,
                       float dir) {
    int64_t half = D / 2, H = n_head * D, parts = qkv && y16 ? 3 : 2;
    int64_t n = rows * parts * n_head * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = t % half, rest = t / half;
        int64_t h = rest % n_head;
        rest /= n_head;
        int64_t part = rest % parts, row = rest / parts;
        int64_t o = row * 3 * H + part * H + h * D;
        if (part == 2) { /* v, not rotated */
            cu_store16(y16, o + i, qkv[o + i], lowp);
            cu_store16(y16, o + i + half, qkv[o + i + half], lowp);
            continue;
        }
        int64_t p = pos[row % L];
        float c, s;
        if (p >= 0 && p < cap) {
            c = tab[(p * half + i) * 2];
            s = tab[(p * half + i) * 2 + 1];
        } else {
            rope_factors(p, i, D, base, &c, &s);
        }
        s *= dir;
        float x1 = qkv ? qkv[o + i] : cu_load16(y16, o + i, lowp);
        float x2 = qkv ? qkv[o + i + half] : cu_load16(y16, o + i + half, lowp);
        float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
        if (qkv) {
            qkv[o + i] = y1;
            qkv[o + i + half] = y2;
        }
        if (y16) {
            cu_store16(y16, o + i, y1, lowp);
            cu_store16(y16, o + i + half, y2, lowp);
        }
    }
}

/* The backend's table for (D, base) with at least `rows` positions. */
static const float *rope_table(kf_backend *b, int64_t rows, int64_t D, float base) {
    cuda_impl *im = cu_impl(b);
    if (im->rope_tab && im->rope_D == D && im->rope_base == base && im->rope_cap >= rows)
        return im->rope_tab;
    int64_t cap = rows > ROPE_MIN_CAP ? rows : ROPE_MIN_CAP;
    if (im->rope_tab) b->free(b, im->rope_tab); /* queued launches may still read it */
    CUDA_OK(cudaMalloc(&im->rope_tab, (size_t)(cap * D) * sizeof(float)));
    k_rope_table<<<cu_blocks(cap * D / 2), 256, 0, im->stream>>>(im->rope_tab, cap, D,
                                                                 (double)base);
    CUDA_LAUNCHED();
    im->rope_cap = cap;
    im->rope_D = D;
    im->rope_base = base;
    return im->rope_tab;
}

static void rope(kf_backend *b, float *qkv, const int32_t *pos, int64_t B, int64_t L,
                 int64_t n_head, int64_t D, float base, float dir, void *y16) {
    KF_CHECK(D % 2 == 0, "rope needs an even head_dim, got %lld", (long long)D);
    KF_CHECK(!y16 || b->precision != KF_PREC_FP32, "rope: a 16-bit copy in fp32 mode");
    KF_CHECK(qkv || y16, "rope: neither qkv nor its 16-bit copy");
    int64_t n = B * L * n_head * D * (qkv && y16 ? 3 : 2) / 2;
    if (n <= 0) return;
    const float *tab = rope_table(b, L, D, base);
    k_rope<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(qkv, y16, b->precision, pos, tab,
                                                   cu_impl(b)->rope_cap, B * L, L, n_head, D,
                                                   (double)base, dir);
    CUDA_LAUNCHED();
}

void cu_rope_fwd(kf_backend *b, float *qkv, const int32_t *pos, int64_t B, int64_t L,
                 int64_t n_head, int64_t head_dim, float base, void *qkv16) {
    rope(b, qkv, pos, B, L, n_head, head_dim, base, 1.0f, qkv16);
}

void cu_rope_bwd(kf_backend *b, float *dqkv, const int32_t *pos, int64_t B, int64_t L,
                 int64_t n_head, int64_t head_dim, float base, void *dqkv16) {
    rope(b, dqkv, pos, B, L, n_head, head_dim, base, -1.0f, dqkv16);
}
