/* trainer/infer/paradigms.c — the paradigms of the quality–NFE comparison,
 * found in a run and decoded behind one call (paradigms.h). */
#include "trainer/infer/paradigms.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "trainer/infer/decode.h"
#include "trainer/infer/mdlm_sample.h"
#include "trainer/infer/speculative.h"
#include "trainer/train/checkpoint.h"

const char *paradigm_name(paradigm_id id) {
    static const char *const names[PARADIGM_COUNT] = {"AR", "MDLM", "Medusa", "PTP", "K-Forcing"};
    KF_CHECK(id >= 0 && id < PARADIGM_COUNT, "paradigm_name: id %d", (int)id);
    return names[id];
}

bool paradigm_speculative(paradigm_id id) { return id == PARADIGM_MEDUSA || id == PARADIGM_PTP; }

double paradigm_nfe(paradigm_id id, double rounds) {
    return paradigm_speculative(id) ? 2 * rounds : rounds;
}

/* The weights of stage `name` of run: its final/ resolved and verified
 * (DONE, recorded sha256) into file (cap bytes). */
static int stage_weights(const char *run, const char *name, char *file, size_t cap, kf_err *err) {
    char dir[PATH_MAX], sha[65];
    snprintf(dir, sizeof dir, "%s/stages/%s/final", run, name);
    if (!fs_exists(dir))
        return kf_err_set(err, "stage %s has no final weights (%s): not trained yet", name, dir);
    return ckpt_resolve_teacher(dir, file, cap, sha, err);
}

/* Marks p absent, the reason formatted. */
static void absent(paradigm *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void absent(paradigm *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    p->present = false;
}

/* The stage of kind `kind` with the largest k (the last of equals), or NULL. */
static const runconfig_stage *largest_k(const runconfig *rc, runconfig_kind a, runconfig_kind b) {
    const runconfig_stage *best = NULL;
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *s = &rc->stages[i];
        if ((s->kind == a || s->kind == b) && (!best || s->k >= best->k)) best = s;
    }
    return best;
}

/* Loads stage `name` once (its weights file given) and returns its slot. */
static int load_stage(paradigm_set *s, kf_backend *be, const char *name, const char *file,
                      kf_err *err) {
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->names[i], name)) return i;
    KF_CHECK(s->n_models < PARADIGM_MAX_MODELS, "paradigm_set: more than %d models",
             PARADIGM_MAX_MODELS);
    model *m = model_load(be, file, err);
    if (!m) return -1;
    int i = s->n_models++;
    snprintf(s->names[i], sizeof s->names[i], "%s", name);
    s->models[i] = m;
    s->heads[i] = model_heads_pack(m);
    return i;
}

/* The AR stage: the first `ar`, or `import` of an AR model. Its weights
 * file goes to file; NULL with err when there is none that can be used. */
static const runconfig_stage *find_ar(const char *run, const runconfig *rc, char *file, size_t cap,
                                      kf_err *err) {
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *st = &rc->stages[i];
        if (st->kind != RC_KIND_AR && st->kind != RC_KIND_IMPORT) continue;
        kf_err e2;
        if (stage_weights(run, st->name, file, cap, &e2)) {
            if (st->kind == RC_KIND_AR) {
                kf_err_set(err, "the AR stage: %s", e2.msg);
                return NULL;
            }
            continue; /* an import not registered yet: not known to be AR */
        }
        model_config c;
        if (st->kind == RC_KIND_IMPORT && (model_read_config(file, &c, &e2) || c.kind != MODEL_AR ||
                                           c.bidir || c.head != HEAD_SHARED))
            continue; /* a PFLM, MDLM's bidirectional denoiser, or Medusa heads */
        return st;
    }
    kf_err_set(err, "no AR stage with final weights (kind ar, or an import of an AR model): it "
                    "verifies the speculative methods and scores Gen-PPL");
    return NULL;
}

/* The stage paradigm id decodes (see paradigms.h), or NULL; what the
 * config would need goes to want. */
