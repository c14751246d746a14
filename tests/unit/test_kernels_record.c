/* tests/unit/test_kernels_record.c — the recording backend and the roofline.
 *
 *  - a dry GEMM records exactly 2*M*N*K FLOPs and its operands' bytes, and
 *    in fp16 mode the bytes of the CUDA backend's conversion passes;
 *  - the linear ops' epilogue: a second pass over the fp32 product outside
 *    batch-invariant mode, none inside (the fixed-tiling kernel's own);
 *  - dry memory: distinct fake addresses with their sizes, downloads of
 *    zeros, reductions of 0;
 *  - attn_decode with a device length is priced at the length uploaded
 *    there (dry) or held there (over the CPU backend), not at its bound,
 *    with the split's scratch;
 *  - kernels_mask_pairs agrees with the pairs the CPU attention scores;
 *  - a tiny AR step run dry records the FLOPs derived here by hand from the
 *    layer shapes (every linear layer 3 products of 2*rows*in*out, attention
 *    (4*hd+3) and (10*hd+4) per pair and head);
 *  - a dry step (AR and self-forcing) issues exactly the ops, with the same
 *    shapes, as the same step on the CPU backend, and the recorder over the
 *    CPU backend gives the CPU's bits (its calls forward every argument);
 *  - a timed recorder measures the forwarded ops;
 *  - the roofline time of an op on a device.
 */
#include <string.h>

#include "bench/roofline/roofline.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/record.h"
#include "tests/test.h"

static const kf_op_rec *last_op(kf_backend *b) {
    int64_t n;
    const kf_op_rec *r = kernels_record_ops(b, &n);
    return n ? &r[n - 1] : NULL;
}

static void test_gemm(void) {
    kf_backend *b = kernels_record_create(NULL, 0);
    int64_t M = 3, N = 5, K = 7;
    float *A = b->alloc(b, (size_t)(M * K) * 4), *B = b->alloc(b, (size_t)(K * N) * 4);
    float *C = b->alloc(b, (size_t)(M * N) * 4);
    kernels_record_clear(b);
    b->matmul(b, C, A, B, M, N, K, 0, 1, 1.0f, 0.0f);
    const kf_op_rec *r = last_op(b);
    T_EQ_STR(r->op, "matmul", "dry matmul is recorded");
    T_NEAR(r->cost.flops, 2.0 * 3 * 5 * 7, 0, "matmul FLOPs");
    T_NEAR(r->cost.bytes, 4.0 * (3 * 7 + 7 * 5 + 3 * 5), 0, "matmul bytes, beta 0");
    T_EQ_STR(r->cost.shape, "M=3 N=5 K=7 tb", "matmul shape");
    T_EQ_INT(r->cost.unit, KF_COST_GEMM, "matmul unit");
    b->set_precision(b, KF_PREC_FP16);
    b->matmul(b, C, A, B, M, N, K, 1, 0, 1.0f, 1.0f);
    r = last_op(b);
    T_NEAR(r->cost.bytes, 4.0 * (3 * 7 + 7 * 5 + 2 * 3 * 5), 0, "matmul bytes, beta 1: C read too");
    T_EQ_INT(r->cost.lowp, 1, "fp16 mode is recorded");
    /* cuBLAS path: A and B converted (4 B read, 2 written), C rounded (8 B) */
    T_NEAR(r->cost.convert_bytes, 6.0 * (3 * 7 + 7 * 5) + 8.0 * 3 * 5, 0,
           "fp16 GEMM's conversion passes outside batch-invariant mode");
    b->batch_invariant = 1;
    b->matmul(b, C, A, B, M, N, K, 1, 0, 1.0f, 1.0f);
    T_NEAR(last_op(b)->cost.convert_bytes, 0, 0, "batch-invariant fp16 GEMM: no conversion pass");
    /* its fixed-tiling kernel runs on the tensor units in fp16, the fp32 units in fp32 */
    T_EQ_INT(last_op(b)->cost.unit, KF_COST_GEMM, "batch-invariant fp16 GEMM unit");
    b->linear_act(b, C, NULL, NULL, A, NULL, B, NULL, M, K, N, KF_ACT_NONE, 0.0f, NULL);
    T_EQ_INT(last_op(b)->cost.unit, KF_COST_GEMM, "batch-invariant fp16 linear unit");
    b->set_precision(b, KF_PREC_FP32);
    b->matmul(b, C, A, B, M, N, K, 1, 0, 1.0f, 1.0f);
    T_EQ_INT(last_op(b)->cost.unit, KF_COST_SIMT, "batch-invariant fp32 GEMM unit");
    b->batch_invariant = 0;
    b->matmul_batched(b, C, A, B, M, N, K, 0, 0, 1.0f, 0.0f, 4, 0, 0, 0);
    T_NEAR(last_op(b)->cost.flops, 4 * 2.0 * 3 * 5 * 7, 0, "batched matmul FLOPs");
    int64_t n;
    kernels_record_ops(b, &n);
    T_EQ_INT(n, 8, "calls recorded since the clear (set_precision included)");
    b->destroy(b);
}

