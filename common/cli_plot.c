/* common/cli_plot.c — `kf plot LOG.jsonl`: a PNG line chart of JSONL series
 * (by default the training loss against the step). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/canvas.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"

enum { MAX_SERIES = 6, W = 900, H = 540, ML = 80, MR = 24, MT = 40, MB = 56 };

static const canvas_color COLORS[MAX_SERIES] = {0x1f77b4, 0xd62728, 0x2ca02c, 0xff7f0e, 0x9467bd, 0x8c564b};

typedef struct series {
    const char *key;
    double *x, *y;
    size_t n, cap;
} series;

static void usage(FILE *f) {
    fputs("usage: kf plot LOG.jsonl [-o OUT.png] [--key NAME]... [--x NAME] [--logy] [--title TEXT]\n"
          "\n"
          "Draws each --key (default: loss) of the JSONL records against --x (default:\n"
          "step; the record number when a record has no such field) as a PNG line\n"
          "chart. Records without the key, or with null (non-finite) values, are skipped;\n"
          "a last line without a newline (a log being written) is ignored.\n"
          "  -o OUT.png     output file (default: LOG with .png instead of .jsonl)\n"
          "  --key NAME     a series to draw; repeat for up to 6 series\n"
          "  --x NAME       the x-axis field (default: step)\n"
          "  --logy         logarithmic y axis (values <= 0 are skipped)\n"
          "  --title TEXT   chart title (default: the log's file name)\n",
          f);
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
static int read_log(const char *path, const char *xkey, series *ser, int nser, bool logy, kf_err *err) {
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
                if (v && v->type == JSON_NUMBER && isfinite(v->num) && (!logy || v->num > 0)) push(&ser[s], x, v->num);
            }
            rec++;
            json_free(d);
        }
        p = nl + 1;
    }
    free(text);
    return rc;
}

/* Tick spacing: 1, 2 or 5 times a power of ten, giving about `want` ticks. */
static double nice_step(double span, int want) {
    double raw = span / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void fmt_tick(char *out, size_t cap, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    if (fabs(v) >= 1e5 || (fabs(v) < 1e-3 && v != 0)) snprintf(out, cap, "%.2g", v);
    else snprintf(out, cap, "%.*f", step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9), v);
}

static void draw(canvas *c, series *ser, int nser, const char *xkey, bool logy, const char *title) {
    const canvas_color axis = 0x000000, grid = 0xe0e0e0, label = 0x333333;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int s = 0; s < nser; s++)
        for (size_t i = 0; i < ser[s].n; i++) {
            double y = logy ? log10(ser[s].y[i]) : ser[s].y[i];
            x0 = fmin(x0, ser[s].x[i]); x1 = fmax(x1, ser[s].x[i]);
            y0 = fmin(y0, y); y1 = fmax(y1, y);
        }
    if (x1 <= x0) { x0 -= 1; x1 += 1; }
    if (y1 <= y0) { y0 -= 0.5; y1 += 0.5; }
    double pad = (y1 - y0) * 0.05;
    y0 -= pad; y1 += pad;
    int pw = W - ML - MR, ph = H - MT - MB;
