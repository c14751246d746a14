/* The architecture options of model.h (the GPT-2 form) and the checkpoint
 * format that records them:
 *   - model_config_check refuses inconsistent options;
 *   - the tensors each option adds or removes (names, shapes);
 *   - a version-2 checkpoint round-trips every option and every tensor;
 *   - a version-1 checkpoint (no kf.version, as every checkpoint before the
 *     options) loads as the default architecture;
 *   - an unknown version, a bad option value, or tensors that do not fit the
 *     recorded options are refused with an error naming them;
 *   - learned positions are used: moving a token to another position changes
 *     its logits, and with RoPE the same weights give other logits;
 *   - a PFLM's noise_cycles: only a PFLM's, in range; recorded as version 4
 *     (the release's encoder, 0, still version 2 without the key), read
 *     back, and refused in a file of an older version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "common/safetensors.h"
#include "kernels/kernels.h"
#include <omp.h>

#include "tests/test.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"

static char dir[] = "/tmp/kf_model_options_XXXXXX";

/* field by field: the struct has padding, whose bytes memcmp would compare */
static int same_config(const model_config *a, const model_config *b) {
    return a->hidden == b->hidden && a->heads == b->heads && a->blocks == b->blocks &&
           a->vocab == b->vocab && a->mask_id == b->mask_id && a->seq_len == b->seq_len &&
           a->kind == b->kind && a->head == b->head && a->k_train == b->k_train &&
           a->pos == b->pos && a->tied_head == b->tied_head && a->norm_bias == b->norm_bias &&
           a->attn_bias == b->attn_bias && a->n_positions == b->n_positions &&
           a->bidir == b->bidir && a->noise_cycles == b->noise_cycles;
}

static model_config base(void) {
    model_config c = {.hidden = 16,
                      .heads = 2,
                      .blocks = 2,
                      .vocab = 13,
                      .mask_id = -1,
                      .seq_len = 8,
                      .kind = MODEL_AR,
                      .head = HEAD_SHARED,
                      .k_train = 1};
    return c;
}

static model_config gpt2(void) {
    model_config c = base();
    c.pos = POS_LEARNED;
    c.n_positions = 8;
    c.tied_head = c.norm_bias = c.attn_bias = 1;
    return c;
}

static void randomize(model *m, uint64_t seed) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(rng_uniform01(seed, 1, (uint64_t)i) - 0.5);
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

/* A metadata key and its value; lists end with {NULL, NULL}. */
typedef struct {
    const char *key, *value;
} meta_pair;

/* The architecture keys of every format version (base()'s config), and the
 * option keys version 2 adds (the default architecture's values). */
static const meta_pair ARCH_META[] = {
    {"kf.hidden", "16"},   {"kf.heads", "2"},   {"kf.blocks", "2"},  {"kf.vocab", "13"},
    {"kf.mask_id", "-1"},  {"kf.seq_len", "8"}, {"kf.k_train", "1"}, {"kf.kind", "ar"},
    {"kf.head", "shared"}, {NULL, NULL}};
static const meta_pair V2_META[] = {
    {"kf.version", "2"},   {"kf.pos", "rope"},    {"kf.n_positions", "0"},
    {"kf.tied_head", "0"}, {"kf.norm_bias", "0"}, {"kf.attn_bias", "0"},
    {NULL, NULL}};

static int has_key(const meta_pair *pairs, const char *key) {
    for (; pairs->key; pairs++)
        if (!strcmp(pairs->key, key)) return 1;
    return 0;
}

/* Sets the keys of pairs that changes does not name. */
static void set_pairs(safetensors_writer *w, const meta_pair *pairs, const meta_pair *changes) {
    for (; pairs->key; pairs++)
        if (!has_key(changes, pairs->key)) safetensors_set_meta(w, pairs->key, pairs->value);
}

/* Writes m's tensors with ARCH_META (and V2_META when version is 2), then
 * changes: a value replaces the key's, a NULL value leaves the key out. */
