/* `kf bench nfe RUN` (bench/cli/bench_nfe.c, trainer/infer/paradigms.h) in
 * process, on a run directory of small random models and a synthetic shard
 * set:
 *  - NFE accounting against hand-counted values: AR one pass per token
 *    (10 for 10 tokens), K-Forcing ceil(10 / k) (5, 4, 3 at k = 2, 3, 4:
 *    the last step emits the tokens left), a speculative iteration 2
 *    passes (paradigm_nfe);
 *  - the JSON: one row per paradigm and k with the schema's keys and types
 *    (method among the paper's names, accepted_per_iter null for the
 *    non-speculative methods), quality figures in range, and every figure
 *    equal to the printed table's (to the table's rounding);
 *  - paradigms the run lacks (no such stage, a stage not trained) are
 *    listed as absent with the reason, in the table and the JSON, and get
 *    no row; the PNG is written;
 *  - errors: no RUN (usage, 2), a directory without run.yaml, a run whose
 *    AR stage has no final weights, a bad --clock, --help.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/model_fit.h"
#include "tests/unit/trainer_fixture.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/paradigms.h"
#include "trainer/model/model.h"
#include "trainer/train/checkpoint.h"

int bench_nfe_main(int argc, char **argv);

enum { V = 50, SEQ = 32, N_NEW = 10 };

static char T[256];

/* Runs bench_nfe_main on the words of line with stdout and stderr sent to
 * files T/out and T/err. */
static int run(const char *line) {
    char buf[2048], *argv[64], p[512];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *s = strtok(buf, " "); s && argc < 63; s = strtok(NULL, " ")) argv[argc++] = s;
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    snprintf(p, sizeof p, "%s/out", T);
    int fo = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    snprintf(p, sizeof p, "%s/err", T);
    int fe = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1), dup2(fe, 2);
    int rc = bench_nfe_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1), dup2(se, 2);
    close(so), close(se), close(fo), close(fe);
    return rc;
}

static char *slurp(const char *name) {
    char p[512], *text = NULL;
    size_t len;
    kf_err err;
    snprintf(p, sizeof p, "%s/%s", T, name);
    if (fs_read_file(p, &text, &len, &err)) return strdup("");
    return text;
}

/* Random weights (fit_randomize), saved as stage `stage` of run `run`'s
 * final/. A draft made with `reject` (a PFLM) proposes the verifier's mask
 * token at every position (no mask of its own, a +100 bias on that id): the
 * AR verifier never samples its mask, so every draft is rejected and each
 * speculative iteration emits exactly the verifier's one token. */
static model_config config_of(model_kind kind, int64_t k, int bidir, int reject) {
    return (model_config){.hidden = 16,
                          .heads = 2,
                          .blocks = 1,
                          .vocab = V,
                          .mask_id = reject ? -1 : V - 1,
                          .seq_len = SEQ,
                          .kind = kind,
                          .head = HEAD_SHARED,
                          .k_train = k,
                          .bidir = bidir};
}

static void save_final(model *m, const char *run, const char *stage, const char *kind) {
    ckpt_meta meta = {.step = 1};
    snprintf(meta.stage, sizeof meta.stage, "%s", stage);
    snprintf(meta.kind, sizeof meta.kind, "%s", kind);
    snprintf(meta.config_hash, sizeof meta.config_hash, "test");
    meta.id.model = m->cfg;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s/stages/%s/final", T, run, stage);
    ckpt_write_final(dir, m, m->params, &meta);
}

static void stage_final(kf_backend *be, const char *run, const char *stage, model_kind kind,
                        int64_t k, int bidir, int reject) {
    model_config c = config_of(kind, k, bidir, reject);
    model *m = model_create(be, &c);
    fit_randomize(m, (uint64_t)(k + 7 + 100 * bidir + 200 * reject));
    if (reject) {
        const model_tensor *t = model_find(m, "output_layer.linear.bias");
        T_REQUIRE(t, "the draft has an output bias");
        float big = 100.0f;
        be->upload(be, m->params + t->offset + (V - 1), &big, sizeof big);
        model_params_changed(m);
    }
    save_final(m, run, stage, bidir ? "mdlm" : kind == MODEL_AR ? "ar" : "distill_ar");
    model_free(m);
}

