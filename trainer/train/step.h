/* trainer/train/step.h — one optimizer step on one rank: the one place that
 * orders a step's supervision, model and optimizer calls (train.h lists the
 * sequence). Two users run it: the trainer (trainer/train/train.c, with its
 * loader, its ranks and CUDA graphs) and the roofline
 * (bench/roofline/roofline.h), which runs it on a recording backend and
 * prices the ops it issues; so the price list is the trainer's step, not a
 * copy of it (tests/unit/test_trainer_step.c compares the two recordings).
 *
 * What differs between the users is outside: where the micro-batches come
 * from (step_next_fn: the loader, or synthetic ids), the ranks (dist.h; the
 * roofline passes a one-rank dist), and whether steps may run as recorded
 * graphs (step_opts.graphs).
 */
#ifndef KF_TRAINER_TRAIN_STEP_H
#define KF_TRAINER_TRAIN_STEP_H

#include <stdint.h>

#include "common/runconfig.h"
#include "trainer/model/model.h"
#include "trainer/train/dist.h"
#include "trainer/train/graph_cache.h"
#include "trainer/train/loader.h"
#include "trainer/train/optim.h"
#include "trainer/train/supervision.h"

/** How a step is made. The pointers are the caller's and outlive the step. */
typedef struct step_opts {
    kf_backend *be;
    model *m;
    model_ws *ws;
    sup_ctx *sup; /* the stage's supervision (its teacher passes) */
    const runconfig_stage *st;
    const runconfig_opts *o;
    dist *d;
    int64_t accum;    /* micro-batches per step */
    int64_t bucket;   /* all-reduce bucket in floats (dist_grads_begin) */
    int pad;          /* pass the samples' valid lengths (`pad` data) */
    int zero1;        /* ZeRO-1: the optimizer state is shard's only */
    dist_range shard; /* the range of the flat parameters this rank updates */
    int graphs;       /* 1: record and launch CUDA graphs (kernels.h graph_begin) */
} step_opts;

/** A micro-batch's student input and targets, copied out of the sup_ctx so
 *  that all of a step's micro-batches can be built (and their targets
 *  counted) before the first backward. The targets stay on the device. */
typedef struct step_mb {
    int64_t B, L, zdim, rows, n_targets;
    int32_t *ids, *len;
    int32_t *targets_d; /* device [rows] */
    size_t targets_cap;
    double *z, *tau;
    float *loss_w; /* [B] model_input.loss_w (has_w) */
    int has_len, has_z, has_w;
} step_mb;

/** The parts of a step, in order, for step_opts' mark hook. */
typedef enum {
    STEP_SUPERVISION, /* after set_precision: the micro-batches' supervision (teacher passes) */
    STEP_STUDENT,     /* the student's forward, loss and backward */
    STEP_OPTIMIZER,   /* the gradient check and the update */
    STEP_END          /* after the step's one read of its scalars */
} step_part;

/** One rank's step state: the optimizer's (read and written by checkpoints)
 *  and the step's buffers. */
typedef struct step {
    step_opts opt;
    sup_batch *sb;  /* the latest supervision (owned by sup) */
    step_mb *mbs;   /* [accum] the current step's micro-batches */
    uint64_t *keys; /* [keys_cap] a micro-batch's noise keys */
    int64_t keys_cap;
    float *acc;                   /* [n_params] gradient accumulator */
    float *ema, *adam_m, *adam_v; /* [shard.count] */
    optim_dev *dev;               /* the step's device scalars */
    optim_state os;               /* the optimizer's host state */
    /* recorded graphs: one per micro-batch (but the last with several ranks,
     * whose backward feeds the all-reduce) and one for the update, keyed by
     * precision and each micro-batch's shapes and buffers */
    graph_cache cache;
    int64_t *key;
    void **g_mb, *g_opt;
    int64_t graph_steps, graph_launches;     /* steps run as graphs, launches */
    void (*mark)(void *ctx, step_part part); /* NULL, or called at each part */
    void *mark_ctx;
} step;

/** What a step did (host values; rank sums). */
typedef struct step_result {
    optim_result r;      /* the optimizer's decision (optim_settle) */
    double loss;         /* the targets' summed loss over all ranks */
    double count;        /* the targets over the global batch (>= 1) */
    double exposed;      /* the gradient all-reduce's exposed seconds */
    runconfig_prec prec; /* the step's precision phase */
} step_result;

/** Micro-batch a of the step (the loader's batch, or one made to measure). */
typedef const loader_batch *(*step_next_fn)(void *ctx, int64_t a);

/** A step over o's model: allocates the optimizer state (EMA = the current
 *  weights of the shard) and the step's buffers. */
step *step_create(const step_opts *o);
void step_free(step *s);

/** Runs optimizer step `index` (0-based; the tau curriculum and the
 *  precision phase depend on it): takes accum micro-batches from next,
 *  builds their supervision, sums the target count over ranks, runs each
 *  micro-batch's forward, loss and backward, the gradient all-reduce (or
 *  reduce-scatter), the gradient check and the update, then reads the
 *  step's scalars once and settles the optimizer (optim_settle). */
step_result step_run(step *s, int64_t index, step_next_fn next, void *ctx);

/** The supervision of one loader batch into s->sb, as micro-batch slot's
 *  graph when it can be (sup_build_slot; -1: never). Noise keys are the
 *  samples' stream positions. */
void step_build(step *s, const loader_batch *lb, int64_t slot);

/** Copies s->sb's targets into mb's device buffer and returns it. */
const int32_t *step_targets(step *s, step_mb *mb);

#endif
