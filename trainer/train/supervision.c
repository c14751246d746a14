/* trainer/train/supervision.c — per-stage student inputs and teacher targets
 * (see supervision.h). */
#include "trainer/train/supervision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "trainer/train/graph_cache.h"

/* A slot's teacher passes recorded as a graph (sup_set_graphs), by
 * graph_cache's rule. */
enum { SG_KEY_N = 5 };
typedef struct sup_graph {
    void *g;
    graph_cache cache;
} sup_graph;

struct sup_ctx {
    sup_config cfg;
    model *teacher;
    model_ws *ws1, *ws2;
    layout lay;
    int64_t lay_n; /* context length the cached student layout was built for */
    int32_t *ids, *targets, *ctx, *blk;
    double *z, *tau, *z1, *z2, *lo;
    float *loss_w; /* SUP_MDLM: each sample's weight */
    size_t cap;
    int32_t *picks; /* the teacher's picks, on its device (sup_ar_blocks, sup_pflm_rounds) */
    size_t picks_cap;
    int32_t *targets_d, *from_d; /* the student's targets gathered from picks, and where from */
    size_t targets_cap;
    sup_graph *graphs; /* [n_graphs] (sup_set_graphs) */
    int64_t n_graphs, graph_launches;
};

static const char *const kind_names[] = {
    "ar",   "distill_ar", "self_forcing", "noise_inversion_causal", "noise_inversion_mtp",
    "mdlm", "medusa"};

int sup_kind_from_name(const char *name) {
    for (int i = 0; i < (int)(sizeof kind_names / sizeof *kind_names); i++)
        if (strcmp(name, kind_names[i]) == 0) return i;
    return -1;
}

const char *sup_kind_name(sup_kind kind) { return kind_names[kind]; }

double sup_uniform(uint64_t seed, uint64_t key, int purpose, int64_t t, int64_t j) {
    uint64_t idx = ((uint64_t)purpose << 56) | ((uint64_t)t << 16) | (uint64_t)j;
    return rng_uniform01(seed, key, idx);
}

model_config sup_student_config(const sup_config *cfg, const model_config *base) {
    model_config c = *base;
    int plain = cfg->kind == SUP_AR || cfg->kind == SUP_MDLM;
    c.kind = plain || cfg->kind == SUP_MEDUSA ? MODEL_AR : MODEL_PFLM;
    c.head = cfg->kind == SUP_NI_MTP   ? HEAD_MTP
             : cfg->kind == SUP_MEDUSA ? HEAD_MEDUSA
                                       : HEAD_SHARED;
    c.k_train = plain ? 1 : cfg->k;
    c.bidir = cfg->kind == SUP_MDLM;
    if (c.kind != MODEL_PFLM) c.noise_cycles = 0; /* no noise encoder */
    return c;
}

model_config sup_teacher_config(const sup_config *cfg, const model_config *base) {
    sup_config t = {.kind = cfg->kind == SUP_SELF_FORCING ? SUP_DISTILL_AR : SUP_AR,
                    .k = cfg->kind == SUP_SELF_FORCING ? cfg->k / 2 : 1};
    return sup_student_config(&t, base);
}

sup_ctx *sup_create(const sup_config *cfg, model *teacher, kf_err *err) {
    if (cfg->k < 1) return kf_err_set(err, "supervision: k must be >= 1"), NULL;
    if (cfg->tau_min <= 0 || cfg->tau_max < cfg->tau_min)
        return kf_err_set(err, "supervision: tau range [%g, %g] must satisfy 0 < min <= max",
                          cfg->tau_min, cfg->tau_max),
               NULL;
    switch (cfg->kind) {
    case SUP_AR:
        if (cfg->k != 1) return kf_err_set(err, "supervision: an AR stage has k = 1"), NULL;
        break;
    case SUP_MDLM:
        if (cfg->k != 1) return kf_err_set(err, "supervision: an mdlm stage has k = 1"), NULL;
        if (cfg->mask_id < 0 || cfg->strata < 0)
            return kf_err_set(err, "supervision: mdlm needs a mask token (model.mask_id, or a "
                                   "model.vocab past the data's) and strata >= 0"),
                   NULL;
        break;
    case SUP_MEDUSA: teacher = NULL; break; /* the model itself is the teacher */
    case SUP_DISTILL_AR:
    case SUP_NI_CAUSAL:
    case SUP_NI_MTP:
        if (!teacher || teacher->cfg.kind != MODEL_AR)
            return kf_err_set(err, "supervision: %s needs an AR teacher", kind_names[cfg->kind]),
                   NULL;
        break;
    case SUP_SELF_FORCING:
        if (!teacher || teacher->cfg.kind != MODEL_PFLM || teacher->cfg.head != HEAD_SHARED)
            return kf_err_set(err, "supervision: self_forcing needs a PFLM teacher (shared head)"),
                   NULL;
        if (cfg->k % 2 || cfg->k / 2 > teacher->cfg.k_train)
            return kf_err_set(err,
                              "supervision: self_forcing to k = %lld needs an even k and a teacher "
                              "with k_train >= %lld (it has %lld)",
                              (long long)cfg->k, (long long)(cfg->k / 2),
                              (long long)teacher->cfg.k_train),
                   NULL;
        break;
    default: return kf_err_set(err, "supervision: unknown kind"), NULL;
    }
    sup_ctx *s = kf_calloc(1, sizeof *s);
    s->cfg = *cfg;
    s->teacher = teacher;
    if (teacher) {
        s->ws1 = model_ws_create(teacher);
        s->ws2 = model_ws_create(teacher);
    }
    return s;
}

