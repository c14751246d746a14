/* trainer/model/model_decode.c — the backbone over a per-layer K/V cache: each step
 * appends Q rows per sequence, attends over the cache (attn_decode) and keeps
 * only the first `keep` rows (K-Forcing keeps context tokens, drops noise). */
#include <stdlib.h>
#include <string.h>

#include "trainer/model/model_internal.h"

/* A block's linear weights in their decode-time form, in this order. */
enum { LIN_QKV, LIN_OUT, LIN_FC1, LIN_FC2, LIN_PER_BLOCK };
/* the noise encoder's: proj, fc1, fc2 */
enum { LIN_NOISE = 3 };

struct model_heads {
    model *m;
    void **head; /* [n_heads_out] */
    void **lin;  /* [blocks * LIN_PER_BLOCK + LIN_NOISE]; the noise encoder's NULL in AR */
};

model_heads *model_heads_pack(model *m) {
    model_heads *h = kf_calloc(1, sizeof *h);
    model_priv *p = m->priv;
    kf_backend *be = m->be;
    int64_t H = m->cfg.hidden, nb = m->cfg.blocks;
    h->m = m;
    h->head = kf_calloc((size_t)m->n_heads_out, sizeof *h->head);
    for (int i = 0; i < m->n_heads_out; i++)
        h->head[i] = be->head_pack(be, m->params + p->head[i].w,
                                   p->head[i].b >= 0 ? m->params + p->head[i].b : NULL,
                                   m->cfg.vocab, H, m->cfg.mask_id, MASK_LOGIT);
    h->lin = kf_calloc((size_t)(nb * LIN_PER_BLOCK + LIN_NOISE), sizeof *h->lin);
    /* (offset, in, out) of every packed weight */
    int64_t(*w)[3] = kf_calloc((size_t)(nb * LIN_PER_BLOCK + LIN_NOISE), sizeof *w);
    for (int64_t l = 0; l < nb; l++) {
        const block_off *o = &p->blk[l];
        int64_t *wl = w[l * LIN_PER_BLOCK];
        memcpy(wl,
               (int64_t[LIN_PER_BLOCK * 3]){o->qkv, H, 3 * H, o->out, H, H, o->fc1_w, H, 4 * H,
                                            o->fc2_w, 4 * H, H},
               sizeof(int64_t[LIN_PER_BLOCK * 3]));
    }
    int64_t n = nb * LIN_PER_BLOCK;
    if (m->cfg.kind == MODEL_PFLM) {
        const noise_off *o = &p->noise;
        memcpy(w[n],
               (int64_t[LIN_NOISE * 3]){o->proj_w, 2 * H * (p->zdim ? p->zdim : 1), H, o->fc1_w, H,
                                        4 * H, o->fc2_w, 4 * H, H},
               sizeof(int64_t[LIN_NOISE * 3]));
        n += LIN_NOISE;
    }
    for (int64_t i = 0; i < n; i++)
        h->lin[i] =
            be->linear_pack(be, m->params + w[i][0], model_w16(m, w[i][0]), w[i][1], w[i][2]);
    free(w);
    return h;
}

void model_heads_free(model_heads *h) {
    if (!h) return;
    kf_backend *be = h->m->be;
    for (int i = 0; i < h->m->n_heads_out; i++) be->head_free(be, h->head[i]);
    for (int64_t i = 0; i < h->m->cfg.blocks * LIN_PER_BLOCK + LIN_NOISE; i++)
        if (h->lin[i]) be->linear_pack_free(be, h->lin[i]);
    free(h->lin);
    free(h->head);
    free(h);
}

/* The graph of one step shape (kernels.h's graph ops). A step's ops depend
 * on the host only through the buffers' addresses, the shape below and the
 * cache-length bucket: attn_decode reads the length from the device (the
 * step's first position, pos_d[0], uploaded with its inputs) and is launched
 * for the bucket's longest cache, so the whole step is one graph per shape
 * and bucket. */
