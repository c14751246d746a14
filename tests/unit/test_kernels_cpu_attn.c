/* Attention on the CPU backend against a dense reference that materialises the
 * L×L mask from the rules stated in kernels.h: forward (out, lse), backward
 * against central finite differences of that reference, decode attention,
 * fp16 and bf16 rounding, thread-count independence, and the number of (query, key)
 * pairs visited (the structure's cost, e.g. the paper's SingleForward count). */
#include <omp.h>

#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels_test_util.h"

/* Visibility of key j from query i, straight from the kf_mask documentation. */
static int ref_visible(const kf_mask *m, int64_t vl, int64_t i, int64_t j) {
    int64_t nc = m->n_ctx;
    if (i < nc) return i < vl && j < nc && (m->bidir || j <= i) && j < vl;
    int64_t g = (i - nc) / m->group, mi = (i - nc) % m->group;
    if (j < nc) return j <= g && j < vl;
    int64_t gj = (j - nc) / m->group, mj = (j - nc) % m->group;
    return gj == g && mj <= mi;
}

/* Dense masked softmax attention in double. Rows before q_start are left alone;
 * rows that see no key get out = 0, lse = 0. */
static void ref_attn(double *out, double *lse, const double *qkv, const kf_mask *m, int64_t B,
                     int64_t nh, int64_t D) {
    int64_t L = kf_mask_len(m), H = nh * D;
    char *mask = kf_malloc((size_t)(L * L));
    double *s = kf_malloc((size_t)L * sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        int64_t vl = m->valid_len ? m->valid_len[b] : m->n_ctx;
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < L; j++) mask[i * L + j] = (char)ref_visible(m, vl, i, j);
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = m->q_start; i < L; i++) {
                const double *q = qkv + (b * L + i) * 3 * H + h * D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < L; j++) {
                    if (!mask[i * L + j]) continue;
                    const double *k = qkv + (b * L + j) * 3 * H + H + h * D;
                    double d = 0;
                    for (int64_t c = 0; c < D; c++) d += q[c] * k[c];
                    s[j] = d / sqrt((double)D);
                    if (s[j] > mx) mx = s[j];
                }
                double *o = out + (b * L + i) * H + h * D;
                for (int64_t c = 0; c < D; c++) o[c] = 0;
                for (int64_t j = 0; j < L; j++)
                    if (mask[i * L + j]) sum += exp(s[j] - mx);
                for (int64_t j = 0; j < L; j++) {
                    if (!mask[i * L + j]) continue;
                    const double *v = qkv + (b * L + j) * 3 * H + 2 * H + h * D;
                    for (int64_t c = 0; c < D; c++) o[c] += exp(s[j] - mx) / sum * v[c];
                }
                lse[(b * nh + h) * L + i] = sum > 0 ? mx + log(sum) : 0;
            }
    }
    free(mask);
    free(s);
}

/* sum over computed rows of dout·out, for finite differences. */
static double ref_loss(const double *qkv, const double *dout, const kf_mask *m, int64_t B,
                       int64_t nh, int64_t D, double *out, double *lse) {
    int64_t L = kf_mask_len(m), H = nh * D;
    ref_attn(out, lse, qkv, m, B, nh, D);
    double l = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = m->q_start; i < L; i++)
            for (int64_t c = 0; c < H; c++)
                l += dout[(b * L + i) * H + c] * out[(b * L + i) * H + c];
    return l;
}

