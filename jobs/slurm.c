/* jobs/slurm.c — sbatch scripts, submission and job state via Slurm's clients. */
#include "jobs/slurm.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/proc.h"
#include "jobs/rundir.h"

bool slurm_available(void) {
    return proc_in_path("sbatch") && proc_in_path("scontrol") && proc_in_path("scancel");
}

/* The wrapper's text: $KF_STAGE_WRAPPER, else ROOT/slurm/stage.sbatch where
 * the binary is ROOT/bin/kf. */
static char *read_wrapper(kf_err *err) {
    char p[PATH_MAX + 32];
    const char *env = getenv("KF_STAGE_WRAPPER");
    if (env && *env) {
        snprintf(p, sizeof p, "%s", env);
    } else {
        char bin[PATH_MAX], root[PATH_MAX];
        fs_dirname(proc_self_exe(), bin, sizeof bin);
        fs_dirname(bin, root, sizeof root);
        snprintf(p, sizeof p, "%s/slurm/stage.sbatch", root);
    }
    char *text;
    size_t len;
    if (fs_read_file(p, &text, &len, err)) return NULL;
    return text;
}

int slurm_write_script(const char *run, const runconfig *rc, const char *stage, const char *cwd,
                       char *path, size_t cap, kf_err *err) {
    char *wrapper = read_wrapper(err);
    if (!wrapper) return -1;
    const char *body = wrapper;
    if (!strncmp(body, "#!", 2)) body = strchr(body, '\n') ? strchr(body, '\n') + 1 : "";
    const runconfig_resources *r = &rc->res;
    bool shards = !strcmp(stage, RUNDIR_SHARDS);
    long long t = r->time_limit_s;
    size_t n = strlen(body) + 8192 + 4 * PATH_MAX;
    char *text = kf_malloc(n), *s = text, *end = text + n;
#define OUT(...) (s += snprintf(s, (size_t)(end - s), __VA_ARGS__))
    OUT("#!/bin/bash\n# Stage '%s' of run '%s' (config sha256 %s), written by kf jobs submit.\n"
        "# Resubmit by hand: sbatch [--dependency=afterok:JOB] %s/slurm/%s.sbatch\n",
        stage, rc->name, rc->hash, run, stage);
    OUT("#SBATCH --job-name=kf-%s-%s\n", rc->name, stage);
    OUT("#SBATCH --output=%s/stages/%s/slurm.out\n", run, stage);
    OUT("#SBATCH --open-mode=append\n#SBATCH --requeue\n");
    OUT("#SBATCH --signal=B:USR1@%lld\n", (long long)r->signal_lead);
    OUT("#SBATCH --time=%lld-%02lld:%02lld:%02lld\n", t / 86400, t / 3600 % 24, t / 60 % 60,
        t % 60);
    OUT("#SBATCH --nodes=%lld\n#SBATCH --ntasks=%lld\n", shards ? 1LL : (long long)r->nodes,
        shards ? 1LL : (long long)r->ranks);
    if (r->gpus_per_node > 0 && !shards)
        OUT("#SBATCH --gpus-per-node=%lld\n", (long long)r->gpus_per_node);
    if (*r->partition) OUT("#SBATCH --partition=%s\n", r->partition);
    OUT("#SBATCH --chdir=%s\n", cwd);
    OUT("export KF_BIN=\"${KF_BIN:-%s}\"\nset -- \"%s\" \"%s\"\n", proc_self_exe(), run, stage);
    OUT("%s", body);
#undef OUT
    free(wrapper);
    KF_CHECK(s < end, "batch script too long");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/stages/%s", run, stage);
    int w = snprintf(path, cap, "%s/slurm/%s.sbatch", run, stage);
    KF_CHECK(w > 0 && (size_t)w < cap, "path too long");
    int rv = fs_mkdir_p(dir, err) ? -1 : fs_write_atomic(path, text, (size_t)(s - text), err);
    free(text);
    return rv;
}

int slurm_submit(const char *script, const char *after, char id[32], kf_err *err) {
    char dep[64];
    char *argv[5] = {"sbatch", "--parsable", NULL, NULL, NULL};
    int a = 2;
    if (after) {
        snprintf(dep, sizeof dep, "--dependency=afterok:%s", after);
        argv[a++] = dep;
    }
    argv[a] = (char *)script;
    char *out;
    int rc = proc_capture(argv, &out, false, err);
    if (rc < 0) return -1;
    /* --parsable prints "ID" or "ID;CLUSTER" */
    size_t n = strspn(out, "0123456789");
    if (rc != 0 || n == 0 || n >= 32) {
        kf_err_set(err, "sbatch %s failed (exit %d): %s", script, rc, out);
        free(out);
        return -1;
    }
    memcpy(id, out, n), id[n] = 0;
    free(out);
    return 0;
}

