/* kernels/cuda/cuda_linear.cu — a linear layer with its epilogue (bias,
 * GELU), the gradient through it and the layer's backward (kernels.h
 * linear_act, linear_act_dgrad, linear_bwd).
 *
 * The product is the matmul op's, so the results are matmul's followed by the
 * separate ops, and the fusion only removes passes over memory:
 *  - In a 16-bit mode outside batch-invariant mode, cuBLAS writes the product
 *    in the 16-bit format (rounded once, as matmul rounds its C), and one
 *    kernel reads it, adds the bias and applies GELU: matmul's rounding pass,
 *    add_bias and gelu_fwd (or gelu_bwd and bias_grad's first pass) become one.
 *    cuBLASLt's epilogues cannot do this: they add the bias to the fp32
 *    accumulator, before the rounding the CPU reference does. A layer added
 *    to its output (beta != 0) has cuBLAS write the fp32 sum, and the same
 *    kernel rounds it (no rounding pass of its own) and adds the bias.
 *  - In batch-invariant mode the fixed-tiling kernel (tensor-core or SIMT)
 *    finishes each element in its own epilogue (cu_epi, cu_matmul_epi): the
 *    product rounded as matmul rounds C, then these kernels' steps in their
 *    order, so their bits, and no fp32 product is written and read again.
 *    linear_act_dgrad's bias gradient then sums the fp32 dpre it wrote in
 *    bias_grad's order (the same partials k_dact_cols makes).
 *  - Otherwise (fp32, or an empty product, K = 0, in batch-invariant mode)
 *    the fp32 product is written by matmul, and the same kernel finishes it
 *    in place.
 * The epilogue also writes the output's 16-bit copy (kernels.h), and an input
 * or a weight given as a 16-bit copy (x16, dy16, w16) goes to cuBLAS as it
 * is: no conversion pass; so does batch-invariant mode's tensor-core kernel
 * (cu_matmul_copies), while its SIMT kernel reads the fp32 weight, which is
 * always given beside w16, and the other copies widened (cu_input16).
 * linear_bwd's two products both read dy: in a 16-bit mode outside
 * batch-invariant mode one pass converts it (and sums its columns for the
 * bias gradient) and both products read that copy, where two matmul calls
 * would convert it twice; dx (unless added to) is written by cuBLAS in 16
 * bits and widened; otherwise it is matmul, bias_grad, matmul.
 * The bias gradient keeps bias_grad's order: rows summed in order within
 * chunks of CUDA_ROW_CHUNK, chunks added in order by cu_col_finish, so it is
 * bitwise bias_grad's on the same values. */
#include "kernels/cuda/cuda_internal.h"

/* Element i of the product: fp32, or the 16-bit format of precision `src16`. */
__device__ __forceinline__ float load_c(const void *c, int src16, int64_t i) {
    if (src16 == KF_PREC_FP16) return __half2float(((const __half *)c)[i]);
    if (src16 == KF_PREC_BF16) return __bfloat162float(((const __nv_bfloat16 *)c)[i]);
    return ((const float *)c)[i];
}

/* pre = c + bias, y = act(pre) and its 16-bit copy y16 (format lowp); y and
 * y16 may be NULL; c may be y or pre (read before written). round_c: c is
 * an fp32 product not yet rounded (cu_matmul16_unrounded), rounded to lowp
 * first, as matmul rounds its C before add_bias. */
__global__ void k_bias_act(float *y, void *y16, int lowp, float *pre, const void *c, int src16,
                           int round_c, const float *bias, int64_t rows, int64_t cols, int act) {
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = load_c(c, src16, i);
        if (round_c) v = cu_lowp(v, lowp);
        if (bias) v += bias[i % cols];
        if (act != KF_ACT_NONE) {
            pre[i] = v;
            v = cu_gelu(v, act == KF_ACT_GELU_ERF);
        }
        if (y) y[i] = v;
        if (y16) cu_store16(y16, i, v, lowp);
    }
}

