/* Checkpoints: save -> find -> load round-trips bitwise; retention keeps the
 * newest K that verify (a corrupt one moved to corrupt/, never counted, the
 * last good one never removed); corrupt, truncated and partial checkpoints are
 * moved aside for an older valid one; incompatible resumes are refused; final weights and
 * teacher verification. Single process (world 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include "trainer/train/checkpoint.h"

static model_config cfg(void) {
    return (model_config){.hidden = 16,
                          .heads = 2,
                          .blocks = 1,
                          .vocab = 30,
                          .mask_id = -1,
                          .seq_len = 8,
                          .kind = MODEL_AR,
                          .head = HEAD_SHARED,
                          .k_train = 1};
}

static void fill(kf_backend *b, float *dst, int64_t n, float base) {
    float *h = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = base + (float)i * 1e-3f;
    b->upload(b, dst, h, (size_t)n * 4);
    free(h);
}

static int same(kf_backend *b, const float *x, const float *y, int64_t n) {
    float *a = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
    b->download(b, a, x, (size_t)n * 4);
    b->download(b, c, y, (size_t)n * 4);
    int r = !memcmp(a, c, (size_t)n * 4);
    free(a), free(c);
    return r;
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

int main(void) {
    char dir[] = "/tmp/kf_ckpt_XXXXXX", ck[4096], path[8192], found[4096];
    if (!mkdtemp(dir)) return 2;
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    kf_err err = {{0}};
    dist d;
    T_EQ_INT(dist_init(&d, NULL, NULL, 10, &err), 0, "dist single process");
    T_EQ_INT(d.world, 1, "dist single process");
    kf_backend *b = kernels_cpu_create();
    model_config c = cfg();
    model *m = model_create(b, &c);
    model_init(m, 7);
    int64_t n = m->n_params;
    float *ema = b->alloc(b, (size_t)n * 4), *am = b->alloc(b, (size_t)n * 4),
          *av = b->alloc(b, (size_t)n * 4);
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.stage, sizeof meta.stage, "ar");
    snprintf(meta.kind, sizeof meta.kind, "ar");
    meta.global_batch = 4;
    memset(meta.config_hash, 'd', 64);
    meta.id.model = c;
    memset(meta.id.data_manifest, 'e', 64);
    snprintf(meta.id.tokenizer, sizeof meta.id.tokenizer, "gpt2");
    memset(meta.id.vocab_sha256, 'f', 64);
    snprintf(meta.id.teacher_precision, sizeof meta.id.teacher_precision, "bf16");
    rng_state rng = rng_state_make(5, 9);
    for (int s = 3; s <= 9; s += 3) {
        fill(b, ema, n, (float)s), fill(b, am, n, 0.5f * s), fill(b, av, n, 0.25f * s);
        meta.step = s;
        meta.cursor = s * 4;
        meta.opt =
            (optim_state){.adam_t = s - 1, .scale = 1024.0 / s, .good_steps = 1, .skipped = 1};
        snprintf(meta.phase, sizeof meta.phase, "%s", s < 9 ? "fp16" : "bf16");
        rng.counter = (uint64_t)s * 4;
        ckpt_save(ck, &d, m, ema, am, av, &meta, &rng, 2);
    }
    snprintf(path, sizeof path, "%s/step-3", ck);
    T_CHECK(!fs_exists(path), "retention removed the oldest (keep 2)");
    snprintf(path, sizeof path, "%s/latest", ck);
    char *txt;
    size_t len;
    T_EQ_INT(fs_read_file(path, &txt, &len, &err), 0, "latest names step-9");
    T_EQ_STR(txt, "step-9\n", "latest names step-9");
    free(txt);

    ckpt_meta got;
    T_EQ_INT(ckpt_find(ck, found, sizeof found, &got), 1, "newest found: %s", found);
    T_CHECK(strstr(found, "step-9"), "newest found: %s", found);
    T_EQ_INT(got.step, 9, "state round-trips");
    T_EQ_INT(got.cursor, 36, "state round-trips");
    T_EQ_INT(got.opt.adam_t, 8, "state round-trips");
    T_NEAR(got.opt.scale, 1024.0 / 9, 0, "state round-trips");
    T_EQ_INT(got.world, 1, "state round-trips");
    T_EQ_STR(got.phase, "bf16", "state round-trips");
    T_EQ_INT(got.id.model.hidden, 16, "state round-trips");
    T_EQ_STR(got.id.tokenizer, "gpt2", "state round-trips");
    T_EQ_STR(got.id.teacher_precision, "bf16", "state round-trips");

    /* load into a fresh model: bitwise equal */
    model *m2 = model_create(b, &c);
    float *e2 = b->alloc(b, (size_t)n * 4), *am2 = b->alloc(b, (size_t)n * 4),
          *av2 = b->alloc(b, (size_t)n * 4);
    rng_state r2;
    T_EQ_INT(ckpt_load(found, 0, m2, e2, am2, av2, &r2), 1, "rank RNG state restored");
    T_EQ_INT(r2.counter, 36, "rank RNG state restored");
    T_EQ_INT(r2.stream, 9, "rank RNG state restored");
    T_CHECK(same(b, m->params, m2->params, n), "weights, EMA and moments restored bitwise");
    T_CHECK(same(b, ema, e2, n), "weights, EMA and moments restored bitwise");
    T_CHECK(same(b, am, am2, n), "weights, EMA and moments restored bitwise");
    T_CHECK(same(b, av, av2, n), "weights, EMA and moments restored bitwise");
    T_EQ_INT(ckpt_load(found, 3, m2, e2, am2, av2, &r2), 0,
             "no file for a rank beyond the writer's world");

    /* compatibility */
    ckpt_identity id = meta.id;
    T_EQ_INT(ckpt_check_compatible(&got, &id, 4, &err), 0, "same identity resumes");
    id.model.hidden = 32;
    T_EQ_INT(ckpt_check_compatible(&got, &id, 4, &err), -1, "shape refused: %s", err.msg);
    T_CHECK(strstr(err.msg, "model shape"), "shape refused: %s", err.msg);
    id = meta.id;
    memset(id.data_manifest, '0', 64);
    T_EQ_INT(ckpt_check_compatible(&got, &id, 4, &err), -1, "dataset refused");
    T_CHECK(strstr(err.msg, "dataset manifest"), "dataset refused");
    id = meta.id;
    snprintf(id.tokenizer, sizeof id.tokenizer, "bert-uncased");
    T_EQ_INT(ckpt_check_compatible(&got, &id, 4, &err), -1, "tokenizer refused");
    T_CHECK(strstr(err.msg, "tokenizer"), "tokenizer refused");
    id = meta.id;
    snprintf(id.teacher_precision, sizeof id.teacher_precision, "fp32");
    T_EQ_INT(ckpt_check_compatible(&got, &id, 4, &err), -1, "teacher precision refused");
    T_CHECK(strstr(err.msg, "teacher_precision (bf16 vs fp32"), "teacher precision refused: %s",
            err.msg);
    T_EQ_INT(ckpt_check_compatible(&got, &meta.id, 8, &err), -1, "batch refused");
    T_CHECK(strstr(err.msg, "global batch"), "batch refused");

    /* corruption: flip a byte of step-9's adam_v -> step-6 is chosen */
    snprintf(path, sizeof path, "%s/step-9/adam_v.safetensors", ck);
    flip_byte(path, 200);
    T_EQ_INT(ckpt_verify(found, NULL, &err), -1, "corruption detected: %s", err.msg);
    T_CHECK(strstr(err.msg, "sha256"), "corruption detected: %s", err.msg);
    t_stderr_begin(); /* the skip warning is expected: checked, kept out of the log */
    T_EQ_INT(ckpt_find(ck, found, sizeof found, &got), 1, "corrupt newest skipped: %s", found);
    char *warned = t_stderr_end();
    T_CHECK(strstr(warned, "does not verify"), "warning says why it skips: %s", warned);
    T_CHECK(strstr(warned, "moved to") && strstr(warned, "corrupt/step-9"),
            "warning names the corrupt step-9 and where it went: %s", warned);
    free(warned);
    snprintf(path, sizeof path, "%s/corrupt/step-9/state.yaml", ck);
    T_CHECK(fs_exists(path), "corrupt step-9 moved to corrupt/");
    snprintf(path, sizeof path, "%s/step-9", ck);
    T_CHECK(!fs_exists(path), "corrupt step-9 no longer among the checkpoints");
    T_CHECK(strstr(found, "step-6"), "corrupt newest skipped: %s", found);
    T_EQ_INT(got.step, 6, "corrupt newest skipped: %s", found);
    /* partial newer ones: a directory without state.yaml, a truncated file, a .tmp */
    snprintf(path, sizeof path, "%s/step-12", ck);
    fs_mkdir_p(path, &err);
    snprintf(path, sizeof path, "%s/step-15.tmp", ck);
    fs_mkdir_p(path, &err);
    snprintf(path, sizeof path, "%s/step-6/model.safetensors", ck);
    meta.step = 18;
    t_stderr_begin(); /* retention verifies step-12 before counting it */
    ckpt_save(ck, &d, m, ema, am, av, &meta, &rng, 10);
    warned = t_stderr_end();
    T_CHECK(strstr(warned, "corrupt/step-12"), "retention moved the unfinished step-12: %s",
            warned);
    free(warned);
    snprintf(path, sizeof path, "%s/step-18/ema.safetensors", ck);
    T_EQ_INT(truncate(path, 100), 0, "truncate");
    t_stderr_begin();
    T_EQ_INT(ckpt_find(ck, found, sizeof found, &got), 1, "partial/truncated skipped: %s", found);
    warned = t_stderr_end();
    T_CHECK(strstr(warned, "step-18"), "warning names the truncated step-18: %s", warned);
    free(warned);
    T_CHECK(strstr(found, "step-6"), "partial/truncated skipped: %s", found);

    /* final weights and teacher resolution */
    char fin[64], tf[4096], sha[65], want[65];
    snprintf(fin, sizeof fin, "%s/final", dir);
    ckpt_write_final(fin, m, ema, &meta);
    T_EQ_INT(ckpt_resolve_teacher(fin, tf, sizeof tf, sha, &err), 0, "final verifies: %s", err.msg);
    sha256_file_hex(tf, want, &err);
    T_EQ_STR(sha, want, "teacher file and sha");
    T_CHECK(strstr(tf, "final/model.safetensors"), "teacher file and sha");
    model *t = model_load(b, tf, &err);
    T_CHECK(t, "final holds the EMA weights");
    if (t) {
        T_CHECK(same(b, t->params, ema, n), "final holds the EMA weights");
    }
    model_free(t);
    flip_byte(tf, 300);
    T_EQ_INT(ckpt_resolve_teacher(fin, tf, sizeof tf, sha, &err), -1, "modified teacher refused");
    snprintf(path, sizeof path, "%s/DONE", fin);
    unlink(path);
    T_EQ_INT(ckpt_resolve_teacher(fin, tf, sizeof tf, sha, &err), -1, "unfinished stage refused");
    T_CHECK(strstr(err.msg, "DONE"), "unfinished stage refused");
    snprintf(path, sizeof path, "%s/step-6", ck);
    T_EQ_INT(ckpt_resolve_teacher(path, tf, sizeof tf, sha, &err), 0, "checkpoint dir as teacher");
    T_CHECK(strstr(tf, "ema.safetensors"), "checkpoint dir as teacher");

    /* retention counts only checkpoints that verify: step-21 corrupted while the
     * stage runs is moved aside when step-24 is written, and the good step-6
     * stays (keep 2) */
    meta.step = 21;
    ckpt_save(ck, &d, m, ema, am, av, &meta, &rng, 2);
    snprintf(path, sizeof path, "%s/step-21/model.safetensors", ck);
    flip_byte(path, 400);
    meta.step = 24;
    t_stderr_begin();
    ckpt_save(ck, &d, m, ema, am, av, &meta, &rng, 2);
    warned = t_stderr_end();
    T_CHECK(strstr(warned, "corrupt/step-21"), "retention moved the corrupt step-21: %s", warned);
    free(warned);
    const char *kept[] = {"step-24", "step-6", "corrupt/step-21"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s/state.yaml", ck, kept[i]);
        T_CHECK(fs_exists(path), "after retention (keep 2): %s is there", kept[i]);
    }
    snprintf(path, sizeof path, "%s/step-21", ck);
    T_CHECK(!fs_exists(path), "corrupt step-21 not counted among the kept");
    /* keep 1: the one just written is the good one; older ones go, verified or not */
    snprintf(path, sizeof path, "%s/step-24/adam_m.safetensors", ck);
    flip_byte(path, 500);
    meta.step = 27;
    t_stderr_begin();
    ckpt_save(ck, &d, m, ema, am, av, &meta, &rng, 1);
    free(t_stderr_end());
    snprintf(path, sizeof path, "%s/step-6", ck);
    T_CHECK(!fs_exists(path), "keep 1: step-6 removed once step-27 was written");
    snprintf(path, sizeof path, "%s/step-24", ck);
    T_CHECK(!fs_exists(path), "keep 1: corrupt step-24 removed, not kept");
    /* nothing verifies: `latest` goes rather than name a bad checkpoint */
    snprintf(path, sizeof path, "%s/step-27/ema.safetensors", ck);
    flip_byte(path, 600);
    t_stderr_begin();
    T_EQ_INT(ckpt_find(ck, found, sizeof found, &got), 0, "no checkpoint verifies");
    free(t_stderr_end());
    snprintf(path, sizeof path, "%s/latest", ck);
    T_CHECK(!fs_exists(path), "latest removed when no checkpoint verifies");
    snprintf(path, sizeof path, "%s/corrupt/step-27", ck);
    T_CHECK(fs_exists(path), "step-27 moved aside");

    model_free(m), model_free(m2);
    b->free(b, ema), b->free(b, am), b->free(b, av), b->free(b, e2), b->free(b, am2),
        b->free(b, av2);
    b->destroy(b);
    dist_finalize(&d);
    fs_rm_rf(dir, &err);
    return T_DONE();
}
