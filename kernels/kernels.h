/* kernels/kernels.h — the op interface every model computation goes through.
 *
 * The model (trainer/) is written once against this table of function
 * pointers; a backend fills it. kernels/cpu/ is the reference (fp32, its own
 * fixed-order GEMM, OpenMP, fp16/bf16 emulated by rounding); kernels/cuda/ runs the
 * same ops on a GPU and is tested op by op against the CPU backend. Both
 * backends can live in one process (that is how the CUDA tests compare them).
 *
 * Conventions
 *  - All pointers passed to ops are *device* pointers of the backend they are
 *    given to (host memory for the CPU backend), allocated with b->alloc.
 *    Moving data in and out uses b->upload / b->download.
 *  - Matrices are row-major. A Linear layer's weight is [out, in] (PyTorch
 *    layout, so checkpoints load under the reference key names).
 *  - Activations are fp32 buffers. In a 16-bit mode (KF_PREC_FP16: IEEE half;
 *    KF_PREC_BF16: bfloat16) a backend computes the ops a mixed-precision GPU
 *    step runs in 16 bits (GEMMs, attention) with 16-bit inputs/outputs and
 *    fp32 accumulation; the CPU backend emulates this by rounding those
 *    inputs and outputs to the format (round to nearest even). LayerNorm,
 *    softmax cross-entropy, the optimizer and all reductions stay fp32 (or
 *    fp64).
 *  - 16-bit copies. In a 16-bit mode an activation that only 16-bit
 *    consumers (GEMMs, attention) read can be kept as a 16-bit copy
 *    (arguments named x16, y16, qkv16, ...; void *): its values
 *    rounded to the mode's format (round to nearest even), 2 bytes each (IEEE
 *    half or bfloat16 bits), in a buffer from b->alloc. An op that writes one
 *    writes its fp32 output's values rounded (the fp32 output may then be
 *    NULL); an op that reads one in place of an fp32 input (then NULL) gives
 *    bitwise the results it gives on that input, since a GEMM (or the
 *    attention) rounds its operands to the same values. So the GPU converts
 *    an activation once, where it is made, instead of at every op that reads
 *    it. The weights too (w16, made by copy_to16): a weight's copy is given
 *    beside the fp32 weight, which the optimizer keeps. Never in fp32 mode.
 *  - "accumulate" arguments/names mean the op adds into its output (+=);
 *    otherwise outputs are overwritten.
 *  - Determinism: every op gives bitwise identical results for identical
 *    inputs, independent of the number of threads and of the other rows in
 *    the batch (no split reductions whose order depends on sizes, no
 *    floating-point atomics). Reductions over rows (bias/weight gradients,
 *    norms) use a fixed order. The CPU backend also gives the same bits at
 *    every SIMD level with FMA (docs/determinism.md).
 *  - Sizes are int64_t; row counts and dims are element counts, not bytes.
 */
#ifndef KF_KERNELS_H
#define KF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* common/error.h's recoverable error (kernels_create). Declared, not included:
 * the CUDA sources include this header from C++. */
typedef struct kf_err kf_err;

/* The part length of sumsq and sumsq_parts (in the op list below). */
#define KF_SUM_PART 4096

/* The parts the CUDA backend's attn_decode splits a query's keys into (a
 * block each, then combined in order); op_cost.c prices their scratch. */
#define KF_DECODE_SPLITS 16

/* An optimizer step's gradient check, kept on the device: grad_check writes
 * it from the gradient, adamw and ema read it by pointer, so the clip factor
 * and the skip decision need no host wait (the host reads it with the step's
 * loss, once, at the step's end). Its fields up to sumsq are the step's
 * factors, written by the host before the step's first op
 * (kernels_adamw_factors, the EMA's decay, the loss scale): the ops read
 * them here rather than from by-value arguments, so a step recorded as a
 * graph (graph_begin) takes each step's learning rate, bias correction,
 * decay and loss scale at its launch. */
typedef struct kf_grad_ctl {
    float step_size;   /* adamw: lr / (1 - beta1^step) */
    float bc2_sqrt;    /* adamw: sqrt(1 - beta2^step) */
    float wd_decay;    /* adamw: 1 - lr * weight_decay */
    float ema_decay;   /* ema's decay */
    double loss_scale; /* grad_check's: the loss scale the gradients carry */
    float xent_scale;  /* xent's grad_scale of the step's passes: loss_scale / its targets */
    double sumsq;      /* the gradient's sum of squares (loss-scaled) */
    double norm;       /* sqrt(sumsq) / loss_scale: the unscaled gradient's L2 norm */
    float grad_scale;  /* adamw's factor: the clip factor / loss_scale */
    int32_t skip;      /* 1: sumsq is not finite; adamw and ema change nothing */
} kf_grad_ctl;

