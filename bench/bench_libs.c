/* bench/bench_libs.c — kforcing's own JSON parser, SHA-256 and PNG writer
 * against the maintained libraries that could replace them (jansson,
 * OpenSSL's libcrypto, libgd), side by side in one run.
 *
 * Build and run (not part of make test, nor of make bench: it needs
 * libjansson-dev, libssl-dev and libgd-dev, which nothing else uses and
 * scripts/setup.sh does not install):
 *   make build/bench/bench_libs && build/bench/bench_libs [ROUNDS]
 * Each round times every contender once, in alternating order, on the same
 * inputs; the report gives each one's median over ROUNDS (default 7) and
 * the ratio, so a loaded machine slows both sides alike.
 *
 *  - JSON: 100,000 lines of a training log (log.jsonl's keys), each parsed
 *    and its "loss" read: common/json.h vs jansson's json_loadb.
 *  - SHA-256: one 64 MiB buffer, and 200,000 messages of 256 bytes (a shard
 *    sample's size): common/sha256.h (SHA-NI when the CPU has it) vs
 *    libcrypto's EVP digest (one context reused for the small messages).
 *  - PNG: a 1600 x 1000 RGB chart raster written to a file:
 *    bench/plot/png.h vs libgd's gdImagePngEx at zlib level 6; the file sizes
 *    are printed too.
 * The results are written beside each component's code.
 */
#include <gd.h>
#include <openssl/evp.h>
/* jansson's type enumerators share common/json.h's names: renamed here */
#define JSON_OBJECT JANSSON_OBJECT
#define JSON_ARRAY JANSSON_ARRAY
#define JSON_STRING JANSSON_STRING
#define JSON_INTEGER JANSSON_INTEGER
#define JSON_REAL JANSSON_REAL
#define JSON_TRUE JANSSON_TRUE
#define JSON_FALSE JANSSON_FALSE
#define JSON_NULL JANSSON_NULL
#define json_type jansson_type
#include <jansson.h>
#undef json_type
#undef JSON_OBJECT
#undef JSON_ARRAY
#undef JSON_STRING
#undef JSON_INTEGER
#undef JSON_REAL
#undef JSON_TRUE
#undef JSON_FALSE
#undef JSON_NULL
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/plot/png.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/json.h"
#include "common/sha256.h"

enum { LINES = 100000, BIG = 64 << 20, SMALL = 256, NSMALL = 200000, W = 1600, H = 1000 };

typedef struct case_ {
    const char *name;
    double (*run)(void *);
} case_;
static double g_t[8][2][64]; /* [case][side][round] */

/* ---- inputs ---- */

static char *g_log;
static size_t *g_off, g_log_len;
static uint8_t *g_big, *g_rgb;
static double g_sink;

static void make_inputs(void) {
    g_log = kf_malloc((size_t)LINES * 400);
    g_off = kf_malloc((size_t)(LINES + 1) * sizeof *g_off);
    size_t at = 0;
    for (int i = 0; i < LINES; i++) {
        g_off[i] = at;
        at += (size_t)sprintf(
            g_log + at,
            "{\"step\": %d, \"loss\": %.17g, \"lr\": 0.0001, \"grad_norm\": %.9g, "
            "\"loss_scale\": 65536, \"skipped\": 0, \"skipped_total\": 0, \"phase\": \"fp16\", "
            "\"tokens\": 524288, \"tokens_per_s\": %.9g, \"ms_step\": %.6g, \"ms_grad_wait\": "
            "0.5, \"time\": %.6g}\n",
            i + 1, 3.0 + 1.0 / (i + 1), 0.5 + i * 1e-6, 1.5e5 + i, 350.0 + i % 7, i * 0.35);
    }
    g_off[LINES] = at;
    g_log_len = at;
    g_big = kf_malloc(BIG);
    for (size_t i = 0; i < BIG; i++) g_big[i] = (uint8_t)(i * 2654435761u >> 24);
    /* a chart-like raster: white, a grid, two curves */
    g_rgb = kf_malloc((size_t)W * H * 3);
    memset(g_rgb, 255, (size_t)W * H * 3);
    for (int y = 0; y < H; y += 100)
        for (int x = 0; x < W; x++) memset(g_rgb + ((size_t)y * W + x) * 3, 220, 3);
    for (int x = 0; x < W; x++)
        for (int c = 0; c < 2; c++) {
            int y = (int)(H / 2 + (H / 3) * (c ? 1.0 : 0.6) / (1 + x * 0.01) * (c ? -1 : 1));
            for (int d = -1; d <= 1; d++)
                if (y + d >= 0 && y + d < H) {
                    uint8_t *p = g_rgb + ((size_t)(y + d) * W + x) * 3;
                    p[0] = c ? 31 : 214, p[1] = c ? 119 : 39, p[2] = c ? 180 : 40;
                }
        }
}

/* ---- JSON ---- */

