/* common/proc.h — running other programs (kf train, mpirun, sbatch, squeue,
 * python3 for the tools/ scripts).
 *
 * The job system drives everything through processes: the stages are `kf
 * train` runs and Slurm is its command-line clients; `kf export` runs
 * tools/release_ckpt.py. These helpers fork and
 * exec an argv (searched in PATH), wait, and report the exit status in the
 * shell's convention (128 + signal for a child killed by a signal).
 */
#ifndef KF_COMMON_PROC_H
#define KF_COMMON_PROC_H

#include <stdbool.h>

#include "common/error.h"

/** proc_run's flags. PROC_HOLD_SIGNALS: the child starts with SIGINT,
 * SIGTERM and SIGUSR1 blocked, so one forwarded (or sent to it directly)
 * while it starts waits, pending, until it unblocks them once its handlers
 * are in place, as `kf train` does (train_install_signals): none kills it
 * before it can checkpoint. Only for such a child: one that never unblocks
 * them never gets them. */
enum { PROC_HOLD_SIGNALS = 1u };

/** Runs argv (NULL-terminated) with stdin/stdout/stderr inherited and waits.
 * While it runs, SIGTERM and SIGUSR1 received by this process are forwarded
 * to the child (the trainer checkpoints on them), and SIGINT as SIGTERM (a
 * terminal's Ctrl-C reaches the child directly too; to the trainer a second
 * SIGINT means abort), so `kf jobs run` behaves like the trainer it wraps;
 * one that comes before the child exists is sent to it once it does. When
 * this process dies (kill -9), the child gets SIGTERM (prctl
 * PR_SET_PDEATHSIG). flags: 0 or PROC_HOLD_SIGNALS (above).
 * @return the exit status (0..255, 128+N for signal N), or -1 with err set
 * when the program could not be started. */
int proc_run(char *const argv[], unsigned flags, kf_err *err);

/** Runs argv, capturing its stdout into *out (malloc'ed, NUL-terminated;
 * free it) and, when quiet, discarding its stderr.
 * @return the exit status as proc_run, or -1 with err set when it could not
 * be started (then *out is NULL). */
int proc_capture(char *const argv[], char **out, bool quiet, kf_err *err);

/** True when a program called name is in PATH. */
bool proc_in_path(const char *name);

/** Absolute path of the running kf binary (from /proc/self/exe), in a
 * static buffer. */
const char *proc_self_exe(void);

#endif
