/* tokenize/unicode.h — Unicode character classes and BERT normalisation
 * mappings (internal to tokenize/).
 *
 * The data lives in the generated tokenize/unicode_tables.c (Unicode 15.0,
 * except BERT's P/OTHER/MN classes which follow HF's Unicode 8.0 tables; see
 * tokenize/gen/gen_unicode_tables.c for why). UTF-8 decoding is
 * common/utf8.h's utf8_decode.
 */
#ifndef KF_TOKENIZE_UNICODE_H
#define KF_TOKENIZE_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    UNI_L = 1,  /* general category L* */
    UNI_N = 2,  /* N* */
    UNI_WS = 4, /* White_Space property (regex \s) */
    /* BERT's classes, as of Unicode 8.0 (see gen_unicode_tables.c): */
    UNI_P = 8,      /* P*, or ASCII punctuation */
    UNI_OTHER = 16, /* Cc, Cf, Co, Cs ("control": dropped by clean_text) */
    UNI_MN = 32,    /* Mn (stripped with accents) */
    UNI_MAPPED = 64 /* lowercase(strip_Mn(NFD(c))) != c: see uni_map */
};

enum { UNI_FOLD_MAX = 8 };

typedef struct uni_map_entry {
    int32_t cp, off, len; /* expansion = uni_map_pool[off .. off+len) */
} uni_map_entry;

extern const uint16_t uni_stage1[0x1100];
extern const uint8_t uni_stage2[][256];
extern const int32_t uni_map_n;
extern const uni_map_entry uni_map[];
extern const int32_t uni_map_pool[];

/** Flags of code point c (0 <= c < 0x110000). */
static inline unsigned uni_flags(uint32_t c) { return uni_stage2[uni_stage1[c >> 8]][c & 255]; }

/** BERT's NFD + strip Mn + lowercase of one code point: writes at most
 * UNI_FOLD_MAX code points to out and returns how many (0 when it vanishes).
 * Canonical reordering of combining marks is not applied: after Mn marks
 * are stripped it only matters for rare non-Mn marks with a nonzero
 * combining class (e.g. U+1D165..U+1D172). */
int uni_bert_fold(uint32_t cp, uint32_t *out);

#endif
