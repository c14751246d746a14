/* bench/bench_linear_packed.c — the decode-time linear layers streaming a
 * 124M model's weights, with and without a lone block's next-panel prefetch.
 *
 * Build and run (not part of make test):
 *   make bench BENCHES=linear, or
 *   make build/bench/bench_linear_packed, then
 *   OMP_NUM_THREADS=1 build/bench/bench_linear_packed [--rounds N] [--cpu-time] [--bf16]
 *                                                     [ROWS...]
 *   (default: 20 rounds, fp32, rows 1 2 4 8 12 16; KF_CPU_ISA picks the level)
 *
 * The 48 products of GPT-2 124M's blocks (12 x qkv 768 -> 2304, out 768 ->
 * 768, fc1 768 -> 3072, fc2 3072 -> 768), fp32 (or bf16 with --bf16, half
 * the bytes and twice the FLOPs a byte), packed once: 340 MB (170), far
 * beyond the caches, so each product streams its weights from memory as a
 * decoding step does. A round reads the roofline's probe stream (which also
 * evicts the caches), runs the 48 products at R rows with the lone-block
 * prefetch off, reads the probe again, and runs them with it on; rounds
 * alternate which goes first. Both runs in one process and in turns, so a
 * shared host's swings hit both alike. Prints each setting's median time
 * and mean read as a fraction of the probe's just before it, the median of
 * the rounds' time ratios off / on and in how many rounds off was faster
 * (medians: a host's bad minute makes outliers of a few rounds); it fails
 * (exit 1) if the two settings' outputs differ in any bit
 * (bench/roofline/decode_limits.h has the probe).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/roofline/decode_limits.h"
#include "common/clock.h"
#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"

static double (*now)(void) = clock_now_s; /* --cpu-time: clock_cpu_s */

enum { LAYERS = 48 };
static const int64_t IN[4] = {768, 768, 768, 3072}, OUT[4] = {2304, 768, 3072, 768};

/* seconds of the 48 products at `rows`, the lone-block prefetch `on` */
static double run(kf_backend *b, void *const *lin, const float *x, float *y, int64_t rows, int on) {
    kernels_cpu_set_lone_ahead(on);
    double t0 = now();
    for (int l = 0; l < LAYERS; l++)
        b->linear_packed_fwd(b, y + l * rows * 3072, NULL, NULL, x, NULL, lin[l], NULL, rows,
                             KF_ACT_NONE, 0.0f);
    return now() - t0;
}

int main(int argc, char **argv) {
    int rounds = 20, nrows = 0;
    int64_t rows[32];
    int bf16 = 0;
    const char *usage =
        "usage: bench_linear_packed [--rounds N] [--cpu-time] [--bf16] [ROWS (1-64)...]\n";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-time")) now = clock_cpu_s;
        else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else if (atoi(argv[i]) >= 1 && atoi(argv[i]) <= 64 && nrows < 32)
            rows[nrows++] = atoi(argv[i]);
        else {
            fprintf(stderr, "bench_linear_packed: bad argument '%s'\n%s", argv[i], usage);
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    if (!nrows) {
        static const int64_t dflt[] = {1, 2, 4, 8, 12, 16};
        nrows = 6;
        memcpy(rows, dflt, sizeof dflt);
    }
    int64_t maxr = 1;
    for (int i = 0; i < nrows; i++) maxr = rows[i] > maxr ? rows[i] : maxr;
    kf_backend *b = kernels_cpu_create();
    if (bf16) b->set_precision(b, KF_PREC_BF16); /* packs bf16 panels */
    void *lin[LAYERS];
    double bytes = 0;
    for (int l = 0; l < LAYERS; l++) {
        int64_t in = IN[l % 4], out = OUT[l % 4];
        float *w = kf_malloc((size_t)(in * out) * sizeof(float));
        for (int64_t i = 0; i < in * out; i++)
            w[i] = (float)((i * 2654435761u) % 2000) / 1000.0f - 1.0f;
        lin[l] = b->linear_pack(b, w, NULL, in, out);
        free(w); /* the packed copy is what the kernels read */
        bytes += (bf16 ? 2.0 : 4.0) * (double)(in * out);
    }
    float *x = kf_malloc((size_t)(maxr * 3072) * sizeof(float));
    for (int64_t i = 0; i < maxr * 3072; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    size_t ny = (size_t)(LAYERS * maxr * 3072);
    float *y[2] = {kf_calloc(ny, sizeof(float)), kf_calloc(ny, sizeof(float))};
    decode_read_probe *probe = decode_read_probe_create();
    printf("level %s, %d rounds, the 124M blocks' 48 products in %s (%.0f MB), %s clock; by "
           "default a lone block prefetches: %s\n",
           kernels_cpu_isa(), rounds, bf16 ? "bf16" : "fp32", bytes / 1e6,
           now == clock_now_s ? "wall" : "CPU", kernels_cpu_lone_ahead_policy());
    printf("rows   off: ms (read/probe)   on: ms (read/probe)   off/on time   off faster\n");
    double *t[2] = {kf_malloc((size_t)rounds * sizeof(double)),
                    kf_malloc((size_t)rounds * sizeof(double))};
    double *ratio = kf_malloc((size_t)rounds * sizeof(double));
    int differ = 0;
    for (int i = 0; i < nrows; i++) {
        double frac[2] = {0, 0};
        int wins = 0;
        for (int r = 0; r < rounds; r++) {
            for (int j = 0; j < 2; j++) {
                int on = (r + j) % 2; /* alternate which goes first */
                double bw = decode_read_probe_run(probe, 1, now);
                t[on][r] = run(b, lin, x, y[on], rows[i], on);
                frac[on] += bytes / t[on][r] / bw;
            }
            ratio[r] = t[0][r] / t[1][r];
            wins += t[0][r] < t[1][r];
        }
        differ |= memcmp(y[0], y[1], ny * sizeof(float)) != 0;
        printf("%4lld   %8.2f (%.2f)          %8.2f (%.2f)         %.3f        %d/%d\n",
               (long long)rows[i], clock_median(t[0], rounds) * 1e3, frac[0] / rounds,
               clock_median(t[1], rounds) * 1e3, frac[1] / rounds, clock_median(ratio, rounds),
               wins, rounds);
    }
    if (differ) fprintf(stderr, "bench_linear_packed: outputs differ between the settings\n");
    free(t[0]);
    free(t[1]);
    free(ratio);
    decode_read_probe_free(probe);
    for (int l = 0; l < LAYERS; l++) b->linear_pack_free(b, lin[l]);
    return differ;
}
