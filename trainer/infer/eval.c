/* trainer/infer/eval.c — validation NLL / per-position metrics (see eval.h). */
#include "trainer/infer/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/train/supervision.h"

int eval_run(model *m, model *teacher, shard_set *ss, const eval_opts *o, eval_result *r,
             kf_err *err) {
    memset(r, 0, sizeof *r);
    const model_config *c = &m->cfg;
    int64_t k = c->kind == MODEL_AR ? 1 : o->k ? o->k : c->k_train;
    if (c->kind == MODEL_AR && o->k > 1)
        return kf_err_set(err, "--k %lld: an AR checkpoint predicts one token", (long long)o->k);
    if (k > c->k_train)
        return kf_err_set(err, "--k %lld exceeds the checkpoint's k_train = %lld", (long long)k,
                          (long long)c->k_train);
    if (c->head == HEAD_MTP && k != c->k_train)
        return kf_err_set(err, "--k %lld: the MTP baseline has exactly k_train = %lld heads",
                          (long long)k, (long long)c->k_train);
    int kind = o->kind;
    if (c->bidir) kind = SUP_MDLM;
    else if (c->kind == MODEL_AR) kind = SUP_AR;
    else if (kind < 0)
        kind = teacher->cfg.kind == MODEL_AR ? (c->head == HEAD_MTP ? SUP_NI_MTP : SUP_DISTILL_AR)
                                             : SUP_SELF_FORCING;
    if ((kind == SUP_NI_MTP) != (c->head == HEAD_MTP))
        return kf_err_set(err, "supervision %s does not fit this checkpoint's %s head",
                          sup_kind_name((sup_kind)kind), c->head == HEAD_MTP ? "MTP" : "shared");
    /* MDLM: its NELBO bound per token, the time stratified over each batch */
    sup_config sc = {.kind = kind,
                     .k = k,
                     .tau_min = o->tau,
                     .tau_max = o->tau,
                     .seed = o->seed,
                     .mask_id = c->mask_id,
                     .strata = o->batch};
    sup_ctx *sup = sup_create(&sc, teacher, err);
    if (!sup) return -1;
    int64_t total = shard_set_count(ss), n_data = shard_set_seq_len(ss);
    int64_t N = o->samples > 0 && o->samples < total ? o->samples : total;
    int64_t n = n_data < c->seq_len ? n_data : c->seq_len;
    if (n <= k) {
        sup_free(sup);
        return kf_err_set(err, "samples of %lld tokens are too short for k = %lld", (long long)n,
                          (long long)k);
    }
    r->kind = kind;
    r->k = k;
    r->nll_pos = kf_calloc((size_t)k, sizeof(double));
    r->acc_pos = kf_calloc((size_t)k, sizeof(double));
    int64_t *cnt = kf_calloc((size_t)k, sizeof(int64_t));
    int64_t B = o->batch;
    int32_t *raw = kf_malloc((size_t)n_data * sizeof(int32_t));
    int32_t *tok = kf_malloc((size_t)(B * n) * sizeof(int32_t));
    int32_t *vl = kf_malloc((size_t)B * sizeof(int32_t));
    uint64_t *keys = kf_malloc((size_t)B * sizeof(uint64_t));
    model_ws *ws = model_ws_create(m);
    int64_t correct_blocks = 0, sum_n = 0;
    double sum = 0;
    int rc = 0;
    for (int64_t s = 0; s < N && !rc; s += B) {
        int64_t nb = N - s < B ? N - s : B;
        for (int64_t b = 0; b < nb && !rc; b++) {
            int32_t len;
            if (shard_set_get(ss, s + b, raw, &len, err)) {
                rc = -1;
                break;
            }
            memcpy(tok + b * n, raw, (size_t)n * sizeof(int32_t));
            vl[b] = len < n ? len : (int32_t)n;
            keys[b] = (uint64_t)(s + b);
        }
        if (rc) break;
        sup_batch sb;
        sup_build(sup, &sb, tok, nb, n, vl, keys);
        const float *lg = model_forward(m, ws, &sb.in, 0, NULL);
        int64_t rows = model_ws_rows(ws), V = c->vocab;
        float *rl = kf_malloc((size_t)rows * sizeof(float));
        int32_t *am = kf_malloc((size_t)rows * sizeof(int32_t));
        int32_t *am_d = m->be->alloc(m->be, (size_t)rows * sizeof(int32_t));
        m->be->argmax(m->be, am_d, lg, rows, V);
        m->be->download(m->be, am, am_d, (size_t)rows * sizeof(int32_t));
        m->be->free(m->be, am_d);
        int64_t count;
        const int32_t *tg = sup_host_targets(sup, &sb);
        sum += model_loss(m, ws, tg, 0, 1.0f, &count, rl);
        sum_n += kind == SUP_MDLM ? sb.n_targets : count;
        /* rows: (b, t, j) for the shared head; head-major (j, b, t) for MTP */
        int64_t blocks = rows / k;
        for (int64_t blk = 0; blk < blocks; blk++) {
            int all = 1, right = 1;
            for (int64_t j = 0; j < k; j++) {
                int64_t row = kind == SUP_NI_MTP ? j * blocks + blk : blk * k + j;
                int32_t t = tg[row];
                if (t < 0) {
                    all = 0;
                    continue;
                }
                r->nll_pos[j] += rl[row];
                r->acc_pos[j] += am[row] == t;
                cnt[j]++;
                right &= am[row] == t;
            }
            if (all) {
                r->blocks++;
                correct_blocks += right;
            }
        }
        free(rl);
        free(am);
    }
    for (int64_t j = 0; j < k; j++)
        if (cnt[j]) {
            r->nll_pos[j] /= (double)cnt[j];
            r->acc_pos[j] /= (double)cnt[j];
        }
    r->samples = N;
    r->targets = sum_n;
    r->nll = sum_n ? sum / (double)sum_n : 0;
    r->ppl = exp(r->nll);
    r->block_acc = r->blocks ? (double)correct_blocks / (double)r->blocks : 0;
    free(cnt);
    free(raw);
    free(tok);
    free(vl);
    free(keys);
    model_ws_free(ws);
    sup_free(sup);
    if (rc) eval_result_free(r);
    return rc;
}

