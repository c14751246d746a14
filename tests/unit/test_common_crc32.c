/* crc32_update against zlib's crc32 at every length 0..2048, at four
 * alignments, continued from a non-zero CRC, and on 1 MiB; the PCLMULQDQ
 * path on its own at every length it accepts. */
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "common/crc32.h"
#include "tests/test.h"

int main(void) {
    enum { N = 1 << 20 };
    unsigned char *b = malloc(N);
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        b[i] = (unsigned char)(x >> 24);
    }
    int bad = 0, bad_clmul = 0;
    for (size_t n = 0; n <= 2048; n++) {
        for (size_t off = 0; off < 4; off++) {
            uint32_t seed = n % 3 ? (uint32_t)(n * 2654435761u) : 0;
            uint32_t want = (uint32_t)crc32(seed, b + off, (uInt)n);
            bad += crc32_update(seed, b + off, n) != want;
            if (n >= 16 && crc32_clmul_available())
                bad_clmul += crc32_clmul(seed, b + off, n) != want;
        }
    }
    T_EQ_INT(bad, 0, "crc32_update differs from zlib at %d (length, offset) pairs", bad);
    if (crc32_clmul_available())
        T_EQ_INT(bad_clmul, 0, "crc32_clmul differs from zlib at %d pairs", bad_clmul);
    else printf("note: no PCLMULQDQ on this CPU; only the zlib path was tested\n");
    T_EQ_INT(crc32_update(0, b, N), (uint32_t)crc32(0, b, N), "1 MiB differs from zlib");
    T_EQ_INT(crc32_update(0, "123456789", 9), 0xCBF43926u, "check value of \"123456789\"");
    free(b);
    return T_DONE();
}
