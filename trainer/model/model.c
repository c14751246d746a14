/* trainer/model/model.c — parameters, initialisation, forward and backward of the
 * DDiT backbone with the AR head, the PFLM noise encoder and the MTP heads.
 * Every computation is a kernels.h op; this file only orchestrates. */
#include "trainer/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "trainer/model/model_internal.h"

static uint64_t g_allocs; /* model_allocs */

/* ---------------------------------------------------------------- config */

int model_config_check(const model_config *c, kf_err *err) {
    if (c->hidden <= 0 || c->heads <= 0 || c->blocks <= 0 || c->vocab <= 1 || c->seq_len <= 1)
        return kf_err_set(err,
                          "model: hidden, heads, blocks must be > 0 and vocab, seq_len > 1 "
                          "(got %lld, %lld, %lld, %lld, %lld)",
                          (long long)c->hidden, (long long)c->heads, (long long)c->blocks,
                          (long long)c->vocab, (long long)c->seq_len);
    if (c->hidden % c->heads || (c->pos == POS_ROPE && (c->hidden / c->heads) % 2))
        return kf_err_set(err,
                          "model.hidden (%lld) must split into model.heads (%lld) heads of "
                          "an even dimension (RoPE rotates pairs)",
                          (long long)c->hidden, (long long)c->heads);
    if (c->hidden % 2) return kf_err_set(err, "model.hidden must be even");
    if (c->mask_id >= c->vocab || c->mask_id < -1)
        return kf_err_set(err, "model: mask_id %lld outside the vocabulary of %lld",
                          (long long)c->mask_id, (long long)c->vocab);
    if (c->kind != MODEL_AR && c->kind != MODEL_PFLM) return kf_err_set(err, "model: bad kind");
    if (c->k_train < 1 || c->k_train > 64)
        return kf_err_set(err, "model: k must be in [1, 64] (got %lld)", (long long)c->k_train);
    if (c->kind == MODEL_AR && c->head != HEAD_MEDUSA &&
        (c->k_train != 1 || c->head != HEAD_SHARED))
        return kf_err_set(err, "model: an AR model has k = 1 and the shared head");
    if (c->head != HEAD_SHARED && c->head != HEAD_MTP && c->head != HEAD_MEDUSA)
        return kf_err_set(err, "model: bad head");
    if (c->head == HEAD_MEDUSA && c->kind != MODEL_AR)
        return kf_err_set(err, "model: Medusa heads sit on an AR model");
    if (c->pos != POS_ROPE && c->pos != POS_LEARNED) return kf_err_set(err, "model: bad pos");
    if (c->pos == POS_LEARNED ? c->n_positions < c->seq_len : c->n_positions != 0)
        return kf_err_set(err,
                          "model: n_positions %lld: learned positions need at least seq_len "
                          "(%lld), RoPE 0",
                          (long long)c->n_positions, (long long)c->seq_len);
    if ((c->tied_head | c->norm_bias | c->attn_bias) & ~1)
        return kf_err_set(err,
                          "model: tied_head, norm_bias and attn_bias are 0 or 1 (got %d, %d, %d)",
                          c->tied_head, c->norm_bias, c->attn_bias);
    if (c->bidir & ~1) return kf_err_set(err, "model: bidir is 0 or 1 (got %d)", c->bidir);
    if (c->bidir && c->kind != MODEL_AR)
        return kf_err_set(err, "model: bidirectional attention needs the AR kind (no noise rows)");
    if (c->tied_head && c->head != HEAD_SHARED)
        return kf_err_set(err, "model: a tied output layer needs the shared head (not MTP or "
                               "Medusa)");
    if (c->noise_cycles < 0 || c->noise_cycles > MODEL_NOISE_CYCLES_MAX)
        return kf_err_set(err, "model: noise_cycles %lld outside [0, %d]",
                          (long long)c->noise_cycles, MODEL_NOISE_CYCLES_MAX);
    if (c->noise_cycles && c->kind != MODEL_PFLM)
        return kf_err_set(err,
                          "model: noise_cycles is a PFLM's (an AR model has no noise encoder)");
    return 0;
}

/* ---------------------------------------------------------------- tensors */

static int64_t add_tensor(model *m, int cap, const char *name, int64_t r, int64_t c) {
    KF_CHECK(m->n_tensors < cap, "model: tensor table overflow");
    model_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = c ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = c;
    t->numel = c ? r * c : r;
    t->offset = m->n_params;
    m->n_params += t->numel;
    return t->offset;
}

/* Adds an optional tensor; -1 when the architecture has none. */
static int64_t add_opt(model *m, int cap, int present, const char *name, int64_t r, int64_t c) {
    return present ? add_tensor(m, cap, name, r, c) : -1;
}

model *model_create(kf_backend *be, const model_config *cfg) {
    kf_err err = {{0}};
    KF_CHECK(model_config_check(cfg, &err) == 0, "%s", err.msg);
    model *m = kf_calloc(1, sizeof *m);
    m->be = be;
    m->cfg = *cfg;
    int64_t H = cfg->hidden, V = cfg->vocab, nb = cfg->blocks;
    int heads = cfg->head == HEAD_MTP      ? (int)cfg->k_train
                : cfg->head == HEAD_MEDUSA ? 1 + (int)cfg->k_train
                                           : 1;
    int nbias = cfg->norm_bias, abias = cfg->attn_bias;
    m->n_heads_out = heads;
    int cap = (int)(2 + 12 * nb + 4 * heads + 8);
    m->tensors = kf_calloc((size_t)cap, sizeof *m->tensors);
    model_priv *p = kf_calloc(1, sizeof *p);
    m->priv = p;
    p->blk = kf_calloc((size_t)nb, sizeof *p->blk);
    p->head = kf_calloc((size_t)heads, sizeof *p->head);
    char nm[64];
    p->embed = add_tensor(m, cap, "vocab_embed.embedding", V, H);
    p->pos = add_opt(m, cap, cfg->pos == POS_LEARNED, "pos_embed.embedding", cfg->n_positions, H);
    for (int64_t l = 0; l < nb; l++) {
        block_off *b = &p->blk[l];
#define T(field, present, suffix, r, c)                                                            \
    snprintf(nm, sizeof nm, "blocks.%lld." suffix, (long long)l);                                  \
    b->field = add_opt(m, cap, present, nm, r, c)
        T(norm1, 1, "norm1.weight", H, 0);
        T(norm1_b, nbias, "norm1.bias", H, 0);
        T(qkv, 1, "attn_qkv.weight", 3 * H, H);
        T(qkv_b, abias, "attn_qkv.bias", 3 * H, 0);
        T(out, 1, "attn_out.weight", H, H);
        T(out_b, abias, "attn_out.bias", H, 0);
        T(norm2, 1, "norm2.weight", H, 0);
        T(norm2_b, nbias, "norm2.bias", H, 0);
        T(fc1_w, 1, "mlp.0.weight", 4 * H, H);
        T(fc1_b, 1, "mlp.0.bias", 4 * H, 0);
        T(fc2_w, 1, "mlp.2.weight", H, 4 * H);
        T(fc2_b, 1, "mlp.2.bias", H, 0);
#undef T
    }
    p->heads_begin = m->n_params;
    for (int h = 0; h < heads; h++) {
        head_off *o = &p->head[h];
        o->res_w = o->res_b = -1;
        if (h > 0 && cfg->head == HEAD_MEDUSA) {
            /* the AR head's final norm, then a residual block and a linear
             * layer without bias */
            o->norm = p->head[0].norm;
            o->norm_b = p->head[0].norm_b;
            snprintf(nm, sizeof nm, "medusa_heads.%d.res.weight", h);
            o->res_w = add_tensor(m, cap, nm, H, H);
            snprintf(nm, sizeof nm, "medusa_heads.%d.res.bias", h);
            o->res_b = add_tensor(m, cap, nm, H, 0);
            snprintf(nm, sizeof nm, "medusa_heads.%d.linear.weight", h);
            o->w = add_tensor(m, cap, nm, V, H);
            o->b = -1;
            continue;
        }
        const char *pre = "output_layer";
        char pb[32];
        if (h > 0) {
            snprintf(pb, sizeof pb, "mtp_heads.%d", h);
            pre = pb;
        }
        snprintf(nm, sizeof nm, "%s.norm_final.weight", pre);
        o->norm = add_tensor(m, cap, nm, H, 0);
        snprintf(nm, sizeof nm, "%s.norm_final.bias", pre);
        o->norm_b = add_opt(m, cap, nbias, nm, H, 0);
        snprintf(nm, sizeof nm, "%s.linear.weight", pre);
        o->w = cfg->tied_head ? p->embed : add_tensor(m, cap, nm, V, H);
        snprintf(nm, sizeof nm, "%s.linear.bias", pre);
        o->b = add_opt(m, cap, !cfg->tied_head, nm, V, 0);
    }
    p->heads_end = m->n_params;
    if (cfg->kind == MODEL_PFLM) {
        p->zdim = cfg->head == HEAD_MTP ? cfg->k_train : 1;
        int64_t ZD = 2 * H * p->zdim;
        noise_off *n = &p->noise;
        n->proj_w = add_tensor(m, cap, "noise_encoder.combined_proj.weight", H, ZD);
        n->proj_b = add_tensor(m, cap, "noise_encoder.combined_proj.bias", H, 0);
        n->norm_w = add_tensor(m, cap, "noise_encoder.norm.weight", H, 0);
        n->norm_b = add_tensor(m, cap, "noise_encoder.norm.bias", H, 0);
        n->fc1_w = add_tensor(m, cap, "noise_encoder.mlp.0.weight", 4 * H, H);
        n->fc1_b = add_tensor(m, cap, "noise_encoder.mlp.0.bias", 4 * H, 0);
        n->fc2_w = add_tensor(m, cap, "noise_encoder.mlp.2.weight", H, 4 * H);
        n->fc2_b = add_tensor(m, cap, "noise_encoder.mlp.2.bias", H, 0);
    }
    m->params = be->alloc(be, (size_t)m->n_params * sizeof(float));
    m->grads = be->alloc(be, (size_t)m->n_params * sizeof(float));
    return m;
}

