/* The decode-time linear layers of the CPU backend (linear_pack,
 * linear_packed_fwd): bitwise linear_act's results (the fixed-order GEMM's)
 * in fp32, fp16 and bf16 mode, with and without bias, GELU, the residual
 * beta and 16-bit input/output copies, on shapes around the 32-output panel
 * and row counts around every level's register block, and on a seeded
 * random draw of shapes (KF_TEST_SEED replays another); each row's result
 * the same alone as in the batch, with 1 and 2 threads, with a lone
 * block's next-panel prefetch off and on; the prefetch's default for this
 * CPU (its vendor and family read from /proc/cpuinfo); values against a
 * double-precision reference. tests/run.sh reruns it at AVX2 on CPUs above
 * (the chain, and so every bit, is the same at every level with FMA). */
#include <omp.h>

#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels_test_util.h"

static int same_bits(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* y = act(x W^T + bias) (+ y0 when beta) in double from the rounded
 * operands of mode prec (fp32: as given). */
static void ref(double *out, const float *x, const float *W, const float *bias, const float *y0,
                int64_t rows, int64_t in, int64_t n_out, kf_act act, float beta,
                kf_precision prec) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < n_out; o++) {
            double s = 0;
            for (int64_t k = 0; k < in; k++) {
                float a = x[r * in + k], w = W[o * in + k];
                if (prec == KF_PREC_BF16) a = tu_bf16(a), w = tu_bf16(w);
                if (prec == KF_PREC_FP16) a = tu_fp16(a), w = tu_fp16(w);
                s += (double)a * w;
            }
            if (beta != 0) s += y0[r * n_out + o];
            if (bias) s += bias[o];
            out[r * n_out + o] =
                act == KF_ACT_NONE
                    ? s
                    : tu_gelu(s, act == KF_ACT_GELU_ERF ? KF_GELU_ERF : KF_GELU_TANH);
        }
}

/* One case: packed against linear_act on the same arguments, row by row,
 * at 1 and 2 threads, and against the double reference. */
