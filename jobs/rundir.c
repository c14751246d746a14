/* jobs/rundir.c — run directory files: frozen config, job records, stage state. */
#include "jobs/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/stage_status.h"
#include "common/writer_lock.h"
#include "pipeline/build.h"
#include "trainer/train/checkpoint.h"

/* What `kf train` leaves in a stage directory (trainer/train/checkpoint.h). */
#define FINAL_MODEL "model.safetensors"
#define FINAL_MARKER "DONE"
#define HASH_LINE "# kf run config sha256: "
#define JOBS_HEADER "# kf jobs v1\n"

static void stage_path(char *out, size_t cap, const char *run, const char *stage, const char *rel) {
    int n = snprintf(out, cap, "%s/stages/%s%s%s", run, stage, *rel ? "/" : "", rel);
    KF_CHECK(n > 0 && (size_t)n < cap, "path too long under %s", run);
}

int rundir_freeze(const char *run, const runconfig *rc, kf_err *err) {
    char p[PATH_MAX];
    const char *subs[] = {"stages", "slurm"};
    for (int i = 0; i < 2; i++) {
        fs_path_join(p, sizeof p, run, subs[i]);
        if (fs_mkdir_p(p, err)) return -1;
    }
    size_t n = strlen(HASH_LINE) + 64 + 1 + strlen(rc->canonical) + 1;
    char *text = kf_malloc(n);
    snprintf(text, n, HASH_LINE "%s\n%s", rc->hash, rc->canonical);
    fs_path_join(p, sizeof p, run, "run.yaml");
    int rv = fs_write_atomic(p, text, strlen(text), err);
    free(text);
    return rv;
}

int rundir_load(const char *run, int n_over, char *const *over, runconfig **out, kf_err *err) {
    char p[PATH_MAX];
    fs_path_join(p, sizeof p, run, "run.yaml");
    char *text;
    size_t len;
    if (fs_read_file(p, &text, &len, err)) return -1;
    char recorded[65] = "";
    if (!strncmp(text, HASH_LINE, strlen(HASH_LINE)) && len >= strlen(HASH_LINE) + 64)
        memcpy(recorded, text + strlen(HASH_LINE), 64), recorded[64] = 0;
    free(text);
    if (!*recorded)
        return kf_err_set(err,
                          "%s:1:1: not a frozen run config (no '%s' line): make runs with kf jobs "
                          "submit or kf jobs run",
                          p, HASH_LINE);
    runconfig *rc;
    if (runconfig_load(p, 0, NULL, &rc, err)) return -1;
    if (strcmp(rc->hash, recorded)) {
        kf_err_set(err,
                   "%s: changed after the run was made (sha256 %.12s..., recorded %.12s...): "
                   "the run's stages were trained under the recorded config; restore it or start a "
                   "new run",
                   p, rc->hash, recorded);
        runconfig_free(rc); /* after the message: it names rc->hash */
        return -1;
    }
    if (n_over) {
        runconfig_free(rc);
        if (runconfig_load(p, n_over, over, &rc, err)) return -1;
    }
    *out = rc;
    return 0;
}

/* ---- config comparison ---- */

typedef struct diff_ctx {
    int result; /* 0 equal, 1 compatible, 2 incompatible */
    char *what;
    size_t cap;
} diff_ctx;

static void scalar_text(const cfg_node *n, char *out, size_t cap) {
    if (!n) snprintf(out, cap, "(absent)");
    else if (n->kind == CFG_SCALAR) snprintf(out, cap, "%s", n->value);
    else if (n->kind == CFG_MAP) snprintf(out, cap, "{%zu keys}", n->n);
    else snprintf(out, cap, "[%zu items]", n->n);
}

static void note(diff_ctx *d, const char *path, const cfg_node *a, const cfg_node *b) {
    bool compatible = !strncmp(path, "resources.", 10);
    int level = compatible ? 1 : 2;
    if (level <= d->result) return; /* keep the first change of the worst kind */
    d->result = level;
    char x[96], y[96];
    scalar_text(a, x, sizeof x), scalar_text(b, y, sizeof y);
    snprintf(d->what, d->cap, "%s: %s -> %s", path, x, y);
}