void model_free(model *m) {
    if (!m) return;
    model_priv *p = m->priv;
    m->be->free(m->be, m->params);
    m->be->free(m->be, m->grads);
    if (p->w16) m->be->free(m->be, p->w16);
    free(p->blk);
    free(p->head);
    free(p);
    free(m->tensors);
    free(m);
}

const model_tensor *model_find(const model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

void model_init(model *m, uint64_t seed) {
    float *host = kf_malloc((size_t)m->n_params * sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        float *dst = host + t->offset;
        int is_norm = strstr(t->name, "norm") != NULL;
        /* output_layer, mtp and Medusa heads; a Medusa residual block starts
         * as the identity, as Medusa's */
        int is_out = strstr(t->name, ".linear.") != NULL || ends_with(t->name, ".res.weight");
        if (is_out) {
            memset(dst, 0, (size_t)t->numel * sizeof(float));
        } else if (is_norm) {
            float v = ends_with(t->name, ".weight") ? 1.0f : 0.0f;
            for (int64_t e = 0; e < t->numel; e++) dst[e] = v;
        } else {
            /* Linear: fan_in = in features (weight cols); a bias shares its
             * weight's fan_in, the tensor just before it. Embedding: H. */
            int64_t fan_in = t->ndim == 2 ? t->shape[1] : m->tensors[i - 1].shape[1];
            double bound = 1.0 / sqrt((double)fan_in);
            for (int64_t e = 0; e < t->numel; e++)
                dst[e] =
                    (float)((2.0 * rng_uniform01(seed, (uint64_t)i, (uint64_t)e) - 1.0) * bound);
        }
    }
    m->be->upload(m->be, m->params, host, (size_t)m->n_params * sizeof(float));
    free(host);
    model_params_changed(m);
    model_zero_grads(m);
}

void model_params_changed(model *m) { m->priv->w16_fresh = 0; }

/* The copy covers every parameter (norms and biases too: one pass, and an
 * offset into params is one into the copy); fp16 and bf16 round
 * differently, so a copy serves only the format it was made in. */
const void *model_w16(model *m, int64_t w) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    if (!gemm_in16(m)) return NULL;
    if (!p->w16) p->w16 = be->alloc(be, (size_t)m->n_params * 2), g_allocs++;
    if (!p->w16_fresh || p->w16_prec != be->precision) {
        be->copy_to16(be, p->w16, m->params, m->n_params);
        p->w16_prec = be->precision;
        p->w16_fresh = 1;
    }
    return (const char *)p->w16 + 2 * w;
}

void model_zero_grads(model *m) {
    m->be->zero(m->be, m->grads, (size_t)m->n_params * sizeof(float));
}

int model_copy_matching(model *m, const model *src) {
    int copied = 0;
    float *host = NULL;
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        const model_tensor *s = model_find(src, t->name);
        int mtp = strncmp(t->name, "mtp_heads.", 10) == 0,
            medusa = strncmp(t->name, "medusa_heads.", 13) == 0;
        if (!s && (mtp || (medusa && ends_with(t->name, ".linear.weight")))) {
            /* Medusa's heads start from the AR's output layer, as Medusa's */
            const char *rest = strchr(t->name + (mtp ? 10 : 13), '.');
            char alt[64];
            snprintf(alt, sizeof alt, "output_layer%s", rest);
            s = model_find(src, alt);
        }
        if (!s || s->numel != t->numel || s->shape[0] != t->shape[0] || s->shape[1] != t->shape[1])
            continue;
        size_t bytes = (size_t)t->numel * sizeof(float);
        if (src->be == m->be) {
            m->be->copy(m->be, m->params + t->offset, src->params + s->offset, bytes);
        } else {
            host = kf_realloc(host, bytes);
            src->be->download(src->be, host, src->params + s->offset, bytes);
            m->be->upload(m->be, m->params + t->offset, host, bytes);
        }
        copied++;
    }
    free(host);
    model_params_changed(m);
    return copied;
}

/* ---------------------------------------------------------------- buffers */

uint64_t model_allocs(void) { return g_allocs; }

void *dbuf_ensure(kf_backend *be, dbuf *d, size_t bytes) {
    if (bytes == 0) bytes = 16;
    if (bytes > d->cap) {
        if (d->p) be->free(be, d->p);
        d->p = be->alloc(be, bytes);
        g_allocs++;
        d->cap = bytes;
    }
    return d->p;
}

void dbuf_release(kf_backend *be, dbuf *d) {
    if (d->p) be->free(be, d->p);
    d->p = NULL;
    d->cap = 0;
}

/* Uploads n host elements of size esz into d (grown as needed). */
void *dbuf_upload(kf_backend *be, dbuf *d, const void *src, size_t n, size_t esz) {
    void *p = dbuf_ensure(be, d, n * esz);
    if (n) be->upload(be, p, src, n * esz);
    return p;
}

/* ---------------------------------------------------------------- layers */

int gemm_in16(const model *m) { return m->be->precision != KF_PREC_FP32; }

/* y = act(x W^T + b) (+ beta y) with its pre-activation kept in pre for the
 * backward; x and y as gemm_in16 stores them (x16, y16: 16-bit copies).
 * Through W's decode-time form lin when given (NULL: none): the same bits. */
static void linear_any_fwd(model *m, const void *lin, float *y, void *y16, float *pre,
                           const float *x, const void *x16, int64_t w, int64_t bias, int64_t rows,
                           int64_t in, int64_t out, kf_act act, float beta) {
    const float *bp = bias >= 0 ? m->params + bias : NULL;
    if (lin) m->be->linear_packed_fwd(m->be, y, y16, pre, x, x16, lin, bp, rows, act, beta);
    else
        m->be->linear_act(m->be, y, y16, pre, x, x16, m->params + w, bp, rows, in, out, act, beta,
                          model_w16(m, w));
}

static void linear_act_fwd(model *m, const void *lin, float *h, void *h16, float *pre,
                           const float *x, const void *x16, int64_t w, int64_t bias, int64_t rows,
                           int64_t in, int64_t out, kf_act act) {
    linear_any_fwd(m, lin, h, h16, pre, x, x16, w, bias, rows, in, out, act, 0.0f);
}

void linear_fwd(model *m, const void *lin, float *y, const float *x, const void *x16, int64_t w,
                int64_t bias, int64_t rows, int64_t in, int64_t out, float beta) {
    linear_any_fwd(m, lin, y, NULL, NULL, x, x16, w, bias, rows, in, out, KF_ACT_NONE, beta);
}

/* The gradient through fc2 into fc1's pre-activation: dW2 and db2 from dy
 * and fc2's input (h, or its 16-bit copy h16), then dpre = act'(pre) *
 * (dy W2) (or its 16-bit copy dpre16) and db1 in one op. dy16 (NULL: none)
 * is dy's 16-bit copy, which the products read (db2's sum reads dy). */