/* 4 random Medusa heads on the "ar" stage's weights (the same seed). */
static void medusa_final(kf_backend *be) {
    model_config c = config_of(MODEL_AR, 1, 0, 0);
    model *ar = model_create(be, &c);
    fit_randomize(ar, 8);
    c.head = HEAD_MEDUSA;
    c.k_train = 4;
    model *m = model_create(be, &c);
    fit_randomize(m, 300);
    model_copy_matching(m, ar);
    save_final(m, "run", "medusa", "medusa");
    model_free(m);
    model_free(ar);
}

static void write_run_yaml(const char *run, const char *stages) {
    char p[512], text[2048];
    snprintf(p, sizeof p, "%s/%s", T, run);
    kf_err err;
    T_REQUIRE(fs_mkdir_p(p, &err) == 0, "%s", err.msg);
    snprintf(text, sizeof text,
             "name: t\ndata: {train: %s/data, valid: %s/data}\n"
             "model: {hidden: 16, heads: 2, blocks: 1, vocab: %d, seq_len: %d}\nstages:\n%s",
             T, T, V, SEQ, stages);
    snprintf(p, sizeof p, "%s/%s/run.yaml", T, run);
    T_REQUIRE(fs_write_atomic(p, text, strlen(text), &err) == 0, "%s", err.msg);
}

/* The printed table's line for method at k (the first word(s) and k), or NULL. */
static const char *table_line(const char *out, const char *method, long long k) {
    char head[64];
    snprintf(head, sizeof head, "%-10s %3lld ", method, k);
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, head, strlen(head))) return l;
    return NULL;
}

static double num(const json *row, const char *key) {
    const json *v = json_get(row, key);
    return v && v->type == JSON_NUMBER ? v->num : NAN;
}

static void accounting_tests(void) {
    /* a speculative iteration is a draft pass and a verify pass */
    T_NEAR(paradigm_nfe(PARADIGM_PTP, 3.5), 7.0, 0, "PTP: 3.5 iterations");
    T_NEAR(paradigm_nfe(PARADIGM_MEDUSA, 539.3), 1078.6, 1e-9, "Medusa: the paper's 539.3");
    T_NEAR(paradigm_nfe(PARADIGM_KF, 240), 240.0, 0, "K-Forcing: steps are passes");
    T_NEAR(paradigm_nfe(PARADIGM_AR, 960), 960.0, 0, "AR: steps are passes");
    T_CHECK(paradigm_speculative(PARADIGM_PTP) && paradigm_speculative(PARADIGM_MEDUSA),
            "PTP and Medusa are speculative");
    T_CHECK(!paradigm_speculative(PARADIGM_AR) && !paradigm_speculative(PARADIGM_KF) &&
                !paradigm_speculative(PARADIGM_MDLM),
            "AR, K-Forcing, MDLM are not");
}

/* method is listed as absent, its reason naming `word`, in the table (out)
 * and the JSON (abs), and has no row. */
static void check_absent(const char *out, const json *abs, const json *rows, const char *method,
                         const char *word) {
    const json *hit = NULL;
    for (size_t i = 0; abs && i < abs->n; i++) {
        const json *m = json_get(&abs->kids[i], "method");
        if (m && m->type == JSON_STRING && !strcmp(m->str.s, method)) hit = &abs->kids[i];
    }
    const json *why = hit ? json_get(hit, "reason") : NULL;
    T_CHECK(why && why->type == JSON_STRING && strstr(why->str.s, word),
            "%s absent, the reason (%s) naming %s", method,
            why && why->type == JSON_STRING ? why->str.s : "none", word);
    char head[64];
    snprintf(head, sizeof head, "%-10s absent: ", method);
    const char *line = strstr(out, head);
    T_CHECK(line && strstr(line, word), "table lists %s as absent, naming %s", method, word);
    for (size_t i = 0; rows && i < rows->n; i++) {
        const json *m = json_get(&rows->kids[i], "method");
        T_CHECK(!(m && m->type == JSON_STRING && !strcmp(m->str.s, method)), "no row for absent %s",
                method);
    }
}

