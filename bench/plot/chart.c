/* bench/plot/chart.c — line and grouped bar charts on a canvas, written as PNG. */
#include "bench/plot/chart.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/plot/canvas.h"

enum { W = 900, H = 540, ML = 80, MR = 24, MT = 40, MB = 56, PW = W - ML - MR, PH = H - MT - MB };

static const canvas_color COLORS[CHART_MAX_SERIES] = {0x1f77b4, 0xd62728, 0x2ca02c,
                                                      0xff7f0e, 0x9467bd, 0x8c564b};
static const canvas_color AXIS = 0x000000, GRID = 0xe0e0e0, LABEL = 0x333333;

/* Tick spacing: 1, 2 or 5 times a power of ten, giving about `want` ticks. */
static double nice_step(double span, int want) {
    double raw = span / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* A tick label with as many decimals as the step needs. */
static void fmt_tick(char *out, size_t cap, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    if (fabs(v) >= 1e5 || (fabs(v) < 1e-3 && v != 0)) snprintf(out, cap, "%.2g", v);
    else snprintf(out, cap, "%.*f", step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9), v);
}

/* The y range [y0, y1] of the plot area. */
typedef struct yaxis {
    double y0, y1;
    bool logy;
} yaxis;

static int py(const yaxis *a, double y) {
    return MT + PH - (int)lround((y - a->y0) / (a->y1 - a->y0) * PH);
}

/* Horizontal grid lines, ticks and labels; labels show 10^v on a log axis. */
static void draw_yaxis(canvas *c, const yaxis *a) {
    char t[64];
    double ys = nice_step(a->y1 - a->y0, 6);
    if (a->logy && ys < 1 && a->y1 - a->y0 > 1) ys = 1; /* whole decades when they fit */
    for (double v = ceil(a->y0 / ys) * ys; v <= a->y1 + ys * 1e-9; v += ys) {
        canvas_line(c, ML, py(a, v), ML + PW, py(a, v), 1, GRID);
        canvas_line(c, ML - 4, py(a, v), ML, py(a, v), 1, AXIS);
        if (a->logy) snprintf(t, sizeof t, "%.3g", pow(10, v));
        else fmt_tick(t, sizeof t, v, ys);
        canvas_text(c, ML - 7 - canvas_text_width(t, 1), py(a, v) - 5, t, 1, LABEL);
    }
}

static void draw_frame(canvas *c, const char *title, const char *xlabel) {
    canvas_line(c, ML, MT, ML, MT + PH, 1, AXIS);
    canvas_line(c, ML, MT + PH, ML + PW, MT + PH, 1, AXIS);
    canvas_text(c, ML + PW / 2 - canvas_text_width(xlabel, 1) / 2, H - 22, xlabel, 1, LABEL);
    canvas_text(c, W / 2 - canvas_text_width(title, 2) / 2, 8, title, 2, AXIS);
}

/* Line-chart legend entry s at the top right: a colour swatch and text. */
static void legend(canvas *c, int s, const char *text) {
    int lx = ML + PW - canvas_text_width(text, 1) - 30, ly = MT + 8 + 14 * s;
    canvas_fill_rect(c, lx - 4, ly, canvas_text_width(text, 1) + 32, 14, 0xffffff);
    canvas_fill_rect(c, lx, ly + 5, 18, 3, COLORS[s]);
    canvas_text(c, lx + 24, ly + 1, text, 1, LABEL);
}

static int finish(canvas *c, const char *path, kf_err *err) {
    int rc = canvas_write_png(c, path, err);
    canvas_free(c);
    return rc;
}

