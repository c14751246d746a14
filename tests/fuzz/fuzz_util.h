/* tests/fuzz/fuzz_util.h — what the libFuzzer harnesses share: a per-process
 * scratch directory on /dev/shm for the parsers that only read from a path,
 * and splitting one input into NUL-separated parts.
 *
 * Every harness defines LLVMFuzzerTestOneInput and calls the project's real
 * functions; a crash, sanitizer report, leak, hang or broken invariant
 * (fuzz_check) is a finding (docs/fuzzing.md). */
#ifndef KF_TESTS_FUZZ_UTIL_H
#define KF_TESTS_FUZZ_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fsutil.h"

/* Stubs for checkpoint.c's writers (its model and dist calls): the fuzzing
 * library has no kernels (see Makefile), and a harness that reaches
 * checkpoint.c's readers (ckpt_verify: directly, or through jobs/rundir.c)
 * defines them once with `FUZZ_CHECKPOINT_WRITER_STUBS;`; they abort if ever
 * called. */
#define FUZZ_CHECKPOINT_WRITER_STUBS                                                               \
    void dist_barrier(dist *d) { abort(); }                                                        \
    int model_save(const model *m, const char *path, const float *buf, kf_err *err) { abort(); }   \
    int model_load_into(model *m, const char *path, float *buf, kf_err *err) { abort(); }          \
    extern int fuzz_checkpoint_stubs /* so that a use ends with ';' */

/* An invariant the code under test promises; a violation aborts, which
 * libFuzzer records as a crash with the input. */
#define fuzz_check(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char fuzz_dir_path[64];

static inline void fuzz_dir_remove(void) {
    kf_err err;
    if (*fuzz_dir_path) fs_rm_rf(fuzz_dir_path, &err);
}

/* /dev/shm/kf-fuzz-PID, emptied for each input (made once, removed at exit). */
static inline const char *fuzz_dir(void) {
    kf_err err;
    if (!*fuzz_dir_path) {
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "/dev/shm/kf-fuzz-%d", (int)getpid());
        atexit(fuzz_dir_remove);
    }
    fs_rm_rf(fuzz_dir_path, &err);
    if (fs_mkdir_p(fuzz_dir_path, &err)) {
        fprintf(stderr, "fuzz: %s\n", err.msg);
        abort();
    }
    return fuzz_dir_path;
}

/* Writes n bytes to DIR/name (DIR/name's directory made first); out gets the
 * path when non-NULL. */
static inline void fuzz_write(const char *dir, const char *name, const void *p, size_t n, char *out,
                              size_t cap) {
    char path[PATH_MAX], parent[PATH_MAX];
    kf_err err;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fs_dirname(path, parent, sizeof parent);
    FILE *f = NULL;
    if (fs_mkdir_p(parent, &err) || !(f = fopen(path, "wb")) || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "fuzz: cannot write %s\n", path);
        abort();
    }
    fclose(f);
    if (out) snprintf(out, cap, "%s", path);
}

/* Splits data at NUL bytes into at most max parts, each copied and
 * NUL-terminated (free with fuzz_parts_free); returns the number of parts
 * (at least 1). lens may be NULL. */
static inline int fuzz_split(const uint8_t *data, size_t size, int max, char **parts,
                             size_t *lens) {
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && n < max; i++) {
        if (i < size && (data[i] || n == max - 1)) continue;
        parts[n] = malloc(i - start + 1);
        memcpy(parts[n], data + start, i - start);
        parts[n][i - start] = 0;
        if (lens) lens[n] = i - start;
        n++;
        start = i + 1;
    }
    return n;
}

static inline void fuzz_parts_free(char **parts, int n) {
    for (int i = 0; i < n; i++) free(parts[i]);
}

#endif
