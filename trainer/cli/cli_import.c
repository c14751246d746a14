/* trainer/cli/cli_import.c — `kf import CKPT.safetensors --run-dir RUN --stage NAME`:
 * registers a checkpoint (ours, or a released one converted by
 * tools/convert_ckpt.py) as a stage's final weights, so later stages use it as
 * their teacher and `kf jobs run|resume` treat the stage as complete.
 * CKPT may also be a Hugging Face GPT-2 directory (config.json +
 * model.safetensors), mapped into the model by model_hf.h; --out writes the
 * result as a kforcing checkpoint.
 *
 * What it writes is exactly what a finished `kf train` stage leaves
 * (trainer/train/checkpoint.h "Final weights"): RUN/stages/NAME/final/ with
 * model.safetensors, final.yaml (kind "import", step 0, the run config's
 * hash, the model config, the file's size and sha256) and the DONE marker
 * last, through ckpt_write_final (final.tmp/ then rename), plus the stage's
 * status file. The run config stage kind `import` (`kf train` of such a
 * stage) produces the same layout; this command is for checkpoints obtained
 * outside the config.
 *
 * --probe PROBE.safetensors checks that our model reproduces reference logits
 * recorded by tools/convert_ckpt.py --probe (or tools/ref_model.py) before
 * anything is registered; without --run-dir it only checks. Probe format
 * (safetensors, written by tools/ref_model.py write_probe):
 *   ids     I32 [B, L]     token of every row (noise rows: ignored)
 *   z       F64 [B, L]     noise value of every row (token rows: ignored)
 *   tau     F64 [B]        temperature per sample
 *   logits  F32 [B, n_out, V]  the reference's logits of the output rows
 *   metadata "probe.layout" = "ar" (layout_ar(L)), "bidir" (layout_ar(L) of a
 *   bidirectional, masked-diffusion model: every row sees every row) or
 *   "single" with "probe.n" and "probe.k" (layout_single(n, k): SingleForward,
 *   L = n + n*k).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/runconfig.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "common/stage_status.h"
#include "common/writer_lock.h"
#include "kernels/kernels.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"
#include "trainer/model/model_hf.h"
#include "trainer/train/checkpoint.h"

static const char USAGE[] =
    "usage: kf import CKPT.safetensors --run-dir RUN --stage NAME [--probe P.safetensors]\n"
    "                 [--tol T] [--force]\n"
    "       kf import CKPT.safetensors --probe P.safetensors [--tol T]\n"
    "       kf import HF_GPT2_DIR --out OUT.safetensors [--probe P.safetensors] [--tol T]\n"
    "\n"
    "Registers CKPT (a kforcing safetensors checkpoint, e.g. from tools/convert_ckpt.py)\n"
    "as the final weights of stage NAME of run RUN: writes RUN/stages/NAME/final/\n"
    "(model.safetensors, final.yaml, DONE) as a finished `kf train` stage does, so\n"
    "later stages use it as teacher and `kf jobs run|resume` skip the stage.\n"
    "When RUN/run.yaml exists, NAME must be one of its stages and the checkpoint must\n"
    "fit it (model sizes; AR for an `ar` stage, PFLM(k) for a distillation stage).\n"
    "A directory CKPT is a Hugging Face GPT-2 (config.json and model.safetensors with HF's\n"
    "key names and Conv1D weights, e.g. gpt2-large): it becomes the model with GPT-2's\n"
    "options (learned positions, LayerNorm and attention biases, tied head; model_hf.h),\n"
    "an evaluator for `kf eval genppl`; it cannot be a stage of a run.\n"
    "\n"
    "  --out OUT   write the (converted) model as a kforcing checkpoint OUT\n"
    "  --probe P   first check that our model reproduces the reference logits in P\n"
    "              (tools/convert_ckpt.py --probe, tools/ref_gpt2.py probe); without\n"
    "              --run-dir or --out: check only\n"
    "  --tol T     largest allowed |logit difference| for --probe (default 1e-4)\n"
    "  --force     replace a stage's existing final weights\n"
    "\n"
    "Exit codes: 0 done, 1 error (bad checkpoint, probe mismatch, misfit), 2 usage.\n";

/* Reads an integer tensor of the probe into a fresh int32 array. */
static int probe_i32(const safetensors_file *f, const char *name, int64_t n, int32_t **out,
                     kf_err *err) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t || t->dtype != ST_I32 || t->numel != n)
        return kf_err_set(err, "%s: tensor '%s' missing or not I32 with %lld elements", f->path,
                          name, (long long)n);
    *out = kf_malloc((size_t)n * sizeof(int32_t));
    memcpy(*out, t->data, (size_t)n * sizeof(int32_t));
    return 0;
}

