/* trainer/model/model_decode.c — the backbone over a per-layer K/V cache: each step
 * appends Q rows per sequence, attends over the cache (attn_decode) and keeps
 * only the first `keep` rows (K-Forcing keeps context tokens, drops noise). */
#include <stdlib.h>
#include <string.h>

#include "trainer/model/model_internal.h"

struct model_heads {
    model *m;
    void **head; /* [n_heads_out] */
};

model_heads *model_heads_pack(model *m) {
    model_heads *h = kf_calloc(1, sizeof *h);
    model_priv *p = m->priv;
    h->m = m;
    h->head = kf_calloc((size_t)m->n_heads_out, sizeof *h->head);
    for (int i = 0; i < m->n_heads_out; i++)
        h->head[i] = m->be->head_pack(m->be, m->params + p->head[i].w,
                                      p->head[i].b >= 0 ? m->params + p->head[i].b : NULL,
                                      m->cfg.vocab, m->cfg.hidden, m->cfg.mask_id, MASK_LOGIT);
    return h;
}

void model_heads_free(model_heads *h) {
    if (!h) return;
    for (int i = 0; i < h->m->n_heads_out; i++) h->m->be->head_free(h->m->be, h->head[i]);
    free(h->head);
    free(h);
}

struct model_cache {
    model *m;
    const model_heads *heads;
    int64_t B, cap, len;
    float **k, **v; /* [blocks] of [B, cap, H] */
    layer_act a;
    noise_act nact;
    head_act *hact;
    dbuf x, xf, logits, tmp, pos_d, ids_d, rows_d, nrows_d, z_d, kidx_d, vidx_d, cidx_d, oidx_d;
    dbuf posrow_d; /* POS_LEARNED: each new row's position */
    int32_t *h32;
    double *h64;
    size_t h32_cap, h64_cap;
};

model_cache *model_cache_create(model *m, const model_heads *h, int64_t B, int64_t cap) {
    KF_CHECK(B >= 1 && cap >= 1 && h && h->m == m,
             "model_cache_create: B = %lld, cap = %lld, "
             "heads %s",
             (long long)B, (long long)cap,
             !h          ? "missing"
             : h->m != m ? "of another model"
                         : "ok");
    model_cache *c = kf_calloc(1, sizeof *c);
    c->m = m;
    c->heads = h;
    c->B = B;
    c->cap = cap;
    int64_t nb = m->cfg.blocks, H = m->cfg.hidden;
    c->k = kf_calloc((size_t)nb, sizeof *c->k);
    c->v = kf_calloc((size_t)nb, sizeof *c->v);
    for (int64_t l = 0; l < nb; l++) {
        c->k[l] = m->be->alloc(m->be, (size_t)(B * cap * H) * sizeof(float));
        c->v[l] = m->be->alloc(m->be, (size_t)(B * cap * H) * sizeof(float));
    }
    c->hact = kf_calloc((size_t)m->n_heads_out, sizeof *c->hact);
    return c;
}

void model_cache_free(model_cache *c) {
    if (!c) return;
    kf_backend *be = c->m->be;
    for (int64_t l = 0; l < c->m->cfg.blocks; l++) {
        be->free(be, c->k[l]);
        be->free(be, c->v[l]);
    }
    layer_act *a = &c->a;
    noise_act *n = &c->nact;
    dbuf *d[] = {&a->ln1,    &a->mean1,   &a->rstd1,   &a->qkv, &a->att,    &a->lse,    &a->xmid,
                 &a->ln2,    &a->mean2,   &a->rstd2,   &a->h1,  &a->h2,     &n->feats,  &n->c,
                 &n->ln,     &n->mean,    &n->rstd,    &n->h1,  &n->h2,     &n->out,    &n->dh,
                 &n->dln,    &n->dc,      &c->x,       &c->xf,  &c->logits, &c->tmp,    &c->pos_d,
                 &c->ids_d,  &c->rows_d,  &c->nrows_d, &c->z_d, &c->kidx_d, &c->vidx_d, &c->cidx_d,
                 &c->oidx_d, &c->posrow_d};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) dbuf_release(be, d[i]);
    for (int h = 0; h < c->m->n_heads_out; h++) {
        dbuf_release(be, &c->hact[h].ln);
        dbuf_release(be, &c->hact[h].mean);
        dbuf_release(be, &c->hact[h].rstd);
    }
    free(c->hact);
    free(c->k);
    free(c->v);
    free(c->h32);
    free(c->h64);
    free(c);
}