typedef struct step_graphs {
    int64_t Q, ntok, nz, n_out;
    int table; /* noise rows from the noise table */
    const int32_t *argmax;
    kf_precision prec;
    int batch_invariant;
    void **bufs;    /* the buffers' addresses when recorded (bufs_addrs) */
    int runs;       /* steps of this shape so far: the first runs uncaptured */
    int64_t bucket; /* the cache rows the graph was recorded for (step_bucket) */
    void *graph;    /* NULL where the backend made none */
} step_graphs;

enum { STEP_SHAPES = 4 };

struct model_cache {
    model *m;
    const model_heads *heads;
    int64_t B, cap, len;
    step_graphs shapes[STEP_SHAPES];
    int n_shapes;
    float *kv;      /* every layer's K and V: one allocation */
    float **k, **v; /* [blocks] of [B, cap, H], in kv */
    layer_act a;
    noise_act nact;
    head_act *hact;
    dbuf x, xf, logits, tmp, pos_d, ids_d, rows_d, nrows_d, z_d, kidx_d, vidx_d, cidx_d, oidx_d;
    dbuf posrow_d; /* POS_LEARNED: each new row's position */
    dbuf ntab;     /* [ntab_n, H]: model_cache_noise_encode's rows */
    dbuf nids_d;   /* a step's noise rows' rows of ntab */
    int64_t ntab_n;
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
    KF_CHECK(!m->cfg.bidir, "model_cache_create: a bidirectional model has no KV cache");
    model_cache *c = kf_calloc(1, sizeof *c);
    c->m = m;
    c->heads = h;
    c->B = B;
    c->cap = cap;
    int64_t nb = m->cfg.blocks, H = m->cfg.hidden;
    c->k = kf_calloc((size_t)nb, sizeof *c->k);
    c->v = kf_calloc((size_t)nb, sizeof *c->v);
    /* one buffer: the CPU backend puts one of 2 MiB or more on huge pages,
     * where 24 of a 124M model's 1.6 MB each (batch 4) cost some 6,700
     * page faults a decoding run, 8% of its time; each layer's K and V
     * start on a 256-byte boundary */
    int64_t n = (B * cap * H + 63) / 64 * 64;
    c->kv = m->be->alloc(m->be, (size_t)(2 * nb * n) * sizeof(float));
    for (int64_t l = 0; l < nb; l++) {
        c->k[l] = c->kv + 2 * l * n;
        c->v[l] = c->kv + (2 * l + 1) * n;
    }
    c->hact = kf_calloc((size_t)m->n_heads_out, sizeof *c->hact);
    return c;
}

/* The cache's buffers besides K, V and the heads' (hact). */
enum { CACHE_BUFS = 39 };
static void cache_bufs(model_cache *c, dbuf *d[CACHE_BUFS]) {
    layer_act *a = &c->a;
    noise_act *n = &c->nact;
    dbuf *all[CACHE_BUFS] = {
        &a->ln1,    &a->mean1,    &a->rstd1,   &a->qkv,   &a->att,    &a->lse,    &a->xmid,
        &a->ln2,    &a->mean2,    &a->rstd2,   &a->h1,    &a->h2,     &n->feats,  &n->c,
        &n->ln,     &n->mean,     &n->rstd,    &n->h1,    &n->h2,     &n->out,    &n->dh,
        &n->dln,    &n->dc,       &c->x,       &c->xf,    &c->logits, &c->tmp,    &c->pos_d,
        &c->ids_d,  &c->rows_d,   &c->nrows_d, &c->z_d,   &c->kidx_d, &c->vidx_d, &c->cidx_d,
        &c->oidx_d, &c->posrow_d, &c->ntab,    &c->nids_d};
    memcpy(d, all, sizeof all);
}

/* The addresses of the cache's buffers into addr [bufs_count(c)]: a step
 * graph recorded with other addresses (a buffer has grown since) is
 * recorded again. */
