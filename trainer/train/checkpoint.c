/* trainer/train/checkpoint.c — checkpoint commit protocol, verification, resume and
 * final weights (see checkpoint.h). */
#include "trainer/train/checkpoint.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/strbuf.h"

/* The tensor files every checkpoint holds, in write order. */
static const char *const tensor_files[] = {"model.safetensors", "ema.safetensors",
                                           "adam_m.safetensors", "adam_v.safetensors"};
#define N_TENSOR_FILES 4

static void step_name(char *out, size_t cap, int64_t step, const char *suffix) {
    snprintf(out, cap, "step-%" PRId64 "%s", step, suffix);
}

/* ---- writing ---- */

static void emit_identity(strbuf *b, const ckpt_identity *id) {
    const model_config *c = &id->model;
    strbuf_printf(b,
                  "model: {hidden: %" PRId64 ", heads: %" PRId64 ", blocks: %" PRId64
                  ", vocab: %" PRId64 ", mask_id: %" PRId64 ", seq_len: %" PRId64
                  ", kind: %d, head: %d, k_train: %" PRId64 ", noise_cycles: %" PRId64 "}\n",
                  c->hidden, c->heads, c->blocks, c->vocab, c->mask_id, c->seq_len, (int)c->kind,
                  (int)c->head, c->k_train, c->noise_cycles);
    strbuf_printf(
        b,
        "data_manifest: \"%s\"\ntokenizer: \"%s\"\nvocab_sha256: \"%s\"\nteacher_sha256: \"%s\"\n"
        "teacher_precision: \"%s\"\n",
        id->data_manifest, id->tokenizer, id->vocab_sha256, id->teacher_sha256,
        id->teacher_precision);
}

static void write_text(const char *path, const strbuf *b) {
    kf_err err = {{0}};
    if (fs_write_atomic(path, b->s, b->len, &err)) KF_FATAL("checkpoint: %s", err.msg);
}

static void file_entry(strbuf *b, const char *dir, const char *name) {
    char path[4096], hex[65];
    kf_err err = {{0}};
    struct stat st;
    fs_path_join(path, sizeof path, dir, name);
    if (stat(path, &st) || sha256_file_hex(path, hex, &err))
        KF_FATAL("checkpoint: cannot hash %s: %s", path, err.msg[0] ? err.msg : "missing");
    strbuf_printf(b, "  - {name: \"%s\", bytes: %lld, sha256: \"%s\"}\n", name,
                  (long long)st.st_size, hex);
}

/* Steps of the committed checkpoints in dir (entries named exactly step-N),
 * newest first, into *steps (malloc'd); returns how many, -1 when dir cannot
 * be opened. With tmps, also collects the names of leftover step-*.tmp
 * entries into *tmps (malloc'd strings) and their count into *nt. */
static int list_steps(const char *dir, int64_t **steps, char ***tmps, int *nt) {
    DIR *dp = opendir(dir);
    if (!dp) return -1;
    *steps = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        long long s;
        int used = 0;
        if (sscanf(e->d_name, "step-%lld%n", &s, &used) == 1 && used == (int)strlen(e->d_name)) {
            if (n == cap) *steps = kf_realloc(*steps, (size_t)(cap = cap * 2 + 8) * sizeof **steps);
            (*steps)[n++] = s;
        } else if (tmps && !strncmp(e->d_name, "step-", 5) && strstr(e->d_name, ".tmp")) {
            *tmps = kf_realloc(*tmps, (size_t)(*nt + 1) * sizeof **tmps);
            (*tmps)[(*nt)++] = kf_strdup(e->d_name);
        }
    }
    closedir(dp);
    int64_t *st = *steps;
    for (int i = 0; i < n; i++) /* newest first */
        for (int j = i + 1; j < n; j++)
            if (st[j] > st[i]) {
                int64_t t = st[i];
                st[i] = st[j];
                st[j] = t;
            }
    return n;
}

/* Moves ckpt_dir/name (a checkpoint that does not verify) to
 * ckpt_dir/corrupt/name (name.2, .3, ... when taken): out of every count and
 * every resume, kept for a look. Warns saying why. */
