/* jobs/cli_jobs.c — `kf jobs plan|run|submit|status|resume|cancel|check`.
 *
 * A run config becomes a run directory (jobs/rundir.h) whose frozen run.yaml
 * every stage reads; the stages then run here in order (`run`, optionally
 * under mpirun) or as a chain of Slurm jobs (`submit`, jobs/slurm.h).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/proc.h"
#include "common/runconfig.h"
#include "common/stage_status.h"
#include "common/writer_lock.h"
#include "jobs/plan.h"
#include "jobs/rundir.h"
#include "jobs/sample.h"
#include "jobs/slurm.h"
#include "jobs/submit_env.h"

static const char usage_text[] =
    "usage: kf jobs COMMAND ...\n"
    "\n"
    "  plan   CONFIG [--flops F] [key=value...]\n"
    "         print the stage DAG (teachers) and estimated FLOPs, memory, time and jobs;\n"
    "         F = assumed FLOP/s per rank (default 6e10 for cpu, 2e14 for cuda)\n"
    "  run    CONFIG [--run-dir RUN] [--np N] [--no-sample] [key=value...]\n"
    "         run here, in order: kf shards build (when the data is missing), every stage\n"
    "         not yet complete (kf train, under mpirun -np N when N > 1; an interrupted\n"
    "         stage resumes from its checkpoint), then sample completions of AR and of every\n"
    "         PFLM stage at k = 1, 2, 4, ...: a table of tokens/s (x AR), Gen-PPL under the AR\n"
    "         stage, unigram entropy, distinct-2/3 and length, with a FLAG on rows outside\n"
    "         AR's margins (a failure there is reported; the exit status stays 0). RUN\n"
    "         defaults to runs/NAME.\n"
    "  submit CONFIG [--run-dir RUN] [key=value...]\n"
    "         make RUN, freeze the resolved config in RUN/run.yaml, write one sbatch script\n"
    "         per stage (RUN/slurm/STAGE.sbatch) and submit them chained with afterok;\n"
    "         prints STAGE JOBID lines. The jobs get this shell's environment; its launch\n"
    "         variables (OMPI_MCA_*, NCCL_*, ...) are recorded in RUN/slurm/env\n"
    "  status RUN [--json]\n"
    "         per stage: state, step/total, last valid checkpoint and its age, Slurm job,\n"
    "         state and nodes, throughput, ETA; then the cluster's nodes out of service\n"
    "         (down, drained, not responding) when the run has Slurm jobs\n"
    "  resume RUN [--config CONFIG] [--local [--np N]] [key=value...]\n"
    "         resubmit every incomplete stage (from its latest checkpoint), re-chained;\n"
    "         jobs still queued or running are kept, complete stages never redone. Only\n"
    "         resources.* may differ from RUN/run.yaml; another change is refused.\n"
    "         --local runs the rest here instead, like `run`. Warns about the cluster's\n"
    "         nodes out of service (a job that needs one waits for it) and about each\n"
    "         launch variable this shell has otherwise than the last submission.\n"
    "  cancel RUN\n"
    "         scancel the run's queued and running jobs\n"
    "  check  RUN STAGE\n"
    "         exit 0 when STAGE (or 'shards') is complete, 1 when not (used by\n"
    "         slurm/stage.sbatch)\n"
    "\n"
    "The run's stages read RUN/run.yaml, never CONFIG again: editing CONFIG after submit\n"
    "does not change the run. Exit codes: 0 done, 1 error, 2 usage, 75 preempted.\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "kf jobs: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(kf jobs --help for usage)\n");
    return KF_EXIT_USAGE;
}

/* ---- arguments ---- */

typedef struct args {
    const char *pos[2];
    int n_pos;
    char **over;
    int n_over;
    const char *run_dir, *config;
    double flops; /* 0: the backend's default */
    int64_t np;
    bool json, local, no_sample;
} args;

/* True when word is one of the space-separated words of list. */
static bool has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return true;
    return false;
}

/* Options anywhere (those of `allowed`, space-separated names without the
 * dashes); key=value words are overrides. Returns 0, or -1 when the command
 * should exit with *code (--help, a usage error). */
static int parse_args(int argc, char **argv, args *a, const char *allowed, int *code) {
    memset(a, 0, sizeof *a);
    a->np = 1;
    a->over = kf_calloc((size_t)argc + 1, sizeof *a->over);
    const cli_opt all[] = {
        {"--run-dir", CLI_STR, .out = &a->run_dir},
        {"--config", CLI_STR, .out = &a->config},
        {"--flops", CLI_FLOAT, .out = &a->flops, .lo = 0, .hi = INFINITY, .above = true},
        {"--np", CLI_INT, .out = &a->np, .lo = 1, .hi = 4096},
        {"--json", CLI_FLAG, .out = &a->json},
        {"--local", CLI_FLAG, .out = &a->local},
        {"--no-sample", CLI_FLAG, .out = &a->no_sample},
    };
    cli_opt opts[sizeof all / sizeof *all + 1];
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (has_word(allowed, all[i].name + 2)) opts[n++] = all[i];
    opts[n] = (cli_opt)CLI_OPT_END;
    const cli_spec spec = {"kf jobs",       usage_text,          opts,
                           .pos = a->pos,   .max_pos = 2,        .n_pos = &a->n_pos,
                           .over = a->over, .n_over = &a->n_over};
    if (cli_parse(&spec, argc, argv, code)) {
        free(a->over); /* the caller frees it only on success */
        a->over = NULL;
        return -1;
    }
    return 0;
}

