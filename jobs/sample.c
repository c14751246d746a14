/* jobs/sample.c — completions of every model of the chain with their quality
 * and decoding speed after a local run (see sample.h). */
#include "jobs/sample.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/proc.h"
#include "common/strbuf.h"
#include "jobs/corpus_words.h"
#include "pipeline/build_config.h"
#include "tokenize/tokenizer.h"
#include "trainer/infer/quality.h"
#include "trainer/train/checkpoint.h"

/* 8 x 16 completions: enough that the quality ratios to AR move by a few
 * percent between seeds, not tens */
static const char *const prompts[] = {"The city council voted on Tuesday to",
                                      "Scientists say the new study shows that",
                                      "In a statement released on Monday, the company",
                                      "The first thing you notice about the game is",
                                      "She opened the door and saw",
                                      "The best way to learn a new language is",
                                      "After the game, the coach told reporters that",
                                      "It was a cold morning in the small town when"};
#define N_PROMPTS 8
#define PER_PROMPT 16 /* one decoding batch of 16 per prompt: tokens/s at batch 16 */
#define MAX_NEW 64

/* The prompts as ids, each after the BOS token (CLS for BERT) that starts
 * every training sample of either packing, and cut to half the context so
 * that completions keep the other half; *max_new is then what every model's
 * context holds, a multiple of kmax (a K-Forcing step emits k tokens).
 * Writes them to path; shown[i] is the text of prompt i as kept. */
static int write_prefixes(tok *tk, int64_t seq_len, int64_t kmax, const char *path,
                          char shown[][160], int64_t *max_new, bool *unchanged, kf_err *err) {
    int64_t cap = seq_len / 2, longest = 0;
    int32_t bos =
        tok_special_id(tk, "bos") >= 0 ? tok_special_id(tk, "bos") : tok_special_id(tk, "cls");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc = 0;
    for (int i = 0; i < N_PROMPTS && !rc; i++) {
        tok_ids ids = {0};
        if (bos >= 0) tok_ids_push(&ids, bos);
        int64_t skip = (int64_t)ids.n;
        tok_encode(tk, prompts[i], strlen(prompts[i]), 0, &ids, NULL);
        int64_t keep = cap > skip ? cap : skip + 1; /* at least one token of the prompt */
        int64_t n = (int64_t)ids.n < keep ? (int64_t)ids.n : keep;
        longest = n > longest ? n : longest;
        fprintf(f, "{\"prefix\": [");
        for (int64_t j = 0; j < n; j++) fprintf(f, j ? ", %d" : "%d", ids.v[j]);
        fprintf(f, "]}\n");
        tok_bytes b = {0};
        rc = tok_decode(tk, ids.v + skip, (size_t)(n - skip), &b, err);
        if (!rc) snprintf(shown[i], sizeof shown[i], "%.*s", (int)b.n, b.v);
        tok_bytes_free(&b);
        tok_ids_free(&ids);
    }
    fclose(f);
    /* AR needs P + N - 1 positions, K-Forcing P + N (N a multiple of k) */
    int64_t n = seq_len - longest < MAX_NEW ? seq_len - longest : MAX_NEW;
    *max_new = n - n % kmax;
    if (!rc && *max_new < 1)
        rc = kf_err_set(err,
                        "a context of %lld tokens leaves no room for %lld new tokens after a "
                        "%lld-token prompt",
                        (long long)seq_len, (long long)kmax, (long long)longest);
    char *old = NULL;
    size_t old_len = 0;
    kf_err ignored;
    *unchanged = !rc && fs_read_file(path, &old, &old_len, &ignored) == 0 && old_len == len &&
                 !memcmp(old, text, len);
    free(old);
    if (!rc && !*unchanged) rc = fs_write_atomic(path, text, len, err);
    free(text);
    return rc;
}

typedef struct result {
    double tps;    /* mean tokens/s over the output lines */
    char text[96]; /* the first completion, one line */
    quality_row q;
    double words, wdistinct; /* corpus-word rate and distinct words (corpus_words.h) */
} result;

