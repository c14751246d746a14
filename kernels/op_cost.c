/* kernels/op_cost.c — the FLOP and byte count of every op (see op_cost.h for
 * the conventions). F = 4 bytes (a float or an int32), D = 8 (a double). */
#include "kernels/op_cost.h"

#include <stdarg.h>
#include <stdio.h>

#include "kernels/attn_mask.h"

enum { F = 4, D = 8, H16 = 2 /* a value of a 16-bit copy (kernels.h) */ };

static kf_op_cost cost(const kf_backend *b, kf_cost_unit unit, double flops, double bytes,
                       const char *fmt, ...) {
    kf_op_cost c = {
        .flops = flops, .bytes = bytes, .unit = unit, .lowp = b->precision != KF_PREC_FP32};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c.shape, sizeof c.shape, fmt, ap);
    va_end(ap);
    return c;
}

/* ---- memory: bookkeeping is free; a transfer moves its bytes over the bus,
 * a copy reads and writes them, a zero writes them */

kf_op_cost kernels_cost_alloc(kf_backend *b, size_t bytes) {
    return cost(b, KF_COST_NONE, 0, 0, "%zu B", bytes);
}
kf_op_cost kernels_cost_free(kf_backend *b, void *p) { return cost(b, KF_COST_NONE, 0, 0, "-"); }
kf_op_cost kernels_cost_upload(kf_backend *b, void *dst, const void *src_host, size_t bytes) {
    return cost(b, KF_COST_HOST, 0, (double)bytes, "%zu B", bytes);
}
kf_op_cost kernels_cost_download(kf_backend *b, void *dst_host, const void *src, size_t bytes) {
    kf_op_cost c = cost(b, KF_COST_HOST, 0, (double)bytes, "%zu B", bytes);
    c.host_sync = 1;
    return c;
}
kf_op_cost kernels_cost_copy(kf_backend *b, void *dst, const void *src, size_t bytes) {
    return cost(b, KF_COST_SIMT, 0, 2.0 * (double)bytes, "%zu B", bytes);
}
kf_op_cost kernels_cost_zero(kf_backend *b, void *dst, size_t bytes) {
    return cost(b, KF_COST_SIMT, 0, (double)bytes, "%zu B", bytes);
}
kf_op_cost kernels_cost_sync(kf_backend *b) {
    kf_op_cost c = cost(b, KF_COST_NONE, 0, 0, "-");
    c.host_sync = 1;
    return c;
}
kf_op_cost kernels_cost_set_precision(kf_backend *b, kf_precision p) {
    return cost(b, KF_COST_NONE, 0, 0, "%s", kernels_precision_name(p));
}
kf_op_cost kernels_cost_destroy(kf_backend *b) { return cost(b, KF_COST_NONE, 0, 0, "-"); }

/* Graphs: recording and freeing are host bookkeeping; a launch's work is its
 * ops', which the recorder logs one by one (it makes no graphs). */
kf_op_cost kernels_cost_graph_begin(kf_backend *b) { return cost(b, KF_COST_NONE, 0, 0, "-"); }
kf_op_cost kernels_cost_graph_end(kf_backend *b) { return cost(b, KF_COST_NONE, 0, 0, "-"); }
kf_op_cost kernels_cost_graph_launch(kf_backend *b, void *graph) {
    return cost(b, KF_COST_NONE, 0, 0, "-");
}
kf_op_cost kernels_cost_graph_free(kf_backend *b, void *graph) {
    return cost(b, KF_COST_NONE, 0, 0, "-");
}

/* ---- dense algebra: 2*M*N*K per product; A, B read, C written (and read
 * when beta != 0) */

/* The unit a product runs on: the tensor units in a 16-bit mode (cuBLAS, or
 * in batch-invariant mode the tensor-core fixed-tiling kernel, cuda_gemm.cu);
 * the fp32 units in fp32, batch-invariant mode's SIMT kernel included. */
static kf_cost_unit gemm_unit(const kf_backend *b) {
    return b->batch_invariant && b->precision == KF_PREC_FP32 ? KF_COST_SIMT : KF_COST_GEMM;
}

/* Conversion passes of a 16-bit GEMM as kernels/cuda/cuda_gemm.cu runs it
 * outside batch-invariant mode (cuBLAS on fp16/bf16 copies): A and B
 * converted in passes of their own (4 bytes read, 2 written per element),
 * then C rounded to the format in place (read and written). The
 * batch-invariant tensor-core kernel rounds fp32 operands as it loads them
 * and reads 16-bit copies as they are (2 bytes a value): no pass. (Its SIMT
 * fallback, KF_CUDA_TC=0, would widen the copies first: not priced.) */

static double gemm_convert(const kf_backend *b, double a, double bb, double c) {
    return b->precision != KF_PREC_FP32 && !b->batch_invariant ? 6 * (a + bb) + 8 * c : 0;
}