/* The usage error of a command given other than its want (n words, e.g.
 * "CONFIG" or "RUN STAGE") positional arguments, or overrides it does not
 * take: names the word at fault. */
static int positional_error(const args *a, const char *cmd, const char *want, int n,
                            bool overrides) {
    char msg[256];
    if (a->n_pos > n)
        snprintf(msg, sizeof msg, "%s takes %s%s; unexpected argument '%%s'", cmd, want,
                 overrides ? " then key.path=value overrides" : "");
    else if (a->n_pos < n) snprintf(msg, sizeof msg, "%s needs %s%%s", cmd, want);
    else snprintf(msg, sizeof msg, "%s takes no overrides: unexpected '%%s'", cmd);
    int code = usage_error(msg, a->n_pos > n ? a->pos[n] : a->n_pos < n ? "" : a->over[0]);
    free(a->over);
    return code;
}

/* ---- shared steps ---- */

static const char *default_run_dir(const runconfig *rc, char *buf, size_t cap) {
    snprintf(buf, cap, "runs/%s", rc->name);
    return buf;
}

static bool run_has_live_jobs(const char *run);

/* Makes or reopens run for the config: a new run freezes it; an existing one
 * must have the same config up to compatible changes (resources.*), which are
 * written into its run.yaml, unless no stage has trained yet (a first attempt
 * that failed early): then nothing depends on run.yaml and the corrected
 * config replaces it. *out is loaded from RUN/run.yaml. */
static int open_run(const char *run, const runconfig *rc, runconfig **out, kf_err *err) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/run.yaml", run);
    if (fs_exists(p)) {
        runconfig *frozen;
        if (rundir_load(run, 0, NULL, &frozen, err)) return -1;
        char what[512], why[256] = "jobs of the run are queued or running";
        int d = rundir_config_diff(frozen->canonical, rc->canonical, what, sizeof what);
        bool untrained =
            d == 2 && !run_has_live_jobs(run) && rundir_untrained(run, frozen, why, sizeof why);
        runconfig_free(frozen);
        if (untrained) {
            fprintf(stderr,
                    "kf jobs: %s: no stage has trained yet: %s replaces its frozen run.yaml (%s)\n",
                    run, rc->path, what);
            if (rundir_freeze(run, rc, err)) return -1;
        } else if (d == 2) {
            return kf_err_set(
                err,
                "%s differs from the run's frozen %s in %s; only resources.* may change "
                "in a run in progress (%s; use another --run-dir for a new run)",
                rc->path, p, what, why);
        } else if (d == 1) {
            fprintf(stderr, "kf jobs: %s: updating resources in %s (%s)\n", run, p, what);
            if (rundir_freeze(run, rc, err)) return -1;
        }
    } else if (rundir_freeze(run, rc, err)) {
        return -1;
    }
    return rundir_load(run, 0, NULL, out, err);
}

static const char *kf_bin(void) {
    const char *e = getenv("KF_BIN");
    return e && *e ? e : proc_self_exe();
}

/* Runs one stage (or the shards pseudo-stage) here; np > 1 uses mpirun. */
static int run_stage_local(const char *run, const runconfig *rc, const char *stage, int np,
                           kf_err *err) {
    char yaml[PATH_MAX], npbuf[16];
    snprintf(yaml, sizeof yaml, "%s/run.yaml", run);
    char *argv[24];
    int a = 0;
    const runconfig_stage *s = runconfig_stage_find(rc, stage);
    if (!s) {
        argv[a++] = (char *)kf_bin(), argv[a++] = "shards", argv[a++] = "build", argv[a++] = yaml;
    } else {
        if (np > 1) {
            snprintf(npbuf, sizeof npbuf, "%d", np);
            argv[a++] = "mpirun", argv[a++] = "-np", argv[a++] = npbuf,
            argv[a++] = "--oversubscribe";
            if (geteuid() == 0) argv[a++] = "--allow-run-as-root";
        }
        /* --resume continues from the newest valid checkpoint, or starts at 0 */
        argv[a++] = (char *)kf_bin(), argv[a++] = "train", argv[a++] = yaml, argv[a++] = "--stage";
        argv[a++] = s->name, argv[a++] = "--run-dir", argv[a++] = (char *)run,
        argv[a++] = "--resume";
    }
    argv[a] = NULL;
    fprintf(stderr, "kf jobs: %s: running", stage);
    for (int i = 0; i < a; i++) fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, "\n");
    /* a lone trainer starts with the forwarded signals held until its
     * handlers are in place; mpirun is not held (it would keep them) */
    return proc_run(argv, s && np <= 1 ? PROC_HOLD_SIGNALS : 0, err);
}

static const char *elapsed(double s, char *buf, size_t cap) {
    if (s < 120) snprintf(buf, cap, "%.1f s", s);
    else snprintf(buf, cap, "%.1f min", s / 60);
    return buf;
}

/* A trainer that ended without a word (killed: SIGKILL, OOM, a crash) left
 * `running` in its status: record that it is not, and why, under the stage's
 * lock (free now, or another writer took the stage and says for itself). */
