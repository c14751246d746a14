/* common/runconfig.c — loading and strictly validating a run config
 * (schema in runconfig.h). Every value is read through common/config.h, so
 * each error names FILE:LINE:COL and the key's path, and cfg_check_unused
 * catches unknown keys anywhere except under `shards:` (read by
 * `kf shards build`). */
#include "common/runconfig.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

static const char *const kind_names[] = {
    [RC_KIND_AR] = "ar",
    [RC_KIND_IMPORT] = "import",
    [RC_KIND_DISTILL_AR] = "distill_ar",
    [RC_KIND_SELF_FORCING] = "self_forcing",
    [RC_KIND_NI_MTP] = "noise_inversion_mtp",
    [RC_KIND_NI_CAUSAL] = "noise_inversion_causal",
    [RC_KIND_MDLM] = "mdlm",
    [RC_KIND_MEDUSA] = "medusa",
};

const char *runconfig_kind_name(runconfig_kind k) { return kind_names[k]; }

static const char *const prec_names[] = {
    [RC_PREC_FP32] = "fp32", [RC_PREC_FP16] = "fp16", [RC_PREC_BF16] = "bf16"};

const char *runconfig_prec_name(runconfig_prec p) { return prec_names[p]; }

int runconfig_prec_parse(const char *name) {
    for (int i = 0; i < (int)(sizeof prec_names / sizeof *prec_names); i++)
        if (!strcmp(name, prec_names[i])) return i;
    return -1;
}

runconfig_prec runconfig_precision_at(const runconfig_opts *o, int64_t step) {
    for (int i = 0; i < o->n_phases; i++)
        if (o->phases[i].until_step < 0 || step < o->phases[i].until_step) return o->phases[i].mode;
    return RC_PREC_FP32;
}

static const runconfig_opts builtin_defaults = {
    .batch = 32,
    .micro_batch = 0,
    .lr = 1e-4,
    .warmup = 0,
    .beta1 = 0.9,
    .beta2 = 0.999,
    .eps = 1e-6,
    .weight_decay = 0.0,
    .ema = 0.999,
    .clip = 1.0,
    .seed = 1234,
    .new_weight = 1.0,
    .checkpoint_every = 100,
    .keep_checkpoints = 3,
    .log_every = 10,
    .eval_every = 0,
    .eval_batches = 4,
    .n_phases = 1,
    .phases = {{-1, RC_PREC_FP32}},
    .scale_init = 65536.0,
    .scale_growth_interval = 2000,
    .scale_growth = 2.0,
    .scale_backoff = 0.5,
};

/* Self-forcing starts from a teacher already right on its k/2 inherited
 * positions; the k/2 new ones must move far (from independent positions to
 * the joint), which the rate that suits forward distillation does slowly,
 * and with equal weights their loss is drowned by the inherited ones'.
 * The recipe (docs/convergence.md, chosen on tools/synth_lang.py's family
 * of random languages): a high rate decayed by a cosine, an EMA short enough
 * for stages of a few hundred steps, and the new positions' loss weighted 4.
 * `defaults:` and the stage override each key, as for every kind. */
static runconfig_opts kind_defaults(runconfig_kind kind) {
    runconfig_opts o = builtin_defaults;
    if (kind == RC_KIND_SELF_FORCING) {
        o.lr = 1e-2;
        o.warmup = 10;
        o.lr_cosine = 1;
        o.lr_min = 1e-3; /* unless set: lr / 10 (parse_stage) */
        o.ema = 0.95;
        o.new_weight = 4.0;
    }
    return o;
}

runconfig_opts runconfig_opts_default(runconfig_kind kind) { return kind_defaults(kind); }

/* Reads an integer at `key` under n (if present) into *v and checks v >= lo. */
static int opt_int_min(cfg_node *n, const char *key, int64_t *v, int64_t lo, kf_err *err) {
    if (cfg_opt_int(n, key, *v, v, err)) return -1;
    if (*v < lo) return cfg_err_at(cfg_find(n, key), err, "must be >= %lld", (long long)lo);
    return 0;
}