static void quarantine(const char *ckpt_dir, const char *name, const char *why) {
    char cdir[4096], from[4096], to[4200];
    kf_err err = {{0}};
    fs_path_join(cdir, sizeof cdir, ckpt_dir, "corrupt");
    fs_path_join(from, sizeof from, ckpt_dir, name);
    if (fs_mkdir_p(cdir, &err)) {
        kf_log_warn("checkpoint %s does not verify (%s), and cannot be moved aside: %s", from, why,
                    err.msg);
        return;
    }
    snprintf(to, sizeof to, "%s/%s", cdir, name);
    for (int i = 2; fs_exists(to) && i < 1000; i++)
        snprintf(to, sizeof to, "%s/%s.%d", cdir, name, i);
    if (fs_rename_atomic(from, to, &err))
        kf_log_warn("checkpoint %s does not verify (%s), and cannot be moved aside: %s", from, why,
                    err.msg);
    else kf_log_warn("checkpoint %s does not verify (%s): moved to %s", from, why, to);
}

/* Keeps the newest `keep` committed checkpoints that verify, the one just
 * written (step `newest`) first; moves the ones that do not verify to
 * corrupt/ (never counted); removes the older rest and every leftover *.tmp
 * directory. A checkpoint is removed only once `keep` newer ones verified,
 * so the last good one never is. An old checkpoint is first renamed to a .tmp
 * name so a crash mid-removal never leaves a partial step-N that looks
 * committed. */
static void retention(const char *dir, int keep, int64_t newest) {
    int64_t *steps;
    char **tmps = NULL;
    int nt = 0;
    int n = list_steps(dir, &steps, &tmps, &nt);
    if (n < 0) return;
    char from[4096], to[4096], name[64];
    kf_err err = {{0}};
    int good = 1; /* the checkpoint just written: hashed into its manifest a moment ago */
    for (int i = 0; i < n; i++) {
        if (steps[i] == newest) continue;
        step_name(name, sizeof name, steps[i], "");
        fs_path_join(from, sizeof from, dir, name);
        if (good < keep) {
            kf_err why = {{0}};
            if (ckpt_verify(from, NULL, &why) == 0) good++;
            else quarantine(dir, name, why.msg);
            continue;
        }
        step_name(name, sizeof name, steps[i], ".del.tmp");
        fs_path_join(to, sizeof to, dir, name);
        if (fs_rename_atomic(from, to, &err) || fs_rm_rf(to, &err))
            kf_log_warn("checkpoint retention: %s", err.msg);
    }
    for (int i = 0; i < nt; i++) {
        fs_path_join(from, sizeof from, dir, tmps[i]);
        if (fs_rm_rf(from, &err)) kf_log_warn("checkpoint retention: %s", err.msg);
        free(tmps[i]);
    }
    free(tmps);
    free(steps);
}

void ckpt_set_latest(const char *ckpt_dir, int64_t step) {
    char name[64], path[4096];
    step_name(name, sizeof name, step, "\n");
    strbuf l = {0};
    strbuf_printf(&l, "%s", name);
    fs_path_join(path, sizeof path, ckpt_dir, "latest");
    write_text(path, &l);
    free(l.s);
}

