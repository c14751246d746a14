/* Every CPU backward op (except attention, see test_kernels_cpu_attn.c) against
 * central finite differences of a double-precision reference forward, whose
 * agreement with the backend's forward is checked first. Each check prints its
 * maximum relative error (scaled by the tensor's largest value) and asserts a
 * bound. Accumulating outputs start from random values so "+=" is tested too. */
#include "tests/unit/kernels_test_util.h"

#define FD_EPS 1e-5

/* A scalar function of one double tensor: the reference forward dotted with
 * fixed random output weights. */
typedef double (*loss_fn)(const double *x, void *ctx);

static void fd_grad(double *g, double *x, int64_t n, loss_fn f, void *ctx) {
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + FD_EPS;
        double lp = f(x, ctx);
        x[i] = x0 - FD_EPS;
        double lm = f(x, ctx);
        x[i] = x0;
        g[i] = (lp - lm) / (2 * FD_EPS);
    }
}

/* Relative error of (after - before) against want: checks an accumulating output. */
static double delta_err(const float *after, const float *before, const double *want, int64_t n) {
    double *d = kf_malloc((size_t)n * sizeof(double));
    float *df = kf_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) df[i] = (float)((double)after[i] - (double)before[i]);
    for (int64_t i = 0; i < n; i++) d[i] = want[i];
    double e = tu_relerr(df, d, n, 1e-3);
    free(d);
    free(df);
    return e;
}

/* ---- layernorm ---- */
typedef struct {
    int64_t rows, cols;
    double *x, *w, *b, *gy;
    int which;
    int has_bias;
} ln_ctx;

static void ln_ref(double *y, const double *x, const double *w, const double *b, int64_t rows,
                   int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        double mu = 0, var = 0;
        for (int64_t c = 0; c < cols; c++) mu += x[r * cols + c];
        mu /= cols;
        for (int64_t c = 0; c < cols; c++) var += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
        double rs = 1 / sqrt(var / cols + 1e-5);
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = (x[r * cols + c] - mu) * rs * w[c] + (b ? b[c] : 0);
    }
}

static double ln_loss(const double *p, void *vctx) {
    ln_ctx *c = vctx;
    const double *x = c->which == 0 ? p : c->x, *w = c->which == 1 ? p : c->w,
                 *b = c->which == 2 ? p : c->b;
    double *y = kf_malloc((size_t)(c->rows * c->cols) * sizeof(double)), l = 0;
    ln_ref(y, x, w, c->has_bias ? b : NULL, c->rows, c->cols);
    for (int64_t i = 0; i < c->rows * c->cols; i++) l += y[i] * c->gy[i];
    free(y);
    return l;
}

