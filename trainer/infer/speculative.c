/* trainer/infer/speculative.c — speculative decoding with lossless
 * verification (see speculative.h). */
#include "trainer/infer/speculative.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

spec_draft spec_draft_of(const model *d) {
    if (d->cfg.kind == MODEL_PFLM && d->cfg.head == HEAD_SHARED) return SPEC_PTP;
    if (d->cfg.kind == MODEL_AR && d->cfg.head == HEAD_MEDUSA) return SPEC_MEDUSA;
    return SPEC_NONE;
}

const char *spec_draft_name(spec_draft d) {
    return d == SPEC_PTP ? "ptp" : d == SPEC_MEDUSA ? "medusa" : "none";
}

/* The verifier's tensors, which a Medusa model holds too (its heads' own
 * are the rest): 1 when every one is bitwise the same in d. */
static int same_backbone(const model *v, const model *d) {
    int same = 1;
    float *a = NULL, *b = NULL;
    for (int i = 0; i < v->n_tensors && same; i++) {
        const model_tensor *t = &v->tensors[i], *u = model_find(d, t->name);
        if (!u || u->numel != t->numel) return 0;
        size_t bytes = (size_t)t->numel * sizeof(float);
        a = kf_realloc(a, bytes);
        b = kf_realloc(b, bytes);
        v->be->download(v->be, a, v->params + t->offset, bytes);
        d->be->download(d->be, b, d->params + u->offset, bytes);
        same = memcmp(a, b, bytes) == 0;
    }
    free(a);
    free(b);
    return same;
}

void spec_medusa_attach(model *d, const model *v) {
    float *host = NULL;
    for (int i = 0; i < v->n_tensors; i++) {
        const model_tensor *t = &v->tensors[i], *u = model_find(d, t->name);
        KF_CHECK(u && u->numel == t->numel, "spec_medusa_attach: %s missing from the draft",
                 t->name);
        size_t bytes = (size_t)t->numel * sizeof(float);
        host = kf_realloc(host, bytes);
        v->be->download(v->be, host, v->params + t->offset, bytes);
        d->be->upload(d->be, d->params + u->offset, host, bytes);
    }
    free(host);
    model_params_changed(d);
}

int spec_check(const model *v, const model *d, const spec_opts *o, int64_t P, kf_err *err) {
    if (v->cfg.kind != MODEL_AR)
        return kf_err_set(err, "speculative decoding: the verifier must be an AR checkpoint");
    spec_draft kind = spec_draft_of(d);
    if (kind == SPEC_NONE)
        return kf_err_set(err, "speculative decoding: the draft must be a fully causal PFLM "
                               "(PTP: a noise_inversion_causal stage) or a Medusa model (a "
                               "medusa stage)");
    if (kind == SPEC_MEDUSA &&
        (d->cfg.hidden != v->cfg.hidden || d->cfg.heads != v->cfg.heads ||
         d->cfg.blocks != v->cfg.blocks || d->cfg.pos != v->cfg.pos ||
         d->cfg.norm_bias != v->cfg.norm_bias || d->cfg.attn_bias != v->cfg.attn_bias ||
         d->cfg.mask_id != v->cfg.mask_id || !same_backbone(v, d)))
        return kf_err_set(err, "speculative decoding: the Medusa draft's backbone is not the "
                               "verifier's (spec_medusa_attach gives it the verifier's weights)");
    if (d->cfg.vocab != v->cfg.vocab)
        return kf_err_set(err, "speculative decoding: draft vocabulary %lld, verifier's %lld",
                          (long long)d->cfg.vocab, (long long)v->cfg.vocab);
    if (o->k < 1 || o->k > d->cfg.k_train)
        return kf_err_set(err, "--k %lld: must be in [1, the draft's k_train = %lld]",
                          (long long)o->k, (long long)d->cfg.k_train);
    if (!(o->tau > 0)) return kf_err_set(err, "--tau %g: must be > 0", o->tau);
    if (o->max_new < 1) return kf_err_set(err, "--max-new must be >= 1");
    if (P < 1) return kf_err_set(err, "a prefix needs at least one token");
    int64_t ctx = v->cfg.seq_len < d->cfg.seq_len ? v->cfg.seq_len : d->cfg.seq_len;
    if (P + o->max_new > ctx)
        return kf_err_set(err,
                          "prefix of %lld tokens + %lld new tokens exceeds the models' context "
                          "of %lld (shorten the prefix or --max-new)",
                          (long long)P, (long long)o->max_new, (long long)ctx);
    return 0;
}

/* Max-heap of ids by (logit desc, id asc): the sorted order without sorting
 * all V ids, since the walk to z usually stops after a few. */
