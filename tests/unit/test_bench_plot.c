/* kf plot: writes a valid PNG (signature, chunk CRCs, IHDR, inflated pixel
 * data) in which a decreasing loss is drawn high on the left and low on the
 * right; usage and input errors give exit codes 2 and 1. chart_bars: bar
 * heights proportional to the values. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "bench/plot/chart.h"
#include "common/fsutil.h"
#include "tests/test.h"

int plot_main(int argc, char **argv);

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

/* Decodes an 8-bit RGB, filter-0 PNG as written by bench/plot/png.c; NULL if invalid. */
static unsigned char *decode(const char *path, int *w, int *h) {
    char *buf;
    size_t len;
    kf_err err;
    if (fs_read_file(path, &buf, &len, &err)) return NULL;
    const unsigned char *p = (const unsigned char *)buf;
    unsigned char *z = NULL, *pix = NULL;
    size_t zn = 0, at = 8;
    int ok = len > 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8), ended = 0;
    while (ok && !ended && at + 12 <= len) {
        uint32_t n = be32(p + at);
        if (at + 12 + n > len) {
            ok = 0;
            break;
        }
        ok = (uint32_t)crc32(0, p + at + 4, n + 4) == be32(p + at + 8 + n);
        if (!memcmp(p + at + 4, "IHDR", 4)) {
            *w = (int)be32(p + at + 8);
            *h = (int)be32(p + at + 12);
            ok &= p[at + 16] == 8 && p[at + 17] == 2;
        } else if (!memcmp(p + at + 4, "IDAT", 4)) {
            z = realloc(z, zn + n);
            memcpy(z + zn, p + at + 8, n);
            zn += n;
        } else if (!memcmp(p + at + 4, "IEND", 4)) {
            ended = 1;
        }
        at += 12 + n;
    }
    if (ok && ended && at == len) {
        uLongf rn = (uLongf)(*w * 3 + 1) * (uLongf)*h;
        unsigned char *raw = malloc(rn);
        if (uncompress(raw, &rn, z, zn) == Z_OK && rn == (uLongf)(*w * 3 + 1) * (uLongf)*h) {
            pix = malloc((size_t)*w * 3 * (size_t)*h);
            for (int y = 0; y < *h; y++) {
                ok &= raw[(size_t)y * (*w * 3 + 1)] == 0;
                memcpy(pix + (size_t)y * *w * 3, raw + (size_t)y * (*w * 3 + 1) + 1,
                       (size_t)*w * 3);
            }
            if (!ok) {
                free(pix);
                pix = NULL;
            }
        }
        free(raw);
    }
    free(z);
    free(buf);
    return pix;
}

/* Number of pixels of colour rgb in column x inside the plot area (rows 40..483). */
static int column_count(const unsigned char *pix, int w, int h, int x, uint32_t rgb) {
    int n = 0;
    for (int y = 40; y < 484 && y < h; y++) {
        const unsigned char *q = pix + 3 * ((size_t)y * w + x);
        n += q[0] == (rgb >> 16 & 255) && q[1] == (rgb >> 8 & 255) && q[2] == (rgb & 255);
    }
    return n;
}

/* Mean row of the pixels of colour rgb in columns [x0, x1), or -1. */
static double mean_row(const unsigned char *pix, int w, int h, int x0, int x1, uint32_t rgb) {
    double sum = 0;
    int n = 0;
    for (int y = 0; y < h; y++)
        for (int x = x0; x < x1; x++) {
            const unsigned char *q = pix + 3 * ((size_t)y * w + x);
            if (q[0] == (rgb >> 16 & 255) && q[1] == (rgb >> 8 & 255) && q[2] == (rgb & 255)) {
                sum += y;
                n++;
            }
        }
    return n ? sum / n : -1;
}

static int run(int argc, char **argv) { return plot_main(argc, argv); }