static int probe_f64(const safetensors_file *f, const char *name, int64_t n, double **out,
                     kf_err *err) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t || t->dtype != ST_F64 || t->numel != n)
        return kf_err_set(err, "%s: tensor '%s' missing or not F64 with %lld elements", f->path,
                          name, (long long)n);
    *out = kf_malloc((size_t)n * sizeof(double));
    memcpy(*out, t->data, (size_t)n * sizeof(double));
    return 0;
}

static int probe_meta_int(const safetensors_file *f, const char *key, int64_t *v, kf_err *err) {
    const char *s = safetensors_meta(f, key);
    char *end = NULL;
    errno = 0;
    *v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || *v < 1)
        return kf_err_set(err, "%s: metadata \"%s\" missing or not a positive integer", f->path,
                          key);
    return 0;
}

/* Runs m on the probe's input and compares with its logits. */
static int check_probe(model *m, const char *path, double tol, kf_err *err) {
    safetensors_file *f;
    if (safetensors_open(path, &f, err)) return -1;
    int rc = -1;
    int32_t *ids = NULL;
    double *z = NULL, *tau = NULL;
    float *ref = NULL, *got = NULL;
    layout l = {0};
    int have_layout = 0;
    const char *kind = safetensors_meta(f, "probe.layout");
    const safetensors_tensor *ids_t = safetensors_find(f, "ids");
    const safetensors_tensor *lg = safetensors_find(f, "logits");
    if (!kind || !ids_t || ids_t->ndim != 2 || !lg || lg->ndim != 3) {
        kf_err_set(err,
                   "%s: not a probe file (needs metadata probe.layout, ids [B, L], logits "
                   "[B, n_out, V])",
                   path);
        goto out;
    }
    int64_t B = ids_t->shape[0], L = ids_t->shape[1], V = m->cfg.vocab;
    int bidir = !strcmp(kind, "bidir");
    if (!strcmp(kind, "ar") || bidir) {
        layout_ar(&l, L);
    } else if (!strcmp(kind, "single")) {
        int64_t n = 0, k = 0;
        if (probe_meta_int(f, "probe.n", &n, err) || probe_meta_int(f, "probe.k", &k, err))
            goto out;
        layout_single(&l, n, k);
    } else {
        kf_err_set(err, "%s: probe.layout \"%s\" is not ar, bidir or single", path, kind);
        goto out;
    }
    have_layout = 1;
    int pflm = !strcmp(kind, "single");
    if (l.L != L || lg->shape[0] != B || lg->shape[1] != l.n_out || lg->shape[2] != V) {
        kf_err_set(err,
                   "%s: shapes do not fit the layout (L %lld vs %lld, logits [%lld, %lld, %lld] "
                   "vs [%lld, %lld, %lld])",
                   path, (long long)L, (long long)l.L, (long long)lg->shape[0],
                   (long long)lg->shape[1], (long long)lg->shape[2], (long long)B,
                   (long long)l.n_out, (long long)V);
        goto out;
    }
    if (pflm != (m->cfg.kind == MODEL_PFLM) || (pflm && m->cfg.head != HEAD_SHARED) ||
        bidir != m->cfg.bidir) {
        kf_err_set(err, "%s: a \"%s\" probe does not fit this %s checkpoint", path, kind,
                   m->cfg.kind == MODEL_PFLM ? "PFLM"
                   : m->cfg.bidir            ? "masked-diffusion"
                                             : "AR");
        goto out;
    }
    if (probe_i32(f, "ids", B * L, &ids, err)) goto out;
    for (int64_t i = 0; i < B * L; i++)
        if (!l.noise[i % L] && (ids[i] < 0 || ids[i] >= V)) {
            kf_err_set(err, "%s: ids[%lld] = %d is outside the vocabulary", path, (long long)i,
                       ids[i]);
            goto out;
        }
    if (pflm && (probe_f64(f, "z", B * L, &z, err) || probe_f64(f, "tau", B, &tau, err))) goto out;
    int64_t nlog = B * l.n_out * V;
    ref = kf_malloc((size_t)nlog * sizeof(float));
    if (safetensors_read_f32(lg, ref, err)) goto out;
    model_ws *ws = model_ws_create(m);
    model_input in = {.lay = &l, .B = B, .ids = ids, .z = z, .tau = tau};
    const float *dev = model_forward(m, ws, &in, 0, NULL);
    got = kf_malloc((size_t)nlog * sizeof(float));
    m->be->download(m->be, got, dev, (size_t)nlog * sizeof(float));
    model_ws_free(ws);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < nlog; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= worst)) worst = d, at = i; /* NaN counts as worst */
    }
    /* logits are [B, n_out, V] here and in the probe (model.h order, one head) */
    printf("probe %s: %lld logits (%s layout, B=%lld, L=%lld), max |diff| %.3g at sample %lld row "
           "%lld id %lld (tolerance %.3g)\n",
           path, (long long)nlog, kind, (long long)B, (long long)L, worst,
           (long long)(at / (l.n_out * V)), (long long)(at / V % l.n_out), (long long)(at % V),
           tol);
    if (!(worst <= tol)) {
        kf_err_set(err,
                   "%s: logits differ from the reference by %.3g (> %.3g): the conversion or the "
                   "model config (heads, mask id, k) does not match the checkpoint",
                   path, worst, tol);
        goto out;
    }
    rc = 0;