static int before(const float *l, int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static void sift(const float *l, int32_t *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(l, h[c + 1], h[c])) c++;
        if (!before(l, h[c], h[i])) return;
        int32_t t = h[c];
        h[c] = h[i];
        h[i] = t;
        i = c;
    }
}

int32_t spec_icdf_sorted(const float *logits, int64_t V, double tau, double z) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, (double)logits[v] / tau);
    for (int64_t v = 0; v < V; v++) sum += exp((double)logits[v] / tau - mx);
    int32_t *h = kf_malloc((size_t)V * sizeof *h);
    for (int64_t v = 0; v < V; v++) h[v] = (int32_t)v;
    for (int64_t i = V / 2 - 1; i >= 0; i--) sift(logits, h, V, i);
    double acc = 0, goal = z * sum;
    int32_t tok = h[0];
    for (int64_t n = V; n > 0; n--) {
        tok = h[0];
        acc += exp((double)logits[tok] / tau - mx);
        if (acc > goal) break;
        h[0] = h[n - 1];
        sift(logits, h, n - 1, 0);
    }
    free(h);
    return tok;
}

static int32_t first_max(const float *l, int64_t V) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (l[v] > l[best]) best = v;
    return (int32_t)best;
}

/* One row's decode: its own caches (B = 1), so rows that accept different
 * numbers of drafts never wait for each other. */
typedef struct row_ctx {
    model *v, *d;
    const model_heads *vh, *dh;
    const spec_opts *o;
    int64_t P;
    /* scratch for the largest pass: P prefix tokens + k drafts */
    int32_t *ids, *outrows, *seq, *drafts;
    double *z;
    uint8_t *noise;
    float *logits; /* the verify pass's logits (Medusa: every head's) */
    float *q;      /* Medusa: the drafts' logits, [k, V] */
    int32_t *dev_ids;
    /* the caches (B = 1), rewound for each row: a step shape's graphs
     * (model_decode_step) then serve every row, not one */
    model_cache *vc, *dc;
} row_ctx;

/* The verifier's token at position pos from its logits lg there. */
static int32_t verify_pick(const row_ctx *r, const float *lg, uint64_t key, int64_t pos) {
    if (r->o->greedy) return first_max(lg, r->v->cfg.vocab);
    double z = rng_uniform01(r->o->seed, key, (uint64_t)(pos - r->P));
    return spec_icdf_sorted(lg, r->v->cfg.vocab, r->o->tau, z);
}

static void run_row_ptp(row_ctx *r, const int32_t *prefix, uint64_t key, int32_t *out,
                        spec_stats *st) {
    const spec_opts *o = r->o;
    model *v = r->v, *d = r->d;
    kf_backend *vbe = v->be, *dbe = d->be;
    int64_t P = r->P, end = P + o->max_new, V = v->cfg.vocab;
    model_cache *vc = r->vc, *dc = r->dc;
    model_cache_rewind(vc, 0);
    model_cache_rewind(dc, 0);
    int32_t *seq = r->seq;
    memcpy(seq, prefix, (size_t)P * sizeof *seq);
    double tau = o->tau;
    int64_t n = P; /* tokens decided */
    *st = (spec_stats){0};
    while (n < end) {
        int64_t kk = end - n < o->k ? end - n : o->k;
        /* draft pass: the tokens the draft has not seen, then kk noise rows */
        int64_t ld = model_cache_len(dc), nt = n - ld, Q = nt + kk;
        memcpy(r->ids, seq + ld, (size_t)nt * sizeof *seq);
        memset(r->noise, 0, (size_t)Q);
        for (int64_t j = 0; j < kk; j++) {
            r->noise[nt + j] = 1;
            r->z[nt + j] = rng_uniform01(o->seed, key, (uint64_t)(n + j - P));
            r->outrows[j] = (int32_t)(nt + j);
        }
        model_decode_step(d, dc, Q, r->noise, r->ids, r->z, &tau, kk, r->outrows, nt, r->dev_ids);
        dbe->download(dbe, r->drafts, r->dev_ids, (size_t)kk * sizeof(int32_t));

        /* verify pass: the uncached tokens, then the drafts; the logits of
         * the row before each draft and of the last (the bonus token) */
        int64_t lv = model_cache_len(vc);
        nt = n - lv;
        Q = nt + kk;
        memcpy(r->ids, seq + lv, (size_t)nt * sizeof *seq);
        memcpy(r->ids + nt, r->drafts, (size_t)kk * sizeof *seq);
        memset(r->noise, 0, (size_t)Q);
        for (int64_t j = 0; j <= kk; j++) r->outrows[j] = (int32_t)(nt - 1 + j);
        const float *lg =
            model_decode_step(v, vc, Q, r->noise, r->ids, NULL, NULL, kk + 1, r->outrows, Q, NULL);
        vbe->download(vbe, r->logits, lg, (size_t)((kk + 1) * V) * sizeof(float));

        int64_t acc = 0;
        while (acc < kk) {
            int32_t t = verify_pick(r, r->logits + acc * V, key, n + acc);
            seq[n + acc] = t;
            if (t != r->drafts[acc]) break;
            acc++;
        }
        /* the replacement of the first rejected draft was written above; a
         * fully accepted block gets the bonus token, if one is still due */
        int64_t emit = acc < kk ? acc + 1 : acc;
        if (acc == kk && n + kk < end) {
            seq[n + kk] = verify_pick(r, r->logits + kk * V, key, n + kk);
            emit++;
        }
        model_cache_rewind(vc, n + acc); /* the accepted drafts stay cached */
        n += emit;
        st->iters++;
        st->drafted += kk;
        st->accepted += acc;
    }
    st->nfe = 2 * st->iters;
    st->passes = 2 * st->iters;
    memcpy(out, seq + P, (size_t)o->max_new * sizeof *out);
}

