/* The weights' 16-bit copy (kernels.h w16, model_params_changed) stays the
 * copy of the current weights: on the CPU backend, which reads the copy as
 * the GPU does, an AR model trained for four steps in fp16 (AdamW on
 * m->params, then model_params_changed), the last one's weights also run
 * in bf16, gives at every step bitwise the loss and gradients of a fresh
 * model given that step's weights, whose copy is new. A copy left stale
 * after the optimizer, or kept across the change of format (fp16 and bf16
 * round differently), changes them. model_load_into and
 * model_copy_matching renew it too. And the 16-bit backward's qkv weight
 * gradients (the attention's dqkv16 rotated in place by rope_bwd, then
 * read by qkv's linear_bwd) stay within fp16's error of fp32's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"

enum { B = 2, N = 12 };

static const model_config cfg = {.hidden = 32,
                                 .heads = 2,
                                 .blocks = 2,
                                 .vocab = 61,
                                 .mask_id = -1,
                                 .seq_len = N,
                                 .kind = MODEL_AR,
                                 .head = HEAD_SHARED,
                                 .k_train = 1};

/* Random weights everywhere (model_init's output layer is zero). */
static void randomize(model *m, uint64_t seed) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(0.6 * (rng_uniform01(seed, 7, (uint64_t)i) - 0.5));
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

/* One forward, loss and backward; the loss returned, the gradients in g. */
static double pass(model *m, const model_input *in, const int32_t *tg, float *g) {
    model_ws *ws = model_ws_create(m);
    model_zero_grads(m);
    model_forward(m, ws, in, MODEL_TRAIN, NULL);
    int64_t n;
    double loss = model_loss(m, ws, tg, 0, 1.0f, &n, NULL);
    model_backward(m, ws);
    m->be->download(m->be, g, m->grads, (size_t)m->n_params * sizeof(float));
    model_ws_free(ws);
    return loss;
}

/* m's loss and gradients against a fresh model holding m's weights. */
static void check_fresh(model *m, const model_input *in, const int32_t *tg, const char *what) {
    kf_backend *be = m->be;
    size_t bytes = (size_t)m->n_params * sizeof(float);
    float *g = malloc(bytes), *gf = malloc(bytes), *w = malloc(bytes);
    double loss = pass(m, in, tg, g);
    model *f = model_create(be, &cfg);
    be->download(be, w, m->params, bytes);
    be->upload(be, f->params, w, bytes);
    double lf = pass(f, in, tg, gf);
    T_CHECK(memcmp(&loss, &lf, sizeof loss) == 0, "%s: loss %.9g, a fresh model's %.9g", what, loss,
            lf);
    int64_t bad = 0;
    for (int64_t i = 0; i < m->n_params; i++) bad += memcmp(&g[i], &gf[i], sizeof(float)) != 0;
    T_EQ_INT(bad, 0, "%s: %lld gradients differ from a fresh model's, want 0", what,
             (long long)bad);
    printf("%s: loss %.7f, %s a fresh model's\n", what, loss,
           bad || loss != lf ? "DIFFERENT from" : "bitwise");
    model_free(f);
    free(g), free(gf), free(w);
}

/* Each block's attn_qkv.weight gradient in fp16 against fp32's, same weights:
 * relative L2 within tol (about 1e-3 here; dqkv16 rotated the wrong way
 * gives 1-2e-2, the short sequence's angles being small). */
static void check_qkv_vs_fp32(model *m, const model_input *in, const int32_t *tg, double tol) {
    kf_backend *be = m->be;
    size_t bytes = (size_t)m->n_params * sizeof(float);
    float *g16 = malloc(bytes), *g32 = malloc(bytes);
    be->set_precision(be, KF_PREC_FP16);
    model_params_changed(m);
    pass(m, in, tg, g16);
    be->set_precision(be, KF_PREC_FP32);
    pass(m, in, tg, g32);
    for (int l = 0; l < cfg.blocks; l++) {
        char name[64];
        snprintf(name, sizeof name, "blocks.%d.attn_qkv.weight", l);
        const model_tensor *t = model_find(m, name);
        T_CHECK(t != NULL, "%s: not found", name);
        if (!t) continue;
        double num = 0, den = 0;
        for (int64_t i = t->offset; i < t->offset + t->numel; i++) {
            num += ((double)g16[i] - g32[i]) * ((double)g16[i] - g32[i]);
            den += (double)g32[i] * g32[i];
        }
        double e = sqrt(num / (den > 0 ? den : 1));
        printf("%s gradient, fp16 against fp32: rel L2 %.3g (tol %.1g)\n", name, e, tol);
        T_CHECK(e <= tol, "%s gradient: fp16 against fp32 rel L2 %.3g, want <= %.3g", name, e, tol);
    }
    free(g16), free(g32);
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    layout lay;
    layout_ar(&lay, N);
    int32_t ids[B * N], tg[B * N];
    for (int i = 0; i < B * N; i++) {
        ids[i] = (int32_t)rng_below(4, 1, (uint64_t)i, (uint64_t)cfg.vocab);
        tg[i] = (int32_t)rng_below(4, 2, (uint64_t)i, (uint64_t)cfg.vocab);
    }
    model_input in = {.lay = &lay, .B = B, .ids = ids};
    model *m = model_create(be, &cfg);
    randomize(m, 3);
    size_t bytes = (size_t)m->n_params * sizeof(float);
    float *mom = be->alloc(be, bytes), *vel = be->alloc(be, bytes);
    check_qkv_vs_fp32(m, &in, tg, 5e-3);
    for (int step = 1; step <= 4; step++) {
        be->set_precision(be, KF_PREC_FP16);
        char what[64];
        snprintf(what, sizeof what, "step %d (fp16)", step);
        check_fresh(m, &in, tg, what);
        if (step == 4) { /* the phase changes: the same weights in bf16 */
            be->set_precision(be, KF_PREC_BF16);
            check_fresh(m, &in, tg, "step 4 (bf16, the weights of fp16's pass)");
        }
        /* the step's update: lr large enough that every weight's 16-bit value moves */
        be->adamw(be, m->params, m->grads, mom, vel, m->n_params, 1e-2f, 0.9f, 0.999f, 1e-6f, 0.0f,
                  step, 1.0f, NULL);
        model_params_changed(m);
    }

    /* the loaders renew the copy: weights saved, then loaded into m (whose
     * copy is of other weights) and copied into a model used in fp16 */
    char dir[] = "/tmp/kf_w16_XXXXXX", path[256];
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    kf_err err = {{0}};
    be->set_precision(be, KF_PREC_FP16);
    T_EQ_INT(model_save(m, path, NULL, &err), 0, "model_save: %s", err.msg);
    model *other = model_create(be, &cfg);
    randomize(other, 5);
    float *g = malloc(bytes);
    pass(other, &in, tg, g); /* other's copy made from its own weights */
    T_EQ_INT(model_load_into(other, path, NULL, &err), 0, "model_load_into: %s", err.msg);
    check_fresh(other, &in, tg, "after model_load_into");
    randomize(other, 6);
    model_params_changed(other);
    pass(other, &in, tg, g);
    T_EQ_INT(model_copy_matching(other, m), m->n_tensors, "model_copy_matching: tensors copied");
    check_fresh(other, &in, tg, "after model_copy_matching");
    free(g);
    remove(path), rmdir(dir);
    model_free(other);

    be->set_precision(be, KF_PREC_FP32);
    be->free(be, mom), be->free(be, vel);
    model_free(m);
    layout_free(&lay);
    be->destroy(be);
    return T_DONE();
}