/* dpre = act'(pre) * c and its 16-bit copy dpre16 (format lowp; either
 * may be NULL), and part[ch, col] = the sum of dpre over chunk ch's rows in
 * order (part NULL: none); c may be dpre. One thread per (chunk, column): a
 * warp walks 32 adjacent columns row by row. */
__global__ void k_dact_cols(float *dpre, void *dpre16, int lowp, float *part, const void *c,
                            int src16, const float *pre, int64_t rows, int64_t cols, int act) {
    int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (col >= cols) return;
    for (int64_t ch = blockIdx.y; ch * CUDA_ROW_CHUNK < rows; ch += gridDim.y) {
        int64_t r1 = min(rows, (ch + 1) * CUDA_ROW_CHUNK);
        float s = 0.0f;
        for (int64_t r = ch * CUDA_ROW_CHUNK; r < r1; r++) {
            int64_t i = r * cols + col;
            float v = load_c(c, src16, i);
            if (act != KF_ACT_NONE) v *= cu_gelu_grad(pre[i], act == KF_ACT_GELU_ERF);
            if (dpre) dpre[i] = v;
            if (dpre16) cu_store16(dpre16, i, v, lowp);
            s += v;
        }
        if (part) part[ch * cols + col] = s;
    }
}

/* The cuBLAS path of a 16-bit mode (see the file comment). */
static int fused16(const kf_backend *b, int64_t K) {
    return b->precision != KF_PREC_FP32 && !b->batch_invariant && K > 0;
}

void cu_linear_act(kf_backend *b, float *y, void *y16, float *pre, const float *x, const void *x16,
                   const float *w, const float *bias, int64_t rows, int64_t in, int64_t out,
                   kf_act act, float beta, const void *w16) {
    KF_CHECK(beta == 0.0f || (act == KF_ACT_NONE && y), "linear_act: beta needs y and no act");
    KF_CHECK(!(x16 || y16 || w16) || b->precision != KF_PREC_FP32,
             "linear_act: a 16-bit copy in fp32 mode");
    if (rows <= 0 || out <= 0) return;
    const void *c;
    int src16 = 0, round_c = 0;
    if (fused16(b, in)) {
        const void *a16 = x16 ? x16 : cu_to16(b, CU_SCRATCH_A, x, rows * in);
        const void *b16 = w16 ? w16 : cu_to16(b, CU_SCRATCH_B, w, out * in);
        if (beta == 0.0f) {
            void *c16 = cu_scratch(b, CU_SCRATCH_C, (size_t)(rows * out) * 2);
            cu_matmul_to16(b, c16, a16, b16, rows, out, in, 0, 1);
            c = c16;
            src16 = b->precision;
        } else { /* the fp32 sum, rounded by the epilogue below */
            cu_matmul16_unrounded(b, y, a16, b16, rows, out, in, 0, 1, 1.0f, beta);
            c = y;
            round_c = 1;
        }
    } else if (b->batch_invariant && in > 0) {
        const float *xin = cu_input16(b, CU_SCRATCH_X16, x, x16, rows * in);
        cu_epi e = {y, y16, pre, bias, act, 0};
        cu_matmul_epi(b, &e, xin, x16, w, w16, rows, out, in, 0, 1, 1.0f, beta);
        return;
    } else {
        float *dst = act == KF_ACT_NONE ? y : pre;
        if (!dst) dst = (float *)cu_scratch(b, CU_SCRATCH_D, (size_t)(rows * out) * 4);
        cu_matmul_copies(b, dst, cu_input16(b, CU_SCRATCH_X16, x, x16, rows * in), x16, w, w16,
                         rows, out, in, 0, 1, 1.0f, beta);
        c = dst;
    }
    if (!src16 && !round_c && !bias && act == KF_ACT_NONE && !y16) return; /* nothing to do */
    k_bias_act<<<cu_blocks(rows * out), 256, 0, cu_stream(b)>>>(y, y16, b->precision, pre, c, src16,
                                                                round_c, bias, rows, out, act);
    CUDA_LAUNCHED();
}

