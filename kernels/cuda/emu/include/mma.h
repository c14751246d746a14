/* kernels/cuda/emu/include/mma.h — nvcuda::wmma for the CPU emulation harness,
 * 16x16x16 shapes with __half operands and float accumulators (what the
 * project's tensor-core kernels use). Every lane holds the whole 16x16 tile
 * (the device spreads it over the warp), so element-wise access through
 * frag.x[] is not modelled. load/store/mma are warp collectives: all 32 lanes
 * must call them with the same pointer and ldm; pointers must be 32-byte
 * aligned and ldm a multiple of 16 bytes, as the PTX ISA requires. Products
 * are exact (half x half fits a float) and summed in k order in float: the
 * tensor cores' internal rounding is not modelled (docs/cuda_emulation.md). */
#ifndef KF_CUDA_EMU_MMA_H
#define KF_CUDA_EMU_MMA_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "emulated wmma: only 16x16x16");
    enum { num_elements = 256 };
    float x[256]; /* row-major 16x16, element values (halves widened exactly) */
};

namespace detail {
template <typename T> static inline void check(const T *p, unsigned ldm, const char *what) {
    const uint64_t *all = emu::warp_collective(
        emu::SYNC_WMMA, 0xffffffffu, (uint64_t)(uintptr_t)p ^ ((uint64_t)ldm << 48), what, 0);
    for (int l = 0; l < 32; l++)
        if (all[l] != all[0])
            emu::fail("wmma::%s: lanes 0 and %d pass different pointers or ldm", what, l);
    if ((uintptr_t)p % 32)
        emu::fail("wmma::%s: pointer %p is not 32-byte aligned", what, (const void *)p);
    if ((ldm * sizeof(T)) % 16)
        emu::fail("wmma::%s: ldm %u elements is not a multiple of 16 bytes", what, ldm);
}
static inline float widen(__half h) { return __half2float(h); }
static inline float widen(float f) { return f; }
} // namespace detail

template <typename Use, typename T, typename L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
    float w = std::is_same<T, __half>::value ? __half2float(__float2half_rn(v)) : v;
    for (int i = 0; i < 256; i++) f.x[i] = w;
}

/* operand tiles: the layout is the fragment's */
template <typename Use, typename T>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, row_major> &f, const T *p,
                                    unsigned ldm) {
    detail::check(p, ldm, "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = detail::widen(p[(size_t)r * ldm + c]);
}
template <typename Use, typename T>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, col_major> &f, const T *p,
                                    unsigned ldm) {
    detail::check(p, ldm, "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = detail::widen(p[(size_t)c * ldm + r]);
}
/* accumulators: the layout is given at the call */
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t l) {
    detail::check(p, ldm, "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t l) {
    detail::check(p, ldm, "store_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) =
                f.x[r * 16 + c];
}

template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __half, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __half, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    emu::warp_collective(emu::SYNC_WMMA, 0xffffffffu, 0, "mma_sync", 0);
    float out[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c.x[i * 16 + j];
            for (int k = 0; k < 16; k++) s += a.x[i * 16 + k] * b.x[k * 16 + j];
            out[i * 16 + j] = s;
        }
    memcpy(d.x, out, sizeof out);
}

} // namespace wmma
} // namespace nvcuda

#endif
