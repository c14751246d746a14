/* trainer/model/model_hf.c — Hugging Face GPT-2 checkpoints into the model (see model_hf.h). */
#include "trainer/model/model_hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/safetensors.h"

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

static int is_true(const json *v) { return v && v->type == JSON_BOOL && v->b; }

/* DIR/config.json as the model's config with the GPT-2 options. */
static int gpt2_config(const char *dir, model_config *c, kf_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    size_t len;
    if (fs_read_file(path, &text, &len, err)) return -1;
    json_doc *d = json_parse(text, len, path, err);
    free(text);
    if (!d) return -1;
    const json *r = json_root(d), *v;
    memset(c, 0, sizeof *c);
    int64_t n_ctx = 1024;
    int rc = cfg_int(r, "n_embd", -1, &c->hidden, path, err) ||
             cfg_int(r, "n_head", -1, &c->heads, path, err) ||
             cfg_int(r, "n_layer", -1, &c->blocks, path, err) ||
             cfg_int(r, "vocab_size", -1, &c->vocab, path, err) ||
             cfg_int(r, "n_ctx", 1024, &n_ctx, path, err) ||
             cfg_int(r, "n_positions", n_ctx, &c->n_positions, path, err);
    /* what the model does not compute is refused, not ignored */
    if (!rc && (v = json_get(r, "layer_norm_epsilon")) &&
        (v->type != JSON_NUMBER || fabs(v->num - 1e-5) > 1e-12))
        rc = kf_err_set(err, "%s: \"layer_norm_epsilon\" must be 1e-5 (the model's LayerNorm eps)",
                        path);
    if (!rc && (v = json_get(r, "activation_function")) &&
        (v->type != JSON_STRING ||
         (strcmp(v->str.s, "gelu_new") && strcmp(v->str.s, "gelu_pytorch_tanh"))))
        rc = kf_err_set(err, "%s: activation_function %s: only gelu_new (tanh GELU) is supported",
                        path, v->type == JSON_STRING ? v->str.s : "?");
    if (!rc && is_true(json_get(r, "scale_attn_by_inverse_layer_idx")))
        rc = kf_err_set(err, "%s: scale_attn_by_inverse_layer_idx is not supported", path);
    if (!rc && is_true(json_get(r, "add_cross_attention")))
        rc = kf_err_set(err, "%s: add_cross_attention is not supported", path);
    json_free(d);
    if (rc) return -1;
    c->mask_id = -1;
    c->seq_len = c->n_positions;
    c->kind = MODEL_AR;
    c->head = HEAD_SHARED;
    c->k_train = 1;
    c->pos = POS_LEARNED;
    c->tied_head = c->norm_bias = c->attn_bias = 1;
    kf_err e2;
    if (model_config_check(c, &e2)) return kf_err_set(err, "%s: %s", path, e2.msg);
    return 0;
}

/* The HF tensor called name, with or without the "transformer." prefix. */
static const safetensors_tensor *find(const safetensors_file *f, const char *name) {
    char full[160];
    const safetensors_tensor *t = safetensors_find(f, name);
    if (t) return t;
    snprintf(full, sizeof full, "transformer.%s", name);
    return safetensors_find(f, full);
}

/* Reads HF tensor hf into the model tensor kf (host buffer laid out like
 * params); conv1d: stored [in, out], transposed into kf's [out, in]. */
static int map_tensor(const model *m, const safetensors_file *f, float *host, const char *hf,
                      const char *kf, int conv1d, kf_err *err) {
    const model_tensor *t = model_find(m, kf);
    KF_CHECK(t, "model_hf: no model tensor %s", kf);
    const safetensors_tensor *s = find(f, hf);
    if (!s)
        return kf_err_set(err, "%s: no tensor '%s' (a Hugging Face GPT-2 checkpoint has it)",
                          f->path, hf);
    int64_t d0 = conv1d ? t->shape[1] : t->shape[0], d1 = conv1d ? t->shape[0] : t->shape[1];
    if (s->ndim != t->ndim || s->shape[0] != d0 || (t->ndim == 2 && s->shape[1] != d1)) {
        if (t->ndim == 2)
            return kf_err_set(err, "%s: tensor '%s' must be [%lld, %lld]%s", f->path, hf,
                              (long long)d0, (long long)d1, conv1d ? " (Conv1D: [in, out])" : "");
        return kf_err_set(err, "%s: tensor '%s' must be [%lld]", f->path, hf, (long long)d0);
    }
    float *dst = host + t->offset;
    if (!conv1d) return safetensors_read_f32(s, dst, err);
    float *tmp = kf_malloc((size_t)t->numel * sizeof(float));
    int rc = safetensors_read_f32(s, tmp, err);
    for (int64_t i = 0; !rc && i < d0; i++)
        for (int64_t j = 0; j < d1; j++) dst[j * d0 + i] = tmp[i * d1 + j];
    free(tmp);
    return rc;
}

