/* tests/unit/test_cuda_train.c — whole training steps on the CUDA backend
 * against the CPU reference, for each stage kind, and the batch invariance of
 * teacher targets on the GPU.
 *
 * For each kind (ar, distill_ar from an AR teacher, self_forcing from a
 * PFLM(1) teacher to PFLM(2); ar and self_forcing also with the GPT-2
 * architecture options of model.h), both backends hold the same tiny model (same
 * seed, weights checked bitwise equal after upload), build the supervision
 * with their own teacher passes, run forward, loss, backward and an AdamW +
 * EMA update, and the test compares: teacher targets (agreement), loss,
 * gradients and updated weights (relative L2 error, per-kind tolerance).
 * Both students are trained on the CPU's targets so that the numeric
 * comparison does not depend on a rare target flip at a CDF boundary.
 *
 * Save -> load -> continue: on the GPU, 2 AR steps, a checkpoint of weights
 * and AdamW moments (safetensors), a fresh model loaded from it and a third
 * step give the same weights, bit for bit, as 3 steps without stopping.
 *
 * Batch invariance: on the GPU in batch-invariant mode, the teacher targets
 * of one sample built alone equal those built inside a batch of 64, bit for
 * bit, for distill_ar and self_forcing, in fp32 and with 16-bit teachers
 * (their attention on the tensor cores at head_dim 64).
 *
 * Decoding with CUDA graphs (kernels.h's graph ops, model_decode.c): the
 * ids decode_run gives on the GPU with graphs equal, bit for bit, those of a
 * GPU backend made with KF_CUDA_GRAPHS=0 (and in fp32 the CPU's), for AR
 * sampling, K-Forcing argmaxes (k not dividing the tokens asked for), a
 * frequency penalty and fp16; the graph backend launched one graph a step
 * and recorded one per cache-length bucket, the other none.
 * A training pass over padded samples (valid_len) recorded as a graph and
 * launched on other ids, lengths and targets gives bitwise the loss sums
 * and gradients of eager passes.
 *
 * Host synchronisations (under the emulation harness, which counts them):
 * once its buffers have grown, a training step's forward, loss (its sum
 * stays on the device), backward and optimizer (the gradient check, AdamW
 * and the EMA: optim_check, optim_apply) never make the host wait for the
 * device, and the teacher passes of a batch wait once (the read-back of
 * their picked tokens: each pass reads the previous one's on the device).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#ifdef KF_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#include "tests/test.h"
#include "trainer/infer/decode.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"
#include "trainer/train/optim.h"
#include "trainer/train/supervision.h"

enum { H = 64, HEADS = 2, BLOCKS = 2, V = 97, N = 24, B = 4 };

static kf_backend *be[2];

/* Non-trivial weights (the output layer is zero after model_init). */
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

static float *down(kf_backend *b, const float *p, int64_t n) {
    float *h = malloc((size_t)n * sizeof(float));
    b->download(b, h, p, (size_t)n * sizeof(float));
    return h;
}

static double rel(const float *g, const float *c, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)g[i] - c[i];
        num += isfinite(g[i]) ? d * d : INFINITY;
        den += (double)c[i] * c[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1);
}

/* gpt2: with the GPT-2 architecture options (model.h) */
/* Attention heads of base_cfg's models (1: head_dim 64, which the 16-bit
 * phases run on the tensor cores; HEADS: 32, the SIMT kernels). */
static int64_t n_heads = HEADS;

static model_config base_cfg(int gpt2) {
    model_config c = {.hidden = H,
                      .heads = n_heads,
                      .blocks = BLOCKS,
                      .vocab = V,
                      .mask_id = V - 1,
                      .seq_len = N,
                      .kind = MODEL_AR,
                      .head = HEAD_SHARED,
                      .k_train = 1};
    if (gpt2) {
        c.pos = POS_LEARNED;
        c.n_positions = 2 * N + 8; /* SingleForward rows reach position 2N */
        c.tied_head = c.norm_bias = c.attn_bias = 1;
    }
    return c;
}

static void tokens(int32_t *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) x[i] = (int32_t)rng_below(seed, 11, (uint64_t)i, V - 1);
}

/* Rows of logits the student's model_loss makes at a time (0: automatic). */
static int64_t logit_chunk;
/* The teacher passes' precision (sup_config's teacher_precision). */
static kf_precision teacher_prec = KF_PREC_FP32;