static void record_end(const char *run, const char *stage, int code) {
    char dir[PATH_MAX], p[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/stages/%s", run, stage);
    snprintf(p, sizeof p, "%s/lock", dir);
    stage_status ss;
    kf_err err = {{0}};
    writer_lock l;
    if (!fs_exists(p) || writer_lock_take(p, "kf jobs run (recording a trainer's end)", &l, &err))
        return;
    if (stage_status_read(dir, &ss, &err) == 0 && !strcmp(ss.state, "running")) {
        snprintf(ss.state, sizeof ss.state, "%s", code > 128 ? "interrupted" : "failed");
        if (code > 128)
            snprintf(ss.reason, sizeof ss.reason, "killed by signal %d (%s)", code - 128,
                     strsignal(code - 128));
        else snprintf(ss.reason, sizeof ss.reason, "exit %d", code);
        if (stage_status_write(dir, &ss, &err)) fprintf(stderr, "kf jobs: %s\n", err.msg);
    }
    writer_lock_release(&l);
}

/* Says how a stage that did not complete stopped, and what brings it on, in
 * words that are true: a stage refused for another writer is not resumed by
 * running again while that writer lives. Returns the command's exit code. */
static int stage_stopped(const char *run, const runconfig *rc, const char *stage, int code,
                         const char *why) {
    if (code == KF_EXIT_PREEMPTED) {
        fprintf(stderr,
                "kf jobs: %s: preempted with a checkpoint; run the same command again to resume\n",
                stage);
        return KF_EXIT_PREEMPTED;
    }
    if (!strcmp(stage, RUNDIR_SHARDS)) {
        fprintf(stderr,
                "kf jobs: shards: failed (exit %d); fix what the error above names, then run the "
                "same command again\n",
                code);
        return KF_EXIT_ERROR;
    }
    record_end(run, stage, code);
    rundir_state st;
    rundir_stage_state(run, rc, stage, &st);
    if (st.live) {
        fprintf(stderr,
                "kf jobs: %s: not run: it is being written by %s; wait for that to end (or stop "
                "it), then run the same command again\n",
                stage, st.holder);
        return KF_EXIT_ERROR;
    }
    char from[96];
    if (st.ckpt_step >= 0) snprintf(from, sizeof from, "from its checkpoint %s", st.ckpt);
    else snprintf(from, sizeof from, "from step 0 (it has no checkpoint that verifies)");
    if (code > 128)
        fprintf(stderr,
                "kf jobs: %s: interrupted: killed by signal %d (%s); run the same command again "
                "to resume %s\n",
                stage, code - 128, strsignal(code - 128), from);
    else if (code)
        fprintf(stderr,
                "kf jobs: %s: failed (exit %d); once what the error above names is fixed, the "
                "same command resumes it %s\n",
                stage, code, from);
    else
        fprintf(stderr,
                "kf jobs: %s: ended without finishing (%s); the same command resumes it %s\n",
                stage, why, from);
    return KF_EXIT_ERROR;
}

/* Every incomplete stage here, in order. */
static int run_local(const char *run, const runconfig *rc, int np, int no_sample) {
    kf_err err;
    double start = clock_now_s();
    char why[PATH_MAX + 64];
    int n = rc->n_stages + 1;
    for (int i = 0; i < n; i++) {
        const char *stage = i == 0 ? RUNDIR_SHARDS : rc->stages[i - 1].name;
        /* its teacher ran before it: a teacher whose weights changed since
         * this stage trained (re-imported, retrained) makes it stale */
        char stale[PATH_MAX + 256], dest[PATH_MAX];
        if (i > 0 && rundir_stage_stale(run, rc, stage, stale, sizeof stale)) {
            if (rundir_stage_retire(run, stage, dest, sizeof dest, &err))
                return kf_err_report("kf jobs", &err);
            fprintf(stderr,
                    "kf jobs: %s: stale: %s; training it again from step 0 (what it had "
                    "is kept in %s)\n",
                    stage, stale, dest);
        }
        if (rundir_stage_complete(run, rc, stage, why, sizeof why)) {
            fprintf(stderr, "kf jobs: %s: complete, skipped\n", stage);
            continue;
        }
        /* a finished stage whose final/ no longer verifies: its students may
         * have learned from the weights it had, so nothing here replaces them */
        if (i > 0 && rundir_final_verify(run, stage, why, sizeof why) < 0) {
            fprintf(stderr,
                    "kf jobs: %s: its final weights are damaged: %s\n"
                    "kf jobs: remove %s/stages/%s/final to retrain the stage from its last "
                    "checkpoint, or `kf import --force` its weights again\n",
                    stage, why, run, stage);
            return KF_EXIT_ERROR;
        }
        double t0 = clock_now_s();
        int code = run_stage_local(run, rc, stage, np, &err);
        if (code < 0) return kf_err_report("kf jobs", &err);
        if (code == 0 && rundir_stage_complete(run, rc, stage, why, sizeof why)) {
            char took[32];
            fprintf(stderr, "kf jobs: %s: complete (%s)\n", stage,
                    elapsed(clock_now_s() - t0, took, sizeof took));
            continue;
        }
        return stage_stopped(run, rc, stage, code, code ? "" : why);
    }
    char took[32];
    fprintf(stderr, "kf jobs: every stage of %s is complete (%s in this command)\n", run,
            elapsed(clock_now_s() - start, took, sizeof took));
    /* the stages are the run's result: a failure of the samples after them is
     * reported, and the samples can be redone by running the command again */
    if (!no_sample && sample_run(run, rc, kf_bin(), &err))
        fprintf(stderr, "kf jobs: samples failed (the trained stages are complete): %s\n", err.msg);
    return KF_EXIT_OK;
}

/* stale[i] (why[i], cap bytes each) for every config stage: trained under
 * teacher weights that changed since, or under a teacher that is itself
 * stale (to be trained again). */
static void stale_stages(const char *run, const runconfig *rc, bool *stale, char *why, size_t cap) {
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *s = &rc->stages[i];
        char *w = why + (size_t)i * cap;
        *w = 0;
        stale[i] = rundir_stage_stale(run, rc, s->name, w, cap);
        if (!stale[i] && s->teacher_stage >= 0 && stale[s->teacher_stage]) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/stages/%s", run, s->name);
            stale[i] = fs_exists(p); /* trained (or training) under it */
            snprintf(w, cap, "its teacher %s is stale", rc->stages[s->teacher_stage].name);
        }
    }
}

