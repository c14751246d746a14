/* common/fsutil.h — crash-safe file operations.
 *
 * Everything kforcing writes that a later run reads (shards' manifests,
 * checkpoints, run.yaml, status files) goes through here, so that a crash or
 * `kill -9` at any moment leaves either the old file or the new one, never a
 * torn mix. The protocol is POSIX's: write a temporary file in the same
 * directory, fsync it, rename it over the target, fsync the directory.
 * Temporary files are named ".NAME.tmp.PID.N" (hidden, recognisable, unique
 * per process) next to the target.
 *
 * All functions take a kf_err* and return 0 / -1 with "PATH: what: strerror".
 */
#ifndef KF_COMMON_FSUTIL_H
#define KF_COMMON_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include "common/error.h"

/** An atomic write in progress: stream data with fs_atomic_write (for files
 * too big to hold in memory), then fs_atomic_commit or fs_atomic_abort. */
typedef struct fs_atomic {
    FILE *f;    /* the temporary file; callers may also fwrite to it directly */
    char *path; /* target path */
    char *tmp;  /* temporary path */
} fs_atomic;

/** Creates the temporary file for path (its directory must exist). */
int fs_atomic_begin(fs_atomic *a, const char *path, kf_err *err);

/** Appends n bytes to the temporary file. */
int fs_atomic_write(fs_atomic *a, const void *p, size_t n, kf_err *err);

/** Flushes, fsyncs and closes the temporary file, renames it to the target
 * and fsyncs the directory. On failure the temporary file is removed and the
 * target is untouched. a is released either way. */
int fs_atomic_commit(fs_atomic *a, kf_err *err);

/** Closes and removes the temporary file; the target is untouched. */
void fs_atomic_abort(fs_atomic *a);

/** Replaces path with exactly len bytes of data, atomically and durably. */
int fs_write_atomic(const char *path, const void *data, size_t len, kf_err *err);

/** Flushes stdout and reports whether everything written to it so far
 * arrived: a failed write (a full disk under `> FILE`) is an error naming the
 * file stdout goes to (from /proc/self/fd/1), else "stdout". Commands whose
 * output is their product call it after each chunk and before exiting 0. */
int fs_flush_stdout(kf_err *err);

/** Opens path read-only (close-on-exec) and fstats it.
 * @param st receives the file's status.
 * @return the descriptor (the caller closes it), or -1 with err set to
 *   "PATH: why". */
int fs_open_stat(const char *path, struct stat *st, kf_err *err);

/** Reads a whole file into a fresh buffer (*buf, release with free()), with a
 * NUL after the last byte (not counted in *len) so text can be used as a C
 * string. */
int fs_read_file(const char *path, char **buf, size_t *len, kf_err *err);

/** True when path exists (file, directory or anything else; links followed). */
bool fs_exists(const char *path);

/** True when path is a directory. */
bool fs_is_dir(const char *path);

/** fsyncs the directory dir, so that entries created, renamed or removed in it
 * survive a crash. */
int fs_fsync_dir(const char *dir, kf_err *err);

/** fsyncs the file (or directory) at path. */
int fs_fsync_path(const char *path, kf_err *err);

/** mkdir -p: creates dir and missing parents (mode 0777 & ~umask); an
 * existing directory is not an error, an existing non-directory is. */
int fs_mkdir_p(const char *dir, kf_err *err);

/** rm -rf: removes path and, for a directory, everything under it (symbolic
 * links are removed, never followed). A missing path is not an error. */
int fs_rm_rf(const char *path, kf_err *err);

/** rename(from, to) (atomic replace of a file or an empty directory; use for
 * "step-N.tmp" -> "step-N" and for swapping `latest`), then fsyncs the
 * directory of `to` and, when different, the directory of `from`. */
int fs_rename_atomic(const char *from, const char *to, kf_err *err);

/** Writes the directory part of path into out (cap bytes): "a/b/c" -> "a/b",
 * "c" -> ".", "/c" -> "/". */
void fs_dirname(const char *path, char *out, size_t cap);

/** Writes "a/b" into out (cap bytes); a path that does not fit is a fatal
 * error naming it (callers size out for any path, PATH_MAX). */
void fs_path_join(char *out, size_t cap, const char *a, const char *b);

#endif
