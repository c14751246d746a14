/* bench/cli/cli_plot.c — `kf plot LOG.jsonl`: a PNG line chart of JSONL series
 * (by default the training loss against the step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/plot/chart.h"
#include "commands.h"
#include "common/cli.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"

enum { MAX_SERIES = CHART_MAX_SERIES };

typedef struct series {
    const char *key;
    double *x, *y;
    size_t n, cap;
} series;

static const char USAGE[] =
    "usage: kf plot LOG.jsonl [-o OUT.png] [--key NAME]... [--x NAME] [--logy] [--title TEXT]\n"
    "\n"
    "Draws each --key (default: loss) of the JSONL records against --x (default:\n"
    "step; the record number when a record has no such field) as a PNG line\n"
    "chart. Records without the key, or with null (non-finite) values, are skipped;\n"
    "a last line without a newline (a log being written) is ignored.\n"
    "  -o OUT.png     output file (default: LOG with .png instead of .jsonl)\n"
    "  --key NAME     a series to draw; repeat for up to 6 series\n"
    "  --x NAME       the x-axis field (default: step)\n"
    "  --logy         logarithmic y axis (values <= 0 are skipped)\n"
    "  --title TEXT   chart title (default: \"RUN: STAGE\" for a run's\n"
    "                 RUN/stages/STAGE/log.jsonl, else the log's file name)\n";

/* The default title: "RUN: STAGE" for RUN/stages/STAGE/log.jsonl (every
 * stage's log has the same file name), else the log's file name. */
static void default_title(const char *log, char *out, size_t cap) {
    const char *c[4] = {0}; /* the last path components, c[0] the file name */
    size_t len[4] = {0};
    const char *end = log + strlen(log);
    int n = 0;
    while (n < 4 && end > log) {
        const char *b = end;
        while (b > log && b[-1] != '/') b--;
        c[n] = b, len[n++] = (size_t)(end - b);
        end = b > log ? b - 1 : log;
    }
    if (n == 4 && len[2] == 6 && !strncmp(c[2], "stages", 6))
        snprintf(out, cap, "%.*s: %.*s", (int)len[3], c[3], (int)len[1], c[1]);
    else snprintf(out, cap, "%.*s", (int)len[0], c[0]);
}

static void push(series *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->x = kf_realloc(s->x, s->cap * sizeof *s->x);
        s->y = kf_realloc(s->y, s->cap * sizeof *s->y);
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

/* Reads every complete line of path into the series. */
static int read_log(const char *path, const char *xkey, series *ser, int nser, bool logy,
                    kf_err *err) {
    char *text;
    size_t len;
    if (fs_read_file(path, &text, &len, err)) return -1;
    int rc = 0;
    size_t lineno = 0, rec = 0;
    for (char *p = text; p < text + len && !rc;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        if (!nl) break; /* partial last line: still being written */
        lineno++;
        size_t n = (size_t)(nl - p);
        bool blank = true;
        for (size_t i = 0; i < n; i++) blank &= p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
        if (!blank) {
            kf_err jerr;
            json_doc *d = json_parse(p, n, "", &jerr);
            if (!d) { /* jerr is ":1:COL: what" for this one-line document */
                int col = 0, off = 0;
                sscanf(jerr.msg, ":1:%d: %n", &col, &off);
                rc = kf_err_set(err, "%s:%zu:%d: %s", path, lineno, col, jerr.msg + off);
                break;
            }
            const json *r = json_root(d);
            const json *xv = json_get(r, xkey);
            double x = xv && xv->type == JSON_NUMBER ? xv->num : (double)rec;
            for (int s = 0; s < nser; s++) {
                const json *v = json_get(r, ser[s].key);
                if (v && v->type == JSON_NUMBER && isfinite(v->num) && (!logy || v->num > 0))
                    push(&ser[s], x, v->num);
            }
            rec++;
            json_free(d);
        }
        p = nl + 1;
    }
    free(text);
    return rc;
}

int plot_main(int argc, char **argv) {
    series ser[MAX_SERIES] = {{0}};
    const char *keys[MAX_SERIES], *log = NULL;
    int nser = 0;
    const char *out = NULL, *xkey = "step", *title = NULL;
    bool logy = false;
    const cli_opt opts[] = {
        {"-o", CLI_STR, .out = &out},
        {"--key", CLI_STR_LIST, .out = keys, .n = &nser, .cap = MAX_SERIES},
        {"--x", CLI_STR, .out = &xkey},
        {"--logy", CLI_FLAG, .out = &logy},
        {"--title", CLI_STR, .out = &title},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf plot", USAGE, opts, .pos = &log, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!log) {
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    for (int s = 0; s < nser; s++) ser[s].key = keys[s];
    if (!nser) ser[nser++].key = "loss";
    char *defout = NULL;
    if (!out) { /* LOG.jsonl -> LOG.png */
        size_t n = strlen(log);
        defout = kf_malloc(n + 5);
        memcpy(defout, log, n + 1);
        if (n > 6 && !strcmp(log + n - 6, ".jsonl")) defout[n - 6] = 0;
        strcat(defout, ".png");
        out = defout;
    }
    kf_err err = {{0}};
    int rc = read_log(log, xkey, ser, nser, logy, &err);
    size_t total = 0;
    for (int s = 0; s < nser; s++) total += ser[s].n;
    if (!rc && !total)
        rc = kf_err_set(&err, "%s: no record has a numeric '%s'%s", log, ser[0].key,
                        nser > 1 ? " (or the other keys)" : "");
    if (!rc) {
        chart_series cs[MAX_SERIES];
        for (int s = 0; s < nser; s++)
            cs[s] = (chart_series){ser[s].key, ser[s].x, ser[s].y, ser[s].n};
        char deft[256];
        default_title(log, deft, sizeof deft);
        rc = chart_lines(out, title ? title : deft, xkey, cs, nser, logy, &err);
    }
    if (rc) fprintf(stderr, "kf plot: error: %s\n", err.msg);
    else kf_log_info("plot: %zu points -> %s", total, out);
    for (int s = 0; s < nser; s++) {
        free(ser[s].x);
        free(ser[s].y);
    }
    free(defout);
    return rc ? KF_EXIT_ERROR : KF_EXIT_OK;
}
