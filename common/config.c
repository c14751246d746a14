/* common/config.c — YAML (libyaml event API) into a position-tagged tree,
 * path lookups with use tracking, overrides and canonical emission. */
#include "common/config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "common/strbuf.h"
#include "common/utf8.h"

enum { MAX_DEPTH = 200 }; /* bounded recursion on hostile input */

static char *fmt_alloc(const char *fmt, ...) __attribute__((format(printf, 1, 2), nonnull(1)));
static char *fmt_alloc(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = kf_malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- nodes ---- */

static char *dupn(const char *s, int n) {
    char *d = kf_malloc((size_t)n + 1);
    memcpy(d, s, (size_t)n);
    d[n] = 0;
    return d;
}

static cfg_node *node_new(cfg_kind kind) {
    cfg_node *n = kf_calloc(1, sizeof *n);
    n->kind = kind;
    return n;
}

static void node_free(cfg_node *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n; i++) node_free(n->items[i]);
    free(n->items);
    free(n->where);
    free(n->path);
    free(n->key);
    free(n->value);
    free(n);
}

void cfg_free(cfg_node *root) {
    if (!root) return;
    char *file = (char *)root->file; /* the root owns the shared file name */
    node_free(root);
    free(file);
}

static void node_append(cfg_node *parent, cfg_node *child) {
    parent->items = kf_realloc(parent->items, (parent->n + 1) * sizeof *parent->items);
    parent->items[parent->n++] = child;
    child->parent = parent;
}

/* Recomputes child paths below n (after n got its own path). */
static void set_paths(cfg_node *n) {
    for (size_t i = 0; i < n->n; i++) {
        cfg_node *c = n->items[i];
        free(c->path);
        if (n->kind == CFG_MAP)
            c->path = n->path[0] ? fmt_alloc("%s.%s", n->path, c->key) : kf_strdup(c->key);
        else c->path = fmt_alloc("%s[%zu]", n->path, i);
        set_paths(c);
    }
}

/* Where a mapping entry's key is, for "unknown key" and "duplicate key". */
static char *key_where(const cfg_node *n) {
    if (!n->file) return kf_strdup(n->where);
    return fmt_alloc("%s:%d:%d", n->file, n->key_line, n->key_col);
}

/* ---- loading ---- */

typedef struct loader {
    yaml_parser_t p;
    const char *file;
    kf_err *err;
    bool any_top; /* the top-level node may be any kind (override values) */
} loader;

/* "FILE:LINE:COL: what"; an override's one-line value is named by the
 * override itself ("override 'a=[1': what"). */
static int load_error2(loader *L, yaml_mark_t m, const char *what, const char *context) {
    const char *sep = context ? " " : "", *ctx = context ? context : "";
    if (L->any_top) return kf_err_set(L->err, "%s: %s%s%s", L->file, what, sep, ctx);
    return kf_err_set(L->err, "%s:%zu:%zu: %s%s%s", L->file, m.line + 1, m.column + 1, what, sep,
                      ctx);
}

static int load_error(loader *L, yaml_mark_t m, const char *what) {
    return load_error2(L, m, what, NULL);
}

static int next_event(loader *L, yaml_event_t *ev) {
    if (yaml_parser_parse(&L->p, ev)) return 0;
    return load_error2(L, L->p.problem_mark, L->p.problem ? L->p.problem : "YAML syntax error",
                       L->p.context);
}

static void set_pos(loader *L, cfg_node *n, yaml_mark_t m) {
    n->file = L->file;
    n->line = (int)m.line + 1;
    n->col = (int)m.column + 1;
    n->where = fmt_alloc("%s:%d:%d", L->file, n->line, n->col);
}

/* Rejects YAML features we do not support, so configs stay plain data. */
static int check_plain(loader *L, const yaml_event_t *ev, const yaml_char_t *anchor,
                       const yaml_char_t *tag) {
    if (anchor)
        return load_error(L, ev->start_mark,
                          "anchors (&name) are not supported: write the value out");
    if (tag) return load_error(L, ev->start_mark, "tags (!name) are not supported");
    return 0;
}

static cfg_node *parse_node(loader *L, yaml_event_t *ev, int depth, char *path);

