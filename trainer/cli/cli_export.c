/* trainer/cli/cli_export.c — `kf export CKPT --to release|hf --out DIR`:
 * a checkpoint in a layout other programs load (docs/export.md).
 *
 * CKPT is a .safetensors checkpoint, a stage's final/ directory (its EMA
 * weights; DONE and sha256 checked), a stage directory RUN/stages/NAME (its
 * final/), or a step-N checkpoint directory (verified; --weights ema or raw).
 * When CKPT lies in a run directory, the stage's name, kind and step come
 * from final.yaml / state.yaml, the stage chain and data from RUN/run.yaml,
 * and validation losses from each stage's log.jsonl.
 *
 *   release  DIR/model.safetensors (the weights, model_save) and DIR/NAME.ckpt,
 *            the torch.load file the released sampler reads, written from it
 *            by tools/release_ckpt.py (python3 with torch: KF_PYTHON, default
 *            /usr/bin/python3; the script is found at KF_TOOLS, default
 *            BINDIR/../tools). NAME: ar_STAGE or pflm_STAGE_kK, as the
 *            released files are named.
 *   hf       DIR/model.safetensors, config.json (model_export.h), the tokenizer
 *            files of --vocab DIR (their sha256 must be the one the stage
 *            trained on, when recorded) with tokenizer_config.json, and a
 *            README.md model card.
 *
 * Everything is written into DIR.tmp/ and renamed to DIR at the end (an
 * existing DIR is replaced only with --force), so a crash leaves no
 * half-written DIR.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/config.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/proc.h"
#include "common/runconfig.h"
#include "common/strbuf.h"
#include "kernels/kernels.h"
#include "tokenize/tokenizer.h"
#include "trainer/model/model.h"
#include "trainer/model/model_export.h"
#include "trainer/train/checkpoint.h"

static const char USAGE[] =
    "usage: kf export CKPT --to release|hf --out DIR [--weights ema|raw] [--vocab DIR]\n"
    "                 [--no-ckpt] [--force]\n"
    "\n"
    "Writes checkpoint CKPT in a layout other programs load (docs/export.md):\n"
    "  release  DIR/NAME.ckpt for the released K-Forcing code (utils/checkpoint.py:\n"
    "           its AR class for an AR stage, its MTP class for a PFLM), the keys and\n"
    "           shapes of those classes, written by tools/release_ckpt.py (python3 with\n"
    "           torch; KF_PYTHON, default /usr/bin/python3); DIR/model.safetensors too\n"
    "  hf       DIR/model.safetensors, config.json, the tokenizer files and a README.md\n"
    "           model card (data, stages, steps, precision, validation losses, the\n"
    "           run's sample-quality table when kf jobs run made one);\n"
    "           tools/hf_load.py loads it in PyTorch and samples from it\n"
    "CKPT: a .safetensors checkpoint, a stage's final/ directory or stage directory\n"
    "(RUN/stages/NAME: the EMA weights), or a step-N checkpoint directory.\n"
    "\n"
    "  --to FORMAT     release or hf\n"
    "  --out DIR       the folder to write (replaced only with --force)\n"
    "  --weights W     ema (default) or raw: a step-N directory holds both; final/ and a\n"
    "                  .safetensors file hold one set (final/: the EMA)\n"
    "  --vocab DIR     hf: the tokenizer files (vocab.json+merges.txt or vocab.txt);\n"
    "                  required; checked against the vocabulary the stage trained on\n"
    "  --no-ckpt       release: write DIR/model.safetensors only and print the\n"
    "                  tools/release_ckpt.py command that makes the .ckpt\n"
    "  --force         replace an existing DIR\n"
    "\n"
    "Exit codes: 0 done, 1 error (bad checkpoint, a model the layout cannot hold), 2 usage.\n";

/* What is known about the checkpoint being exported. */
typedef struct source {
    char weights[PATH_MAX];  /* the .safetensors file to export */
    char run[PATH_MAX];      /* the run directory, or "" */
    char stage[64];          /* "" when unknown */
    char kind[32];           /* runconfig_kind_name, or "" */
    int64_t step;            /* -1: unknown */
    char tokenizer[64];      /* "" when unknown */
    char vocab_sha256[65];   /* "" when unknown */
    const char *weights_set; /* "ema" | "raw" */
} source;

