/* trainer/infer/quality.c — Gen-PPL and distinct-n of completions (see quality.h). */
#include "trainer/infer/quality.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "kernels/kernels.h"
#include "trainer/model/layout.h"

int64_t quality_clean(const int32_t *ids, int64_t n, int32_t eos, int32_t strip, int32_t *out) {
    int64_t m = 0;
    for (int64_t i = 0; i < n && ids[i] != eos; i++)
        if (ids[i] != strip) out[m++] = ids[i];
    return m;
}

/* One scoring window: rows [start, start+len) of sample s's sequence. */
typedef struct window {
    int64_t sample, start, len;
} window;

int quality_genppl(model *ev, const quality_sample *s, int64_t n, int32_t eos, int64_t batch,
                   quality_ppl *out, kf_err *err) {
    if (ev->cfg.kind != MODEL_AR) return kf_err_set(err, "the evaluator must be an AR checkpoint");
    int64_t V = ev->cfg.vocab, S = ev->cfg.seq_len;
    int32_t strip = (int32_t)ev->cfg.mask_id;
    /* a pass's logits are [batch * S, V] floats: keep them within 1 GiB */
    int64_t fit = ((int64_t)1 << 28) / (S * V);
    if (batch > fit) batch = fit > 0 ? fit : 1;
    /* each sample's sequence: prefix ++ cleaned completion */
    int32_t **seq = kf_calloc((size_t)n, sizeof *seq);
    int64_t *len = kf_calloc((size_t)n, sizeof *len), nwin = 0;
    int rc = 0;
    for (int64_t i = 0; i < n; i++) {
        seq[i] = kf_malloc((size_t)(s[i].n_prefix + s[i].n_completion + 1) * sizeof(int32_t));
        memcpy(seq[i], s[i].prefix, (size_t)s[i].n_prefix * sizeof(int32_t));
        len[i] = s[i].n_prefix +
                 quality_clean(s[i].completion, s[i].n_completion, eos, strip, seq[i] + s[i].n_prefix);
        for (int64_t j = 0; j < len[i] && !rc; j++)
            if (seq[i][j] < 0 || seq[i][j] >= V)
                rc = kf_err_set(err, "sample %lld: id %d at %lld is outside the evaluator's vocabulary "
                                     "(%lld)", (long long)i, seq[i][j], (long long)j, (long long)V);
        /* windows of S rows overlapping by one, so every token after the
         * first is predicted exactly once */
        if (len[i] > 1) nwin += (len[i] - 2) / (S - 1) + 1;
    }
    window *w = kf_malloc((size_t)(nwin + 1) * sizeof *w);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t st = 0; len[i] > 1 && st < len[i] - 1; st += S - 1)
            w[k++] = (window){i, st, len[i] - st < S ? len[i] - st : S};
    out->nll_sum = 0;
    out->tokens = 0;
    model_ws *ws = model_ws_create(ev);
    int32_t *ids = kf_malloc((size_t)(batch * S) * sizeof(int32_t));
    int32_t *tg = kf_malloc((size_t)(batch * S) * sizeof(int32_t));
    for (int64_t b0 = 0; b0 < nwin && !rc; b0 += batch) {
        int64_t B = nwin - b0 < batch ? nwin - b0 : batch, L = 0;
        for (int64_t b = 0; b < B; b++) L = w[b0 + b].len > L ? w[b0 + b].len : L;
        for (int64_t b = 0; b < B; b++) {
            const window *x = &w[b0 + b];
            const int32_t *q = seq[x->sample] + x->start;
            int64_t np = s[x->sample].n_prefix;
            for (int64_t t = 0; t < L; t++) {
                /* padding rows come after the window: causal attention keeps
                 * them out of the scored rows */
                ids[b * L + t] = t < x->len ? q[t] : 0;
                int64_t next = x->start + t + 1; /* index of the predicted token */
                tg[b * L + t] = t + 1 < x->len && next >= np ? q[t + 1] : -1;
            }
        }
        layout l;
        layout_ar(&l, L);
        model_input in = {.lay = &l, .B = B, .ids = ids};
        model_forward(ev, ws, &in, 0, NULL);
        int64_t count;
        out->nll_sum += model_loss(ev, ws, tg, 0, 1.0f, &count, NULL);
        out->tokens += count;
        layout_free(&l);
    }
    out->ppl = out->tokens ? exp(out->nll_sum / (double)out->tokens) : NAN;
    model_ws_free(ws);
    free(ids);
    free(tg);
    free(w);
    for (int64_t i = 0; i < n; i++) free(seq[i]);
    free(seq);
    free(len);
    return rc;
}