static const cfg_node *map_get(const cfg_node *m, const char *key) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->items[i]->key, key)) return m->items[i];
    return NULL;
}

static void diff_nodes(diff_ctx *d, const char *path, const cfg_node *a, const cfg_node *b) {
    if (!a || !b || a->kind != b->kind) return note(d, path, a, b);
    char sub[512];
    switch (a->kind) {
    case CFG_SCALAR:
        if (strcmp(a->value, b->value)) note(d, path, a, b);
        return;
    case CFG_SEQ:
        if (a->n != b->n) return note(d, path, a, b);
        for (size_t i = 0; i < a->n; i++) {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            diff_nodes(d, sub, a->items[i], b->items[i]);
        }
        return;
    case CFG_MAP:
        for (size_t i = 0; i < a->n; i++) {
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", a->items[i]->key);
            diff_nodes(d, sub, a->items[i], map_get(b, a->items[i]->key));
        }
        for (size_t i = 0; i < b->n; i++)
            if (!map_get(a, b->items[i]->key)) {
                snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", b->items[i]->key);
                note(d, sub, NULL, b->items[i]);
            }
        return;
    }
}

int rundir_config_diff(const char *old_canonical, const char *new_canonical, char *what,
                       size_t cap) {
    kf_err err;
    cfg_node *a = cfg_load_string(old_canonical, "old", &err);
    cfg_node *b = cfg_load_string(new_canonical, "new", &err);
    KF_CHECK(a && b, "canonical config does not parse: %s", err.msg);
    diff_ctx d = {0, what, cap};
    if (cap) *what = 0;
    diff_nodes(&d, "", a, b);
    cfg_free(a), cfg_free(b);
    return d.result;
}

/* ---- stage state ---- */

static bool is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

/* Same directory: by realpath when both exist, else as written. */
static bool same_dir(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    if (realpath(a, ra) && realpath(b, rb)) return !strcmp(ra, rb);
    size_t na = strlen(a), nb = strlen(b);
    while (na > 1 && a[na - 1] == '/') na--;
    while (nb > 1 && b[nb - 1] == '/') nb--;
    return na == nb && !strncmp(a, b, na);
}

/* The data directories' manifests exist, and each one that a shard set of
 * this config builds was built with that set's current settings (a shared
 * data/shards/ built by an earlier config must not pass for this one's). A
 * config whose shards: section does not read (none, or inputs missing where
 * prebuilt shards were copied) is judged by the manifests alone. */
static bool shards_complete(const runconfig *rc, char *why, size_t cap, bool *stale) {
    const char *dirs[2] = {rc->data_train, rc->data_valid};
    char p[PATH_MAX];
    for (int i = 0; i < 2; i++) {
        fs_path_join(p, sizeof p, dirs[i], "manifest.yaml");
        if (!is_file(p)) return snprintf(why, cap, "no data manifest %s", p), false;
    }
    kf_err err;
    cfg_node *root = cfg_load_string(rc->canonical, "run.yaml", &err);
    build_config *sets = NULL;
    int n = root && cfg_find(root, "shards") ? build_config_read(root, &sets, &err) : -1;
    bool ok = true;
    for (int s = 0; s < n && ok; s++) {
        if (!same_dir(sets[s].out, dirs[0]) && !same_dir(sets[s].out, dirs[1])) continue;
        int cur = shards_current(&sets[s], why, cap, &err);
        if (cur < 0) snprintf(why, cap, "%s", err.msg);
        ok = cur == 1;
        if (cur == 0 && stale) *stale = true;
    }
    build_config_free(sets, n);
    cfg_free(root);
    return ok;
}

bool rundir_stage_complete(const char *run, const runconfig *rc, const char *stage, char *why,
                           size_t cap) {
    char p[PATH_MAX];
    if (!strcmp(stage, RUNDIR_SHARDS)) return shards_complete(rc, why, cap, NULL);
    const char *need[2] = {"final/" FINAL_MARKER, "final/" FINAL_MODEL};
    for (int i = 0; i < 2; i++) {
        stage_path(p, sizeof p, run, stage, need[i]);
        if (!is_file(p)) return snprintf(why, cap, "no %s", p), false;
    }
    return rundir_final_verify(run, stage, why, cap) == 1;
}

