/* trainer/model/model.h — the DDiT backbone, the AR head and the PFLM noise encoder.
 *
 * One implementation of the paper's models, written against kernels/kernels.h
 * only (it runs on any backend). docs/architecture.md "Reference model" is the
 * specification (the PyTorch reference is tools/ref_model.py, GPT-2's
 * tools/ref_gpt2.py); the parameter names are the reference's PyTorch names, so a
 * checkpoint saved here loads with safetensors.torch.load_file and the
 * released checkpoints convert by stripping their "backbone." prefix.
 *
 * Parameters live in ONE flat fp32 device buffer (m->params), gradients in a
 * second of the same size (m->grads), so AdamW / EMA / clipping run over the
 * whole model in one launch. m->tensors lists every tensor (name, shape,
 * offset into the flat buffer), in this order:
 *
 *   vocab_embed.embedding                 [V, H]
 *   pos_embed.embedding                   [n_positions, H] POS_LEARNED only
 *   blocks.N.norm1.weight                 [H]        LayerNorm, eps 1e-5
 *   blocks.N.norm1.bias                   [H]        norm_bias only
 *   blocks.N.attn_qkv.weight              [3H, H]    RoPE on q,k (base 1e4) unless POS_LEARNED
 *   blocks.N.attn_qkv.bias                [3H]       attn_bias only
 *   blocks.N.attn_out.weight              [H, H]
 *   blocks.N.attn_out.bias                [H]        attn_bias only
 *   blocks.N.norm2.weight (/ .bias)       [H]        (.bias: norm_bias only)
 *   blocks.N.mlp.0.weight / .bias         [4H, H] / [4H]   GELU (tanh)
 *   blocks.N.mlp.2.weight / .bias         [H, 4H] / [H]
 *   output_layer.norm_final.weight        [H]        (.bias [H]: norm_bias only)
 *   output_layer.linear.weight / .bias    [V, H] / [V]     zero-initialised; absent
 *                                                    with tied_head (logits = x E^T,
 *                                                    E = vocab_embed.embedding, no bias)
 *   PFLM only (the noise encoder; ZD = 2H, or 2H*k_train for HEAD_MTP):
 *   noise_encoder.combined_proj.weight / .bias   [H, ZD] / [H]
 *   noise_encoder.norm.weight / .bias            [H]        LayerNorm with bias
 *   noise_encoder.mlp.0.weight / .bias           [4H, H] / [4H]   GELU (erf)
 *   noise_encoder.mlp.2.weight / .bias           [H, 4H] / [H]
 *   HEAD_MTP only, heads j = 1..k_train-1 (head 0 is output_layer):
 *   mtp_heads.J.norm_final.weight, mtp_heads.J.linear.weight / .bias
 *   HEAD_MEDUSA only (an AR model with Medusa-1 heads), J = 1..k_train:
 *   medusa_heads.J.res.weight / .bias     [H, H] / [H]   zero-initialised weight
 *   medusa_heads.J.linear.weight          [V, H]   no bias; starts as output_layer's
 *
 * Medusa heads (Cai et al. 2024, Medusa-1): head J reads y =
 * output_layer.norm_final(x), the AR head's input at position t, and gives
 * logits = u W_J^T with u = y + GELU_tanh(y R_J^T + r_J) (Medusa's residual
 * block uses SiLU; kernels.h's fused linear layer has GELU, as the
 * backbone's MLP): token t+1+J. Heads are logit heads 1..k_train after
 * output_layer (head 0). The backbone, the final norm and output_layer are
 * frozen: model_backward computes the Medusa heads' gradients only (the
 * others stay zero; a targets of -1 on head 0's rows keeps output_layer's
 * zero too). A Medusa file is checkpoint format version 3.
 *
 * Noise encoder input for one noise row (kernels' noise_features op, float64):
 * [cos(z g), sin(z g), cos(tau f), sin(tau f)] (2H values): f the release's
 * frequencies, g = f, or with noise_cycles = N >= 1 frequencies from one to N
 * cycles over z's [0, 1], fine enough for the MLP to cut z into a teacher's
 * narrow inverse-CDF bins. HEAD_MTP rows
 * carry k_train noise values: the features of (z_1, tau) ... (z_k, tau)
 * concatenated (2H*k values) — all k noise values in one token.
 * The mask token's logit (cfg.mask_id >= 0) is set to -1000.
 *
 * Architecture options (model_config; all zero = the DDiT above, which is
 * what every checkpoint without "kf.version" holds): pos = POS_LEARNED adds
 * a learned position embedding to every row's input (at the row's layout
 * position) instead of rotating q and k; norm_bias gives the block and final
 * LayerNorms a bias; attn_bias gives attn_qkv and attn_out a bias; tied_head
 * makes the output layer the transposed token embedding. With all four
 * (n_positions = the context) the backbone is GPT-2: blocks are pre-norm,
 * x += attn_out(attn(attn_qkv(norm1(x)))), x += mlp(norm2(x)), GELU tanh
 * (model_hf.h maps a Hugging Face GPT-2 into it). The noise encoder is the
 * same under every option.
 *
 * Usage (training step):
 *   model *m = model_create(be, &cfg); model_init(m, seed);
 *   model_ws *ws = model_ws_create(m);
 *   model_forward(m, ws, &in, MODEL_TRAIN, NULL);
 *   double sum = model_loss(m, ws, targets, norm, loss_scale, &count);
 *   model_backward(m, ws);          // grads += d(loss_scale * sum / norm)
 *   (model_backward_notify: the same, reporting when each part of grads is final)
 */