/* Submits the incomplete stages as a chain. A job of the run still queued or
 * running is kept (and the chain continues after it) as long as nothing
 * before it was resubmitted; otherwise it is cancelled and resubmitted so the
 * chain stays in order. When it submitted any job, records the launch
 * environment they got (submit_env.h). */
static int submit_chain(const char *run, const runconfig *rc, kf_err *err) {
    char cwd[PATH_MAX], script[PATH_MAX], why[PATH_MAX + 64];
    if (!getcwd(cwd, sizeof cwd)) return kf_err_set(err, "getcwd: %s", strerror(errno));
    rundir_job *jobs;
    int nj = rundir_jobs_read(run, &jobs, err);
    if (nj < 0) return -1;
    char prev[32] = "";
    int resubmitted = 0, submitted = 0;
    enum { WHY = PATH_MAX + 256 };
    bool *stale = kf_calloc((size_t)rc->n_stages + 1, sizeof *stale);
    char *stale_why = kf_calloc((size_t)rc->n_stages + 1, WHY);
    stale_stages(run, rc, stale, stale_why, WHY);
    for (int i = 0; i <= rc->n_stages; i++) {
        const char *stage = i == 0 ? RUNDIR_SHARDS : rc->stages[i - 1].name;
        if (i > 0 && stale[i - 1]) {
            char dest[PATH_MAX];
            if (rundir_stage_retire(run, stage, dest, sizeof dest, err)) goto fail;
            fprintf(stderr,
                    "kf jobs: %s: stale: %s; training it again (what it had is kept in %s)\n",
                    stage, stale_why + (size_t)(i - 1) * WHY, dest);
        }
        if (rundir_stage_complete(run, rc, stage, why, sizeof why)) continue;
        const rundir_job *cur = rundir_jobs_current(jobs, nj, stage);
        slurm_job sj;
        if (cur && slurm_query(cur->id, &sj) == 0 && slurm_state_alive(sj.state) &&
            strcmp(sj.reason, "DependencyNeverSatisfied")) {
            if (!resubmitted) {
                printf("%s\t%s\tkept (%s)\n", stage, cur->id, sj.state);
                snprintf(prev, sizeof prev, "%s", cur->id);
                continue;
            }
            if (slurm_cancel(cur->id, err)) goto fail;
        }
        char id[32];
        if (slurm_write_script(run, rc, stage, cwd, script, sizeof script, err) ||
            slurm_submit(script, *prev ? prev : NULL, id, err) ||
            rundir_jobs_add(run, stage, id, err))
            goto fail;
        printf("%s\t%s\t%s%s\n", stage, id, *prev ? "afterok:" : "", *prev ? prev : "first");
        fflush(stdout);
        snprintf(prev, sizeof prev, "%s", id);
        resubmitted = 1, submitted++;
    }
    free(jobs), free(stale), free(stale_why);
    if (!*prev) fprintf(stderr, "kf jobs: %s: every stage is complete, nothing to submit\n", run);
    return submitted ? submit_env_record(run, err) : 0;
fail:
    free(jobs), free(stale), free(stale_why);
    return -1;
}

/* ---- commands ---- */

static int cmd_plan(int argc, char **argv) {
    args a;
    int code;
    if (parse_args(argc, argv, &a, "flops ", &code)) return code;
    if (a.n_pos != 1) return positional_error(&a, "plan", "CONFIG", 1, true);
    kf_err err;
    runconfig *rc;
    if (runconfig_load(a.pos[0], a.n_over, a.over, &rc, &err))
        return kf_err_report("kf jobs", &err);
    double flops =
        !strcmp(rc->res.backend, "cuda") ? 2e14 : 6e10; /* cpu: the tiny AR stage on 2 cores */
    if (a.flops > 0) flops = a.flops;
    plan_print(stdout, rc, flops);
    runconfig_free(rc);
    free(a.over);
    return KF_EXIT_OK;
}

/* Takes RUN/lock (making RUN) for the command `what`: one command at a time
 * drives a run (its run.yaml, jobs.tsv, samples and the stages it starts). */
static int lock_run(const char *run, const char *what, writer_lock *l, kf_err *err) {
    char p[PATH_MAX];
    l->fd = -1;
    if (fs_mkdir_p(run, err)) return -1;
    fs_path_join(p, sizeof p, run, "lock");
    return writer_lock_take(p, what, l, err);
}

/* Loads CONFIG with overrides, locks its run directory for `what` and opens
 * (or makes) it. */
static int load_and_open(const args *a, const char *what, char *run, size_t cap, writer_lock *l,
                         runconfig **out, kf_err *err) {
    runconfig *rc;
    if (runconfig_load(a->pos[0], a->n_over, a->over, &rc, err)) return -1;
    if (a->run_dir) snprintf(run, cap, "%s", a->run_dir);
    else default_run_dir(rc, run, cap);
    int rv = lock_run(run, what, l, err) || open_run(run, rc, out, err) ? -1 : 0;
    runconfig_free(rc);
    return rv;
}

