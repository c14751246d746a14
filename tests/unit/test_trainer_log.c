/* tests/unit/test_trainer_log.c — log.jsonl across a write that fails.
 *
 * One stage trains STEPS steps, a checkpoint every CKPT_EVERY. For each step
 * N, its log record's write fails part-way: a file size limit
 * (RLIMIT_FSIZE, as a full disk for the step's duration) lets a seeded
 * random number of the record's bytes reach the file. The stage must stop
 * with an error naming the log and write no checkpoint at or past step N (a
 * resume from one would never log step N); `--resume` then finishes it, and
 * the log is whole lines holding each step once, in order, with the losses
 * of an uninterrupted run, whose final weights the resumed run's equal.
 * Replay: the seed is SEED below; the failing trial prints N and the cut.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/rng.h"
#include "tests/test.h"
#include "tests/unit/trainer_fixture.h"
#include "trainer/cli/omp_env.h"
#include "trainer/train/train.h"

enum { STEPS = 6, CKPT_EVERY = 2, SEQ = 16, VOCAB = 40, SEED = 5 };

/* The on_step hook: before step `fail` (1-based) the log may grow by `cut`
 * bytes only, until the step ends. */
typedef struct window {
    char log[FIXTURE_PATH + 64];
    int64_t steps_begun, fail;
    uint64_t cut;
    struct rlimit was;
} window;

static void on_step(void *ctx, kf_backend *be, int begin) {
    (void)be;
    window *w = ctx;
    if (begin && ++w->steps_begun == w->fail) {
        struct stat st;
        T_REQUIRE(stat(w->log, &st) == 0, "%s: no log at step %lld", w->log, (long long)w->fail);
        struct rlimit lim = {.rlim_cur = (rlim_t)st.st_size + w->cut, .rlim_max = w->was.rlim_max};
        T_REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    } else if (!begin && w->steps_begun == w->fail) {
        T_REQUIRE(setrlimit(RLIMIT_FSIZE, &w->was) == 0, "setrlimit back");
    }
}

/* The log's loss records: losses[s - 1] is step s's "loss" as written.
 * Checks that every line parses and that the loss records are steps
 * 1..want, each once, in order. Returns how many there are. */
static int read_log(const char *run, const char *what, int want, char losses[][32]) {
    char p[FIXTURE_PATH + 64], *text;
    size_t n;
    kf_err err = {{0}};
    snprintf(p, sizeof p, "%s/stages/ar/log.jsonl", run);
    T_REQUIRE(fs_read_file(p, &text, &n, &err) == 0, "%s: %s", what, err.msg);
    T_CHECK(n == 0 || text[n - 1] == '\n', "%s: the log ends with a newline", what);
    int got = 0, line_no = 0;
    for (char *line = text, *nl; (nl = memchr(line, '\n', n - (size_t)(line - text)));
         line = nl + 1) {
        line_no++;
        json_doc *d = json_parse(line, (size_t)(nl - line), p, &err);
        T_CHECK(d != NULL, "%s: line %d does not parse: %.*s", what, line_no, (int)(nl - line),
                line);
        const json *step = d ? json_get(json_root(d), "step") : NULL;
        const json *loss = d ? json_get(json_root(d), "loss") : NULL;
        if (step && loss) {
            T_EQ_INT(step->i, got + 1, "%s: line %d: the step of loss record %d", what, line_no,
                     got + 1);
            /* the loss as written: the same training gives the same text */
            const char *v = strstr(line, "\"loss\":") + 7;
            if (got < STEPS) snprintf(losses[got], 32, "%.*s", (int)strcspn(v, ",}"), v);
            got++;
        }
        json_free(d);
    }
    T_EQ_INT(got, want, "%s: loss records in the log", what);
    free(text);
    return got;
}

/* The newest ckpt/step-N of the run (0: none). */
static int64_t newest_ckpt(const char *run) {
    int64_t best = 0;
    for (int64_t s = 1; s <= STEPS; s++) {
        char p[FIXTURE_PATH + 64];
        snprintf(p, sizeof p, "%s/stages/ar/ckpt/step-%lld", run, (long long)s);
        if (fs_is_dir(p)) best = s;
    }
    return best;
}

