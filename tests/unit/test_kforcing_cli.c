/* `kf sample` and `kf eval` end to end (through ${KF_BIN:-bin/kf}) on small
 * random checkpoints and a synthetic shard set: good runs produce the
 * documented output (completion lengths, per-position metrics for k), a fixed
 * seed repeats, and bad input gives a clear error and a non-zero exit:
 * missing checkpoint, k > k_train, a prefix longer than the context, an empty
 * prefix file, unknown token ids, a PFLM without --teacher, usage errors.
 * Speculative decoding (--draft): a PTP and a Medusa draft give the AR's
 * greedy tokens alike, PTP's tau = 1 tokens do not depend on k, and each
 * line carries its NFE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/fsutil.h"
#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/trainer_fixture.h"
#include "trainer/infer/decode.h"
#include "trainer/model/model.h"

static char dir[] = "/tmp/kf-cli-XXXXXX";
static const char *kf;

/* Runs a kf command line with stdout to OUT and stderr to ERR; returns the exit code. */
static int run(const char *args) {
    char cmd[16384]; /* args (up to 8192) + kf and the redirections */
    snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err", kf, args, dir, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *buf = NULL;
    size_t len;
    kf_err err;
    if (fs_read_file(p, &buf, &len, &err)) return strdup("");
    return buf;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* The "completion" arrays of a kf sample output, concatenated (tokens/s left out). */
static char *completions(const char *out) {
    char *c = calloc(strlen(out) + 1, 1);
    for (const char *p = out; (p = strstr(p, "\"completion\": [")); p++)
        strncat(c, p, (size_t)(strchr(p, ']') - p + 1));
    return c;
}

/* The completions of `kf sample DIR/CKPT` over prefixes.jsonl (2 prefixes),
 * 20 new tokens each, with the extra options; checks it exits 0 and prints one
 * completion per prefix. */
static char *sample_completions(const char *ckpt, const char *opts) {
    char a[8192];
    snprintf(a, sizeof a, "sample %s/%s --prefix-file %s/prefixes.jsonl --max-new 20 %s", dir, ckpt,
             dir, opts);
    T_EQ_INT(run(a), 0, "sample %s %s: %s", ckpt, opts, slurp("err"));
    char *out = slurp("out");
    T_EQ_INT(count(out, "\"completion\": ["), 2, "sample %s %s: completions, output:\n%s", ckpt,
             opts, out);
    char *c = completions(out);
    free(out);
    return c;
}

static void write_file(const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static void save_model(kf_backend *be, model_config c, const char *name) {
    model *m = model_create(be, &c);
    model_init(m, 5);
    /* a non-zero output layer so sampling is not uniform */
    float *h = malloc((size_t)m->n_params * sizeof(float));
    be->download(be, h, m->params, (size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        if (h[i] == 0.0f) h[i] = (float)(rng_uniform01(3, 3, (uint64_t)i) - 0.5);
    be->upload(be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
    char p[4096];
    kf_err err;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    T_EQ_INT(model_save(m, p, NULL, &err), 0, "save %s: %s", name, err.msg);
    model_free(m);
}

int main(void) {
    kf = getenv("KF_BIN") ? getenv("KF_BIN") : "bin/kf";
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    kf_backend *be = kernels_cpu_create();
    model_config ar = {.hidden = 16,
                       .heads = 2,
                       .blocks = 1,
                       .vocab = 41,
                       .mask_id = 40,
                       .seq_len = 24,
                       .kind = MODEL_AR,
                       .head = HEAD_SHARED,
                       .k_train = 1};
    save_model(be, ar, "ar.safetensors");
    model_config pf = ar;
    pf.kind = MODEL_PFLM;
    pf.k_train = 2;
    save_model(be, pf, "pf.safetensors");
    /* the same AR weights (they come first, initialised alike) plus 2 heads */
    model_config md = ar;
    md.head = HEAD_MEDUSA;
    md.k_train = 2;
    save_model(be, md, "md.safetensors");
    char data[4200];
    snprintf(data, sizeof data, "%s/data", dir);
    fixture_shards(data, 16, 8, 16, 40);
    write_file("prefixes.jsonl", "{\"prefix\": [1, 2, 3]}\n\n{\"prefix\": [7, 8]}\n");
    write_file("empty.jsonl", "\n");
    write_file("badid.jsonl", "{\"prefix\": [1, 99]}\n");
    write_file("long.jsonl",
               "{\"prefix\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}\n");
    char a[8192];

    /* good runs */
    snprintf(a, sizeof a,
             "sample %s/ar.safetensors --prefix-file %s/prefixes.jsonl --n-per-prefix 3 --max-new "
             "5 --seed 9",
             dir, dir);
    T_EQ_INT(run(a), 0, "AR sample: %s", slurp("err"));
    char *o1 = slurp("out");
    T_EQ_INT(count(o1, "\"completion\": ["), 6, "AR sample: 6 completions expected, got:\n%s", o1);
    T_EQ_INT(count(o1, "\"tokens_per_s\""), 6, "AR sample: 6 completions expected, got:\n%s", o1);
    T_EQ_INT(run(a), 0, "AR sample again");
    char *o2 = slurp("out");
    /* same seed, same completions (tokens/s may differ: compare up to it) */
    int same = 1;
    for (char *p = o1, *q = o2;
         (p = strstr(p, "\"completion\"")) && (q = strstr(q, "\"completion\"")); p++, q++)
        same &= strncmp(p, q, (size_t)(strstr(p, "]") - p)) == 0;
    T_CHECK(same, "a fixed seed gives identical completions");
    free(o1);
    free(o2);
    snprintf(a, sizeof a,
             "sample %s/pf.safetensors --prefix-file %s/prefixes.jsonl --k 2 --max-new 6 --tau 0.5 "
             "--freq-penalty 0.3",
             dir, dir);
    T_EQ_INT(run(a), 0, "PFLM sample: %s", slurp("err"));
    o1 = slurp("out");
    T_EQ_INT(count(o1, "\"k\": 2"), 2, "PFLM sample output:\n%s", o1);
    free(o1);
    /* speculative decoding */
    char opt[4][4400];
    const char *spec_opts[4] = {"pf.safetensors --greedy", "md.safetensors --greedy",
                                "pf.safetensors --k 1", "pf.safetensors --k 2"};
    for (int i = 0; i < 4; i++) snprintf(opt[i], sizeof opt[i], "--draft %s/%s", dir, spec_opts[i]);
    char *g_ptp = sample_completions("ar.safetensors", opt[0]);
    char *g_md = sample_completions("ar.safetensors", opt[1]);
    T_CHECK(!strcmp(g_ptp, g_md), "greedy tokens differ by draft: PTP %s, Medusa %s", g_ptp, g_md);
    char *t_k1 = sample_completions("ar.safetensors", opt[2]);
    char *t_k2 = sample_completions("ar.safetensors", opt[3]);
    T_CHECK(!strcmp(t_k1, t_k2), "PTP tokens differ by k: %s, %s", t_k1, t_k2);
    o1 = slurp("out");
    T_EQ_INT(count(o1, "\"method\": \"ptp\", \"nfe\": "), 2, "--draft output:\n%s", o1);
    free(o1);
    free(g_ptp);
    free(g_md);
    free(t_k1);
    free(t_k2);
    /* the frequency penalty defaults to the released sampler's 0.5 for a PFLM, 0 for AR */
    char *pen[3];
    const char *pen_args[3] = {"--k 2", "--k 2 --freq-penalty 0.5", "--k 2 --freq-penalty 0"};
    for (int i = 0; i < 3; i++) pen[i] = sample_completions("pf.safetensors", pen_args[i]);
    T_CHECK(!strcmp(pen[0], pen[1]), "PFLM default penalty: got %s want (0.5) %s", pen[0], pen[1]);
    T_CHECK(strcmp(pen[0], pen[2]), "PFLM default penalty is not 0: both gave %s", pen[0]);
    for (int i = 0; i < 3; i++) free(pen[i]);
    /* the release scripts' per-k table: at k 2, lm1b's 0.2 and owt's 0.3 */
    const char *table_args[4] = {"--k 2 --freq-penalty-table lm1b", "--k 2 --freq-penalty 0.2",
                                 "--k 2 --freq-penalty-table owt", "--k 2 --freq-penalty 0.3"};
    char *tab[4];
    for (int i = 0; i < 4; i++) tab[i] = sample_completions("pf.safetensors", table_args[i]);
    T_EQ_STR(tab[0], tab[1], "--freq-penalty-table lm1b at k 2 against --freq-penalty 0.2");
    T_EQ_STR(tab[2], tab[3], "--freq-penalty-table owt at k 2 against --freq-penalty 0.3");
    for (int i = 0; i < 4; i++) free(tab[i]);
    struct {
        const char *table;
        int64_t k;
        double want;
    } rel[] = {{"lm1b", 2, 0.2}, {"lm1b", 3, 0.4}, {"lm1b", 4, 0.5}, {"owt", 2, 0.3},
               {"owt", 3, 0.5},  {"owt", 4, 0.5},  {"owt", 8, 0.5},  {"c4", 2, -1}};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
        T_NEAR(decode_release_penalty(rel[i].table, rel[i].k), rel[i].want, 0,
               "decode_release_penalty(%s, %lld)", rel[i].table, (long long)rel[i].k);
    for (int i = 0; i < 2; i++)
        pen[i] = sample_completions("ar.safetensors", i ? "--freq-penalty 0" : "");
    T_CHECK(!strcmp(pen[0], pen[1]), "AR default penalty: got %s want (0) %s", pen[0], pen[1]);
    free(pen[0]);
    free(pen[1]);
    /* --precision: fp32 is the default; the 16-bit modes decode every prefix */
    const char *precs[4] = {"--k 2", "--k 2 --precision fp32", "--k 2 --precision fp16",
                            "--k 2 --precision bf16"};
    char *by_prec[4];
    for (int i = 0; i < 4; i++) by_prec[i] = sample_completions("pf.safetensors", precs[i]);
    T_CHECK(!strcmp(by_prec[1], by_prec[0]), "--precision fp32: got %s want (the default) %s",
            by_prec[1], by_prec[0]);
    for (int i = 0; i < 4; i++) free(by_prec[i]);
    snprintf(a, sizeof a, "eval %s/ar.safetensors --data %s --samples 8", dir, data);
    T_EQ_INT(run(a), 0, "AR eval: %s", slurp("err"));
    o1 = slurp("out");
    T_CHECK(strstr(o1, "\"nll\": "), "AR eval output: %s", o1);
    T_CHECK(strstr(o1, "\"ppl\": "), "AR eval output: %s", o1);
    free(o1);
    snprintf(a, sizeof a,
             "eval %s/pf.safetensors --data %s --teacher %s/ar.safetensors --samples 4", dir, data,
             dir);
    T_EQ_INT(run(a), 0, "PFLM eval: %s", slurp("err"));
    o1 = slurp("out");
    T_CHECK(strstr(o1, "\"supervision\": \"distill_ar\""), "PFLM eval output: %s", o1);
    T_CHECK(strstr(o1, "\"nll_pos\": ["), "PFLM eval output: %s", o1);
    T_CHECK(strstr(o1, "\"block_acc\""), "PFLM eval output: %s", o1);
    free(o1);
    snprintf(a, sizeof a,
             "eval %s/pf.safetensors --data %s --teacher %s/ar.safetensors --k 1 --samples 4", dir,
             data, dir);
    T_EQ_INT(run(a), 0, "PFLM eval --k 1: %s", slurp("err"));

    /* errors: exit code and a message naming the problem */
    struct {
        const char *fmt;
        int code;
        const char *msg;
    } bad[] = {
        {"sample %s/missing.safetensors --bos 0", 1, "missing"},
        {"sample %s/pf.safetensors --bos 0 --k 3", 1, "k_train"},
        {"sample %s/ar.safetensors --bos 0 --k 2", 1, "one token per step"},
        {"sample %s/ar.safetensors --prefix-file %s/long.jsonl --max-new 8", 1, "context"},
        {"sample %s/ar.safetensors --prefix-file %s/empty.jsonl", 1, "empty"},
        {"sample %s/ar.safetensors --prefix-file %s/badid.jsonl", 1, "99"},
        {"sample %s/ar.safetensors --prefix-file %s/nofile.jsonl", 1, "nofile"},
        {"sample %s/ar.safetensors", 2, "BOS"},
        {"sample %s/ar.safetensors --bos 0 --tau 0", 2, "tau"},
        {"sample %s/ar.safetensors --bos 0 --greedy", 2, "--greedy needs --draft"},
        {"sample %s/ar.safetensors --bos 0 --draft %s/ar.safetensors", 1, "draft must be"},
        {"sample %s/pf.safetensors --bos 0 --draft %s/pf.safetensors", 1, "verifier"},
        {"sample %s/ar.safetensors --bogus 1", 2, "unknown option"},
        {"sample %s/ar.safetensors --bos 0 --backend nosuch", 1, "unknown backend"},
        {"sample %s/ar.safetensors --bos 0 --precision fp8", 2, "expected fp32, fp16 or bf16"},
        {"eval %s/pf.safetensors --data %s/data", 1, "--teacher"},
        {"eval %s/pf.safetensors --data %s/data --teacher %s/ar.safetensors --k 3", 1, "k_train"},
        {"eval %s/ar.safetensors --data %s/nodata", 1, "nodata"},
        {"eval %s/ar.safetensors", 2, "usage"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, bad[i].fmt, dir, dir, dir);
        int rc = run(cmd);
        char *e = slurp("err");
        T_EQ_INT(rc, bad[i].code, "`kf %s`: exit %d (want %d), stderr: %s", cmd, rc, bad[i].code,
                 e);
        T_CHECK(strstr(e, bad[i].msg), "`kf %s`: exit %d (want %d), stderr: %s", cmd, rc,
                bad[i].code, e);
        free(e);
    }
    T_EQ_INT(run("sample --help"), 0, "--help exits 0");
    T_EQ_INT(run("eval --help"), 0, "--help exits 0");
    kf_err err;
    fs_rm_rf(dir, &err);
    be->destroy(be);
    return T_DONE();
}
