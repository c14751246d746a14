/* tests/unit/test_cuda_mma.cu — the PTX wrappers of kernels/cuda/cuda_mma.cuh
 * against the PTX ISA: ldmatrix.x4 and .x4.trans, mma.m16n8k16 (fp16 and bf16) with every lane's
 * registers filled and read back by the documented fragment layout (written
 * here from the ISA's per-register tables, independently of the harness's
 * element-owner form), and cp.async's groups, zero fill and completion.
 * Operands are small integers over 4, so every product and sum is exact and
 * the result must equal the host's bit for bit (and, once, fp16 values of
 * every finite class, each D element one of them); every element differs, so a
 * lane or register mapped wrongly changes some output. Built with EMU=1 (the
 * emulated instructions, make emu-tests). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_mma.cuh"
#include "tests/test.h"

/* 1: the fp16 value classes (below) instead of small integers */
static int classes;

/* A's element (i, k) of set s as fp16 bits: every exponent but the all-ones
 * one, the first four rows subnormal (or zero), signs mixed */
static float a_class(int s, int i, int k) {
    uint16_t h = (uint16_t)(((uint32_t)((s * 256 + i * 16 + k) * 2654435761u) >> 16) & 0xfbffu);
    if (i < 4) h &= 0x83ffu;
    return __half2float(__ushort_as_half(h));
}

/* Operand set s (one per mma.sync of the launch) differs from every other, so
 * a D computed from another set's registers changes some output. With
 * `classes`, B selects column j (even sets) or j + 8 (odd sets) of A and C is
 * zero: a D element of one mma is one of A's values, exactly, and a half
 * widened wrongly changes it. */
static float a_val(int s, int i, int k) {
    if (classes) return a_class(s, i, k);
    return (float)((i * 37 + k * 11 + s * 5) % 23 - 11) / 4.0f;
}
static float b_val(int s, int k, int j) {
    if (classes) return k == j + 8 * (s % 2) ? 1.0f : 0.0f;
    return (float)((k * 13 + j * 29 + s * 3) % 19 - 9) / 4.0f;
}
static float c_val(int i, int j) {
    return classes ? 0.0f : (float)((i * 7 + j * 17) % 31 - 15) / 2.0f;
}

/* Each warp (number w in the grid) runs reps mma.sync one after another, the
 * r-th with A and B of set w * reps + r (A [16][16], B [16][8] row-major) and
 * C the D of the one before (the first: CD[w], [16][8]); after each it
 * stores D in out[w * reps + r]. */
template <typename T>
__global__ void k_mma(float *out, const float *CD, const float *A, const float *B, int reps) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const float *cd = CD + w * 128;
    float d[4] = {cd[g * 8 + 2 * t], cd[g * 8 + 2 * t + 1], cd[(g + 8) * 8 + 2 * t],
                  cd[(g + 8) * 8 + 2 * t + 1]};
    for (int r = 0; r < reps; r++) {
        const float *a_s = A + (w * reps + r) * 256, *b_s = B + (w * reps + r) * 128;
        uint32_t a[4], b[2];
        a[0] = mma_pack<T>(a_s[g * 16 + 2 * t], a_s[g * 16 + 2 * t + 1]);
        a[1] = mma_pack<T>(a_s[(g + 8) * 16 + 2 * t], a_s[(g + 8) * 16 + 2 * t + 1]);
        a[2] = mma_pack<T>(a_s[g * 16 + 2 * t + 8], a_s[g * 16 + 2 * t + 9]);
        a[3] = mma_pack<T>(a_s[(g + 8) * 16 + 2 * t + 8], a_s[(g + 8) * 16 + 2 * t + 9]);
        b[0] = mma_pack<T>(b_s[(2 * t) * 8 + g], b_s[(2 * t + 1) * 8 + g]);
        b[1] = mma_pack<T>(b_s[(2 * t + 8) * 8 + g], b_s[(2 * t + 9) * 8 + g]);
        mma_16816<T>(d, a, b);
        float *o = out + (w * reps + r) * 128;
        o[g * 8 + 2 * t] = d[0];
        o[g * 8 + 2 * t + 1] = d[1];
        o[(g + 8) * 8 + 2 * t] = d[2];
        o[(g + 8) * 8 + 2 * t + 1] = d[3];
    }
}

/* blocks x warps warps, reps mma.sync each; every D against the host's C plus
 * the products so far, summed exactly (small integers over 4). */
