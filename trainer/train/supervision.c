/* trainer/train/supervision.c — per-stage student inputs and teacher targets
 * (see supervision.h). */
#include "trainer/train/supervision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

struct sup_ctx {
    sup_config cfg;
    model *teacher;
    model_ws *ws1, *ws2;
    layout lay;
    int64_t lay_n; /* context length the cached student layout was built for */
    int32_t *ids, *targets, *ctx, *blk;
    double *z, *tau, *z1, *z2, *lo;
    size_t cap;
    int32_t *picks; /* the teacher's picks, on its device (sup_ar_blocks, sup_pflm_rounds) */
    size_t picks_cap;
    int32_t *targets_d, *from_d; /* the student's targets gathered from picks, and where from */
    size_t targets_cap;
};

static const char *const kind_names[] = {"ar", "distill_ar", "self_forcing",
                                         "noise_inversion_causal", "noise_inversion_mtp"};

int sup_kind_from_name(const char *name) {
    for (int i = 0; i < (int)(sizeof kind_names / sizeof *kind_names); i++)
        if (strcmp(name, kind_names[i]) == 0) return i;
    return -1;
}

double sup_uniform(uint64_t seed, uint64_t key, int purpose, int64_t t, int64_t j) {
    uint64_t idx = ((uint64_t)purpose << 56) | ((uint64_t)t << 16) | (uint64_t)j;
    return rng_uniform01(seed, key, idx);
}

