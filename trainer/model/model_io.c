/* trainer/model/model_io.c — model checkpoints in safetensors.
 * Tensors carry the reference names (model.h); the config is recorded in
 * __metadata__ (format version 2, model.h "checkpoints"), plus "format":
 * "pt", so a checkpoint describes itself. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/safetensors.h"
#include "trainer/model/model_internal.h"

/* the newest checkpoint format this build reads (and 1, no kf.version, and 2) */
#define MODEL_FORMAT_VERSION 4
/* version 4 adds kf.noise_cycles != 0 (an encoder the builds before it would
 * misread), version 3 kf.head = medusa; every other model is still written
 * as 2, which the builds before them read */
#define MODEL_FORMAT_VERSION_NOISE_CYCLES 4
#define MODEL_FORMAT_VERSION_MEDUSA 3
#define MODEL_FORMAT_VERSION_BASE 2

static int64_t format_version(const model_config *c) {
    return c->noise_cycles          ? MODEL_FORMAT_VERSION_NOISE_CYCLES
           : c->head == HEAD_MEDUSA ? MODEL_FORMAT_VERSION_MEDUSA
                                    : MODEL_FORMAT_VERSION_BASE;
}

int model_save(const model *m, const char *path, const float *buf, kf_err *err) {
    kf_backend *be = m->be;
    float *host = kf_malloc((size_t)m->n_params * sizeof(float));
    be->download(be, host, buf ? buf : m->params, (size_t)m->n_params * sizeof(float));
    safetensors_writer *w = safetensors_writer_new();
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        safetensors_add(w, t->name, ST_F32, t->ndim, t->shape, host + t->offset);
    }
    const model_config *c = &m->cfg;
    char v[32];
#define META(key, val)                                                                             \
    snprintf(v, sizeof v, "%lld", (long long)(val));                                               \
    safetensors_set_meta(w, "kf." key, v)
    META("hidden", c->hidden);
    META("heads", c->heads);
    META("blocks", c->blocks);
    META("vocab", c->vocab);
    META("mask_id", c->mask_id);
    META("seq_len", c->seq_len);
    META("k_train", c->k_train);
    META("version", format_version(c));
    META("n_positions", c->n_positions);
    META("tied_head", c->tied_head);
    META("norm_bias", c->norm_bias);
    META("attn_bias", c->attn_bias);
    if (c->noise_cycles) {
        META("noise_cycles", c->noise_cycles);
    }
#undef META
    safetensors_set_meta(w, "kf.pos", c->pos == POS_LEARNED ? "learned" : "rope");
    safetensors_set_meta(w, "kf.kind", c->kind == MODEL_PFLM ? "pflm" : "ar");
    safetensors_set_meta(w, "kf.head",
                         c->head == HEAD_MTP      ? "mtp"
                         : c->head == HEAD_MEDUSA ? "medusa"
                                                  : "shared");
    safetensors_set_meta(w, "kf.attn", c->bidir ? "bidirectional" : "causal");
    safetensors_set_meta(w, "format", "pt");
    int rc = safetensors_write(w, path, err);
    safetensors_writer_free(w);
    free(host);
    return rc;
}

static int meta_int(const safetensors_file *f, const char *key, int64_t *out, kf_err *err) {
    const char *s = safetensors_meta(f, key);
    if (!s)
        return kf_err_set(err, "%s: not a kforcing checkpoint (metadata \"%s\" missing)", f->path,
                          key);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return kf_err_set(err, "%s: metadata \"%s\" = \"%s\" is not an integer", f->path, key, s);
    *out = v;
    return 0;
}

