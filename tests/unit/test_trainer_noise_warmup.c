/* tests/unit/test_trainer_noise_warmup.c — a stage's noise_warmup holds the
 * backbone (common/runconfig.h).
 *
 * An AR stage of 2 steps, then two distill_ar students initialised from it, 3
 * steps each: with noise_warmup 3 every tensor but the noise encoder's ends
 * bitwise as the AR stage left it (the step checkpoint's weights against
 * the AR stage's final ones, which init: loads), while the encoder moved; with noise_warmup 2 the
 * last step moves the backbone too (so the first check can fail). Milliseconds of training on the
 * fixture's shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/runconfig.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "tests/unit/trainer_fixture.h"
#include "trainer/model/model.h"
#include "trainer/train/train.h"

enum { SEQ = 16, VOCAB = 40 };

/* Tensors of the noise encoder and of everything else in which a and b
 * differ (by bits); a's tensors that b lacks (an AR model's encoder) are
 * not counted. */
typedef struct {
    int encoder, other;
} diffs;

static diffs compare(const model *a, const model *b) {
    diffs d = {0, 0};
    size_t na = (size_t)a->n_params * sizeof(float), nb = (size_t)b->n_params * sizeof(float);
    float *ha = malloc(na), *hb = malloc(nb);
    a->be->download(a->be, ha, a->params, na);
    b->be->download(b->be, hb, b->params, nb);
    for (int i = 0; i < a->n_tensors; i++) {
        const model_tensor *t = &a->tensors[i], *u = model_find(b, t->name);
        int enc = strncmp(t->name, "noise_encoder.", 14) == 0;
        if (!u) continue;
        if (memcmp(ha + t->offset, hb + u->offset, (size_t)t->numel * sizeof(float))) {
            if (enc) d.encoder++;
            else d.other++;
        }
    }
    free(ha);
    free(hb);
    return d;
}

int main(void) {
    char dir[] = "/tmp/kf_test_noise_warmup_XXXXXX";
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char data[FIXTURE_PATH], cfg[FIXTURE_PATH], run[FIXTURE_PATH], path[4200];
    fixture_run(dir, data, cfg, run, 64, 16, SEQ, VOCAB);
    fixture_write(cfg,
                  "name: warm\n"
                  "data: {train: %s, valid: %s}\n"
                  "model: {hidden: 16, heads: 2, blocks: 1, vocab: %d, seq_len: %d}\n"
                  "defaults: {batch: 2, lr: 1.0e-2, warmup: 0, seed: 7, checkpoint_every: 100,\n"
                  "           eval_batches: 1, log_every: 1}\n"
                  "stages:\n"
                  "  - {name: ar, kind: ar, steps: 2}\n"
                  "  - {name: held, kind: distill_ar, teacher: ar, init: ar, k: 1, steps: 3,\n"
                  "     noise_warmup: 3}\n"
                  "  - {name: freed, kind: distill_ar, teacher: ar, init: ar, k: 1, steps: 3,\n"
                  "     noise_warmup: 2}\n"
                  "resources: {ranks: 1, nodes: 1, gpus_per_node: 0, backend: cpu}\n",
                  data, data, VOCAB, SEQ);
    dist d = {.world = 1, .local_world = 1};
    const char *stages[] = {"ar", "held", "freed"};
    for (int i = 0; i < 3; i++) {
        train_args a = {.config = cfg, .stage = stages[i], .run_dir = run};
        T_REQUIRE(train_run(&a, &d) == 0, "stage %s: kf train", stages[i]);
    }
    kf_backend *be = kernels_cpu_create();
    kf_err err = {{0}};
    model *m[3];
    /* the students start from the AR stage's final (EMA) weights; theirs are
     * the step checkpoint's, not their EMA */
    for (int i = 0; i < 3; i++) {
        if (i)
            snprintf(path, sizeof path, "%s/stages/%s/ckpt/step-3/model.safetensors", run,
                     stages[i]);
        else snprintf(path, sizeof path, "%s/stages/ar/final/model.safetensors", run);
        m[i] = model_load(be, path, &err);
        T_REQUIRE(m[i] != NULL, "load %s: %s", path, err.msg);
    }
    diffs held = compare(m[1], m[0]), freed = compare(m[2], m[0]);
    T_EQ_INT(held.other, 0, "noise_warmup 3 of 3 steps: backbone tensors changed");
    T_CHECK(freed.other > 0, "noise_warmup 2 of 3 steps: the last step changed no backbone tensor");
    /* the encoder's start: the stage's init at its seed, as train.c makes it */
    model *init = model_create(be, &m[1]->cfg);
    model_init(init, 7);
    diffs enc = compare(m[1], init);
    printf("tensors changed: backbone from the AR stage's, noise_warmup 3 of 3 steps %d, 2 of 3 "
           "%d; the held student's encoder from its init %d\n",
           held.other, freed.other, enc.encoder);
    T_CHECK(enc.encoder > 0, "noise_warmup 3 of 3 steps: the encoder did not train");
    model_free(init);
    for (int i = 0; i < 3; i++) model_free(m[i]);
    be->destroy(be);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return T_DONE();
}
