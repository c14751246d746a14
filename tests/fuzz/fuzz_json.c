/* tests/fuzz/fuzz_json.c — the JSON parser and string escaping
 * (common/json.h).
 *
 * Input: JSON text. Every string of a parsed document is escaped with
 * json_escape, whose output must parse back as one JSON string (the header
 * promises valid JSON text for any bytes) of at most 6n+2 bytes; the raw
 * input is escaped the same way. */
#include "common/json.h"
#include "fuzz_util.h"

static void check_escape(const char *s, size_t n) {
    size_t need = json_escape(NULL, 0, s, n);
    fuzz_check(need <= 6 * n + 2);
    char *buf = malloc(need + 1);
    fuzz_check(json_escape(buf, need, s, n) == need);
    kf_err err;
    json_doc *d = json_parse(buf, need, "escaped", &err);
    if (!d) fprintf(stderr, "escaped string does not parse: %s\n", err.msg);
    fuzz_check(d != NULL);
    fuzz_check(json_root(d)->type == JSON_STRING);
    json_free(d);
    free(buf);
}

static void walk(const json *v, int depth) {
    if (v->type == JSON_STRING) check_escape(v->str.s, v->str.len);
    for (size_t i = 0; i < v->n && (v->type == JSON_ARRAY || v->type == JSON_OBJECT); i++) {
        if (v->type == JSON_OBJECT) {
            check_escape(v->keys[i].s, v->keys[i].len);
            fuzz_check(json_get(v, v->keys[i].s) != NULL);
        }
        walk(&v->kids[i], depth + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kf_err err;
    json_doc *d = json_parse((const char *)data, size, "fuzz.json", &err);
    if (d) {
        walk(json_root(d), 0);
        json_free(d);
    }
    check_escape((const char *)data, size);
    return 0;
}