void sup_set_tau(sup_ctx *s, double tau_min, double tau_max) {
    KF_CHECK(tau_min > 0 && tau_min <= tau_max, "sup_set_tau: need 0 < %g <= %g", tau_min, tau_max);
    s->cfg.tau_min = tau_min;
    s->cfg.tau_max = tau_max;
}

/* How graph gi (a slot's) runs (graph_cache_mode; gi -1: eagerly). */
static graph_mode slot_mode(sup_ctx *s, int64_t gi, const int64_t *key) {
    if (gi < 0 || gi >= s->n_graphs) return GRAPH_EAGER;
    sup_graph *g = &s->graphs[gi];
    graph_mode mode = graph_cache_mode(&g->cache, key);
    if (mode != GRAPH_LAUNCH) {
        s->teacher->be->graph_free(s->teacher->be, g->g);
        g->g = NULL;
    }
    return mode;
}

/* Runs ops(ctx), device ops alone, as graph gi of s (s NULL or gi -1:
 * eagerly) with key (everything the ops' addresses and shapes depend on
 * but the model's buffers). */
static void run_graph(sup_ctx *s, int64_t gi, const int64_t *key, void (*ops)(void *), void *ctx) {
    graph_mode mode = s ? slot_mode(s, gi, key) : GRAPH_EAGER;
    if (mode == GRAPH_EAGER) {
        ops(ctx);
        return;
    }
    kf_backend *be = s->teacher->be;
    sup_graph *g = &s->graphs[gi];
    if (mode == GRAPH_LAUNCH) {
        be->graph_launch(be, g->g);
        s->graph_launches++;
        return;
    }
    be->graph_begin(be);
    ops(ctx);
    g->g = be->graph_end(be);
    /* a backend that makes no graphs: eager from now on */
    if (g->g) graph_cache_recorded(&g->cache, 1);
    else sup_set_graphs(s, 0);
}

/* The student's targets gathered from the teacher's picks (from_d uploaded
 * before the passes). */
static void gather_targets(sup_ctx *s, const int32_t *picks, int64_t rows) {
    kf_backend *be = s->teacher->be;
    be->gather_ids(be, s->targets_d, picks, s->from_d, rows);
}

void sup_set_graphs(sup_ctx *s, int64_t slots) {
    for (int64_t i = 0; i < s->n_graphs; i++) {
        s->teacher->be->graph_free(s->teacher->be, s->graphs[i].g);
        graph_cache_free(&s->graphs[i].cache);
    }
    free(s->graphs);
    s->graphs = NULL;
    s->n_graphs = 0;
    if (slots < 1 || (s->cfg.kind != SUP_SELF_FORCING && s->cfg.kind != SUP_DISTILL_AR)) return;
    s->n_graphs = slots;
    s->graphs = kf_calloc((size_t)s->n_graphs, sizeof *s->graphs);
    for (int64_t i = 0; i < s->n_graphs; i++) graph_cache_init(&s->graphs[i].cache, SG_KEY_N);
}

int64_t sup_graph_launches(const sup_ctx *s) { return s->graph_launches; }

void sup_free(sup_ctx *s) {
    if (!s) return;
    sup_set_graphs(s, 0);
    if (s->picks) s->teacher->be->free(s->teacher->be, s->picks);
    if (s->targets_d) {
        s->teacher->be->free(s->teacher->be, s->targets_d);
        s->teacher->be->free(s->teacher->be, s->from_d);
    }
    model_ws_free(s->ws1);
    model_ws_free(s->ws2);
    if (s->lay_n) layout_free(&s->lay);
    free(s->ids);
    free(s->loss_w);
    free(s->targets);
    free(s->ctx);
    free(s->blk);
    free(s->z);
    free(s->tau);
    free(s->z1);
    free(s->z2);
    free(s->lo);
    free(s);
}

