/* trainer/hf_gpt2.h — a Hugging Face GPT-2 as an external evaluator (Gen-PPL).
 *
 * The paper scores completions with GPT-2-large. This loads a Hugging Face
 * GPT-2 directory as published (config.json + model.safetensors, the
 * tokenizer's vocab.json + merges.txt beside them) and runs its forward on a
 * kf_backend, through the same ops as the model (kernels/kernels.h):
 *
 *   x = wte[ids] + wpe[position]                      learned positions
 *   per block: x += c_proj(attn(c_attn(ln_1(x))))     causal, 1/sqrt(head_dim)
 *              x += mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))
 *   logits = ln_f(x) wte^T                            tied head, no bias
 *
 * LayerNorms have a bias (eps: layer_norm_epsilon). Weights use HF's key
 * names (h.N.ln_1, h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc,
 * h.N.mlp.c_proj, ln_f, wte, wpe; a "transformer." prefix is accepted,
 * lm_head.weight (tied) and the attn.bias / attn.masked_bias buffers are
 * ignored) and the Conv1D layout: weight [in, out], y = x W + b. A missing
 * key or a wrong shape is an error naming it. Any float dtype is read as fp32;
 * the forward runs in fp32.
 */
#ifndef KF_TRAINER_HF_GPT2_H
#define KF_TRAINER_HF_GPT2_H

#include <stdint.h>

#include "common/error.h"
#include "kernels/kernels.h"

typedef struct hf_gpt2 {
    kf_backend *be;
    int64_t hidden, heads, layers, vocab, n_positions;
    double eps;
    struct hf_gpt2_priv *priv;
} hf_gpt2;

/** Loads DIR/config.json and DIR/model.safetensors onto be.
 *  @return the model, or NULL with err (the file, key or config field). */
hf_gpt2 *hf_gpt2_load(kf_backend *be, const char *dir, kf_err *err);
void hf_gpt2_free(hf_gpt2 *g);

/** Forward over B sequences of L <= n_positions tokens (host ids [B*L]; row
 *  b's tokens past valid_len[b] are padding: never attended, not scored;
 *  valid_len NULL: all L). With logits (host, [B*L*V]) non-NULL it receives
 *  every row's logits; with nll (host, [B*L]) non-NULL, nll[b*L + t] is
 *  -log p(ids[t+1] | ids[..t]) for t + 1 < valid_len[b] and 0 otherwise. */
void hf_gpt2_forward(hf_gpt2 *g, const int32_t *ids, int64_t B, int64_t L, const int32_t *valid_len,
                  float *logits, float *nll);

#endif
