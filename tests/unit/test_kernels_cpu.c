/* CPU backend forward ops against naive references written here, plus the
 * properties the backend promises: the GEMM's fma-chain contract at every
 * SIMD level, OpenMP thread-count independence (bitwise), GEMM row (batch)
 * invariance, fp16 and bf16 rounding, the
 * inverse-CDF edge cases, a hand-computed AdamW example, and kernels_create.
 * Backward ops: test_kernels_cpu_grad.c; attention: test_kernels_cpu_attn.c. */
#include <omp.h>

#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels_test_util.h"

static void ref_matmul(double *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                       int ta, int tb, double alpha, double beta, const float *C0) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s +=
                    (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
            C[i * N + j] = alpha * s + beta * C0[i * N + j];
        }
}

static void check_matmul(kf_backend *be) {
    /* a padded tiny product, a row-split one and a column-split (wide) one */
    const int64_t shapes[][3] = {{13, 21, 17}, {70, 300, 64}, {20, 900, 64}};
    double err = 0;
    for (size_t sh = 0; sh < 3; sh++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
                float *A = tu_randf(M * K, 1), *B = tu_randf(K * N, 1), *C = tu_randf(M * N, 1);
                float *C0 = kf_malloc(M * N * 4);
                memcpy(C0, C, M * N * 4);
                double *R = kf_malloc(M * N * sizeof(double));
                be->matmul(be, C, A, B, M, N, K, ta, tb, 0.5f, 0.75f);
                ref_matmul(R, A, B, M, N, K, ta, tb, 0.5, 0.75, C0);
                double e = tu_relerr(C, R, M * N, 1e-3);
                err = e > err ? e : err;
                free(A);
                free(B);
                free(C);
                free(C0);
                free(R);
            }
    TU_ERR("matmul (3 shapes x 4 transpose cases, alpha, beta)", err, 1e-5);

    const int64_t M = 13, N = 21, K = 17;
    /* batched with strides, including a shared (stride 0) B */
    const int64_t nb = 3;
    float *A = tu_randf(nb * M * K, 1), *B = tu_randf(K * N, 1), *C = kf_calloc(nb * M * N + 5, 4);
    be->matmul_batched(be, C, A, B, M, N, K, 0, 1, 1.0f, 0.0f, nb, M * N + 2, M * K, 0);
    err = 0;
    for (int64_t i = 0; i < nb; i++) {
        double *R = kf_malloc(M * N * sizeof(double));
        float *zero = kf_calloc(M * N, 4);
        ref_matmul(R, A + i * M * K, B, M, N, K, 0, 1, 1, 0, zero);
        double e = tu_relerr(C + i * (M * N + 2), R, M * N, 1e-3);
        err = e > err ? e : err;
        free(R);
        free(zero);
    }
    TU_ERR("matmul_batched (strides, shared B)", err, 1e-5);
    float e[4] = {1.0f, NAN, 2.0f, 3.0f};
    be->matmul(be, e, A, B, 1, 2, 0, 0, 0, 1.0f, 0.0f);
    be->matmul(be, e + 2, A, B, 1, 2, 0, 1, 1, 1.0f, 0.5f);
    T_NEAR(e[0], 0.0f, 0, "matmul with K = 0 gives beta*C");
    T_NEAR(e[1], 0.0f, 0, "matmul with K = 0 gives beta*C");
    T_NEAR(e[2], 1.0f, 0, "matmul with K = 0 gives beta*C");
    T_NEAR(e[3], 1.5f, 0, "matmul with K = 0 gives beta*C");
    free(A);
    free(B);
    free(C);
}

/* Row r of C must not depend on how many rows the product has (batch
 * invariance), and results must not depend on the thread count.
 * Shapes: the tiny/124M model's GEMMs and their transposes. */
static void check_gemm_invariance(kf_backend *be) {
    const int64_t NK[][2] = {{384, 128},  {128, 128}, {512, 128}, {128, 512},
                             {2304, 768}, {64, 32},   {16, 8}};
    int rows_ok = 1;
    for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int64_t N = NK[s][0], K = NK[s][1], BIG = 80;
                float *A = tu_randf(BIG * K, 1), *B = tu_randf(K * N, 1);
                float *C = kf_calloc(BIG * N, 4), *C1 = kf_calloc(BIG * N, 4),
                      *As = kf_malloc(BIG * K * 4);
                be->matmul(be, C, A, B, BIG, N, K, ta, tb, 1.0f, 0.0f);
                for (int64_t M = 1; M < BIG; M += (M < 8 ? 1 : 7)) {
                    /* first M rows of op(A): for trans_a copy the first M columns of [K, BIG] */
                    for (int64_t k = 0; k < K; k++)
                        for (int64_t i = 0; i < M; i++)
                            As[ta ? k * M + i : i * K + k] = ta ? A[k * BIG + i] : A[i * K + k];
                    be->matmul(be, C1, As, B, M, N, K, ta, tb, 1.0f, 0.0f);
                    if (memcmp(C, C1, (size_t)(M * N) * 4)) {
                        rows_ok = 0;
                        fprintf(stderr, "rows differ: M=%lld N=%lld K=%lld ta=%d tb=%d\n",
                                (long long)M, (long long)N, (long long)K, ta, tb);
                    }
                }
                free(A);
                free(B);
                free(C);
                free(C1);
                free(As);
            }
    T_CHECK(rows_ok, "matmul rows depend on the number of rows (batch invariance)");

    /* OpenMP threads split C into tiles, never K: 1, 2 and 3 must agree bitwise */
    const int64_t shapes[][3] = {{4096, 384, 128}, {128, 512, 4096}, {300, 5000, 128},
                                 {16, 5000, 128},  {5, 384, 128},    {64, 64, 64},
                                 {700, 16, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                float *A = tu_randf(M * K, 1), *B = tu_randf(K * N, 1), *C[3];
                for (int t = 0; t < 3; t++) {
                    C[t] = tu_randf(M * N, 1);
                    if (t) memcpy(C[t], C[0], (size_t)(M * N) * 4);
                }
                for (int t = 0; t < 3; t++) {
                    omp_set_num_threads(t + 1);
                    be->matmul(be, C[t], A, B, M, N, K, ta, tb, 1.0f, 0.5f);
                }
                omp_set_num_threads(2);
                for (int t = 1; t < 3; t++)
                    T_CHECK(!memcmp(C[0], C[t], (size_t)(M * N) * 4),
                            "matmul %lldx%lldx%lld ta=%d tb=%d: %d threads differ from 1",
                            (long long)M, (long long)N, (long long)K, ta, tb, t + 1);
                free(A);
                free(B);
                free(C[0]);
                free(C[1]);
                free(C[2]);
            }
}

/* The GEMM's contract, bit for bit at every SIMD level this CPU has: each
 * element one fma chain over k in order from +0, then alpha*s (beta = 0,
 * C not read) or fma(beta, C, alpha*s). Shapes cover edge tiles, one and
 * several K blocks, and every transpose. */
static void check_gemm_exact(kf_backend *be) {
    const int64_t shapes[][3] = {{1, 1, 1},      {13, 21, 17},  {8, 32, 256},  {9, 33, 257},
                                 {70, 100, 600}, {3, 70, 1000}, {20, 300, 300}};
    const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 0.75f}, {-1.5f, 1.0f}};
    const char *levels[] = {"base", "avx2", "avx512", "vnni"};
    char native[16];
    snprintf(native, sizeof native, "%s", kernels_cpu_isa());
    int n_levels = 0;
    for (int l = 0; l < 4; l++) {
        if (kernels_cpu_set_isa(levels[l])) continue;
        n_levels++;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int t = 0; t < 4; t++) {
                int ta = t & 1, tb = t >> 1;
                const float alpha = ab[(s + t) % 3][0], beta = ab[(s + t) % 3][1];
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                float *A = tu_randf(M * K, 1), *B = tu_randf(K * N, 1), *C = tu_randf(M * N, 1);
                float *want = kf_malloc(M * N * 4);
                if (beta == 0.0f)
                    for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* must not be read */
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        float acc = 0.0f;
                        for (int64_t k = 0; k < K; k++)
                            acc = fmaf(ta ? A[k * M + i] : A[i * K + k],
                                       tb ? B[j * K + k] : B[k * N + j], acc);
                        want[i * N + j] =
                            beta == 0.0f ? alpha * acc : fmaf(beta, C[i * N + j], alpha * acc);
                    }
                be->matmul(be, C, A, B, M, N, K, ta, tb, alpha, beta);
                int64_t bad = -1;
                for (int64_t i = 0; i < M * N && bad < 0; i++)
                    if (memcmp(&C[i], &want[i], 4)) bad = i;
                T_CHECK(
                    bad < 0,
                    "%s gemm %lldx%lldx%lld ta=%d tb=%d: C[%lld] = %.9g, want %.9g (the fma chain)",
                    levels[l], (long long)M, (long long)N, (long long)K, ta, tb, (long long)bad,
                    bad < 0 ? 0.0 : C[bad], bad < 0 ? 0.0 : want[bad]);
                free(A);
                free(B);
                free(C);
                free(want);
            }
    }
    T_EQ_INT(kernels_cpu_set_isa(native), 0, "cannot return to the native level %s", native);
    T_CHECK(n_levels >= 2,
            "gemm checked at %d SIMD levels, want at least base and one vector level", n_levels);
    printf("  gemm fma-chain contract checked at %d SIMD levels (native %s)\n", n_levels, native);
}

/* KF_CPU_GEMM=openblas's path (batch_invariant = 0): right within rounding. */
static void check_openblas_matmul(kf_backend *be) {
    be->batch_invariant = 0;
    check_matmul(be);
    be->batch_invariant = 1;
}

/* A 16-bit GEMM is the fp32 GEMM of the rounded operands, rounded; it never
 * writes its inputs; round_lowp matches the reference at the edges. */
