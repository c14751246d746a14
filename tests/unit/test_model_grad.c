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
    if (count) model_weight_dlogits(m, ws, m->cfg.k_train, first, count, w);
    int64_t n;
    model_loss(m, ws, tg, 10, 1.0f, &n, NULL);
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

/* One training pass's row losses and gradients with the output layer run a
 * `chunk` of rows at a time (0: automatic, one chunk here); position 1 of
 * every k weighted 0.5. */
static void chunked_pass(model *m, model_ws *ws, const model_input *in, const int32_t *tg,
                         int64_t chunk, float *rl, float *g) {
    model_ws_set_logit_chunk(ws, chunk);
    model_zero_grads(m);
    model_forward(m, ws, in, MODEL_TRAIN, NULL);
    if (m->cfg.k_train > 1) model_weight_dlogits(m, ws, m->cfg.k_train, 1, 1, 0.5f);
    int64_t n;
    model_loss(m, ws, tg, 10, 1.0f, &n, rl);
    model_backward(m, ws);
    m->be->download(m->be, g, m->grads, (size_t)m->n_params * sizeof(float));
}

/* The output layer in chunks of 3 rows (model_loss of a MODEL_NO_LOGITS or
 * MODEL_TRAIN pass), against one chunk: the same row losses bit for bit,
 * with and without logits; the same gradients bit for bit except the output
 * layer's own weight and bias, which are summed chunk by chunk (close). The
 * chunks cut through the weighted runs of k = 2 positions. */
