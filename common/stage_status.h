/* common/stage_status.h — RUN/stages/NAME/status: where a stage stands.
 *
 * Written by the holder of the stage's lock: `kf train` (trainer/train/train.c),
 * `kf import` (trainer/cli/cli_import.c), and `kf jobs run` (jobs/cli_jobs.c)
 * after a trainer it started died; `kf jobs status` (jobs/rundir.c) reads it.
 * Format: YAML, one `key: value` per line, replaced atomically:
 *
 *   state: running | preempted | failed | interrupted | done
 *   step: N                  optimizer steps done
 *   steps: N                 the stage's total
 *   checkpoint: "step-N"     the newest checkpoint written ("" when none)
 *   tokens_per_s: X.X        the last measured throughput
 *   updated: T               unix time of the write
 *   reason: "..."            why it stopped (preempted: the signal or --stop-at;
 *                            failed: the error; interrupted: the exit code or
 *                            signal), "" while running or done
 *
 * `running` is what the writer said when it last wrote, not that it lives:
 * a process killed with SIGKILL writes nothing. Whether a stage runs is told
 * by its lock (common/writer_lock.h); `kf jobs run` records `interrupted` or
 * `failed` with the exit status of a trainer that ended without saying so.
 *
 * No version field: a reader ignores keys it does not know, so keys are only
 * ever added (docs/architecture.md "Files on disk").
 */
#ifndef KF_COMMON_STAGE_STATUS_H
#define KF_COMMON_STAGE_STATUS_H

#include <stdint.h>

#include "common/error.h"

typedef struct stage_status {
    char state[16]; /* running, preempted, failed, interrupted or done */
    int64_t step, steps;
    char checkpoint[64]; /* "step-N", "" when none */
    double tokens_per_s;
    int64_t updated;  /* unix time */
    char reason[200]; /* why it stopped, "" when not known */
} stage_status;

/** Writes stage_dir/status from s atomically (updated: now, not s->updated;
 * reason's quotes and line breaks become ' and spaces). */
int stage_status_write(const char *stage_dir, const stage_status *s, kf_err *err);

/** Reads stage_dir/status into s (unknown keys ignored, missing ones 0/"").
 * @return 0, 1 when there is no status file, -1 with err set when it cannot
 * be read or a known key's value is malformed (naming file, line and key). */
int stage_status_read(const char *stage_dir, stage_status *s, kf_err *err);

#endif