template <typename T> static void check_mma(const char *what, int blocks, int warps, int reps) {
    int nw = blocks * warps, ns = nw * reps;
    float *A = (float *)malloc(sizeof(float) * 256 * ns),
          *B = (float *)malloc(sizeof(float) * 128 * ns);
    float *C = (float *)malloc(sizeof(float) * 128 * nw),
          *D = (float *)malloc(sizeof(float) * 128 * ns);
    for (int s = 0; s < ns; s++) {
        for (int i = 0; i < 16; i++)
            for (int k = 0; k < 16; k++) A[s * 256 + i * 16 + k] = a_val(s, i, k);
        for (int k = 0; k < 16; k++)
            for (int j = 0; j < 8; j++) B[s * 128 + k * 8 + j] = b_val(s, k, j);
    }
    for (int w = 0; w < nw; w++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) C[w * 128 + i * 8 + j] = c_val(i + w, j);
    float *dA, *dB, *dC, *dD;
    cudaMalloc((void **)&dA, sizeof(float) * 256 * ns);
    cudaMalloc((void **)&dB, sizeof(float) * 128 * ns);
    cudaMalloc((void **)&dC, sizeof(float) * 128 * nw);
    cudaMalloc((void **)&dD, sizeof(float) * 128 * ns);
    cudaMemcpy(dA, A, sizeof(float) * 256 * ns, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof(float) * 128 * ns, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C, sizeof(float) * 128 * nw, cudaMemcpyHostToDevice);
    k_mma<T><<<blocks, warps * 32>>>(dD, dC, dA, dB, reps);
    cudaMemcpy(D, dD, sizeof(float) * 128 * ns, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int w = 0; w < nw; w++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                float want = C[w * 128 + i * 8 + j];
                for (int r = 0; r < reps; r++) {
                    int s = w * reps + r;
                    for (int k = 0; k < 16; k++)
                        want += A[s * 256 + i * 16 + k] * B[s * 128 + k * 8 + j];
                    float got = D[s * 128 + i * 8 + j];
                    if (got != want && bad++ < 4)
                        fprintf(stderr, "  %s warp %d mma %d D[%d][%d]: got %g want %g\n", what, w,
                                r, i, j, got, want);
                }
            }
    T_CHECK(bad == 0, "%s (%d blocks of %d warps, %d each): %d of %d elements of D wrong, want 0",
            what, blocks, warps, reps, bad, 128 * ns);
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dD);
    free(A), free(B), free(C), free(D);
}

/* 32 threads copy rows 0..31 (16 bytes each) in two groups: rows 0..15, then
 * rows 16..31 with the odd ones zero-filled. After wait_group 1 the first
 * group is complete; after wait_group 0 both. Each thread reads its own row
 * (its own copy: no barrier needed) into out[0 or 1][row][4]; out[2] gets
 * rows 16..31 read before any wait: the harness makes a destination all-ones
 * bytes (NaN) from the issue until the wait, so such a read cannot pass
 * unseen there (it would otherwise read the zeros written before). */
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
    /* before its wait a GPU may show the old zeros or the new values (a race
     * by design); only the harness promises NaN there */
    for (int i = 256; i < 320; i++) {
#ifdef KF_CUDA_EMU_RUNTIME_H
        early += !isnan(out[i]);
#else
        int r = 16 + (i - 256) / 4;
        float fresh = r % 2 ? 0.0f : src[r * 4 + (i - 256) % 4];
        early += out[i] != 0.0f && out[i] != fresh;
#endif
    }
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
#ifdef KF_CUDA_EMU_RUNTIME_H
    T_CHECK(early == 0, "cp.async: %d of 64 values read before their wait are not NaN", early);
#else
    T_CHECK(early == 0,
            "cp.async: %d of 64 values read before their wait are neither the old zero nor the "
            "copied value",
            early);
#endif
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
    check_mma<__half>("mma.m16n8k16 f16", 1, 1, 1);
    check_mma<__nv_bfloat16>("mma.m16n8k16 bf16", 1, 1, 1);
    /* several warps per block and blocks per launch, each warp's mma.sync
     * one after another with other operands: the emulator computes D once
     * per warp and mma, so a D kept from another warp or mma fails here */
    check_mma<__half>("mma.m16n8k16 f16", 2, 3, 4);
    check_mma<__nv_bfloat16>("mma.m16n8k16 bf16", 2, 3, 4);
    /* fp16 operands of every class but inf and NaN: subnormals, zeros of
     * both signs, normals up to 65504 (the harness widens halves itself) */
    classes = 1;
    check_mma<__half>("mma.m16n8k16 f16, subnormal and extreme operands", 1, 2, 1);
    classes = 0;
    check_cp_async();
    check_ldmatrix(0);
    check_ldmatrix(1);
    return T_DONE();
}
