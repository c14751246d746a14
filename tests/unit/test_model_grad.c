/* Whole-model backward against central finite differences on tiny configs:
 * the AR model, the PFLM (SingleForward, k = 2), the MTP baseline head, and
 * AR and PFLM with the GPT-2 architecture options (model.h).
 * Prints the largest relative error per configuration and asserts a bound.
 * Then per-position loss weights (model_weight_dlogits): weight 0 on a
 * position is that position's targets ignored, weight 2 everywhere doubles
 * the gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include <omp.h>

#include "tests/test.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"

/* Random parameters everywhere (the output layer's zero init would hide the
 * backbone's gradients). */
static void randomize(model *m, uint64_t seed) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(0.6 * (rng_uniform01(seed, 7, (uint64_t)i) - 0.5));
    for (int t = 0; t < m->n_tensors; t++)
        if (strstr(m->tensors[t].name, "norm") && strstr(m->tensors[t].name, ".weight"))
            for (int64_t e = 0; e < m->tensors[t].numel; e++) h[m->tensors[t].offset + e] += 1.0f;
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

static double loss_of(model *m, model_ws *ws, const model_input *in, const int32_t *tg, int train) {
    model_forward(m, ws, in, train ? MODEL_TRAIN : 0, NULL);
    int64_t n;
    double s = model_loss(m, ws, tg, 0, 1.0f, &n, NULL);
    return s / (double)n;
}

static double check(kf_backend *be, const model_config *cfg, const layout *lay, const char *what) {
    model *m = model_create(be, cfg);
    randomize(m, 11);
    int64_t B = 2, L = lay->L, zd = cfg->head == HEAD_MTP ? cfg->k_train : 1;
    int32_t *ids = calloc((size_t)(B * L), sizeof(int32_t));
    double *z = calloc((size_t)(B * L * zd), sizeof(double)), tau[2] = {0.7, 0.3};
    for (int64_t i = 0; i < B * L; i++)
        ids[i] = (int32_t)rng_below(5, 1, (uint64_t)i, (uint64_t)cfg->vocab - 1);
    for (int64_t i = 0; i < B * L * zd; i++) z[i] = rng_uniform01(5, 2, (uint64_t)i);
    model_input in = {.lay = lay, .B = B, .ids = ids, .z = z, .tau = tau};
    model_ws *ws = model_ws_create(m);
    int64_t rows = m->n_heads_out * B * lay->n_out;
    int32_t *tg = malloc((size_t)rows * sizeof(int32_t));
    for (int64_t r = 0; r < rows; r++)
        tg[r] = r % 5 == 3 ? -1 : (int32_t)rng_below(5, 3, (uint64_t)r, (uint64_t)cfg->vocab - 1);
    model_zero_grads(m);
    loss_of(m, ws, &in, tg, 1);
    model_backward(m, ws);
    float *g = malloc((size_t)m->n_params * sizeof(float));
    float *p = malloc((size_t)m->n_params * sizeof(float));
    be->download(be, g, m->grads, (size_t)m->n_params * sizeof(float));
    be->download(be, p, m->params, (size_t)m->n_params * sizeof(float));
    double worst = 0;
    const char *worst_name = "";
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        for (int s = 0; s < 8; s++) {
            int64_t e =
                mt->offset + (int64_t)rng_below(9, (uint64_t)t, (uint64_t)s, (uint64_t)mt->numel);
            float orig = p[e];
            double eps = 1e-2 * fmax(1.0, fabs(orig));
            float v;
            v = (float)(orig + eps);
            be->upload(be, m->params + e, &v, sizeof v);
            double lp = loss_of(m, ws, &in, tg, 0);
            v = (float)(orig - eps);
            be->upload(be, m->params + e, &v, sizeof v);
            double lm = loss_of(m, ws, &in, tg, 0);
            be->upload(be, m->params + e, &orig, sizeof orig);
            double fd = (lp - lm) / (2 * eps);
            double rel = fabs(fd - g[e]) / fmax(fabs(fd) + fabs(g[e]), 2e-3);
            if (rel > worst) {
                worst = rel;
                worst_name = mt->name;
            }
        }
    }
    printf("%s: max relative error %.3g (%s)\n", what, worst, worst_name);
    free(g);
    free(p);
    free(tg);
    free(ids);
    free(z);
    model_ws_free(ws);
    model_free(m);
    return worst;
}

/* max |s a - b| / max |s a| (the fixed-order GEMM rounds its products to a
 * grid set by each operand's range, so gradients agree to rounding only). */
static double max_rel(const float *a, const float *b, float s, int64_t n) {
    double d = 0, top = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)s * a[i] - b[i]));
        top = fmax(top, fabs((double)s * a[i]));
    }
    return d / top;
}

/* The gradients of one PFLM pass against tg (norm fixed at 10), with the
 * dlogits of positions [first, first + count) of every k weighted by w. */