static int64_t bufs_count(const model_cache *c) { return CACHE_BUFS + 6 * c->m->n_heads_out; }
static void bufs_addrs(model_cache *c, void **addr) {
    dbuf *d[CACHE_BUFS];
    cache_bufs(c, d);
    for (int i = 0; i < CACHE_BUFS; i++) addr[i] = d[i]->p;
    for (int64_t h = 0, i = CACHE_BUFS; h < c->m->n_heads_out; h++) {
        addr[i++] = c->hact[h].ln.p;
        addr[i++] = c->hact[h].mean.p;
        addr[i++] = c->hact[h].rstd.p;
        addr[i++] = c->hact[h].pre.p;
        addr[i++] = c->hact[h].g.p;
        addr[i++] = c->hact[h].u.p;
    }
}

static void step_graphs_free(model_cache *c, step_graphs *g) {
    kf_backend *be = c->m->be;
    be->graph_free(be, g->graph);
    free(g->bufs);
    memset(g, 0, sizeof *g);
}

void model_cache_free(model_cache *c) {
    if (!c) return;
    kf_backend *be = c->m->be;
    for (int i = 0; i < c->n_shapes; i++) step_graphs_free(c, &c->shapes[i]);
    be->free(be, c->kv);
    dbuf *d[CACHE_BUFS];
    cache_bufs(c, d);
    for (int i = 0; i < CACHE_BUFS; i++) dbuf_release(be, d[i]);
    for (int h = 0; h < c->m->n_heads_out; h++) {
        dbuf_release(be, &c->hact[h].ln);
        dbuf_release(be, &c->hact[h].mean);
        dbuf_release(be, &c->hact[h].rstd);
        dbuf_release(be, &c->hact[h].pre);
        dbuf_release(be, &c->hact[h].g);
        dbuf_release(be, &c->hact[h].u);
    }
    free(c->hact);
    free(c->k);
    free(c->v);
    free(c->h32);
    free(c->h64);
    free(c);
}

int64_t model_cache_len(const model_cache *c) { return c->len; }

void model_cache_rewind(model_cache *c, int64_t len) {
    KF_CHECK(len >= 0 && len <= c->len, "model_cache_rewind: %lld rows of %lld", (long long)len,
             (long long)c->len);
    c->len = len;
}

static int32_t *h32(model_cache *c, size_t n) {
    if (n > c->h32_cap) {
        c->h32 = kf_realloc(c->h32, n * sizeof(int32_t));
        c->h32_cap = n;
    }
    return c->h32;
}

static double *h64(model_cache *c, size_t n) {
    if (n > c->h64_cap) {
        c->h64 = kf_realloc(c->h64, n * sizeof(double));
        c->h64_cap = n;
    }
    return c->h64;
}

/* z and tau of n noise rows as noise_encoder_fwd reads them from the
 * device: h64 [n * zd] z values, then each one's tau, uploaded to z_d. */
static const double *noise_upload(model_cache *c, int64_t n, int64_t zd) {
    return dbuf_upload(c->m->be, &c->z_d, c->h64, (size_t)(2 * n * zd), sizeof(double));
}

void model_cache_noise_encode(model *m, model_cache *c, int64_t n, const double *z,
                              const double *tau) {
    KF_CHECK(m->cfg.kind == MODEL_PFLM,
             "model_cache_noise_encode: an AR model has no noise encoder");
    KF_CHECK(c->m == m, "model_cache_noise_encode: the cache is another model's");
    KF_CHECK(n >= 1, "model_cache_noise_encode: %lld rows", (long long)n);
    model_priv *p = m->priv;
    kf_backend *be = m->be;
    int64_t zd = p->zdim ? p->zdim : 1, H = m->cfg.hidden;
    double *h = h64(c, (size_t)(2 * n * zd));
    for (int64_t i = 0; i < n * zd; i++) {
        h[i] = z[i];
        h[n * zd + i] = tau[i / zd];
    }
    const double *zd_d = noise_upload(c, n, zd);
    noise_encoder_fwd(m, &c->nact, n, zd_d, zd_d + n * zd,
                      c->heads->lin + m->cfg.blocks * LIN_PER_BLOCK);
    be->copy(be, dbuf_ensure(be, &c->ntab, (size_t)(n * H) * sizeof(float)), c->nact.out.p,
             (size_t)(n * H) * sizeof(float));
    c->ntab_n = n;
}

