/* kernels/cuda/cuda_rows.cu — row movement, token embedding and the PFLM noise features.
 *
 * embed_bwd is deterministic without atomics: the (id, position) pairs are
 * sorted by id with a stable radix sort (positions stay ascending inside an
 * id), then one block per distinct id adds that id's rows into its table row
 * in position order — the same additions, in the same order, as the CPU
 * backend, so the result is bitwise identical to it.
 */
#include <cub/cub.cuh>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/noise_freq.h"

/* One block per row (grid-strided), threads over the columns. */
__global__ void k_move_rows(float *dst, const float *src, const int32_t *dst_idx,
                            const int32_t *src_idx, int64_t n, int64_t dim) {
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        int64_t d = dst_idx ? dst_idx[i] : i, s = src_idx ? src_idx[i] : i;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) dst[d * dim + c] = src[s * dim + c];
    }
}

static void move_rows(kf_backend *b, float *dst, const float *src, const int32_t *dst_idx,
                      const int32_t *src_idx, int64_t n, int64_t dim) {
    if (n <= 0 || dim <= 0) return;
    unsigned g = (unsigned)(n < 65535 * 4 ? n : 65535 * 4);
    k_move_rows<<<g, 128, 0, cu_stream(b)>>>(dst, src, dst_idx, src_idx, n, dim);
    CUDA_LAUNCHED();
}

void cu_gather_rows(kf_backend *b, float *dst, const float *src, const int32_t *idx, int64_t n,
                    int64_t dim) {
    move_rows(b, dst, src, NULL, idx, n, dim);
}

void cu_scatter_rows(kf_backend *b, float *dst, const float *src, const int32_t *idx, int64_t n,
                     int64_t dim) {
    move_rows(b, dst, src, idx, NULL, n, dim);
}

__global__ void k_scatter_ids(int32_t *dst, const int32_t *src, const int32_t *idx, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[idx[i]] = src[i];
}

void cu_scatter_ids(kf_backend *b, int32_t *dst, const int32_t *src, const int32_t *idx,
                    int64_t n) {
    if (n <= 0) return;
    k_scatter_ids<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(dst, src, idx, n);
    CUDA_LAUNCHED();
}

__global__ void k_gather_ids(int32_t *dst, const int32_t *src, const int32_t *idx, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = idx[i] >= 0 ? src[idx[i]] : -1;
}

void cu_gather_ids(kf_backend *b, int32_t *dst, const int32_t *src, const int32_t *idx, int64_t n) {
    if (n <= 0) return;
    k_gather_ids<<<cu_blocks(n), 256, 0, cu_stream(b)>>>(dst, src, idx, n);
    CUDA_LAUNCHED();
}

void cu_embed_fwd(kf_backend *b, float *out, const int32_t *ids, const int32_t *row_idx,
                  const float *table, int64_t n, int64_t dim) {
    move_rows(b, out, table, row_idx, ids, n, dim);
}

/* pos[i] = i; a token id outside [0, vocab) sets CU_ERR_EMBED_ID, which
 * the host sees at its next wait (cu_wait), not by stopping here. */
__global__ void k_iota_check(int32_t *pos, int *err, const int32_t *ids, int64_t n, int64_t vocab) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        pos[i] = (int32_t)i;
        if (ids[i] < 0 || ids[i] >= vocab) atomicOr(err, (int)CU_ERR_EMBED_ID);
    }
}

/* Block per sorted position; only the first position of each id's run works.
 * Ids outside [0, vocab) are skipped (the step dies at the next wait): the
 * sort looks at the key bits below vocab's, so such an id can split another
 * id's run, but nothing is written outside the table. */
__global__ void k_embed_bwd(float *dtable, const float *dout, const int32_t *sid,
                            const int32_t *spos, const int32_t *row_idx, int64_t n, int64_t dim,
                            int64_t vocab) {
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        int32_t id = sid[i];
        if ((i > 0 && sid[i - 1] == id) || id < 0 || id >= vocab) continue;
        float *dst = dtable + (int64_t)id * dim;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
            float v = dst[c];
            for (int64_t j = i; j < n && sid[j] == id; j++) {
                int64_t r = row_idx ? row_idx[spos[j]] : spos[j];
                v += dout[r * dim + c];
            }
            dst[c] = v;
        }
    }
}

void cu_embed_bwd(kf_backend *b, float *dtable, const float *dout, const int32_t *ids,
                  const int32_t *row_idx, int64_t n, int64_t dim, int64_t vocab) {
    if (n <= 0) return;
    KF_CHECK(n < 0x7fffffff, "embed_bwd: %lld rows is too many", (long long)n);
    cudaStream_t s = cu_stream(b);
    int end_bit = 1;
    while (end_bit < 31 && ((int64_t)1 << end_bit) < vocab) end_bit++;
    size_t temp = 0;
    CUDA_OK(cub::DeviceRadixSort::SortPairs(NULL, temp, (const int32_t *)NULL, (int32_t *)NULL,
                                            (const int32_t *)NULL, (int32_t *)NULL, (int)n, 0,
                                            end_bit, s));
    size_t arr = ((size_t)n * sizeof(int32_t) + 255) & ~(size_t)255;
    char *base = (char *)cu_scratch(b, CU_SCRATCH_C, 3 * arr + temp);
    int32_t *pos = (int32_t *)base, *sid = (int32_t *)(base + arr),
            *spos = (int32_t *)(base + 2 * arr);
    void *tmp = base + 3 * arr;
    k_iota_check<<<cu_blocks(n), 256, 0, s>>>(pos, cu_impl(b)->err_dev, ids, n, vocab);
    CUDA_LAUNCHED();
    CUDA_OK(cub::DeviceRadixSort::SortPairs(tmp, temp, ids, sid, pos, spos, (int)n, 0, end_bit, s));
    unsigned g = (unsigned)(n < 65535 * 4 ? n : 65535 * 4);
    k_embed_bwd<<<g, 128, 0, s>>>(dtable, dout, sid, spos, row_idx, n, dim, vocab);
    CUDA_LAUNCHED();
}

__global__ void k_noise_features(float *out, const double *z, const double *tau, int64_t n,
                                 int64_t H, int64_t cycles) {
    int64_t half = H / 2, total = n * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / half, i = t % half;
        double az = z[r] * kf_noise_freq(i, half, cycles), at = tau[r] * kf_noise_freq(i, half, 0);
        float *o = out + r * 2 * H;
        o[i] = (float)cos(az);
        o[half + i] = (float)sin(az);
        o[H + i] = (float)cos(at);
        o[H + half + i] = (float)sin(at);
    }
}

void cu_noise_features(kf_backend *b, float *out, const double *z, const double *tau, int64_t n,
                       int64_t H, int64_t cycles) {
    KF_CHECK(H % 2 == 0, "noise_features needs an even hidden size, got %lld", (long long)H);
    KF_CHECK(cycles >= 0, "noise_features: cycles %lld < 0", (long long)cycles);
    if (n <= 0) return;
    k_noise_features<<<cu_blocks(n * H / 2), 256, 0, cu_stream(b)>>>(out, z, tau, n, H, cycles);
    CUDA_LAUNCHED();
}
