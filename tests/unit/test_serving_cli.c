/* The serving commands end to end, in process (their *_main functions):
 *  - `kf bench decode`: AR + PFLM(4) checkpoints on a synthetic shard set;
 *    the JSON table has one row per (method, batch) with positive
 *    throughput and AR's speedup 1, the PNG is written; the completion length
 *    follows the protocol (data length - prefix, capped by the context,
 *    multiple of every k); every row carries the quality of its completions
 *    (Gen-PPL under the AR checkpoint, entropy, distinct-2/3, length, flag;
 *    AR unflagged); the default prefix is cut to half the smallest context;
 *    bad input exits 1 (prefix longer than the data, no method fitting --k,
 *    missing checkpoint) or 2 (usage);
 *  - `kf import --probe`: logits recorded from the model pass, perturbed ones
 *    fail; registration writes final/ + DONE, refuses a second time without
 *    --force, refuses a checkpoint that does not fit the run's stage;
 *  - `kf eval --completions` (quality_eval_main, trainer/cli/cli_eval_completions.c):
 *    errors (missing evaluator, empty file, malformed line named by number,
 *    usage) and a good run.
 * (`kf sample`'s own bad-input exits and seed repeat are tested in
 * test_kforcing_cli.c.) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/rng.h"
#include "common/safetensors.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/model_fit.h"
#include "tests/unit/trainer_fixture.h"
#include "trainer/cli/cli_eval.h"
#include "trainer/cli/omp_env.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"

int bench_decode_main(int argc, char **argv);
int import_main(int argc, char **argv);

enum { V = 50, SEQ = 32 };

static char T[256];

static int run(int (*fn)(int, char **), const char *line) {
    char buf[2048], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *p = strtok(buf, " "); p && argc < 63; p = strtok(NULL, " ")) argv[argc++] = p;
    argv[argc] = NULL;
    fflush(stdout);
    return fn(argc, argv);
}

static model *make(kf_backend *be, model_kind kind, int64_t k, const char *name) {
    model_config c = {.hidden = 16,
                      .heads = 2,
                      .blocks = 1,
                      .vocab = V,
                      .mask_id = V - 1,
                      .seq_len = SEQ,
                      .kind = kind,
                      .head = HEAD_SHARED,
                      .k_train = k};
    model *m = model_create(be, &c);
    fit_randomize(m, (uint64_t)k + 7);
    char p[512];
    snprintf(p, sizeof p, "%s/%s", T, name);
    kf_err err;
    KF_CHECK(model_save(m, p, NULL, &err) == 0, "%s", err.msg);
    return m;
}

/* Writes a probe of m's logits over layout l (scaled by `bump` at one entry). */
static void write_probe(model *m, const layout *l, const char *kind, int64_t n, int64_t k,
                        float bump, const char *path) {
    enum { B = 2 };
    int64_t L = l->L;
    int32_t ids[B * 64];
    double z[B * 64], tau[B] = {1.0, 0.3};
    for (int64_t i = 0; i < B * L; i++) {
        ids[i] = (int32_t)rng_below(3, 4, (uint64_t)i, V);
        z[i] = rng_uniform01(3, 5, (uint64_t)i);
    }
    model_ws *ws = model_ws_create(m);
    model_input in = {.lay = l, .B = B, .ids = ids, .z = z, .tau = tau};
    const float *d = model_forward(m, ws, &in, 0, NULL);
    int64_t nl = B * l->n_out * V;
    float *h = malloc((size_t)nl * sizeof(float));
    m->be->download(m->be, h, d, (size_t)nl * sizeof(float));
    h[nl / 2] += bump;
    safetensors_writer *w = safetensors_writer_new();
    int64_t s_ids[2] = {B, L}, s_tau[1] = {B}, s_lg[3] = {B, l->n_out, V};
    safetensors_add(w, "z", ST_F64, 2, s_ids, z);
    safetensors_add(w, "tau", ST_F64, 1, s_tau, tau);
    safetensors_add(w, "logits", ST_F32, 3, s_lg, h);
    safetensors_add(w, "ids", ST_I32, 2, s_ids, ids);
    safetensors_set_meta(w, "probe.layout", kind);
    char v[16];
    snprintf(v, sizeof v, "%lld", (long long)n);
    safetensors_set_meta(w, "probe.n", v);
    snprintf(v, sizeof v, "%lld", (long long)k);
    safetensors_set_meta(w, "probe.k", v);
    kf_err err;
    KF_CHECK(safetensors_write(w, path, &err) == 0, "%s", err.msg);
    safetensors_writer_free(w);
    free(h);
    model_ws_free(ws);
}