static int known_kind(const char *kind) {
    for (int k = RC_KIND_AR; k <= RC_KIND_MEDUSA; k++)
        if (!strcmp(kind, runconfig_kind_name((runconfig_kind)k))) return 1;
    return 0;
}

/* Reads stage, kind, step, tokenizer and vocab_sha256 of final.yaml. */
static int read_final_yaml(const char *dir, source *s, kf_err *err) {
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/final.yaml", dir);
    cfg_node *r = cfg_load_file(p, err);
    if (!r) return -1;
    const char *stage, *kind, *tk = "", *vs = "";
    int rc = cfg_get_str(r, "stage", &stage, err) || cfg_get_str(r, "kind", &kind, err) ||
             cfg_get_int(r, "step", &s->step, err) || cfg_opt_str(r, "tokenizer", "", &tk, err) ||
             cfg_opt_str(r, "vocab_sha256", "", &vs, err);
    if (!rc) {
        snprintf(s->stage, sizeof s->stage, "%s", stage);
        snprintf(s->kind, sizeof s->kind, "%s", kind);
        snprintf(s->tokenizer, sizeof s->tokenizer, "%s", tk);
        snprintf(s->vocab_sha256, sizeof s->vocab_sha256, "%s", vs);
    }
    cfg_free(r);
    return rc ? -1 : 0;
}

/* The run directory above a stage's final/ (up = 3) or step-N (up = 4),
 * when it is one: RUN/stages/<stage>/... */
static void find_run(const char *dir, int up, source *s) {
    char p[PATH_MAX], stage_dir[PATH_MAX] = "", q[PATH_MAX + 96], sd[PATH_MAX];
    if (!realpath(dir, p)) return;
    for (int i = 0; i < up; i++) {
        if (i == up - 2) memcpy(stage_dir, p, sizeof p);
        char up_dir[PATH_MAX];
        fs_dirname(p, up_dir, sizeof up_dir);
        memcpy(p, up_dir, sizeof p);
    }
    snprintf(q, sizeof q, "%s/stages/%s", p, s->stage);
    if (fs_is_dir(q) && realpath(q, sd) && !strcmp(sd, stage_dir)) memcpy(s->run, p, sizeof s->run);
}

static int resolve(const char *ckpt, const char *want, source *s, kf_err *err) {
    memset(s, 0, sizeof *s);
    s->step = -1;
    s->weights_set = want ? want : "ema";
    char p[PATH_MAX + 32], sha[65];
    if (!fs_exists(ckpt)) return kf_err_set(err, "%s: no such file or directory", ckpt);
    if (!fs_is_dir(ckpt)) {
        if (want && !strcmp(want, "raw"))
            return kf_err_set(err,
                              "%s is one set of weights: --weights raw needs a step-N checkpoint "
                              "directory (it holds both)",
                              ckpt);
        s->weights_set = "as saved";
        snprintf(s->weights, sizeof s->weights, "%s", ckpt);
        return 0;
    }
    snprintf(p, sizeof p, "%s/final/final.yaml", ckpt);
    if (fs_exists(p)) { /* a stage directory */
        snprintf(p, sizeof p, "%s/final", ckpt);
        return resolve(p, want, s, err);
    }
    snprintf(p, sizeof p, "%s/final.yaml", ckpt);
    int final = fs_exists(p);
    if (final && want && !strcmp(want, "raw"))
        return kf_err_set(err,
                          "%s holds the EMA weights only: for the raw ones export a step-N "
                          "checkpoint (RUN/stages/NAME/ckpt/step-N)",
                          ckpt);
    if (final) { /* DONE and the recorded sha256 of model.safetensors */
        if (ckpt_resolve_teacher(ckpt, s->weights, sizeof s->weights, sha, err) ||
            read_final_yaml(ckpt, s, err))
            return -1;
    } else {
        snprintf(p, sizeof p, "%s/state.yaml", ckpt);
        if (!fs_exists(p))
            return kf_err_set(err,
                              "%s: neither a stage directory, a final/ directory (final.yaml) nor "
                              "a step-N checkpoint (state.yaml)",
                              ckpt);
        ckpt_meta m; /* every file's size and sha256 */
        if (ckpt_verify(ckpt, &m, err)) return -1;
        snprintf(s->stage, sizeof s->stage, "%s", m.stage);
        snprintf(s->kind, sizeof s->kind, "%s", m.kind);
        snprintf(s->tokenizer, sizeof s->tokenizer, "%s", m.id.tokenizer);
        snprintf(s->vocab_sha256, sizeof s->vocab_sha256, "%s", m.id.vocab_sha256);
        s->step = m.step;
        snprintf(s->weights, sizeof s->weights, "%s/%s.safetensors", ckpt,
                 strcmp(s->weights_set, "raw") ? "ema" : "model");
    }
    if (!known_kind(s->kind))
        return kf_err_set(err,
                          "%s/%s: stage kind '%s' is not one kf knows (ar, import, distill_ar, "
                          "self_forcing, noise_inversion_mtp, noise_inversion_causal)",
                          ckpt, final ? "final.yaml" : "state.yaml", s->kind);
    find_run(ckpt, final ? 3 : 4, s);
    return 0;
}

