/* tests/fuzz/fuzz_safetensors.c — the safetensors header and file
 * (common/safetensors.h).
 *
 * Input: a whole .safetensors file, written to /dev/shm (the reader maps a
 * path). An accepted file has every float tensor converted with
 * safetensors_read_f32, and is written back with safetensors_writer: the copy
 * must open with the same tensors and bytes. */
#include "common/safetensors.h"
#include "fuzz_util.h"

static void roundtrip(const char *dir, const safetensors_file *f) {
    safetensors_writer *w = safetensors_writer_new();
    for (size_t i = 0; i < f->n; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        safetensors_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (size_t i = 0; i < f->nmeta; i++)
        safetensors_set_meta(w, f->meta_keys[i], f->meta_values[i]);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/copy.safetensors", dir);
    kf_err err;
    int rc = safetensors_write(w, path, &err);
    safetensors_writer_free(w);
    if (rc) fprintf(stderr, "write back: %s\n", err.msg);
    fuzz_check(rc == 0);
    safetensors_file *g;
    rc = safetensors_open(path, &g, &err);
    if (rc) fprintf(stderr, "reopen: %s\n", err.msg);
    fuzz_check(rc == 0);
    fuzz_check(g->n == f->n);
    for (size_t i = 0; i < f->n; i++) {
        const safetensors_tensor *a = &f->tensors[i], *b = safetensors_find(g, a->name);
        fuzz_check(b != NULL);
        fuzz_check(b->dtype == a->dtype && b->ndim == a->ndim && b->nbytes == a->nbytes);
        fuzz_check(!memcmp(a->data, b->data, a->nbytes));
    }
    for (size_t i = 0; i < f->nmeta; i++) {
        const char *v = safetensors_meta(g, f->meta_keys[i]);
        fuzz_check(v != NULL);
    }
    safetensors_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir();
    char path[PATH_MAX];
    fuzz_write(dir, "in.safetensors", data, size, path, sizeof path);
    safetensors_file *f;
    kf_err err;
    if (safetensors_open(path, &f, &err)) return 0;
    for (size_t i = 0; i < f->n; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        fuzz_check(safetensors_find(f, t->name) != NULL);
        if (t->dtype == ST_F32 || t->dtype == ST_F64 || t->dtype == ST_F16 || t->dtype == ST_BF16) {
            float *dst = malloc((size_t)t->numel * sizeof(float) + 1);
            fuzz_check(safetensors_read_f32(t, dst, &err) == 0);
            free(dst);
        }
    }
    roundtrip(dir, f);
    safetensors_close(f);
    return 0;
}
