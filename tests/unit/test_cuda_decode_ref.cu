/* tests/unit/test_cuda_decode_ref.cu — attn_decode against the kernels it
 * replaced (one block per query and key part, which read a
 * sample's cache once per query), kept here alone as the reference: the
 * kernel that reads each cache row once for all Q queries of a part must give
 * bitwise their outputs, across query counts, head sizes, cache lengths that
 * cross the parts' and buckets' boundaries, a device length below its bound,
 * fp32 and bf16 rounding. Built with EMU=1 (make emu-tests), run in the three
 * thread orders by tests/scripts/test_gpu_emu.sh. */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "tests/test.h"

__device__ __forceinline__ float ref_ld(const float *p, int lowp) { return cu_lowp(*p, lowp); }

/* ---- the reference: the replaced kernels, unchanged but for their names ---- */

/* Query i's visible rows T, or -1 when the length exceeds the bound. */
__device__ __forceinline__ int64_t ref_rows(const int32_t *len, int64_t bound, int64_t i) {
    int64_t P = len ? (int64_t)*len : bound;
    return P <= bound ? P + i + 1 : -1;
}
/* The rows of each part of T rows (the last may have fewer). */
__device__ __forceinline__ int64_t ref_part_rows(int64_t T) {
    return (T + KF_DECODE_SPLITS - 1) / KF_DECODE_SPLITS;
}

/* Part s of query (b, h, i): its rows' max score m, sum of exp(score - m) l
 * and the unnormalised sum of exp(score - m) v, at part + ((b*nh + h)*Q +
 * i)*KF_DECODE_SPLITS + s records of D + 2 floats (m, l, o). Warp w scores rows
 * w, w+4, ... (lanes over d, summed in warp_sum's order); thread d sums o[d]
 * in row order. */
__global__ void ref_part(float *part, const float *q, int64_t q_stride, const float *kc,
                         const float *vc, int64_t cap, const int32_t *len, int64_t bound, int64_t Q,
                         int64_t n_head, int64_t D, float scale, int lowp) {
    extern __shared__ float sm[]; /* q [D], then the part's scores */
    __shared__ float sh[32];
    int64_t i = blockIdx.z, h = blockIdx.y, b = blockIdx.x / KF_DECODE_SPLITS;
    int64_t s = blockIdx.x % KF_DECODE_SPLITS, T = ref_rows(len, bound, i);
    if (T < 0) return; /* the combination writes NaN */
    int64_t n = ref_part_rows(T), j0 = s * n, j1 = j0 + n < T ? j0 + n : T;
    if (j0 >= j1) return;
    int64_t H = n_head * D;
    const float *qr = q + (b * Q + i) * q_stride + h * D;
    const float *kb = kc + b * cap * H + h * D, *vb = vc + b * cap * H + h * D;
    float *qs = sm, *sc = sm + D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = ref_ld(qr + d, lowp);
    __syncthreads();
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (int64_t j = j0 + (threadIdx.x >> 5); j < j1; j += warps) {
        float acc = 0.0f;
        for (int64_t d = lane; d < D; d += 32) acc += qs[d] * ref_ld(kb + j * H + d, lowp);
        acc = warp_sum(acc);
        if (lane == 0) sc[j - j0] = acc * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < j1 - j0; j += blockDim.x) mx = fmaxf(mx, sc[j]);
    mx = block_max(mx, sh, -INFINITY);
    float ps = 0.0f;
    for (int64_t j = threadIdx.x; j < j1 - j0; j += blockDim.x) {
        float e = __expf(sc[j] - mx);
        sc[j] = e;
        ps += e;
    }
    float l = block_sum(ps, sh); /* its barriers also publish sc */
    float *rec = part + (((b * n_head + h) * Q + i) * KF_DECODE_SPLITS + s) * (D + 2);
    if (threadIdx.x == 0) rec[0] = mx, rec[1] = l;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = j0; j < j1; j++) acc = fmaf(sc[j - j0], ref_ld(vb + j * H + d, lowp), acc);
        rec[2 + d] = acc;
    }
}