/* Missing data that no `shards:` set can build fails here, naming the
 * config the user gave (kf shards build RUN/run.yaml would blame run.yaml). */
static int check_data_buildable(const char *run, const runconfig *rc, const char *config,
                                kf_err *err) {
    char why[PATH_MAX + 64];
    if (rundir_stage_complete(run, rc, RUNDIR_SHARDS, why, sizeof why)) return 0;
    cfg_node *root = cfg_load_string(rc->canonical, "run.yaml", err);
    if (!root) return -1;
    bool has = cfg_find(root, "shards") != NULL;
    cfg_free(root);
    if (has) return 0;
    return kf_err_set(err,
                      "%s: %s, and the config has no `shards:` section to build it: add one "
                      "(pipeline/build_config.h documents it) or point data.train and data.valid "
                      "at built shards",
                      config, why);
}

static int cmd_run(int argc, char **argv) {
    args a;
    int code;
    if (parse_args(argc, argv, &a, "run-dir np no-sample ", &code)) return code;
    if (a.n_pos != 1) return positional_error(&a, "run", "CONFIG", 1, true);
    kf_err err;
    char run[PATH_MAX];
    runconfig *rc;
    writer_lock lock;
    if (load_and_open(&a, "kf jobs run", run, sizeof run, &lock, &rc, &err)) {
        writer_lock_release(&lock);
        free(a.over);
        return kf_err_report("kf jobs", &err);
    }
    if (check_data_buildable(run, rc, a.pos[0], &err)) {
        runconfig_free(rc);
        free(a.over);
        writer_lock_release(&lock);
        return kf_err_report("kf jobs", &err);
    }
    fprintf(stderr, "kf jobs: run %s in %s (config sha256 %.16s)\n", rc->name, run, rc->hash);
    code = run_local(run, rc, (int)a.np, a.no_sample);
    runconfig_free(rc);
    free(a.over);
    writer_lock_release(&lock);
    return code;
}

static bool run_has_live_jobs(const char *run) {
    kf_err err;
    rundir_job *jobs;
    int n = rundir_jobs_read(run, &jobs, &err);
    bool live = false;
    for (int i = 0; i < n && !live; i++) {
        slurm_job sj;
        live = rundir_jobs_current(jobs, n, jobs[i].stage) == &jobs[i] &&
               slurm_query(jobs[i].id, &sj) == 0 && slurm_state_alive(sj.state);
    }
    free(jobs);
    return live;
}

static int cmd_submit(int argc, char **argv) {
    args a;
    int code;
    if (parse_args(argc, argv, &a, "run-dir ", &code)) return code;
    if (a.n_pos != 1) return positional_error(&a, "submit", "CONFIG", 1, true);
    kf_err err;
    if (!slurm_available()) {
        fprintf(stderr, "kf jobs: error: Slurm's sbatch/scontrol/scancel are not in PATH; use kf "
                        "jobs run to run here\n");
        return KF_EXIT_ERROR;
    }
    char run[PATH_MAX], abs_run[PATH_MAX];
    runconfig *rc;
    writer_lock lock;
    if (load_and_open(&a, "kf jobs submit", run, sizeof run, &lock, &rc, &err)) {
        writer_lock_release(&lock);
        return kf_err_report("kf jobs", &err);
    }
    code = KF_EXIT_OK;
    if (check_data_buildable(run, rc, a.pos[0], &err)) {
        code = kf_err_report("kf jobs", &err);
    } else if (!realpath(run, abs_run)) {
        kf_err_set(&err, "%s: %s", run, strerror(errno));
        code = kf_err_report("kf jobs", &err);
    } else if (run_has_live_jobs(abs_run)) {
        fprintf(stderr,
                "kf jobs: error: %s already has jobs queued or running; see kf jobs status %s "
                "(kf jobs resume re-chains the rest)\n",
                run, run);
        code = KF_EXIT_ERROR;
    } else {
        printf("# run %s: %s (config sha256 %s)\n", rc->name, abs_run, rc->hash);
        if (submit_chain(abs_run, rc, &err)) code = kf_err_report("kf jobs", &err);
    }
    runconfig_free(rc);
    free(a.over);
    writer_lock_release(&lock);
    return code;
}

static int cmd_resume(int argc, char **argv) {
    args a;
    int code;
    if (parse_args(argc, argv, &a, "config local np ", &code)) return code;
    if (a.n_pos != 1) return positional_error(&a, "resume", "RUN", 1, true);
    kf_err err;
    char run[PATH_MAX], yaml[PATH_MAX + 16];
    if (!realpath(a.pos[0], run)) {
        kf_err_set(&err, "%s: %s", a.pos[0], strerror(errno));
        return kf_err_report("kf jobs", &err);
    }
    if ((size_t)snprintf(yaml, sizeof yaml, "%s/run.yaml", run) >= sizeof yaml)
        return usage_error("path too long: %s", run);
    runconfig *frozen, *rc;
    if (rundir_load(run, 0, NULL, &frozen, &err)) return kf_err_report("kf jobs", &err);
    runconfig_free(frozen);
    if (runconfig_load(a.config ? a.config : yaml, a.n_over, a.over, &rc, &err))
        return kf_err_report("kf jobs", &err);
    runconfig *cur;
    writer_lock lock;
    int rv = lock_run(run, a.local ? "kf jobs resume --local" : "kf jobs resume", &lock, &err) ||
             open_run(run, rc, &cur, &err);
    runconfig_free(rc);
    if (rv) {
        writer_lock_release(&lock);
        return kf_err_report("kf jobs", &err);
    }
    code = KF_EXIT_OK;
    if (a.local) {
        code = run_local(run, cur, (int)a.np, 1);
    } else if (!slurm_available()) {
        fprintf(stderr,
                "kf jobs: error: Slurm is not available here; kf jobs resume %s --local runs the "
                "rest here\n",
                run);
        code = KF_EXIT_ERROR;
    } else {
        printf("# run %s: %s (config sha256 %s)\n", cur->name, run, cur->hash);
        submit_env_compare(run, stderr);
        if (submit_chain(run, cur, &err)) code = kf_err_report("kf jobs", &err);
        /* a job needing a lost node waits for it: say so rather than look stuck */
        slurm_node *down;
        int nd = slurm_down_nodes(&down);
        for (int i = 0; i < nd; i++)
            fprintf(stderr,
                    "kf jobs: warning: node %s is out of service (%s%s%s); jobs that need it wait "
                    "until it "
                    "is back (start its slurmd; scontrol update NodeName=%s State=RESUME)\n",
                    down[i].name, down[i].state, *down[i].reason ? ": " : "", down[i].reason,
                    down[i].name);
        free(down);
    }
    runconfig_free(cur);
    free(a.over);
    writer_lock_release(&lock);
    return code;
}