/* ---------------------------------------------------------------- teachers */

void sup_icdf_bin_sorted(const float *logits, int64_t V, double tau, int32_t target, double *lo,
                         double *hi) {
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, (double)logits[v] / tau);
    /* the target's rank among ids by descending probability (ties: lower id
     * first) decides which probabilities come before it: those of higher
     * probability; comparing the scaled logits orders them the same way */
    double lt = (double)logits[target] / tau, sum = 0, before = 0;
    for (int64_t v = 0; v < V; v++) {
        double l = (double)logits[v] / tau, e = exp(l - mx);
        sum += e;
        if (l > lt || (l == lt && v < target)) before += e;
    }
    *lo = before / sum;
    *hi = *lo + exp(lt - mx) / sum;
}

/* sup_ar_blocks' k passes, their host inputs kept from their uploads
 * (ar_inputs, every pass first) to their ops (ar_ops): pass 0 over ws,
 * passes 1..k-1 over ws2, each in its own input slot j - 1 (its output
 * rows, pick count and noise), so that all k can be recorded as one graph. */
typedef struct ar_pass {
    model *m;
    model_ws *ws, *ws2;
    layout l0, lb;
    model_input *in; /* [k] */
    int32_t *ids, *at;
    int64_t k, rows; /* picks of a pass */
    int32_t *picks;
} ar_pass;