void ckpt_save(const char *ckpt_dir, dist *d, const model *m, const float *ema, const float *adam_m,
               const float *adam_v, const ckpt_meta *meta, const rng_state *rng, int keep) {
    char tmp[4096], fin[4096], path[4096], name[64];
    kf_err err = {{0}};
    step_name(name, sizeof name, meta->step, ".tmp");
    fs_path_join(tmp, sizeof tmp, ckpt_dir, name);
    step_name(name, sizeof name, meta->step, "");
    fs_path_join(fin, sizeof fin, ckpt_dir, name);
    if (d->rank == 0) {
        if (fs_mkdir_p(ckpt_dir, &err) || fs_rm_rf(tmp, &err) || fs_mkdir_p(tmp, &err))
            KF_FATAL("checkpoint: %s", err.msg);
        /* A committed step-N of the same step (a resume that repeats steps
         * after losing later ones) is replaced by this one. */
        if (fs_is_dir(fin) && fs_rm_rf(fin, &err)) KF_FATAL("checkpoint: %s", err.msg);
    }
    dist_barrier(d);

    if (d->rank == 0) {
        const float *bufs[N_TENSOR_FILES] = {NULL, ema, adam_m, adam_v};
        for (int i = 0; i < N_TENSOR_FILES; i++) {
            fs_path_join(path, sizeof path, tmp, tensor_files[i]);
            if (model_save(m, path, bufs[i], &err)) KF_FATAL("checkpoint: %s", err.msg);
        }
    }
    strbuf rb = {0};
    strbuf_printf(&rb,
                  "rank: %d\nworld: %d\nrng: {seed: %" PRIu64 ", stream: %" PRIu64
                  ", counter: %" PRIu64 "}\n",
                  d->rank, d->world, rng->seed, rng->stream, rng->counter);
    snprintf(name, sizeof name, "rank-%05d.yaml", d->rank);
    fs_path_join(path, sizeof path, tmp, name);
    write_text(path, &rb);
    free(rb.s);
    dist_barrier(d);

    if (d->rank == 0) {
        strbuf b = {0};
        strbuf_printf(&b, "format: %s\nversion: %d\nstage: \"%s\"\nkind: \"%s\"\n", CKPT_FORMAT,
                      CKPT_VERSION, meta->stage, meta->kind);
        strbuf_printf(
            &b, "step: %" PRId64 "\ncursor: %" PRId64 "\nglobal_batch: %" PRId64 "\nworld: %d\n",
            meta->step, meta->cursor, meta->global_batch, d->world);
        strbuf_printf(&b, "config_hash: \"%s\"\nphase: %s\n", meta->config_hash, meta->phase);
        strbuf_printf(&b,
                      "optim: {adam_t: %" PRId64 ", scale: %.17g, good_steps: %" PRId64
                      ", skipped: %" PRId64 "}\n",
                      meta->opt.adam_t, meta->opt.scale, meta->opt.good_steps, meta->opt.skipped);
        emit_identity(&b, &meta->id);
        strbuf_printf(&b, "files:\n");
        for (int i = 0; i < N_TENSOR_FILES; i++) file_entry(&b, tmp, tensor_files[i]);
        for (int r = 0; r < d->world; r++) {
            snprintf(name, sizeof name, "rank-%05d.yaml", r);
            file_entry(&b, tmp, name);
        }
        char self[65];
        sha256_hex(b.s, b.len, self);
        strbuf_printf(&b, CKPT_SELF_SHA "%s\"\n", self);
        fs_path_join(path, sizeof path, tmp, "state.yaml");
        write_text(path, &b);
        free(b.s);
        if (fs_fsync_path(tmp, &err) || fs_rename_atomic(tmp, fin, &err))
            KF_FATAL("checkpoint: %s", err.msg);
        ckpt_set_latest(ckpt_dir, meta->step);
        retention(ckpt_dir, keep, meta->step);
    }
    dist_barrier(d);
}

/* ---- reading ---- */

static int get_hex(cfg_node *root, const char *key, char out[65], int allow_empty, kf_err *err) {
    const char *s;
    if (cfg_get_str(root, key, &s, err)) return -1;
    size_t n = strlen(s);
    if (!(n == 64 || (allow_empty && n == 0)) || strspn(s, "0123456789abcdef") != n)
        return cfg_err_at(cfg_find(root, key), err, "expected a sha256 (64 hex digits)");
    memcpy(out, s, n + 1);
    return 0;
}

static int get_str_buf(cfg_node *root, const char *key, char *out, size_t cap, kf_err *err) {
    const char *s;
    if (cfg_get_str(root, key, &s, err)) return -1;
    if (strlen(s) >= cap) return cfg_err_at(cfg_find(root, key), err, "too long");
    strcpy(out, s);
    return 0;
}