#ifndef KF_TRAINER_MODEL_MODEL_H
#define KF_TRAINER_MODEL_MODEL_H

#include <stdint.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "trainer/model/layout.h"

typedef enum { MODEL_AR = 0, MODEL_PFLM = 1 } model_kind;
typedef enum { HEAD_SHARED = 0, HEAD_MTP = 1, HEAD_MEDUSA = 2 } model_head;
typedef enum { POS_ROPE = 0, POS_LEARNED = 1 } model_pos;

/* the largest noise_cycles: beyond it z's float64 products still resolve the
 * bins, but the features, rounded to float, would be noise */
#define MODEL_NOISE_CYCLES_MAX 65536

typedef struct model_config {
    int64_t hidden; /* H; head_dim = H / heads (64 in the reference) */
    int64_t heads;
    int64_t blocks;
    int64_t vocab;   /* model vocabulary, mask token included */
    int64_t mask_id; /* its logit is forced to -1000; -1: none */
    int64_t seq_len; /* training sequence length (data samples) */
    model_kind kind;
    model_head head; /* HEAD_MTP only with MODEL_PFLM, HEAD_MEDUSA with MODEL_AR */
    int64_t k_train; /* PFLM window k (AR: 1); HEAD_MTP: number of heads; HEAD_MEDUSA:
                        number of Medusa heads (besides output_layer) */
    /* architecture options (see above; 0 = the DDiT) */
    model_pos pos;        /* POS_ROPE, or POS_LEARNED (pos_embed.embedding) */
    int tied_head;        /* 1: logits = x E^T (HEAD_SHARED only) */
    int norm_bias;        /* 1: LayerNorms norm1, norm2, norm_final have a bias */
    int attn_bias;        /* 1: attn_qkv and attn_out have a bias */
    int64_t n_positions;  /* POS_LEARNED: rows of pos_embed (positions < it), >= seq_len; else 0 */
    int bidir;            /* 1: bidirectional attention over the context (a masked-diffusion
                             model, MDLM: row t's logits predict token t itself); MODEL_AR
                             kind only, never KV-cached (mdlm_sample.h decodes it) */
    int64_t noise_cycles; /* MODEL_PFLM only: the noise encoder's z frequencies (kernels.h
                             noise_features): 0 the release's (at most one cycle over [0, 1]),
                             N >= 1 geometric from 1 to N cycles */
} model_config;

