/* bench/plot/png.c — PNG (RFC 2083) writer: IHDR, one zlib IDAT, IEND. */
#include "bench/plot/png.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/fsutil.h"

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Appends one chunk (length, type, data, CRC over type + data) at *at. */
static void chunk(uint8_t *out, size_t *at, const char *type, const uint8_t *data, size_t n) {
    be32(out + *at, (uint32_t)n);
    memcpy(out + *at + 4, type, 4);
    if (n) memcpy(out + *at + 8, data, n);
    uLong crc = crc32(0, out + *at + 4, (uInt)(n + 4));
    be32(out + *at + 8 + n, (uint32_t)crc);
    *at += 12 + n;
}

int png_write_rgb(const char *path, int w, int h, const uint8_t *rgb, kf_err *err) {
    KF_CHECK(w > 0 && h > 0 && w < (1 << 15) && h < (1 << 15), "png: bad size %dx%d", w, h);
    /* Scanlines, each prefixed with filter type 0 (none): plots compress well anyway. */
    size_t row = (size_t)w * 3, raw_n = (row + 1) * (size_t)h;
    uint8_t *raw = kf_malloc(raw_n);
    for (int y = 0; y < h; y++) {
        raw[(row + 1) * (size_t)y] = 0;
        memcpy(raw + (row + 1) * (size_t)y + 1, rgb + row * (size_t)y, row);
    }
    uLongf zn = compressBound((uLong)raw_n);
    uint8_t *z = kf_malloc(zn);
    KF_CHECK(compress2(z, &zn, raw, (uLong)raw_n, 9) == Z_OK, "png: zlib compress failed");
    free(raw);

    uint8_t *out = kf_malloc(8 + 25 + 12 + zn + 12);
    size_t at = 8;
    memcpy(out, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13];
    be32(ihdr, (uint32_t)w);
    be32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;                        /* bits per channel */
    ihdr[9] = 2;                        /* colour type: RGB */
    ihdr[10] = ihdr[11] = ihdr[12] = 0; /* deflate, adaptive filtering, no interlace */
    chunk(out, &at, "IHDR", ihdr, 13);
    chunk(out, &at, "IDAT", z, zn);
    chunk(out, &at, "IEND", NULL, 0);
    free(z);
    int rc = fs_write_atomic(path, out, at, err);
    free(out);
    return rc;
}