static void check_case(kf_backend *be, kf_precision prec, int64_t rows, int64_t in, int64_t n_out,
                       kf_act act, float beta, int with_bias, int io16) {
    char what[128];
    snprintf(what, sizeof what, "%s rows=%lld in=%lld out=%lld act=%d beta=%g bias=%d io16=%d",
             prec == KF_PREC_FP32   ? "fp32"
             : prec == KF_PREC_BF16 ? "bf16"
                                    : "fp16",
             (long long)rows, (long long)in, (long long)n_out, act, beta, with_bias, io16);
    be->set_precision(be, prec);
    int lowp = prec != KF_PREC_FP32;
    io16 = io16 && lowp;
    float *W = tu_randf(in * n_out, 1.0 / sqrt((double)in)), *x = tu_randf(rows * in, 2.0);
    float *bias = with_bias ? tu_randf(n_out, 0.5) : NULL, *y0 = tu_randf(rows * n_out, 1.0);
    uint16_t *w16 = lowp ? tu_to16(W, in * n_out, prec) : NULL;
    uint16_t *x16 = io16 ? tu_to16(x, rows * in, prec) : NULL;
    size_t ny = (size_t)(rows * n_out);
    float *ya = kf_malloc(ny * 4), *yb = kf_malloc(ny * 4), *pa = kf_malloc(ny * 4),
          *pb = kf_malloc(ny * 4), *y1 = kf_malloc(ny * 4);
    uint16_t *ha = kf_malloc(ny * 2), *hb = kf_malloc(ny * 2);
    memcpy(ya, y0, ny * 4);
    memcpy(yb, y0, ny * 4);
    const float *xin = io16 ? NULL : x;
    void *lin = be->linear_pack(be, W, w16, in, n_out);
    be->linear_act(be, ya, io16 ? ha : NULL, pa, xin, x16, W, bias, rows, in, n_out, act, beta,
                   w16);
    be->linear_packed_fwd(be, yb, io16 ? hb : NULL, pb, xin, x16, lin, bias, rows, act, beta);
    T_CHECK(same_bits(ya, yb, rows * n_out), "%s: y differs from linear_act's", what);
    if (act != KF_ACT_NONE)
        T_CHECK(same_bits(pa, pb, rows * n_out), "%s: pre differs from linear_act's", what);
    if (io16) T_CHECK(memcmp(ha, hb, ny * 2) == 0, "%s: y16 differs from linear_act's", what);
    /* each row alone */
    int alone = 1;
    for (int64_t r = 0; r < rows; r++) {
        memcpy(y1, y0 + r * n_out, (size_t)n_out * 4);
        be->linear_packed_fwd(be, y1, NULL, pb, xin ? x + r * in : NULL, x16 ? x16 + r * in : NULL,
                              lin, bias, 1, act, beta);
        alone &= same_bits(y1, yb + r * n_out, n_out);
    }
    T_CHECK(alone, "%s: a row alone differs from the row in the batch", what);
    /* thread counts */
    int nt = omp_get_max_threads();
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        memcpy(y1, y0, ny * 4);
        be->linear_packed_fwd(be, y1, NULL, pb, xin, x16, lin, bias, rows, act, beta);
        T_CHECK(same_bits(y1, yb, rows * n_out), "%s: %d threads differ", what, t);
    }
    omp_set_num_threads(nt);
    /* a lone block with and without the next panel's prefetch */
    for (int on = 0; on <= 1; on++) {
        kernels_cpu_set_lone_ahead(on);
        memcpy(y1, y0, ny * 4);
        be->linear_packed_fwd(be, y1, NULL, pb, xin, x16, lin, bias, rows, act, beta);
        T_CHECK(same_bits(y1, yb, rows * n_out), "%s: lone-block prefetch %s differs", what,
                on ? "on" : "off");
    }
    kernels_cpu_set_lone_ahead(-1);
    /* values (the fp32 output; rounding to 16 bits bounds a 16-bit mode) */
    double *R = kf_malloc(ny * sizeof(double));
    ref(R, x, W, bias, y0, rows, in, n_out, act, beta, prec);
    double bound = lowp ? (prec == KF_PREC_BF16 ? 1e-2 : 2e-3) : 1e-5;
    double e = tu_relerr(yb, R, rows * n_out, 1e-3);
    T_CHECK(e <= bound, "%s: relative error %.3g above %g", what, e, bound);
    be->linear_pack_free(be, lin);
    free(W), free(x), free(bias), free(y0), free(w16), free(x16);
    free(ya), free(yb), free(pa), free(pb), free(y1), free(ha), free(hb), free(R);
}

/* The lone-block prefetch's default as /proc/cpuinfo's vendor and family
 * say it should be (cpu_lone_block_ahead), NULL where the file lacks them */