/** Checks a config (sizes positive, H divisible by heads (into an even head
 *  dim with RoPE), mask_id < vocab, consistent options, ...).
 *  @return 0, or -1 with err naming the field. */
int model_config_check(const model_config *c, kf_err *err);

typedef struct model_tensor {
    char name[64];
    int ndim; /* 1 or 2 */
    int64_t shape[2];
    int64_t offset; /* elements into params / grads */
    int64_t numel;
} model_tensor;

typedef struct model model; /* fields below are read-only for callers */
struct model {
    kf_backend *be;
    model_config cfg;
    int64_t n_params;
    float *params; /* device [n_params]; after writing it other than through a
                      model_* function, call model_params_changed */
    float *grads;  /* device [n_params]; model_backward accumulates */
    int n_tensors;
    model_tensor *tensors;
    int64_t n_heads_out;     /* heads producing logits per out row: k_train for MTP,
                                1 + k_train for Medusa, else 1 */
    struct model_priv *priv; /* offsets of each layer's tensors (model_internal.h) */
};

/** Allocates parameters and gradients (zeroed) on be. Dies on a bad config. */
model *model_create(kf_backend *be, const model_config *cfg);
void model_free(model *m);

/** Deterministic initialisation from seed (common/rng.h, stream = tensor
 *  index): PyTorch defaults — Linear weights and biases U(-1/sqrt(in),
 *  1/sqrt(in)), the embeddings U(-1/sqrt(H), 1/sqrt(H)) (MDLM's
 *  kaiming_uniform(a=sqrt 5)), LayerNorm weights 1 and biases 0, the output
 *  layers (output_layer.linear, mtp heads) zero. Gradients are zeroed. */
void model_init(model *m, uint64_t seed);

/** Says m->params changed (the optimizer's step, ZeRO-1's all-gather, the
 *  EMA swapped in, a test's edit): in a 16-bit phase the linear layers'
 *  GEMMs read a 16-bit copy of the weights (kernels.h w16), which the next
 *  forward then makes again, once, from the new values. model_init,
 *  model_copy_matching and the loaders call it themselves. */
void model_params_changed(model *m);

/** Copies every tensor of src whose name and shape match into m (a PFLM from
 *  an AR model, a student from its teacher); MTP heads with no match copy
 *  output_layer. @return number of tensors copied. */
int model_copy_matching(model *m, const model *src);

/** Looks a tensor up by name; NULL when absent. */
const model_tensor *model_find(const model *m, const char *name);

/** Sets grads to zero. */
void model_zero_grads(model *m);

/* ---- checkpoints (safetensors; config in __metadata__ as "kf.<field>") ----
 * Format version "kf.version" = "2" (3 for a Medusa model: kf.head medusa): the config keys
 * kf.hidden, kf.heads, kf.blocks, kf.vocab, kf.mask_id, kf.seq_len, kf.k_train (integers), kf.kind
 * (ar|pflm), kf.head (shared|mtp|medusa), and the options kf.pos (rope|learned), kf.n_positions,
 * kf.tied_head, kf.norm_bias, kf.attn_bias (0|1), kf.attn (causal|bidirectional; optional on
 * read: absent is causal). A file without kf.version is version 1 (no option keys: the default
 * architecture); other versions are refused. Loading checks the config (model_config_check) and
 * that the file holds exactly the model's tensors (names above) with their shapes. */

/** Writes buf (a device buffer laid out like params, e.g. the EMA; NULL:
 *  params) with the reference names. Atomic. */
int model_save(const model *m, const char *path, const float *buf, kf_err *err);

/** Reads the config recorded in a checkpoint's metadata. */
int model_read_config(const char *path, model_config *cfg, kf_err *err);

/** Creates a model on be from a checkpoint written by model_save. */
model *model_load(kf_backend *be, const char *path, kf_err *err);

