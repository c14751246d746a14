/* The decode-time output layer of the CPU backend (head_pack / head_fwd):
 * logits against a double-precision reference; ids equal to the first
 * maximum (cpu argmax) of the very logits head_fwd returns, for the exact
 * kernel and for the int8-screened argmax (cpu_head_screen.c) alike, on
 * random layers of awkward shapes and on adversarial ones (exact ties,
 * one-ulp near ties, huge biases, the mask token, non-finite rows and
 * weights); results bitwise independent of the rows in the call and of the
 * OpenMP thread count. */
#include <omp.h>

#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels_test_util.h"

#define MASK_VALUE -1000.0f

typedef struct layer {
    int64_t V, H, mask;
    float *W, *bias; /* bias NULL: none */
} layer;

static void ref_logits(double *out, const layer *l, const float *x, int64_t rows) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t v = 0; v < l->V; v++) {
            double s = l->bias ? l->bias[v] : 0.0;
            for (int64_t h = 0; h < l->H; h++) s += (double)x[r * l->H + h] * l->W[v * l->H + h];
            out[r * l->V + v] = v == l->mask ? MASK_VALUE : s;
        }
}

/* Packs l twice (screened where the CPU allows, and with the screen off) and
 * checks every promise on rows x. */
static void check_layer(kf_backend *be, const char *what, const layer *l, const float *x,
                        int64_t rows, int want_screen) {
    int64_t V = l->V;
    void *hd = be->head_pack(be, l->W, l->bias, V, l->H, l->mask, MASK_VALUE);
    setenv("KF_CPU_HEAD_SCREEN", "0", 1);
    void *hx = be->head_pack(be, l->W, l->bias, V, l->H, l->mask, MASK_VALUE);
    unsetenv("KF_CPU_HEAD_SCREEN");
    T_CHECK(!kernels_cpu_head_screened(hx), "%s: KF_CPU_HEAD_SCREEN=0 still screens", what);
    if (want_screen)
        T_CHECK(kernels_cpu_head_screened(hd), "%s: no int8 screen at level %s", what,
                kernels_cpu_isa());
    float *L = kf_malloc((size_t)(rows * V) * sizeof(float));
    float *L1 = kf_malloc((size_t)V * sizeof(float));
    int32_t *ia = kf_malloc((size_t)rows * sizeof(int32_t)),
            *ib = kf_malloc((size_t)rows * sizeof(int32_t));
    int32_t *ic = kf_malloc((size_t)rows * sizeof(int32_t)),
            *id = kf_malloc((size_t)rows * sizeof(int32_t));
    double *R = kf_malloc((size_t)(rows * V) * sizeof(double));

    be->head_fwd(be, L, ia, x, hx, rows); /* logits and ids together: the exact kernel */
    be->argmax(be, ib, L, rows, V);
    int same = 1;
    for (int64_t r = 0; r < rows; r++) same &= ia[r] == ib[r];
    T_CHECK(same, "%s: head_fwd ids differ from argmax of its own logits", what);
    be->head_fwd(be, NULL, ic, x, hd, rows); /* ids alone: screened when hd has the screen */
    be->head_fwd(be, NULL, id, x, hx, rows); /* ids alone, exact kernel */
    int sc = 1, ex = 1;
    for (int64_t r = 0; r < rows; r++) {
        sc &= ic[r] == ib[r];
        ex &= id[r] == ib[r];
        if (ic[r] != ib[r])
            fprintf(stderr, "  %s row %lld: screened %d, exact %d\n", what, (long long)r, ic[r],
                    ib[r]);
    }
    T_CHECK(sc, "%s: argmax-only head_fwd (%s) differs from the logits' argmax", what,
            kernels_cpu_head_screened(hd) ? "screened" : "exact");
    T_CHECK(ex, "%s: argmax-only exact head_fwd differs from the logits' argmax", what);

    /* finite inputs: logits against double precision */
    int finite = 1;
    for (int64_t i = 0; i < rows * l->H; i++) finite &= isfinite(x[i]);
    if (finite) {
        ref_logits(R, l, x, rows);
        TU_ERR(what, tu_relerr(L, R, rows * V, 1e-3), 1e-5);
    }
    /* batch invariance: each row alone gives the same bits */
    int inv = 1;
    for (int64_t r = 0; r < rows; r++) {
        int32_t one;
        be->head_fwd(be, L1, NULL, x + r * l->H, hd, 1);
        inv &= memcmp(L1, L + r * V, (size_t)V * sizeof(float)) == 0;
        be->head_fwd(be, NULL, &one, x + r * l->H, hd, 1);
        inv &= one == ib[r];
    }
    T_CHECK(inv, "%s: a row's logits or id change with the rows beside it", what);
    /* thread-count independence */
    int nt0 = omp_get_max_threads(), thr = 1;
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        float *Lt = kf_malloc((size_t)(rows * V) * sizeof(float));
        be->head_fwd(be, Lt, NULL, x, hx, rows);
        be->head_fwd(be, NULL, id, x, hd, rows);
        thr &= memcmp(Lt, L, (size_t)(rows * V) * sizeof(float)) == 0;
        for (int64_t r = 0; r < rows; r++) thr &= id[r] == ib[r];
        free(Lt);
    }
    omp_set_num_threads(nt0);
    T_CHECK(thr, "%s: results change with the thread count", what);
    be->head_free(be, hd);
    be->head_free(be, hx);
    free(L);
    free(L1);
    free(ia);
    free(ib);
    free(ic);
    free(id);
    free(R);
}

