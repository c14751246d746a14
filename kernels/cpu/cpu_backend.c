/* kernels/cpu/cpu_backend.c — the CPU reference backend's table, memory ops
 * and scratch buffers. The ops live in the other cpu_*.c files. */
#include "kernels/cpu/cpu_backend.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

float *cpu_scratch(kf_backend *b, int slot, size_t n) {
    cpu_impl *im = b->impl;
    if (im->scratch_len[slot] < n) {
        free(im->scratch[slot]);
        im->scratch[slot] = kf_malloc(n * sizeof(float));
        im->scratch_len[slot] = n;
    }
    return im->scratch[slot];
}

void cpu_round_half_copy(float *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_half(src[i]);
}

static int cpu_best_level(void) {
    __builtin_cpu_init();
    int fma = __builtin_cpu_supports("fma");
    /* BW: the head's 512-bit int8 screen (every AVX-512 CPU with VL has it) */
    int avx512 = fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512bw");
    if (avx512 && __builtin_cpu_supports("avx512vnni")) return CPU_SIMD_VNNI;
    if (avx512) return CPU_SIMD_AVX512;
    return fma && __builtin_cpu_supports("avx2") ? CPU_SIMD_AVX2 : CPU_SIMD_BASE;
}

static const char *const simd_names[] = {"base", "avx2", "avx512", "vnni"};
static int simd_level = -1; /* first set by kernels_cpu_create, before any parallel use */

static int simd_parse(const char *name) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, simd_names[i])) return i;
    return -1;
}

int cpu_simd_level(void) {
    if (simd_level >= 0) return simd_level;
    int best = cpu_best_level();
    const char *want = getenv("KF_CPU_ISA");
    simd_level = best;
    if (want && *want) {
        int w = simd_parse(want);
        if (w < 0) KF_FATAL("KF_CPU_ISA=%s: expected base, avx2, avx512 or vnni", want);
        if (w > best) KF_FATAL("KF_CPU_ISA=%s: this CPU supports up to %s", want, simd_names[best]);
        simd_level = w;
    }
    return simd_level;
}

const char *kernels_cpu_isa(void) { return simd_names[cpu_simd_level()]; }

int kernels_cpu_set_isa(const char *name) {
    int w = simd_parse(name);
    if (w < 0 || w > cpu_best_level()) return -1;
    simd_level = w;
    return 0;
}

int64_t kernels_cpu_attn_pairs(kf_backend *b) {
    KF_CHECK(strcmp(b->name, "cpu") == 0, "kernels_cpu_attn_pairs needs the cpu backend");
    return ((cpu_impl *)b->impl)->attn_pairs;
}

static void *cpu_alloc(kf_backend *b, size_t bytes) {
    /* 64-byte alignment for vector loads; calloc semantics as kernels.h promises. */
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    KF_CHECK(p, "out of memory allocating %zu bytes on the cpu backend", bytes);
    memset(p, 0, n);
    return p;
}

static void cpu_free(kf_backend *b, void *p) { free(p); }

static void cpu_memcpy(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_zero(kf_backend *b, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}

static void cpu_sync(kf_backend *b) {}

static void cpu_set_precision(kf_backend *b, kf_precision p) { b->precision = p; }

static void cpu_destroy(kf_backend *b) {
    cpu_impl *im = b->impl;
    for (int i = 0; i < CPU_SCRATCH_N; i++) free(im->scratch[i]);
    free(im);
    free(b);
}

kf_backend *kernels_cpu_create(void) {
    cpu_simd_level();
    kf_backend *b = kf_calloc(1, sizeof *b);
    b->name = "cpu";
    b->precision = KF_PREC_FP32;
    /* the project's fixed-order GEMM unless OpenBLAS is asked for (cpu_gemm.c) */
    const char *gemm = getenv("KF_CPU_GEMM");
    b->batch_invariant = !(gemm && !strcmp(gemm, "openblas"));
    b->impl = kf_calloc(1, sizeof(cpu_impl));

    b->alloc = cpu_alloc;
    b->free = cpu_free;
    b->upload = cpu_memcpy;
    b->download = cpu_memcpy;
    b->copy = cpu_memcpy;
    b->zero = cpu_zero;
    b->sync = cpu_sync;
    b->set_precision = cpu_set_precision;
    b->destroy = cpu_destroy;

    b->matmul = cpu_matmul;
    b->matmul_batched = cpu_matmul_batched;
    b->add_bias = cpu_add_bias;
    b->bias_grad = cpu_bias_grad;
    b->layernorm_fwd = cpu_layernorm_fwd;
    b->layernorm_bwd = cpu_layernorm_bwd;
    b->rope_fwd = cpu_rope_fwd;
    b->rope_bwd = cpu_rope_bwd;
    b->attn_fwd = cpu_attn_fwd;
    b->attn_bwd = cpu_attn_bwd;
    b->attn_decode = cpu_attn_decode;
    b->gelu_fwd = cpu_gelu_fwd;
    b->gelu_bwd = cpu_gelu_bwd;
    b->add_inplace = cpu_add_inplace;
    b->scale = cpu_scale;
    b->fill_column = cpu_fill_column;
    b->round_half = cpu_round_half;
    b->gather_rows = cpu_gather_rows;
    b->scatter_rows = cpu_scatter_rows;
    b->embed_fwd = cpu_embed_fwd;
    b->embed_bwd = cpu_embed_bwd;
    b->noise_features = cpu_noise_features;
    b->xent = cpu_xent;
    b->argmax = cpu_argmax;
    b->head_pack = cpu_head_pack;
    b->head_free = cpu_head_free;
    b->head_fwd = cpu_head_fwd;
    b->sample_icdf = cpu_sample_icdf;
    b->icdf_bin = cpu_icdf_bin;
    b->freq_penalty = cpu_freq_penalty;
    b->sum = cpu_sum;
    b->sumsq = cpu_sumsq;
    b->count_nonfinite = cpu_count_nonfinite;
    b->adamw = cpu_adamw;
    b->ema = cpu_ema;
    return b;
}
