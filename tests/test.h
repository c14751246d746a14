/* tests/test.h — the tiny assertion layer every C test uses.
 *
 * Each check prints nothing when it holds and "FAIL file:line: message" when
 * it does not; T_DONE() prints the program's "N passed, N failed" line, which
 * tests/run.sh adds up, and returns the exit status.
 */
#ifndef KF_TESTS_TEST_H
#define KF_TESTS_TEST_H

#include <math.h>
#include <stdio.h>

static int t_passed, t_failed;

#define T_CHECK(cond, ...)                                                  \
    do {                                                                    \
        if (cond) {                                                         \
            t_passed++;                                                     \
        } else {                                                            \
            t_failed++;                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

/* |a-b| <= tol*max(1,|b|), printing both values on failure. */
#define T_CLOSE(a, b, tol, what)                                                        \
    T_CHECK(fabs((double)(a) - (double)(b)) <= (tol) * fmax(1.0, fabs((double)(b))),    \
            "%s: got %.9g want %.9g (tol %g)", (what), (double)(a), (double)(b), (double)(tol))

#define T_DONE() (printf("%d passed, %d failed\n", t_passed, t_failed), t_failed ? 1 : 0)

#endif
