/* kernels/cuda/cuda_rope.cu — rotary position embedding, rotate-half
 * convention, with the rotation factors computed exactly as
 * kernels/cpu/cpu_rope.c documents (angle in double, cos/sin rounded to float,
 * rotation in fp32). One thread per (row, q|k, head, pair). */
#include "kernels/cuda/cuda_internal.h"

__global__ void k_rope(float *qkv, const int32_t *pos, int64_t rows, int64_t L, int64_t n_head,
                       int64_t D, double base, float dir) {
    int64_t half = D / 2, H = n_head * D;
    int64_t n = rows * 2 * n_head * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = t % half, rest = t / half;
        int64_t h = rest % n_head;
        rest /= n_head;
        int64_t part = rest % 2, row = rest / 2;
        double a = (double)pos[row % L] * pow(base, -(double)(2 * i) / (double)D);
        float c = (float)cos(a), s = dir * (float)sin(a);
        float *x = qkv + row * 3 * H + part * H + h * D;
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

static void rope(kf_backend *b, float *qkv, const int32_t *pos, int64_t B, int64_t L,
                 int64_t n_head, int64_t D, float base, float dir) {
    KF_CHECK(D % 2 == 0, "rope needs an even head_dim, got %lld", (long long)D);
    int64_t n = B * L * n_head * D;
    if (n <= 0) return;
    k_rope<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(qkv, pos, B * L, L, n_head, D, (double)base, dir);
    CUDA_LAUNCHED();
}

void cu_rope_fwd(kf_backend *b, float *qkv, const int32_t *pos, int64_t B, int64_t L,
                 int64_t n_head, int64_t head_dim, float base) {
    rope(b, qkv, pos, B, L, n_head, head_dim, base, 1.0f);
}

void cu_rope_bwd(kf_backend *b, float *dqkv, const int32_t *pos, int64_t B, int64_t L,
                 int64_t n_head, int64_t head_dim, float base) {
    rope(b, dqkv, pos, B, L, n_head, head_dim, base, -1.0f);
}
