/* jobs/slurm.h — Slurm through its command-line clients (sbatch, scontrol,
 * sacct, scancel): one batch script per stage, chained submission, job state.
 *
 * A stage's script is slurm/stage.sbatch (the wrapper: signal forwarding,
 * requeue on exit 75, completion check) preceded by the stage's #SBATCH lines:
 * --job-name=kf-RUN-STAGE, --output=RUN/stages/STAGE/slurm.out with
 * --open-mode=append (requeued starts append to the same file), --requeue,
 * --signal=B:USR1@signal_lead (B: so the batch shell gets it and can forward
 * it), --time, --nodes, --ntasks=ranks, --gpus-per-node, --partition and
 * --chdir (the directory kf jobs ran in, so relative data paths resolve).
 * Dependencies are given on the sbatch command line (afterok:PREVIOUS).
 */
#ifndef KF_JOBS_SLURM_H
#define KF_JOBS_SLURM_H

#include <stdbool.h>

#include "common/error.h"
#include "common/runconfig.h"

/** Slurm's view of one job. */
typedef struct slurm_job {
    char state[32];     /* JobState: PENDING, RUNNING, COMPLETED, FAILED, ...; "UNKNOWN" */
    char reason[64];    /* why pending ("BeginTime", "Dependency", ...), "" if none */
    int restarts;       /* requeues so far (-1 if unknown) */
    char exit_code[16]; /* "rc:signal", "" if unknown */
    char nodes[128];    /* NodeList: the nodes it runs (or ran) on, "" if none yet */
} slurm_job;

/** A node that is out of service. */
typedef struct slurm_node {
    char name[64];
    char state[32];   /* sinfo's short state: "down*", "drain", "fail", "idle*", ... */
    char reason[128]; /* why, as Slurm records it ("Not responding"), "" if none */
} slurm_node;

/** True when sbatch, scontrol and scancel are in PATH. */
bool slurm_available(void);

/** Writes RUN/slurm/STAGE.sbatch for stage (a config stage or "shards")
 * into path (cap bytes). run must be absolute; cwd is the job's --chdir. The
 * wrapper is read from $KF_STAGE_WRAPPER, else slurm/stage.sbatch next to the
 * binary's bin/ directory. */
int slurm_write_script(const char *run, const runconfig *rc, const char *stage, const char *cwd,
                       char *path, size_t cap, kf_err *err);

/** `sbatch --parsable [--dependency=afterok:AFTER] SCRIPT`; the job id goes
 * to id. after may be NULL. */
int slurm_submit(const char *script, const char *after, char id[32], kf_err *err);

/** Looks a job up with `scontrol show job` (pending, running and recently
 * finished jobs), else `sacct` (when accounting is on).
 * @return 0, or -1 when Slurm does not know the job (j->state "UNKNOWN"). */
int slurm_query(const char *id, slurm_job *j);

/** True for states in which the job will still run or is running (pending,
 * running, requeued, suspended, completing, ...). */
bool slurm_state_alive(const char *state);

/** The cluster's nodes out of service (`sinfo -N`): DOWN, DRAIN, FAIL, or
 * not responding (a '*' after the state), each once, into *out (malloc'd,
 * NULL when none). A node that dies under a job shows here from the moment
 * Slurm stops hearing from it until its slurmd is back.
 * @return how many; 0 as well when sinfo is missing or fails. */
int slurm_down_nodes(slurm_node **out);

/** `scancel ID`. */
int slurm_cancel(const char *id, kf_err *err);

#endif