static double json_ours(void *ctx) {
    double t0 = clock_now_s(), s = 0;
    kf_err err;
    for (int i = 0; i < LINES; i++) {
        json_doc *d = json_parse(g_log + g_off[i], g_off[i + 1] - g_off[i], "log", &err);
        KF_CHECK(d, "json_parse: %s", err.msg);
        s += json_get(json_root(d), "loss")->num;
        json_free(d);
    }
    g_sink += s;
    return clock_now_s() - t0;
}

static double json_jansson(void *ctx) {
    double t0 = clock_now_s(), s = 0;
    json_error_t e;
    for (int i = 0; i < LINES; i++) {
        json_t *d = json_loadb(g_log + g_off[i], g_off[i + 1] - g_off[i], 0, &e);
        KF_CHECK(d, "json_loadb: %s", e.text);
        s += json_real_value(json_object_get(d, "loss"));
        json_decref(d);
    }
    g_sink += s;
    return clock_now_s() - t0;
}

/* ---- SHA-256 ---- */

static double sha_ours_big(void *ctx) {
    double t0 = clock_now_s();
    uint8_t d[32];
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, g_big, BIG);
    sha256_final(&c, d);
    g_sink += d[0];
    return clock_now_s() - t0;
}

static double sha_ssl_big(void *ctx) {
    double t0 = clock_now_s();
    uint8_t d[32];
    unsigned n;
    KF_CHECK(EVP_Digest(g_big, BIG, d, &n, EVP_sha256(), NULL), "EVP_Digest");
    g_sink += d[0];
    return clock_now_s() - t0;
}

static double sha_ours_small(void *ctx) {
    double t0 = clock_now_s();
    uint8_t d[32];
    for (int i = 0; i < NSMALL; i++) {
        sha256_ctx c;
        sha256_init(&c);
        sha256_update(&c, g_big + (size_t)i * SMALL, SMALL);
        sha256_final(&c, d);
        g_sink += d[0];
    }
    return clock_now_s() - t0;
}

/* one context reused for every message (EVP_Digest would make one per call) */
static double sha_ssl_small(void *ctx) {
    double t0 = clock_now_s();
    uint8_t d[32];
    unsigned n;
    const EVP_MD *md = EVP_sha256();
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    for (int i = 0; i < NSMALL; i++) {
        KF_CHECK(EVP_DigestInit_ex(c, md, NULL) &&
                     EVP_DigestUpdate(c, g_big + (size_t)i * SMALL, SMALL) &&
                     EVP_DigestFinal_ex(c, d, &n),
                 "EVP_Digest*");
        g_sink += d[0];
    }
    EVP_MD_CTX_free(c);
    return clock_now_s() - t0;
}

/* ---- PNG ---- */

static const char *g_png_ours = "/tmp/kf_bench_libs_ours.png",
                  *g_png_gd = "/tmp/kf_bench_libs_gd.png";

static double png_ours(void *ctx) {
    double t0 = clock_now_s();
    kf_err err;
    KF_CHECK(png_write_rgb(g_png_ours, W, H, g_rgb, &err) == 0, "png: %s", err.msg);
    return clock_now_s() - t0;
}

static double png_gd(void *ctx) {
    double t0 = clock_now_s();
    gdImagePtr im = gdImageCreateTrueColor(W, H);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const uint8_t *p = g_rgb + ((size_t)y * W + x) * 3;
            gdImageSetPixel(im, x, y, gdTrueColor(p[0], p[1], p[2]));
        }
    FILE *f = fopen(g_png_gd, "wb");
    KF_CHECK(f, "%s", g_png_gd);
    gdImagePngEx(im, f, 6);
    fclose(f);
    gdImageDestroy(im);
    return clock_now_s() - t0;
}

static long file_size(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: bench_libs [ROUNDS 1..64]\n");
        return 2;
    }
    make_inputs();
    case_ cases[][2] = {
        {{"json: kforcing", json_ours}, {"json: jansson", json_jansson}},
        {{"sha256 64 MiB: kforcing", sha_ours_big}, {"sha256 64 MiB: libcrypto", sha_ssl_big}},
        {{"sha256 200k x 256 B: kforcing", sha_ours_small},
         {"sha256 200k x 256 B: libcrypto", sha_ssl_small}},
        {{"png 1600x1000: kforcing", png_ours}, {"png 1600x1000: libgd", png_gd}},
    };
    int n = (int)(sizeof cases / sizeof *cases);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < 2; j++) {
                int k = (r + j) % 2; /* alternate which goes first */
                g_t[i][k][r] = cases[i][k].run(NULL);
            }
    printf("median of %d rounds, alternating; ratio = library / kforcing (> 1: kforcing "
           "faster)\n",
           rounds);
    for (int i = 0; i < n; i++) {
        double a = clock_median(g_t[i][0], rounds), b = clock_median(g_t[i][1], rounds);
        printf("  %-32s %9.2f ms   %-32s %9.2f ms   ratio %.2f\n", cases[i][0].name, a * 1e3,
               cases[i][1].name, b * 1e3, b / a);
    }
    printf("png sizes: kforcing %ld bytes, libgd %ld bytes\n", file_size(g_png_ours),
           file_size(g_png_gd));
    remove(g_png_ours), remove(g_png_gd);
    return g_sink == 12345.678 ? 1 : 0; /* keeps the results live */
}