static void ar_inputs(ar_pass *p, model *ar, model_ws *ws, model_ws *ws2, const int32_t *ctx,
                      int64_t B, int64_t n, int64_t k, const double *z, const double *tau,
                      int32_t *picks) {
    KF_CHECK(k == 1 || ws2, "sup_ar_blocks: k = %lld needs ws2", (long long)k);
    int64_t rows = B * n;
    *p = (ar_pass){.m = ar, .ws = ws, .ws2 = ws2, .k = k, .rows = rows, .picks = picks};
    p->in = kf_calloc((size_t)k, sizeof *p->in);
    double *zr = kf_malloc((size_t)rows * sizeof(double)),
           *tr = kf_malloc((size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++) tr[r] = tau[r / n];
    layout_ar(&p->l0, n);
    p->in[0] = (model_input){.lay = &p->l0, .B = B, .ids = ctx};
    model_forward_inputs(ar, ws, &p->in[0], MODEL_NO_LOGITS, NULL);
    for (int64_t r = 0; r < rows; r++) zr[r] = z[r * k];
    model_pick_noise(ar, ws, rows, zr, tr);
    if (k > 1) {
        /* group t holds the block's tokens so far: pass j reads the picks of
         * passes 0..j-1 (picks[jj * rows + (b, t)] at row (t, jj)) on the
         * device, and its row (t, j-1) predicts token j */
        layout *lay = &p->lb;
        layout_blocks(lay, n, k - 1);
        int64_t L = lay->L;
        p->ids = kf_calloc((size_t)(B * L), sizeof(int32_t));
        p->at = kf_malloc((size_t)((k - 1) * rows) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++) {
            memcpy(p->ids + b * L, ctx + b * n, (size_t)n * sizeof(int32_t));
            for (int64_t jj = 0; jj < k - 1; jj++)
                for (int64_t t = 0; t < n; t++)
                    p->at[jj * rows + b * n + t] =
                        (int32_t)(b * L + layout_group_row(n, k - 1, t, jj));
        }
        lay->n_out = n;
        for (int64_t j = 1; j < k; j++) {
            p->in[j] = (model_input){.lay = lay,
                                     .B = B,
                                     .ids = p->ids,
                                     .picks = picks,
                                     .pick_at = p->at,
                                     .n_picks = j * rows};
            for (int64_t t = 0; t < n; t++)
                lay->out_rows[t] = (int32_t)layout_group_row(n, k - 1, t, j - 1);
            model_ws_set_slot(ws2, j - 1);
            model_forward_inputs(ar, ws2, &p->in[j], MODEL_NO_LOGITS, NULL);
            for (int64_t r = 0; r < rows; r++) zr[r] = z[r * k + j];
            model_pick_noise(ar, ws2, rows, zr, tr);
        }
        model_ws_set_slot(ws2, 0);
    }
    free(zr);
    free(tr);
}

/* The passes' device ops: pass j's picks into picks[j rows, (j+1) rows). */
static void ar_ops(ar_pass *p) {
    model_forward_ops(p->m, p->ws, &p->in[0], NULL);
    model_pick_ops(p->m, p->ws, p->rows, 1, p->picks);
    for (int64_t j = 1; j < p->k; j++) {
        model_ws_set_slot(p->ws2, j - 1);
        model_forward_ops(p->m, p->ws2, &p->in[j], NULL);
        model_pick_ops(p->m, p->ws2, p->rows, 1, p->picks + j * p->rows);
    }
    if (p->k > 1) model_ws_set_slot(p->ws2, 0);
}

static void ar_pass_free(ar_pass *p) {
    layout_free(&p->l0);
    if (p->k > 1) layout_free(&p->lb);
    free(p->in), free(p->ids), free(p->at);
}

void sup_ar_blocks(model *ar, model_ws *ws, model_ws *ws2, const int32_t *ctx, int64_t B, int64_t n,
                   int64_t k, const double *z, const double *tau, int32_t *picks, int32_t *out) {
    ar_pass p;
    ar_inputs(&p, ar, ws, ws2, ctx, B, n, k, z, tau, picks);
    ar_ops(&p);
    ar_pass_free(&p);
    if (!out) return;
    /* the passes' one wait for the device */
    int64_t rows = B * n;
    int32_t *got = kf_malloc((size_t)(k * rows) * sizeof(int32_t));
    ar->be->download(ar->be, got, picks, (size_t)(k * rows) * sizeof(int32_t));
    for (int64_t j = 0; j < k; j++)
        for (int64_t r = 0; r < rows; r++) out[r * k + j] = got[j * rows + r];
    free(got);
}

/* sup_pflm_rounds' two rounds, their host inputs kept from their uploads
 * (pflm_inputs, both rounds first) to their ops (pflm_ops), so that the ops
 * alone can be recorded as a graph. */
typedef struct pflm_pass {
    layout l1, l2;
    int32_t *ids1, *ids2, *at;
    double *zz1, *zz2;
    model_input in1, in2;
    int64_t rows; /* picks of a round */
} pflm_pass;

static void pflm_inputs(pflm_pass *p, model *pf, model_ws *ws1, model_ws *ws2, const int32_t *ctx,
                        int64_t B, int64_t n, int64_t k, const double *z, int64_t k2,
                        const double *z2, const double *tau) {
    KF_CHECK(pf->cfg.kind == MODEL_PFLM && pf->cfg.head == HEAD_SHARED,
             "sup_pflm_rounds: needs a PFLM with the shared head");
    KF_CHECK(k2 == 0 || k2 == k, "sup_pflm_rounds: the second round has k tokens");
    memset(p, 0, sizeof *p);
    p->rows = B * n * k;
    layout_single(&p->l1, n, k);
    int64_t L = p->l1.L;
    p->ids1 = kf_calloc((size_t)(B * L), sizeof(int32_t));
    p->zz1 = kf_calloc((size_t)(B * L), sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        memcpy(p->ids1 + b * L, ctx + b * n, (size_t)n * sizeof(int32_t));
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < k; j++)
                p->zz1[b * L + layout_group_row(n, k, t, j)] = z[(b * n + t) * k + j];
    }
    p->in1 = (model_input){.lay = &p->l1, .B = B, .ids = p->ids1, .z = p->zz1, .tau = tau};
    model_forward_inputs(pf, ws1, &p->in1, MODEL_NO_LOGITS | (k2 ? MODEL_KEEP_CTX_KV : 0), NULL);
    if (!k2) return;
    /* round 2 reads round 1's picks (row r = (b, t, j)) on the device */
    layout_double(&p->l2, n, k);
    int64_t L2 = p->l2.L;
    p->ids2 = kf_calloc((size_t)(B * L2), sizeof(int32_t));
    p->zz2 = kf_calloc((size_t)(B * L2), sizeof(double));
    p->at = kf_malloc((size_t)p->rows * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < k; j++) {
                p->at[(b * n + t) * k + j] = (int32_t)(b * L2 + layout_group_row(n, 2 * k, t, j));
                p->zz2[b * L2 + layout_group_row(n, 2 * k, t, k + j)] = z2[(b * n + t) * k + j];
            }
    p->in2 = (model_input){.lay = &p->l2,
                           .B = B,
                           .ids = p->ids2,
                           .pick_at = p->at,
                           .n_picks = p->rows,
                           .z = p->zz2,
                           .tau = tau};
    model_forward_inputs(pf, ws2, &p->in2, MODEL_NO_LOGITS, ws1);
}

/* The rounds' device ops: round 1's picks into picks[0, rows), round 2's
 * (reading them) into picks[rows, 2 rows). */