/* Reads a double at `key` under n (if present) into *v and checks lo <= v <= hi
 * (lo_open: strictly greater than lo). */
static int opt_dbl_range(cfg_node *n, const char *key, double *v, double lo, int lo_open, double hi,
                         kf_err *err) {
    if (cfg_opt_double(n, key, *v, v, err)) return -1;
    if (!(lo_open ? *v > lo : *v >= lo) || !(*v <= hi))
        return cfg_err_at(cfg_find(n, key), err, "must be in %s%g, %g]", lo_open ? "(" : "[", lo,
                          hi);
    return 0;
}

static int parse_precision(cfg_node *seq, runconfig_opts *o, kf_err *err) {
    if (seq->kind != CFG_SEQ || seq->n == 0)
        return cfg_err_at(seq, err, "expected a non-empty list of {until_step, mode}");
    if (seq->n > RUNCONFIG_MAX_PHASES)
        return cfg_err_at(seq, err, "at most %d phases", RUNCONFIG_MAX_PHASES);
    int64_t prev = 0;
    for (size_t i = 0; i < seq->n; i++) {
        cfg_node *ph = seq->items[i];
        if (ph->kind != CFG_MAP)
            return cfg_err_at(ph, err, "expected {until_step: N, mode: fp32|fp16|bf16}");
        const char *mode;
        int64_t until;
        if (cfg_get_str(ph, "mode", &mode, err) || cfg_opt_int(ph, "until_step", -1, &until, err))
            return -1;
        int prec = runconfig_prec_parse(mode);
        if (prec < 0)
            return cfg_err_at(cfg_find(ph, "mode"), err, "expected fp32, fp16 or bf16, got '%s'",
                              mode);
        o->phases[i].mode = (runconfig_prec)prec;
        int last = i + 1 == seq->n;
        if (last && until >= 0)
            return cfg_err_at(cfg_find(ph, "until_step"), err,
                              "the last phase runs to the end of the stage: leave out until_step");
        if (!last && (until < 0 || until <= prev))
            return cfg_err_at(ph, err, "until_step is required and must increase (> %lld)",
                              (long long)prev);
        o->phases[i].until_step = last ? -1 : until;
        prev = until;
    }
    o->n_phases = (int)seq->n;
    return 0;
}

