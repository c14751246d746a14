/* tests/fuzz/fuzz_rundir.c — run.yaml and the files a run directory's
 * stages are read from (common/runconfig.h, jobs/rundir.h, jobs/plan.h):
 * the run config and its overrides, the frozen RUN/run.yaml with its hash
 * line, each stage's `status` and `log.jsonl`, ckpt/step-N names, and
 * RUN/jobs.tsv, RUN/slurm/env.
 *
 * Input: NUL-separated parts: the config YAML; a stage's status file; its
 * log.jsonl; jobs.tsv; one override; slurm/env. Written under /dev/shm (these readers
 * take paths). The raw config is also read as a frozen RUN/run.yaml. A
 * config that loads is frozen with rundir_freeze and must load back with the
 * same hash; its plan is printed (to /dev/null); the first stage gets the
 * status, log and a checkpoint directory (whose manifest never verifies, so
 * it is never reported), and every stage's state is read; jobs.tsv is read,
 * and when accepted one job is appended and must read back; slurm/env is
 * compared with this process's environment, then recorded over and must
 * compare equal. */
#include "fuzz_util.h"
#include "jobs/plan.h"
#include "jobs/rundir.h"
#include "jobs/submit_env.h"
#include "trainer/train/checkpoint.h"

/* rundir.c verifies checkpoints (ckpt_verify) */
FUZZ_CHECKPOINT_WRITER_STUBS;

enum { P_CONFIG, P_STATUS, P_LOG, P_JOBS, P_OVERRIDE, P_ENV, NPARTS };

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    devnull = fopen("/dev/null", "w");
    /* recorded launch variables, so that slurm/env's comparison has both sides */
    setenv("OMPI_MCA_btl", "self,tcp", 1);
    setenv("NCCL_SOCKET_IFNAME", "eth0", 1);
    return 0;
}

static void stage_files(const char *run, const runconfig *rc, char **parts, size_t *lens) {
    char dir[PATH_MAX + 80];
    snprintf(dir, sizeof dir, "%s/stages/%s", run, rc->stages[0].name);
    fuzz_write(dir, "status", parts[P_STATUS], lens[P_STATUS], NULL, 0);
    fuzz_write(dir, "log.jsonl", parts[P_LOG], lens[P_LOG], NULL, 0);
    fuzz_write(dir, "ckpt/step-12/state.yaml", "x", 1, NULL, 0);
    fuzz_write(dir, "ckpt/step-40.tmp/state.yaml", "x", 1, NULL, 0);
    for (int i = 0; i <= rc->n_stages; i++) {
        const char *name = i < rc->n_stages ? rc->stages[i].name : RUNDIR_SHARDS;
        rundir_state st;
        rundir_stage_state(run, rc, name, &st);
        fuzz_check(i > 0 || st.ckpt_step == -1); /* step-12's manifest "x" never verifies */
        char why[PATH_MAX + 64];
        rundir_stage_complete(run, rc, name, why, sizeof why);
    }
}

static void jobs(const char *run, const char *text, size_t len) {
    fuzz_write(run, "jobs.tsv", text, len, NULL, 0);
    rundir_job *j;
    kf_err err;
    int n = rundir_jobs_read(run, &j, &err);
    if (n < 0) return;
    if (n) rundir_jobs_current(j, n, j[n - 1].stage);
    free(j);
    fuzz_check(rundir_jobs_add(run, "fuzz", "123", &err) == 0);
    int m = rundir_jobs_read(run, &j, &err);
    if (m < 0) fprintf(stderr, "jobs.tsv unreadable after rundir_jobs_add: %s\n", err.msg);
    fuzz_check(m == n + 1);
    const rundir_job *cur = rundir_jobs_current(j, m, "fuzz");
    fuzz_check(cur && !strcmp(cur->id, "123"));
    free(j);
}

static void submit_env(const char *run, const char *text, size_t len) {
    fuzz_write(run, "slurm/env", text, len, NULL, 0);
    fuzz_check(submit_env_compare(run, devnull) >= 0);
    kf_err err;
    fuzz_check(submit_env_record(run, &err) == 0);
    fuzz_check(submit_env_compare(run, devnull) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *parts[NPARTS] = {0};
    size_t lens[NPARTS] = {0};
    int np = fuzz_split(data, size, NPARTS, parts, lens);
    for (int i = np; i < NPARTS; i++) parts[i] = calloc(1, 1);
    const char *dir = fuzz_dir();
    char cfg[PATH_MAX], raw[PATH_MAX + 8], run[PATH_MAX + 8];
    kf_err err;
    runconfig *rc = NULL, *back = NULL, *over = NULL;

    /* the raw text as a frozen run.yaml */
    snprintf(raw, sizeof raw, "%s/raw", dir);
    fuzz_write(raw, "run.yaml", parts[P_CONFIG], lens[P_CONFIG], NULL, 0);
    if (!rundir_load(raw, 0, NULL, &back, &err)) runconfig_free(back);
    submit_env(raw, parts[P_ENV], lens[P_ENV]);

    fuzz_write(dir, "config.yaml", parts[P_CONFIG], lens[P_CONFIG], cfg, sizeof cfg);
    char *ov[1] = {parts[P_OVERRIDE]};
    if (!runconfig_load(cfg, 0, NULL, &rc, &err)) {
        snprintf(run, sizeof run, "%s/run", dir);
        fuzz_check(rundir_freeze(run, rc, &err) == 0);
        int r = rundir_load(run, 0, NULL, &back, &err);
        if (r) fprintf(stderr, "frozen run.yaml does not load: %s\n", err.msg);
        fuzz_check(r == 0);
        fuzz_check(!strcmp(back->hash, rc->hash));
        runconfig_free(back);
        if (*ov[0] && !rundir_load(run, 1, ov, &over, &err)) {
            char what[512];
            int d = rundir_config_diff(rc->canonical, over->canonical, what, sizeof what);
            fuzz_check(d >= 0 && d <= 2);
            fuzz_check((d == 0) == !strcmp(rc->hash, over->hash));
            runconfig_free(over);
        }
        plan_print(devnull, rc, 1e12);
        stage_files(run, rc, parts, lens);
        jobs(run, parts[P_JOBS], lens[P_JOBS]);
        runconfig_free(rc);
    }
    fuzz_parts_free(parts, NPARTS);
    return 0;
}