kf_op_cost kernels_cost_matmul(kf_backend *b, float *C, const float *A, const float *B, int64_t M,
                               int64_t N, int64_t K, int trans_a, int trans_b, float alpha,
                               float beta) {
    double m = (double)M, n = (double)N, k = (double)K;
    kf_op_cost c =
        cost(b, gemm_unit(b), 2 * m * n * k, F * (m * k + k * n + m * n * (beta != 0 ? 2 : 1)),
             "M=%lld N=%lld K=%lld%s%s%s", (long long)M, (long long)N, (long long)K,
             trans_a ? " ta" : "", trans_b ? " tb" : "", beta != 0 ? " +C" : "");
    c.convert_bytes = gemm_convert(b, m * k, k * n, m * n);
    return c;
}

kf_op_cost kernels_cost_matmul_batched(kf_backend *b, float *C, const float *A, const float *B,
                                       int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
                                       float alpha, float beta, int64_t batch, int64_t stride_c,
                                       int64_t stride_a, int64_t stride_b) {
    double m = (double)M, n = (double)N, k = (double)K, g = (double)batch;
    kf_op_cost c = cost(
        b, gemm_unit(b), g * 2 * m * n * k, g * F * (m * k + k * n + m * n * (beta != 0 ? 2 : 1)),
        "%lld x M=%lld N=%lld K=%lld%s%s%s", (long long)batch, (long long)M, (long long)N,
        (long long)K, trans_a ? " ta" : "", trans_b ? " tb" : "", beta != 0 ? " +C" : "");
    c.convert_bytes = g * gemm_convert(b, m * k, k * n, m * n);
    return c;
}

/* The product's epilogue as kernels/cuda/cuda_linear.cu runs it: in
 * batch-invariant mode the fixed-tiling kernel (tensor-core or SIMT)
 * finishes each element in its own epilogue, no pass (`inv` bytes beyond:
 * linear_act_dgrad's bias gradient, summed from the fp32 dpre in a pass of
 * its own); a 16-bit product outside that mode is written at 2 bytes and
 * read back at 2 by the epilogue, the single pass's 4 (only A and B's
 * conversion passes are extra); added to C (c_read) it is the fp32 sum
 * cuBLAS writes, which the epilogue reads, rounds (matmul's rounding, in no
 * pass of its own) and finishes in a second pass (read and written). In
 * fp32 an fp32 product is finished by that second pass when there is
 * anything to finish. */
static double epilogue_extra(const kf_backend *b, double mn, int work, int c_read, double inv) {
    if (b->batch_invariant) return inv;
    return (b->precision != KF_PREC_FP32 ? c_read : work) ? 2 * F * mn : 0;
}

/* A GEMM C[M, N] = A[M, K] B[K, N] and its epilogue: `epi` FLOPs per element
 * of C; A and B read (each at 2 bytes as a 16-bit copy, a16 and b16, which
 * are not converted), `out` bytes written per element of C (its outputs), C read first
 * when the product is added to it (c_read, then rounded as matmul rounds
 * it), `vec` bytes of the bias or its gradient; `work`: the epilogue has
 * anything to do; `inv`: epilogue_extra's. `tags` name the options in the
 * shape. */
static kf_op_cost linear_cost(const kf_backend *b, int64_t M, int64_t N, int64_t K, double epi,
                              int a16, int b16, double out, int c_read, double vec, int work,
                              double inv, const char *tags) {
    double m = (double)M, n = (double)N, k = (double)K, mn = m * n;
    kf_op_cost c = cost(b, gemm_unit(b), 2 * m * n * k + mn * epi,
                        (a16 ? H16 : F) * m * k + (b16 ? H16 : F) * k * n + out * mn +
                            (c_read ? F * mn : 0) + vec + epilogue_extra(b, mn, work, c_read, inv),
                        "M=%lld N=%lld K=%lld%s", (long long)M, (long long)N, (long long)K, tags);
    c.convert_bytes = k > 0 ? gemm_convert(b, a16 ? 0 : m * k, b16 ? 0 : k * n, 0) : 0;
    return c;
}

static const char *act_tag(kf_act act, int grad) {
    if (act == KF_ACT_GELU_TANH) return grad ? " dgelu" : " gelu";
    if (act == KF_ACT_GELU_ERF) return grad ? " dgelu-erf" : " gelu-erf";
    return "";
}

/* per element 1 add with a bias and GELU's 8; the bias read; y, its 16-bit
 * copy and pre written as asked */
kf_op_cost kernels_cost_linear_act(kf_backend *b, float *y, void *y16, float *pre, const float *x,
                                   const void *x16, const float *w, const float *bias, int64_t rows,
                                   int64_t in, int64_t out, kf_act act, float beta,
                                   const void *w16) {
    int g = act != KF_ACT_NONE;
    char tags[64];
    snprintf(tags, sizeof tags, "%s%s%s%s%s%s", bias ? " bias" : "", act_tag(act, 0),
             x16 ? " x16" : "", w16 ? " w16" : "", y16 ? (y ? " +y16" : " y16") : "",
             beta != 0 ? " +C" : "");
    return linear_cost(b, rows, out, in, (bias ? 1 : 0) + (g ? 8 : 0), x16 != NULL, w16 != NULL,
                       (y ? F : 0) + (y16 ? H16 : 0) + (g ? F : 0), beta != 0,
                       bias ? F * (double)out : 0, bias || g || y16, 0, tags);
}

