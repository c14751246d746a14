/* pipeline/packer.h — documents -> fixed-length samples (MDLM preprocessing).
 *
 *   wrap: each document is (detokenized,) tokenized and followed by EOS; the
 *         token stream is cut into blocks of seq_len-2, and each block becomes
 *         [BOS] block [EOS]. The stream runs within one shard unit; its
 *         remainder at the unit's end is dropped (counted in dropped_tokens).
 *   pad:  each document becomes [CLS] ids[:seq_len-2] [SEP], padded with PAD
 *         to seq_len; the valid length is stored (truncations are counted).
 *
 * Special ids come from the tokenizer, with fallbacks so both packings work
 * with both tokenizers: bos = bos|cls, eos = eos|sep, cls = cls|bos,
 * sep = sep|eos, pad = pad|eos (GPT-2 has only <|endoftext|>, so a GPT-2 `pad`
 * set is <|endoftext|> ids <|endoftext|> padded with <|endoftext|>; BERT
 * `wrap` uses [CLS] block [SEP], as MDLM does).
 */
#ifndef KF_PIPELINE_PACKER_H
#define KF_PIPELINE_PACKER_H

#include "common/error.h"
#include "pipeline/build_config.h"
#include "pipeline/manifest.h"
#include "pipeline/shard_writer.h"
#include "tokenize/tokenizer.h"

typedef struct packer packer;

/** The special ids a config uses with tokenizer t, with the fallbacks above.
 * @return 0, or -1 with err set when a needed role has no id. */
int packer_specials(const tok *t, const build_config *c, manifest_special *out, kf_err *err);

/** A packer for one worker; t is used for encoding (owned by the caller, one
 * per thread). */
packer *packer_new(tok *t, const build_config *c, const manifest_special *sp);
void packer_free(packer *p);

/** Starts a unit: clears the wrap stream; samples go to w, counts to stats. */
void packer_begin(packer *p, shard_writer *w, shard_meta *stats);

/** Adds one document. @return 0, or -1 with err set (write error). */
int packer_add(packer *p, const char *text, size_t len, kf_err *err);

/** Ends the unit (drops and counts the wrap remainder). */
void packer_end(packer *p);

#endif