/* Whether Slurm says job id has ended (its state into *sj); false when the
 * state cannot be read. */
static bool job_ended(const char *id, slurm_job *sj) {
    return slurm_query(id, sj) == 0 && !slurm_state_alive(sj->state);
}

static int cmd_cancel(int argc, char **argv) {
    args a;
    int code;
    if (parse_args(argc, argv, &a, "", &code)) return code;
    if (a.n_pos != 1 || a.n_over) return positional_error(&a, "cancel", "RUN", 1, false);
    kf_err err;
    rundir_job *jobs;
    int n = rundir_jobs_read(a.pos[0], &jobs, &err);
    if (n < 0) return kf_err_report("kf jobs", &err);
    code = KF_EXIT_OK;
    int cancelled = 0;
    /* Last stage first: cancelling a job makes Slurm cancel its afterok
     * dependents itself (kill_invalid_depend), which would race our own
     * scancel of them. */
    for (int i = n - 1; i >= 0; i--) {
        if (rundir_jobs_current(jobs, n, jobs[i].stage) != &jobs[i]) continue;
        slurm_job sj;
        /* a job whose state cannot be read is cancelled all the same */
        if (job_ended(jobs[i].id, &sj)) continue;
        if (slurm_cancel(jobs[i].id, &err)) {
            /* it may have ended between the query and scancel */
            if (job_ended(jobs[i].id, &sj))
                printf("%s\t%s\talready ended (%s)\n", jobs[i].stage, jobs[i].id, sj.state);
            else code = kf_err_report("kf jobs", &err);
            continue;
        }
        printf("%s\t%s\tcancelled (was %s)\n", jobs[i].stage, jobs[i].id, sj.state);
        cancelled++;
    }
    if (!cancelled && code == KF_EXIT_OK)
        fprintf(stderr, "kf jobs: %s: no queued or running jobs\n", a.pos[0]);
    free(jobs);
    free(a.over);
    return code;
}

static int cmd_check(int argc, char **argv) {
    args a;
    int code;
    if (parse_args(argc, argv, &a, "", &code)) return code;
    free(a.over); /* check takes no overrides */
    if (a.n_pos != 2 || a.n_over) return positional_error(&a, "check", "RUN STAGE", 2, false);
    kf_err err;
    runconfig *rc;
    if (rundir_load(a.pos[0], 0, NULL, &rc, &err)) return kf_err_report("kf jobs", &err);
    const char *stage = a.pos[1];
    if (strcmp(stage, RUNDIR_SHARDS) && !runconfig_stage_find(rc, stage)) {
        runconfig_free(rc);
        return usage_error("no stage '%s' in the run", stage);
    }
    char why[PATH_MAX + 64];
    bool done = rundir_stage_complete(a.pos[0], rc, stage, why, sizeof why);
    if (done) printf("%s: complete\n", stage);
    else printf("%s: not complete: %s\n", stage, why);
    runconfig_free(rc);
    return done ? KF_EXIT_OK : KF_EXIT_ERROR;
}

/* ---- status ---- */

typedef struct row {
    const char *stage, *kind;
    char state[48];
    int64_t step, total;
    rundir_state st;
    const rundir_job *job;
    slurm_job sj;
    double eta_s, ckpt_age_s;
} row;

static void lower(char *out, size_t cap, const char *s) {
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++) out[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    out[i] = 0;
}

