/* trainer/model/model_hf.h — a Hugging Face GPT-2 checkpoint as the one model.
 *
 * GPT-2 is the model of model.h with the options pos = POS_LEARNED
 * (n_positions = the context), norm_bias, attn_bias and tied_head, kind AR,
 * no mask token (mask_id -1), seq_len = n_positions. A published GPT-2
 * directory (config.json + model.safetensors, as save_pretrained writes it)
 * maps into it key by key; HF's Conv1D stores a Linear's weight as [in, out]
 * (y = x W + b), so those weights are transposed into model.h's [out, in]:
 *
 *   wte.weight              -> vocab_embed.embedding      (also the tied head)
 *   wpe.weight              -> pos_embed.embedding
 *   h.N.ln_1.weight / .bias -> blocks.N.norm1.weight / .bias
 *   h.N.attn.c_attn.*       -> blocks.N.attn_qkv.*        (weight transposed)
 *   h.N.attn.c_proj.*       -> blocks.N.attn_out.*        (weight transposed)
 *   h.N.ln_2.*              -> blocks.N.norm2.*
 *   h.N.mlp.c_fc.*          -> blocks.N.mlp.0.*           (weight transposed)
 *   h.N.mlp.c_proj.*        -> blocks.N.mlp.2.*           (weight transposed)
 *   ln_f.weight / .bias     -> output_layer.norm_final.weight / .bias
 *
 * Keys may carry a "transformer." prefix (GPT2LMHeadModel). lm_head.weight,
 * when present, must equal wte (the head is tied); the attn.bias and
 * attn.masked_bias buffers (causal masks) are ignored; any other key is an
 * error naming it, as are a missing key or a wrong shape. config.json must
 * describe what the model computes: activation_function gelu_new (or
 * gelu_pytorch_tanh), layer_norm_epsilon 1e-5, no
 * scale_attn_by_inverse_layer_idx or cross-attention. Any float dtype is
 * read as fp32.
 */
#ifndef KF_TRAINER_MODEL_MODEL_HF_H
#define KF_TRAINER_MODEL_MODEL_HF_H

#include "common/error.h"
#include "trainer/model/model.h"

/** Creates a model on be from the Hugging Face GPT-2 in DIR (its config
 *  from config.json: n_embd, n_head, n_layer, vocab_size, n_positions).
 *  @return the model, or NULL with err (the file, key or config field). */
model *model_hf_gpt2_load(kf_backend *be, const char *dir, kf_err *err);

#endif
