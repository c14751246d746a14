/* tests/unit/trainer_fixture.h — synthetic shard sets for the trainer's C
 * tests (written with the pipeline's real shard writer and manifest, so the
 * loader reads exactly what `kf shards build` produces).
 *
 * Sample i of a split holds ids (i * 7 + t * 3) % vocab for t < seq_len: the
 * id at position 0 identifies the sample, and `wrap` packing is used. */
#ifndef KF_TESTS_TRAINER_FIXTURE_H
#define KF_TESTS_TRAINER_FIXTURE_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "pipeline/manifest.h"
#include "pipeline/shard_writer.h"

static void fixture_split(const char *dir, const char *split, manifest_split *sp, int64_t n,
                          int64_t per_shard, const shard_meta *fmt) {
    char path[4096];
    kf_err err = {{0}};
    snprintf(path, sizeof path, "%s/%s", dir, split);
    if (fs_mkdir_p(path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
    sp->nshards = (int)((n + per_shard - 1) / per_shard);
    sp->shards = calloc((size_t)sp->nshards, sizeof *sp->shards);
    int32_t *ids = malloc((size_t)fmt->seq_len * sizeof *ids);
    for (int s = 0; s < sp->nshards; s++) {
        snprintf(path, sizeof path, "%s/%s/shard-%05d.lmdb", dir, split, s);
        shard_writer *w;
        if (shard_writer_open(path, fmt, &w, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            exit(2);
        }
        for (int64_t i = s * per_shard; i < n && i < (s + 1) * per_shard; i++) {
            for (int t = 0; t < fmt->seq_len; t++)
                ids[t] = (int32_t)((i * 7 + t * 3) % fmt->vocab_size);
            if (shard_writer_append(w, ids, fmt->seq_len, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                exit(2);
            }
        }
        shard_meta stats = *fmt;
        if (shard_writer_commit(w, &stats, &sp->shards[s], &err)) {
            fprintf(stderr, "%s\n", err.msg);
            exit(2);
        }
    }
    free(ids);
    manifest_split_sum(sp);
}

/** Writes a shard set with n_train / n_valid samples into dir (created). */
static void fixture_shards(const char *dir, int64_t n_train, int64_t n_valid, int seq_len,
                           int64_t vocab) {
    manifest m;
    memset(&m, 0, sizeof m);
    shard_meta fmt;
    memset(&fmt, 0, sizeof fmt);
    snprintf(fmt.tokenizer, sizeof fmt.tokenizer, "gpt2");
    memset(fmt.vocab_sha256, 'a', 64);
    memset(fmt.source_sha256, 'b', 64);
    memset(fmt.config_sha256, 'c', 64);
    fmt.vocab_size = vocab;
    fmt.seq_len = seq_len;
    snprintf(fmt.packing, sizeof fmt.packing, "wrap");
    snprintf(m.name, sizeof m.name, "fixture");
    snprintf(m.tokenizer, sizeof m.tokenizer, "gpt2");
    memcpy(m.vocab_sha256, fmt.vocab_sha256, 65);
    memcpy(m.config_sha256, fmt.config_sha256, 65);
    m.vocab_size = vocab;
    m.seq_len = seq_len;
    snprintf(m.packing, sizeof m.packing, "wrap");
    m.id_bytes = vocab < 65536 ? 2 : 4;
    m.special = (manifest_special){.bos = 0, .eos = 0, .cls = -1, .sep = -1, .pad = -1};
    fixture_split(dir, "train", &m.train, n_train, 37, &fmt);
    fixture_split(dir, "valid", &m.valid, n_valid, 37, &fmt);
    kf_err err = {{0}};
    if (manifest_write(dir, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
    free(m.train.shards), free(m.train.first), free(m.valid.shards), free(m.valid.first);
}

/** Writes the text printf would make of fmt and its arguments to path (a
 *  trainer test's run.yaml); exits 2 when it cannot. */
__attribute__((format(printf, 2, 3))) static inline void fixture_write(const char *path,
                                                                       const char *fmt, ...) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write\n", path);
        exit(2);
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    if (fclose(f)) {
        fprintf(stderr, "%s: cannot write\n", path);
        exit(2);
    }
}

/** The files of a trainer test's run under dir (made already): data
 *  (dir/data, holding fixture_shards(n_train, n_valid, seq_len, vocab)),
 *  cfg (dir/run.yaml, for the test to write) and run (dir/run), each
 *  buffer FIXTURE_PATH bytes. */
#define FIXTURE_PATH 4096
static inline void fixture_run(const char *dir, char *data, char *cfg, char *run, int64_t n_train,
                               int64_t n_valid, int seq_len, int64_t vocab) {
    snprintf(data, FIXTURE_PATH, "%s/data", dir);
    snprintf(cfg, FIXTURE_PATH, "%s/run.yaml", dir);
    snprintf(run, FIXTURE_PATH, "%s/run", dir);
    fixture_shards(data, n_train, n_valid, seq_len, vocab);
}

#endif
