/* Tests common/json: parsing of every value kind, escapes and surrogates,
 * error positions, and the escape writer round-tripping through the parser. */
#include <string.h>

#include "common/json.h"
#include "tests/test.h"

static json_doc *parse(const char *s, kf_err *err) {
    return json_parse(s, strlen(s), "t.json", err);
}

static void test_values(void) {
    kf_err err = {{0}};
    const char *src =
        "{\"a\": [1, -2.5e1, true, false, null],\n \"s\": \"x\\n\\u00e9\\ud83d\\ude00\\ud800\",\n"
        " \"big\": 12345678901234, \"o\": {}, \"e\": [], \"a\": 7}";
    json_doc *d = parse(src, &err);
    T_CHECK(d != NULL, "parse failed: %s", err.msg);
    if (!d) return;
    const json *r = json_root(d);
    T_EQ_INT(r->type, JSON_OBJECT, "root: type %d n %zu", r->type, r->n);
    T_EQ_INT(r->n, 6, "root: type %d n %zu", r->type, r->n);
    const json *a = &r->kids[0];
    T_EQ_INT(a->type, JSON_ARRAY, "array");
    T_EQ_INT(a->n, 5, "array");
    T_CHECK(a->kids[0].is_int, "int 1");
    if (a->kids[0].is_int) {
        T_EQ_INT(a->kids[0].i, 1, "int 1");
    }
    T_CHECK(!a->kids[1].is_int, "float -25");
    T_NEAR(a->kids[1].num, -25.0, 0, "float -25");
    T_EQ_INT(a->kids[2].type, JSON_BOOL, "true");
    T_EQ_INT(a->kids[2].b, 1, "true");
    T_EQ_INT(a->kids[3].type, JSON_BOOL, "false");
    T_EQ_INT(a->kids[3].b, 0, "false");
    T_EQ_INT(a->kids[4].type, JSON_NULL, "null");
    const json *s = json_get(r, "s");
    const char want[] = "x\n\xc3\xa9\xf0\x9f\x98\x80\xef\xbf\xbd";
    T_CHECK(s, "string escapes");
    if (s) {
        T_EQ_INT(s->str.len, sizeof want - 1, "string escapes");
        T_CHECK(!memcmp(s->str.s, want, sizeof want - 1), "string escapes");
    }
    T_CHECK(s, "position of s: %d:%d", s ? s->line : 0, s ? s->col : 0);
    if (s) {
        T_EQ_INT(s->line, 2, "position of s: %d:%d", s ? s->line : 0, s ? s->col : 0);
        T_EQ_INT(s->col, 7, "position of s: %d:%d", s ? s->line : 0, s ? s->col : 0);
    }
    const json *big = json_get(r, "big");
    T_CHECK(big, "int64");
    if (big) {
        T_CHECK(big->is_int, "int64");
        if (big->is_int) {
            T_EQ_INT(big->i, 12345678901234LL, "int64");
        }
    }
    T_CHECK(json_get(r, "a")->is_int, "duplicate key: last wins");
    T_EQ_INT(json_get(r, "a")->i, 7, "duplicate key: last wins");
    T_EQ_INT(json_get(r, "o")->type, JSON_OBJECT, "empty object");
    T_EQ_INT(json_get(r, "o")->n, 0, "empty object");
    T_EQ_INT(json_get(r, "missing"), NULL, "missing key");
    json_free(d);
}