/* linear_bwd: both products and the bias sums; in fp16 outside
 * batch-invariant mode dy is converted once for both products. */
static void test_linear_bwd(void) {
    kf_backend *b = kernels_record_create(NULL, 0);
    int64_t R = 3, in = 5, out = 7;
    float *dy = b->alloc(b, (size_t)(R * out) * 4), *x = b->alloc(b, (size_t)(R * in) * 4);
    float *w = b->alloc(b, (size_t)(out * in) * 4), *dw = b->alloc(b, (size_t)(out * in) * 4);
    float *db = b->alloc(b, (size_t)out * 4), *dx = b->alloc(b, (size_t)(R * in) * 4);
    b->linear_bwd(b, dx, dw, db, dy, NULL, x, NULL, w, R, in, out, 0.0f, NULL, NULL);
    const kf_op_rec *r = last_op(b);
    T_EQ_STR(r->op, "linear_bwd", "dry linear_bwd is recorded");
    T_NEAR(r->cost.flops, 2 * 2.0 * 3 * 5 * 7 + 3 * 7, 0, "linear_bwd FLOPs: two products, bias");
    /* fp32: dy read by each of the three passes; x, W read; dW, dbias read
     * and written; dx written */
    T_NEAR(r->cost.bytes, 4.0 * (3 * 3 * 7 + 3 * 5 + 7 * 5 + 2 * 7 * 5 + 2 * 7 + 3 * 5), 0,
           "linear_bwd bytes, fp32");
    T_NEAR(r->cost.convert_bytes, 0, 0, "fp32: no conversion pass");
    T_EQ_STR(r->cost.shape, "M=3 N=5 K=7 dbias dx", "linear_bwd shape");
    b->set_precision(b, KF_PREC_FP16);
    b->linear_bwd(b, dx, dw, db, dy, NULL, x, NULL, w, R, in, out, 1.0f, NULL, NULL);
    r = last_op(b);
    T_NEAR(r->cost.bytes, 4.0 * (3 * 7 + 3 * 5 + 7 * 5 + 2 * 7 * 5 + 2 * 7 + 2 * 3 * 5), 0,
           "linear_bwd bytes, fp16: dy read once, dx accumulated");
    /* dy, x and W converted once each (6 B), dW and dx rounded (8 B) */
    T_NEAR(r->cost.convert_bytes, 6.0 * (3 * 7 + 3 * 5 + 7 * 5) + 8.0 * (7 * 5 + 3 * 5), 0,
           "linear_bwd fp16: dy converted once for both products");
    b->linear_bwd(b, NULL, dw, NULL, dy, NULL, x, NULL, w, R, in, out, 0.0f, NULL, NULL);
    T_NEAR(last_op(b)->cost.convert_bytes, 6.0 * (3 * 7 + 3 * 5) + 8.0 * 7 * 5, 0,
           "linear_bwd fp16 without dx: dy and x converted, dW rounded");
    b->destroy(b);
}

