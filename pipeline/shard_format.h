/* pipeline/shard_format.h — the byte layout of a shard, shared by the writer,
 * the reader and verify (internal to pipeline/).
 *
 * Named databases in a shard file:
 *   SHARD_DB_SAMPLES: key = local index (uint64 BE), value = ids (+ length).
 *   SHARD_DB_CHECK:   key = local index (uint64 BE), value = CRC-32 (zlib's)
 *                     of the value, uint32 LE: lets verify name the corrupt
 *                     sample cheaply; the shard's sha256 remains the check
 *                     that counts.
 *   SHARD_DB_META:    text fields of shard_meta (names as in shard_writer.h).
 */
#ifndef KF_PIPELINE_SHARD_FORMAT_H
#define KF_PIPELINE_SHARD_FORMAT_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "pipeline/shard_writer.h"

#define SHARD_DB_SAMPLES "samples"
#define SHARD_DB_CHECK "check"
#define SHARD_DB_META "meta"
#define SHARD_CHECK_BYTES 4

/** 2 when every id fits in uint16 (vocab_size <= 65536), else 4. */
int shard_id_bytes(int64_t vocab_size);

/** Bytes of one stored value: seq_len ids, plus a uint32 length in pad mode. */
size_t shard_value_bytes(int32_t seq_len, int32_t id_bytes, const char *packing);

void shard_key_encode(uint64_t index, uint8_t out[8]);
uint64_t shard_key_decode(const void *p);

/** Little-endian store/load of an unsigned value in nbytes (2 or 4). */
void shard_put_le(uint8_t *p, uint32_t v, int nbytes);
uint32_t shard_get_le(const uint8_t *p, int nbytes);

/** Stores ids[0..n) (each in [0, 2^(8*id_bytes))) little-endian, id_bytes
 * (2 or 4) each, at out: a sample's ids in one tight loop. */
void shard_ids_put(uint8_t *out, const int32_t *ids, int32_t n, int32_t id_bytes);

/** Loads n ids stored by shard_ids_put into ids (NULL: only scans them);
 * returns the largest, for the caller's range check (0 when n is 0). */
uint32_t shard_ids_get(const uint8_t *in, int32_t n, int32_t id_bytes, int32_t *ids);

/** The per-sample check bytes of a value. */
void shard_check_bytes(const void *value, size_t n, uint8_t out[SHARD_CHECK_BYTES]);

/** Decodes a value into ids[seq_len] and *len (seq_len in wrap mode).
 * @return NULL when well-formed, else a static description of what is wrong
 *         (id out of range, length out of range, pad mode ids after length
 *         that are not the pad id are allowed: padding is not interpreted). */
const char *shard_value_decode(const uint8_t *value, const shard_meta *m, int32_t *ids,
                               int32_t *len);

/** shard_value_decode without output: NULL when the value is well-formed. */
const char *shard_value_check(const uint8_t *value, const shard_meta *m);

/** Opens a committed shard read-only (MDB_RDONLY|MDB_NOSUBDIR|MDB_NOLOCK). */
int shard_env_open_ro(const char *path, MDB_env **env, kf_err *err);

/** Writes m into the meta db in its own transaction. @return an LMDB code. */
int shard_meta_put(MDB_env *env, const shard_meta *m);

/** Reads and validates the meta db (magic, version, every field present and
 * in range). @return 0, or -1 with err naming path and the field. */
int shard_meta_get(MDB_env *env, const char *path, shard_meta *m, kf_err *err);

#endif