/* fd_stride > 1 checks the gradient at every fd_stride-th input only (big cases). */
static void check_case_fd(kf_backend *be, const char *name, kf_mask m, int64_t B, int64_t D,
                          int64_t fd_stride) {
    const int64_t nh = 2, H = nh * D;
    int64_t L = kf_mask_len(&m), nq = B * L * 3 * H, no = B * L * H;
    float *qkv = tu_randf(nq, 1.5), *dout = tu_randf(no, 1.0);
    float *out = kf_malloc((size_t)no * sizeof(float)),
          *lse = kf_malloc((size_t)(B * nh * L) * sizeof(float));
    float *dqkv = kf_malloc((size_t)nq * sizeof(float));
    for (int64_t i = 0; i < no; i++) out[i] = 12345.0f; /* rows before q_start must stay */
    for (int64_t i = 0; i < B * nh * L; i++) lse[i] = 12345.0f;
    be->attn_fwd(be, out, lse, qkv, &m, B, nh, D, NULL, NULL);
    be->attn_bwd(be, dqkv, dout, out, lse, qkv, &m, B, nh, D, NULL, NULL, NULL, NULL);

    double *dq = tu_tod(qkv, nq), *dd = tu_tod(dout, no);
    double *rout = kf_calloc((size_t)no, sizeof(double)),
           *rlse = kf_calloc((size_t)(B * nh * L), sizeof(double));
    ref_attn(rout, rlse, dq, &m, B, nh, D);
    int untouched = 1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < m.q_start; i++) {
            for (int64_t c = 0; c < H; c++) {
                untouched &= out[(b * L + i) * H + c] == 12345.0f;
                out[(b * L + i) * H + c] = 0.0f; /* keep the sentinel out of the error scale */
                rout[(b * L + i) * H + c] = 0.0;
            }
            for (int64_t h = 0; h < nh; h++) {
                untouched &= lse[(b * nh + h) * L + i] == 12345.0f;
                lse[(b * nh + h) * L + i] = 0.0f;
                rlse[(b * nh + h) * L + i] = 0.0;
            }
        }
    T_CHECK(untouched, "%s: rows before q_start were written", name);
    char what[128];
    snprintf(what, sizeof what, "attn_fwd out  %s D=%lld", name, (long long)D);
    TU_ERR(what, tu_relerr(out, rout, no, 1e-3), 1e-5);
    snprintf(what, sizeof what, "attn_fwd lse  %s D=%lld", name, (long long)D);
    TU_ERR(what, tu_relerr(lse, rlse, B * nh * L, 1e-3), 1e-5);

    /* central differences of the double reference */
    double *fd = kf_malloc((size_t)nq * sizeof(double)),
           *tmp_o = kf_malloc((size_t)no * sizeof(double));
    double *tmp_l = kf_malloc((size_t)(B * nh * L) * sizeof(double));
    const double eps = 1e-5;
    int64_t nfd = 0;
    for (int64_t i = 0; i < nq; i += fd_stride, nfd++) {
        double x0 = dq[i];
        dq[i] = x0 + eps;
        double lp = ref_loss(dq, dd, &m, B, nh, D, tmp_o, tmp_l);
        dq[i] = x0 - eps;
        double lm = ref_loss(dq, dd, &m, B, nh, D, tmp_o, tmp_l);
        dq[i] = x0;
        fd[nfd] = (lp - lm) / (2 * eps);
        dqkv[nfd] = dqkv[i];
    }
    snprintf(what, sizeof what, "attn_bwd dqkv %s D=%lld", name, (long long)D);
    TU_ERR(what, tu_relerr(dqkv, fd, nfd, 1e-3), 1e-4);
    free(qkv);
    free(dout);
    free(out);
    free(lse);
    free(dqkv);
    free(dq);
    free(dd);
    free(rout);
    free(rlse);
    free(fd);
    free(tmp_o);
    free(tmp_l);
}

static void check_case(kf_backend *be, const char *name, kf_mask m, int64_t B, int64_t D) {
    check_case_fd(be, name, m, B, D, 1);
}

/* Pairs the structure exposes for one (sample, head), counted by brute force. */
static int64_t ref_pairs(const kf_mask *m, int64_t vl) {
    int64_t L = kf_mask_len(m), n = 0;
    for (int64_t i = m->q_start; i < L; i++)
        for (int64_t j = 0; j < L; j++) n += ref_visible(m, vl, i, j);
    return n;
}