/* The linear ops' epilogue: in fp32 outside batch-invariant mode a second
 * pass reads and writes the fp32 product (8 B a value); in batch-invariant
 * mode the fixed-tiling kernel finishes it in its own epilogue (fp32 and
 * bf16 alike), and only linear_act_dgrad's bias gradient reads the fp32
 * dpre again (4 B; 8 with dpre in scratch, not asked for). */
static void test_linear_epilogue(void) {
    kf_backend *b = kernels_record_create(NULL, 0);
    int64_t R = 3, in = 5, out = 7;
    float *x = b->alloc(b, (size_t)(R * in) * 4), *w = b->alloc(b, (size_t)(out * in) * 4);
    float *y = b->alloc(b, (size_t)(R * out) * 4), *pre = b->alloc(b, (size_t)(R * out) * 4);
    float *bias = b->alloc(b, (size_t)out * 4), *db = b->alloc(b, (size_t)in * 4);
    float *dy = b->alloc(b, (size_t)(R * out) * 4), *dpre = b->alloc(b, (size_t)(R * in) * 4);
    void *x16 = b->alloc(b, (size_t)(R * in) * 2), *w16 = b->alloc(b, (size_t)(out * in) * 2),
         *y16 = b->alloc(b, (size_t)(R * out) * 2), *dp16 = b->alloc(b, (size_t)(R * in) * 2);
    /* x, W read; y and pre written; the bias read */
    double act = 4.0 * (R * in + out * in + 2 * R * out + out);
    /* dy, W, pre read; dpre written; dbias read and written */
    double dgrad = 4.0 * (R * out + out * in + 2 * R * in + 2 * in);
    for (int inv = 0; inv < 2; inv++) {
        b->batch_invariant = inv;
        b->linear_act(b, y, NULL, pre, x, NULL, w, bias, R, in, out, KF_ACT_GELU_TANH, 0.0f, NULL);
        T_NEAR(last_op(b)->cost.bytes, act + (inv ? 0 : 8.0 * R * out), 0,
               "fp32 linear_act bytes%s", inv ? ", batch-invariant: no second pass" : "");
        b->linear_act_dgrad(b, dpre, NULL, db, dy, w, pre, R, in, out, KF_ACT_GELU_TANH, NULL,
                            NULL);
        T_NEAR(last_op(b)->cost.bytes, dgrad + (inv ? 4.0 : 8.0) * R * in, 0,
               "fp32 linear_act_dgrad bytes%s",
               inv ? ", batch-invariant: dpre read for dbias" : "");
    }
    b->set_precision(b, KF_PREC_BF16);
    /* the teacher's qkv: copies read and written, no pass */
    b->linear_act(b, NULL, y16, NULL, NULL, x16, w, bias, R, in, out, KF_ACT_NONE, 0.0f, w16);
    T_NEAR(last_op(b)->cost.bytes, 2.0 * (R * in + out * in + R * out) + 4.0 * out, 0,
           "batch-invariant bf16 linear_act x16 w16 y16 bytes: no second pass");
    b->linear_act_dgrad(b, NULL, dp16, db, dy, w, pre, R, in, out, KF_ACT_GELU_TANH, NULL, NULL);
    T_NEAR(last_op(b)->cost.bytes,
           4.0 * (R * out + out * in + R * in + 2 * in) + 2.0 * R * in + 8.0 * R * in, 0,
           "batch-invariant bf16 linear_act_dgrad dpre16 bytes: dpre in scratch for dbias");
    b->linear_act_dgrad(b, dpre, NULL, NULL, dy, w, pre, R, in, out, KF_ACT_GELU_TANH, NULL, NULL);
    T_NEAR(last_op(b)->cost.bytes, 4.0 * (R * out + out * in + 2 * R * in), 0,
           "batch-invariant bf16 linear_act_dgrad bytes without dbias: no pass");
    b->destroy(b);
}