static void write_text(const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", T, name);
    char dir[512];
    fs_dirname(p, dir, sizeof dir);
    kf_err err;
    KF_CHECK(fs_mkdir_p(dir, &err) == 0 && fs_write_atomic(p, text, strlen(text), &err) == 0, "%s",
             err.msg);
}

/* T/name parsed as JSON; NULL after a failed check saying why (what: the
 * command that should have written it). */
static json_doc *read_json(const char *name, const char *what) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", T, name);
    char *text;
    size_t len;
    kf_err err;
    if (fs_read_file(p, &text, &len, &err)) {
        T_CHECK(0, "%s wrote no JSON: %s", what, err.msg);
        return NULL;
    }
    json_doc *d = json_parse(text, len, p, &err);
    T_CHECK(d != NULL, "%s's JSON: %s", what, d ? "" : err.msg);
    free(text);
    return d;
}

static void bench_tests(void) {
    char cmd[2048], p[512];
    snprintf(cmd, sizeof cmd,
             "decode %s/ar.safetensors %s/pf4.safetensors --data %s/data --batch 2,3 --k 2,4 "
             "--runs 2 --prefix-len 6 --json %s/b.json --png %s/b.png --backend cpu",
             T, T, T, T, T);
    int rc = run(bench_decode_main, cmd);
    T_EQ_INT(rc, 0, "bench decode: rc %d", rc);
    json_doc *d = read_json("b.json", "bench decode");
    if (d) {
        const json *r = json_root(d), *rows = json_get(r, "rows"), *mn = json_get(r, "max_new");
        const json *ck = json_get(r, "clock");
        T_EQ_STR(ck && ck->type == JSON_STRING ? ck->str.s : "(none)", "wall", "default clock");
        const json *pr = json_get(r, "precision");
        T_EQ_STR(pr && pr->type == JSON_STRING ? pr->str.s : "(none)", "fp32", "default precision");
        /* the exact protocol: data 32 - prefix 6 = 26 in the 32-token models; k = 4
         * ends with a 2-token step (was 20: rounded to a multiple of every k) */
        T_CHECK(mn, "max_new %lld, want 26", mn ? (long long)mn->i : -1LL);
        if (mn) {
            T_EQ_INT(mn->i, 26, "max_new %lld, want 26", mn ? (long long)mn->i : -1LL);
        }
        T_CHECK(rows, "%zu rows, want 3 methods x 2 batches", rows ? rows->n : 0);
        if (rows) {
            T_EQ_INT(rows->n, 6, "%zu rows, want 3 methods x 2 batches", rows ? rows->n : 0);
        }
        for (size_t i = 0; rows && i < rows->n; i++) {
            const json *x = &rows->kids[i], *tps = json_get(x, "tokens_per_s"),
                       *sp = json_get(x, "speedup");
            const json *me = json_get(x, "method");
            T_CHECK(tps, "row %zu: tokens/s", i);
            if (tps) {
                T_CHECK(tps->num > 0, "row %zu: tokens/s", i);
            }
            if (me && !strcmp(me->str.s, "AR")) {
                T_CHECK(sp, "AR speedup is 1");
                if (sp) {
                    T_NEAR(sp->num, 1.0, 0, "AR speedup is 1");
                }
            }
            const json *ppl = json_get(x, "gen_ppl"), *ent = json_get(x, "entropy"),
                       *ml = json_get(x, "mean_len");
            const json *d2 = json_get(x, "distinct_2"), *fl = json_get(x, "flag");
            T_CHECK(ppl, "row %zu: gen_ppl got %g want a number >= 1", i,
                    ppl && ppl->type == JSON_NUMBER ? ppl->num : -1.0);
            if (ppl) {
                T_EQ_INT(ppl->type, JSON_NUMBER, "row %zu: gen_ppl got %g want a number >= 1", i,
                         ppl && ppl->type == JSON_NUMBER ? ppl->num : -1.0);
                T_CHECK(ppl->num >= 1, "row %zu: gen_ppl got %g want a number >= 1", i,
                        ppl && ppl->type == JSON_NUMBER ? ppl->num : -1.0);
            }
            T_CHECK(ent, "row %zu: entropy got %g want >= 0", i,
                    ent && ent->type == JSON_NUMBER ? ent->num : -1.0);
            if (ent) {
                T_EQ_INT(ent->type, JSON_NUMBER, "row %zu: entropy got %g want >= 0", i,
                         ent && ent->type == JSON_NUMBER ? ent->num : -1.0);
                T_CHECK(ent->num >= 0, "row %zu: entropy got %g want >= 0", i,
                        ent && ent->type == JSON_NUMBER ? ent->num : -1.0);
            }
            T_CHECK(ml,
                    "row %zu: mean_len got %g want "
                    "in [0, max_new 26]",
                    i, ml && ml->type == JSON_NUMBER ? ml->num : -1.0);
            if (ml) {
                T_EQ_INT(ml->type, JSON_NUMBER,
                         "row %zu: mean_len got %g want "
                         "in [0, max_new 26]",
                         i, ml && ml->type == JSON_NUMBER ? ml->num : -1.0);
                T_CHECK(ml->num >= 0,
                        "row %zu: mean_len got %g want "
                        "in [0, max_new 26]",
                        i, ml && ml->type == JSON_NUMBER ? ml->num : -1.0);
                T_CHECK(ml->num <= 26,
                        "row %zu: mean_len got %g want "
                        "in [0, max_new 26]",
                        i, ml && ml->type == JSON_NUMBER ? ml->num : -1.0);
            }
            T_CHECK(d2, "row %zu: distinct_2 present", i);
            if (d2) {
                T_CHECK(d2->type != JSON_STRING, "row %zu: distinct_2 present", i);
            }
            if (me && !strcmp(me->str.s, "AR")) {
                T_CHECK(fl, "AR's own flag: got \"%s\" want \"\"",
                        fl && fl->type == JSON_STRING ? fl->str.s : "(none)");
                if (fl) {
                    T_EQ_INT(fl->type, JSON_STRING, "AR's own flag: got \"%s\" want \"\"",
                             fl && fl->type == JSON_STRING ? fl->str.s : "(none)");
                    T_EQ_INT(fl->str.len, 0, "AR's own flag: got \"%s\" want \"\"",
                             fl && fl->type == JSON_STRING ? fl->str.s : "(none)");
                }
            }
        }
        json_free(d);
    }
    snprintf(p, sizeof p, "%s/b.png", T);
    char *png;
    size_t len;
    kf_err err;
    if (fs_read_file(p, &png, &len, &err) == 0) {
        T_CHECK(len > 8, "bench chart is a PNG");
        T_CHECK(!memcmp(png, "\x89PNG", 4), "bench chart is a PNG");
        free(png);
    } else {
        T_CHECK(0, "no chart: %s", err.msg);
    }
    /* bad input */
    snprintf(cmd, sizeof cmd,
             "decode %s/ar.safetensors --data %s/data --batch 2 --runs 1 --clock cpu "
             "--precision bf16 --json %s/x.json --png %s/x.png",
             T, T, T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 0, "default OWT prefix (64) with a context of 32 runs");
    json_doc *x = read_json("x.json", "bench decode --clock cpu --precision bf16");
    if (x) {
        const json *pl = x ? json_get(json_root(x), "prefix_len") : NULL;
        T_CHECK(pl, "default prefix: got %lld want half the context, %d",
                pl ? (long long)pl->i : -1LL, SEQ / 2);
        if (pl) {
            T_EQ_INT(pl->i, SEQ / 2, "default prefix: got %lld want half the context, %d",
                     pl ? (long long)pl->i : -1LL, SEQ / 2);
        }
        const json *ck = x ? json_get(json_root(x), "clock") : NULL,
                   *rows = x ? json_get(json_root(x), "rows") : NULL;
        T_EQ_STR(ck && ck->type == JSON_STRING ? ck->str.s : "(none)", "cpu", "--clock cpu");
        const json *pr = x ? json_get(json_root(x), "precision") : NULL;
        T_EQ_STR(pr && pr->type == JSON_STRING ? pr->str.s : "(none)", "bf16", "--precision bf16");
        const json *tps = rows && rows->n ? json_get(&rows->kids[0], "tokens_per_s") : NULL;
        T_CHECK((tps ? tps->num : -1.0) > 0, "--clock cpu: tokens/s got %g want > 0",
                tps ? tps->num : -1.0);
        json_free(x);
    }
    snprintf(cmd, sizeof cmd,
             "decode %s/ar.safetensors --data %s/data --batch 2 --runs 1 --prefix-len 40 "
             "--json %s/x.json --png %s/x.png",
             T, T, T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 1, "--prefix-len 40 longer than the data (32) exits 1");
    snprintf(cmd, sizeof cmd,
             "decode %s/pf4.safetensors --data %s/data --batch 2 --k 5,6 --prefix-len 4 --json "
             "%s/x.json "
             "--png %s/x.png",
             T, T, T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 1, "k > k_train for every --k exits 1");
    snprintf(cmd, sizeof cmd, "decode %s/none.safetensors --data %s/data --batch 2 --prefix-len 4",
             T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 1, "missing checkpoint exits 1");
    snprintf(cmd, sizeof cmd, "decode %s/ar.safetensors --data %s/data --batch 0", T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 2, "--batch 0 is a usage error");
    snprintf(cmd, sizeof cmd, "decode %s/ar.safetensors --data %s/data --freq-penalty -0.5", T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 2, "a negative --freq-penalty is a usage error");
    snprintf(cmd, sizeof cmd, "decode %s/ar.safetensors --data %s/data --clock gpu", T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 2, "--clock gpu is a usage error");
    snprintf(cmd, sizeof cmd, "decode %s/ar.safetensors --data %s/data --precision fp8", T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 2, "--precision fp8 is a usage error");
    T_EQ_INT(run(bench_decode_main, "decode --data x"), 2, "no checkpoint is a usage error");
}

