/* progress: plain periodic lines when stderr is a file, a bar redrawn with
 * \r on a pseudo-terminal that a log line erases, and the final summary. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/progress.h"
#include "tests/test.h"

static void plain_progress(void) {
    setenv("KF_PROGRESS_INTERVAL", "0", 1);
    progress_begin("docs", 2e6, "B");
    progress_update(1e6, "docs 7");
    progress_update(2e6, NULL);
    progress_end();
}

/* Many fast updates under the default 10 s interval: only the final line. */
static void fast_progress(void) {
    unsetenv("KF_PROGRESS_INTERVAL");
    progress_begin("steps", 1000, "steps");
    for (int i = 1; i <= 1000; i++) progress_update(i, NULL);
    progress_end();
}

static int count(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

int main(void) {
    char *out;
    /* Progress, not a terminal: plain lines, then the final line. */
    out = t_capture_stderr(plain_progress);
    T_EQ_INT(count(out, "\n"), 3, "plain progress:\n%s", out);
    T_CHECK(strstr(out, "docs:  50%  1.0 MB"), "plain progress:\n%s", out);
    T_CHECK(strstr(out, "docs 7"), "plain progress:\n%s", out);
    T_CHECK(strstr(out, "docs: 100%  2.0 MB"), "plain progress:\n%s", out);
    T_CHECK(strstr(out, "docs: 2.0 MB in "), "plain progress:\n%s", out);
    T_CHECK(!strchr(out, '\r'), "plain progress:\n%s", out);
    free(out);

    out = t_capture_stderr(fast_progress);
    T_EQ_INT(count(out, "\n"), 1, "rate limiting:\n%s", out);
    T_CHECK(strstr(out, "steps: 1.0k steps in "), "rate limiting:\n%s", out);
    free(out);

    /* Progress on a pseudo-terminal: \r redraws with a bar, erased by a log line. */
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    T_CHECK(m >= 0, "pty");
    T_EQ_INT(grantpt(m), 0, "pty");
    T_EQ_INT(unlockpt(m), 0, "pty");
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    int saved = dup(2);
    dup2(s, 2);
    progress_begin("tok", 0, "tok");
    usleep(120000);
    progress_update(1500, NULL);
    kf_log_info("between");
    progress_begin("bytes", 4e6, "B");
    usleep(120000);
    progress_update(1e6, "x 1");
    progress_end();
    dup2(saved, 2);
    close(saved);
    close(s);
    char buf[4096] = {0};
    usleep(10000);
    ssize_t got = read(m, buf, sizeof buf - 1);
    close(m);
    T_CHECK(got > 0, "tty progress: %s", buf);
    T_CHECK(strstr(buf, "\rtok 1.5k tok"), "tty progress: %s", buf);
    T_CHECK(strstr(buf, "\r\x1b[K"), "tty progress: %s", buf);
    T_CHECK(strstr(buf, "kf: between"), "tty progress: %s", buf);
    T_CHECK(strstr(buf, "\rbytes [======>"
                        "                 "
                        "]  25%  1.0 MB  "),
            "tty progress: %s", buf);
    T_CHECK(strstr(buf, "/s  ETA 0:00:0"), "tty progress: %s", buf);
    T_CHECK(strstr(buf, "  x 1"), "tty progress: %s", buf);
    T_CHECK(strstr(buf, "bytes: 1.0 MB in"), "tty progress: %s", buf);
    return T_DONE();
}