static void check_lowp_matmul(kf_backend *be, kf_precision prec, float (*rnd)(float)) {
    const char *name = kernels_precision_name(prec);
    const int64_t M = 33, N = 20, K = 70;
    float *A = tu_randf(M * K, 3), *B = tu_randf(K * N, 3), *C16 = tu_randf(M * N, 1),
          *C32 = kf_malloc(M * N * 4);
    float *A0 = kf_malloc(M * K * 4), *Ah = kf_malloc(M * K * 4), *Bh = kf_malloc(K * N * 4);
    memcpy(C32, C16, M * N * 4);
    memcpy(A0, A, M * K * 4);
    for (int64_t i = 0; i < M * K; i++) Ah[i] = rnd(A[i]);
    for (int64_t i = 0; i < K * N; i++) Bh[i] = rnd(B[i]);
    be->set_precision(be, prec);
    T_EQ_INT(be->precision, prec, "set_precision(%s) recorded", name);
    be->matmul(be, C16, A, B, M, N, K, 0, 0, 1.0f, 0.5f);
    be->set_precision(be, KF_PREC_FP32);
    be->matmul(be, C32, Ah, Bh, M, N, K, 0, 0, 1.0f, 0.5f);
    for (int64_t i = 0; i < M * N; i++) C32[i] = rnd(C32[i]);
    T_CHECK(memcmp(C16, C32, M * N * 4) == 0, "%s matmul != %s(fp32 matmul(%s A, %s B))", name,
            name, name, name);
    T_CHECK(memcmp(A, A0, M * K * 4) == 0, "%s matmul modified its input", name);
    int64_t inexact = 0;
    for (int64_t i = 0; i < M * N; i++) inexact += rnd(C16[i]) != C16[i];
    T_EQ_INT(inexact, 0, "%s matmul outputs not representable in %s", name, name);
    /* ties either way, overflow (IEEE: at max + half an ulp), subnormals */
    float x[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 2048, 65519.0f,
                 65520.0f,          3.3961776e38f,     3.40282347e38f,     1e-40f,
                 -2.9e-8f,          70000.0f,          -3.14159f,          -NAN};
    enum { NX = sizeof x / sizeof *x };
    float want[NX], orig[NX];
    memcpy(orig, x, sizeof x);
    for (int i = 0; i < NX; i++) want[i] = rnd(x[i]);
    be->round_lowp(be, x, NX);
    T_CHECK(memcmp(x, orig, sizeof x) == 0, "round_lowp in fp32 mode changed x");
    be->set_precision(be, prec);
    be->round_lowp(be, x, NX);
    be->set_precision(be, KF_PREC_FP32);
    for (int i = 0; i < NX - 1; i++)
        T_CHECK(x[i] == want[i], "round_lowp %s(%.9g): got %.9g, want %.9g", name, orig[i], x[i],
                want[i]);
    T_CHECK(isnan(x[NX - 1]), "round_lowp %s(NaN): got %g, want NaN", name, x[NX - 1]);
    /* a NaN, whatever its sign and payload, as the GPU gives it: 16-bit
     * 0x7fff, widened as the CUDA backend widens it */
    uint32_t nan_bits;
    memcpy(&nan_bits, &x[NX - 1], 4);
    uint32_t nan_want = prec == KF_PREC_FP16 ? 0x7fffffffu : 0x7fff0000u;
    T_EQ_INT(nan_bits, nan_want, "round_lowp %s(-NaN): got 0x%08x, want 0x%08x", name, nan_bits,
             nan_want);
    uint16_t nan16 = 0;
    be->set_precision(be, prec);
    be->copy_to16(be, &nan16, &orig[NX - 1], 1);
    be->set_precision(be, KF_PREC_FP32);
    T_EQ_INT(nan16, 0x7fff, "copy_to16 %s(-NaN): got 0x%04x, want 0x7fff", name, nan16);
    free(A);
    free(B);
    free(C16);
    free(C32);
    free(A0);
    free(Ah);
    free(Bh);
}

/* Values worked out by hand, so the bf16 reference itself is checked. */
static void check_bf16_known(kf_backend *be) {
    float x[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 70000.0f, 3.3961776e38f, 1e-40f, -3.14159f};
    const uint32_t want[] = {0x3f800000u, 0x3f820000u, 0x47890000u,
                             0x7f800000u, 0x00010000u, 0xc0490000u};
    be->set_precision(be, KF_PREC_BF16);
    be->round_lowp(be, x, 6);
    be->set_precision(be, KF_PREC_FP32);
    for (int i = 0; i < 6; i++) {
        uint32_t got;
        memcpy(&got, &x[i], 4);
        T_EQ_INT(got, want[i], "round_lowp bf16 [%d]: got 0x%08x, want 0x%08x", i, got, want[i]);
        T_CHECK(tu_bf16(x[i]) == x[i], "tu_bf16 does not fix the bf16 value 0x%08x", want[i]);
    }
}

/* GELU's derivative in double (tanh form, or erf); GELU itself is tu_gelu. */
static double ref_gelu_grad(double v, int erf_kind) {
    if (erf_kind) return 0.5 * (1 + erf(v / sqrt(2.0))) + v * exp(-0.5 * v * v) / sqrt(2 * M_PI);
    double c = sqrt(2 / M_PI), t = tanh(c * (v + 0.044715 * v * v * v));
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
}

/* linear_act and linear_act_dgrad against double references: y = act(x W^T
 * + b) with pre kept; dpre = act'(pre) * (dy W) and dbias += its column sums.
 * 150 rows: the bias sums span three row chunks. */
static void check_linear_act(kf_backend *be) {
    const int64_t R = 150, in = 37, out = 29;
    float *x = tu_randf(R * in, 1), *w = tu_randf(out * in, 1), *bias = tu_randf(out, 1);
    float *y = kf_malloc(R * out * 4), *pre = kf_malloc(R * out * 4);
    float *dy = tu_randf(R * out, 1), *xp = tu_randf(R * in, 2), *dpre = kf_malloc(R * in * 4);
    float *db = tu_randf(in, 1), *db0 = kf_malloc(in * 4);
    double *ry = kf_malloc(R * out * 8), *rpre = kf_malloc(R * out * 8);
    double *rd = kf_malloc(R * in * 8), *rdb = kf_malloc(in * 8);
    for (int act = KF_ACT_NONE; act <= KF_ACT_GELU_ERF; act++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            int erf_kind = act == KF_ACT_GELU_ERF;
            be->linear_act(be, y, NULL, act ? pre : NULL, x, NULL, w, with_bias ? bias : NULL, R,
                           in, out, (kf_act)act, 0.0f, NULL);
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < out; c++) {
                    double s = with_bias ? bias[c] : 0;
                    for (int64_t k = 0; k < in; k++) s += (double)x[r * in + k] * w[c * in + k];
                    rpre[r * out + c] = s;
                    ry[r * out + c] = act ? tu_gelu(s, erf_kind ? KF_GELU_ERF : KF_GELU_TANH) : s;
                }
            char what[96];
            snprintf(what, sizeof what, "linear_act act=%d%s: y", act, with_bias ? " bias" : "");
            TU_ERR(what, tu_relerr(y, ry, R * out, 1e-3), 1e-5);
            if (act) {
                snprintf(what, sizeof what, "linear_act act=%d%s: pre", act,
                         with_bias ? " bias" : "");
                TU_ERR(what, tu_relerr(pre, rpre, R * out, 1e-3), 1e-5);
            }
            memcpy(db0, db, in * 4);
            be->linear_act_dgrad(be, dpre, NULL, with_bias ? db : NULL, dy, w, xp, R, in, out,
                                 (kf_act)act, NULL, NULL);
            for (int64_t c = 0; c < in; c++) rdb[c] = db0[c];
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < in; c++) {
                    double s = 0;
                    for (int64_t k = 0; k < out; k++) s += (double)dy[r * out + k] * w[k * in + c];
                    if (act) s *= ref_gelu_grad(xp[r * in + c], erf_kind);
                    rd[r * in + c] = s;
                    rdb[c] += s;
                }
            snprintf(what, sizeof what, "linear_act_dgrad act=%d%s: dpre", act,
                     with_bias ? " dbias" : "");
            TU_ERR(what, tu_relerr(dpre, rd, R * in, 1e-3), 1e-5);
            if (with_bias) {
                snprintf(what, sizeof what, "linear_act_dgrad act=%d: dbias", act);
                TU_ERR(what, tu_relerr(db, rdb, in, 1e-3), 1e-5);
            } else {
                T_CHECK(!memcmp(db, db0, in * 4),
                        "linear_act_dgrad act=%d: dbias NULL, yet the "
                        "bias gradient changed",
                        act);
            }
        }
    free(x), free(w), free(bias), free(y), free(pre), free(dy), free(xp), free(dpre), free(db);
    free(db0), free(ry), free(rpre), free(rd), free(rdb);
}

/* linear_bwd in fp32 against double references (dw += dy^T x, dbias += the
 * column sums of dy, dx = dy W + beta dx), and in every precision bitwise
 * against the separate ops kernels.h says it equals (matmul, bias_grad,
 * matmul). 150 rows: the bias sums span three row chunks. */