/** Loads path's tensors into buf (NULL: params); the names and shapes must
 *  be exactly m's. */
int model_load_into(model *m, const char *path, float *buf, kf_err *err);

/* ---- forward / backward ---- */

/** One batch. Host arrays (but picks); the model uploads what it needs. */
typedef struct model_input {
    const layout *lay;
    int64_t B;
    const int32_t *ids;   /* [B*L]: the token of every token row (others ignored) */
    const int32_t *picks; /* device ids [n_picks] (a teacher's model_pick) that replace
                             ids at the flat rows pick_at[i] (host, b*L + r, token rows
                             the pass computes): the next pass's input built without a
                             host wait; NULL when n_picks is 0 */
    const int32_t *pick_at;
    int64_t n_picks;
    const double *z;          /* [B*L*zdim] noise values of noise rows (zdim = k_train
                                 for HEAD_MTP, else 1); NULL when there are none */
    const double *tau;        /* [B] temperature per sample (noise rows) */
    const int32_t *valid_len; /* [B] context length per sample, or NULL */
    const float *loss_w;      /* [B] each sample's rows' losses (and, MODEL_TRAIN, their
                                 dlogits) are multiplied by loss_w[b] in model_loss: a
                                 weighted objective (a masked-diffusion sample's time
                                 weight); NULL: 1. With it a pass's loss ops depend on
                                 host values: not for graphs */
} model_input;

/** Activations of one pass (sized on first use, grown when needed). A model
 *  may have several (teacher, student, eval). */
typedef struct model_ws model_ws;
model_ws *model_ws_create(model *m);
void model_ws_free(model_ws *ws);

enum {
    MODEL_TRAIN = 1,       /* keep every activation for model_backward; implies
                              MODEL_NO_LOGITS */
    MODEL_KEEP_CTX_KV = 2, /* keep each layer's context-row qkv, so a later
                              pass with lay->mask.q_start = n_ctx (DoubleForward)
                              can reuse them via kv_src */
    MODEL_NO_LOGITS = 4    /* a pass only model_loss or model_pick reads: the
                              output layer waits for them and runs a chunk of
                              rows at a time, so the [rows, V] logits never
                              exist whole */
};

/** Logits of a MODEL_NO_LOGITS pass are made at most this many bytes at a
 *  time (then the whole pass when they fit). */
#define MODEL_LOGIT_CHUNK_BYTES ((size_t)1 << 30)

/** Runs the backbone over in (rows [q_start, L) of each sample; rows before
 *  q_start take their K/V from kv_src, a ws whose previous pass used
 *  MODEL_KEEP_CTX_KV with the same B and n_ctx). Returns the logits, a device
 *  buffer [n_heads_out * B * n_out, V] owned by ws (valid until its next
 *  pass), ordered head-major, then sample, then out row; NULL for a
 *  MODEL_TRAIN or MODEL_NO_LOGITS pass, whose head runs in model_loss. */
const float *model_forward(model *m, model_ws *ws, const model_input *in, int flags,
                           const model_ws *kv_src);

/** model_forward in two halves, so that a caller can record the second as a
 *  graph (kernels.h graph_begin) and launch it on later passes:
 *  model_forward_inputs does the host's work and every upload of the pass
 *  (token ids and their rows, noise values, positions, row maps), into
 *  ws's device buffers; model_forward_ops, with the same arguments, then
 *  issues the device ops alone (and returns what model_forward does),
 *  in->valid_len included (the attention reads ws's device copy). */
void model_forward_inputs(model *m, model_ws *ws, const model_input *in, int flags,
                          const model_ws *kv_src);
const float *model_forward_ops(model *m, model_ws *ws, const model_input *in,
                               const model_ws *kv_src);

/** How many device buffers the model code has allocated so far in this
 *  process (workspaces grown, weight copies made): a graph recorded over
 *  model passes (kernels.h graph_begin) still has valid addresses while it
 *  is unchanged. */