static void check_layernorm(kf_backend *be, int has_bias) {
    const int64_t R = 70, C = 12; /* R > the 64-row chunk: partials are summed */
    int64_t n = R * C;
    float *x = tu_randf(n, 2.0), *w = tu_randf(C, 1.0), *bias = tu_randf(C, 1.0),
          *dy = tu_randf(n, 1.0);
    float *y = kf_malloc((size_t)n * 4), *mean = kf_malloc(R * 4), *rstd = kf_malloc(R * 4);
    be->layernorm_fwd(be, y, NULL, mean, rstd, x, w, has_bias ? bias : NULL, R, C, 1e-5f);
    ln_ctx c = {R, C, tu_tod(x, n), tu_tod(w, C), tu_tod(bias, C), tu_tod(dy, n), 0, has_bias};
    double *yr = kf_malloc((size_t)n * sizeof(double));
    ln_ref(yr, c.x, c.w, has_bias ? c.b : NULL, R, C);
    TU_ERR(has_bias ? "layernorm_fwd (bias)" : "layernorm_fwd (no bias)", tu_relerr(y, yr, n, 1e-3),
           1e-5);

    float *dx = tu_randf(n, 1.0), *dw = tu_randf(C, 1.0), *db = tu_randf(C, 1.0);
    float *dx0 = kf_malloc((size_t)n * 4), *dw0 = kf_malloc(C * 4), *db0 = kf_malloc(C * 4);
    memcpy(dx0, dx, (size_t)n * 4);
    memcpy(dw0, dw, C * 4);
    memcpy(db0, db, C * 4);
    be->layernorm_bwd(be, dx, dw, has_bias ? db : NULL, dy, x, w, mean, rstd, R, C, NULL);
    double *g = kf_malloc((size_t)n * sizeof(double));
    c.which = 0;
    fd_grad(g, c.x, n, ln_loss, &c);
    TU_ERR(has_bias ? "layernorm_bwd dx (bias)" : "layernorm_bwd dx (no bias)",
           delta_err(dx, dx0, g, n), 1e-4);
    c.which = 1;
    fd_grad(g, c.w, C, ln_loss, &c);
    TU_ERR(has_bias ? "layernorm_bwd dw (bias)" : "layernorm_bwd dw (no bias)",
           delta_err(dw, dw0, g, C), 1e-4);
    if (has_bias) {
        c.which = 2;
        fd_grad(g, c.b, C, ln_loss, &c);
        TU_ERR("layernorm_bwd dbias", delta_err(db, db0, g, C), 1e-4);
    } else {
        T_CHECK(memcmp(db, db0, C * 4) == 0, "layernorm_bwd touched dbias although it was NULL");
    }
    free(x);
    free(w);
    free(bias);
    free(dy);
    free(y);
    free(mean);
    free(rstd);
    free(c.x);
    free(c.w);
    free(c.b);
    free(c.gy);
    free(yr);
    free(dx);
    free(dw);
    free(db);
    free(dx0);
    free(dw0);
    free(db0);
    free(g);
}

/* ---- bias ---- */
typedef struct {
    int64_t rows, cols;
    const double *y, *gy;
} bias_ctx;

static double bias_loss(const double *bias, void *vctx) {
    bias_ctx *c = vctx;
    double l = 0;
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t k = 0; k < c->cols; k++)
            l += (c->y[r * c->cols + k] + bias[k]) * c->gy[r * c->cols + k];
    return l;
}

static void check_bias(kf_backend *be) {
    const int64_t R = 150, C = 7; /* several 64-row chunks */
    float *y = tu_randf(R * C, 1.0), *dy = tu_randf(R * C, 1.0), *bias = tu_randf(C, 1.0);
    float *db = tu_randf(C, 1.0), *db0 = kf_malloc(C * 4), *yb = kf_malloc(R * C * 4);
    memcpy(db0, db, C * 4);
    memcpy(yb, y, R * C * 4);
    be->add_bias(be, yb, bias, R, C);
    int ok = 1;
    for (int64_t i = 0; i < R * C; i++) ok &= yb[i] == y[i] + bias[i % C];
    T_CHECK(ok, "add_bias");
    be->bias_grad(be, db, dy, R, C);
    bias_ctx c = {R, C, tu_tod(y, R * C), tu_tod(dy, R * C)};
    double *bd = tu_tod(bias, C), g[7];
    fd_grad(g, bd, C, bias_loss, &c);
    TU_ERR("bias_grad", delta_err(db, db0, g, C), 1e-5);
    free(y);
    free(dy);
    free(bias);
    free(db);
    free(db0);
    free(yb);
    free((void *)c.y);
    free((void *)c.gy);
    free(bd);
}

/* ---- rope ---- */
typedef struct {
    int64_t B, L, nh, D;
    const int32_t *pos;
    double *gy;
} rope_ctx;

static void rope_ref(double *y, const double *x, const rope_ctx *c) {
    int64_t H = c->nh * c->D, half = c->D / 2;
    memcpy(y, x, (size_t)(c->B * c->L * 3 * H) * sizeof(double));
    for (int64_t row = 0; row < c->B * c->L; row++)
        for (int64_t part = 0; part < 2; part++)
            for (int64_t h = 0; h < c->nh; h++)
                for (int64_t i = 0; i < half; i++) {
                    int64_t o = row * 3 * H + part * H + h * c->D;
                    double a = c->pos[row % c->L] * pow(10000.0, -2.0 * i / c->D);
                    y[o + i] = x[o + i] * cos(a) - x[o + i + half] * sin(a);
                    y[o + i + half] = x[o + i + half] * cos(a) + x[o + i] * sin(a);
                }
}