static void mlp_out_bwd(model *m, float *dpre, void *dpre16, const float *dy, const void *dy16,
                        const float *h, const void *h16, const float *pre, int64_t fc2_w,
                        int64_t fc2_b, int64_t fc1_b, int64_t rows, int64_t wide, int64_t H,
                        kf_act act) {
    linear_bwd(m, NULL, 0.0f, dy, fc2_b < 0 ? dy16 : NULL, h, h16, fc2_w, fc2_b, rows, wide, H);
    m->be->linear_act_dgrad(m->be, dpre, dpre16, fc1_b >= 0 ? m->grads + fc1_b : NULL, dy,
                            m->params + fc2_w, pre, rows, wide, H, act, model_w16(m, fc2_w), dy16);
}

void linear_bwd(model *m, float *dx, float dx_beta, const float *dy, const void *dy16,
                const float *x, const void *x16, int64_t w, int64_t bias, int64_t rows, int64_t in,
                int64_t out) {
    m->be->linear_bwd(m->be, dx, m->grads + w, bias >= 0 ? m->grads + bias : NULL, dy, dy16, x, x16,
                      m->params + w, rows, in, out, dx_beta, dx ? model_w16(m, w) : NULL, NULL);
}

/* The noise encoder on nz rows whose features are ws->feats; result in out. */
void noise_encoder_fwd(model *m, noise_act *a, int64_t nz, const double *z_d, const double *tau_d,
                       void *const *lin) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    const noise_off *o = &p->noise;
    int64_t H = m->cfg.hidden, ZD = 2 * H * p->zdim;
    size_t f = sizeof(float);
    float *feats = dbuf_ensure(be, &a->feats, (size_t)(nz * ZD) * f);
    float *c = dbuf_ensure(be, &a->c, (size_t)(nz * H) * f);
    float *ln = dbuf_ensure(be, &a->ln, (size_t)(nz * H) * f);
    float *mean = dbuf_ensure(be, &a->mean, (size_t)nz * f);
    float *rstd = dbuf_ensure(be, &a->rstd, (size_t)nz * f);
    float *h1 = dbuf_ensure(be, &a->h1, (size_t)(nz * 4 * H) * f);
    float *h2 = dbuf_ensure(be, &a->h2, (size_t)(nz * 4 * H) * f);
    float *out = dbuf_ensure(be, &a->out, (size_t)(nz * H) * f);
    /* zdim noise values per row, each with the row's tau: features of value
     * e land at columns [e*2H, (e+1)*2H) of row e / zdim. */
    be->noise_features(be, feats, z_d, tau_d, nz * p->zdim, H, m->cfg.noise_cycles);
    linear_fwd(m, lin ? lin[0] : NULL, c, feats, NULL, o->proj_w, o->proj_b, nz, ZD, H, 0.0f);
    be->layernorm_fwd(be, ln, NULL, mean, rstd, c, m->params + o->norm_w, m->params + o->norm_b, nz,
                      H, LN_EPS);
    linear_act_fwd(m, lin ? lin[1] : NULL, h2, NULL, h1, ln, NULL, o->fc1_w, o->fc1_b, nz, H, 4 * H,
                   KF_ACT_GELU_ERF);
    be->copy(be, out, c, (size_t)(nz * H) * f);
    linear_fwd(m, lin ? lin[2] : NULL, out, h2, NULL, o->fc2_w, o->fc2_b, nz, 4 * H, H, 1.0f);
}

/* Backward of noise_encoder_fwd given dout [nz, H] (no gradient to z). */
static void noise_encoder_bwd(model *m, noise_act *a, int64_t nz, const float *dout) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    const noise_off *o = &p->noise;
    int64_t H = m->cfg.hidden, ZD = 2 * H * p->zdim;
    size_t f = sizeof(float);
    float *dh = dbuf_ensure(be, &a->dh, (size_t)(nz * 4 * H) * f);
    float *dln = dbuf_ensure(be, &a->dln, (size_t)(nz * H) * f);
    float *dc = dbuf_ensure(be, &a->dc, (size_t)(nz * H) * f);
    mlp_out_bwd(m, dh, NULL, dout, NULL, a->h2.p, NULL, a->h1.p, o->fc2_w, o->fc2_b, o->fc1_b, nz,
                4 * H, H, KF_ACT_GELU_ERF);
    linear_bwd(m, dln, 0.0f, dh, NULL, a->ln.p, NULL, o->fc1_w, -1, nz, H, 4 * H);
    be->copy(be, dc, dout, (size_t)(nz * H) * f);
    be->layernorm_bwd(be, dc, m->grads + o->norm_w, m->grads + o->norm_b, dln, a->c.p,
                      m->params + o->norm_w, a->mean.p, a->rstd.p, nz, H, NULL);
    linear_bwd(m, NULL, 0.0f, dc, NULL, a->feats.p, NULL, o->proj_w, o->proj_b, nz, ZD, H);
}

/* y = LayerNorm(x) with weight w and bias b (-1: none) over R rows, into
 * growable buffers that keep mean and rstd for the backward; y as a 16-bit
 * copy when y16 (kernels.h), else fp32; returns y. */
static void *norm_fwd(model *m, dbuf *y, dbuf *mean, dbuf *rstd, const float *x, int64_t w,
                      int64_t b, int64_t R, int y16) {
    kf_backend *be = m->be;
    int64_t H = m->cfg.hidden;
    size_t f = sizeof(float);
    void *yp = dbuf_ensure(be, y, (size_t)(R * H) * (y16 ? 2 : f));
    be->layernorm_fwd(be, y16 ? NULL : yp, y16 ? yp : NULL, dbuf_ensure(be, mean, (size_t)R * f),
                      dbuf_ensure(be, rstd, (size_t)R * f), x, m->params + w,
                      b >= 0 ? m->params + b : NULL, R, H, LN_EPS);
    return yp;
}

/* The fp32 view of an activation stored as gemm_in16 says (NULL when it is
 * a 16-bit copy), and its 16-bit view (NULL when it is fp32). */
static const float *in32(int s16, const void *p) { return s16 ? NULL : p; }
static const void *in16(int s16, const void *p) { return s16 ? p : NULL; }

void pos_embed_fwd(model *m, dbuf *tmp, float *x, const int32_t *pos, int64_t R) {
    kf_backend *be = m->be;
    int64_t H = m->cfg.hidden;
    float *t = dbuf_ensure(be, tmp, (size_t)(R * H) * sizeof(float));
    be->embed_fwd(be, t, pos, NULL, m->params + m->priv->pos, R, H);
    be->add_inplace(be, x, t, R * H);
}

/* Runs the MLP half of block l on x in place: x += mlp(norm2(x)); ln2 and
 * h2 (fc1's GELU output) stored as gemm_in16 says. */
void block_mlp_fwd(model *m, const block_off *o, layer_act *a, float *x, int64_t R,
                   void *const *lin) {
    kf_backend *be = m->be;
    int64_t H = m->cfg.hidden;
    int s16 = gemm_in16(m);
    size_t f = sizeof(float);
    float *h1 = dbuf_ensure(be, &a->h1, (size_t)(R * 4 * H) * f);
    void *h2 = dbuf_ensure(be, &a->h2, (size_t)(R * 4 * H) * (s16 ? 2 : f));
    void *ln2 = norm_fwd(m, &a->ln2, &a->mean2, &a->rstd2, x, o->norm2, o->norm2_b, R, s16);
    linear_act_fwd(m, lin ? lin[0] : NULL, s16 ? NULL : h2, s16 ? h2 : NULL, h1, in32(s16, ln2),
                   in16(s16, ln2), o->fc1_w, o->fc1_b, R, H, 4 * H, KF_ACT_GELU_TANH);
    linear_fwd(m, lin ? lin[1] : NULL, x, in32(s16, h2), in16(s16, h2), o->fc2_w, o->fc2_b, R,
               4 * H, H, 1.0f);
}

/* Head h's final norm over the R rows of xf (buffers in a, fp32); returns it. */
float *head_norm_fwd(model *m, head_act *a, int h, const float *xf, int64_t R) {
    const head_off *o = &m->priv->head[h];
    float *ln = norm_fwd(m, &a->ln, &a->mean, &a->rstd, xf, o->norm, o->norm_b, R, 0);
    if (o->res_w < 0) return ln;
    kf_backend *be = m->be;
    int64_t H = m->cfg.hidden;
    size_t bytes = (size_t)(R * H) * sizeof(float);
    float *pre = dbuf_ensure(be, &a->pre, bytes), *g = dbuf_ensure(be, &a->g, bytes),
          *u = dbuf_ensure(be, &a->u, bytes);
    linear_act_fwd(m, NULL, g, NULL, pre, ln, NULL, o->res_w, o->res_b, R, H, H, KF_ACT_GELU_TANH);
    be->copy(be, u, ln, bytes);
    be->add_inplace(be, u, g, R * H);
    return u;
}