/* One step's sizes and device buffers, all in place before its first op. */
typedef struct step {
    model *m;
    model_cache *c;
    int64_t Q, R, ntok, nz, O;
    int table; /* noise rows from the noise table */
    float *x, *ln1, *mean, *rstd, *qkv, *att, *tmp, *xf, *logits;
    const double *zd;
    int32_t *argmax;
} step;

/* Block l's ops before its attention: LayerNorm, QKV, RoPE, and the new K
 * and V rows into the cache. */
static void block_pre(const step *s, int64_t l) {
    model *m = s->m;
    model_cache *c = s->c;
    kf_backend *be = m->be;
    const block_off *o = &((model_priv *)m->priv)->blk[l];
    int64_t H = m->cfg.hidden, R = s->R, nh = m->cfg.heads;
    be->layernorm_fwd(be, s->ln1, NULL, s->mean, s->rstd, s->x, m->params + o->norm1,
                      o->norm1_b >= 0 ? m->params + o->norm1_b : NULL, R, H, LN_EPS);
    void *const *lin = c->heads->lin + l * LIN_PER_BLOCK;
    linear_fwd(m, lin[LIN_QKV], s->qkv, s->ln1, NULL, o->qkv, o->qkv_b, R, H, 3 * H, 0.0f);
    if (m->cfg.pos == POS_ROPE)
        be->rope_fwd(be, s->qkv, c->pos_d.p, c->B, s->Q, nh, H / nh, ROPE_BASE, NULL);
    be->gather_rows(be, s->tmp, s->qkv, c->kidx_d.p, R, H);
    be->scatter_rows(be, c->k[l], s->tmp, c->cidx_d.p, R, H);
    be->gather_rows(be, s->tmp, s->qkv, c->vidx_d.p, R, H);
    be->scatter_rows(be, c->v[l], s->tmp, c->cidx_d.p, R, H);
}

/* The cache rows a step's attentions are launched for: the power of two at
 * or above the rows after the step, at most the capacity. A bucket's graph
 * serves the steps until the cache outgrows it (log2(cap) graphs a decode). */
static int64_t step_bucket(const model_cache *c, int64_t rows) {
    int64_t t = 1;
    while (t < rows) t *= 2;
    return t < c->cap ? t : c->cap;
}

/* A step's ops, all on the device (step_graphs). */
static void step_ops(const step *s, int64_t bucket) {
    model *m = s->m;
    model_cache *c = s->c;
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    int64_t H = m->cfg.hidden, R = s->R, nh = m->cfg.heads;
    /* inputs: tokens by embedding, noise rows from the noise table or
     * through the noise encoder */
    if (s->ntok) be->embed_fwd(be, s->x, c->ids_d.p, c->rows_d.p, m->params + p->embed, s->ntok, H);
    if (s->nz && s->table) {
        be->embed_fwd(be, s->x, c->nids_d.p, c->nrows_d.p, c->ntab.p, s->nz, H);
    } else if (s->nz) {
        int64_t zd = p->zdim ? p->zdim : 1;
        noise_encoder_fwd(m, &c->nact, s->nz, s->zd, s->zd + s->nz * zd,
                          c->heads->lin + m->cfg.blocks * LIN_PER_BLOCK);
        be->scatter_rows(be, s->x, c->nact.out.p, c->nrows_d.p, s->nz, H);
    }
    if (m->cfg.pos == POS_LEARNED) pos_embed_fwd(m, &c->tmp, s->x, c->posrow_d.p, R);
    for (int64_t l = 0; l < m->cfg.blocks; l++) {
        const block_off *o = &p->blk[l];
        block_pre(s, l);
        be->attn_decode(be, s->att, s->qkv, 3 * H, c->k[l], c->v[l], c->B, c->cap, bucket - s->Q,
                        c->pos_d.p, s->Q, nh, H / nh); /* pos_d[0]: the cache length */
        void *const *lin = c->heads->lin + l * LIN_PER_BLOCK;
        float *x = s->x, *att = s->att;
        int64_t n = R;
        if (l == m->cfg.blocks - 1) {
            /* the last block's projection and MLP for the output rows alone,
             * ordered (out row, sample): nothing reads the other rows' (a
             * K-Forcing step's context rows, all but one prefix row) */
            be->gather_rows(be, s->xf, s->x, c->oidx_d.p, s->O, H);
            be->gather_rows(be, s->tmp, s->att, c->oidx_d.p, s->O, H);
            x = s->xf;
            att = s->tmp;
            n = s->O;
        }
        linear_fwd(m, lin[LIN_OUT], x, att, NULL, o->out, o->out_b, n, H, H, 1.0f);
        block_mlp_fwd(m, o, &c->a, x, n, lin + LIN_FC1);
    }
    for (int hh = 0; hh < m->n_heads_out; hh++) {
        float *ln = head_norm_fwd(m, &c->hact[hh], hh, s->xf, s->O);
        be->head_fwd(be, s->logits ? s->logits + hh * s->O * m->cfg.vocab : NULL,
                     s->argmax ? s->argmax + hh * s->O : NULL, ln, c->heads->head[hh], s->O);
    }
}