/* per element GELU's derivative 12 and the bias sum's 1; pre read; dpre
 * and its 16-bit copy written as asked; dbias read and written; dy read
 * (at 2 bytes as its 16-bit copy dy16, not converted). In batch-invariant
 * mode the bias gradient's pass reads the fp32 dpre (written to scratch
 * first when not asked for). */
kf_op_cost kernels_cost_linear_act_dgrad(kf_backend *b, float *dpre, void *dpre16, float *dbias,
                                         const float *dy, const float *w, const float *pre,
                                         int64_t rows, int64_t in, int64_t out, kf_act act,
                                         const void *w16, const void *dy16) {
    int g = act != KF_ACT_NONE;
    char tags[64];
    snprintf(tags, sizeof tags, "%s%s%s%s%s", dbias ? " dbias" : "", act_tag(act, 1),
             dy16 ? " dy16" : "", w16 ? " w16" : "", dpre16 ? (dpre ? " +y16" : " y16") : "");
    double sum_pass = dbias ? F * (double)rows * (double)in * (dpre ? 1 : 2) : 0;
    return linear_cost(b, rows, in, out, (dbias ? 1 : 0) + (g ? 12 : 0), dy16 != NULL, w16 != NULL,
                       (dpre ? F : 0) + (dpre16 ? H16 : 0) + (g ? F : 0), 0,
                       dbias ? 2 * F * (double)in : 0, dbias || g || dpre16, sum_pass, tags);
}

/* Both products (dW, and dx when asked) and the bias sum's 1 per element of
 * dy; dy, x and W (each at 2 bytes as a 16-bit copy) read once, dW (and
 * dbias) read and written, dx written (and read when dx_beta != 0), its
 * 16-bit copy dx16 written (at 2 bytes).
 * kernels/cuda/cuda_linear.cu converts dy to the 16-bit format once for both
 * products (its bias sums in that pass), x and W, unless they are 16-bit
 * copies, and rounds dW as matmul does; dx added to (dx_beta != 0) is
 * rounded in a pass too, else cuBLAS writes it in 16 bits (as dx16, or in
 * scratch) and a pass widens it into dx: 2 bytes written and read a value
 * beyond dx's (dx16's write is the op's own). Otherwise it is matmul,
 * bias_grad and matmul, which read dy once each. */
kf_op_cost kernels_cost_linear_bwd(kf_backend *b, float *dx, float *dw, float *dbias,
                                   const float *dy, const void *dy16, const float *x,
                                   const void *x16, const float *w, int64_t rows, int64_t in,
                                   int64_t out, float dx_beta, const void *w16, void *dx16) {
    double r = (double)rows, i = (double)in, o = (double)out, ny = r * o;
    double nd = dx || dx16 ? 1 : 0;
    int fused16 = b->precision != KF_PREC_FP32 && !b->batch_invariant && r > 0 && i > 0 && o > 0;
    double bytes = (dy16 ? H16 : F) * ny + (x16 ? H16 : F) * r * i + 2 * F * o * i +
                   (dbias ? 2 * F * o : 0) + nd * (w16 ? H16 : F) * o * i +
                   (dx ? F * r * i * (dx_beta != 0 ? 2 : 1) : 0) + (dx16 ? H16 * r * i : 0);
    if (!fused16) bytes += F * ny * ((dbias ? 1 : 0) + nd);
    kf_op_cost c =
        cost(b, gemm_unit(b), 2 * r * i * o * (1 + nd) + (dbias ? ny : 0), bytes,
             "M=%lld N=%lld K=%lld%s%s%s%s%s%s", (long long)rows, (long long)in, (long long)out,
             dbias ? " dbias" : "", dx ? " dx" : "", dx && dx_beta != 0 ? " +dx" : "",
             dx16 ? " dx16" : "", x16 ? " x16" : "", dy16 ? " dy16" : "", nd && w16 ? " w16" : "");
    double dx_pass = !dx ? 0 : dx_beta != 0 ? 2 * F * r * i : (dx16 ? H16 : 2 * H16) * r * i;
    c.convert_bytes = gemm_convert(b, dy16 ? 0 : ny, x16 ? 0 : r * i, o * i) +
                      nd * gemm_convert(b, 0, w16 ? 0 : o * i, 0) + (fused16 ? dx_pass : 0);
    return c;
}

/* y += bias: 1 add per element; y read and written, bias read */
kf_op_cost kernels_cost_add_bias(kf_backend *b, float *y, const float *bias, int64_t rows,
                                 int64_t cols) {
    double n = (double)rows * (double)cols;
    return cost(b, KF_COST_SIMT, n, F * (2 * n + (double)cols), "%lldx%lld", (long long)rows,
                (long long)cols);
}

