/* tests/unit/test_jobs_rundir.c — the run directory (jobs/rundir.h): config
 * comparison (compatible vs incompatible changes, named), freezing run.yaml
 * with its hash and refusing a hand-edited one, the jobs.tsv records, and a
 * stage's state read from checkpoint directories, log.jsonl and status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "jobs/rundir.h"
#include "tests/test.h"

static const char base[] = "name: t\n"
                           "data: {train: D, valid: D}\n"
                           "model: {hidden: 32, heads: 2, blocks: 1, vocab: 100, seq_len: 16}\n"
                           "stages:\n"
                           "  - {name: ar, kind: ar, steps: 4}\n"
                           "  - {name: k1, kind: distill_ar, teacher: ar, k: 1, steps: 4}\n"
                           "resources: {ranks: 1, time_limit: \"00:10:00\"}\n";

static void put(const char *path, const char *text) {
    kf_err err;
    char dir[4096];
    fs_dirname(path, dir, sizeof dir);
    if (fs_mkdir_p(dir, &err) || fs_write_atomic(path, text, strlen(text), &err))
        fprintf(stderr, "setup: %s\n", err.msg), exit(1);
}

/* base with one substring replaced */
static char *edit(const char *from, const char *to) {
    const char *p = strstr(base, from);
    if (!p) fprintf(stderr, "setup: '%s' not in base\n", from), exit(1);
    char *out = malloc(sizeof base + strlen(to));
    sprintf(out, "%.*s%s%s", (int)(p - base), base, to, p + strlen(from));
    return out;
}

static void test_diff(void) {
    char what[512];
    T_EQ_INT(rundir_config_diff(base, base, what, sizeof what), 0, "same config: no change (%s)",
             what);
    char *c = edit("time_limit: \"00:10:00\"", "time_limit: \"00:20:00\"");
    T_EQ_INT(rundir_config_diff(base, c, what, sizeof what), 1, "time limit: compatible");
    T_CHECK(!strcmp(what, "resources.time_limit: 00:10:00 -> 00:20:00"), "named: %s", what);
    free(c);
    c = edit("hidden: 32", "hidden: 64");
    T_EQ_INT(rundir_config_diff(base, c, what, sizeof what), 2, "model change: incompatible");
    T_CHECK(!strcmp(what, "model.hidden: 32 -> 64"), "named: %s", what);
    free(c);
    /* an incompatible change is reported even after a compatible one */
    c = edit("steps: 4}\n  - {name: k1", "steps: 5}\n  - {name: k1");
    char *c2 = malloc(strlen(c) + 16);
    strcpy(c2, c);
    char *t = strstr(c2, "00:10:00");
    memcpy(t, "00:30:00", 8);
    T_EQ_INT(rundir_config_diff(base, c2, what, sizeof what), 2, "steps + time: incompatible");
    T_CHECK(!strcmp(what, "stages[0].steps: 4 -> 5"), "named: %s", what);
    free(c), free(c2);
    c = edit("name: t\n", "name: t\nshards: {x: {out: D}}\n");
    T_EQ_INT(rundir_config_diff(base, c, what, sizeof what), 2, "added section: incompatible");
    T_CHECK(!strcmp(what, "shards: (absent) -> {1 keys}"), "named: %s", what);
    free(c);
    c = edit("  - {name: k1, kind: distill_ar, teacher: ar, k: 1, steps: 4}\n", "");
    T_EQ_INT(rundir_config_diff(base, c, what, sizeof what), 2, "removed stage: incompatible");
    T_CHECK(!strcmp(what, "stages: [2 items] -> [1 items]"), "named: %s", what);
    free(c);
}