void eval_print_json(FILE *f, const model *m, const eval_opts *o, const eval_result *r) {
    fprintf(f,
            "{\"model\": \"%s\", \"supervision\": \"%s\", \"k\": %lld, \"samples\": %lld, "
            "\"targets\": %lld, \"nll\": %.6f, \"ppl\": %.4f",
            m->cfg.bidir              ? "mdlm"
            : m->cfg.kind == MODEL_AR ? "ar"
            : m->cfg.head == HEAD_MTP ? "pflm-mtp"
                                      : "pflm",
            sup_kind_name((sup_kind)r->kind), (long long)r->k, (long long)r->samples,
            (long long)r->targets, r->nll, r->ppl);
    if (m->cfg.kind == MODEL_PFLM) {
        fprintf(f, ", \"tau\": %g, \"nll_pos\": [", o->tau);
        for (int64_t j = 0; j < r->k; j++) fprintf(f, j ? ", %.6f" : "%.6f", r->nll_pos[j]);
        fprintf(f, "], \"acc_pos\": [");
        for (int64_t j = 0; j < r->k; j++) fprintf(f, j ? ", %.6f" : "%.6f", r->acc_pos[j]);
        fprintf(f, "], \"block_acc\": %.6f, \"blocks\": %lld", r->block_acc, (long long)r->blocks);
    }
    fprintf(f, "}\n");
}

void eval_result_free(eval_result *r) {
    free(r->nll_pos);
    free(r->acc_pos);
    r->nll_pos = r->acc_pos = NULL;
}
