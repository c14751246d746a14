/* Quality metrics (trainer/infer/quality.h):
 *  - truncation at the first EOS and mask stripping;
 *  - distinct-1/2/3 against counts worked out by hand;
 *  - unigram entropy and mean length per completion (an empty completion
 *    counting 0), the flag margins at and past their bounds, and the FLAG
 *    column of the formatted row;
 *  - Gen-PPL of a uniform evaluator (output layer zero, mask logit -1000) is
 *    exactly V - 1;
 *  - Gen-PPL of a random evaluator equals the NLL computed here from full
 *    forward passes (host log-softmax in double), one window and several
 *    (a sequence longer than the evaluator's context), for any batch size;
 *  - errors: a PFLM evaluator, an id outside the vocabulary. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/quality.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"

enum { V = 23, EOS = 21, MASK = 22 };

static void randomize(model *m) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(rng_uniform01(11, 3, (uint64_t)i) - 0.5);
    for (int t = 0; t < m->n_tensors; t++)
        if (strstr(m->tensors[t].name, "norm") && strstr(m->tensors[t].name, ".weight"))
            for (int64_t e = 0; e < m->tensors[t].numel; e++) h[m->tensors[t].offset + e] += 1.0f;
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

/* NLL of seq[from..to) given seq[start..t) for each t, by one forward pass
 * over seq[start..to) (host log-softmax in double). */
static double window_nll(model *m, const int32_t *seq, int64_t start, int64_t to, int64_t from) {
    int64_t L = to - start;
    layout l;
    layout_ar(&l, L);
    model_ws *ws = model_ws_create(m);
    model_input in = {.lay = &l, .B = 1, .ids = seq + start};
    const float *d = model_forward(m, ws, &in, 0, NULL);
    float *h = malloc((size_t)(L * V) * sizeof(float));
    m->be->download(m->be, h, d, (size_t)(L * V) * sizeof(float));
    double nll = 0;
    for (int64_t t = 0; t + 1 < L; t++) {
        if (start + t + 1 < from) continue;
        const float *r = h + t * V;
        double mx = r[0], s = 0;
        for (int v = 1; v < V; v++) mx = fmax(mx, r[v]);
        for (int v = 0; v < V; v++) s += exp(r[v] - mx);
        nll += -(r[seq[start + t + 1]] - mx - log(s));
    }
    free(h);
    model_ws_free(ws);
    layout_free(&l);
    return nll;
}