int main(void) {
    char dir[] = "/tmp/kf_test_plot_XXXXXX";
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char log[600], png[600], text[64 * 200 + 64];
    snprintf(log, sizeof log, "%s/log.jsonl", dir);
    snprintf(png, sizeof png, "%s/log.png", dir);
    size_t n = 0;
    for (int s = 0; s < 200; s++)
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"step\":%d,\"loss\":%g,\"lr\":1e-4}\n",
                              s * 10, 8.0 - s * 0.03);
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "{\"step\":2000,\"loss\":nu"); /* partial line: ignored */
    kf_err err;
    fs_write_atomic(log, text, n, &err);

    char *a1[] = {"plot", log};
    T_EQ_INT(run(2, a1), 0, "plot failed");
    int w = 0, h = 0;
    unsigned char *pix = decode(png, &w, &h);
    T_CHECK(pix, "default output %s is not a valid %dx%d PNG", png, w, h);
    T_EQ_INT(w, 900, "default output %s is not a valid %dx%d PNG", png, w, h);
    T_EQ_INT(h, 540, "default output %s is not a valid %dx%d PNG", png, w, h);
    if (pix) {
        double left = mean_row(pix, w, h, 90, 200, 0x1f77b4),
               right = mean_row(pix, w, h, 700, 860, 0x1f77b4);
        T_CHECK(left > 0, "decreasing loss not drawn falling: rows %.0f -> %.0f", left, right);
        T_CHECK(right > 0, "decreasing loss not drawn falling: rows %.0f -> %.0f", left, right);
        T_CHECK(left < right - 150, "decreasing loss not drawn falling: rows %.0f -> %.0f", left,
                right);
        long dark = 0; /* axis labels and title exist */
        for (size_t i = 0; i < (size_t)w * h; i++)
            dark += pix[3 * i] < 80 && pix[3 * i + 1] < 80 && pix[3 * i + 2] < 80;
        T_CHECK(dark > 500, "no text or axes drawn (%ld dark pixels)", dark);
        free(pix);
    }

    /* A second series, explicit output, log scale. */
    snprintf(png, sizeof png, "%s/two.png", dir);
    char *a2[] = {"plot", log, "-o", png, "--key", "loss", "--key", "lr", "--logy", "--title", "t"};
    T_EQ_INT(run(11, a2), 0, "two series failed");
    pix = decode(png, &w, &h);
    T_CHECK(pix, "second series colour missing");
    if (pix) {
        T_CHECK(mean_row(pix, w, h, 90, 860, 0xd62728) > 0, "second series colour missing");
    }
    free(pix);

    /* A stage's log is titled "RUN: STAGE", not by its file name (every
     * stage's is log.jsonl): the default draws the same pixels as that title. */
    char slog[700], pa[700], pb[700], pc[700], sdir[600];
    snprintf(sdir, sizeof sdir, "%s/run1/stages/ar", dir);
    T_CHECK(fs_mkdir_p(sdir, &err) == 0, "mkdir %s: %s", sdir, err.msg);
    snprintf(slog, sizeof slog, "%s/log.jsonl", sdir);
    fs_write_atomic(slog, text, n, &err);
    snprintf(pa, sizeof pa, "%s/title_default.png", dir);
    snprintf(pb, sizeof pb, "%s/title_stage.png", dir);
    snprintf(pc, sizeof pc, "%s/title_file.png", dir);
    char *t1[] = {"plot", slog, "-o", pa};
    char *t2[] = {"plot", slog, "-o", pb, "--title", "run1: ar"};
    char *t3[] = {"plot", slog, "-o", pc, "--title", "log.jsonl"};
    T_CHECK(run(4, t1) == 0 && run(6, t2) == 0 && run(6, t3) == 0, "stage log plots failed");
    char *ta, *tb, *tc;
    size_t la, lb, lc;
    if (fs_read_file(pa, &ta, &la, &err) == 0 && fs_read_file(pb, &tb, &lb, &err) == 0 &&
        fs_read_file(pc, &tc, &lc, &err) == 0) {
        T_CHECK(la == lb && !memcmp(ta, tb, la), "stage log's default title is not 'run1: ar'");
        T_CHECK(la != lc || memcmp(ta, tc, la), "stage log titled by its file name");
        free(ta), free(tb), free(tc);
    } else {
        T_CHECK(0, "stage log plots: %s", err.msg);
    }

    /* Errors. */
    char *a3[] = {"plot", log, "--key", "nope", "-o", png};
    T_EQ_INT(run(6, a3), 1, "missing key is not an error");
    char *a4[] = {"plot"};
    T_EQ_INT(run(1, a4), 2, "no argument is not a usage error");
    char *a5[] = {"plot", log, "--bogus"};
    T_EQ_INT(run(3, a5), 2, "unknown option is not a usage error");
    char *a6[] = {"plot", "--help"};
    T_EQ_INT(run(2, a6), 0, "--help fails");
    fs_write_atomic(log, "{\"step\":1,\"loss\":2}\n{bad\n", 25, &err);
    T_EQ_INT(run(2, a1), 1, "malformed line accepted");
    char *a7[] = {"plot", "/nonexistent/log.jsonl"};
    T_EQ_INT(run(2, a7), 1, "missing file accepted");
    /* Bars: 2 groups x 2 series; the tallest bar spans its value's share of the axis. */
    snprintf(png, sizeof png, "%s/bars.png", dir);
    const char *groups[] = {"batch 4", "batch 16"}, *names[] = {"AR", "k=4"};
    double vals[] = {100, 300, 200, 400};
    T_EQ_INT(chart_bars(png, "decode", "tokens/s", groups, 2, names, 2, vals, &err), 0, "bars: %s",
             err.msg);
    pix = decode(png, &w, &h);
    if (pix) {
        int hmax[2][2] = {{0}};
        for (int x = 80; x < 876; x++)
            for (int s = 0; s < 2; s++) {
                int c = column_count(pix, w, h, x, s ? 0xd62728 : 0x1f77b4);
                int g = x < 80 + 398;
                if (c > hmax[!g][s]) hmax[!g][s] = c;
            }
        /* Heights in pixels are value / (1.12 * 400) * 444 (the plot height), +-3 for rounding. */
        T_CHECK(abs(hmax[0][0] - 99) <= 3, "bar heights %d %d %d %d, want 99 297 198 396",
                hmax[0][0], hmax[0][1], hmax[1][0], hmax[1][1]);
        T_CHECK(abs(hmax[0][1] - 297) <= 3, "bar heights %d %d %d %d, want 99 297 198 396",
                hmax[0][0], hmax[0][1], hmax[1][0], hmax[1][1]);
        T_CHECK(abs(hmax[1][0] - 198) <= 3, "bar heights %d %d %d %d, want 99 297 198 396",
                hmax[0][0], hmax[0][1], hmax[1][0], hmax[1][1]);
        T_CHECK(abs(hmax[1][1] - 396) <= 3, "bar heights %d %d %d %d, want 99 297 198 396",
                hmax[0][0], hmax[0][1], hmax[1][0], hmax[1][1]);
        free(pix);
    }
    T_CHECK(pix != NULL, "bar chart is not a valid PNG");
    fs_rm_rf(dir, &err);
    return T_DONE();
}