static cfg_node *parse_mapping(loader *L, yaml_event_t *start, int depth, char *path) {
    cfg_node *m = node_new(CFG_MAP);
    m->path = path;
    set_pos(L, m, start->start_mark);
    for (;;) {
        yaml_event_t kev;
        if (next_event(L, &kev)) goto fail;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return m;
        }
        if (kev.type != YAML_SCALAR_EVENT) {
            load_error(L, kev.start_mark,
                       kev.type == YAML_ALIAS_EVENT ? "aliases (*name) are not supported"
                                                    : "keys must be plain scalars");
            yaml_event_delete(&kev);
            goto fail;
        }
        if (check_plain(L, &kev, kev.data.scalar.anchor, kev.data.scalar.tag)) {
            yaml_event_delete(&kev);
            goto fail;
        }
        const char *key = (const char *)kev.data.scalar.value;
        if (!strcmp(key, "<<") && kev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            load_error(L, kev.start_mark, "merge keys (<<) are not supported");
            yaml_event_delete(&kev);
            goto fail;
        }
        if (strlen(key) != kev.data.scalar.length || !key[0]) {
            load_error(L, kev.start_mark, !key[0] ? "empty key" : "NUL character in key");
            yaml_event_delete(&kev);
            goto fail;
        }
        char *cpath = m->path[0] ? fmt_alloc("%s.%s", m->path, key) : kf_strdup(key);
        for (size_t i = 0; i < m->n; i++) {
            if (strcmp(m->items[i]->key, key)) continue;
            kf_err_set(L->err, "%s:%zu:%zu: duplicate key '%s' (first at %d:%d)", L->file,
                       kev.start_mark.line + 1, kev.start_mark.column + 1, cpath,
                       m->items[i]->key_line, m->items[i]->key_col);
            free(cpath);
            yaml_event_delete(&kev);
            goto fail;
        }
        yaml_event_t vev;
        if (next_event(L, &vev)) {
            free(cpath);
            yaml_event_delete(&kev);
            goto fail;
        }
        cfg_node *v = parse_node(L, &vev, depth + 1, cpath);
        if (!v) {
            yaml_event_delete(&kev);
            goto fail;
        }
        v->key = kf_strdup(key);
        v->key_line = (int)kev.start_mark.line + 1;
        v->key_col = (int)kev.start_mark.column + 1;
        yaml_event_delete(&kev);
        node_append(m, v);
    }
fail:
    node_free(m);
    return NULL;
}

static cfg_node *parse_sequence(loader *L, yaml_event_t *start, int depth, char *path) {
    cfg_node *s = node_new(CFG_SEQ);
    s->path = path;
    set_pos(L, s, start->start_mark);
    for (;;) {
        yaml_event_t ev;
        if (next_event(L, &ev)) break;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return s;
        }
        cfg_node *v = parse_node(L, &ev, depth + 1, fmt_alloc("%s[%zu]", path, s->n));
        if (!v) break;
        node_append(s, v);
    }
    node_free(s);
    return NULL;
}

/* Builds the node that starts with ev (consumed) at path (owned by the node,
 * freed on failure). */
static cfg_node *parse_node(loader *L, yaml_event_t *ev, int depth, char *path) {
    cfg_node *n = NULL;
    if (depth > MAX_DEPTH) {
        load_error(L, ev->start_mark, "nesting too deep");
    } else if (ev->type == YAML_SCALAR_EVENT) {
        if (!check_plain(L, ev, ev->data.scalar.anchor, ev->data.scalar.tag)) {
            if (strlen((const char *)ev->data.scalar.value) != ev->data.scalar.length) {
                load_error(L, ev->start_mark, "NUL character in value");
            } else {
                n = node_new(CFG_SCALAR);
                n->path = path;
                path = NULL;
                set_pos(L, n, ev->start_mark);
                n->value = kf_strdup((const char *)ev->data.scalar.value);
                n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
            }
        }
    } else if (ev->type == YAML_MAPPING_START_EVENT) {
        if (!check_plain(L, ev, ev->data.mapping_start.anchor, ev->data.mapping_start.tag)) {
            if (L->any_top && depth == 0 &&
                ev->data.mapping_start.style == YAML_BLOCK_MAPPING_STYLE)
                load_error(L, ev->start_mark,
                           "expected a scalar, [list] or {mapping}: quote text containing ': '");
            else n = parse_mapping(L, ev, depth, path), path = NULL;
        }
    } else if (ev->type == YAML_SEQUENCE_START_EVENT) {
        if (!check_plain(L, ev, ev->data.sequence_start.anchor, ev->data.sequence_start.tag)) {
            if (L->any_top && depth == 0 &&
                ev->data.sequence_start.style == YAML_BLOCK_SEQUENCE_STYLE)
                load_error(L, ev->start_mark, "expected a scalar, [list] or {mapping}");
            else n = parse_sequence(L, ev, depth, path), path = NULL;
        }
    } else if (ev->type == YAML_ALIAS_EVENT) {
        load_error(L, ev->start_mark, "aliases (*name) are not supported: write the value out");
    } else {
        load_error(L, ev->start_mark, "unexpected YAML event");
    }
    free(path);
    yaml_event_delete(ev);
    return n;
}

