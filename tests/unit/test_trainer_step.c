/* tests/unit/test_trainer_step.c — the roofline prices the trainer's step.
 *
 * For every stage kind that trains, a real optimizer step (train_run on a
 * recorder over the CPU backend, on shards written here) and the roofline's
 * priced step (bench/roofline/roofline.h, on a dry recorder) issue the same
 * ops with the same shapes, in the same order. Both run step_run
 * (trainer/train/step.h); this checks that the roofline builds the stage
 * (models, teacher, supervision, optimizer state, batch) as the trainer
 * does, so the price list cannot drift from what is trained.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/roofline/roofline.h"
#include "common/runconfig.h"
#include "kernels/record.h"
#include "tests/test.h"
#include "tests/unit/trainer_fixture.h"
#include "trainer/train/train.h"

enum { SEQ = 16, VOCAB = 40, BATCH = 2 };

/* A recorded op: its name and shape. */
typedef struct op {
    char name[32], shape[96];
} op;

typedef struct ops {
    op *v;
    int64_t n;
} ops;

static void ops_take(ops *o, kf_backend *be) {
    int64_t n;
    const kf_op_rec *r = kernels_record_ops(be, &n);
    o->v = realloc(o->v, (size_t)(n ? n : 1) * sizeof *o->v);
    o->n = n;
    for (int64_t i = 0; i < n; i++) {
        snprintf(o->v[i].name, sizeof o->v[i].name, "%s", r[i].op);
        snprintf(o->v[i].shape, sizeof o->v[i].shape, "%s", r[i].cost.shape);
    }
}

static kf_backend *wrap(kf_backend *be, void *ctx) { return kernels_record_create(be, 0); }

/* The real step's ops: from the start of the step to its end. */
static void on_step(void *ctx, kf_backend *be, int begin) {
    if (begin) kernels_record_clear(be);
    else ops_take(ctx, be);
}

/* The first index where a and b differ (op or shape), printing both; -1: none. */
static int64_t first_difference(const ops *a, const ops *b) {
    for (int64_t i = 0; i < a->n && i < b->n; i++)
        if (strcmp(a->v[i].name, b->v[i].name) || strcmp(a->v[i].shape, b->v[i].shape)) {
            fprintf(stderr, "op %lld: trainer %s %s, roofline %s %s\n", (long long)i, a->v[i].name,
                    a->v[i].shape, b->v[i].name, b->v[i].shape);
            return i;
        }
    return a->n == b->n ? -1 : (a->n < b->n ? a->n : b->n);
}

int main(void) {
    char dir[] = "/tmp/kf_test_step_XXXXXX";
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char data[FIXTURE_PATH], cfg[FIXTURE_PATH], run[FIXTURE_PATH];
    fixture_run(dir, data, cfg, run, 64, 16, SEQ, VOCAB);
    fixture_write(
        cfg,
        "name: step\n"
        "data: {train: %s, valid: %s}\n"
        "model: {hidden: 16, heads: 2, blocks: 1, vocab: %d, seq_len: %d}\n"
        "defaults: {batch: %d, lr: 1.0e-3, warmup: 0, seed: 7, checkpoint_every: 100,\n"
        "           eval_batches: 1, log_every: 1, precision: [{mode: fp16}]}\n"
        "stages:\n"
        "  - {name: ar, kind: ar, steps: 1}\n"
        "  - {name: k1, kind: distill_ar, teacher: ar, init: ar, k: 1, steps: 1, tau: [0.5, 1.0]}\n"
        "  - {name: k2, kind: self_forcing, teacher: k1, k: 2, steps: 1, tau: [0.5, 1.0]}\n"
        "  - {name: mtp, kind: noise_inversion_mtp, teacher: ar, init: ar, k: 2, steps: 1}\n"
        "  - {name: nic, kind: noise_inversion_causal, teacher: ar, init: ar, k: 2, steps: 1}\n"
        "resources: {ranks: 1, nodes: 1, gpus_per_node: 0, backend: cpu}\n",
        data, data, VOCAB, SEQ, BATCH);
    runconfig *rc;
    kf_err err = {{0}};
    T_REQUIRE(runconfig_load(cfg, 0, NULL, &rc, &err) == 0, "%s", err.msg);
    /* the model as the trainer derives it: the data's vocabulary sets the mask */
    model_config base = {.hidden = 16,
                         .heads = 2,
                         .blocks = 1,
                         .vocab = VOCAB,
                         .seq_len = SEQ,
                         .mask_id = runconfig_mask_id(&rc->model, VOCAB),
                         .kind = MODEL_AR,
                         .head = HEAD_SHARED,
                         .k_train = 1};
    dist d = {.world = 1, .local_world = 1};
    ops real = {0}, priced = {0};
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *st = &rc->stages[i];
        train_args a = {.config = cfg,
                        .stage = st->name,
                        .run_dir = run,
                        .wrap_backend = wrap,
                        .on_step = on_step,
                        .hook_ctx = &real};
        real.n = 0;
        T_EQ_INT(train_run(&a, &d), 0, "stage %s: kf train", st->name);
        kf_backend *dry = kernels_record_create(NULL, 0);
        roofline_stage *s = roofline_stage_create(dry, &base, st, 1, 0, &err);
        T_CHECK(s != NULL, "stage %s: roofline_stage_create: %s", st->name, err.msg);
        if (!s) {
            dry->destroy(dry);
            continue;
        }
        kernels_record_clear(dry);
        roofline_marks mk;
        roofline_stage_step(s, BATCH, SEQ, &mk);
        ops_take(&priced, dry);
        T_CHECK(real.n > 0, "stage %s: the real step recorded ops (%lld)", st->name,
                (long long)real.n);
        T_EQ_INT(priced.n, real.n, "stage %s: ops in the priced step against the real one",
                 st->name);
        T_EQ_INT(first_difference(&real, &priced), -1,
                 "stage %s: first op where the real and the priced step differ", st->name);
        roofline_stage_free(s);
        dry->destroy(dry);
    }
    free(real.v), free(priced.v);
    runconfig_free(rc);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return T_DONE();
}