/* Overlays the training options found in mapping n onto *o. */
static int parse_opts(cfg_node *n, runconfig_opts *o, kf_err *err) {
    int64_t seed = (int64_t)o->seed;
    if (opt_int_min(n, "batch", &o->batch, 1, err) ||
        opt_int_min(n, "micro_batch", &o->micro_batch, 0, err) ||
        opt_dbl_range(n, "lr", &o->lr, 0, 0, 10, err) ||
        opt_int_min(n, "warmup", &o->warmup, 0, err) ||
        opt_dbl_range(n, "lr_min", &o->lr_min, 0, 0, 10, err) ||
        opt_dbl_range(n, "beta1", &o->beta1, 0, 0, 0.999999, err) ||
        opt_dbl_range(n, "beta2", &o->beta2, 0, 0, 0.999999999, err) ||
        opt_dbl_range(n, "eps", &o->eps, 0, 1, 1, err) ||
        opt_dbl_range(n, "weight_decay", &o->weight_decay, 0, 0, 1, err) ||
        opt_dbl_range(n, "ema", &o->ema, 0, 0, 1, err) ||
        opt_dbl_range(n, "new_weight", &o->new_weight, 0, 1, 100, err) ||
        opt_int_min(n, "tau_curriculum", &o->tau_curriculum, 0, err) ||
        opt_int_min(n, "noise_warmup", &o->noise_warmup, 0, err) ||
        opt_dbl_range(n, "clip", &o->clip, -1, 0, 1e30, err) ||
        opt_int_min(n, "seed", &seed, 0, err) ||
        opt_int_min(n, "checkpoint_every", &o->checkpoint_every, 0, err) ||
        opt_int_min(n, "keep_checkpoints", &o->keep_checkpoints, 1, err) ||
        opt_int_min(n, "log_every", &o->log_every, 1, err) ||
        opt_int_min(n, "eval_every", &o->eval_every, 0, err) ||
        opt_int_min(n, "eval_batches", &o->eval_batches, 1, err))
        return -1;
    o->seed = (uint64_t)seed;
    bool ema_warmup;
    if (cfg_opt_bool(n, "ema_warmup", o->ema_warmup, &ema_warmup, err)) return -1;
    o->ema_warmup = ema_warmup;
    const char *ob;
    if (cfg_opt_str(n, "output_bias", o->unigram_bias ? "unigram" : "zero", &ob, err)) return -1;
    if (strcmp(ob, "zero") && strcmp(ob, "unigram"))
        return cfg_err_at(cfg_find(n, "output_bias"), err, "expected zero or unigram, got '%s'",
                          ob);
    o->unigram_bias = !strcmp(ob, "unigram");
    const char *decay;
    if (cfg_opt_str(n, "lr_decay", o->lr_cosine ? "cosine" : "none", &decay, err)) return -1;
    if (strcmp(decay, "none") && strcmp(decay, "cosine"))
        return cfg_err_at(cfg_find(n, "lr_decay"), err, "expected none or cosine, got '%s'", decay);
    o->lr_cosine = !strcmp(decay, "cosine");
    if (o->micro_batch > o->batch)
        return cfg_err_at(cfg_find(n, "micro_batch"), err, "must be <= batch (%lld)",
                          (long long)o->batch);
    cfg_node *p = cfg_find(n, "precision");
    if (p && parse_precision(p, o, err)) return -1;
    const char *tp;
    if (cfg_opt_str(n, "teacher_precision",
                    o->teacher_follow ? "follow" : runconfig_prec_name(o->teacher_precision), &tp,
                    err))
        return -1;
    int tprec = runconfig_prec_parse(tp);
    o->teacher_follow = !strcmp(tp, "follow");
    if (tprec < 0 && !o->teacher_follow)
        return cfg_err_at(cfg_find(n, "teacher_precision"), err,
                          "expected fp32, bf16, fp16 or follow, got '%s'", tp);
    o->teacher_precision = o->teacher_follow ? RC_PREC_FP32 : (runconfig_prec)tprec;
    cfg_node *ls = cfg_find(n, "loss_scale");
    if (ls) {
        if (ls->kind != CFG_MAP)
            return cfg_err_at(ls, err, "expected {init, growth_interval, growth, backoff}");
        if (opt_dbl_range(ls, "init", &o->scale_init, 0, 1, 1e30, err) ||
            opt_int_min(ls, "growth_interval", &o->scale_growth_interval, 1, err) ||
            opt_dbl_range(ls, "growth", &o->scale_growth, 1, 1, 1e6, err) ||
            opt_dbl_range(ls, "backoff", &o->scale_backoff, 0, 1, 0.999999, err))
            return -1;
    }
    return 0;
}

static int parse_kind(cfg_node *st, runconfig_kind *k, kf_err *err) {
    const char *s;
    if (cfg_get_str(st, "kind", &s, err)) return -1;
    for (size_t i = 0; i < sizeof kind_names / sizeof *kind_names; i++)
        if (!strcmp(s, kind_names[i])) return *k = (runconfig_kind)i, 0;
    return cfg_err_at(cfg_find(st, "kind"), err,
                      "unknown kind '%s' (ar, import, distill_ar, self_forcing, "
                      "noise_inversion_mtp, noise_inversion_causal, mdlm)",
                      s);
}

static int looks_like_path(const char *s) {
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 12 && !strcmp(s + n - 12, ".safetensors"));
}

/* Resolves a teacher/init reference: an earlier stage's name or a path.
 * all: the whole stages list, to tell a later stage from a typo. */