uint64_t model_allocs(void);

/** Number of logit rows of ws's last pass. */
int64_t model_ws_rows(const model_ws *ws);

/** Makes model_loss of a MODEL_NO_LOGITS pass on ws compute the logits of at
 *  most `rows` output rows at a time (0: automatic, MODEL_LOGIT_CHUNK_BYTES).
 *  Per row the results do not depend on it; the head's weight and bias
 *  gradients are summed chunk by chunk. For tests. */
void model_ws_set_logit_chunk(model_ws *ws, int64_t rows);

/** Cross-entropy of the last pass against targets (host, one per logit row,
 *  < 0 ignored). Returns the SUM of counted rows' losses and their number in
 *  *count. row_loss (host, may be NULL) receives every row's loss (0 when
 *  ignored). After a MODEL_TRAIN pass it also backpropagates through the
 *  output layer: dlogits = loss_scale / norm * (softmax - onehot) (norm <= 0:
 *  *count), times model_weight_dlogits's weights, give the head's gradients
 *  and the gradient at its input, which model_backward carries on from. */
double model_loss(model *m, model_ws *ws, const int32_t *targets, double norm, float loss_scale,
                  int64_t *count, float *row_loss);

/** model_loss without a wait or an upload (so it can be recorded in a
 *  graph): targets is a device buffer of m's backend (one per logit row, < 0
 *  ignored, the others token ids); grad_scale a device float of m's backend
 *  read when the ops run, model_loss's (float)(loss_scale / norm) (NULL: 1,
 *  a pass without MODEL_TRAIN; kf_grad_ctl's xent_scale in a training
 *  step); the sum of the counted rows' losses is added to sum_d[0] (a device
 *  double of m's backend, bitwise the sum model_loss returns added to it)
 *  and stays on the device. */
void model_loss_acc(model *m, model_ws *ws, const int32_t *targets, const float *grad_scale,
                    double *sum_d);

/** Makes the next model_loss of a MODEL_TRAIN pass multiply the dlogits of
 *  the logit rows r with first <= r % period < first + count by w:
 *  per-position loss weights for outputs grouped (t, j) with period = k
 *  (shared head). Call between model_forward and model_loss. */
void model_weight_dlogits(model *m, model_ws *ws, int64_t period, int64_t first, int64_t count,
                          float w);

/** Token ids from the logits of the last model_forward on ws (not
 *  MODEL_TRAIN), into ids[rows], a device buffer of m->be (the first `rows`
 *  logit rows): each row's first maximum (z == NULL), or its inverse-CDF
 *  sample for host noise z[r] and temperature tau[r] (kernels.h
 *  sample_icdf). After a MODEL_NO_LOGITS pass the output layer runs here, a
 *  chunk of rows at a time; per row the ids are the same. Nothing waits for
 *  the device: the ids feed the next pass (model_input picks) until the
 *  caller reads them back, once for all of its passes. */
void model_pick(model *m, model_ws *ws, int64_t rows, const double *z, const double *tau,
                int32_t *ids);

/** model_pick in two halves, as model_forward_inputs and model_forward_ops
 *  (so that the second can be recorded as a graph): model_pick_noise
 *  uploads z and tau [rows] into ws; model_pick_ops then picks rows ids
 *  with them (sample != 0; after a model_pick_noise of at least rows) or
 *  by argmax (sample 0), with no upload. */
void model_pick_noise(model *m, model_ws *ws, int64_t rows, const double *z, const double *tau);
void model_pick_ops(model *m, model_ws *ws, int64_t rows, int sample, int32_t *ids);

/** Makes ws's following passes keep their output rows (model_forward_inputs)
 *  and model_pick_noise's noise in input slot i (>= 0; slot 0 at
 *  model_ws_create), and their ops (model_forward_ops, model_pick_ops,
 *  model_backward) read them there: so passes over ws that differ in these
 *  alone can all upload before the first one's ops (sup_ar_blocks' passes
 *  1..k-1 as one graph). Everything else model_forward_inputs uploads is
 *  ws's, for all slots. */
