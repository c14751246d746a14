/* kernels/cuda/cuda_attention_guard.cu — which attention kernels run a
 * 16-bit phase, and the run-time check behind that choice.
 *
 * The tensor-core attention (cuda_attention_tc.cu) is the default of the
 * fp16 and bf16 phases, on GPUs and in a mma layout the emulation harness
 * models. So before its first use at a precision and head dim it runs once
 * against the SIMT kernels (cuda_attention.cu) on a small fixed problem —
 * a causal mask, and DoubleForward's second round (groups of 2k, q_start) —
 * forward and backward. If a launch fails or a result differs by more than
 * the tolerance below, one warning is logged and the SIMT kernels run the
 * attention for the rest of the run. The check waits for the device once.
 *
 * KF_CUDA_TC_CHECK_BREAK=fwd (or bwd) adds 0.05 to every value of the
 * tensor-core forward's (backward's) result before the comparison: how the
 * tests see the fallback happen without a broken GPU. The guard itself (the
 * first-use bookkeeping, the warning, the fallback) is cuda_tc_guard.cu's,
 * shared with the batch-invariant GEMM.
 */
#include <stdio.h>

#include "kernels/cuda/cuda_attention_tc.h"

/* Relative L2 difference allowed between the two paths in fp16, forward (out
 * and lse) and backward (dqkv); bf16 8x (its unit roundoff is 8x fp16's).
 * The tensor cores round P and dS to 16 bits where the SIMT kernels keep
 * fp32: test_cuda_ops sees about 1e-3 between either and the CPU. */
#define ATTN_TC_TOL_FWD 4e-3
#define ATTN_TC_TOL_BWD 8e-3

/* Both paths on mask m (one sample, two heads of head_dim D, fixed
 * pseudo-random inputs given as 16-bit copies and dqkv written as one, the
 * way the model gives and takes them); 0 with the reason in why when they
 * disagree. */