static void check_linear_bwd(kf_backend *be) {
    const int64_t R = 150, in = 37, out = 29;
    float *dy = tu_randf(R * out, 1), *x = tu_randf(R * in, 1), *w = tu_randf(out * in, 1);
    float *dw0 = tu_randf(out * in, 1), *db0 = tu_randf(out, 1), *dx0 = tu_randf(R * in, 1);
    float *dw = kf_malloc(out * in * 4), *db = kf_malloc(out * 4), *dx = kf_malloc(R * in * 4);
    float *dw2 = kf_malloc(out * in * 4), *db2 = kf_malloc(out * 4), *dx2 = kf_malloc(R * in * 4);
    double *rdw = kf_malloc(out * in * 8), *rdb = kf_malloc(out * 8), *rdx = kf_malloc(R * in * 8);
    for (int prec = KF_PREC_FP32; prec <= KF_PREC_BF16; prec++)
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int dx_mode = 0; dx_mode < 3; dx_mode++) { /* none, beta 0, beta 1 */
                float beta = dx_mode == 2 ? 1.0f : 0.0f;
                be->set_precision(be, (kf_precision)prec);
                memcpy(dw, dw0, out * in * 4), memcpy(db, db0, out * 4),
                    memcpy(dx, dx0, R * in * 4);
                memcpy(dw2, dw0, out * in * 4), memcpy(db2, db0, out * 4);
                memcpy(dx2, dx0, R * in * 4);
                be->linear_bwd(be, dx_mode ? dx : NULL, dw, with_bias ? db : NULL, dy, NULL, x,
                               NULL, w, R, in, out, beta, NULL, NULL);
                be->matmul(be, dw2, dy, x, out, in, R, 1, 0, 1.0f, 1.0f);
                if (with_bias) be->bias_grad(be, db2, dy, R, out);
                if (dx_mode) be->matmul(be, dx2, dy, w, R, in, out, 0, 0, 1.0f, beta);
                be->set_precision(be, KF_PREC_FP32);
                char what[96];
                snprintf(what, sizeof what, "linear_bwd %s%s dx_mode=%d",
                         kernels_precision_name((kf_precision)prec), with_bias ? " dbias" : "",
                         dx_mode);
                T_CHECK(!memcmp(dw, dw2, out * in * 4), "%s: dw differs from the separate ops",
                        what);
                T_CHECK(!memcmp(db, db2, out * 4), "%s: dbias differs from the separate ops", what);
                T_CHECK(!memcmp(dx, dx2, R * in * 4), "%s: dx differs from the separate ops", what);
                if (prec != KF_PREC_FP32) continue;
                for (int64_t o = 0; o < out; o++) {
                    rdb[o] = db0[o];
                    for (int64_t i = 0; i < in; i++) {
                        double s = dw0[o * in + i];
                        for (int64_t r = 0; r < R; r++)
                            s += (double)dy[r * out + o] * x[r * in + i];
                        rdw[o * in + i] = s;
                    }
                    for (int64_t r = 0; r < R; r++) rdb[o] += dy[r * out + o];
                }
                for (int64_t r = 0; r < R; r++)
                    for (int64_t i = 0; i < in; i++) {
                        double s = beta * dx0[r * in + i];
                        for (int64_t o = 0; o < out; o++)
                            s += (double)dy[r * out + o] * w[o * in + i];
                        rdx[r * in + i] = s;
                    }
                char part[128];
                snprintf(part, sizeof part, "%s: dw", what);
                TU_ERR(part, tu_relerr(dw, rdw, out * in, 1e-3), 1e-5);
                if (with_bias) {
                    snprintf(part, sizeof part, "%s: dbias", what);
                    TU_ERR(part, tu_relerr(db, rdb, out, 1e-3), 1e-5);
                } else {
                    T_CHECK(!memcmp(db, db0, out * 4), "%s: dbias NULL, yet it changed", what);
                }
                if (dx_mode) {
                    snprintf(part, sizeof part, "%s: dx", what);
                    TU_ERR(part, tu_relerr(dx, rdx, R * in, 1e-3), 1e-5);
                } else {
                    T_CHECK(!memcmp(dx, dx0, R * in * 4), "%s: dx NULL, yet it changed", what);
                }
            }
    free(dy), free(x), free(w), free(dw0), free(db0), free(dx0), free(dw), free(db), free(dx);
    free(dw2), free(db2), free(dx2), free(rdw), free(rdb), free(rdx);
}

/* 16-bit copies (kernels.h) in fp16 and bf16: layernorm_fwd's, linear_act's
 * and linear_act_dgrad's hold their fp32 outputs rounded (tu_to16), with or
 * without those outputs; linear_act (also adding to y, beta 1) and
 * linear_bwd and linear_act_dgrad reading x16 = tu_to16(x) or dy16 =
 * tu_to16(dy) give bitwise their results on x, dy; layernorm_bwd's dx16
 * holds its accumulated dx rounded. */
static void check_copies16(kf_backend *be) {
    const int64_t R = 150, in = 37, out = 29;
    float *x = tu_randf(R * in, 2), *lw = tu_randf(in, 1), *w = tu_randf(out * in, 1);
    float *bias = tu_randf(out, 1), *dy = tu_randf(R * out, 1), *y0 = tu_randf(R * out, 1);
    float *ln = kf_malloc(R * in * 4), *mean = kf_malloc(R * 4), *rstd = kf_malloc(R * 4);
    float *y = kf_malloc(R * out * 4), *y2 = kf_malloc(R * out * 4), *pre = kf_malloc(R * out * 4);
    float *dw = kf_malloc(out * in * 4), *dw2 = kf_malloc(out * in * 4), *db = kf_malloc(out * 4);
    float *db2 = kf_malloc(out * 4), *dx = kf_malloc(R * in * 4), *dx2 = kf_malloc(R * in * 4);
    float *dbi = kf_malloc(in * 4), *dbi2 = kf_malloc(in * 4);
    uint16_t *c16 = kf_malloc(R * in * 2), *c16b = kf_malloc(R * in * 2);
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++) {
        const char *pn = kernels_precision_name((kf_precision)prec);
        be->set_precision(be, (kf_precision)prec);
        uint16_t *x16 = tu_to16(x, R * in, (kf_precision)prec);
        be->layernorm_fwd(be, ln, c16, mean, rstd, x, lw, NULL, R, in, 1e-5f);
        be->layernorm_fwd(be, NULL, c16b, mean, rstd, x, lw, NULL, R, in, 1e-5f);
        uint16_t *want = tu_to16(ln, R * in, (kf_precision)prec);
        T_CHECK(!memcmp(c16, want, R * in * 2), "layernorm_fwd %s: y16 is not y rounded", pn);
        T_CHECK(!memcmp(c16b, want, R * in * 2), "layernorm_fwd %s: y16 without y differs", pn);
        free(want);
        for (int act = KF_ACT_NONE; act <= KF_ACT_GELU_TANH; act++) {
            be->linear_act(be, y, c16, act ? pre : NULL, NULL, x16, w, bias, R, in, out,
                           (kf_act)act, 0.0f, NULL);
            be->linear_act(be, NULL, c16b, act ? pre : NULL, NULL, x16, w, bias, R, in, out,
                           (kf_act)act, 0.0f, NULL);
            be->linear_act(be, y2, NULL, act ? pre : NULL, x, NULL, w, bias, R, in, out,
                           (kf_act)act, 0.0f, NULL);
            T_CHECK(!memcmp(y, y2, R * out * 4), "linear_act %s act=%d: x16 differs from x", pn,
                    act);
            want = tu_to16(y, R * out, (kf_precision)prec);
            T_CHECK(!memcmp(c16, want, R * out * 2), "linear_act %s act=%d: y16 is not y rounded",
                    pn, act);
            T_CHECK(!memcmp(c16b, want, R * out * 2), "linear_act %s act=%d: y16 without y differs",
                    pn, act);
            free(want);
        }
        memcpy(y, y0, R * out * 4), memcpy(y2, y0, R * out * 4);
        be->linear_act(be, y, NULL, NULL, NULL, x16, w, bias, R, in, out, KF_ACT_NONE, 1.0f, NULL);
        be->linear_act(be, y2, NULL, NULL, x, NULL, w, bias, R, in, out, KF_ACT_NONE, 1.0f, NULL);
        T_CHECK(!memcmp(y, y2, R * out * 4), "linear_act %s beta 1: x16 differs from x", pn);
        memset(dw, 0, out * in * 4), memset(dw2, 0, out * in * 4);
        memset(db, 0, out * 4), memset(db2, 0, out * 4);
        be->linear_bwd(be, dx, dw, db, dy, NULL, NULL, x16, w, R, in, out, 0.0f, NULL, NULL);
        be->linear_bwd(be, dx2, dw2, db2, dy, NULL, x, NULL, w, R, in, out, 0.0f, NULL, NULL);
        T_CHECK(!memcmp(dw, dw2, out * in * 4), "linear_bwd %s: dw with x16 differs from x", pn);
        T_CHECK(!memcmp(db, db2, out * 4), "linear_bwd %s: dbias with x16 differs from x", pn);
        T_CHECK(!memcmp(dx, dx2, R * in * 4), "linear_bwd %s: dx with x16 differs from x", pn);
        /* dy16 = tu_to16(dy) in place of dy (no bias gradient) */
        uint16_t *dy16 = tu_to16(dy, R * out, (kf_precision)prec);
        memset(dw, 0, out * in * 4), memset(dw2, 0, out * in * 4);
        be->linear_bwd(be, dx, dw, NULL, NULL, dy16, x, NULL, w, R, in, out, 0.0f, NULL, NULL);
        be->linear_bwd(be, dx2, dw2, NULL, dy, NULL, x, NULL, w, R, in, out, 0.0f, NULL, NULL);
        T_CHECK(!memcmp(dw, dw2, out * in * 4), "linear_bwd %s: dw with dy16 differs from dy", pn);
        T_CHECK(!memcmp(dx, dx2, R * in * 4), "linear_bwd %s: dx with dy16 differs from dy", pn);
        free(dy16);
        /* linear_act_dgrad writing dpre16: dy [R, out] back through W to [R, in] */
        memset(dbi, 0, in * 4), memset(dbi2, 0, in * 4);
        be->linear_act_dgrad(be, dx, c16, dbi, y0, w, x, R, in, out, KF_ACT_GELU_TANH, NULL, NULL);
        be->linear_act_dgrad(be, NULL, c16b, dbi2, y0, w, x, R, in, out, KF_ACT_GELU_TANH, NULL,
                             NULL);
        want = tu_to16(dx, R * in, (kf_precision)prec);
        T_CHECK(!memcmp(c16, want, R * in * 2), "linear_act_dgrad %s: dpre16 is not dpre rounded",
                pn);
        T_CHECK(!memcmp(c16b, want, R * in * 2), "linear_act_dgrad %s: dpre16 without dpre differs",
                pn);
        T_CHECK(!memcmp(dbi, dbi2, in * 4), "linear_act_dgrad %s: dbias differs without dpre", pn);
        free(want);
        /* linear_act_dgrad reading dy16 = tu_to16(dy) in place of dy (given
         * another matrix, x, which it must not read) */
        uint16_t *y016 = tu_to16(y0, R * out, (kf_precision)prec);
        memset(dbi, 0, in * 4), memset(dbi2, 0, in * 4);
        be->linear_act_dgrad(be, dx, NULL, dbi, x, w, x, R, in, out, KF_ACT_GELU_TANH, NULL, y016);
        be->linear_act_dgrad(be, dx2, NULL, dbi2, y0, w, x, R, in, out, KF_ACT_GELU_TANH, NULL,
                             NULL);
        T_CHECK(!memcmp(dx, dx2, R * in * 4), "linear_act_dgrad %s: dpre with dy16 differs from dy",
                pn);
        T_CHECK(!memcmp(dbi, dbi2, in * 4), "linear_act_dgrad %s: dbias with dy16 differs from dy",
                pn);
        free(y016);
        /* layernorm_bwd writing dx16: the accumulated dx (dx2 from the same
         * start without the copy) rounded */
        memcpy(dx, x, R * in * 4), memcpy(dx2, x, R * in * 4);
        memset(dbi, 0, in * 4), memset(dbi2, 0, in * 4);
        be->layernorm_bwd(be, dx, dbi, NULL, ln, x, lw, mean, rstd, R, in, c16);
        be->layernorm_bwd(be, dx2, dbi2, NULL, ln, x, lw, mean, rstd, R, in, NULL);
        T_CHECK(!memcmp(dx, dx2, R * in * 4), "layernorm_bwd %s: dx differs with dx16", pn);
        T_CHECK(!memcmp(dbi, dbi2, in * 4), "layernorm_bwd %s: dw differs with dx16", pn);
        want = tu_to16(dx, R * in, (kf_precision)prec);
        T_CHECK(!memcmp(c16, want, R * in * 2), "layernorm_bwd %s: dx16 is not the sum dx rounded",
                pn);
        free(want);
        free(x16);
    }
    be->set_precision(be, KF_PREC_FP32);
    free(x), free(lw), free(w), free(bias), free(dy), free(y0), free(ln), free(mean), free(rstd);
    free(y), free(y2), free(pre), free(dw), free(dw2), free(db), free(db2), free(dx), free(dx2);
    free(c16), free(c16b), free(dbi), free(dbi2);
}

