/* trainer/hf_gpt2.c — Hugging Face GPT-2 evaluator forward (see gpt2.h). */
#include "trainer/hf_gpt2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/safetensors.h"

typedef struct hf_gpt2_layer {
    float *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *fc2_w, *fc2_b;
} hf_gpt2_layer;

struct hf_gpt2_priv {
    float *wte, *wpe, *lnf_w, *lnf_b;
    hf_gpt2_layer *layer;
    float **owned; /* every device buffer above, for hf_gpt2_free */
    int n_owned;
};

/* Reads one integer field of config.json (def < 0: required). */
static int cfg_int(const json *root, const char *key, int64_t def, int64_t *out, const char *path,
                   kf_err *err) {
    const json *v = json_get(root, key);
    if (!v) {
        if (def < 0) return kf_err_set(err, "%s: no \"%s\"", path, key);
        *out = def;
        return 0;
    }
    if (v->type != JSON_NUMBER || !v->is_int || v->i < 1)
        return kf_err_set(err, "%s: \"%s\" must be a positive integer", path, key);
    *out = v->i;
    return 0;
}

static int read_config(hf_gpt2 *g, const char *dir, kf_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    size_t len;
    if (fs_read_file(path, &text, &len, err)) return -1;
    json_doc *d = json_parse(text, len, path, err);
    free(text);
    if (!d) return -1;
    const json *r = json_root(d), *v;
    int64_t npos_ctx = 1024;
    int rc = cfg_int(r, "n_embd", -1, &g->hidden, path, err) ||
             cfg_int(r, "n_head", -1, &g->heads, path, err) ||
             cfg_int(r, "n_layer", -1, &g->layers, path, err) ||
             cfg_int(r, "vocab_size", -1, &g->vocab, path, err) ||
             cfg_int(r, "n_ctx", 1024, &npos_ctx, path, err) ||
             cfg_int(r, "n_positions", npos_ctx, &g->n_positions, path, err);
    g->eps = 1e-5;
    if (!rc && (v = json_get(r, "layer_norm_epsilon"))) {
        if (v->type != JSON_NUMBER || !(v->num > 0))
            rc = kf_err_set(err, "%s: \"layer_norm_epsilon\" must be a positive number", path);
        else
            g->eps = v->num;
    }
    /* the variants this forward does not implement are refused, not ignored */
    if (!rc && (v = json_get(r, "activation_function")) &&
        (v->type != JSON_STRING || (strcmp(v->str.s, "gelu_new") && strcmp(v->str.s, "gelu_pytorch_tanh"))))
        rc = kf_err_set(err, "%s: activation_function %s: only gelu_new (tanh GELU) is supported", path,
                        v->type == JSON_STRING ? v->str.s : "?");
    if (!rc && (v = json_get(r, "scale_attn_by_inverse_layer_idx")) && v->type == JSON_BOOL && v->b)
        rc = kf_err_set(err, "%s: scale_attn_by_inverse_layer_idx is not supported", path);
    if (!rc && g->hidden % g->heads)
        rc = kf_err_set(err, "%s: n_embd %lld is not a multiple of n_head %lld", path,
                        (long long)g->hidden, (long long)g->heads);
    json_free(d);
    return rc ? -1 : 0;
}

/* Uploads tensor NAME (or transformer.NAME) of shape [d0] or [d0, d1] (d1 = 0: 1-D). */
static float *load_tensor(hf_gpt2 *g, const safetensors_file *f, const char *name, int64_t d0,
                          int64_t d1, kf_err *err) {
    char full[160];
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t) {
        snprintf(full, sizeof full, "transformer.%s", name);
        t = safetensors_find(f, full);
    }
    if (!t) return kf_err_set(err, "%s: no tensor '%s' (a Hugging Face GPT-2 checkpoint has it)", f->path, name), NULL;
    int ndim = d1 ? 2 : 1;
    if (t->ndim != ndim || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        if (d1)
            kf_err_set(err, "%s: tensor '%s' must be [%lld, %lld] (Conv1D: [in, out])", f->path, name,
                       (long long)d0, (long long)d1);
        else
            kf_err_set(err, "%s: tensor '%s' must be [%lld]", f->path, name, (long long)d0);
        return NULL;
    }
    float *h = kf_malloc((size_t)t->numel * sizeof(float));
    if (safetensors_read_f32(t, h, err)) {
        free(h);
        return NULL;
    }
    kf_backend *be = g->be;
    float *dbuf = be->alloc(be, (size_t)t->numel * sizeof(float));
    be->upload(be, dbuf, h, (size_t)t->numel * sizeof(float));
    free(h);
    struct hf_gpt2_priv *p = g->priv;
    p->owned = kf_realloc(p->owned, (size_t)(p->n_owned + 1) * sizeof *p->owned);
    p->owned[p->n_owned++] = dbuf;
    return dbuf;
}