static double number(const json *o, const char *key) {
    const json *v = json_get(o, key);
    return v && v->type == JSON_NUMBER ? v->num : NAN;
}

/* The first completion of kf sample's output as one line: control characters
 * become spaces, cut at a UTF-8 boundary. */
static void first_text(const json *tx, result *r) {
    size_t j = 0, len = tx->str.len;
    const unsigned char *t = (const unsigned char *)tx->str.s;
    for (; j < len && j + 4 < sizeof r->text; j++) r->text[j] = t[j] < 0x20 ? ' ' : (char)t[j];
    if (j < len) {
        while (j > 0 && (t[j] & 0xC0) == 0x80) j--;
        memcpy(r->text + j, "...", 4);
    } else {
        r->text[j] = 0;
    }
}

/* Reads kf sample's JSONL (text, from name): the mean tokens/s, the first
 * completion and the word figures against cw into r. With sha, fails unless every line is one of
 * the N_PROMPTS x PER_PROMPT completions this step asks for (weights sha, k, max_new and seed): the
 * test that a rerun may keep the file. */
static int read_samples(char *text, const char *name, const char *sha, int k, int64_t max_new,
                        const corpus_words *cw, result *r, kf_err *err) {
    int rv = 0, lines = 0;
    memset(r, 0, sizeof *r);
    words_tally *wt = words_tally_new();
    for (char *line = text; *line && !rv;) {
        char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        json_doc *d = json_parse(line, n, name, err);
        if (!d) {
            rv = -1;
            break;
        }
        const json *o = json_root(d), *tx = json_get(o, "text"), *ms = json_get(o, "model_sha256");
        const json *c = json_get(o, "completion");
        if (sha &&
            (!ms || ms->type != JSON_STRING || strcmp(ms->str.s, sha) || number(o, "k") != k ||
             number(o, "seed") != 1 || !c || c->type != JSON_ARRAY || (int64_t)c->n != max_new))
            rv = kf_err_set(err, "%s: line %d is not from these weights and settings", name,
                            lines + 1);
        r->tps += number(o, "tokens_per_s");
        if (!lines && tx && tx->type == JSON_STRING) first_text(tx, r);
        if (tx && tx->type == JSON_STRING && c && c->type == JSON_ARRAY) {
            /* stopped by EOS: the completion's ids hold the EOS the file records */
            bool stopped = false;
            double eos = number(o, "eos");
            for (size_t j = 0; j < c->n && !stopped; j++)
                stopped = c->kids[j].type == JSON_NUMBER && c->kids[j].num == eos;
            words_tally_add(wt, cw, tx->str.s, tx->str.len, stopped, lines / PER_PROMPT);
        }
        lines++;
        json_free(d);
        line = end ? end + 1 : line + n;
    }
    if (!rv && lines == 0) rv = kf_err_set(err, "%s: no completions", name);
    if (!rv && sha && lines != N_PROMPTS * PER_PROMPT)
        rv = kf_err_set(err, "%s: %d completions, not %d", name, lines, N_PROMPTS * PER_PROMPT);
    if (!rv) r->tps /= lines;
    words_tally_result(wt, &r->words, &r->wdistinct, NULL);
    words_tally_free(wt);
    return rv;
}

/* True when out_path holds this step's completions from the weights whose
 * sha256 is sha (a rerun of a complete run keeps them), read into r. */
static bool samples_current(const char *out_path, const char *sha, int k, int64_t max_new,
                            const corpus_words *cw, result *r) {
    char *text;
    size_t len;
    kf_err ignored;
    if (fs_read_file(out_path, &text, &len, &ignored)) return false;
    bool ok = read_samples(text, out_path, sha, k, max_new, cw, r, &ignored) == 0;
    free(text);
    return ok;
}

/* Scores out_path with kf eval --completions under the AR checkpoint
 * eval_ckpt into r->q. */