static void check_chunks(kf_backend *be, const model_config *cfg, const layout *lay,
                         const char *what) {
    model *m = model_create(be, cfg);
    randomize(m, 13);
    int64_t B = 3, L = lay->L, rows = B * lay->n_out * (cfg->head == HEAD_MTP ? cfg->k_train : 1);
    int64_t zd = cfg->head == HEAD_MTP ? cfg->k_train : 1;
    int32_t *ids = calloc((size_t)(B * L), sizeof(int32_t)), *tg = malloc((size_t)rows * 4);
    double *z = calloc((size_t)(B * L * zd), sizeof(double)), tau[3] = {0.7, 0.3, 1.0};
    for (int64_t i = 0; i < B * L; i++)
        ids[i] = (int32_t)rng_below(7, 1, (uint64_t)i, (uint64_t)cfg->vocab - 1);
    for (int64_t i = 0; i < B * L * zd; i++) z[i] = rng_uniform01(7, 2, (uint64_t)i);
    for (int64_t r = 0; r < rows; r++)
        tg[r] = r % 5 == 3 ? -1 : (int32_t)rng_below(7, 3, (uint64_t)r, (uint64_t)cfg->vocab - 1);
    model_input in = {.lay = lay, .B = B, .ids = ids, .z = z, .tau = tau};
    model_ws *ws = model_ws_create(m);
    size_t bytes = (size_t)m->n_params * sizeof(float);
    float *g1 = malloc(bytes), *g3 = malloc(bytes);
    float *rl1 = malloc((size_t)rows * 4), *rl3 = malloc((size_t)rows * 4);
    float *rl_logits = malloc((size_t)rows * 4), *rl_none = malloc((size_t)rows * 4);
    chunked_pass(m, ws, &in, tg, 0, rl1, g1);
    chunked_pass(m, ws, &in, tg, 3, rl3, g3);
    T_CHECK(!memcmp(rl1, rl3, (size_t)rows * 4),
            "%s: training row losses differ with chunks of "
            "3 rows",
            what);
    int64_t n;
    model_forward(m, ws, &in, 0, NULL);
    model_loss(m, ws, tg, 0, 1.0f, &n, rl_logits);
    model_forward(m, ws, &in, MODEL_NO_LOGITS, NULL);
    model_loss(m, ws, tg, 0, 1.0f, &n, rl_none);
    T_CHECK(!memcmp(rl1, rl_logits, (size_t)rows * 4),
            "%s: training row losses differ from a "
            "pass that keeps its logits",
            what);
    T_CHECK(!memcmp(rl_logits, rl_none, (size_t)rows * 4),
            "%s: MODEL_NO_LOGITS row losses "
            "differ from the logits' (chunks of 3)",
            what);
    /* model_loss_acc adds to a device double what model_loss returns, bitwise */
    /* (a0 large: each loss added to it alone would round differently) */
    double a0 = 1e12, want = a0 + model_loss(m, ws, tg, 0, 1.0f, &n, NULL), got;
    double *sum_d = m->be->alloc(m->be, sizeof(double));
    int32_t *tg_d = m->be->alloc(m->be, (size_t)rows * sizeof(int32_t));
    m->be->upload(m->be, sum_d, &a0, sizeof a0);
    m->be->upload(m->be, tg_d, tg, (size_t)rows * sizeof(int32_t));
    float gs = (float)(1.0 / (double)(n > 0 ? n : 1)), *gs_d = m->be->alloc(m->be, sizeof gs);
    m->be->upload(m->be, gs_d, &gs, sizeof gs); /* model_loss's factor for norm 0 */
    model_loss_acc(m, ws, tg_d, gs_d, sum_d);
    m->be->download(m->be, &got, sum_d, sizeof got);
    m->be->free(m->be, sum_d);
    m->be->free(m->be, gs_d);
    m->be->free(m->be, tg_d);
    T_CHECK(!memcmp(&got, &want, sizeof got), "%s: model_loss_acc: got %.17g, want %.17g", what,
            got, want);
    /* model_pick: argmax and inverse-CDF samples, kept logits vs chunks of 3 */
    int32_t *id1 = malloc((size_t)rows * 4), *id3 = malloc((size_t)rows * 4);
    int32_t *id_d = m->be->alloc(m->be, (size_t)rows * 4);
    double *zr = malloc((size_t)rows * 8), *tr = malloc((size_t)rows * 8);
    for (int64_t r = 0; r < rows; r++) zr[r] = rng_uniform01(7, 4, (uint64_t)r), tr[r] = 0.8;
    for (int sample = 0; sample < 2; sample++) {
        model_forward(m, ws, &in, 0, NULL);
        model_pick(m, ws, rows, sample ? zr : NULL, tr, id_d);
        m->be->download(m->be, id1, id_d, (size_t)rows * 4);
        model_forward(m, ws, &in, MODEL_NO_LOGITS, NULL);
        model_pick(m, ws, rows, sample ? zr : NULL, tr, id_d);
        m->be->download(m->be, id3, id_d, (size_t)rows * 4);
        T_CHECK(!memcmp(id1, id3, (size_t)rows * 4),
                "%s: model_pick (%s) differs with chunks of 3 "
                "rows",
                what, sample ? "samples" : "argmax");
    }
    free(id1), free(id3), free(zr), free(tr);
    m->be->free(m->be, id_d);
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        const float *a = g1 + mt->offset, *c = g3 + mt->offset;
        if (strstr(mt->name, ".linear.")) {
            double e = max_rel(a, c, 1, mt->numel);
            T_CHECK(e < 1e-5, "%s: %s's gradient in chunks: max relative difference %.3g", what,
                    mt->name, e);
        } else {
            T_CHECK(!memcmp(a, c, (size_t)mt->numel * 4),
                    "%s: %s's gradient differs with chunks "
                    "of 3 rows",
                    what, mt->name);
        }
    }
    model_ws_set_logit_chunk(ws, 0);
    free(g1), free(g3), free(rl1), free(rl3), free(rl_logits), free(rl_none);
    free(ids), free(tg), free(z);
    model_ws_free(ws);
    model_free(m);
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
    layout_ar(&l, 7);
    check_chunks(be, &ar, &l, "AR");
    layout_free(&l);
    layout_single(&l, 5, 2);
    check_chunks(be, &pf, &l, "PFLM k=2");
    layout_free(&l);
    layout_single(&l, 5, 1);
    check_chunks(be, &mtp, &l, "MTP k=3");
    layout_free(&l);
    be->destroy(be);
    return T_DONE();
}