/* Parses one document (an empty text gives an empty mapping, or a null scalar
 * for override values). Returns NULL with err set on any error. */
static cfg_node *load_text(const char *text, size_t len, const char *file, bool any_top,
                           kf_err *err) {
    loader L = {.file = file, .err = err, .any_top = any_top};
    if (!yaml_parser_initialize(&L.p)) KF_FATAL("libyaml: out of memory");
    yaml_parser_set_input_string(&L.p, (const unsigned char *)text, len);
    yaml_event_t ev;
    cfg_node *root = NULL;
    bool ok = false;
    if (next_event(&L, &ev)) goto done; /* STREAM-START */
    yaml_event_delete(&ev);
    if (next_event(&L, &ev)) goto done;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        root = any_top ? node_new(CFG_SCALAR) : node_new(CFG_MAP);
        if (any_top) root->value = kf_strdup("");
        root->file = file;
        root->line = root->col = 1;
        root->where = fmt_alloc("%s:1:1", file);
        root->path = kf_strdup("");
        ok = true;
        goto done;
    }
    yaml_event_delete(&ev); /* DOCUMENT-START */
    if (next_event(&L, &ev)) goto done;
    yaml_mark_t top = ev.start_mark;
    bool is_map = ev.type == YAML_MAPPING_START_EVENT;
    root = parse_node(&L, &ev, 0, kf_strdup(""));
    if (!root) goto done;
    if (!any_top && !is_map) {
        load_error(&L, top, "the top level must be a mapping (key: value lines)");
        goto done;
    }
    if (next_event(&L, &ev)) goto done; /* DOCUMENT-END */
    yaml_event_delete(&ev);
    if (next_event(&L, &ev)) goto done;
    if (ev.type != YAML_STREAM_END_EVENT)
        load_error(&L, ev.start_mark, "only one YAML document is allowed");
    else ok = true;
    yaml_event_delete(&ev);
done:
    yaml_parser_delete(&L.p);
    if (!ok) {
        node_free(root);
        return NULL;
    }
    return root;
}

cfg_node *cfg_load_string(const char *text, const char *name, kf_err *err) {
    char *file = kf_strdup(name);
    cfg_node *root = load_text(text, strlen(text), file, false, err);
    if (!root) free(file);
    return root;
}

cfg_node *cfg_load_file(const char *path, kf_err *err) {
    char *text;
    size_t len;
    if (fs_read_file(path, &text, &len, err)) return NULL;
    if (strlen(text) != len) {
        free(text);
        kf_err_set(err, "%s: contains a NUL byte (not a text file?)", path);
        return NULL;
    }
    char *file = kf_strdup(path);
    cfg_node *root = load_text(text, len, file, false, err);
    free(text);
    if (!root) free(file);
    return root;
}

/* ---- paths ---- */

/* Splits the next segment off *p: a key, or an index from "[i]" or ".i".
 * Returns the segment length (0 at the end); *index is set for "[i]" forms
 * (-1 otherwise). Returns -1 on malformed paths. */
static int next_segment(const char **p, const char **seg, long *index) {
    const char *s = *p;
    *index = -1;
    if (*s == '.') s++;
    if (!*s) {
        *p = s;
        return 0;
    }
    if (*s == '[') {
        char *end;
        errno = 0;
        long v = strtol(s + 1, &end, 10);
        if (end == s + 1 || *end != ']' || v < 0 || errno) return -1;
        *index = v;
        *seg = s;
        *p = end + 1;
        if (**p && **p != '.' && **p != '[') return -1;
        return (int)(*p - s);
    }
    const char *e = s;
    while (*e && *e != '.' && *e != '[') e++;
    *seg = s;
    *p = e;
    return (int)(e - s);
}