/* dbias += column sums: 1 add per element; dy read, dbias read and written */
kf_op_cost kernels_cost_bias_grad(kf_backend *b, float *dbias, const float *dy, int64_t rows,
                                  int64_t cols) {
    double n = (double)rows * (double)cols;
    return cost(b, KF_COST_SIMT, n, F * (n + 2 * (double)cols), "%lldx%lld", (long long)rows,
                (long long)cols);
}

/* ---- normalisation */

/* Per element: the mean 1, the variance 3 (subtract, square, add), the output
 * 3 (subtract, * rstd, * w), + 1 with a bias. x read, y (and its 16-bit copy) written, w (and bias)
 * read, mean and rstd written. */
kf_op_cost kernels_cost_layernorm_fwd(kf_backend *b, float *y, void *y16, float *mean, float *rstd,
                                      const float *x, const float *w, const float *bias,
                                      int64_t rows, int64_t cols, float eps) {
    double r = (double)rows, c = (double)cols, nb = bias ? 1 : 0;
    return cost(b, KF_COST_SIMT, r * c * (7 + nb),
                F * (r * c + c * (1 + nb) + 2 * r) + (y ? F * r * c : 0) + (y16 ? H16 * r * c : 0),
                "%lldx%lld%s%s", (long long)rows, (long long)cols, bias ? " +bias" : "",
                y16 ? (y ? " +y16" : " y16") : "");
}

/* Per element: xhat 2, g = dy*w 1, the two row sums (g, g*xhat) 3, dx +=
 * rstd*(g - mean g - xhat mean(g xhat)) 5, dw += dy*xhat 2, + 1 for dbias.
 * dy and x read, dx read and written (and its 16-bit copy written); w,
 * mean, rstd read; dw (and dbias) read and written. */
kf_op_cost kernels_cost_layernorm_bwd(kf_backend *b, float *dx, float *dw, float *dbias,
                                      const float *dy, const float *x, const float *w,
                                      const float *mean, const float *rstd, int64_t rows,
                                      int64_t cols, void *dx16) {
    double r = (double)rows, c = (double)cols, nb = dbias ? 1 : 0;
    return cost(b, KF_COST_SIMT, r * c * (13 + nb),
                F * (4 * r * c + 2 * r + c * (3 + 2 * nb)) + (dx16 ? H16 * r * c : 0),
                "%lldx%lld%s%s", (long long)rows, (long long)cols, dbias ? " +dbias" : "",
                dx16 ? " +dx16" : "");
}

/* ---- rotary embedding: q and k (2*B*L*H values) rotated in place, 3 FLOPs
 * per value (2 products, 1 add; the angles are not counted); read and
 * written, pos read; with the 16-bit copy (y16) v read too and all 3*B*L*H
 * values written at 2 bytes; with the copy alone (x NULL) q and k read and
 * written at 2 bytes */

static kf_op_cost rope_cost(kf_backend *b, const float *x, int64_t B, int64_t L, int64_t n_head,
                            int64_t head_dim, const void *y16) {
    double n = 2.0 * (double)B * (double)L * (double)(n_head * head_dim);
    double bytes = !x ? H16 * 2 * n : y16 ? F * (2 * n + n / 2) + H16 * 1.5 * n : F * 2 * n;
    return cost(b, KF_COST_SIMT, 3 * n, bytes + F * (double)L, "B=%lld L=%lld heads=%lld hd=%lld%s",
                (long long)B, (long long)L, (long long)n_head, (long long)head_dim,
                !x    ? " 16-bit only"
                : y16 ? " +y16"
                      : "");
}
kf_op_cost kernels_cost_rope_fwd(kf_backend *b, float *qkv, const int32_t *pos, int64_t B,
                                 int64_t L, int64_t n_head, int64_t head_dim, float base,
                                 void *qkv16) {
    return rope_cost(b, qkv, B, L, n_head, head_dim, qkv16);
}
kf_op_cost kernels_cost_rope_bwd(kf_backend *b, float *dqkv, const int32_t *pos, int64_t B,
                                 int64_t L, int64_t n_head, int64_t head_dim, float base,
                                 void *dqkv16) {
    return rope_cost(b, dqkv, B, L, n_head, head_dim, dqkv16);
}

/* ---- attention */

double kernels_mask_pairs(const kf_mask *m, int64_t B) {
    double pairs = 0;
    for (int64_t s = 0; s < B; s++) {
        int64_t vl = kf_mask_valid_ctx(m->valid_len, m->n_ctx, s);
        for (int64_t r = m->q_start; r < kf_mask_len(m); r++) {
            int64_t ctx, grp = 0;
            int in_group = kf_mask_row_keys(m->n_ctx, m->group, m->bidir, vl, r, &ctx, &grp);
            pairs += (double)ctx + (in_group ? (double)(r - grp + 1) : 0);
        }
    }
    return pairs;
}

/* Attention's cost record: its products on the tensor units in a 16-bit
 * mode when the tensor-core kernels run (KF_COST_ATTN, roofline.c decides),
 * batch-invariant mode included (those kernels are batch-invariant,
 * cuda_attention_tc.cu); `tc_convert` bytes of the passes the tensor-core
 * kernels run first to convert the fp32 inputs not given as 16-bit copies
 * (4 bytes read, 2 written per element; the SIMT kernels read either form
 * as they load). */