/* One stage step on both backends; teacher_cfg NULL for ar. */
static void stage_step(const char *name, sup_kind kind, int64_t k, const model_config *teacher_cfg,
                       kf_precision prec, double tol_loss, double tol_grad, int gpt2) {
    model *teacher[2] = {NULL, NULL}, *student[2];
    sup_ctx *sup[2];
    sup_batch sb[2];
    sup_config sc = {.kind = kind,
                     .k = k,
                     .tau_min = 0.3,
                     .tau_max = 1.0,
                     .seed = 1234,
                     .teacher_precision = teacher_prec};
    model_config base = base_cfg(gpt2);
    model_config scfg = sup_student_config(&sc, &base);
    int32_t x[B * N];
    uint64_t keys[B] = {11, 12, 13, 14};
    tokens(x, B * N, 5);
    for (int s = 0; s < 2; s++) {
        kf_err err = {{0}};
        be[s]->set_precision(be[s], KF_PREC_FP32);
        if (teacher_cfg) {
            teacher[s] = model_create(be[s], teacher_cfg);
            randomize(teacher[s], 21);
        }
        sup[s] = sup_create(&sc, teacher[s], &err);
        T_CHECK(sup[s] != NULL, "%s: sup_create: %s", name, err.msg);
        if (!sup[s]) return;
        be[s]->batch_invariant = s == 1 ? 1 : be[s]->batch_invariant; /* teacher passes */
        sup_build(sup[s], &sb[s], x, B, N, NULL, keys);
        if (s == 1) be[s]->batch_invariant = 0;
        student[s] = model_create(be[s], &scfg);
        randomize(student[s], 22);
    }
    /* the same weights on both sides */
    float *pc = down(be[0], student[0]->params, student[0]->n_params);
    float *pg = down(be[1], student[1]->params, student[1]->n_params);
    T_CHECK(memcmp(pc, pg, (size_t)student[0]->n_params * sizeof(float)) == 0,
            "%s: initial weights differ", name);
    free(pc), free(pg);
    if (teacher_cfg) {
        int64_t same = 0;
        const int32_t *tc = sup_host_targets(sup[0], &sb[0]),
                      *tg = sup_host_targets(sup[1], &sb[1]);
        for (int64_t r = 0; r < sb[0].rows; r++) same += tc[r] == tg[r];
        printf("%s: teacher targets agree on %lld of %lld rows\n", name, (long long)same,
               (long long)sb[0].rows);
        T_EQ_INT(sb[0].rows, sb[1].rows, "%s: teacher target rows", name);
        T_CHECK(same >= sb[0].rows * 97 / 100,
                "%s: teacher targets agree on only %lld of %lld rows", name, (long long)same,
                (long long)sb[0].rows);
    }
    double loss[2];
    float *g[2], *p[2], *e[2];
    for (int s = 0; s < 2; s++) {
        kf_backend *b = be[s];
        model *m = student[s];
        b->set_precision(b, prec);
        model_ws *ws = model_ws_create(m);
        model_ws_set_logit_chunk(ws, logit_chunk);
        model_zero_grads(m);
        model_forward(m, ws, &sb[s].in, MODEL_TRAIN, NULL);
        int64_t count = 0;
        float ls = prec == KF_PREC_FP16 ? 1024.0f : 1.0f; /* bf16 trains unscaled */
        loss[s] = model_loss(m, ws, sup_host_targets(sup[0], &sb[0]), 0, ls, &count, NULL) /
                  (double)count;
        model_backward(m, ws);
        g[s] = down(b, m->grads, m->n_params);
        float *mom = b->alloc(b, (size_t)m->n_params * sizeof(float));
        float *vel = b->alloc(b, (size_t)m->n_params * sizeof(float));
        float *ema = b->alloc(b, (size_t)m->n_params * sizeof(float));
        b->copy(b, ema, m->params, (size_t)m->n_params * sizeof(float));
        b->adamw(b, m->params, m->grads, mom, vel, m->n_params, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.0f, 1,
                 1.0f / ls, NULL);
        b->ema(b, ema, m->params, m->n_params, 0.999f, NULL);
        p[s] = down(b, m->params, m->n_params);
        e[s] = down(b, ema, m->n_params);
        b->free(b, mom), b->free(b, vel), b->free(b, ema);
        model_ws_free(ws);
        b->set_precision(b, KF_PREC_FP32);
    }
    int64_t n = student[0]->n_params;
    double eg = rel(g[1], g[0], n), ep = rel(p[1], p[0], n), ee = rel(e[1], e[0], n);
    printf("%s (%s): loss cpu %.7f cuda %.7f; grads rel err %.3g, weights %.3g, ema %.3g\n", name,
           kernels_precision_name(prec), loss[0], loss[1], eg, ep, ee);
    T_CLOSE(loss[1], loss[0], tol_loss, name);
    T_CHECK(eg <= tol_grad, "%s: gradient rel err %.3g > %.3g", name, eg, tol_grad);
    /* AdamW's first step moves each weight by about lr*sign(g): weights inherit
     * the gradient's precision (16-bit GEMMs round differently on the two sides) */
    double tol_w = prec == KF_PREC_FP32 ? 1e-5 : 1e-3;
    T_CHECK(ep <= tol_w, "%s: updated weights rel err %.3g", name, ep);
    T_CHECK(ee <= 1e-5, "%s: EMA rel err %.3g", name, ee);
    for (int s = 0; s < 2; s++) {
        free(g[s]), free(p[s]), free(e[s]);
        sup_free(sup[s]);
        model_free(student[s]);
        if (teacher[s]) model_free(teacher[s]);
    }
}

