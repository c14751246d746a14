/* tests/unit/capture_stderr.h — runs a function with stderr redirected to a
 * temporary file and returns what it wrote (the log and progress tests). */
#ifndef KF_TESTS_CAPTURE_STDERR_H
#define KF_TESTS_CAPTURE_STDERR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"

/* Runs fn with stderr redirected to a fresh file; returns what it wrote
 * (malloc'd, "" when the file cannot be read back). */
static inline char *capture_stderr(void (*fn)(void)) {
    char path[] = "/tmp/kf_test_log_err_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    char *buf;
    size_t n;
    if (fs_read_file(path, &buf, &n, NULL)) buf = strdup("");
    unlink(path);
    return buf;
}

#endif
