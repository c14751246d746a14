/* trainer/infer/genppl.c — `kf eval genppl`: Gen-PPL under a Hugging Face GPT-2
 * with re-tokenisation (see genppl.h). */
#include "trainer/infer/genppl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "kernels/kernels.h"
#include "tokenize/tokenizer.h"
#include "trainer/model/layout.h"
#include "trainer/model/model_hf.h"
#include "trainer/cli/omp_env.h"

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

size_t genppl_cleanup(char *s, size_t len) {
    /* transformers' PreTrainedTokenizerBase.clean_up_tokenization, in its order */
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t r = 0; r < sizeof from / sizeof *from; r++) {
        size_t fl = strlen(from[r]), tl = strlen(to[r]), w = 0;
        for (size_t i = 0; i < len;) {
            if (i + fl <= len && !memcmp(s + i, from[r], fl)) {
                memcpy(s + w, to[r], tl);
                w += tl;
                i += fl;
            } else {
                s[w++] = s[i++];
            }
        }
        len = w;
    }
    return len;
}

int64_t genppl_context(const model *ev) {
    return ev->cfg.pos == POS_LEARNED ? ev->cfg.n_positions : ev->cfg.seq_len;
}

void genppl_score(model *ev, int32_t *const *ids, const int64_t *lens, int64_t n, int64_t max_length,
                  int64_t batch, int progress, genppl_result *out) {
    memset(out, 0, sizeof *out);
    out->samples = n;
    int64_t ctx = genppl_context(ev), nw = 0, V = ev->cfg.vocab;
    /* the logits of a forward are [windows * ctx, V] floats: at most 1 GiB
     * (GPT-2's 50257 per row take 200 MB per 1024-token window) */
    int64_t fit = (int64_t)((1ull << 30) / ((uint64_t)ctx * (uint64_t)V * sizeof(float)));
    if (batch > fit) batch = fit > 1 ? fit : 1;
    /* windows: (sample, start, length), MDLM's split of each truncated text */
    for (int64_t i = 0; i < n; i++) {
        int64_t len = lens[i] < max_length ? lens[i] : max_length;
        nw += (len + ctx - 1) / ctx;
    }
    int64_t *ws = kf_malloc((size_t)(nw + 1) * 3 * sizeof(int64_t)), w = 0, total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = lens[i] < max_length ? lens[i] : max_length;
        for (int64_t s = 0; s < len; s += ctx, w++) {
            ws[3 * w] = i;
            ws[3 * w + 1] = s;
            ws[3 * w + 2] = len - s < ctx ? len - s : ctx;
            total += ws[3 * w + 2];
        }
        /* entropy of the sample's unigram distribution */
        if (len == 0) continue;
        int32_t *sorted = kf_malloc((size_t)len * sizeof(int32_t));
        memcpy(sorted, ids[i], (size_t)len * sizeof(int32_t));
        for (int64_t a = 1; a < len; a++) /* insertion sort: texts are short */
            for (int64_t b = a; b > 0 && sorted[b - 1] > sorted[b]; b--) {
                int32_t t = sorted[b];
                sorted[b] = sorted[b - 1];
                sorted[b - 1] = t;
            }
        double h = 0;
        for (int64_t a = 0; a < len;) {
            int64_t b = a;
            while (b < len && sorted[b] == sorted[a]) b++;
            double p = (double)(b - a) / (double)len;
            h -= p * log(p);
            a = b;
        }
        out->entropy += h;
        free(sorted);
    }
    int64_t nonempty = 0;
    for (int64_t i = 0; i < n; i++) nonempty += lens[i] > 0;
    out->entropy = nonempty ? out->entropy / (double)nonempty : NAN;
    if (progress) progress_begin("gen-ppl", (double)total, "tok");
    int32_t *bids = kf_malloc((size_t)(batch * ctx) * sizeof(int32_t)), *vl = kf_malloc((size_t)batch * sizeof(int32_t));
    int32_t *tg = kf_malloc((size_t)(batch * ctx) * sizeof(int32_t));
    float *nll = kf_malloc((size_t)(batch * ctx) * sizeof(float));
    model_ws *mws = model_ws_create(ev);
    kf_backend *be = ev->be;
    kf_precision saved = be->precision;
    be->set_precision(be, KF_PREC_FP32);
    int64_t done = 0;
    for (int64_t w0 = 0; w0 < nw; w0 += batch) {
        int64_t B = nw - w0 < batch ? nw - w0 : batch, L = 1;
        for (int64_t b = 0; b < B; b++) L = ws[3 * (w0 + b) + 2] > L ? ws[3 * (w0 + b) + 2] : L;
        memset(bids, 0, (size_t)(B * L) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++) {
            const int64_t *x = ws + 3 * (w0 + b);
            memcpy(bids + b * L, ids[x[0]] + x[1], (size_t)x[2] * sizeof(int32_t));
            vl[b] = (int32_t)x[2];
        }
        /* row t predicts token t+1 of its window; padding is neither attended nor scored */
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < L; t++) tg[b * L + t] = t + 1 < vl[b] ? bids[b * L + t + 1] : -1;
        layout lay;
        layout_ar(&lay, L);
        model_input in = {.lay = &lay, .B = B, .ids = bids, .valid_len = vl};
        model_forward(ev, mws, &in, 0, NULL);
        model_loss(ev, mws, tg, 0, 1.0f, NULL, nll);
        layout_free(&lay);
        for (int64_t b = 0; b < B; b++) {
            for (int64_t t = 0; t + 1 < vl[b]; t++) out->nll_sum += nll[b * L + t];
            out->tokens += vl[b] > 1 ? vl[b] - 1 : 0;
            done += vl[b];
        }
        if (progress) {
            char extra[64];
            snprintf(extra, sizeof extra, "ppl %.2f",
                     out->tokens ? exp(out->nll_sum / (double)out->tokens) : NAN);
            progress_update((double)done, extra);
        }
    }
    if (progress) progress_end();
    be->set_precision(be, saved);
    model_ws_free(mws);
    free(tg);
    out->gen_ppl = out->tokens ? exp(out->nll_sum / (double)out->tokens) : NAN;
    free(ws);
    free(bids);
    free(vl);
    free(nll);
}

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
    int32_t eos = tok_special_id(gen, "eos") >= 0 ? tok_special_id(gen, "eos") : tok_special_id(gen, "sep");
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
        return kf_err_set(err, "line %d: \"prefix\" and \"completion\" must be id arrays or strings",
                          (int)o->line);
    if (!gen) return kf_err_set(err, "line %d: id arrays need --vocab (the generator's tokenizer)", (int)o->line);
    tok_ids ids = {0};
    int rc = (pre && take_ids(pre, gen, 0, &ids, err)) || take_ids(comp, gen, 1, &ids, err);
    size_t at = txt->n;
    if (!rc) rc = tok_decode(gen, ids.v, ids.n, txt, err);
    if (!rc && !strcmp(tok_name(gen), "bert-uncased")) txt->n = at + genppl_cleanup(txt->v + at, txt->n - at);
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
    if (m && m->cfg.kind != MODEL_AR) {
        kf_err_set(err, "%s: the evaluator must be an AR model", path);
        model_free(m);
        return NULL;
    }
    return m;
}