static void test_dry_memory(void) {
    kf_backend *b = kernels_record_create(NULL, 0);
    T_EQ_STR(b->name, "dry", "kernels_record_create(NULL, 0)");
    /* 3 GB: nothing is held */
    char *p = b->alloc(b, (size_t)3 << 30), *q = b->alloc(b, 100);
    T_CHECK(q >= p + ((size_t)3 << 30), "allocations do not overlap");
    T_EQ_INT(kernels_record_live_bytes(b), ((int64_t)3 << 30) + 100, "live bytes");
    b->free(b, p);
    T_EQ_INT(kernels_record_live_bytes(b), 100, "live bytes after a free");
    T_EQ_INT(kernels_record_peak_bytes(b), ((int64_t)3 << 30) + 100, "peak bytes");
    float host[4] = {1, 2, 3, 4};
    b->download(b, host, q, sizeof host);
    T_NEAR(host[0] + host[1] + host[2] + host[3], 0, 0, "a dry download gives zeros");
    T_NEAR(b->sumsq(b, (float *)q, 25), 0, 0, "a dry sumsq is 0");
    double parts[2] = {1, 1};
    b->sumsq_parts(b, parts, (float *)q, KF_SUM_PART + 1);
    T_NEAR(parts[0] + parts[1], 0, 0, "a dry sumsq_parts writes zeros");
    T_EQ_INT(b->count_nonfinite(b, (float *)q, 25), 0, "a dry count_nonfinite is 0");
    b->free(b, q);
    b->destroy(b);
}

/* attn_decode's pricing: at the cache length the recorder saw uploaded (dry)
 * or reads back (over a backend), not at the launch's bound, with the key
 * split's records written and read. */
static void test_decode_len(void) {
    int64_t B = 2, nh = 2, hd = 4, H = nh * hd, cap = 64, bound = 40, Q = 2, n = 20;
    /* per query T = n+i+1 rows (21, 22): parts of ceil(T / 16) = 2 rows, 11 of
     * each; q read, out written, K and V of n+Q rows, 2 x 2 x 11 records of
     * hd + 2 floats per sample and head written and read */
    double want = 4.0 * (double)(2 * B * Q * H + 2 * B * (n + Q) * H + 2 * B * nh * 22 * (hd + 2));
    for (int over_cpu = 0; over_cpu < 2; over_cpu++) {
        kf_backend *b = kernels_record_create(over_cpu ? kernels_cpu_create() : NULL, 0);
        float *q = b->alloc(b, (size_t)(B * Q * H) * 4),
              *out = b->alloc(b, (size_t)(B * Q * H) * 4);
        float *kc = b->alloc(b, (size_t)(B * cap * H) * 4),
              *vc = b->alloc(b, (size_t)(B * cap * H) * 4);
        int32_t *len = b->alloc(b, sizeof(int32_t)), *other = b->alloc(b, sizeof(int32_t));
        int32_t nv = (int32_t)n, ov = 3;
        b->zero(b, q, (size_t)(B * Q * H) * 4);
        b->zero(b, kc, (size_t)(B * cap * H) * 4);
        b->zero(b, vc, (size_t)(B * cap * H) * 4);
        b->upload(b, len, &nv, sizeof nv);
        b->upload(b, other, &ov, sizeof ov); /* a later upload elsewhere */
        b->attn_decode(b, out, q, H, kc, vc, B, cap, bound, len, Q, nh, hd);
        T_NEAR(last_op(b)->cost.bytes, want, 0, "%s: attn_decode priced at the device length %lld",
               over_cpu ? "over the CPU" : "dry", (long long)n);
        b->attn_decode(b, out, q, H, kc, vc, B, cap, n, NULL, Q, nh, hd);
        T_NEAR(last_op(b)->cost.bytes, want, 0, "%s: attn_decode at a host length %lld",
               over_cpu ? "over the CPU" : "dry", (long long)n);
        void *bufs[] = {q, out, kc, vc, len, other};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) b->free(b, bufs[i]);
        b->destroy(b);
    }
}

