/* common/writer_lock.h — one writer per run directory and per stage.
 *
 * A writer lock is an exclusive fcntl lock on a small file (RUN/lock for the
 * run, RUN/stages/NAME/lock for a stage), taken without waiting by the
 * process that writes and held until it exits: the kernel drops it when the
 * holder dies (kill -9, a crash, node loss: see docs/jobs.md "Guarantees" for
 * NFS v4 and Lustre), so a lock is never stale. The file's text names the
 * holder (host, pid, Slurm job id, what it runs, since when) for the error a
 * second writer gets; the text is advice, the kernel lock is the truth.
 *
 * Open file description locks (F_OFD_SETLK) are used where the kernel has
 * them, process locks (F_SETLK) otherwise; the descriptor is close-on-exec,
 * so a program the holder starts (`kf jobs run` starting `kf train`) does not
 * inherit it.
 */
#ifndef KF_COMMON_WRITER_LOCK_H
#define KF_COMMON_WRITER_LOCK_H

#include <stdint.h>

#include "common/error.h"

/** A held lock (fd < 0: none). */
typedef struct writer_lock {
    int fd;
} writer_lock;

/** Who holds a lock, as its file says. */
typedef struct writer_holder {
    char host[128];
    long long pid;
    char slurm_job[32]; /* "" outside Slurm */
    char what[128];     /* e.g. "kf train --stage k1" */
    int64_t since;      /* unix time it was taken */
} writer_holder;

/** Takes the lock on path (created if missing) for what (e.g. "kf jobs run"),
 * without waiting, and records this process as its holder. When the holder is
 * this process's own Slurm job (SLURM_JOB_ID) on another host, i.e. an earlier
 * start of a requeued job whose node lost it, waits up to KF_LOCK_WAIT_S
 * seconds (default 150: past an NFS v4 lease) for the lock to be released.
 * @return 0 with *l held, or -1 with err naming the holder ("... is being
 * written by kf train (host H, pid P, Slurm job J) since T") or the failure. */
int writer_lock_take(const char *path, const char *what, writer_lock *l, kf_err *err);

/** Releases a held lock (no-op for fd < 0). The file stays. */
void writer_lock_release(writer_lock *l);

/** Whether a live process holds the lock on path (this process's own locks
 * count too). @return 1 with *h filled from the file (fields "" / 0 when it
 * cannot be read), 0 when free or the file is missing, -1 when it cannot be
 * probed (h->what holds the reason). */
int writer_lock_probe(const char *path, writer_holder *h);

/** Formats h as "kf train (host H, pid P, Slurm job J) since HH:MM:SS" into out. */
void writer_holder_text(const writer_holder *h, char *out, size_t cap);

#endif