static const runconfig_stage *pick(const char *run, const runconfig *rc, paradigm_id id,
                                   const char **want) {
    switch (id) {
    case PARADIGM_KF:
        *want = "`distill_ar` or `self_forcing` stage";
        return largest_k(rc, RC_KIND_DISTILL_AR, RC_KIND_SELF_FORCING);
    case PARADIGM_PTP:
        *want = "`noise_inversion_causal` stage (ablation variant B)";
        return largest_k(rc, RC_KIND_NI_CAUSAL, RC_KIND_NI_CAUSAL);
    case PARADIGM_MDLM: {
        *want = "`mdlm` stage, nor an `import` of an MDLM model,";
        const runconfig_stage *st = largest_k(rc, RC_KIND_MDLM, RC_KIND_MDLM);
        for (int i = 0; i < rc->n_stages && !st; i++) {
            char file[PATH_MAX + 96];
            model_config c;
            kf_err e2;
            if (rc->stages[i].kind == RC_KIND_IMPORT &&
                !stage_weights(run, rc->stages[i].name, file, sizeof file, &e2) &&
                !model_read_config(file, &c, &e2) && c.bidir)
                st = &rc->stages[i];
        }
        return st;
    }
    case PARADIGM_MEDUSA:
        *want = "`medusa` stage";
        return largest_k(rc, RC_KIND_MEDUSA, RC_KIND_MEDUSA);
    default: return NULL; /* AR: find_ar */
    }
}

/* Finds and loads paradigm id (not AR, which s->p[PARADIGM_AR] holds). A
 * paradigm the run lacks is marked absent; -1 only on a load failure. */
static int find_other(paradigm_set *s, const char *run, const char *path, kf_backend *be,
                      paradigm_id id, kf_err *err) {
    paradigm *p = &s->p[id];
    const paradigm *ar = &s->p[PARADIGM_AR];
    const char *want = "";
    const runconfig_stage *st = pick(run, s->rc, id, &want);
    char file[PATH_MAX + 96];
    kf_err e2;
    if (!st) {
        absent(p, "no %s in %s", want, path);
        return 0;
    }
    if (stage_weights(run, st->name, file, sizeof file, &e2)) {
        absent(p, "%s", e2.msg);
        return 0;
    }
    int i = load_stage(s, be, st->name, file, err);
    if (i < 0) return -1;
    p->present = true;
    p->m = s->models[i];
    p->heads = s->heads[i];
    p->k_max = id == PARADIGM_MDLM ? INT64_MAX : st->k; /* MDLM unmasks any k a pass */
    snprintf(p->stage, sizeof p->stage, "%s", st->name);
    if (paradigm_speculative(id)) {
        if (spec_draft_of(p->m) == SPEC_NONE) {
            absent(p, "stage %s's model is not a draft model this build verifies", st->name);
            return 0;
        }
        if (spec_draft_of(p->m) == SPEC_MEDUSA) {
            /* the heads sit on the verifier itself (the stage's EMA may have
             * rounded the frozen backbone): its weights, then repacked */
            spec_medusa_attach(p->m, ar->m);
            model_heads_free(s->heads[i]);
            p->heads = s->heads[i] = model_heads_pack(p->m);
        }
        p->verm = ar->m;
        p->ver_heads = ar->heads;
        snprintf(p->ver, sizeof p->ver, "%s", ar->stage);
    }
    return 0;
}

int paradigm_set_open(paradigm_set *s, const char *run, kf_backend *be, kf_err *err) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < PARADIGM_COUNT; i++) s->p[i].id = (paradigm_id)i;
    char path[PATH_MAX + 16], file[PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/run.yaml", run);
    if (!fs_exists(path))
        return kf_err_set(err, "%s: no such file (RUN is a run directory of kf jobs run)", path);
    if (runconfig_load(path, 0, NULL, &s->rc, err)) return -1;
    const runconfig *rc = s->rc;
    int rv = 0;
    paradigm *ar = &s->p[PARADIGM_AR];
    const runconfig_stage *ars = find_ar(run, rc, file, sizeof file, err);
    int ai = ars ? load_stage(s, be, ars->name, file, err) : -1;
    if (ai < 0) return -1;
    *ar = (paradigm){
        .id = PARADIGM_AR, .present = true, .k_max = 1, .m = s->models[ai], .heads = s->heads[ai]};
    snprintf(ar->stage, sizeof ar->stage, "%s", ars->name);

    for (int id = PARADIGM_MDLM; id < PARADIGM_COUNT && !rv; id++)
        rv = find_other(s, run, path, be, (paradigm_id)id, err);
    return rv;
}

