/* common/stage_status.h — RUN/stages/NAME/status: where a stage stands.
 *
 * The one owner of the file: `kf train` (trainer/train/train.c) and `kf import`
 * (trainer/cli/cli_import.c) write it, `kf jobs status` (jobs/rundir.c) reads it.
 * Format: YAML, one `key: value` per line, replaced atomically:
 *
 *   state: running | preempted | failed | done
 *   step: N                  optimizer steps done
 *   steps: N                 the stage's total
 *   checkpoint: "step-N"     the newest checkpoint written ("" when none)
 *   tokens_per_s: X.X        the last measured throughput
 *   updated: T               unix time of the write
 *
 * No version field: a reader ignores keys it does not know, so keys are only
 * ever added (docs/architecture.md "Files on disk").
 */
#ifndef KF_COMMON_STAGE_STATUS_H
#define KF_COMMON_STAGE_STATUS_H

#include <stdint.h>

#include "common/error.h"

typedef struct stage_status {
    char state[16]; /* running, preempted, failed or done */
    int64_t step, steps;
    char checkpoint[64]; /* "step-N", "" when none */
    double tokens_per_s;
    int64_t updated; /* unix time */
} stage_status;

/** Writes stage_dir/status from s atomically (updated: now, not s->updated). */
int stage_status_write(const char *stage_dir, const stage_status *s, kf_err *err);

/** Reads stage_dir/status into s (unknown keys ignored, missing ones 0/"").
 * @return 0, 1 when there is no status file, -1 with err set when it cannot
 * be read or a known key's value is malformed (naming file, line and key). */
int stage_status_read(const char *stage_dir, stage_status *s, kf_err *err);

#endif