/* The last validation line of RUN/stages/NAME/log.jsonl: 0 when found. */
static int last_validation(const char *run, const char *stage, int64_t *step, double *loss,
                           double *loss_ema) {
    char p[PATH_MAX + 96], *text;
    size_t len;
    kf_err e = {{0}};
    snprintf(p, sizeof p, "%s/stages/%s/log.jsonl", run, stage);
    if (!fs_exists(p) || fs_read_file(p, &text, &len, &e)) return -1;
    int found = -1;
    for (char *line = text, *nl; line < text + len; line = nl + 1) {
        nl = memchr(line, '\n', (size_t)(text + len - line));
        if (!nl) nl = text + len;
        json_doc *d = json_parse(line, (size_t)(nl - line), p, &e);
        if (!d) continue; /* a torn last line of a killed run */
        const json *v = json_get(json_root(d), "val_loss"),
                   *ve = json_get(json_root(d), "val_loss_ema"),
                   *st = json_get(json_root(d), "step");
        if (v && v->type == JSON_NUMBER && st && st->type == JSON_NUMBER) {
            *step = (int64_t)st->num, *loss = v->num;
            *loss_ema = ve && ve->type == JSON_NUMBER ? ve->num : v->num;
            found = 0;
        }
        json_free(d);
    }
    free(text);
    return found;
}

/* The chain of stages the checkpoint came from (teacher links, first stage
 * first), from RUN/run.yaml; just this stage without one. */
typedef struct chain {
    runconfig *rc;
    int n;
    model_export_stage st[32];
    const runconfig_stage *last;
} chain;

static int load_chain(const source *s, const model_config *c, chain *ch, kf_err *err) {
    memset(ch, 0, sizeof *ch);
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/run.yaml", s->run);
    if (s->run[0] && fs_exists(p)) {
        if (runconfig_load(p, 0, NULL, &ch->rc, err)) return -1;
        const runconfig_stage *st = runconfig_stage_find(ch->rc, s->stage);
        if (!st)
            return kf_err_set(err, "%s has no stage '%s' (the checkpoint's stage)", p, s->stage);
        ch->last = st;
        int idx[32], n = 0;
        for (int i = (int)(st - ch->rc->stages); i >= 0 && n < 32;
             i = ch->rc->stages[i].teacher_stage)
            idx[n++] = i;
        for (int j = 0; j < n; j++) {
            const runconfig_stage *t = &ch->rc->stages[idx[n - 1 - j]];
            ch->st[j] = (model_export_stage){t->name, runconfig_kind_name(t->kind), t->k, t->steps};
        }
        ch->n = n;
    } else if (s->stage[0]) {
        ch->st[0] = (model_export_stage){s->stage, s->kind, c->k_train, s->step};
        ch->n = 1;
    }
    return 0;
}