/* The tensor-core attention's conversion passes of qkv (and dout in the
 * backward; 16-bit modes only): 4 bytes read and 2 written per element,
 * none for inputs given as 16-bit copies; batch-invariant mode the same
 * (the same tensor-core kernels). */
static void test_attn_convert(void) {
    kf_backend *b = kernels_record_create(NULL, 0);
    kf_mask m = {.n_ctx = 6};
    int64_t B = 2, nh = 2, hd = 4, L = 6;
    float *qkv = b->alloc(b, (size_t)(B * L * 3 * nh * hd) * 4);
    float *out = b->alloc(b, (size_t)(B * L * nh * hd) * 4),
          *lse = b->alloc(b, (size_t)(B * nh * L) * 4);
    b->attn_fwd(b, out, lse, qkv, &m, B, nh, hd, NULL, NULL);
    T_NEAR(last_op(b)->cost.convert_bytes, 0, 0, "fp32 attn_fwd: no conversion pass");
    b->set_precision(b, KF_PREC_BF16);
    b->attn_fwd(b, out, lse, qkv, &m, B, nh, hd, NULL, NULL);
    T_NEAR(last_op(b)->cost.convert_bytes, 6.0 * B * L * 3 * nh * hd, 0,
           "bf16 attn_fwd: qkv converted (4 B read, 2 written per element)");
    float *dout = b->alloc(b, (size_t)(B * L * nh * hd) * 4);
    float *dqkv = b->alloc(b, (size_t)(B * L * 3 * nh * hd) * 4);
    b->attn_bwd(b, dqkv, dout, out, lse, qkv, &m, B, nh, hd, NULL, NULL, NULL, NULL);
    T_NEAR(last_op(b)->cost.convert_bytes, 6.0 * B * L * 4 * nh * hd, 0,
           "bf16 attn_bwd: qkv and dout converted");
    /* 16-bit copies (rope_fwd's, linear_bwd's): nothing to convert, read at 2
     * bytes; out16 written at 2 */
    double fp32_bytes = last_op(b)->cost.bytes, n3 = (double)(B * L * 3 * nh * hd);
    double n1 = n3 / 3;
    b->attn_bwd(b, dqkv, NULL, NULL, lse, NULL, &m, B, nh, hd, dout, out, qkv, NULL);
    T_NEAR(last_op(b)->cost.convert_bytes, 0, 0, "bf16 attn_bwd on copies: no conversion pass");
    T_NEAR(last_op(b)->cost.bytes, fp32_bytes - 2 * (n3 + 2 * n1), 0,
           "bf16 attn_bwd on copies: qkv, dout and out read at 2 bytes");
    b->attn_bwd(b, NULL, NULL, NULL, lse, NULL, &m, B, nh, hd, dout, out, qkv, dqkv);
    T_NEAR(last_op(b)->cost.bytes, fp32_bytes - 2 * (n3 + 2 * n1) - 2 * n3, 0,
           "bf16 attn_bwd on copies writing dqkv16 alone: dqkv at 2 bytes");
    b->attn_fwd(b, NULL, lse, NULL, &m, B, nh, hd, qkv, out);
    T_NEAR(last_op(b)->cost.convert_bytes, 0, 0, "bf16 attn_fwd on qkv16: no conversion pass");
    T_NEAR(last_op(b)->cost.bytes, 2 * (n3 + n1) + 4.0 * B * nh * L, 0,
           "bf16 attn_fwd on qkv16 writing out16: 2 bytes a value, lse 4");
    /* batch-invariant mode (a 16-bit teacher's passes) runs the tensor-core
     * kernels too */
    b->batch_invariant = 1;
    b->attn_fwd(b, out, lse, qkv, &m, B, nh, hd, NULL, NULL);
    T_EQ_INT(last_op(b)->cost.unit, KF_COST_ATTN, "batch-invariant bf16 attn_fwd: unit");
    T_NEAR(last_op(b)->cost.convert_bytes, 6.0 * B * L * 3 * nh * hd, 0,
           "batch-invariant bf16 attn_fwd: qkv converted, as outside that mode");
    b->destroy(b);
}

