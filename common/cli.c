/* common/cli.c — option tables, checked values, errors naming the option
 * (common/cli.h). */
#include "common/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static bool bounded(const cli_opt *o) { return o->lo != 0 || o->hi != 0 || o->above; }

static bool within(const cli_opt *o, double v) {
    if (!bounded(o)) return true;
    return (o->above ? v > o->lo : v >= o->lo) && v <= o->hi;
}

int cli_parse_int(const cli_opt *o, const char *text, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || !within(o, (double)v)) return -1;
    *out = v;
    return 0;
}

int cli_parse_float(const cli_opt *o, const char *text, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || !within(o, v)) return -1;
    *out = v;
    return 0;
}

/* "an integer >= 1", "a number in [0, 1]", ... for error messages. */
static void describe(const cli_opt *o, char *buf, size_t cap) {
    const char *what = o->kind == CLI_INT ? "an integer" : "a number";
    const char *list = o->kind == CLI_INT_LIST     ? "a comma-separated list of integers"
                       : o->kind == CLI_FLOAT_LIST ? "a comma-separated list of numbers"
                                                   : NULL;
    if (!bounded(o)) snprintf(buf, cap, "%s", list ? list : what);
    else if (isinf(o->hi))
        snprintf(buf, cap, "%s%s %s %g", list ? list : what, list ? " each" : "",
                 o->above ? ">" : ">=", o->lo);
    else
        snprintf(buf, cap, "%s%s in %s%g, %g]", list ? list : what, list ? " each" : "",
                 o->above ? "(" : "[", o->lo, o->hi);
}

/* Prints "CMD: MESSAGE (see CMD --help)", sets the usage exit code, returns -1. */
__attribute__((format(printf, 3, 4))) static int usage_error(const cli_spec *s, int *exit_code,
                                                             const char *fmt, ...) {
    fprintf(stderr, "%s: ", s->cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s --help)\n", s->cmd);
    *exit_code = KF_EXIT_USAGE;
    return -1;
}

/* Stores v into option o; -1 after printing the error. */
static int take_value(const cli_spec *s, const cli_opt *o, const char *v, int *exit_code) {
    char want[128];
    describe(o, want, sizeof want);
    switch (o->kind) {
    case CLI_STR: *(const char **)o->out = v; return 0;
    case CLI_INT:
        if (cli_parse_int(o, v, (int64_t *)o->out)) break;
        return 0;
    case CLI_FLOAT:
        if (cli_parse_float(o, v, (double *)o->out)) break;
        return 0;
    case CLI_STR_LIST:
        if (*o->n >= o->cap)
            return usage_error(s, exit_code, "%s: at most %d values", o->name, o->cap);
        ((const char **)o->out)[(*o->n)++] = v;
        return 0;
    case CLI_INT_LIST:
    case CLI_FLOAT_LIST: {
        int n = 0;
        const char *p = v;
        for (;;) {
            char item[64];
            size_t len = strcspn(p, ",");
            if (n >= o->cap || len == 0 || len >= sizeof item) break;
            memcpy(item, p, len);
            item[len] = 0;
            if (o->kind == CLI_INT_LIST ? cli_parse_int(o, item, (int64_t *)o->out + n)
                                        : cli_parse_float(o, item, (double *)o->out + n))
                break;
            n++;
            if (!p[len]) {
                *o->n = n;
                return 0;
            }
            p += len + 1;
        }
        return usage_error(s, exit_code, "%s: expected %s, at most %d, got '%s'", o->name, want,
                           o->cap, v);
    }
    case CLI_FLAG: break;
    }
    return usage_error(s, exit_code, "%s: expected %s, got '%s'", o->name, want, v);
}

static const cli_opt *find(const cli_spec *s, const char *arg) {
    for (const cli_opt *o = s->opts; o && o->name; o++)
        if (!strcmp(o->name, arg) || (o->alias && !strcmp(o->alias, arg))) return o;
    return NULL;
}

int cli_parse(const cli_spec *s, int argc, char **argv, int *exit_code) {
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(s->usage, stdout);
            *exit_code = KF_EXIT_OK;
            return -1;
        }
        if (a[0] == '-' && a[1]) {
            const cli_opt *o = find(s, a);
            if (!o) return usage_error(s, exit_code, "unknown option '%s'", a);
            if (o->kind == CLI_FLAG) {
                *(bool *)o->out = true;
                continue;
            }
            if (i + 1 >= argc) return usage_error(s, exit_code, "%s needs a value", a);
            /* `--stage --run-dir X`: the value forgotten, not a stage named --run-dir */
            if (find(s, argv[i + 1]))
                return usage_error(s, exit_code, "%s needs a value (got the option %s)", a,
                                   argv[i + 1]);
            if (take_value(s, o, argv[++i], exit_code)) return -1;
        } else if (s->over && strchr(a, '=')) {
            s->over[(*s->n_over)++] = argv[i];
        } else {
            if (n_pos >= s->max_pos)
                return usage_error(s, exit_code, "unexpected argument '%s'%s", a,
                                   s->over ? " (overrides are key.path=value)" : "");
            s->pos[n_pos++] = a;
        }
    }
    if (s->n_pos) *s->n_pos = n_pos;
    return 0;
}