int chart_lines(const char *path, const char *title, const char *xlabel, const chart_series *series,
                int nseries, bool logy, kf_err *err) {
    KF_CHECK(nseries >= 1 && nseries <= CHART_MAX_SERIES, "chart_lines: %d series", nseries);
    double x0 = INFINITY, x1 = -INFINITY;
    yaxis a = {INFINITY, -INFINITY, logy};
    for (int s = 0; s < nseries; s++)
        for (size_t i = 0; i < series[s].n; i++) {
            double y = logy ? log10(series[s].y[i]) : series[s].y[i];
            x0 = fmin(x0, series[s].x[i]);
            x1 = fmax(x1, series[s].x[i]);
            a.y0 = fmin(a.y0, y);
            a.y1 = fmax(a.y1, y);
        }
    if (!(x0 <= x1)) return kf_err_set(err, "%s: nothing to plot (no points)", path);
    if (x1 == x0) {
        x0 -= 1;
        x1 += 1;
    }
    if (a.y1 == a.y0) {
        a.y0 -= 0.5;
        a.y1 += 0.5;
    }
    double pad = (a.y1 - a.y0) * 0.05;
    a.y0 -= pad;
    a.y1 += pad;

    canvas *c = canvas_new(W, H, 0xffffff);
#define PX(x) (ML + (int)lround(((x)-x0) / (x1 - x0) * PW))
    char t[96];
    double xs = nice_step(x1 - x0, 8);
    for (double v = ceil(x0 / xs) * xs; v <= x1 + xs * 1e-9; v += xs) {
        canvas_line(c, PX(v), MT, PX(v), MT + PH, 1, GRID);
        canvas_line(c, PX(v), MT + PH, PX(v), MT + PH + 4, 1, AXIS);
        fmt_tick(t, sizeof t, v, xs);
        canvas_text(c, PX(v) - canvas_text_width(t, 1) / 2, MT + PH + 7, t, 1, LABEL);
    }
    draw_yaxis(c, &a);
    draw_frame(c, title, xlabel);
    for (int s = 0; s < nseries; s++) {
        const chart_series *S = &series[s];
        for (size_t i = 0; i < S->n; i++) {
            int yp = py(&a, logy ? log10(S->y[i]) : S->y[i]);
            if (S->n == 1) canvas_fill_rect(c, PX(S->x[i]) - 2, yp - 2, 5, 5, COLORS[s]);
            if (i)
                canvas_line(c, PX(S->x[i - 1]), py(&a, logy ? log10(S->y[i - 1]) : S->y[i - 1]),
                            PX(S->x[i]), yp, 2, COLORS[s]);
        }
    }
#undef PX
    for (int s = 0; s < nseries; s++) {
        if (series[s].n)
            snprintf(t, sizeof t, "%s (last %.4g)", series[s].name, series[s].y[series[s].n - 1]);
        else snprintf(t, sizeof t, "%s (no points)", series[s].name);
        legend(c, s, t);
    }
    return finish(c, path, err);
}

int chart_bars(const char *path, const char *title, const char *ylabel, const char *const *groups,
               int ngroups, const char *const *series, int nseries, const double *values,
               kf_err *err) {
    KF_CHECK(nseries >= 1 && nseries <= CHART_MAX_SERIES && ngroups >= 1,
             "chart_bars: %d groups x %d series", ngroups, nseries);
    yaxis a = {0, 0, false};
    for (int i = 0; i < ngroups * nseries; i++)
        if (isfinite(values[i])) {
            KF_CHECK(values[i] >= 0, "chart_bars: negative value %g", values[i]);
            a.y1 = fmax(a.y1, values[i]);
        }
    a.y1 = a.y1 > 0 ? a.y1 * 1.12 : 1; /* headroom for the value labels */

    canvas *c = canvas_new(W, H, 0xffffff);
    draw_yaxis(c, &a);
    draw_frame(c, title, "");
    canvas_text(c, 8, MT - 14, ylabel, 1, LABEL);
    int gw = PW / ngroups, bw = (gw * 3 / 4) / nseries;
    if (bw < 1) bw = 1;
    char t[64];
    for (int g = 0; g < ngroups; g++) {
        int gx = ML + g * gw + (gw - bw * nseries) / 2;
        for (int s = 0; s < nseries; s++) {
            double v = values[g * nseries + s];
            if (!isfinite(v)) continue;
            int top = py(&a, v);
            canvas_fill_rect(c, gx + s * bw + 1, top, bw - 2 > 0 ? bw - 2 : 1, MT + PH - top,
                             COLORS[s]);
            snprintf(t, sizeof t, v >= 100 ? "%.0f" : "%.3g", v);
            canvas_text(c, gx + s * bw + bw / 2 - canvas_text_width(t, 1) / 2, top - 11, t, 1,
                        LABEL);
        }
        canvas_text(c, ML + g * gw + gw / 2 - canvas_text_width(groups[g], 1) / 2, MT + PH + 7,
                    groups[g], 1, LABEL);
    }
    /* Legend in one row below the group labels, clear of the bars. */
    int lx = ML;
    for (int s = 0; s < nseries; s++) {
        canvas_fill_rect(c, lx, H - 20, 18, 3, COLORS[s]);
        canvas_text(c, lx + 24, H - 25, series[s], 1, LABEL);
        lx += 24 + canvas_text_width(series[s], 1) + 24;
    }
    return finish(c, path, err);
}