/* The graphs for this step's shape, made empty when the buffers moved since
 * they were recorded; the oldest shape makes room for a new one. */
static step_graphs *step_shape(const step *s) {
    model_cache *c = s->c;
    kf_backend *be = s->m->be;
    int64_t nb = bufs_count(c);
    void **now = kf_malloc((size_t)nb * sizeof *now);
    bufs_addrs(c, now);
    step_graphs *g = NULL;
    for (int i = 0; i < c->n_shapes && !g; i++) {
        step_graphs *t = &c->shapes[i];
        if (t->Q == s->Q && t->ntok == s->ntok && t->nz == s->nz && t->table == s->table &&
            t->n_out == s->O / c->B && t->argmax == s->argmax && t->prec == be->precision &&
            t->batch_invariant == be->batch_invariant)
            g = t;
    }
    if (g && g->bufs && memcmp(g->bufs, now, (size_t)nb * sizeof *now)) {
        step_graphs k = *g; /* re-recorded after a run that settles the buffers */
        k.graph = NULL;
        k.bufs = NULL;
        step_graphs_free(c, g);
        *g = k;
        g->runs = 0;
    }
    if (!g) {
        if (c->n_shapes == STEP_SHAPES) {
            step_graphs_free(c, &c->shapes[0]);
            memmove(c->shapes, c->shapes + 1, (STEP_SHAPES - 1) * sizeof *c->shapes);
            c->n_shapes--;
        }
        g = &c->shapes[c->n_shapes++];
        *g = (step_graphs){.Q = s->Q,
                           .ntok = s->ntok,
                           .nz = s->nz,
                           .table = s->table,
                           .n_out = s->O / c->B,
                           .argmax = s->argmax,
                           .prec = be->precision,
                           .batch_invariant = be->batch_invariant};
    }
    free(now);
    return g;
}