/* The storage format of the ops that run in 16 bits (see Conventions). */
typedef enum { KF_PREC_FP32 = 0, KF_PREC_FP16 = 1, KF_PREC_BF16 = 2 } kf_precision;
typedef enum { KF_GELU_TANH = 0, KF_GELU_ERF = 1 } kf_gelu_kind;
/* The activation a linear layer's epilogue applies (linear_act). */
typedef enum { KF_ACT_NONE = 0, KF_ACT_GELU_TANH = 1, KF_ACT_GELU_ERF = 2 } kf_act;

/** Attention mask *structure* (never materialised).
 *
 * Each sample's sequence has L = n_ctx + n_groups * group tokens:
 *   rows [0, n_ctx)                         context tokens, causal among themselves;
 *   rows n_ctx + g*group + j (j < group)    member j of group g, which sees
 *                                           context rows 0..g (staircase) and
 *                                           members 0..j of its own group.
 * group == 0 (n_groups == 0) is plain causal attention (AR).
 * SingleForward(k) is group = k with n_groups = n_ctx; DoubleForward is
 * group = 2k where each group holds the k Future-1 then the k Future-2 tokens
 * (F2 sees all of F1 in its window, both causal inside: exactly "causal
 * within a group of 2k").
 * q_start > 0 computes only query rows [q_start, L) (keys still span the
 * whole sequence): DoubleForward reuses the context rows of round 1 this way.
 * valid_len (host array of B ints, or NULL) limits each sample's context:
 * keys at context rows >= valid_len[b] are never attended and query rows past
 * it produce zeros (padding in `pad` data). valid_len_d (NULL: none) holds
 * the same B ints in the backend's memory, uploaded by the caller with its
 * other inputs: a GPU backend reads it in place of uploading valid_len
 * itself, so the attention can be recorded in a graph (graph_begin).
 * bidir (a masked-diffusion model's attention) makes every context row r <
 * valid_len see all the valid context keys [0, valid_len), not [0, r];
 * only without groups (n_groups == 0).
 */
typedef struct kf_mask {
    int64_t n_ctx;
    int64_t group;
    int64_t n_groups;
    int64_t q_start;
    const int32_t *valid_len;
    const int32_t *valid_len_d;
    int bidir;
} kf_mask;

/** Number of tokens per sample described by a mask: n_ctx + n_groups*group. */
static inline int64_t kf_mask_len(const kf_mask *m) { return m->n_ctx + m->n_groups * m->group; }

/** The op list: X(ret, name, params, args) for every op of a backend, in
 * table order; args names params in order, so a wrapper can forward a call
 * (kernels/record.h). kf_backend below declares one function pointer per
 * entry; each backend declares and fills its implementations from it
 * (cpu_NAME in kernels/cpu/cpu_internal.h, cu_NAME in
 * kernels/cuda/cuda_internal.h, the recorder's in kernels/record.c), and
 * kernels/op_cost.h declares each op's FLOP and byte count from it, so an op
 * added here is a compile error until every backend implements it and its
 * cost is written. */
