/* tests/unit/model_fit.h — a minimal training loop for the model tests
 * (AdamW through the backend's one-launch op, global-norm clipping), written
 * against the model and supervision APIs only. The real trainer (data loader,
 * checkpoints, precision schedule) lives in trainer/; tests that just need a
 * few hundred deterministic steps use this. */
#ifndef KF_TESTS_MODEL_FIT_H
#define KF_TESTS_MODEL_FIT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "trainer/model/model.h"
#include "trainer/train/supervision.h"

/* Untrained but non-trivial weights (model_init leaves the output layer
 * zero): every parameter uniform in [-0.5, 0.5) from rng (seed, 1, index),
 * the norm weights moved to about 1; for decoding and serving tests that
 * need distinct, far from uniform outputs and no training. */
static inline void fit_randomize(model *m, uint64_t seed) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(rng_uniform01(seed, 1, (uint64_t)i) - 0.5);
    for (int t = 0; t < m->n_tensors; t++)
        if (strstr(m->tensors[t].name, "norm") && strstr(m->tensors[t].name, ".weight"))
            for (int64_t e = 0; e < m->tensors[t].numel; e++) h[m->tensors[t].offset + e] += 1.0f;
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

typedef struct fit_state {
    float *m, *v; /* AdamW moments (device) */
    float *ema;   /* EMA of the weights (device), NULL: none */
    float ema_decay;
    int64_t step;
} fit_state;

/* Produces B samples of n tokens for draw keys[0..B). */
typedef void (*fit_data_fn)(int32_t *tokens, int64_t B, int64_t n, const uint64_t *keys);

static inline void fit_init(fit_state *s, model *m) {
    s->m = m->be->alloc(m->be, (size_t)m->n_params * sizeof(float));
    s->v = m->be->alloc(m->be, (size_t)m->n_params * sizeof(float));
    s->ema = NULL;
    s->ema_decay = 0.0f;
    s->step = 0;
}

static inline void fit_free(fit_state *s, model *m) {
    m->be->free(m->be, s->m);
    m->be->free(m->be, s->v);
    if (s->ema) m->be->free(m->be, s->ema);
}

/* One optimizer step on one supervised batch; returns the mean loss. */
static inline double fit_step(model *m, model_ws *ws, fit_state *s, const sup_batch *sb, float lr,
                              float clip) {
    kf_backend *be = m->be;
    model_zero_grads(m);
    model_forward(m, ws, &sb->in, MODEL_TRAIN, NULL);
    int64_t count;
    double sum = model_loss(m, ws, sb->targets, 0, 1.0f, &count, NULL);
    model_backward(m, ws);
    double norm = sqrt(be->sumsq(be, m->grads, m->n_params));
    float scale = clip > 0 && norm > clip ? (float)(clip / norm) : 1.0f;
    s->step++;
    be->adamw(be, m->params, m->grads, s->m, s->v, m->n_params, lr, 0.9f, 0.999f, 1e-6f, 0.0f,
              s->step, scale, NULL);
    if (s->ema) be->ema(be, s->ema, m->params, m->n_params, s->ema_decay, NULL);
    return count ? sum / (double)count : 0.0;
}

/* Runs `steps` steps of supervision sup on data from gen (batch B, n tokens);
 * sample keys are step*B + b (+ key0). The learning rate decays linearly from
 * lr to lr/10; the model ends with the EMA (decay 0.99) of its weights, as the
 * paper's stages hand their EMA weights on. Returns the mean loss of the last
 * 20 steps. */
static inline double fit_run(model *m, sup_ctx *sup, fit_data_fn gen, int64_t B, int64_t n,
                             int64_t steps, float lr, uint64_t key0) {
    model_ws *ws = model_ws_create(m);
    fit_state st;
    fit_init(&st, m);
    st.ema = m->be->alloc(m->be, (size_t)m->n_params * sizeof(float));
    st.ema_decay = 0.99f;
    m->be->copy(m->be, st.ema, m->params, (size_t)m->n_params * sizeof(float));
    int32_t *tok = malloc((size_t)(B * n) * sizeof(int32_t));
    uint64_t *keys = malloc((size_t)B * sizeof(uint64_t));
    double tail = 0;
    int64_t nt = 0;
    for (int64_t i = 0; i < steps; i++) {
        for (int64_t b = 0; b < B; b++) keys[b] = key0 + (uint64_t)(i * B + b);
        gen(tok, B, n, keys);
        sup_batch sb;
        sup_build(sup, &sb, tok, B, n, NULL, keys);
        sup_host_targets(sup, &sb);
        double l = fit_step(m, ws, &st, &sb, lr * (1.0f - 0.9f * (float)i / (float)steps), 1.0f);
        if (i >= steps - 20) {
            tail += l;
            nt++;
        }
    }
    m->be->copy(m->be, m->params, st.ema, (size_t)m->n_params * sizeof(float));
    free(tok);
    free(keys);
    fit_free(&st, m);
    model_ws_free(ws);
    return nt ? tail / (double)nt : 0.0;
}

#endif