int rundir_final_verify(const char *run, const char *stage, char *why, size_t cap) {
    char dir[PATH_MAX], p[PATH_MAX], weights[PATH_MAX], sha[65];
    kf_err err = {{0}};
    stage_path(p, sizeof p, run, stage, "final/" FINAL_MARKER);
    if (!is_file(p)) return snprintf(why, cap, "no %s", p), 0;
    stage_path(dir, sizeof dir, run, stage, "final");
    if (ckpt_resolve_teacher(dir, weights, sizeof weights, sha, &err))
        return snprintf(why, cap, "%s", err.msg), -1;
    return 1;
}

/* Newest ckpt/step-N directory that verifies (partial ones, still named
 * step-N.tmp or lacking the manifest, and corrupt ones do not count). */
static void newest_ckpt(const char *run, const char *stage, rundir_state *st) {
    char dir[PATH_MAX], p[PATH_MAX + 300];
    stage_path(dir, sizeof dir, run, stage, "ckpt");
    DIR *d = opendir(dir);
    if (!d) return;
    int64_t *steps = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        int used = 0;
        if (sscanf(e->d_name, "step-%" SCNd64 "%n", &step, &used) != 1 || e->d_name[used]) continue;
        steps = kf_realloc(steps, (size_t)(n + 1) * sizeof *steps);
        steps[n++] = step;
    }
    closedir(d);
    for (int64_t best = INT64_MAX; st->ckpt_step < 0;) { /* newest first, until one verifies */
        int64_t next = -1;
        for (int i = 0; i < n; i++)
            if (steps[i] < best && steps[i] > next) next = steps[i];
        if (next < 0) break;
        best = next;
        snprintf(p, sizeof p, "%s/step-%" PRId64, dir, next);
        kf_err err = {{0}};
        struct stat s;
        if (ckpt_verify(p, NULL, &err) || stat(p, &s)) continue;
        st->ckpt_step = next;
        snprintf(st->ckpt, sizeof st->ckpt, "step-%" PRId64, next);
        st->ckpt_mtime = s.st_mtime;
    }
    free(steps);
}

/* The last step and throughput in log.jsonl (its last 64 KiB): steps/s from
 * the last record's ms_step, tokens/s as logged. */
static void read_log(const char *run, const char *stage, rundir_state *st) {
    char p[PATH_MAX];
    stage_path(p, sizeof p, run, stage, "log.jsonl");
    FILE *f = fopen(p, "rb");
    if (!f) return;
    struct stat s;
    if (fstat(fileno(f), &s) == 0) st->log_mtime = s.st_mtime;
    long tail = 65536;
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > tail) fseek(f, -tail, SEEK_END);
    else rewind(f);
    char *buf = kf_malloc((size_t)tail + 1);
    size_t n = fread(buf, 1, (size_t)tail, f);
    fclose(f);
    buf[n] = 0;
    char *line = buf;
    if (n == (size_t)tail) line = strchr(buf, '\n') ? strchr(buf, '\n') + 1 : buf + n;
    while (*line) {
        char *end = strchr(line, '\n');
        if (!end) break; /* a record still being written */
        kf_err err;
        json_doc *d = json_parse(line, (size_t)(end - line), p, &err);
        if (d) {
            const json *o = json_root(d), *step = json_get(o, "step"), *ms = json_get(o, "ms_step"),
                       *tps = json_get(o, "tokens_per_s");
            if (step && step->type == JSON_NUMBER && ms && ms->type == JSON_NUMBER) {
                /* a training record (evaluation records carry no ms_step) */
                st->log_step = step->i;
                st->steps_per_s = ms->num > 0 ? 1e3 / ms->num : 0;
                if (tps && tps->type == JSON_NUMBER) st->tokens_per_s = tps->num;
            }
            json_free(d);
        }
        line = end + 1;
    }
    free(buf);
}