static void write_raw(const model *m, const char *path, int version, const meta_pair *changes) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    m->be->download(m->be, h, m->params, (size_t)m->n_params * sizeof(float));
    safetensors_writer *w = safetensors_writer_new();
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        safetensors_add(w, t->name, ST_F32, t->ndim, t->shape, h + t->offset);
    }
    set_pairs(w, ARCH_META, changes);
    if (version == 2) set_pairs(w, V2_META, changes);
    for (; changes->key; changes++)
        if (changes->value) safetensors_set_meta(w, changes->key, changes->value);
    kf_err err;
    if (safetensors_write(w, path, &err)) fprintf(stderr, "write %s: %s\n", path, err.msg);
    safetensors_writer_free(w);
    free(h);
}

/* Logits of one sequence ids[L] at positions pos[L] (AR, every row out). */
/* model_load's status: 0 when the checkpoint loads (the model is freed), -1
 * when it is refused (err says why). */
static int load_status(kf_backend *be, const char *path, kf_err *err) {
    model *m = model_load(be, path, err);
    model_free(m);
    return m ? 0 : -1;
}

static float *logits_at(model *m, const int32_t *ids, const int32_t *pos, int64_t L) {
    layout l;
    layout_ar(&l, L);
    memcpy(l.pos, pos, (size_t)L * sizeof(int32_t));
    model_ws *ws = model_ws_create(m);
    model_input in = {.lay = &l, .B = 1, .ids = ids};
    const float *d = model_forward(m, ws, &in, 0, NULL);
    float *h = malloc((size_t)(L * m->cfg.vocab) * sizeof(float));
    m->be->download(m->be, h, d, (size_t)(L * m->cfg.vocab) * sizeof(float));
    model_ws_free(ws);
    layout_free(&l);
    return h;
}