static layer make_layer(int64_t V, int64_t H, int64_t mask, int with_bias, double wscale) {
    layer l = {V, H, mask, tu_randf(V * H, wscale), with_bias ? tu_randf(V, 1.0) : NULL};
    return l;
}

static void free_layer(layer *l) {
    free(l->W);
    free(l->bias);
}

/* Logits and ids are the same bits at every SIMD level with FMA (each level
 * has its own kernels: AVX-512 4x32 blocks; AVX2 one-pass panels for 1-2
 * rows, chunked half panels for one block of 3-4, whole half panels for
 * more), for `rows` rows with H = 65 (two whole chunks of 32 h's and one h). */
static void check_levels(kf_backend *be, int64_t rows) {
    const char *levels[] = {"avx2", "avx512", "vnni"};
    char native[16];
    snprintf(native, sizeof native, "%s", kernels_cpu_isa());
    const int64_t V = 5003, H = 65;
    layer l = make_layer(V, H, 77, 1, 1.0);
    float *x = tu_randf(rows * H, 3.0);
    float *want = kf_malloc((size_t)(rows * V) * sizeof(float)),
          *got = kf_malloc((size_t)(rows * V) * sizeof(float));
    int32_t *wid = kf_malloc((size_t)rows * sizeof(int32_t)),
            *gid = kf_malloc((size_t)rows * sizeof(int32_t));
    int ref = -1; /* the first level this CPU has is the reference */
    for (int i = 0; i < 3; i++) {
        if (kernels_cpu_set_isa(levels[i])) continue;
        void *hd = be->head_pack(be, l.W, l.bias, V, H, l.mask, MASK_VALUE);
        be->head_fwd(be, ref < 0 ? want : got, ref < 0 ? wid : gid, x, hd, rows);
        if (ref < 0) {
            ref = i;
            be->head_free(be, hd);
            continue;
        }
        int64_t bad = -1;
        for (int64_t j = 0; j < rows * V && bad < 0; j++)
            if (memcmp(&got[j], &want[j], sizeof(float))) bad = j;
        T_CHECK(bad < 0, "%lld rows, level %s: logit %lld = %.9g, want %.9g (level %s)",
                (long long)rows, levels[i], (long long)bad, bad < 0 ? 0.0 : got[bad],
                bad < 0 ? 0.0 : want[bad], levels[ref]);
        for (int64_t r = 0; r < rows; r++)
            T_EQ_INT(gid[r], wid[r], "%lld rows, level %s: row %lld id %d, want %d (level %s)",
                     (long long)rows, levels[i], (long long)r, gid[r], wid[r], levels[ref]);
        be->head_fwd(be, NULL, gid, x, hd, rows); /* ids alone: the screen where the level has it */
        for (int64_t r = 0; r < rows; r++)
            T_EQ_INT(gid[r], wid[r], "%lld rows, level %s, ids alone: row %lld id %d, want %d",
                     (long long)rows, levels[i], (long long)r, gid[r], wid[r]);
        be->head_free(be, hd);
    }
    T_CHECK(ref >= 0, "this CPU has no SIMD level with FMA: cross-level check not run");
    kernels_cpu_set_isa(native);
    free(x), free(want), free(got), free(wid), free(gid);
    free_layer(&l);
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    /* the level in use (KF_CPU_ISA may lower it): AVX2 and above screen */
    int screen = strcmp(kernels_cpu_isa(), "base") != 0;
    printf("  int8 screen: %s\n", screen
                                      ? "screened (this level's screen) and exact paths checked"
                                      : "level base: no screen, the exact path is checked twice");
    for (int64_t rows = 1; rows <= 7; rows++) check_levels(be, rows);
    /* awkward shapes: V around the 32-entry panel, H around the 4-wide int8 groups */
    const int64_t shapes[][3] = {{1, 1, 5},      {31, 3, 4},     {32, 4, 5},
                                 {33, 7, 9},     {1000, 64, 17}, {5003, 65, 6},
                                 {2049, 16, 64}, {999, 97, 3},   {5003, 65, 4}};
    char what[96];
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int64_t V = shapes[i][0], H = shapes[i][1], rows = shapes[i][2];
        layer l = make_layer(V, H, V > 2 ? V / 2 : -1, i % 2 == 0, 1.0);
        float *x = tu_randf(rows * H, 3.0);
        snprintf(what, sizeof what, "V=%lld H=%lld rows=%lld", (long long)V, (long long)H,
                 (long long)rows);
        check_layer(be, what, &l, x, rows, screen);
        free(x);
        free_layer(&l);
    }
    /* a GPT-2-sized layer, as decoding uses it */
    {
        layer l = make_layer(50258, 64, 50257, 1, 0.1);
        float *x = tu_randf(16 * 64, 2.0);
        check_layer(be, "V=50258 H=64 rows=16 (GPT-2 head)", &l, x, 16, screen);
        free(x);
        free_layer(&l);
    }
    /* int8 rounding reverses two entries: entry 5's true logit (1.0041) beats
     * entry 40's (1.0040), but 0.0039 rounds to 0 and 0.0040 to 1 in steps of
     * 1/127, so the screen's estimates are 1.0002 and 1.0079. Only a bound
     * as wide as the rounding keeps entry 5 a candidate (a screen whose bound
     * is shrunk to 1% answers 40). */
    {
        layer l = make_layer(64, 2, -1, 1, 0.001);
        for (int64_t v = 0; v < 64; v++) l.bias[v] = -1.0f;
        l.W[5 * 2] = 1.0f, l.W[5 * 2 + 1] = 0.0039f, l.bias[5] = 0.0002f;
        l.W[40 * 2] = 1.0f, l.W[40 * 2 + 1] = 0.0040f, l.bias[40] = 0.0f;
        float x[2 * 4] = {1, 1, 1, 1, 1, 1, 1, 1};
        check_layer(be, "int8 rounding reverses the order", &l, x, 4, screen);
        int32_t id;
        void *hd = be->head_pack(be, l.W, l.bias, l.V, l.H, l.mask, MASK_VALUE);
        be->head_fwd(be, NULL, &id, x, hd, 1);
        T_EQ_INT(id, 5, "int8 rounding reverses the order: got id %d, want 5 (%s)", id,
                 kernels_cpu_head_screened(hd) ? "screened" : "exact");
        be->head_free(be, hd);
        free_layer(&l);
    }
    /* exact ties: entries 5, 300, 301, 2000 share the best row and bias, so the
     * first of them must win; a copy at 900 whose logit is one ulp larger
     * then must win */
    {
        layer l = make_layer(4096, 32, -1, 1, 0.05);
        float *x = tu_randf(8 * 32, 1.0);
        for (int64_t h = 0; h < 32; h++) {
            float best = 0.5f * (x[h] >= 0 ? 1.0f : -1.0f);
            l.W[5 * 32 + h] = l.W[300 * 32 + h] = l.W[301 * 32 + h] = l.W[2000 * 32 + h] = best;
        }
        l.bias[5] = l.bias[300] = l.bias[301] = l.bias[2000] = 0.25f;
        check_layer(be, "exact ties", &l, x, 8, screen);
        int32_t id;
        void *hd = be->head_pack(be, l.W, l.bias, l.V, l.H, l.mask, MASK_VALUE);
        be->head_fwd(be, NULL, &id, x, hd, 1);
        T_EQ_INT(id, 5, "exact ties: got id %d, want the first maximum 5", id);
        be->head_free(be, hd);
        /* raise entry 900's bias ulp by ulp until its logit first exceeds the
         * tied maximum: it is then the smallest float above it */
        memcpy(l.W + 900 * 32, l.W + 5 * 32, 32 * sizeof(float));
        l.bias[900] = l.bias[5];
        float *lg = kf_malloc((size_t)l.V * sizeof(float));
        for (int i = 0; i < 1000; i++) {
            l.bias[900] = nextafterf(l.bias[900], INFINITY);
            hd = be->head_pack(be, l.W, l.bias, l.V, l.H, l.mask, MASK_VALUE);
            be->head_fwd(be, lg, NULL, x, hd, 1);
            if (lg[900] > lg[5]) break;
            be->head_free(be, hd);
            hd = NULL;
        }
        T_CHECK(hd, "near tie: 1000 ulps of bias never raised the logit");
        if (!hd) hd = be->head_pack(be, l.W, l.bias, l.V, l.H, l.mask, MASK_VALUE);
        T_CHECK(lg[900] == nextafterf(lg[5], INFINITY),
                "near tie: logit %.9g is not one ulp above %.9g", lg[900], lg[5]);
        be->head_fwd(be, NULL, &id, x, hd, 1);
        T_EQ_INT(id, 900, "one-ulp near tie: got id %d, want 900", id);
        free(lg);
        check_layer(be, "one-ulp near tie", &l, x, 8, screen);
        be->head_free(be, hd);
        free(x);
        free_layer(&l);
    }
    /* biases that dwarf the products, and products that dwarf the biases */
    {
        layer l = make_layer(3000, 48, 7, 1, 1.0);
        for (int64_t v = 0; v < l.V; v++) l.bias[v] *= 1e6f;
        float *x = tu_randf(6 * 48, 1.0);
        check_layer(be, "huge biases", &l, x, 6, screen);
        for (int64_t v = 0; v < l.V; v++) l.bias[v] *= 1e-12f;
        for (int64_t i = 0; i < 6 * 48; i++) x[i] *= 1e4f;
        check_layer(be, "huge products", &l, x, 6, screen);
        free(x);
        free_layer(&l);
    }
    /* many near-equal logits (a flat row): the screen keeps many candidates */
    {
        layer l = make_layer(6000, 32, -1, 1, 1e-4);
        for (int64_t v = 0; v < l.V; v++) l.bias[v] = 1.0f;
        float *x = tu_randf(5 * 32, 1.0);
        check_layer(be, "flat rows (thousands of candidates)", &l, x, 5, screen);
        free(x);
        free_layer(&l);
    }
    /* non-finite rows go to the exact kernel; a zero row gives the bias */
    {
        layer l = make_layer(700, 24, 3, 1, 1.0);
        float *x = tu_randf(5 * 24, 1.0);
        x[1 * 24 + 4] = NAN;
        x[2 * 24 + 9] = INFINITY;
        memset(x + 3 * 24, 0, 24 * sizeof(float));
        check_layer(be, "NaN, inf and zero rows", &l, x, 5, screen);
        l.W[17 * 24 + 2] = INFINITY; /* non-finite weights: no screen, still exact */
        void *hd = be->head_pack(be, l.W, l.bias, l.V, l.H, l.mask, MASK_VALUE);
        T_CHECK(!kernels_cpu_head_screened(hd), "an infinite weight was screened");
        be->head_free(be, hd);
        check_layer(be, "infinite weight", &l, x, 5, 0);
        free(x);
        free_layer(&l);
    }
    be->destroy(be);
    return T_DONE();
}
