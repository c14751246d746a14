/* tests/fuzz/fuzz_prefixes.c — JSONL prefix files of `kf sample
 * --prefix-file` (trainer/infer/prefixes.h: a JSON parse per line, then ids or
 * text encoded with the GPT-2 vocabulary of tests/fuzz/vocab/gpt2).
 *
 * Input: the file's bytes. An accepted file gives at least one prefix, each
 * non-empty with ids in range for text prompts and non-negative for id
 * lists. */
#include "fuzz_util.h"
#include "trainer/infer/prefixes.h"

static tok *gpt2;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *env = getenv("KF_FUZZ_VOCAB");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/gpt2", env ? env : "tests/fuzz/vocab");
    kf_err err;
    if (!(gpt2 = tok_load("gpt2", dir, &err))) {
        fprintf(stderr, "fuzz_prefixes: %s (run from the repository root, or set KF_FUZZ_VOCAB)\n",
                err.msg);
        exit(2);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int32_t **pre;
    int64_t *lens, count;
    kf_err err;
    if (prefixes_parse((const char *)data, size, "fuzz.jsonl", gpt2, &pre, &lens, &count, &err))
        return 0;
    fuzz_check(count >= 1);
    for (int64_t i = 0; i < count; i++) {
        fuzz_check(lens[i] >= 1);
        for (int64_t j = 0; j < lens[i]; j++) fuzz_check(pre[i][j] >= 0);
        free(pre[i]);
    }
    free(pre);
    free(lens);
    return 0;
}
