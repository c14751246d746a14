/* pipeline/shard_writer.h — writes one LMDB shard, atomically; reads back and
 * verifies a shard's record.
 *
 * A shard is one LMDB file (MDB_NOSUBDIR) with three named databases:
 *   "samples": key = local sample index (uint64 big-endian, 0..count-1),
 *              value = seq_len ids (uint16 LE when vocab_size <= 65536, else
 *              uint32 LE), then in `pad` mode the valid length (uint32 LE).
 *              Appended in order with MDB_APPEND.
 *   "check":   same keys, value = CRC-32 of the sample's value (uint32 LE), so
 *              verify can name the damaged sample.
 *   "meta":    one key per field of shard_meta, values as decimal or text
 *              (keys: magic, version, tokenizer, vocab_sha256, vocab_size,
 *              seq_len, packing, id_bytes, count, samples_sha256,
 *              source_sha256, config_sha256, docs, empty_docs, replaced,
 *              raw_bytes, tokens, truncated, dropped_tokens).
 * samples_sha256 = sha256 over the values of "samples" in key order; it is the
 * check `kf shards verify` and the resume logic recompute.
 *
 * Atomicity: the writer fills an unnamed file (O_TMPFILE) in PATH's
 * directory, and shard_writer_commit writes the meta, starts its write-back
 * and names it PATH (replacing an older file). A file named PATH therefore
 * holds a complete shard as long as the machine stays up (a killed build
 * leaves no partial file behind). Where the filesystem has no O_TMPFILE the
 * writer fills PATH.tmp instead and renames it: PATH.tmp files are leftovers
 * of a killed build and are never listed or read (the builder deletes them).
 * Durability is the caller's, before it lists the shard anywhere: fsync the
 * file (fs_fsync_path), then its directory (fs_fsync_dir); the builder does
 * both once, before writing the manifest. After a power loss an unlisted
 * shard may thus be missing or damaged; a resumed build verifies every
 * existing shard (shard_verify) and rebuilds those.
 * The map grows (doubling) whenever a put reports MDB_MAP_FULL.
 */
#ifndef KF_PIPELINE_SHARD_WRITER_H
#define KF_PIPELINE_SHARD_WRITER_H

#include <stdint.h>

#include "common/error.h"

#define SHARD_MAGIC "kforcing-shard"
#define SHARD_VERSION 1

/** A shard's record: format fields (set before writing) and its provenance and
 * statistics (set by the builder before commit; stored so a resumed build can
 * rebuild its report from finished shards without re-reading them). */
typedef struct shard_meta {
    /* format */
    char tokenizer[32]; /* tok_name(): "gpt2", "bert-uncased" */
    char vocab_sha256[65];
    int64_t vocab_size;
    int32_t seq_len;
    char packing[8];         /* "wrap" | "pad" */
    int32_t id_bytes;        /* 2 or 4; derived from vocab_size by shard_writer_open */
    int64_t count;           /* samples; set by the writer */
    char samples_sha256[65]; /* set by the writer */
    /* provenance: sha256 over the unit's raw input documents and over the
     * canonical build config; a resumed build reuses a shard only when both
     * match what it would write now. */
    char source_sha256[65];
    char config_sha256[65];
    /* statistics of the unit */
    int64_t docs;           /* documents that produced tokens */
    int64_t empty_docs;     /* empty lines / files / text fields (skipped) */
    int64_t replaced;       /* invalid UTF-8 sequences replaced by U+FFFD */
    int64_t raw_bytes;      /* input bytes of the documents */
    int64_t tokens;         /* valid stored tokens (incl. specials, excl. padding) */
    int64_t truncated;      /* pad mode: documents cut at seq_len */
    int64_t dropped_tokens; /* wrap mode: remainder dropped at the unit's end */
} shard_meta;

/** A shard being written. */
typedef struct shard_writer shard_writer;

/** Starts writing the shard that will be named path (writes path.tmp,
 * replacing any stale one).
 * @param m format fields (tokenizer .. packing) are copied; id_bytes is
 *        derived from vocab_size.
 * @return 0, or -1 with err set (path not writable, LMDB error). */
int shard_writer_open(const char *path, const shard_meta *m, shard_writer **out, kf_err *err);

/** Appends the next sample: seq_len ids (each 0 <= id < vocab_size, checked)
 * and its valid length (stored only in `pad` mode; must be seq_len in `wrap`).
 * @return 0, or -1 with err set (disk full, LMDB error). */
int shard_writer_append(shard_writer *w, const int32_t *ids, int32_t len, kf_err *err);

/** Samples appended so far. */
int64_t shard_writer_count(const shard_writer *w);

/** Finishes the shard: copies the provenance and statistics fields of stats
 * into the record, writes the meta db, starts its write-back and gives it
 * the final path (the file's and the directory's fsync are the caller's,
 * see above). Frees w in every case.
 * @param final_meta if non-NULL, receives the complete record as stored.
 * @return 0, or -1 with err set (the temp file is removed). */
int shard_writer_commit(shard_writer *w, const shard_meta *stats, shard_meta *final_meta,
                        kf_err *err);

/** Abandons the shard: closes and removes path.tmp, frees w (NULL allowed). */
void shard_writer_abort(shard_writer *w);

/** Recomputes a shard's samples_sha256 and checks every value's size, every
 * key (0..count-1, no gaps, no extras) and every id against vocab_size.
 * @param m receives the stored record (may be NULL).
 * @return 0 when the shard is intact; -1 with err set naming the file and, for
 *         a bad sample, its local index ("sample 17: ..."); for a hash
 *         mismatch the message says so (no single index is at fault). */
int shard_verify(const char *path, shard_meta *m, kf_err *err);

#endif