void rundir_stage_state(const char *run, const runconfig *rc, const char *stage, rundir_state *st) {
    memset(st, 0, sizeof *st);
    st->ckpt_step = st->log_step = -1;
    char why[PATH_MAX + 32];
    if (!strcmp(stage, RUNDIR_SHARDS)) {
        bool stale = false;
        st->complete = shards_complete(rc, why, sizeof why, &stale);
        if (stale) snprintf(st->status, sizeof st->status, "stale");
        return;
    }
    st->complete = rundir_stage_complete(run, rc, stage, why, sizeof why);
    char p[PATH_MAX];
    stage_path(p, sizeof p, run, stage, "lock");
    writer_holder h;
    int held = writer_lock_probe(p, &h);
    if (held < 0) kf_log_warn("%s", h.what);
    st->live = held == 1;
    if (st->live) writer_holder_text(&h, st->holder, sizeof st->holder);
    newest_ckpt(run, stage, st);
    read_log(run, stage, st);
    stage_path(p, sizeof p, run, stage, "");
    stage_status ss;
    kf_err err = {{0}};
    int got = stage_status_read(p, &ss, &err);
    if (got < 0) kf_log_warn("%s", err.msg);
    if (got == 0) {
        snprintf(st->status, sizeof st->status, "%s", ss.state);
        snprintf(st->reason, sizeof st->reason, "%s", ss.reason);
    }
}

/* ---- the teacher chain ---- */

/* The sha256 under key in a YAML file (key "files": that of the first entry
 * of its `files` list), "" when there is none. */
static void recorded_sha(const char *path, const char *key, char out[65]) {
    *out = 0;
    if (!is_file(path)) return;
    kf_err err;
    cfg_node *r = cfg_load_file(path, &err), *files;
    if (!r) return;
    const char *v = NULL;
    if (!strcmp(key, "files")) {
        if (cfg_get_node(r, "files", CFG_SEQ, &files, &err) == 0 && files->n >= 1)
            cfg_get_str(files->items[0], "sha256", &v, &err);
    } else {
        cfg_get_str(r, key, &v, &err);
    }
    if (v && strlen(v) == 64) memcpy(out, v, 65);
    cfg_free(r);
}

/* The newest ckpt/step-N/state.yaml of stage that exists, into p. */
static bool newest_manifest(const char *run, const char *stage, char *p, size_t cap) {
    char dir[PATH_MAX], m[PATH_MAX + 300];
    stage_path(dir, sizeof dir, run, stage, "ckpt");
    DIR *d = opendir(dir);
    if (!d) return false;
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        int used = 0;
        if (sscanf(e->d_name, "step-%" SCNd64 "%n", &step, &used) == 1 && !e->d_name[used] &&
            step > best) {
            snprintf(m, sizeof m, "%s/%s/state.yaml", dir, e->d_name);
            if (is_file(m) && strlen(m) < cap) best = step, strcpy(p, m);
        }
    }
    closedir(d);
    return best >= 0;
}

bool rundir_stage_stale(const char *run, const runconfig *rc, const char *stage, char *why,
                        size_t cap) {
    const runconfig_stage *s = runconfig_stage_find(rc, stage);
    if (!s || s->teacher_stage < 0) return false;
    const char *teacher = rc->stages[s->teacher_stage].name;
    char p[PATH_MAX], trained[65], now[65];
    stage_path(p, sizeof p, run, stage, "final/final.yaml");
    if (!is_file(p) && !newest_manifest(run, stage, p, sizeof p)) return false;
    recorded_sha(p, "teacher_sha256", trained);
    if (!*trained) return false; /* imported weights: trained under no teacher of this run */
    char tp[PATH_MAX];
    stage_path(tp, sizeof tp, run, teacher, "final/final.yaml");
    recorded_sha(tp, "files", now);
    if (!*now || !strcmp(trained, now)) return false;
    snprintf(why, cap,
             "teacher %s's weights changed: %s records teacher sha256 %.12s..., %s's final "
             "weights are now %.12s...",
             teacher, p, trained, teacher, now);
    return true;
}

