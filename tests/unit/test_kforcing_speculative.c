/* Speculative decoding (trainer/infer/speculative.h) is lossless.
 *
 * Language: a noisy second-order Markov chain over S symbols, built as
 * tools/synth_lang.py builds its own (2 or 3 successors per context with
 * Dirichlet(1) weights, plus `noise` spread uniformly): every continuation is
 * possible and the next tokens are genuinely random. A small AR model is
 * trained on it, then from it a PTP draft (noise inversion, fully causal:
 * the ablation variant B) and Medusa heads on the frozen AR, all briefly, so
 * the drafts are imperfect.
 *
 * (a) greedy, both drafts: the tokens equal the AR's greedy tokens (a
 *     step-by-step argmax decode through model_decode_step's own argmax) at
 *     every k;
 * (b) tau = 1, PTP: the tokens equal the AR's inverse-CDF sample path of the
 *     same uniforms, the CDF over ids sorted by descending probability,
 *     computed here by a full sort of every step's logits (independent of
 *     spec_icdf_sorted's heap), at every k;
 * (c) tau = 1, both drafts: over N draws the empirical joint of the first two
 *     new tokens is within sampling noise of the AR's exact joint
 *     (enumerated), as AR samples from decode_run are; the PTP draft's own
 *     samples are not (so the check has power);
 * (d) the NFE and acceptance counts of hand-checked cases: constant models
 *     whose drafts are all accepted, or all rejected;
 * (e) Medusa training left the backbone frozen, and a Medusa model saves and
 *     loads (checkpoint format version 3);
 * (f) spec_check refuses what it must. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/model_fit.h"
#include "trainer/infer/decode.h"
#include "trainer/infer/speculative.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

enum { S = 6, NTOK = 32, BATCH = 16, P = 4, NEW = 20, ROWS = 12, KMAX = 3, DRAWS = 6000 };
static double table[S][S][S]; /* p(x_t = c | x_{t-2} = a, x_{t-1} = b) */

static void make_language(void) {
    const double noise = 0.1;
    for (int a = 0; a < S; a++)
        for (int b = 0; b < S; b++) {
            uint64_t ctx = (uint64_t)(a * S + b);
            int n = 2 + (int)rng_below(5, ctx, 0, 2), succ[3];
            double w[3];
            for (int i = 0, tries = 0; i < n; tries++) { /* distinct successors */
                int c = (int)rng_below(5, ctx, (uint64_t)(1 + tries), S), dup = 0;
                for (int j = 0; j < i; j++) dup |= succ[j] == c;
                if (dup) continue;
                succ[i] = c;
                w[i] = -log(rng_uniform01(6, ctx, (uint64_t)i)); /* Dirichlet(1, ...) */
                i++;
            }
            double tot = 0;
            for (int i = 0; i < n; i++) tot += w[i];
            for (int c = 0; c < S; c++) table[a][b][c] = noise / S;
            for (int i = 0; i < n; i++) table[a][b][succ[i]] += (1 - noise) * w[i] / tot;
        }
}

static int draw(const double *p, double u) {
    double acc = 0;
    for (int c = 0; c < S; c++) {
        acc += p[c];
        if (u < acc) return c;
    }
    return S - 1;
}

static void chain(int32_t *x, int64_t n, uint64_t key) {
    x[0] = (int32_t)rng_below(7, key, 0, S);
    x[1] = (int32_t)rng_below(7, key, 1, S);
    for (int64_t t = 2; t < n; t++)
        x[t] = draw(table[x[t - 2]][x[t - 1]], rng_uniform01(8, key, (uint64_t)t));
}

static void lang_data(int32_t *tok, int64_t B, int64_t n, const uint64_t *keys) {
    for (int64_t b = 0; b < B; b++) chain(tok + b * n, n, keys[b]);
}

