/* common/sha256_shani.c — SHA-256 blocks on the x86 SHA extensions
 * (sha256rnds2 does two rounds, sha256msg1/msg2 the message schedule). The
 * instructions keep the state as (A,B,E,F) and (C,D,G,H) in two registers,
 * hence the shuffles on entry and exit. */
#include "common/sha256_blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

extern const uint32_t sha256_K[64]; /* common/sha256.c */

/* cpuid rather than __builtin_cpu_supports("sha"), which clang 14 (the
 * fuzzing build) does not know: SHA is leaf 7 EBX bit 29, SSE4.1 and SSSE3
 * leaf 1 ECX bits 19 and 9. */
int sha256_shani_available(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}

__attribute__((target("sha,sse4.1,ssse3"))) void
sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    hgfe = _mm_shuffle_epi32(hgfe, 0x1B); /* words E F G H, high to low */
    __m128i abef = _mm_alignr_epi8(cdab, hgfe, 8);
    __m128i cdgh = _mm_blend_epi16(hgfe, cdab, 0xF0);
    for (; nblocks; nblocks--, p += 64) {
        const __m128i abef0 = abef, cdgh0 = cdgh;
        __m128i w[4]; /* w[j & 3] holds W[4j .. 4j+3] */
        for (int j = 0; j < 4; j++)
            w[j] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * j)), bswap);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            __m128i wk =
                _mm_add_epi32(w[j & 3], _mm_loadu_si128((const __m128i *)&sha256_K[4 * j]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
            if (j < 12) { /* W[4j+16 ..] from W[4j ..], W[4j+4 ..], W[4j+8 ..], W[4j+12 ..] */
                __m128i t = _mm_sha256msg1_epu32(w[j & 3], w[(j + 1) & 3]);
                t = _mm_add_epi32(t, _mm_alignr_epi8(w[(j + 3) & 3], w[(j + 2) & 3], 4));
                w[j & 3] = _mm_sha256msg2_epu32(t, w[(j + 3) & 3]);
            }
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}

#else

int sha256_shani_available(void) { return 0; }

void sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks) {
    sha256_blocks_portable(h, p, nblocks);
}

#endif
