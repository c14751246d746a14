/* kernels/cpu/cpu_linear.c — a linear layer with its epilogue (bias, GELU),
 * the gradient through that epilogue and the layer's backward (weight, bias
 * and input gradients), as kernels.h defines them: the CPU
 * reference is the composition of the separate ops, so a model that calls
 * the fused op gets bitwise the results of the unfused sequence. */
#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

static kf_gelu_kind gelu_kind(kf_act act) {
    return act == KF_ACT_GELU_ERF ? KF_GELU_ERF : KF_GELU_TANH;
}

void cpu_linear_act(kf_backend *b, float *y, void *y16, float *pre, const float *x, const void *x16,
                    const float *w, const float *bias, int64_t rows, int64_t in, int64_t out,
                    kf_act act, float beta, const void *w16) {
    KF_CHECK(beta == 0.0f || (act == KF_ACT_NONE && y), "linear_act: beta needs y and no act");
    KF_CHECK(!y16 || b->precision != KF_PREC_FP32, "linear_act: a 16-bit copy in fp32 mode");
    x = cpu_input16(b, CPU_SCRATCH_X16, x, x16, rows * in);
    w = cpu_input16(b, CPU_SCRATCH_W16, w, w16, out * in);
    if (!y) y = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(rows * out));
    float *t = act == KF_ACT_NONE ? y : pre;
    cpu_matmul(b, t, x, w, rows, out, in, 0, 1, 1.0f, beta);
    if (bias) cpu_add_bias(b, t, bias, rows, out);
    if (act != KF_ACT_NONE) cpu_gelu_fwd(b, y, pre, rows * out, gelu_kind(act));
    if (y16) cpu_to16(y16, y, rows * out, b->precision);
}

void cpu_linear_act_dgrad(kf_backend *b, float *dpre, void *dpre16, float *dbias, const float *dy,
                          const float *w, const float *pre, int64_t rows, int64_t in, int64_t out,
                          kf_act act, const void *w16, const void *dy16) {
    KF_CHECK(!(dpre16 || dy16) || b->precision != KF_PREC_FP32,
             "linear_act_dgrad: a 16-bit copy in fp32 mode");
    w = cpu_input16(b, CPU_SCRATCH_W16, w, w16, out * in);
    dy = cpu_input16(b, CPU_SCRATCH_DY16, dy, dy16, rows * out);
    if (!dpre) dpre = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(rows * in));
    cpu_matmul(b, dpre, dy, w, rows, in, out, 0, 0, 1.0f, 0.0f);
    if (act != KF_ACT_NONE) cpu_gelu_bwd(b, dpre, dpre, pre, rows * in, gelu_kind(act));
    if (dbias) cpu_bias_grad(b, dbias, dpre, rows, in);
    if (dpre16) cpu_to16(dpre16, dpre, rows * in, b->precision);
}

void cpu_linear_bwd(kf_backend *b, float *dx, float *dw, float *dbias, const float *dy,
                    const void *dy16, const float *x, const void *x16, const float *w, int64_t rows,
                    int64_t in, int64_t out, float dx_beta, const void *w16, void *dx16) {
    KF_CHECK(!(dy16 && dbias), "linear_bwd: dbias needs the fp32 dy");
    KF_CHECK(!dx16 || (b->precision != KF_PREC_FP32 && dx_beta == 0.0f),
             "linear_bwd: dx16 needs a 16-bit mode and dx_beta 0");
    x = cpu_input16(b, CPU_SCRATCH_X16, x, x16, rows * in);
    dy = cpu_input16(b, CPU_SCRATCH_DY16, dy, dy16, rows * out);
    cpu_matmul(b, dw, dy, x, out, in, rows, 1, 0, 1.0f, 1.0f);
    if (dbias) cpu_bias_grad(b, dbias, dy, rows, out);
    if (dx16 && !dx) dx = cpu_scratch(b, CPU_SCRATCH_Y16, (size_t)(rows * in));
    if (dx)
        cpu_matmul(b, dx, dy, cpu_input16(b, CPU_SCRATCH_W16, w, w16, out * in), rows, in, out, 0,
                   0, 1.0f, dx_beta);
    if (dx16) cpu_to16(dx16, dx, rows * in, b->precision);
}
