/* trainer/train/step.c — one optimizer step on one rank (see step.h). */
#include "trainer/train/step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

enum { GKEY_N = 1, MKEY_N = 7 };

static size_t key_len(const step *s) { return (size_t)(GKEY_N + s->opt.accum * MKEY_N); }

step *step_create(const step_opts *o) {
    step *s = kf_calloc(1, sizeof *s);
    s->opt = *o;
    kf_backend *be = o->be;
    model *m = o->m;
    s->sb = kf_calloc(1, sizeof *s->sb);
    s->mbs = kf_calloc((size_t)o->accum, sizeof *s->mbs);
    size_t sbytes = (size_t)o->shard.count * sizeof(float);
    s->ema = be->alloc(be, sbytes);
    s->adam_m = be->alloc(be, sbytes);
    s->adam_v = be->alloc(be, sbytes);
    s->acc = be->alloc(be, (size_t)m->n_params * sizeof(float));
    s->dev = be->alloc(be, sizeof *s->dev);
    be->copy(be, s->ema, m->params + o->shard.off, sbytes);
    s->os = optim_init(o->o);
    graph_cache_init(&s->cache, key_len(s));
    s->key = kf_calloc(key_len(s), sizeof *s->key);
    s->g_mb = kf_calloc((size_t)o->accum, sizeof *s->g_mb);
    return s;
}

static void graphs_free(step *s) {
    kf_backend *be = s->opt.be;
    for (int64_t a = 0; a < s->opt.accum; a++) be->graph_free(be, s->g_mb[a]), s->g_mb[a] = NULL;
    be->graph_free(be, s->g_opt);
    s->g_opt = NULL;
}

void step_free(step *s) {
    if (!s) return;
    kf_backend *be = s->opt.be;
    graphs_free(s);
    graph_cache_free(&s->cache);
    free(s->key);
    free(s->g_mb);
    for (int64_t a = 0; a < s->opt.accum; a++) {
        step_mb *mb = &s->mbs[a];
        if (mb->targets_d) be->free(be, mb->targets_d);
        free(mb->ids), free(mb->len), free(mb->z), free(mb->tau), free(mb->loss_w);
    }
    free(s->mbs);
    free(s->keys);
    free(s->sb);
    be->free(be, s->ema), be->free(be, s->adam_m), be->free(be, s->adam_v);
    be->free(be, s->acc), be->free(be, s->dev);
    free(s);
}

static void mark(step *s, step_part p) {
    if (s->mark) s->mark(s->mark_ctx, p);
}

void step_build(step *s, const loader_batch *lb, int64_t slot) {
    if (lb->n > s->keys_cap) {
        s->keys = kf_realloc(s->keys, (size_t)lb->n * sizeof *s->keys);
        s->keys_cap = lb->n;
    }
    for (int64_t i = 0; i < lb->n; i++) s->keys[i] = (uint64_t)lb->pos[i];
    sup_build_slot(s->opt.sup, slot, s->sb, lb->ids, lb->n, lb->seq_len,
                   s->opt.pad ? lb->len : NULL, s->keys);
}

static void *dup_or_grow(void *dst, const void *src, size_t bytes) {
    dst = kf_realloc(dst, bytes ? bytes : 1);
    if (bytes) memcpy(dst, src, bytes);
    return dst;
}

const int32_t *step_targets(step *s, step_mb *mb) {
    kf_backend *be = s->opt.be;
    const sup_batch *sb = s->sb;
    size_t bytes = (size_t)sb->rows * sizeof(int32_t);
    if (bytes > mb->targets_cap) {
        if (mb->targets_d) be->free(be, mb->targets_d);
        mb->targets_d = be->alloc(be, bytes);
        mb->targets_cap = bytes;
    }
    if (sb->targets_d) be->copy(be, mb->targets_d, sb->targets_d, bytes);
    else be->upload(be, mb->targets_d, sb->targets, bytes);
    mb->n_targets = sb->n_targets;
    return mb->targets_d;
}

/* Keeps the latest supervision as micro-batch mb. */
static void store(step *s, step_mb *mb) {
    const sup_batch *sb = s->sb;
    const model *m = s->opt.m;
    mb->B = sb->in.B;
    mb->L = sb->lay->L;
    mb->zdim = m->cfg.head == HEAD_MTP ? m->cfg.k_train : 1;
    mb->rows = sb->rows;
    mb->ids = dup_or_grow(mb->ids, sb->in.ids, (size_t)(mb->B * mb->L) * sizeof(int32_t));
    mb->has_len = sb->in.valid_len != NULL;
    if (mb->has_len)
        mb->len = dup_or_grow(mb->len, sb->in.valid_len, (size_t)mb->B * sizeof(int32_t));
    mb->has_z = sb->in.z != NULL;
    if (mb->has_z) {
        mb->z = dup_or_grow(mb->z, sb->in.z, (size_t)(mb->B * mb->L * mb->zdim) * sizeof(double));
        mb->tau = dup_or_grow(mb->tau, sb->in.tau, (size_t)mb->B * sizeof(double));
    }
    mb->has_w = sb->in.loss_w != NULL;
    if (mb->has_w)
        mb->loss_w = dup_or_grow(mb->loss_w, sb->in.loss_w, (size_t)mb->B * sizeof(float));
    step_targets(s, mb);
}