/* A run whose K-Forcing and PTP stages are in the config but not trained:
 * both absent, saying so; AR alone is measured. */
static void partial_tests(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "nfe %s/partial --samples 2 --prefix-len 6 --max-new 4 --backend cpu --json %s/p.json",
             T, T);
    int rc = run(cmd);
    char *out = slurp("out"), *errs = slurp("err"), *text = slurp("p.json");
    T_EQ_INT(rc, 0, "partial run: rc (stderr: %s)", errs);
    kf_err err;
    json_doc *d = json_parse(text, strlen(text), "p.json", &err);
    T_CHECK(d != NULL, "p.json parses: %s", d ? "" : err.msg);
    const json *rows = d ? json_get(json_root(d), "rows") : NULL;
    const json *abs = d ? json_get(json_root(d), "absent") : NULL;
    T_EQ_INT(rows ? rows->n : 0, 1, "partial run: the AR row alone");
    check_absent(out, abs, rows, "K-Forcing", "not trained");
    check_absent(out, abs, rows, "PTP", "not trained");
    check_absent(out, abs, rows, "MDLM", "no `mdlm` stage");
    check_absent(out, abs, rows, "Medusa", "no `medusa` stage");
    json_free(d);
    free(text);
    free(out);
    free(errs);
}

static void bench_tests(void) {
    char cmd[1024];
    snprintf(
        cmd, sizeof cmd,
        "nfe %s/run --samples 6 --batch 4 --prefix-len 6 --max-new %d --kf-k 2,3,4 --mdlm-k 1,3 "
        "--backend cpu --json %s/nfe.json --png %s/nfe.png",
        T, N_NEW, T, T);
    int rc = run(cmd);
    char *out = slurp("out"), *errs = slurp("err");
    T_EQ_INT(rc, 0, "bench nfe: rc (stderr: %s)", errs);
    char *text = slurp("nfe.json");
    kf_err err;
    json_doc *d = json_parse(text, strlen(text), "nfe.json", &err);
    T_CHECK(d != NULL, "nfe.json parses: %s", d ? "" : err.msg);
    const json *rows = d ? json_get(json_root(d), "rows") : NULL;
    const json *abs = d ? json_get(json_root(d), "absent") : NULL;
    T_CHECK(rows && rows->type == JSON_ARRAY, "rows is an array");
    T_CHECK(abs && abs->type == JSON_ARRAY, "absent is an array");
    /* AR once; MDLM at 1 and 3 (ceil(10 / 3) = 4 passes, the last unmasking
     * one token); Medusa (random heads: its figures only bounded, below);
     * PTP at its k 4 with the always-rejected draft: 10
     * iterations of one token, 2 passes each, no draft accepted; K-Forcing
     * at 2, 3, 4 (the stage's k is 4; ceil(10 / k) steps) */
    static const struct {
        const char *method;
        long long k;
        double nfe, acc, tpi; /* NaN: not known by hand (acc, tpi: not speculative) */
    } want[] = {{"AR", 1, N_NEW, NAN, NAN},    {"MDLM", 1, N_NEW, NAN, NAN},
                {"MDLM", 3, 4, NAN, NAN},      {"Medusa", 4, NAN, NAN, NAN},
                {"PTP", 4, 2 * N_NEW, 0, 1},   {"K-Forcing", 2, 5, NAN, NAN},
                {"K-Forcing", 3, 4, NAN, NAN}, {"K-Forcing", 4, 3, NAN, NAN}};
    size_t nw = sizeof want / sizeof want[0];
    T_EQ_INT(rows ? rows->n : 0, nw, "rows: AR, MDLM k = 1, 3, Medusa, PTP, K-Forcing k = 2, 3, 4");
    for (size_t i = 0; rows && i < rows->n && i < nw; i++) {
        const json *r = &rows->kids[i], *m = json_get(r, "method"), *k = json_get(r, "k");
        const json *acc = json_get(r, "accepted_per_iter"), *tpi = json_get(r, "tokens_per_iter");
        T_EQ_STR(m && m->type == JSON_STRING ? m->str.s : NULL, want[i].method, "row %zu method",
                 i);
        T_EQ_INT(k && k->type == JSON_NUMBER ? k->i : -1, want[i].k, "row %zu k", i);
        int spec = !strcmp(want[i].method, "Medusa") || !strcmp(want[i].method, "PTP");
        if (isnan(want[i].nfe)) {
            /* speculative with drafts of unknown quality: each iteration
             * emits 1..k+1 tokens, one more than it accepted (fewer at the
             * end, where it drafts only what is missing) */
            double nfe = num(r, "nfe"), a = num(r, "accepted_per_iter"),
                   t = num(r, "tokens_per_iter");
            T_CHECK(t >= 1 && t <= want[i].k + 1, "row %zu: tokens per iteration %g in [1, %lld]",
                    i, t, want[i].k + 1);
            T_CHECK(t - a > 0 && t - a <= 1 + 1e-9, "row %zu: tokens %g - accepted %g in (0, 1]", i,
                    t, a);
            T_NEAR(nfe, 2.0 * N_NEW / t, 1e-3 * nfe, "row %zu: NFE = 2 x %d / tokens per iteration",
                   i, N_NEW);
        } else {
            T_NEAR(num(r, "nfe"), want[i].nfe, 0, "row %zu (%s k=%lld): NFE per completion", i,
                   want[i].method, want[i].k);
        }
        if (!spec) {
            T_CHECK(acc && acc->type == JSON_NULL,
                    "row %zu: accepted_per_iter null (not speculative)", i);
            T_CHECK(tpi && tpi->type == JSON_NULL,
                    "row %zu: tokens_per_iter null (not speculative)", i);
        } else if (!isnan(want[i].acc)) {
            T_NEAR(num(r, "accepted_per_iter"), want[i].acc, 0, "row %zu: drafts accepted", i);
            T_NEAR(num(r, "tokens_per_iter"), want[i].tpi, 0, "row %zu: tokens per iteration", i);
        }
        double ppl = num(r, "gen_ppl"), ent = num(r, "entropy"), len = num(r, "length");
        double tps = num(r, "tokens_per_s");
        T_CHECK(ppl >= 1, "row %zu: gen_ppl %g >= 1", i, ppl);
        T_CHECK(ent >= 0 && ent <= log(N_NEW) + 1e-9, "row %zu: entropy %g in [0, ln %d]", i, ent,
                N_NEW);
        T_CHECK(len >= 0 && len <= N_NEW, "row %zu: length %g in [0, %d]", i, len, N_NEW);
        T_CHECK(tps > 0, "row %zu: tokens_per_s %g > 0", i, tps);
        /* the printed row shows the same figures, to its rounding */
        const char *line = table_line(out, want[i].method, want[i].k);
        T_CHECK(line != NULL, "table has a %s k=%lld line", want[i].method, want[i].k);
        if (!line) continue;
        double t_nfe, t_tps, t_ppl, t_ent, t_d2, t_d3, t_len;
        char acc_s[16], tpi_s[16];
        int got = sscanf(line + 15, "%lf %15s %15s %lf %lf %lf %lf %lf %lf", &t_nfe, acc_s, tpi_s,
                         &t_tps, &t_ppl, &t_ent, &t_d2, &t_d3, &t_len);
        T_EQ_INT(got, 9, "table line parses: %.80s", line);
        T_NEAR(t_nfe, num(r, "nfe"), 0.05, "row %zu: table NFE vs JSON", i);
        if (!spec) {
            T_EQ_STR(acc_s, "-", "row %zu: table acc/iter", i);
            T_EQ_STR(tpi_s, "-", "row %zu: table tok/iter", i);
        } else {
            T_NEAR(atof(acc_s), num(r, "accepted_per_iter"), 0.005 + 1e-4,
                   "row %zu: table acc/iter vs JSON", i);
            T_NEAR(atof(tpi_s), num(r, "tokens_per_iter"), 0.005 + 1e-4,
                   "row %zu: table tok/iter vs JSON", i);
        }
        T_NEAR(t_tps, tps, 0.5 + 1e-6 * tps, "row %zu: table tokens/s vs JSON", i);
        T_NEAR(t_ppl, ppl, ppl < 1000 ? 0.05 : 0.5, "row %zu: table Gen-PPL vs JSON", i);
        T_NEAR(t_ent, ent, 0.005, "row %zu: table entropy vs JSON", i);
        T_NEAR(t_d2, num(r, "distinct_2"), 0.005, "row %zu: table distinct-2 vs JSON", i);
        T_NEAR(t_d3, num(r, "distinct_3"), 0.005, "row %zu: table distinct-3 vs JSON", i);
        T_NEAR(t_len, len, 0.05, "row %zu: table length vs JSON", i);
    }
    T_EQ_INT(abs ? abs->n : 99, 0, "every paradigm present: none absent");
    char p[512];
    snprintf(p, sizeof p, "%s/nfe.png", T);
    T_CHECK(fs_exists(p), "the PNG is written");
    json_free(d);
    free(text);
    free(out);
    free(errs);
}