/* The attention block's 16-bit copies in fp16 and bf16: rope_fwd's and
 * rope_bwd's (qkv16, dqkv16) and linear_bwd's (dx16, with or without dx)
 * hold their fp32 results rounded (tu_to16), which they leave unchanged,
 * and rope on the copy alone gives the copy of rope on its values;
 * attn_fwd reading qkv16 gives bitwise out and lse of qkv, writing out16
 * (with or without out) out rounded in the query rows; attn_bwd reading
 * dout16, out16 and qkv16 gives bitwise the dqkv of dout, out and qkv, and
 * its dqkv16 (with or without dqkv) is dqkv rounded, which rope_bwd on the
 * copy alone turns into the copy of rope_bwd on dqkv (the model's chain).
 * Causal, and DoubleForward with its q_start pass. */
static void check_attn_copies16(kf_backend *be) {
    const int64_t B = 2, nh = 2, D = 16, H = nh * D, in = 24;
    const kf_mask masks[] = {{.n_ctx = 40},
                             {.n_ctx = 10, .group = 4, .n_groups = 10},
                             {.n_ctx = 10, .group = 4, .n_groups = 10, .q_start = 10}};
    const char *mname[] = {"causal", "double", "double q_start"};
    int32_t pos[50];
    for (int i = 0; i < 50; i++) pos[i] = 3 * i + 1;
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++) {
        const char *pn = kernels_precision_name((kf_precision)prec);
        be->set_precision(be, (kf_precision)prec);
        for (int mi = 0; mi < 3; mi++) {
            const kf_mask *m = &masks[mi];
            int64_t L = kf_mask_len(m), n = B * L * 3 * H, no = B * L * H, nl = B * nh * L;
            int64_t q0 = m->q_start;
            float *qkv = tu_randf(n, 1), *x1 = kf_malloc(n * 4), *x2 = kf_malloc(n * 4);
            uint16_t *c16 = kf_malloc(n * 2);
            for (int dir = 0; dir < 2; dir++) {
                /* the two directions share their signature */
                void (*rope)(kf_backend *, float *, const int32_t *, int64_t, int64_t, int64_t,
                             int64_t, float, void *) = dir ? be->rope_bwd : be->rope_fwd;
                memcpy(x1, qkv, n * 4), memcpy(x2, qkv, n * 4);
                rope(be, x1, pos, B, L, nh, D, 10000.0f, c16);
                rope(be, x2, pos, B, L, nh, D, 10000.0f, NULL);
                uint16_t *want = tu_to16(x2, n, (kf_precision)prec);
                T_CHECK(!memcmp(x1, x2, n * 4), "rope_%s %s %s: the copy changed the fp32 result",
                        dir ? "bwd" : "fwd", pn, mname[mi]);
                T_CHECK(!memcmp(c16, want, n * 2),
                        "rope_%s %s %s: the copy is not the result rounded", dir ? "bwd" : "fwd",
                        pn, mname[mi]);
                free(want);
                /* the copy alone (qkv NULL), rotated in place: the rotation of
                 * its values (qkv rounded) in fp32, rounded */
                memcpy(x2, qkv, n * 4);
                be->round_lowp(be, x2, n);
                uint16_t *in16 = tu_to16(x2, n, (kf_precision)prec);
                rope(be, NULL, pos, B, L, nh, D, 10000.0f, in16);
                rope(be, x2, pos, B, L, nh, D, 10000.0f, NULL);
                want = tu_to16(x2, n, (kf_precision)prec);
                T_CHECK(!memcmp(in16, want, n * 2),
                        "rope_%s %s %s: the copy rotated in place is not the rotation of its "
                        "values rounded",
                        dir ? "bwd" : "fwd", pn, mname[mi]);
                free(want), free(in16);
            }
            /* the attention on the copies against the attention on fp32 */
            uint16_t *q16 = tu_to16(qkv, n, (kf_precision)prec);
            float *out = kf_calloc(no, 4), *out2 = kf_calloc(no, 4), *lse = kf_calloc(nl, 4);
            float *lse2 = kf_calloc(nl, 4), *dout = tu_randf(no, 1), *g1 = kf_malloc(n * 4);
            float *g2 = kf_malloc(n * 4);
            uint16_t *o16 = kf_calloc(no, 2), *o16b = kf_calloc(no, 2);
            be->attn_fwd(be, out, lse, NULL, m, B, nh, D, q16, o16);
            be->attn_fwd(be, out2, lse2, qkv, m, B, nh, D, NULL, NULL);
            T_CHECK(!memcmp(out, out2, no * 4), "attn_fwd %s %s: out of qkv16 differs", pn,
                    mname[mi]);
            T_CHECK(!memcmp(lse, lse2, nl * 4), "attn_fwd %s %s: lse of qkv16 differs", pn,
                    mname[mi]);
            be->attn_fwd(be, NULL, lse, qkv, m, B, nh, D, NULL, o16b);
            uint16_t *want = tu_to16(out2, no, (kf_precision)prec);
            int64_t bad = 0, bad_b = 0;
            for (int64_t bi = 0; bi < B; bi++)
                for (int64_t i = (bi * L + q0) * H; i < (bi + 1) * L * H; i++) {
                    bad += o16[i] != want[i];
                    bad_b += o16b[i] != want[i];
                }
            T_EQ_INT(bad, 0, "attn_fwd %s %s: %lld values of out16 are not out rounded", pn,
                     mname[mi], (long long)bad);
            T_EQ_INT(bad_b, 0, "attn_fwd %s %s: out16 without out: %lld values differ", pn,
                     mname[mi], (long long)bad_b);
            uint16_t *d16 = tu_to16(dout, no, (kf_precision)prec);
            uint16_t *gc = kf_malloc(n * 2), *gcb = kf_malloc(n * 2);
            be->attn_bwd(be, g1, NULL, NULL, lse2, NULL, m, B, nh, D, d16, want, q16, gc);
            be->attn_bwd(be, g2, dout, out2, lse2, qkv, m, B, nh, D, NULL, NULL, NULL, NULL);
            T_CHECK(!memcmp(g1, g2, n * 4), "attn_bwd %s %s: dqkv of the copies differs", pn,
                    mname[mi]);
            be->attn_bwd(be, NULL, NULL, NULL, lse2, NULL, m, B, nh, D, d16, want, q16, gcb);
            uint16_t *gw = tu_to16(g2, n, (kf_precision)prec);
            T_CHECK(!memcmp(gc, gw, n * 2), "attn_bwd %s %s: dqkv16 is not dqkv rounded", pn,
                    mname[mi]);
            T_CHECK(!memcmp(gcb, gw, n * 2), "attn_bwd %s %s: dqkv16 without dqkv differs", pn,
                    mname[mi]);
            be->rope_bwd(be, NULL, pos, B, L, nh, D, 10000.0f, gcb);
            be->rope_bwd(be, g2, pos, B, L, nh, D, 10000.0f, NULL);
            free(gw);
            gw = tu_to16(g2, n, (kf_precision)prec);
            T_CHECK(!memcmp(gcb, gw, n * 2),
                    "attn_bwd then rope_bwd on dqkv16 alone %s %s: not rope_bwd(dqkv) rounded", pn,
                    mname[mi]);
            free(gc), free(gcb), free(gw);
            free(want), free(d16), free(q16), free(out), free(out2), free(lse), free(lse2);
            free(dout), free(g1), free(g2), free(o16), free(o16b), free(qkv), free(x1), free(x2);
            free(c16);
        }
        /* linear_bwd's dx16: attn_out's backward writing the attention's dout */
        const int64_t R = 70;
        float *x = tu_randf(R * in, 1), *w = tu_randf(H * in, 1), *dy = tu_randf(R * H, 1);
        float *dw = kf_calloc(H * in, 4), *dx = kf_malloc(R * in * 4);
        uint16_t *c16 = kf_malloc(R * in * 2), *c16b = kf_malloc(R * in * 2);
        be->linear_bwd(be, dx, dw, NULL, dy, NULL, x, NULL, w, R, in, H, 0.0f, NULL, c16);
        be->linear_bwd(be, NULL, dw, NULL, dy, NULL, x, NULL, w, R, in, H, 0.0f, NULL, c16b);
        uint16_t *want = tu_to16(dx, R * in, (kf_precision)prec);
        T_CHECK(!memcmp(c16, want, R * in * 2), "linear_bwd %s: dx16 is not dx rounded", pn);
        T_CHECK(!memcmp(c16b, want, R * in * 2), "linear_bwd %s: dx16 without dx differs", pn);
        free(want), free(x), free(w), free(dy), free(dw), free(dx), free(c16), free(c16b);
    }
    be->set_precision(be, KF_PREC_FP32);
}

