/* tests/fuzz/fuzz_config.c — YAML config parsing and key=value overrides
 * (common/config.h).
 *
 * Input: the YAML text, then NUL-separated overrides. Beyond not crashing,
 * checks cfg_emit's promise: the canonical text reloads to the same text.
 * The typed getters run on every node the path walk reaches. */
#include "common/config.h"
#include "fuzz_util.h"

#define MAX_PARTS 5

static void walk(cfg_node *n) {
    kf_err err;
    int64_t i;
    double d;
    bool b;
    const char *s;
    if (n->kind == CFG_SCALAR) {
        cfg_as_int(n, &i, &err), cfg_as_double(n, &d, &err), cfg_as_bool(n, &b, &err);
        cfg_as_str(n, &s, &err), cfg_is_null(n);
        return;
    }
    for (size_t k = 0; k < n->n; k++) {
        cfg_node *c = cfg_find(n, n->items[k]->key ? n->items[k]->key : "");
        (void)c;
        walk(n->items[k]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *parts[MAX_PARTS];
    int np = fuzz_split(data, size, MAX_PARTS, parts, NULL);
    kf_err err;
    cfg_node *root = cfg_load_string(parts[0], "fuzz.yaml", &err);
    for (int i = 1; root && i < np; i++) cfg_override(root, parts[i], &err);
    if (root) {
        walk(root);
        cfg_check_unused(root, &err);
        char *text = cfg_emit(root);
        cfg_node *again = cfg_load_string(text, "emitted.yaml", &err);
        if (!again)
            fprintf(stderr, "canonical text does not reload: %s\n---\n%s---\n", err.msg, text);
        fuzz_check(again != NULL);
        char *text2 = cfg_emit(again);
        if (strcmp(text, text2))
            fprintf(stderr, "canonical text changes on reload:\n%s---\n%s---\n", text, text2);
        fuzz_check(!strcmp(text, text2));
        char h1[65], h2[65];
        cfg_hash(root, h1), cfg_hash(again, h2);
        fuzz_check(!strcmp(h1, h2));
        free(text2);
        free(text);
        cfg_free(again);
        cfg_free(root);
    }
    fuzz_parts_free(parts, np);
    return 0;
}