/* The child of n named by a segment, or NULL. */
static cfg_node *child(cfg_node *n, const char *seg, int len, long index) {
    if (n->kind == CFG_MAP && index < 0) {
        for (size_t i = 0; i < n->n; i++)
            if ((int)strlen(n->items[i]->key) == len &&
                !strncmp(n->items[i]->key, seg, (size_t)len))
                return n->items[i];
        return NULL;
    }
    if (n->kind == CFG_SEQ) {
        if (index < 0) { /* ".i" form */
            char *end;
            index = strtol(seg, &end, 10);
            if (end != seg + len || len == 0 || !(seg[0] >= '0' && seg[0] <= '9')) return NULL;
        }
        return (size_t)index < n->n ? n->items[index] : NULL;
    }
    return NULL;
}

/* Walks path from n as far as it exists: returns the last node reached and
 * sets *rest to the unresolved part ("" when the whole path resolved). */
static cfg_node *walk(cfg_node *n, const char *path, const char **rest, bool mark) {
    const char *p = path;
    if (mark) n->used = true;
    for (;;) {
        const char *before = p, *seg;
        long index;
        int len = next_segment(&p, &seg, &index);
        if (len <= 0) {
            *rest = len < 0 ? before : p;
            return n;
        }
        cfg_node *c = child(n, seg, len, index);
        if (!c) {
            *rest = before[0] == '.' ? before + 1 : before;
            return n;
        }
        if (mark) c->used = true;
        n = c;
    }
}

static char *join_path(const cfg_node *n, const char *rest) {
    if (!n->path || !n->path[0]) return kf_strdup(rest);
    if (rest[0] == '[') return fmt_alloc("%s%s", n->path, rest);
    return fmt_alloc("%s.%s", n->path, rest);
}

cfg_node *cfg_find(cfg_node *n, const char *path) {
    const char *rest;
    cfg_node *end = walk(n, path, &rest, true);
    return *rest ? NULL : end;
}

static const char *kind_name(cfg_kind k) {
    return k == CFG_MAP ? "a mapping" : k == CFG_SEQ ? "a list" : "a scalar";
}

/* "WHERE: key 'PATH': " prefix followed by the message. */
static int verr(const cfg_node *n, kf_err *err, const char *fmt, va_list ap) {
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (n->path && n->path[0]) return kf_err_set(err, "%s: key '%s': %s", n->where, n->path, msg);
    return kf_err_set(err, "%s: %s", n->where, msg);
}

int cfg_err_at(const cfg_node *n, kf_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verr(n, err, fmt, ap);
    va_end(ap);
    return -1;
}

/* "got 'x'" / "got a mapping" for type errors. */
static int type_err(const cfg_node *n, const char *expected, kf_err *err) {
    if (n->kind != CFG_SCALAR)
        return cfg_err_at(n, err, "expected %s, got %s", expected, kind_name(n->kind));
    if (cfg_is_null(n)) return cfg_err_at(n, err, "expected %s, got null", expected);
    return cfg_err_at(n, err, "expected %s, got '%s'%s", expected, n->value,
                      n->quoted ? " (quoted: a string)" : "");
}

int cfg_get_node(cfg_node *n, const char *path, int kind, cfg_node **out, kf_err *err) {
    const char *rest;
    cfg_node *end = walk(n, path, &rest, true);
    *out = NULL;
    if (*rest) {
        char *full = join_path(end, rest);
        if (end->kind == CFG_SCALAR)
            kf_err_set(err, "%s: key '%s': expected a mapping, got '%s' (looking for '%s')",
                       end->where, end->path, end->value, full);
        else kf_err_set(err, "%s: missing required key '%s'", end->where, full);
        free(full);
        return -1;
    }
    if (kind >= 0 && end->kind != (cfg_kind)kind) {
        return kind == CFG_SCALAR ? type_err(end, "a scalar", err)
                                  : type_err(end, kind_name((cfg_kind)kind), err);
    }
    *out = end;
    return 0;
}

/* ---- scalar typing (YAML 1.2 core schema) ---- */