out:
    if (have_layout) layout_free(&l);
    free(ids);
    free(z);
    free(tau);
    free(ref);
    free(got);
    safetensors_close(f);
    return rc;
}

/* The checkpoint must be usable where the run expects this stage's weights. */
static int check_fits(const model_config *c, const runconfig *rc, const runconfig_stage *st,
                      kf_err *err) {
    const runconfig_model *rm = &rc->model;
    /* run configs describe the default architecture; a stage's weights are
     * copied by name into later stages, which would misread GPT-2's (train.c
     * refuses an init: from weights with other options). MDLM's released
     * checkpoint has norm biases (its folded adaLN): a masked-diffusion stage
     * may. */
    if (c->pos != POS_ROPE || c->tied_head || (c->norm_bias && !c->bidir) || c->attn_bias)
        return kf_err_set(err,
                          "the checkpoint has architecture options (learned positions, biases or a "
                          "tied head: a GPT-2) that %s's model does not; it can be an evaluator "
                          "(kf eval genppl), not a stage",
                          rc->path);
    if (c->hidden != rm->hidden || c->heads != rm->heads || c->blocks != rm->blocks ||
        c->vocab != rm->vocab)
        return kf_err_set(
            err,
            "the checkpoint's model (hidden %lld, heads %lld, blocks %lld, vocab %lld) "
            "differs from %s's model (hidden %lld, heads %lld, blocks %lld, vocab %lld)",
            (long long)c->hidden, (long long)c->heads, (long long)c->blocks, (long long)c->vocab,
            rc->path, (long long)rm->hidden, (long long)rm->heads, (long long)rm->blocks,
            (long long)rm->vocab);
    const char *want = NULL;
    switch (st->kind) {
    case RC_KIND_AR:
        if (c->kind != MODEL_AR || c->bidir) want = "an AR";
        break;
    case RC_KIND_MDLM:
        if (c->kind != MODEL_AR || !c->bidir) want = "a masked-diffusion (bidirectional)";
        break;
    case RC_KIND_DISTILL_AR:
    case RC_KIND_SELF_FORCING:
    case RC_KIND_NI_CAUSAL:
        if (c->kind != MODEL_PFLM || c->head != HEAD_SHARED || c->k_train != st->k)
            want = "a PFLM(k)";
        break;
    case RC_KIND_NI_MTP:
        if (c->head != HEAD_MTP || c->k_train != st->k) want = "an MTP(k)";
        break;
    case RC_KIND_MEDUSA:
        if (c->head != HEAD_MEDUSA || c->k_train != st->k) want = "a Medusa(k)";
        break;
    case RC_KIND_IMPORT: break;
    }
    if (!want && c->kind == MODEL_PFLM && c->noise_cycles != rm->noise_cycles)
        return kf_err_set(err,
                          "the checkpoint's noise encoder has noise_cycles %lld, %s's model %lld: "
                          "the later stages would misread it (set model.noise_cycles: %lld in "
                          "the config to import it)",
                          (long long)c->noise_cycles, rc->path, (long long)rm->noise_cycles,
                          (long long)c->noise_cycles);
    if (want)
        return kf_err_set(err,
                          "stage '%s' is %s (k = %lld) and needs %s checkpoint; this one is %s "
                          "with k_train = %lld",
                          st->name, runconfig_kind_name(st->kind), (long long)st->k, want,
                          c->bidir              ? "masked-diffusion"
                          : c->kind == MODEL_AR ? "AR"
                          : c->head == HEAD_MTP ? "MTP"
                                                : "PFLM",
                          (long long)c->k_train);
    return 0;
}