static int parse_identity(cfg_node *r, ckpt_identity *id, kf_err *err) {
    model_config *c = &id->model;
    int64_t kind, head;
    if (cfg_get_int(r, "model.hidden", &c->hidden, err) ||
        cfg_get_int(r, "model.heads", &c->heads, err) ||
        cfg_get_int(r, "model.blocks", &c->blocks, err) ||
        cfg_get_int(r, "model.vocab", &c->vocab, err) ||
        cfg_get_int(r, "model.mask_id", &c->mask_id, err) ||
        cfg_get_int(r, "model.seq_len", &c->seq_len, err) ||
        cfg_get_int(r, "model.kind", &kind, err) || cfg_get_int(r, "model.head", &head, err) ||
        cfg_get_int(r, "model.k_train", &c->k_train, err) ||
        cfg_opt_int(r, "model.noise_cycles", 0, &c->noise_cycles, err) || /* added later */
        get_hex(r, "data_manifest", id->data_manifest, 1, err) ||
        get_str_buf(r, "tokenizer", id->tokenizer, sizeof id->tokenizer, err) ||
        get_hex(r, "vocab_sha256", id->vocab_sha256, 1, err) ||
        get_hex(r, "teacher_sha256", id->teacher_sha256, 1, err))
        return -1;
    const char *tp;
    if (cfg_opt_str(r, "teacher_precision", "fp32", &tp, err)) return -1;
    if (runconfig_prec_parse(tp) < 0 && strcmp(tp, "follow"))
        return cfg_err_at(cfg_find(r, "teacher_precision"), err,
                          "expected fp32, bf16, fp16 or follow");
    snprintf(id->teacher_precision, sizeof id->teacher_precision, "%s", tp);
    c->kind = (model_kind)kind;
    c->head = (model_head)head;
    return 0;
}

/* Checks one `files` entry against the file beside state.yaml. */
static int check_file(const char *dir, cfg_node *e, const char **name_out, kf_err *err) {
    const char *name;
    int64_t bytes;
    char want[65], have[65], path[4096];
    if (cfg_get_str(e, "name", &name, err) || cfg_get_int(e, "bytes", &bytes, err) ||
        get_hex(e, "sha256", want, 0, err))
        return -1;
    if (strchr(name, '/')) return cfg_err_at(e, err, "file name '%s' has a '/'", name);
    fs_path_join(path, sizeof path, dir, name);
    struct stat st;
    if (stat(path, &st)) return kf_err_set(err, "%s: missing", path);
    if (st.st_size != bytes)
        return kf_err_set(err, "%s: %lld bytes, the manifest says %lld (truncated or replaced)",
                          path, (long long)st.st_size, (long long)bytes);
    if (sha256_file_hex(path, have, err)) return -1;
    if (strcmp(have, want))
        return kf_err_set(err, "%s: sha256 %.16s... differs from the manifest's %.16s... (corrupt)",
                          path, have, want);
    *name_out = name;
    return 0;
}

/* state.yaml (version 2) at sp: its last line records the sha256 of the
 * bytes before it. */
static int verify_self_sha(cfg_node *r, const char *sp, kf_err *err) {
    char want[65], have[65];
    if (get_hex(r, "state_sha256", want, 0, err)) return -1;
    char *buf;
    size_t len;
    if (fs_read_file(sp, &buf, &len, err)) return -1;
    size_t at = len;
    const size_t key = strlen(CKPT_SELF_SHA);
    while (at > 0 &&
           !(buf[at - 1] == '\n' && len - at > key && !memcmp(buf + at, CKPT_SELF_SHA, key)))
        at--;
    int rc = 0;
    if (at == 0) rc = kf_err_set(err, "%s: no state_sha256 line", sp);
    else {
        sha256_hex(buf, at, have);
        if (strcmp(have, want))
            rc = kf_err_set(err,
                            "%s: sha256 %.16s... of its bytes differs from its state_sha256 "
                            "%.16s... (corrupt)",
                            sp, have, want);
    }
    free(buf);
    return rc;
}