#define KF_BACKEND_OPS(X)                                                                          \
    /* ---- memory ---- */                                                                         \
    X(void *, alloc, (kf_backend * b, size_t bytes),                                               \
      (b, bytes)) /* zero-filled; dies on failure */                                               \
    X(void, free, (kf_backend * b, void *p), (b, p))                                               \
    X(void, upload, (kf_backend * b, void *dst, const void *src_host, size_t bytes),               \
      (b, dst, src_host, bytes))                                                                   \
    X(void, download, (kf_backend * b, void *dst_host, const void *src, size_t bytes),             \
      (b, dst_host, src, bytes))                                                                   \
    X(void, copy, (kf_backend * b, void *dst, const void *src, size_t bytes),                      \
      (b, dst, src, bytes))                                                                        \
    X(void, zero, (kf_backend * b, void *dst, size_t bytes), (b, dst, bytes))                      \
    X(void, sync, (kf_backend * b), (b))                                                           \
    X(void, set_precision, (kf_backend * b, kf_precision p), (b, p))                               \
    X(void, destroy, (kf_backend * b), (b))                                                        \
                                                                                                   \
    /* ---- dense algebra ----                                                                     \
     * C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [M,K]                          \
     * (A stored [K,M] when trans_a), op(B) is [K,N] (B stored [N,K] when trans_b). */             \
    X(void, matmul,                                                                                \
      (kf_backend * b, float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,  \
       int trans_a, int trans_b, float alpha, float beta),                                         \
      (b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta))                                        \
    /* Batched: `batch` independent matmuls, operands advanced by the given strides                \
     * (elements). */                                                                              \
    X(void, matmul_batched,                                                                        \
      (kf_backend * b, float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,  \
       int trans_a, int trans_b, float alpha, float beta, int64_t batch, int64_t stride_c,         \
       int64_t stride_a, int64_t stride_b),                                                        \
      (b, C, A, B, M, N, K, trans_a, trans_b, alpha, beta, batch, stride_c, stride_a, stride_b))   \
    /* A linear layer with its epilogue, one op so a backend can fuse it: with                     \
     * x [rows, in] and W [out, in], pre = matmul(x, W^T, beta: C = y) + bias                      \
     * (bias [out], NULL: none) and y = act(pre), [rows, out]; pre is stored only                  \
     * when act is not KF_ACT_NONE (else it may be NULL). beta != 0 (a layer                       \
     * added to y, the residual stream) needs KF_ACT_NONE and y. x16 (NULL:                        \
     * none) is x as a 16-bit copy, in place of x; y16 (NULL: none) gets y as                      \
     * one (y may then be NULL). w16 (NULL: none) is W as a 16-bit copy,                           \
     * read in place of converting W (W is still given: a backend may read                         \
     * either). Equal to matmul (rounded in a 16-bit mode), add_bias, then                         \
     * gelu_fwd. */                                                                                \
    X(void, linear_act,                                                                            \
      (kf_backend * b, float *y, void *y16, float *pre, const float *x, const void *x16,           \
       const float *w, const float *bias, int64_t rows, int64_t in, int64_t out, kf_act act,       \
       float beta, const void *w16),                                                               \
      (b, y, y16, pre, x, x16, w, bias, rows, in, out, act, beta, w16))                            \
    /* The gradient that reaches the pre-activation of the layer below W: with                     \
     * dy [rows, out], W [out, in] and that layer's pre [rows, in], dpre =                         \
     * act'(pre) * matmul(dy, W) and dbias[c] += sum_r dpre[r, c] (dbias NULL:                     \
     * skipped; the fp32 dpre summed). dpre16 (NULL: none) gets dpre as a                          \
     * 16-bit copy (dpre may then be NULL); w16 as in linear_act; dy16 (NULL:                      \
     * none) is dy as a 16-bit copy, in place of dy. Equal to matmul (beta                         \
     * 0), gelu_bwd, then bias_grad. */                                                            \
    X(void, linear_act_dgrad,                                                                      \
      (kf_backend * b, float *dpre, void *dpre16, float *dbias, const float *dy, const float *w,   \
       const float *pre, int64_t rows, int64_t in, int64_t out, kf_act act, const void *w16,       \
       const void *dy16),                                                                          \
      (b, dpre, dpre16, dbias, dy, w, pre, rows, in, out, act, w16, dy16))                         \
    /* The backward of a linear layer y = x W^T + bias, with x [rows, in], W                       \
     * [out, in] and dy [rows, out]: dw [out, in] += dy^T x, dbias[c] += sum_r                     \
     * dy[r, c] (NULL: skipped) and dx = dy W + dx_beta * dx (NULL: skipped).                      \
     * x16, dy16 (NULL: none) are x, dy as 16-bit copies, in place of x, dy                        \
     * (dy16 without dbias: its sum needs the fp32 dy); w16 as in linear_act.                      \
     * dx16 (NULL: none) gets dx as a 16-bit copy (dx_beta 0; dx may then be                       \
     * NULL). Equal to matmul (beta 1), bias_grad, then matmul (beta                               \
     * dx_beta); one op so a backend reads dy once for both products (a                            \
     * 16-bit mode converts it once, not twice). */                                                \
    X(void, linear_bwd,                                                                            \
      (kf_backend * b, float *dx, float *dw, float *dbias, const float *dy, const void *dy16,      \
       const float *x, const void *x16, const float *w, int64_t rows, int64_t in, int64_t out,     \
       float dx_beta, const void *w16, void *dx16),                                                \
      (b, dx, dw, dbias, dy, dy16, x, x16, w, rows, in, out, dx_beta, w16, dx16))                  \
    /* y[r, c] += bias[c] */                                                                       \
    X(void, add_bias, (kf_backend * b, float *y, const float *bias, int64_t rows, int64_t cols),   \
      (b, y, bias, rows, cols))                                                                    \
    /* dbias[c] += sum_r dy[r, c] (fixed order) */                                                 \
    X(void, bias_grad,                                                                             \
      (kf_backend * b, float *dbias, const float *dy, int64_t rows, int64_t cols),                 \
      (b, dbias, dy, rows, cols))                                                                  \
                                                                                                   \
    /* ---- normalisation ----                                                                     \
     * y = (x - mean) * rstd * w (+ bias if bias != NULL); mean/rstd [rows] saved for              \
     * backward. y16 (NULL: none) gets y as a 16-bit copy (y may then be NULL). */                 \
    X(void, layernorm_fwd,                                                                         \
      (kf_backend * b, float *y, void *y16, float *mean, float *rstd, const float *x,              \
       const float *w, const float *bias, int64_t rows, int64_t cols, float eps),                  \
      (b, y, y16, mean, rstd, x, w, bias, rows, cols, eps))                                        \
    /* dx += dL/dx; dw += dL/dw; dbias += dL/dbias (dbias ignored when NULL). dx16                 \
     * (NULL: none) gets dx, after the sum, as a 16-bit copy (the residual                         \
     * stream's gradient as the 16-bit GEMMs of linear_bwd and linear_act_dgrad                    \
     * read it: their dy16). */                                                                    \
    X(void, layernorm_bwd,                                                                         \
      (kf_backend * b, float *dx, float *dw, float *dbias, const float *dy, const float *x,        \
       const float *w, const float *mean, const float *rstd, int64_t rows, int64_t cols,           \
       void *dx16),                                                                                \
      (b, dx, dw, dbias, dy, x, w, mean, rstd, rows, cols, dx16))                                  \
                                                                                                   \
    /* ---- rotary embedding (rotate-half) on the q and k parts of qkv [B*L, 3*H] in place.        \
     * pos[L] (device int32) is the RoPE position of each row within a sample; H =                 \
     * n_head*head_dim.                                                                            \
     * Angles in double so backends agree bitwise: a = (double)pos * pow((double)base,             \
     * -(double)(2i)/head_dim), c = (float)cos(a), s = (float)sin(a); rotation in fp32.            \
     * qkv16 (NULL: none) also gets the result, q, k and v, as a 16-bit copy (the                  \
     * attention's operands). With qkv NULL, qkv16 is the input as well: its q and                 \
     * k are rotated in place (as floats, then rounded) and v stays. */                            \
    X(void, rope_fwd,                                                                              \
      (kf_backend * b, float *qkv, const int32_t *pos, int64_t B, int64_t L, int64_t n_head,       \
       int64_t head_dim, float base, void *qkv16),                                                 \
      (b, qkv, pos, B, L, n_head, head_dim, base, qkv16))                                          \
    /* Applies the inverse rotation to dq and dk inside dqkv (in place); dqkv16                    \
     * (NULL: none) also gets the result as a 16-bit copy (dqkv NULL: rotated in                   \
     * place, as in rope_fwd). */                                                                  \
    X(void, rope_bwd,                                                                              \
      (kf_backend * b, float *dqkv, const int32_t *pos, int64_t B, int64_t L, int64_t n_head,      \
       int64_t head_dim, float base, void *dqkv16),                                                \
      (b, dqkv, pos, B, L, n_head, head_dim, base, dqkv16))                                        \
                                                                                                   \
    /* ---- attention over a mask structure; scale 1/sqrt(head_dim).                               \
     * qkv [B*L, 3H] (q | k | v, head h at columns h*head_dim); out [B*L, H];                      \
     * lse [B, n_head, L] log-sum-exp saved for backward. Rows before m->q_start                   \
     * are neither read as queries nor written. Rows that see no key (context                      \
     * rows at or past valid_len) get out = 0 and lse = 0. In KF_PREC_FP16 mode                    \
     * q, k, v (and out, dout in the backward) and the outputs out / dqkv are                      \
     * rounded through half; lse stays fp32. qkv16 (NULL: none) is qkv as a                        \
     * 16-bit copy, in place of qkv; out16 (NULL: none) gets out as one (out                       \
     * may then be NULL; rows before q_start unwritten as well). */                                \
    X(void, attn_fwd,                                                                              \
      (kf_backend * b, float *out, float *lse, const float *qkv, const kf_mask *m, int64_t B,      \
       int64_t n_head, int64_t head_dim, const void *qkv16, void *out16),                          \
      (b, out, lse, qkv, m, B, n_head, head_dim, qkv16, out16))                                    \
    /* dqkv (overwritten) from dout; needs the forward's out and lse. dout16,                      \
     * out16, qkv16 (NULL: none) are dout, out, qkv as 16-bit copies, in their                     \
     * place. dqkv16 (NULL: none) gets dqkv as a 16-bit copy (dqkv may then be                     \
     * NULL): the values are rounded already, so the copy loses nothing and                        \
     * rope_bwd can rotate it in place. */                                                         \
    X(void, attn_bwd,                                                                              \
      (kf_backend * b, float *dqkv, const float *dout, const float *out, const float *lse,         \
       const float *qkv, const kf_mask *m, int64_t B, int64_t n_head, int64_t head_dim,            \
       const void *dout16, const void *out16, const void *qkv16, void *dqkv16),                    \
      (b, dqkv, dout, out, lse, qkv, m, B, n_head, head_dim, dout16, out16, qkv16, dqkv16))        \
    /* Decode-time attention: Q new tokens per sample whose K/V were already                       \
     * written to the caches at rows [P, P+Q). Query i sees cache rows [0, P+i]                    \
     * (causal over the concatenation). q [B*Q, H] (row stride q_stride                            \
     * elements); kcache/vcache [B, cap, H]; out [B*Q, H]. len (NULL: none) is                     \
     * the cache length as a device int32, read in place of P, which then only                     \
     * bounds it (len[0] <= P, P + Q <= cap) and sizes the launch: a graph                         \
     * recorded with one bound serves every length up to it (model_decode.c's                      \
     * buckets); past the bound the CUDA backend writes NaN. */                                    \
    X(void, attn_decode,                                                                           \
      (kf_backend * b, float *out, const float *q, int64_t q_stride, const float *kcache,          \
       const float *vcache, int64_t B, int64_t cap, int64_t P, const int32_t *len, int64_t Q,      \
       int64_t n_head, int64_t head_dim),                                                          \
      (b, out, q, q_stride, kcache, vcache, B, cap, P, len, Q, n_head, head_dim))                  \
                                                                                                   \
    /* ---- pointwise ---- */                                                                      \
    X(void, gelu_fwd, (kf_backend * b, float *y, const float *x, int64_t n, kf_gelu_kind kind),    \
      (b, y, x, n, kind))                                                                          \
    /* dx = dy * gelu'(x) (overwrite). */                                                          \
    X(void, gelu_bwd,                                                                              \
      (kf_backend * b, float *dx, const float *dy, const float *x, int64_t n, kf_gelu_kind kind),  \
      (b, dx, dy, x, n, kind))                                                                     \
    /* y = x + y */                                                                                \
    X(void, add_inplace, (kf_backend * b, float *y, const float *x, int64_t n), (b, y, x, n))      \
    /* x *= alpha */                                                                               \
    X(void, scale, (kf_backend * b, float *x, float alpha, int64_t n), (b, x, alpha, n))           \
    /* x[r, col] = value for every row (the mask token's logit). */                                \
    X(void, fill_column,                                                                           \
      (kf_backend * b, float *x, int64_t rows, int64_t cols, int64_t col, float value),            \
      (b, x, rows, cols, col, value))                                                              \
    /* Rounds x in place to the nearest value of b->precision's 16-bit format                      \
     * (fp16 or bf16 storage emulation); fp32 leaves x as it is. */                                \
    X(void, round_lowp, (kf_backend * b, float *x, int64_t n), (b, x, n))                          \
                                                                                                   \
    /* ---- row movement (rows of `dim` floats, moved as bits: a 16-bit copy's                     \
     * rows of 2 dim values move as rows of dim; idx are device int32) ---- */                     \
    /* dst[i] = src[idx[i]] for i < n */                                                           \
    X(void, gather_rows,                                                                           \
      (kf_backend * b, float *dst, const float *src, const int32_t *idx, int64_t n, int64_t dim),  \
      (b, dst, src, idx, n, dim))                                                                  \
    /* dst[idx[i]] = src[i] for i < n (idx distinct) */                                            \
    X(void, scatter_rows,                                                                          \
      (kf_backend * b, float *dst, const float *src, const int32_t *idx, int64_t n, int64_t dim),  \
      (b, dst, src, idx, n, dim))                                                                  \
    /* dst[idx[i]] = src[i] for i < n (idx distinct): token ids moved on the device (a             \
     * teacher's picks into the next pass's input, model.h model_input). */                        \
    X(void, scatter_ids,                                                                           \
      (kf_backend * b, int32_t * dst, const int32_t *src, const int32_t *idx, int64_t n),          \
      (b, dst, src, idx, n))                                                                       \
    /* dst[i] = idx[i] >= 0 ? src[idx[i]] : -1 for i < n: token ids gathered on the device (a      \
     * teacher's picks into the student's targets, -1 where a row is not counted). */              \
    X(void, gather_ids,                                                                            \
      (kf_backend * b, int32_t * dst, const int32_t *src, const int32_t *idx, int64_t n),          \
      (b, dst, src, idx, n))                                                                       \
                                                                                                   \
    /* ---- embedding ----                                                                         \
     * out[row_idx[i]] = table[ids[i]] for i < n (row_idx NULL: row i). */                         \
    X(void, embed_fwd,                                                                             \
      (kf_backend * b, float *out, const int32_t *ids, const int32_t *row_idx, const float *table, \
       int64_t n, int64_t dim),                                                                    \
      (b, out, ids, row_idx, table, n, dim))                                                       \
    /* dtable[ids[i]] += dout[row_idx[i]]: deterministic (fixed order per table row). */           \
    X(void, embed_bwd,                                                                             \
      (kf_backend * b, float *dtable, const float *dout, const int32_t *ids,                       \
       const int32_t *row_idx, int64_t n, int64_t dim, int64_t vocab),                             \
      (b, dtable, dout, ids, row_idx, n, dim, vocab))                                              \
                                                                                                   \
    /* Sinusoidal noise features, computed in float64 (docs/architecture.md "Reference model"):    \
     * out[r] = [cos(z*g), sin(z*g), cos(tau*f), sin(tau*f)], half = H/2 of each, so out is        \
     * [n, 2H]; f_i = kf_noise_freq(i, half, 0) = 2*pi*10000^(-i/half) (the release's),            \
     * g_i = kf_noise_freq(i, half, cycles) (kernels/noise_freq.h; cycles 0: g = f).               \
     * z[n], tau[n] are device doubles. */                                                         \
    X(void, noise_features,                                                                        \
      (kf_backend * b, float *out, const double *z, const double *tau, int64_t n, int64_t H,       \
       int64_t cycles),                                                                            \
      (b, out, z, tau, n, H, cycles))                                                              \
                                                                                                   \
    /* ---- losses and decoding over logits [rows, V] ----                                         \
     * Softmax cross-entropy. targets < 0 are ignored (loss 0, grad 0).                            \
     * losses[r] (may be NULL) gets each row's loss; when dlogits != NULL it                       \
     * gets grad_scale * (softmax - onehot) (may alias logits), grad_scale a device                \
     * float (NULL: 1) read when the op runs (a recorded step's factor, kf_grad_ctl). */           \
    X(void, xent,                                                                                  \
      (kf_backend * b, float *losses, float *dlogits, const float *logits, const int32_t *targets, \
       int64_t rows, int64_t V, const float *grad_scale),                                          \
      (b, losses, dlogits, logits, targets, rows, V, grad_scale))                                  \
    /* ids[r] = first index of the row maximum. */                                                 \
    X(void, argmax, (kf_backend * b, int32_t * ids, const float *logits, int64_t rows, int64_t V), \
      (b, ids, logits, rows, V))                                                                   \
    /* Inverse-CDF sampling in float64: p = softmax(logits[r] / tau[r]); ids[r] =                  \
     * first v with cumsum(p)[v] >= z[r] (lower bound, id order); when the sum                     \
     * falls short of z (rounding), the last v with p > 0. A token with p = 0 is                   \
     * never returned (z <= 0 gives the first v with p > 0). tau, z device doubles. */             \
    X(void, sample_icdf,                                                                           \
      (kf_backend * b, int32_t * ids, const float *logits, const double *tau, const double *z,     \
       int64_t rows, int64_t V),                                                                   \
      (b, ids, logits, tau, z, rows, V))                                                           \
    /* CDF bin of a given token in float64: lo[r] = sum_{v < t} p_v, hi[r] = lo[r] + p_t           \
     * with p = softmax(logits[r] / tau[r]) (noise-inversion supervision). */                      \
    X(void, icdf_bin,                                                                              \
      (kf_backend * b, double *lo, double *hi, const float *logits, const double *tau,             \
       const int32_t *targets, int64_t rows, int64_t V),                                           \
      (b, lo, hi, logits, tau, targets, rows, V))                                                  \
    /* logits[r, v] -= penalty * (number of j < n_hist with hist[j*rows + r] == v),                \
     * one subtraction per distinct v; history ids outside [0, V) are ignored. hist is             \
     * position-major, as a sampler writes it: position j's ids of every row at j*rows, so a       \
     * decoder's argmax can append to it on the device. */                                         \
    X(void, freq_penalty,                                                                          \
      (kf_backend * b, float *logits, const int32_t *hist, int64_t n_hist, int64_t rows,           \
       int64_t V, float penalty),                                                                  \
      (b, logits, hist, n_hist, rows, V, penalty))                                                 \
    /* acc[0] += the sum, in row order in double from 0, of losses[r] over the                     \
     * rows with targets[r] >= 0 (acc a device double): a step's loss stays on                     \
     * the device until the host must print it. */                                                 \
    X(void, loss_sum,                                                                              \
      (kf_backend * b, double *acc, const float *losses, const int32_t *targets, int64_t rows),    \
      (b, acc, losses, targets, rows))                                                             \
                                                                                                   \
    /* ---- the decode-time output layer ----                                                      \
     * Decoding applies one [V, H] output layer to a few rows per step, where a                    \
     * GEMM library re-packs all of W on every call. head_pack makes the                           \
     * layer's backend-specific form once from W [V, H] and bias [V] (NULL:                        \
     * none), with logit mask_col (-1: none) fixed to mask_value; it reflects                      \
     * W and bias as they are at the call. Free it with head_free. */                              \
    X(void *, head_pack,                                                                           \
      (kf_backend * b, const float *W, const float *bias, int64_t V, int64_t H, int64_t mask_col,  \
       float mask_value),                                                                          \
      (b, W, bias, V, H, mask_col, mask_value))                                                    \
    X(void, head_free, (kf_backend * b, void *head), (b, head))                                    \
    /* For rows x [rows, H]: logits [rows, V] = x W^T + bias (when logits !=                       \
     * NULL) and ids[r] = first index of the row maximum of those logits (when                     \
     * ids != NULL; an argmax alone need not materialise the logits). A row's                      \
     * logits do not depend on the other rows (batch invariant). */                                \
    X(void, head_fwd,                                                                              \
      (kf_backend * b, float *logits, int32_t *ids, const float *x, const void *head,              \
       int64_t rows),                                                                              \
      (b, logits, ids, x, head, rows))                                                             \
                                                                                                   \
    /* ---- decode-time linear layers ----                                                         \
     * Decoding runs each [out, in] weight on a few rows per step, where a                         \
     * GEMM packs all of W again on every call. linear_pack makes W's                              \
     * backend-specific form once, from W and its 16-bit copy w16 (NULL: none;                     \
     * as in linear_act) at the backend's precision; a backend may keep                            \
     * pointers to them, so both stay allocated and unchanged while the form                       \
     * is used. Free it with linear_pack_free. */                                                  \
    X(void *, linear_pack,                                                                         \
      (kf_backend * b, const float *w, const void *w16, int64_t in, int64_t out),                  \
      (b, w, w16, in, out))                                                                        \
    X(void, linear_pack_free, (kf_backend * b, void *lin), (b, lin))                               \
    /* linear_act through a packed W (lin): bitwise linear_act(b, y, y16, pre, x,                  \
     * x16, W, bias, rows, in, out, act, beta, w16), whatever the rows. */                         \
    X(void, linear_packed_fwd,                                                                     \
      (kf_backend * b, float *y, void *y16, float *pre, const float *x, const void *x16,           \
       const void *lin, const float *bias, int64_t rows, kf_act act, float beta),                  \
      (b, y, y16, pre, x, x16, lin, bias, rows, act, beta))                                        \
                                                                                                   \
    /* ---- reductions (results returned to the host; fixed order) ----                            \
     * sumsq is the sum, in order, of the sums of squares of consecutive                           \
     * KF_SUM_PART-element parts of x; sumsq_parts returns those parts                             \
     * (parts[i], host memory, ceil(n / KF_SUM_PART) of them, for                                  \
     * x[i * KF_SUM_PART, ...)), so a buffer cut at multiples of KF_SUM_PART                       \
     * gives piece by piece the parts of the whole: ZeRO-1's ranks add them                        \
     * into the norm a single buffer would have (trainer/train/dist.h). */                         \
    X(double, sum, (kf_backend * b, const float *x, int64_t n), (b, x, n))                         \
    X(double, sumsq, (kf_backend * b, const float *x, int64_t n), (b, x, n))                       \
    X(void, sumsq_parts, (kf_backend * b, double *parts, const float *x, int64_t n),               \
      (b, parts, x, n))                                                                            \
    X(int64_t, count_nonfinite, (kf_backend * b, const float *x, int64_t n), (b, x, n))            \
                                                                                                   \
    /* ---- optimiser over one flat parameter buffer (one launch) ---- */                          \
    /* The step's gradient check into ctl (device): ctl->sumsq = sumsq(grads,                      \
     * n) when grads != NULL (else ctl->sumsq stays as uploaded: ZeRO-1's                          \
     * dist_sumsq); then, in double, with loss_scale = ctl->loss_scale (the                        \
     * host's, written before the step), norm = sqrt(sumsq) / loss_scale, skip =                   \
     * !isfinite(sumsq), grad_scale = (float)(c / loss_scale) with c = clip /                      \
     * norm when clip > 0 and norm > clip, else 1 (trainer/train/optim.h). */                      \
    X(void, grad_check,                                                                            \
      (kf_backend * b, kf_grad_ctl * ctl, const float *grads, int64_t n, double clip),             \
      (b, ctl, grads, n, clip))                                                                    \
    /* g_eff = grads * grad_scale (unscale + clip); m,v AdamW moments; step is                     \
     * 1-based for bias correction; decoupled weight decay. ctl (device, from                      \
     * grad_check; NULL: none): when ctl->skip nothing changes, else                               \
     * ctl->grad_scale replaces grad_scale and ctl's step factors those of                         \
     * lr, weight_decay and step (kernels_adamw_factors). */                                       \
    X(void, adamw,                                                                                 \
      (kf_backend * b, float *params, const float *grads, float *m, float *v, int64_t n, float lr, \
       float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale,    \
       const kf_grad_ctl *ctl),                                                                    \
      (b, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale, ctl))     \
    /* ema = decay * ema + (1 - decay) * params, unless ctl (device, may be                        \
     * NULL) says skip; ctl->ema_decay replaces decay */                                           \
    X(void, ema,                                                                                   \
      (kf_backend * b, float *ema, const float *params, int64_t n, float decay,                    \
       const kf_grad_ctl *ctl),                                                                    \
      (b, ema, params, n, decay, ctl))                                                             \
                                                                                                   \
    /* dst16 = src as a 16-bit copy (Conventions) in b->precision's format, n                      \
     * values: the weights' copy the GEMMs read (w16), made once per step. */                      \
    X(void, copy_to16, (kf_backend * b, void *dst16, const float *src, int64_t n),                 \
      (b, dst16, src, n))                                                                          \
    /* xent's losses and gradient d = grad_scale * (softmax - onehot) made for                     \
     * the output layer's backward in a 16-bit mode: each row of d times                           \
     * row_w[r] (device floats, NULL: none), column mask_col (-1: none) zero,                      \
     * written only as the 16-bit copy dlogits16, and dbias[c] += sum_r d[r, c]                    \
     * (NULL: skipped; the fp32 d summed in bias_grad's order). Bitwise xent,                      \
     * scale per row, fill_column, then linear_bwd's dy16 and bias gradient:                       \
     * the fp32 dlogits are never stored. */                                                       \
    X(void, xent16,                                                                                \
      (kf_backend * b, float *losses, void *dlogits16, float *dbias, const float *logits,          \
       const int32_t *targets, const float *row_w, int64_t rows, int64_t V,                        \
       const float *grad_scale, int64_t mask_col),                                                 \
      (b, losses, dlogits16, dbias, logits, targets, row_w, rows, V, grad_scale, mask_col))        \
                                                                                                   \
    /* ---- graphs: a fixed sequence of ops recorded once and replayed ----                        \
     * graph_begin starts recording the ops called on b until graph_end, which                     \
     * runs them once and returns a handle for graph_launch, or NULL when b                        \
     * does not record (the CPU backend and the recorder run each op as it is                      \
     * called; the CUDA backend with KF_CUDA_GRAPHS=0): the caller then calls                      \
     * the ops itself again next time. Either way the ops have run once when                       \
     * graph_end returns. graph_launch runs them again with the arguments they                     \
     * were called with: the same device addresses and sizes, reading whatever                     \
     * those buffers hold at the launch — so inputs are uploaded into the same                   \
     * buffers before it, outputs read from them after. Between begin and end                      \
     * only device work is allowed: no alloc, free, upload, download, sync or                      \
     * host-returned reduction (the CUDA backend dies on one), and the ops'                        \
     * scratch must already be large enough (run them once before recording).                      \
     * graph_free releases a handle (NULL: nothing). */                                            \
    X(void, graph_begin, (kf_backend * b), (b))                                                    \
    X(void *, graph_end, (kf_backend * b), (b))                                                    \
    X(void, graph_launch, (kf_backend * b, void *graph), (b, graph))                               \
    X(void, graph_free, (kf_backend * b, void *graph), (b, graph))