static void error_tests(void) {
    static const struct {
        const char *args;
        int code;
        const char *word; /* in stderr */
    } cases[] = {
        {"nfe", 2, "RUN"},
        {"nfe %s/nowhere", 1, "run.yaml"},
        {"nfe %s/untrained", 1, "AR stage"},
        {"nfe %s/run --clock gpu", 2, "--clock"},
        {"nfe %s/run --samples 0", 2, "--samples"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, cases[i].args, T);
        int rc = run(cmd);
        char *e = slurp("err");
        T_EQ_INT(rc, cases[i].code, "%s: exit status", cases[i].args);
        T_CHECK(strstr(e, cases[i].word), "%s: stderr \"%s\" names %s", cases[i].args, e,
                cases[i].word);
        free(e);
    }
    int rc = run("nfe --help");
    char *o = slurp("out");
    T_EQ_INT(rc, 0, "--help: exit status");
    T_CHECK(strstr(o, "usage: kf bench nfe RUN"), "--help prints the usage");
    free(o);
}

int main(void) {
    /* the command re-executes once for passive OpenMP workers
     * (trainer/cli/omp_env.h): set, it runs in process */
    omp_env_passive();
    snprintf(T, sizeof T, "/tmp/kf_test_nfe_XXXXXX");
    T_REQUIRE(mkdtemp(T), "mkdtemp");
    char p[512];
    snprintf(p, sizeof p, "%s/data", T);
    fixture_shards(p, 8, 40, SEQ, V);
    write_run_yaml("run", "  - {name: ar, kind: ar, steps: 1}\n"
                          "  - {name: k4, kind: distill_ar, teacher: ar, k: 4, steps: 1}\n"
                          "  - {name: mdlm, kind: mdlm, steps: 1}\n"
                          "  - {name: medusa, kind: medusa, teacher: ar, k: 4, steps: 1}\n"
                          "  - {name: ablation_b, kind: noise_inversion_causal, teacher: ar, "
                          "init: ar, k: 4, steps: 1}\n");
    /* trained AR, K-Forcing and PTP stages not trained yet */
    write_run_yaml("partial", "  - {name: ar, kind: ar, steps: 1}\n"
                              "  - {name: k4, kind: distill_ar, teacher: ar, k: 4, steps: 1}\n"
                              "  - {name: ablation_b, kind: noise_inversion_causal, teacher: ar, "
                              "init: ar, k: 4, steps: 1}\n");
    write_run_yaml("untrained", "  - {name: ar, kind: ar, steps: 1}\n");
    kf_err err;
    kf_backend *be = kernels_create("cpu", &err);
    T_REQUIRE(be, "cpu backend: %s", err.msg);
    stage_final(be, "run", "ar", MODEL_AR, 1, 0, 0); /* seed 8, as medusa_final's */
    medusa_final(be);
    stage_final(be, "run", "k4", MODEL_PFLM, 4, 0, 0);
    stage_final(be, "run", "mdlm", MODEL_AR, 1, 1, 0);
    stage_final(be, "run", "ablation_b", MODEL_PFLM, 4, 0, 1);
    stage_final(be, "partial", "ar", MODEL_AR, 1, 0, 0);
    be->destroy(be);
    accounting_tests();
    bench_tests();
    partial_tests();
    error_tests();
    if (!getenv("KF_TEST_KEEP")) fs_rm_rf(T, &err);
    return T_DONE();
}