void cu_linear_act_dgrad(kf_backend *b, float *dpre, void *dpre16, float *dbias, const float *dy,
                         const float *w, const float *pre, int64_t rows, int64_t in, int64_t out,
                         kf_act act, const void *w16, const void *dy16) {
    KF_CHECK(!(dpre16 || w16 || dy16) || b->precision != KF_PREC_FP32,
             "linear_act_dgrad: a 16-bit copy in fp32 mode");
    if (rows <= 0 || in <= 0) return;
    int64_t nchunk = (rows + CUDA_ROW_CHUNK - 1) / CUDA_ROW_CHUNK;
    const void *c = dpre;
    int src16 = 0;
    if (fused16(b, out)) {
        void *c16 = cu_scratch(b, CU_SCRATCH_C, (size_t)(rows * in) * 2);
        cu_matmul_to16(b, c16, dy16 ? dy16 : cu_to16(b, CU_SCRATCH_A, dy, rows * out),
                       w16 ? w16 : cu_to16(b, CU_SCRATCH_B, w, out * in), rows, in, out, 0, 0);
        c = c16;
        src16 = b->precision;
    } else if (b->batch_invariant && out > 0) {
        const float *din = cu_input16(b, CU_SCRATCH_DY16, dy, dy16, rows * out);
        /* the bias gradient sums the fp32 dpre: in scratch when not asked for */
        if (!dpre && dbias) dpre = (float *)cu_scratch(b, CU_SCRATCH_A, (size_t)(rows * in) * 4);
        cu_epi e = {dpre, dpre16, (float *)pre /* only read */, NULL, act, 1};
        cu_matmul_epi(b, &e, din, dy16, w, w16, rows, in, out, 0, 0, 1.0f, 0.0f);
        if (dbias) cu_bias_grad(b, dbias, dpre, rows, in);
        return;
    } else {
        if (!dpre) c = dpre = (float *)cu_scratch(b, CU_SCRATCH_A, (size_t)(rows * in) * 4);
        cu_matmul_copies(b, dpre, cu_input16(b, CU_SCRATCH_DY16, dy, dy16, rows * out), dy16, w,
                         w16, rows, in, out, 0, 0, 1.0f, 0.0f);
    }
    if (!src16 && !dbias && act == KF_ACT_NONE && !dpre16) return;
    float *part = dbias ? (float *)cu_scratch(b, CU_SCRATCH_D, (size_t)(nchunk * in) * 4) : NULL;
    dim3 grid((unsigned)((in + 255) / 256), (unsigned)min(nchunk, (int64_t)65535));
    k_dact_cols<<<grid, 256, 0, cu_stream(b)>>>(dpre, dpre16, b->precision, part, c, src16, pre,
                                                rows, in, act);
    CUDA_LAUNCHED();
    if (dbias) cu_col_finish(b, dbias, part, nchunk, in);
}