int64_t model_cache_len(const model_cache *c) { return c->len; }

void model_cache_reset(model_cache *c) { c->len = 0; }

static int32_t *h32(model_cache *c, size_t n) {
    if (n > c->h32_cap) {
        c->h32 = kf_realloc(c->h32, n * sizeof(int32_t));
        c->h32_cap = n;
    }
    return c->h32;
}

const float *model_decode_step(model *m, model_cache *c, int64_t Q, const uint8_t *noise,
                               const int32_t *ids, const double *z, const double *tau,
                               int64_t n_out, const int32_t *out, int64_t keep, int32_t *argmax) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    int64_t B = c->B, P = c->len, H = m->cfg.hidden, V = m->cfg.vocab, nh = m->cfg.heads;
    int64_t hd = H / nh, R = B * Q, zd = p->zdim ? p->zdim : 1;
    size_t f = sizeof(float);
    KF_CHECK(Q >= 1 && keep <= Q && P + Q <= c->cap,
             "model_decode_step: %lld new rows after %lld exceed the cache of %lld", (long long)Q,
             (long long)P, (long long)c->cap);
    float *x = dbuf_ensure(be, &c->x, (size_t)(R * H) * f);

    /* inputs: tokens by embedding, noise rows through the noise encoder */
    int64_t ntok = 0, nz = 0;
    for (int64_t i = 0; i < Q; i++) noise[i] ? nz++ : ntok++;
    ntok *= B;
    nz *= B;
    int32_t *h = h32(c, (size_t)(2 * R + 1));
    int64_t it = 0, iz = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Q; i++)
            if (!noise[i]) {
                int32_t id = ids[b * Q + i];
                KF_CHECK(id >= 0 && id < V,
                         "model_decode_step: token id %d outside the "
                         "vocabulary of %lld",
                         id, (long long)V);
                h[it] = id;
                h[ntok + it++] = (int32_t)(b * Q + i);
            }
    if (ntok) {
        dbuf_upload(be, &c->ids_d, h, (size_t)ntok, sizeof(int32_t));
        dbuf_upload(be, &c->rows_d, h + ntok, (size_t)ntok, sizeof(int32_t));
        be->embed_fwd(be, x, c->ids_d.p, c->rows_d.p, m->params + p->embed, ntok, H);
    }
    if (nz) {
        KF_CHECK(m->cfg.kind == MODEL_PFLM, "model_decode_step: noise rows given to an AR model");
        if ((size_t)(2 * nz * zd) > c->h64_cap) {
            c->h64 = kf_realloc(c->h64, (size_t)(2 * nz * zd) * sizeof(double));
            c->h64_cap = (size_t)(2 * nz * zd);
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Q; i++)
                if (noise[i]) {
                    for (int64_t e = 0; e < zd; e++) {
                        c->h64[iz * zd + e] = z[(b * Q + i) * zd + e];
                        c->h64[nz * zd + iz * zd + e] = tau[b];
                    }
                    h[iz++] = (int32_t)(b * Q + i);
                }
        dbuf_upload(be, &c->nrows_d, h, (size_t)nz, sizeof(int32_t));
        double *zdv = dbuf_upload(be, &c->z_d, c->h64, (size_t)(2 * nz * zd), sizeof(double));
        noise_encoder_fwd(m, &c->nact, nz, zdv, zdv + nz * zd);
        be->scatter_rows(be, x, c->nact.out.p, c->nrows_d.p, nz, H);
    }

    /* positions P..P+Q-1; K rows of qkv viewed as [3R, H] are 3r+1, V rows 3r+2;
     * cache rows b*cap + P + i */
    int32_t *pos = h32(c, (size_t)(3 * R + Q));
    if (m->cfg.pos == POS_LEARNED) {
        KF_CHECK(P + Q <= m->cfg.n_positions,
                 "model_decode_step: positions up to %lld exceed the "
                 "%lld learned positions",
                 (long long)(P + Q), (long long)m->cfg.n_positions);
        for (int64_t r = 0; r < R; r++) pos[r] = (int32_t)(P + r % Q);
        pos_embed_fwd(m, &c->tmp, x, dbuf_upload(be, &c->posrow_d, pos, (size_t)R, sizeof(int32_t)),
                      R);
    }
    for (int64_t i = 0; i < Q; i++) pos[i] = (int32_t)(P + i);
    dbuf_upload(be, &c->pos_d, pos, (size_t)Q, sizeof(int32_t));
    for (int64_t r = 0; r < R; r++) {
        pos[r] = (int32_t)(3 * r + 1);
        pos[R + r] = (int32_t)(3 * r + 2);
        pos[2 * R + r] = (int32_t)((r / Q) * c->cap + P + r % Q);
    }
    dbuf_upload(be, &c->kidx_d, pos, (size_t)R, sizeof(int32_t));
    dbuf_upload(be, &c->vidx_d, pos + R, (size_t)R, sizeof(int32_t));
    dbuf_upload(be, &c->cidx_d, pos + 2 * R, (size_t)R, sizeof(int32_t));

    layer_act *a = &c->a;
    float *ln1 = dbuf_ensure(be, &a->ln1, (size_t)(R * H) * f);
    float *mean = dbuf_ensure(be, &a->mean1, (size_t)R * f);
    float *rstd = dbuf_ensure(be, &a->rstd1, (size_t)R * f);
    float *qkv = dbuf_ensure(be, &a->qkv, (size_t)(R * 3 * H) * f);
    float *att = dbuf_ensure(be, &a->att, (size_t)(R * H) * f);
    float *tmp = dbuf_ensure(be, &c->tmp, (size_t)(R * H) * f);
    for (int64_t l = 0; l < m->cfg.blocks; l++) {
        const block_off *o = &p->blk[l];
        be->layernorm_fwd(be, ln1, NULL, mean, rstd, x, m->params + o->norm1,
                          o->norm1_b >= 0 ? m->params + o->norm1_b : NULL, R, H, LN_EPS);
        linear_fwd(m, qkv, ln1, NULL, o->qkv, o->qkv_b, R, H, 3 * H, 0.0f);
        if (m->cfg.pos == POS_ROPE)
            be->rope_fwd(be, qkv, c->pos_d.p, B, Q, nh, hd, ROPE_BASE, NULL);
        be->gather_rows(be, tmp, qkv, c->kidx_d.p, R, H);
        be->scatter_rows(be, c->k[l], tmp, c->cidx_d.p, R, H);
        be->gather_rows(be, tmp, qkv, c->vidx_d.p, R, H);
        be->scatter_rows(be, c->v[l], tmp, c->cidx_d.p, R, H);
        be->attn_decode(be, att, qkv, 3 * H, c->k[l], c->v[l], B, c->cap, P, Q, nh, hd);
        linear_fwd(m, x, att, NULL, o->out, o->out_b, R, H, H, 1.0f);
        block_mlp_fwd(m, o, a, x, R);
    }

    /* outputs ordered (out row, sample) */
    int64_t O = n_out * B;
    int32_t *oi = h32(c, (size_t)(O + 1));
    for (int64_t j = 0; j < n_out; j++) {
        KF_CHECK(out[j] >= 0 && out[j] < Q, "model_decode_step: output row %d of %lld", out[j],
                 (long long)Q);
        for (int64_t b = 0; b < B; b++) oi[j * B + b] = (int32_t)(b * Q + out[j]);
    }
    dbuf_upload(be, &c->oidx_d, oi, (size_t)O, sizeof(int32_t));
    float *xf = dbuf_ensure(be, &c->xf, (size_t)(O * H) * f);
    be->gather_rows(be, xf, x, c->oidx_d.p, O, H);
    float *logits =
        argmax ? NULL : dbuf_ensure(be, &c->logits, (size_t)(m->n_heads_out * O * V) * f);
    for (int hh = 0; hh < m->n_heads_out; hh++) {
        float *ln = head_norm_fwd(m, &c->hact[hh], hh, xf, O);
        be->head_fwd(be, logits ? logits + hh * O * V : NULL, argmax ? argmax + hh * O : NULL, ln,
                     c->heads->head[hh], O);
    }
    c->len = P + keep;
    return logits;
}
