/* bench/plot/png.h — a minimal PNG writer for plots (8-bit RGB, zlib-compressed).
 *
 * Used by `kf plot` (loss curves) and the benchmarks' charts; see
 * bench/plot/canvas.h for drawing. The file is written atomically.
 */
#ifndef KF_BENCH_PLOT_PNG_H
#define KF_BENCH_PLOT_PNG_H

#include <stdint.h>

#include "common/error.h"

/** Writes a w x h image, rows top to bottom, 3 bytes (R, G, B) per pixel. */
int png_write_rgb(const char *path, int w, int h, const uint8_t *rgb, kf_err *err);

#endif
