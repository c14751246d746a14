/* pipeline/manifest.h — DATA/manifest.yaml: the list of a shard set's shards.
 *
 * The manifest is the only entry point readers use: a shard file that is not
 * listed does not exist for them. It is written last by `kf shards build`,
 * atomically (temp + fsync + rename + fsync dir), and its text is a pure
 * function of the shard records, so equal inputs and configs give equal
 * bytes. Shape (all keys required):
 *
 *   magic: kforcing-shards
 *   version: 1
 *   name: owt-tiny
 *   tokenizer: gpt2
 *   vocab_size: 50257
 *   vocab_sha256: <64 hex>
 *   seq_len: 128
 *   packing: wrap                  # wrap | pad
 *   id_bytes: 2
 *   special: {bos: 50256, eos: 50256, cls: 50256, sep: 50256, pad: 50256}   # -1 = none
 *   config_sha256: <64 hex>        # canonical build config of this set
 *   splits:
 *     train:
 *       samples: 1234
 *       documents: 10 ... (statistics: documents, empty_documents,
 *                          replaced_utf8, raw_bytes, tokens,
 *                          truncated_documents, dropped_tokens)
 *       shards:
 *         - {file: train/shard-00000.lmdb, first: 0, count: 600, sha256: <64 hex>}
 *     valid: (same)
 */
#ifndef KF_PIPELINE_MANIFEST_H
#define KF_PIPELINE_MANIFEST_H

#include <stdint.h>

#include "common/error.h"
#include "pipeline/shard_writer.h"

#define MANIFEST_MAGIC "kforcing-shards"
#define MANIFEST_VERSION 1
#define MANIFEST_FILE "manifest.yaml"

/** Special ids by role (-1 = none). */
typedef struct manifest_special {
    int32_t bos, eos, cls, sep, pad;
} manifest_special;

/** One split: its shards' records in order (shards[i].count samples each,
 * starting at first[i] = the sum of the earlier counts). */
typedef struct manifest_split {
    int nshards;
    shard_meta *shards; /* only format fields, count and samples_sha256 are
                           meaningful after manifest_read */
    int64_t *first;
    int64_t samples;
    /* statistics summed over the shards (from their records) */
    int64_t docs, empty_docs, replaced, raw_bytes, tokens, truncated, dropped_tokens;
} manifest_split;

typedef struct manifest {
    char name[128];
    char tokenizer[32];
    char vocab_sha256[65];
    int64_t vocab_size;
    int32_t seq_len;
    char packing[8];
    int32_t id_bytes;
    manifest_special special;
    char config_sha256[65];
    manifest_split train, valid;
} manifest;

/** Fills split's first[], samples and statistics from its shards[] (the
 * builder sets nshards and shards, then calls this). */
void manifest_split_sum(manifest_split *s);

/** Writes DIR/manifest.yaml atomically from m. */
int manifest_write(const char *dir, const manifest *m, kf_err *err);

/** Reads and validates DIR/manifest.yaml (magic, version, every key, types,
 * shard file names, first/count consistency). Errors name FILE:LINE:COL and
 * the key. sha256_out (may be NULL) receives the sha256 of the file's bytes.
 * Free with manifest_free. */
int manifest_read(const char *dir, manifest *m, char sha256_out[65], kf_err *err);

/** The split named "train" or "valid", or NULL. */
manifest_split *manifest_split_get(manifest *m, const char *name);

void manifest_free(manifest *m);

#endif