static void weighted_grads(model *m, model_ws *ws, const model_input *in, const int32_t *tg,
                           int64_t first, int64_t count, float w, float *g) {
    model_zero_grads(m);
    model_forward(m, ws, in, MODEL_TRAIN, NULL);
    int64_t n;
    model_loss(m, ws, tg, 10, 1.0f, &n, NULL);
    if (count) model_weight_dlogits(m, ws, m->cfg.k_train, first, count, w);
    model_backward(m, ws);
    m->be->download(m->be, g, m->grads, (size_t)m->n_params * sizeof(float));
}

static void check_weights(kf_backend *be, const model_config *cfg) {
    layout lay;
    layout_single(&lay, 5, 2);
    model *m = model_create(be, cfg);
    randomize(m, 12);
    int64_t B = 2, L = lay.L, rows = B * lay.n_out;
    int32_t *ids = calloc((size_t)(B * L), sizeof(int32_t)),
            *tg = malloc((size_t)rows * sizeof(int32_t)),
            *tg_half = malloc((size_t)rows * sizeof(int32_t));
    double *z = calloc((size_t)(B * L), sizeof(double)), tau[2] = {0.7, 0.3};
    for (int64_t i = 0; i < B * L; i++)
        ids[i] = (int32_t)rng_below(6, 1, (uint64_t)i, (uint64_t)cfg->vocab - 1);
    for (int64_t i = 0; i < B * L; i++) z[i] = rng_uniform01(6, 2, (uint64_t)i);
    for (int64_t r = 0; r < rows; r++) {
        tg[r] = (int32_t)rng_below(6, 3, (uint64_t)r, (uint64_t)cfg->vocab - 1);
        tg_half[r] = r % 2 ? -1 : tg[r];
    }
    model_input in = {.lay = &lay, .B = B, .ids = ids, .z = z, .tau = tau};
    model_ws *ws = model_ws_create(m);
    size_t bytes = (size_t)m->n_params * sizeof(float);
    float *g = malloc(bytes), *gw = malloc(bytes);
    weighted_grads(m, ws, &in, tg_half, 0, 0, 1, g);
    weighted_grads(m, ws, &in, tg, 1, 1, 0, gw);
    weighted_grads(m, ws, &in, tg, 1, 1, 0, gw);
    T_CHECK(max_rel(g, gw, 1, m->n_params) < 1e-5,
            "weight 0 on position 1 vs its targets ignored: max relative difference %.3g",
            max_rel(g, gw, 1, m->n_params));
    weighted_grads(m, ws, &in, tg, 0, 0, 1, g);
    weighted_grads(m, ws, &in, tg, 0, 2, 2, gw);
    T_CHECK(max_rel(g, gw, 2, m->n_params) < 1e-5,
            "weight 2 on both positions: max relative difference from 2x the gradients %.3g",
            max_rel(g, gw, 2, m->n_params));
    free(g);
    free(gw);
    free(ids);
    free(tg);
    free(tg_half);
    free(z);
    model_ws_free(ws);
    model_free(m);
    layout_free(&lay);
}

int main(void) {
    /* tiny models: one thread avoids OpenMP barrier waits on a loaded machine
     * (results do not depend on the thread count) */
    omp_set_num_threads(1);
    kf_backend *be = kernels_cpu_create();
    model_config ar = {.hidden = 16,
                       .heads = 2,
                       .blocks = 2,
                       .vocab = 11,
                       .mask_id = 10,
                       .seq_len = 8,
                       .kind = MODEL_AR,
                       .head = HEAD_SHARED,
                       .k_train = 1};
    layout l;
    layout_ar(&l, 7);
    T_CHECK(check(be, &ar, &l, "AR") < 0.05, "AR gradient");
    layout_free(&l);

    model_config pf = ar;
    pf.kind = MODEL_PFLM;
    pf.k_train = 2;
    layout_single(&l, 5, 2);
    T_CHECK(check(be, &pf, &l, "PFLM SingleForward k=2") < 0.05, "PFLM gradient");
    layout_free(&l);

    model_config mtp = pf;
    mtp.head = HEAD_MTP;
    mtp.k_train = 3;
    layout_single(&l, 5, 1);
    T_CHECK(check(be, &mtp, &l, "MTP k=3") < 0.05, "MTP gradient");
    layout_free(&l);

    /* the GPT-2 options: learned positions, LayerNorm and attention biases, tied head */
    model_config g = ar;
    g.pos = POS_LEARNED;
    g.n_positions = 12;
    g.tied_head = g.norm_bias = g.attn_bias = 1;
    layout_ar(&l, 7);
    T_CHECK(check(be, &g, &l, "AR, GPT-2 options") < 0.05, "GPT-2 options AR gradient");
    layout_free(&l);
    g.kind = MODEL_PFLM;
    g.k_train = 2;
    layout_single(&l, 5, 2);
    T_CHECK(check(be, &g, &l, "PFLM k=2, GPT-2 options") < 0.05, "GPT-2 options PFLM gradient");
    layout_free(&l);
    check_weights(be, &pf);
    be->destroy(be);
    return T_DONE();
}
