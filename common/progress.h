/* common/progress.h — one progress display on stderr for long operations.
 *
 * On a terminal (isatty(2)): one line redrawn in place with '\r', at most
 * ten times a second:
 *   "shards train [=======>      ]  52%  1.2 GB  38.5 MB/s  ETA 0:00:31  docs 1234"
 * Otherwise (logs, pipes, Slurm output): a plain line every N seconds
 * (N = KF_PROGRESS_INTERVAL, default 10), so logs stay readable:
 *   "2026-01-31 12:00:00 kf: shards train:  52%  1.2 GB  38.5 MB/s  ETA 0:00:31  docs 1234"
 * progress_end prints a final line with the totals and the mean rate in both
 * cases.
 *
 * One display at a time (a process has one stderr). Calls are serialised by a
 * mutex, so worker threads may update, but the intended use is a main thread
 * reporting its own progress. kf_log_info/warn erase the bar before printing.
 *
 * Units: "B" counts bytes and is shown scaled (KB, MB, GB; rate B/s, MB/s);
 * any other unit (e.g. "docs", "steps", "tok") is shown with k/M/G suffixes.
 */
#ifndef KF_COMMON_PROGRESS_H
#define KF_COMMON_PROGRESS_H

#include <stdint.h>

/** Starts a display. total is the expected final value of done (0 when
 * unknown: no percentage, no ETA). label and unit are copied. */
void progress_begin(const char *label, double total, const char *unit);

/** Reports done so far (monotone) and an optional extra text appended to the
 * line (e.g. "docs 1234 tok 5.6M"; NULL for none; copied). Cheap when nothing
 * is due to be drawn: call it as often as convenient. */
void progress_update(double done, const char *extra);

/** Prints the final line ("LABEL: AMOUNT in T s, RATE, EXTRA", an info line)
 * and ends the display. */
void progress_end(void);

/** Erases the bar from the terminal if one is shown (used by common/log.c
 * before printing a line; the next update redraws it). */
void progress_clear_line(void);

#endif
