/* trainer/cli/cli_eval_completions.c — `kf eval --completions FILE.jsonl
 * --evaluator CKPT`: the quality of `kf sample`'s completions
 * (trainer/infer/quality.h): Gen-PPL under an AR checkpoint, distinct-n,
 * entropy, length. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/runconfig.h"
#include "kernels/kernels.h"
#include "pipeline/build_config.h"
#include "tokenize/tokenizer.h"
#include "trainer/cli/cli_eval.h"
#include "trainer/infer/quality.h"
#include "trainer/train/checkpoint.h"

static const char USAGE[] =
    "usage: kf eval --completions FILE.jsonl --evaluator CKPT [--eos ID] [--batch B]\n"
    "               [--backend cpu|cuda|auto]\n"
    "\n"
    "Quality of generated completions (`kf sample` output: one JSON object per line with\n"
    "\"prefix\" and \"completion\" id arrays): Gen-PPL under the AR checkpoint CKPT (each\n"
    "completion truncated at its first EOS and stripped of the mask token, scored with its\n"
    "prefix as context; corpus-level exp of the token-weighted mean NLL) and distinct-1/2/3\n"
    "(distinct n-grams / n-grams over all truncated completions). CKPT must use the\n"
    "completions' tokenizer: a .safetensors file, a stage's final/ directory or a step-N\n"
    "checkpoint directory. Prints one JSON object on stdout.\n"
    "\n"
    "  --eos ID      end-of-sequence id (default: the \"eos\" that `kf sample` records in\n"
    "                each line, else that of the run CKPT is in (RUN/stages/...: the\n"
    "                vocabulary of its data.train's shards), else 50256 for a GPT-2\n"
    "                vocabulary, 102 [SEP] for bert-base-uncased; -1: no truncation)\n"
    "  --batch B     scoring windows per forward pass (default 16)\n"
    "  --backend     cpu, cuda or auto (default auto)\n";

/* Reads an array of ids; NULL node = absent. */
static int read_ids(const json *a, const char *what, const char *path, int64_t line, int32_t **out,
                    int64_t *n, kf_err *err) {
    if (!a || a->type != JSON_ARRAY)
        return kf_err_set(err, "%s:%lld: \"%s\" must be an array of token ids", path,
                          (long long)line, what);
    *out = kf_malloc((a->n + 1) * sizeof(int32_t));
    for (size_t i = 0; i < a->n; i++) {
        const json *v = &a->kids[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->i < 0 || v->i > INT32_MAX) {
            free(*out);
            *out = NULL;
            return kf_err_set(err, "%s:%lld: \"%s\"[%zu] is not a token id", path, (long long)line,
                              what, i);
        }
        (*out)[i] = (int32_t)v->i;
    }
    *n = (int64_t)a->n;
    return 0;
}

/* Loads every line of a completions file; *eos receives the "eos" its lines
 * record (-2: none does). */
static int load_completions(const char *path, quality_sample **out, int64_t *n, int64_t *eos,
                            kf_err *err) {
    char *text;
    size_t len;
    if (fs_read_file(path, &text, &len, err)) return -1;
    quality_sample *s = NULL;
    int64_t cnt = 0, cap = 0, line = 0;
    int rc = 0;
    *eos = -2;
    for (char *p = text; p < text + len && !rc;) {
        char *e = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(text + len - p);
        line++;
        char name[4200];
        snprintf(name, sizeof name, "%s (line %lld)", path, (long long)line);
        if (l > 0) {
            json_doc *d = json_parse(p, l, name, err);
            if (!d) {
                rc = -1;
                break;
            }
            const json *r = json_root(d);
            const json *c = json_get(r, "completion");
            if (!c || c->type != JSON_ARRAY) c = json_get(r, "completion_ids");
            const json *pr = json_get(r, "prefix");
            const json *e = json_get(r, "eos");
            if (e && (e->type != JSON_NUMBER || !e->is_int || e->i < -1 || e->i > INT32_MAX ||
                      (*eos != -2 && e->i != *eos))) {
                rc = kf_err_set(err,
                                "%s:%lld: \"eos\" is not the id the earlier lines record "
                                "(pass --eos ID)",
                                path, (long long)line);
                json_free(d);
                break;
            }
            if (e) *eos = e->i;
            if (cnt == cap) s = kf_realloc(s, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *s);
            quality_sample *q = &s[cnt];
            int32_t *pi = NULL, *ci = NULL;
            int64_t np = 0, nc = 0;
            if (read_ids(c, "completion", path, line, &ci, &nc, err) ||
                (pr && read_ids(pr, "prefix", path, line, &pi, &np, err))) {
                free(ci);
                rc = -1;
            } else {
                *q = (quality_sample){pi ? pi : kf_calloc(1, sizeof(int32_t)), np, ci, nc};
                cnt++;
            }
            json_free(d);
        }
        p += l + 1;
    }
    free(text);
    if (!rc && cnt == 0) rc = kf_err_set(err, "%s: no completions", path);
    if (rc) {
        for (int64_t i = 0; i < cnt; i++) free((void *)s[i].prefix), free((void *)s[i].completion);
        free(s);
        return -1;
    }
    *out = s;
    *n = cnt;
    return 0;
}

/* The EOS id of the run an evaluator inside RUN/stages/ belongs to: the
 * tokenizer of the shards its data.train was built with; -2 when it is not
 * in a run or the run's vocabulary is unknown. */