/* Takes RUN's and the stage's writer locks (one writer per run and per
 * stage: a `kf jobs run` driving the run, or a `kf train` of the stage,
 * refuses this import), loads RUN/run.yaml when there is one (*rc, *st) and
 * refuses a stage that has final weights unless force. Whatever it took is
 * the caller's to release, on failure too. @return 0, or -1 with err. */
static int import_prepare(const char *run, const char *stage, bool force, writer_lock *run_lock,
                          writer_lock *stage_lock, runconfig **rc, const runconfig_stage **st,
                          char *final_dir, size_t cap, kf_err *err) {
    char p[4200];
    snprintf(final_dir, cap, "%s/stages/%s/final", run, stage);
    snprintf(p, sizeof p, "%s/lock", run);
    if (fs_mkdir_p(run, err) || writer_lock_take(p, "kf import", run_lock, err)) return -1;
    snprintf(p, sizeof p, "%s/run.yaml", run);
    if (fs_exists(p)) {
        if (runconfig_load(p, 0, NULL, rc, err)) return -1;
        *st = runconfig_stage_find(*rc, stage);
        if (!*st) return kf_err_set(err, "%s has no stage named '%s'", p, stage);
    }
    snprintf(p, sizeof p, "%s/stages/%s", run, stage);
    if (fs_mkdir_p(p, err)) return -1;
    snprintf(p, sizeof p, "%s/stages/%s/lock", run, stage);
    if (writer_lock_take(p, "kf import", stage_lock, err)) return -1;
    snprintf(p, sizeof p, "%s/DONE", final_dir);
    if (fs_exists(p) && !force)
        return kf_err_set(err,
                          "stage '%s' of %s already has final weights (%s): pass --force "
                          "to replace them",
                          stage, run, final_dir);
    return 0;
}

