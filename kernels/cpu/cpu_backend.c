/* kernels/cpu/cpu_backend.c — the CPU reference backend's table, memory ops
 * and scratch buffers. The ops live in the other cpu_*.c files. */
#include "kernels/cpu/cpu_backend.h"

#include <cpuid.h>
#include <stdio.h>
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

/* bf16 rounding at the machine's vector width: decoding in bf16 rounds
 * every product's input and output and the attention's operands (8% of a
 * 124M K-Forcing step at SSE's four lanes) */
CPU_INLINE void round_bf16_body(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_bf16(src[i]);
}
CPU_MULTIVERSION(void, round_bf16, (float *dst, const float *src, int64_t n), (dst, src, n))

#define ROUND_CHUNK 4096

void cpu_round_lowp_copy(float *dst, const float *src, int64_t n, int lowp) {
    if (lowp == KF_PREC_BF16) {
        int64_t nc = (n + ROUND_CHUNK - 1) / ROUND_CHUNK;
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
        for (int64_t c = 0; c < nc; c++) {
            int64_t i0 = c * ROUND_CHUNK;
            round_bf16(dst + i0, src + i0, n - i0 < ROUND_CHUNK ? n - i0 : ROUND_CHUNK);
        }
        return;
    }
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_lowp(src[i], lowp);
}

void cpu_to16(void *dst, const float *src, int64_t n, int lowp) {
    uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        if (lowp == KF_PREC_BF16) {
            float v = cpu_bf16(src[i]);
            uint32_t u;
            memcpy(&u, &v, 4);
            d[i] = (uint16_t)(u >> 16);
        } else {
            /* a NaN as 0x7fff, as the CUDA backend stores it */
            _Float16 h = (_Float16)src[i];
            uint16_t u = 0x7fff;
            if (src[i] == src[i]) memcpy(&u, &h, 2);
            d[i] = u;
        }
    }
}

void cpu_from16(float *dst, const void *src, int64_t n, int lowp) {
    const uint16_t *s = src;
#pragma omp parallel for schedule(static) if (n >= KF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        if (lowp == KF_PREC_BF16) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, 4);
        } else {
            _Float16 h;
            memcpy(&h, &s[i], 2);
            dst[i] = cpu_fp16_value((float)h);
        }
    }
}

