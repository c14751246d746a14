/* common/crc32.c — CRC-32 by folding with carry-less multiplication
 * (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"),
 * for the reflected polynomial 0xEDB88320. Shards store a CRC-32 per sample
 * (a few hundred bytes each); zlib's table-driven crc32 was 2% of a build.
 *
 * One 128-bit remainder is folded forward 16 bytes at a time: each half is
 * multiplied by a power of x mod P (bit-reflected, as the polynomial is) that
 * moves it 128 bits on, and the next block is added. The end reduces 128
 * bits to 64, 64 to 32, then Barrett-reduces to the 32-bit remainder. Bytes
 * after the last whole block go through zlib. */
#include "common/crc32.h"

#include <zlib.h>

enum { CLMUL_MIN = 64 }; /* below this zlib is as fast */

#if defined(__x86_64__)
#include <immintrin.h>

int crc32_clmul_available(void) {
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_clmul(uint32_t crc, const uint8_t *p,
                                                              size_t n) {
    const __m128i k_fold =
        _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);      /* hi: x^(128-32), lo: x^(128+32) */
    const __m128i k_32 = _mm_set_epi64x(0, 0x163cd6124LL); /* 64 -> 32 bits */
    const __m128i k_barrett = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL); /* hi: mu, lo: P */
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)~crc));
    size_t i = 16;
    for (; i + 16 <= n; i += 16) {
        __m128i lo = _mm_clmulepi64_si128(x, k_fold, 0x00);
        __m128i hi = _mm_clmulepi64_si128(x, k_fold, 0x11);
        x = _mm_xor_si128(_mm_xor_si128(lo, hi), _mm_loadu_si128((const __m128i *)(p + i)));
    }
    /* 128 -> 64 bits (and 32 zero bits appended) */
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k_fold, 0x10));
    /* 64 -> 32 */
    x = _mm_xor_si128(_mm_srli_si128(x, 4),
                      _mm_clmulepi64_si128(_mm_and_si128(x, mask32), k_32, 0x00));
    /* Barrett: x mod P */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), k_barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), k_barrett, 0x00);
    uint32_t r = ~(uint32_t)_mm_extract_epi32(_mm_xor_si128(x, t), 1);
    return i < n ? (uint32_t)crc32(r, p + i, (uInt)(n - i)) : r;
}

#else

int crc32_clmul_available(void) { return 0; }

uint32_t crc32_clmul(uint32_t crc, const uint8_t *p, size_t n) {
    return (uint32_t)crc32(crc, p, (uInt)n);
}

#endif

uint32_t crc32_update(uint32_t crc, const void *p, size_t n) {
    static int have = -1; /* every thread that races here stores the same value */
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) __atomic_store_n(&have, h = crc32_clmul_available(), __ATOMIC_RELAXED);
    if (h && n >= CLMUL_MIN) return crc32_clmul(crc, p, n);
    return (uint32_t)crc32(crc, p, (uInt)n);
}