/* softmax(l / tau) into p (V values, float64). */
static void softmax_tau(const float *l, int64_t V, double tau, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, (double)l[v] / tau);
    for (int64_t v = 0; v < V; v++) sum += p[v] = exp((double)l[v] / tau - mx);
    for (int64_t v = 0; v < V; v++) p[v] /= sum;
}

/* The id at uniform u of the unnormalised weights w (id order). */
static int32_t draw_weights(const double *w, int64_t V, double u) {
    double sum = 0, acc = 0;
    int32_t last = 0;
    for (int64_t v = 0; v < V; v++) sum += w[v];
    for (int64_t v = 0; v < V; v++) {
        if (w[v] <= 0) continue;
        last = (int32_t)v;
        if ((acc += w[v]) > u * sum) return (int32_t)v;
    }
    return last;
}

/* Medusa's draws: Philox counters (purpose, iteration, index). */
enum { MD_DRAFT = 1, MD_ACCEPT = 2, MD_RESAMPLE = 3 };
static double md_uniform(const spec_opts *o, uint64_t key, int purpose, int64_t it, int64_t j) {
    return rng_uniform01(o->seed, key,
                         ((uint64_t)purpose << 56) | ((uint64_t)it << 8) | (uint64_t)j);
}

/* Medusa (see speculative.h): one pass of the Medusa model per iteration;
 * its head 0 verifies the drafts fed, heads 1..k at the last accepted row
 * draft the next iteration's. */