bool cfg_is_null(const cfg_node *n) {
    if (n->kind != CFG_SCALAR || n->quoted) return false;
    const char *v = n->value;
    return !v[0] || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
           !strcmp(v, "NULL");
}

static bool is_bool_text(const char *v, bool *b) {
    static const char *t[] = {"true", "True", "TRUE"}, *f[] = {"false", "False", "FALSE"};
    for (int i = 0; i < 3; i++) {
        if (!strcmp(v, t[i])) {
            if (b) *b = true;
            return true;
        }
        if (!strcmp(v, f[i])) {
            if (b) *b = false;
            return true;
        }
    }
    return false;
}

/* 0: ok; -1: not an integer; -2: out of range. */
static int parse_int_text(const char *v, int64_t *out) {
    const char *s = v;
    int base = 10;
    bool neg = false;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
        if (v != s) return -1; /* YAML core: no sign on 0x / 0o */
        base = s[1] == 'x' ? 16 : 8;
        s += 2;
    }
    if (!*s) return -1;
    for (const char *c = s; *c; c++) {
        int d = *c >= '0' && *c <= '9'   ? *c - '0'
                : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
                : *c >= 'A' && *c <= 'F' ? *c - 'A' + 10
                                         : 99;
        if (d >= base) return -1;
    }
    errno = 0;
    unsigned long long u = strtoull(s, NULL, base);
    if (errno || u > (neg ? (unsigned long long)INT64_MAX + 1 : (unsigned long long)INT64_MAX))
        return -2;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

static bool parse_double_text(const char *v, double *out) {
    const char *s = v;
    double sign = 1;
    if (*s == '+' || *s == '-') sign = *s++ == '-' ? -1 : 1;
    if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, ".INF")) {
        *out = sign * INFINITY;
        return true;
    }
    if (s == v && (!strcmp(s, ".nan") || !strcmp(s, ".NaN") || !strcmp(s, ".NAN"))) {
        *out = NAN;
        return true;
    }
    /* [0-9]*(.[0-9]*)?([eE][-+]?[0-9]+)? with at least one digit before the exponent */
    const char *c = s;
    int digits = 0;
    while (*c >= '0' && *c <= '9') {
        c++;
        digits++;
    }
    if (*c == '.')
        for (c++; *c >= '0' && *c <= '9'; c++) digits++;
    if (!digits) return false;
    if (*c == 'e' || *c == 'E') {
        c++;
        if (*c == '+' || *c == '-') c++;
        if (!(*c >= '0' && *c <= '9')) return false;
        while (*c >= '0' && *c <= '9') c++;
    }
    if (*c) return false;
    *out = strtod(v, NULL);
    return true;
}

int cfg_as_int(cfg_node *n, int64_t *out, kf_err *err) {
    n->used = true;
    if (n->kind != CFG_SCALAR || n->quoted) return type_err(n, "an integer", err);
    int rc = parse_int_text(n->value, out);
    if (rc == -2) return cfg_err_at(n, err, "integer '%s' out of range", n->value);
    return rc ? type_err(n, "an integer", err) : 0;
}

int cfg_as_double(cfg_node *n, double *out, kf_err *err) {
    n->used = true;
    int64_t i;
    if (n->kind == CFG_SCALAR && !n->quoted && parse_int_text(n->value, &i) == 0 &&
        !strpbrk(n->value, "xo")) {
        *out = (double)i;
        return 0;
    }
    if (n->kind != CFG_SCALAR || n->quoted || !parse_double_text(n->value, out))
        return type_err(n, "a number", err);
    return 0;
}

int cfg_as_bool(cfg_node *n, bool *out, kf_err *err) {
    n->used = true;
    if (n->kind != CFG_SCALAR || n->quoted || !is_bool_text(n->value, out))
        return type_err(n, "a boolean (true or false)", err);
    return 0;
}

int cfg_as_str(cfg_node *n, const char **out, kf_err *err) {
    n->used = true;
    if (n->kind != CFG_SCALAR || cfg_is_null(n)) return type_err(n, "a string", err);
    *out = n->value;
    return 0;
}