static int resolve_ref(runconfig *rc, int self, cfg_node *all, cfg_node *node, const char *s,
                       int *stage, kf_err *err) {
    *stage = -1;
    for (size_t j = (size_t)self; j < all->n; j++) {
        cfg_node *nm = all->items[j]->kind == CFG_MAP ? cfg_find(all->items[j], "name") : NULL;
        if (nm && nm->kind == CFG_SCALAR && !strcmp(nm->value, s))
            return cfg_err_at(node, err, "stage '%s' is not an earlier stage", s);
    }
    for (int j = 0; j < rc->n_stages; j++) {
        if (strcmp(rc->stages[j].name, s)) continue;
        if (rc->stages[j].kind == RC_KIND_NI_MTP)
            return cfg_err_at(node, err, "stage '%s' (MTP head) cannot teach", s);
        *stage = j;
        return 0;
    }
    if (!looks_like_path(s))
        return cfg_err_at(node, err,
                          "'%s' is neither an earlier stage nor a checkpoint path "
                          "(a path contains '/' or ends in .safetensors)",
                          s);
    return 0;
}

static int parse_stage(runconfig *rc, int i, cfg_node *all, cfg_node *defaults, kf_err *err) {
    cfg_node *st = all->items[i];
    runconfig_stage *s = &rc->stages[i];
    if (st->kind != CFG_MAP) return cfg_err_at(st, err, "expected a mapping {name, kind, ...}");
    const char *name, *teacher, *init, *path;
    if (cfg_get_str(st, "name", &name, err) || parse_kind(st, &s->kind, err)) return -1;
    if (!*name ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            strlen(name))
        return cfg_err_at(cfg_find(st, "name"), err, "stage names use [A-Za-z0-9_-] only");
    for (int j = 0; j < i; j++)
        if (!strcmp(rc->stages[j].name, name))
            return cfg_err_at(cfg_find(st, "name"), err, "duplicate stage name '%s'", name);
    s->name = kf_strdup(name);

    s->opt = kind_defaults(s->kind);
    if (defaults && parse_opts(defaults, &s->opt, err)) return -1;
    if (parse_opts(st, &s->opt, err)) return -1;
    /* the cosine of self_forcing's defaults ends a decade below whatever lr
     * resolved to (a paper-scale `defaults: lr` must not decay upwards) */
    if (s->kind == RC_KIND_SELF_FORCING && !cfg_find(st, "lr_min") &&
        !(defaults && cfg_find(defaults, "lr_min")))
        s->opt.lr_min = s->opt.lr / 10;

    int trains = s->kind != RC_KIND_IMPORT;
    int from_data = s->kind == RC_KIND_AR || s->kind == RC_KIND_MDLM; /* no teacher, k 1 */
    int needs_teacher = !from_data && s->kind != RC_KIND_IMPORT;
    if (cfg_opt_str(st, "teacher", NULL, &teacher, err) ||
        cfg_opt_str(st, "init", NULL, &init, err) || cfg_opt_str(st, "path", NULL, &path, err))
        return -1;
    s->steps = 0;
    if (trains) {
        if (cfg_get_int(st, "steps", &s->steps, err)) return -1;
        if (s->steps < 1) return cfg_err_at(cfg_find(st, "steps"), err, "must be >= 1");
        s->opt.decay_steps = s->steps;
    } else if (cfg_find(st, "steps")) {
        return cfg_err_at(cfg_find(st, "steps"), err, "an import stage does not train");
    }
    if (s->kind == RC_KIND_IMPORT) {
        if (!path) return cfg_err_at(st, err, "missing required key '%s.path'", st->path);
        s->path = kf_strdup(path);
    } else if (path) {
        return cfg_err_at(cfg_find(st, "path"), err, "only import stages take a path");
    }
    if (needs_teacher && !teacher)
        return cfg_err_at(st, err, "missing required key '%s.teacher' (kind %s needs one)",
                          st->path, kind_names[s->kind]);
    if (!needs_teacher && teacher)
        return cfg_err_at(cfg_find(st, "teacher"), err, "kind %s takes no teacher",
                          kind_names[s->kind]);
    s->teacher_stage = s->init_stage = -1;
    if (teacher) {
        if (resolve_ref(rc, i, all, cfg_find(st, "teacher"), teacher, &s->teacher_stage, err))
            return -1;
        s->teacher = kf_strdup(teacher);
    }
    if (init) {
        if (!trains) return cfg_err_at(cfg_find(st, "init"), err, "an import stage does not train");
        if (resolve_ref(rc, i, all, cfg_find(st, "init"), init, &s->init_stage, err)) return -1;
        s->init = kf_strdup(init);
    } else if (s->kind == RC_KIND_SELF_FORCING || s->kind == RC_KIND_MEDUSA) {
        s->init = kf_strdup(teacher);
        s->init_stage = s->teacher_stage;
    }
    if (s->opt.noise_warmup) {
        cfg_node *nw = cfg_find(st, "noise_warmup");
        int pflm = s->kind == RC_KIND_DISTILL_AR || s->kind == RC_KIND_SELF_FORCING ||
                   s->kind == RC_KIND_NI_CAUSAL;
        if (!pflm && nw)
            return cfg_err_at(nw, err,
                              "noise_warmup trains a PFLM's noise encoder alone: a distill_ar, "
                              "self_forcing or noise_inversion_causal stage's");
        if (!pflm) s->opt.noise_warmup = 0; /* from defaults: the other kinds have no encoder */
        else if (s->opt.weight_decay != 0)
            return cfg_err_at(nw ? nw : st, err,
                              "noise_warmup holds every weight but the noise encoder's: "
                              "weight_decay 0");
    }
    if (s->kind == RC_KIND_MEDUSA) {
        if (init)
            return cfg_err_at(cfg_find(st, "init"), err,
                              "a medusa stage's model is its teacher's (no init)");
        if (s->opt.weight_decay != 0)
            return cfg_err_at(cfg_find(st, "weight_decay") ? cfg_find(st, "weight_decay") : st, err,
                              "a medusa stage keeps its AR backbone frozen: weight_decay 0");
        if (s->teacher_stage >= 0 && rc->stages[s->teacher_stage].kind != RC_KIND_AR &&
            rc->stages[s->teacher_stage].kind != RC_KIND_IMPORT)
            return cfg_err_at(cfg_find(st, "teacher"), err,
                              "a medusa stage's teacher is an ar (or import) stage");
    }

    if (cfg_opt_int(st, "k", from_data, &s->k, err)) return -1;
    if (from_data && s->k != 1)
        return cfg_err_at(cfg_find(st, "k"), err, "an %s stage has k: 1", kind_names[s->kind]);
    if (needs_teacher && (s->k < 1 || s->k > 64))
        return cfg_err_at(cfg_find(st, "k") ? cfg_find(st, "k") : st, err, "k is required, 1..64");
    if (s->kind == RC_KIND_SELF_FORCING && s->teacher_stage >= 0) {
        const runconfig_stage *t = &rc->stages[s->teacher_stage];
        if (t->kind == RC_KIND_AR || t->kind == RC_KIND_IMPORT || t->kind == RC_KIND_MDLM)
            return cfg_err_at(
                cfg_find(st, "teacher"), err,
                "self_forcing needs a PFLM teacher (distill_ar or self_forcing stage)");
        if (s->k != 2 * t->k)
            return cfg_err_at(cfg_find(st, "k"), err,
                              "self_forcing doubles k: teacher '%s' has k=%lld, so k must be %lld",
                              t->name, (long long)t->k, (long long)(2 * t->k));
    }
    if (s->kind == RC_KIND_DISTILL_AR && s->teacher_stage >= 0) {
        runconfig_kind tk = rc->stages[s->teacher_stage].kind;
        if (tk != RC_KIND_AR && tk != RC_KIND_IMPORT)
            return cfg_err_at(cfg_find(st, "teacher"), err,
                              "distill_ar needs an AR teacher (ar or import stage)");
    }

    /* Self-forcing passes the same sampled tau to its tau-conditioned teacher and
     * the student (paper, Algorithm 2), so by default it keeps its teacher's range. */
    s->tau_min = s->tau_max = 1.0;
    if (s->kind == RC_KIND_SELF_FORCING && s->teacher_stage >= 0) {
        s->tau_min = rc->stages[s->teacher_stage].tau_min;
        s->tau_max = rc->stages[s->teacher_stage].tau_max;
    }
    cfg_node *tau = cfg_find(st, "tau");
    if (tau) {
        if (from_data || s->kind == RC_KIND_IMPORT || s->kind == RC_KIND_MEDUSA)
            return cfg_err_at(tau, err,
                              "ar, mdlm, import and medusa stages do not sample with tau");
        if (tau->kind != CFG_SEQ || tau->n != 2)
            return cfg_err_at(tau, err, "expected [tau_min, tau_max]");
        if (cfg_as_double(tau->items[0], &s->tau_min, err) ||
            cfg_as_double(tau->items[1], &s->tau_max, err))
            return -1;
        if (!(s->tau_min > 0 && s->tau_min <= s->tau_max && s->tau_max <= 10))
            return cfg_err_at(tau, err, "need 0 < tau_min <= tau_max <= 10");
    }
    return 0;
}

