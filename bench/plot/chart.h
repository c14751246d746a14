/* bench/plot/chart.h — PNG charts for logs and benchmarks: line charts (`kf plot`)
 * and grouped bar charts (`kf bench`), drawn with bench/plot/canvas.h and written
 * atomically with bench/plot/png.h. 900 x 540 pixels, white background, grid,
 * ticks at 1/2/5 x 10^k, a legend with one colour per series (at most
 * CHART_MAX_SERIES).
 */
#ifndef KF_BENCH_PLOT_CHART_H
#define KF_BENCH_PLOT_CHART_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define CHART_MAX_SERIES 6

/** One line: n points (x[i], y[i]) in drawing order; non-finite points (and,
 * on a log axis, y <= 0) must have been left out by the caller. */
typedef struct chart_series {
    const char *name;
    const double *x, *y;
    size_t n;
} chart_series;

/** Draws up to CHART_MAX_SERIES lines against a shared x axis labelled
 * xlabel; logy gives a base-10 logarithmic y axis. The legend shows each
 * series' name and last value. At least one point overall is required. */
int chart_lines(const char *path, const char *title, const char *xlabel, const chart_series *series,
                int nseries, bool logy, kf_err *err);

/** Draws a grouped bar chart: ngroups groups along x (labels groups[g]), each
 * with nseries bars (legend names series[s]) of height values[g * nseries + s]
 * (>= 0; non-finite values are drawn as missing). The value is printed above
 * each bar; ylabel names the unit (e.g. "tokens/s"). */
int chart_bars(const char *path, const char *title, const char *ylabel, const char *const *groups,
               int ngroups, const char *const *series, int nseries, const double *values,
               kf_err *err);

#endif