#define GETTERS(T, name)                                                                           \
    int cfg_get_##name(cfg_node *n, const char *path, T *out, kf_err *err) {                       \
        cfg_node *v;                                                                               \
        return cfg_get_node(n, path, -1, &v, err) ? -1 : cfg_as_##name(v, out, err);               \
    }                                                                                              \
    int cfg_opt_##name(cfg_node *n, const char *path, T def, T *out, kf_err *err) {                \
        cfg_node *v = cfg_find(n, path);                                                           \
        if (!v || cfg_is_null(v)) {                                                                \
            *out = def;                                                                            \
            return 0;                                                                              \
        }                                                                                          \
        return cfg_as_##name(v, out, err);                                                         \
    }
GETTERS(int64_t, int)
GETTERS(double, double)
GETTERS(bool, bool)
GETTERS(const char *, str)

void cfg_mark_used(cfg_node *n, bool recursive) {
    n->used = true;
    if (recursive)
        for (size_t i = 0; i < n->n; i++) cfg_mark_used(n->items[i], true);
}

int cfg_check_unused(const cfg_node *root, kf_err *err) {
    for (size_t i = 0; i < root->n; i++) {
        const cfg_node *c = root->items[i];
        if (root->kind == CFG_MAP && !c->used) {
            char *w = key_where(c);
            kf_err_set(err, "%s: unknown key '%s'", w, c->path);
            free(w);
            return -1;
        }
        if (cfg_check_unused(c, err)) return -1;
    }
    return 0;
}

/* ---- overrides ---- */

/* Gives a grafted subtree the override's label as its location. */
static void relabel(cfg_node *n, const char *label) {
    free(n->where);
    n->where = kf_strdup(label);
    n->file = NULL;
    n->line = n->col = n->key_line = n->key_col = 0;
    for (size_t i = 0; i < n->n; i++) relabel(n->items[i], label);
}

static void emit_scalar_text(strbuf *o, const char *v, bool quoted);

/* True when key s[0..n), as cfg_emit writes it, is a key YAML reads back:
 * an implicit key is at most 1024 characters (found by fuzz_config). */
static bool key_fits(const char *s, int n) {
    char *k = dupn(s, n);
    strbuf b = {0};
    emit_scalar_text(&b, k, true);
    bool ok = b.len <= 1024;
    free(b.s);
    free(k);
    return ok;
}

/* Edges from n to its deepest descendant. */
static int height(const cfg_node *n) {
    int h = 0;
    for (size_t i = 0; i < n->n; i++) {
        int c = 1 + height(n->items[i]);
        if (c > h) h = c;
    }
    return h;
}

/* Key segments in path (a malformed path stops the count; the walk reports it). */
static int path_segments(const char *path) {
    int n = 0;
    const char *seg;
    long index;
    while (next_segment(&path, &seg, &index) > 0) n++;
    return n;
}

int cfg_override(cfg_node *root, const char *assignment, kf_err *err) {
    const char *eq = strchr(assignment, '=');
    char *label = fmt_alloc("override '%s'", assignment);
    int rc = -1;
    if (!eq || eq == assignment) {
        kf_err_set(err, "%s: expected KEY.PATH=VALUE", label);
        free(label);
        return -1;
    }
    /* libyaml checks the value; a key it never parses must be checked here,
     * or cfg_emit writes text that does not load again (a frozen run.yaml) */
    if (!utf8_valid(assignment, (size_t)(eq - assignment))) {
        kf_err_set(err, "%s: the key path is not valid UTF-8", label);
        free(label);
        return -1;
    }
    char *path = kf_malloc((size_t)(eq - assignment) + 1);
    memcpy(path, assignment, (size_t)(eq - assignment));
    path[eq - assignment] = 0;
    cfg_node *val = load_text(eq + 1, strlen(eq + 1), label, true, err);
    if (!val) goto out;
    relabel(val, label);
    /* the loader's depth bound, checked before the tree changes: deeper
     * nesting would emit text that does not load again (found by fuzz_config) */
    if (path_segments(path) + height(val) > MAX_DEPTH) {
        kf_err_set(err, "%s: nesting deeper than %d levels", label, MAX_DEPTH);
        goto out;
    }

    /* Walk, creating mappings for missing keys. */
    cfg_node *n = root;
    const char *p = path;
    for (;;) {
        const char *seg;
        long index;
        int len = next_segment(&p, &seg, &index);
        if (len <= 0) {
            kf_err_set(err, "%s: malformed key path '%s'", label, path);
            goto out;
        }
        bool last = !*p;
        cfg_node *c = len ? child(n, seg, len, index) : NULL;
        if (!c && n->kind == CFG_SEQ) {
            kf_err_set(err, "%s: '%.*s' is not an index of '%s' (%zu items)", label, len, seg,
                       n->path, n->n);
            goto out;
        }
        if (!c && n->kind == CFG_SCALAR) {
            kf_err_set(err, "%s: '%s' is a scalar, not a mapping", label, n->path);
            goto out;
        }
        if (!c && (index >= 0 || len == 0)) {
            kf_err_set(err, "%s: '%s' is not a list", label, n->path);
            goto out;
        }
        if (!c && !key_fits(seg, len)) {
            kf_err_set(err, "%s: a key longer than YAML's 1024 characters", label);
            goto out;
        }
        if (last) {
            cfg_node *repl = val;
            val = NULL;
            if (c) { /* replace in place: keep the key's position in file order */
                size_t i = 0;
                while (n->items[i] != c) i++;
                n->items[i] = repl;
                repl->parent = n;
                repl->key = c->key;
                c->key = NULL;
                node_free(c);
            } else {
                repl->key = dupn(seg, len);
                node_append(n, repl);
            }
            set_paths(n);
            rc = 0;
            goto out;
        }
        if (!c) {
            c = node_new(CFG_MAP);
            c->where = kf_strdup(label);
            c->key = dupn(seg, len);
            node_append(n, c);
            c->path = n->path[0] ? fmt_alloc("%s.%s", n->path, c->key) : kf_strdup(c->key);
        }
        n = c;
    }
out:
    if (val) node_free(val);
    free(path);
    free(label);
    return rc;
}