static model *train(kf_backend *be, model *teacher, const model_config *base, sup_kind kind,
                    int64_t k, int64_t steps) {
    kf_err err;
    sup_config sc = {.kind = kind, .k = k, .tau_min = 1.0, .tau_max = 1.0, .seed = 11};
    model_config mc = sup_student_config(&sc, base);
    model *m = model_create(be, &mc);
    model_init(m, 3);
    if (teacher) model_copy_matching(m, teacher);
    sup_ctx *sup = sup_create(&sc, teacher, &err);
    T_REQUIRE(sup != NULL, "sup_create: %s", err.msg);
    double loss = fit_run(m, sup, lang_data, BATCH, NTOK, steps, 3e-3f, (uint64_t)kind << 40);
    printf("%s: %lld steps, final loss %.4f\n",
           kind == SUP_AR       ? "AR"
           : kind == SUP_MEDUSA ? "Medusa heads"
                                : "PTP draft (variant B)",
           (long long)steps, loss);
    sup_free(sup);
    return m;
}

/* The AR's tokens step by step, one row a step: argmax (z NULL) through
 * model_decode_step's own argmax, or the sorted inverse CDF at z(i). */
typedef struct ranked {
    double p;
    int32_t id;
} ranked;
static int by_prob(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

static void ar_reference(model *ar, const int32_t *prefix, int64_t B, uint64_t seed,
                         const uint64_t *keys, int sample, int32_t *out) {
    kf_backend *be = ar->be;
    int64_t V = ar->cfg.vocab;
    model_heads *h = model_heads_pack(ar);
    model_cache *c = model_cache_create(ar, h, B, P + NEW);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * P)),
            *dev = be->alloc(be, sizeof(int32_t) * (size_t)B);
    float *lg = malloc(sizeof(float) * (size_t)(B * V));
    uint8_t noise[P] = {0};
    ranked r[S];
    memcpy(ids, prefix, sizeof(int32_t) * (size_t)(B * P));
    for (int64_t i = 0; i < NEW; i++) {
        int64_t Q = i == 0 ? P : 1;
        int32_t row = (int32_t)(Q - 1);
        const float *l =
            model_decode_step(ar, c, Q, noise, ids, NULL, NULL, 1, &row, Q, sample ? NULL : dev);
        if (!sample) {
            be->download(be, ids, dev, sizeof(int32_t) * (size_t)B);
        } else {
            be->download(be, lg, l, sizeof(float) * (size_t)(B * V));
            for (int64_t b = 0; b < B; b++) {
                double mx = -INFINITY, sum = 0, acc = 0;
                for (int v = 0; v < V; v++) mx = fmax(mx, lg[b * V + v]);
                for (int v = 0; v < V; v++) {
                    r[v] = (ranked){exp(lg[b * V + v] - mx), v};
                    sum += r[v].p;
                }
                qsort(r, (size_t)V, sizeof *r, by_prob);
                double goal = rng_uniform01(seed, keys[b], (uint64_t)i) * sum;
                int v = 0;
                while (v < V - 1 && (acc += r[v].p) <= goal) v++;
                ids[b] = r[v].id;
            }
        }
        for (int64_t b = 0; b < B; b++) out[b * NEW + i] = ids[b];
    }
    be->free(be, dev);
    free(ids);
    free(lg);
    model_cache_free(c);
    model_heads_free(h);
}

/* Sets a model's output bias so that token `tok` always wins (the output
 * weights are zero after model_init, so its logits are the bias). */
static void force_token(model *m, int32_t tok) {
    const model_tensor *t = model_find(m, "output_layer.linear.bias");
    float bias[S] = {0};
    bias[tok] = 5.0f;
    m->be->upload(m->be, m->params + t->offset, bias, sizeof bias);
    model_params_changed(m);
}

static double tv_two(const double *emp, const double *joint) {
    double tv = 0;
    for (int c = 0; c < S * S; c++) tv += fabs(emp[c] - joint[c]);
    return tv / 2;
}