void cu_linear_bwd(kf_backend *b, float *dx, float *dw, float *dbias, const float *dy,
                   const void *dy16, const float *x, const void *x16, const float *w, int64_t rows,
                   int64_t in, int64_t out, float dx_beta, const void *w16, void *dx16) {
    KF_CHECK(!(x16 || dy16 || w16 || dx16) || b->precision != KF_PREC_FP32,
             "linear_bwd: a 16-bit copy in fp32 mode");
    KF_CHECK(!(dy16 && dbias), "linear_bwd: dbias needs the fp32 dy");
    KF_CHECK(!dx16 || dx_beta == 0.0f, "linear_bwd: dx16 needs dx_beta 0");
    if (!fused16(b, rows) || in <= 0 || out <= 0) {
        x = cu_input16(b, CU_SCRATCH_X16, x, x16, rows * in);
        dy = cu_input16(b, CU_SCRATCH_DY16, dy, dy16, rows * out);
        cu_matmul_copies(b, dw, dy, dy16, x, x16, out, in, rows, 1, 0, 1.0f, 1.0f);
        if (dbias) cu_bias_grad(b, dbias, dy, rows, out);
        if (dx16 && !dx) dx = (float *)cu_scratch(b, CU_SCRATCH_C, (size_t)(rows * in) * 4);
        if (dx) cu_matmul_copies(b, dx, dy, dy16, w, w16, rows, in, out, 0, 0, 1.0f, dx_beta);
        if (dx16) cu_copy16(b, dx16, dx, rows * in);
        return;
    }
    const void *d16 = dy16;
    if (dbias) {
        int64_t nchunk = (rows + CUDA_ROW_CHUNK - 1) / CUDA_ROW_CHUNK;
        void *t = cu_scratch(b, CU_SCRATCH_D, (size_t)(rows * out) * 2);
        float *part = (float *)cu_scratch(b, CU_SCRATCH_C, (size_t)(nchunk * out) * 4);
        dim3 grid((unsigned)((out + 255) / 256), (unsigned)min(nchunk, (int64_t)65535));
        /* dy's 16-bit copy and the column sums of the fp32 dy: k_dact_cols with
         * no activation and no fp32 output */
        k_dact_cols<<<grid, 256, 0, cu_stream(b)>>>((float *)NULL, t, b->precision, part, dy, 0,
                                                    (const float *)NULL, rows, out, KF_ACT_NONE);
        CUDA_LAUNCHED();
        cu_col_finish(b, dbias, part, nchunk, out);
        d16 = t;
    } else if (!d16) {
        d16 = cu_to16(b, CU_SCRATCH_D, dy, rows * out);
    }
    cu_matmul16(b, dw, d16, x16 ? x16 : cu_to16(b, CU_SCRATCH_B, x, rows * in), out, in, rows, 1, 0,
                1.0f, 1.0f);
    if (!dx && !dx16) return;
    if (!w16) w16 = cu_to16(b, CU_SCRATCH_B, w, out * in);
    if (dx_beta != 0.0f) { /* the sum with dx, rounded as matmul rounds its C */
        cu_matmul16(b, dx, d16, w16, rows, in, out, 0, 0, 1.0f, dx_beta);
        return;
    }
    /* cuBLAS writes the product rounded, in 16 bits (the copy, or scratch),
     * and dx is widened from it: 2 bytes written and read a value where an
     * fp32 product and a rounding pass over it moved 12 */
    void *c16 = dx16 ? dx16 : cu_scratch(b, CU_SCRATCH_A, (size_t)(rows * in) * 2);
    cu_matmul_to16(b, c16, d16, w16, rows, in, out, 0, 0);
    if (dx) cu_from16(b, dx, c16, rows * in);
}

/* The decode-time form of a linear layer: the GEMMs here read W in place,
 * so packing keeps the pointers (and the precision w16 belongs to). */
typedef struct cu_linear {
    int64_t in, out;
    const float *w;
    const void *w16;
    kf_precision prec;
} cu_linear;

void *cu_linear_pack(kf_backend *b, const float *w, const void *w16, int64_t in, int64_t out) {
    KF_CHECK(in >= 1 && out >= 1, "linear_pack: in = %lld, out = %lld", (long long)in,
             (long long)out);
    cu_linear *L = (cu_linear *)kf_calloc(1, sizeof *L);
    *L = (cu_linear){in, out, w, w16, b->precision};
    return L;
}

void cu_linear_pack_free(kf_backend *b, void *lin) { free(lin); }

void cu_linear_packed_fwd(kf_backend *b, float *y, void *y16, float *pre, const float *x,
                          const void *x16, const void *lin, const float *bias, int64_t rows,
                          kf_act act, float beta) {
    const cu_linear *L = (const cu_linear *)lin;
    cu_linear_act(b, y, y16, pre, x, x16, L->w, bias, rows, L->in, L->out, act, beta,
                  b->precision == L->prec ? L->w16 : NULL);
}
