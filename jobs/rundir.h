/* jobs/rundir.h — a run directory and what its files say about each stage.
 *
 * Layout (docs/architecture.md "Files on disk"; the jobs system owns the files
 * marked *, `kf train` the others):
 *
 *   RUN/run.yaml *          the resolved config, frozen when the run is made:
 *                           line 1 "# kf run config sha256: HASH", then the
 *                           canonical YAML (cfg_emit) whose sha256 is HASH.
 *                           Every stage reads this file, never the original,
 *                           so editing the original after submit changes
 *                           nothing (until a stage trains, a corrected config
 *                           may replace it: rundir_untrained).
 *   RUN/jobs.tsv *          Slurm jobs submitted for the run, one line each:
 *                           "STAGE<TAB>JOBID<TAB>UNIX-TIME" (the last line
 *                           of a stage is its current job). Line 1 is the
 *                           header "# kf jobs v1".
 *   RUN/slurm/STAGE.sbatch * the batch script of a stage (slurm/stage.sbatch
 *                           with the stage's #SBATCH lines)
 *   RUN/slurm/env *         the launch environment of the last submission
 *                           (jobs/submit_env.h)
 *   RUN/lock *              the run's writer lock (common/writer_lock.h):
 *                           held by the kf jobs run/submit/resume or kf
 *                           import that drives the run
 *   RUN/stages/STAGE/       ckpt/step-N/ (+ `latest`, corrupt/), final/,
 *                           log.jsonl, status, lock (held by the stage's
 *                           writer: kf train rank 0, kf import), slurm.out *
 *                           (the job's output, appended across requeues)
 *
 * The pseudo-stage "shards" stands for `kf shards build`: it is complete when
 * the manifests of data.train and data.valid exist and each one that a set of
 * the config's shards: section builds records that set's current settings
 * (config hash over the vocabulary's sha256).
 */
#ifndef KF_JOBS_RUNDIR_H
#define KF_JOBS_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/error.h"
#include "common/runconfig.h"

/** The pseudo-stage that builds the data (`kf shards build RUN/run.yaml`). */
#define RUNDIR_SHARDS "shards"

/** Creates RUN (and RUN/stages, RUN/slurm) and writes RUN/run.yaml from
 * rc->canonical with its hash line, atomically. */
int rundir_freeze(const char *run, const runconfig *rc, kf_err *err);

/** Loads RUN/run.yaml with overrides applied, after checking that its text
 * still hashes to the recorded sha256 (a hand-edited run.yaml is refused:
 * the stages already run were trained under the recorded one). */
int rundir_load(const char *run, int n_over, char *const *over, runconfig **out, kf_err *err);

/** Compares two canonical configs. Changes under `resources.` (time limit,
 * ranks, partition, ...) are compatible with a run in progress; any other
 * change (model, data, stages, optimizer) is not.
 * @return 0 when equal, 1 when only compatible keys differ, 2 when some
 * incompatible key differs. what (cap bytes) names the first incompatible
 * change, else the first change, as "PATH: OLD -> NEW". */
int rundir_config_diff(const char *old_canonical, const char *new_canonical, char *what,
                       size_t cap);

/** What the files of one stage say. */
typedef struct rundir_state {
    bool complete;       /* completion marker and final weights present */
    bool live;           /* a live process holds the stage's lock (it is being written) */
    char holder[320];    /* who holds it (writer_holder_text), "" when nobody */
    char reason[200];    /* why it stopped, from the status file ("" if not known) */
    int64_t ckpt_step;   /* step of the newest checkpoint that verifies, -1 if none */
    char ckpt[64];       /* its directory name under ckpt/, "" if none */
    time_t ckpt_mtime;   /* when it was written */
    int64_t log_step;    /* last step logged in log.jsonl, -1 if none */
    time_t log_mtime;    /* when log.jsonl last changed (0: no log) */
    double steps_per_s;  /* recent throughput from log.jsonl, 0 if unknown */
    double tokens_per_s; /* last tokens/s logged, 0 if unknown */
    char status[128];    /* state in the stage's status file (running, preempted, failed,
                            interrupted, done), "" if none; for "shards": "stale" when data was
                            built with other settings */
} rundir_state;

/** Reads stage `stage` of run (a config stage or RUNDIR_SHARDS) from disk,
 * probing its lock and verifying its checkpoints newest first (sizes and
 * sha256) until one verifies; reads only. rc gives the data paths for the
 * shards pseudo-stage. */
void rundir_stage_state(const char *run, const runconfig *rc, const char *stage, rundir_state *st);

/** True when the stage's completion marker and final checkpoint exist and
 * the weights have the sha256 that final.yaml records (for "shards": both
 * data manifests, built with the current settings; see above); why (cap
 * bytes) says what is missing, stale or damaged. */
bool rundir_stage_complete(const char *run, const runconfig *rc, const char *stage, char *why,
                           size_t cap);

/** A stage's final/: 1 when its weights verify (DONE, final.yaml, and the
 * size and sha256 final.yaml records), 0 when the stage has not finished (no
 * DONE: a write cut short is redone by resuming), -1 when it finished and
 * something in final/ no longer verifies (damaged); why (cap bytes) names
 * the file and the fault for 0 and -1. */
int rundir_final_verify(const char *run, const char *stage, char *why, size_t cap);

/** True when no stage of rc has trained anything: no final weights, no
 * checkpoint, no logged step, and no status `running` (a trainer starting).
 * Then nothing depends on RUN/run.yaml yet and a corrected config may
 * replace it. Otherwise why (cap bytes) names the first stage that has. */
bool rundir_untrained(const char *run, const runconfig *rc, char *why, size_t cap);

/** Whether stage (complete, or with checkpoints) was trained under teacher
 * weights that have since changed: the teacher_sha256 its final/final.yaml
 * (or, before it finished, its newest checkpoint's state.yaml) records
 * differs from the sha256 of the weights its teacher stage's final/final.yaml
 * records now (e.g. after `kf import ... --force`, or a teacher retrained).
 * Reads recorded hashes only. A teacher given as a file path, a teacher
 * stage without final weights, or imported weights (no teacher recorded) are
 * not judged (false). why (cap bytes) says
 * which teacher changed and both hashes. The caller propagates: a stage whose
 * teacher is stale is stale too. */
bool rundir_stage_stale(const char *run, const runconfig *rc, const char *stage, char *why,
                        size_t cap);

/** Moves what stage was trained (final/, ckpt/, log.jsonl, status) into
 * RUN/stages/STAGE/stale/N/ (N = 1, 2, ...: nothing is deleted), so that it
 * trains again from step 0; taken under the stage's lock, which must be free.
 * dest (cap bytes) receives the directory. @return 0, or -1 with err. */
int rundir_stage_retire(const char *run, const char *stage, char *dest, size_t cap, kf_err *err);

/** One submitted Slurm job. */
typedef struct rundir_job {
    char stage[64];
    char id[32];
    int64_t when;
} rundir_job;

/** Appends a job line to RUN/jobs.tsv (rewritten atomically). */
int rundir_jobs_add(const char *run, const char *stage, const char *id, kf_err *err);

/** Reads RUN/jobs.tsv into *jobs (free with free()); a missing file is an
 * empty list. @return the number of jobs, or -1 with err set. */
int rundir_jobs_read(const char *run, rundir_job **jobs, kf_err *err);

/** The current (last submitted) job of stage in jobs[0..n), or NULL. */
const rundir_job *rundir_jobs_current(const rundir_job *jobs, int n, const char *stage);

#endif
