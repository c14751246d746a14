/* kernels/record.c — the recording backend (see record.h). */
#include "kernels/record.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"

/* Dry allocations start here and never overlap; the range is far from any
 * mapping on x86-64 Linux, so a stray dereference faults. */
#define DRY_BASE ((uintptr_t)0x7e0000000000ull)
#define DRY_ALIGN 256

typedef struct rec_block {
    void *p;
    size_t bytes;
} rec_block;

typedef struct rec_impl {
    kf_backend *inner; /* NULL: dry */
    int timed;
    kf_op_rec *ops;
    int64_t n_ops, cap_ops;
    rec_block *allocs; /* live allocations */
    int64_t n_allocs, cap_allocs;
    size_t live, peak;
    uintptr_t next; /* dry: the next fake address */
    double t0;      /* timed: start of the current call */
    /* dry: the first int32 of the latest uploads, newest at [n_up % REC_UPLOADS]:
     * what a device length (attn_decode's len) holds */
    struct {
        const void *p;
        int32_t v;
    } up[8];
    int64_t n_up;
} rec_impl;
#define REC_UPLOADS 8

/* What a dry or forwarded linear_pack returns: its shape first (op_cost.h). */
typedef struct rec_linear {
    kf_linear_shape shape;
    void *inner;
} rec_linear;

/* What a dry or forwarded head_pack returns: its shape first (op_cost.h). */
typedef struct rec_head {
    kf_head_shape shape;
    void *inner;
} rec_head;

static rec_impl *impl(const kf_backend *b) { return b->impl; }

/* Logs the call and, when timed, starts its clock after the inner backend
 * has finished everything before it. */
static void rec_begin(kf_backend *b, const char *op, kf_op_cost cost) {
    rec_impl *im = impl(b);
    if (im->n_ops == im->cap_ops) {
        im->cap_ops = im->cap_ops ? 2 * im->cap_ops : 1024;
        im->ops = kf_realloc(im->ops, (size_t)im->cap_ops * sizeof *im->ops);
    }
    im->ops[im->n_ops++] = (kf_op_rec){.op = op, .cost = cost};
    if (im->inner) {
        im->inner->batch_invariant = b->batch_invariant;
        if (im->timed) {
            im->inner->sync(im->inner);
            im->t0 = clock_now_s();
        }
    }
}

/* Ends the call's clock (timed), once the inner backend has finished it.
 * The call is the last one logged: forwarded ops never call back into b. */
static void rec_end(kf_backend *b) {
    rec_impl *im = impl(b);
    if (im->inner && im->timed) {
        im->inner->sync(im->inner);
        im->ops[im->n_ops - 1].seconds = clock_now_s() - im->t0;
    }
}

/* Every op is generated from the op list (REC_GEN_0) except those that need
 * more than "log, then forward or do nothing", written out below. They are
 * marked by REC_OWN_<name>, which expands to "~, 1": the second element of
 * (REC_OWN_<name>, 0, ~) is then 1 and picks REC_GEN_1 (nothing), while for
 * any other op REC_OWN_<name> is no macro and the second element is 0. An
 * op that returns a value and is not marked fails to compile
 * (-Wreturn-type) instead of returning garbage. */