static const char *lone_policy_want(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return NULL;
    char line[256], vendor[64] = "";
    int family = -1;
    while (fgets(line, sizeof line, f) && (!*vendor || family < 0)) {
        if (!strncmp(line, "vendor_id", 9)) sscanf(strchr(line, ':') + 1, "%63s", vendor);
        if (!strncmp(line, "cpu family", 10)) family = atoi(strchr(line, ':') + 1);
    }
    fclose(f);
    if (!*vendor || family < 0) return NULL;
    if (!strcmp(vendor, "GenuineIntel")) return "always";
    if (!strcmp(vendor, "AuthenticAMD") && family >= 26) return "never";
    return "blocks of several passes or 3.5+ FLOPs a weight byte";
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    printf("  level %s\n", kernels_cpu_isa());
    const char *forced = getenv("KF_CPU_LONE_AHEAD"), *want = lone_policy_want();
    if (want && !(forced && *forced))
        T_CHECK(!strcmp(kernels_cpu_lone_ahead_policy(), want),
                "the lone-block prefetch's default: got '%s', want '%s' for this CPU",
                kernels_cpu_lone_ahead_policy(), want);
    /* outputs around the panel of 32; rows across the register blocks and
     * their even splits (AVX-512 up to 8; AVX2 1-2 full panel, 3-12 in one
     * block of one or two sub-blocks over half a panel, read in chunks of
     * 32 k's (in: one chunk, a partial last one, several), from 13 blocks
     * of up to 6 over the whole panel, from 7 with KF_CPU_AVX2_BLOCK_ROWS=6
     * (tests/run.sh runs both); baseline 4), several panels (several
     * blocks each prefetching its share of the next) and a prefill's many
     * rows */
    const int64_t shapes[][3] = {{1, 5, 1},     {2, 7, 31},    {3, 32, 32},   {4, 65, 32},
                                 {5, 9, 40},    {6, 16, 64},   {7, 11, 20},   {7, 100, 96},
                                 {8, 33, 33},   {9, 64, 65},   {10, 95, 64},  {11, 31, 40},
                                 {12, 97, 33},  {13, 8, 48},   {17, 300, 96}, {70, 40, 50},
                                 {24, 129, 70}, {48, 200, 33}, {49, 130, 40}};
    const kf_precision precs[] = {KF_PREC_FP32, KF_PREC_BF16, KF_PREC_FP16};
    for (size_t p = 0; p < 3; p++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            int64_t rows = shapes[i][0], in = shapes[i][1], out = shapes[i][2];
            check_case(be, precs[p], rows, in, out, KF_ACT_NONE, 0.0f, i % 2, 0);
            check_case(be, precs[p], rows, in, out, KF_ACT_NONE, 1.0f, 1, 0);
            check_case(be, precs[p], rows, in, out, i % 2 ? KF_ACT_GELU_ERF : KF_ACT_GELU_TANH,
                       0.0f, 1, 1);
        }
    /* seeded random shapes (rows to 140, in to 400, out to 100): the
     * blocks, sub-blocks, chunks and panels in combinations no list above
     * names; KF_TEST_SEED=N replays another draw */
    const char *env = getenv("KF_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : 20261130u;
    printf("  random shapes: KF_TEST_SEED=%llu\n", (unsigned long long)seed);
    tu_state = seed ? seed : 1; /* xorshift's state must not be 0 */
    for (int i = 0; i < 12; i++) {
        int64_t rows = 1 + (int64_t)((tu_rand() + 1) * 70),
                in = 1 + (int64_t)((tu_rand() + 1) * 200),
                out = 1 + (int64_t)((tu_rand() + 1) * 50);
        check_case(be, precs[i % 3], rows, in, out, KF_ACT_NONE, i % 2 ? 1.0f : 0.0f, i % 2, 0);
    }
    /* a GPT-2-size layer at decoding's row counts, K past the GEMM's 256 block */
    check_case(be, KF_PREC_FP32, 8, 768, 2304, KF_ACT_NONE, 0.0f, 1, 0);
    check_case(be, KF_PREC_BF16, 4, 3072, 96, KF_ACT_NONE, 1.0f, 1, 0);
    /* packed in one precision, run in another: the reference path */
    {
        be->set_precision(be, KF_PREC_BF16);
        float *W = tu_randf(40 * 24, 0.3), *x = tu_randf(3 * 24, 1.0);
        float ya[120], yb[120];
        void *lin = be->linear_pack(be, W, NULL, 24, 40);
        be->set_precision(be, KF_PREC_FP32);
        be->linear_act(be, ya, NULL, NULL, x, NULL, W, NULL, 3, 24, 40, KF_ACT_NONE, 0.0f, NULL);
        be->linear_packed_fwd(be, yb, NULL, NULL, x, NULL, lin, NULL, 3, KF_ACT_NONE, 0.0f);
        T_CHECK(same_bits(ya, yb, 120), "packed in bf16, run in fp32: differs from linear_act");
        be->linear_pack_free(be, lin);
        free(W), free(x);
    }
    be->destroy(be);
    return T_DONE();
}