static kf_op_cost attn_cost(kf_backend *b, const kf_mask *m, int64_t B, int64_t n_head,
                            int64_t head_dim, double flops, double bytes, double tc_convert) {
    kf_op_cost c =
        cost(b, KF_COST_ATTN, flops, bytes,
             "B=%lld L=%lld ctx=%lld group=%lld q0=%lld heads=%lld hd=%lld", (long long)B,
             (long long)kf_mask_len(m), (long long)m->n_ctx, (long long)m->group,
             (long long)m->q_start, (long long)n_head, (long long)head_dim);
    c.convert_bytes = b->precision != KF_PREC_FP32 ? tc_convert : 0;
    return c;
}

/* Forward: 4*head_dim per pair and head (Q K^T, P V) + 3 for the online
 * softmax (max, exp, sum). qkv of every row read (keys span the sequence;
 * at 2 bytes as a 16-bit copy), out (and its copy) and lse of the query
 * rows written. The tensor-core forward (cuda_attention_tc.cu) converts an
 * fp32 qkv first: convert_bytes, which roofline.c counts only when those
 * kernels run. */
kf_op_cost kernels_cost_attn_fwd(kf_backend *b, float *out, float *lse, const float *qkv,
                                 const kf_mask *m, int64_t B, int64_t n_head, int64_t head_dim,
                                 const void *qkv16, void *out16) {
    double p = kernels_mask_pairs(m, B) * (double)n_head, H = (double)(n_head * head_dim);
    double L = (double)kf_mask_len(m), Lq = L - (double)m->q_start, Bd = (double)B;
    double nqkv = Bd * L * 3 * H, nout = Bd * Lq * H;
    return attn_cost(b, m, B, n_head, head_dim, p * (4 * (double)head_dim + 3),
                     (qkv16 ? H16 : F) * nqkv + (out ? F * nout : 0) + (out16 ? H16 * nout : 0) +
                         F * Bd * (double)n_head * Lq,
                     qkv16 ? 0 : 6 * nqkv);
}

/* Backward: 10*head_dim per pair and head (S recomputed, dP = dO V^T,
 * dV += P^T dO, dQ += dS K, dK += dS^T Q) + 4 for P and dS. qkv, out, dout
 * (each at 2 bytes as a 16-bit copy) and lse read, dqkv and/or its copy
 * written. The tensor-core backward converts an fp32 qkv and dout first
 * (convert_bytes, as the forward's). */
kf_op_cost kernels_cost_attn_bwd(kf_backend *b, float *dqkv, const float *dout, const float *out,
                                 const float *lse, const float *qkv, const kf_mask *m, int64_t B,
                                 int64_t n_head, int64_t head_dim, const void *dout16,
                                 const void *out16, const void *qkv16, void *dqkv16) {
    double p = kernels_mask_pairs(m, B) * (double)n_head, H = (double)(n_head * head_dim);
    double L = (double)kf_mask_len(m), Lq = L - (double)m->q_start, Bd = (double)B;
    double nqkv = Bd * L * 3 * H, nq = Bd * Lq * H;
    return attn_cost(b, m, B, n_head, head_dim, p * (10 * (double)head_dim + 4),
                     (qkv16 ? H16 : F) * nqkv + ((dqkv ? F : 0) + (dqkv16 ? H16 : 0)) * nqkv +
                         (dout16 ? H16 : F) * nq + (out16 ? H16 : F) * nq +
                         F * Bd * (double)n_head * Lq,
                     (qkv16 ? 0 : 6 * nqkv) + (dout16 ? 0 : 6 * Bd * L * H));
}

/* Query i of Q sees T = P+i+1 cache rows: the forward's 4*head_dim + 3 per
 * pair and head. q read, out written; the cache rows (K and V) as the CUDA
 * backend's split reads them (cuda_attention.cu): each of its KF_DECODE_SPLITS
 * parts reads the union of the Q queries' parts once (a query's part s is
 * rows [s*n, s*n + n) of its T, n = ceil(T / KF_DECODE_SPLITS): the queries'
 * cuts differ, so neighbouring parts may read a row twice); and each of the
 * ceil(T / n) parts of a query and head writes a record of head_dim + 2
 * floats, which the combination reads. With a device length, P is its bound
 * (the bucket's longest cache) unless the caller knows the length (a
 * recorder passes the one it uploaded: record.c). */