static void pflm_ops(pflm_pass *p, model *pf, model_ws *ws1, model_ws *ws2, int32_t *picks) {
    model_forward_ops(pf, ws1, &p->in1, NULL);
    model_pick(pf, ws1, p->rows, NULL, NULL, picks);
    if (!p->in2.lay) return;
    p->in2.picks = picks;
    model_forward_ops(pf, ws2, &p->in2, ws1);
    model_pick(pf, ws2, p->rows, NULL, NULL, picks + p->rows);
}

/* Both rounds' ops and the targets' gather: what run_graph records. */
typedef struct pflm_run {
    pflm_pass p;
    sup_ctx *s;
    int32_t *picks;
    int64_t n_targets;
} pflm_run;

static void pflm_run_ops(void *ctx) {
    pflm_run *r = ctx;
    pflm_ops(&r->p, r->s->teacher, r->s->ws1, r->s->ws2, r->picks);
    gather_targets(r->s, r->picks, r->n_targets);
}

/* sup_ar_blocks' passes and the targets' gather: what run_graph records. */
typedef struct ar_run {
    ar_pass p;
    sup_ctx *s;
    int64_t n_targets;
} ar_run;

static void ar_run_ops(void *ctx) {
    ar_run *r = ctx;
    ar_ops(&r->p);
    gather_targets(r->s, r->p.picks, r->n_targets);
}

static void pflm_pass_free(pflm_pass *p) {
    layout_free(&p->l1);
    if (p->in2.lay) layout_free(&p->l2);
    free(p->ids1), free(p->ids2), free(p->at), free(p->zz1), free(p->zz2);
}

void sup_pflm_rounds(model *pf, model_ws *ws1, model_ws *ws2, const int32_t *ctx, int64_t B,
                     int64_t n, int64_t k, const double *z, int64_t k2, const double *z2,
                     const double *tau, int32_t *picks, int32_t *out) {
    pflm_pass p;
    pflm_inputs(&p, pf, ws1, ws2, ctx, B, n, k, z, k2, z2, tau);
    pflm_ops(&p, pf, ws1, ws2, picks);
    pflm_pass_free(&p);
    if (!out) return;
    /* both rounds' one wait for the device */
    int64_t rows = p.rows, w = k + k2, nr = (k2 ? 2 : 1) * rows;
    int32_t *got = kf_malloc((size_t)nr * sizeof(int32_t));
    pf->be->download(pf->be, got, picks, (size_t)nr * sizeof(int32_t));
    for (int64_t r = 0; r < rows; r++) {
        out[(r / k) * w + r % k] = got[r];
        if (k2) out[(r / k) * w + k + r % k] = got[rows + r];
    }
    free(got);
}

/* ---------------------------------------------------------------- student */

static void grow(sup_ctx *s, size_t n) {
    if (n <= s->cap) return;
    s->ids = kf_realloc(s->ids, n * sizeof(int32_t));
    s->targets = kf_realloc(s->targets, n * sizeof(int32_t));
    s->ctx = kf_realloc(s->ctx, n * sizeof(int32_t));
    s->blk = kf_realloc(s->blk, n * sizeof(int32_t));
    s->z = kf_realloc(s->z, n * sizeof(double));
    s->tau = kf_realloc(s->tau, n * sizeof(double));
    s->z1 = kf_realloc(s->z1, n * sizeof(double));
    s->z2 = kf_realloc(s->z2, n * sizeof(double));
    s->lo = kf_realloc(s->lo, 2 * n * sizeof(double));
    s->loss_w = kf_realloc(s->loss_w, n * sizeof(float));
    s->cap = n;
}

/* Tokens of sample b at positions >= the returned length are padding. */
static inline int64_t valid_upto(const int32_t *valid_len, int64_t b, int64_t n) {
    return valid_len ? (int64_t)valid_len[b] : n;
}

/* SUP_AR: row (b, t) learns the next token x[t+1]. */
static void targets_ar(sup_ctx *s, const int32_t *tokens, int64_t B, int64_t n, int64_t np,
                       const int32_t *valid_len) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < np; t++)
            s->targets[b * np + t] =
                t + 1 < valid_upto(valid_len, b, n) ? tokens[b * n + t + 1] : -1;
}

/* MDLM's LogLinearNoise eps and training.sampling_eps. */
#define MDLM_NOISE_EPS 1e-3
#define MDLM_SAMPLING_EPS 1e-3

double sup_mdlm_time(const sup_config *cfg, uint64_t key) {
    double u = sup_uniform(cfg->seed, key, SUP_RNG_MDLM_T, 0, 0);
    if (cfg->strata > 0) {
        double S = (double)cfg->strata;
        u = fmod(u / S + (double)(key % (uint64_t)cfg->strata) / S, 1.0);
    }
    return (1 - MDLM_SAMPLING_EPS) * u + MDLM_SAMPLING_EPS;
}

