/* trainer/cli/cli_train.c — `kf train CONFIG --stage NAME --run-dir RUN [--resume]
 * [key=value...]`. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/runconfig.h"
#include "trainer/cli/omp_env.h"
#include "trainer/train/dist.h"
#include "trainer/train/train.h"

static const char USAGE[] =
    "usage: kf train CONFIG --stage NAME --run-dir RUN [--resume] [--stop-at STEP] "
    "[key.path=value ...]\n"
    "\n"
    "Trains one stage of the run config CONFIG (under `mpirun -np N` for N data-parallel\n"
    "ranks). Writes RUN/stages/NAME/{ckpt/, final/, log.jsonl, status}.\n"
    "\n"
    "  --stage NAME     the stage to train (a name under `stages:`)\n"
    "  --run-dir RUN    the run directory\n"
    "  --resume         continue from the newest checkpoint that verifies\n"
    "  --stop-at STEP   act as if preempted when STEP is reached (drills and tests)\n"
    "  key.path=value   config overrides, e.g. defaults.lr=3e-4 stages.0.steps=10\n"
    "\n"
    "Precision (per stage or under defaults): `precision:` phases set the student's\n"
    "(fp32, fp16, bf16); `teacher_precision: fp32|bf16|fp16` (default fp32) sets the\n"
    "teacher passes' for the whole stage, `follow` runs them in the student's phase;\n"
    "a resume refuses a changed one.\n"
    "\n"
    "SIGUSR1, SIGTERM or SIGINT (Ctrl-C): checkpoint at the next step boundary and exit 75;\n"
    "a second Ctrl-C aborts at once (no checkpoint).\n"
    "KF_LAUNCH_MARKER=PATH: rank 0 writes PATH once every rank is through MPI's start-up\n"
    "(slurm/stage.sbatch launches ranks that died before it again, KF_LAUNCH_RETRIES times).\n"
    "Exit codes: 0 done (final/ and its DONE marker written), 1 error, 2 usage,\n"
    "75 preempted (checkpoint written; rerun with --resume).\n";

/* dist_init ends in MPI_Comm_split_type, which needs every rank's part, so
 * when it returns on rank 0 every rank is through MPI_Init. The launcher asks for the marker to
 * tell a launch that died in start-up (PMIx, a transport: worth one more try) from a run that
 * trained and failed. Failing to write it only costs that retry, so it warns. */
static void mark_launched(const dist *d) {
    const char *path = getenv("KF_LAUNCH_MARKER");
    if (!path || !*path || d->rank != 0) return;
    char text[64];
    int n = snprintf(text, sizeof text, "ranks %d\n", d->world);
    kf_err err = {{0}};
    if (fs_write_atomic(path, text, (size_t)n, &err)) kf_log_warn("KF_LAUNCH_MARKER: %s", err.msg);
}

int train_main(int argc, char **argv) {
    train_args a;
    memset(&a, 0, sizeof a);
    a.over = calloc((size_t)argc, sizeof *a.over);
    bool resume = false;
    const cli_opt opts[] = {
        {"--stage", CLI_STR, .out = &a.stage},
        {"--run-dir", CLI_STR, .out = &a.run_dir},
        {"--resume", CLI_FLAG, .out = &resume},
        {"--stop-at", CLI_INT, .out = &a.stop_at, .lo = 1, .hi = INFINITY},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf train",         USAGE,        opts,
                           .pos = &a.config,   .max_pos = 1, .over = a.over,
                           .n_over = &a.n_over};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) {
        free(a.over);
        return code;
    }
    a.resume = resume;
    if (!a.config || !a.stage || !a.run_dir) {
        fprintf(stderr, "kf train: CONFIG, --stage and --run-dir are required\n");
        fputs(USAGE, stderr);
        free(a.over);
        return KF_EXIT_USAGE;
    }
    omp_env_passive();
    /* The config's collective timeout must be known before MPI starts, so
     * it is read once here (and validated again, identically, by train_run). */
    runconfig *rc;
    kf_err err = {{0}};
    if (runconfig_load(a.config, a.n_over, a.over, &rc, &err)) {
        fprintf(stderr, "kf: error: %s\n", err.msg);
        free(a.over);
        return KF_EXIT_ERROR;
    }
    double timeout = (double)rc->res.collective_timeout;
    runconfig_free(rc);
    train_install_signals();
    dist d;
    if (dist_init(&d, &argc, &argv, timeout, &err)) {
        fprintf(stderr, "kf: error: %s\n", err.msg);
        free(a.over);
        return KF_EXIT_ERROR;
    }
    mark_launched(&d);
    code = train_run(&a, &d);
    dist_finalize(&d);
    free(a.over);
    return code;
}