/* Value of "KEY=" in scontrol's one-line output (space-separated KEY=VALUE). */
static void field(const char *line, const char *key, char *out, size_t cap) {
    size_t k = strlen(key);
    *out = 0;
    for (const char *p = line; (p = strstr(p, key)); p += k) {
        if ((p != line && !isspace((unsigned char)p[-1])) || p[k] != '=') continue;
        p += k + 1;
        size_t n = strcspn(p, " \n");
        snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
        return;
    }
}

/* `scontrol show job -o ID`: pending, running and recently finished jobs. */
static int query_scontrol(const char *id, slurm_job *j) {
    char *argv[] = {"scontrol", "show", "job", "-o", (char *)id, NULL}, *out, buf[64];
    kf_err err;
    if (!proc_in_path("scontrol")) return -1;
    int code = proc_capture(argv, &out, true, &err);
    if (code == 0) {
        field(out, "JobState", j->state, sizeof j->state);
        field(out, "Reason", j->reason, sizeof j->reason);
        if (!strcmp(j->reason, "None")) *j->reason = 0;
        field(out, "Restarts", buf, sizeof buf);
        if (*buf) j->restarts = atoi(buf);
        field(out, "ExitCode", j->exit_code, sizeof j->exit_code);
        field(out, "NodeList", j->nodes, sizeof j->nodes);
        if (!strcmp(j->nodes, "(null)")) *j->nodes = 0;
    }
    free(out);
    return code == 0 && *j->state ? 0 : -1;
}

/* `sacct` (when accounting is on): jobs long gone from slurmctld's memory. */
static int query_sacct(const char *id, slurm_job *j) {
    char *argv[] = {"sacct", "-n", "-P", "-X", "-o", "State,ExitCode", "-j", (char *)id, NULL},
         *out;
    char st[32] = "", ec[16] = ""; /* st: as long as slurm_job's state */
    kf_err err;
    if (!proc_in_path("sacct")) return -1;
    int code = proc_capture(argv, &out, true, &err);
    int found = code == 0 && sscanf(out ? out : "", "%31[^|\n]|%15[^|\n]", st, ec) >= 1 && *st;
    free(out);
    if (!found) return -1;
    st[strcspn(st, " ")] = 0; /* "CANCELLED by 0" */
    snprintf(j->state, sizeof j->state, "%s", st);
    snprintf(j->exit_code, sizeof j->exit_code, "%s", ec);
    return 0;
}

int slurm_query(const char *id, slurm_job *j) {
    memset(j, 0, sizeof *j);
    j->restarts = -1;
    if (query_scontrol(id, j) == 0 || query_sacct(id, j) == 0) return 0;
    memset(j, 0, sizeof *j);
    j->restarts = -1;
    snprintf(j->state, sizeof j->state, "UNKNOWN");
    return -1;
}

bool slurm_state_alive(const char *state) {
    static const char *alive[] = {"PENDING",     "RUNNING",   "REQUEUED",   "REQUEUE_HOLD",
                                  "REQUEUE_FED", "SUSPENDED", "COMPLETING", "CONFIGURING",
                                  "RESIZING",    "SIGNALING", "STAGE_OUT",  "RESV_DEL_HOLD",
                                  NULL};
    for (const char **a = alive; *a; a++)
        if (!strcmp(state, *a)) return true;
    return false;
}

int slurm_down_nodes(slurm_node **out) {
    char *argv[] = {"sinfo", "-h", "-N", "-o", "%N|%t|%E", NULL}, *text;
    kf_err err;
    *out = NULL;
    if (!proc_in_path("sinfo")) return 0;
    int code = proc_capture(argv, &text, true, &err);
    int n = 0;
    for (char *line = code == 0 ? text : NULL, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        slurm_node d;
        memset(&d, 0, sizeof d);
        if (sscanf(line, "%63[^|]|%31[^|]|%127[^\n]", d.name, d.state, d.reason) < 2) continue;
        if (!strcmp(d.reason, "none")) *d.reason = 0;
        size_t k = strlen(d.state);
        bool out_of_service = d.state[k - 1] == '*' || !strncmp(d.state, "down", 4) ||
                              !strncmp(d.state, "drain", 5) || !strncmp(d.state, "drng", 4) ||
                              !strncmp(d.state, "fail", 4);
        bool seen = false; /* sinfo -N lists a node once per partition */
        for (int i = 0; i < n && !seen; i++) seen = !strcmp((*out)[i].name, d.name);
        if (!out_of_service || seen) continue;
        *out = kf_realloc(*out, (size_t)(n + 1) * sizeof **out);
        (*out)[n++] = d;
    }
    free(text);
    return n;
}

int slurm_cancel(const char *id, kf_err *err) {
    char *argv[] = {"scancel", (char *)id, NULL};
    int rc = proc_run(argv, 0, err);
    if (rc < 0) return -1;
    if (rc) return kf_err_set(err, "scancel %s failed (exit %d)", id, rc);
    return 0;
}