static void histogram(const int32_t *out, int64_t n_new, double *emp) {
    memset(emp, 0, sizeof(double) * S * S);
    for (int d = 0; d < DRAWS; d++) emp[out[d * n_new] * S + out[d * n_new + 1]] += 1.0 / DRAWS;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    omp_set_num_threads(1); /* a model this small is fastest on one thread */
    openblas_set_num_threads(1);
    kf_backend *be = kernels_cpu_create();
    make_language();
    model_config base = {.hidden = 32,
                         .heads = 1,
                         .blocks = 2,
                         .vocab = S,
                         .mask_id = -1,
                         .seq_len = NTOK,
                         .kind = MODEL_AR,
                         .head = HEAD_SHARED,
                         .k_train = 1};
    model *ar = train(be, NULL, &base, SUP_AR, 1, 300);
    model *ptp = train(be, ar, &base, SUP_NI_CAUSAL, KMAX, 60);
    model *md = train(be, ar, &base, SUP_MEDUSA, KMAX, 150);

    /* (e) the AR's tensors in the Medusa model moved by the EMA's rounding
     * at most (fit_run ends on the EMA); then they are the AR's exactly */
    kf_err err;
    {
        double worst = 0;
        for (int i = 0; i < ar->n_tensors; i++) {
            const model_tensor *t = &ar->tensors[i], *u = model_find(md, t->name);
            T_REQUIRE(u != NULL, "%s missing from the Medusa model", t->name);
            float *a = malloc(sizeof(float) * (size_t)t->numel),
                  *b = malloc(sizeof(float) * (size_t)t->numel);
            be->download(be, a, ar->params + t->offset, sizeof(float) * (size_t)t->numel);
            be->download(be, b, md->params + u->offset, sizeof(float) * (size_t)t->numel);
            for (int64_t e = 0; e < t->numel; e++)
                worst = fmax(worst, fabs(a[e] - b[e]) / fmax(1e-6, fabs(a[e])));
            free(a);
            free(b);
        }
        T_CHECK(worst < 1e-5, "(e) Medusa training moved the frozen backbone by %g (relative)",
                worst);
        spec_opts o = {.k = 1, .tau = 1.0, .max_new = 4, .seed = 1};
        spec_medusa_attach(md, ar);
        T_EQ_INT(spec_check(ar, md, &o, P, &err), 0, "(e) the attached Medusa model");
        char path[] = "/tmp/kf_test_spec_XXXXXX";
        int fd = mkstemp(path);
        T_REQUIRE(fd >= 0, "mkstemp");
        close(fd);
        T_EQ_INT(model_save(md, path, NULL, &err), 0, "(e) model_save of a Medusa model");
        model *back = model_load(be, path, &err);
        T_CHECK(back != NULL, "(e) model_load of a Medusa model: %s", err.msg);
        if (back) {
            T_EQ_INT(back->cfg.head, HEAD_MEDUSA, "(e) loaded head kind");
            T_EQ_INT(back->cfg.k_train, KMAX, "(e) loaded Medusa heads");
            T_EQ_INT(spec_check(ar, back, &o, P, &err), 0, "(e) the loaded Medusa model");
            model_free(back);
        }
        unlink(path);
    }

    int32_t prefix[ROWS * P], want[ROWS * NEW], got[ROWS * NEW];
    uint64_t keys[ROWS];
    for (int b = 0; b < ROWS; b++) {
        chain(prefix + b * P, P, 1000 + (uint64_t)b);
        keys[b] = 77 + (uint64_t)b;
    }
    spec_stats st[ROWS];
    int64_t accepted[2] = {0}, drafted[2] = {0};
    model *drafts[2] = {ptp, md};
    for (int greedy = 1; greedy >= 0; greedy--) {
        ar_reference(ar, prefix, ROWS, 9, keys, !greedy, want);
        for (int di = 0; di < 2 - !greedy; di++) /* (b) is PTP's */
            for (int64_t k = 1; k <= KMAX; k++) {
                const char *name = spec_draft_name(spec_draft_of(drafts[di]));
                spec_opts o = {.k = k, .tau = 1.0, .greedy = greedy, .max_new = NEW, .seed = 9};
                T_EQ_INT(spec_check(ar, drafts[di], &o, P, &err), 0, "spec_check %s k=%lld", name,
                         (long long)k);
                spec_run(ar, NULL, drafts[di], NULL, prefix, ROWS, P, &o, keys, got, st);
                int diff = 0;
                for (int i = 0; i < ROWS * NEW; i++) diff += got[i] != want[i];
                T_EQ_INT(diff, 0, "(%s) %s k=%lld: tokens differing from the AR's",
                         greedy ? "a" : "b", name, (long long)k);
                int64_t it = 0, acc = 0, bad = 0;
                for (int b = 0; b < ROWS; b++) {
                    it += st[b].iters;
                    acc += st[b].accepted;
                    bad += st[b].nfe != 2 * st[b].iters || st[b].accepted > st[b].drafted ||
                           st[b].iters * (k + 1) < NEW ||
                           st[b].passes != (di ? 1 : 2) * st[b].iters;
                    drafted[di] += st[b].drafted;
                }
                accepted[di] += acc;
                T_EQ_INT(bad, 0,
                         "(d) %s k=%lld: rows whose counts break nfe = 2 iters, accepted <= "
                         "drafted, iters >= max_new / (k+1), passes",
                         name, (long long)k);
                printf("%s %-6s k=%lld: %.2f accepted drafts/iteration, %.2f tokens/iteration\n",
                       greedy ? "greedy" : "tau=1 ", name, (long long)k, (double)acc / (double)it,
                       (double)(ROWS * NEW) / (double)it);
            }
    }
    for (int di = 0; di < 2; di++)
        T_CHECK(accepted[di] > 0 && accepted[di] < drafted[di],
                "%s: the draft must be partly right for (a) and (b) to test both paths: %lld of "
                "%lld accepted",
                spec_draft_name(spec_draft_of(drafts[di])), (long long)accepted[di],
                (long long)drafted[di]);

    /* (c) the joint of the first two tokens after one prefix, N draws */
    int32_t one[P] = {prefix[0], prefix[1], prefix[2], prefix[3]};
    int32_t *pre = malloc(sizeof(int32_t) * DRAWS * P), *out = malloc(sizeof(int32_t) * DRAWS * 2);
    uint64_t *dk = malloc(sizeof(uint64_t) * DRAWS);
    for (int d = 0; d < DRAWS; d++) {
        memcpy(pre + d * P, one, sizeof one);
        dk[d] = (uint64_t)d;
    }
    double joint[S * S], emp[S * S];
    {
        int32_t seqs[S * (P + 1)];
        for (int v = 0; v < S; v++) {
            memcpy(seqs + v * (P + 1), one, sizeof one);
            seqs[v * (P + 1) + P] = v;
        }
        layout l;
        layout_ar(&l, P + 1);
        model_ws *ws = model_ws_create(ar);
        model_input in = {.lay = &l, .B = S, .ids = seqs};
        const float *lg = model_forward(ar, ws, &in, 0, NULL);
        float h[S * (P + 1) * S];
        be->download(be, h, lg, sizeof h);
        for (int v = 0; v < S; v++) {
            double p[2][S];
            for (int j = 0; j < 2; j++) {
                const float *row = h + (v * (P + 1) + P - 1 + j) * S;
                double mx = -INFINITY, sum = 0;
                for (int c = 0; c < S; c++) mx = fmax(mx, row[c]);
                for (int c = 0; c < S; c++) sum += (p[j][c] = exp(row[c] - mx));
                for (int c = 0; c < S; c++) p[j][c] /= sum;
            }
            for (int c = 0; c < S; c++) joint[v * S + c] = p[0][v] * p[1][c];
        }
        model_ws_free(ws);
        layout_free(&l);
    }
    /* E[TV] <= 1/2 sum sqrt(p(1-p)/N), and TV moves by at most 1/N per
     * draw (McDiarmid): above the mean by sqrt(ln(1e6) / 2N) with
     * probability < 1e-6 */
    double bound = sqrt(log(1e6) / (2.0 * DRAWS));
    for (int c = 0; c < S * S; c++) bound += 0.5 * sqrt(joint[c] * (1 - joint[c]) / DRAWS);
    spec_opts so = {.k = 2, .tau = 1.0, .max_new = 2, .seed = 31};
    spec_run(ar, NULL, ptp, NULL, pre, DRAWS, P, &so, dk, out, NULL);
    histogram(out, 2, emp);
    double tv_spec = tv_two(emp, joint);
    spec_run(ar, NULL, md, NULL, pre, DRAWS, P, &so, dk, out, NULL);
    histogram(out, 2, emp);
    double tv_medusa = tv_two(emp, joint);
    decode_opts ao = {.k = 1, .tau = 1.0, .max_new = 2, .seed = 31};
    decode_run(ar, NULL, pre, DRAWS, P, &ao, dk, out);
    histogram(out, 2, emp);
    double tv_ar = tv_two(emp, joint);
    decode_opts po = {.k = 2, .tau = 1.0, .max_new = 2, .seed = 31};
    decode_run(ptp, NULL, pre, DRAWS, P, &po, dk, out);
    histogram(out, 2, emp);
    double tv_draft = tv_two(emp, joint);
    printf("TV to the AR's exact joint of 2 tokens over %d draws: PTP speculative %.4f, Medusa "
           "speculative %.4f, AR %.4f, PTP draft alone %.4f (sampling-noise bound %.4f)\n",
           DRAWS, tv_spec, tv_medusa, tv_ar, tv_draft, bound);
    T_CHECK(tv_spec <= bound, "(c) PTP speculative samples are %.4f from the AR joint (bound %.4f)",
            tv_spec, bound);
    T_CHECK(tv_medusa <= bound,
            "(c) Medusa speculative samples are %.4f from the AR joint (bound %.4f)", tv_medusa,
            bound);
    T_CHECK(tv_ar <= bound, "(c) AR samples are %.4f from the AR joint (bound %.4f)", tv_ar, bound);
    T_CHECK(tv_draft > bound,
            "(c) the draft alone is only %.4f from the AR joint (bound %.4f): "
            "the check has no power",
            tv_draft, bound);

    /* (d) constant models: max_new 10, k 3 */
    model *cv = model_create(be, &ar->cfg), *cd = model_create(be, &ptp->cfg);
    model_init(cv, 1);
    model_init(cd, 2);
    force_token(cv, 2);
    struct {
        int32_t draft_tok;
        int64_t iters, drafted, accepted;
    } cases[] = {
        /* all accepted: 3 + bonus, 3 + bonus, then 2 drafts for the last 2 */
        {2, 3, 8, 8},
        /* all rejected: one token an iteration, drafting min(3, missing) */
        {4, 10, 3 * 8 + 2 + 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        force_token(cd, cases[i].draft_tok);
        spec_opts o = {.k = 3, .tau = 1.0, .greedy = 1, .max_new = 10, .seed = 1};
        int32_t toks[10];
        spec_stats s;
        spec_run(cv, NULL, cd, NULL, one, 1, P, &o, keys, toks, &s);
        int not2 = 0;
        for (int j = 0; j < 10; j++) not2 += toks[j] != 2;
        T_EQ_INT(not2, 0, "(d) case %zu: tokens other than the verifier's", i);
        T_EQ_INT(s.iters, cases[i].iters, "(d) case %zu: iterations", i);
        T_EQ_INT(s.nfe, 2 * cases[i].iters, "(d) case %zu: NFE", i);
        T_EQ_INT(s.drafted, cases[i].drafted, "(d) case %zu: drafted", i);
        T_EQ_INT(s.accepted, cases[i].accepted, "(d) case %zu: accepted", i);
    }

    /* Medusa's: its first iteration (the prefill) has no drafts yet, then
     * every draft is rejected: one token an iteration, drafting min(3,
     * missing) */
    {
        model_config mc = cv->cfg;
        mc.head = HEAD_MEDUSA;
        mc.k_train = 3;
        model *cm = model_create(be, &mc);
        model_init(cm, 4); /* its heads' output weights are zero: they draft id 0 */
        spec_medusa_attach(cm, cv);
        spec_opts o = {.k = 3, .tau = 1.0, .greedy = 1, .max_new = 10, .seed = 1};
        int32_t toks[10];
        spec_stats s;
        spec_run(cv, NULL, cm, NULL, one, 1, P, &o, keys, toks, &s);
        int not2 = 0;
        for (int j = 0; j < 10; j++) not2 += toks[j] != 2;
        T_EQ_INT(not2, 0, "(d) Medusa: tokens other than the verifier's");
        T_EQ_INT(s.iters, 10, "(d) Medusa: iterations");
        T_EQ_INT(s.nfe, 20, "(d) Medusa: NFE");
        T_EQ_INT(s.passes, 10, "(d) Medusa: passes");
        T_EQ_INT(s.drafted, 3 * 7 + 2 + 1, "(d) Medusa: drafted");
        T_EQ_INT(s.accepted, 0, "(d) Medusa: accepted");
        model_free(cm);
    }

    /* (f) refusals */
    spec_opts o = {.k = KMAX + 1, .tau = 1.0, .max_new = NEW, .seed = 1};
    T_REFUSED(spec_check(ar, ptp, &o, P, &err), err.msg, "k_train", "k past the draft's k_train");
    o.k = 1;
    T_REFUSED(spec_check(ar, ar, &o, P, &err), err.msg, "draft", "an AR draft");
    T_REFUSED(spec_check(ptp, ptp, &o, P, &err), err.msg, "verifier", "a PFLM verifier");
    force_token(md, 1); /* head 0 no longer the verifier's */
    T_REFUSED(spec_check(ar, md, &o, P, &err), err.msg, "backbone", "a Medusa of another AR");
    o.max_new = NTOK;
    T_REFUSED(spec_check(ar, ptp, &o, P, &err), err.msg, "context", "past the context");

    /* spec_icdf_sorted against a full sort, on random logits with ties */
    int bad = 0;
    for (int t = 0; t < 200; t++) {
        float l[S];
        ranked r[S];
        double mx = -INFINITY, sum = 0, acc = 0;
        for (int v = 0; v < S; v++) l[v] = (float)rng_below(40, (uint64_t)t, (uint64_t)v, 4);
        for (int v = 0; v < S; v++) mx = fmax(mx, l[v] / 0.7);
        for (int v = 0; v < S; v++) sum += (r[v] = (ranked){exp(l[v] / 0.7 - mx), v}).p;
        qsort(r, S, sizeof *r, by_prob);
        double z = rng_uniform01(41, (uint64_t)t, 0), goal = z * sum;
        int v = 0;
        while (v < S - 1 && (acc += r[v].p) <= goal) v++;
        bad += spec_icdf_sorted(l, S, 0.7, z) != r[v].id;
    }
    T_EQ_INT(bad, 0, "spec_icdf_sorted: draws differing from a full sort's, of 200");

    free(pre);
    free(out);
    free(dk);
    model_free(cv);
    model_free(cd);
    model_free(ar);
    model_free(ptp);
    model_free(md);
    be->destroy(be);
    return T_DONE();
}