static int config_from_file(const safetensors_file *f, model_config *c, kf_err *err) {
    memset(c, 0, sizeof *c);
    if (meta_int(f, "kf.hidden", &c->hidden, err) || meta_int(f, "kf.heads", &c->heads, err) ||
        meta_int(f, "kf.blocks", &c->blocks, err) || meta_int(f, "kf.vocab", &c->vocab, err) ||
        meta_int(f, "kf.mask_id", &c->mask_id, err) ||
        meta_int(f, "kf.seq_len", &c->seq_len, err) || meta_int(f, "kf.k_train", &c->k_train, err))
        return -1;
    const char *kind = safetensors_meta(f, "kf.kind"), *head = safetensors_meta(f, "kf.head");
    if (!kind || (strcmp(kind, "ar") && strcmp(kind, "pflm")))
        return kf_err_set(err, "%s: metadata \"kf.kind\" must be ar or pflm", f->path);
    if (!head || (strcmp(head, "shared") && strcmp(head, "mtp") && strcmp(head, "medusa")))
        return kf_err_set(err, "%s: metadata \"kf.head\" must be shared, mtp or medusa", f->path);
    c->kind = strcmp(kind, "pflm") == 0 ? MODEL_PFLM : MODEL_AR;
    c->head = strcmp(head, "mtp") == 0      ? HEAD_MTP
              : strcmp(head, "medusa") == 0 ? HEAD_MEDUSA
                                            : HEAD_SHARED;
    /* version 1 (no key) predates the architecture options: all default */
    int64_t version = 1, tied = 0, nbias = 0, abias = 0;
    if (safetensors_meta(f, "kf.version") && meta_int(f, "kf.version", &version, err)) return -1;
    if (version < 1 || version > MODEL_FORMAT_VERSION)
        return kf_err_set(err,
                          "%s: checkpoint format version %lld (metadata \"kf.version\"); this "
                          "build reads versions 1 to %d",
                          f->path, (long long)version, MODEL_FORMAT_VERSION);
    if (version >= 2) {
        const char *pos = safetensors_meta(f, "kf.pos");
        if (!pos || (strcmp(pos, "rope") && strcmp(pos, "learned")))
            return kf_err_set(err, "%s: metadata \"kf.pos\" must be rope or learned", f->path);
        c->pos = strcmp(pos, "learned") == 0 ? POS_LEARNED : POS_ROPE;
        if (meta_int(f, "kf.n_positions", &c->n_positions, err) ||
            meta_int(f, "kf.tied_head", &tied, err) || meta_int(f, "kf.norm_bias", &nbias, err) ||
            meta_int(f, "kf.attn_bias", &abias, err))
            return -1;
        if ((tied | nbias | abias) & ~(int64_t)1)
            return kf_err_set(err,
                              "%s: metadata kf.tied_head, kf.norm_bias, kf.attn_bias must be 0 "
                              "or 1",
                              f->path);
        c->tied_head = (int)tied;
        c->norm_bias = (int)nbias;
        c->attn_bias = (int)abias;
        const char *attn = safetensors_meta(f, "kf.attn"); /* added later: optional */
        if (attn && strcmp(attn, "causal") && strcmp(attn, "bidirectional"))
            return kf_err_set(err, "%s: metadata \"kf.attn\" must be causal or bidirectional",
                              f->path);
        c->bidir = attn && strcmp(attn, "bidirectional") == 0;
    }
    if (c->head == HEAD_MEDUSA && version < MODEL_FORMAT_VERSION_MEDUSA)
        return kf_err_set(err, "%s: kf.head = medusa in a version %lld file (medusa is version 3)",
                          f->path, (long long)version);
    /* optional: absent is the release's encoder */
    if (safetensors_meta(f, "kf.noise_cycles") &&
        meta_int(f, "kf.noise_cycles", &c->noise_cycles, err))
        return -1;
    if (c->noise_cycles && version < MODEL_FORMAT_VERSION_NOISE_CYCLES)
        return kf_err_set(err,
                          "%s: kf.noise_cycles = %lld in a version %lld file (it is version 4)",
                          f->path, (long long)c->noise_cycles, (long long)version);
    kf_err e2;
    if (model_config_check(c, &e2)) return kf_err_set(err, "%s: %s", f->path, e2.msg);
    return 0;
}

int model_read_config(const char *path, model_config *cfg, kf_err *err) {
    safetensors_file *f;
    if (safetensors_open(path, &f, err)) return -1;
    int rc = config_from_file(f, cfg, err);
    safetensors_close(f);
    return rc;
}

static int load_tensors(model *m, const safetensors_file *f, float *buf, kf_err *err) {
    float *host = kf_malloc((size_t)m->n_params * sizeof(float));
    int rc = 0;
    if (f->n != (size_t)m->n_tensors)
        rc = kf_err_set(err, "%s: %zu tensors, the model has %d", f->path, f->n, m->n_tensors);
    for (int i = 0; i < m->n_tensors && !rc; i++) {
        const model_tensor *t = &m->tensors[i];
        const safetensors_tensor *s = safetensors_find(f, t->name);
        if (!s) {
            rc = kf_err_set(err, "%s: tensor '%s' missing", f->path, t->name);
            break;
        }
        int ok = s->ndim == t->ndim && s->shape[0] == t->shape[0] &&
                 (t->ndim == 1 || s->shape[1] == t->shape[1]);
        if (!ok) {
            rc = kf_err_set(err, "%s: tensor '%s' has the wrong shape", f->path, t->name);
            break;
        }
        rc = safetensors_read_f32(s, host + t->offset, err);
    }
    if (!rc) m->be->upload(m->be, buf ? buf : m->params, host, (size_t)m->n_params * sizeof(float));
    if (!rc && (!buf || buf == m->params)) model_params_changed(m);
    free(host);
    return rc;
}

model *model_load(kf_backend *be, const char *path, kf_err *err) {
    safetensors_file *f;
    if (safetensors_open(path, &f, err)) return NULL;
    model_config c;
    model *m = NULL;
    if (config_from_file(f, &c, err) == 0) {
        m = model_create(be, &c);
        if (load_tensors(m, f, NULL, err)) {
            model_free(m);
            m = NULL;
        }
    }
    safetensors_close(f);
    return m;
}

int model_load_into(model *m, const char *path, float *buf, kf_err *err) {
    safetensors_file *f;
    if (safetensors_open(path, &f, err)) return -1;
    model_config c;
    int rc = config_from_file(f, &c, err);
    if (!rc && memcmp(&c, &m->cfg, sizeof c) != 0)
        rc = kf_err_set(err, "%s: the checkpoint's model config differs from this model's", path);
    if (!rc) rc = load_tensors(m, f, buf, err);
    safetensors_close(f);
    return rc;
}