static void fill_row(const char *run, const runconfig *rc, const rundir_job *jobs, int nj, int i,
                     row *r) {
    memset(r, 0, sizeof *r);
    const runconfig_stage *s = i < 0 ? NULL : &rc->stages[i];
    r->stage = s ? s->name : RUNDIR_SHARDS;
    r->kind = s ? runconfig_kind_name(s->kind) : "shards";
    rundir_stage_state(run, rc, r->stage, &r->st);
    r->job = rundir_jobs_current(jobs, nj, r->stage);
    if (r->job) slurm_query(r->job->id, &r->sj);
    r->total = s ? s->steps : 0;
    r->step = r->st.complete && s                ? s->steps
              : r->st.log_step > r->st.ckpt_step ? r->st.log_step
                                                 : r->st.ckpt_step;
    time_t now = time(NULL);
    r->ckpt_age_s = r->st.ckpt_step >= 0 ? difftime(now, r->st.ckpt_mtime) : -1;
    r->eta_s = -1;
    bool alive = r->job && slurm_state_alive(r->sj.state);
    /* running: a live process holds the stage's lock, or its Slurm job runs */
    if (r->st.complete) snprintf(r->state, sizeof r->state, "complete");
    else if (r->st.live) snprintf(r->state, sizeof r->state, "running");
    else if (alive && !strcmp(r->sj.state, "RUNNING"))
        snprintf(r->state, sizeof r->state, "running");
    else if (alive) snprintf(r->state, sizeof r->state, "queued");
    else if (r->job && strcmp(r->sj.state, "UNKNOWN") && strcmp(r->sj.state, "COMPLETED"))
        lower(r->state, sizeof r->state, r->sj.state); /* failed, cancelled, timeout, ... */
    else if (!strcmp(r->st.status, "running"))         /* said so, and died without a word */
        snprintf(r->state, sizeof r->state, "interrupted");
    else if (!strcmp(r->st.status, "preempted") || !strcmp(r->st.status, "failed") ||
             !strcmp(r->st.status, "interrupted") || !strcmp(r->st.status, "stale"))
        snprintf(r->state, sizeof r->state, "%.*s", (int)sizeof r->state - 1, r->st.status);
    else if (r->st.ckpt_step >= 0 || r->st.log_step >= 0)
        snprintf(r->state, sizeof r->state, "partial");
    else snprintf(r->state, sizeof r->state, "not started");
    if (!r->st.complete && r->st.steps_per_s > 0 && r->step >= 0 && !strcmp(r->state, "running"))
        r->eta_s = (double)(r->total - r->step) / r->st.steps_per_s;
}

static void age(double s, char *buf, size_t cap) {
    if (s < 0) snprintf(buf, cap, "-");
    else if (s < 120) snprintf(buf, cap, "%.0fs", s);
    else if (s < 7200) snprintf(buf, cap, "%.0fm", s / 60);
    else snprintf(buf, cap, "%.1fh", s / 3600);
}