const float *head_input(const model *m, const head_act *a, int h) {
    return m->priv->head[h].res_w >= 0 ? a->u.p : a->ln.p;
}

/* ---------------------------------------------------------------- workspace */

/* A pass's inputs that differ between passes recorded over one workspace
 * (model_ws_set_slot). */
typedef struct ws_slot {
    dbuf out_idx_d, pick_z_d, pick_tau_d;
} ws_slot;

struct model_ws {
    model *m;
    int64_t B, L, q0, Lc, R, n_out_rows, n_tok, n_noise;
    int train, keep_kv;
    kf_mask mask;
    int32_t *valid; /* host copy of valid_len */
    int64_t n_act;  /* per-layer activation slots allocated */
    layer_act *act; /* [blocks] (training) or [1] */
    dbuf *xs;       /* [blocks+1] residual stream (training) or [1] */
    dbuf *ctxkv;    /* [blocks] context qkv kept for a q_start pass */
    int64_t ctx_n;  /* n_ctx of the kept context K/V (0: none) */
    dbuf qkv_full, att_full, lse_full;
    dbuf pos_d, tok_ids_d, tok_rows_d, noise_rows_d, z_d, tau_d, ctx_idx_d, comp_idx_d;
    dbuf posrow_d, pos_tmp; /* POS_LEARNED: each row's position, pos_embed rows */
    noise_act nact;
    head_act *hact;
    dbuf xf, logits, targets_d, losses_d, valid_d, gscale_d;
    dbuf dlogits16, row_w_d; /* head_loss in a 16-bit mode: a chunk's dlogits, the rows' weights */
    int64_t row_w_rows;      /* row_w_d's rows (0: none) */
    dbuf pick_at_d;          /* model_input's picks */
    ws_slot *slots, *sl;     /* [n_slots], the one in use (model_ws_set_slot) */
    int64_t n_slots;
    dbuf dx, dxf, dln, dqkv, dh, datt, dx16; /* dx16: dx's copy (model_backward) */
    dbuf qkv32, dqkv16; /* qkv in fp32 when its layer keeps the 16-bit copy; dqkv's copy */
    int32_t *h_i32;     /* host scratch */
    double *h_f64;
    size_t h_i32_cap, h_f64_cap;
    int have_dlogits;
    int s16;             /* the pass keeps its GEMM-only activations as 16-bit copies (gemm_in16) */
    int no_logits;       /* the head waits for model_loss (MODEL_NO_LOGITS) */
    int64_t logit_chunk; /* model_ws_set_logit_chunk; 0: automatic */
    int64_t w_period, w_first, w_count; /* model_weight_dlogits for the next loss */
    float w_value;
    float *loss_w;    /* model_input.loss_w of the pass (host copy) */
    int64_t n_loss_w; /* its samples; 0: none */
    float *row_w_h;   /* row_weights' last upload (host copy) */
};

model_ws *model_ws_create(model *m) {
    model_ws *ws = kf_calloc(1, sizeof *ws);
    ws->m = m;
    int64_t nb = m->cfg.blocks;
    ws->act = kf_calloc((size_t)nb, sizeof *ws->act);
    ws->xs = kf_calloc((size_t)(nb + 1), sizeof *ws->xs);
    ws->ctxkv = kf_calloc((size_t)nb, sizeof *ws->ctxkv);
    ws->hact = kf_calloc((size_t)m->n_heads_out, sizeof *ws->hact);
    ws->slots = ws->sl = kf_calloc(1, sizeof *ws->slots);
    ws->n_slots = 1;
    return ws;
}

void model_ws_set_slot(model_ws *ws, int64_t i) {
    KF_CHECK(i >= 0, "model_ws_set_slot: slot %lld", (long long)i);
    if (i >= ws->n_slots) {
        ws->slots = kf_realloc(ws->slots, (size_t)(i + 1) * sizeof *ws->slots);
        memset(ws->slots + ws->n_slots, 0, (size_t)(i + 1 - ws->n_slots) * sizeof *ws->slots);
        ws->n_slots = i + 1;
    }
    ws->sl = &ws->slots[i];
}

static void layer_act_release(kf_backend *be, layer_act *a) {
    dbuf *d[] = {&a->ln1,  &a->mean1, &a->rstd1, &a->qkv,   &a->att, &a->lse,
                 &a->xmid, &a->ln2,   &a->mean2, &a->rstd2, &a->h1,  &a->h2};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) dbuf_release(be, d[i]);
}

void model_ws_free(model_ws *ws) {
    if (!ws) return;
    kf_backend *be = ws->m->be;
    int64_t nb = ws->m->cfg.blocks;
    for (int64_t l = 0; l < nb; l++) {
        layer_act_release(be, &ws->act[l]);
        dbuf_release(be, &ws->ctxkv[l]);
    }
    for (int64_t l = 0; l <= nb; l++) dbuf_release(be, &ws->xs[l]);
    for (int h = 0; h < ws->m->n_heads_out; h++) {
        dbuf_release(be, &ws->hact[h].ln);
        dbuf_release(be, &ws->hact[h].mean);
        dbuf_release(be, &ws->hact[h].rstd);
        dbuf_release(be, &ws->hact[h].pre);
        dbuf_release(be, &ws->hact[h].g);
        dbuf_release(be, &ws->hact[h].u);
    }
    noise_act *n = &ws->nact;
    dbuf *d[] = {&ws->qkv_full,  &ws->att_full,   &ws->lse_full,     &ws->pos_d,
                 &ws->tok_ids_d, &ws->tok_rows_d, &ws->noise_rows_d, &ws->z_d,
                 &ws->tau_d,     &ws->ctx_idx_d,  &ws->comp_idx_d,   &ws->xf,
                 &ws->logits,    &ws->targets_d,  &ws->losses_d,     &ws->dx,
                 &ws->dxf,       &ws->dln,        &ws->dqkv,         &ws->dh,
                 &ws->datt,      &ws->posrow_d,   &ws->pos_tmp,      &n->feats,
                 &n->c,          &n->ln,          &n->mean,          &n->rstd,
                 &n->h1,         &n->h2,          &n->out,           &n->dh,
                 &n->dln,        &n->dc,          &ws->qkv32,        &ws->dqkv16,
                 &ws->dx16};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) dbuf_release(be, d[i]);
    dbuf_release(be, &ws->dlogits16);
    dbuf_release(be, &ws->row_w_d);
    dbuf_release(be, &ws->valid_d);
    dbuf_release(be, &ws->gscale_d);
    dbuf_release(be, &ws->pick_at_d);
    for (int64_t i = 0; i < ws->n_slots; i++) {
        dbuf_release(be, &ws->slots[i].out_idx_d);
        dbuf_release(be, &ws->slots[i].pick_z_d);
        dbuf_release(be, &ws->slots[i].pick_tau_d);
    }
    free(ws->slots);
    free(ws->act);
    free(ws->xs);
    free(ws->ctxkv);
    free(ws->hact);
    free(ws->valid);
    free(ws->loss_w);
    free(ws->row_w_h);
    free(ws->h_i32);
    free(ws->h_f64);
    free(ws);
}

int64_t model_ws_rows(const model_ws *ws) { return ws->m->n_heads_out * ws->n_out_rows; }

static int32_t *host_i32(model_ws *ws, size_t n) {
    if (n > ws->h_i32_cap) {
        ws->h_i32 = kf_realloc(ws->h_i32, n * sizeof(int32_t));
        ws->h_i32_cap = n;
    }
    return ws->h_i32;
}

static double *host_f64(model_ws *ws, size_t n) {
    if (n > ws->h_f64_cap) {
        ws->h_f64 = kf_realloc(ws->h_f64, n * sizeof(double));
        ws->h_f64_cap = n;
    }
    return ws->h_f64;
}

/* Uploads the embedding inputs of rows [q0, L) of every sample (compact row
 * numbering b*Lc + r - q0), for embed_ops. */
