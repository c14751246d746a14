/* common/utf8.h — UTF-8 encoding and decoding of one code point, shared by
 * the JSON reader and writer and the tokenizers. Decoding follows Python's
 * bytes.decode("utf-8", errors="replace"): each maximal ill-formed subpart
 * becomes one U+FFFD. */
#ifndef KF_COMMON_UTF8_H
#define KF_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Writes the UTF-8 encoding of cp to o (at most 4 bytes; cp must be at
 *  most 0x10FFFF); returns the number of bytes written. */
static inline size_t utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/** Decodes one code point from s[0..n) (n >= 1) into *cp and returns the
 * number of bytes consumed. Ill-formed input yields U+FFFD covering the
 * maximal subpart (Unicode's "best practice", as Python's decoder), with
 * *bad set to 1; otherwise *bad is 0. */
size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp, int *bad);

/** True when s[0..n) is well-formed UTF-8 (no surrogates, no overlongs). */
bool utf8_valid(const char *s, size_t n);

#endif
