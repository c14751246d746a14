/* kernels/cuda/cuda_mma.cuh — the PTX instructions the tensor-core attention
 * and batch-invariant GEMM use, each wrapped in one device function: inline PTX under nvcc (sm_80
 * and later), the emulation harness's model otherwise (kernels/cuda/emu, docs/cuda_emulation.md).
 *
 * Register layout of mma.m16n8k16 (PTX ISA, "Matrix fragments for
 * mma.m16n8k16 with floating point type"). With g = lane / 4 and t = lane % 4,
 * each lane holds:
 *   A (16 x 16, row-major), four .b32 registers of two 16-bit values (low
 *     half first): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
 *     a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
 *   B (16 x 8, "col": consecutive k in a register), two registers:
 *     b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g];
 *   C and D (16 x 8, fp32), four floats: d[0], d[1] = D[g][2t, 2t+1],
 *     d[2], d[3] = D[g+8][2t, 2t+1].
 * So a lane knows the rows of its accumulators (g and g+8), which lets a
 * flash-attention kernel rescale O and reduce softmax rows in registers, and
 * the S accumulators of two adjacent 8-column tiles are, packed to 16 bits,
 * exactly the A operand of the next product (P V).
 */
#ifndef KF_KERNELS_CUDA_MMA_CUH
#define KF_KERNELS_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* T (__half or __nv_bfloat16) from a float, rounded to nearest even. */
template <typename T> __device__ __forceinline__ T mma_cvt(float x);
template <> __device__ __forceinline__ __half mma_cvt<__half>(float x) {
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 mma_cvt<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

__device__ __forceinline__ uint32_t mma_bits(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ uint32_t mma_bits(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }

/** One operand register: lo and hi rounded to T, lo in the low 16 bits. */
template <typename T> __device__ __forceinline__ uint32_t mma_pack(float lo, float hi) {
    return mma_bits(mma_cvt<T>(lo)) | mma_bits(mma_cvt<T>(hi)) << 16;
}

/** d += A B on the tensor cores (mma.sync.aligned.m16n8k16.row.col.f32 with
 *  T operands, fp32 accumulation), in the layout above. A warp collective:
 *  all 32 lanes call it together. */
template <typename T>
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]);

#ifdef __CUDACC__
template <>
__device__ __forceinline__ void mma_16816<__half>(float d[4], const uint32_t a[4],
                                                  const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                         const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* One ldmatrix.sync.aligned.m8n8.x4 form (FORM "" or ".trans") as function
 * NAME: the two forms differ only in the instruction's name. */
#define KF_LDMATRIX_X4(name, form)                                                                 \
    __device__ __forceinline__ void name(uint32_t r[4], const void *row) {                         \
        unsigned s = (unsigned)__cvta_generic_to_shared(row);                                      \
        asm volatile("ldmatrix.sync.aligned.m8n8.x4" form ".shared.b16 {%0,%1,%2,%3}, [%4];\n"     \
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                              \
                     : "r"(s)                                                                      \
                     : "memory");                                                                  \
    }
/** ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8 x 8 tiles of 16-bit
 *  values from shared memory. A warp collective: lane l passes the address
 *  of row l % 8 of tile l / 8 (16 bytes, 16-byte aligned) and receives in
 *  r[i] the elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of tile i
 *  — an A operand register (above) of a row-major [m][k] tile, or a B one
 *  of an [n][k] tile. */
KF_LDMATRIX_X4(ldmatrix_x4, "")
/** ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: four 8 x 8 tiles of
 *  16-bit values from shared memory, transposed. A warp collective: lane l
 *  passes the address of row l % 8 of tile l / 8 (16 bytes, 16-byte aligned)
 *  and receives in r[i] the elements (2 (l % 4), l / 4) and (2 (l % 4) + 1,
 *  l / 4) of tile i — a B operand register (above) of a row-major [k][n]
 *  tile. */
KF_LDMATRIX_X4(ldmatrix_x4_trans, ".trans")
#undef KF_LDMATRIX_X4

/** cp.async.cg.shared.global of 16 bytes from global src to shared dst (both
 *  16-byte aligned); when !valid, src is not read and dst gets zeros. The
 *  copy is asynchronous: read dst only after the cp_async_wait covering it
 *  (and a barrier, for the other threads' copies). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
/** cp.async.commit_group: this thread's copies since the last commit form a group. */
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/** cp.async.wait_group N: waits until at most the newest N groups are pending. */
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#else
template <>
__device__ __forceinline__ void mma_16816<__half>(float d[4], const uint32_t a[4],
                                                  const uint32_t b[2]) {
    emu::mma_m16n8k16(d, a, b, false, __FILE__, __LINE__);
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                         const uint32_t b[2]) {
    emu::mma_m16n8k16(d, a, b, true, __FILE__, __LINE__);
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row) {
    emu::ldmatrix_x4(r, row, false, __FILE__, __LINE__);
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *row) {
    emu::ldmatrix_x4(r, row, true, __FILE__, __LINE__);
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    emu::cp_async16(dst, src, valid ? 16 : 0, __FILE__, __LINE__);
}
__device__ __forceinline__ void cp_async_commit() { emu::cp_async_commit(); }
template <int N> __device__ __forceinline__ void cp_async_wait() { emu::cp_async_wait(N); }
#endif

#endif
