/* common/log.h — human log lines on stderr and machine-readable JSONL logs.
 *
 * Human lines: "2026-01-31 12:00:00 kf: MESSAGE" (UTC) for info and
 * "2026-01-31 12:00:00 kf: warning: MESSAGE" for warnings. Quiet mode drops
 * info lines, never warnings. A progress bar drawn by common/progress.h is
 * erased before a line is printed and redrawn by its next update.
 *
 * JSONL: one JSON object per line, appended and flushed line by line so a
 * reader (`kf plot`, `tail -f`) sees only whole records even while training
 * runs, and a crash loses at most the records not yet kf_jsonl_sync'ed. Records are built
 * with a tiny key/value builder:
 *
 *   kf_rec r; kf_rec_init(&r);
 *   kf_rec_int(&r, "step", step); kf_rec_double(&r, "loss", loss);
 *   kf_rec_str(&r, "phase", "fp16");
 *   if (kf_jsonl_append(log, &r, &err)) ...;      // writes {"step":1,"loss":...}
 *   kf_rec_free(&r);
 */
#ifndef KF_COMMON_LOG_H
#define KF_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/** Drops (true) or prints (false, the default) info lines from now on.
 * The environment variable KF_QUIET=1 sets quiet mode at start-up. */
void kf_log_set_quiet(bool quiet);

/** Prints a timestamped info line to stderr (unless quiet). No trailing
 * newline needed. Thread-safe: lines are never interleaved. */
void kf_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** Prints a timestamped warning line to stderr (always). */
void kf_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** A JSON object under construction. Keys are written as given (escaped);
 * values are typed. The text is buf[0..len) and always a valid object once
 * kf_rec_text is called. */
typedef struct kf_rec {
    char *buf;
    size_t len, cap;
    int nfields;
} kf_rec;

/** Starts an empty record. */
void kf_rec_init(kf_rec *r);

/** Clears the fields, keeping the buffer for reuse. */
void kf_rec_reset(kf_rec *r);

/** Adds "key": value. Strings are JSON-escaped; doubles use %.9g (round-trips
 * a float, enough for losses), and non-finite doubles are written as null
 * (JSON has no NaN/Infinity); int64 are exact. */
void kf_rec_str(kf_rec *r, const char *key, const char *value);
void kf_rec_int(kf_rec *r, const char *key, int64_t value);
void kf_rec_double(kf_rec *r, const char *key, double value);
void kf_rec_bool(kf_rec *r, const char *key, bool value);

/** Adds "key": followed by raw JSON text (the caller guarantees it is valid
 * JSON, e.g. an array built elsewhere). */
void kf_rec_raw(kf_rec *r, const char *key, const char *json);

/** The record as a NUL-terminated JSON object text "{...}" (valid until the
 * next change to r). */
const char *kf_rec_text(kf_rec *r);

/** Frees the record's buffer. */
void kf_rec_free(kf_rec *r);

/** An append-only JSONL file. */
typedef struct kf_jsonl kf_jsonl;

/** Opens path for appending (created if missing, mode 0666 & ~umask). If
 * the file ends in a partial line (the machine crashed mid-write), that
 * partial line is cut off first, so the file stays one record per line.
 * @return the log, or NULL with err set. */
kf_jsonl *kf_jsonl_open(const char *path, kf_err *err);

/** Appends r's text and a newline as one write (to the kernel, not
 * fsynced: see kf_jsonl_sync). A write that fails part-way (a full disk, a
 * file size limit) leaves no partial line: the file is cut back to where the
 * record began, so a later append starts a line of its own.
 * @return 0, or -1 with err naming the file (the record is not in it). */
int kf_jsonl_append(kf_jsonl *l, kf_rec *r, kf_err *err);

/** fsyncs the log: every record appended so far survives a machine crash.
 * A writer that commits state which claims those records (a checkpoint)
 * calls it first. @return 0, or -1 with err naming the file. */
int kf_jsonl_sync(kf_jsonl *l, kf_err *err);

/** Closes the log (NULL allowed). */
void kf_jsonl_close(kf_jsonl *l);

#endif
