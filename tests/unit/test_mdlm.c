/* Masked diffusion (MDLM) against its definitions, recomputed here:
 * (a) supervision: each sample's time, mask rate, masked positions, targets
 *     and loss weight from MDLM's formulas (log-linear schedule, eps 1e-3,
 *     sampling_eps 1e-3, antithetic strata), with the draws' documented keys;
 * (b) the attention is bidirectional: row 0's logits move when the last token
 *     changes (and do not in the causal model);
 * (c) the loss: model_loss of a training pass equals MDLM's token NELBO
 *     sum_b w_b sum_{masked t} -log p(x_t) / (valid positions), computed in
 *     double from the pass's logits, and its gradient equals the w_b-weighted
 *     sum of per-sample unweighted gradients (fp32, and bf16 where the weights
 *     reach the 16-bit cross-entropy as row weights);
 * (d) the checkpoint records the attention (kf.attn) and reads it back;
 * (e) the sampler: every pass unmasks exactly min(k, left) positions and
 *     never changes an unmasked one or the prefix; NFE = ceil(n_new / k)
 *     (hand-checked cases); pass 0's choice is the k most confident
 *     inverse-CDF samples recomputed on the host; the same tokens for 1 and 3
 *     threads and for the batch split row by row; a causal model is refused. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/infer/mdlm_sample.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

enum { V = 19, MASK = 18, H = 32, NB = 4, N = 12 };

static model *tiny(kf_backend *be, int bidir) {
    model_config c = {.hidden = H,
                      .heads = 2,
                      .blocks = 2,
                      .vocab = V,
                      .mask_id = MASK,
                      .seq_len = 32,
                      .kind = MODEL_AR,
                      .head = HEAD_SHARED,
                      .k_train = 1,
                      .bidir = bidir};
    model *m = model_create(be, &c);
    model_init(m, 7);
    /* a non-zero output layer (model_init zeroes it) */
    float *h = malloc((size_t)m->n_params * sizeof(float));
    be->download(be, h, m->params, (size_t)m->n_params * sizeof(float));
    const model_tensor *w = model_find(m, "output_layer.linear.weight");
    for (int64_t i = 0; i < w->numel; i++)
        h[w->offset + i] = (float)(2.0 * (rng_uniform01(9, 1, (uint64_t)i) - 0.5));
    be->upload(be, m->params, h, (size_t)m->n_params * sizeof(float));
    model_params_changed(m);
    free(h);
    return m;
}

/* MDLM's supervision with this test's mask token (mask_id -1: none). */
static sup_ctx *mdlm_sup(uint64_t seed, int64_t strata, int64_t mask_id, kf_err *err) {
    sup_config sc = {.kind = SUP_MDLM,
                     .k = 1,
                     .tau_min = 1,
                     .tau_max = 1,
                     .seed = seed,
                     .mask_id = mask_id,
                     .strata = strata};
    return sup_create(&sc, NULL, err);
}

/* (a) */
static void test_supervision(void) {
    const int64_t B = 6, S = 6;
    kf_err err;
    sup_ctx *s = mdlm_sup(11, S, MASK, &err);
    T_REQUIRE(s != NULL, "sup_create: %s", err.msg);
    int32_t tok[6 * N], vl[6] = {N, N, N, 5, N, N};
    uint64_t keys[6];
    for (int64_t i = 0; i < B * N; i++) tok[i] = (int32_t)(i * 7 % MASK);
    for (int64_t b = 0; b < B; b++) keys[b] = (uint64_t)(120 + b); /* one global batch */
    sup_batch sb;
    sup_build(s, &sb, tok, B, N, vl, keys);
    T_EQ_INT(sb.rows, B * N, "rows %lld", (long long)sb.rows);
    T_EQ_INT(sb.n_targets, 5 * N + 5, "n_targets %lld (every valid position)",
             (long long)sb.n_targets);
    T_CHECK(sb.in.valid_len == NULL, "MDLM attends to pads (no valid_len)");
    int strata_seen[6] = {0}, bad = 0, masked = 0;
    for (int64_t b = 0; b < B; b++) {
        double U = rng_uniform01(11, keys[b], (uint64_t)4 << 56);
        double u = fmod(U / S + (double)(keys[b] % S) / S, 1.0);
        double t = (1 - 1e-3) * u + 1e-3, move = (1 - 1e-3) * t;
        strata_seen[(int)(u * S)]++;
        T_NEAR(sb.in.loss_w[b], 1.0 / t, 1e-6 / t, "sample %lld weight vs 1/t", (long long)b);
        for (int64_t i = 0; i < N; i++) {
            double d = rng_uniform01(11, keys[b], (uint64_t)5 << 56 | (uint64_t)i << 16);
            int m = d < move;
            masked += m;
            int32_t want_id = m ? MASK : tok[b * N + i];
            int32_t want_t = m && i < vl[b] ? tok[b * N + i] : -1;
            bad += sb.in.ids[b * N + i] != want_id || sb.targets[b * N + i] != want_t;
        }
    }
    T_EQ_INT(bad, 0, "%d positions' ids or targets differ from MDLM's q_xt", bad);
    T_CHECK(masked > 0 && masked < B * N, "masked %d of %lld", masked, (long long)(B * N));
    for (int i = 0; i < S; i++)
        T_EQ_INT(strata_seen[i], 1, "antithetic stratum %d holds %d times", i, strata_seen[i]);
    double move, w = sup_mdlm_schedule(0.3, &move);
    T_NEAR(move, 0.999 * 0.3, 1e-15, "mask rate at t = 0.3");
    T_NEAR(w, 1 / 0.3, 1e-12, "dsigma / expm1(sigma) at t = 0.3");
    T_CHECK(mdlm_sup(11, S, -1, &err) == NULL, "mdlm without a mask token is refused");
    sup_free(s);
}