/* --threads 1,2: every method at each count, labelled with it, the counts'
 * rows in turn; x AR against AR at the same count; the completions, and so
 * their quality, the same bits at either count. */
static void bench_threads_tests(void) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "decode %s/ar.safetensors %s/pf4.safetensors --data %s/data --batch 2 --k 4 "
             "--runs 1 --prefix-len 6 --threads 1,2 --json %s/t.json --backend cpu",
             T, T, T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 0, "bench decode --threads 1,2");
    json_doc *d = read_json("t.json", "bench decode --threads 1,2");
    const json *rows = d ? json_get(json_root(d), "rows") : NULL;
    size_t n = rows ? rows->n : 0;
    T_EQ_INT(n, 4, "--threads 1,2: %zu rows, want 2 methods x 2 counts", n);
    const char *want_label[4] = {"AR 1t", "KF k=4 1t", "AR 2t", "KF k=4 2t"};
    const int want_threads[4] = {1, 1, 2, 2};
    double tps[4] = {0};
    for (size_t i = 0; i < n && i < 4; i++) {
        const json *x = &rows->kids[i], *me = json_get(x, "method"), *th = json_get(x, "threads");
        const json *t = json_get(x, "tokens_per_s"), *rb = json_get(x, "roofline_bound");
        T_EQ_STR(me && me->type == JSON_STRING ? me->str.s : "(none)", want_label[i],
                 "row %zu's method", i);
        T_EQ_INT(th && th->type == JSON_NUMBER ? th->i : -1, want_threads[i], "row %zu's threads",
                 i);
        tps[i] = t && t->type == JSON_NUMBER ? t->num : 0;
        T_CHECK(tps[i] > 0, "row %zu: tokens/s %g, want > 0", i, tps[i]);
        const char *bound = rb && rb->type == JSON_STRING ? rb->str.s : "(none)";
        T_CHECK(!strcmp(bound, "read") || !strcmp(bound, "flops"),
                "row %zu: roofline_bound \"%s\", want read or flops", i, bound);
    }
    for (size_t i = 0; n == 4 && i < 4; i++) {
        const json *sp = json_get(&rows->kids[i], "speedup");
        double want = tps[i] / tps[i & 2]; /* AR at the same count */
        T_NEAR(sp && sp->type == JSON_NUMBER ? sp->num : -1, want, 2e-3 * want,
               "row %zu's speedup over AR at its count", i);
    }
    const char *key[] = {"gen_ppl", "entropy", "distinct_2", "mean_len"};
    for (size_t i = 0; n == 4 && i < 2; i++)
        for (int j = 0; j < 4; j++) {
            const json *a = json_get(&rows->kids[i], key[j]),
                       *b = json_get(&rows->kids[i + 2], key[j]);
            double va = a && a->type == JSON_NUMBER ? a->num : NAN,
                   vb = b && b->type == JSON_NUMBER ? b->num : NAN;
            T_CHECK(va == vb, "%s %s: %g at 1 thread, %g at 2", want_label[i], key[j], va, vb);
        }
    json_free(d);
    snprintf(cmd, sizeof cmd, "decode %s/ar.safetensors --data %s/data --threads 2,2", T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 2, "--threads 2,2 is a usage error");
    snprintf(cmd, sizeof cmd, "decode %s/ar.safetensors --data %s/data --threads 0", T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 2, "--threads 0 is a usage error");
}