static void embed_upload(model *m, model_ws *ws, const model_input *in) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    const layout *lay = in->lay;
    int64_t B = ws->B, L = ws->L, q0 = ws->q0, Lc = ws->Lc, V = m->cfg.vocab;
    int64_t ntok_per = 0, nnoise_per = 0;
    for (int64_t r = q0; r < L; r++) lay->noise[r] ? nnoise_per++ : ntok_per++;
    ws->n_tok = B * ntok_per;
    ws->n_noise = B * nnoise_per;
    int64_t np = in->n_picks;
    int32_t *h = host_i32(ws, (size_t)(2 * (ws->n_tok + ws->n_noise) + 1 + L + np));
    int32_t *ids = h, *rows = h + ws->n_tok;
    int64_t i = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = q0; r < L; r++)
            if (!lay->noise[r]) {
                int32_t id = in->ids[b * L + r];
                KF_CHECK(id >= 0 && id < V,
                         "model: token id %d at sample %lld row %lld is outside "
                         "the vocabulary of %lld",
                         id, (long long)b, (long long)r, (long long)V);
                ids[i] = id;
                rows[i++] = (int32_t)(b * Lc + r - q0);
            }
    dbuf_upload(be, &ws->tok_ids_d, ids, (size_t)ws->n_tok, sizeof(int32_t));
    dbuf_upload(be, &ws->tok_rows_d, rows, (size_t)ws->n_tok, sizeof(int32_t));
    if (np) {
        /* each pick's place among the token ids just uploaded */
        int32_t *tok_of = rows + ws->n_tok, *at = tok_of + L, c = 0;
        for (int64_t r = 0; r < L; r++) tok_of[r] = r >= q0 && !lay->noise[r] ? c++ : -1;
        for (int64_t k = 0; k < np; k++) {
            int64_t b = in->pick_at[k] / L, r = in->pick_at[k] % L;
            KF_CHECK(in->pick_at[k] >= 0 && b < B && tok_of[r] >= 0,
                     "model: pick %lld at row %lld is no token row of the pass", (long long)k,
                     (long long)in->pick_at[k]);
            at[k] = (int32_t)(b * ntok_per + tok_of[r]);
        }
        dbuf_upload(be, &ws->pick_at_d, at, (size_t)np, sizeof(int32_t));
    }
    if (!ws->n_noise) return;
    KF_CHECK(m->cfg.kind == MODEL_PFLM, "model: noise rows given to an AR model");
    KF_CHECK(in->z && in->tau, "model: noise rows need z and tau");
    int64_t zd = p->zdim, nz = ws->n_noise;
    int32_t *nrows = host_i32(ws, (size_t)nz);
    double *zt = host_f64(ws, (size_t)(2 * nz * zd));
    i = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = q0; r < L; r++)
            if (lay->noise[r]) {
                for (int64_t e = 0; e < zd; e++) {
                    zt[i * zd + e] = in->z[(b * L + r) * zd + e];
                    zt[nz * zd + i * zd + e] = in->tau[b];
                }
                nrows[i++] = (int32_t)(b * Lc + r - q0);
            }
    dbuf_upload(be, &ws->noise_rows_d, nrows, (size_t)nz, sizeof(int32_t));
    dbuf_upload(be, &ws->z_d, zt, (size_t)(2 * nz * zd), sizeof(double));
}

/* Embeds embed_upload's inputs into x (the picks placed among the token ids
 * first). */
static void embed_ops(model *m, model_ws *ws, const model_input *in, float *x) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    int64_t H = m->cfg.hidden, nz = ws->n_noise, zd = p->zdim;
    if (in->n_picks) be->scatter_ids(be, ws->tok_ids_d.p, in->picks, ws->pick_at_d.p, in->n_picks);
    if (ws->n_tok)
        be->embed_fwd(be, x, ws->tok_ids_d.p, ws->tok_rows_d.p, m->params + p->embed, ws->n_tok, H);
    if (!nz) return;
    const double *zdv = ws->z_d.p;
    noise_encoder_fwd(m, &ws->nact, nz, zdv, zdv + nz * zd, NULL);
    be->scatter_rows(be, x, ws->nact.out.p, ws->noise_rows_d.p, nz, H);
}

/* Logits of head h for output rows [c0, c0 + n) of ws's last pass (its
 * final norm, head_norm_fwd's rows), into lg [n, V], with the mask logit. */
static void head_chunk(model *m, model_ws *ws, int h, int64_t c0, int64_t n, float *lg) {
    const head_off *o = &m->priv->head[h];
    int64_t H = m->cfg.hidden, V = m->cfg.vocab;
    const float *ln = head_input(m, &ws->hact[h], h);
    linear_fwd(m, NULL, lg, ln + c0 * H, NULL, o->w, o->b, n, H, V, 0.0f);
    if (m->cfg.mask_id >= 0) m->be->fill_column(m->be, lg, n, V, m->cfg.mask_id, MASK_LOGIT);
}

void model_forward_inputs(model *m, model_ws *ws, const model_input *in, int flags,
                          const model_ws *kv_src) {
    kf_backend *be = m->be;
    const layout *lay = in->lay;
    const model_config *c = &m->cfg;
    int64_t B = in->B, L = lay->L, q0 = lay->mask.q_start;
    KF_CHECK(B >= 1 && L == kf_mask_len(&lay->mask), "model_forward: bad batch/layout");
    int train = (flags & MODEL_TRAIN) != 0;
    KF_CHECK(!(q0 > 0 && train), "model_forward: a q_start pass cannot be trained");
    KF_CHECK(!(q0 > 0 && (flags & MODEL_KEEP_CTX_KV)), "model_forward: bad flags");
    if (q0 > 0)
        KF_CHECK(kv_src && kv_src->ctx_n == q0 && kv_src->B == B,
                 "model_forward: q_start = %lld needs the context K/V of a pass over the same "
                 "%lld samples with n_ctx = %lld (MODEL_KEEP_CTX_KV)",
                 (long long)q0, (long long)B, (long long)q0);
    ws->B = B;
    ws->L = L;
    ws->q0 = q0;
    ws->Lc = L - q0;
    ws->R = B * ws->Lc;
    ws->train = train;
    ws->keep_kv = (flags & MODEL_KEEP_CTX_KV) != 0;
    /* set here, not by the ops, so that a DoubleForward's inputs can be
     * uploaded before its kv_src's ops run (sup_pflm_rounds' graph) */
    ws->ctx_n = ws->keep_kv ? lay->mask.n_ctx : 0;
    ws->no_logits = train || (flags & MODEL_NO_LOGITS);
    ws->have_dlogits = 0;
    ws->w_period = 0;
    ws->mask = lay->mask;
    ws->mask.bidir = c->bidir;
    ws->n_loss_w = 0;
    if (in->loss_w) {
        ws->loss_w = kf_realloc(ws->loss_w, (size_t)B * sizeof(float));
        memcpy(ws->loss_w, in->loss_w, (size_t)B * sizeof(float));
        ws->n_loss_w = B;
    }
    if (in->valid_len) {
        ws->valid = kf_realloc(ws->valid, (size_t)B * sizeof(int32_t));
        memcpy(ws->valid, in->valid_len, (size_t)B * sizeof(int32_t));
        ws->mask.valid_len = ws->valid;
        /* the attention reads this copy: no upload among the pass's ops */
        ws->mask.valid_len_d = dbuf_upload(be, &ws->valid_d, ws->valid, (size_t)B, sizeof(int32_t));
    } else {
        ws->mask.valid_len = NULL;
        ws->mask.valid_len_d = NULL;
    }
    int64_t R = ws->R, Lc = ws->Lc;
    embed_upload(m, ws, in);
    if (c->pos == POS_LEARNED) {
        int32_t *pr = host_i32(ws, (size_t)R);
        for (int64_t r = q0; r < L; r++)
            KF_CHECK(lay->pos[r] >= 0 && lay->pos[r] < c->n_positions,
                     "model_forward: position %d of row %lld is outside the %lld learned positions",
                     lay->pos[r], (long long)r, (long long)c->n_positions);
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = q0; r < L; r++) pr[b * Lc + r - q0] = lay->pos[r];
        dbuf_upload(be, &ws->posrow_d, pr, (size_t)R, sizeof(int32_t));
    }
    dbuf_upload(be, &ws->pos_d, lay->pos, (size_t)L, sizeof(int32_t));
    /* row maps for the context K/V hand-over */
    int32_t *idx = host_i32(ws, (size_t)(B * (q0 > 0 ? L : lay->mask.n_ctx) + 1));
    if (q0 > 0) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < q0; r++) idx[b * q0 + r] = (int32_t)(b * L + r);
        dbuf_upload(be, &ws->ctx_idx_d, idx, (size_t)(B * q0), sizeof(int32_t));
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < Lc; r++) idx[b * Lc + r] = (int32_t)(b * L + q0 + r);
        dbuf_upload(be, &ws->comp_idx_d, idx, (size_t)R, sizeof(int32_t));
    } else if (ws->keep_kv) {
        int64_t n = lay->mask.n_ctx;
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < n; r++) idx[b * n + r] = (int32_t)(b * L + r);
        dbuf_upload(be, &ws->ctx_idx_d, idx, (size_t)(B * n), sizeof(int32_t));
    }
    /* output rows */
    int64_t nout = lay->n_out, O = B * nout;
    ws->n_out_rows = O;
    int32_t *oi = host_i32(ws, (size_t)(O + 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < nout; j++) {
            KF_CHECK(lay->out_rows[j] >= q0, "model_forward: output row before q_start");
            oi[b * nout + j] = (int32_t)(b * Lc + lay->out_rows[j] - q0);
        }
    dbuf_upload(be, &ws->sl->out_idx_d, oi, (size_t)O, sizeof(int32_t));
}