kf_op_cost kernels_cost_attn_decode(kf_backend *b, float *out, const float *q, int64_t q_stride,
                                    const float *kcache, const float *vcache, int64_t B,
                                    int64_t cap, int64_t P, const int32_t *len, int64_t Q,
                                    int64_t n_head, int64_t head_dim) {
    double pairs = (double)B * (double)Q * ((double)P + ((double)Q + 1) / 2);
    double H = (double)(n_head * head_dim), Bd = (double)B, parts = 0, rows = 0;
    for (int64_t i = 0; i < Q; i++) {
        int64_t T = P + i + 1, n = (T + KF_DECODE_SPLITS - 1) / KF_DECODE_SPLITS;
        parts += (double)((T + n - 1) / n);
    }
    for (int64_t s = 0; s < KF_DECODE_SPLITS; s++) {
        int64_t j0 = INT64_MAX, j1 = 0;
        for (int64_t i = 0; i < Q; i++) {
            int64_t T = P + i + 1, n = (T + KF_DECODE_SPLITS - 1) / KF_DECODE_SPLITS;
            int64_t a = s * n, e = a + n < T ? a + n : T;
            if (a < e) j0 = a < j0 ? a : j0, j1 = e > j1 ? e : j1;
        }
        rows += j0 < j1 ? (double)(j1 - j0) : 0;
    }
    double scratch = 2 * Bd * (double)n_head * parts * (double)(head_dim + 2);
    return cost(b, KF_COST_ATTN, pairs * (double)n_head * (4 * (double)head_dim + 3),
                F * (2 * Bd * (double)Q * H + 2 * Bd * rows * H + scratch),
                "B=%lld P=%lld Q=%lld heads=%lld hd=%lld", (long long)B, (long long)P, (long long)Q,
                (long long)n_head, (long long)head_dim);
}

/* ---- pointwise: per element GELU 8 (its tanh or erf form, the
 * transcendental counted as 1), its derivative 12; add 1, scale 1, rounding 1 */

kf_op_cost kernels_cost_gelu_fwd(kf_backend *b, float *y, const float *x, int64_t n,
                                 kf_gelu_kind kind) {
    return cost(b, KF_COST_SIMT, 8 * (double)n, F * 2 * (double)n, "n=%lld %s", (long long)n,
                kind == KF_GELU_TANH ? "tanh" : "erf");
}
kf_op_cost kernels_cost_gelu_bwd(kf_backend *b, float *dx, const float *dy, const float *x,
                                 int64_t n, kf_gelu_kind kind) {
    return cost(b, KF_COST_SIMT, 12 * (double)n, F * 3 * (double)n, "n=%lld %s", (long long)n,
                kind == KF_GELU_TANH ? "tanh" : "erf");
}
kf_op_cost kernels_cost_add_inplace(kf_backend *b, float *y, const float *x, int64_t n) {
    return cost(b, KF_COST_SIMT, (double)n, F * 3 * (double)n, "n=%lld", (long long)n);
}
kf_op_cost kernels_cost_scale(kf_backend *b, float *x, float alpha, int64_t n) {
    return cost(b, KF_COST_SIMT, (double)n, F * 2 * (double)n, "n=%lld", (long long)n);
}
/* one value written per row */
kf_op_cost kernels_cost_fill_column(kf_backend *b, float *x, int64_t rows, int64_t cols,
                                    int64_t col, float value) {
    return cost(b, KF_COST_SIMT, 0, F * (double)rows, "%lldx%lld", (long long)rows,
                (long long)cols);
}
kf_op_cost kernels_cost_round_lowp(kf_backend *b, float *x, int64_t n) {
    return cost(b, KF_COST_SIMT, (double)n, F * 2 * (double)n, "n=%lld", (long long)n);
}

/* ---- row movement and embeddings: rows read and written, indices read */

kf_op_cost kernels_cost_gather_rows(kf_backend *b, float *dst, const float *src, const int32_t *idx,
                                    int64_t n, int64_t dim) {
    double e = (double)n * (double)dim;
    return cost(b, KF_COST_SIMT, 0, F * (2 * e + (double)n), "n=%lld dim=%lld", (long long)n,
                (long long)dim);
}
kf_op_cost kernels_cost_scatter_rows(kf_backend *b, float *dst, const float *src,
                                     const int32_t *idx, int64_t n, int64_t dim) {
    double e = (double)n * (double)dim;
    return cost(b, KF_COST_SIMT, 0, F * (2 * e + (double)n), "n=%lld dim=%lld", (long long)n,
                (long long)dim);
}
kf_op_cost kernels_cost_scatter_ids(kf_backend *b, int32_t *dst, const int32_t *src,
                                    const int32_t *idx, int64_t n) {
    return cost(b, KF_COST_SIMT, 0, F * 3 * (double)n, "n=%lld", (long long)n);
}
kf_op_cost kernels_cost_gather_ids(kf_backend *b, int32_t *dst, const int32_t *src,
                                   const int32_t *idx, int64_t n) {
    return cost(b, KF_COST_SIMT, 0, F * 3 * (double)n, "n=%lld", (long long)n);
}
kf_op_cost kernels_cost_embed_fwd(kf_backend *b, float *out, const int32_t *ids,
                                  const int32_t *row_idx, const float *table, int64_t n,
                                  int64_t dim) {
    double e = (double)n * (double)dim;
    return cost(b, KF_COST_SIMT, 0, F * (2 * e + (double)n * (row_idx ? 2 : 1)), "n=%lld dim=%lld",
                (long long)n, (long long)dim);
}
/* 1 add per element; dout rows read, the table rows they hit read and written */
kf_op_cost kernels_cost_embed_bwd(kf_backend *b, float *dtable, const float *dout,
                                  const int32_t *ids, const int32_t *row_idx, int64_t n,
                                  int64_t dim, int64_t vocab) {
    double e = (double)n * (double)dim;
    return cost(b, KF_COST_SIMT, e, F * (3 * e + (double)n * (row_idx ? 2 : 1)),
                "n=%lld dim=%lld V=%lld", (long long)n, (long long)dim, (long long)vocab);
}