/* The weights' 16-bit copy (w16) in fp16 and bf16: copy_to16 writes W
 * rounded (tu_to16); linear_act (beta 0 and 1), linear_act_dgrad and
 * linear_bwd's dx given w16 = copy_to16(W) give bitwise their results
 * without it, and given the copy of another matrix W2 their results on W2:
 * they read the copy. */
static void check_weights16(kf_backend *be) {
    const int64_t R = 70, in = 37, out = 29;
    float *x = tu_randf(R * in, 2), *w = tu_randf(out * in, 1), *w2 = tu_randf(out * in, 1);
    float *bias = tu_randf(out, 1), *dy = tu_randf(R * out, 1), *y0 = tu_randf(R * out, 1);
    float *o[2] = {kf_malloc(R * out * 4), kf_malloc(R * out * 4)};
    float *pre = kf_malloc(R * out * 4), *dw = kf_malloc(out * in * 4);
    float *d[2] = {kf_malloc(R * in * 4), kf_malloc(R * in * 4)};
    uint16_t *c16 = kf_malloc(out * in * 2);
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++) {
        const char *pn = kernels_precision_name((kf_precision)prec);
        be->set_precision(be, (kf_precision)prec);
        for (int other = 0; other < 2; other++) {
            const float *wr = other ? w2 : w; /* the matrix the copy is made from */
            const char *on = other ? " (copy of W2)" : "";
            be->copy_to16(be, c16, wr, out * in);
            uint16_t *want = tu_to16(wr, out * in, (kf_precision)prec);
            T_CHECK(!memcmp(c16, want, out * in * 2), "copy_to16 %s: not W rounded", pn);
            free(want);
            for (int beta = 0; beta < 2; beta++) {
                memcpy(o[0], y0, R * out * 4), memcpy(o[1], y0, R * out * 4);
                be->linear_act(be, o[0], NULL, beta ? NULL : pre, x, NULL, w, bias, R, in, out,
                               beta ? KF_ACT_NONE : KF_ACT_GELU_TANH, (float)beta, c16);
                be->linear_act(be, o[1], NULL, beta ? NULL : pre, x, NULL, wr, bias, R, in, out,
                               beta ? KF_ACT_NONE : KF_ACT_GELU_TANH, (float)beta, NULL);
                T_CHECK(!memcmp(o[0], o[1], R * out * 4), "linear_act %s beta %d: w16%s differs",
                        pn, beta, on);
            }
            be->linear_act_dgrad(be, d[0], NULL, NULL, dy, w, x, R, in, out, KF_ACT_GELU_TANH, c16,
                                 NULL);
            be->linear_act_dgrad(be, d[1], NULL, NULL, dy, wr, x, R, in, out, KF_ACT_GELU_TANH,
                                 NULL, NULL);
            T_CHECK(!memcmp(d[0], d[1], R * in * 4), "linear_act_dgrad %s: w16%s differs", pn, on);
            memset(dw, 0, out * in * 4);
            be->linear_bwd(be, d[0], dw, NULL, dy, NULL, x, NULL, w, R, in, out, 0.0f, c16, NULL);
            be->linear_bwd(be, d[1], dw, NULL, dy, NULL, x, NULL, wr, R, in, out, 0.0f, NULL, NULL);
            T_CHECK(!memcmp(d[0], d[1], R * in * 4), "linear_bwd %s: dx with w16%s differs", pn,
                    on);
        }
    }
    be->set_precision(be, KF_PREC_FP32);
    free(x), free(w), free(w2), free(bias), free(dy), free(y0), free(o[0]), free(o[1]);
    free(pre), free(dw), free(d[0]), free(d[1]), free(c16);
}

/* xent16 in fp16 and bf16, with row weights, a mask column, ignored rows
 * and a bias gradient: its losses, 16-bit dlogits and bias gradient are
 * bitwise those of xent, scale per row, fill_column and bias_grad (the
 * copy: their fp32 dlogits rounded, tu_to16). */
static void check_xent16(kf_backend *be) {
    const int64_t R = 70, V = 301, mask = 7;
    float *x = tu_randf(R * V, 6), *l = kf_malloc(R * 4), *l2 = kf_malloc(R * 4);
    float *d = kf_malloc(R * V * 4), *db = tu_randf(V, 1), *db2 = kf_malloc(V * 4), w[70];
    int32_t t[70];
    uint16_t *d16 = kf_malloc(R * V * 2);
    memcpy(db2, db, V * 4);
    for (int r = 0; r < R; r++) {
        t[r] = r % 9 == 4 ? -1 : (int32_t)((r * 37) % V);
        w[r] = r % 4 == 1 ? 0.5f : 1.0f;
    }
    for (int prec = KF_PREC_FP16; prec <= KF_PREC_BF16; prec++) {
        const char *pn = kernels_precision_name((kf_precision)prec);
        be->set_precision(be, (kf_precision)prec);
        be->xent16(be, l, d16, db, x, t, w, R, V, &(float){0.5f}, mask);
        be->xent(be, l2, d, x, t, R, V, &(float){0.5f});
        for (int r = 0; r < R; r++) be->scale(be, d + r * V, w[r], V);
        be->fill_column(be, d, R, V, mask, 0.0f);
        be->bias_grad(be, db2, d, R, V);
        uint16_t *want = tu_to16(d, R * V, (kf_precision)prec);
        T_CHECK(!memcmp(l, l2, R * 4), "xent16 %s: losses differ from xent's", pn);
        T_CHECK(!memcmp(d16, want, R * V * 2), "xent16 %s: dlogits16 is not xent's rounded", pn);
        T_CHECK(!memcmp(db, db2, V * 4), "xent16 %s: dbias differs from bias_grad's", pn);
        free(want);
    }
    be->set_precision(be, KF_PREC_FP32);
    free(x), free(l), free(l2), free(d), free(db), free(db2), free(d16);
}

/* 16-bit rows moved as floats of two values each (model.c's K/V hand-over):
 * the words are signalling NaNs, subnormals and -0 as floats, which a move
 * through a float conversion would quiet or flush; the rows must come back
 * bit for bit. */
static void rows16_check(kf_backend *be) {
    enum { N = 4, DIM = 8 };
    static const uint16_t pat[] = {0x7c01, 0x7f80, 0x0001, 0x8000, 0x3c00, 0xffff, 0x0000, 0x7fa0};
    uint16_t h[N * 2 * DIM], g[N * 2 * DIM], sc[N * 2 * DIM] = {0};
    for (int i = 0; i < N * 2 * DIM; i++) h[i] = (uint16_t)(pat[i % 8] ^ (i / 8));
    int32_t idx[N] = {2, 0, 3, 1};
    be->gather_rows(be, (float *)g, (const float *)h, idx, N, DIM);
    be->scatter_rows(be, (float *)sc, (const float *)h, idx, N, DIM);
    int gbad = 0, sbad = 0;
    for (int i = 0; i < N; i++) {
        gbad += memcmp(g + i * 2 * DIM, h + idx[i] * 2 * DIM, 2 * DIM * 2) != 0;
        sbad += memcmp(sc + idx[i] * 2 * DIM, h + i * 2 * DIM, 2 * DIM * 2) != 0;
    }
    T_EQ_INT(gbad, 0, "gather_rows of 16-bit rows: %d of %d rows not bitwise, want 0", gbad, N);
    T_EQ_INT(sbad, 0, "scatter_rows of 16-bit rows: %d of %d rows not bitwise, want 0", sbad, N);
}

