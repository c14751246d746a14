/* The paper-scale configs against the paper's tables, row by row (appendix
 * "Experimental configuration", table "Model architecture" and the precision
 * schedule; docs/fidelity.md lists the same rows): model, steps, batch, lr,
 * sequence length, precision schedule, tau, EMA, and the release's noise
 * encoder (noise_cycles 0, not kf's default). Run from the repository root. */
#include <string.h>

#include "common/runconfig.h"
#include "tests/test.h"

static runconfig *load(const char *path) {
    runconfig *rc = NULL;
    kf_err err;
    int r = runconfig_load(path, 0, NULL, &rc, &err);
    T_EQ_INT(r, 0, "%s loads: %s", path, r ? err.msg : "");
    return r ? NULL : rc;
}

/* Every row the paper's training table fixes, for one trained stage. */
static void check_stage(const char *cfg, const runconfig_stage *s) {
    const runconfig_opts *o = &s->opt;
    T_EQ_INT(s->steps, 500000, "%s %s: steps got %lld want 500000", cfg, s->name,
             (long long)s->steps);
    T_EQ_INT(o->batch, 512, "%s %s: batch got %lld want 512", cfg, s->name, (long long)o->batch);
    T_CLOSE(o->lr, 1e-4, 0, "lr");
    T_EQ_INT(o->warmup, 0, "%s %s: constant lr, warmup got %lld", cfg, s->name,
             (long long)o->warmup);
    T_CHECK(!o->lr_cosine, "%s %s: constant lr, got a cosine decay", cfg, s->name);
    T_CLOSE(o->new_weight, 1.0, 0, "every position's loss weighted alike");
    T_CLOSE(o->beta1, 0.9, 0, "beta1");
    T_CLOSE(o->beta2, 0.999, 0, "beta2");
    T_CLOSE(o->eps, 1e-6, 0, "eps");
    T_CLOSE(o->weight_decay, 0.0, 0, "weight decay");
    T_CLOSE(o->clip, 1.0, 0, "clip");
    T_CLOSE(o->ema, 0.999, 0, "EMA decay");
    T_CHECK(!o->ema_warmup, "%s %s: the paper's EMA has no warm-up", cfg, s->name);
}

/* Stages 1-3: fp16 for the first 400K steps, then fp32 (paper, "Precision schedule"). */
static void check_kf_precision(const char *cfg, const runconfig_stage *s) {
    const runconfig_opts *o = &s->opt;
    T_EQ_INT(runconfig_precision_at(o, 399999), RC_PREC_FP16, "%s %s: step 399999 in fp16", cfg,
             s->name);
    T_EQ_INT(runconfig_precision_at(o, 400000), RC_PREC_FP32, "%s %s: step 400000 in fp32", cfg,
             s->name);
    T_EQ_INT(runconfig_precision_at(o, 0), RC_PREC_FP16, "%s %s: step 0 in fp16", cfg, s->name);
}

/* OWT's baselines of the quality-NFE comparison (paper, "Comparison with
 * Existing Inference Paradigms"): Medusa is k = 4 heads on the AR backbone,
 * 500K steps at batch 512; PTP's draft is the ablation's variant B
 * (noise inversion + fully causal, k = 4, from the AR weights, tau 1, 200K
 * steps at the main runs' batch and optimizer); MDLM is the released
 * checkpoint, imported. */
static void check_baselines(const char *path, const runconfig *rc) {
    const runconfig_stage *md = runconfig_stage_find(rc, "medusa");
    T_CHECK(md != NULL, "%s: has the medusa stage", path);
    if (md) {
        T_EQ_INT(md->kind, RC_KIND_MEDUSA, "%s medusa: kind", path);
        T_EQ_INT(md->k, 4, "%s medusa: k (heads)", path);
        T_EQ_INT(md->steps, 500000, "%s medusa: steps", path);
        T_EQ_INT(md->opt.batch, 512, "%s medusa: batch", path);
        T_EQ_INT(md->teacher_stage, 0, "%s medusa: heads on the AR stage", path);
    }
    const runconfig_stage *b = runconfig_stage_find(rc, "ablation_b");
    T_CHECK(b != NULL, "%s: has the ablation_b stage (PTP's draft)", path);
    if (b) {
        T_EQ_INT(b->kind, RC_KIND_NI_CAUSAL, "%s ablation_b: kind", path);
        T_EQ_INT(b->k, 4, "%s ablation_b: k", path);
        T_EQ_INT(b->steps, 200000, "%s ablation_b: steps (the ablation's 200K)", path);
        T_EQ_INT(b->opt.batch, 512, "%s ablation_b: batch", path);
        T_CLOSE(b->opt.lr, 1e-4, 0, "ablation_b lr");
        T_CLOSE(b->opt.ema, 0.999, 0, "ablation_b EMA decay");
        T_EQ_INT(b->teacher_stage, 0, "%s ablation_b: taught by the AR stage", path);
        T_EQ_INT(b->init_stage, 0, "%s ablation_b: initialised from the AR stage", path);
        T_NEAR(b->tau_min, 1.0, 0, "%s ablation_b: tau_min", path);
        T_NEAR(b->tau_max, 1.0, 0, "%s ablation_b: tau_max", path);
    }
    const runconfig_stage *d = runconfig_stage_find(rc, "mdlm");
    T_CHECK(d != NULL, "%s: has the mdlm stage", path);
    if (d) T_EQ_INT(d->kind, RC_KIND_IMPORT, "%s mdlm: the released checkpoint, imported", path);
}