/* Attention ops run on the tensor cores so far (kernels_cuda_tc_launches). */
static int64_t attn_tc_launches(kf_backend *b) {
#ifdef KF_CUDA
    return kernels_cuda_tc_launches(b, KF_CUDA_TC_ATTN);
#else
    (void)b;
    return -1; /* never reached: no CUDA backend */
#endif
}

/* Teacher targets of sample 0 alone vs as the first of 64 samples (GPU); the
 * teacher's attention runs on the tensor cores in a 16-bit teacher
 * precision at head_dim 64, else on the SIMT kernels. */
static void batch_invariance(const char *name, sup_kind kind, int64_t k, const model_config *tcfg,
                             kf_precision tp) {
    enum { BB = 64 };
    kf_backend *b = be[1];
    model *teacher = model_create(b, tcfg);
    randomize(teacher, 31);
    sup_config sc = {
        .kind = kind, .k = k, .tau_min = 0.3, .tau_max = 1.0, .seed = 99, .teacher_precision = tp};
    kf_err err = {{0}};
    sup_ctx *s = sup_create(&sc, teacher, &err);
    T_CHECK(s != NULL, "%s: sup_create: %s", name, err.msg);
    if (!s) return;
    int32_t *x = malloc(BB * N * sizeof(int32_t));
    uint64_t keys[BB];
    tokens(x, BB * N, 77);
    for (int i = 0; i < BB; i++) keys[i] = 1000 + (uint64_t)i;
    b->batch_invariant = 1;
    sup_batch big, one;
    int64_t n0 = attn_tc_launches(b);
    sup_build(s, &big, x, BB, N, NULL, keys);
    int64_t per = big.rows / BB;
    int32_t *first = malloc((size_t)per * sizeof(int32_t));
    /* rows are sample-major */
    memcpy(first, sup_host_targets(s, &big), (size_t)per * sizeof(int32_t));
    sup_build(s, &one, x, 1, N, NULL, keys);
    sup_host_targets(s, &one);
    b->batch_invariant = 0;
    int64_t tc = attn_tc_launches(b) - n0;
    int want_tc = tp != KF_PREC_FP32 && tcfg->hidden / tcfg->heads == 64;
    T_CHECK((tc > 0) == want_tc, "%s: got %lld attention ops on the tensor cores, want %s", name,
            (long long)tc, want_tc ? "some" : "none");
    T_EQ_INT(one.rows, per, "%s: teacher target rows of a sample alone", name);
    if (one.rows == per)
        T_CHECK(memcmp(first, one.targets, (size_t)per * sizeof(int32_t)) == 0,
                "%s: teacher targets of a sample differ alone vs in a batch of %d", name, BB);
    printf("%s: teacher targets of sample 0 alone %s inside a batch of %d\n", name,
           one.rows == per && !memcmp(first, one.targets, (size_t)per * sizeof(int32_t)) ? "=="
                                                                                         : "!=",
           BB);
    free(first), free(x);
    sup_free(s);
    model_free(teacher);
}

/* One AR step on the GPU: forward, loss, backward, AdamW (1-based step). */
static void ar_step(model *m, model_ws *ws, const sup_batch *sb, float *mom, float *vel,
                    int64_t step) {
    kf_backend *b = m->be;
    int64_t count = 0;
    model_zero_grads(m);
    model_forward(m, ws, &sb->in, MODEL_TRAIN, NULL);
    model_loss(m, ws, sb->targets, 0, 1.0f, &count, NULL);
    model_backward(m, ws);
    b->adamw(b, m->params, m->grads, mom, vel, m->n_params, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, step,
             1.0f, NULL);
}

/* Save -> load -> continue on the GPU is bitwise identical to not stopping:
 * 3 steps straight vs 2 steps, checkpoint (weights and AdamW moments through
 * safetensors files), a fresh model loaded from it, 1 more step. */