/* One field of a Slurm time: 1 to 8 digits, so that no form can overflow the seconds count
 * (99999999 days is 8.6e12 s). Returns the value and advances *p, or -1. */
static int64_t time_field(const char **p) {
    int64_t v = 0;
    int n = 0;
    for (; **p >= '0' && **p <= '9'; (*p)++, n++) {
        if (n == 8) return -1;
        v = v * 10 + (**p - '0');
    }
    return n ? v : -1;
}

/* "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS" (Slurm's forms). */
static int64_t parse_time_limit(const char *s) {
    int64_t days = 0, f[3];
    int nf = 0;
    const char *p = s;
    int dash = strchr(s, '-') != NULL;
    if (dash && ((days = time_field(&p)) < 0 || *p++ != '-')) return -1;
    for (;;) {
        if (nf == 3 || (f[nf++] = time_field(&p)) < 0) return -1;
        if (!*p) break;
        if (*p++ != ':') return -1;
    }
    if (dash) { /* D-HH[:MM[:SS]] */
        int64_t h = f[0], m = nf > 1 ? f[1] : 0, sec = nf > 2 ? f[2] : 0;
        return ((days * 24 + h) * 60 + m) * 60 + sec;
    }
    if (nf == 1) return f[0] * 60;
    if (nf == 2) return f[0] * 60 + f[1];
    return (f[0] * 60 + f[1]) * 60 + f[2];
}