double sup_mdlm_schedule(double t, double *move) {
    double sigma = -log1p(-(1 - MDLM_NOISE_EPS) * t);
    double dsigma = (1 - MDLM_NOISE_EPS) / (1 - (1 - MDLM_NOISE_EPS) * t);
    *move = -expm1(-sigma);
    return dsigma / expm1(sigma);
}

/* SUP_MDLM: sample b's positions masked at its time's rate; the masked ones
 * learn their token, weighted by the schedule (ids, targets, loss_w). */
static void targets_mdlm(sup_ctx *s, const int32_t *tokens, int64_t B, int64_t n,
                         const int32_t *valid_len, const uint64_t *keys, int64_t *n_valid) {
    const sup_config *c = &s->cfg;
    *n_valid = 0;
    for (int64_t b = 0; b < B; b++) {
        double move, w = sup_mdlm_schedule(sup_mdlm_time(c, keys[b]), &move);
        s->loss_w[b] = (float)w;
        int64_t vl = valid_upto(valid_len, b, n);
        *n_valid += vl;
        for (int64_t t = 0; t < n; t++) {
            int masked = sup_uniform(c->seed, keys[b], SUP_RNG_MDLM_MASK, t, 0) < move;
            s->ids[b * n + t] = masked ? (int32_t)c->mask_id : tokens[b * n + t];
            s->targets[b * n + t] = masked && t < vl ? tokens[b * n + t] : -1;
        }
    }
}

/* SUP_MEDUSA: head h of row (b, t) learns x[t+1+h]; head 0 (the frozen AR
 * head) nothing. Head-major, as the model's logit rows. */
static void targets_medusa(sup_ctx *s, const int32_t *tokens, int64_t B, int64_t n, int64_t np,
                           const int32_t *valid_len) {
    for (int64_t h = 0; h <= s->cfg.k; h++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < np; t++)
                s->targets[(h * B + b) * np + t] = h > 0 && t + 1 + h < valid_upto(valid_len, b, n)
                                                       ? tokens[b * n + t + 1 + h]
                                                       : -1;
}

/* A device buffer of n ids for the teacher's picks. */
static int32_t *picks_buf(sup_ctx *s, int64_t n) {
    kf_backend *be = s->teacher->be;
    if ((size_t)n > s->picks_cap) {
        if (s->picks) be->free(be, s->picks);
        s->picks = be->alloc(be, (size_t)n * sizeof(int32_t));
        s->picks_cap = (size_t)n;
    }
    return s->picks;
}

/* SUP_DISTILL_AR and SUP_SELF_FORCING: row (b, t, j) learns the teacher's
 * token j of the block it produces from the noise z[(b, t), 0..k) (AR:
 * inverse-CDF blocks; PFLM(k/2): two rounds of k/2). The targets are made
 * from the picks on the device (out->targets_d), so nothing waits here.
 * Every upload precedes the first op, so that the passes and the targets'
 * gather run as slot's graph. */
static void targets_teacher(sup_ctx *s, sup_batch *out, int64_t B, int64_t n, int64_t np,
                            const int32_t *valid_len, const uint64_t *keys, int64_t slot) {
    const sup_config *c = &s->cfg;
    kf_backend *be = s->teacher->be;
    int64_t k = c->k, h = k / 2, rows = B * np * k, n_targets = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < np; t++)
            for (int64_t j = 0; j < k; j++)
                s->z[(b * np + t) * k + j] = sup_uniform(c->seed, keys[b], SUP_RNG_Z, t, j);
    int32_t *picks = picks_buf(s, rows);
    /* target (b, t, j) is pick from[r] (where sup_ar_blocks and sup_pflm_rounds
     * leave token j of block (b, t)), or -1 past valid_len; every pick is a
     * token id, so the count is known here */
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < np; t++)
            for (int64_t j = 0; j < k; j++) {
                int64_t r = (b * np + t) * k + j, q = b * np + t;
                int valid = t + 1 < valid_upto(valid_len, b, n);
                int64_t at = c->kind == SUP_DISTILL_AR ? j * B * np + q
                             : j < h                   ? q * h + j
                                                       : B * np * h + q * h + j - h;
                s->blk[r] = valid ? (int32_t)at : -1;
                n_targets += valid;
            }
    if ((size_t)rows > s->targets_cap) {
        if (s->targets_d) be->free(be, s->targets_d), be->free(be, s->from_d);
        s->targets_d = be->alloc(be, (size_t)rows * sizeof(int32_t));
        s->from_d = be->alloc(be, (size_t)rows * sizeof(int32_t));
        s->targets_cap = (size_t)rows;
    }
    be->upload(be, s->from_d, s->blk, (size_t)rows * sizeof(int32_t));
    out->targets_d = s->targets_d;
    out->n_targets = n_targets;
    /* everything the ops' addresses and shapes depend on but the model's
     * buffers */
    int64_t key[SG_KEY_N] = {B, np, (int64_t)(intptr_t)picks, (int64_t)(intptr_t)s->targets_d,
                             (int64_t)(intptr_t)s->from_d};
    if (c->kind == SUP_DISTILL_AR) {
        ar_run r = {.s = s, .n_targets = rows};
        ar_inputs(&r.p, s->teacher, s->ws1, s->ws2, s->ctx, B, np, k, s->z, s->tau, picks);
        run_graph(s, slot, key, ar_run_ops, &r);
        ar_pass_free(&r.p);
        return;
    }
    for (int64_t r = 0; r < B * np; r++)
        for (int64_t j = 0; j < h; j++) {
            s->z1[r * h + j] = s->z[r * k + j];
            s->z2[r * h + j] = s->z[r * k + h + j];
        }
    pflm_run r = {.s = s, .picks = picks, .n_targets = rows};
    pflm_inputs(&r.p, s->teacher, s->ws1, s->ws2, s->ctx, B, np, h, s->z1, h, s->z2, s->tau);
    run_graph(s, slot, key, pflm_run_ops, &r);
    pflm_pass_free(&r.p);
}