static void test_freeze(const char *dir) {
    kf_err err;
    char cfg[4096], run[4096], p[4200];
    snprintf(cfg, sizeof cfg, "%s/cfg.yaml", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    put(cfg, base);
    runconfig *rc, *back;
    T_EQ_INT(runconfig_load(cfg, 0, NULL, &rc, &err), 0, "load: %s", err.msg);
    T_EQ_INT(rundir_freeze(run, rc, &err), 0, "freeze: %s", err.msg);
    T_EQ_INT(rundir_load(run, 0, NULL, &back, &err), 0, "load frozen: %s", err.msg);
    T_EQ_STR(back->hash, rc->hash, "frozen = original");
    T_EQ_STR(back->canonical, rc->canonical, "frozen = original");
    runconfig_free(back);
    char *over[] = {"resources.time_limit=00:20:00"};
    T_EQ_INT(rundir_load(run, 1, over, &back, &err), 0, "overrides on a frozen run: %s", err.msg);
    T_EQ_INT(back->res.time_limit_s, 1200, "overrides on a frozen run: %s", err.msg);
    runconfig_free(back);
    snprintf(p, sizeof p, "%s/run.yaml", run);
    char *text;
    size_t len;
    T_EQ_INT(fs_read_file(p, &text, &len, &err), 0, "read run.yaml");
    char *s = strstr(text, "steps: 4");
    s[7] = '9';
    put(p, text);
    free(text);
    T_EQ_INT(rundir_load(run, 0, NULL, &back, &err), -1, "hand-edited run.yaml refused: %s",
             err.msg);
    T_CHECK(strstr(err.msg, "changed after the run was made"), "hand-edited run.yaml refused: %s",
            err.msg);
    put(p, base); /* no hash line at all */
    T_EQ_INT(rundir_load(run, 0, NULL, &back, &err), -1, "run.yaml without hash refused: %s",
             err.msg);
    T_CHECK(strstr(err.msg, "not a frozen run config"), "run.yaml without hash refused: %s",
            err.msg);
    T_EQ_INT(rundir_freeze(run, rc, &err), 0, "refreeze: %s", err.msg);
    runconfig_free(rc);
}

static void test_jobs(const char *dir) {
    kf_err err;
    char run[4096], p[4200];
    snprintf(run, sizeof run, "%s/jobs", dir);
    T_REQUIRE(fs_mkdir_p(run, &err) == 0, "mkdir");
    rundir_job *j;
    T_EQ_INT(rundir_jobs_read(run, &j, &err), 0, "no jobs.tsv: empty list");
    T_EQ_INT(rundir_jobs_add(run, "ar", "11", &err), 0, "add: %s", err.msg);
    T_EQ_INT(rundir_jobs_add(run, "k1", "12", &err), 0, "add: %s", err.msg);
    T_EQ_INT(rundir_jobs_add(run, "ar", "15", &err), 0, "add: %s", err.msg);
    int n = rundir_jobs_read(run, &j, &err);
    T_EQ_INT(n, 3, "3 jobs, got %d (%s)", n, err.msg);
    const rundir_job *cur = rundir_jobs_current(j, n, "ar");
    T_CHECK(cur, "current job of ar is the last one");
    if (cur) {
        T_EQ_STR(cur->id, "15", "current job of ar is the last one");
    }
    T_EQ_INT(rundir_jobs_current(j, n, "k2"), NULL, "no job for k2");
    free(j);
    snprintf(p, sizeof p, "%s/jobs.tsv", run);
    put(p, "# kf jobs v1\nar 11\n");
    T_EQ_INT(rundir_jobs_read(run, &j, &err), -1, "malformed line named: %s", err.msg);
    T_CHECK(strstr(err.msg, "jobs.tsv:2:1"), "malformed line named: %s", err.msg);
    /* a field never runs into the next line (found by fuzz_rundir) */
    put(p, "# kf jobs v1\nar\t10\n1\t1700000000\nk1\t1002\t1700000100\n");
    T_EQ_INT(rundir_jobs_read(run, &j, &err), -1, "a line of two fields: %s", err.msg);
    T_CHECK(strstr(err.msg, "jobs.tsv:2:1") != NULL, "a line of two fields named: %s", err.msg);
    put(p, "# kf jobs v1\nar\t10\t1700000000 x\n");
    T_EQ_INT(rundir_jobs_read(run, &j, &err), -1, "trailing text: %s", err.msg);
    put(p, "# kf jobs v1\nar\t10\t1700000000\nk1\t11\t1700000100");
    T_EQ_INT(rundir_jobs_read(run, &j, &err), 2, "no final newline: %s", err.msg);
    free(j);
    put(p, "stage\tjob\n");
    T_EQ_INT(rundir_jobs_read(run, &j, &err), -1, "bad header: %s", err.msg);
    T_CHECK(strstr(err.msg, "not a kf jobs file"), "bad header: %s", err.msg);
}

static void test_state(const char *dir) {
    kf_err err;
    char cfg[4096], run[4096], p[4200];
    snprintf(cfg, sizeof cfg, "%s/cfg.yaml", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    runconfig *rc;
    T_EQ_INT(runconfig_load(cfg, 0, NULL, &rc, &err), 0, "load: %s", err.msg);
    rundir_state st;
    rundir_stage_state(run, rc, "ar", &st);
    T_CHECK(!st.complete, "nothing yet");
    T_EQ_INT(st.ckpt_step, -1, "nothing yet");
    T_EQ_INT(st.log_step, -1, "nothing yet");
    T_CHECK(!*st.status, "nothing yet");
    /* step-3 verifies (every listed file "x", its size and sha256); step-4's
     * manifest lists a file that is not "x" (corrupt); the rest are partial */
    const char *files[] = {"ckpt/step-2/state.yaml", "ckpt/step-10/model.safetensors",
                           "ckpt/step-12.tmp/state.yaml", "ckpt/step-x/state.yaml"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/stages/ar/%s", run, files[i]);
        put(p, "x");
    }
    const char *listed[] = {"model.safetensors", "ema.safetensors", "adam_m.safetensors",
                            "adam_v.safetensors", "rank-00000.yaml"};
    for (int step = 3; step <= 4; step++) {
        char manifest[2048], hex[65];
        size_t n = (size_t)snprintf(
            manifest, sizeof manifest,
            "format: kforcing-checkpoint\nversion: 1\nstage: \"ar\"\nkind: \"ar\"\nstep: %d\n"
            "cursor: %d\nglobal_batch: 1\nworld: 1\nconfig_hash: \"%064d\"\nphase: fp32\n"
            "optim: {adam_t: 3, scale: 1, good_steps: 0, skipped: 0}\n"
            "model: {hidden: 8, heads: 2, blocks: 1, vocab: 9, mask_id: -1, seq_len: 4, kind: 0, "
            "head: 0, k_train: 1}\ndata_manifest: \"\"\ntokenizer: \"gpt2\"\n"
            "vocab_sha256: \"\"\nteacher_sha256: \"\"\nteacher_precision: \"fp32\"\nfiles:\n",
            step, step, 0);
        memset(hex, step == 3 ? 'a' : 'b', 64), hex[64] = 0;
        if (step == 3) /* sha256("x") */
            memcpy(hex, "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", 64);
        for (int f = 0; f < 5; f++) {
            n += (size_t)snprintf(manifest + n, sizeof manifest - n,
                                  "  - {name: \"%s\", bytes: 1, sha256: \"%s\"}\n", listed[f], hex);
            snprintf(p, sizeof p, "%s/stages/ar/ckpt/step-%d/%s", run, step, listed[f]);
            put(p, "x");
        }
        snprintf(p, sizeof p, "%s/stages/ar/ckpt/step-%d/state.yaml", run, step);
        put(p, manifest);
    }
    snprintf(p, sizeof p, "%s/stages/ar/log.jsonl", run);
    put(p, "{\"step\":1,\"loss\":2.5,\"tokens_per_s\":100,\"ms_step\":500,\"time\":0.5}\n"
           "{\"step\":2,\"loss\":2.4,\"tokens_per_s\":400,\"ms_step\":250,\"time\":0.75}\n"
           "{\"step\":2,\"val_loss\":2.3,\"time\":0.8}\n"
           "{\"step\":3,\"loss\":2.3,\"tokens_per_s\":9"); /* being written */
    snprintf(p, sizeof p, "%s/stages/ar/status", run);
    put(p, "state: preempted\nstep: 3\nsteps: 4\n");
    rundir_stage_state(run, rc, "ar", &st);
    T_EQ_INT(st.ckpt_step, 3, "newest checkpoint that verifies: %s", st.ckpt);
    T_EQ_STR(st.ckpt, "step-3", "newest checkpoint that verifies: %s", st.ckpt);
    T_CHECK(!st.live, "no writer holds the stage");
    T_EQ_INT(st.log_step, 2, "log: step %lld, %g steps/s, %g tok/s", (long long)st.log_step,
             st.steps_per_s, st.tokens_per_s);
    T_NEAR(st.steps_per_s, 4.0, 0, "log: step %lld, %g steps/s, %g tok/s", (long long)st.log_step,
           st.steps_per_s, st.tokens_per_s);
    T_NEAR(st.tokens_per_s, 400, 0, "log: step %lld, %g steps/s, %g tok/s", (long long)st.log_step,
           st.steps_per_s, st.tokens_per_s);
    T_CHECK(!strcmp(st.status, "preempted"), "status: %s", st.status);
    char why[4200];
    T_CHECK(!rundir_stage_complete(run, rc, "ar", why, sizeof why), "not complete: %s", why);
    T_CHECK(strstr(why, "final/DONE"), "not complete: %s", why);
    snprintf(p, sizeof p, "%s/stages/ar/final/DONE", run);
    put(p, "");
    T_CHECK(!rundir_stage_complete(run, rc, "ar", why, sizeof why), "marker without weights: %s",
            why);
    T_CHECK(strstr(why, "model.safetensors"), "marker without weights: %s", why);
    snprintf(p, sizeof p, "%s/stages/ar/final/model.safetensors", run);
    put(p, "w");
    T_CHECK(!rundir_stage_complete(run, rc, "ar", why, sizeof why), "no final.yaml: %s", why);
    T_EQ_INT(rundir_final_verify(run, "ar", why, sizeof why), -1, "no final.yaml: %s", why);
    snprintf(p, sizeof p, "%s/stages/ar/final/final.yaml", run);
    put(p, "files:\n  - {name: \"model.safetensors\", bytes: 1, sha256: "
           "\"50e721e49c013f00c62cf59f2163542a9d8df02464efeb615d31051b0fddc326\"}\n");
    T_CHECK(rundir_stage_complete(run, rc, "ar", why, sizeof why), "complete: %s", why);
    T_EQ_INT(rundir_final_verify(run, "ar", why, sizeof why), 1, "verifies: %s", why);
    snprintf(p, sizeof p, "%s/stages/ar/final/model.safetensors", run);
    put(p, "x"); /* damaged after the stage finished */
    T_CHECK(!rundir_stage_complete(run, rc, "ar", why, sizeof why), "damaged weights: %s", why);
    T_EQ_INT(rundir_final_verify(run, "ar", why, sizeof why), -1, "damaged weights: %s", why);
    T_CHECK(strstr(why, "final/model.safetensors") && strstr(why, "corrupt"),
            "damaged weights named: %s", why);
    T_CHECK(!rundir_stage_complete(run, rc, RUNDIR_SHARDS, why, sizeof why),
            "shards: no manifest: %s", why);
    T_CHECK(strstr(why, "D/manifest.yaml"), "shards: no manifest: %s", why);
    runconfig_free(rc);
}

int main(void) {
    char dir[] = "/tmp/kf-test-rundir.XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    test_diff();
    test_freeze(dir);
    test_jobs(dir);
    test_state(dir);
    kf_err err;
    fs_rm_rf(dir, &err);
    return T_DONE();
}
