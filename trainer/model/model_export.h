/* trainer/model/model_export.h — what a model needs to leave kforcing.
 *
 * `kf export` (trainer/cli/cli_export.c) writes a checkpoint in two outside
 * layouts; both hold the weights under the reference names of model.h
 * (model_save), which are the released K-Forcing classes' state_dict keys
 * without Lightning's "backbone." prefix:
 *
 *   release  the .ckpt the released sampler loads (tools/release_ckpt.py adds
 *            the prefix and rotary_emb.inv_freq). Its AR class is the DDiT
 *            with the shared head; its MTP class (a PFLM) has one shared
 *            output_layer and loads with strict=False, so a tensor it lacks
 *            would be dropped without a word: only the default architecture
 *            (RoPE, no biases, untied head) with HEAD_SHARED and the
 *            release's noise encoder (noise_cycles 0) fits.
 *   hf       a Hugging Face-style folder whose modelling code is
 *            tools/ref_model.py (tools/hf_load.py): the same architectures,
 *            with either noise encoder.
 *
 * config.json of the hf layout (model_export_hf_config):
 *   model_type "kforcing-ddit", architectures ["KForcingAR"|"KForcingPFLM"],
 *   kind "ar"|"pflm", hidden_size, num_attention_heads, num_hidden_layers,
 *   intermediate_size (4H), vocab_size (mask token included), k (tokens per
 *   pass; 1 for AR), max_position_embeddings (the training sequence length),
 *   mask_token_id (-1: none), bos/eos/pad_token_id (-1: unknown), rope_theta
 *   10000, layer_norm_eps 1e-5, hidden_act "gelu_pytorch_tanh",
 *   noise_encoder_act "gelu" and noise_cycles (PFLM: 0 the release's
 *   frequencies for z, N kernels/noise_freq.h's), torch_dtype "float32",
 *   tokenizer, weights ("ema"|"raw"), stage, step, stage_chain [{name, kind,
 *   k, steps}, ...] from the first stage to this one (teacher links),
 *   kforcing_export_version 2 (this layout's version; 1 lacked
 *   noise_cycles, and held the release's frequencies only).
 */
#ifndef KF_TRAINER_MODEL_MODEL_EXPORT_H
#define KF_TRAINER_MODEL_MODEL_EXPORT_H

#include <stdint.h>

#include "common/error.h"
#include "trainer/model/model.h"

typedef enum { MODEL_EXPORT_RELEASE = 0, MODEL_EXPORT_HF = 1 } model_export_to;

/** Checks that a model of config c can be written in layout `to`.
 *  @return 0, or -1 with err naming what the layout cannot hold. */
int model_export_fits(const model_config *c, model_export_to to, kf_err *err);

/** One stage of the chain a checkpoint came from. */
typedef struct model_export_stage {
    const char *name;
    const char *kind; /* runconfig_kind_name */
    int64_t k;
    int64_t steps;
} model_export_stage;

/** What config.json says besides the model config. Strings may be "". */
typedef struct model_export_info {
    const char *tokenizer;          /* tok_name(): "gpt2", "bert-uncased", ... */
    int64_t bos_id, eos_id, pad_id; /* -1: unknown */
    const char *weights;            /* "ema" | "raw" */
    const char *stage;
    int64_t step; /* -1: unknown */
    int n_chain;
    const model_export_stage *chain; /* first stage first; may be NULL when n_chain is 0 */
} model_export_info;

/** Writes config.json (above) to path, atomically. */
int model_export_hf_config(const model_config *c, const model_export_info *info, const char *path,
                           kf_err *err);

#endif
