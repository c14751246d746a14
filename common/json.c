/* common/json.c — see json.h. A recursive-descent parser; children of an
 * array/object are gathered on a shared scratch stack and copied into the
 * arena once their count is known, so each container is one contiguous run. */
#include "common/json.h"
#include "common/error.h"
#include "common/utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { JSON_MAX_DEPTH = 512, ARENA_BLOCK = 1 << 20 };

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_block;

struct json_doc {
    arena_block *blocks;
    json root;
};

typedef struct parser {
    const char *p, *end, *name;
    const char *line_start;
    int32_t line;
    kf_err *err;
    json_doc *doc;
    /* scratch stacks for children being collected (shared by all levels) */
    json *kids;
    json_str *keys;
    size_t nkids, capkids, nkeys, capkeys;
    int failed;
} parser;

static void *arena_alloc(json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        arena_block *nb = kf_malloc(sizeof *nb + cap);
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        d->blocks = nb;
        b = nb;
    }
    void *r = b->data + b->used;
    b->used += n;
    return r;
}

static int fail(parser *ps, const char *what) {
    if (!ps->failed) {
        ps->failed = 1;
        int32_t col = (int32_t)(ps->p - ps->line_start) + 1;
        kf_err_set(ps->err, "%s:%d:%d: %s", ps->name, ps->line, col, what);
    }
    return -1;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->line_start = ps->p + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        ps->p++;
    }
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Parses a string literal at ps->p (which is '"') into the arena. Decoded
 * output is never longer than the literal, so one allocation suffices. */
static int parse_string(parser *ps, json_str *out) {
    const char *s = ++ps->p;
    const char *q = s;
    int has_escape = 0;
    while (q < ps->end && *q != '"') {
        if ((unsigned char)*q < 0x20) {
            ps->p = q;
            return fail(ps, "control character in string");
        }
        if (*q == '\\') {
            has_escape = 1;
            q++;
        }
        q++;
    }
    if (q >= ps->end) {
        ps->p = s - 1;
        return fail(ps, "unterminated string");
    }
    char *o = arena_alloc(ps->doc, (size_t)(q - s) + 1);
    out->s = o;
    if (!has_escape) {
        memcpy(o, s, (size_t)(q - s));
        o[q - s] = 0;
        out->len = (size_t)(q - s);
        ps->p = q + 1;
        return 0;
    }
    char *w = o;
    const char *r = s;
    while (r < q) {
        if (*r != '\\') {
            *w++ = *r++;
            continue;
        }
        r++;
        char c = *r++;
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (q - r < 4 || hex4(r, &cp)) {
                ps->p = r;
                return fail(ps, "bad \\u escape");
            }
            r += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (q - r >= 6 && r[0] == '\\' && r[1] == 'u' && !hex4(r + 2, &lo) &&
                    lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    r += 6;
                } else {
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                cp = 0xFFFD;
            }
            /* 6 source bytes ("\uXXXX") always cover <= 3 output bytes, and
             * a surrogate pair's 12 cover 4. */
            w += utf8_encode(cp, w);
            break;
        }
        default: ps->p = r - 1; return fail(ps, "bad escape in string");
        }
    }
    *w = 0;
    out->len = (size_t)(w - o);
    ps->p = q + 1;
    return 0;
}

static int parse_number(parser *ps, json *v) {
    const char *s = ps->p, *q = s;
    int is_int = 1;
    if (q < ps->end && *q == '-') q++;
    if (q >= ps->end || *q < '0' || *q > '9') return fail(ps, "bad number");
    if (*q == '0') q++;
    else
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    if (q < ps->end && *q == '.') {
        is_int = 0;
        q++;
        if (q >= ps->end || *q < '0' || *q > '9') {
            ps->p = q;
            return fail(ps, "bad number: digit expected after '.'");
        }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        is_int = 0;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || *q < '0' || *q > '9') {
            ps->p = q;
            return fail(ps, "bad number: digit expected in exponent");
        }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[64];
    size_t n = (size_t)(q - s);
    char *tmp = n < sizeof buf ? buf : kf_malloc(n + 1);
    memcpy(tmp, s, n);
    tmp[n] = 0;
    v->type = JSON_NUMBER;
    v->num = strtod(tmp, NULL);
    if (is_int) {
        errno = 0;
        long long x = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->i = x;
        }
    }
    if (tmp != buf) free(tmp);
    ps->p = q;
    return 0;
}

static int lit(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n))
        return fail(ps, "unexpected token");
    ps->p += n;
    return 0;
}

static int parse_value(parser *ps, json *v, int depth);

static void push_kid(parser *ps, const json *v) {
    if (ps->nkids == ps->capkids) {
        ps->capkids = ps->capkids ? 2 * ps->capkids : 256;
        ps->kids = kf_realloc(ps->kids, ps->capkids * sizeof *ps->kids);
    }
    ps->kids[ps->nkids++] = *v;
}

static void push_key(parser *ps, json_str k) {
    if (ps->nkeys == ps->capkeys) {
        ps->capkeys = ps->capkeys ? 2 * ps->capkeys : 256;
        ps->keys = kf_realloc(ps->keys, ps->capkeys * sizeof *ps->keys);
    }
    ps->keys[ps->nkeys++] = k;
}