static void save_load_continue(void) {
    kf_backend *b = be[1];
    model_config cfg = base_cfg(0);
    /* tau is unused by AR, but sup_create validates every field */
    sup_config sc = {.kind = SUP_AR, .k = 1, .tau_min = 0.3, .tau_max = 1.0, .seed = 3};
    kf_err err = {{0}};
    sup_ctx *s = sup_create(&sc, NULL, &err);
    T_CHECK(s != NULL, "save_load_continue: sup_create: %s", err.msg);
    if (!s) return;
    int32_t x[B * N];
    uint64_t keys[B] = {1, 2, 3, 4};
    tokens(x, B * N, 9);
    sup_batch sb;
    sup_build(s, &sb, x, B, N, NULL, keys);
    size_t bytes = 0;
    float *final[2];
    char dir[] = "/tmp/kf_cuda_ckpt_XXXXXX";
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char pw[256], pm[256], pv[256];
    snprintf(pw, sizeof pw, "%s/model.safetensors", dir);
    snprintf(pm, sizeof pm, "%s/adam_m.safetensors", dir);
    snprintf(pv, sizeof pv, "%s/adam_v.safetensors", dir);
    for (int run = 0; run < 2; run++) {
        model *m = model_create(b, &cfg);
        model_init(m, 42);
        bytes = (size_t)m->n_params * sizeof(float);
        float *mom = b->alloc(b, bytes), *vel = b->alloc(b, bytes);
        model_ws *ws = model_ws_create(m);
        int64_t step = 1;
        for (; step <= 2; step++) ar_step(m, ws, &sb, mom, vel, step);
        if (run == 1) { /* stop here: checkpoint, drop everything, reload */
            T_EQ_INT(model_save(m, pw, NULL, &err), 0, "save: %s", err.msg);
            T_EQ_INT(model_save(m, pm, mom, &err), 0, "save m: %s", err.msg);
            T_EQ_INT(model_save(m, pv, vel, &err), 0, "save v: %s", err.msg);
            model_ws_free(ws);
            b->free(b, mom), b->free(b, vel);
            model_free(m);
            m = model_load(b, pw, &err);
            T_CHECK(m != NULL, "load: %s", err.msg);
            if (!m) return;
            mom = b->alloc(b, bytes), vel = b->alloc(b, bytes);
            T_EQ_INT(model_load_into(m, pm, mom, &err), 0, "load m: %s", err.msg);
            T_EQ_INT(model_load_into(m, pv, vel, &err), 0, "load v: %s", err.msg);
            ws = model_ws_create(m);
        }
        ar_step(m, ws, &sb, mom, vel, step);
        final[run] = down(b, m->params, m->n_params);
        model_ws_free(ws);
        b->free(b, mom), b->free(b, vel);
        model_free(m);
    }
    int same = memcmp(final[0], final[1], bytes) == 0;
    printf("save -> load -> continue on cuda: weights after 3 steps %s\n",
           same ? "bitwise identical" : "DIFFER");
    T_CHECK(same, "save -> load -> continue differs from an uninterrupted run");
    free(final[0]), free(final[1]);
    remove(pw), remove(pm), remove(pv), rmdir(dir);
    sup_free(s);
}

/* Host synchronisations so far (-1: not counted, on a real GPU). */
static int64_t host_syncs(void) {
#ifdef KF_CUDA
    return kernels_cuda_host_syncs();
#else
    return -1;
#endif
}

/* Counts the host waits of each part of a training step and of the teacher
 * passes, on the second of two identical steps (the first grows buffers).
 * kind: distill_ar from an AR teacher (k = 2: two teacher passes) or
 * self_forcing 1 -> 2 from a PFLM(1) teacher (two rounds); either way the
 * second pass reads the first one's picks on the device, and the host reads
 * both passes' picks back once. */
