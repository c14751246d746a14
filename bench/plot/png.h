/* bench/plot/png.h — a minimal PNG writer for plots (8-bit RGB, zlib-compressed).
 *
 * Used by `kf plot` (loss curves) and the benchmarks' charts; see
 * bench/plot/canvas.h for drawing. The file is written atomically.
 *
 * Kept with the raster canvas rather than libgd (or cairo): not for speed
 * (bench/bench_libs.c, one run on a loaded 2-core Xeon, median of 7
 * alternating rounds: a 1600 x 1000 chart raster written in 1.04-1.24x the
 * time by libgd's gdImagePngEx at the same zlib level, files within 6% of
 * each other) but for what it would bring: libgd-dev pulled in 17 -dev
 * packages (42 MB: AVIF, HEIF, TIFF, WebP, x265 ...) on Debian 12, for
 * charts that only `kf plot` and the benchmarks draw; this writer is 57
 * lines over zlib, which the build links anyway.
 */
#ifndef KF_BENCH_PLOT_PNG_H
#define KF_BENCH_PLOT_PNG_H

#include <stdint.h>

#include "common/error.h"

/** Writes a w x h image, rows top to bottom, 3 bytes (R, G, B) per pixel. */
int png_write_rgb(const char *path, int w, int h, const uint8_t *rgb, kf_err *err);

#endif