/* --read-beside: every timed run framed by two reads; the runs' tokens/s
 * average to the row's, and the steady runs and their mean read are what
 * the runs' own reads say (within 15% of each other). */
static void bench_beside_tests(void) {
    char cmd[2048];
    const int runs = 3;
    snprintf(cmd, sizeof cmd,
             "decode %s/ar.safetensors %s/pf4.safetensors --data %s/data --batch 1,2 --k 4 "
             "--runs %d --prefix-len 6 --threads 1,2 --read-beside --json %s/rb.json "
             "--backend cpu",
             T, T, T, runs, T);
    T_EQ_INT(run(bench_decode_main, cmd), 0, "bench decode --read-beside");
    json_doc *d = read_json("rb.json", "bench decode --read-beside");
    const json *rows = d ? json_get(json_root(d), "rows") : NULL;
    size_t n = rows ? rows->n : 0;
    T_EQ_INT(n, 8, "--read-beside: %zu rows, want 2 methods x 2 counts x 2 batches", n);
    for (size_t i = 0; i < n; i++) {
        const json *x = &rows->kids[i], *rb = json_get(x, "runs_beside");
        const json *t = json_get(x, "tokens_per_s"), *ns = json_get(x, "beside_steady_runs");
        T_EQ_INT(rb && rb->type == JSON_ARRAY ? (int)rb->n : -1, runs, "row %zu: runs_beside", i);
        if (!rb || rb->type != JSON_ARRAY || (int)rb->n != runs) continue;
        double sum = 0, bw = 0;
        int steady = 0;
        for (int r = 0; r < runs; r++) {
            const json *v = &rb->kids[r];
            double e[3] = {0};
            for (size_t j = 0; j < 3 && v->type == JSON_ARRAY && j < v->n; j++)
                e[j] = v->kids[j].type == JSON_NUMBER ? v->kids[j].num : 0;
            T_CHECK(e[0] > 0 && e[1] > 0 && e[2] > 0,
                    "row %zu run %d: tokens/s %g, reads %g and %g, want all > 0", i, r, e[0], e[1],
                    e[2]);
            sum += e[0];
            double lo = e[1] < e[2] ? e[1] : e[2], hi = e[1] < e[2] ? e[2] : e[1];
            if (lo > 0 && hi <= 1.15 * lo) steady++, bw += (e[1] + e[2]) / 2;
        }
        double tps = t && t->type == JSON_NUMBER ? t->num : -1;
        T_NEAR(sum / runs, tps, 0.01 + 1e-3 * tps, "row %zu: the runs' mean tokens/s", i);
        T_EQ_INT(ns && ns->type == JSON_NUMBER ? (int)ns->i : -1, steady, "row %zu: steady runs",
                 i);
        const json *br = json_get(x, "beside_read"), *fr = json_get(x, "beside_roofline_fraction");
        if (steady) {
            T_NEAR(br && br->type == JSON_NUMBER ? br->num : -1, bw / steady, 1e-3 * bw / steady,
                   "row %zu: the steady runs' mean read", i);
            T_CHECK(fr && fr->type == JSON_NUMBER && fr->num > 0,
                    "row %zu: a fraction of the roofline for %d steady runs", i, steady);
        } else T_CHECK(!br && !fr, "row %zu: no read or fraction without a steady run", i);
    }
    json_free(d);
}