int ckpt_verify(const char *path, ckpt_meta *meta, kf_err *err) {
    char sp[4096];
    fs_path_join(sp, sizeof sp, path, "state.yaml");
    if (!fs_exists(sp)) return kf_err_set(err, "%s: no state.yaml (an unfinished write)", path);
    cfg_node *r = cfg_load_file(sp, err);
    if (!r) return -1;
    ckpt_meta m;
    memset(&m, 0, sizeof m);
    const char *fmt;
    int64_t version, world;
    int rc = -1;
    if (cfg_get_str(r, "format", &fmt, err) || cfg_get_int(r, "version", &version, err)) goto out;
    if (strcmp(fmt, CKPT_FORMAT) || version < 1 || version > CKPT_VERSION) {
        kf_err_set(err, "%s: format %s version %lld (expected %s 1 to %d)", sp, fmt,
                   (long long)version, CKPT_FORMAT, CKPT_VERSION);
        goto out;
    }
    if (version >= 2 && verify_self_sha(r, sp, err)) goto out;
    const char *phase;
    if (get_str_buf(r, "stage", m.stage, sizeof m.stage, err) ||
        get_str_buf(r, "kind", m.kind, sizeof m.kind, err) ||
        cfg_get_int(r, "step", &m.step, err) || cfg_get_int(r, "cursor", &m.cursor, err) ||
        cfg_get_int(r, "global_batch", &m.global_batch, err) ||
        cfg_get_int(r, "world", &world, err) || get_hex(r, "config_hash", m.config_hash, 0, err) ||
        cfg_get_str(r, "phase", &phase, err) ||
        cfg_get_int(r, "optim.adam_t", &m.opt.adam_t, err) ||
        cfg_get_double(r, "optim.scale", &m.opt.scale, err) ||
        cfg_get_int(r, "optim.good_steps", &m.opt.good_steps, err) ||
        cfg_get_int(r, "optim.skipped", &m.opt.skipped, err) || parse_identity(r, &m.id, err))
        goto out;
    if (runconfig_prec_parse(phase) < 0) {
        cfg_err_at(cfg_find(r, "phase"), err, "expected fp32, fp16 or bf16");
        goto out;
    }
    snprintf(m.phase, sizeof m.phase, "%s", phase);
    if (world < 1 || world > 1 << 20 || m.step < 0 || m.cursor < 0 || m.global_batch < 1) {
        kf_err_set(err, "%s: implausible step/cursor/world/global_batch", sp);
        goto out;
    }
    m.world = (int)world;
    cfg_node *files;
    if (cfg_get_node(r, "files", CFG_SEQ, &files, err)) goto out;
    /* Every expected file must be listed and verify. */
    int found[N_TENSOR_FILES] = {0}, nranks = 0;
    for (size_t i = 0; i < files->n; i++) {
        const char *name;
        if (check_file(path, files->items[i], &name, err)) goto out;
        for (int j = 0; j < N_TENSOR_FILES; j++) found[j] |= !strcmp(name, tensor_files[j]);
        nranks += !strncmp(name, "rank-", 5);
    }
    for (int j = 0; j < N_TENSOR_FILES; j++)
        if (!found[j]) {
            kf_err_set(err, "%s: %s is not listed", sp, tensor_files[j]);
            goto out;
        }
    if (nranks != m.world) {
        kf_err_set(err, "%s: %d rank files listed for world size %d", sp, nranks, m.world);
        goto out;
    }
    if (cfg_check_unused(r, err)) goto out;
    if (meta) *meta = m;
    rc = 0;
out:
    cfg_free(r);
    return rc;
}

int ckpt_find(const char *ckpt_dir, char *out, size_t cap, ckpt_meta *meta) {
    int64_t *steps;
    int n = list_steps(ckpt_dir, &steps, NULL, NULL);
    if (n < 0) return 0;
    int found = 0;
    for (int i = 0; i < n && !found; i++) { /* newest first */
        char name[64], path[4096];
        step_name(name, sizeof name, steps[i], "");
        fs_path_join(path, sizeof path, ckpt_dir, name);
        kf_err err = {{0}};
        if (ckpt_verify(path, meta, &err) == 0) {
            KF_CHECK(strlen(path) < cap, "checkpoint path too long");
            strcpy(out, path);
            found = 1;
        } else {
            quarantine(ckpt_dir, name, err.msg);
        }
    }
    free(steps);
    if (!found) { /* `latest` must never name a checkpoint that is not there */
        char path[4096];
        fs_path_join(path, sizeof path, ckpt_dir, "latest");
        if (fs_exists(path) && unlink(path)) kf_log_warn("cannot remove %s", path);
    }
    return found;
}