/* kernels_mask_pairs against the pairs the CPU attention scores (per head,
 * summed over heads) on a SingleForward mask with q_start and valid lengths. */
static void test_mask_pairs(void) {
    kf_backend *cpu = kernels_cpu_create();
    int32_t valid[2] = {5, 3};
    kf_mask m = {.n_ctx = 6, .group = 3, .n_groups = 6, .q_start = 2, .valid_len = valid};
    int64_t B = 2, nh = 2, hd = 4, L = kf_mask_len(&m);
    float *qkv = cpu->alloc(cpu, (size_t)(B * L * 3 * nh * hd) * 4);
    float *out = cpu->alloc(cpu, (size_t)(B * L * nh * hd) * 4),
          *lse = cpu->alloc(cpu, (size_t)(B * nh * L) * 4);
    int64_t p0 = kernels_cpu_attn_pairs(cpu);
    cpu->attn_fwd(cpu, out, lse, qkv, &m, B, nh, hd, NULL, NULL);
    T_NEAR(kernels_mask_pairs(&m, B) * (double)nh, (double)(kernels_cpu_attn_pairs(cpu) - p0), 0,
           "pairs of a SingleForward mask with q_start and valid lengths");
    cpu->free(cpu, qkv), cpu->free(cpu, out), cpu->free(cpu, lse);
    cpu->destroy(cpu);
}

static runconfig_stage stage(runconfig_kind kind, int64_t k) {
    runconfig_stage st = {.name = "s", .kind = kind, .k = k, .tau_min = 1, .tau_max = 1};
    st.opt = runconfig_opts_default(RC_KIND_AR);
    st.opt.lr = 1e-3;
    st.opt.seed = 7;
    return st;
}

static const model_config tiny = {.hidden = 16,
                                  .heads = 2,
                                  .blocks = 2,
                                  .vocab = 11,
                                  .mask_id = 10,
                                  .seq_len = 9,
                                  .kind = MODEL_AR,
                                  .head = HEAD_SHARED,
                                  .k_train = 1};

/* Sum of the FLOPs of the ops called name in records [from, to). */
static double flops_of(kf_backend *b, const char *name, int64_t from, int64_t to) {
    int64_t n;
    const kf_op_rec *r = kernels_record_ops(b, &n);
    double s = 0;
    for (int64_t i = from; i < to; i++)
        if (!strcmp(r[i].op, name)) s += r[i].cost.flops;
    return s;
}