void paradigm_set_close(paradigm_set *s) {
    for (int i = 0; i < s->n_models; i++) {
        model_heads_free(s->heads[i]);
        model_free(s->models[i]);
    }
    runconfig_free(s->rc);
    memset(s, 0, sizeof *s);
}

/* decode.h's options for an AR or K-Forcing paradigm: AR samples at tau
 * without a penalty (the release), K-Forcing takes o's. */
static decode_opts decode_opts_of(const paradigm *p, const paradigm_opts *o) {
    return (decode_opts){.k = p->id == PARADIGM_AR ? 1 : o->k,
                         .tau = o->tau,
                         .max_new = o->max_new,
                         .seed = o->seed,
                         .freq_penalty = p->id == PARADIGM_KF ? o->freq_penalty : 0.0f};
}

/* speculative.h's options: sampling at tau (the paper's lossless setting). */
static spec_opts spec_opts_of(const paradigm_opts *o) {
    return (spec_opts){.k = o->k, .tau = o->tau, .max_new = o->max_new, .seed = o->seed};
}

int paradigm_check(const paradigm *p, const paradigm_opts *o, int64_t P, kf_err *err) {
    if (!p->present) return kf_err_set(err, "%s is absent: %s", paradigm_name(p->id), p->why);
    if (o->k < 1 || o->k > p->k_max)
        return kf_err_set(err, "%s: k %lld outside 1..%lld (stage %s)", paradigm_name(p->id),
                          (long long)o->k, (long long)p->k_max, p->stage);
    if (paradigm_speculative(p->id)) {
        spec_opts so = spec_opts_of(o);
        return spec_check(p->verm, p->m, &so, P, err);
    }
    if (p->id == PARADIGM_MDLM) {
        const model_config *c = &p->m->cfg;
        if (!c->bidir || c->mask_id < 0)
            return kf_err_set(err, "MDLM: stage %s's model is not bidirectional with a mask token",
                              p->stage);
        if (P + o->max_new > c->seq_len)
            return kf_err_set(err, "MDLM: prefix %lld + %lld new tokens exceed the context of %lld",
                              (long long)P, (long long)o->max_new, (long long)c->seq_len);
        return 0;
    }
    decode_opts d = decode_opts_of(p, o);
    return decode_check(p->m, &d, P, err);
}

static void count_step(void *ctx, int64_t step, int64_t cache_len) {
    (void)step, (void)cache_len;
    ++*(int64_t *)ctx;
}

int paradigm_generate(const paradigm *p, const int32_t *prefix, int64_t B, int64_t P,
                      const paradigm_opts *o, const uint64_t *keys, int32_t *out, int64_t *rounds,
                      int64_t *accepted, kf_err *err) {
    KF_CHECK(p->present, "paradigm_generate: %s is absent", paradigm_name(p->id));
    for (int64_t b = 0; b < B; b++) accepted[b] = 0;
    if (paradigm_speculative(p->id)) {
        spec_opts so = spec_opts_of(o);
        spec_stats *st = kf_malloc((size_t)B * sizeof *st);
        spec_run(p->verm, p->ver_heads, p->m, p->heads, prefix, B, P, &so, keys, out, st);
        for (int64_t b = 0; b < B; b++) rounds[b] = st[b].iters, accepted[b] = st[b].accepted;
        free(st);
        return 0;
    }
    if (p->id == PARADIGM_MDLM) {
        mdlm_sample_opts mo = {.n_new = o->max_new, .k = o->k, .seed = o->seed, .tau = o->tau};
        return mdlm_sample_run(p->m, prefix, B, P, &mo, keys, out, rounds, err);
    }
    int64_t steps = 0;
    decode_opts d = decode_opts_of(p, o);
    d.on_step = count_step;
    d.on_step_ctx = &steps;
    decode_run(p->m, p->heads, prefix, B, P, &d, keys, out);
    for (int64_t b = 0; b < B; b++) rounds[b] = steps; /* fixed stride: every sequence alike */
    return 0;
}