int main(void) {
    omp_env_passive(); /* spinning OpenMP workers starve OpenBLAS on few cores */
    /* clean */
    int32_t c0[] = {5, MASK, 6, EOS, 7}, o[8];
    int64_t n0 = quality_clean(c0, 5, EOS, MASK, o);
    T_EQ_INT(n0, 2, "clean: got %lld ids", (long long)n0);
    T_EQ_INT(o[0], 5, "clean: got %lld ids", (long long)n0);
    T_EQ_INT(o[1], 6, "clean: got %lld ids", (long long)n0);
    T_EQ_INT(quality_clean(c0, 5, -1, -1, o), 5, "clean without eos/strip keeps everything");

    /* distinct-n: [1 2 1 2], [1 2 3], [4 EOS 9 9] -> cleaned [1 2 1 2] [1 2 3] [4] */
    int32_t a[] = {1, 2, 1, 2}, b[] = {1, 2, 3}, c[] = {4, EOS, 9, 9}, none[1] = {0};
    quality_sample ds[3] = {{none, 0, a, 4}, {none, 0, b, 3}, {none, 0, c, 4}};
    double d[3];
    quality_distinct(ds, 3, EOS, MASK, 3, d);
    printf("distinct-1/2/3 = %.4f %.4f %.4f\n", d[0], d[1], d[2]);
    T_CLOSE(d[0], 4.0 / 8.0, 1e-12, "distinct-1 (4 distinct of 8 unigrams)");
    T_CLOSE(d[1], 3.0 / 5.0, 1e-12, "distinct-2 (3 distinct of 5 bigrams)");
    T_CLOSE(d[2], 3.0 / 3.0, 1e-12, "distinct-3 (3 distinct of 3 trigrams)");

    /* stats: the three above plus one that is EOS at once; cleaned
     * [1 2 1 2] [1 2 3] [4] [] -> entropies ln 2, ln 3, 0, 0; lengths 4 3 1 0 */
    int32_t e[] = {EOS, 5};
    quality_sample ss[4] = {ds[0], ds[1], ds[2], {none, 0, e, 2}};
    quality_stats st;
    quality_stats_compute(ss, 4, EOS, MASK, &st);
    printf("stats: entropy %.6f, mean length %.4f, distinct-2 %.4f\n", st.entropy, st.mean_len,
           st.distinct[1]);
    T_CLOSE(st.entropy, (log(2.0) + log(3.0)) / 4, 1e-12,
            "mean unigram entropy (nats), empty completion = 0");
    T_CLOSE(st.mean_len, 8.0 / 4, 1e-12, "mean length before EOS");
    T_CLOSE(st.distinct[1], 3.0 / 5.0, 1e-12, "stats carry distinct-2");
    T_EQ_INT(st.samples, 4, "stats: samples got %lld want 4", (long long)st.samples);

    /* flags: AR {Gen-PPL 100, entropy 3, length 50}; the bounds themselves pass */
    quality_row ar = {.gen_ppl = 100, .st = {.entropy = 3.0, .mean_len = 50}};
    quality_row edge = {.gen_ppl = 130, .st = {.entropy = 2.7, .mean_len = 45}};
    quality_row bad = {.gen_ppl = 131, .st = {.entropy = 2.69, .mean_len = 44.9}};
    quality_row nan_ppl = {.gen_ppl = NAN, .st = {.entropy = 3.0, .mean_len = 50}};
    char why[160], row[256];
    int nf = quality_flag(&edge, &ar, why, sizeof why);
    T_EQ_INT(nf, 0, "flag at the bounds: got %d reasons \"%s\", want 0 \"\"", nf, why);
    T_CHECK(!why[0], "flag at the bounds: got %d reasons \"%s\", want 0 \"\"", nf, why);
    nf = quality_flag(&bad, &ar, why, sizeof why);
    T_EQ_INT(nf, 3, "flag past every bound: got %d reasons (%s), want 3", nf, why);
    T_CHECK(!strcmp(why, "Gen-PPL 1.31x AR > 1.3; entropy 0.90x AR < 0.9; length 0.90x AR < 0.9"),
            "flag text: got \"%s\" want \"Gen-PPL 1.31x AR > 1.3; entropy 0.90x AR < 0.9; length "
            "0.90x AR < 0.9\"",
            why);
    nf = quality_flag(&nan_ppl, &ar, why, sizeof why);
    T_EQ_INT(nf, 0, "a Gen-PPL not measured is not flagged: got %d reasons (%s), want 0", nf, why);
    quality_format(&bad, &ar, row, sizeof row);
    T_CHECK(strstr(row, "  FLAG: Gen-PPL 1.31x AR") != NULL,
            "formatted flagged row: got \"%s\" want a FLAG column", row);
    T_CHECK(strstr(row, " 131.0    2.69") != NULL,
            "formatted row columns: got \"%s\" want \" 131.0    2.69\"", row);
    quality_format(&ar, &ar, row, sizeof row);
    T_CHECK(!strstr(row, "FLAG"), "AR's own row: got \"%s\" want no FLAG", row);
    quality_format(&nan_ppl, NULL, row, sizeof row);
    T_CHECK(!strncmp(row, "       -", 8), "a figure not measured prints -: got \"%s\"", row);

    kf_backend *be = kernels_cpu_create();
    model_config cfg = {.hidden = 16,
                        .heads = 2,
                        .blocks = 2,
                        .vocab = V,
                        .mask_id = MASK,
                        .seq_len = 64,
                        .kind = MODEL_AR,
                        .head = HEAD_SHARED,
                        .k_train = 1};
    model *m = model_create(be, &cfg);
    model_init(m, 3);

    /* samples: prefixes of 3 tokens, completions with EOS, masks, varied lengths */
    enum { NS = 5, PL = 3, CL = 30 };
    int32_t pre[NS][PL], comp[NS][CL];
    quality_sample s[NS];
    int64_t want_tokens = 0;
    for (int i = 0; i < NS; i++) {
        for (int j = 0; j < PL; j++)
            pre[i][j] = (int32_t)rng_below(5, (uint64_t)i, (uint64_t)j, 20);
        for (int j = 0; j < CL; j++)
            comp[i][j] = (int32_t)rng_below(6, (uint64_t)i, (uint64_t)j, 20);
        comp[i][3] = MASK;
        if (i % 2) comp[i][10 + i] = EOS;
        s[i] = (quality_sample){pre[i], PL, comp[i], CL};
        int32_t tmp[CL];
        want_tokens += quality_clean(comp[i], CL, EOS, MASK, tmp);
    }
    kf_err err;
    quality_ppl q;
    T_EQ_INT(quality_genppl(m, s, NS, EOS, 4, &q, &err), 0, "genppl: %s", err.msg);
    printf("uniform evaluator: Gen-PPL %.6f over %lld tokens (V - 1 = %d)\n", q.ppl,
           (long long)q.tokens, V - 1);
    T_CLOSE(q.ppl, V - 1, 1e-4 * (V - 1), "uniform evaluator's Gen-PPL is V - 1");
    T_EQ_INT(q.tokens, want_tokens, "scored %lld tokens, want %lld", (long long)q.tokens,
             (long long)want_tokens);

    /* random evaluator: against full forward passes, for several batch sizes */
    randomize(m);
    double want = 0;
    int32_t seq[PL + CL];
    for (int i = 0; i < NS; i++) {
        memcpy(seq, pre[i], sizeof pre[i]);
        int64_t n = PL + quality_clean(comp[i], CL, EOS, MASK, seq + PL);
        want += window_nll(m, seq, 0, n, PL);
    }
    for (int64_t bs = 1; bs <= 7; bs += 3) {
        T_EQ_INT(quality_genppl(m, s, NS, EOS, bs, &q, &err), 0, "genppl: %s", err.msg);
        printf("random evaluator, batch %lld: NLL sum %.9f (direct %.9f), Gen-PPL %.4f\n",
               (long long)bs, q.nll_sum, want, q.ppl);
        T_CLOSE(q.nll_sum, want, 1e-6 * fabs(want), "NLL sum vs direct computation");
    }

    /* context of 8: sequences are scored in windows [0,8) [7,15) [14,21) ... */
    model_free(m);
    cfg.seq_len = 8;
    m = model_create(be, &cfg);
    randomize(m);
    want = 0;
    for (int i = 0; i < NS; i++) {
        memcpy(seq, pre[i], sizeof pre[i]);
        int64_t n = PL + quality_clean(comp[i], CL, EOS, MASK, seq + PL);
        for (int64_t st = 0; st < n - 1; st += 7)
            want += window_nll(m, seq, st, st + 8 < n ? st + 8 : n, PL);
    }
    T_EQ_INT(quality_genppl(m, s, NS, EOS, 3, &q, &err), 0, "genppl: %s", err.msg);
    printf("context 8: NLL sum %.9f (windows computed directly %.9f), %lld tokens\n", q.nll_sum,
           want, (long long)q.tokens);
    T_CLOSE(q.nll_sum, want, 1e-6 * fabs(want), "windowed NLL vs direct computation");
    T_EQ_INT(q.tokens, want_tokens, "windowed: every completion token scored once (%lld vs %lld)",
             (long long)q.tokens, (long long)want_tokens);

    /* errors */
    comp[2][0] = V + 5;
    T_EQ_INT(quality_genppl(m, s, NS, EOS, 3, &q, &err), -1,
             "an id outside the vocabulary is refused");
    T_CHECK(strstr(err.msg, "vocabulary"), "an id outside the vocabulary is refused");
    model_free(m);
    cfg.kind = MODEL_PFLM;
    m = model_create(be, &cfg);
    T_EQ_INT(quality_genppl(m, s, NS, EOS, 3, &q, &err), -1, "a PFLM evaluator is refused");
    T_CHECK(strstr(err.msg, "AR"), "a PFLM evaluator is refused");
    model_free(m);
    be->destroy(be);
    return T_DONE();
}