static model_input stored_input(const step *s, const step_mb *mb) {
    return (model_input){.lay = s->sb->lay,
                         .B = mb->B,
                         .ids = mb->ids,
                         .z = mb->has_z ? mb->z : NULL,
                         .tau = mb->has_z ? mb->tau : NULL,
                         .loss_w = mb->has_w ? mb->loss_w : NULL,
                         .valid_len = mb->has_len ? mb->len : NULL};
}

/* The last micro-batch's backward reports a final range of m->grads: add it
 * to the accumulator (acc += g, as the earlier micro-batches) and let the
 * all-reduce of its bucket start. */
static void grads_ready(void *ctx, int64_t off, int64_t count) {
    step *s = ctx;
    if (s->opt.accum > 1)
        s->opt.be->add_inplace(s->opt.be, s->acc + off, s->opt.m->grads + off, count);
    dist_grads_ready(s->opt.d, off, count);
}

/* What the step's recorded ops depend on besides the ctl's scalars and the
 * model's buffers: the precision, and each micro-batch's shape, its
 * inputs' presence and its targets' buffer. */
static graph_mode graphs_mode(step *s, runconfig_prec prec) {
    /* per-sample loss weights are host values of the loss's ops */
    if (!s->opt.graphs || s->mbs[0].has_w) return GRAPH_EAGER;
    int64_t *key = s->key;
    key[0] = prec;
    for (int64_t a = 0; a < s->opt.accum; a++) {
        const step_mb *mb = &s->mbs[a];
        int64_t *k = key + GKEY_N + a * MKEY_N;
        k[0] = mb->B, k[1] = mb->L, k[2] = mb->rows, k[3] = mb->has_len, k[4] = mb->has_z;
        k[5] = (int64_t)(intptr_t)mb->targets_d, k[6] = (int64_t)(intptr_t)s->sb->lay;
    }
    graph_mode mode = graph_cache_mode(&s->cache, key);
    if (mode != GRAPH_LAUNCH) graphs_free(s);
    return mode;
}

/* Runs ops(s, ctx) as mode says: as it is called, recorded into *graph
 * (which runs it once), or by launching *graph. */
static void graph_run(step *s, graph_mode mode, void **graph, void (*ops)(step *, void *),
                      void *ctx) {
    kf_backend *be = s->opt.be;
    if (mode == GRAPH_LAUNCH) {
        be->graph_launch(be, *graph);
        s->graph_launches++;
        return;
    }
    if (mode == GRAPH_RECORD) be->graph_begin(be);
    ops(s, ctx);
    if (mode == GRAPH_RECORD) *graph = be->graph_end(be);
}

/* A micro-batch's device ops after its uploads (model_forward_inputs). */
typedef struct micro_run {
    const model_input *in;
    int64_t a;
    float *g; /* the step's gradient: m->grads, or the accumulator */
} micro_run;

static void micro_ops(step *s, void *ctx) {
    const micro_run *r = ctx;
    const step_opts *o = &s->opt;
    kf_backend *be = o->be;
    model *m = o->m;
    model_zero_grads(m);
    model_forward_ops(m, o->ws, r->in, NULL);
    if (o->st->kind == RC_KIND_SELF_FORCING && o->o->new_weight != 1.0)
        model_weight_dlogits(m, o->ws, o->st->k, o->st->k / 2, o->st->k / 2,
                             (float)o->o->new_weight);
    model_loss_acc(m, o->ws, s->mbs[r->a].targets_d, &s->dev->ctl.xent_scale, &s->dev->loss);
    /* micro-batch gradients are summed in order: acc = g0, acc += g1, ...;
     * the last one's parts are added (grads_ready) and all-reduced as the
     * backward finishes them */
    if (r->a == o->accum - 1) {
        dist_grads_begin(o->d, be, r->g, m->n_params, o->bucket, o->zero1);
        model_backward_notify(m, o->ws, grads_ready, s);
    } else {
        model_backward(m, o->ws);
        if (r->a == 0) be->copy(be, s->acc, m->grads, (size_t)m->n_params * sizeof(float));
        else be->add_inplace(be, s->acc, m->grads, m->n_params);
    }
}

/* The gradient check (of grads; NULL: of ctl->sumsq as uploaded) and the
 * update of this rank's shard. */
typedef struct update_run {
    const float *grads;
    int64_t index;
} update_run;

