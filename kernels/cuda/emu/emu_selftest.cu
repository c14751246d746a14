/* kernels/cuda/emu/emu_selftest.cu — kernels with one deliberate bug each, so
 * tests/scripts/test_gpu_emu.sh can check that the emulation harness reports
 * it. `emu_selftest CASE` runs one case; the harness is expected to abort with
 * a message for every case but "race", which prints the value a block's
 * thread 0 read from shared memory without a barrier (it depends on the
 * thread order), and "ok", a correct kernel that exits 0.
 * Built only with EMU=1 (make emu-tests). */
#include <mma.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_mma.cuh"

/* Every thread but 0 returns, then thread 0 waits at a barrier. */
__global__ void k_divergent(int *out) {
    if (threadIdx.x != 0) return;
    __syncthreads();
    out[0] = 1;
}

/* Lanes 16..31 exit; the rest shuffle with a full mask. */
__global__ void k_shfl_exited(float *out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/* A WMMA load 8 bytes off a 32-byte boundary. */
__global__ void k_wmma_misaligned(float *out) {
    __shared__ __align__(32) __half tile[16 * 16 + 8];
    for (int i = threadIdx.x; i < 16 * 16 + 8; i += 32) tile[i] = __float2half_rn(1.0f);
    __syncwarp();
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> a;
    nvcuda::wmma::load_matrix_sync(a, tile + 4, 16);
    out[threadIdx.x] = 0.0f;
}

/* Thread 0 reads a slot thread 31 writes, with no barrier between. */
__global__ void k_race(float *out) {
    __shared__ float s[32];
    s[threadIdx.x] = (float)threadIdx.x;
    if (threadIdx.x == 0) out[0] = s[31];
}

/* Half the warp waits at a barrier, the other half in a shuffle. */
__global__ void k_deadlock(float *out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0xffffffffu, 2.0f, 0);
    else __syncthreads();
}

/* cp.async copies issued and committed, never waited for. */
__global__ void k_cp_async_unwaited(float *out) {
    __shared__ __align__(16) float s[32][4];
    cp_async16(s[threadIdx.x], out + threadIdx.x * 4 % 64, true);
    cp_async_commit();
}

/* A block sum through shared memory, barriers in place. */
__global__ void k_ok(float *out) {
    __shared__ float s[64];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int i = 0; i < 64; i++) t += s[i];
        out[0] = t;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr,
                "usage: emu_selftest divergent|shfl|wmma|cp_async|launch|smem|race|deadlock|ok\n");
        return 2;
    }
    const char *c = argv[1];
    float *f = NULL;
    cudaMalloc(&f, 64 * sizeof(float));
    if (!strcmp(c, "divergent")) k_divergent<<<1, 64>>>((int *)f);
    else if (!strcmp(c, "shfl")) k_shfl_exited<<<1, 32>>>(f);
    else if (!strcmp(c, "wmma")) k_wmma_misaligned<<<1, 32>>>(f);
    else if (!strcmp(c, "cp_async")) k_cp_async_unwaited<<<1, 32>>>(f);
    else if (!strcmp(c, "launch")) k_ok<<<1, 2048>>>(f);
    else if (!strcmp(c, "smem")) k_ok<<<1, 64, 64 * 1024>>>(f);
    else if (!strcmp(c, "deadlock")) k_deadlock<<<1, 32>>>(f);
    else if (!strcmp(c, "race") || !strcmp(c, "ok")) {
        if (!strcmp(c, "race")) k_race<<<1, 32>>>(f);
        else k_ok<<<1, 64>>>(f);
        float v = 0.0f;
        cudaMemcpy(&v, f, sizeof v, cudaMemcpyDeviceToHost);
        printf("%s: %g\n", c, v);
        return 0;
    } else {
        fprintf(stderr, "emu_selftest: unknown case %s\n", c);
        return 2;
    }
    printf("%s: no error reported\n", c);
    return 0;
}