static void check_pointwise(kf_backend *be) {
    const int64_t R = 7, C = 9, n = R * C;
    float *y = tu_randf(n, 1), *x = tu_randf(n, 1), *y0 = kf_malloc(n * 4), *bias = tu_randf(C, 1);
    memcpy(y0, y, n * 4);
    be->add_inplace(be, y, x, n);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= y[i] == y0[i] + x[i];
    T_CHECK(ok, "add_inplace");
    be->scale(be, y, -0.5f, n);
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= y[i] == (y0[i] + x[i]) * -0.5f;
    T_CHECK(ok, "scale");
    memcpy(y, y0, n * 4);
    be->add_bias(be, y, bias, R, C);
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= y[i] == y0[i] + bias[i % C];
    T_CHECK(ok, "add_bias");
    be->fill_column(be, y, R, C, 4, -1000.0f);
    ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= i % C == 4 ? y[i] == -1000.0f : y[i] == y0[i] + bias[i % C];
    T_CHECK(ok, "fill_column");
    int32_t idx[3] = {5, 0, 2};
    float *g = kf_calloc(3 * C, 4), *s = kf_calloc(n, 4);
    be->gather_rows(be, g, x, idx, 3, C);
    be->scatter_rows(be, s, g, idx, 3, C);
    ok = 1;
    for (int64_t i = 0; i < 3; i++) ok &= memcmp(g + i * C, x + idx[i] * C, C * 4) == 0;
    T_CHECK(ok, "gather_rows");
    ok = 1;
    for (int64_t r = 0; r < R; r++)
        ok &= (r == 5 || r == 0 || r == 2) ? memcmp(s + r * C, x + r * C, C * 4) == 0
                                           : s[r * C] == 0.0f;
    T_CHECK(ok, "scatter_rows");
    rows16_check(be);
    int32_t ids[6] = {-1, -1, -1, -1, -1, -1}, picks[3] = {7, 8, 9};
    be->scatter_ids(be, ids, picks, idx, 3);
    T_EQ_INT(ids[5], 7, "scatter_ids: ids[idx[0]] = picks[0]");
    T_EQ_INT(ids[0], 8, "scatter_ids: ids[idx[1]] = picks[1]");
    T_EQ_INT(ids[2], 9, "scatter_ids: ids[idx[2]] = picks[2]");
    T_EQ_INT(ids[1], -1, "scatter_ids: rows not named keep their id");
    int32_t got[4] = {5, 5, 5, 5}, from[4] = {2, -1, 0, -1};
    be->gather_ids(be, got, picks, from, 4);
    T_EQ_INT(got[0], 9, "gather_ids: got[0] = picks[idx[0]]");
    T_EQ_INT(got[1], -1, "gather_ids: idx -1 gives -1");
    T_EQ_INT(got[2], 7, "gather_ids: got[2] = picks[idx[2]]");
    T_EQ_INT(got[3], -1, "gather_ids: idx -1 gives -1 (last)");
    free(y);
    free(x);
    free(y0);
    free(bias);
    free(g);
    free(s);
}

/* cycles 0: the release's frequencies for z and tau; cycles N: z's from one
 * cycle over [0, 1] (the first) to N (the last), log-evenly spaced. */
static void check_noise_features(kf_backend *be, int64_t cycles) {
    const int64_t n = 3, H = 10, half = H / 2;
    double z[3] = {0.0, 0.37, 0.999}, tau[3] = {1.0, 0.01, 0.5};
    float *out = kf_malloc(n * 2 * H * 4);
    be->noise_features(be, out, z, tau, n, H, cycles);
    double *want = kf_malloc(n * 2 * H * sizeof(double));
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < half; i++) {
            double f = 2 * M_PI * pow(10000.0, -(double)i / half);
            double g = cycles ? 2 * M_PI * exp(log((double)cycles) * i / (half - 1)) : f;
            want[r * 2 * H + i] = cos(z[r] * g);
            want[r * 2 * H + half + i] = sin(z[r] * g);
            want[r * 2 * H + H + i] = cos(tau[r] * f);
            want[r * 2 * H + H + half + i] = sin(tau[r] * f);
        }
    char what[64];
    snprintf(what, sizeof what, "noise_features (cycles %lld)", (long long)cycles);
    TU_ERR(what, tu_relerr(out, want, n * 2 * H, 1e-3), 1e-7);
    free(out);
    free(want);
}

/* ---- logits ops ---- */
static int32_t ref_icdf(const float *x, int64_t V, double tau, double z) {
    double mx = -INFINITY, s = 0, c = 0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, x[v] / tau);
    for (int64_t v = 0; v < V; v++) s += exp(x[v] / tau - mx);
    int32_t last = -1;
    for (int64_t v = 0; v < V; v++) {
        double p = exp(x[v] / tau - mx) / s;
        c += p;
        if (p > 0) last = (int32_t)v;
        if (p > 0 && c >= z) return (int32_t)v;
    }
    return last;
}

static void check_logits(kf_backend *be) {
    const int64_t R = 40, V = 300;
    float *x = tu_randf(R * V, 4);
    x[3 * V + 17] = x[3 * V + 200] = 50.0f; /* tie: first wins */
    int32_t ids[40], want[40];
    be->argmax(be, ids, x, R, V);
    int ok = 1;
    for (int64_t r = 0; r < R; r++) {
        int64_t b = 0;
        for (int64_t v = 1; v < V; v++)
            if (x[r * V + v] > x[r * V + b]) b = v;
        ok &= ids[r] == b;
    }
    T_CHECK(ok, "argmax (first index of the maximum)");
    T_EQ_INT(ids[3], 17, "argmax (first index of the maximum)");

    double tau[40], z[40], lo[40], hi[40];
    for (int64_t r = 0; r < R; r++) {
        tau[r] = r % 4 == 0 ? 0.01 : 0.2 + (r % 5) * 0.2;
        z[r] = (tu_rand() + 1) / 2;
    }
    be->sample_icdf(be, ids, x, tau, z, R, V);
    ok = 1;
    for (int64_t r = 0; r < R; r++)
        ok &= ids[r] == (want[r] = ref_icdf(x + r * V, V, tau[r], z[r]));
    T_CHECK(ok, "sample_icdf vs float64 reference");
    be->icdf_bin(be, lo, hi, x, tau, ids, R, V);
    ok = 1;
    for (int64_t r = 0; r < R; r++) ok &= lo[r] < z[r] && z[r] <= hi[r];
    T_CHECK(ok, "icdf_bin of the sampled id contains z (lo < z <= hi)");
    /* every z strictly inside a bin samples that bin's token */
    int32_t tg[40], back[40];
    double zm[40];
    int inside[40];
    for (int64_t r = 0; r < R; r++) tg[r] = (int32_t)((r * 37) % V);
    be->icdf_bin(be, lo, hi, x, tau, tg, R, V);
    int nonempty = 0;
    for (int64_t r = 0; r < R; r++) {
        zm[r] = lo[r] + (hi[r] - lo[r]) / 2;
        inside[r] = lo[r] < zm[r] && zm[r] < hi[r]; /* a bin can be narrower than an ulp */
        nonempty += inside[r];
    }
    be->sample_icdf(be, back, x, tau, zm, R, V);
    ok = 1;
    for (int64_t r = 0; r < R; r++) ok &= !inside[r] || back[r] == tg[r];
    T_CHECK(ok, "sample_icdf(mid of icdf_bin(t)) == t (%d non-empty bins)", nonempty);
    T_CHECK(nonempty > 20, "sample_icdf(mid of icdf_bin(t)) == t (%d non-empty bins)", nonempty);

    /* edge cases: p_0 = p_last = 0 underflow; ties */
    float e[6] = {-1e4f, 1.0f, 1.0f, 1.0f, 1.0f, -1e4f};
    double t1[1] = {1.0}, ze[1];
    double cases[][2] = {{0.0, 1},         {1e-300, 1},      {0.25, 1}, {0.5, 2},
                         {0.5 + 1e-12, 3}, {1.0 - 1e-16, 4}, {1.0, 4},  {1.5, 4}};
    ok = 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ze[0] = cases[c][0];
        be->sample_icdf(be, ids, e, t1, ze, 1, 6);
        if (ids[0] != (int32_t)cases[c][1]) {
            ok = 0;
            fprintf(stderr, "icdf edge z=%.17g: got %d want %d\n", ze[0], ids[0], (int)cases[c][1]);
        }
    }
    T_CHECK(ok, "sample_icdf edge cases (z=0, tiny z, ties at exact CDF values, z~1, z>=1)");
    int32_t t4[1] = {4};
    be->icdf_bin(be, lo, hi, e, t1, t4, 1, 6);
    T_NEAR(lo[0], 0.75, 0, "icdf_bin of the last tied token: [%.17g, %.17g]", lo[0], hi[0]);
    T_NEAR(hi[0], 1.0, 0, "icdf_bin of the last tied token: [%.17g, %.17g]", lo[0], hi[0]);
    /* tau -> 0 is argmax */
    double small[40];
    for (int64_t r = 0; r < R; r++) small[r] = 1e-4, z[r] = 0.5;
    be->sample_icdf(be, ids, x, small, z, R, V);
    be->argmax(be, want, x, R, V);
    T_CHECK(memcmp(ids, want, sizeof ids) == 0, "sample_icdf at tau=1e-4 == argmax");

    /* frequency penalty: count-based, ignores out-of-range history entries;
     * the history position-major (position j of row r at j * 3 + r) */
    const int64_t nh = 6;
    int32_t hist[3 * 6] = {5, 5, 2, -1, 5, 299, 0, 0, 0, 0, 0, 0, 7, 8, 9, 10, 300, 7};
    float *lg = tu_randf(3 * V, 2), *lr = kf_malloc(3 * V * 4);
    memcpy(lr, lg, 3 * V * 4);
    be->freq_penalty(be, lg, hist, nh, 3, V, 0.3f);
    for (int64_t r = 0; r < 3; r++)
        for (int64_t v = 0; v < V; v++) {
            int cnt = 0;
            for (int64_t j = 0; j < nh; j++) cnt += hist[j * 3 + r] == v;
            lr[r * V + v] -= 0.3f * (float)cnt;
        }
    T_CHECK(memcmp(lg, lr, 3 * V * 4) == 0, "freq_penalty");

    /* loss_sum: the counted rows' losses in row order from 0, then added */
    /* (1e30 + 1 - 1e30 + 1 = 1, but 0 reversed; 1e30 in an ignored row) */
    float rl[6] = {1e30f, 1.0f, 1e30f, -1e30f, 1.0f, -5.0f};
    int32_t rt[6] = {1, 0, -1, 3, 2, -5};
    double acc = 0.1, want_acc = 0.1 + 1.0;
    be->loss_sum(be, &acc, rl, rt, 6);
    T_CHECK(memcmp(&acc, &want_acc, sizeof acc) == 0, "loss_sum: got %.17g, want %.17g", acc,
            want_acc);
    free(x);
    free(lg);
    free(lr);
}