static void test_ar_step_flops(void) {
    kf_backend *b = kernels_record_create(NULL, 0);
    runconfig_stage st = stage(RC_KIND_AR, 1);
    kf_err err = {{0}};
    roofline_stage *s = roofline_stage_create(b, &tiny, &st, 1, 1, &err);
    T_CHECK(s != NULL, "stage: %s", err.msg);
    int64_t B = 2, n = 9, H = 16, V = 11, rows = B * (n - 1), hd = 8, nh = 2;
    roofline_marks mk;
    roofline_stage_step(s, B, n, &mk);
    int64_t nrec, compute = 0;
    const kf_op_rec *rec = kernels_record_ops(b, &nrec);
    for (int64_t i = mk.begin; i < mk.teacher; i++)
        compute += rec[i].cost.unit != KF_COST_NONE && rec[i].cost.unit != KF_COST_HOST;
    T_EQ_INT(compute, 0, "an AR step's supervision computes nothing on the device (no teacher)");
    /* per block qkv H->3H, out H->H, fc1 H->4H, fc2 4H->H; the head H->V;
     * each linear: forward, weight gradient, input gradient */
    double lin = 0;
    int64_t shapes[][2] = {{H, 3 * H}, {H, H}, {H, 4 * H}, {4 * H, H}};
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < 4; j++)
            lin += 3 * 2.0 * (double)rows * (double)(shapes[j][0] * shapes[j][1]);
    lin += 3 * 2.0 * (double)rows * (double)(H * V);
    /* the fused linear ops add their epilogue per element: fc1's bias (1) and
     * GELU (8) in the forward, the head's bias (1); GELU's derivative (12)
     * and fc1's bias sum (1) in the backward; fc2's bias (1) in the forward
     * and its bias sum (1) and the head's (1) in linear_bwd */
    double epi = 2 * (double)rows * 4 * H * (1 + 8 + 12 + 1) + (double)rows * V +
                 2 * (double)rows * H * 2 + (double)rows * V;
    T_NEAR(flops_of(b, "matmul", mk.teacher, mk.student) +
               flops_of(b, "linear_act", mk.teacher, mk.student) +
               flops_of(b, "linear_act_dgrad", mk.teacher, mk.student) +
               flops_of(b, "linear_bwd", mk.teacher, mk.student),
           lin + epi, 0,
           "the step's GEMM FLOPs (matmul, linear_act, linear_act_dgrad, linear_bwd)");
    double pairs = (double)B * (8 * 9 / 2) * (double)nh; /* causal over 8 rows, per head */
    T_NEAR(flops_of(b, "attn_fwd", mk.teacher, mk.student), 2 * pairs * (4 * hd + 3), 0,
           "attention forward FLOPs (2 blocks)");
    T_NEAR(flops_of(b, "attn_bwd", mk.teacher, mk.student), 2 * pairs * (10 * hd + 4), 0,
           "attention backward FLOPs (2 blocks)");
    model *m = roofline_stage_model(s);
    T_NEAR(flops_of(b, "adamw", mk.student, mk.end), 14.0 * (double)m->n_params, 0,
           "the optimizer's AdamW over every parameter");
    roofline_stage_free(s);
    b->destroy(b);
}

/* The first index where the two records differ in op or shape; -1: none. */
static int64_t first_difference(kf_backend *a, kf_backend *b) {
    int64_t na, nb;
    const kf_op_rec *ra = kernels_record_ops(a, &na), *rb = kernels_record_ops(b, &nb);
    for (int64_t i = 0; i < na && i < nb; i++)
        if (strcmp(ra[i].op, rb[i].op) || strcmp(ra[i].cost.shape, rb[i].cost.shape)) {
            fprintf(stderr, "op %lld: %s %s vs %s %s\n", (long long)i, ra[i].op, ra[i].cost.shape,
                    rb[i].op, rb[i].cost.shape);
            return i;
        }
    return na == nb ? -1 : (na < nb ? na : nb);
}

/* One step of st on a dry recorder, on a recorder over the CPU and on the
 * CPU alone: the same op sequence, and the CPU's bits through the recorder. */