static void host_syncs_in_a_step(const char *name, sup_kind kind, const model_config *tcfg) {
    kf_backend *b = be[1];
    if (host_syncs() < 0) {
        printf(
            "%s: host synchronisations not counted (real GPU; the emulation harness counts them)\n",
            name);
        return;
    }
    model *teacher = model_create(b, tcfg);
    randomize(teacher, 41);
    sup_config sc = {.kind = kind, .k = 2, .tau_min = 0.3, .tau_max = 1.0, .seed = 5};
    kf_err err = {{0}};
    sup_ctx *s = sup_create(&sc, teacher, &err);
    T_CHECK(s != NULL, "%s: sup_create: %s", name, err.msg);
    if (!s) return;
    model_config base = base_cfg(0), scfg = sup_student_config(&sc, &base);
    model *m = model_create(b, &scfg);
    randomize(m, 42);
    model_ws *ws = model_ws_create(m);
    size_t bytes = (size_t)m->n_params * sizeof(float);
    float *mom = b->alloc(b, bytes), *vel = b->alloc(b, bytes), *ema = b->alloc(b, bytes);
    double *sum_d = b->alloc(b, sizeof(double));
    kf_grad_ctl *ctl = b->alloc(b, sizeof *ctl);
    runconfig_opts o = runconfig_opts_default(RC_KIND_AR);
    optim_state os = optim_init(&o);
    int32_t x[B * N];
    uint64_t keys[B] = {5, 6, 7, 8};
    tokens(x, B * N, 13);
    int64_t n[5]; /* waits in: teacher passes, forward, loss, backward, optimizer */
    for (int step = 1; step <= 2; step++) {
        sup_batch sb;
        int64_t t0 = host_syncs();
        sup_build(s, &sb, x, B, N, NULL, keys);
        optim_factors(b, &o, &os, step - 1, (double)sb.n_targets, ctl); /* as train_step */
        int64_t t1 = host_syncs();
        model_zero_grads(m);
        model_forward(m, ws, &sb.in, MODEL_TRAIN, NULL);
        int64_t t2 = host_syncs();
        model_loss_acc(m, ws, sb.targets_d, &ctl->xent_scale, sum_d);
        int64_t t3 = host_syncs();
        model_backward(m, ws);
        int64_t t4 = host_syncs();
        optim_check(b, &o, ctl, m->grads, m->n_params);
        optim_apply(b, &o, &os, step - 1, ctl, m->params, m->grads, mom, vel, ema, m->n_params);
        int64_t t5 = host_syncs();
        n[0] = t1 - t0, n[1] = t2 - t1, n[2] = t3 - t2, n[3] = t4 - t3, n[4] = t5 - t4;
    }
    b->sync(b);
    printf("%s, second step: host waits: teacher %lld, forward %lld, loss %lld, backward %lld, "
           "optimizer %lld\n",
           name, (long long)n[0], (long long)n[1], (long long)n[2], (long long)n[3],
           (long long)n[4]);
    T_EQ_INT(n[0], 0,
             "%s: two teacher passes: got %lld host waits, want 0 (their picks feed the next pass "
             "and the student's targets on the device)",
             name, (long long)n[0]);
    T_EQ_INT(n[1], 0, "%s: forward: got %lld host waits, want 0", name, (long long)n[1]);
    T_EQ_INT(n[2], 0, "%s: loss: got %lld host waits, want 0 (the sum stays on the device)", name,
             (long long)n[2]);
    T_EQ_INT(n[3], 0, "%s: backward: got %lld host waits, want 0", name, (long long)n[3]);
    T_EQ_INT(n[4], 0,
             "%s: optimizer (gradient check, AdamW, EMA): got %lld host waits, want 0 (the "
             "decision stays on the device)",
             name, (long long)n[4]);
    b->free(b, mom), b->free(b, vel), b->free(b, ema), b->free(b, sum_d), b->free(b, ctl);
    model_ws_free(ws);
    model_free(m);
    sup_free(s);
    model_free(teacher);
}

static int64_t graph_launches(kf_backend *b) {
#ifdef KF_CUDA
    return kernels_cuda_graph_launches(b);
#else
    (void)b;
    return -1; /* never reached: no CUDA backend */
#endif
}

static int64_t graph_records(kf_backend *b) {
#ifdef KF_CUDA
    return kernels_cuda_graph_records(b);
#else
    (void)b;
    return -1; /* never reached: no CUDA backend */
#endif
}

/* decode_run on the GPU with and without graphs (be_nog: KF_CUDA_GRAPHS=0)
 * and on the CPU. `graphed`: the steps of the repeated shape after its first
 * (uncaptured) one, each one graph launch (the whole step); `records`: the
 * graphs recorded for them, one more each time the cache outgrows its
 * bucket (model_decode.c's step_bucket). The CPU's ids are compared in
 * fp32 (`vs_cpu`): the 16-bit phases round differently. */