static void json_num_or_null(FILE *f, const char *key, double v, int ok) {
    if (ok) fprintf(f, ",\"%s\":%.6g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

static void print_json(const char *run, const runconfig *rc, row *rows, int n,
                       const slurm_node *down, int nd) {
    printf("{\"run\":");
    json_write_str(stdout, rc->name, strlen(rc->name));
    printf(",\"dir\":");
    json_write_str(stdout, run, strlen(run));
    printf(",\"config_sha256\":\"%s\",\"stages\":[", rc->hash);
    for (int i = 0; i < n; i++) {
        row *r = &rows[i];
        printf("%s{\"name\":", i ? "," : "");
        json_write_str(stdout, r->stage, strlen(r->stage));
        printf(",\"kind\":\"%s\",\"state\":\"%s\",\"complete\":%s", r->kind, r->state,
               r->st.complete ? "true" : "false");
        printf(",\"step\":%lld,\"total\":%lld", (long long)r->step, (long long)r->total);
        printf(",\"ckpt\":");
        if (r->st.ckpt_step >= 0) json_write_str(stdout, r->st.ckpt, strlen(r->st.ckpt));
        else printf("null");
        printf(",\"ckpt_step\":%lld", (long long)r->st.ckpt_step);
        json_num_or_null(stdout, "ckpt_age_s", r->ckpt_age_s, r->ckpt_age_s >= 0);
        printf(",\"job_id\":");
        if (r->job) json_write_str(stdout, r->job->id, strlen(r->job->id));
        else printf("null");
        printf(",\"slurm_state\":");
        if (r->job) {
            printf("\"%s\",\"slurm_reason\":\"%s\",\"restarts\":%d,\"nodes\":", r->sj.state,
                   r->sj.reason, r->sj.restarts);
            json_write_str(stdout, r->sj.nodes, strlen(r->sj.nodes));
        } else {
            printf("null,\"slurm_reason\":null,\"restarts\":null,\"nodes\":null");
        }
        json_num_or_null(stdout, "tokens_per_s", r->st.tokens_per_s, r->st.tokens_per_s > 0);
        json_num_or_null(stdout, "steps_per_s", r->st.steps_per_s, r->st.steps_per_s > 0);
        json_num_or_null(stdout, "eta_s", r->eta_s, r->eta_s >= 0);
        printf(",\"status\":");
        json_write_str(stdout, r->st.status, strlen(r->st.status));
        printf(",\"reason\":");
        json_write_str(stdout, r->st.reason, strlen(r->st.reason));
        printf(",\"holder\":");
        if (r->st.live) json_write_str(stdout, r->st.holder, strlen(r->st.holder));
        else printf("null");
        printf("}");
    }
    printf("],\"down_nodes\":[");
    for (int i = 0; i < nd; i++) {
        printf("%s{\"node\":", i ? "," : "");
        json_write_str(stdout, down[i].name, strlen(down[i].name));
        printf(",\"state\":");
        json_write_str(stdout, down[i].state, strlen(down[i].state));
        printf(",\"reason\":");
        json_write_str(stdout, down[i].reason, strlen(down[i].reason));
        printf("}");
    }
    printf("]}\n");
}

static void print_table(const char *run, const runconfig *rc, row *rows, int n,
                        const slurm_node *down, int nd) {
    printf("run %s: %s (config sha256 %.16s)\n", rc->name, run, rc->hash);
    printf("%-10s %-14s %-11s %-15s %-12s %6s %-10s %-22s %10s %8s\n", "stage", "kind", "state",
           "step/total", "checkpoint", "age", "job", "slurm", "tokens/s", "eta");
    for (int i = 0; i < n; i++) {
        row *r = &rows[i];
        char steps[40], ck[sizeof r->st.ckpt], ag[16], sl[224], tps[24], eta[16];
        if (r->total)
            snprintf(steps, sizeof steps, "%lld/%lld", (long long)(r->step < 0 ? 0 : r->step),
                     (long long)r->total);
        else snprintf(steps, sizeof steps, "-");
        snprintf(ck, sizeof ck, "%s", r->st.ckpt_step >= 0 ? r->st.ckpt : "-");
        age(r->ckpt_age_s, ag, sizeof ag);
        if (!r->job) snprintf(sl, sizeof sl, "-");
        else if (r->sj.restarts > 0)
            snprintf(sl, sizeof sl, "%s%s%s r%d", r->sj.state, *r->sj.reason ? "/" : "",
                     r->sj.reason, r->sj.restarts);
        else snprintf(sl, sizeof sl, "%s%s%s", r->sj.state, *r->sj.reason ? "/" : "", r->sj.reason);
        if (r->st.tokens_per_s > 0) snprintf(tps, sizeof tps, "%.0f", r->st.tokens_per_s);
        else snprintf(tps, sizeof tps, "-");
        age(r->eta_s, eta, sizeof eta);
        if (*r->sj.nodes) snprintf(sl + strlen(sl), sizeof sl - strlen(sl), " on %s", r->sj.nodes);
        printf("%-10s %-14s %-11s %-15s %-12s %6s %-10s %-22s %10s %8s\n", r->stage, r->kind,
               r->state, steps, ck, ag, r->job ? r->job->id : "-", sl, tps, eta);
    }
    for (int i = 0; i < n; i++) { /* who runs it; why it stopped */
        row *r = &rows[i];
        if (r->st.live) printf("%s: written by %s\n", r->stage, r->st.holder);
        else if (!strcmp(r->state, "stale") && strcmp(r->stage, RUNDIR_SHARDS))
            printf("%s: stale: %s; kf jobs run (or resume) trains it again\n", r->stage,
                   r->st.reason);
        else if (!strcmp(r->state, "interrupted") || !strcmp(r->state, "failed") ||
                 !strcmp(r->state, "preempted"))
            printf("%s: %s at step %lld (%s); last good checkpoint %s\n", r->stage, r->state,
                   (long long)(r->step < 0 ? 0 : r->step),
                   *r->st.reason ? r->st.reason : "why is not known: killed without a word",
                   r->st.ckpt_step >= 0 ? r->st.ckpt : "none (resumes from step 0)");
    }
    for (int i = 0; i < nd; i++)
        printf("node %s out of service: %s%s%s\n", down[i].name, down[i].state,
               *down[i].reason ? ", " : "", down[i].reason);
}

static int cmd_status(int argc, char **argv) {
    args a;
    int code;
    if (parse_args(argc, argv, &a, "json ", &code)) return code;
    if (a.n_pos != 1 || a.n_over) return positional_error(&a, "status", "RUN", 1, false);
    kf_err err;
    runconfig *rc;
    if (rundir_load(a.pos[0], 0, NULL, &rc, &err)) return kf_err_report("kf jobs", &err);
    rundir_job *jobs;
    int nj = rundir_jobs_read(a.pos[0], &jobs, &err);
    if (nj < 0) return runconfig_free(rc), kf_err_report("kf jobs", &err);
    int n = rc->n_stages + 1;
    row *rows = kf_calloc((size_t)n, sizeof *rows);
    for (int i = 0; i < n; i++) fill_row(a.pos[0], rc, jobs, nj, i - 1, &rows[i]);
    enum { WHY = sizeof rows[0].st.reason };
    bool *stale = kf_calloc((size_t)n, sizeof *stale);
    char *stale_why = kf_calloc((size_t)n, WHY);
    stale_stages(a.pos[0], rc, stale, stale_why, WHY);
    for (int i = 1; i < n; i++)
        if (stale[i - 1] && !rows[i].st.live) { /* kf jobs run trains it again */
            snprintf(rows[i].state, sizeof rows[i].state, "stale");
            snprintf(rows[i].st.reason, WHY, "%s", stale_why + (size_t)(i - 1) * WHY);
        }
    free(stale), free(stale_why);
    /* a run with Slurm jobs: the nodes out of service, e.g. the one its job lost */
    slurm_node *down = NULL;
    int nd = nj > 0 ? slurm_down_nodes(&down) : 0;
    if (a.json) print_json(a.pos[0], rc, rows, n, down, nd);
    else print_table(a.pos[0], rc, rows, n, down, nd);
    free(down), free(rows), free(jobs);
    runconfig_free(rc);
    free(a.over);
    return KF_EXIT_OK;
}

int jobs_main(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"plan", cmd_plan},     {"run", cmd_run},       {"submit", cmd_submit},
                {"status", cmd_status}, {"resume", cmd_resume}, {"cancel", cmd_cancel},
                {"check", cmd_check}};
    if (argc < 2) {
        fputs(usage_text, stderr);
        return KF_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage_text, stdout);
        return KF_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name)) continue;
        for (int j = 2; j < argc; j++)
            if (!strcmp(argv[j], "--help") || !strcmp(argv[j], "-h")) {
                fputs(usage_text, stdout);
                return KF_EXIT_OK;
            }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "kf jobs: unknown command '%s'\n\n%s", argv[1], usage_text);
    return KF_EXIT_USAGE;
}
