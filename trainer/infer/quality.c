/* trainer/infer/quality.c — Gen-PPL and distinct-n of completions (see quality.h). */
#include "trainer/infer/quality.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        len[i] = s[i].n_prefix + quality_clean(s[i].completion, s[i].n_completion, eos, strip,
                                               seq[i] + s[i].n_prefix);
        for (int64_t j = 0; j < len[i] && !rc; j++)
            if (seq[i][j] < 0 || seq[i][j] >= V)
                rc = kf_err_set(err,
                                "sample %lld: id %d at %lld is outside the evaluator's vocabulary "
                                "(%lld)",
                                (long long)i, seq[i][j], (long long)j, (long long)V);
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
        for (j = i + 1; j < n && ids[j] == ids[i]; j++) {
        }
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
            used += (size_t)snprintf(buf + used, cap - used, "%s%s %.2fx AR %s %.1f",
                                     reasons ? "; " : "", m[i].name, x, m[i].upper ? ">" : "<",
                                     m[i].bound);
        reasons++;
    }
    return reasons;
}
const char *quality_header(void) { return " Gen-PPL entropy dist-2 dist-3 length"; }

/* One right-aligned column of width w, "-" for a figure not measured. */
static size_t column(char *buf, size_t cap, int w, int prec, double v) {
    int n =
        isfinite(v) ? snprintf(buf, cap, " %*.*f", w, prec, v) : snprintf(buf, cap, " %*s", w, "-");
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