const float *cpu_input16(kf_backend *b, int slot, const float *x, const void *x16, int64_t n) {
    if (!x16) return x;
    KF_CHECK(b->precision != KF_PREC_FP32, "a 16-bit copy given in fp32 mode");
    float *t = cpu_scratch(b, slot, (size_t)n);
    cpu_from16(t, x16, n, b->precision);
    return t;
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

/* the environment variable's value, a or b, or dflt when it is unset */
static int env_either(const char *var, int a, int b, int dflt) {
    const char *want = getenv(var);
    if (!want || !*want) return dflt;
    char sa[16], sb[16];
    snprintf(sa, sizeof sa, "%d", a);
    snprintf(sb, sizeof sb, "%d", b);
    if (strcmp(want, sa) && strcmp(want, sb))
        KF_FATAL("%s=%s: expected %s or %s", var, want, sa, sb);
    return atoi(want);
}

/* Both first set by kernels_cpu_create, before any parallel use. */
int cpu_avx2_block_rows(void) {
    static int rows = 0;
    if (!rows) rows = env_either("KF_CPU_AVX2_BLOCK_ROWS", 6, 12, 12);
    return rows;
}

/* AMD's CPU family, base plus extended (cpuid leaf 1): 0x19 for Zen 3 and
 * Zen 4, 0x1a for Zen 5; 0 on other vendors */
static int amd_family(void) {
    unsigned a, b, c, d;
    if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned base = (a >> 8) & 0xF;
    return (int)(base == 0xF ? base + ((a >> 20) & 0xFF) : base);
}

/* Where a lone block prefetches the next panel, by what was measured on
 * each CPU (docs/decode_cpu.md, "A panel's only block"). NEVER and ALWAYS
 * are 0 and 1, so lone_names also names a forced KF_CPU_LONE_AHEAD. */
enum { LONE_NEVER, LONE_ALWAYS, LONE_BUSY };
static const char *const lone_names[] = {"never", "always",
                                         "blocks of several passes or 3.5+ FLOPs a weight byte"};
static int lone_forced = -1, lone_policy = -1;

static void lone_init(void) {
    if (lone_policy >= 0) return;
    lone_forced = env_either("KF_CPU_LONE_AHEAD", 0, 1, -1);
    lone_policy = __builtin_cpu_is("intel") ? LONE_ALWAYS
                  : amd_family() >= 0x1a    ? LONE_NEVER
                                            : LONE_BUSY;
}

int cpu_lone_block_ahead(int rows, int multipass, int wbytes) {
    lone_init();
    if (lone_forced >= 0) return lone_forced;
    /* 2 * rows / wbytes FLOPs a byte of weights against 3.5, Zen 4's one
     * thread: a 95-100 GFLOP/s GEMM over a 28-31 GB/s read */
    if (lone_policy == LONE_BUSY) return multipass || 4 * rows >= 7 * wbytes;
    return lone_policy == LONE_ALWAYS;
}

void kernels_cpu_set_lone_ahead(int on) {
    lone_init();
    lone_forced = on < 0 ? -1 : on != 0;
}

const char *kernels_cpu_lone_ahead_policy(void) {
    lone_init();
    return lone_forced >= 0 ? lone_names[lone_forced] : lone_names[lone_policy];
}

/* Read at every pack: a test packs with it off, then on, in one process. */
int cpu_head_screen_on(void) { return env_either("KF_CPU_HEAD_SCREEN", 0, 1, 1); }

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

void *cpu_alloc(kf_backend *b, size_t bytes) {
    /* 64-byte alignment for vector loads, huge pages for the weights the
     * kernels stream; calloc semantics as kernels.h promises. */
    return kf_alloc_stream(bytes, 1);
}

void cpu_free(kf_backend *b, void *p) { free(p); }

/* Host memory is the device's: upload, download and copy are one move. */
void cpu_copy(kf_backend *b, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}
void cpu_upload(kf_backend *b, void *dst, const void *src, size_t bytes) {
    cpu_copy(b, dst, src, bytes);
}
void cpu_download(kf_backend *b, void *dst, const void *src, size_t bytes) {
    cpu_copy(b, dst, src, bytes);
}

void cpu_zero(kf_backend *b, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}

void cpu_sync(kf_backend *b) {}

void cpu_set_precision(kf_backend *b, kf_precision p) { b->precision = p; }

/* No graphs: every op runs as it is called, so the caller calls them again. */
void cpu_graph_begin(kf_backend *b) {}
void *cpu_graph_end(kf_backend *b) { return NULL; }
void cpu_graph_launch(kf_backend *b, void *graph) {
    KF_FATAL("graph_launch: the cpu backend makes no graphs (graph_end returned NULL)");
}
void cpu_graph_free(kf_backend *b, void *graph) {}

void cpu_destroy(kf_backend *b) {
    cpu_impl *im = b->impl;
    for (int i = 0; i < CPU_SCRATCH_N; i++) free(im->scratch[i]);
    free(im->rope_cs);
    free(im);
    free(b);
}

/* Every op slot from the one op list: a missing cpu_NAME fails to link. */
static const kf_backend cpu_table = {
#define CPU_OP_SLOT(ret, name, params, args) .name = cpu_##name,
    KF_BACKEND_OPS(CPU_OP_SLOT)
#undef CPU_OP_SLOT
};

kf_backend *kernels_cpu_create(void) {
    cpu_simd_level();
    cpu_avx2_block_rows();
    lone_init();
    kf_backend *b = kf_calloc(1, sizeof *b);
    *b = cpu_table;
    b->name = "cpu";
    b->precision = KF_PREC_FP32;
    /* the project's fixed-order GEMM unless OpenBLAS is asked for (cpu_gemm.c) */
    const char *gemm = getenv("KF_CPU_GEMM");
    b->batch_invariant = !(gemm && !strcmp(gemm, "openblas"));
    b->impl = kf_calloc(1, sizeof(cpu_impl));
    return b;
}