static int check_mask(kf_backend *b, const kf_mask *m, const char *mname, int64_t D, char *why,
                      size_t why_len) {
    cuda_impl *im = cu_impl(b);
    const int64_t nh = 2;
    int64_t L = kf_mask_len(m), H = nh * D, n3 = L * 3 * H, n1 = L * H, nl = nh * L;
    int64_t q0 = m->q_start;
    float *h = (float *)kf_malloc((size_t)(n3 + n1) * sizeof(float));
    uint32_t s = 12345u;
    for (int64_t i = 0; i < n3 + n1; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = 3.0f * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    float *x = (float *)cu_alloc(b, (size_t)(n3 + n1) * sizeof(float));
    cu_upload(b, x, h, (size_t)(n3 + n1) * sizeof(float));
    void *q16 = cu_alloc(b, (size_t)n3 * 2), *d16 = cu_alloc(b, (size_t)n1 * 2);
    cu_copy16(b, q16, x, n3);
    cu_copy16(b, d16, x + n3, n1);
    float *o[2], *l[2]; /* [0]: SIMT, [1]: tensor cores */
    void *g[2];
    for (int p = 0; p < 2; p++) {
        o[p] = (float *)cu_alloc(b, (size_t)n1 * sizeof(float));
        l[p] = (float *)cu_alloc(b, (size_t)nl * sizeof(float));
        g[p] = cu_alloc(b, (size_t)n3 * 2);
    }
    for (int p = 0; p < 2; p++) {
        im->attn_tc.force = p;
        cu_attn_fwd(b, o[p], l[p], NULL, m, 1, nh, D, q16, NULL);
        /* both backwards from the SIMT forward's out and lse */
        cu_attn_bwd(b, (float *)NULL, NULL, o[0], l[0], NULL, m, 1, nh, D, d16, NULL, q16, g[p]);
    }
    im->attn_tc.force = -1;
    /* dqkv widened here: cu_input16 would hand back no fp32 view at all
     * when the batch-invariant products read 16-bit copies themselves */
    float *hg_d = (float *)cu_alloc(b, (size_t)n3 * sizeof(float));
    float *ho[2], *hl[2], *hg[2];
    for (int p = 0; p < 2; p++) {
        ho[p] = (float *)kf_malloc((size_t)n1 * sizeof(float));
        hl[p] = (float *)kf_malloc((size_t)nl * sizeof(float));
        hg[p] = (float *)kf_malloc((size_t)n3 * sizeof(float));
        cu_download(b, ho[p], o[p], (size_t)n1 * sizeof(float));
        cu_download(b, hl[p], l[p], (size_t)nl * sizeof(float));
        cu_from16(b, hg_d, g[p], n3);
        cu_download(b, hg[p], hg_d, (size_t)n3 * sizeof(float));
    }
    cu_tc_check_break("fwd", ho[1], n1);
    cu_tc_check_break("bwd", hg[1], n3);
    double scale = b->precision == KF_PREC_BF16 ? 8 : 1;
    /* the query rows [q0, L): out per head row, lse per head */
    double eo = cu_rel_l2(ho[1] + q0 * H, ho[0] + q0 * H, (L - q0) * H), el = 0;
    for (int64_t hd = 0; hd < nh; hd++) {
        double e = cu_rel_l2(hl[1] + hd * L + q0, hl[0] + hd * L + q0, L - q0);
        el = e > el ? e : el;
    }
    double eg = cu_rel_l2(hg[1], hg[0], n3);
    int ok = 0;
    if (im->attn_tc.err != cudaSuccess)
        snprintf(why, why_len, "failed to launch (%s)", cudaGetErrorString(im->attn_tc.err));
    else if (!(eo <= ATTN_TC_TOL_FWD * scale && el <= ATTN_TC_TOL_FWD * scale))
        snprintf(why, why_len,
                 "differs from the SIMT kernels on a %s mask: forward out %.3g, lse %.3g "
                 "(tolerance %.3g)",
                 mname, eo, el, ATTN_TC_TOL_FWD * scale);
    else if (!(eg <= ATTN_TC_TOL_BWD * scale))
        snprintf(why, why_len,
                 "differs from the SIMT kernels on a %s mask: backward dqkv %.3g (tolerance %.3g)",
                 mname, eg, ATTN_TC_TOL_BWD * scale);
    else ok = 1;
    for (int p = 0; p < 2; p++) {
        free(ho[p]), free(hl[p]), free(hg[p]);
        cu_free(b, o[p]), cu_free(b, l[p]), cu_free(b, g[p]);
    }
    cu_free(b, x), cu_free(b, q16), cu_free(b, d16), cu_free(b, hg_d);
    free(h);
    return ok;
}

/* The check of a head dim (*(const int64_t *)arg): a causal mask, then
 * DoubleForward's second round. */
static int check_head_dim(kf_backend *b, const void *arg, char *why, size_t why_len) {
    int64_t D = *(const int64_t *)arg;
    /* n_ctx, group, n_groups, q_start, valid_len, valid_len_d, bidir */
    const kf_mask causal = {80, 0, 0, 0, NULL, NULL, 0}, dbl = {40, 4, 40, 40, NULL, NULL, 0};
    return check_mask(b, &causal, "causal", D, why, why_len) &&
           check_mask(b, &dbl, "DoubleForward", D, why, why_len);
}

int attn_tc_supported(kf_backend *b, int64_t head_dim) {
    /* batch-invariant mode too: a block reads and writes one sample only, its
     * tiles fixed by the mask and that sample's valid_len (cuda_attention_tc.cu) */
    if (b->precision == KF_PREC_FP32 || (head_dim != 64 && head_dim != 128)) return 0;
    int bit = 1 << (2 * (b->precision == KF_PREC_BF16) + (head_dim == 128));
    char what[64];
    snprintf(what, sizeof what, "%s, head_dim %lld", kernels_precision_name(b->precision),
             (long long)head_dim);
    return cu_tc_guard_use(b, &cu_impl(b)->attn_tc, bit, what, check_head_dim, &head_dim);
}

void attn_tc_launched(kf_backend *b, cudaError_t e) {
    cu_tc_guard_launched(&cu_impl(b)->attn_tc, e);
}