static void import_tests(model *ar, model *pf) {
    char cmd[2048], p[512];
    layout l;
    layout_ar(&l, 12);
    snprintf(p, sizeof p, "%s/ar_probe.safetensors", T);
    write_probe(ar, &l, "ar", 0, 0, 0.0f, p);
    snprintf(p, sizeof p, "%s/ar_bad.safetensors", T);
    write_probe(ar, &l, "ar", 0, 0, 1e-3f, p);
    layout_free(&l);
    layout_single(&l, 5, 3);
    snprintf(p, sizeof p, "%s/pf_probe.safetensors", T);
    write_probe(pf, &l, "single", 5, 3, 0.0f, p);
    layout_free(&l);

    snprintf(cmd, sizeof cmd, "import %s/ar.safetensors --probe %s/ar_probe.safetensors", T, T);
    T_EQ_INT(run(import_main, cmd), 0, "AR probe from the same model passes");
    snprintf(cmd, sizeof cmd, "import %s/ar.safetensors --probe %s/ar_bad.safetensors", T, T);
    T_EQ_INT(run(import_main, cmd), 1, "a logit off by 1e-3 fails the probe");
    snprintf(cmd, sizeof cmd, "import %s/ar.safetensors --probe %s/ar_bad.safetensors --tol 2e-3",
             T, T);
    T_EQ_INT(run(import_main, cmd), 0, "... and passes with --tol 2e-3");
    snprintf(cmd, sizeof cmd, "import %s/pf4.safetensors --probe %s/pf_probe.safetensors", T, T);
    T_EQ_INT(run(import_main, cmd), 0, "PFLM SingleForward probe passes (k = 3 < k_train)");
    snprintf(cmd, sizeof cmd, "import %s/pf4.safetensors --probe %s/ar_probe.safetensors", T, T);
    T_EQ_INT(run(import_main, cmd), 1, "AR probe on a PFLM checkpoint fails");

    /* registration into a run whose run.yaml names the stages; pf4 has the
     * release's noise encoder, so the run says noise_cycles 0 (run64 does
     * not: kf's default, 64) */
    char yaml[1024];
    const char *yaml_fmt = "name: t\ndata: {train: %s/data, valid: %s/data}\n"
                           "model: {hidden: 16, heads: 2, blocks: 1, vocab: %d, seq_len: %d%s}\n"
                           "stages:\n  - {name: ar, kind: ar, steps: 10}\n"
                           "  - {name: k4, kind: distill_ar, teacher: ar, k: 4, steps: 10}\n";
    snprintf(yaml, sizeof yaml, yaml_fmt, T, T, V, SEQ, ", noise_cycles: 0");
    write_text("run/run.yaml", yaml);
    snprintf(yaml, sizeof yaml, yaml_fmt, T, T, V, SEQ, "");
    write_text("run64/run.yaml", yaml);
    snprintf(cmd, sizeof cmd, "import %s/ar.safetensors --run-dir %s/run --stage ar", T, T);
    T_EQ_INT(run(import_main, cmd), 0, "import AR as stage ar");
    snprintf(p, sizeof p, "%s/run/stages/ar/final/DONE", T);
    T_CHECK(fs_exists(p), "final/DONE written");
    snprintf(p, sizeof p, "%s/run/stages/ar/final/model.safetensors", T);
    kf_err err;
    model_config c;
    T_EQ_INT(model_read_config(p, &c, &err), 0, "final/model.safetensors loads");
    T_EQ_INT(c.kind, MODEL_AR, "final/model.safetensors loads");
    T_EQ_INT(run(import_main, cmd), 1, "a second import without --force is refused");
    snprintf(cmd, sizeof cmd, "import %s/ar.safetensors --run-dir %s/run --stage ar --force", T, T);
    T_EQ_INT(run(import_main, cmd), 0, "--force replaces");
    snprintf(cmd, sizeof cmd, "import %s/ar.safetensors --run-dir %s/run --stage k4", T, T);
    T_EQ_INT(run(import_main, cmd), 1, "an AR checkpoint does not fit a distill_ar stage");
    snprintf(cmd, sizeof cmd, "import %s/pf4.safetensors --run-dir %s/run --stage k4", T, T);
    T_EQ_INT(run(import_main, cmd), 0, "PFLM(4) fits stage k4");
    snprintf(cmd, sizeof cmd, "import %s/pf4.safetensors --run-dir %s/run64 --stage k4", T, T);
    T_EQ_INT(run(import_main, cmd), 1,
             "PFLM(4) with the release's noise encoder refused by a run of kf's default (64)");
    snprintf(cmd, sizeof cmd, "import %s/pf4.safetensors --run-dir %s/run --stage nope", T, T);
    T_EQ_INT(run(import_main, cmd), 1, "unknown stage is refused");
    snprintf(cmd, sizeof cmd, "import %s/none.safetensors --run-dir %s/run --stage ar --force", T,
             T);
    T_EQ_INT(run(import_main, cmd), 1, "missing checkpoint exits 1");
    snprintf(cmd, sizeof cmd, "import %s/ar.safetensors --stage ar", T);
    T_EQ_INT(run(import_main, cmd), 2, "--stage without --run-dir is a usage error");
}

