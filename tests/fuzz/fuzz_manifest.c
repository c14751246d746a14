/* tests/fuzz/fuzz_manifest.c — the shard manifest (pipeline/manifest.h).
 *
 * Input: DIR/manifest.yaml, written to /dev/shm (the reader takes a
 * directory). An accepted manifest is written back with manifest_write: the
 * copy must read back, and writing that gives the same bytes (the text is a
 * pure function of the records). */
#include "fuzz_util.h"
#include "pipeline/manifest.h"

static char *slurp(const char *dir) {
    char path[PATH_MAX], *text;
    size_t len;
    kf_err err;
    snprintf(path, sizeof path, "%s/" MANIFEST_FILE, dir);
    fuzz_check(fs_read_file(path, &text, &len, &err) == 0);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir();
    fuzz_write(dir, "in/" MANIFEST_FILE, data, size, NULL, 0);
    char in[PATH_MAX], a[PATH_MAX], b[PATH_MAX], sha[65];
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    manifest m, m2;
    kf_err err;
    if (manifest_read(in, &m, sha, &err)) return 0;
    fuzz_check(strlen(sha) == 64);
    fuzz_check(manifest_split_get(&m, "train") == &m.train);
    fuzz_check(fs_mkdir_p(a, &err) == 0 && fs_mkdir_p(b, &err) == 0);
    fuzz_check(manifest_write(a, &m, &err) == 0);
    int rc = manifest_read(a, &m2, NULL, &err);
    if (rc) fprintf(stderr, "written manifest does not read back: %s\n", err.msg);
    fuzz_check(rc == 0);
    fuzz_check(manifest_write(b, &m2, &err) == 0);
    char *ta = slurp(a), *tb = slurp(b);
    fuzz_check(!strcmp(ta, tb));
    free(ta), free(tb);
    manifest_free(&m2);
    manifest_free(&m);
    return 0;
}