#define REC_OWN_alloc ~, 1
#define REC_OWN_free ~, 1
#define REC_OWN_upload ~, 1
#define REC_OWN_download ~, 1
#define REC_OWN_attn_decode ~, 1
#define REC_OWN_set_precision ~, 1
#define REC_OWN_destroy ~, 1
#define REC_OWN_head_pack ~, 1
#define REC_OWN_head_free ~, 1
#define REC_OWN_head_fwd ~, 1
#define REC_OWN_linear_pack ~, 1
#define REC_OWN_linear_pack_free ~, 1
#define REC_OWN_linear_packed_fwd ~, 1
#define REC_OWN_sum ~, 1
#define REC_OWN_sumsq ~, 1
#define REC_OWN_sumsq_parts ~, 1
#define REC_OWN_count_nonfinite ~, 1
#define REC_OWN_graph_begin ~, 1
#define REC_OWN_graph_end ~, 1
#define REC_OWN_graph_launch ~, 1
#define REC_OWN_graph_free ~, 1
#define REC_SECOND(a, b, ...) b
#define REC_SECOND_OF(...) REC_SECOND(__VA_ARGS__)
#define REC_CAT(a, b) REC_CAT_(a, b)
#define REC_CAT_(a, b) a##b
#define REC_OP(ret, name, params, args)                                                            \
    REC_CAT(REC_GEN_, REC_SECOND_OF(REC_OWN_##name, 0, ~))(ret, name, params, args)
#define REC_GEN_1(ret, name, params, args)
/* The generated op: log, then forward with b shadowed by the inner backend
 * (args name b first), or nothing when dry. */
#define REC_GEN_0(ret, name, params, args)                                                         \
    static ret rec_##name params {                                                                 \
        kf_backend *const rec_ = b;                                                                \
        rec_begin(rec_, #name, kernels_cost_##name args);                                          \
        if (impl(rec_)->inner) {                                                                   \
            kf_backend *b = impl(rec_)->inner;                                                     \
            b->name args;                                                                          \
        }                                                                                          \
        rec_end(rec_);                                                                             \
    }
KF_BACKEND_OPS(REC_OP)

static void *rec_alloc(kf_backend *b, size_t bytes) {
    rec_impl *im = impl(b);
    rec_begin(b, "alloc", kernels_cost_alloc(b, bytes));
    void *p;
    if (im->inner) {
        p = im->inner->alloc(im->inner, bytes);
    } else {
        p = (void *)im->next;
        im->next += (bytes + DRY_ALIGN - 1) / DRY_ALIGN * DRY_ALIGN + DRY_ALIGN;
    }
    rec_end(b);
    if (im->n_allocs == im->cap_allocs) {
        im->cap_allocs = im->cap_allocs ? 2 * im->cap_allocs : 256;
        im->allocs = kf_realloc(im->allocs, (size_t)im->cap_allocs * sizeof *im->allocs);
    }
    im->allocs[im->n_allocs++] = (rec_block){p, bytes};
    im->live += bytes;
    if (im->live > im->peak) im->peak = im->live;
    return p;
}

static void rec_free(kf_backend *b, void *p) {
    rec_impl *im = impl(b);
    rec_begin(b, "free", kernels_cost_free(b, p));
    if (im->inner) im->inner->free(im->inner, p);
    rec_end(b);
    if (!p) return;
    /* newest first: buffers are mostly freed soon after their allocation */
    for (int64_t i = im->n_allocs - 1; i >= 0; i--)
        if (im->allocs[i].p == p) {
            im->live -= im->allocs[i].bytes;
            im->allocs[i] = im->allocs[--im->n_allocs];
            return;
        }
    KF_FATAL("record: free of %p, which this backend did not allocate", p);
}

static void rec_upload(kf_backend *b, void *dst, const void *src_host, size_t bytes) {
    rec_impl *im = impl(b);
    rec_begin(b, "upload", kernels_cost_upload(b, dst, src_host, bytes));
    if (im->inner) im->inner->upload(im->inner, dst, src_host, bytes);
    else if (bytes >= sizeof(int32_t)) {
        int64_t i = ++im->n_up % REC_UPLOADS;
        im->up[i].p = dst;
        memcpy(&im->up[i].v, src_host, sizeof(int32_t));
    }
    rec_end(b);
}

/* The value at a device int32 len: read from the inner backend, or dry the
 * latest upload to it (dry addresses are never reused); -1 when unknown. */
static int64_t device_int(kf_backend *b, const int32_t *len) {
    rec_impl *im = impl(b);
    int32_t v = -1;
    if (im->inner) {
        im->inner->download(im->inner, &v, len, sizeof v);
        return v;
    }
    for (int64_t i = im->n_up; i > im->n_up - REC_UPLOADS && i > 0; i--)
        if (im->up[i % REC_UPLOADS].p == len) return im->up[i % REC_UPLOADS].v;
    return -1;
}

/* Priced at the cache length len holds, where known: the kernel's work (its
 * launch is sized for the bound P). */
static void rec_attn_decode(kf_backend *b, float *out, const float *q, int64_t q_stride,
                            const float *kcache, const float *vcache, int64_t B, int64_t cap,
                            int64_t P, const int32_t *len, int64_t Q, int64_t n_head,
                            int64_t head_dim) {
    rec_impl *im = impl(b);
    int64_t n = len ? device_int(b, len) : -1, at = n >= 0 && n <= P ? n : P;
    rec_begin(b, "attn_decode",
              kernels_cost_attn_decode(b, out, q, q_stride, kcache, vcache, B, cap, at, len, Q,
                                       n_head, head_dim));
    if (im->inner)
        im->inner->attn_decode(im->inner, out, q, q_stride, kcache, vcache, B, cap, P, len, Q,
                               n_head, head_dim);
    rec_end(b);
}

static void rec_download(kf_backend *b, void *dst_host, const void *src, size_t bytes) {
    rec_impl *im = impl(b);
    rec_begin(b, "download", kernels_cost_download(b, dst_host, src, bytes));
    if (im->inner) im->inner->download(im->inner, dst_host, src, bytes);
    else if (bytes) memset(dst_host, 0, bytes);
    rec_end(b);
}

static void rec_set_precision(kf_backend *b, kf_precision p) {
    rec_impl *im = impl(b);
    rec_begin(b, "set_precision", kernels_cost_set_precision(b, p));
    b->precision = p;
    if (im->inner) im->inner->set_precision(im->inner, p);
    rec_end(b);
}

static void rec_destroy(kf_backend *b) {
    rec_impl *im = impl(b);
    if (im->inner) im->inner->destroy(im->inner);
    free(im->ops);
    free(im->allocs);
    free(im);
    free(b);
}

static void *rec_head_pack(kf_backend *b, const float *W, const float *bias, int64_t V, int64_t H,
                           int64_t mask_col, float mask_value) {
    rec_impl *im = impl(b);
    rec_begin(b, "head_pack", kernels_cost_head_pack(b, W, bias, V, H, mask_col, mask_value));
    rec_head *h = kf_calloc(1, sizeof *h);
    h->shape = (kf_head_shape){V, H};
    if (im->inner) h->inner = im->inner->head_pack(im->inner, W, bias, V, H, mask_col, mask_value);
    rec_end(b);
    return h;
}

static void rec_head_free(kf_backend *b, void *head) {
    rec_impl *im = impl(b);
    rec_begin(b, "head_free", kernels_cost_head_free(b, head));
    rec_head *h = head;
    if (im->inner && h) im->inner->head_free(im->inner, h->inner);
    free(h);
    rec_end(b);
}

static void rec_head_fwd(kf_backend *b, float *logits, int32_t *ids, const float *x,
                         const void *head, int64_t rows) {
    rec_impl *im = impl(b);
    rec_begin(b, "head_fwd", kernels_cost_head_fwd(b, logits, ids, x, head, rows));
    const rec_head *h = head;
    if (im->inner) im->inner->head_fwd(im->inner, logits, ids, x, h->inner, rows);
    rec_end(b);
}

static void *rec_linear_pack(kf_backend *b, const float *w, const void *w16, int64_t in,
                             int64_t out) {
    rec_impl *im = impl(b);
    rec_begin(b, "linear_pack", kernels_cost_linear_pack(b, w, w16, in, out));
    rec_linear *l = kf_calloc(1, sizeof *l);
    l->shape = (kf_linear_shape){in, out, w16 != NULL};
    if (im->inner) l->inner = im->inner->linear_pack(im->inner, w, w16, in, out);
    rec_end(b);
    return l;
}

static void rec_linear_pack_free(kf_backend *b, void *lin) {
    rec_impl *im = impl(b);
    rec_begin(b, "linear_pack_free", kernels_cost_linear_pack_free(b, lin));
    rec_linear *l = lin;
    if (im->inner && l) im->inner->linear_pack_free(im->inner, l->inner);
    free(l);
    rec_end(b);
}

static void rec_linear_packed_fwd(kf_backend *b, float *y, void *y16, float *pre, const float *x,
                                  const void *x16, const void *lin, const float *bias, int64_t rows,
                                  kf_act act, float beta) {
    rec_impl *im = impl(b);
    rec_begin(b, "linear_packed_fwd",
              kernels_cost_linear_packed_fwd(b, y, y16, pre, x, x16, lin, bias, rows, act, beta));
    const rec_linear *l = lin;
    if (im->inner)
        im->inner->linear_packed_fwd(im->inner, y, y16, pre, x, x16, l->inner, bias, rows, act,
                                     beta);
    rec_end(b);
}

/* The reductions: the inner backend's result, or 0 dry (a finite gradient
 * norm, so the optimizer takes its normal path). */
#define REC_REDUCE(ret, name)                                                                      \
    static ret rec_##name(kf_backend *b, const float *x, int64_t n) {                              \
        rec_impl *im = impl(b);                                                                    \
        rec_begin(b, #name, kernels_cost_##name(b, x, n));                                         \
        ret r = im->inner ? im->inner->name(im->inner, x, n) : 0;                                  \
        rec_end(b);                                                                                \
        return r;                                                                                  \
    }
REC_REDUCE(double, sum)
REC_REDUCE(double, sumsq)
REC_REDUCE(int64_t, count_nonfinite)

static void rec_sumsq_parts(kf_backend *b, double *parts, const float *x, int64_t n) {
    rec_impl *im = impl(b);
    rec_begin(b, "sumsq_parts", kernels_cost_sumsq_parts(b, parts, x, n));
    if (im->inner) im->inner->sumsq_parts(im->inner, parts, x, n);
    else memset(parts, 0, (size_t)((n + KF_SUM_PART - 1) / KF_SUM_PART) * sizeof *parts);
    rec_end(b);
}

/* No graphs, even over a backend that makes them: the caller then calls every
 * op itself, so each is logged (and, timed, timed on its own). */
static void rec_graph_begin(kf_backend *b) {}
static void *rec_graph_end(kf_backend *b) { return NULL; }
static void rec_graph_launch(kf_backend *b, void *graph) {
    KF_FATAL("graph_launch: the recorder makes no graphs (graph_end returned NULL)");
}
static void rec_graph_free(kf_backend *b, void *graph) {}

static const kf_backend rec_table = {
#define REC_SLOT(ret, name, params, args) .name = rec_##name,
    KF_BACKEND_OPS(REC_SLOT)
#undef REC_SLOT
};

kf_backend *kernels_record_create(kf_backend *inner, int timed) {
    kf_backend *b = kf_calloc(1, sizeof *b);
    *b = rec_table;
    rec_impl *im = kf_calloc(1, sizeof *im);
    im->inner = inner;
    im->timed = timed && inner;
    im->next = DRY_BASE;
    b->impl = im;
    b->name = inner ? "record" : "dry";
    b->precision = inner ? inner->precision : KF_PREC_FP32;
    /* dry: the CUDA backend's default (cuBLAS outside teacher passes) */
    b->batch_invariant = inner ? inner->batch_invariant : 0;
    return b;
}

int kernels_record_is(const kf_backend *b) { return b->destroy == rec_destroy; }

const kf_op_rec *kernels_record_ops(const kf_backend *b, int64_t *n) {
    *n = impl(b)->n_ops;
    return impl(b)->ops;
}

void kernels_record_clear(kf_backend *b) {
    rec_impl *im = impl(b);
    im->n_ops = 0;
    im->peak = im->live;
}

size_t kernels_record_live_bytes(const kf_backend *b) { return impl(b)->live; }
size_t kernels_record_peak_bytes(const kf_backend *b) { return impl(b)->peak; }