/* An open-addressing set of n-grams packed into 63 bits (21 bits per id). */
typedef struct gram_set {
    uint64_t *slot; /* 0 = empty; keys are stored + 1 */
    size_t cap, n;
} gram_set;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static void gram_put(gram_set *g, uint64_t key) {
    if (2 * (g->n + 1) > g->cap) {
        gram_set big = {kf_calloc(g->cap * 2, sizeof(uint64_t)), g->cap * 2, 0};
        for (size_t i = 0; i < g->cap; i++)
            if (g->slot[i]) gram_put(&big, g->slot[i] - 1);
        free(g->slot);
        *g = big;
    }
    size_t i = mix(key) & (g->cap - 1);
    while (g->slot[i] && g->slot[i] != key + 1) i = (i + 1) & (g->cap - 1);
    if (!g->slot[i]) g->slot[i] = key + 1, g->n++;
}

void quality_distinct(const quality_sample *s, int64_t n, int32_t eos, int32_t strip, int nmax,
                      double *out) {
    KF_CHECK(nmax >= 1 && nmax <= 3, "quality_distinct: n must be 1..3");
    for (int g = 1; g <= nmax; g++) {
        gram_set set = {kf_calloc(1024, sizeof(uint64_t)), 1024, 0};
        int64_t total = 0;
        for (int64_t i = 0; i < n; i++) {
            int32_t *c = kf_malloc((size_t)(s[i].n_completion + 1) * sizeof(int32_t));
            int64_t m = quality_clean(s[i].completion, s[i].n_completion, eos, strip, c);
            for (int64_t t = 0; t + g <= m; t++) {
                uint64_t key = 0;
                for (int j = 0; j < g; j++) key = key << 21 | ((uint64_t)c[t + j] & 0x1fffff);
                gram_put(&set, key);
                total++;
            }
            free(c);
        }
        out[g - 1] = total ? (double)set.n / (double)total : NAN;
        free(set.slot);
    }
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Entropy (nats) of the histogram of ids[0..n), which it sorts. */
static double unigram_entropy(int32_t *ids, int64_t n) {
    qsort(ids, (size_t)n, sizeof *ids, cmp_id);
    double h = 0;
    for (int64_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && ids[j] == ids[i]; j++) {}
        double p = (double)(j - i) / (double)n;
        h -= p * log(p);
    }
    return h;
}

void quality_stats_compute(const quality_sample *s, int64_t n, int32_t eos, int32_t strip,
                           quality_stats *out) {
    out->samples = n;
    quality_distinct(s, n, eos, strip, 3, out->distinct);
    double h = 0, len = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t *c = kf_malloc((size_t)(s[i].n_completion + 1) * sizeof(int32_t));
        int64_t m = quality_clean(s[i].completion, s[i].n_completion, eos, strip, c);
        h += unigram_entropy(c, m);
        len += (double)m;
        free(c);
    }
    out->entropy = n ? h / (double)n : NAN;
    out->mean_len = n ? len / (double)n : NAN;
}

int quality_flag(const quality_row *r, const quality_row *ar, char *buf, size_t cap) {
    const struct {
        const char *name;
        double got, ref, bound;
        int upper; /* 1: got/ref must stay <= bound; 0: >= bound */
    } m[] = {{"Gen-PPL", r->gen_ppl, ar->gen_ppl, QUALITY_MAX_PPL_RATIO, 1},
             {"entropy", r->st.entropy, ar->st.entropy, QUALITY_MIN_ENTROPY_RATIO, 0},
             {"length", r->st.mean_len, ar->st.mean_len, QUALITY_MIN_LENGTH_RATIO, 0}};
    int reasons = 0;
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if (!isfinite(m[i].got) || !isfinite(m[i].ref) || !(m[i].ref > 0)) continue;
        double x = m[i].got / m[i].ref;
        if (m[i].upper ? x <= m[i].bound : x >= m[i].bound) continue;
        if (used < cap)
            used += (size_t)snprintf(buf + used, cap - used, "%s%s %.2fx AR %s %.1f", reasons ? "; " : "",
                                     m[i].name, x, m[i].upper ? ">" : "<", m[i].bound);
        reasons++;
    }
    return reasons;
}
const char *quality_header(void) { return " Gen-PPL entropy dist-2 dist-3 length"; }

/* One right-aligned column of width w, "-" for a figure not measured. */
static size_t column(char *buf, size_t cap, int w, int prec, double v) {
    int n = isfinite(v) ? snprintf(buf, cap, " %*.*f", w, prec, v) : snprintf(buf, cap, " %*s", w, "-");
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap;
}