static void update_ops(step *s, void *ctx) {
    const update_run *u = ctx;
    const step_opts *o = &s->opt;
    model *m = o->m;
    float *g = o->accum > 1 ? s->acc : m->grads;
    optim_check(o->be, o->o, &s->dev->ctl, u->grads, u->grads ? m->n_params : 0);
    optim_apply(o->be, o->o, &s->os, u->index, &s->dev->ctl, m->params + o->shard.off,
                g + o->shard.off, s->adam_m, s->adam_v, s->ema, o->shard.count);
}

/* noise_warmup: the gradient of every tensor before the noise encoder (the
 * backbone and the head; the encoder is a shared-head PFLM's last tensors,
 * model.h) set to zero, so AdamW, whose moments start at zero and which
 * decays no weight here (weight_decay 0), leaves them as they are. */
static void hold_backbone(step *s, float *g) {
    const model_tensor *t = model_find(s->opt.m, "noise_encoder.combined_proj.weight");
    KF_CHECK(t && s->opt.m->cfg.head == HEAD_SHARED, "noise_warmup: not a shared-head PFLM");
    s->opt.be->zero(s->opt.be, g, (size_t)t->offset * sizeof(float));
}

step_result step_run(step *s, int64_t index, step_next_fn next, void *ctx) {
    const step_opts *o = &s->opt;
    kf_backend *be = o->be;
    model *m = o->m;
    step_result res = {.prec = runconfig_precision_at(o->o, index)};
    be->set_precision(be, optim_precision(res.prec));
    /* tau curriculum: the range's upper end opens up over the first steps
     * (a function of the step alone, so resumes draw the same tau) */
    int64_t tc = o->o->tau_curriculum;
    if (tc && o->st->kind != RC_KIND_AR) {
        double f = index >= tc ? 1.0 : (double)(index + 1) / (double)tc;
        sup_set_tau(o->sup, o->st->tau_min, o->st->tau_min + f * (o->st->tau_max - o->st->tau_min));
    }
    mark(s, STEP_SUPERVISION);
    double count = 0; /* targets over the global batch */
    for (int64_t a = 0; a < o->accum; a++) {
        step_build(s, next(ctx, a), a);
        store(s, &s->mbs[a]);
        count += (double)s->mbs[a].n_targets;
    }
    dist_allreduce_sum_f64(o->d, &count, 1);
    res.count = count > 0 ? count : 1.0;
    mark(s, STEP_STUDENT);
    float *g = o->accum > 1 ? s->acc : m->grads;
    graph_mode mode = graphs_mode(s, res.prec);
    /* the step's factors (the loss's included), read by its ops on the device */
    optim_factors(be, o->o, &s->os, index, res.count, &s->dev->ctl);
    be->zero(be, &s->dev->loss, sizeof(double));
    for (int64_t a = 0; a < o->accum; a++) {
        model_input in = stored_input(s, &s->mbs[a]);
        model_forward_inputs(m, o->ws, &in, MODEL_TRAIN, NULL);
        micro_run r = {&in, a, g};
        int eager = a == o->accum - 1 && o->d->world > 1;
        graph_run(s, eager ? GRAPH_EAGER : mode, &s->g_mb[a], micro_ops, &r);
    }
    res.exposed = dist_grads_wait(o->d);
    if (index < o->o->noise_warmup) hold_backbone(s, g);
    mark(s, STEP_OPTIMIZER);
    /* The gradient check, then the update, both on the device. ZeRO-1: the
     * norm from every rank's shard (a host reduction, so the host knows the
     * skip), the update of this rank's shard, then the updated weights
     * gathered (a skipped step changed none) */
    int gather = o->zero1;
    if (o->zero1) {
        double ss = dist_sumsq(o->d, be, g, m->n_params);
        be->upload(be, &s->dev->ctl.sumsq, &ss, sizeof ss);
        gather = isfinite(ss);
    }
    update_run u = {o->zero1 ? NULL : g, index};
    graph_run(s, mode, &s->g_opt, update_ops, &u);
    if (mode == GRAPH_LAUNCH) s->graph_steps++;
    /* recorded graphs are ready (a backend that gave none records nothing:
     * eager from now on) */
    if (mode == GRAPH_RECORD) graph_cache_recorded(&s->cache, s->g_opt != NULL);
    if (gather) dist_allgather(o->d, be, m->params, m->n_params);
    model_params_changed(m);
    /* the step's one read of its scalars (loss, gradient check), which also
     * waits for the step */
    optim_dev got;
    be->download(be, &got, s->dev, sizeof got);
    mark(s, STEP_END);
    res.r = optim_settle(o->o, &s->os, index, &got.ctl);
    res.loss = got.loss;
    dist_allreduce_sum_f64(o->d, &res.loss, 1);
    return res;
}
