/* common/crc32.h — CRC-32 as zlib's crc32() computes it (the gzip/PNG
 * polynomial), on the x86 carry-less multiply where the CPU has it. */
#ifndef KF_COMMON_CRC32_H
#define KF_COMMON_CRC32_H

#include <stddef.h>
#include <stdint.h>

/** The CRC-32 of the n bytes at p continued from crc (0 to start), equal to
 * zlib's crc32(crc, p, n) for every input. */
uint32_t crc32_update(uint32_t crc, const void *p, size_t n);

/** 1 when crc32_update uses PCLMULQDQ on this CPU (for tests and benchmarks). */
int crc32_clmul_available(void);

/** The PCLMULQDQ path alone (n >= 16; only when crc32_clmul_available()):
 * exposed so the test can compare it with zlib at every length. */
uint32_t crc32_clmul(uint32_t crc, const uint8_t *p, size_t n);

#endif