static void run_row_medusa(row_ctx *r, const int32_t *prefix, uint64_t key, int32_t *out,
                           spec_stats *st) {
    const spec_opts *o = r->o;
    model *d = r->d;
    kf_backend *be = d->be;
    int64_t P = r->P, end = P + o->max_new, V = d->cfg.vocab, NH = d->n_heads_out;
    model_cache *c = r->dc;
    model_cache_rewind(c, 0);
    int32_t *seq = r->seq;
    memcpy(seq, prefix, (size_t)P * sizeof *seq);
    double *p = kf_malloc((size_t)V * sizeof *p), *q = kf_malloc((size_t)V * sizeof *q);
    int64_t n = P, have = 0; /* tokens decided; drafts for positions n.. in r->drafts */
    *st = (spec_stats){0};
    while (n < end) {
        int64_t kk = end - n < have ? end - n : have, it = st->iters;
        int64_t lc = model_cache_len(c), nt = n - lc, Q = nt + kk;
        memcpy(r->ids, seq + lc, (size_t)nt * sizeof *seq);
        memcpy(r->ids + nt, r->drafts, (size_t)kk * sizeof *seq);
        memset(r->noise, 0, (size_t)Q);
        for (int64_t j = 0; j <= kk; j++) r->outrows[j] = (int32_t)(nt - 1 + j);
        const float *lg =
            model_decode_step(d, c, Q, r->noise, r->ids, NULL, NULL, kk + 1, r->outrows, Q, NULL);
        int64_t O = kk + 1; /* rows per head: logits [head][out row][V] */
        be->download(be, r->logits, lg, (size_t)(NH * O * V) * sizeof(float));

        int64_t acc = 0;
        int32_t next = -1; /* the token after the accepted drafts */
        for (; acc < kk; acc++) {
            const float *pl = r->logits + acc * V;
            int32_t dj = r->drafts[acc];
            if (o->greedy) {
                int32_t t = first_max(pl, V);
                if (t == dj) continue;
                next = t;
                break;
            }
            softmax_tau(pl, V, o->tau, p);
            softmax_tau(r->q + acc * V, V, o->tau, q);
            if (md_uniform(o, key, MD_ACCEPT, it, acc) * q[dj] < p[dj]) continue;
            for (int64_t v = 0; v < V; v++) p[v] = fmax(0.0, p[v] - q[v]);
            next = draw_weights(p, V, md_uniform(o, key, MD_RESAMPLE, it, acc));
            break;
        }
        memcpy(seq + n, r->drafts, (size_t)acc * sizeof *seq);
        if (next < 0 && n + acc < end) { /* every draft accepted: the bonus token */
            const float *pl = r->logits + kk * V;
            if (o->greedy) {
                next = first_max(pl, V);
            } else {
                softmax_tau(pl, V, o->tau, p);
                next = draw_weights(p, V, md_uniform(o, key, MD_RESAMPLE, it, kk));
            }
        }
        int64_t emit = acc + (next >= 0);
        if (next >= 0) seq[n + acc] = next;
        /* the next drafts: heads 1..k at the last accepted row (out row acc) */
        have = o->k;
        for (int64_t j = 0; j < have; j++) {
            const float *hl = r->logits + ((1 + j) * O + acc) * V;
            memcpy(r->q + j * V, hl, (size_t)V * sizeof(float));
            if (o->greedy) {
                r->drafts[j] = first_max(hl, V);
            } else {
                softmax_tau(hl, V, o->tau, q);
                r->drafts[j] = draw_weights(q, V, md_uniform(o, key, MD_DRAFT, it, j));
            }
        }
        model_cache_rewind(c, n + acc); /* the accepted drafts stay cached */
        n += emit;
        st->iters++;
        st->drafted += kk;
        st->accepted += acc;
    }
    st->nfe = 2 * st->iters;
    st->passes = st->iters;
    memcpy(out, seq + P, (size_t)o->max_new * sizeof *out);
    free(p);
    free(q);
}

void spec_run(model *v, const model_heads *vheads, model *d, const model_heads *dheads,
              const int32_t *prefix, int64_t B, int64_t P, const spec_opts *o, const uint64_t *keys,
              int32_t *out, spec_stats *stats) {
    kf_err err;
    KF_CHECK(spec_check(v, d, o, P, &err) == 0, "spec_run: %s", err.msg);
    int medusa = spec_draft_of(d) == SPEC_MEDUSA; /* runs on the draft alone */
    model_heads *vown = vheads || medusa ? NULL : model_heads_pack(v);
    model_heads *down = dheads ? NULL : model_heads_pack(d);
    int64_t end = P + o->max_new, V = v->cfg.vocab;
    row_ctx r = {.v = v,
                 .d = d,
                 .vh = vheads ? vheads : vown,
                 .dh = dheads ? dheads : down,
                 .o = o,
                 .P = P,
                 .ids = kf_malloc((size_t)(end + o->k) * sizeof(int32_t)),
                 .outrows = kf_malloc((size_t)(o->k + 1) * sizeof(int32_t)),
                 .seq = kf_malloc((size_t)end * sizeof(int32_t)),
                 .drafts = kf_malloc((size_t)o->k * sizeof(int32_t)),
                 .z = kf_calloc((size_t)(end + o->k), sizeof(double)),
                 .noise = kf_calloc((size_t)(end + o->k), 1),
                 .logits = kf_malloc((size_t)(d->n_heads_out * (o->k + 1) * V) * sizeof(float)),
                 .q = kf_malloc((size_t)(o->k * V) * sizeof(float)),
                 .dev_ids = d->be->alloc(d->be, (size_t)o->k * sizeof(int32_t))};
    r.dc = model_cache_create(d, r.dh, 1, end);
    r.vc = medusa ? NULL : model_cache_create(v, r.vh, 1, end);
    for (int64_t b = 0; b < B; b++) {
        spec_stats st;
        if (spec_draft_of(d) == SPEC_MEDUSA)
            run_row_medusa(&r, prefix + b * P, keys[b], out + b * o->max_new, &st);
        else run_row_ptp(&r, prefix + b * P, keys[b], out + b * o->max_new, &st);
        if (stats) stats[b] = st;
    }
    d->be->free(d->be, r.dev_ids);
    model_cache_free(r.dc);
    model_cache_free(r.vc);
    free(r.ids);
    free(r.outrows);
    free(r.seq);
    free(r.drafts);
    free(r.z);
    free(r.noise);
    free(r.logits);
    free(r.q);
    model_heads_free(vown);
    model_heads_free(down);
}