static int64_t run_eos(const char *evp) {
    char run[4096];
    const char *at = NULL;
    for (const char *p = strstr(evp, "/stages/"); p; p = strstr(p + 1, "/stages/")) at = p;
    if (at) snprintf(run, sizeof run, "%.*s", (int)(at - evp), evp);
    else if (!strncmp(evp, "stages/", 7)) snprintf(run, sizeof run, ".");
    else return -2;
    char yaml[4200];
    snprintf(yaml, sizeof yaml, "%s/run.yaml", run);
    runconfig *rc;
    kf_err err;
    if (!fs_exists(yaml) || runconfig_load(yaml, 0, NULL, &rc, &err)) return -2;
    char *vocab, *kind;
    kf_err ignored; /* a shards: section that no longer reads: the defaults below */
    build_config_train_vocab(rc, &vocab, &kind, &ignored);
    runconfig_free(rc);
    tok *tk = vocab ? tok_load(kind, vocab, &err) : NULL;
    int64_t eos = -2;
    if (tk) {
        eos =
            tok_special_id(tk, "eos") >= 0 ? tok_special_id(tk, "eos") : tok_special_id(tk, "sep");
        if (eos < 0) eos = -2;
        tok_free(tk);
    }
    free(vocab), free(kind);
    return eos;
}

/* ", KEY: value" with null for a value that is not finite (no NaN in JSON). */
static void json_number(const char *key, double v) {
    if (isfinite(v)) printf(", \"%s\": %.6g", key, v);
    else printf(", \"%s\": null", key);
}

int quality_eval_main(int argc, char **argv) {
    const char *file = NULL, *evp = NULL, *backend = "auto";
    int64_t batch = 16, eos = -2; /* -2: from the file, else from the vocabulary */
    const cli_opt opts[] = {
        {"--completions", CLI_STR, .out = &file},
        {"--evaluator", CLI_STR, .out = &evp},
        {"--backend", CLI_STR, .out = &backend},
        {"--eos", CLI_INT, .out = &eos, .lo = -1, .hi = INFINITY},
        {"--batch", CLI_INT, .out = &batch, .lo = 1, .hi = INFINITY},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf eval", USAGE, opts, .max_pos = 0};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!file || !evp) {
        fprintf(stderr,
                "kf eval: --completions and --evaluator are both required for quality metrics\n");
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto")) {
        fprintf(stderr, "kf eval: --backend must be cpu, cuda or auto\n");
        return KF_EXIT_USAGE;
    }
    kf_err err = {{0}};
    quality_sample *s = NULL;
    int64_t n = 0;
    char evf[4096], sha[65];
    int64_t file_eos;
    if (ckpt_resolve_teacher(evp, evf, sizeof evf, sha, &err)) {
        fprintf(stderr, "kf eval: error: evaluator %s\n", err.msg);
        return KF_EXIT_ERROR;
    }
    if (load_completions(file, &s, &n, &file_eos, &err)) {
        fprintf(stderr, "kf eval: error: %s\n", err.msg);
        return KF_EXIT_ERROR;
    }
    if (eos == -2) eos = file_eos;
    if (eos == -2) eos = run_eos(evp);
    kf_backend *be = kernels_create(backend, &err);
    model *ev = be ? model_load(be, evf, &err) : NULL;
    if (ev && ev->cfg.bidir) {
        kf_err_set(&err, "%s: the evaluator must be a causal model, not a masked-diffusion one",
                   evf);
        model_free(ev);
        ev = NULL;
    }
    code = KF_EXIT_ERROR;
    quality_ppl ppl;
    if (ev && eos == -2) {
        int64_t V = ev->cfg.vocab;
        eos = V == 50257 || V == 50258 ? 50256 : V == 30522 ? 102 : -1;
        if (eos < 0)
            fprintf(stderr,
                    "kf eval: no EOS id known for a vocabulary of %lld: completions are not "
                    "truncated (pass --eos ID)\n",
                    (long long)V);
    }
    if (ev && quality_genppl(ev, s, n, (int32_t)eos, batch, &ppl, &err) == 0) {
        quality_stats st;
        quality_stats_compute(s, n, (int32_t)eos, (int32_t)ev->cfg.mask_id, &st);
        printf("{\"samples\": %lld, \"tokens\": %lld", (long long)n, (long long)ppl.tokens);
        json_number("gen_ppl", ppl.ppl);
        json_number("nll", ppl.tokens ? ppl.nll_sum / (double)ppl.tokens : NAN);
        json_number("distinct_1", st.distinct[0]);
        json_number("distinct_2", st.distinct[1]);
        json_number("distinct_3", st.distinct[2]);
        json_number("entropy", st.entropy);
        json_number("mean_len", st.mean_len);
        printf(", \"eos\": %lld, \"evaluator\": ", (long long)eos);
        json_write_str(stdout, evp, strlen(evp));
        printf("}\n");
        code = KF_EXIT_OK;
    }
    if (code) fprintf(stderr, "kf eval: error: %s\n", err.msg);
    if (ev) model_free(ev);
    if (be) be->destroy(be);
    for (int64_t i = 0; i < n; i++) free((void *)s[i].prefix), free((void *)s[i].completion);
    free(s);
    return code;
}