static void logits_of(model *m, const int32_t *ids, int64_t B, int64_t n, float *out) {
    layout l;
    layout_ar(&l, n);
    model_ws *ws = model_ws_create(m);
    model_input in = {.lay = &l, .B = B, .ids = ids};
    const float *lg = model_forward(m, ws, &in, 0, NULL);
    m->be->download(m->be, out, lg, (size_t)(B * n * V) * sizeof(float));
    model_ws_free(ws);
    layout_free(&l);
}

/* (b) */
static void test_bidirectional(kf_backend *be) {
    for (int bidir = 0; bidir <= 1; bidir++) {
        model *m = tiny(be, bidir);
        int32_t ids[N];
        for (int i = 0; i < N; i++) ids[i] = i % MASK;
        float a[N * V], b[N * V];
        logits_of(m, ids, 1, N, a);
        ids[N - 1] = (ids[N - 1] + 5) % MASK;
        logits_of(m, ids, 1, N, b);
        double d = 0;
        for (int v = 0; v < V; v++) d = fmax(d, fabs(a[v] - b[v]));
        if (bidir) T_CHECK(d > 1e-4, "bidirectional: row 0 moves with the last token (%g)", d);
        else T_CHECK(d == 0, "causal: row 0 ignores the last token (%g)", d);
        T_EQ_INT((int)a[MASK], -1000, "mask logit %g", a[MASK]);
        model_free(m);
    }
}

/* (c), in precision prec (bf16: the weights reach xent16 as row weights) */
static void test_loss(kf_backend *be, kf_precision prec, double tol) {
    const int64_t B = NB;
    model *m = tiny(be, 1);
    be->set_precision(be, prec);
    kf_err err;
    sup_ctx *s = mdlm_sup(5, B, MASK, &err);
    int32_t tok[NB * N], vl[NB] = {N, 9, N, N};
    uint64_t keys[NB] = {0, 1, 2, 3};
    for (int64_t i = 0; i < B * N; i++) tok[i] = (int32_t)((i * 5 + 3) % MASK);
    sup_batch sb;
    sup_build(s, &sb, tok, B, N, vl, keys);
    /* the reference NELBO from the pass's logits, in double */
    float *lg = malloc((size_t)(B * N * V) * sizeof(float));
    logits_of(m, sb.in.ids, B, N, lg);
    double ref = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < N; t++) {
            int32_t x = sb.targets[b * N + t];
            if (x < 0) continue;
            const float *r = lg + (b * N + t) * V;
            double mx = -INFINITY, se = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, r[v]);
            for (int v = 0; v < V; v++) se += exp(r[v] - mx);
            ref += sb.in.loss_w[b] * (mx + log(se) - r[x]);
        }
    ref /= (double)sb.n_targets;
    model_ws *ws = model_ws_create(m);
    model_zero_grads(m);
    model_forward(m, ws, &sb.in, MODEL_TRAIN, NULL);
    double got = model_loss(m, ws, sb.targets, (double)sb.n_targets, 1.0f, NULL, NULL) /
                 (double)sb.n_targets;
    model_backward(m, ws);
    T_NEAR(got, ref, tol * fabs(ref), "prec %d: NELBO %.9g vs the reference %.9g", (int)prec, got,
           ref);
    float *g = malloc((size_t)m->n_params * sizeof(float)),
          *gs = calloc((size_t)m->n_params, sizeof(float)),
          *g1 = malloc((size_t)m->n_params * sizeof(float));
    be->download(be, g, m->grads, (size_t)m->n_params * sizeof(float));
    /* per sample, unweighted, then weighted and summed here */
    for (int64_t b = 0; b < B; b++) {
        model_input in1 = {.lay = sb.lay, .B = 1, .ids = sb.in.ids + b * N};
        model_zero_grads(m);
        model_forward(m, ws, &in1, MODEL_TRAIN, NULL);
        model_loss(m, ws, sb.targets + b * N, (double)sb.n_targets, 1.0f, NULL, NULL);
        model_backward(m, ws);
        be->download(be, g1, m->grads, (size_t)m->n_params * sizeof(float));
        for (int64_t i = 0; i < m->n_params; i++) gs[i] += sb.in.loss_w[b] * g1[i];
    }
    double md = 0, mx = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        md = fmax(md, fabs(g[i] - gs[i]));
        mx = fmax(mx, fabs(gs[i]));
    }
    T_CHECK(mx > 0 && md <= tol * mx, "prec %d: weighted gradient: max |diff| %g (max |g| %g)",
            (int)prec, md, mx);
    free(lg), free(g), free(gs), free(g1);
    model_ws_free(ws);
    sup_free(s);
    model_free(m);
    be->set_precision(be, KF_PREC_FP32);
}