typedef struct kf_backend kf_backend;

struct kf_backend {
    const char *name;       /* "cpu" or "cuda" */
    kf_precision precision; /* set with set_precision */
    int batch_invariant;    /* 1: fixed tilings (teacher passes); the CPU backend's default
                               (its fixed-order GEMM) unless KF_CPU_GEMM=openblas */
    void *impl;             /* backend private state */

    /* the ops: one function pointer per KF_BACKEND_OPS entry */
#define KF_OP_FIELD(ret, name, params, args) ret(*name) params;
    KF_BACKEND_OPS(KF_OP_FIELD)
#undef KF_OP_FIELD
};

/** AdamW's step factors of update `step` (1-based) into ctl's step_size,
 *  bc2_sqrt and wd_decay, computed on the host (bias corrections in double):
 *  what adamw computes from its arguments, and reads from ctl when given one. */
void kernels_adamw_factors(kf_grad_ctl *ctl, float lr, float beta1, float beta2, float weight_decay,
                           int64_t step);

/** The precision's name: "fp32", "fp16" or "bf16". */
const char *kernels_precision_name(kf_precision p);

/** Creates the CPU reference backend (fp32, precision KF_PREC_FP32).
 *  Threads come from OpenMP (OMP_NUM_THREADS); results do not depend on it. */
kf_backend *kernels_cpu_create(void);

/** Creates the CUDA backend on the given device, or returns NULL with a
 *  message in err_msg (size err_len) when the build has no CUDA or no GPU. */
kf_backend *kernels_cuda_create(int device, char *err_msg, size_t err_len);

/** Creates a backend by name ("cpu", "cuda", "auto": cuda when available),
 *  the names users give to --backend. The recorder of kernels/record.h,
 *  which can compute nothing, is never one of them: kernels_record_create.
 *  Returns NULL with err set when the name is unknown or the named backend is
 *  unavailable (a build without CUDA, no GPU). */
kf_backend *kernels_create(const char *name, kf_err *err);

#endif
