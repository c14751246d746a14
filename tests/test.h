/* tests/test.h — the tiny assertion layer every C test uses.
 *
 * Each check prints nothing when it holds and "FAIL file:line: message" when
 * it does not; T_DONE() prints the program's "N passed, N failed" line, which
 * tests/run.sh adds up, and returns the exit status.
 *
 * Setup steps (T_REQUIRE) are not checks and count no pass.
 *
 * One condition per check: a comparison goes through T_EQ_INT, T_EQ_STR,
 * T_NEAR or T_CLOSE, which print what they got and what they wanted, so a
 * failure says which value changed. Where the same call repeats with other
 * inputs, a table of cases and a loop keep one check per line of the table.
 *
 * Expected warnings: a negative test whose code under test warns on stderr
 * wraps the call in t_stderr_begin() / t_stderr_end(), which returns the
 * captured text (so the test can check the warning itself) and keeps it out
 * of the failure log.
 */
#ifndef KF_TESTS_TEST_H
#define KF_TESTS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int t_passed, t_failed;

/* Counts one check; on failure prints "FAIL file:line: " and the message. */
#define T_CHECK(cond, ...)                                                                         \
    do {                                                                                           \
        if (cond) {                                                                                \
            t_passed++;                                                                            \
        } else {                                                                                   \
            t_failed++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* A setup step the checks rely on (a temporary directory, a pipe, a
 * fixture), not a check: it counts nothing when it holds; when it does not,
 * it prints "FAIL file:line: setup: " and the message, counts one failure,
 * prints the summary line and exits, since the checks after it would only
 * report its consequences. */
#define T_REQUIRE(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            t_failed++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: setup: ", __FILE__, __LINE__);                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(T_DONE());                                                                        \
        }                                                                                          \
    } while (0)

/* Integers equal (compared as long long); prints "MESSAGE: got G want W".
 * A floating-point operand is a compile error (it would be truncated): use
 * T_NEAR or T_CLOSE for those. */
#define T_INT_ONLY(x)                                                                              \
    (void)sizeof(char[_Generic((x), float : -1, double : -1, long double : -1, default : 1)])
#define T_EQ_INT(got, want, ...)                                                                   \
    do {                                                                                           \
        T_INT_ONLY(got);                                                                           \
        T_INT_ONLY(want);                                                                          \
        long long t_g_ = (long long)(got), t_w_ = (long long)(want);                               \
        if (t_g_ == t_w_) {                                                                        \
            t_passed++;                                                                            \
        } else {                                                                                   \
            t_failed++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, ": got %lld want %lld\n", t_g_, t_w_);                                 \
        }                                                                                          \
    } while (0)

/* Prints a string for T_EQ_STR: quoted, or NULL. */
static inline void t_print_str(const char *s) {
    if (s) fprintf(stderr, "\"%s\"", s);
    else fputs("NULL", stderr);
}

/* Strings equal (NULL equals only NULL); prints both, quoted, on failure. */
#define T_EQ_STR(got, want, ...)                                                                   \
    do {                                                                                           \
        const char *t_g_ = (got), *t_w_ = (want);                                                  \
        if (t_g_ == t_w_ || (t_g_ && t_w_ && !strcmp(t_g_, t_w_))) {                               \
            t_passed++;                                                                            \
        } else {                                                                                   \
            t_failed++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputs(": got ", stderr);                                                               \
            t_print_str(t_g_);                                                                     \
            fputs(" want ", stderr);                                                               \
            t_print_str(t_w_);                                                                     \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* |got - want| <= tol (absolute); NaN never passes. */
#define T_NEAR(got, want, tol, ...)                                                                \
    do {                                                                                           \
        double t_g_ = (double)(got), t_w_ = (double)(want), t_t_ = (double)(tol);                  \
        if (fabs(t_g_ - t_w_) <= t_t_) {                                                           \
            t_passed++;                                                                            \
        } else {                                                                                   \
            t_failed++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, ": got %.9g want %.9g (tol %g)\n", t_g_, t_w_, t_t_);                  \
        }                                                                                          \
    } while (0)

/* |a-b| <= tol*max(1,|b|), printing both values on failure. */
#define T_CLOSE(a, b, tol, what)                                                                   \
    T_CHECK(fabs((double)(a) - (double)(b)) <= (tol)*fmax(1.0, fabs((double)(b))),                 \
            "%s: got %.9g want %.9g (tol %g)", (what), (double)(a), (double)(b), (double)(tol))

/* A call refused (its status rc != 0) whose error message mentions `word`:
 * two checks, so a wrong acceptance and a wrong message read differently. */
#define T_REFUSED(rc, msg, word, what)                                                             \
    do {                                                                                           \
        int t_rc_ = (rc);                                                                          \
        T_CHECK(t_rc_ != 0, "%s: accepted, want refused", (what));                                 \
        T_CHECK(strstr((msg), (word)) != NULL, "%s: error \"%s\" does not mention \"%s\"", (what), \
                (msg), (word));                                                                    \
    } while (0)

#define T_DONE() (printf("%d passed, %d failed\n", t_passed, t_failed), t_failed ? 1 : 0)

/* ---- expected warnings ---- */

static int t_stderr_fd = -1, t_stderr_saved = -1;
static char t_stderr_path[64];

/* Sends stderr to a fresh temporary file until t_stderr_end (not nested). */
static inline void t_stderr_begin(void) {
    snprintf(t_stderr_path, sizeof t_stderr_path, "/tmp/kf_test_stderr_XXXXXX");
    fflush(stderr);
    t_stderr_fd = mkstemp(t_stderr_path);
    if (t_stderr_fd < 0) return; /* nothing captured: the warnings stay in the log */
    t_stderr_saved = dup(2);
    dup2(t_stderr_fd, 2);
}

/* Restores stderr and returns what was written since t_stderr_begin
 * (malloc'd; "" when nothing could be captured). */
static inline char *t_stderr_end(void) {
    if (t_stderr_fd < 0) return strdup("");
    fflush(stderr);
    dup2(t_stderr_saved, 2);
    close(t_stderr_saved);
    off_t n = lseek(t_stderr_fd, 0, SEEK_END);
    char *buf = (char *)malloc(n > 0 ? (size_t)n + 1 : 1);
    ssize_t got = n > 0 ? pread(t_stderr_fd, buf, (size_t)n, 0) : 0;
    buf[got > 0 ? got : 0] = 0;
    close(t_stderr_fd);
    unlink(t_stderr_path);
    t_stderr_fd = t_stderr_saved = -1;
    return buf;
}

/* Runs fn with stderr captured; returns what it wrote (malloc'd). */
static inline char *t_capture_stderr(void (*fn)(void)) {
    t_stderr_begin();
    fn();
    return t_stderr_end();
}

#endif