static int same_file(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    kf_err err = {{0}};
    if (fs_read_file(a, &x, &nx, &err)) return 0;
    if (fs_read_file(b, &y, &ny, &err)) {
        free(x);
        return 0;
    }
    int same = nx == ny && !memcmp(x, y, nx);
    free(x), free(y);
    return same;
}

int main(void) {
    omp_env_passive();        /* spinning OpenMP workers took 7 s of CPU here instead of 0.2 */
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit returns EFBIG instead */
    char dir[] = "/tmp/kf_test_trainer_log_XXXXXX";
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char data[FIXTURE_PATH], cfg[FIXTURE_PATH], ref[FIXTURE_PATH];
    fixture_run(dir, data, cfg, ref, 64, 16, SEQ, VOCAB);
    fixture_write(
        cfg,
        "name: log\n"
        "data: {train: %s, valid: %s}\n"
        "model: {hidden: 16, heads: 2, blocks: 1, vocab: %d, seq_len: %d}\n"
        "defaults: {batch: 2, lr: 1.0e-3, warmup: 0, seed: 7, checkpoint_every: %d,\n"
        "           keep_checkpoints: 100, eval_every: 3, eval_batches: 1, log_every: 1,\n"
        "           precision: [{mode: fp32}]}\n"
        "stages:\n"
        "  - {name: ar, kind: ar, steps: %d}\n"
        "resources: {ranks: 1, nodes: 1, gpus_per_node: 0, backend: cpu}\n",
        data, data, VOCAB, SEQ, CKPT_EVERY, STEPS);
    dist d = {.world = 1, .local_world = 1};
    train_args a = {.config = cfg, .stage = "ar", .run_dir = ref};
    T_REQUIRE(train_run(&a, &d) == 0, "the uninterrupted run");
    char want[STEPS][32], got[STEPS][32];
    read_log(ref, "uninterrupted run", STEPS, want);
    char ref_final[FIXTURE_PATH + 64];
    snprintf(ref_final, sizeof ref_final, "%s/stages/ar/final/model.safetensors", ref);

    for (int64_t fail = 1; fail <= STEPS; fail++) {
        char run[FIXTURE_PATH + 32], what[64];
        snprintf(run, sizeof run, "%s/run-%lld", dir, (long long)fail);
        window w = {.fail = fail, .cut = rng_below(SEED, 0, (uint64_t)fail, 200)};
        snprintf(w.log, sizeof w.log, "%s/stages/ar/log.jsonl", run);
        getrlimit(RLIMIT_FSIZE, &w.was);
        snprintf(what, sizeof what, "step %lld's record cut after %llu bytes", (long long)fail,
                 (unsigned long long)w.cut);
        train_args b = {
            .config = cfg, .stage = "ar", .run_dir = run, .on_step = on_step, .hook_ctx = &w};
        t_stderr_begin();
        int rc = train_run(&b, &d);
        char *out = t_stderr_end();
        T_EQ_INT(rc, 1, "%s: exit code", what);
        T_CHECK(strstr(out, "log.jsonl does not hold every step"), "%s: the error says why:\n%s",
                what, out);
        free(out);
        T_CHECK(newest_ckpt(run) < fail, "%s: no checkpoint at or past it (newest step-%lld)", what,
                (long long)newest_ckpt(run));
        read_log(run, what, (int)fail - 1, got);
        b.resume = 1, b.on_step = NULL;
        T_EQ_INT(train_run(&b, &d), 0, "%s: --resume", what);
        snprintf(what, sizeof what, "step %lld's record cut after %llu bytes, resumed",
                 (long long)fail, (unsigned long long)w.cut);
        if (read_log(run, what, STEPS, got) == STEPS)
            for (int s = 0; s < STEPS; s++)
                T_EQ_STR(got[s], want[s], "%s: step %d's loss against the uninterrupted run", what,
                         s + 1);
        char final[FIXTURE_PATH + 128];
        snprintf(final, sizeof final, "%s/stages/ar/final/model.safetensors", run);
        T_CHECK(same_file(final, ref_final), "%s: final weights equal the uninterrupted run's",
                what);
    }
    char cmd[FIXTURE_PATH + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return T_DONE();
}