#define PX(x) (ML + (int)lround(((x) - x0) / (x1 - x0) * pw))
#define PY(y) (MT + ph - (int)lround(((y) - y0) / (y1 - y0) * ph))
    char t[64];
    double xs = nice_step(x1 - x0, 8);
    for (double v = ceil(x0 / xs) * xs; v <= x1 + xs * 1e-9; v += xs) {
        canvas_line(c, PX(v), MT, PX(v), MT + ph, 1, grid);
        canvas_line(c, PX(v), MT + ph, PX(v), MT + ph + 4, 1, axis);
        fmt_tick(t, sizeof t, v, xs);
        canvas_text(c, PX(v) - canvas_text_width(t, 1) / 2, MT + ph + 7, t, 1, label);
    }
    double ys = nice_step(y1 - y0, 6);
    if (logy && ys < 1) ys = y1 - y0 > 1 ? 1 : ys; /* whole decades when they fit */
    for (double v = ceil(y0 / ys) * ys; v <= y1 + ys * 1e-9; v += ys) {
        canvas_line(c, ML, PY(v), ML + pw, PY(v), 1, grid);
        canvas_line(c, ML - 4, PY(v), ML, PY(v), 1, axis);
        if (logy) snprintf(t, sizeof t, "%.3g", pow(10, v));
        else fmt_tick(t, sizeof t, v, ys);
        canvas_text(c, ML - 7 - canvas_text_width(t, 1), PY(v) - 5, t, 1, label);
    }
    canvas_line(c, ML, MT, ML, MT + ph, 1, axis);
    canvas_line(c, ML, MT + ph, ML + pw, MT + ph, 1, axis);
    canvas_text(c, ML + pw / 2 - canvas_text_width(xkey, 1) / 2, H - 22, xkey, 1, label);
    canvas_text(c, W / 2 - canvas_text_width(title, 2) / 2, 8, title, 2, axis);

    for (int s = 0; s < nser; s++) {
        const series *S = &ser[s];
        for (size_t i = 0; i < S->n; i++) {
            double y = logy ? log10(S->y[i]) : S->y[i];
            if (S->n == 1) canvas_fill_rect(c, PX(S->x[i]) - 2, PY(y) - 2, 5, 5, COLORS[s]);
            if (i == 0) continue;
            double yp = logy ? log10(S->y[i - 1]) : S->y[i - 1];
            canvas_line(c, PX(S->x[i - 1]), PY(yp), PX(S->x[i]), PY(y), 2, COLORS[s]);
        }
        /* Legend, top right: a colour swatch and "key (n points, last v)". */
        snprintf(t, sizeof t, "%s (last %.4g)", S->key, S->n ? S->y[S->n - 1] : NAN);
        int lx = ML + pw - canvas_text_width(t, 1) - 30, ly = MT + 8 + 14 * s;
        canvas_fill_rect(c, lx, ly + 4, 18, 3, COLORS[s]);
        canvas_text(c, lx + 24, ly, t, 1, label);
    }
#undef PX
#undef PY
}

int plot_main(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {"key", required_argument, 0, 'k'},
                                         {"x", required_argument, 0, 'x'}, {"logy", no_argument, 0, 'l'},
                                         {"title", required_argument, 0, 't'}, {0, 0, 0, 0}};
    series ser[MAX_SERIES] = {{0}};
    int nser = 0, c;
    const char *out = NULL, *xkey = "step", *title = NULL;
    bool logy = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return KF_EXIT_OK;
        case 'o': out = optarg; break;
        case 'k':
            if (nser == MAX_SERIES) { fprintf(stderr, "kf plot: at most %d --key options\n", MAX_SERIES); return KF_EXIT_USAGE; }
            ser[nser++].key = optarg;
            break;
        case 'x': xkey = optarg; break;
        case 'l': logy = true; break;
        case 't': title = optarg; break;
        default: usage(stderr); return KF_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) { usage(stderr); return KF_EXIT_USAGE; }
    const char *log = argv[optind];
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
    if (!rc && !total) rc = kf_err_set(&err, "%s: no record has a numeric '%s'%s", log, ser[0].key, nser > 1 ? " (or the other keys)" : "");
    if (!rc) {
        canvas *cv = canvas_new(W, H, 0xffffff);
        const char *base = strrchr(log, '/') ? strrchr(log, '/') + 1 : log;
        draw(cv, ser, nser, xkey, logy, title ? title : base);
        rc = canvas_write_png(cv, out, &err);
        canvas_free(cv);
    }
    if (rc) fprintf(stderr, "kf plot: error: %s\n", err.msg);
    else kf_log_info("plot: %zu points -> %s", total, out);
    for (int s = 0; s < nser; s++) { free(ser[s].x); free(ser[s].y); }
    free(defout);
    return rc ? KF_EXIT_ERROR : KF_EXIT_OK;
}
