/* kernels/cpu/cpu_internal.h — what the CPU backend's files share.
 *
 * Each cpu_*.c file implements one family of ops from kernels.h; the table is
 * filled in cpu_backend.c. Determinism rule used throughout: every output
 * element is produced by exactly one thread in a fixed order, and reductions
 * over rows go through fixed-size row chunks (KF_CPU_ROW_CHUNK) whose
 * partials are added in chunk order, so results never depend on the number
 * of OpenMP threads.
 */
#ifndef KF_KERNELS_CPU_INTERNAL_H
#define KF_KERNELS_CPU_INTERNAL_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"

/* gcc only if-converts float selects (and so vectorises loops such as
 * cpu_expf's) without -ftrapping-math, and only vectorises sqrtf without
 * -fmath-errno; neither changes results (the backend never enables
 * floating-point traps or reads errno). fp-contract=fast lets the AVX2/AVX-512
 * variants use FMA (-std=c11 turns contraction off); like the variant choice,
 * that depends on the CPU only, never on the thread count. */
#pragma GCC optimize("no-trapping-math", "no-math-errno", "fp-contract=fast")

/** Rows per partial sum in row reductions; independent of the thread count. */
#define KF_CPU_ROW_CHUNK 64

/** Elements an op touches below which it runs on the calling thread alone
 *  (an OpenMP `if` clause): waking the workers, which sleep under the passive
 *  wait policy, costs more than such an op (decoding runs dozens of them per
 *  step on a few rows). Results are thread-count independent either way. */
#define KF_CPU_PAR_MIN ((int64_t)1 << 15)

/** Scratch slots owned by the backend (grown on demand, never shrunk). */
enum {
    CPU_SCRATCH_A,
    CPU_SCRATCH_B,
    CPU_SCRATCH_C,
    CPU_SCRATCH_D,
    CPU_SCRATCH_X16, /* 16-bit copies read as floats (cpu_input16) */
    CPU_SCRATCH_DY16,
    CPU_SCRATCH_W16,
    CPU_SCRATCH_Y16, /* the fp32 output an op writes only as a 16-bit copy */
    CPU_SCRATCH_GEMM_A,
    CPU_SCRATCH_GEMM_B,
    CPU_SCRATCH_GEMM_W, /* cpu_gemm_fixed's own */
    CPU_SCRATCH_N
};

typedef struct cpu_impl {
    float *scratch[CPU_SCRATCH_N];
    size_t scratch_len[CPU_SCRATCH_N];
    int64_t attn_pairs; /* (query, key) pairs scored by attention since creation */
    /* rope's cos/sin of positions 0..rope_npos-1 ([pos][D/2][2]) for head dim
     * rope_D and rope_base (cpu_rope.c): a position's factors depend on
     * nothing else, so every step reuses them */
    float *rope_cs;
    int64_t rope_npos, rope_D;
    float rope_base;
} cpu_impl;

/** Returns scratch slot `slot` with room for n floats (contents undefined). */
float *cpu_scratch(kf_backend *b, int slot, size_t n);

/** SIMD levels the CPU kernels dispatch on, lowest first. Each level has
 *  kernels built for its register file: AVX2 means AVX2 + FMA, AVX512 means
 *  AVX-512 F/VL/BW + FMA, VNNI adds vpdpbusd (the head's int8 screen). */
enum { CPU_SIMD_BASE = 0, CPU_SIMD_AVX2 = 1, CPU_SIMD_AVX512 = 2, CPU_SIMD_VNNI = 3 };

/** The level in use: the best this CPU has, or KF_CPU_ISA (base, avx2,
 *  avx512, vnni) when set, which may only lower it (a level the CPU lacks
 *  is a fatal error naming it). Read once, before any parallel use. */
int cpu_simd_level(void);

/** How many rows one AVX2 block of the decode-time linear layers
 *  (cpu_linear_packed.c) may hold: 12, the default (up to two sub-blocks
 *  of 6, read in chunks of the panel), or 6 (more rows in blocks of up to
 *  6, each over the whole panel), as KF_CPU_AVX2_BLOCK_ROWS=6|12 says (a
 *  fatal error otherwise). Every choice gives the same bits. Read once. */
int cpu_avx2_block_rows(void);