/* Query (b, h, i)'s parts added in split order, each rescaled to their max. */
__global__ void ref_combine(float *out, const float *part, const int32_t *len, int64_t bound,
                            int64_t Q, int64_t n_head, int64_t D, int lowp) {
    int64_t i = blockIdx.z, h = blockIdx.y, b = blockIdx.x, T = ref_rows(len, bound, i);
    float *o = out + (b * Q + i) * n_head * D + h * D;
    if (T < 0) { /* a graph replayed past the length it was recorded for */
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = NAN;
        return;
    }
    int64_t parts = (T + ref_part_rows(T) - 1) / ref_part_rows(T);
    const float *rec = part + ((b * n_head + h) * Q + i) * KF_DECODE_SPLITS * (D + 2);
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

/* ---- the check ---- */

static float *dev_rand(int64_t n, unsigned *seed) {
    float *h = (float *)malloc((size_t)n * sizeof(float)), *d = NULL;
    for (int64_t i = 0; i < n; i++) h[i] = (float)rand_r(seed) / RAND_MAX * 2.0f - 1.0f;
    cudaMalloc((void **)&d, (size_t)n * sizeof(float));
    cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    return d;
}

static float *host_copy(const float *d, int64_t n) {
    float *h = (float *)malloc((size_t)n * sizeof(float));
    cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
}

/* Q queries of B samples, head size D, cache lengths P (device length, bound
 * the bucket's as model_decode.c launches it) at precision prec: the
 * backend's attn_decode against the reference, bitwise. */
static void check_shape(kf_backend *b, int64_t Q, int64_t D, kf_precision prec) {
    int64_t B = 2, nh = 2, cap = 140, H = nh * D, qs = 3 * H, n = B * Q * H;
    unsigned seed = (unsigned)(Q * 1000 + D + prec);
    float *q = dev_rand(B * Q * qs, &seed), *kc = dev_rand(B * cap * H, &seed);
    float *vc = dev_rand(B * cap * H, &seed), *out = NULL, *ref = NULL, *part = NULL;
    int32_t *len = NULL;
    cudaMalloc((void **)&out, (size_t)n * sizeof(float));
    cudaMalloc((void **)&ref, (size_t)n * sizeof(float));
    cudaMalloc((void **)&part, (size_t)(n / D * KF_DECODE_SPLITS * (D + 2)) * sizeof(float));
    cudaMalloc((void **)&len, sizeof(int32_t));
    b->set_precision(b, prec);
    const int64_t lens[] = {0, 1, 7, 14, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129};
    for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
        int64_t P = lens[t], bound = 1;
        while (bound < P + Q) bound *= 2;
        bound = (bound < cap ? bound : cap) - Q;
        int32_t p32 = (int32_t)P;
        cudaMemcpy(len, &p32, sizeof p32, cudaMemcpyHostToDevice);
        b->attn_decode(b, out, q, qs, kc, vc, B, cap, bound, len, Q, nh, D);
        b->sync(b);
        size_t bytes =
            (size_t)(D + (bound + Q + KF_DECODE_SPLITS - 1) / KF_DECODE_SPLITS) * sizeof(float);
        dim3 grid((unsigned)(B * KF_DECODE_SPLITS), (unsigned)nh, (unsigned)Q);
        ref_part<<<grid, 128, bytes>>>(part, q, qs, kc, vc, cap, len, bound, Q, nh, D,
                                       1.0f / sqrtf((float)D), (int)prec);
        ref_combine<<<dim3((unsigned)B, (unsigned)nh, (unsigned)Q), 128>>>(ref, part, len, bound, Q,
                                                                           nh, D, (int)prec);
        cudaDeviceSynchronize();
        float *got = host_copy(out, n), *want = host_copy(ref, n);
        int64_t d = 0;
        for (int64_t i = 0; i < n; i++) d += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        T_CHECK(d == 0,
                "Q %lld D %lld %s P %lld (bound %lld): got %lld of %lld values unlike "
                "the reference's, want 0",
                (long long)Q, (long long)D, kernels_precision_name(prec), (long long)P,
                (long long)bound, (long long)d, (long long)n);
        free(got), free(want);
    }
    b->set_precision(b, KF_PREC_FP32);
    cudaFree(q), cudaFree(kc), cudaFree(vc), cudaFree(out), cudaFree(ref), cudaFree(part),
        cudaFree(len);
}

int main(void) {
    char msg[256];
    kf_backend *b = kernels_cuda_create(0, msg, sizeof msg);
    T_CHECK(b != NULL, "no CUDA backend: %s", msg);
    if (!b) return T_DONE();
    const int64_t qn[] = {1, 2, 3, 8}, dn[] = {40, 64, 160};
    const kf_precision prec[] = {KF_PREC_FP32, KF_PREC_BF16};
    for (int q = 0; q < 4; q++)
        for (int d = 0; d < 3; d++)
            for (int p = 0; p < 2; p++) check_shape(b, qn[q], dn[d], prec[p]);
    b->destroy(b);
    return T_DONE();
}
