/* bench/roofline/decode_limits.c — the CPU roofline of a decoding run (decode_limits.h). */
#include "bench/roofline/decode_limits.h"

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "trainer/infer/decode.h"

#define READ_BYTES ((size_t)512 << 20)
#define GEMM_N 512

/* The fastest streaming read a thread can issue at each SIMD level: the
 * level's widest loads into 4 independent sums and a software prefetch of
 * every line 4 KiB ahead, as the decode kernels stream their weights
 * (kernels/cpu/cpu_linear_packed.c). A plain loop of 16-byte loads left to
 * the hardware prefetcher reads about half as fast, and a roofline on it
 * let decoding "exceed" its limit. */
#define PF 4096
__attribute__((target("avx512f"))) static float read_avx512(const float *p, size_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        const char *c = (const char *)(p + i);
        for (int l = 0; l < 4; l++) _mm_prefetch(c + PF + 64 * l, _MM_HINT_T0);
        s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
__attribute__((target("avx2"))) static float read_avx2(const float *p, size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        const char *c = (const char *)(p + i);
        _mm_prefetch(c + PF, _MM_HINT_T0);
        _mm_prefetch(c + PF + 64, _MM_HINT_T0);
        s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
static float read_sse(const float *p, size_t n) {
    __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(p + i) + PF, _MM_HINT_T0);
        s0 = _mm_add_ps(s0, _mm_load_ps(p + i));
        s1 = _mm_add_ps(s1, _mm_load_ps(p + i + 4));
        s2 = _mm_add_ps(s2, _mm_load_ps(p + i + 8));
        s3 = _mm_add_ps(s3, _mm_load_ps(p + i + 12));
    }
    float t[4];
    _mm_storeu_ps(t, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
    return t[0] + t[1] + t[2] + t[3];
}

struct decode_read_probe {
    float *buf;
    size_t n;    /* floats */
    double sink; /* the reads' sums, kept so no read is optimised away */
};

decode_read_probe *decode_read_probe_create(void) {
    decode_read_probe *p = kf_malloc(sizeof *p);
    *p =
        (decode_read_probe){.buf = kf_alloc_stream(READ_BYTES, 0), .n = READ_BYTES / sizeof(float)};
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < p->n; i++) p->buf[i] = (float)(i & 1023);
    return p;
}

void decode_read_probe_free(decode_read_probe *p) {
    if (!p) return;
    free(p->buf);
    free(p);
}

double decode_read_probe_run(decode_read_probe *p, int threads, double (*now)(void)) {
    const char *isa = kernels_cpu_isa();
    int lvl = !strcmp(isa, "base") ? 0 : !strcmp(isa, "avx2") ? 1 : 2;
    const float *buf = p->buf;
    size_t n = p->n;
    double t0 = now(), s = 0;
#pragma omp parallel num_threads(threads) reduction(+ : s)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        size_t lines = n / 64, a = lines * t / nt * 64, e = lines * (t + 1) / nt * 64;
        s += lvl == 2 ? read_avx512(buf + a, e - a)
             : lvl    ? read_avx2(buf + a, e - a)
                      : read_sse(buf + a, e - a);
    }
    double dt = now() - t0;
    p->sink += s;
    return dt > 0 ? n * sizeof(float) / dt : 0;
}

