/* common/utf8.c — UTF-8 decoding with Python-compatible replacement. See utf8.h. */
#include "common/utf8.h"

size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp, int *bad) {
    unsigned b0 = s[0];
    *bad = 0;
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        *cp = 0xFFFD;
        *bad = 1;
        return 1;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n) break;
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
        c = (c << 6) | (b & 0x3F);
    }
    if (i <= need) { /* maximal ill-formed subpart s[0..i) */
        *cp = 0xFFFD;
        *bad = 1;
        return i;
    }
    *cp = c;
    return need + 1;
}

bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int bad;
        i += utf8_decode((const unsigned char *)s + i, n - i, &cp, &bad);
        if (bad) return false;
    }
    return true;
}
