/* tokenize/unicode.c — UTF-8 decoding with Python-compatible replacement, and
 * BERT's per-character fold (encoding: common/utf8.h). See unicode.h. */
#include "tokenize/unicode.h"

size_t uni_decode(const unsigned char *s, size_t n, uint32_t *cp, int *bad)
{
    unsigned b0 = s[0];
    *bad = 0;
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) { need = 1; c = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
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

int uni_bert_fold(uint32_t cp, uint32_t *out)
{
    /* Hangul syllables: canonical decomposition into conjoining jamo (Lo,
     * already lowercase), per Unicode ch. 3.12. */
    if (cp >= 0xAC00 && cp < 0xAC00 + 11172) {
        uint32_t s = cp - 0xAC00, t = s % 28;
        out[0] = 0x1100 + s / 588;
        out[1] = 0x1161 + (s % 588) / 28;
        if (!t) return 2;
        out[2] = 0x11A7 + t;
        return 3;
    }
    if (!(uni_flags(cp) & UNI_MAPPED)) {
        out[0] = cp;
        return 1;
    }
    int32_t a = 0, b = uni_map_n - 1;
    while (a <= b) {
        int32_t m = (a + b) / 2;
        if (uni_map[m].cp == (int32_t)cp) {
            for (int32_t k = 0; k < uni_map[m].len; k++) out[k] = (uint32_t)uni_map_pool[uni_map[m].off + k];
            return uni_map[m].len;
        }
        if (uni_map[m].cp < (int32_t)cp) a = m + 1;
        else b = m - 1;
    }
    out[0] = cp; /* unreachable with consistent tables */
    return 1;
}
