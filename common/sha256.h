/* common/sha256.h — SHA-256 (FIPS 180-4), streaming and one-shot.
 *
 * Used for shard checksums, vocabulary fingerprints, checkpoint manifests and
 * config hashes. Digests are shown as 64 lowercase hex characters, the same
 * text `sha256sum` prints.
 *
 * Streaming use:
 *   sha256_ctx c; sha256_init(&c);
 *   sha256_update(&c, a, na); sha256_update(&c, b, nb);
 *   uint8_t d[32]; sha256_final(&c, d);
 */
#ifndef KF_COMMON_SHA256_H
#define KF_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/** Hashing state. Plain data: may be copied to fork a hash of a common prefix. */
typedef struct sha256_ctx {
    uint32_t h[8];   /* chaining value */
    uint64_t nbytes; /* bytes hashed so far */
    uint8_t buf[64]; /* pending partial block */
    size_t nbuf;     /* bytes in buf (< 64) */
} sha256_ctx;

/** Starts a new hash in c. */
void sha256_init(sha256_ctx *c);

/** Adds n bytes at p to the hash (n may be 0; p may be NULL when n is 0). */
void sha256_update(sha256_ctx *c, const void *p, size_t n);

/** Finishes the hash and writes the 32-byte digest to out. c must be
 * re-initialised with sha256_init before it is used again. */
void sha256_final(sha256_ctx *c, uint8_t out[32]);

/** Writes the digest d as 64 lowercase hex characters plus a NUL to out. */
void sha256_to_hex(const uint8_t d[32], char out[65]);

/** One-shot: the hex digest of n bytes at p. */
void sha256_hex(const void *p, size_t n, char out[65]);

/** The hex digest of the file at path, read in blocks (any size).
 * @return 0, or -1 with err set to "PATH: <strerror>" when it cannot be read. */
int sha256_file_hex(const char *path, char out[65], kf_err *err);

#endif