static void check_pairs(kf_backend *be) {
    const int64_t N = 24, B = 2, nh = 2, D = 8, H = nh * D;
    for (int64_t k = 1; k <= 4; k *= 2) {
        kf_mask m = {.n_ctx = N, .group = k, .n_groups = N};
        int64_t L = kf_mask_len(&m);
        float *qkv = tu_randf(B * L * 3 * H, 1.0),
              *out = kf_malloc((size_t)(B * L * H) * sizeof(float));
        float *lse = kf_malloc((size_t)(B * nh * L) * sizeof(float));
        float *dqkv = kf_malloc((size_t)(B * L * 3 * H) * sizeof(float));
        int64_t p0 = kernels_cpu_attn_pairs(be);
        be->attn_fwd(be, out, lse, qkv, &m, B, nh, D, NULL, NULL);
        int64_t p1 = kernels_cpu_attn_pairs(be);
        be->attn_bwd(be, dqkv, out, out, lse, qkv, &m, B, nh, D, NULL, NULL, NULL, NULL);
        int64_t p2 = kernels_cpu_attn_pairs(be);
        /* paper: N(N+1)/2 context + kN(N+1)/2 staircase + N k(k+1)/2 within groups */
        int64_t want = N * (N + 1) / 2 + k * N * (N + 1) / 2 + N * k * (k + 1) / 2;
        T_EQ_INT(p1 - p0, B * nh * want, "SingleForward k=%lld: fwd visited %lld pairs, want %lld",
                 (long long)k, (long long)(p1 - p0), (long long)(B * nh * want));
        T_EQ_INT(p2 - p1, B * nh * want, "SingleForward k=%lld: bwd visited %lld pairs, want %lld",
                 (long long)k, (long long)(p2 - p1), (long long)(B * nh * want));
        printf("  SingleForward k=%lld N=%lld: %lld pairs per head (dense mask: %lld)\n",
               (long long)k, (long long)N, (long long)want, (long long)(L * L));
        /* DoubleForward (group 2k, only the noise rows) and padded causal, by brute force */
        int32_t vl[2] = {N - 5, N};
        kf_mask md = {.n_ctx = N, .group = 2 * k, .n_groups = N, .q_start = N};
        kf_mask mc = {.n_ctx = N, .valid_len = vl};
        kf_mask mb = {.n_ctx = N, .valid_len = vl, .bidir = 1};
        kf_mask *cases[3] = {&md, &mc, &mb};
        const char *what[3] = {"DoubleForward", "padded causal", "padded bidirectional"};
        for (int c = 0; c < 3; c++) {
            int64_t Lc = kf_mask_len(cases[c]);
            float *q2 = tu_randf(B * Lc * 3 * H, 1.0),
                  *o2 = kf_malloc((size_t)(B * Lc * H) * sizeof(float));
            float *l2 = kf_malloc((size_t)(B * nh * Lc) * sizeof(float));
            int64_t a = kernels_cpu_attn_pairs(be);
            be->attn_fwd(be, o2, l2, q2, cases[c], B, nh, D, NULL, NULL);
            int64_t got = kernels_cpu_attn_pairs(be) - a, exp_ = 0;
            for (int64_t b = 0; b < B; b++)
                exp_ += nh * ref_pairs(cases[c], cases[c]->valid_len ? vl[b] : N);
            T_EQ_INT(got, exp_, "%s k=%lld: visited %lld pairs, structure has %lld", what[c],
                     (long long)k, (long long)got, (long long)exp_);
            free(q2);
            free(o2);
            free(l2);
        }
        free(qkv);
        free(out);
        free(lse);
        free(dqkv);
    }
}

/* Caches [B, cap, H] holding the K and V columns of the first L rows of
 * each sample's qkv rows [B, L, 3H] (zero past L). */
static void fill_caches(float **kc, float **vc, const float *qkv, int64_t B, int64_t L, int64_t cap,
                        int64_t H) {
    *kc = kf_calloc((size_t)(B * cap * H), sizeof(float));
    *vc = kf_calloc((size_t)(B * cap * H), sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++) {
            const float *r = qkv + (b * L + i) * 3 * H;
            memcpy(*kc + (b * cap + i) * H, r + H, (size_t)H * sizeof(float));
            memcpy(*vc + (b * cap + i) * H, r + 2 * H, (size_t)H * sizeof(float));
        }
}