/* (d) */
static void test_checkpoint(kf_backend *be) {
    char path[] = "/tmp/kf_test_mdlm_XXXXXX";
    int fd = mkstemp(path);
    T_REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    for (int bidir = 0; bidir <= 1; bidir++) {
        model *m = tiny(be, bidir);
        kf_err err;
        T_REQUIRE(model_save(m, path, NULL, &err) == 0, "model_save: %s", err.msg);
        model_config c;
        T_REQUIRE(model_read_config(path, &c, &err) == 0, "model_read_config: %s", err.msg);
        T_EQ_INT(c.bidir, bidir, "kf.attn read back as bidir %d", c.bidir);
        model_free(m);
    }
    unlink(path);
}

/* The host's pass-0 choice: inverse-CDF samples (double, id order) at the
 * documented draws, then the k most probable (lower position on ties). */
static void host_first_pass(const float *lg, int64_t Nn, int64_t k, uint64_t seed, uint64_t key,
                            int32_t *want /* [Nn], MASK where left masked */) {
    double *conf = malloc((size_t)Nn * sizeof(double));
    int32_t *tok = malloc((size_t)Nn * sizeof(int32_t));
    for (int64_t i = 0; i < Nn; i++) {
        const float *r = lg + i * V;
        double mx = -INFINITY, se = 0, c = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, r[v]);
        for (int v = 0; v < V; v++) se += exp(r[v] - mx);
        double z = rng_uniform01(seed, key, (uint64_t)i);
        int32_t x = V - 1;
        for (int v = 0; v < V; v++) {
            c += exp(r[v] - mx) / se;
            if (c >= z) {
                x = v;
                break;
            }
        }
        tok[i] = x;
        conf[i] = exp(r[x] - mx) / se;
        want[i] = MASK;
    }
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < Nn; i++)
            if (want[i] == MASK && (best < 0 || conf[i] > conf[best])) best = i;
        want[best] = tok[best];
    }
    free(conf), free(tok);
}