static double rope_loss(const double *x, void *vctx) {
    rope_ctx *c = vctx;
    int64_t n = c->B * c->L * 3 * c->nh * c->D;
    double *y = kf_malloc((size_t)n * sizeof(double)), l = 0;
    rope_ref(y, x, c);
    for (int64_t i = 0; i < n; i++) l += y[i] * c->gy[i];
    free(y);
    return l;
}

static void check_rope(kf_backend *be) {
    const int64_t B = 2, L = 6, nh = 2, D = 8, n = B * L * 3 * nh * D;
    int32_t pos[6] = {0, 1, 2, 700, 5, 3};
    float *x = tu_randf(n, 1.0), *y = kf_malloc((size_t)n * 4), *dy = tu_randf(n, 1.0);
    memcpy(y, x, (size_t)n * 4);
    be->rope_fwd(be, y, pos, B, L, nh, D, 10000.0f, NULL);
    rope_ctx c = {B, L, nh, D, pos, tu_tod(dy, n)};
    double *xd = tu_tod(x, n), *yr = kf_malloc((size_t)n * sizeof(double)),
           *g = kf_malloc((size_t)n * sizeof(double));
    rope_ref(yr, xd, &c);
    TU_ERR("rope_fwd", tu_relerr(y, yr, n, 1e-3), 1e-6);
    be->rope_bwd(be, dy, pos, B, L, nh, D, 10000.0f, NULL);
    fd_grad(g, xd, n, rope_loss, &c);
    TU_ERR("rope_bwd", tu_relerr(dy, g, n, 1e-3), 1e-5);
    free(x);
    free(y);
    free(dy);
    free(c.gy);
    free(xd);
    free(yr);
    free(g);
}

/* ---- gelu ---- */
typedef struct {
    int64_t n;
    double *gy;
    kf_gelu_kind kind;
} gelu_ctx;

static double gelu_loss(const double *x, void *vctx) {
    gelu_ctx *c = vctx;
    double l = 0;
    for (int64_t i = 0; i < c->n; i++) l += tu_gelu(x[i], c->kind) * c->gy[i];
    return l;
}

static void check_gelu(kf_backend *be, kf_gelu_kind kind) {
    const int64_t n = 300;
    float *x = tu_randf(n, 4.0), *dy = tu_randf(n, 1.0), *y = kf_malloc(n * 4),
          *dx = kf_malloc(n * 4);
    be->gelu_fwd(be, y, x, n, kind);
    be->gelu_bwd(be, dx, dy, x, n, kind);
    gelu_ctx c = {n, tu_tod(dy, n), kind};
    double *xd = tu_tod(x, n), *yr = kf_malloc(n * sizeof(double)),
           *g = kf_malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) yr[i] = tu_gelu(xd[i], kind);
    TU_ERR(kind == KF_GELU_TANH ? "gelu_fwd tanh" : "gelu_fwd erf", tu_relerr(y, yr, n, 1e-3),
           1e-6);
    fd_grad(g, xd, n, gelu_loss, &c);
    TU_ERR(kind == KF_GELU_TANH ? "gelu_bwd tanh" : "gelu_bwd erf", tu_relerr(dx, g, n, 1e-3),
           1e-5);
    free(x);
    free(dy);
    free(y);
    free(dx);
    free(c.gy);
    free(xd);
    free(yr);
    free(g);
}

/* ---- embedding ---- */
typedef struct {
    int64_t n, dim;
    const int32_t *ids, *rows;
    double *gy;
} emb_ctx;

static double emb_loss(const double *table, void *vctx) {
    emb_ctx *c = vctx;
    double l = 0;
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t d = 0; d < c->dim; d++)
            l += table[c->ids[i] * c->dim + d] * c->gy[c->rows[i] * c->dim + d];
    return l;
}