const float *model_forward_ops(model *m, model_ws *ws, const model_input *in,
                               const model_ws *kv_src) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    const layout *lay = in->lay;
    const model_config *c = &m->cfg;
    int64_t B = ws->B, L = ws->L, q0 = ws->q0, H = c->hidden, V = c->vocab;
    int64_t nh = c->heads, hd = H / nh, nb = c->blocks, R = ws->R, Lc = ws->Lc;
    int train = ws->train;
    size_t f = sizeof(float);
    ws->have_dlogits = 0;
    ws->w_period = 0;
    int s16 = ws->s16 = gemm_in16(m);
    /* mv16: the K/V hand-over and a q_start pass move 16-bit rows, as floats
     * of two values each (kernels.h row movement), so they need an even H */
    int mv16 = s16 && H % 2 == 0, c16 = q0 > 0 ? mv16 : s16; /* the attention's 16-bit copies */
    int64_t rw = mv16 ? 2 : 1;                               /* values per moved float */

    /* residual stream buffers: one per layer boundary when training */
    int64_t nx = train ? nb + 1 : 1;
    for (int64_t l = 0; l < nx; l++) dbuf_ensure(be, &ws->xs[l], (size_t)(R * H) * f);
    float *x0 = ws->xs[0].p;
    embed_ops(m, ws, in, x0);
    if (c->pos == POS_LEARNED) pos_embed_fwd(m, &ws->pos_tmp, x0, ws->posrow_d.p, R);
    const int32_t *pos_d = ws->pos_d.p;
    if (q0 > 0) {
        dbuf_ensure(be, &ws->qkv_full, (size_t)(B * L * 3 * H) * (c16 ? 2 : f));
        dbuf_ensure(be, &ws->att_full, (size_t)(B * L * H) * (c16 ? 2 : f));
        dbuf_ensure(be, &ws->lse_full, (size_t)(B * nh * L) * f);
    }

    for (int64_t l = 0; l < nb; l++) {
        const block_off *o = &p->blk[l];
        layer_act *a = &ws->act[train ? l : 0];
        float *x = ws->xs[train ? l : 0].p;
        float *xo = ws->xs[train ? l + 1 : 0].p;
        void *ln1 = norm_fwd(m, &a->ln1, &a->mean1, &a->rstd1, x, o->norm1, o->norm1_b, R, s16);
        /* with c16 the layer keeps q, k, v and the attention's output as the
         * 16-bit copies the attention and attn_out read (kernels.h); the
         * fp32 qkv is then only a biased rope's input (a product plus a bias
         * is not a 16-bit value; without the bias rope rotates the copy in
         * place) and, without mv16, the K/V hand-over's */
        int rope = c->pos == POS_ROPE,
            only16 = c16 && (!rope || o->qkv_b < 0) && (!ws->keep_kv || mv16);
        float *qkv =
            only16 ? NULL : dbuf_ensure(be, c16 ? &ws->qkv32 : &a->qkv, (size_t)(R * 3 * H) * f);
        void *qkv16 = c16 ? dbuf_ensure(be, &a->qkv, (size_t)(R * 3 * H) * 2) : NULL;
        void *att = dbuf_ensure(be, &a->att, (size_t)(R * H) * (c16 ? 2 : f));
        linear_act_fwd(m, NULL, qkv, rope && qkv ? NULL : qkv16, NULL, in32(s16, ln1),
                       in16(s16, ln1), o->qkv, o->qkv_b, R, H, 3 * H, KF_ACT_NONE);
        if (rope) be->rope_fwd(be, qkv, pos_d + q0, B, Lc, nh, hd, ROPE_BASE, qkv16);
        if (q0 > 0) {
            void *full = ws->qkv_full.p, *att_full = ws->att_full.p;
            be->scatter_rows(be, full, c16 ? qkv16 : qkv, ws->comp_idx_d.p, R, 3 * H / rw);
            be->scatter_rows(be, full, kv_src->ctxkv[l].p, ws->ctx_idx_d.p, B * q0, 3 * H / rw);
            be->attn_fwd(be, c16 ? NULL : att_full, ws->lse_full.p, in32(c16, full), &ws->mask, B,
                         nh, hd, in16(c16, full), c16 ? att_full : NULL);
            be->gather_rows(be, att, att_full, ws->comp_idx_d.p, R, H / rw);
        } else {
            float *lse = dbuf_ensure(be, &a->lse, (size_t)(B * nh * L) * f);
            be->attn_fwd(be, c16 ? NULL : att, lse, in32(c16, qkv), &ws->mask, B, nh, hd, qkv16,
                         c16 ? att : NULL);
            if (ws->keep_kv) {
                int64_t n = lay->mask.n_ctx;
                dbuf_ensure(be, &ws->ctxkv[l], (size_t)(B * n * 3 * H) * (mv16 ? 2 : f));
                be->gather_rows(be, ws->ctxkv[l].p, mv16 ? qkv16 : qkv, ws->ctx_idx_d.p, B * n,
                                3 * H / rw);
            }
        }
        if (xo != x) be->copy(be, xo, x, (size_t)(R * H) * f);
        linear_fwd(m, NULL, xo, in32(c16, att), in16(c16, att), o->out, o->out_b, R, H, H, 1.0f);
        /* training keeps x_mid (input of norm2) in ln2's partner: xs[l+1] holds
         * x_mid until the MLP adds to it, so save a copy for the backward. */
        if (train) {
            float *xmid = dbuf_ensure(be, &a->xmid, (size_t)(R * H) * f);
            be->copy(be, xmid, xo, (size_t)(R * H) * f);
        }
        block_mlp_fwd(m, o, a, xo, R, NULL);
    }

    int64_t O = ws->n_out_rows;
    float *xf = dbuf_ensure(be, &ws->xf, (size_t)(O * H) * f);
    be->gather_rows(be, xf, ws->xs[train ? nb : 0].p, ws->sl->out_idx_d.p, O, H);
    for (int h = 0; h < m->n_heads_out; h++) head_norm_fwd(m, &ws->hact[h], h, xf, O);
    if (ws->no_logits) return NULL; /* model_loss or model_pick runs the head, by chunks */
    float *logits = dbuf_ensure(be, &ws->logits, (size_t)(m->n_heads_out * O * V) * f);
    for (int h = 0; h < m->n_heads_out; h++) head_chunk(m, ws, h, 0, O, logits + h * O * V);
    return logits;
}

const float *model_forward(model *m, model_ws *ws, const model_input *in, int flags,
                           const model_ws *kv_src) {
    model_forward_inputs(m, ws, in, flags, kv_src);
    return model_forward_ops(m, ws, in, kv_src);
}

void model_ws_set_logit_chunk(model_ws *ws, int64_t rows) { ws->logit_chunk = rows; }

/* Rows of logits model_loss and model_pick make at a time: the whole pass when its
 * logits fit in MODEL_LOGIT_CHUNK_BYTES, else as many rows as do. A
 * function of the pass's shape alone, so it is the same on every rank and
 * for every batch split of equal micro-batches. */
static int64_t logit_chunk(const model_ws *ws, int64_t rows, int64_t V) {
    int64_t c = ws->logit_chunk > 0
                    ? ws->logit_chunk
                    : (int64_t)(MODEL_LOGIT_CHUNK_BYTES / ((size_t)V * sizeof(float)));
    if (c < 1) c = 1;
    return c < rows ? c : rows;
}

/* The weight of logit row r's dlogits: model_weight_dlogits's (periodic,
 * unless samples_only) times its sample's model_input.loss_w; 1 when neither
 * is set. */
static float row_weight(const model_ws *ws, int64_t r, int samples_only) {
    float w = 1.0f;
    if (ws->w_period && !samples_only) {
        int64_t j = r % ws->w_period;
        if (j >= ws->w_first && j < ws->w_first + ws->w_count) w = ws->w_value;
    }
    if (ws->n_loss_w) w *= ws->loss_w[r % ws->n_out_rows / (ws->n_out_rows / ws->B)];
    return w;
}

/* The row weights on the logit rows [r0, r0 + n), whose values (width
 * values a row) are at d: one scale per run of rows of equal weight. */
