/* Run-config parsing: a valid config resolves defaults/overrides per stage;
 * each kind of mistake is refused with FILE:LINE:COL and the key path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/runconfig.h"
#include "tests/test.h"

static const char *base =
    "name: t\n"
    "data: {train: d/train, valid: d/valid}\n"
    "shards: {anything: [1, 2]}\n"
    "model: {hidden: 64, heads: 2, blocks: 2, vocab: 100, seq_len: 32}\n"
    "defaults:\n"
    "  batch: 8\n"
    "  lr: 1.0e-3\n"
    "  precision: [{until_step: 5, mode: fp16}, {mode: fp32}]\n"
    "  loss_scale: {init: 1024, growth_interval: 3}\n"
    "stages:\n"
    "  - {name: ar, kind: ar, steps: 10, lr: 2.0e-3}\n"
    "  - {name: k1, kind: distill_ar, teacher: ar, k: 1, steps: 4, tau: [0.5, 1.0]}\n"
    "  - {name: k2, kind: self_forcing, teacher: k1, k: 2, steps: 4}\n"
    "resources: {ranks: 2, time_limit: \"01:02:03\"}\n";

static char path[] = "/tmp/kf_rc_XXXXXX";

static int load_with(const char *find, const char *repl, int n_over, char *const *over,
                     runconfig **rc, kf_err *err) {
    char text[4096];
    const char *p = find ? strstr(base, find) : NULL;
    if (find && !p) {
        fprintf(stderr, "bad test pattern %s\n", find);
        exit(2);
    }
    if (p) snprintf(text, sizeof text, "%.*s%s%s", (int)(p - base), base, repl, p + strlen(find));
    else snprintf(text, sizeof text, "%s", base);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    *rc = NULL;
    memset(err, 0, sizeof *err);
    return runconfig_load(path, n_over, over, rc, err);
}

static void expect_error(const char *find, const char *repl, const char *want) {
    runconfig *rc;
    kf_err err;
    int r = load_with(find, repl, 0, NULL, &rc, &err);
    T_EQ_INT(r, -1, "replacing '%s' by '%s' must fail with '%s'; got %d '%s'", find, repl, want, r,
             err.msg);
    T_CHECK(strstr(err.msg, want), "replacing '%s' by '%s' must fail with '%s'; got %d '%s'", find,
            repl, want, r, err.msg);
    T_CHECK(strstr(err.msg, path), "replacing '%s' by '%s' must fail with '%s'; got %d '%s'", find,
            repl, want, r, err.msg);
    runconfig_free(rc);
}

int main(void) {
    int fd = mkstemp(path);
    close(fd);
    runconfig *rc;
    kf_err err;
    T_EQ_INT(load_with(NULL, NULL, 0, NULL, &rc, &err), 0, "valid config: %s", err.msg);
    if (rc) {
        T_EQ_INT(rc->n_stages, 3, "stages");
        T_EQ_STR(rc->name, "t", "stages");
        T_CLOSE(rc->stages[0].opt.lr, 2e-3, 0, "stage override lr");
        T_CLOSE(rc->stages[1].opt.lr, 1e-3, 0, "defaults lr");
        T_EQ_INT(rc->stages[1].teacher_stage, 0, "teachers");
        T_EQ_INT(rc->stages[2].teacher_stage, 1, "teachers");
        T_EQ_INT(rc->stages[2].init_stage, 1, "self_forcing initialises from its teacher");
        T_NEAR(rc->stages[2].tau_min, 0.5, 0,
               "self_forcing keeps its teacher's tau range: [%g, %g]", rc->stages[2].tau_min,
               rc->stages[2].tau_max);
        T_NEAR(rc->stages[2].tau_max, 1.0, 0,
               "self_forcing keeps its teacher's tau range: [%g, %g]", rc->stages[2].tau_min,
               rc->stages[2].tau_max);
        T_NEAR(rc->stages[0].tau_min, 1.0, 0, "ar has tau 1");
        T_NEAR(rc->stages[0].tau_max, 1.0, 0, "ar has tau 1");
        T_EQ_INT(runconfig_precision_at(&rc->stages[0].opt, 4), RC_PREC_FP16, "phases");
        T_EQ_INT(runconfig_precision_at(&rc->stages[0].opt, 5), RC_PREC_FP32, "phases");
        T_CLOSE(rc->stages[0].opt.scale_init, 1024, 0, "loss scale init");
        T_EQ_INT(rc->stages[0].opt.scale_growth_interval, 3, "growth interval");
        T_EQ_INT(rc->res.time_limit_s, 3723, "time limit %lld", (long long)rc->res.time_limit_s);
        T_EQ_INT(rc->res.ranks, 2, "time limit %lld", (long long)rc->res.time_limit_s);
        T_EQ_INT(strlen(rc->hash), 64, "hash");
        T_CHECK(!rc->stages[0].opt.ema_warmup, "ema_warmup defaults to off (the paper)");
        T_EQ_INT(rc->res.zero1, 0, "resources.zero1 defaults to off (the all-reduce)");
        runconfig_opts d = runconfig_opts_default(RC_KIND_AR);
        T_CLOSE(rc->stages[1].opt.beta2, d.beta2, 0, "unset beta2 is runconfig_opts_default's");
        T_CLOSE(rc->stages[1].opt.eps, d.eps, 0, "unset eps is runconfig_opts_default's");
        T_EQ_INT(rc->stages[1].opt.seed, d.seed, "unset seed is runconfig_opts_default's");
        T_EQ_INT(rc->stages[1].opt.checkpoint_every, d.checkpoint_every,
                 "unset checkpoint_every is runconfig_opts_default's");
        T_EQ_INT(rc->model.mask_id, -1, "model.mask_id defaults to automatic");
        T_EQ_INT(runconfig_mask_id(&rc->model, 99), 99,
                 "automatic mask: the id past the data's 99");
        T_EQ_INT(runconfig_mask_id(&rc->model, 100), -1,
                 "automatic mask: none when vocab = data's");
        runconfig_free(rc);
    }
    char *over[] = {"defaults.batch=16", "stages.0.steps=3"};
    T_EQ_INT(load_with(NULL, NULL, 2, over, &rc, &err), 0, "overrides: %s", err.msg);
    if (rc) {
        T_EQ_INT(rc->stages[1].opt.batch, 16, "override values");
        T_EQ_INT(rc->stages[0].steps, 3, "override values");
        runconfig_free(rc);
    }
    char *ema_over[] = {"defaults.ema_warmup=true", "stages.1.ema_warmup=false"};
    T_EQ_INT(load_with(NULL, NULL, 2, ema_over, &rc, &err), 0, "ema_warmup overrides: %s", err.msg);
    if (rc) {
        T_EQ_INT(rc->stages[0].opt.ema_warmup, 1, "ema_warmup: true from defaults");
        T_EQ_INT(rc->stages[1].opt.ema_warmup, 0, "ema_warmup: a stage turns it off");
        runconfig_free(rc);
    }
    expect_error("batch: 8", "batch: 8\n  ema_warmup: sometimes", "defaults.ema_warmup");
    char *zero_over[] = {"resources.zero1=true"};
    T_EQ_INT(load_with(NULL, NULL, 1, zero_over, &rc, &err), 0, "zero1 override: %s", err.msg);
    if (rc) {
        T_EQ_INT(rc->res.zero1, 1, "resources.zero1=true");
        runconfig_free(rc);
    }
    char *mask_over[] = {"model.mask_id=7"};
    T_EQ_INT(load_with(NULL, NULL, 1, mask_over, &rc, &err), 0, "model.mask_id: %s", err.msg);
    if (rc) {
        T_EQ_INT(runconfig_mask_id(&rc->model, 100), 7, "explicit mask id: got %lld want 7",
                 (long long)runconfig_mask_id(&rc->model, 100));
        runconfig_free(rc);
    }
    expect_error("seq_len: 32}", "seq_len: 32, mask_id: 100}", "model.mask_id");
    char *cos_over[] = {"stages.1.lr_decay=cosine", "stages.1.lr_min=1.0e-4"};
    T_EQ_INT(load_with(NULL, NULL, 2, cos_over, &rc, &err), 0, "lr_decay override: %s", err.msg);
    if (rc) {
        const runconfig_opts *o = &rc->stages[1].opt;
        T_EQ_INT(o->lr_cosine, 1,
                 "lr_decay: cosine on stage 1 only: got %d, %d "
                 "want 1, 0",
                 o->lr_cosine, rc->stages[0].opt.lr_cosine);
        T_CHECK(!rc->stages[0].opt.lr_cosine,
                "lr_decay: cosine on stage 1 only: got %d, %d "
                "want 1, 0",
                o->lr_cosine, rc->stages[0].opt.lr_cosine);
        T_CLOSE(o->lr_min, 1e-4, 0, "lr_min");
        T_EQ_INT(o->decay_steps, 4, "decay_steps: got %lld want the stage's 4 steps",
                 (long long)o->decay_steps);
        runconfig_free(rc);
    }
    /* self_forcing's own defaults: below `defaults:` and the stage, above the
     * built-in ones; its cosine ends at a tenth of the lr it resolved to */
    T_EQ_INT(load_with("  lr: 1.0e-3\n", "", 0, NULL, &rc, &err), 0, "no defaults.lr: %s", err.msg);
    if (rc) {
        const runconfig_opts *sf = &rc->stages[2].opt, *d = &rc->stages[1].opt;
        T_NEAR(sf->lr, 1e-2, 0, "self_forcing lr got %g want its kind's 1e-2", sf->lr);
        T_CHECK(sf->lr_cosine, "self_forcing decays by a cosine by default");
        T_NEAR(sf->lr_min, 1e-3, 1e-18, "self_forcing lr_min got %g want 1e-3", sf->lr_min);
        T_NEAR(sf->ema, 0.95, 0, "self_forcing ema got %g want 0.95", sf->ema);
        T_EQ_INT(sf->warmup, 10, "self_forcing warmup got %lld want 10", (long long)sf->warmup);
        T_NEAR(sf->new_weight, 4.0, 0, "self_forcing new_weight got %g want 4", sf->new_weight);
        T_EQ_INT(sf->batch, 8, "defaults.batch reaches self_forcing: got %lld",
                 (long long)sf->batch);
        T_NEAR(d->lr, 1e-4, 0, "distill_ar keeps the built-in lr: got %g", d->lr);
        T_CHECK(!d->lr_cosine, "distill_ar keeps the built-in constant rate");
        T_NEAR(d->ema, 0.999, 0, "distill_ar keeps the built-in ema: got %g", d->ema);
        runconfig_free(rc);
    }
    T_EQ_INT(load_with(NULL, NULL, 0, NULL, &rc, &err), 0, "valid config: %s", err.msg);
    if (rc) {
        const runconfig_opts *sf = &rc->stages[2].opt;
        T_NEAR(sf->lr, 1e-3, 0, "defaults.lr overrides self_forcing's: got %g", sf->lr);
        T_NEAR(sf->lr_min, 1e-4, 1e-18, "lr_min follows defaults.lr: got %g want 1e-4", sf->lr_min);
        runconfig_free(rc);
    }
    char *sf_over[] = {"stages.2.lr_decay=none", "stages.2.ema=0.5", "defaults.lr_min=2e-5"};
    T_EQ_INT(load_with(NULL, NULL, 3, sf_over, &rc, &err), 0, "self_forcing overrides: %s",
             err.msg);
    if (rc) {
        const runconfig_opts *sf = &rc->stages[2].opt;
        T_CHECK(!sf->lr_cosine, "the stage's lr_decay: none overrides the kind's cosine");
        T_NEAR(sf->ema, 0.5, 0, "the stage's ema overrides the kind's: got %g", sf->ema);
        T_NEAR(sf->lr_min, 2e-5, 0, "defaults.lr_min overrides a tenth of lr: got %g", sf->lr_min);
        runconfig_free(rc);
    }
    char *recipe_over[] = {"stages.2.new_weight=2.5", "stages.2.tau_curriculum=40",
                           "stages.2.teacher_precision=bf16"};
    T_EQ_INT(load_with(NULL, NULL, 3, recipe_over, &rc, &err), 0, "recipe overrides: %s", err.msg);
    if (rc) {
        const runconfig_opts *o = &rc->stages[2].opt;
        T_CLOSE(o->new_weight, 2.5, 0, "new_weight of stage 2");
        T_CLOSE(rc->stages[1].opt.new_weight, 1.0, 0, "new_weight defaults to 1");
        T_EQ_INT(o->tau_curriculum, 40, "tau_curriculum set");
        T_EQ_INT(rc->stages[1].opt.tau_curriculum, 0, "tau_curriculum off by default");
        T_EQ_INT(o->teacher_precision, RC_PREC_BF16, "teacher_precision of stage 2");
        T_EQ_INT(rc->stages[1].opt.teacher_precision, RC_PREC_FP32,
                 "teacher_precision defaults to fp32");
        T_EQ_INT(rc->stages[1].opt.teacher_follow, 0,
                 "teacher_precision: follow is not the default");
        runconfig_free(rc);
    }
    char *follow_over[] = {"defaults.teacher_precision=follow", "stages.2.teacher_precision=bf16"};
    T_EQ_INT(load_with(NULL, NULL, 2, follow_over, &rc, &err), 0, "follow: %s", err.msg);
    if (rc) {
        T_EQ_INT(rc->stages[1].opt.teacher_follow, 1, "follow under defaults reaches stage 1");
        T_EQ_INT(rc->stages[2].opt.teacher_follow, 0, "stage 2's own bf16 replaces follow");
        T_EQ_INT(rc->stages[2].opt.teacher_precision, RC_PREC_BF16, "stage 2's teacher_precision");
        runconfig_free(rc);
    }
    expect_error("batch: 8\n", "batch: 8\n  new_weight: 0\n", "defaults.new_weight");
    expect_error("batch: 8\n", "batch: 8\n  tau_curriculum: -1\n", "defaults.tau_curriculum");
    /* noise_warmup: a PFLM stage's; under defaults the AR stage ignores it */
    char *warm_over[] = {"defaults.noise_warmup=7", "stages.2.noise_warmup=3"};
    T_EQ_INT(load_with(NULL, NULL, 2, warm_over, &rc, &err), 0, "noise_warmup: %s", err.msg);
    if (rc) {
        T_EQ_INT(rc->stages[0].opt.noise_warmup, 0,
                 "noise_warmup under defaults skips the AR stage");
        T_EQ_INT(rc->stages[1].opt.noise_warmup, 7, "noise_warmup from defaults");
        T_EQ_INT(rc->stages[2].opt.noise_warmup, 3, "the stage's noise_warmup");
        runconfig_free(rc);
    }
    T_EQ_INT(load_with(NULL, NULL, 0, NULL, &rc, &err), 0, "valid config: %s", err.msg);
    if (rc) {
        T_EQ_INT(rc->stages[1].opt.noise_warmup, 0, "noise_warmup off by default");
        T_EQ_INT(rc->model.noise_cycles, 64, "model.noise_cycles: the family's 64 by default");
        runconfig_free(rc);
    }
    expect_error("steps: 10, lr: 2.0e-3", "steps: 10, noise_warmup: 5, lr: 2.0e-3",
                 "noise_warmup trains a PFLM's noise encoder");
    expect_error("steps: 4, tau", "steps: 4, noise_warmup: 2, weight_decay: 0.1, tau",
                 "weight_decay 0");
    expect_error("seq_len: 32}", "seq_len: 32, noise_cycles: -2}", "model.noise_cycles");
    char *cyc_over[] = {"model.noise_cycles=256"};
    T_EQ_INT(load_with(NULL, NULL, 1, cyc_over, &rc, &err), 0, "noise_cycles: %s", err.msg);
    if (rc) T_EQ_INT(rc->model.noise_cycles, 256, "model.noise_cycles read");
    runconfig_free(rc);
    char *cyc_release[] = {"model.noise_cycles=0"};
    T_EQ_INT(load_with(NULL, NULL, 1, cyc_release, &rc, &err), 0, "noise_cycles 0: %s", err.msg);
    if (rc) T_EQ_INT(rc->model.noise_cycles, 0, "model.noise_cycles 0 (the release's) read");
    runconfig_free(rc);
    expect_error("batch: 8\n", "batch: 8\n  teacher_precision: fp8\n",
                 "'defaults.teacher_precision': expected fp32, bf16, fp16 or follow, got 'fp8'");
    char *bad_over[] = {"defaults.bach=16"};
    T_EQ_INT(load_with(NULL, NULL, 1, bad_over, &rc, &err), -1, "unknown override key: %s",
             err.msg);
    T_CHECK(strstr(err.msg, "defaults.bach"), "unknown override key: %s", err.msg);

    expect_error("steps: 10, lr", "steps: 10, tau: [0.5, 1.0], lr", "do not sample with tau");
    /* mdlm: trains from the data alone, k 1, no tau, and teaches no PFLM */
    T_EQ_INT(load_with("kind: ar,", "kind: mdlm,", 0, NULL, &rc, &err), -1,
             "a distill_ar stage with an mdlm teacher must fail: %s", err.msg);
    T_CHECK(strstr(err.msg, "needs an AR teacher"), "mdlm teacher refused: %s", err.msg);
    runconfig_free(rc);
    expect_error("  - {name: k1", "  - {name: d, kind: mdlm, teacher: ar, steps: 4}\n  - {name: k1",
                 "kind mdlm takes no teacher");
    expect_error("  - {name: k1", "  - {name: d, kind: mdlm, k: 2, steps: 4}\n  - {name: k1",
                 "an mdlm stage has k: 1");
    expect_error("  - {name: k1",
                 "  - {name: d, kind: mdlm, tau: [0.5, 1.0], steps: 4}\n  - {name: k1",
                 "do not sample with tau");
    T_EQ_INT(load_with("  - {name: k1", "  - {name: d, kind: mdlm, steps: 4}\n  - {name: k1", 0,
                       NULL, &rc, &err),
             0, "an mdlm stage: %s", err.msg);
    if (rc) {
        T_EQ_STR(runconfig_kind_name(rc->stages[1].kind), "mdlm", "mdlm kind name");
        T_EQ_INT(rc->stages[1].k, 1, "mdlm k");
    }
    runconfig_free(rc);
    expect_error("seq_len: 32}", "seq_len: 32, hiden: 3}", "model.hiden");
    expect_error("batch: 8", "batch: eight", "defaults.batch");
    expect_error("batch: 8", "batch: 0", "defaults.batch");
    expect_error("batch: 8\n", "batch: 8\n  lr_decay: linear\n", "expected none or cosine");
    expect_error("kind: ar,", "kind: arr,", "unknown kind");
    /* medusa: k heads on the frozen AR teacher, which is also its model */
    {
        const char *md = "{name: k2, kind: self_forcing, teacher: k1, k: 2, steps: 4}\n"
                         "  - {name: md, kind: medusa, teacher: ar, k: 4, steps: 4}";
        T_EQ_INT(load_with("{name: k2, kind: self_forcing, teacher: k1, k: 2, steps: 4}", md, 0,
                           NULL, &rc, &err),
                 0, "a medusa stage: %s", err.msg);
        if (rc) {
            T_EQ_INT(rc->stages[3].kind, RC_KIND_MEDUSA, "medusa kind");
            T_EQ_INT(rc->stages[3].init_stage, 0, "medusa's model is its teacher's");
            T_EQ_STR(runconfig_kind_name(rc->stages[3].kind), "medusa", "medusa's name");
            runconfig_free(rc);
        }
    }
    expect_error("{name: k1, kind: distill_ar, teacher: ar, k: 1,",
                 "{name: k1, kind: medusa, teacher: ar, init: ar, k: 1,", "no init");
    expect_error("{name: k1, kind: distill_ar, teacher: ar, k: 1,",
                 "{name: k1, kind: medusa, teacher: ar, weight_decay: 0.1, k: 1,",
                 "weight_decay 0");
    expect_error("{name: k2, kind: self_forcing, teacher: k1, k: 2,",
                 "{name: k2, kind: medusa, teacher: k1, k: 2,", "ar (or import) stage");
    expect_error("{name: k1, kind: distill_ar, teacher: ar, k: 1,",
                 "{name: k1, kind: medusa, teacher: ar, k: 1,", "do not sample with tau");
    expect_error("teacher: ar,", "teacher: k2,", "not an earlier stage");
    expect_error("teacher: k1, k: 2", "teacher: k1, k: 3", "doubles k");
    expect_error("{mode: fp32}", "{mode: fp8}", "expected fp32, fp16 or bf16, got 'fp8'");
    expect_error("{mode: fp32}]", "{until_step: 9, mode: fp32}]", "leave out until_step");
    { /* bf16, the paper's AR-teacher precision, as a stage's own schedule */
        runconfig *rc;
        kf_err err;
        int r = load_with("steps: 10, lr: 2.0e-3}", "steps: 10, precision: [{mode: bf16}]}", 0,
                          NULL, &rc, &err);
        T_EQ_INT(r, 0, "precision bf16: %s", err.msg);
        if (!r) {
            T_EQ_INT(runconfig_precision_at(&rc->stages[0].opt, 0), RC_PREC_BF16, "ar: bf16");
            T_EQ_INT(runconfig_precision_at(&rc->stages[0].opt, 9), RC_PREC_BF16, "ar: bf16");
            T_EQ_INT(runconfig_precision_at(&rc->stages[1].opt, 0), RC_PREC_FP16, "k1: defaults");
        }
        runconfig_free(rc);
        for (int p = RC_PREC_FP32; p <= RC_PREC_BF16; p++)
            T_EQ_INT(runconfig_prec_parse(runconfig_prec_name((runconfig_prec)p)), p,
                     "precision name '%s' parses back", runconfig_prec_name((runconfig_prec)p));
        T_EQ_INT(runconfig_prec_parse("half"), -1, "unknown precision name");
    }
    expect_error("until_step: 5", "until_step: 0", "must increase");
    expect_error("time_limit: \"01:02:03\"", "time_limit: \"1:xx\"", "time_limit");
    static const struct {
        const char *text;
        long long want; /* seconds; -1: refused */
    } limits[] = {
        {"90", 5400},
        {"1:30", 90},
        {"1-2", 93600},
        {"1-2:03", 93780},
        {"2-00:00:05", 172805},
        {"99999999", 5999999940},
        {"", -1},
        {"-5", -1},
        {"+5", -1},
        {" 5", -1},
        {"5-", -1},
        {"1:2:3:4", -1},
        {"1::2", -1},
        {"5:", -1},
        {"1-2-3", -1},
        /* fuzz_rundir's finding: 24 * days overflowed */
        {"9223372036854775807-0", -1},
        {"123456789", -1},
    };
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        char repl[64];
        snprintf(repl, sizeof repl, "time_limit: \"%s\"", limits[i].text);
        int r = load_with("time_limit: \"01:02:03\"", repl, 0, NULL, &rc, &err);
        long long got = r ? -1 : (long long)rc->res.time_limit_s;
        T_EQ_INT(got, limits[i].want, "time_limit '%s' (-1: refused): %s", limits[i].text, err.msg);
        runconfig_free(rc);
    }
    expect_error("name: t\n", "", "name");
    /* runs/NAME: one path component of safe characters */
    const char *bad_names[] = {"../../esc", "..", ".", "a/b", "\"\"", "-x", ".hidden", "a b"};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        char repl[64];
        snprintf(repl, sizeof repl, "name: %s\n", bad_names[i]);
        expect_error("name: t\n", repl, "is not a run name");
    }
    T_EQ_INT(load_with("name: t\n", "name: run_2.b-C\n", 0, NULL, &rc, &err), 0,
             "name run_2.b-C: %s", err.msg);
    runconfig_free(rc);
    return T_DONE();
}
