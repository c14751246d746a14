/* common/utf8.h — UTF-8 encoding of one code point, shared by the JSON
 * parser (\u escapes) and the tokenizers (rebuilt words). */
#ifndef KF_COMMON_UTF8_H
#define KF_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/** Writes the UTF-8 encoding of cp to o (at most 4 bytes; cp must be at
 *  most 0x10FFFF); returns the number of bytes written. */
static inline size_t utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

#endif
