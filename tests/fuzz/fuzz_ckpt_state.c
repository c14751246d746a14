/* tests/fuzz/fuzz_ckpt_state.c — a checkpoint's state.yaml
 * (trainer/train/checkpoint.h: ckpt_verify, ckpt_find), the file that says a
 * step-N directory is complete and what it was trained under.
 *
 * Input: the state.yaml text, written into CK/step-7/ beside the files its
 * `files` list names (the four tensor files and two rank files, each two
 * bytes: see the seeds). An accepted state must be found again by
 * ckpt_find.
 *
 * Only checkpoint.c's readers are reached; its writers' model and dist
 * calls are stubbed (the fuzzing library has no kernels, see Makefile) and
 * abort if ever called. */
#include "fuzz_util.h"
#include "trainer/train/checkpoint.h"

FUZZ_CHECKPOINT_WRITER_STUBS;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir();
    char step[PATH_MAX], ckpt[PATH_MAX], found[PATH_MAX];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(step, sizeof step, "%s/ckpt/step-7", dir);
    fuzz_write(step, "state.yaml", data, size, NULL, 0);
    static const char *const files[][2] = {
        {"model.safetensors", "m\n"},  {"ema.safetensors", "e\n"}, {"adam_m.safetensors", "a\n"},
        {"adam_v.safetensors", "v\n"}, {"rank-00000.yaml", "r\n"}, {"rank-00001.yaml", "s\n"}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        fuzz_write(step, files[i][0], files[i][1], 2, NULL, 0);
    ckpt_meta meta;
    kf_err err;
    if (ckpt_verify(step, &meta, &err)) return 0;
    fuzz_check(meta.world >= 1 && meta.step >= 0);
    ckpt_meta again;
    fuzz_check(ckpt_find(ckpt, found, sizeof found, &again) == 1);
    fuzz_check(again.step == meta.step);
    return 0;
}