static void weight_rows(model *m, model_ws *ws, float *d, int64_t width, int64_t r0, int64_t n,
                        int samples_only) {
    for (int64_t a = r0, e; a < r0 + n; a = e) {
        float w = row_weight(ws, a, samples_only);
        for (e = a + 1; e < r0 + n && row_weight(ws, e, samples_only) == w;) e++;
        if (w != 1.0f) m->be->scale(m->be, d + (a - r0) * width, w, (e - a) * width);
    }
}

/* The weights of all rows on the device, for xent16; uploaded only when
 * they differ from the last ones, so that a pass recorded as a graph after
 * its first run uploads nothing. */
static const float *row_weights(model *m, model_ws *ws, int64_t rows) {
    float *h = kf_malloc((size_t)rows * sizeof(float));
    for (int64_t r = 0; r < rows; r++) h[r] = row_weight(ws, r, 0);
    size_t bytes = (size_t)rows * sizeof(float);
    if (ws->row_w_d.p && ws->row_w_rows == rows && !memcmp(h, ws->row_w_h, bytes)) {
        free(h);
        return ws->row_w_d.p;
    }
    ws->row_w_rows = rows;
    free(ws->row_w_h);
    ws->row_w_h = h;
    return dbuf_upload(m->be, &ws->row_w_d, h, (size_t)rows, sizeof(float));
}

/* The head of a MODEL_NO_LOGITS pass, a chunk of rows at a time: logits,
 * the mask logit, the cross-entropy into losses (and, training, dlogits
 * with their row weights, then the head's backward: its weight and bias
 * gradients, and dxf through its norm). Only one chunk of logits exists at
 * a time. Per row it is the ops of a whole-pass head; with one chunk it is
 * them exactly. In a 16-bit mode the cross-entropy writes dlogits as the
 * 16-bit copy the backward's GEMMs read, with the row weights, the mask
 * column and the bias gradient (xent16): the same bits, no fp32 dlogits. */
static void head_loss(model *m, model_ws *ws, const int32_t *t_d, float *losses,
                      const float *gscale) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    int64_t H = m->cfg.hidden, V = m->cfg.vocab, O = ws->n_out_rows, mask = m->cfg.mask_id;
    int64_t chunk = logit_chunk(ws, O, V);
    size_t f = sizeof(float);
    float *lg = dbuf_ensure(be, &ws->logits, (size_t)(chunk * V) * f);
    int d16 = ws->train && ws->s16;
    void *dl16 = d16 ? dbuf_ensure(be, &ws->dlogits16, (size_t)(chunk * V) * 2) : NULL;
    const float *row_w =
        d16 && (ws->w_period || ws->n_loss_w) ? row_weights(m, ws, model_ws_rows(ws)) : NULL;
    float *dxf = NULL, *dln = NULL;
    if (ws->train) {
        dxf = dbuf_ensure(be, &ws->dxf, (size_t)(O * H) * f);
        /* sized for model_backward's use too, so it is allocated once */
        dln = dbuf_ensure(be, &ws->dln, (size_t)((ws->R > O ? ws->R : O) * H) * f);
        be->zero(be, dxf, (size_t)(O * H) * f);
    }
    for (int h = 0; h < m->n_heads_out; h++) {
        const head_off *o = &p->head[h];
        const float *ln = head_input(m, &ws->hact[h], h);
        for (int64_t c0 = 0; c0 < O; c0 += chunk) {
            int64_t n = O - c0 < chunk ? O - c0 : chunk, r0 = h * O + c0;
            head_chunk(m, ws, h, c0, n, lg);
            if (d16) {
                be->xent16(be, losses + r0, dl16, o->b >= 0 ? m->grads + o->b : NULL, lg, t_d + r0,
                           row_w ? row_w + r0 : NULL, n, V, gscale, mask);
                linear_bwd(m, dln + c0 * H, 0.0f, NULL, dl16, ln + c0 * H, NULL, o->w, -1, n, H, V);
                continue;
            }
            be->xent(be, losses + r0, ws->train ? lg : NULL, lg, t_d + r0, n, V, gscale);
            if (!ws->train) continue;
            if (ws->w_period || ws->n_loss_w) weight_rows(m, ws, lg, V, r0, n, 0);
            if (mask >= 0) be->fill_column(be, lg, n, V, mask, 0.0f);
            linear_bwd(m, dln + c0 * H, 0.0f, lg, NULL, ln + c0 * H, NULL, o->w, o->b, n, H, V);
        }
        if (ws->train && m->cfg.head == HEAD_MEDUSA) {
            /* the backbone and its final norm are frozen: a Medusa head's
             * residual block is the last thing with a gradient */
            if (o->res_w >= 0) {
                head_act *a = &ws->hact[h];
                be->gelu_bwd(be, dln, dln, a->pre.p, O * H, KF_GELU_TANH);
                linear_bwd(m, NULL, 0.0f, dln, NULL, a->ln.p, NULL, o->res_w, o->res_b, O, H, H);
            }
        } else if (ws->train)
            be->layernorm_bwd(
                be, dxf, m->grads + o->norm, o->norm_b >= 0 ? m->grads + o->norm_b : NULL, dln,
                ws->xf.p, m->params + o->norm, ws->hact[h].mean.p, ws->hact[h].rstd.p, O, H, NULL);
    }
}

/* model_loss's work up to the row losses, left in ws->losses_d, for device
 * targets t_d and the gradient's factor gscale (device float, NULL: 1). */
static void loss_rows(model *m, model_ws *ws, const int32_t *t_d, const float *gscale) {
    kf_backend *be = m->be;
    int64_t rows = model_ws_rows(ws), V = m->cfg.vocab;
    float *losses = dbuf_ensure(be, &ws->losses_d, (size_t)rows * sizeof(float));
    if (ws->no_logits) head_loss(m, ws, t_d, losses, gscale);
    else be->xent(be, losses, NULL, ws->logits.p, t_d, rows, V, NULL);
    if (ws->n_loss_w) weight_rows(m, ws, losses, 1, 0, rows, 1);
    ws->have_dlogits = ws->train;
}

double model_loss(model *m, model_ws *ws, const int32_t *targets, double norm, float loss_scale,
                  int64_t *count, float *row_loss) {
    kf_backend *be = m->be;
    int64_t rows = model_ws_rows(ws), V = m->cfg.vocab, n = 0;
    for (int64_t r = 0; r < rows; r++) {
        KF_CHECK(targets[r] < V, "model_loss: target %d outside the vocabulary", targets[r]);
        n += targets[r] >= 0;
    }
    if (norm <= 0) norm = n > 0 ? (double)n : 1.0;
    float gscale = (float)(loss_scale / norm);
    loss_rows(m, ws, dbuf_upload(be, &ws->targets_d, targets, (size_t)rows, sizeof(int32_t)),
              dbuf_upload(be, &ws->gscale_d, &gscale, 1, sizeof gscale));
    float *h = row_loss ? row_loss : kf_malloc((size_t)rows * sizeof(float));
    be->download(be, h, ws->losses_d.p, (size_t)rows * sizeof(float));
    double sum = 0;
    for (int64_t r = 0; r < rows; r++)
        if (targets[r] >= 0) sum += h[r];
    if (!row_loss) free(h);
    if (count) *count = n;
    return sum;
}

void model_loss_acc(model *m, model_ws *ws, const int32_t *targets, const float *grad_scale,
                    double *sum_d) {
    loss_rows(m, ws, targets, grad_scale);
    m->be->loss_sum(m->be, sum_d, ws->losses_d.p, targets, model_ws_rows(ws));
}

void model_weight_dlogits(model *m, model_ws *ws, int64_t period, int64_t first, int64_t count,
                          float w) {
    KF_CHECK(ws->train && !ws->have_dlogits,
             "model_weight_dlogits: needs a MODEL_TRAIN forward, before its model_loss");
    int64_t rows = model_ws_rows(ws);
    KF_CHECK(period > 0 && first >= 0 && first + count <= period && rows % period == 0,
             "model_weight_dlogits: rows %lld, period %lld, [%lld, +%lld)", (long long)rows,
             (long long)period, (long long)first, (long long)count);
    ws->w_period = period, ws->w_first = first, ws->w_count = count, ws->w_value = w;
}

void model_pick_noise(model *m, model_ws *ws, int64_t rows, const double *z, const double *tau) {
    dbuf_upload(m->be, &ws->sl->pick_z_d, z, (size_t)rows, sizeof(double));
    dbuf_upload(m->be, &ws->sl->pick_tau_d, tau, (size_t)rows, sizeof(double));
}