static void test_errors(void) {
    static const struct {
        const char *src, *msg;
    } cases[] = {
        {"{\"a\": 1,}", "t.json:1:9:"},
        {"[1, 2\n, 03]", "t.json:2:4:"},
        {"\"abc", "t.json:1:1:"},
        {"[1] x", "t.json:1:5:"},
        {"{\"a\" 1}", "t.json:1:6:"},
        {"\"a\x01\"", "t.json:1:3:"},
        {"[1.]", "t.json:1:4:"},
        {"nul", "t.json:1:1:"},
        {"", "t.json:1:1:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kf_err err = {{0}};
        json_doc *d = parse(cases[i].src, &err);
        T_EQ_INT(d, NULL, "case %zu: want %s got '%s'", i, cases[i].msg, err.msg);
        T_EQ_INT(strstr(err.msg, cases[i].msg), err.msg, "case %zu: want %s got '%s'", i,
                 cases[i].msg, err.msg);
        json_free(d);
    }
    char deep[2000];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    kf_err err = {{0}};
    T_EQ_INT(parse(deep, &err), NULL, "depth limit: %s", err.msg);
    T_CHECK(strstr(err.msg, "deep"), "depth limit: %s", err.msg);
}

static void test_escape_roundtrip(void) {
    char src[128]; /* every ASCII byte, controls and NUL included */
    for (int i = 0; i < 128; i++) src[i] = (char)i;
    size_t n = sizeof src;
    char out[1024];
    size_t m = json_escape(out, sizeof out, src, n);
    T_CHECK(m < sizeof out, "escape length %zu", m);
    T_CHECK(m <= 6 * n + 2, "escape length %zu", m);
    kf_err err = {{0}};
    json_doc *d = json_parse(out, m, "esc", &err);
    T_CHECK(d, "escape round trip: %s", err.msg);
    if (d) {
        T_EQ_INT(json_root(d)->type, JSON_STRING, "escape round trip: %s", err.msg);
        T_EQ_INT(json_root(d)->str.len, n, "escape round trip: %s", err.msg);
        T_CHECK(!memcmp(json_root(d)->str.s, src, n), "escape round trip: %s", err.msg);
    }
    json_free(d);
    T_EQ_INT(json_escape(out, 2, "abc", 3), 5, "escape reports the needed size when truncated");
}

/* Output is valid UTF-8 whatever the bytes: ill-formed subparts become
 * U+FFFD as Python's errors="replace" does, well-formed UTF-8 is kept. */
static void test_escape_utf8(void) {
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
         "\"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80\""},
        {"a\xe2\x80T", "\"a\xef\xbf\xbdT\""},         /* truncated 3-byte: one U+FFFD */
        {"\xff\xfe", "\"\xef\xbf\xbd\xef\xbf\xbd\""}, /* two invalid bytes: two */
        {"\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* surrogate: three */
        {"x\xf0\x9f\x98", "\"x\xef\xbf\xbd\""},                       /* cut emoji at the end */
        {"\xc3\"", "\"\xef\xbf\xbd\\\"\""}, /* a quote after a lead byte stays escaped */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const char *in = cases[c].in, *want = cases[c].want;
        char out[64];
        size_t m = json_escape(out, sizeof out, in, strlen(in));
        T_EQ_INT(m, strlen(want), "case %zu: escaped to %.*s", c, (int)m, out);
        T_CHECK(!memcmp(out, want, m), "case %zu: escaped to %.*s", c, (int)m, out);
        FILE *f = tmpfile();
        json_write_str(f, in, strlen(in));
        rewind(f);
        size_t got = fread(out, 1, sizeof out, f);
        fclose(f);
        T_EQ_INT(got, m, "case %zu: json_write_str agrees with json_escape", c);
        T_CHECK(!memcmp(out, want, m), "case %zu: json_write_str agrees with json_escape", c);
    }
    /* a long string takes json_write_str's heap path */
    char big[1000];
    memset(big, 'x', sizeof big);
    big[500] = (char)0xff;
    FILE *f = tmpfile();
    json_write_str(f, big, sizeof big);
    long len = ftell(f);
    fclose(f);
    T_EQ_INT(len, (long)sizeof big + 2 + 2, "long string with one bad byte: %ld bytes", len);
}

int main(void) {
    test_values();
    test_errors();
    test_escape_roundtrip();
    test_escape_utf8();
    return T_DONE();
}