static void check_main(const char *path, int64_t vocab, int64_t seq_len, int ar_trained,
                       int64_t data_vocab, int64_t mask_id, int n_stages) {
    runconfig *rc = load(path);
    if (!rc) return;
    const runconfig_model *m = &rc->model;
    T_EQ_INT(m->hidden, 768, "%s: 12 x 768, 12 heads; got %lld x %lld, %lld heads", path,
             (long long)m->blocks, (long long)m->hidden, (long long)m->heads);
    T_EQ_INT(m->heads, 12, "%s: 12 x 768, 12 heads; got %lld x %lld, %lld heads", path,
             (long long)m->blocks, (long long)m->hidden, (long long)m->heads);
    T_EQ_INT(m->blocks, 12, "%s: 12 x 768, 12 heads; got %lld x %lld, %lld heads", path,
             (long long)m->blocks, (long long)m->hidden, (long long)m->heads);
    T_EQ_INT(m->vocab, vocab, "%s: vocab got %lld want %lld", path, (long long)m->vocab,
             (long long)vocab);
    T_EQ_INT(m->seq_len, seq_len, "%s: seq_len got %lld want %lld", path, (long long)m->seq_len,
             (long long)seq_len);
    T_EQ_INT(runconfig_mask_id(m, data_vocab), mask_id,
             "%s: mask token got %lld want %lld (MDLM's)", path,
             (long long)runconfig_mask_id(m, data_vocab), (long long)mask_id);
    T_EQ_INT(m->noise_cycles, 0, "%s: the release's noise encoder; noise_cycles got %lld want 0",
             path, (long long)m->noise_cycles);
    T_EQ_INT(rc->n_stages, n_stages, "%s: ar, k1, k2, k4 (then the baselines); stages", path);
    if (rc->n_stages < 4) goto out;
    const int64_t ks[4] = {1, 1, 2, 4};
    const runconfig_kind kinds[4] = {ar_trained ? RC_KIND_AR : RC_KIND_IMPORT, RC_KIND_DISTILL_AR,
                                     RC_KIND_SELF_FORCING, RC_KIND_SELF_FORCING};
    for (int i = 0; i < 4; i++) {
        const runconfig_stage *s = &rc->stages[i];
        T_EQ_INT(s->kind, kinds[i], "%s stage %d: kind got %s want %s", path, i,
                 runconfig_kind_name(s->kind), runconfig_kind_name(kinds[i]));
        if (i == 0 && !ar_trained) continue;
        check_stage(path, s);
        if (i == 0) {
            /* the paper trains its AR teacher in BF16 mixed precision */
            T_EQ_INT(runconfig_precision_at(&s->opt, 0), RC_PREC_BF16, "%s ar: bf16 throughout",
                     path);
            T_EQ_INT(runconfig_precision_at(&s->opt, 499999), RC_PREC_BF16,
                     "%s ar: bf16 throughout", path);
            continue;
        }
        T_EQ_INT(s->k, ks[i], "%s %s: k got %lld want %lld", path, s->name, (long long)s->k,
                 (long long)ks[i]);
        T_NEAR(s->tau_min, 1.0, 0, "%s %s: tau got [%g, %g] want 1 (main models)", path, s->name,
               s->tau_min, s->tau_max);
        T_NEAR(s->tau_max, 1.0, 0, "%s %s: tau got [%g, %g] want 1 (main models)", path, s->name,
               s->tau_min, s->tau_max);
        T_EQ_INT(s->teacher_stage, i - 1, "%s %s: taught by the previous stage", path, s->name);
        T_EQ_INT(s->init_stage, i - 1, "%s %s: initialised from the previous stage", path, s->name);
        check_kf_precision(path, s);
    }
    if (n_stages > 4) check_baselines(path, rc);
out:
    runconfig_free(rc);
}

int main(void) {
    /* LM1B: bert-base-uncased's [MASK] = 103; OWT: the id MDLM adds past GPT-2's 50257 */
    check_main("configs/lm1b.yaml", 30522, 128, 1, 30522, 103, 4);
    check_main("configs/owt.yaml", 50258, 1024, 0, 50257, 50257, 7);

    /* the temperature appendix: LM1B, k = 1 from the AR teacher, tau ~ U[0.01, 1] */
    runconfig *rc = load("configs/lm1b-temperature.yaml");
    if (rc) {
        const runconfig_stage *k1 = runconfig_stage_find(rc, "k1");
        T_CHECK(k1, "temperature: k1 is distill_ar k = 1");
        if (k1) {
            T_EQ_INT(k1->kind, RC_KIND_DISTILL_AR, "temperature: k1 is distill_ar k = 1");
            T_EQ_INT(k1->k, 1, "temperature: k1 is distill_ar k = 1");
        }
        if (k1) {
            T_NEAR(k1->tau_min, 0.01, 0, "temperature: tau got [%g, %g] want [0.01, 1]",
                   k1->tau_min, k1->tau_max);
            T_NEAR(k1->tau_max, 1.0, 0, "temperature: tau got [%g, %g] want [0.01, 1]", k1->tau_min,
                   k1->tau_max);
            check_stage("configs/lm1b-temperature.yaml", k1);
            check_kf_precision("configs/lm1b-temperature.yaml", k1);
        }
        T_EQ_INT(rc->model.seq_len, 128, "temperature: the LM1B model");
        T_EQ_INT(rc->model.vocab, 30522, "temperature: the LM1B model");
        T_EQ_INT(rc->model.noise_cycles, 0, "temperature: the release's noise encoder");
        runconfig_free(rc);
    }
    return T_DONE();
}