hf_gpt2 *hf_gpt2_load(kf_backend *be, const char *dir, kf_err *err) {
    hf_gpt2 *g = kf_calloc(1, sizeof *g);
    g->be = be;
    g->priv = kf_calloc(1, sizeof *g->priv);
    if (read_config(g, dir, err)) {
        hf_gpt2_free(g);
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    safetensors_file *f;
    if (safetensors_open(path, &f, err)) {
        hf_gpt2_free(g);
        return NULL;
    }
    struct hf_gpt2_priv *p = g->priv;
    int64_t H = g->hidden, V = g->vocab;
    p->layer = kf_calloc((size_t)g->layers, sizeof *p->layer);
    int bad = !(p->wte = load_tensor(g, f, "wte.weight", V, H, err)) ||
              !(p->wpe = load_tensor(g, f, "wpe.weight", g->n_positions, H, err)) ||
              !(p->lnf_w = load_tensor(g, f, "ln_f.weight", H, 0, err)) ||
              !(p->lnf_b = load_tensor(g, f, "ln_f.bias", H, 0, err));
    for (int64_t l = 0; l < g->layers && !bad; l++) {
        hf_gpt2_layer *y = &p->layer[l];
        char n[12][96];
        const char *suffix[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        for (int i = 0; i < 12; i++) snprintf(n[i], sizeof n[i], "h.%lld.%s", (long long)l, suffix[i]);
        bad = !(y->ln1_w = load_tensor(g, f, n[0], H, 0, err)) || !(y->ln1_b = load_tensor(g, f, n[1], H, 0, err)) ||
              !(y->attn_w = load_tensor(g, f, n[2], H, 3 * H, err)) ||
              !(y->attn_b = load_tensor(g, f, n[3], 3 * H, 0, err)) ||
              !(y->proj_w = load_tensor(g, f, n[4], H, H, err)) || !(y->proj_b = load_tensor(g, f, n[5], H, 0, err)) ||
              !(y->ln2_w = load_tensor(g, f, n[6], H, 0, err)) || !(y->ln2_b = load_tensor(g, f, n[7], H, 0, err)) ||
              !(y->fc_w = load_tensor(g, f, n[8], H, 4 * H, err)) ||
              !(y->fc_b = load_tensor(g, f, n[9], 4 * H, 0, err)) ||
              !(y->fc2_w = load_tensor(g, f, n[10], 4 * H, H, err)) ||
              !(y->fc2_b = load_tensor(g, f, n[11], H, 0, err));
    }
    safetensors_close(f);
    if (bad) {
        hf_gpt2_free(g);
        return NULL;
    }
    return g;
}

void hf_gpt2_free(hf_gpt2 *g) {
    if (!g) return;
    struct hf_gpt2_priv *p = g->priv;
    for (int i = 0; i < p->n_owned; i++) g->be->free(g->be, p->owned[i]);
    free(p->owned);
    free(p->layer);
    free(p);
    free(g);
}

/* y = x W + b for a Conv1D weight W [in, out]. */
static void conv1d(kf_backend *be, float *y, const float *x, const float *w, const float *b, int64_t rows,
                   int64_t in, int64_t out) {
    be->matmul(be, y, x, w, rows, out, in, 0, 0, 1.0f, 0.0f);
    be->add_bias(be, y, b, rows, out);
}

void hf_gpt2_forward(hf_gpt2 *g, const int32_t *ids, int64_t B, int64_t L, const int32_t *valid_len,
                  float *logits, float *nll) {
    KF_CHECK(L >= 1 && L <= g->n_positions, "hf_gpt2_forward: %lld tokens, the context is %lld",
             (long long)L, (long long)g->n_positions);
    kf_backend *be = g->be;
    struct hf_gpt2_priv *p = g->priv;
    kf_precision saved = be->precision;
    be->set_precision(be, KF_PREC_FP32);
    int64_t H = g->hidden, V = g->vocab, R = B * L, nh = g->heads, hd = H / nh;
    float eps = (float)g->eps;
    int32_t *hpos = kf_malloc((size_t)R * sizeof(int32_t));
    for (int64_t r = 0; r < R; r++) hpos[r] = (int32_t)(r % L);
    int32_t *ids_d = be->alloc(be, (size_t)R * sizeof(int32_t)), *pos_d = be->alloc(be, (size_t)R * sizeof(int32_t));
    be->upload(be, ids_d, ids, (size_t)R * sizeof(int32_t));
    be->upload(be, pos_d, hpos, (size_t)R * sizeof(int32_t));
    float *x = be->alloc(be, (size_t)(R * H) * sizeof(float)), *tmp = be->alloc(be, (size_t)(R * H) * sizeof(float));
    float *h = be->alloc(be, (size_t)(R * H) * sizeof(float)), *att = be->alloc(be, (size_t)(R * H) * sizeof(float));
    float *qkv = be->alloc(be, (size_t)(R * 3 * H) * sizeof(float));
    float *f1 = be->alloc(be, (size_t)(R * 4 * H) * sizeof(float)), *f2 = be->alloc(be, (size_t)(R * 4 * H) * sizeof(float));
    float *mean = be->alloc(be, (size_t)R * sizeof(float)), *rstd = be->alloc(be, (size_t)R * sizeof(float));
    float *lse = be->alloc(be, (size_t)(B * nh * L) * sizeof(float));
    be->embed_fwd(be, x, ids_d, NULL, p->wte, R, H);
    be->embed_fwd(be, tmp, pos_d, NULL, p->wpe, R, H);
    be->add_inplace(be, x, tmp, R * H);
    kf_mask mk = {.n_ctx = L, .group = 0, .n_groups = 0, .q_start = 0, .valid_len = valid_len};
    for (int64_t l = 0; l < g->layers; l++) {
        const hf_gpt2_layer *y = &p->layer[l];
        be->layernorm_fwd(be, h, mean, rstd, x, y->ln1_w, y->ln1_b, R, H, eps);
        conv1d(be, qkv, h, y->attn_w, y->attn_b, R, H, 3 * H);
        be->attn_fwd(be, att, lse, qkv, &mk, B, nh, hd);
        conv1d(be, tmp, att, y->proj_w, y->proj_b, R, H, H);
        be->add_inplace(be, x, tmp, R * H);
        be->layernorm_fwd(be, h, mean, rstd, x, y->ln2_w, y->ln2_b, R, H, eps);
        conv1d(be, f1, h, y->fc_w, y->fc_b, R, H, 4 * H);
        be->gelu_fwd(be, f2, f1, R * 4 * H, KF_GELU_TANH);
        conv1d(be, tmp, f2, y->fc2_w, y->fc2_b, R, 4 * H, H);
        be->add_inplace(be, x, tmp, R * H);
    }
    be->layernorm_fwd(be, h, mean, rstd, x, p->lnf_w, p->lnf_b, R, H, eps);
    /* the tied head in chunks of rows: GPT-2's 50257 logits per row would
     * take gigabytes for a whole batch of 1024-token windows */
    int64_t chunk = (int64_t)((256u << 20) / ((size_t)V * sizeof(float)));
    chunk = chunk < 1 ? 1 : chunk > R ? R : chunk;
    float *lg = be->alloc(be, (size_t)(chunk * V) * sizeof(float)), *loss = be->alloc(be, (size_t)chunk * sizeof(float));
    int32_t *tg = kf_malloc((size_t)chunk * sizeof(int32_t)), *tg_d = be->alloc(be, (size_t)chunk * sizeof(int32_t));
    for (int64_t r0 = 0; r0 < R; r0 += chunk) {
        int64_t c = R - r0 < chunk ? R - r0 : chunk;
        be->matmul(be, lg, h + r0 * H, p->wte, c, V, H, 0, 1, 1.0f, 0.0f);
        if (logits) be->download(be, logits + r0 * V, lg, (size_t)(c * V) * sizeof(float));
        if (!nll) continue;
        for (int64_t i = 0; i < c; i++) {
            int64_t r = r0 + i, b = r / L, t = r % L, vl = valid_len ? valid_len[b] : L;
            tg[i] = t + 1 < vl ? ids[r + 1] : -1;
        }
        be->upload(be, tg_d, tg, (size_t)c * sizeof(int32_t));
        be->xent(be, loss, NULL, lg, tg_d, c, V, 0.0f);
        be->download(be, nll + r0, loss, (size_t)c * sizeof(float));
    }
    float *bufs[] = {x, tmp, h, att, qkv, f1, f2, mean, rstd, lse, lg, loss};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->free(be, bufs[i]);
    be->free(be, ids_d);
    be->free(be, pos_d);
    be->free(be, tg_d);
    free(tg);
    free(hpos);
    be->set_precision(be, saved);
}
