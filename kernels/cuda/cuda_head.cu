/* kernels/cuda/cuda_head.cu — the decode-time output layer (head_pack,
 * head_fwd) as a product, the bias and the argmax. The product is the
 * fixed-tiling kernel in fp32 in every mode: the contract (kernels.h) wants a
 * row's logits independent of the other rows, which cuBLAS's shape-dependent
 * kernels do not promise, and fp32 logits, as the CPU head gives them. W is
 * read in place, so packing is only the copy that fixes the mask token's
 * logit (a zero row of W and mask_value as its bias). */
#include "kernels/cuda/cuda_internal.h"

typedef struct cu_head {
    int64_t V, H;
    float *w, *bias; /* device copies */
    float *logits;   /* scratch for an argmax without logits */
    int64_t logits_rows;
} cu_head;

void *cu_head_pack(kf_backend *b, const float *W, const float *bias, int64_t V, int64_t H,
                   int64_t mask_col, float mask_value) {
    KF_CHECK(V >= 1 && H >= 1 && mask_col < V, "head_pack: V = %lld, H = %lld, mask %lld",
             (long long)V, (long long)H, (long long)mask_col);
    cu_head *hd = (cu_head *)kf_calloc(1, sizeof *hd);
    hd->V = V;
    hd->H = H;
    hd->w = (float *)b->alloc(b, (size_t)(V * H) * sizeof(float));
    hd->bias = (float *)b->alloc(b, (size_t)V * sizeof(float)); /* zero-filled */
    b->copy(b, hd->w, W, (size_t)(V * H) * sizeof(float));
    if (bias) b->copy(b, hd->bias, bias, (size_t)V * sizeof(float));
    if (mask_col >= 0) {
        b->zero(b, hd->w + mask_col * H, (size_t)H * sizeof(float));
        b->upload(b, hd->bias + mask_col, &mask_value, sizeof(float));
    }
    return hd;
}

void cu_head_free(kf_backend *b, void *head) {
    cu_head *hd = (cu_head *)head;
    if (!hd) return;
    b->free(b, hd->w);
    b->free(b, hd->bias);
    b->free(b, hd->logits);
    free(hd);
}

void cu_head_fwd(kf_backend *b, float *logits, int32_t *ids, const float *x, const void *head,
                 int64_t rows) {
    cu_head *hd = (cu_head *)head;
    if (rows <= 0) return;
    float *l = logits;
    if (!l) {
        if (hd->logits_rows < rows) {
            b->free(b, hd->logits);
            hd->logits = (float *)b->alloc(b, (size_t)(rows * hd->V) * sizeof(float));
            hd->logits_rows = rows;
        }
        l = hd->logits;
    }
    cu_matmul_fixed(b, l, x, hd->w, rows, hd->V, hd->H, 0, 1, 1.0f, 0.0f, 1, 0, 0, 0, KF_PREC_FP32);
    cu_add_bias(b, l, hd->bias, rows, hd->V);
    if (ids) cu_argmax(b, ids, l, rows, hd->V);
}
