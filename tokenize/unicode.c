/* tokenize/unicode.c — BERT's per-character fold (UTF-8: common/utf8.h).
 * See unicode.h. */
#include "tokenize/unicode.h"

int uni_bert_fold(uint32_t cp, uint32_t *out) {
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
            for (int32_t k = 0; k < uni_map[m].len; k++)
                out[k] = (uint32_t)uni_map_pool[uni_map[m].off + k];
            return uni_map[m].len;
        }
        if (uni_map[m].cp < (int32_t)cp) a = m + 1;
        else b = m - 1;
    }
    out[0] = cp; /* unreachable with consistent tables */
    return 1;
}