/* Parses '[' ... ']' or '{' ... '}' (is_obj), then moves the children from
 * the scratch stacks into the arena. */
static int parse_container(parser *ps, json *v, int is_obj, int depth) {
    char close = is_obj ? '}' : ']';
    size_t base = ps->nkids, kbase = ps->nkeys;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            skip_ws(ps);
            if (is_obj) {
                json_str k;
                if (ps->p >= ps->end || *ps->p != '"')
                    return fail(ps, "object key (a string) expected");
                if (parse_string(ps, &k)) return -1;
                push_key(ps, k);
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "':' expected");
                ps->p++;
                skip_ws(ps);
            }
            json kid;
            if (parse_value(ps, &kid, depth + 1)) return -1;
            push_kid(ps, &kid);
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                break;
            }
            return fail(ps, is_obj ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    v->type = is_obj ? JSON_OBJECT : JSON_ARRAY;
    v->n = ps->nkids - base;
    if (v->n) {
        v->kids = arena_alloc(ps->doc, v->n * sizeof *v->kids);
        memcpy(v->kids, ps->kids + base, v->n * sizeof *v->kids);
        if (is_obj) {
            v->keys = arena_alloc(ps->doc, v->n * sizeof *v->keys);
            memcpy(v->keys, ps->keys + kbase, v->n * sizeof *v->keys);
        }
    }
    ps->nkids = base;
    ps->nkeys = kbase;
    return 0;
}

static int parse_value(parser *ps, json *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > JSON_MAX_DEPTH) return fail(ps, "nesting too deep");
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "value expected");
    v->line = ps->line;
    v->col = (int32_t)(ps->p - ps->line_start) + 1;
    switch (*ps->p) {
    case '{': return parse_container(ps, v, 1, depth);
    case '[': return parse_container(ps, v, 0, depth);
    case '"': v->type = JSON_STRING; return parse_string(ps, &v->str);
    case 't':
        v->type = JSON_BOOL;
        v->b = 1;
        return lit(ps, "true");
    case 'f': v->type = JSON_BOOL; return lit(ps, "false");
    case 'n': v->type = JSON_NULL; return lit(ps, "null");
    default: return parse_number(ps, v);
    }
}

json_doc *json_parse(const char *text, size_t len, const char *name, kf_err *err) {
    json_doc *d = kf_calloc(1, sizeof *d);
    parser ps = {.p = text,
                 .end = text + len,
                 .name = name ? name : "<json>",
                 .line_start = text,
                 .line = 1,
                 .err = err,
                 .doc = d};
    int rc = parse_value(&ps, &d->root, 0);
    if (!rc) {
        skip_ws(&ps);
        if (ps.p != ps.end) rc = fail(&ps, "trailing characters after the value");
    }
    free(ps.kids);
    free(ps.keys);
    if (rc) {
        json_free(d);
        return NULL;
    }
    return d;
}

const json *json_root(const json_doc *d) { return &d->root; }

void json_free(json_doc *d) {
    if (!d) return;
    for (arena_block *b = d->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    free(d);
}

const json *json_get(const json *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = obj->n; i-- > 0;)
        if (obj->keys[i].len == kl && !memcmp(obj->keys[i].s, key, kl)) return &obj->kids[i];
    return NULL;
}

/* The escape for byte c, or NULL when c is written as it is. */
static const char *esc_of(unsigned char c, char tmp[8]) {
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default:
        if (c < 0x20 || c == 0x7F) {
            snprintf(tmp, 8, "\\u%04x", c);
            return tmp;
        }
        return NULL;
    }
}

size_t json_escape(char *dst, size_t cap, const char *s, size_t n) {
    size_t o = 0;
#define PUT(ch)                                                                                    \
    do {                                                                                           \
        if (o < cap) dst[o] = (ch);                                                                \
        o++;                                                                                       \
    } while (0)
    PUT('"');
    char tmp[8];
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) { /* JSON text is UTF-8: ill-formed bytes become U+FFFD */
            uint32_t cp;
            int bad;
            size_t l = utf8_decode((const unsigned char *)s + i, n - i, &cp, &bad);
            if (bad) {
                for (const char *r = "\xEF\xBF\xBD"; *r; r++) PUT(*r);
            } else {
                for (size_t k = 0; k < l; k++) PUT(s[i + k]);
            }
            i += l;
            continue;
        }
        const char *e = esc_of(c, tmp);
        if (!e) PUT(s[i]);
        else
            for (; *e; e++) PUT(*e);
        i++;
    }
    PUT('"');
#undef PUT
    return o;
}

void json_write_str(FILE *f, const char *s, size_t n) {
    char small[256];
    size_t need = json_escape(small, sizeof small, s, n);
    if (need <= sizeof small) {
        fwrite(small, 1, need, f);
        return;
    }
    char *buf = kf_malloc(need);
    json_escape(buf, need, s, n);
    fwrite(buf, 1, need, f);
    free(buf);
}