/* (e) */
static void test_sampler(kf_backend *be) {
    T_EQ_INT(mdlm_sample_nfe(11, 3), 4, "nfe(11, 3)");
    T_EQ_INT(mdlm_sample_nfe(12, 3), 4, "nfe(12, 3)");
    T_EQ_INT(mdlm_sample_nfe(11, 1), 11, "nfe(11, 1)");
    T_EQ_INT(mdlm_sample_nfe(11, 20), 1, "nfe(11, 20)");
    model *m = tiny(be, 1);
    enum { B = 3, P = 4, NN = 11 };
    int32_t pre[B * P];
    for (int i = 0; i < B * P; i++) pre[i] = (i * 3 + 1) % MASK;
    for (int64_t k = 1; k <= 4; k++) {
        int64_t passes = mdlm_sample_nfe(NN, k), L = P + NN;
        int32_t out[B * NN], *trace = malloc((size_t)(passes * B * L) * sizeof(int32_t));
        int64_t nfe[B];
        mdlm_sample_opts o = {.n_new = NN, .k = k, .seed = 3, .tau = 1.0, .trace = trace};
        kf_err err;
        T_REQUIRE(mdlm_sample_run(m, pre, B, P, &o, NULL, out, nfe, &err) == 0, "run: %s", err.msg);
        int bad_count = 0, bad_keep = 0, bad_prefix = 0, bad_final = 0, bad_nfe = 0;
        for (int64_t b = 0; b < B; b++) {
            bad_nfe += nfe[b] != passes;
            for (int64_t s = 0; s < passes; s++) {
                const int32_t *row = trace + (s * B + b) * L;
                int64_t un = 0;
                for (int64_t i = 0; i < P; i++) bad_prefix += row[i] != pre[b * P + i];
                for (int64_t i = 0; i < NN; i++) {
                    un += row[P + i] != MASK;
                    if (s > 0 && row[P + i] != row[P + i - B * L] && row[P + i - B * L] != MASK)
                        bad_keep++;
                }
                int64_t want = (s + 1) * k < NN ? (s + 1) * k : NN;
                bad_count += un != want;
            }
            bad_final += memcmp(out + b * NN, trace + ((passes - 1) * B + b) * L + P,
                                NN * sizeof(int32_t)) != 0;
        }
        T_EQ_INT(bad_count, 0, "k=%lld: %d passes unmasked other than min(k, left)", (long long)k,
                 bad_count);
        T_EQ_INT(bad_keep, 0, "k=%lld: %d unmasked tokens changed later", (long long)k, bad_keep);
        T_EQ_INT(bad_prefix, 0, "k=%lld: %d prefix tokens changed", (long long)k, bad_prefix);
        T_EQ_INT(bad_final, 0, "k=%lld: %d rows' output differs from the last pass", (long long)k,
                 bad_final);
        T_EQ_INT(bad_nfe, 0, "k=%lld: %d rows' NFE differ from %lld", (long long)k, bad_nfe,
                 (long long)passes);
        /* pass 0 against the host's own sampling and ranking */
        int32_t ids[P + NN];
        float *lg = malloc((size_t)((P + NN) * V) * sizeof(float));
        int bad_first = 0;
        for (int64_t b = 0; b < B; b++) {
            memcpy(ids, pre + b * P, P * sizeof(int32_t));
            for (int i = 0; i < NN; i++) ids[P + i] = MASK;
            logits_of(m, ids, 1, P + NN, lg);
            int32_t want[NN];
            host_first_pass(lg + P * V, NN, k, 3, (uint64_t)b, want);
            bad_first += memcmp(want, trace + b * L + P, sizeof want) != 0;
        }
        T_EQ_INT(bad_first, 0, "k=%lld: %d rows' first pass differ from the host's choice",
                 (long long)k, bad_first);
        /* 1 thread, and row by row with each row's key */
        int32_t out1[B * NN], outr[B * NN];
        o.trace = NULL;
        int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        mdlm_sample_run(m, pre, B, P, &o, NULL, out1, NULL, &err);
        omp_set_num_threads(3);
        for (int64_t b = 0; b < B; b++) {
            uint64_t key = (uint64_t)b;
            mdlm_sample_run(m, pre + b * P, 1, P, &o, &key, outr + b * NN, NULL, &err);
        }
        omp_set_num_threads(nt);
        T_CHECK(!memcmp(out, out1, sizeof out), "k=%lld: 1 thread gives other tokens",
                (long long)k);
        T_CHECK(!memcmp(out, outr, sizeof out), "k=%lld: the batch split row by row differs",
                (long long)k);
        free(lg);
        free(trace);
    }
    model_free(m);
    model *c = tiny(be, 0);
    mdlm_sample_opts o = {.n_new = 4, .k = 1, .seed = 1};
    int32_t out[4];
    kf_err err;
    int rc = mdlm_sample_run(c, pre, 1, P, &o, NULL, out, NULL, &err);
    T_REFUSED(rc, err.msg, "causal", "a causal model");
    model_free(c);
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    test_supervision();
    test_bidirectional(be);
    test_loss(be, KF_PREC_FP32, 1e-5);
    test_loss(be, KF_PREC_BF16, 2e-2);
    test_checkpoint(be);
    test_sampler(be);
    be->destroy(be);
    return T_DONE();
}
