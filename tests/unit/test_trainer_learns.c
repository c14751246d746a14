/* Stage 0 of configs/tiny-gpt2.yaml learns: after 100 steps of `kf train` on the
 * embedded OWT-like shards, the validation loss is well below the unigram
 * entropy of the validation data (computed here from the shards), i.e. the
 * model uses context. Builds the shards first when they are missing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/runconfig.h"
#include "pipeline/shard_reader.h"
#include "tests/test.h"

#define STEPS 100
#define MARGIN 0.3 /* nats below the unigram entropy */

/* Entropy (nats) of the split's token distribution over target positions. */
static double unigram_entropy(const char *dir, const char *split) {
    shard_set *s;
    kf_err err = {{0}};
    if (shard_set_open(dir, split, &s, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NAN;
    }
    int64_t V = shard_set_vocab_size(s), n = shard_set_count(s), L = shard_set_seq_len(s);
    double *c = calloc((size_t)V, sizeof *c), tot = 0, H = 0;
    int32_t *ids = malloc((size_t)L * sizeof *ids), len;
    for (int64_t i = 0; i < n; i++) {
        if (shard_set_get(s, i, ids, &len, &err)) return NAN;
        for (int64_t t = 1; t < len; t++) c[ids[t]]++, tot++;
    }
    for (int64_t v = 0; v < V; v++)
        if (c[v] > 0) H -= c[v] / tot * log(c[v] / tot);
    free(c), free(ids);
    shard_set_close(s);
    return H;
}

int main(void) {
    const char *kf = getenv("KF_BIN") ? getenv("KF_BIN") : "bin/kf";
    const char *cfg = "configs/tiny-gpt2.yaml";
    runconfig *rc;
    kf_err err = {{0}};
    if (runconfig_load(cfg, 0, NULL, &rc, &err)) {
        T_CHECK(0, "%s", err.msg);
        return T_DONE();
    }
    char cmd[8192], path[4096];
    snprintf(path, sizeof path, "%s/manifest.yaml", rc->data_valid);
    if (!fs_exists(path)) {
        snprintf(cmd, sizeof cmd, "%s shards build %s >/dev/null 2>&1", kf, cfg);
        T_EQ_INT(system(cmd), 0, "building the tiny shards failed: %s", cmd);
    }
    double H = unigram_entropy(rc->data_valid, "valid");
    T_CHECK(isfinite(H), "unigram entropy of the validation split: %.4f", H);
    T_CHECK(H > 1, "unigram entropy of the validation split: %.4f", H);

    char dir[] = "/tmp/kf_learns_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    snprintf(cmd, sizeof cmd,
             "%s train %s --stage %s --run-dir %s stages.0.steps=%d defaults.checkpoint_every=0 "
             "defaults.log_every=25 2>&1 | tail -3",
             kf, cfg, rc->stages[0].name, dir, STEPS);
    T_EQ_INT(system(cmd), 0, "kf train failed");

    /* the last record holds the final validation losses */
    char *buf;
    size_t len;
    double val = NAN, val_ema = NAN, first_loss = NAN;
    snprintf(path, sizeof path, "%s/stages/%s/log.jsonl", dir, rc->stages[0].name);
    if (fs_read_file(path, &buf, &len, &err) == 0) {
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
            json_doc *d = json_parse(line, strlen(line), path, &err);
            if (!d) continue;
            const json *r = json_root(d), *v = json_get(r, "val_loss"),
                       *ve = json_get(r, "val_loss_ema"), *l = json_get(r, "loss");
            if (v && v->type == JSON_NUMBER) val = v->num;
            if (ve && ve->type == JSON_NUMBER) val_ema = ve->num;
            if (l && l->type == JSON_NUMBER && isnan(first_loss)) first_loss = l->num;
            json_free(d);
        }
        free(buf);
    }
    printf(
        "unigram entropy (valid) %.4f nats; first training loss %.4f; after %d steps: validation "
        "loss %.4f, EMA weights %.4f\n",
        H, first_loss, STEPS, val, val_ema);
    T_CHECK(val < H - MARGIN,
            "validation loss %.4f is not %.1f nats below the unigram entropy %.4f", val, MARGIN, H);
    T_CHECK(val_ema < H, "EMA weights' validation loss %.4f is not below the unigram entropy %.4f",
            val_ema, H);
    fs_rm_rf(dir, &err);
    runconfig_free(rc);
    return T_DONE();
}