static void check_decode(kf_backend *be) {
    const int64_t B = 2, nh = 2, D = 8, H = nh * D, P = 7, Q = 4, cap = 16, L = P + Q;
    kf_mask m = {.n_ctx = L};
    float *qkv = tu_randf(B * L * 3 * H, 1.5);
    float *out = kf_malloc((size_t)(B * L * H) * sizeof(float)),
          *lse = kf_malloc((size_t)(B * nh * L) * sizeof(float));
    be->attn_fwd(be, out, lse, qkv, &m, B, nh, D, NULL, NULL);
    float *kc, *vc;
    fill_caches(&kc, &vc, qkv, B, L, cap, H);
    float *dec = kf_malloc((size_t)(B * Q * H) * sizeof(float));
    /* queries are rows P.. of each sample; q_stride skips the k|v columns, and
     * the samples are L rows apart, so decode one sample at a time */
    double *want = kf_malloc((size_t)(Q * H) * sizeof(double));
    double err = 0;
    for (int64_t b = 0; b < B; b++) {
        be->attn_decode(be, dec, qkv + (b * L + P) * 3 * H, 3 * H, kc + b * cap * H,
                        vc + b * cap * H, 1, cap, P, NULL, Q, nh, D);
        for (int64_t i = 0; i < Q * H; i++) want[i] = out[(b * L + P) * H + i];
        double e = tu_relerr(dec, want, Q * H, 1e-3);
        err = e > err ? e : err;
    }
    TU_ERR("attn_decode vs attn_fwd (causal)", err, 1e-6);
    /* batched decode: pack the B samples' query rows densely */
    float *qd = kf_malloc((size_t)(B * Q * H) * sizeof(float)),
          *decb = kf_malloc((size_t)(B * Q * H) * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Q; i++)
            memcpy(qd + (b * Q + i) * H, qkv + (b * L + P + i) * 3 * H, (size_t)H * sizeof(float));
    be->attn_decode(be, decb, qd, H, kc, vc, B, cap, P, NULL, Q, nh, D);
    double *w2 = kf_malloc((size_t)(B * Q * H) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Q * H; i++) w2[b * Q * H + i] = out[(b * L + P) * H + i];
    TU_ERR("attn_decode batched", tu_relerr(decb, w2, B * Q * H, 1e-3), 1e-6);
    free(qkv);
    free(out);
    free(lse);
    free(kc);
    free(vc);
    free(dec);
    free(want);
    free(qd);
    free(decb);
    free(w2);
}

/* Decoding on random shapes (KF_TEST_SEED replays another draw): head dims
 * of the generic and the unrolled loops, query counts around the groups
 * decoding scores together, cache lengths across whole key chunks. Each
 * sample's output must be attn_fwd's causal rows bit for bit (the same
 * chain per score, softmax and sum), and near the double reference. */
