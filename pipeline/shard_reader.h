/* pipeline/shard_reader.h — random access to one split of a shard set.
 *
 * A shard set is a directory written by `kf shards build` (pipeline/cli_shards.c):
 *
 *   DATA/manifest.yaml              written last, atomically; lists every shard
 *   DATA/train/shard-NNNNN.lmdb     one LMDB file each (MDB_NOSUBDIR)
 *   DATA/valid/shard-NNNNN.lmdb
 *
 * Inside a shard (see pipeline/shard_writer.h for the exact layout):
 *   named db "samples": key = sample index within the shard (uint64,
 *       big-endian, 0..count-1); value = seq_len token ids, little-endian
 *       uint16 when the vocabulary has at most 65536 ids, else uint32,
 *       followed in `pad` mode by the valid length (uint32 little-endian).
 *   named db "check": a CRC-32 per sample (used by `kf shards verify`).
 *   named db "meta": the shard's own record (magic, version, tokenizer,
 *       vocab sha256, seq_len, packing, count, sha256 over its values).
 * The split's sample i lives in the shard whose [first, first+count) range
 * (from the manifest) contains i.
 *
 * Opening validates the manifest (magic, version, fields, that shard counts add
 * up) and each shard's meta against it (tokenizer, seq_len, packing, count, id
 * width); a shard whose record disagrees is refused. Sample hashes are not
 * recomputed here (that is `kf shards verify`), but every value's size is
 * checked on read.
 *
 * Threads and processes: a shard_set must be opened after any fork (LMDB
 * environments do not survive fork). Environments are opened read-only with
 * MDB_RDONLY|MDB_NOSUBDIR|MDB_NOLOCK (shards are immutable once listed), so
 * any number of processes may read. One shard_set may be used by one thread
 * at a time; open one per thread for parallel reads (cheap: files are mmapped).
 */
#ifndef KF_PIPELINE_SHARD_READER_H
#define KF_PIPELINE_SHARD_READER_H

#include <stdint.h>

#include "common/error.h"

/** One split ("train" or "valid") of a shard set, opened read-only. */
typedef struct shard_set shard_set;

/** Opens a split of a shard set.
 * @param data_dir the directory holding manifest.yaml.
 * @param split "train" or "valid".
 * @param out receives the set on success.
 * @param err set on failure: missing/unreadable/malformed manifest (names the
 *        file, line and key), unknown split, a shard that is missing, is not an
 *        LMDB file, or whose meta disagrees with the manifest (names the shard).
 * @return 0 on success, -1 on failure (*out untouched). */
int shard_set_open(const char *data_dir, const char *split, shard_set **out, kf_err *err);

/** Number of samples in the split (the global index range is 0..count-1). */
int64_t shard_set_count(const shard_set *s);

/** Tokens per sample (every sample has exactly this many stored ids). */
int shard_set_seq_len(const shard_set *s);

/** The tokenizer's vocabulary size (gpt2 50257, bert-base-uncased 30522);
 * every stored id is below it. */
int64_t shard_set_vocab_size(const shard_set *s);

/** "wrap" (every sample is seq_len real tokens) or "pad" (a valid length
 * <= seq_len is stored; the rest is the pad id). */
const char *shard_set_packing(const shard_set *s);

/** The tokenizer name as recorded ("gpt2", "bert-uncased"). */
const char *shard_set_tokenizer(const shard_set *s);

/** sha256 (64 lowercase hex) of the tokenizer's vocabulary files. */
const char *shard_set_vocab_sha256(const shard_set *s);

/** sha256 (64 lowercase hex) of manifest.yaml's bytes: the identity of the
 * dataset (both splits), recorded by the trainer for resume checks. */
const char *shard_set_manifest_sha256(const shard_set *s);

/** Id of a special token recorded in the manifest ("bos", "eos", "cls",
 * "sep", "pad"), or -1 when the set has none by that role. */
int32_t shard_set_special_id(const shard_set *s, const char *name);

/** Reads sample index (0 <= index < count).
 * @param ids receives seq_len ids (caller-allocated).
 * @param len receives the valid length: seq_len in `wrap` mode, the stored
 *        length in `pad` mode (positions >= *len hold the pad id). May be NULL.
 * @param err set on failure: index out of range, a missing key, a value of the
 *        wrong size or an id >= vocab_size (names the shard and local index).
 * @return 0 on success, -1 on failure. */
int shard_set_get(shard_set *s, int64_t index, int32_t *ids, int32_t *len, kf_err *err);

/** Closes every environment and frees s (NULL is allowed). */
void shard_set_close(shard_set *s);

#endif
