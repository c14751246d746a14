/* trainer/cli/cli_eval_genppl.c — `kf eval genppl FILE.jsonl --evaluator DIR`:
 * the paper's Gen-PPL of a completions file (trainer/infer/genppl.h). Parse →
 * load the evaluator → read and re-tokenise the samples → score → report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/safetensors.h"
#include "kernels/kernels.h"
#include "tokenize/tokenizer.h"
#include "trainer/cli/cli_eval.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/genppl.h"
#include "trainer/model/model_hf.h"

static const char USAGE[] =
    "usage: kf eval genppl FILE.jsonl --evaluator DIR [--vocab DIR] [--max-length N]\n"
    "                      [--batch B] [--backend cpu|cuda|auto] [--json OUT]\n"
    "\n"
    "The paper's Gen-PPL: completions from any model scored by a Hugging Face GPT-2\n"
    "(the paper uses gpt2-large; docs/eval.md). DIR holds config.json, model.safetensors,\n"
    "vocab.json and merges.txt as published (or model.safetensors written by `kf import\n"
    "DIR --out`); the model runs as kforcing's model with GPT-2's options (model_hf.h).\n"
    "Each line of FILE is a `kf sample` object:\n"
    "\"prefix\" and \"completion\" as id arrays (detokenised with --vocab, the generating\n"
    "model's tokenizer: BERT ids (LM1B) are decoded and cleaned up as Hugging Face does,\n"
    "then re-tokenised with GPT-2) or as strings (the release's output: used as they\n"
    "are, cut at the first <|endoftext|> or [SEP]). The completion is cut at its first\n"
    "EOS; special tokens are dropped; the prefix is scored with it.\n"
    "Texts are scored in windows of the evaluator's context (each restarting it), every\n"
    "token after a window's first counted; Gen-PPL = exp(total NLL / tokens).\n"
    "\n"
    "  --vocab DIR      the generator's tokenizer (vocab.txt: bert, vocab.json: gpt2);\n"
    "                   needed for id arrays\n"
    "  --max-length N   GPT-2 tokens kept per sample (default: the evaluator's context;\n"
    "                   MDLM uses the generator's length, e.g. 128 on LM1B)\n"
    "  --batch B        windows per forward (default 8; fewer when their logits would\n"
    "                   exceed 1 GiB)\n"
    "  --json OUT       also write the result there\n"
    "(`kf import DIR --probe P` checks the evaluator's logits against a reference.)\n"
    "\n"
    "Prints one JSON object (samples, tokens, nll, gen_ppl, entropy) on stdout and a\n"
    "progress bar on stderr.\n";

typedef struct {
    const char *file, *evdir, *vocab, *backend, *json_out;
    int64_t max_length, batch;
} genppl_opts;

/* Whether id is one of gen's special tokens (or past its vocabulary: the mask id). */
static int is_special(const tok *gen, int32_t id) {
    static const char *const roles[] = {"eos", "bos", "cls", "sep", "pad", "unk", "mask"};
    if (id < 0 || id >= tok_vocab_size(gen)) return 1;
    for (size_t r = 0; r < sizeof roles / sizeof *roles; r++)
        if (tok_special_id(gen, roles[r]) == id) return 1;
    return 0;
}

/* Appends the ids of array a (kept: not special; stop: at the first EOS). */
static int take_ids(const json *a, const tok *gen, int stop_at_eos, tok_ids *out, kf_err *err) {
    int32_t eos =
        tok_special_id(gen, "eos") >= 0 ? tok_special_id(gen, "eos") : tok_special_id(gen, "sep");
    for (size_t i = 0; i < a->n; i++) {
        const json *v = &a->kids[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->i < 0 || v->i > INT32_MAX)
            return kf_err_set(err, "line %d: ids must be non-negative integers", (int)v->line);
        int32_t id = (int32_t)v->i;
        if (stop_at_eos && id == eos) break;
        if (!is_special(gen, id)) tok_ids_push(out, id);
    }
    return 0;
}

