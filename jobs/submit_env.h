/* jobs/submit_env.h — the launcher environment a run's jobs were submitted
 * with, kept so that a resume from another shell can say what changed.
 *
 * sbatch gives a job the submitting shell's environment (--export=ALL), and
 * the transport settings in it decide whether the ranks of a stage reach each
 * other: a `kf jobs resume` run without the OMPI_MCA_btl_tcp_if_include that
 * `kf jobs submit` had starts ranks that try the wrong interface and block in
 * MPI's start-up (until resources.collective_timeout ends them). So each
 * submission records the variables that steer the launch, and a resume warns
 * about each one it would change.
 *
 *   RUN/slurm/env           line 1 "# kf submit env v1", then one
 *                           "NAME=VALUE" line per recorded variable, sorted
 *                           by name: OMPI_MCA_*, PMIX_MCA_*, UCX_*, NCCL_*,
 *                           FI_*, OMP_NUM_THREADS (values with a newline are
 *                           not recorded). Written atomically.
 */
#ifndef KF_JOBS_SUBMIT_ENV_H
#define KF_JOBS_SUBMIT_ENV_H

#include <stdio.h>

#include "common/error.h"

/** Whether environment variable `name` is one that submit_env records. */
int submit_env_recorded(const char *name);

/** Writes RUN/slurm/env from this process's environment, atomically.
 * @return 0, or -1 with err set. */
int submit_env_record(const char *run, kf_err *err);

/** Compares this process's environment with RUN/slurm/env and prints one
 * line to `warn` for each recorded variable that differs ("kf jobs: warning:
 * NAME was 'V' at the last submission, now 'W' (or unset); ..."). A missing
 * file (a run submitted before it existed) compares as nothing; an
 * unreadable or malformed one is one warning naming the file and line.
 * @return the number of variables that differ (0: the same environment). */
int submit_env_compare(const char *run, FILE *warn);

#endif