void model_pick_ops(model *m, model_ws *ws, int64_t rows, int sample, int32_t *ids) {
    kf_backend *be = m->be;
    int64_t V = m->cfg.vocab, O = ws->n_out_rows;
    KF_CHECK(!ws->train, "model_pick: needs a pass without MODEL_TRAIN");
    KF_CHECK(rows <= m->n_heads_out * O, "model_pick: %lld rows, the last forward made %lld",
             (long long)rows, (long long)(m->n_heads_out * O));
    KF_CHECK(!sample || ws->sl->pick_z_d.cap >= (size_t)rows * sizeof(double),
             "model_pick_ops: %lld rows, fewer noise values uploaded", (long long)rows);
    const double *zd = ws->sl->pick_z_d.p, *td = ws->sl->pick_tau_d.p;
    /* logit rows [r0, r0 + n) at lg: one chunk's at a time, or (logits kept)
     * all of them in one go */
    int64_t chunk = ws->no_logits ? logit_chunk(ws, O, V) : rows;
    float *lg = ws->no_logits ? dbuf_ensure(be, &ws->logits, (size_t)(chunk * V) * sizeof(float))
                              : ws->logits.p;
    for (int64_t r0 = 0, n; r0 < rows; r0 += n) {
        n = rows - r0 < chunk ? rows - r0 : chunk;
        if (ws->no_logits) {
            int64_t c0 = r0 % O;
            if (n > O - c0) n = O - c0; /* a chunk stays within one head */
            head_chunk(m, ws, (int)(r0 / O), c0, n, lg);
        }
        if (sample) be->sample_icdf(be, ids + r0, lg, td + r0, zd + r0, n, V);
        else be->argmax(be, ids + r0, lg, n, V);
    }
}

void model_pick(model *m, model_ws *ws, int64_t rows, const double *z, const double *tau,
                int32_t *ids) {
    if (z) model_pick_noise(m, ws, rows, z, tau);
    model_pick_ops(m, ws, rows, z != NULL, ids);
}

void model_backward(model *m, model_ws *ws) { model_backward_notify(m, ws, NULL, NULL); }

void model_backward_notify(model *m, model_ws *ws, model_grads_ready_fn ready, void *ctx) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    const model_config *c = &m->cfg;
    KF_CHECK(ws->train && ws->have_dlogits,
             "model_backward: needs a MODEL_TRAIN forward followed by model_loss");
    KF_CHECK(ws->s16 == gemm_in16(m), "model_backward: the precision changed since the forward");
    int s16 = ws->s16;
    int64_t B = ws->B, L = ws->L, R = ws->R, O = ws->n_out_rows, H = c->hidden, V = c->vocab;
    int64_t nh = c->heads, hd = H / nh, nb = c->blocks;
    size_t f = sizeof(float);
    /* the head's backward ran in model_loss, into dxf */
    const float *dxf = ws->dxf.p;
    float *dln = ws->dln.p; /* [max(R, O), H], from model_loss */
    /* the heads' own tensors (a tied head's weight is vocab_embed, reported with it) */
    if (ready) ready(ctx, p->heads_begin, p->heads_end - p->heads_begin);
    if (c->head == HEAD_MEDUSA) { /* frozen backbone: its gradients stay zero */
        if (ready) ready(ctx, 0, p->heads_begin);
        ws->have_dlogits = 0;
        return;
    }
    float *dx = dbuf_ensure(be, &ws->dx, (size_t)(R * H) * f);
    void *dh = dbuf_ensure(be, &ws->dh, (size_t)(R * 4 * H) * (s16 ? 2 : f));
    /* in a 16-bit mode the attention's inputs and output are 16-bit copies
     * (model_forward's c16), and so is its dout; when no bias sum needs the
     * fp32 dqkv, the attention writes it as a copy alone, which rope_bwd
     * rotates in place and qkv's backward reads */
    int c16 = s16 && ws->q0 == 0;
    void *datt = dbuf_ensure(be, &ws->datt, (size_t)(R * H) * (c16 ? 2 : f));
    /* in a 16-bit mode the LayerNorm backwards also write the residual
     * stream's gradient dx as a copy (dx16) for the GEMMs of the layer below
     * them (fc2's and attn_out's products read it; their bias sums dx);
     * the top block's fc2 converts dx, written by the heads */
    void *dx16 = s16 ? dbuf_ensure(be, &ws->dx16, (size_t)(R * H) * 2) : NULL;
    int have16 = 0;
    be->zero(be, dx, (size_t)(R * H) * f);
    be->scatter_rows(be, dx, dxf, ws->sl->out_idx_d.p, O, H);
    for (int64_t l = nb - 1; l >= 0; l--) {
        const block_off *o = &p->blk[l];
        layer_act *a = &ws->act[l];
        /* MLP half: x_out = x_mid + fc2(gelu(fc1(norm2(x_mid)))) */
        mlp_out_bwd(m, s16 ? NULL : dh, s16 ? dh : NULL, dx, have16 ? dx16 : NULL,
                    in32(s16, a->h2.p), in16(s16, a->h2.p), a->h1.p, o->fc2_w, o->fc2_b, o->fc1_b,
                    R, 4 * H, H, KF_ACT_GELU_TANH);
        linear_bwd(m, dln, 0.0f, in32(s16, dh), in16(s16, dh), in32(s16, a->ln2.p),
                   in16(s16, a->ln2.p), o->fc1_w, -1, R, H, 4 * H);
        be->layernorm_bwd(be, dx, m->grads + o->norm2,
                          o->norm2_b >= 0 ? m->grads + o->norm2_b : NULL, dln, a->xmid.p,
                          m->params + o->norm2, a->mean2.p, a->rstd2.p, R, H, dx16);
        /* attention half: x_mid = x_in + out(attn(rope(qkv(norm1(x_in))))) */
        be->linear_bwd(be, c16 ? NULL : datt, m->grads + o->out,
                       o->out_b >= 0 ? m->grads + o->out_b : NULL, dx, o->out_b < 0 ? dx16 : NULL,
                       in32(c16, a->att.p), in16(c16, a->att.p), m->params + o->out, R, H, H, 0.0f,
                       model_w16(m, o->out), c16 ? datt : NULL);
        int q16 = c16 && o->qkv_b < 0;
        float *dqkv = q16 ? NULL : dbuf_ensure(be, &ws->dqkv, (size_t)(R * 3 * H) * f);
        void *dqkv16 = q16 ? dbuf_ensure(be, &ws->dqkv16, (size_t)(R * 3 * H) * 2) : NULL;
        be->attn_bwd(be, dqkv, in32(c16, datt), in32(c16, a->att.p), a->lse.p, in32(c16, a->qkv.p),
                     &ws->mask, B, nh, hd, in16(c16, datt), in16(c16, a->att.p),
                     in16(c16, a->qkv.p), dqkv16);
        if (c->pos == POS_ROPE)
            be->rope_bwd(be, dqkv, ws->pos_d.p, B, L, nh, hd, ROPE_BASE, dqkv16);
        linear_bwd(m, dln, 0.0f, dqkv, dqkv16, in32(s16, a->ln1.p), in16(s16, a->ln1.p), o->qkv,
                   o->qkv_b, R, H, 3 * H);
        be->layernorm_bwd(be, dx, m->grads + o->norm1,
                          o->norm1_b >= 0 ? m->grads + o->norm1_b : NULL, dln, ws->xs[l].p,
                          m->params + o->norm1, a->mean1.p, a->rstd1.p, R, H, l > 0 ? dx16 : NULL);
        have16 = s16;
        if (ready) ready(ctx, o->norm1, o->fc2_b + H - o->norm1);
    }
    if (ws->n_tok)
        be->embed_bwd(be, m->grads + p->embed, dx, ws->tok_ids_d.p, ws->tok_rows_d.p, ws->n_tok, H,
                      V);
    if (p->pos >= 0)
        be->embed_bwd(be, m->grads + p->pos, dx, ws->posrow_d.p, NULL, R, H, c->n_positions);
    /* pos_embed follows vocab_embed */
    if (ready) ready(ctx, p->embed, V * H + (p->pos >= 0 ? c->n_positions * H : 0));
    if (ws->n_noise) {
        float *dn = dbuf_ensure(be, &ws->dxf, (size_t)(ws->n_noise * H) * f);
        be->gather_rows(be, dn, dx, ws->noise_rows_d.p, ws->n_noise, H);
        noise_encoder_bwd(m, &ws->nact, ws->n_noise, dn);
    }
    /* reported whether or not this batch had noise rows: ranks must agree */
    if (ready && m->n_params > p->heads_end) ready(ctx, p->heads_end, m->n_params - p->heads_end);
    ws->have_dlogits = 0;
}