/** Whether a decode-time linear layer's row block of `rows` rows, making
 *  several passes over each panel (`multipass` nonzero) or one, over
 *  `wbytes`-byte weights (4, or 2 for bf16 panels), prefetches the next
 *  panel into L2 when it is the panel's only block (several always do:
 *  cpu_linear_packed.c, once a product, outside its panel loop). By the
 *  CPU, as measured on each (docs/decode_cpu.md): always on Intel (the Xeon ran
 *  chunks 0.6-0.9x as fast without it); never on AMD Zen 5 and later (a
 *  lone block took 0.79-0.93x the time without it); on other CPUs, Zen 3
 *  and 4 among them, for blocks that compute as long as they read: several
 *  passes (AVX2's chunks: 0.52-0.65x the time with it on Zen 4) or 3.5
 *  FLOPs a byte of weights or more (AVX-512, 7 fp32 rows or 4 bf16 ones:
 *  0.89-0.97x), not for one pass of fewer (1.08-1.23x).
 *  KF_CPU_LONE_AHEAD=0|1 forces it off or on for every block (a fatal
 *  error otherwise), read once, as is the CPU; kernels_cpu_set_lone_ahead
 *  sets it. Every choice gives the same bits. */
int cpu_lone_block_ahead(int rows, int multipass, int wbytes);

/** Whether the output layer's pack builds the int8 screen where the CPU
 *  can run it (cpu_head_screen.c): 1 unless KF_CPU_HEAD_SCREEN=0 (for A/B
 *  runs; a value other than 0 or 1 is a fatal error). Read at each call. */
int cpu_head_screen_on(void);

/** The fixed GEMM's epilogue (cpu_gemm_fixed.c) on 16 outputs of one row
 *  with AVX2 + FMA: c = va * s, or fma(vb, c, va * s) when beta is not 0
 *  (va, vb: alpha and beta broadcast). */
__attribute__((target("avx2,fma"))) static inline void
cpu_avx2_out16(float *c, __m256 s0, __m256 s1, __m256 va, __m256 vb, float beta) {
    __m256 v0 = _mm256_mul_ps(va, s0), v1 = _mm256_mul_ps(va, s1);
    if (beta != 0.0f) {
        v0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c), v0);
        v1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8), v1);
    }
    _mm256_storeu_ps(c, v0);
    _mm256_storeu_ps(c + 8, v1);
}

/** How far ahead of its loads a kernel streaming weights from memory
 *  prefetches them (_mm_prefetch, every line). The hardware prefetcher alone
 *  left a few-row product waiting on memory between its FMAs (8 rows
 *  streamed at half the read bandwidth, the output layer at 1 row at about
 *  60% of it). */
#define CPU_PREFETCH_BYTES 4096

/** CPU_MULTIVERSION(ret, name, params, args) defines `static ret name params`,
 *  which runs name##_body (a CPU_INLINE function) compiled for AVX-512 + FMA,
 *  AVX2 + FMA or the baseline, picked by cpu_simd_level(). The choice
 *  depends only on the level, never on the thread count. */
#define CPU_MULTIVERSION(ret, name, params, args)                                                  \
    __attribute__((target("avx512f,avx512vl,avx2,fma"))) static ret name##_avx512 params {         \
        return name##_body args;                                                                   \
    }                                                                                              \
    __attribute__((target("avx2,fma"))) static ret name##_avx2 params { return name##_body args; } \
    static ret name##_base params { return name##_body args; }                                     \
    static ret name params {                                                                       \
        int lvl_ = cpu_simd_level();                                                               \
        return lvl_ >= CPU_SIMD_AVX512 ? name##_avx512 args                                        \
               : lvl_ == CPU_SIMD_AVX2 ? name##_avx2 args                                          \
                                       : name##_base args;                                         \
    }

/** Kernel bodies and their helpers are inlined into each CPU_MULTIVERSION
 *  variant, or they would run as one baseline (SSE) copy. */
#define CPU_INLINE static inline __attribute__((always_inline))

/** exp(x) in fp32 that compilers vectorise (no libm call): 2^n * P(r) with
 *  n = round(x/ln2), Cephes' degree-6 polynomial, within 2 ulp of exp; 0 below
 *  -87 (where expf is denormal or 0). Arguments are clamped at 88 (callers
 *  pass x - max <= 0); NaN stays NaN. */
CPU_INLINE float cpu_expf(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } s = {.i = ((int32_t)n + 127) << 23};
    return x < -87.0f ? 0.0f : p * s.f;
}

/** exp(x) in float64 that compilers vectorise: 2^n * P(r) with n = round(x/ln2)
 *  (read from the rounding constant's low bits, so no double->int64 convert),
 *  r split in two parts of ln2, Taylor polynomial to degree 13; within 2 ulp
 *  of exp; 0 below -708, clamped at 709 (callers pass x - max <= 0). */
CPU_INLINE double cpu_exp(double x) {
    double xc = x < -708.0 ? -708.0 : x;
    xc = xc > 709.0 ? 709.0 : xc;
    union {
        double f;
        int64_t i;
    } nm = {.f = xc * 1.4426950408889634 + 6755399441055744.0};
    double n = nm.f - 6755399441055744.0;
    double r = xc - n * 6.93147180369123816490e-01;
    r = r - n * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r * r + r + 1.0;
    union {
        int64_t i;
        double f;
    } s = {.i = (nm.i - 0x4338000000000000LL + 1023) << 52};
    return x < -708.0 ? 0.0 : p * s.f;
}