void quality_format(const quality_row *r, const quality_row *ar, char *buf, size_t cap) {
    size_t u = 0;
    buf[0] = 0;
    u += column(buf + u, cap - u, 7, r->gen_ppl < 1000 ? 1 : 0, r->gen_ppl);
    u += column(buf + u, cap - u, 7, 2, r->st.entropy);
    u += column(buf + u, cap - u, 6, 2, r->st.distinct[1]);
    u += column(buf + u, cap - u, 6, 2, r->st.distinct[2]);
    u += column(buf + u, cap - u, 6, 1, r->st.mean_len);
    char why[160];
    if (ar && quality_flag(r, ar, why, sizeof why)) snprintf(buf + u, cap - u, "  FLAG: %s", why);
}

/* ---- kf eval --completions FILE --evaluator CKPT ---- */

static const char USAGE[] =
    "usage: kf eval --completions FILE.jsonl --evaluator CKPT [--eos ID] [--batch B]\n"
    "               [--backend cpu|cuda|auto]\n"
    "\n"
    "Quality of generated completions (`kf sample` output: one JSON object per line with\n"
    "\"prefix\" and \"completion\" id arrays): Gen-PPL under the AR checkpoint CKPT (each\n"
    "completion truncated at its first EOS and stripped of the mask token, scored with its\n"
    "prefix as context; corpus-level exp of the token-weighted mean NLL) and distinct-1/2/3\n"
    "(distinct n-grams / n-grams over all truncated completions). CKPT must use the\n"
    "completions' tokenizer. Prints one JSON object on stdout.\n"
    "\n"
    "  --eos ID      end-of-sequence id (default: 50256 for a GPT-2 vocabulary, 102 [SEP]\n"
    "                for bert-base-uncased; -1: no truncation)\n"
    "  --batch B     scoring windows per forward pass (default 16)\n"
    "  --backend     cpu, cuda or auto (default auto)\n";

/* Reads an array of ids; NULL node = absent. */
static int read_ids(const json *a, const char *what, const char *path, int64_t line, int32_t **out,
                    int64_t *n, kf_err *err) {
    if (!a || a->type != JSON_ARRAY)
        return kf_err_set(err, "%s:%lld: \"%s\" must be an array of token ids", path, (long long)line, what);
    *out = kf_malloc((a->n + 1) * sizeof(int32_t));
    for (size_t i = 0; i < a->n; i++) {
        const json *v = &a->kids[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->i < 0 || v->i > INT32_MAX) {
            free(*out);
            *out = NULL;
            return kf_err_set(err, "%s:%lld: \"%s\"[%zu] is not a token id", path, (long long)line, what, i);
        }
        (*out)[i] = (int32_t)v->i;
    }
    *n = (int64_t)a->n;
    return 0;
}

/* Loads every line of a completions file. */
static int load_completions(const char *path, quality_sample **out, int64_t *n, kf_err *err) {
    char *text;
    size_t len;
    if (fs_read_file(path, &text, &len, err)) return -1;
    quality_sample *s = NULL;
    int64_t cnt = 0, cap = 0, line = 0;
    int rc = 0;
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

/* ", KEY: value" with null for a value that is not finite (no NaN in JSON). */
static void json_number(const char *key, double v) {
    if (isfinite(v)) printf(", \"%s\": %.6g", key, v);
    else printf(", \"%s\": null", key);
}

int quality_eval_main(int argc, char **argv) {
    const char *file = NULL, *evp = NULL, *backend = "auto";
    int64_t batch = 16, eos = -2; /* -2: from the vocabulary */
    const cli_opt opts[] = {
        {"--completions", CLI_STR, .out = &file},
        {"--evaluator", CLI_STR, .out = &evp},
        {"--backend", CLI_STR, .out = &backend},
        {"--eos", CLI_INT, .out = &eos, .lo = -1, .hi = INFINITY},
        {"--batch", CLI_INT, .out = &batch, .lo = 1, .hi = INFINITY},
        {NULL},
    };
    const cli_spec spec = {"kf eval", USAGE, opts, .max_pos = 0};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!file || !evp) {
        fprintf(stderr, "kf eval: --completions and --evaluator are both required for quality metrics\n");
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
    if (!fs_exists(evp)) {
        fprintf(stderr, "kf eval: error: evaluator %s: no such file\n", evp);
        return KF_EXIT_ERROR;
    }
    if (load_completions(file, &s, &n, &err)) {
        fprintf(stderr, "kf eval: error: %s\n", err.msg);
        return KF_EXIT_ERROR;
    }
    kf_backend *be = kernels_create(backend, &err);
    model *ev = be ? model_load(be, evp, &err) : NULL;
    code = KF_EXIT_ERROR;
    quality_ppl ppl;
    if (ev && eos == -2) {
        int64_t V = ev->cfg.vocab;
        eos = V == 50257 || V == 50258 ? 50256 : V == 30522 ? 102 : -1;
        if (eos < 0)
            fprintf(stderr, "kf eval: no EOS id known for a vocabulary of %lld: completions are not "
                            "truncated (pass --eos ID)\n", (long long)V);
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