/* 2H features per value (a product, a cos or sin: 2 each) from z and tau
 * (doubles), written as floats */
kf_op_cost kernels_cost_noise_features(kf_backend *b, float *out, const double *z,
                                       const double *tau, int64_t n, int64_t H, int64_t cycles) {
    double e = (double)n * 2 * (double)H;
    return cost(b, KF_COST_SIMT, 2 * e, F * e + D * 2 * (double)n, "n=%lld H=%lld", (long long)n,
                (long long)H);
}

/* ---- losses and decoding over logits [rows, V] */

/* Per logit: the row max 1, exp and sum 2, and with dlogits the gradient 2.
 * Logits read once, dlogits written, targets read, losses written. */
kf_op_cost kernels_cost_xent(kf_backend *b, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, int64_t rows, int64_t V,
                             const float *grad_scale) {
    double e = (double)rows * (double)V, r = (double)rows;
    return cost(b, KF_COST_SIMT, e * (dlogits ? 5 : 3),
                F * (e * (dlogits ? 2 : 1) + r * (losses ? 2 : 1)), "%lldx%lld%s", (long long)rows,
                (long long)V, dlogits ? " +grad" : "");
}
/* kernels/cuda/cuda_logits.cu's two passes: xent's row statistics (max and
 * sum, 3 per element, logits read), then per element the gradient (5, and
 * the weight, the bias sum) from the logits read again, written at 2 bytes;
 * losses, the statistics and the weights per row; dbias read and written */
kf_op_cost kernels_cost_xent16(kf_backend *b, float *losses, void *dlogits16, float *dbias,
                               const float *logits, const int32_t *targets, const float *row_w,
                               int64_t rows, int64_t V, const float *grad_scale, int64_t mask_col) {
    double e = (double)rows * (double)V, r = (double)rows;
    return cost(b, KF_COST_SIMT, e * (3 + 5 + (row_w ? 1 : 0) + (dbias ? 1 : 0)),
                (2 * F + H16) * e + F * r * (losses ? 5 : 4) + (row_w ? F * r : 0) +
                    (dbias ? 2 * F * (double)V : 0),
                "%lldx%lld%s%s", (long long)rows, (long long)V, dbias ? " dbias" : "",
                row_w ? " row_w" : "");
}
kf_op_cost kernels_cost_argmax(kf_backend *b, int32_t *ids, const float *logits, int64_t rows,
                               int64_t V) {
    double e = (double)rows * (double)V;
    return cost(b, KF_COST_SIMT, e, F * (e + (double)rows), "%lldx%lld", (long long)rows,
                (long long)V);
}
/* Per logit: scale, max, exp, sum, cumulative sum: 5. Logits read; tau and z
 * (doubles) read, ids written. */
kf_op_cost kernels_cost_sample_icdf(kf_backend *b, int32_t *ids, const float *logits,
                                    const double *tau, const double *z, int64_t rows, int64_t V) {
    double e = (double)rows * (double)V, r = (double)rows;
    return cost(b, KF_COST_SIMT, 5 * e, F * (e + r) + D * 2 * r, "%lldx%lld", (long long)rows,
                (long long)V);
}
kf_op_cost kernels_cost_icdf_bin(kf_backend *b, double *lo, double *hi, const float *logits,
                                 const double *tau, const int32_t *targets, int64_t rows,
                                 int64_t V) {
    double e = (double)rows * (double)V, r = (double)rows;
    return cost(b, KF_COST_SIMT, 5 * e, F * (e + r) + D * 3 * r, "%lldx%lld", (long long)rows,
                (long long)V);
}
/* one compare per history entry and row, the hit logits read and written */
kf_op_cost kernels_cost_freq_penalty(kf_backend *b, float *logits, const int32_t *hist,
                                     int64_t n_hist, int64_t rows, int64_t V, float penalty) {
    double e = (double)rows * (double)n_hist;
    return cost(b, KF_COST_SIMT, e, F * 3 * e, "%lldx%lld hist=%lld", (long long)rows, (long long)V,
                (long long)n_hist);
}

/* one add per row; losses and targets read, the accumulator read and written */
kf_op_cost kernels_cost_loss_sum(kf_backend *b, double *acc, const float *losses,
                                 const int32_t *targets, int64_t rows) {
    return cost(b, KF_COST_SIMT, (double)rows, 2 * F * (double)rows + 2 * D, "rows=%lld",
                (long long)rows);
}

/* ---- the decode-time output layer */

