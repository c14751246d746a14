/* trainer/model/model_export.c — the outside layouts' limits and config.json (model_export.h). */
#include "trainer/model/model_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/strbuf.h"

int model_export_fits(const model_config *c, model_export_to to, kf_err *err) {
    const char *where = to == MODEL_EXPORT_RELEASE
                            ? "the released K-Forcing layout (its AR and MTP classes)"
                            : "the hf layout (its modelling code, tools/ref_model.py)";
    if (c->head == HEAD_MEDUSA)
        return kf_err_set(err, "a Medusa model (medusa_heads.*) cannot be exported to %s", where);
    if (c->head == HEAD_MTP)
        return kf_err_set(err,
                          "a PFLM with %lld MTP heads (mtp_heads.*) cannot be exported to %s: "
                          "it has one shared output_layer%s",
                          (long long)c->k_train, where,
                          to == MODEL_EXPORT_RELEASE
                              ? ", and its MTP class loads with strict=False, so the heads would "
                                "be dropped without an error"
                              : "");
    if (c->pos != POS_ROPE || c->tied_head || c->norm_bias || c->attn_bias)
        return kf_err_set(err,
                          "a model with GPT-2's options (learned positions, biases or a tied "
                          "head) cannot be exported to %s: it holds the DDiT only",
                          where);
    if (c->noise_cycles && to == MODEL_EXPORT_RELEASE)
        return kf_err_set(err,
                          "a PFLM with noise_cycles %lld cannot be exported to %s: its noise "
                          "encoder has the release's frequencies (a run that sets "
                          "model.noise_cycles: 0 trains with them; --to hf holds either)",
                          (long long)c->noise_cycles, where);
    if (c->bidir)
        return kf_err_set(err,
                          "a masked-diffusion model (bidirectional attention) cannot be exported "
                          "to %s: its modelling code is causal",
                          where);
    return 0;
}

/* Appends v as a quoted JSON string. */
static void put_quoted(strbuf *b, const char *v) {
    size_t n = strlen(v);
    char *q = kf_malloc(6 * n + 2);
    size_t len = json_escape(q, 6 * n + 2, v, n);
    strbuf_put(b, q, len);
    free(q);
}

static void put_str(strbuf *b, const char *key, const char *v) {
    strbuf_printf(b, "  \"%s\": ", key);
    put_quoted(b, v ? v : "");
    strbuf_puts(b, ",\n");
}

int model_export_hf_config(const model_config *c, const model_export_info *info, const char *path,
                           kf_err *err) {
    strbuf b = {0};
    int pflm = c->kind == MODEL_PFLM;
    strbuf_puts(&b, "{\n");
    put_str(&b, "model_type", "kforcing-ddit");
    strbuf_printf(&b, "  \"architectures\": [\"%s\"],\n", pflm ? "KForcingPFLM" : "KForcingAR");
    put_str(&b, "kind", pflm ? "pflm" : "ar");
    strbuf_printf(
        &b,
        "  \"hidden_size\": %lld,\n  \"num_attention_heads\": %lld,\n"
        "  \"num_hidden_layers\": %lld,\n  \"intermediate_size\": %lld,\n"
        "  \"vocab_size\": %lld,\n  \"k\": %lld,\n  \"max_position_embeddings\": %lld,\n"
        "  \"mask_token_id\": %lld,\n  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n"
        "  \"pad_token_id\": %lld,\n  \"rope_theta\": 10000,\n  \"layer_norm_eps\": 1e-05,\n",
        (long long)c->hidden, (long long)c->heads, (long long)c->blocks, (long long)(4 * c->hidden),
        (long long)c->vocab, (long long)c->k_train, (long long)c->seq_len, (long long)c->mask_id,
        (long long)info->bos_id, (long long)info->eos_id, (long long)info->pad_id);
    put_str(&b, "hidden_act", "gelu_pytorch_tanh");
    if (pflm) {
        put_str(&b, "noise_encoder_act", "gelu");
        /* 0: the release's frequencies for z; N: kernels/noise_freq.h's */
        strbuf_printf(&b, "  \"noise_cycles\": %lld,\n", (long long)c->noise_cycles);
    }
    put_str(&b, "torch_dtype", "float32");
    put_str(&b, "tokenizer", info->tokenizer);
    put_str(&b, "weights", info->weights);
    put_str(&b, "stage", info->stage);
    strbuf_printf(&b, "  \"step\": %lld,\n  \"stage_chain\": [", (long long)info->step);
    for (int i = 0; i < info->n_chain; i++) {
        const model_export_stage *s = &info->chain[i];
        strbuf_printf(&b, "%s\n    {\"name\": ", i ? "," : "");
        put_quoted(&b, s->name);
        strbuf_printf(&b, ", \"kind\": \"%s\", \"k\": %lld, \"steps\": %lld}", s->kind,
                      (long long)s->k, (long long)s->steps);
    }
    strbuf_printf(&b, "%s],\n  \"kforcing_export_version\": 2\n}\n", info->n_chain ? "\n  " : "");
    int rc = fs_write_atomic(path, b.s, b.len, err);
    free(b.s);
    return rc;
}