const float *model_decode_step(model *m, model_cache *c, int64_t Q, const uint8_t *noise,
                               const int32_t *ids, const double *z, const double *tau,
                               int64_t n_out, const int32_t *out, int64_t keep, int32_t *argmax) {
    kf_backend *be = m->be;
    model_priv *p = m->priv;
    int64_t B = c->B, P = c->len, H = m->cfg.hidden, V = m->cfg.vocab;
    int64_t R = B * Q, zd = p->zdim ? p->zdim : 1;
    size_t f = sizeof(float);
    KF_CHECK(Q >= 1 && keep <= Q && P + Q <= c->cap,
             "model_decode_step: %lld new rows after %lld exceed the cache of %lld", (long long)Q,
             (long long)P, (long long)c->cap);
    step s = {.m = m, .c = c, .Q = Q, .R = R, .argmax = argmax};

    /* every input goes to the device before the first op: the ops, recorded
     * in graphs, read device buffers only */
    int64_t ntok = 0, nz = 0;
    for (int64_t i = 0; i < Q; i++) noise[i] ? nz++ : ntok++;
    ntok *= B;
    nz *= B;
    s.ntok = ntok;
    s.nz = nz;
    s.table = nz && !z;
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
    }
    if (nz && s.table) { /* each noise row's row of the table, then its row of the step */
        KF_CHECK(c->ntab_n > 0, "model_decode_step: noise rows from an empty noise table");
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Q; i++)
                if (noise[i]) {
                    int32_t t = ids[b * Q + i];
                    KF_CHECK(t >= 0 && t < c->ntab_n,
                             "model_decode_step: noise row %d outside the table of %lld", t,
                             (long long)c->ntab_n);
                    h[iz] = t;
                    h[nz + iz++] = (int32_t)(b * Q + i);
                }
        dbuf_upload(be, &c->nids_d, h, (size_t)nz, sizeof(int32_t));
        dbuf_upload(be, &c->nrows_d, h + nz, (size_t)nz, sizeof(int32_t));
    } else if (nz) {
        KF_CHECK(m->cfg.kind == MODEL_PFLM, "model_decode_step: noise rows given to an AR model");
        double *hz = h64(c, (size_t)(2 * nz * zd));
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Q; i++)
                if (noise[i]) {
                    for (int64_t e = 0; e < zd; e++) {
                        hz[iz * zd + e] = z[(b * Q + i) * zd + e];
                        hz[nz * zd + iz * zd + e] = tau[b];
                    }
                    h[iz++] = (int32_t)(b * Q + i);
                }
        dbuf_upload(be, &c->nrows_d, h, (size_t)nz, sizeof(int32_t));
        s.zd = noise_upload(c, nz, zd);
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
        dbuf_upload(be, &c->posrow_d, pos, (size_t)R, sizeof(int32_t));
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

    int64_t O = n_out * B;
    s.O = O;
    int32_t *oi = h32(c, (size_t)(O + 1));
    for (int64_t j = 0; j < n_out; j++) {
        KF_CHECK(out[j] >= 0 && out[j] < Q, "model_decode_step: output row %d of %lld", out[j],
                 (long long)Q);
        for (int64_t b = 0; b < B; b++) oi[j * B + b] = (int32_t)(b * Q + out[j]);
    }
    dbuf_upload(be, &c->oidx_d, oi, (size_t)O, sizeof(int32_t));

    layer_act *a = &c->a;
    s.x = dbuf_ensure(be, &c->x, (size_t)(R * H) * f);
    s.ln1 = dbuf_ensure(be, &a->ln1, (size_t)(R * H) * f);
    s.mean = dbuf_ensure(be, &a->mean1, (size_t)R * f);
    s.rstd = dbuf_ensure(be, &a->rstd1, (size_t)R * f);
    s.qkv = dbuf_ensure(be, &a->qkv, (size_t)(R * 3 * H) * f);
    s.att = dbuf_ensure(be, &a->att, (size_t)(R * H) * f);
    s.tmp = dbuf_ensure(be, &c->tmp, (size_t)((R > O ? R : O) * H) * f); /* rows or outputs */
    s.xf = dbuf_ensure(be, &c->xf, (size_t)(O * H) * f);
    s.logits = argmax ? NULL : dbuf_ensure(be, &c->logits, (size_t)(m->n_heads_out * O * V) * f);

    /* The step's ops: run as called the first time a shape is seen (buffers
     * and scratch grow then), recorded the second time and again when the
     * cache outgrows the bucket recorded (nothing grows then), launched
     * otherwise (the CPU backend records nothing and runs them). */
    step_graphs *g = step_shape(&s);
    int64_t bucket = step_bucket(c, P + Q);
    int record = g->runs == 1 || (g->graph && g->bucket != bucket);
    if (g->graph && !record) {
        be->graph_launch(be, g->graph);
    } else {
        if (record) {
            be->graph_free(be, g->graph);
            be->graph_begin(be);
        }
        step_ops(&s, bucket);
        if (record) g->graph = be->graph_end(be);
        g->bucket = bucket;
    }
    if (record && !g->bufs) {
        g->bufs = kf_malloc((size_t)bufs_count(c) * sizeof *g->bufs);
        bufs_addrs(c, g->bufs);
    }
    g->runs++;
    c->len = P + keep;
    return s.logits;
}