static void decode_graphs(kf_backend *be_nog, const char *name, const model_config *cfg,
                          const decode_opts *o, kf_precision prec, int64_t graphed,
                          int64_t records) {
    enum { DB = 3, DP = 3 };
    kf_backend *bs[3] = {be[1], be_nog, be[0]};
    int32_t prefix[DB * DP], *out[3];
    uint64_t keys[DB] = {3, 17, 99};
    tokens(prefix, DB * DP, 41);
    int64_t launches[2], recs = 0;
    for (int s = 0; s < 3; s++) {
        model *m = model_create(bs[s], cfg);
        randomize(m, 5);
        bs[s]->set_precision(bs[s], prec);
        out[s] = malloc((size_t)(DB * o->max_new) * sizeof(int32_t));
        int64_t l0 = s < 2 ? graph_launches(bs[s]) : 0, r0 = s ? 0 : graph_records(bs[s]);
        decode_run(m, NULL, prefix, DB, DP, o, keys, out[s]);
        if (s < 2) launches[s] = graph_launches(bs[s]) - l0;
        if (!s) recs = graph_records(bs[s]) - r0;
        bs[s]->set_precision(bs[s], KF_PREC_FP32);
        model_free(m);
    }
    int64_t differ = 0, differ_cpu = 0;
    for (int64_t i = 0; i < DB * o->max_new; i++) {
        differ += out[0][i] != out[1][i];
        differ_cpu += out[0][i] != out[2][i];
    }
    printf("decode with graphs, %s: %lld of %lld ids differ from no graphs, %lld from the cpu; "
           "%lld graph launches, %lld recorded\n",
           name, (long long)differ, (long long)(DB * o->max_new), (long long)differ_cpu,
           (long long)launches[0], (long long)recs);
    T_EQ_INT(differ, 0, "decode %s: ids with graphs unlike those without", name);
    if (prec == KF_PREC_FP32)
        T_EQ_INT(differ_cpu, 0, "decode %s: ids with graphs unlike the cpu's", name);
    T_EQ_INT(launches[0], graphed, "decode %s: graph launches (one a step)", name);
    T_EQ_INT(recs, records, "decode %s: graphs recorded (one a bucket)", name);
    T_EQ_INT(launches[1], 0, "decode %s: graph launches with KF_CUDA_GRAPHS=0", name);
    for (int s = 0; s < 3; s++) free(out[s]);
}

/* A second GPU backend, made with KF_CUDA_GRAPHS=0 (NULL, a failed check,
 * when there is none). */
static kf_backend *cuda_without_graphs(void) {
    char msg[256] = "";
    setenv("KF_CUDA_GRAPHS", "0", 1);
    kf_backend *nog = kernels_cuda_create(0, msg, sizeof msg);
    unsetenv("KF_CUDA_GRAPHS");
    T_CHECK(nog != NULL, "no second CUDA backend: %s", msg);
    return nog;
}

static void decode_with_graphs(void) {
    kf_backend *nog = cuda_without_graphs();
    if (!nog) return;
    model_config ar = base_cfg(0), pf = base_cfg(0), pfg = base_cfg(1);
    pf.kind = pfg.kind = MODEL_PFLM;
    pf.k_train = pfg.k_train = 2;
    /* AR: 8 steps, the prefill then 7 of one row: 6 after the first; the
     * cache (10 rows) holds 5..8 rows in bucket 8, then 9 and 10 in bucket
     * 10 (the capacity): 2 graphs */
    decode_opts o = {.k = 1, .tau = 0.8, .max_new = 8, .seed = 7};
    decode_graphs(nog, "ar, sampled", &ar, &o, KF_PREC_FP32, 6, 2);
    /* K-Forcing k = 2, 11 tokens: the prefill, 4 steps of 2, then 1 token;
     * the 4 steps' caches end at 7 (uncaptured), 9, 11, 13 rows: bucket 14
     * (the capacity), 1 graph */
    o = (decode_opts){.k = 2, .tau = 1.0, .max_new = 11, .seed = 7};
    decode_graphs(nog, "k=2 argmax", &pf, &o, KF_PREC_FP32, 3, 1);
    decode_graphs(nog, "k=2 argmax fp16", &pf, &o, KF_PREC_FP16, 3, 1);
    decode_graphs(nog, "k=2 argmax, GPT-2 options", &pfg, &o, KF_PREC_FP32, 3, 1);
    o.freq_penalty = 0.5f;
    decode_graphs(nog, "k=2 frequency penalty", &pf, &o, KF_PREC_FP32, 3, 1);
    nog->destroy(nog);
}

/* A training pass over padded samples (valid_len) as train_step runs it:
 * model_forward_inputs's uploads, then its ops (forward, loss with a
 * device gradient factor, backward) eagerly, recorded (mode 1) or by
 * launching *graph (mode 2). */
static void padded_pass(model *m, model_ws *ws, const model_input *in, const int32_t *tg_d,
                        const float *gs_d, double *sum_d, int mode, void **graph) {
    kf_backend *b = m->be;
    b->zero(b, sum_d, sizeof(double));
    model_forward_inputs(m, ws, in, MODEL_TRAIN, NULL);
    if (mode == 2) {
        b->graph_launch(b, *graph);
        return;
    }
    if (mode == 1) b->graph_begin(b);
    model_zero_grads(m);
    model_forward_ops(m, ws, in, NULL);
    model_loss_acc(m, ws, tg_d, gs_d, sum_d);
    model_backward(m, ws);
    if (mode == 1) *graph = b->graph_end(b);
}