/* The tokenizer files of vocab into dir, and tokenizer_config.json. */
static int copy_tokenizer(const tok *t, const char *vocab, const char *dir, int64_t seq_len,
                          kf_err *err) {
    int gpt2 = !strcmp(tok_name(t), "gpt2");
    static const char *const g[] = {"vocab.json", "merges.txt"}, *const b[] = {"vocab.txt"};
    const char *const *files = gpt2 ? g : b;
    for (int i = 0; i < (gpt2 ? 2 : 1); i++) {
        char from[PATH_MAX + 32], to[PATH_MAX + 32], *data;
        size_t len;
        snprintf(from, sizeof from, "%s/%s", vocab, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        if (fs_read_file(from, &data, &len, err)) return -1;
        int rc = fs_write_atomic(to, data, len, err);
        free(data);
        if (rc) return -1;
    }
    char cfg[512], p[PATH_MAX + 32];
    int n = snprintf(cfg, sizeof cfg,
                     "{\n  \"tokenizer_class\": \"%s\",\n  \"do_lower_case\": %s,\n"
                     "  \"model_max_length\": %lld,\n  \"kforcing_tokenizer\": \"%s\"\n}\n",
                     gpt2 ? "GPT2Tokenizer" : "BertTokenizer", gpt2 ? "false" : "true",
                     (long long)seq_len, tok_name(t));
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    return fs_write_atomic(p, cfg, (size_t)n, err);
}

/* README.md: the model card. */
static int write_card(const char *path, const model *m, const source *s, const chain *ch,
                      const model_export_info *info, kf_err *err) {
    const model_config *c = &m->cfg;
    strbuf b = {0};
    int pflm = c->kind == MODEL_PFLM;
    strbuf_printf(&b, "---\nlibrary_name: pytorch\ntags: [kforcing, k-forcing, %s]\n---\n\n",
                  pflm ? "push-forward-lm" : "autoregressive");
    strbuf_printf(&b, "# %s%s%s\n\n", ch->rc ? ch->rc->name : "kforcing model",
                  s->stage[0] ? " / " : "", s->stage);
    strbuf_printf(&b,
                  "%s trained with kforcing: a causal DDiT (%lld blocks, hidden %lld, %lld heads, "
                  "vocabulary %lld, context %lld), %lld parameters.\n\n",
                  pflm ? "A K-Forcing push-forward language model (PFLM)"
                       : "An autoregressive model",
                  (long long)c->blocks, (long long)c->hidden, (long long)c->heads,
                  (long long)c->vocab, (long long)c->seq_len, (long long)m->n_params);
    if (pflm)
        strbuf_printf(&b,
                      "It emits k = %lld tokens per forward pass: the context, then k noise rows "
                      "(u ~ U(0,1) and the temperature tau) whose outputs' argmax are the next k "
                      "tokens.\n\n",
                      (long long)c->k_train);
    strbuf_puts(&b, "## Files\n\n- `model.safetensors`: float32 weights (reference names, "
                    "kforcing metadata)\n- `config.json`: architecture and provenance\n"
                    "- tokenizer files and `tokenizer_config.json`\n\n"
                    "Load and sample with kforcing's `tools/hf_load.py DIR --prefix IDS` "
                    "(PyTorch; the modelling code is `tools/ref_model.py`), or with `kf sample "
                    "DIR/model.safetensors`.\n\n## Training\n\n");
    strbuf_printf(&b, "- weights: %s\n", info->weights);
    if (ch->rc)
        strbuf_printf(&b, "- data: `%s` (validation: `%s`)\n- run config sha256: `%s`\n",
                      ch->rc->data_train, ch->rc->data_valid, ch->rc->hash);
    if (s->tokenizer[0]) strbuf_printf(&b, "- tokenizer: %s\n", s->tokenizer);
    if (ch->last) {
        const runconfig_opts *o = &ch->last->opt;
        strbuf_puts(&b, "- precision:");
        for (int i = 0; i < o->n_phases; i++) {
            if (o->phases[i].until_step >= 0)
                strbuf_printf(&b, " %s until step %lld,", runconfig_prec_name(o->phases[i].mode),
                              (long long)o->phases[i].until_step);
            else strbuf_printf(&b, " %s", runconfig_prec_name(o->phases[i].mode));
        }
        strbuf_printf(&b, "\n- batch %lld, lr %g, EMA %g\n", (long long)o->batch, o->lr, o->ema);
    }
    if (ch->n) {
        strbuf_puts(&b, "\n## Stages\n\n| stage | kind | k | steps | validation loss | (EMA) |\n"
                        "|---|---|---|---|---|---|\n");
        for (int i = 0; i < ch->n; i++) {
            const model_export_stage *t = &ch->st[i];
            int64_t step;
            double l, le;
            strbuf_printf(&b, "| %s | %s | %lld | %lld |", t->name, t->kind, (long long)t->k,
                          (long long)t->steps);
            if (s->run[0] && !last_validation(s->run, t->name, &step, &l, &le))
                strbuf_printf(&b, " %.4f (step %lld) | %.4f |\n", l, (long long)step, le);
            else strbuf_puts(&b, " - | - |\n");
        }
        strbuf_puts(&b, "\nValidation loss: mean next-token cross-entropy (nats) of the stage's "
                        "own supervision on the validation split, from the stage's log.jsonl.\n");
    }
    /* the quality table `kf jobs run` saved beside its completions, as printed */
    char tp[PATH_MAX + 32], *table = NULL;
    size_t tlen;
    kf_err ignored;
    snprintf(tp, sizeof tp, "%s/samples/table.txt", s->run);
    if (s->run[0] && fs_exists(tp) && !fs_read_file(tp, &table, &tlen, &ignored)) {
        strbuf_puts(&b, "\n## Sample quality\n\nThe run's sampling table (`kf jobs run`: "
                        "completions of the same prompts by every model at each k, scored under "
                        "the run's AR stage):\n\n```\n");
        strbuf_put(&b, table, tlen);
        strbuf_puts(&b, "```\n");
        free(table);
    }
    int rc = fs_write_atomic(path, b.s, b.len, err);
    free(b.s);
    return rc;
}

static const char *python_bin(void) {
    const char *p = getenv("KF_PYTHON");
    if (p && *p) return p;
    return fs_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

/* tools/release_ckpt.py: KF_TOOLS, else next to the binary's directory. */
static int tools_script(char *out, size_t cap, kf_err *err) {
    const char *t = getenv("KF_TOOLS");
    char bindir[PATH_MAX];
    if (t && *t) {
        snprintf(out, cap, "%s/release_ckpt.py", t);
    } else {
        fs_dirname(proc_self_exe(), bindir, sizeof bindir);
        snprintf(out, cap, "%s/../tools/release_ckpt.py", bindir);
    }
    if (!fs_exists(out))
        return kf_err_set(err, "%s: not found (set KF_TOOLS to kforcing's tools/ directory)", out);
    return 0;
}

int export_main(int argc, char **argv) {
    const char *ckpt = NULL, *to = NULL, *out = NULL, *weights = NULL, *vocab = NULL;
    bool force = false, no_ckpt = false;
    const cli_opt opts[] = {
        {"--to", CLI_STR, .out = &to},
        {"--out", CLI_STR, .out = &out},
        {"--weights", CLI_STR, .out = &weights},
        {"--vocab", CLI_STR, .out = &vocab},
        {"--no-ckpt", CLI_FLAG, .out = &no_ckpt},
        {"--force", CLI_FLAG, .out = &force},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf export", USAGE, opts, .pos = &ckpt, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!ckpt || !to || !out) {
        fprintf(stderr, "kf export: CKPT, --to and --out are required\n");
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    model_export_to fmt;
    if (!strcmp(to, "release")) {
        fmt = MODEL_EXPORT_RELEASE;
    } else if (!strcmp(to, "hf")) {
        fmt = MODEL_EXPORT_HF;
    } else {
        fprintf(stderr,
                "kf export: --to %s: unknown format (release, hf; TensorBoard curves: "
                "docs/export.md)\n",
                to);
        return KF_EXIT_USAGE;
    }
    if (weights && strcmp(weights, "ema") && strcmp(weights, "raw")) {
        fprintf(stderr, "kf export: --weights %s: must be ema or raw\n", weights);
        return KF_EXIT_USAGE;
    }
    if (fmt == MODEL_EXPORT_HF && !vocab) {
        fprintf(stderr, "kf export: --to hf needs --vocab DIR (the tokenizer files the model was "
                        "trained with: the shard set's vocab: directory)\n");
        return KF_EXIT_USAGE;
    }
    kf_err err = {{0}};
    source s;
    chain ch = {0};
    tok *tk = NULL;
    model *m = NULL;
    kf_backend *be = NULL;
    char tmp[PATH_MAX + 8], p[PATH_MAX + 64], old[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    snprintf(old, sizeof old, "%s.old", out);
    code = KF_EXIT_ERROR;
    if (resolve(ckpt, weights, &s, &err)) goto done;
    if (fs_exists(out) && !force) {
        kf_err_set(&err, "%s exists: pass --force to replace it", out);
        goto done;
    }
    be = kernels_cpu_create();
    m = model_load(be, s.weights, &err);
    if (!m || model_export_fits(&m->cfg, fmt, &err) || load_chain(&s, &m->cfg, &ch, &err))
        goto done;
    if (vocab) {
        if (!(tk = tok_load_dir(vocab, &err))) goto done;
        if (s.vocab_sha256[0] && strcmp(s.vocab_sha256, tok_vocab_sha256(tk))) {
            kf_err_set(&err,
                       "%s: vocabulary sha256 %.12s... is not the one stage '%s' trained on "
                       "(%.12s...)",
                       vocab, tok_vocab_sha256(tk), s.stage, s.vocab_sha256);
            goto done;
        }
        if (tok_vocab_size(tk) > m->cfg.vocab) {
            kf_err_set(&err, "%s: %lld ids, more than the model's vocabulary (%lld)", vocab,
                       (long long)tok_vocab_size(tk), (long long)m->cfg.vocab);
            goto done;
        }
    }
    if (fs_rm_rf(tmp, &err) || fs_mkdir_p(tmp, &err)) goto done;
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    if (model_save(m, p, NULL, &err)) goto done;
    const char *wset = s.weights_set;
    if (fmt == MODEL_EXPORT_HF) {
        int gpt2 = !strcmp(tok_name(tk), "gpt2");
        model_export_info info = {
            .tokenizer = tok_name(tk),
            .bos_id = tok_special_id(tk, gpt2 ? "bos" : "cls"),
            .eos_id = tok_special_id(tk, gpt2 ? "eos" : "sep"),
            .pad_id = gpt2 ? -1 : tok_special_id(tk, "pad"),
            .weights = wset,
            .stage = s.stage,
            .step = s.step,
            .n_chain = ch.n,
            .chain = ch.st,
        };
        snprintf(p, sizeof p, "%s/config.json", tmp);
        if (model_export_hf_config(&m->cfg, &info, p, &err) ||
            copy_tokenizer(tk, vocab, tmp, m->cfg.seq_len, &err))
            goto done;
        snprintf(p, sizeof p, "%s/README.md", tmp);
        if (write_card(p, m, &s, &ch, &info, &err)) goto done;
    }
    char name[160];
    const char *base = s.stage[0] ? s.stage : "model";
    if (m->cfg.kind == MODEL_PFLM)
        snprintf(name, sizeof name, "pflm_%s_k%lld.ckpt", base, (long long)m->cfg.k_train);
    else snprintf(name, sizeof name, "ar_%s.ckpt", base);
    if (fmt == MODEL_EXPORT_RELEASE && !no_ckpt) {
        char script[PATH_MAX + 32], src[PATH_MAX + 32], dst[PATH_MAX + 200];
        if (tools_script(script, sizeof script, &err)) goto done;
        snprintf(src, sizeof src, "%s/model.safetensors", tmp);
        snprintf(dst, sizeof dst, "%s/%s", tmp, name);
        char *args[] = {(char *)python_bin(), script,      src,          dst, "--source",
                        (char *)ckpt,         "--weights", (char *)wset, NULL};
        int prc = proc_run(args, 0, &err);
        if (prc != 0) {
            if (prc > 0)
                kf_err_set(&err, "%s %s failed (exit %d): no .ckpt written", args[0], script, prc);
            goto done;
        }
    }
    if (fs_exists(out)) {
        if (fs_rm_rf(old, &err) || fs_rename_atomic(out, old, &err)) goto done;
    }
    if (fs_rename_atomic(tmp, out, &err) || fs_rm_rf(old, &err)) goto done;
    printf("exported %s (%s, %s weights%s%s) to %s: %s\n", s.weights,
           m->cfg.kind == MODEL_PFLM ? "PFLM" : "AR", wset, s.stage[0] ? ", stage " : "", s.stage,
           out,
           fmt == MODEL_EXPORT_HF ? "model.safetensors, config.json, tokenizer files, README.md"
           : no_ckpt              ? "model.safetensors"
                                  : name);
    if (fmt == MODEL_EXPORT_RELEASE && no_ckpt)
        printf("make the .ckpt with: %s tools/release_ckpt.py %s/model.safetensors %s/%s\n",
               python_bin(), out, out, name);
    code = KF_EXIT_OK;
done:
    if (code) {
        kf_err_report("kf export", &err);
        kf_err e2;
        fs_rm_rf(tmp, &e2);
    }
    tok_free(tk);
    if (m) model_free(m);
    if (be) be->destroy(be);
    runconfig_free(ch.rc);
    return code;
}