static int parse_resources(runconfig *rc, cfg_node *root, kf_err *err) {
    runconfig_resources *r = &rc->res;
    r->ranks = 1, r->nodes = 1, r->gpus_per_node = 0, r->signal_lead = 120;
    r->collective_timeout = 120;
    r->bucket_mb = 25; /* PyTorch DDP's default */
    const char *tl, *backend, *part;
    cfg_node *n = cfg_find(root, "resources");
    if (n && n->kind != CFG_MAP) return cfg_err_at(n, err, "expected a mapping");
    if (!n) n = root; /* absent: every key below takes its default */
    const char *pre = n == root ? "resources." : "";
    char k[64];
#define RK(name) (snprintf(k, sizeof k, "%s%s", pre, name), k)
    if (opt_int_min(n, RK("ranks"), &r->ranks, 1, err) ||
        opt_int_min(n, RK("nodes"), &r->nodes, 1, err) ||
        opt_int_min(n, RK("gpus_per_node"), &r->gpus_per_node, 0, err) ||
        opt_int_min(n, RK("signal_lead"), &r->signal_lead, 0, err) ||
        opt_int_min(n, RK("collective_timeout"), &r->collective_timeout, 1, err) ||
        opt_dbl_range(n, RK("bucket_mb"), &r->bucket_mb, 0, 0, 1e6, err) ||
        cfg_opt_str(n, RK("time_limit"), "01:00:00", &tl, err) ||
        cfg_opt_str(n, RK("backend"), "auto", &backend, err) ||
        cfg_opt_str(n, RK("partition"), "", &part, err))
        return -1;
    bool zero1;
    if (cfg_opt_bool(n, RK("zero1"), false, &zero1, err)) return -1;
    r->zero1 = zero1;
    if (r->nodes > r->ranks)
        return cfg_err_at(cfg_find(n, RK("nodes")), err, "more nodes (%lld) than ranks (%lld)",
                          (long long)r->nodes, (long long)r->ranks);
    r->time_limit_s = parse_time_limit(tl);
    if (r->time_limit_s <= 0)
        return cfg_err_at(cfg_find(n, RK("time_limit")), err,
                          "expected a Slurm time like \"HH:MM:SS\" or \"D-HH:MM:SS\", got '%s'",
                          tl);
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto"))
        return cfg_err_at(cfg_find(n, RK("backend")), err, "expected cpu, cuda or auto, got '%s'",
                          backend);
#undef RK
    r->time_limit = kf_strdup(tl);
    r->backend = kf_strdup(backend);
    r->partition = kf_strdup(part);
    return 0;
}

