/* bench/plot/canvas.h — a tiny RGB raster for charts: lines, rectangles and text
 * in a built-in 5x7 bitmap font (ASCII 32..126, drawn in a 6x9 cell, scaled
 * by an integer factor). Enough for loss curves and bar charts written with
 * bench/plot/png.h; no anti-aliasing, no dependencies.
 */
#ifndef KF_BENCH_PLOT_CANVAS_H
#define KF_BENCH_PLOT_CANVAS_H

#include <stdint.h>

#include "common/error.h"

/** An image; pixel (x, y) is rgb[3 * (y * w + x)], y = 0 at the top. */
typedef struct canvas {
    int w, h;
    uint8_t *rgb;
} canvas;

/** An RGB colour, 0xRRGGBB. */
typedef uint32_t canvas_color;

/** Allocates a w x h canvas filled with bg. */
canvas *canvas_new(int w, int h, canvas_color bg);
void canvas_free(canvas *c);

/** Sets one pixel; coordinates outside the canvas are ignored (clipping). */
void canvas_pixel(canvas *c, int x, int y, canvas_color col);

/** A line from (x0, y0) to (x1, y1), both ends included, thickness 1 or more. */
void canvas_line(canvas *c, int x0, int y0, int x1, int y1, int thick, canvas_color col);

/** A filled rectangle [x, x + w) x [y, y + h). */
void canvas_fill_rect(canvas *c, int x, int y, int w, int h, canvas_color col);

/** Draws text with its top-left corner at (x, y); characters outside 32..126
 * are drawn as '?'. scale >= 1 multiplies the 6x9 cell. */
void canvas_text(canvas *c, int x, int y, const char *text, int scale, canvas_color col);

/** Width in pixels of text drawn at scale (6 * scale per character). */
int canvas_text_width(const char *text, int scale);

/** Writes the canvas as a PNG (bench/plot/png.h). */
int canvas_write_png(const canvas *c, const char *path, kf_err *err);

#endif