/* ---- canonical emission ---- */

/* The code point when c starts with a non-ASCII character a YAML reader
 * does not take back as written: the C1 controls (not printable; U+0085 and
 * U+2028/9 are line breaks, folded even inside double quotes) and U+FFFE/F;
 * else 0. *len gets its length in bytes. */
static unsigned yaml_unsafe_at(const char *c, int *len) {
    const unsigned char *u = (const unsigned char *)c;
    *len = 2;
    if (u[0] == 0xC2 && u[1] >= 0x80 && u[1] <= 0x9F) return u[1];
    *len = 3;
    if (u[0] == 0xE2 && u[1] == 0x80 && (u[2] == 0xA8 || u[2] == 0xA9))
        return 0x2000u + (u[2] - 0x80u);
    if (u[0] == 0xEF && u[1] == 0xBF && (u[2] == 0xBE || u[2] == 0xBF))
        return 0xFFC0u + (u[2] - 0x80u);
    return 0;
}

/* True when v, written plain, reads back as the same text with the same
 * meaning in both block and flow context. */
static bool plain_ok(const char *v, bool quoted) {
    if (!v[0]) return false;
    if (quoted) { /* a quoted "12" or "true" must stay a string, also for YAML 1.1 readers (yes,
                     1:30) */
        static const char *yaml11[] = {"y", "n", "yes", "no", "on", "off"};
        int64_t i;
        double d;
        cfg_node tmp = {.kind = CFG_SCALAR, .value = (char *)v};
        /* a plain key << is a merge key, which loading refuses (found by fuzz_config) */
        if (parse_int_text(v, &i) != -1 || parse_double_text(v, &d) || is_bool_text(v, NULL) ||
            cfg_is_null(&tmp) || strchr(v, ':') || !strcmp(v, "<<"))
            return false;
        for (size_t k = 0; k < sizeof yaml11 / sizeof *yaml11; k++)
            if (!strcasecmp(v, yaml11[k])) return false;
    }
    if (strchr("-?:,[]{}#&*!|>'\"%@` \t", v[0])) {
        /* a leading '-' is fine for numbers (-1, -0.5, -.inf) */
        double d;
        if (!(v[0] == '-' && !quoted && parse_double_text(v, &d))) return false;
    }
    size_t n = strlen(v);
    if (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == ':') return false;
    for (const char *c = v; *c; c++) {
        unsigned char u = (unsigned char)*c;
        int len;
        if (u < 0x20 || u == 0x7f || strchr(",[]{}", u) || yaml_unsafe_at(c, &len)) return false;
        if ((c[0] == ':' && c[1] == ' ') || (c[0] == ' ' && c[1] == '#')) return false;
    }
    return true;
}