void decode_limits_measure(kf_backend *b, decode_read_probe *probe, double (*now)(void),
                           const int *threads, int n, decode_limits *out) {
    for (int i = 0; i < n; i++) out[i] = (decode_limits){.threads = threads[i]};
    for (int rep = 0; rep < 5; rep++)
        for (int i = 0; i < n; i++) {
            double bw = decode_read_probe_run(probe, threads[i], now);
            if (bw > out[i].read_bw) out[i].read_bw = bw;
        }

    /* the products in fp32 at every precision: the packed kernels widen 16-bit
     * weights as they read them and accumulate in fp32, while the GEMM's
     * 16-bit modes also round their operands, a pass the kernels do once at
     * packing (bf16 at 512^3 measured 70 GFLOP/s against fp32's 134, and
     * bf16 decoding "exceeded" it) */
    kf_precision prec = b->precision;
    b->set_precision(b, KF_PREC_FP32);
    size_t m = (size_t)GEMM_N * GEMM_N * sizeof(float);
    float *A = b->alloc(b, m), *B = b->alloc(b, m), *C = b->alloc(b, m);
    float *h = kf_malloc(m);
    for (size_t i = 0; i < (size_t)GEMM_N * GEMM_N; i++) h[i] = (float)((i * 7919) % 1000) / 1000;
    b->upload(b, A, h, m);
    b->upload(b, B, h, m);
    free(h);
    /* A product takes milliseconds and the host's speed moves by up to 2x
     * over seconds, hence the best of 10, the counts in turns. */
    int nt = omp_get_max_threads();
    for (int rep = 0; rep < 10; rep++)
        for (int i = 0; i < n; i++) {
            omp_set_num_threads(threads[i]);
            double t0 = now();
            b->matmul(b, C, A, B, GEMM_N, GEMM_N, GEMM_N, 0, 1, 1.0f, 0.0f);
            b->sync(b);
            double dt = now() - t0, f = 2.0 * GEMM_N * GEMM_N * GEMM_N;
            if (dt > 0 && f / dt > out[i].gemm_flops) out[i].gemm_flops = f / dt;
        }
    omp_set_num_threads(nt);
    b->free(b, A);
    b->free(b, B);
    b->free(b, C);
    b->set_precision(b, prec);
}

/* The larger of a phase's reads and FLOPs at the limits; *read_bound says
 * whether the reads. */
static double phase_s(double bytes, double flops, const decode_limits *l, int *read_bound) {
    double tb = bytes / l->read_bw, tf = flops / l->gemm_flops;
    *read_bound = tb > tf;
    return tb > tf ? tb : tf;
}

/* One step's time at the limits: R rows through the blocks, O through the
 * last block's projection and MLP (model_decode_step runs them for the
 * output rows alone) and the output layer, each attending over its
 * sample's len cache rows; B samples' caches read. */
static double step_s(const model *m, int64_t R, int64_t O, int64_t len, int64_t B, double wbytes,
                     int screen, const decode_limits *l, int *read_bound) {
    double H = (double)m->cfg.hidden, V = (double)m->cfg.vocab, L = (double)m->cfg.blocks;
    double blk = 12 * H * H * L, post = 9 * H * H; /* a block's; the projection and MLP's */
    double bytes =
        wbytes * blk + (screen ? 1.0 : 4.0) * V * H + 4.0 * 2 * H * L * (double)len * (double)B;
    double flops = 2 * (double)R * (blk - post) + 2 * (double)O * post +
                   2 * (double)O * V * H * (screen ? 0.25 : 1.0) +
                   4 * (double)R * (double)len * H * L;
    return phase_s(bytes, flops, l, read_bound);
}

double decode_roofline_s(const model *m, int64_t B, int64_t P, int64_t N, int64_t k,
                         kf_precision prec, int screen, const decode_limits *l,
                         double *read_bound_s) {
    int ar = m->cfg.kind == MODEL_AR;
    double wbytes = prec == KF_PREC_FP32 ? 4.0 : 2.0, t = 0, tr = 0, H = (double)m->cfg.hidden;
    int mtp = m->cfg.head == HEAD_MTP; /* one noise row a step, of k_train values */
    double noise = (8 + 2 * (double)(mtp ? m->cfg.k_train : 1)) * H * H; /* its weights */
    int64_t n = 0, len = P, window = ar ? 1 : decode_noise_steps(B * (mtp ? 1 : k));
    for (int64_t s = 0; n < N; s++) {
        int rb;
        if (!ar && s % window == 0) { /* decode_run's noise pass for this window's rows */
            int64_t steps = (N - n + k - 1) / k < window ? (N - n + k - 1) / k : window;
            int64_t rows = (mtp ? steps : (N - n < window * k ? N - n : window * k)) * B;
            double tn = phase_s(wbytes * noise, 2 * (double)rows * noise, l, &rb);
            t += tn;
            tr += rb ? tn : 0;
        }
        int64_t emit = ar ? 1 : (N - n < k ? N - n : k);
        int64_t nctx = s == 0 ? P : (ar ? 1 : k), nz = ar ? 0 : emit;
        int64_t rows = (nctx + nz) * B, len_after = len + nctx + nz;
        double ts =
            step_s(m, rows, (ar ? 1 : emit) * B, len_after, B, wbytes, screen && !ar, l, &rb);
        t += ts;
        tr += rb ? ts : 0;
        len += nctx;
        n += emit;
    }
    if (read_bound_s) *read_bound_s = tr;
    return t;
}