/** Sums that must not depend on the SIMD level keep CPU_LANES partial sums,
 *  element i going to lane i % CPU_LANES, whatever the vector width (one
 *  AVX-512 register of floats, two of AVX2, ...), and fold the lanes in one
 *  fixed order. `#pragma omp simd reduction(+)` instead keeps one partial
 *  per hardware lane, so its result changes with the vector width. */
#define CPU_LANES 16

/** CPU_LANES floats (ints) as one value, and 8 floats: locals of these types
 *  can stay in registers where float arrays are often kept on the stack; load
 *  and store through memcpy (any alignment). GCC lowers a 16-float vector to
 *  AVX2 through the stack, so AVX2-level loops hold 8-float ones. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

/** The lanes' total: pairwise, (0+8, 1+9, ...), then halves again. */
CPU_INLINE float cpu_lanes_sumf(float *acc) {
    for (int w = CPU_LANES / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) acc[i] += acc[i + w];
    return acc[0];
}
CPU_INLINE double cpu_lanes_sum(double *acc) {
    for (int w = CPU_LANES / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) acc[i] += acc[i + w];
    return acc[0];
}

/** Rounds one float to bfloat16 (round to nearest even): the top 16 bits of
 *  the fp32 pattern. A NaN becomes the canonical 0x7fff, as the GPU's
 *  __float2bfloat16_rn gives (rounding its bits could carry it to inf). */
static inline float cpu_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fff0000u;
    else u = (u + 0x7fffu + (u >> 16 & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/** A NaN as the canonical 0x7fffffff (the CUDA backend's cu_fp16_value),
 *  any other x as it is: the C conversions keep a NaN's sign and payload,
 *  a GPU's do not. */
static inline float cpu_fp16_value(float x) {
    if (x == x) return x;
    uint32_t u = 0x7fffffffu;
    memcpy(&x, &u, 4);
    return x;
}

/** Rounds one float to IEEE half (round to nearest even), a NaN to
 *  cpu_fp16_value's. */
static inline float cpu_fp16(float x) { return cpu_fp16_value((float)(_Float16)x); }

/** Rounds one float to the 16-bit format of precision lowp (a kf_precision:
 *  IEEE half or bfloat16, round to nearest even); KF_PREC_FP32 returns x. */
static inline float cpu_lowp(float x, int lowp) {
    return lowp == KF_PREC_FP16 ? cpu_fp16(x) : lowp == KF_PREC_BF16 ? cpu_bf16(x) : x;
}

/** y[r * ld + i] = GELU(x[r * ld + i]) for r < rows, i < n on the calling
 *  thread (no parallel region: for an epilogue inside one), each element as
 *  gelu_fwd computes it. */
void cpu_gelu_serial(float *y, const float *x, int64_t rows, int64_t n, int64_t ld,
                     kf_gelu_kind kind);

/** dst[i] = cpu_lowp(src[i], lowp) for i < n (dst may equal src). */
void cpu_round_lowp_copy(float *dst, const float *src, int64_t n, int lowp);

/** dst = src as a 16-bit copy (kernels.h) in the format of lowp (fp16 or
 *  bf16): cpu_lowp's values, 2 bytes each. */
void cpu_to16(void *dst, const float *src, int64_t n, int lowp);

/** dst = the values of the 16-bit copy src (format lowp) as floats: exact. */
void cpu_from16(float *dst, const void *src, int64_t n, int lowp);

/** x, or when x16 is given its values as floats in scratch slot `slot`: an
 *  op's fp32 view of an input that may be a 16-bit copy. */
const float *cpu_input16(kf_backend *b, int slot, const float *x, const void *x16, int64_t n);

/** C[M,N] = alpha op(A) op(B) + beta C by the project's own packed kernel
 *  (cpu_gemm_fixed.c): each element one fma chain over k in order, so the
 *  same bits for any M, thread count and SIMD level. lowp (a kf_precision):
 *  A and B are rounded by cpu_lowp as they are packed (inputs are not
 *  modified). */
void cpu_gemm_fixed(kf_backend *b, float *C, const float *A, const float *B, int64_t M, int64_t N,
                    int64_t K, int trans_a, int trans_b, float alpha, float beta, int lowp);

/* ---- op implementations: cpu_NAME for every KF_BACKEND_OPS entry, filled
 * into the table by cpu_backend.c ---- */
#define CPU_OP_DECL(ret, name, params, args) ret cpu_##name params;
KF_BACKEND_OPS(CPU_OP_DECL)
#undef CPU_OP_DECL

#endif