static void eval_tests(void) {
    char cmd[2048];
    write_text("c.jsonl", "{\"prefix\": [1, 2], \"completion\": [3, 4, 5, 0, 9]}\n"
                          "{\"prefix\": [7], \"completion_ids\": [8, 8, 8, 8]}\n");
    write_text("empty.jsonl", "");
    write_text("bad.jsonl", "{\"completion\": [1, 2]}\n{\"completion\": [1, \"x\"]}\n");
    snprintf(cmd, sizeof cmd,
             "eval --completions %s/c.jsonl --evaluator %s/ar.safetensors --eos 0 --backend cpu", T,
             T);
    T_EQ_INT(run(quality_eval_main, cmd), 0, "kf eval --completions: good run");
    snprintf(cmd, sizeof cmd, "eval --completions %s/c.jsonl --evaluator %s/pf4.safetensors", T, T);
    T_EQ_INT(run(quality_eval_main, cmd), 1, "a PFLM evaluator exits 1");
    snprintf(cmd, sizeof cmd, "eval --completions %s/c.jsonl --evaluator %s/none.safetensors", T,
             T);
    T_EQ_INT(run(quality_eval_main, cmd), 1, "missing evaluator exits 1");
    snprintf(cmd, sizeof cmd, "eval --completions %s/empty.jsonl --evaluator %s/ar.safetensors", T,
             T);
    T_EQ_INT(run(quality_eval_main, cmd), 1, "empty completions file exits 1");
    snprintf(cmd, sizeof cmd, "eval --completions %s/bad.jsonl --evaluator %s/ar.safetensors", T,
             T);
    T_EQ_INT(run(quality_eval_main, cmd), 1, "a malformed line exits 1");
    snprintf(cmd, sizeof cmd, "eval --completions %s/c.jsonl", T);
    T_EQ_INT(run(quality_eval_main, cmd), 2, "no --evaluator is a usage error");
    /* the evaluator as a stage's final/ directory, as every other command takes it */
    snprintf(cmd, sizeof cmd,
             "eval --completions %s/c.jsonl --evaluator %s/run/stages/ar/final --backend cpu", T,
             T);
    T_EQ_INT(run(quality_eval_main, cmd), 0, "a final/ directory as the evaluator");
    /* the "eos" kf sample records is the default; lines that disagree are refused */
    write_text("eos.jsonl", "{\"prefix\": [1], \"completion\": [3, 4], \"eos\": 4}\n"
                            "{\"prefix\": [1], \"completion\": [3, 5], \"eos\": 5}\n");
    snprintf(cmd, sizeof cmd,
             "eval --completions %s/eos.jsonl --evaluator %s/ar.safetensors --backend cpu", T, T);
    T_EQ_INT(run(quality_eval_main, cmd), 1, "lines recording different eos ids");

    /* without --json / --png nothing is written into the working directory */
    kf_err err;
    char cwd[4096], here[600];
    snprintf(here, sizeof here, "%s/cwd", T);
    T_CHECK(getcwd(cwd, sizeof cwd) && fs_mkdir_p(here, &err) == 0 && chdir(here) == 0, "chdir %s",
            here);
    snprintf(cmd, sizeof cmd,
             "decode %s/ar.safetensors %s/pf4.safetensors --data %s/data --batch 2 --k 2 "
             "--runs 1 --prefix-len 6 --backend cpu",
             T, T, T);
    T_EQ_INT(run(bench_decode_main, cmd), 0, "bench decode without --json/--png");
    DIR *d = opendir(".");
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            T_CHECK(0, "bench decode wrote %s into the working directory unasked", e->d_name);
            files++;
        }
    if (d) closedir(d);
    T_EQ_INT(files, 0, "files written into the working directory unasked");
    T_CHECK(chdir(cwd) == 0, "chdir back to %s", cwd);
}

int main(void) {
    /* passive OpenMP workers (trainer/cli/omp_env.h: re-executes once); the
     * commands called in process then find it set */
    omp_env_passive();
    snprintf(T, sizeof T, "/tmp/kf-serving-XXXXXX");
    KF_CHECK(mkdtemp(T), "mkdtemp");
    char p[512];
    snprintf(p, sizeof p, "%s/data", T);
    fixture_shards(p, 40, 40, SEQ, V);
    kf_backend *be = kernels_cpu_create();
    model *ar = make(be, MODEL_AR, 1, "ar.safetensors");
    model *pf = make(be, MODEL_PFLM, 4, "pf4.safetensors");
    bench_tests();
    bench_threads_tests();
    bench_beside_tests();
    import_tests(ar, pf);
    eval_tests();
    model_free(ar);
    model_free(pf);
    be->destroy(be);
    kf_err err;
    fs_rm_rf(T, &err);
    return T_DONE();
}