static void test_same_ops(runconfig_kind kind, int64_t k, const char *what) {
    runconfig_stage st = stage(kind, k);
    kf_err err = {{0}};
    kf_backend *dry = kernels_record_create(NULL, 0),
               *rec = kernels_record_create(kernels_cpu_create(), 0);
    kf_backend *cpu = kernels_cpu_create();
    roofline_stage *sd = roofline_stage_create(dry, &tiny, &st, 1, 1, &err);
    roofline_stage *sr = roofline_stage_create(rec, &tiny, &st, 1, 1, &err);
    roofline_stage *sc = roofline_stage_create(cpu, &tiny, &st, 1, 1, &err);
    kernels_record_clear(dry);
    kernels_record_clear(rec);
    roofline_marks md, mr, mc;
    roofline_stage_step(sd, 3, 9, &md);
    roofline_stage_step(sr, 3, 9, &mr);
    roofline_stage_step(sc, 3, 9, &mc);
    T_EQ_INT(first_difference(dry, rec), -1, "%s: first op where a dry step and a CPU step differ",
             what);
    T_EQ_INT(md.teacher, mr.teacher, "%s: teacher passes end at the same op", what);
    T_EQ_INT(md.student, mr.student, "%s: the student's part ends at the same op", what);
    T_EQ_INT(mc.end, 0, "%s: a plain backend records nothing", what);
    model *a = roofline_stage_model(sr), *c = roofline_stage_model(sc);
    size_t bytes = (size_t)a->n_params * sizeof(float);
    T_EQ_INT(memcmp(a->params, c->params, bytes), 0,
             "%s: weights after a step through the recorder "
             "are the CPU's bits",
             what);
    roofline_stage_free(sd), roofline_stage_free(sr), roofline_stage_free(sc);
    dry->destroy(dry), rec->destroy(rec), cpu->destroy(cpu);
}

static void test_timed(void) {
    kf_backend *b = kernels_record_create(kernels_cpu_create(), 1);
    int64_t n = 192;
    float *x = b->alloc(b, (size_t)(n * n) * 4), *y = b->alloc(b, (size_t)(n * n) * 4);
    b->matmul(b, y, x, x, n, n, n, 0, 0, 1.0f, 0.0f);
    T_CHECK(last_op(b)->seconds > 0, "a timed recorder measures a forwarded matmul (%g s)",
            last_op(b)->seconds);
    b->free(b, x), b->free(b, y);
    b->destroy(b);
}

static void test_roofline_time(void) {
    const roofline_device *h100 = roofline_device_find("h100");
    T_CHECK(h100 != NULL, "h100 is a device");
    T_EQ_INT(roofline_device_find("h800"), NULL, "h800 is not");
    struct {
        kf_op_cost c;
        int attn_tc;
        double want;
        const char *what;
    } cases[] = {
        {{.flops = 989e9, .bytes = 1e6, .unit = KF_COST_GEMM, .lowp = 1},
         0,
         1e-3,
         "fp16 GEMM at the tensor peak"},
        {{.flops = 67e9, .bytes = 1e6, .unit = KF_COST_GEMM},
         0,
         1e-3,
         "fp32 GEMM at the fp32 peak"},
        {{.flops = 67e9, .bytes = 1e6, .unit = KF_COST_ATTN, .lowp = 1},
         0,
         1e-3,
         "fp16 attention on fp32 units"},
        {{.flops = 989e9, .bytes = 1e6, .unit = KF_COST_ATTN, .lowp = 1},
         1,
         1e-3,
         "fp16 tensor-core attention"},
        {{.flops = 1e6, .bytes = 3.35e9, .unit = KF_COST_SIMT},
         0,
         1e-3,
         "memory-bound op at HBM bandwidth"},
        {{.flops = 0, .bytes = 64e6, .unit = KF_COST_HOST}, 0, 1e-3, "a transfer at the bus rate"},
        {{.flops = 0, .bytes = 0, .unit = KF_COST_NONE}, 0, 0, "bookkeeping is free"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        T_NEAR(roofline_op_seconds(h100, &cases[i].c, cases[i].attn_tc), cases[i].want, 1e-12, "%s",
               cases[i].what);
}

int main(void) {
    test_gemm();
    test_linear_bwd();
    test_linear_epilogue();
    test_dry_memory();
    test_mask_pairs();
    test_attn_convert();
    test_decode_len();
    test_ar_step_flops();
    test_same_ops(RC_KIND_AR, 1, "AR");
    test_same_ops(RC_KIND_SELF_FORCING, 2, "self-forcing k 2");
    test_timed();
    test_roofline_time();
    return T_DONE();
}