int genppl_main(int argc, char **argv) {
    const char *file = NULL, *evdir = NULL, *vocab = NULL, *backend = "cpu", *json_out = NULL;
    int64_t max_length = 0, batch = 8;
    const cli_opt opts[] = {
        {"--evaluator", CLI_STR, .out = &evdir},
        {"--vocab", CLI_STR, .out = &vocab},
        {"--backend", CLI_STR, .out = &backend},
        {"--json", CLI_STR, .out = &json_out},
        {"--max-length", CLI_INT, .out = &max_length, .lo = 1, .hi = INFINITY},
        {"--batch", CLI_INT, .out = &batch, .lo = 1, .hi = INFINITY},
        {NULL},
    };
    const cli_spec spec = {"kf eval genppl", USAGE, opts, .pos = &file, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc - 1, argv + 1, &code)) return code; /* argv[1] is "genppl" */
    if (!evdir || !file) {
        fprintf(stderr, "kf eval genppl: FILE.jsonl and --evaluator DIR are required\n");
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    omp_env_passive();
    kf_err err = {{0}};
    kf_backend *be = kernels_create(backend, &err);
    model *ev = be ? load_evaluator(be, evdir, &err) : NULL;
    tok *evtok = NULL, *gen = NULL;
    char *text = NULL;
    int32_t **ids = NULL;
    int64_t *lens = NULL, n = 0;
    int rc = KF_EXIT_ERROR;
    if (!ev) goto out;
    if (!(evtok = tok_load("gpt2", evdir, &err))) goto out;
    if (tok_vocab_size(evtok) > ev->cfg.vocab) {
        kf_err_set(&err, "%s: the tokenizer has %lld ids, the model %lld", evdir, (long long)tok_vocab_size(evtok),
                   (long long)ev->cfg.vocab);
        goto out;
    }
    if (vocab && !(gen = tok_load_dir(vocab, &err))) goto out;
    size_t len;
    if (fs_read_file(file, &text, &len, &err)) goto out;
    int64_t cap = 0, line = 0;
    for (char *p = text; p < text + len;) {
        char *e = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(text + len - p);
        line++;
        int blank = 1;
        for (size_t i = 0; i < l; i++) blank &= p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
        if (!blank) {
            char name[4200];
            snprintf(name, sizeof name, "%s:%lld", file, (long long)line);
            json_doc *d = json_parse(p, l, name, &err);
            if (!d) goto out;
            tok_bytes s = {0};
            int bad = json_root(d)->type != JSON_OBJECT
                          ? kf_err_set(&err, "%s: expected a JSON object", name)
                          : sample_text(json_root(d), gen, &s, &err);
            json_free(d);
            if (bad) {
                char msg[sizeof err.msg];
                snprintf(msg, sizeof msg, "%s", err.msg);
                kf_err_set(&err, "%s: %s", file, msg);
                tok_bytes_free(&s);
                goto out;
            }
            tok_ids t = {0};
            tok_encode(evtok, s.v ? s.v : "", s.n, 0, &t, NULL);
            tok_bytes_free(&s);
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                ids = kf_realloc(ids, (size_t)cap * sizeof *ids);
                lens = kf_realloc(lens, (size_t)cap * sizeof *lens);
            }
            ids[n] = t.v;
            lens[n++] = (int64_t)t.n;
        }
        p += l + (e ? 1 : 0);
    }
    if (!n) {
        kf_err_set(&err, "%s: no samples", file);
        goto out;
    }
    genppl_result r;
    int64_t ctx = genppl_context(ev);
    genppl_score(ev, ids, lens, n, max_length ? max_length : ctx, batch, 1, &r);
    char res[512];
    snprintf(res, sizeof res,
             "{\"samples\": %lld, \"tokens\": %lld, \"nll\": %.17g, \"gen_ppl\": %.17g, \"entropy\": %.17g, "
             "\"max_length\": %lld}\n",
             (long long)r.samples, (long long)r.tokens, r.tokens ? r.nll_sum / (double)r.tokens : NAN,
             r.gen_ppl, r.entropy, max_length ? max_length : (long long)ctx);
    fputs(res, stdout);
    if (json_out && fs_write_atomic(json_out, res, strlen(res), &err)) goto out;
    rc = KF_EXIT_OK;
out:
    if (rc != KF_EXIT_OK) fprintf(stderr, "kf eval genppl: %s\n", err.msg);
    for (int64_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
    free(lens);
    free(text);
    tok_free(gen);
    tok_free(evtok);
    model_free(ev);
    if (be) be->destroy(be);
    return rc;
}