/* The pass of a training step over pad data recorded as a graph: eager,
 * recorded, then launched twice, each time on other ids, valid lengths and
 * targets, against the same passes on a GPU backend without graphs: the
 * loss sums and the gradients bitwise equal (the attention reads
 * model_forward_inputs's device copy of valid_len: nothing is uploaded
 * inside the graph, and each launch masks by its own lengths), and the
 * graph launched twice more after graph_end. */
static void padded_pass_graph(void) {
    kf_backend *nog = cuda_without_graphs();
    if (!nog) return;
    kf_backend *bs[2] = {be[1], nog};
    model_config cfg = base_cfg(0);
    layout lay;
    layout_ar(&lay, N);
    int64_t rows = B * lay.n_out;
    model *m[2];
    model_ws *ws[2];
    int32_t *tg_d[2];
    float *gs_d[2], gs = 1.0f / (float)rows;
    double *sum_d[2];
    for (int s = 0; s < 2; s++) {
        m[s] = model_create(bs[s], &cfg);
        randomize(m[s], 9);
        ws[s] = model_ws_create(m[s]);
        tg_d[s] = bs[s]->alloc(bs[s], (size_t)rows * sizeof(int32_t));
        gs_d[s] = bs[s]->alloc(bs[s], sizeof gs);
        bs[s]->upload(bs[s], gs_d[s], &gs, sizeof gs);
        sum_d[s] = bs[s]->alloc(bs[s], sizeof(double));
    }
    size_t gbytes = (size_t)m[0]->n_params * sizeof(float);
    float *g[2] = {malloc(gbytes), malloc(gbytes)};
    void *graph = NULL;
    int64_t l0 = graph_launches(be[1]);
    for (int it = 0; it < 4; it++) {
        int32_t x[B * N], vl[B], *tg = malloc((size_t)rows * sizeof(int32_t));
        tokens(x, B * N, 100 + (uint64_t)it);
        for (int b = 0; b < B; b++) vl[b] = N - (b * 5 + it * 3) % 11;
        for (int64_t r = 0; r < rows; r++) tg[r] = r % 7 == it ? -1 : x[(r * 5 + it) % (B * N)];
        model_input in = {.lay = &lay, .B = B, .ids = x, .valid_len = vl};
        double sum[2];
        for (int s = 0; s < 2; s++) {
            bs[s]->upload(bs[s], tg_d[s], tg, (size_t)rows * sizeof(int32_t));
            padded_pass(m[s], ws[s], &in, tg_d[s], gs_d[s], sum_d[s],
                        s        ? 0
                        : it < 2 ? it
                                 : 2,
                        &graph);
            bs[s]->download(bs[s], &sum[s], sum_d[s], sizeof(double));
            bs[s]->download(bs[s], g[s], m[s]->grads, gbytes);
        }
        int64_t differ = 0;
        for (int64_t i = 0; i < m[0]->n_params; i++) differ += memcmp(&g[0][i], &g[1][i], 4) != 0;
        const char *how = it == 0 ? "eager" : it == 1 ? "recorded" : "launched";
        T_CHECK(!memcmp(&sum[0], &sum[1], sizeof(double)),
                "padded pass %d (%s): loss sum %.17g, without graphs %.17g", it, how, sum[0],
                sum[1]);
        T_EQ_INT(differ, 0, "padded pass %d (%s): %lld of %lld gradients differ from no graphs", it,
                 how, (long long)differ, (long long)m[0]->n_params);
        free(tg);
    }
    T_EQ_INT(graph_launches(be[1]) - l0, 3, "padded passes: graph launches (graph_end's and 2)");
    be[1]->graph_free(be[1], graph);
    for (int s = 0; s < 2; s++) {
        bs[s]->free(bs[s], tg_d[s]), bs[s]->free(bs[s], gs_d[s]), bs[s]->free(bs[s], sum_d[s]);
        model_ws_free(ws[s]);
        model_free(m[s]);
        free(g[s]);
    }
    layout_free(&lay);
    nog->destroy(nog);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps every line printed before it */
    char msg[256] = "";
    be[0] = kernels_cpu_create();
    be[1] = kernels_cuda_create(0, msg, sizeof msg);
    T_CHECK(be[1] != NULL, "no CUDA backend: %s", msg);
    if (!be[1]) return T_DONE();
    model_config ar = base_cfg(0);
    model_config pf1 = base_cfg(0);
    pf1.kind = MODEL_PFLM;
    pf1.k_train = 1;
    stage_step("ar", SUP_AR, 1, NULL, KF_PREC_FP32, 1e-5, 1e-4, 0);
    stage_step("ar", SUP_AR, 1, NULL, KF_PREC_FP16, 2e-3, 2e-2, 0);
    stage_step("ar", SUP_AR, 1, NULL, KF_PREC_BF16, 2e-3, 2e-2, 0);
    stage_step("distill_ar k=1", SUP_DISTILL_AR, 1, &ar, KF_PREC_FP32, 1e-5, 1e-4, 0);
    stage_step("self_forcing 1->2", SUP_SELF_FORCING, 2, &pf1, KF_PREC_FP32, 1e-5, 1e-4, 0);
    /* the GPT-2 options (learned positions, biases, tied head) */
    model_config pf1g = base_cfg(1);
    pf1g.kind = MODEL_PFLM;
    stage_step("ar, GPT-2 options", SUP_AR, 1, NULL, KF_PREC_FP32, 1e-5, 1e-4, 1);
    stage_step("self_forcing 1->2, GPT-2 options", SUP_SELF_FORCING, 2, &pf1g, KF_PREC_FP32, 1e-5,
               1e-4, 1);
    /* the output layer in chunks of 5 rows (model_loss), cutting k's groups */
    logit_chunk = 5;
    stage_step("self_forcing 1->2, logits in chunks", SUP_SELF_FORCING, 2, &pf1, KF_PREC_FP32, 1e-5,
               1e-4, 0);
    stage_step("self_forcing 1->2, logits in chunks", SUP_SELF_FORCING, 2, &pf1, KF_PREC_FP16, 2e-3,
               2e-2, 0);
    logit_chunk = 0;
    /* head_dim 64: the attention of the 16-bit phases on the tensor cores,
     * reading and writing the attention block's 16-bit copies */
    n_heads = 1;
    stage_step("ar, head_dim 64", SUP_AR, 1, NULL, KF_PREC_FP16, 2e-3, 2e-2, 0);
    stage_step("ar, head_dim 64", SUP_AR, 1, NULL, KF_PREC_BF16, 2e-3, 2e-2, 0);
    /* a 16-bit teacher's two rounds on the copies (its context K/V handed
     * over as 16-bit rows, the second round's attention reading them) */
    model_config pf1h = base_cfg(0);
    pf1h.kind = MODEL_PFLM;
    pf1h.k_train = 1;
    teacher_prec = KF_PREC_BF16;
    stage_step("self_forcing 1->2, bf16 teacher, head_dim 64", SUP_SELF_FORCING, 2, &pf1h,
               KF_PREC_BF16, 2e-3, 2e-2, 0);
    n_heads = HEADS;
    stage_step("self_forcing 1->2, bf16 teacher", SUP_SELF_FORCING, 2, &pf1, KF_PREC_FP32, 1e-5,
               1e-4, 0);
    teacher_prec = KF_PREC_FP32;
    batch_invariance("distill_ar k=1", SUP_DISTILL_AR, 1, &ar, KF_PREC_FP32);
    batch_invariance("self_forcing 1->2", SUP_SELF_FORCING, 2, &pf1, KF_PREC_FP32);
    /* a 16-bit teacher (teacher_precision) stays batch-invariant */
    batch_invariance("distill_ar k=1, bf16 teacher", SUP_DISTILL_AR, 1, &ar, KF_PREC_BF16);
    batch_invariance("self_forcing 1->2, fp16 teacher", SUP_SELF_FORCING, 2, &pf1, KF_PREC_FP16);
    /* ... with its attention on the tensor cores (head_dim 64) */
    n_heads = 1;
    model_config ar64 = base_cfg(0), pf64 = base_cfg(0);
    pf64.kind = MODEL_PFLM;
    n_heads = HEADS;
    batch_invariance("distill_ar k=1, bf16 teacher, head_dim 64", SUP_DISTILL_AR, 1, &ar64,
                     KF_PREC_BF16);
    batch_invariance("self_forcing 1->2, fp16 teacher, head_dim 64", SUP_SELF_FORCING, 2, &pf64,
                     KF_PREC_FP16);
    save_load_continue();
    decode_with_graphs();
    padded_pass_graph();
    host_syncs_in_a_step("distill_ar k=2", SUP_DISTILL_AR, &ar);
    host_syncs_in_a_step("self_forcing 1->2", SUP_SELF_FORCING, &pf1);
    be[0]->destroy(be[0]);
    be[1]->destroy(be[1]);
    return T_DONE();
}