static int score_samples(const char *kf, const char *out_path, const char *eval_ckpt, int32_t eos,
                         result *r, kf_err *err) {
    char ebuf[16];
    snprintf(ebuf, sizeof ebuf, "%d", eos);
    char *ev[] = {(char *)kf,       "eval",        "--completions",
                  (char *)out_path, "--evaluator", (char *)eval_ckpt,
                  "--eos",          ebuf,          NULL};
    char *out;
    int code = proc_capture(ev, &out, false, err);
    if (code < 0) return -1;
    json_doc *d = code ? NULL : json_parse(out, strlen(out), "kf eval output", err);
    free(out);
    if (code) return kf_err_set(err, "kf eval --completions %s failed (exit %d)", out_path, code);
    if (!d) return -1;
    const json *o = json_root(d);
    r->q = (quality_row){.gen_ppl = number(o, "gen_ppl"),
                         .st = {.samples = N_PROMPTS * PER_PROMPT,
                                .distinct = {number(o, "distinct_1"), number(o, "distinct_2"),
                                             number(o, "distinct_3")},
                                .entropy = number(o, "entropy"),
                                .mean_len = number(o, "mean_len")}};
    json_free(d);
    return 0;
}

/* Runs kf sample, keeps its JSONL in out_path and reads tokens/s and the
 * first completion into r. */
static int sample_one(const char *kf, const char *ckpt, int k, const char *prefixes,
                      const char *vocab, int64_t max_new, const char *out_path,
                      const corpus_words *cw, result *r, kf_err *err) {
    char kbuf[16], nbuf[24], pbuf[16];
    snprintf(kbuf, sizeof kbuf, "%d", k);
    snprintf(nbuf, sizeof nbuf, "%lld", (long long)max_new);
    snprintf(pbuf, sizeof pbuf, "%d", PER_PROMPT);
    /* plain sampling at tau 1 (no penalty): the distribution the paper compares */
    char *argv[] = {(char *)kf,
                    "sample",
                    (char *)ckpt,
                    "--k",
                    kbuf,
                    "--tau",
                    "1",
                    "--freq-penalty",
                    "0",
                    "--prefix-file",
                    (char *)prefixes,
                    "--vocab",
                    (char *)vocab,
                    "--n-per-prefix",
                    pbuf,
                    "--batch",
                    pbuf,
                    "--max-new",
                    nbuf,
                    "--seed",
                    "1",
                    NULL};
    char *out;
    int code = proc_capture(argv, &out, false, err);
    if (code < 0) return -1;
    if (code) {
        free(out);
        return kf_err_set(err, "kf sample %s --k %d failed (exit %d)", ckpt, k, code);
    }
    int rv = fs_write_atomic(out_path, out, strlen(out), err);
    if (!rv) rv = read_samples(out, out_path, NULL, k, max_new, cw, r, err);
    free(out);
    return rv;
}

/* The reasons row r misses a target (quality.h's margins of AR's quality,
 * corpus_words.h's word targets) into buf, "" when it meets them all; ar_row:
 * r is AR's own row (ar), held to the absolute word target. A word figure is
 * given to three decimals: the table's two can round a miss up to its target. */
static void flag_reasons(const result *r, const result *ar, bool ar_row, char *buf, size_t cap) {
    int n = quality_flag(&r->q, &ar->q, buf, cap);
    size_t u = strlen(buf);
    double ratio = r->words / ar->words;
    if (!isfinite(r->words)) {
        if (u < cap) snprintf(buf + u, cap - u, "%sno whole lower-case words", n ? "; " : "");
        return;
    }
    if (ar_row && !(r->words >= WORDS_MIN_AR_RATE) && u < cap)
        u += (size_t)snprintf(buf + u, cap - u, "%swords %.3f < %.2f", n++ ? "; " : "", r->words,
                              WORDS_MIN_AR_RATE);
    if (!ar_row && !(ratio >= WORDS_MIN_RATE_RATIO) && u < cap)
        u += (size_t)snprintf(buf + u, cap - u, "%swords %.3fx AR < %.2f", n++ ? "; " : "", ratio,
                              WORDS_MIN_RATE_RATIO);
    if (!(r->wdistinct >= WORDS_MIN_DISTINCT) && u < cap)
        snprintf(buf + u, cap - u, "%sw-dist %.3f < %.2f", n ? "; " : "", r->wdistinct,
                 WORDS_MIN_DISTINCT);
}