/* A name usable as one path component (and a Slurm job name). */
static bool name_is_component(const char *s) {
    if (!*s || *s == '.' || *s == '-' || strlen(s) > 128) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-", *s)) return false;
    return true;
}

static int parse_root(runconfig *rc, cfg_node *root, kf_err *err) {
    const char *name, *train, *valid;
    if (cfg_get_str(root, "name", &name, err) || cfg_get_str(root, "data.train", &train, err) ||
        cfg_get_str(root, "data.valid", &valid, err))
        return -1;
    /* runs/NAME: one path component, so a run cannot write outside runs/ */
    if (!name_is_component(name))
        return cfg_err_at(cfg_find(root, "name"), err,
                          "'%s' is not a run name: letters, digits, '.', '_' and '-' only, not "
                          "starting with '.' or '-' (it names the directory runs/NAME)",
                          name);
    rc->name = kf_strdup(name);
    rc->data_train = kf_strdup(train);
    rc->data_valid = kf_strdup(valid);
    cfg_node *sh = cfg_find(root, "shards");
    if (sh) cfg_mark_used(sh, true);

    runconfig_model *m = &rc->model;
    if (cfg_get_int(root, "model.hidden", &m->hidden, err) ||
        cfg_get_int(root, "model.heads", &m->heads, err) ||
        cfg_get_int(root, "model.blocks", &m->blocks, err) ||
        cfg_get_int(root, "model.vocab", &m->vocab, err) ||
        cfg_get_int(root, "model.seq_len", &m->seq_len, err) ||
        cfg_opt_int(root, "model.mask_id", -1, &m->mask_id, err) ||
        cfg_opt_int(root, "model.noise_cycles", RUNCONFIG_NOISE_CYCLES, &m->noise_cycles, err))
        return -1;
    if (m->heads < 1 || m->hidden < 2 || m->hidden % m->heads || (m->hidden / m->heads) % 2) {
        /* two keys at fault: blame the one an override set, if one did */
        cfg_node *hidden = cfg_find(root, "model.hidden"), *heads = cfg_find(root, "model.heads");
        return cfg_err_at(heads->file ? hidden : heads, err,
                          "hidden (%lld) must be a positive multiple of heads (%lld) with an even "
                          "head size",
                          (long long)m->hidden, (long long)m->heads);
    }
    if (m->blocks < 1) return cfg_err_at(cfg_find(root, "model.blocks"), err, "must be >= 1");
    if (m->vocab < 2 || m->vocab > (1 << 30))
        return cfg_err_at(cfg_find(root, "model.vocab"), err, "must be in [2, 2^30]");
    if (m->seq_len < 2 || m->seq_len > (1 << 20))
        return cfg_err_at(cfg_find(root, "model.seq_len"), err, "must be in [2, 2^20]");
    if (m->noise_cycles < 0) /* its maximum: model_config_check's */
        return cfg_err_at(cfg_find(root, "model.noise_cycles"), err, "must be >= 0");
    if (m->mask_id < -1 || m->mask_id >= m->vocab)
        return cfg_err_at(cfg_find(root, "model.mask_id"), err,
                          "must be in [0, vocab) (or -1: automatic)");

    cfg_node *defaults = cfg_find(root, "defaults");
    if (defaults && defaults->kind != CFG_MAP)
        return cfg_err_at(defaults, err, "expected a mapping of training options");
    if (defaults) { /* validated once on its own, so its errors point at defaults */
        runconfig_opts probe = builtin_defaults;
        if (parse_opts(defaults, &probe, err)) return -1;
    }
    cfg_node *stages;
    if (cfg_get_node(root, "stages", CFG_SEQ, &stages, err)) return -1;
    if (stages->n == 0) return cfg_err_at(stages, err, "at least one stage is needed");
    rc->stages = kf_calloc(stages->n, sizeof *rc->stages);
    for (size_t i = 0; i < stages->n; i++) {
        rc->n_stages = (int)i + 1;
        if (parse_stage(rc, (int)i, stages, defaults, err)) return -1;
    }
    if (parse_resources(rc, root, err)) return -1;
    return cfg_check_unused(root, err);
}