/* Noise inversion (SUP_NI_CAUSAL, SUP_NI_MTP; the release's noise_inversion):
 * the targets are the real tokens, and each noise value is drawn uniformly
 * inside the AR teacher's inverse-CDF bin of its target, so that the
 * teacher's sampler would map that noise back to the real token. One AR pass
 * over x[0..n-1) gives row p's bin of x[p+1]. */
static void targets_noise_inversion(sup_ctx *s, const int32_t *tokens, int64_t B, int64_t n,
                                    int64_t np, const int32_t *valid_len, const uint64_t *keys) {
    const sup_config *c = &s->cfg;
    int64_t k = c->k;
    int mtp = c->kind == SUP_NI_MTP;
    model *ar = s->teacher;
    kf_backend *be = ar->be;
    int64_t m1 = n - 1, rows = B * m1;
    layout la;
    layout_ar(&la, m1);
    for (int64_t b = 0; b < B; b++)
        memcpy(s->blk + b * m1, tokens + b * n, (size_t)m1 * sizeof(int32_t));
    model_input in = {.lay = &la, .B = B, .ids = s->blk};
    const float *logits = model_forward(ar, s->ws1, &in, 0, NULL);
    int64_t V = ar->cfg.vocab;
    float *lg = kf_malloc((size_t)(rows * V) * sizeof(float));
    be->download(be, lg, logits, (size_t)(rows * V) * sizeof(float));
    double *lo = s->lo, *hi = s->lo + rows;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / m1, p = r % m1;
        sup_icdf_bin_sorted(lg + r * V, V, s->tau[b], tokens[b * n + p + 1], &lo[r], &hi[r]);
    }
    free(lg);
    layout_free(&la);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < np; t++)
            for (int64_t j = 0; j < k; j++) {
                int64_t p = b * m1 + t + j;
                double u = sup_uniform(c->seed, keys[b], SUP_RNG_INV, t, j);
                s->z[(b * np + t) * k + j] = lo[p] + u * (hi[p] - lo[p]);
                int32_t target =
                    t + 1 + j < valid_upto(valid_len, b, n) ? tokens[b * n + t + 1 + j] : -1;
                if (mtp) s->targets[(j * B + b) * np + t] = target; /* head-major */
                else s->targets[(b * np + t) * k + j] = target;
            }
}