static void check_decode_random(kf_backend *be) {
    const char *env = getenv("KF_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : 20261201u;
    printf("  decode, random shapes: KF_TEST_SEED=%llu\n", (unsigned long long)seed);
    tu_state = seed ? seed : 1; /* xorshift's state must not be 0 */
    const int64_t dims[] = {8, 20, 32, 48, 64};
    for (int c = 0; c < 24; c++) {
        int64_t B = 1 + (int64_t)((tu_rand() + 1) * 1.5), nh = 1 + (int64_t)((tu_rand() + 1) * 1.5),
                D = dims[(int)((tu_rand() + 1) * 2.5)], P = (int64_t)((tu_rand() + 1) * 40),
                Q = 1 + (int64_t)((tu_rand() + 1) * 6.5), L = P + Q,
                cap = L + (int64_t)((tu_rand() + 1) * 3), H = nh * D;
        kf_mask m = {.n_ctx = L};
        float *qkv = tu_randf(B * L * 3 * H, 2.0);
        float *out = kf_malloc((size_t)(B * L * H) * sizeof(float));
        float *lse = kf_malloc((size_t)(B * nh * L) * sizeof(float));
        be->attn_fwd(be, out, lse, qkv, &m, B, nh, D, NULL, NULL);
        float *kc, *vc;
        fill_caches(&kc, &vc, qkv, B, L, cap, H);
        /* the query rows as decoding holds them: whole qkv rows, q_stride 3H */
        float *qd = kf_malloc((size_t)(B * Q * 3 * H) * sizeof(float));
        float *dec = kf_malloc((size_t)(B * Q * H) * sizeof(float));
        for (int64_t b = 0; b < B; b++)
            memcpy(qd + b * Q * 3 * H, qkv + (b * L + P) * 3 * H,
                   (size_t)(Q * 3 * H) * sizeof(float));
        be->attn_decode(be, dec, qd, 3 * H, kc, vc, B, cap, P, NULL, Q, nh, D);
        double *ro = kf_malloc((size_t)(B * L * H) * sizeof(double));
        double *rl = kf_malloc((size_t)(B * nh * L) * sizeof(double));
        double *dq = tu_tod(qkv, B * L * 3 * H);
        ref_attn(ro, rl, dq, &m, B, nh, D);
        int64_t diff = 0, first = -1;
        double *want = kf_malloc((size_t)(B * Q * H) * sizeof(double));
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Q * H; i++) {
                float f = out[(b * L + P) * H + i], d = dec[b * Q * H + i];
                want[b * Q * H + i] = ro[(b * L + P) * H + i];
                if (memcmp(&f, &d, sizeof f) != 0 && diff++ == 0) first = b * Q * H + i;
            }
        char what[128];
        snprintf(what, sizeof what, "decode B=%lld heads=%lld D=%lld P=%lld Q=%lld", (long long)B,
                 (long long)nh, (long long)D, (long long)P, (long long)Q);
        T_CHECK(diff == 0,
                "%s: %lld outputs differ from attn_fwd (first %lld: got %.9g, want %.9g)", what,
                (long long)diff, (long long)first, first < 0 ? 0.0 : (double)dec[first],
                first < 0 ? 0.0 : (double)out[(first / (Q * H) * L + P) * H + first % (Q * H)]);
        TU_ERR(what, tu_relerr(dec, want, B * Q * H, 1e-3), 1e-5);
        free(qkv);
        free(out);
        free(lse);
        free(kc);
        free(vc);
        free(qd);
        free(dec);
        free(ro);
        free(rl);
        free(dq);
        free(want);
    }
}

/* A 16-bit mode equals rounding the fp32 op's inputs and outputs to the
 * format (rnd: the test's own rounding). */
static void check_lowp(kf_backend *be, kf_precision prec, float (*rnd)(float)) {
    const char *name = kernels_precision_name(prec);
    const int64_t B = 2, nh = 2, D = 8, H = nh * D, k = 2, N = 6;
    int32_t vl[2] = {4, 6};
    kf_mask m = {.n_ctx = N, .group = k, .n_groups = N, .valid_len = vl};
    int64_t L = kf_mask_len(&m), nq = B * L * 3 * H, no = B * L * H, nl = B * nh * L;
    float *qkv = tu_randf(nq, 2.0), *dout = tu_randf(no, 1.0), *q16 = kf_malloc((size_t)nq * 4),
          *d16 = kf_malloc((size_t)no * 4);
    for (int64_t i = 0; i < nq; i++) q16[i] = rnd(qkv[i]);
    for (int64_t i = 0; i < no; i++) d16[i] = rnd(dout[i]);
    float *o_a = kf_malloc((size_t)no * 4), *o_b = kf_malloc((size_t)no * 4),
          *l_a = kf_malloc((size_t)nl * 4), *l_b = kf_malloc((size_t)nl * 4);
    float *g_a = kf_malloc((size_t)nq * 4), *g_b = kf_malloc((size_t)nq * 4);
    be->set_precision(be, prec);
    be->attn_fwd(be, o_a, l_a, qkv, &m, B, nh, D, NULL, NULL);
    be->attn_bwd(be, g_a, dout, o_a, l_a, qkv, &m, B, nh, D, NULL, NULL, NULL, NULL);
    be->set_precision(be, KF_PREC_FP32);
    be->attn_fwd(be, o_b, l_b, q16, &m, B, nh, D, NULL, NULL);
    for (int64_t i = 0; i < no; i++) o_b[i] = rnd(o_b[i]);
    be->attn_bwd(be, g_b, d16, o_b, l_b, q16, &m, B, nh, D, NULL, NULL, NULL, NULL);
    for (int64_t i = 0; i < nq; i++) g_b[i] = rnd(g_b[i]);
    T_CHECK(memcmp(o_a, o_b, (size_t)no * 4) == 0, "%s attn_fwd out != %s(fp32 attn(%s inputs))",
            name, name, name);
    T_CHECK(memcmp(l_a, l_b, (size_t)nl * 4) == 0, "%s attn_fwd lse != fp32 lse of %s inputs", name,
            name);
    T_CHECK(memcmp(g_a, g_b, (size_t)nq * 4) == 0, "%s attn_bwd != %s(fp32 bwd(%s inputs))", name,
            name, name);
    /* decode: q rows of the first sample over its own K/V rows as the caches */
    const int64_t P = 5, Q = 3;
    float *dc_a = kf_malloc((size_t)(Q * H) * 4), *dc_b = kf_malloc((size_t)(Q * H) * 4);
    be->set_precision(be, prec);
    be->attn_decode(be, dc_a, qkv + P * 3 * H, 3 * H, qkv + H, qkv + 2 * H, 1, L / 2, P, NULL, Q,
                    nh, D);
    be->set_precision(be, KF_PREC_FP32);
    /* the caches' row stride is H, so rows j of the cache are qkv floats [H + j*H, ...) */
    be->attn_decode(be, dc_b, q16 + P * 3 * H, 3 * H, q16 + H, q16 + 2 * H, 1, L / 2, P, NULL, Q,
                    nh, D);
    for (int64_t i = 0; i < Q * H; i++) dc_b[i] = rnd(dc_b[i]);
    T_CHECK(memcmp(dc_a, dc_b, (size_t)(Q * H) * 4) == 0,
            "%s attn_decode != %s(fp32 decode(%s inputs))", name, name, name);
    free(dc_a);
    free(dc_b);
    int changed = 0;
    be->attn_fwd(be, o_b, l_b, qkv, &m, B, nh, D, NULL, NULL);
    for (int64_t i = 0; i < no; i++) changed |= o_b[i] != o_a[i];
    T_CHECK(changed, "%s attention gave the fp32 result: no rounding happened", name);
    free(qkv);
    free(dout);
    free(q16);
    free(d16);
    free(o_a);
    free(o_b);
    free(l_a);
    free(l_b);
    free(g_a);
    free(g_b);
}