/* Prints a line of the sampling table and keeps it in *t, which is saved as
 * RUN/samples/table.txt (kf export's model card quotes it). */
static void table_line(strbuf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void table_line(strbuf *t, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap); /* whole lines: the header names a path */
    va_end(ap);
    char *line = kf_malloc((size_t)n + 1);
    vsnprintf(line, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    fputs(line, stdout);
    strbuf_puts(t, line);
    free(line);
}

int sample_run(const char *run, const runconfig *rc, const char *kf, kf_err *err) {
    char *help[] = {(char *)kf, "sample", "--help", NULL}, *ignored;
    int code = proc_capture(help, &ignored, true, err);
    free(ignored);
    if (code) {
        fprintf(stderr, "kf jobs: samples skipped: this build has no kf sample\n");
        return 0;
    }
    char *vocab, *kind;
    if (build_config_train_vocab(rc, &vocab, &kind, err)) return -1;
    if (!vocab) {
        fprintf(stderr,
                "kf jobs: samples skipped: no `shards:` set of the config has out: %s "
                "(its vocab: would encode the prompts)\n",
                rc->data_train);
        return 0;
    }
    const runconfig_stage *ar = NULL;
    int64_t kmax = 1;
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *s = &rc->stages[i];
        if (s->kind == RC_KIND_AR && !ar) ar = s;
        if ((s->kind == RC_KIND_DISTILL_AR || s->kind == RC_KIND_SELF_FORCING) && s->k > kmax)
            kmax = s->k;
    }
    /* no AR stage: an imported AR, the teacher of a distill_ar stage */
    for (int i = 0; i < rc->n_stages && !ar; i++) {
        const runconfig_stage *s = &rc->stages[i];
        if (s->kind == RC_KIND_DISTILL_AR && s->teacher_stage >= 0 &&
            rc->stages[s->teacher_stage].kind == RC_KIND_IMPORT)
            ar = &rc->stages[s->teacher_stage];
    }
    if (!ar) {
        free(vocab), free(kind);
        fprintf(stderr, "kf jobs: samples skipped: no `ar` stage nor an imported teacher of a "
                        "distill_ar stage (the AR that scores the samples)\n");
        return 0;
    }
    char dir[PATH_MAX], prefixes[PATH_MAX + 32], eval_ckpt[PATH_MAX + 64], shown[N_PROMPTS][160];
    snprintf(dir, sizeof dir, "%s/samples", run);
    snprintf(prefixes, sizeof prefixes, "%s/prefixes.jsonl", dir);
    snprintf(eval_ckpt, sizeof eval_ckpt, "%s/stages/%s/final/model.safetensors", run, ar->name);
    tok *tk = tok_load(kind, vocab, err);
    int64_t max_new = 0;
    bool same_prefixes = false;
    int rv = tk ? 0 : -1;
    int32_t eos = tk ? tok_special_id(tk, "eos") : -1;
    if (tk && eos < 0) eos = tok_special_id(tk, "sep");
    if (!rv) rv = fs_mkdir_p(dir, err);
    if (!rv)
        rv = write_prefixes(tk, rc->model.seq_len, kmax, prefixes, shown, &max_new, &same_prefixes,
                            err);
    /* the words of the run's own training text: do completions use them? */
    corpus_words *cw = NULL;
    if (!rv) rv = corpus_words_load(rc->data_train, tk, &cw, err);
    tok_free(tk);
    free(kind);
    if (rv) return free(vocab), -1;

    strbuf table = {0};
    table_line(&table,
               "\nsamples: %d prompts x %d completions of up to %lld tokens at tau 1, batch %d "
               "(CPU, one process), in %s/\n",
               N_PROMPTS, PER_PROMPT, (long long)max_new, PER_PROMPT, dir);
    table_line(&table,
               "quality: Gen-PPL under %s; entropy: mean unigram entropy (nats) per completion; "
               "dist-n: distinct n-grams; length: mean tokens before EOS.\n",
               ar->name);
    table_line(&table,
               "words: share of the whole lower-case words that occur >= 2 times in the "
               "training text (%s, %lld distinct words); w-dist: distinct words / words among "
               "a prompt's completions, mean over the prompts.\n",
               rc->data_train, (long long)corpus_words_distinct(cw));
    table_line(&table,
               "FLAG: Gen-PPL > %.1fx, entropy < %.1fx or length < %.1fx AR's; words < %.2f (AR) "
               "or < %.2fx AR's; w-dist < %.2f\n\n",
               QUALITY_MAX_PPL_RATIO, QUALITY_MIN_ENTROPY_RATIO, QUALITY_MIN_LENGTH_RATIO,
               WORDS_MIN_AR_RATE, WORDS_MIN_RATE_RATIO, WORDS_MIN_DISTINCT);
    table_line(&table, "%-6s %3s %9s %6s %s %5s %6s\n", "model", "k", "tokens/s", "vs AR",
               quality_header(), "words", "w-dist");
    enum { MAX_ROWS = 64 };
    result *rows = kf_calloc(MAX_ROWS, sizeof *rows);
    char names[MAX_ROWS][40];
    int n = 0, kept = 0;
    /* AR first (the baseline of every ratio), then every PFLM stage at each k */
    for (int i = -1; i < rc->n_stages && !rv; i++) {
        const runconfig_stage *s = i < 0 ? ar : &rc->stages[i];
        int pflm = s->kind == RC_KIND_DISTILL_AR || s->kind == RC_KIND_SELF_FORCING;
        if (i >= 0 && !pflm) continue;
        for (int k = 1; k <= (pflm ? s->k : 1) && !rv && n < MAX_ROWS; k *= 2) {
            char ckpt[PATH_MAX + 64], out[PATH_MAX + 64];
            snprintf(ckpt, sizeof ckpt, "%s/stages/%s/final", run, s->name);
            snprintf(out, sizeof out, "%s/%s-k%d.jsonl", dir, s->name, k);
            result *r = &rows[n];
            /* a rerun keeps completions made from the same weights and prompts */
            char wf[PATH_MAX + 96], sha[65];
            rv = ckpt_resolve_teacher(ckpt, wf, sizeof wf, sha, err);
            if (!rv && same_prefixes && samples_current(out, sha, k, max_new, cw, r)) kept++;
            else if (!rv) rv = sample_one(kf, ckpt, k, prefixes, vocab, max_new, out, cw, r, err);
            if (!rv) rv = score_samples(kf, out, eval_ckpt, eos, r, err);
            if (rv) break;
            snprintf(names[n++], sizeof names[0], "%s k=%d", s->name, k);
            char vs[16], q[256], why[320];
            snprintf(vs, sizeof vs, "%.2fx", r->tps / rows[0].tps);
            quality_format(&r->q, NULL, q, sizeof q);
            flag_reasons(r, &rows[0], n == 1, why, sizeof why);
            table_line(&table, "%-6s %3d %9.0f %6s %s %5.2f %6.2f%s%s\n", s->name, k, r->tps, vs, q,
                       r->words, r->wdistinct, why[0] ? "  FLAG: " : "", why);
            fflush(stdout);
        }
    }
    if (kept)
        printf("\n%d of %d rows kept the completions of an earlier run from the same weights "
               "(their tokens/s as measured then; remove %s to sample again)\n",
               kept, n, dir);
    if (n) printf("\nfirst completion of each (prompt: \"%s\"):\n", shown[0]);
    for (int i = 0; i < n; i++) {
        /* GPT-2 pieces carry their leading space; WordPiece text does not */
        const char *sep = rows[i].text[0] == ' ' || !rows[i].text[0] ? "" : " ";
        /* text stops at the first EOS: say so when that is the first token */
        printf("  %-9s \"%s%s%s\"%s\n", names[i], shown[0], sep, rows[i].text,
               rows[i].text[0] ? "" : "  (EOS at once)");
    }
    if (!rv && n) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/table.txt", dir);
        rv = fs_write_atomic(path, table.s, table.len, err);
    }
    free(table.s);
    free(rows);
    free(vocab);
    corpus_words_free(cw);
    return rv;
}
