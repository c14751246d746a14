#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int kf_err_set(kf_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int kf_err_report(const char *cmd, const kf_err *err) {
    fprintf(stderr, "%s: error: %s\n", cmd, err->msg);
    return KF_EXIT_ERROR;
}

void kf_fatal_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("kf: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (at %s:%d)\n", file, line);
    exit(KF_EXIT_ERROR);
}

void *kf_malloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) kf_fatal_at(file, line, "out of memory allocating %zu bytes", n);
    return p;
}

void *kf_alloc_stream_at(size_t n, int zero, const char *file, int line) {
    const size_t huge = (size_t)2 << 20;
    size_t align = n >= huge ? huge : 64, len = (n + align - 1) / align * align;
    void *p = aligned_alloc(align, len ? len : align);
    if (!p) kf_fatal_at(file, line, "out of memory allocating %zu bytes", n);
    if (align == huge) (void)madvise(p, len, MADV_HUGEPAGE);
    if (zero) memset(p, 0, len ? len : align);
    return p;
}

void *kf_calloc_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) kf_fatal_at(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *kf_realloc_at(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) kf_fatal_at(file, line, "out of memory reallocating to %zu bytes", n);
    return q;
}

char *kf_strdup_at(const char *s, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *p = kf_malloc_at(n, file, line);
    memcpy(p, s, n);
    return p;
}