static void sup_build_targets(sup_ctx *s, sup_batch *out, const int32_t *tokens, int64_t B,
                              int64_t n, const int32_t *valid_len, const uint64_t *keys,
                              int64_t slot) {
    const sup_config *c = &s->cfg;
    if (c->kind == SUP_MDLM) {
        if (s->lay_n != n) {
            if (s->lay_n) layout_free(&s->lay);
            layout_ar(&s->lay, n);
            s->lay_n = n;
        }
        grow(s, (size_t)(B * n + 16));
        targets_mdlm(s, tokens, B, n, valid_len, keys, &out->n_targets);
        out->rows = B * n;
        out->targets = s->targets, out->targets_d = NULL;
        out->lay = &s->lay;
        out->in = (model_input){.lay = &s->lay, .B = B, .ids = s->ids, .loss_w = s->loss_w};
        out->n_ctx = n;
        return;
    }
    int ar = c->kind == SUP_AR || c->kind == SUP_MEDUSA; /* the AR's rows */
    int64_t k = c->k, np = ar ? n - 1 : n - k;
    KF_CHECK(np >= 1, "supervision: samples of %lld tokens are too short for k = %lld",
             (long long)n, (long long)k);
    int mtp = c->kind == SUP_NI_MTP;
    int64_t g = mtp ? 1 : k; /* noise rows per position */
    if (s->lay_n != np) {
        if (s->lay_n) layout_free(&s->lay);
        if (ar) layout_ar(&s->lay, np);
        else layout_single(&s->lay, np, g);
        s->lay_n = np;
    }
    int64_t L = s->lay.L;
    grow(s, (size_t)(B * (L > n ? L : n) * k + B * n + 16));
    memset(s->ids, 0, (size_t)(B * L) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) {
        memcpy(s->ids + b * L, tokens + b * n, (size_t)np * sizeof(int32_t));
        memcpy(s->ctx + b * np, tokens + b * n, (size_t)np * sizeof(int32_t));
        s->tau[b] = c->tau_min +
                    (c->tau_max - c->tau_min) * sup_uniform(c->seed, keys[b], SUP_RNG_TAU, 0, 0);
    }
    out->rows = B * np * (c->kind == SUP_MEDUSA ? 1 + k : k);
    out->targets = NULL, out->targets_d = NULL, out->n_targets = 0;
    if (c->kind == SUP_DISTILL_AR || c->kind == SUP_SELF_FORCING) {
        targets_teacher(s, out, B, n, np, valid_len, keys, slot);
    } else {
        if (c->kind == SUP_AR) targets_ar(s, tokens, B, n, np, valid_len);
        else if (c->kind == SUP_MEDUSA) targets_medusa(s, tokens, B, n, np, valid_len);
        else targets_noise_inversion(s, tokens, B, n, np, valid_len, keys);
        out->targets = s->targets;
        for (int64_t r = 0; r < out->rows; r++) out->n_targets += s->targets[r] >= 0;
    }
    /* student noise rows: (t, j) -> row n + t*g + j holding g (or k for MTP) values */
    if (!ar) {
        memset(s->z1, 0, (size_t)(B * L * (mtp ? k : 1)) * sizeof(double));
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < np; t++)
                for (int64_t j = 0; j < k; j++) {
                    double v = s->z[(b * np + t) * k + j];
                    if (mtp) s->z1[(b * L + layout_group_row(np, 1, t, 0)) * k + j] = v;
                    else s->z1[b * L + layout_group_row(np, k, t, j)] = v;
                }
    }
    out->lay = &s->lay;
    out->in =
        (model_input){.lay = &s->lay, .B = B, .ids = s->ids, .z = ar ? NULL : s->z1, .tau = s->tau};
    out->n_ctx = np;
}

const int32_t *sup_host_targets(sup_ctx *s, sup_batch *b) {
    if (!b->targets) {
        kf_backend *be = s->teacher->be;
        be->download(be, s->targets, b->targets_d, (size_t)b->rows * sizeof(int32_t));
        b->targets = s->targets;
    }
    return b->targets;
}

void sup_build(sup_ctx *s, sup_batch *out, const int32_t *tokens, int64_t B, int64_t n,
               const int32_t *valid_len, const uint64_t *keys) {
    sup_build_slot(s, -1, out, tokens, B, n, valid_len, keys);
}

void sup_build_slot(sup_ctx *s, int64_t slot, sup_batch *out, const int32_t *tokens, int64_t B,
                    int64_t n, const int32_t *valid_len, const uint64_t *keys) {
    /* Teacher passes run batch-invariant: a sample's targets must not depend on
     * the batch it is in, or the student sees contradictory supervision. They
     * run in the stage's fixed teacher precision (fp32 by default, as the
     * release's stage-1 teacher does), not the student's phase: 16-bit
     * rounding moves inverse-CDF samples into neighbouring bins, so the noise
     * -> token map would change at every phase switch. teacher_follow keeps
     * the student's phase, as the release's later teachers run. */
    kf_backend *tbe = s->teacher ? s->teacher->be : NULL;
    int saved_invariant = tbe ? tbe->batch_invariant : 0;
    kf_precision saved_precision = tbe ? tbe->precision : KF_PREC_FP32;
    if (tbe) {
        tbe->batch_invariant = 1;
        if (!s->cfg.teacher_follow) tbe->set_precision(tbe, s->cfg.teacher_precision);
    }
    sup_build_targets(s, out, tokens, B, n, valid_len, keys, slot);
    if (tbe) {
        tbe->batch_invariant = saved_invariant;
        tbe->set_precision(tbe, saved_precision);
    }
}