/* W and bias read, the packed form written */
kf_op_cost kernels_cost_head_pack(kf_backend *b, const float *W, const float *bias, int64_t V,
                                  int64_t H, int64_t mask_col, float mask_value) {
    double e = (double)V * (double)H + (bias ? (double)V : 0);
    return cost(b, KF_COST_SIMT, 0, F * 2 * e, "V=%lld H=%lld", (long long)V, (long long)H);
}
kf_op_cost kernels_cost_head_free(kf_backend *b, void *head) {
    return cost(b, KF_COST_NONE, 0, 0, "-");
}
/* 2*rows*V*H (+ rows*V for the argmax); W, bias and x read, logits (when
 * asked) and ids written */
kf_op_cost kernels_cost_head_fwd(kf_backend *b, float *logits, int32_t *ids, const float *x,
                                 const void *head, int64_t rows) {
    const kf_head_shape *s = head;
    double r = (double)rows, V = (double)s->V, H = (double)s->H;
    return cost(b, KF_COST_GEMM, 2 * r * V * H + (ids ? r * V : 0),
                F * (V * H + V + r * H + (logits ? r * V : 0) + (ids ? r : 0)),
                "rows=%lld V=%lld H=%lld", (long long)rows, (long long)s->V, (long long)s->H);
}

/* ---- decode-time linear layers */

/* W read, the packed form written */
kf_op_cost kernels_cost_linear_pack(kf_backend *b, const float *w, const void *w16, int64_t in,
                                    int64_t out) {
    return cost(b, KF_COST_SIMT, 0, F * 2 * (double)in * (double)out, "in=%lld out=%lld",
                (long long)in, (long long)out);
}
kf_op_cost kernels_cost_linear_pack_free(kf_backend *b, void *lin) {
    return cost(b, KF_COST_NONE, 0, 0, "-");
}
/* the linear_act it equals */
kf_op_cost kernels_cost_linear_packed_fwd(kf_backend *b, float *y, void *y16, float *pre,
                                          const float *x, const void *x16, const void *lin,
                                          const float *bias, int64_t rows, kf_act act, float beta) {
    const kf_linear_shape *s = lin;
    return kernels_cost_linear_act(b, y, y16, pre, x, x16, NULL, bias, rows, s->in, s->out, act,
                                   beta, s->w16 ? lin : NULL);
}

/* ---- reductions: 1 (sum, count) or 2 (sum of squares) per element; the
 * host waits for the result */

static kf_op_cost reduce_cost(kf_backend *b, double per, int64_t n) {
    kf_op_cost c = cost(b, KF_COST_SIMT, per * (double)n, F * (double)n, "n=%lld", (long long)n);
    c.host_sync = 1;
    return c;
}
kf_op_cost kernels_cost_sum(kf_backend *b, const float *x, int64_t n) {
    return reduce_cost(b, 1, n);
}
kf_op_cost kernels_cost_sumsq(kf_backend *b, const float *x, int64_t n) {
    return reduce_cost(b, 2, n);
}
kf_op_cost kernels_cost_sumsq_parts(kf_backend *b, double *parts, const float *x, int64_t n) {
    return reduce_cost(b, 2, n);
}
kf_op_cost kernels_cost_count_nonfinite(kf_backend *b, const float *x, int64_t n) {
    return reduce_cost(b, 1, n);
}

/* ---- optimiser */

/* With grads: sumsq's 2 per element and its read of them, and the parts
 * added in order; then a few double operations on ctl, on the device: no
 * host wait (the point of the op). */
kf_op_cost kernels_cost_grad_check(kf_backend *b, kf_grad_ctl *ctl, const float *grads, int64_t n,
                                   double clip) {
    double e = grads ? (double)n : 0;
    double np = grads ? (double)((n + KF_SUM_PART - 1) / KF_SUM_PART) : 0;
    return cost(b, KF_COST_SIMT, 2 * e + np, F * e + D * 2 * np + (double)sizeof *ctl, "n=%lld",
                (long long)(grads ? n : 0));
}

/* Per parameter: g scaled 1, m 3, v 4, the update 6 (sqrt, add eps, divide,
 * * lr, weight decay 2). params, m, v read and written, grads read. */
kf_op_cost kernels_cost_adamw(kf_backend *b, float *params, const float *grads, float *m, float *v,
                              int64_t n, float lr, float beta1, float beta2, float eps,
                              float weight_decay, int64_t step, float grad_scale,
                              const kf_grad_ctl *ctl) {
    return cost(b, KF_COST_SIMT, 14 * (double)n, F * 7 * (double)n, "n=%lld", (long long)n);
}
/* 3 per parameter; ema read and written, params read */
kf_op_cost kernels_cost_ema(kf_backend *b, float *ema, const float *params, int64_t n, float decay,
                            const kf_grad_ctl *ctl) {
    return cost(b, KF_COST_SIMT, 3 * (double)n, F * 3 * (double)n, "n=%lld", (long long)n);
}

/* the weights' 16-bit copy: each value read at 4 bytes, written at 2 */
kf_op_cost kernels_cost_copy_to16(kf_backend *b, void *dst16, const float *src, int64_t n) {
    return cost(b, KF_COST_SIMT, 0, (F + H16) * (double)n, "n=%lld", (long long)n);
}