static void check_reductions(kf_backend *be) {
    const int64_t n = 100003;
    float *x = tu_randf(n, 3);
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) s += x[i], ss += (double)x[i] * x[i];
    T_CLOSE(be->sum(be, x, n), s, 1e-12, "sum");
    T_CLOSE(be->sumsq(be, x, n), ss, 1e-12, "sumsq");
    T_EQ_INT(be->count_nonfinite(be, x, n), 0, "count_nonfinite (finite)");
    x[7] = NAN;
    x[5000] = INFINITY;
    x[n - 1] = -INFINITY;
    T_EQ_INT(be->count_nonfinite(be, x, n), 3, "count_nonfinite (3 non-finite)");
    T_CHECK(be->sum(be, x, 0) == 0.0, "sum of nothing");
    free(x);
}

/* AdamW, worked by hand: p=1, g_eff = grad*scale = 1.0 then -0.5, lr 0.1, wd 0.1,
 * b1 0.9, b2 0.999, eps 1e-6.
 * step 1: p = 0.99; m = 0.1, v = 0.001; mhat = vhat = 1; p = 0.99 - 0.1/(1+1e-6) = 0.8900000999999
 * step 2: p = 0.8811000989999; m = 0.04, v = 0.001249; mhat = 0.04/0.19, vhat = 0.001249/0.001999
 *         p -= 0.1*0.2105263158/(0.7904507617+1e-6)  ->  0.8544664287 */
static void check_optim(kf_backend *be) {
    float p[2] = {1.0f, 1.0f}, g[2] = {0.5f, 0.5f}, m[2] = {0}, v[2] = {0};
    be->adamw(be, p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-6f, 0.1f, 1, 2.0f, NULL);
    T_CLOSE(p[0], 0.8900000999999, 1e-6, "adamw step 1 param");
    T_CLOSE(m[0], 0.1, 1e-6, "adamw step 1 m");
    T_CLOSE(v[0], 0.001, 1e-6, "adamw step 1 v");
    g[0] = g[1] = -0.25f;
    be->adamw(be, p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-6f, 0.1f, 2, 2.0f, NULL);
    T_CLOSE(p[0], 0.8544664287, 1e-6, "adamw step 2 param");
    T_CLOSE(m[0], 0.04, 1e-6, "adamw step 2 m");
    T_CLOSE(v[0], 0.001249, 1e-6, "adamw step 2 v");
    T_NEAR(p[0], p[1], 0, "adamw elements independent");
    float e[3] = {1.0f, 2.0f, -1.0f}, q[3] = {3.0f, 2.0f, 1.0f};
    be->ema(be, e, q, 3, 0.75f, NULL);
    T_NEAR(e[0], 1.5f, 0, "ema = decay*ema + (1-decay)*params");
    T_NEAR(e[1], 2.0f, 0, "ema = decay*ema + (1-decay)*params");
    T_NEAR(e[2], -0.5f, 0, "ema = decay*ema + (1-decay)*params");
}

/* The gradient check, worked by hand: grads {6, 8} carrying a loss scale of
 * 2 have sumsq 100 and norm 10 / 2 = 5; clip 1 gives (1 / 5) / 2, clip 10
 * (above the norm) and clip 0 (none) give 1 / 2. Then adamw and ema under a
 * ctl: a skip changes nothing, else ctl's grad_scale replaces the argument. */
static void check_grad_check(kf_backend *be) {
    float g[2] = {6.0f, 8.0f};
    kf_grad_ctl c = {.loss_scale = 2.0};
    be->grad_check(be, &c, g, 2, 1.0);
    T_NEAR(c.sumsq, 100, 0, "grad_check: sumsq");
    T_NEAR(c.norm, 5, 0, "grad_check: norm unscaled");
    T_EQ_INT(c.skip, 0, "grad_check: finite, applied");
    T_NEAR(c.grad_scale, (float)(0.2 / 2.0), 0, "grad_check: clipped to norm 1, unscaled");
    be->grad_check(be, &c, g, 2, 10.0);
    T_NEAR(c.grad_scale, 0.5f, 0, "grad_check: a norm under the clip is not clipped");
    be->grad_check(be, &c, g, 2, 0.0);
    T_NEAR(c.grad_scale, 0.5f, 0, "grad_check: clip 0 clips nothing");
    c.sumsq = 100; /* as ZeRO-1 uploads it: grads NULL keeps it */
    c.loss_scale = 4.0;
    be->grad_check(be, &c, NULL, 0, 1.0);
    T_NEAR(c.norm, 2.5, 0, "grad_check: grads NULL uses the given sumsq");
    c.sumsq = INFINITY;
    be->grad_check(be, &c, NULL, 0, 1.0);
    T_EQ_INT(c.skip, 1, "grad_check: an infinite sumsq skips");
    g[1] = NAN;
    c.loss_scale = 1.0;
    be->grad_check(be, &c, g, 2, 1.0);
    T_EQ_INT(c.skip, 1, "grad_check: a NaN gradient skips");

    float p[2] = {1.0f, 1.0f}, m[2] = {0}, v[2] = {0}, e[2] = {3.0f, 3.0f};
    g[1] = 8.0f;
    be->adamw(be, p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-6f, 0.1f, 1, 1.0f, &c);
    T_NEAR(p[0], 1.0f, 0, "adamw skipped by ctl: params");
    T_NEAR(m[0], 0.0f, 0, "adamw skipped by ctl: m");
    T_NEAR(v[0], 0.0f, 0, "adamw skipped by ctl: v");
    be->ema(be, e, p, 2, 0.5f, &c);
    T_NEAR(e[0], 3.0f, 0, "ema skipped by ctl");
    c.skip = 0, c.grad_scale = 0.25f;
    kernels_adamw_factors(&c, 0.1f, 0.9f, 0.999f, 0.1f, 1); /* the arguments' factors */
    c.ema_decay = 0.5f;
    float p2[2] = {1.0f, 1.0f}, m2[2] = {0}, v2[2] = {0}, e2[2] = {3.0f, 3.0f};
    be->adamw(be, p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-6f, 0.1f, 1, 1.0f, &c);
    be->adamw(be, p2, g, m2, v2, 2, 0.1f, 0.9f, 0.999f, 1e-6f, 0.1f, 1, 0.25f, NULL);
    T_CHECK(p[1] == p2[1], "adamw: ctl's grad_scale replaces the argument: got %.9g want %.9g",
            p[1], p2[1]);
    be->ema(be, e, p, 2, 0.5f, &c);
    be->ema(be, e2, p2, 2, 0.5f, NULL);
    T_CHECK(e[1] == e2[1], "ema under an applied ctl: got %.9g want %.9g", e[1], e2[1]);
    /* ctl's factors, not the arguments', make the update (a graph launched
     * with a later step's factors) */
    kernels_adamw_factors(&c, 0.05f, 0.9f, 0.999f, 0.1f, 3);
    c.ema_decay = 0.25f;
    be->adamw(be, p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-6f, 0.1f, 1, 1.0f, &c);
    be->adamw(be, p2, g, m2, v2, 2, 0.05f, 0.9f, 0.999f, 1e-6f, 0.1f, 3, 0.25f, NULL);
    T_CHECK(p[1] == p2[1], "adamw: ctl's factors replace lr's and step's: got %.9g want %.9g", p[1],
            p2[1]);
    be->ema(be, e, p, 2, 0.5f, &c);
    be->ema(be, e2, p2, 2, 0.25f, NULL);
    T_CHECK(e[1] == e2[1], "ema: ctl's decay replaces the argument: got %.9g want %.9g", e[1],
            e2[1]);
}

/* Every non-attention op, run on sizes that span several chunks, gives
 * bitwise identical results with 1 and 2 OpenMP threads and at every SIMD
 * level: run_suite writes each op's outputs to a sink, naming each part. */
typedef struct sink {
    unsigned char *buf;
    size_t off, cap;
    int n;
    const char *name[64];
    size_t end[64];
} sink;

static void sink_put(sink *k, const char *name, const void *p, size_t bytes) {
    KF_CHECK(k->off + bytes <= k->cap && k->n < 64, "test sink too small");
    memcpy(k->buf + k->off, p, bytes);
    k->off += bytes;
    k->name[k->n] = name;
    k->end[k->n++] = k->off;
}

/* The first op whose outputs differ between two sinks, or NULL. */
static const char *sink_diff(const sink *a, const sink *b) {
    if (a->n != b->n || a->off != b->off) return "(different op lists)";
    size_t start = 0;
    for (int i = 0; i < a->n; start = a->end[i++])
        if (memcmp(a->buf + start, b->buf + start, a->end[i] - start)) return a->name[i];
    return NULL;
}