static void check_embed(kf_backend *be) {
    const int64_t V = 9, dim = 37, n = 12;
    int32_t ids[12] = {3, 1, 3, 8, 0, 3, 1, 7, 7, 2, 3, 5},
            rows[12] = {11, 0, 5, 1, 2, 3, 4, 6, 7, 8, 9, 10};
    float *table = tu_randf(V * dim, 1.0), *out = kf_calloc(n * dim, 4),
          *dout = tu_randf(n * dim, 1.0);
    be->embed_fwd(be, out, ids, rows, table, n, dim);
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= memcmp(out + rows[i] * dim, table + ids[i] * dim, dim * 4) == 0;
    T_CHECK(ok, "embed_fwd: out[row_idx[i]] != table[ids[i]]");
    be->embed_fwd(be, out, ids, NULL, table, n, dim);
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= memcmp(out + i * dim, table + ids[i] * dim, dim * 4) == 0;
    T_CHECK(ok, "embed_fwd without row_idx");
    float *dt = tu_randf(V * dim, 1.0), *dt0 = kf_malloc(V * dim * 4);
    memcpy(dt0, dt, V * dim * 4);
    be->embed_bwd(be, dt, dout, ids, rows, n, dim, V);
    emb_ctx c = {n, dim, ids, rows, tu_tod(dout, n * dim)};
    double *td = tu_tod(table, V * dim), *g = kf_malloc(V * dim * sizeof(double));
    fd_grad(g, td, V * dim, emb_loss, &c);
    TU_ERR("embed_bwd (repeated ids)", delta_err(dt, dt0, g, V * dim), 1e-5);
    free(table);
    free(out);
    free(dout);
    free(dt);
    free(dt0);
    free(c.gy);
    free(td);
    free(g);
}

/* ---- softmax cross-entropy ---- */
typedef struct {
    int64_t rows, V;
    const int32_t *t;
} xent_ctx;

static double xent_row_ref(const double *x, int64_t V, int32_t t) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int64_t v = 0; v < V; v++) s += exp(x[v] - mx);
    return mx + log(s) - x[t];
}

static double xent_loss(const double *x, void *vctx) {
    xent_ctx *c = vctx;
    double l = 0;
    for (int64_t r = 0; r < c->rows; r++)
        if (c->t[r] >= 0) l += xent_row_ref(x + r * c->V, c->V, c->t[r]);
    return l;
}

static void check_xent(kf_backend *be) {
    const int64_t R = 5, V = 40, n = R * V;
    int32_t t[5] = {3, -1, 39, 0, 17};
    float *x = tu_randf(n, 6.0), *loss = kf_malloc(R * 4), *dl = kf_malloc(n * 4);
    x[2 * V + 5] = 80.0f; /* a large logit: max subtraction matters */
    be->xent(be, loss, dl, x, t, R, V, &(float){0.25f});
    xent_ctx c = {R, V, t};
    double *xd = tu_tod(x, n), lr[5], *g = kf_malloc(n * sizeof(double));
    for (int64_t r = 0; r < R; r++) lr[r] = t[r] >= 0 ? xent_row_ref(xd + r * V, V, t[r]) : 0;
    TU_ERR("xent losses", tu_relerr(loss, lr, R, 1e-3), 1e-6);
    fd_grad(g, xd, n, xent_loss, &c);
    for (int64_t i = 0; i < n; i++) g[i] *= 0.25;
    TU_ERR("xent dlogits (grad_scale 0.25)", tu_relerr(dl, g, n, 1e-3), 1e-5);
    /* dlogits aliasing logits, and losses == NULL */
    float *alias = kf_malloc(n * 4);
    memcpy(alias, x, n * 4);
    be->xent(be, NULL, alias, alias, t, R, V, &(float){0.25f});
    T_CHECK(memcmp(alias, dl, n * 4) == 0, "xent with dlogits aliasing logits differs");
    free(x);
    free(loss);
    free(dl);
    free(xd);
    free(g);
    free(alias);
}

int main(void) {
    kf_backend *be = kernels_cpu_create();
    check_layernorm(be, 0);
    check_layernorm(be, 1);
    check_bias(be);
    check_rope(be);
    check_gelu(be, KF_GELU_TANH);
    check_gelu(be, KF_GELU_ERF);
    check_embed(be);
    check_xent(be);
    be->destroy(be);
    return T_DONE();
}
