/* common/sha256_blocks.h — SHA-256's block function, portable and with the
 * x86 SHA extensions (internal to common/sha256.c and its test).
 *
 * Both compute the same thing: they fold nblocks consecutive 64-byte blocks
 * at p into the chaining value h (FIPS 180-4 §6.2.2). sha256_update uses the
 * SHA-extension version when the CPU has it (Intel since Ice Lake/Goldmont,
 * AMD since Zen): it is about 5x faster, which matters because every shard
 * build hashes each unit's text and every packed sample. */
#ifndef KF_COMMON_SHA256_BLOCKS_H
#define KF_COMMON_SHA256_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

/** The portable C block function. */
void sha256_blocks_portable(uint32_t h[8], const uint8_t *p, size_t nblocks);

/** 1 when this CPU (and build) has the SHA extensions used by
 * sha256_blocks_shani, else 0. */
int sha256_shani_available(void);

/** The block function on the x86 SHA extensions; call it only when
 * sha256_shani_available() says 1. */
void sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks);

#endif