int ckpt_check_compatible(const ckpt_meta *saved, const ckpt_identity *now, int64_t global_batch,
                          kf_err *err) {
    const model_config *a = &saved->id.model, *b = &now->model;
    char why[900] = "";
    size_t w = 0;
#define DIFF(...) (w += (size_t)snprintf(why + w, w < sizeof why ? sizeof why - w : 0, __VA_ARGS__))
    if (a->hidden != b->hidden || a->heads != b->heads || a->blocks != b->blocks ||
        a->vocab != b->vocab || a->seq_len != b->seq_len || a->kind != b->kind ||
        a->head != b->head || a->k_train != b->k_train || a->mask_id != b->mask_id)
        DIFF("; model shape (checkpoint hidden %lld heads %lld blocks %lld vocab %lld seq_len %lld "
             "k %lld, now %lld %lld %lld %lld %lld %lld)",
             (long long)a->hidden, (long long)a->heads, (long long)a->blocks, (long long)a->vocab,
             (long long)a->seq_len, (long long)a->k_train, (long long)b->hidden,
             (long long)b->heads, (long long)b->blocks, (long long)b->vocab, (long long)b->seq_len,
             (long long)b->k_train);
    if (a->noise_cycles != b->noise_cycles)
        DIFF("; model.noise_cycles (%lld vs %lld)", (long long)a->noise_cycles,
             (long long)b->noise_cycles);
    if (strcmp(saved->id.data_manifest, now->data_manifest))
        DIFF("; dataset manifest (sha256 %.12s... vs %.12s...)", saved->id.data_manifest,
             now->data_manifest);
    if (strcmp(saved->id.tokenizer, now->tokenizer) ||
        strcmp(saved->id.vocab_sha256, now->vocab_sha256))
        DIFF("; tokenizer (%s %.12s... vs %s %.12s...)", saved->id.tokenizer,
             saved->id.vocab_sha256, now->tokenizer, now->vocab_sha256);
    if (strcmp(saved->id.teacher_sha256, now->teacher_sha256))
        DIFF("; teacher weights (sha256 %.12s... vs %.12s...)", saved->id.teacher_sha256,
             now->teacher_sha256);
    if (strcmp(saved->id.teacher_precision, now->teacher_precision))
        DIFF("; teacher_precision (%s vs %s: the teacher's targets would change mid-stage)",
             saved->id.teacher_precision, now->teacher_precision);
    if (saved->global_batch != global_batch)
        DIFF("; global batch (%lld vs %lld)", (long long)saved->global_batch,
             (long long)global_batch);
#undef DIFF
    if (!w) return 0;
    return kf_err_set(err, "cannot resume from a checkpoint of a different run: %s", why + 2);
}

int ckpt_load(const char *path, int rank, model *m, float *ema, float *adam_m, float *adam_v,
              rng_state *rng) {
    float *bufs[N_TENSOR_FILES] = {NULL, ema, adam_m, adam_v};
    char p[4096], name[64];
    kf_err err = {{0}};
    for (int i = 0; i < N_TENSOR_FILES; i++) {
        fs_path_join(p, sizeof p, path, tensor_files[i]);
        if (model_load_into(m, p, bufs[i], &err)) KF_FATAL("checkpoint: %s", err.msg);
    }
    snprintf(name, sizeof name, "rank-%05d.yaml", rank);
    fs_path_join(p, sizeof p, path, name);
    if (!fs_exists(p)) return 0;
    cfg_node *r = cfg_load_file(p, &err);
    int64_t seed, stream, counter;
    if (!r || cfg_get_int(r, "rng.seed", &seed, &err) ||
        cfg_get_int(r, "rng.stream", &stream, &err) ||
        cfg_get_int(r, "rng.counter", &counter, &err))
        KF_FATAL("checkpoint: %s", err.msg);
    cfg_free(r);
    rng->seed = (uint64_t)seed, rng->stream = (uint64_t)stream, rng->counter = (uint64_t)counter;
    return 1;
}