void cfg_emit_quoted(strbuf *o, const char *v) {
    strbuf_put(o, "\"", 1);
    for (const char *c = v; *c; c++) {
        unsigned char u = (unsigned char)*c;
        unsigned cp;
        int len;
        if (u == '"' || u == '\\') {
            strbuf_put(o, "\\", 1);
            strbuf_put(o, c, 1);
        } else if (u == '\n') strbuf_puts(o, "\\n");
        else if (u == '\t') strbuf_puts(o, "\\t");
        else if (u < 0x20 || u == 0x7f) strbuf_printf(o, "\\x%02x", u);
        else if ((cp = yaml_unsafe_at(c,
                                      &len))) { /* found by fuzz_config: NEL came back as a space */
            strbuf_printf(o, "\\u%04x", cp);
            c += len - 1;
        } else strbuf_put(o, c, 1);
    }
    strbuf_put(o, "\"", 1);
}

static void emit_scalar_text(strbuf *o, const char *v, bool quoted) {
    if (plain_ok(v, quoted)) strbuf_puts(o, v);
    else cfg_emit_quoted(o, v);
}

static void emit_scalar(strbuf *o, const cfg_node *n) {
    if (cfg_is_null(n)) strbuf_puts(o, "null");
    else emit_scalar_text(o, n->value, n->quoted);
}

static bool all_scalars(const cfg_node *n) {
    for (size_t i = 0; i < n->n; i++)
        if (n->items[i]->kind != CFG_SCALAR) return false;
    return true;
}

static void indent(strbuf *o, int k) {
    for (int i = 0; i < k; i++) strbuf_put(o, " ", 1);
}

/* Writes what follows a "key:" or "- " for values that fit on that line,
 * and returns false for those that need a block below it. */
static bool emit_inline(strbuf *o, const cfg_node *n, const char *lead) {
    if (n->kind == CFG_SCALAR) {
        strbuf_puts(o, lead);
        emit_scalar(o, n);
        strbuf_put(o, "\n", 1);
        return true;
    }
    if (n->n == 0) {
        strbuf_puts(o, lead);
        strbuf_puts(o, n->kind == CFG_MAP ? "{}\n" : "[]\n");
        return true;
    }
    if (n->kind == CFG_SEQ && all_scalars(n)) {
        strbuf_puts(o, lead);
        strbuf_put(o, "[", 1);
        for (size_t i = 0; i < n->n; i++) {
            if (i) strbuf_puts(o, ", ");
            emit_scalar(o, n->items[i]);
        }
        strbuf_puts(o, "]\n");
        return true;
    }
    return false;
}

static void emit_seq(strbuf *o, const cfg_node *n, int ind, bool first_inline);

/* Mapping entries at indentation ind; the first goes on the current line when
 * first_inline (after "- "). */
static void emit_map(strbuf *o, const cfg_node *n, int ind, bool first_inline) {
    for (size_t i = 0; i < n->n; i++) {
        const cfg_node *c = n->items[i];
        if (i || !first_inline) indent(o, ind);
        emit_scalar_text(o, c->key, true);
        strbuf_put(o, ":", 1);
        if (emit_inline(o, c, " ")) continue;
        strbuf_put(o, "\n", 1);
        if (c->kind == CFG_MAP) emit_map(o, c, ind + 2, false);
        else emit_seq(o, c, ind + 2, false);
    }
}

static void emit_seq(strbuf *o, const cfg_node *n, int ind, bool first_inline) {
    for (size_t i = 0; i < n->n; i++) {
        const cfg_node *c = n->items[i];
        if (i || !first_inline) indent(o, ind);
        if (emit_inline(o, c, "- ")) continue;
        strbuf_puts(o, "- ");
        if (c->kind == CFG_MAP) emit_map(o, c, ind + 2, true);
        else emit_seq(o, c, ind + 2, true);
    }
}

char *cfg_emit(const cfg_node *root) {
    strbuf o = {0};
    if (root->kind == CFG_MAP && root->n) emit_map(&o, root, 0, false);
    else if (root->kind == CFG_SEQ && root->n && !all_scalars(root)) emit_seq(&o, root, 0, false);
    else emit_inline(&o, root, "");
    return o.s;
}

void cfg_hash(const cfg_node *root, char out[65]) {
    char *text = cfg_emit(root);
    sha256_hex(text, strlen(text), out);
    free(text);
}