model_config sup_student_config(const sup_config *cfg, const model_config *base) {
    model_config c = *base;
    c.kind = cfg->kind == SUP_AR ? MODEL_AR : MODEL_PFLM;
    c.head = cfg->kind == SUP_NI_MTP ? HEAD_MTP : HEAD_SHARED;
    c.k_train = cfg->kind == SUP_AR ? 1 : cfg->k;
    return c;
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

void sup_free(sup_ctx *s) {
    if (!s) return;
    if (s->picks) s->teacher->be->free(s->teacher->be, s->picks);
    if (s->targets_d) {
        s->teacher->be->free(s->teacher->be, s->targets_d);
        s->teacher->be->free(s->teacher->be, s->from_d);
    }
    model_ws_free(s->ws1);
    model_ws_free(s->ws2);
    if (s->lay_n) layout_free(&s->lay);
    free(s->ids);
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

void sup_ar_blocks(model *ar, model_ws *ws, const int32_t *ctx, int64_t B, int64_t n, int64_t k,
                   const double *z, const double *tau, int32_t *picks, int32_t *out) {
    int64_t rows = B * n;
    double *zr = kf_malloc((size_t)rows * sizeof(double)),
           *tr = kf_malloc((size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++) tr[r] = tau[r / n];
    layout lay;
    layout_ar(&lay, n);
    model_input in = {.lay = &lay, .B = B, .ids = ctx};
    model_forward(ar, ws, &in, MODEL_NO_LOGITS, NULL);
    for (int64_t r = 0; r < rows; r++) zr[r] = z[r * k];
    model_pick(ar, ws, rows, zr, tr, picks);
    layout_free(&lay);
    if (k > 1) {
        /* group t holds the block's tokens so far: pass j reads the picks of
         * passes 0..j-1 (picks[jj * rows + (b, t)] at row (t, jj)) on the
         * device, and its row (t, j-1) predicts token j */
        layout_blocks(&lay, n, k - 1);
        int64_t L = lay.L;
        int32_t *ids = kf_calloc((size_t)(B * L), sizeof(int32_t));
        int32_t *at = kf_malloc((size_t)((k - 1) * rows) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++) {
            memcpy(ids + b * L, ctx + b * n, (size_t)n * sizeof(int32_t));
            for (int64_t jj = 0; jj < k - 1; jj++)
                for (int64_t t = 0; t < n; t++)
                    at[jj * rows + b * n + t] =
                        (int32_t)(b * L + layout_group_row(n, k - 1, t, jj));
        }
        lay.n_out = n;
        in = (model_input){.lay = &lay, .B = B, .ids = ids, .picks = picks, .pick_at = at};
        for (int64_t j = 1; j < k; j++) {
            in.n_picks = j * rows;
            for (int64_t t = 0; t < n; t++)
                lay.out_rows[t] = (int32_t)layout_group_row(n, k - 1, t, j - 1);
            model_forward(ar, ws, &in, MODEL_NO_LOGITS, NULL);
            for (int64_t r = 0; r < rows; r++) zr[r] = z[r * k + j];
            model_pick(ar, ws, rows, zr, tr, picks + j * rows);
        }
        free(ids);
        free(at);
        layout_free(&lay);
    }
    free(zr);
    free(tr);
    if (!out) return;
    /* the passes' one wait for the device */
    int32_t *got = kf_malloc((size_t)(k * rows) * sizeof(int32_t));
    ar->be->download(ar->be, got, picks, (size_t)(k * rows) * sizeof(int32_t));
    for (int64_t j = 0; j < k; j++)
        for (int64_t r = 0; r < rows; r++) out[r * k + j] = got[j * rows + r];
    free(got);
}

void sup_pflm_rounds(model *pf, model_ws *ws1, model_ws *ws2, const int32_t *ctx, int64_t B,
                     int64_t n, int64_t k, const double *z, int64_t k2, const double *z2,
                     const double *tau, int32_t *picks, int32_t *out) {
    KF_CHECK(pf->cfg.kind == MODEL_PFLM && pf->cfg.head == HEAD_SHARED,
             "sup_pflm_rounds: needs a PFLM with the shared head");
    KF_CHECK(k2 == 0 || k2 == k, "sup_pflm_rounds: the second round has k tokens");
    int64_t w = k + k2, rows = B * n * k;
    layout l1;
    layout_single(&l1, n, k);
    int64_t L = l1.L;
    int32_t *ids = kf_calloc((size_t)(B * (n + 2 * n * k)), sizeof(int32_t));
    double *zz = kf_calloc((size_t)(B * (n + 2 * n * k)), sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        memcpy(ids + b * L, ctx + b * n, (size_t)n * sizeof(int32_t));
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < k; j++)
                zz[b * L + layout_group_row(n, k, t, j)] = z[(b * n + t) * k + j];
    }
    model_input in = {.lay = &l1, .B = B, .ids = ids, .z = zz, .tau = tau};
    model_forward(pf, ws1, &in, MODEL_NO_LOGITS | (k2 ? MODEL_KEEP_CTX_KV : 0), NULL);
    model_pick(pf, ws1, rows, NULL, NULL, picks);
    layout_free(&l1);
    if (k2) {
        /* round 2 reads round 1's picks (row r = (b, t, j)) on the device */
        layout l2;
        layout_double(&l2, n, k);
        int64_t L2 = l2.L;
        int32_t *at = kf_malloc((size_t)rows * sizeof(int32_t));
        memset(ids, 0, (size_t)(B * L2) * sizeof(int32_t));
        memset(zz, 0, (size_t)(B * L2) * sizeof(double));
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < n; t++)
                for (int64_t j = 0; j < k; j++) {
                    at[(b * n + t) * k + j] = (int32_t)(b * L2 + layout_group_row(n, 2 * k, t, j));
                    zz[b * L2 + layout_group_row(n, 2 * k, t, k + j)] = z2[(b * n + t) * k + j];
                }
        in = (model_input){.lay = &l2,
                           .B = B,
                           .ids = ids,
                           .picks = picks,
                           .pick_at = at,
                           .n_picks = rows,
                           .z = zz,
                           .tau = tau};
        model_forward(pf, ws2, &in, MODEL_NO_LOGITS, ws1);
        model_pick(pf, ws2, rows, NULL, NULL, picks + rows);
        free(at);
        layout_free(&l2);
    }
    free(ids);
    free(zz);
    if (!out) return;
    /* both rounds' one wait for the device */
    int64_t nr = (k2 ? 2 : 1) * rows;
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
 * from the picks on the device (out->targets_d), so nothing waits here. */
static void targets_teacher(sup_ctx *s, sup_batch *out, int64_t B, int64_t n, int64_t np,
                            const int32_t *valid_len, const uint64_t *keys) {
    const sup_config *c = &s->cfg;
    int64_t k = c->k;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < np; t++)
            for (int64_t j = 0; j < k; j++)
                s->z[(b * np + t) * k + j] = sup_uniform(c->seed, keys[b], SUP_RNG_Z, t, j);
    int32_t *picks = picks_buf(s, B * np * k);
    if (c->kind == SUP_DISTILL_AR) {
        sup_ar_blocks(s->teacher, s->ws1, s->ctx, B, np, k, s->z, s->tau, picks, NULL);
    } else {
        int64_t h = k / 2;
        for (int64_t r = 0; r < B * np; r++)
            for (int64_t j = 0; j < h; j++) {
                s->z1[r * h + j] = s->z[r * k + j];
                s->z2[r * h + j] = s->z[r * k + h + j];
            }
        sup_pflm_rounds(s->teacher, s->ws1, s->ws2, s->ctx, B, np, h, s->z1, h, s->z2, s->tau,
                        picks, NULL);
    }
    /* target (b, t, j) is pick from[r] (where sup_ar_blocks and sup_pflm_rounds
     * leave token j of block (b, t)), or -1 past valid_len; every pick is a
     * token id, so the count is known here */
    int64_t rows = B * np * k, h = k / 2, n_targets = 0;
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
    kf_backend *be = s->teacher->be;
    if ((size_t)rows > s->targets_cap) {
        if (s->targets_d) be->free(be, s->targets_d), be->free(be, s->from_d);
        s->targets_d = be->alloc(be, (size_t)rows * sizeof(int32_t));
        s->from_d = be->alloc(be, (size_t)rows * sizeof(int32_t));
        s->targets_cap = (size_t)rows;
    }
    be->upload(be, s->from_d, s->blk, (size_t)rows * sizeof(int32_t));
    be->gather_ids(be, s->targets_d, picks, s->from_d, rows);
    out->targets_d = s->targets_d;
    out->n_targets = n_targets;
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
                              int64_t n, const int32_t *valid_len, const uint64_t *keys) {
    const sup_config *c = &s->cfg;
    int64_t k = c->k, np = c->kind == SUP_AR ? n - 1 : n - k;
    KF_CHECK(np >= 1, "supervision: samples of %lld tokens are too short for k = %lld",
             (long long)n, (long long)k);
    int mtp = c->kind == SUP_NI_MTP;
    int64_t g = mtp ? 1 : k; /* noise rows per position */
    if (s->lay_n != np) {
        if (s->lay_n) layout_free(&s->lay);
        if (c->kind == SUP_AR) layout_ar(&s->lay, np);
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
    out->rows = B * np * k;
    out->targets = NULL, out->targets_d = NULL, out->n_targets = 0;
    if (c->kind == SUP_DISTILL_AR || c->kind == SUP_SELF_FORCING) {
        targets_teacher(s, out, B, n, np, valid_len, keys);
    } else {
        if (c->kind == SUP_AR) targets_ar(s, tokens, B, n, np, valid_len);
        else targets_noise_inversion(s, tokens, B, n, np, valid_len, keys);
        out->targets = s->targets;
        for (int64_t r = 0; r < out->rows; r++) out->n_targets += s->targets[r] >= 0;
    }
    /* student noise rows: (t, j) -> row n + t*g + j holding g (or k for MTP) values */
    if (c->kind != SUP_AR) {
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
    out->in = (model_input){.lay = &s->lay,
                            .B = B,
                            .ids = s->ids,
                            .z = c->kind == SUP_AR ? NULL : s->z1,
                            .tau = s->tau};
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
    /* Teacher passes run batch-invariant: a sample's targets must not depend on
     * the batch it is in, or the student sees contradictory supervision. They
     * run in the stage's fixed teacher precision (fp32 by default, as the
     * released teacher does), never the student's phase: 16-bit rounding moves
     * inverse-CDF samples into neighbouring bins, so the noise -> token map
     * would change at every phase switch. */
    kf_backend *tbe = s->teacher ? s->teacher->be : NULL;
    int saved_invariant = tbe ? tbe->batch_invariant : 0;
    kf_precision saved_precision = tbe ? tbe->precision : KF_PREC_FP32;
    if (tbe) {
        tbe->batch_invariant = 1;
        tbe->set_precision(tbe, s->cfg.teacher_precision);
    }
    sup_build_targets(s, out, tokens, B, n, valid_len, keys);
    if (tbe) {
        tbe->batch_invariant = saved_invariant;
        tbe->set_precision(tbe, saved_precision);
    }
}