/* Whether key (prefix stripped) is one the mapping reads or may ignore. */
static int known_key(const char *key, int64_t layers) {
    if (!strncmp(key, "transformer.", 12)) key += 12;
    static const char *const top[] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias",
                                      "lm_head.weight"};
    for (size_t i = 0; i < sizeof top / sizeof *top; i++)
        if (!strcmp(key, top[i])) return 1;
    static const char *const per[] = {
        "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
        "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias",
        "attn.bias",          "attn.masked_bias"};
    long long l;
    int n = 0;
    if (sscanf(key, "h.%lld.%n", &l, &n) != 1 || n == 0 || l < 0 || l >= layers) return 0;
    for (size_t i = 0; i < sizeof per / sizeof *per; i++)
        if (!strcmp(key + n, per[i])) return 1;
    return 0;
}

/* Every tensor of f, mapped into host (laid out like m's params). */
static int map_all(const model *m, const safetensors_file *f, float *host, kf_err *err) {
    static const struct {
        const char *hf, *kf;
        int conv1d;
    } blk[] = {
        {"ln_1.weight", "norm1.weight", 0},           {"ln_1.bias", "norm1.bias", 0},
        {"attn.c_attn.weight", "attn_qkv.weight", 1}, {"attn.c_attn.bias", "attn_qkv.bias", 0},
        {"attn.c_proj.weight", "attn_out.weight", 1}, {"attn.c_proj.bias", "attn_out.bias", 0},
        {"ln_2.weight", "norm2.weight", 0},           {"ln_2.bias", "norm2.bias", 0},
        {"mlp.c_fc.weight", "mlp.0.weight", 1},       {"mlp.c_fc.bias", "mlp.0.bias", 0},
        {"mlp.c_proj.weight", "mlp.2.weight", 1},     {"mlp.c_proj.bias", "mlp.2.bias", 0}};
    if (map_tensor(m, f, host, "wte.weight", "vocab_embed.embedding", 0, err) ||
        map_tensor(m, f, host, "wpe.weight", "pos_embed.embedding", 0, err))
        return -1;
    for (int64_t l = 0; l < m->cfg.blocks; l++)
        for (size_t i = 0; i < sizeof blk / sizeof *blk; i++) {
            char hf[96], kf[96];
            snprintf(hf, sizeof hf, "h.%lld.%s", (long long)l, blk[i].hf);
            snprintf(kf, sizeof kf, "blocks.%lld.%s", (long long)l, blk[i].kf);
            if (map_tensor(m, f, host, hf, kf, blk[i].conv1d, err)) return -1;
        }
    if (map_tensor(m, f, host, "ln_f.weight", "output_layer.norm_final.weight", 0, err) ||
        map_tensor(m, f, host, "ln_f.bias", "output_layer.norm_final.bias", 0, err))
        return -1;
    for (size_t i = 0; i < f->n; i++)
        if (!known_key(f->tensors[i].name, m->cfg.blocks))
            return kf_err_set(err, "%s: tensor '%s' is not part of a GPT-2 of %lld layers", f->path,
                              f->tensors[i].name, (long long)m->cfg.blocks);
    /* the head is tied: a separate lm_head must be the embedding itself */
    const safetensors_tensor *lm = safetensors_find(f, "lm_head.weight");
    if (lm) {
        const model_tensor *e = model_find(m, "vocab_embed.embedding");
        if (lm->ndim != 2 || lm->numel != e->numel)
            return kf_err_set(err, "%s: lm_head.weight must be [%lld, %lld] like wte", f->path,
                              (long long)e->shape[0], (long long)e->shape[1]);
        float *w = kf_malloc((size_t)e->numel * sizeof(float));
        int rc = safetensors_read_f32(lm, w, err);
        if (!rc && memcmp(w, host + e->offset, (size_t)e->numel * sizeof(float)))
            rc = kf_err_set(err,
                            "%s: lm_head.weight differs from wte.weight: an untied head is not "
                            "supported",
                            f->path);
        free(w);
        if (rc) return -1;
    }
    return 0;
}

model *model_hf_gpt2_load(kf_backend *be, const char *dir, kf_err *err) {
    model_config c;
    if (gpt2_config(dir, &c, err)) return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    safetensors_file *f;
    if (safetensors_open(path, &f, err)) return NULL;
    model *m = model_create(be, &c);
    float *host = kf_malloc((size_t)m->n_params * sizeof(float));
    int rc = map_all(m, f, host, err);
    if (!rc) be->upload(be, m->params, host, (size_t)m->n_params * sizeof(float));
    free(host);
    safetensors_close(f);
    if (rc) {
        model_free(m);
        return NULL;
    }
    return m;
}