int main(void) {
    omp_set_num_threads(1);
    if (!mkdtemp(dir)) return 2;
    kf_backend *be = kernels_cpu_create();
    kf_err err = {{0}};
    char path[256];

    /* config checks */
    model_config c = base();
    c.pos = POS_LEARNED;
    T_REFUSED(model_config_check(&c, &err), err.msg, "n_positions",
              "learned positions without n_positions");
    c = base();
    c.n_positions = 8;
    T_REFUSED(model_config_check(&c, &err), err.msg, "n_positions", "RoPE with n_positions");
    c = gpt2();
    c.kind = MODEL_PFLM;
    c.head = HEAD_MTP;
    c.k_train = 2;
    T_REFUSED(model_config_check(&c, &err), err.msg, "tied", "a tied MTP head");
    c = gpt2();
    c.norm_bias = 2;
    T_REFUSED(model_config_check(&c, &err), err.msg, "0 or 1", "norm_bias 2");
    c = gpt2();
    c.heads = 16; /* head dim 1: odd, fine without RoPE */
    T_EQ_INT(model_config_check(&c, &err), 0, "an odd head dim refused with learned positions: %s",
             err.msg);
    c = gpt2();
    T_EQ_INT(model_config_check(&c, &err), 0, "the GPT-2 options refused: %s", err.msg);

    /* the tensors the options add and remove */
    c = gpt2();
    model *g = model_create(be, &c);
    const model_tensor *t = model_find(g, "pos_embed.embedding");
    T_CHECK(t != NULL, "pos_embed.embedding exists");
    if (t) {
        T_EQ_INT(t->ndim, 2, "pos_embed.embedding ndim");
        T_EQ_INT(t->shape[0], 8, "pos_embed.embedding rows");
        T_EQ_INT(t->shape[1], 16, "pos_embed.embedding columns");
    }
    t = model_find(g, "blocks.1.attn_qkv.bias");
    T_CHECK(t != NULL, "blocks.1.attn_qkv.bias exists");
    if (t) {
        T_EQ_INT(t->ndim, 1, "blocks.1.attn_qkv.bias ndim");
        T_EQ_INT(t->shape[0], 48, "blocks.1.attn_qkv.bias size");
    }
    const char *biases[] = {"blocks.0.attn_out.bias", "blocks.0.norm1.bias", "blocks.1.norm2.bias",
                            "output_layer.norm_final.bias"};
    for (int i = 0; i < 4; i++) T_CHECK(model_find(g, biases[i]) != NULL, "%s exists", biases[i]);
    const char *untied[] = {"output_layer.linear.weight", "output_layer.linear.bias"};
    for (int i = 0; i < 2; i++)
        T_EQ_INT(model_find(g, untied[i]), NULL, "a tied head has no %s", untied[i]);
    T_EQ_INT(g->n_tensors, 28, "GPT-2 options: %d tensors, want 28", g->n_tensors);
    c = base();
    model *r = model_create(be, &c);
    T_EQ_INT(r->n_tensors, 20, "default: %d tensors, want 20", r->n_tensors);
    const char *options[] = {"pos_embed.embedding", "blocks.0.norm1.bias"};
    for (int i = 0; i < 2; i++)
        T_EQ_INT(model_find(r, options[i]), NULL, "the default architecture has no %s", options[i]);

    /* version 2 round trip */
    randomize(g, 3);
    snprintf(path, sizeof path, "%s/g.safetensors", dir);
    T_EQ_INT(model_save(g, path, NULL, &err), 0, "save: %s", err.msg);
    model_config rc;
    T_EQ_INT(model_read_config(path, &rc, &err), 0, "model_read_config (%s)", err.msg);
    T_CHECK(
        same_config(&rc, &g->cfg),
        "the config read back differs (pos %d n_positions %lld tied %d norm_bias %d attn_bias %d)",
        (int)rc.pos, (long long)rc.n_positions, rc.tied_head, rc.norm_bias, rc.attn_bias);
    model *g2 = model_load(be, path, &err);
    T_CHECK(g2 != NULL, "load: %s", err.msg);
    if (g2) {
        float *a = malloc((size_t)g->n_params * sizeof(float)),
              *b = malloc((size_t)g->n_params * sizeof(float));
        be->download(be, a, g->params, (size_t)g->n_params * sizeof(float));
        be->download(be, b, g2->params, (size_t)g->n_params * sizeof(float));
        T_EQ_INT(g2->n_params, g->n_params, "parameters read back");
        T_CHECK(memcmp(a, b, (size_t)g->n_params * sizeof(float)) == 0,
                "the parameters read back differ");
        free(a);
        free(b);
        model_free(g2);
    }

    /* version 1: no kf.version, no option keys */
    const meta_pair v1[] = {{"format", "pt"}, {NULL, NULL}};
    randomize(r, 4);
    snprintf(path, sizeof path, "%s/v1.safetensors", dir);
    write_raw(r, path, 1, v1);
    model *r2 = model_load(be, path, &err);
    model_config want = base();
    T_CHECK(r2 != NULL, "a version-1 checkpoint does not load: %s", err.msg);
    if (r2)
        T_CHECK(same_config(&r2->cfg, &want),
                "a version-1 checkpoint loads with another config than the default architecture's");
    model_free(r2);
    snprintf(path, sizeof path, "%s/v1g.safetensors", dir);
    write_raw(g, path, 1, v1);
    T_REFUSED(load_status(be, path, &err), err.msg, "tensors",
              "version-1 metadata over GPT-2 tensors");

    /* refused: unknown version, bad option value, options the tensors do not have */
    const meta_pair v5[] = {{"kf.version", "5"}, {NULL, NULL}};
    snprintf(path, sizeof path, "%s/v5.safetensors", dir);
    write_raw(r, path, 1, v5);
    T_REFUSED(load_status(be, path, &err), err.msg, "kf.version", "version 5");
    const meta_pair badpos[] = {{"kf.pos", "alibi"}, {NULL, NULL}};
    snprintf(path, sizeof path, "%s/badpos.safetensors", dir);
    write_raw(r, path, 2, badpos);
    T_REFUSED(load_status(be, path, &err), err.msg, "kf.pos", "kf.pos alibi");
    const meta_pair nokey[] = {{"kf.attn_bias", NULL}, {NULL, NULL}};
    snprintf(path, sizeof path, "%s/nokey.safetensors", dir);
    write_raw(r, path, 2, nokey);
    T_REFUSED(load_status(be, path, &err), err.msg, "kf.attn_bias",
              "version 2 without kf.attn_bias");
    const meta_pair claims[] = {{"kf.norm_bias", "1"}, {NULL, NULL}};
    snprintf(path, sizeof path, "%s/claims.safetensors", dir);
    write_raw(r, path, 2, claims);
    T_REFUSED(load_status(be, path, &err), err.msg, "tensors",
              "norm_bias recorded over tensors without biases");

    /* noise_cycles */
    c = base();
    c.noise_cycles = 64;
    T_REFUSED(model_config_check(&c, &err), err.msg, "noise_cycles", "noise_cycles on an AR model");
    c.kind = MODEL_PFLM;
    c.noise_cycles = -1;
    T_REFUSED(model_config_check(&c, &err), err.msg, "noise_cycles", "noise_cycles -1");
    c.noise_cycles = MODEL_NOISE_CYCLES_MAX + 1;
    T_REFUSED(model_config_check(&c, &err), err.msg, "noise_cycles", "noise_cycles above the max");
    const char *pf_names[] = {"pflm0", "pflm64"}, *want_version[] = {"2", "4"},
               *want_cycles[] = {NULL, "64"};
    for (int i = 0; i < 2; i++) {
        c.noise_cycles = i ? 64 : 0;
        model *p = model_create(be, &c);
        randomize(p, 5);
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, pf_names[i]);
        T_EQ_INT(model_save(p, path, NULL, &err), 0, "save %s: %s", pf_names[i], err.msg);
        safetensors_file *f;
        if (safetensors_open(path, &f, &err) == 0) {
            const char *v = safetensors_meta(f, "kf.version"),
                       *nc = safetensors_meta(f, "kf.noise_cycles");
            T_CHECK(v && !strcmp(v, want_version[i]), "%s: kf.version %s, want %s", pf_names[i],
                    v ? v : "(none)", want_version[i]);
            T_CHECK(want_cycles[i] ? nc && !strcmp(nc, want_cycles[i]) : !nc,
                    "%s: kf.noise_cycles %s, want %s", pf_names[i], nc ? nc : "(none)",
                    want_cycles[i] ? want_cycles[i] : "(none)");
            safetensors_close(f);
        } else {
            T_CHECK(0, "open %s: %s", path, err.msg);
        }
        T_EQ_INT(model_read_config(path, &rc, &err), 0, "read %s: %s", pf_names[i], err.msg);
        T_CHECK(same_config(&rc, &c), "%s: the config read back differs (noise_cycles %lld)",
                pf_names[i], (long long)rc.noise_cycles);
        if (i) { /* the same tensors under version-2 metadata: a build before version 4 */
            const meta_pair old[] = {{"kf.kind", "pflm"}, {"kf.noise_cycles", "64"}, {NULL, NULL}};
            snprintf(path, sizeof path, "%s/pflm64v2.safetensors", dir);
            write_raw(p, path, 2, old);
            T_REFUSED(load_status(be, path, &err), err.msg, "noise_cycles",
                      "noise_cycles in a version-2 file");
        }
        model_free(p);
    }

    /* learned positions are used */
    int32_t ids[4] = {1, 5, 7, 2}, p0[4] = {0, 1, 2, 3}, p4[4] = {4, 5, 6, 7};
    float *a0 = logits_at(g, ids, p0, 4), *a4 = logits_at(g, ids, p4, 4);
    double diff = 0;
    for (int64_t i = 0; i < 4 * 13; i++) diff = fmax(diff, fabs((double)a0[i] - a4[i]));
    printf("logits at positions 0..3 vs 4..7: max |diff| %.3g\n", diff);
    T_CHECK(diff > 1e-3, "moving the tokens to other positions changed the logits by only %.3g",
            diff);
    free(a0);
    free(a4);

    model_free(g);
    model_free(r);
    be->destroy(be);
    const char *names[] = {"g",     "v1",     "v1g",   "v5",     "badpos",
                           "nokey", "claims", "pflm0", "pflm64", "pflm64v2"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return T_DONE();
}
