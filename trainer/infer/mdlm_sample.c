/* trainer/infer/mdlm_sample.c — masked-diffusion sampling (see mdlm_sample.h). */
#include "trainer/infer/mdlm_sample.h"

#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

int64_t mdlm_sample_nfe(int64_t n_new, int64_t k) { return (n_new + k - 1) / k; }

/* One generated position's draw this pass: its index and -log p of its
 * sampled token (the confidence, lower is surer). */
typedef struct cand {
    int64_t i;
    float nll;
} cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->nll != y->nll) return x->nll < y->nll ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int check_args(const model *m, const int32_t *prefixes, int64_t B, int64_t P,
                      const mdlm_sample_opts *o, kf_err *err) {
    const model_config *c = &m->cfg;
    if (!c->bidir)
        return kf_err_set(err, "mdlm_sample: the model has causal attention, not a "
                               "masked-diffusion model's bidirectional attention");
    if (c->mask_id < 0) return kf_err_set(err, "mdlm_sample: the model has no mask token");
    if (B < 1 || P < 0 || o->n_new < 1 || o->k < 1 || o->tau < 0)
        return kf_err_set(err, "mdlm_sample: B %lld, P %lld, n_new %lld, k %lld, tau %g",
                          (long long)B, (long long)P, (long long)o->n_new, (long long)o->k, o->tau);
    for (int64_t r = 0; r < B * P; r++)
        if (prefixes[r] < 0 || prefixes[r] >= c->vocab || prefixes[r] == c->mask_id)
            return kf_err_set(err,
                              "mdlm_sample: prefix %lld token %lld is %d (the mask token or "
                              "outside the vocabulary of %lld)",
                              (long long)(r / P), (long long)(r % P), prefixes[r],
                              (long long)c->vocab);
    return 0;
}

int mdlm_sample_run(model *m, const int32_t *prefixes, int64_t B, int64_t P,
                    const mdlm_sample_opts *o, const uint64_t *keys, int32_t *tokens, int64_t *nfe,
                    kf_err *err) {
    if (check_args(m, prefixes, B, P, o, err)) return -1;
    kf_backend *be = m->be;
    int64_t N = o->n_new, L = P + N, V = m->cfg.vocab, rows = B * N;
    double tau = o->tau > 0 ? o->tau : 1.0;
    /* the bidirectional pass over the whole row; logits of the generated part */
    layout lay;
    layout_ar(&lay, L);
    lay.n_out = N;
    for (int64_t i = 0; i < N; i++) lay.out_rows[i] = (int32_t)(P + i);
    int32_t *ids = kf_malloc((size_t)(B * L) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) {
        memcpy(ids + b * L, prefixes + b * P, (size_t)P * sizeof(int32_t));
        for (int64_t i = 0; i < N; i++) ids[b * L + P + i] = (int32_t)m->cfg.mask_id;
    }
    double *z = kf_malloc((size_t)rows * sizeof(double)),
           *taus = kf_malloc((size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++) taus[r] = tau;
    int32_t *pick = kf_malloc((size_t)rows * sizeof(int32_t));
    float *nll = kf_malloc((size_t)rows * sizeof(float));
    cand *cs = kf_malloc((size_t)N * sizeof(cand));
    int32_t *pick_d = be->alloc(be, (size_t)rows * sizeof(int32_t));
    float *nll_d = be->alloc(be, (size_t)rows * sizeof(float));
    model_ws *ws = model_ws_create(m);
    int saved_invariant = be->batch_invariant;
    be->batch_invariant = 1;
    int64_t passes = mdlm_sample_nfe(N, o->k);
    for (int64_t s = 0; s < passes; s++) {
        model_input in = {.lay = &lay, .B = B, .ids = ids};
        const float *lg = model_forward(m, ws, &in, 0, NULL);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < N; i++)
                z[b * N + i] = rng_uniform01(o->seed, keys ? keys[b] : (uint64_t)b,
                                             (uint64_t)s << 32 | (uint64_t)i);
        model_pick(m, ws, rows, z, taus, pick_d);
        /* -log softmax(logits)[picked]: the confidence at tau = 1 */
        be->xent(be, nll_d, NULL, lg, pick_d, rows, V, NULL);
        be->download(be, pick, pick_d, (size_t)rows * sizeof(int32_t));
        be->download(be, nll, nll_d, (size_t)rows * sizeof(float));
        for (int64_t b = 0; b < B; b++) {
            int32_t *row = ids + b * L + P;
            int64_t n = 0;
            for (int64_t i = 0; i < N; i++)
                if (row[i] == m->cfg.mask_id) cs[n++] = (cand){i, nll[b * N + i]};
            qsort(cs, (size_t)n, sizeof *cs, cand_cmp);
            for (int64_t j = 0; j < n && j < o->k; j++) row[cs[j].i] = pick[b * N + cs[j].i];
        }
        if (o->trace) memcpy(o->trace + s * B * L, ids, (size_t)(B * L) * sizeof(int32_t));
    }
    be->batch_invariant = saved_invariant;
    for (int64_t b = 0; b < B; b++) {
        memcpy(tokens + b * N, ids + b * L + P, (size_t)N * sizeof(int32_t));
        if (nfe) nfe[b] = passes;
    }
    model_ws_free(ws);
    be->free(be, pick_d);
    be->free(be, nll_d);
    layout_free(&lay);
    free(ids), free(z), free(taus), free(pick), free(nll), free(cs);
    return 0;
}