/* The text one sample is scored on (see genppl.h step 1); appended to txt. */
static int sample_text(const json *o, const tok *gen, tok_bytes *txt, kf_err *err) {
    const json *pre = json_get(o, "prefix"), *comp = json_get(o, "completion");
    if (!comp) return kf_err_set(err, "line %d: no \"completion\"", (int)o->line);
    if (comp->type == JSON_STRING) {
        /* text as the release writes it: decoded with special tokens kept, the
         * completion ending with its EOS; cut there */
        size_t n = comp->str.len;
        const char *eos[] = {"<|endoftext|>", "[SEP]"};
        for (int i = 0; i < 2; i++) {
            const char *at = strstr(comp->str.s, eos[i]);
            if (at && (size_t)(at - comp->str.s) < n) n = (size_t)(at - comp->str.s);
        }
        if (pre && pre->type == JSON_STRING) tok_bytes_append(txt, pre->str.s, pre->str.len);
        tok_bytes_append(txt, comp->str.s, n);
        return 0;
    }
    if (comp->type != JSON_ARRAY || (pre && pre->type != JSON_ARRAY))
        return kf_err_set(err,
                          "line %d: \"prefix\" and \"completion\" must be id arrays or strings",
                          (int)o->line);
    if (!gen)
        return kf_err_set(err, "line %d: id arrays need --vocab (the generator's tokenizer)",
                          (int)o->line);
    tok_ids ids = {0};
    int rc = (pre && take_ids(pre, gen, 0, &ids, err)) || take_ids(comp, gen, 1, &ids, err);
    size_t at = txt->n;
    if (!rc) rc = tok_decode(gen, ids.v, ids.n, txt, err);
    if (!rc && !strcmp(tok_name(gen), "bert-uncased"))
        txt->n = at + genppl_cleanup(txt->v + at, txt->n - at);
    tok_ids_free(&ids);
    return rc ? -1 : 0;
}

/* The evaluator in dir: a Hugging Face GPT-2, or a checkpoint `kf import`
 * wrote (kforcing metadata), which must be an AR model. */
static model *load_evaluator(kf_backend *be, const char *dir, kf_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    safetensors_file *f;
    if (safetensors_open(path, &f, err)) return NULL;
    int ours = safetensors_meta(f, "kf.hidden") != NULL;
    safetensors_close(f);
    model *m = ours ? model_load(be, path, err) : model_hf_gpt2_load(be, dir, err);
    if (m && (m->cfg.kind != MODEL_AR || m->cfg.bidir)) {
        kf_err_set(err, "%s: the evaluator must be a causal AR model", path);
        model_free(m);
        return NULL;
    }
    return m;
}

/* Reads every non-blank line of file into the evaluator's ids (steps 1
 * and 2 of genppl.h); *ids and *lens grow as lines are read, so the caller
 * frees the *n read even on an error. */
static int read_samples(const char *file, const tok *gen, tok *evtok, int32_t ***ids,
                        int64_t **lens, int64_t *n, kf_err *err) {
    char *text;
    size_t len;
    if (fs_read_file(file, &text, &len, err)) return -1;
    int64_t cap = 0, line = 0;
    int rc = -1;
    for (char *p = text; p < text + len;) {
        char *e = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(text + len - p);
        line++;
        int blank = 1;
        for (size_t i = 0; i < l; i++) blank &= p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
        if (!blank) {
            char name[4200];
            snprintf(name, sizeof name, "%s:%lld", file, (long long)line);
            json_doc *d = json_parse(p, l, name, err);
            if (!d) goto out;
            tok_bytes s = {0};
            int bad = json_root(d)->type != JSON_OBJECT
                          ? kf_err_set(err, "%s: expected a JSON object", name)
                          : sample_text(json_root(d), gen, &s, err);
            json_free(d);
            if (bad) {
                char msg[sizeof err->msg];
                snprintf(msg, sizeof msg, "%s", err->msg);
                kf_err_set(err, "%s: %s", file, msg);
                tok_bytes_free(&s);
                goto out;
            }
            tok_ids t = {0};
            tok_encode(evtok, s.v ? s.v : "", s.n, 0, &t, NULL);
            tok_bytes_free(&s);
            if (*n == cap) {
                cap = cap ? 2 * cap : 64;
                *ids = kf_realloc(*ids, (size_t)cap * sizeof **ids);
                *lens = kf_realloc(*lens, (size_t)cap * sizeof **lens);
            }
            (*ids)[*n] = t.v;
            (*lens)[(*n)++] = (int64_t)t.n;
        }
        p += l + (e ? 1 : 0);
    }
    rc = *n ? 0 : kf_err_set(err, "%s: no samples", file);
out:
    free(text);
    return rc;
}

