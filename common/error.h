/* common/error.h — fatal checks, recoverable errors and checked allocation.
 *
 * Two kinds of failure:
 *  - broken invariants and resource exhaustion: KF_CHECK / KF_FATAL print
 *    "kf: error: MESSAGE (at FILE:LINE)" and exit(1);
 *  - bad user input (a config key, a file, a token id): functions take a
 *    kf_err* and return -1 with a message that names the file/line/key, so the
 *    caller decides (the CLI prints it and exits 1; a test asserts on it).
 */
#ifndef KF_COMMON_ERROR_H
#define KF_COMMON_ERROR_H

#include <stddef.h>
#include <stdnoreturn.h>

/** Exit codes shared by every command (docs/architecture.md "Invariants"). */
enum {
    KF_EXIT_OK = 0,
    KF_EXIT_ERROR = 1,
    KF_EXIT_USAGE = 2,
    KF_EXIT_PREEMPTED = 75 /* checkpoint written, requeue me (EX_TEMPFAIL) */
};

/** A recoverable error: a message for the user. msg[0]==0 means no error. */
typedef struct kf_err {
    char msg[1024];
} kf_err;

/** Formats msg into err (if err is non-NULL) and returns -1. */
int kf_err_set(kf_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Prints "CMD: error: MESSAGE" to stderr (cmd: "kf shards", ...) and returns
 * KF_EXIT_ERROR: how a command ends on a recoverable error. */
int kf_err_report(const char *cmd, const kf_err *err);

/** Prints "kf: error: MESSAGE (at FILE:LINE)" to stderr and exits with 1. */
noreturn void kf_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define KF_FATAL(...) kf_fatal_at(__FILE__, __LINE__, __VA_ARGS__)
/** Dies with the message when cond is false; the message should hint at the fix. */
#define KF_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) kf_fatal_at(__FILE__, __LINE__, __VA_ARGS__);                                 \
    } while (0)

/** Allocation that never returns NULL (dies with the size and call site). */
void *kf_malloc_at(size_t n, const char *file, int line);
void *kf_calloc_at(size_t n, size_t size, const char *file, int line);
void *kf_realloc_at(void *p, size_t n, const char *file, int line);
char *kf_strdup_at(const char *s, const char *file, int line);
/** Memory for large buffers that kernels stream (weights, their packed
 *  copies): aligned to 64 bytes and, from 2 MiB, to 2 MiB and advised to
 *  the kernel as transparent huge pages (madvise; only advice, ignored where
 *  THP is off). A stream of 4 KiB pages costs a TLB miss every 4 KiB, which
 *  held a one-thread read of the weights to about 80% of what it reaches on
 *  2 MiB pages. Zeroed when zero is set. Free with free(). */
void *kf_alloc_stream_at(size_t n, int zero, const char *file, int line);
#define kf_alloc_stream(n, zero) kf_alloc_stream_at((n), (zero), __FILE__, __LINE__)
#define kf_malloc(n) kf_malloc_at((n), __FILE__, __LINE__)
#define kf_calloc(n, s) kf_calloc_at((n), (s), __FILE__, __LINE__)
#define kf_realloc(p, n) kf_realloc_at((p), (n), __FILE__, __LINE__)
#define kf_strdup(s) kf_strdup_at((s), __FILE__, __LINE__)

#endif