int import_main(int argc, char **argv) {
    const char *ckpt = NULL, *run = NULL, *stage = NULL, *probe = NULL, *out = NULL;
    double tol = 1e-4;
    bool force = false;
    const cli_opt opts[] = {
        {"--run-dir", CLI_STR, .out = &run},
        {"--stage", CLI_STR, .out = &stage},
        {"--probe", CLI_STR, .out = &probe},
        {"--out", CLI_STR, .out = &out},
        {"--tol", CLI_FLOAT, .out = &tol, .lo = 0, .hi = INFINITY},
        {"--force", CLI_FLAG, .out = &force},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf import", USAGE, opts, .pos = &ckpt, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!ckpt || (!run != !stage) || (!run && !probe && !out)) {
        fprintf(
            stderr,
            "kf import: CKPT and --run-dir RUN --stage NAME (or --probe, --out) are required\n");
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    kf_err err = {{0}};
    if (!fs_exists(ckpt)) {
        kf_err_set(&err, "%s: no such file", ckpt);
        return kf_err_report("kf import", &err);
    }
    /* Validate everything before writing anything. */
    runconfig *rc = NULL;
    const runconfig_stage *st = NULL;
    char final_dir[4096], p[4200];
    /* one writer per run and per stage: a `kf jobs run` driving the run, or
     * a `kf train` of the stage, refuses this import */
    writer_lock run_lock = {-1}, stage_lock = {-1};
    if (run && import_prepare(run, stage, force, &run_lock, &stage_lock, &rc, &st, final_dir,
                              sizeof final_dir, &err)) {
        runconfig_free(rc);
        writer_lock_release(&stage_lock), writer_lock_release(&run_lock);
        return kf_err_report("kf import", &err);
    }
    kf_backend *be = kernels_cpu_create();
    int hf = fs_is_dir(ckpt);
    char weights[4200];
    snprintf(weights, sizeof weights, hf ? "%s/model.safetensors" : "%s", ckpt);
    model *m = hf ? model_hf_gpt2_load(be, ckpt, &err) : model_load(be, ckpt, &err);
    code = KF_EXIT_ERROR;
    if (!m) goto done;
    if (probe && check_probe(m, probe, tol, &err)) goto done;
    if (st && check_fits(&m->cfg, rc, st, &err)) goto done;
    if (out) {
        if (model_save(m, out, NULL, &err)) goto done;
        printf("wrote %s (%s%s, %lld parameters)\n", out,
               hf ? "from the Hugging Face GPT-2 in " : "", hf ? ckpt : "kforcing checkpoint",
               (long long)m->n_params);
    }
    if (run) {
        char sha[65];
        if (sha256_file_hex(weights, sha, &err)) goto done;
        ckpt_meta meta;
        memset(&meta, 0, sizeof meta);
        snprintf(meta.stage, sizeof meta.stage, "%s", stage);
        snprintf(meta.kind, sizeof meta.kind, "import");
        snprintf(meta.phase, sizeof meta.phase, "fp32");
        if (rc) memcpy(meta.config_hash, rc->hash, sizeof meta.config_hash);
        meta.world = 1;
        meta.id.model = m->cfg;
        ckpt_write_final(final_dir, m, m->params, &meta);
        snprintf(p, sizeof p, "%s/stages/%s", run, stage);
        stage_status st = {.state = "done"};
        if (stage_status_write(p, &st, &err)) goto done;
        printf("imported %s (sha256 %.12s..., %s%s, k_train %lld, %lld parameters) as %s\n", ckpt,
               sha,
               m->cfg.bidir              ? "masked-diffusion"
               : m->cfg.kind == MODEL_AR ? "AR"
                                         : "PFLM",
               m->cfg.head == HEAD_MTP ? " MTP" : "", (long long)m->cfg.k_train,
               (long long)m->n_params, final_dir);
        if (!rc) printf("note: %s has no run.yaml yet: the stage name was not checked\n", run);
    }
    code = KF_EXIT_OK;
done:
    if (code) kf_err_report("kf import", &err);
    if (m) model_free(m);
    be->destroy(be);
    runconfig_free(rc);
    writer_lock_release(&stage_lock), writer_lock_release(&run_lock);
    return code;
}