void model_ws_set_slot(model_ws *ws, int64_t i);

/** Backpropagates from the gradient model_loss left at the head's input;
 *  grads += . */
void model_backward(model *m, model_ws *ws);

/** Told that grads[off, off + count) is final: every op of this backward
 *  that writes it has been issued on m->be (done on the CPU; queued on the
 *  backend's stream on a GPU). */
typedef void (*model_grads_ready_fn)(void *ctx, int64_t off, int64_t count);

/** model_backward, calling ready as parts of grads become final, in the
 *  order the backward finishes them: the output head(s), blocks N-1 .. 0,
 *  vocab_embed, then the noise encoder (PFLM). The ranges cover grads
 *  exactly once and do not depend on the batch, so every data-parallel rank
 *  reports the same sequence (dist_grads_ready overlaps the all-reduce with
 *  the rest of the backward). */
void model_backward_notify(model *m, model_ws *ws, model_grads_ready_fn ready, void *ctx);

/* ---- KV-cached decoding (decode.h drives it) ---- */

/** The output layer(s) and the blocks' (and noise encoder's) linear
 *  weights in the backend's decoding form (head_pack, linear_pack), made
 *  once from the weights as they are at the call, at the backend's
 *  precision then, and shared by any number of decoding runs: the weights
 *  must not change while it is in use. */
typedef struct model_heads model_heads;
model_heads *model_heads_pack(model *m);
void model_heads_free(model_heads *h);

/** Per-layer K/V caches for B sequences of up to cap rows, decoding through
 *  the packed output layers h (borrowed). */
typedef struct model_cache model_cache;
model_cache *model_cache_create(model *m, const model_heads *h, int64_t B, int64_t cap);
void model_cache_free(model_cache *c);
/** Rows currently kept. */
int64_t model_cache_len(const model_cache *c);
/** Forgets the rows at and after len (0 <= len <= model_cache_len): the
 *  next step writes from there (speculative decoding drops the K/V of the
 *  drafts it rejected). */
void model_cache_rewind(model_cache *c, int64_t len);

/** Runs the noise encoder (PFLM) on n rows, row i from z[i] (zdim values)
 *  at temperature tau[i], into c's noise table, replacing what it held
 *  (n >= 1). model_decode_step called with z NULL takes its noise rows
 *  from the table. A row equals the one model_decode_step encodes from the
 *  same z and tau: on the CPU bit for bit, as a row's products do not
 *  depend on the rows beside it. One pass over several steps' noise reads
 *  the encoder's weights once for all of them, where each step's few rows
 *  would read them every step. */
void model_cache_noise_encode(model *m, model_cache *c, int64_t n, const double *z,
                              const double *tau);

/** Feeds Q new rows per sample, which take cache rows and positions
 *  [P, P+Q) (P = model_cache_len; POS_LEARNED: P+Q <= n_positions) and see every earlier row
 * causally. Row i is noise when noise[i], else token ids[b*Q+i]. A noise
 *  row is encoded from z[b*Q+i] (zdim values) at tau[b]; with z NULL (tau
 *  unread) it is row ids[b*Q+i] of the noise table instead
 *  (model_cache_noise_encode). Returns logits [n_heads_out * n_out * B, V] for rows out[0..n_out)
 *  ordered head, out row, sample (so one output position of all samples is
 *  contiguous). With argmax != NULL (device int32, one per logits row) it
 *  gets each row's first maximum instead and NULL is returned: the output
 *  layer then never materialises the logits. Afterwards the first `keep` new
 *  rows stay cached (P += keep); the others (noise rows) are discarded. */
const float *model_decode_step(model *m, model_cache *c, int64_t Q, const uint8_t *noise,
                               const int32_t *ids, const double *z, const double *tau,
                               int64_t n_out, const int32_t *out, int64_t keep, int32_t *argmax);

#endif