int rundir_stage_retire(const char *run, const char *stage, char *dest, size_t cap, kf_err *err) {
    char p[PATH_MAX], from[PATH_MAX], to[PATH_MAX + 64];
    stage_path(p, sizeof p, run, stage, "lock");
    writer_lock l;
    if (writer_lock_take(p, "kf jobs run (retiring a stale stage)", &l, err)) return -1;
    int rv = 0;
    for (int n = 1;; n++) {
        snprintf(p, sizeof p, "stale/%d", n);
        stage_path(dest, cap, run, stage, p);
        if (!fs_exists(dest)) break;
    }
    if (fs_mkdir_p(dest, err)) rv = -1;
    const char *parts[] = {"final", "ckpt", "log.jsonl", "status"};
    for (int i = 0; i < 4 && !rv; i++) {
        stage_path(from, sizeof from, run, stage, parts[i]);
        snprintf(to, sizeof to, "%s/%s", dest, parts[i]);
        if (fs_exists(from) && fs_rename_atomic(from, to, err)) rv = -1;
    }
    writer_lock_release(&l);
    return rv;
}

bool rundir_untrained(const char *run, const runconfig *rc, char *why, size_t cap) {
    for (int i = 0; i < rc->n_stages; i++) {
        rundir_state st;
        rundir_stage_state(run, rc, rc->stages[i].name, &st);
        const char *what = st.complete                     ? "final weights"
                           : st.ckpt_step >= 0             ? "a checkpoint"
                           : st.log_step >= 0              ? "logged steps"
                           : !strcmp(st.status, "running") ? "status running"
                                                           : NULL;
        if (what) {
            snprintf(why, cap, "stage %s has %s", rc->stages[i].name, what);
            return false;
        }
    }
    return true;
}

/* ---- job records ---- */

int rundir_jobs_read(const char *run, rundir_job **jobs, kf_err *err) {
    char p[PATH_MAX];
    fs_path_join(p, sizeof p, run, "jobs.tsv");
    *jobs = NULL;
    if (!fs_exists(p)) return 0;
    char *text;
    size_t len;
    if (fs_read_file(p, &text, &len, err)) return -1;
    if (strncmp(text, JOBS_HEADER, strlen(JOBS_HEADER)))
        return free(text),
               kf_err_set(err, "%s:1:1: not a kf jobs file (expected '%.12s')", p, JOBS_HEADER);
    int n = 0, lineno = 1;
    for (char *line = text + strlen(JOBS_HEADER); *line; lineno++) {
        char *end = strchr(line, '\n');
        bool last = !end;
        if (last) end = line + strlen(line);
        *end = 0; /* one line at a time: a field must never run into the next */
        *jobs = kf_realloc(*jobs, (size_t)(n + 1) * sizeof **jobs);
        rundir_job *j = &(*jobs)[n];
        long long when;
        int used = -1;
        if (sscanf(line, "%63[^\t]\t%31[^\t]\t%lld%n", j->stage, j->id, &when, &used) != 3 ||
            line[used]) {
            free(text), free(*jobs), *jobs = NULL;
            return kf_err_set(err, "%s:%d:1: malformed job line", p, lineno + 1);
        }
        j->when = when, n++;
        line = last ? end : end + 1;
    }
    free(text);
    return n;
}

int rundir_jobs_add(const char *run, const char *stage, const char *id, kf_err *err) {
    rundir_job *jobs;
    int n = rundir_jobs_read(run, &jobs, err);
    if (n < 0) return -1;
    size_t cap = 64 + (size_t)(n + 1) * 128, len = 0;
    char *text = kf_malloc(cap);
    len += (size_t)snprintf(text, cap, "%s", JOBS_HEADER);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s\t%s\t%" PRId64 "\n", jobs[i].stage,
                                jobs[i].id, jobs[i].when);
    len +=
        (size_t)snprintf(text + len, cap - len, "%s\t%s\t%lld\n", stage, id, (long long)time(NULL));
    char p[PATH_MAX];
    fs_path_join(p, sizeof p, run, "jobs.tsv");
    int rv = fs_write_atomic(p, text, len, err);
    free(text), free(jobs);
    return rv;
}

const rundir_job *rundir_jobs_current(const rundir_job *jobs, int n, const char *stage) {
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(jobs[i].stage, stage)) return &jobs[i];
    return NULL;
}