/* Scores the samples and prints (and with --json writes) the result. */
static int report(model *ev, int32_t *const *ids, const int64_t *lens, int64_t n,
                  const genppl_opts *o, kf_err *err) {
    genppl_result r;
    int64_t ctx = genppl_context(ev);
    genppl_score(ev, ids, lens, n, o->max_length ? o->max_length : ctx, o->batch, 1, &r);
    char res[512];
    snprintf(res, sizeof res,
             "{\"samples\": %lld, \"tokens\": %lld, \"nll\": %.17g, \"gen_ppl\": %.17g, "
             "\"entropy\": %.17g, \"max_length\": %lld}\n",
             (long long)r.samples, (long long)r.tokens,
             r.tokens ? r.nll_sum / (double)r.tokens : NAN, r.gen_ppl, r.entropy,
             o->max_length ? o->max_length : (long long)ctx);
    fputs(res, stdout);
    return o->json_out ? fs_write_atomic(o->json_out, res, strlen(res), err) : 0;
}

/* Loads the evaluator and both tokenizers, reads the samples, reports. */
static int run(const genppl_opts *o) {
    kf_err err = {{0}};
    kf_backend *be = kernels_create(o->backend, &err);
    model *ev = be ? load_evaluator(be, o->evdir, &err) : NULL;
    tok *evtok = NULL, *gen = NULL;
    int32_t **ids = NULL;
    int64_t *lens = NULL, n = 0;
    int rc = KF_EXIT_ERROR;
    if (!ev) goto out;
    if (!(evtok = tok_load("gpt2", o->evdir, &err))) goto out;
    if (tok_vocab_size(evtok) > ev->cfg.vocab) {
        kf_err_set(&err, "%s: the tokenizer has %lld ids, the model %lld", o->evdir,
                   (long long)tok_vocab_size(evtok), (long long)ev->cfg.vocab);
        goto out;
    }
    if (o->vocab && !(gen = tok_load_dir(o->vocab, &err))) goto out;
    if (read_samples(o->file, gen, evtok, &ids, &lens, &n, &err)) goto out;
    if (report(ev, ids, lens, n, o, &err)) goto out;
    rc = KF_EXIT_OK;
out:
    if (rc != KF_EXIT_OK) fprintf(stderr, "kf eval genppl: %s\n", err.msg);
    for (int64_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
    free(lens);
    tok_free(gen);
    tok_free(evtok);
    model_free(ev);
    if (be) be->destroy(be);
    return rc;
}

int genppl_main(int argc, char **argv) {
    genppl_opts o = {.backend = "cpu", .batch = 8};
    const cli_opt opts[] = {
        {"--evaluator", CLI_STR, .out = &o.evdir},
        {"--vocab", CLI_STR, .out = &o.vocab},
        {"--backend", CLI_STR, .out = &o.backend},
        {"--json", CLI_STR, .out = &o.json_out},
        {"--max-length", CLI_INT, .out = &o.max_length, .lo = 1, .hi = INFINITY},
        {"--batch", CLI_INT, .out = &o.batch, .lo = 1, .hi = INFINITY},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf eval genppl", USAGE, opts, .pos = &o.file, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc - 1, argv + 1, &code)) return code; /* argv[1] is "genppl" */
    if (!o.evdir || !o.file) {
        fprintf(stderr, "kf eval genppl: FILE.jsonl and --evaluator DIR are required\n");
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    omp_env_passive();
    return run(&o);
}
