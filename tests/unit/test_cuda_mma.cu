/* tests/unit/test_cuda_mma.cu — the PTX wrappers of kernels/cuda/cuda_mma.cuh
 * against the PTX ISA: ldmatrix.x4 and .x4.trans, mma.m16n8k16 (fp16 and bf16) with every lane's
 * registers filled and read back by the documented fragment layout (written
 * here from the ISA's per-register tables, independently of the harness's
 * element-owner form), and cp.async's groups, zero fill and completion.
 * Operands are small integers over 4, so every product and sum is exact and
 * the result must equal the host's bit for bit; every element differs, so a
 * lane or register mapped wrongly changes some output. Built with EMU=1 (the
 * emulated instructions, make emu-tests). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_mma.cuh"
#include "tests/test.h"

static float a_val(int i, int k) { return (float)((i * 37 + k * 11) % 23 - 11) / 4.0f; }
static float b_val(int k, int j) { return (float)((k * 13 + j * 29) % 19 - 9) / 4.0f; }
static float c_val(int i, int j) { return (float)((i * 7 + j * 17) % 31 - 15) / 2.0f; }

/* One warp: A [16][16], B [16][8], CD [16][8] row-major in global memory; CD
 * holds C on entry and D on exit. */
template <typename T> __global__ void k_mma(float *cd, const float *A, const float *B) {
    int g = threadIdx.x / 4, t = threadIdx.x % 4;
    uint32_t a[4], b[2];
    float d[4];
    a[0] = mma_pack<T>(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
    a[1] = mma_pack<T>(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
    a[2] = mma_pack<T>(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
    a[3] = mma_pack<T>(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
    b[0] = mma_pack<T>(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
    b[1] = mma_pack<T>(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
    d[0] = cd[g * 8 + 2 * t];
    d[1] = cd[g * 8 + 2 * t + 1];
    d[2] = cd[(g + 8) * 8 + 2 * t];
    d[3] = cd[(g + 8) * 8 + 2 * t + 1];
    mma_16816<T>(d, a, b);
    cd[g * 8 + 2 * t] = d[0];
    cd[g * 8 + 2 * t + 1] = d[1];
    cd[(g + 8) * 8 + 2 * t] = d[2];
    cd[(g + 8) * 8 + 2 * t + 1] = d[3];
}

template <typename T> static void check_mma(const char *what) {
    float A[256], B[128], C[128], D[128];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) A[i * 16 + k] = a_val(i, k);
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 8; j++) B[k * 8 + j] = b_val(k, j);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) C[i * 8 + j] = c_val(i, j);
    float *dA, *dB, *dCD;
    cudaMalloc((void **)&dA, sizeof A);
    cudaMalloc((void **)&dB, sizeof B);
    cudaMalloc((void **)&dCD, sizeof C);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    cudaMemcpy(dCD, C, sizeof C, cudaMemcpyHostToDevice);
    k_mma<T><<<1, 32>>>(dCD, dA, dB);
    cudaMemcpy(D, dCD, sizeof D, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float want = C[i * 8 + j];
            for (int k = 0; k < 16; k++) want += A[i * 16 + k] * B[k * 8 + j];
            if (D[i * 8 + j] != want && bad++ < 4)
                fprintf(stderr, "  %s D[%d][%d]: got %g want %g\n", what, i, j, D[i * 8 + j], want);
        }
    T_CHECK(bad == 0, "%s: %d of 128 elements of D wrong, want 0", what, bad);
    cudaFree(dA), cudaFree(dB), cudaFree(dCD);
}

/* 32 threads copy rows 0..31 (16 bytes each) in two groups: rows 0..15, then
 * rows 16..31 with the odd ones zero-filled. After wait_group 1 the first
 * group is complete; after wait_group 0 both. Each thread reads its own row
 * (its own copy: no barrier needed) into out[0 or 1][row][4]; out[2] gets
 * rows 16..31 read before any wait: the harness makes a destination all-ones
 * bytes (NaN) from the issue until the wait, so such a read cannot pass
 * unseen (here it would otherwise read the zeros written before). */
__global__ void k_cp_async(float *out, const float *src) {
    __shared__ __align__(16) float tile[32][4];
    int r = threadIdx.x;
    for (int i = 0; i < 4; i++) tile[r][i] = 0.0f; /* what a read before the wait must not see */
    if (r < 16) cp_async16(tile[r], src + r * 4, true);
    cp_async_commit();
    if (r >= 16) cp_async16(tile[r], src + r * 4, r % 2 == 0);
    cp_async_commit();
    if (r >= 16)
        for (int i = 0; i < 4; i++) out[256 + (r - 16) * 4 + i] = tile[r][i];
    cp_async_wait<1>();
    if (r < 16)
        for (int i = 0; i < 4; i++) out[r * 4 + i] = tile[r][i];
    cp_async_wait<0>();
    for (int i = 0; i < 4; i++) out[128 + r * 4 + i] = tile[r][i];
}

static void check_cp_async(void) {
    float src[128], out[320];
    for (int i = 0; i < 128; i++) src[i] = (float)i + 0.5f;
    float *ds, *dout;
    cudaMalloc((void **)&ds, sizeof src);
    cudaMalloc((void **)&dout, sizeof out);
    cudaMemcpy(ds, src, sizeof src, cudaMemcpyHostToDevice);
    k_cp_async<<<1, 32>>>(dout, ds);
    cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
    int bad1 = 0, bad0 = 0, early = 0;
    for (int i = 256; i < 320; i++) early += !isnan(out[i]);
    for (int i = 0; i < 64; i++) bad1 += out[i] != src[i];
    for (int i = 0; i < 128; i++) {
        int r = i / 4;
        float want = r >= 16 && r % 2 ? 0.0f : src[i];
        bad0 += out[128 + i] != want;
    }
    T_CHECK(bad1 == 0, "cp.async: %d of 64 values of the first group wrong after wait_group 1",
            bad1);
    T_CHECK(bad0 == 0,
            "cp.async: %d of 128 values wrong after wait_group 0 (odd rows >= 16 "
            "zero-filled)",
            bad0);
    T_CHECK(early == 0, "cp.async: %d of 64 values read before their wait are not NaN", early);
    cudaFree(ds), cudaFree(dout);
}

/* Four 8 x 8 tiles of 16-bit values t*64 + r*8 + c in shared memory; lane l
 * names row l % 8 of tile l / 8 and gets its four registers in out[l][4],
 * from ldmatrix.x4 (.trans when trans). */
__global__ void k_ldmatrix(uint32_t *out, int trans) {
    __shared__ __align__(16) uint16_t m[4][8][8];
    for (int i = threadIdx.x; i < 256; i += 32) m[i / 64][i / 8 % 8][i % 8] = (uint16_t)i;
    __syncwarp();
    uint32_t r[4];
    if (trans) ldmatrix_x4_trans(r, m[threadIdx.x / 8][threadIdx.x % 8]);
    else ldmatrix_x4(r, m[threadIdx.x / 8][threadIdx.x % 8]);
    for (int i = 0; i < 4; i++) out[threadIdx.x * 4 + i] = r[i];
}

/* ldmatrix against the PTX ISA: lane l's register i holds, low half first,
 * elements [l / 4][2 (l % 4)] and [l / 4][2 (l % 4) + 1] of tile i (row,
 * column as stored; the A operand layout of mma.m16n8k16), and with .trans
 * elements [2 (l % 4)][l / 4] and [2 (l % 4) + 1][l / 4] (the B operand
 * layout of a row-major [k][n] tile). */
static void check_ldmatrix(int trans) {
    const char *name = trans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
    uint32_t got[128], *dout;
    cudaMalloc((void **)&dout, sizeof got);
    k_ldmatrix<<<1, 32>>>(dout, trans);
    cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            int row = trans ? 2 * (l % 4) : l / 4, col = trans ? l / 4 : 2 * (l % 4);
            /* the next element along the row (stored), or down the column (.trans) */
            uint32_t lo = (uint32_t)(i * 64 + row * 8 + col), hi = lo + (trans ? 8 : 1);
            uint32_t want = lo | hi << 16;
            if (got[l * 4 + i] != want && bad++ < 4)
                fprintf(stderr, "  %s lane %d r[%d]: got 0x%08x want 0x%08x\n", name, l, i,
                        got[l * 4 + i], want);
        }
    T_CHECK(bad == 0, "%s: %d of 128 registers wrong, want 0", name, bad);
    cudaFree(dout);
}

int main(void) {
    check_mma<__half>("mma.m16n8k16 f16");
    check_mma<__nv_bfloat16>("mma.m16n8k16 bf16");
    check_cp_async();
    check_ldmatrix(0);
    check_ldmatrix(1);
    return T_DONE();
}