static void run_suite(kf_backend *be, sink *k) {
    k->off = 0;
    k->n = 0;
#define SINK(p, bytes) sink_put(k, #p, (p), (bytes))
    tu_state = 12345;
    const int64_t R = 300, C = 96, n = R * C, V = 2000, Rv = 20;
    float *x = tu_randf(n, 2), *dy = tu_randf(n, 1), *w = tu_randf(C, 1), *bb = tu_randf(C, 1);
    float *y = kf_malloc(n * 4), *mean = kf_malloc(R * 4), *rstd = kf_malloc(R * 4);
    float *dx = kf_calloc(n, 4), *dw = kf_calloc(C, 4), *db = kf_calloc(C, 4);
    be->layernorm_fwd(be, y, NULL, mean, rstd, x, w, bb, R, C, 1e-5f);
    be->layernorm_bwd(be, dx, dw, db, dy, x, w, mean, rstd, R, C, NULL);
    be->bias_grad(be, db, dy, R, C);
    SINK(y, n * 4);
    SINK(dx, n * 4);
    SINK(dw, C * 4);
    SINK(db, C * 4);
    be->gelu_fwd(be, y, x, n, KF_GELU_TANH);
    SINK(y, n * 4);
    be->gelu_bwd(be, y, dy, x, n, KF_GELU_ERF);
    SINK(y, n * 4);
    int32_t pos[100];
    for (int i = 0; i < 100; i++) pos[i] = i * 3;
    memcpy(y, x, n * 4);
    be->rope_fwd(be, y, pos, 3, 100, 2, 16, 10000.0f, NULL);
    be->rope_bwd(be, y, pos, 3, 100, 2, 16, 10000.0f, NULL);
    SINK(y, n * 4);
    int32_t ids[R];
    for (int64_t i = 0; i < R; i++) ids[i] = (int32_t)((i * 7) % 11);
    float *tab = kf_calloc(11 * C, 4);
    be->embed_bwd(be, tab, dy, ids, NULL, R, C, 11);
    SINK(tab, 11 * C * 4);
    float *lg = tu_randf(Rv * V, 5), *loss = kf_malloc(Rv * 4), *dl = kf_malloc(Rv * V * 4);
    int32_t tg[Rv], am[Rv], sm[Rv];
    double tau[Rv], z[Rv], lo[Rv], hi[Rv];
    for (int64_t i = 0; i < Rv; i++)
        tg[i] = (int32_t)(i * 97 % V), tau[i] = 0.5, z[i] = (i + 0.5) / Rv;
    be->xent(be, loss, dl, lg, tg, Rv, V, &(float){1.0f / Rv});
    SINK(loss, Rv * 4);
    SINK(dl, Rv * V * 4);
    be->argmax(be, am, lg, Rv, V);
    SINK(am, sizeof am);
    be->sample_icdf(be, sm, lg, tau, z, Rv, V);
    SINK(sm, sizeof sm);
    be->icdf_bin(be, lo, hi, lg, tau, tg, Rv, V);
    SINK(lo, sizeof lo);
    SINK(hi, sizeof hi);
    double s = be->sum(be, x, n), ss = be->sumsq(be, dl, Rv * V);
    SINK(&s, 8);
    SINK(&ss, 8);
    float *m = kf_calloc(n, 4), *v = kf_calloc(n, 4);
    be->adamw(be, x, dy, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 3, 0.5f, NULL);
    be->ema(be, y, x, n, 0.999f, NULL);
    SINK(x, n * 4);
    SINK(m, n * 4);
    SINK(v, n * 4);
    SINK(y, n * 4);
    double zz[R], tt[R];
    for (int64_t i = 0; i < R; i++) zz[i] = i / (double)R, tt[i] = 1 - zz[i];
    float *nf = kf_malloc(R * 2 * C * 4);
    be->noise_features(be, nf, zz, tt, R, C, 64);
    SINK(nf, R * 2 * C * 4);
#undef SINK
    free(x);
    free(dy);
    free(w);
    free(bb);
    free(y);
    free(mean);
    free(rstd);
    free(dx);
    free(dw);
    free(db);
    free(tab);
    free(lg);
    free(loss);
    free(dl);
    free(m);
    free(v);
    free(nf);
}

static void check_threads(kf_backend *be) {
    const char *levels[] = {"base", "avx2", "avx512", "vnni"};
    char native[16];
    snprintf(native, sizeof native, "%s", kernels_cpu_isa());
    size_t cap = 16u << 20;
    sink ref = {kf_malloc(cap), 0, cap, 0, {0}, {0}}, got = {kf_malloc(cap), 0, cap, 0, {0}, {0}};
    omp_set_num_threads(1);
    run_suite(be, &ref);
    omp_set_num_threads(2);
    run_suite(be, &got);
    const char *op = sink_diff(&ref, &got);
    T_CHECK(!op, "%s differs between 1 and 2 OpenMP threads", op);
    /* Levels with FMA contract a*b+c alike, so they agree bit for bit; the
     * baseline (CPUs without FMA) rounds products separately and is checked
     * against itself across thread counts. With the baseline forced as the
     * native level (KF_CPU_ISA=base), the FMA levels are checked against the
     * first of them. */
    sink first = {kf_malloc(cap), 0, cap, 0, {0}, {0}}, *want = &ref;
    const char *want_level = native;
    for (int l = 0; l < 4; l++) {
        if (kernels_cpu_set_isa(levels[l])) continue;
        if (l == 0) {
            sink one = {kf_malloc(cap), 0, cap, 0, {0}, {0}};
            omp_set_num_threads(1);
            run_suite(be, &one);
            omp_set_num_threads(2);
            run_suite(be, &got);
            op = sink_diff(&one, &got);
            T_CHECK(!op, "%s at SIMD level base differs between 1 and 2 threads", op);
            free(one.buf);
            continue;
        }
        if (!strcmp(native, "base") && want == &ref) {
            run_suite(be, &first);
            want = &first;
            want_level = levels[l];
            continue;
        }
        run_suite(be, &got);
        op = sink_diff(want, &got);
        T_CHECK(!op, "%s at SIMD level %s differs from level %s", op, levels[l], want_level);
    }
    kernels_cpu_set_isa(native);
    free(ref.buf);
    free(got.buf);
    free(first.buf);
}

static void check_create(void) {
    kf_backend *b = kernels_create("cpu", NULL);
    T_CHECK(b, "kernels_create(\"cpu\")");
    if (b) {
        T_CHECK(strcmp(b->name, "cpu") == 0, "kernels_create(\"cpu\")");
    }
    b->destroy(b);
    b = kernels_create("auto", NULL);
    T_CHECK(b != NULL, "kernels_create(\"auto\")");
    b->destroy(b);
#ifndef KF_CUDA
    char msg[256] = "";
    T_EQ_INT(kernels_cuda_create(0, msg, sizeof msg), NULL,
             "kernels_cuda_create without CUDA says how to get it: \"%s\"", msg);
    T_CHECK(strstr(msg, "CUDA=1"), "kernels_cuda_create without CUDA says how to get it: \"%s\"",
            msg);
    kf_err err = {{0}};
    T_EQ_INT(kernels_create("cuda", &err), NULL,
             "kernels_create(\"cuda\") without CUDA returns NULL");
    T_CHECK(strstr(err.msg, "CUDA=1"), "kernels_create(\"cuda\") says why: \"%s\"", err.msg);
#endif
    kf_err bad = {{0}};
    T_EQ_INT(kernels_create("tpu", &bad), NULL, "an unknown backend is refused");
    T_CHECK(strstr(bad.msg, "\"tpu\""), "the error names it: \"%s\"", bad.msg);
}

/* rope against the formula of cpu_rope.c, computed here per row: a seeded
 * schedule of calls on one backend whose head dims, bases and position
 * ranges change from call to call (positions unsorted, repeated, past any
 * earlier call's), so the backend's table of factors is extended, rebuilt
 * and reused; every call must equal the formula bit for bit whatever the
 * calls before it. KF_TEST_SEED replays another schedule. */
static void check_rope_table(kf_backend *be) {
    const char *env = getenv("KF_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : 20261201;
    tu_state = seed * 0x2545F4914F6CDD1Dull + 1;
    const int64_t dims[] = {2, 8, 16, 48};
    const float bases[] = {10000.0f, 500.5f};
    const int32_t spans[] = {8, 200, 3000};
    for (int call = 0; call < 60; call++) {
        int64_t D = dims[(int)((tu_rand() + 1) * 2) % 4], half = D / 2;
        float base = bases[(int)((tu_rand() + 1) * 1) % 2];
        int32_t span = spans[(int)((tu_rand() + 1) * 1.5) % 3];
        int64_t B = 1 + (int64_t)((tu_rand() + 1) * 1.5) % 3,
                L = 1 + (int64_t)((tu_rand() + 1) * 20) % 40;
        int64_t nh = 1 + (int64_t)((tu_rand() + 1)) % 2, H = nh * D, n = B * L * 3 * H;
        int dir = tu_rand() < 0;
        int32_t *pos = kf_malloc((size_t)L * sizeof *pos);
        for (int64_t l = 0; l < L; l++) pos[l] = (int32_t)((tu_rand() + 1) / 2 * span) % span;
        float *x = tu_randf(n, 1), *want = kf_malloc((size_t)n * 4);
        memcpy(want, x, (size_t)n * 4);
        for (int64_t row = 0; row < B * L; row++)
            for (int64_t part = 0; part < 2; part++)
                for (int64_t h = 0; h < nh; h++) {
                    float *v = want + row * 3 * H + part * H + h * D;
                    for (int64_t i = 0; i < half; i++) {
                        double a =
                            (double)pos[row % L] * pow((double)base, -(double)(2 * i) / (double)D);
                        float c = (float)cos(a), sn = (dir ? -1.0f : 1.0f) * (float)sin(a);
                        float x1 = v[i], x2 = v[i + half];
                        v[i] = x1 * c - x2 * sn;
                        v[i + half] = x2 * c + x1 * sn;
                    }
                }
        (dir ? be->rope_bwd : be->rope_fwd)(be, x, pos, B, L, nh, D, base, NULL);
        int64_t diff = -1;
        for (int64_t e = 0; e < n && diff < 0; e++)
            if (memcmp(&x[e], &want[e], 4)) diff = e;
        T_CHECK(diff < 0,
                "rope_%s call %d of seed %llu (D %lld, base %g, %lld x %lld rows, positions below "
                "%d): element %lld got %a, want %a",
                dir ? "bwd" : "fwd", call, (unsigned long long)seed, (long long)D, (double)base,
                (long long)B, (long long)L, (int)span, (long long)diff, diff < 0 ? 0.0 : x[diff],
                diff < 0 ? 0.0 : want[diff]);
        free(pos);
        free(x);
        free(want);
    }
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    check_matmul(be);
    check_gemm_invariance(be);
    check_gemm_exact(be);
    check_openblas_matmul(be);
    check_lowp_matmul(be, KF_PREC_FP16, tu_fp16);
    check_lowp_matmul(be, KF_PREC_BF16, tu_bf16);
    check_bf16_known(be);
    check_pointwise(be);
    check_linear_act(be);
    check_linear_bwd(be);
    check_copies16(be);
    check_attn_copies16(be);
    check_weights16(be);
    check_xent16(be);
    check_noise_features(be, 0);
    check_noise_features(be, 300);
    check_logits(be);
    check_reductions(be);
    check_optim(be);
    check_grad_check(be);
    check_threads(be);
    check_rope_table(be);
    be->destroy(be);
    check_create();
    return T_DONE();
}