void ckpt_write_final(const char *final_dir, const model *m, const float *ema,
                      const ckpt_meta *meta) {
    char tmp[4096], parent[4096], path[4096];
    kf_err err = {{0}};
    snprintf(tmp, sizeof tmp, "%s.tmp", final_dir);
    fs_dirname(final_dir, parent, sizeof parent);
    if (fs_mkdir_p(parent, &err) || fs_rm_rf(tmp, &err) || fs_mkdir_p(tmp, &err))
        KF_FATAL("final weights: %s", err.msg);
    fs_path_join(path, sizeof path, tmp, "model.safetensors");
    if (model_save(m, path, ema, &err)) KF_FATAL("final weights: %s", err.msg);
    strbuf b = {0};
    strbuf_printf(&b,
                  "format: kforcing-final\nversion: 1\nstage: \"%s\"\nkind: \"%s\"\nstep: %" PRId64
                  "\nconfig_hash: \"%s\"\n",
                  meta->stage, meta->kind, meta->step, meta->config_hash);
    emit_identity(&b, &meta->id);
    strbuf_printf(&b, "files:\n");
    file_entry(&b, tmp, "model.safetensors");
    fs_path_join(path, sizeof path, tmp, "final.yaml");
    write_text(path, &b);
    free(b.s);
    if (fs_rm_rf(final_dir, &err) || fs_fsync_path(tmp, &err) ||
        fs_rename_atomic(tmp, final_dir, &err))
        KF_FATAL("final weights: %s", err.msg);
    strbuf done = {0};
    strbuf_printf(&done, "step %" PRId64 "\n", meta->step);
    fs_path_join(path, sizeof path, final_dir, "DONE");
    write_text(path, &done);
    free(done.s);
}

/* final/: DONE present, final.yaml's sha256 of model.safetensors matches. */
static int verify_final(const char *dir, char *out, size_t cap, char sha[65], kf_err *err) {
    char p[4096];
    fs_path_join(p, sizeof p, dir, "DONE");
    if (!fs_exists(p)) return kf_err_set(err, "%s: no DONE marker: the stage did not finish", dir);
    fs_path_join(p, sizeof p, dir, "final.yaml");
    cfg_node *r = cfg_load_file(p, err);
    if (!r) return -1;
    cfg_node *files;
    const char *name;
    int rc = -1;
    cfg_mark_used(r, true);
    if (cfg_get_node(r, "files", CFG_SEQ, &files, err)) goto out;
    if (files->n != 1) {
        kf_err_set(err, "%s: expected one file", p);
        goto out;
    }
    if (check_file(dir, files->items[0], &name, err)) goto out;
    if (get_hex(files->items[0], "sha256", sha, 0, err)) goto out;
    fs_path_join(out, cap, dir, name);
    rc = 0;
out:
    cfg_free(r);
    return rc;
}

int ckpt_resolve_teacher(const char *ref, char *out, size_t cap, char sha[65], kf_err *err) {
    char p[4096];
    if (fs_is_dir(ref)) {
        fs_path_join(p, sizeof p, ref, "final.yaml");
        if (fs_exists(p)) return verify_final(ref, out, cap, sha, err);
        fs_path_join(p, sizeof p, ref, "state.yaml");
        if (fs_exists(p)) {
            kf_err e2 = {{0}};
            if (ckpt_verify(ref, NULL, &e2))
                return kf_err_set(err, "checkpoint %s does not verify: %s", ref, e2.msg);
            fs_path_join(out, cap, ref, "ema.safetensors");
            return sha256_file_hex(out, sha, err);
        }
        return kf_err_set(err,
                          "%s: neither a final/ directory (final.yaml) nor a checkpoint "
                          "(state.yaml)",
                          ref);
    }
    if (!fs_exists(ref)) return kf_err_set(err, "%s: no such file or directory", ref);
    KF_CHECK(strlen(ref) < cap, "checkpoint path too long");
    strcpy(out, ref);
    return sha256_file_hex(ref, sha, err);
}
