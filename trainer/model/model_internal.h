/* trainer/model/model_internal.h — what model.c, model_decode.c and model_io.c
 * share: tensor offsets per layer and the activation buffers of a pass.
 * Not part of the public API. */
#ifndef KF_TRAINER_MODEL_MODEL_INTERNAL_H
#define KF_TRAINER_MODEL_MODEL_INTERNAL_H

#include <stddef.h>

#include "trainer/model/model.h"

#define LN_EPS 1e-5f
#define ROPE_BASE 10000.0f
/* the mask token's logit: the model never predicts the mask */
#define MASK_LOGIT -1000.0f

/* Offsets (elements) of one block's tensors in the flat buffers; -1: the
 * architecture has no such tensor (model_config options). */
typedef struct block_off {
    int64_t norm1, norm1_b, qkv, qkv_b, out, out_b, norm2, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b;
} block_off;

/* w is vocab_embed's offset with a tied head (then b = -1). */
typedef struct head_off {
    int64_t norm, norm_b, w, b;
    int64_t res_w, res_b; /* a Medusa head's residual block; -1: none */
} head_off;

typedef struct noise_off {
    int64_t proj_w, proj_b, norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
} noise_off;

typedef struct model_priv {
    int64_t embed;
    int64_t pos;                    /* pos_embed (POS_LEARNED), right after embed; else -1 */
    int64_t heads_begin, heads_end; /* the output heads' own tensors (contiguous) */
    block_off *blk;
    head_off *head;  /* [n_heads_out] */
    noise_off noise; /* PFLM only */
    int64_t zdim;    /* noise values per noise row (k_train for HEAD_MTP, else 1) */
    void *w16;       /* params as a 16-bit copy in w16_prec's format (model_w16) */
    kf_precision w16_prec;
    int w16_fresh; /* w16 holds the current params (model_params_changed clears it) */
} model_priv;

/* A device buffer that grows on demand. */
typedef struct dbuf {
    void *p;
    size_t cap;
} dbuf;

void *dbuf_ensure(kf_backend *be, dbuf *d, size_t bytes);
void dbuf_release(kf_backend *be, dbuf *d);
void *dbuf_upload(kf_backend *be, dbuf *d, const void *src, size_t n, size_t esz);

/* ln1, ln2 and h2 as gemm_in16 says (16-bit copies or fp32). */
typedef struct layer_act {
    dbuf ln1, mean1, rstd1, qkv, att, lse, xmid, ln2, mean2, rstd2, h1, h2;
} layer_act;

typedef struct noise_act {
    dbuf feats, c, ln, mean, rstd, h1, h2, out, dh, dln, dc;
} noise_act;

typedef struct head_act {
    dbuf ln, mean, rstd;
    dbuf pre, g, u; /* a Medusa head's residual block: GELU input, output, ln + output */
} head_act;

/* In a 16-bit mode the activations only GEMMs and the attention read (the
 * blocks' norm outputs ln1, ln2, fc1's GELU output h2, q, k, v and the
 * attention's output, and in the backward the gradients at fc1's output,
 * at the attention's output and at qkv) are stored as 16-bit copies
 * (kernels.h): converted once where they are made, at half the memory. */
int gemm_in16(const model *m);
/* In a 16-bit mode the 16-bit copy of the weight at offset w (kernels.h
 * w16), made from params when they changed or the phase's format did;
 * NULL in fp32. */
const void *model_w16(model *m, int64_t w);
/* y = x W^T + bias + beta * y (x, or its 16-bit copy x16); through W's
 * decode-time form lin (linear_pack) when not NULL, with the same bits. */
void linear_fwd(model *m, const void *lin, float *y, const float *x, const void *x16, int64_t w,
                int64_t bias, int64_t rows, int64_t in, int64_t out, float beta);
/* dW += dy^T x, db += colsum dy (bias -1: none), and dx = dy W (+ dx when
 * dx_beta = 1; NULL: skipped); dy and x, or their 16-bit copies dy16, x16. */
void linear_bwd(model *m, float *dx, float dx_beta, const float *dy, const void *dy16,
                const float *x, const void *x16, int64_t w, int64_t bias, int64_t rows, int64_t in,
                int64_t out);
/* Noise encoder over nz rows (z_d: nz*zdim values, tau_d the same count); result in a->out.
 * lin: NULL, or its proj, fc1 and fc2 weights packed (linear_pack). */
void noise_encoder_fwd(model *m, noise_act *a, int64_t nz, const double *z_d, const double *tau_d,
                       void *const *lin);
/* x[i] += pos_embed[pos[i]] for R rows (POS_LEARNED; pos device int32 [R],
 * every value < n_positions; tmp: scratch). */
void pos_embed_fwd(model *m, dbuf *tmp, float *x, const int32_t *pos, int64_t R);
/* x += mlp(norm2(x)) of one block over R rows (a: scratch/saved activations).
 * lin: NULL, or its fc1 and fc2 weights packed (linear_pack). */
void block_mlp_fwd(model *m, const block_off *o, layer_act *a, float *x, int64_t R,
                   void *const *lin);
/* Head h's final norm over R rows of xf; returns the normalised rows (in a->ln). */
float *head_norm_fwd(model *m, head_act *a, int h, const float *xf, int64_t R);
/* What head h's output layer reads: the final norm's output, or a Medusa
 * head's residual block's (head_norm_fwd's return). */
const float *head_input(const model *m, const head_act *a, int h);

#endif