int runconfig_load(const char *path, int n_over, char *const *over, runconfig **out, kf_err *err) {
    cfg_node *root = cfg_load_file(path, err);
    if (!root) return -1;
    for (int i = 0; i < n_over; i++)
        if (cfg_override(root, over[i], err)) return cfg_free(root), -1;
    runconfig *rc = kf_calloc(1, sizeof *rc);
    rc->path = kf_strdup(path);
    if (parse_root(rc, root, err)) {
        /* a rule between keys blamed on the file's key may be broken by an
         * override of another: name the overrides too */
        if (n_over > 0 && strncmp(err->msg, "override '", 10)) {
            char msg[sizeof err->msg], list[512] = "";
            snprintf(msg, sizeof msg, "%s", err->msg);
            for (int i = 0, u = 0; i < n_over && u < (int)sizeof list - 1; i++)
                u += snprintf(list + u, sizeof list - (size_t)u, "%s'%s'", i ? ", " : "", over[i]);
            kf_err_set(err, "%s (with the override%s %s)", msg, n_over > 1 ? "s" : "", list);
        }
        cfg_free(root);
        runconfig_free(rc);
        return -1;
    }
    rc->canonical = cfg_emit(root);
    cfg_hash(root, rc->hash);
    cfg_free(root);
    *out = rc;
    return 0;
}

int64_t runconfig_mask_id(const runconfig_model *m, int64_t data_vocab) {
    if (m->mask_id >= 0) return m->mask_id;
    return m->vocab > data_vocab ? data_vocab : -1;
}

const runconfig_stage *runconfig_stage_find(const runconfig *rc, const char *name) {
    for (int i = 0; i < rc->n_stages; i++)
        if (!strcmp(rc->stages[i].name, name)) return &rc->stages[i];
    return NULL;
}

void runconfig_free(runconfig *rc) {
    if (!rc) return;
    for (int i = 0; i < rc->n_stages; i++) {
        runconfig_stage *s = &rc->stages[i];
        free(s->name), free(s->teacher), free(s->init), free(s->path);
    }
    free(rc->stages);
    free(rc->path), free(rc->name), free(rc->data_train), free(rc->data_valid);
    free(rc->res.time_limit), free(rc->res.backend), free(rc->res.partition);
    free(rc->canonical);
    free(rc);
}