static void check_threads(kf_backend *be, int64_t D) {
    const int64_t B = 3, nh = 2, H = nh * D, k = 4, N = 20;
    int32_t vl[3] = {20, 13, 1};
    kf_mask m = {.n_ctx = N, .group = k, .n_groups = N, .valid_len = vl};
    int64_t L = kf_mask_len(&m), nq = B * L * 3 * H, no = B * L * H, nl = B * nh * L;
    float *qkv = tu_randf(nq, 2.0), *dout = tu_randf(no, 1.0);
    float *o[2], *l[2], *g[2], *dec[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        o[t] = kf_malloc((size_t)no * 4);
        l[t] = kf_malloc((size_t)nl * 4);
        g[t] = kf_malloc((size_t)nq * 4);
        dec[t] = kf_malloc((size_t)(B * 4 * H) * 4);
        be->attn_fwd(be, o[t], l[t], qkv, &m, B, nh, D, NULL, NULL);
        be->attn_bwd(be, g[t], dout, o[t], l[t], qkv, &m, B, nh, D, NULL, NULL, NULL, NULL);
        /* any in-bounds data serves as caches [B, L/3, H] here */
        be->attn_decode(be, dec[t], qkv, 3 * H, qkv + H, qkv + 2 * H, B, L / 3, 10, NULL, 4, nh, D);
    }
    omp_set_num_threads(2);
    T_EQ_INT(memcmp(o[0], o[1], (size_t)no * 4), 0, "attn_fwd differs between 1 and 2 threads");
    T_EQ_INT(memcmp(l[0], l[1], (size_t)nl * 4), 0, "attn_fwd differs between 1 and 2 threads");
    T_CHECK(memcmp(g[0], g[1], (size_t)nq * 4) == 0, "attn_bwd differs between 1 and 2 threads");
    T_CHECK(memcmp(dec[0], dec[1], (size_t)(B * 4 * H) * 4) == 0,
            "attn_decode differs between 1 and 2 threads");
    /* batch invariance: the last sample alone gives the rows it got inside the batch */
    kf_mask m1 = m;
    m1.valid_len = vl + 2;
    float *o1 = kf_malloc((size_t)(L * H) * 4), *l1 = kf_malloc((size_t)(nh * L) * 4),
          *g1 = kf_malloc((size_t)(L * 3 * H) * 4);
    be->attn_fwd(be, o1, l1, qkv + 2 * L * 3 * H, &m1, 1, nh, D, NULL, NULL);
    be->attn_bwd(be, g1, dout + 2 * L * H, o1, l1, qkv + 2 * L * 3 * H, &m1, 1, nh, D, NULL, NULL,
                 NULL, NULL);
    T_EQ_INT(memcmp(o1, o[1] + 2 * L * H, (size_t)(L * H) * 4), 0,
             "attention of a sample differs alone and inside a batch");
    T_EQ_INT(memcmp(l1, l[1] + 2 * nh * L, (size_t)(nh * L) * 4), 0,
             "attention of a sample differs alone and inside a batch");
    T_EQ_INT(memcmp(g1, g[1] + 2 * L * 3 * H, (size_t)(L * 3 * H) * 4), 0,
             "attention of a sample differs alone and inside a batch");
    free(o1);
    free(l1);
    free(g1);
    for (int t = 0; t < 2; t++) {
        free(o[t]);
        free(l[t]);
        free(g[t]);
        free(dec[t]);
    }
    free(qkv);
    free(dout);
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    const int64_t N = 5;
    int32_t vl[2] = {3, 5};
    /* head dims 8 (generic loops), 32 and 64 (the unrolled ones the models use) */
    check_case(be, "causal", (kf_mask){.n_ctx = 9}, 2, 8);
    check_case_fd(be, "causal (sampled FD)", (kf_mask){.n_ctx = 150}, 1, 32, 211);
    check_case(be, "causal valid_len", (kf_mask){.n_ctx = 9, .valid_len = (int32_t[]){6, 1}}, 2, 8);
    check_case(be, "bidirectional", (kf_mask){.n_ctx = 9, .bidir = 1}, 2, 8);
    check_case(be, "bidirectional valid_len",
               (kf_mask){.n_ctx = 9, .valid_len = (int32_t[]){6, 1}, .bidir = 1}, 2, 8);
    check_case(be, "SingleForward k=2", (kf_mask){.n_ctx = 5, .group = 2, .n_groups = 5}, 1, 64);
    check_case(be, "DoubleForward k=2",
               (kf_mask){.n_ctx = 5, .group = 4, .n_groups = 5, .q_start = 5}, 1, 32);
    /* head dim 48 (configs/tiny.yaml's): three column chunks in one pass */
    check_case(be, "causal, head dim 48", (kf_mask){.n_ctx = 21}, 2, 48);
    check_case(be, "DoubleForward k=4, head dim 48",
               (kf_mask){.n_ctx = 6, .group = 8, .n_groups = 6, .q_start = 6}, 1, 48);
    for (int64_t k = 1; k <= 4; k *= 2) {
        char name[64];
        snprintf(name, sizeof name, "SingleForward k=%lld", (long long)k);
        check_case(be, name, (kf_mask){.n_ctx = N, .group = k, .n_groups = N}, 2, 8);
        snprintf(name, sizeof name, "DoubleForward k=%lld", (long long)k);
        check_case(be, name, (kf_mask){.n_ctx = N, .group = 2 * k, .n_groups = N, .q_start = N}, 2,
                   8);
    }
    check_case(be, "SingleForward k=2 valid_len",
               (kf_mask){.n_ctx = N, .group = 2, .n_groups = N, .valid_len = vl}, 2, 8);
    check_case(be, "DoubleForward k=2 valid_len",
               (kf_mask){.n_ctx = N, .group = 4, .n_groups = N, .q_start = N, .valid_len = vl}, 2,
               8);
    check_pairs(be);
    check_decode(be);
    check_decode_random(be);
    check_lowp(be, KF_PREC_FP16, tu_fp16);
    check_lowp(be, KF_PREC_BF16, tu_bf16);
    check_threads(be, 16);
    check_threads(be, 32);
    check_threads(be, 48);
    be->destroy(be);
    return T_DONE();
}
