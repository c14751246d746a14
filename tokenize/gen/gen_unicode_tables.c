/* tokenize/gen/gen_unicode_tables.c — generates tokenize/unicode_tables.c.
 *
 * Dev-time only (not built by `make`; needs libicu-dev):
 *   cc -O2 -o /tmp/gen tokenize/gen/gen_unicode_tables.c $(pkg-config --cflags --libs icu-uc) \
 *     && /tmp/gen > tokenize/unicode_tables.c
 *
 * Why ICU 72 (Debian 12): it carries Unicode 15.0, the version of the regex
 * engines the references use (HF tokenizers' Oniguruma and tiktoken's Rust
 * regex crate both classify Unicode 15.0 additions, e.g. CJK Ext. H, as
 * letters). Python 3.11's unicodedata is 14.0 and node's ICU is 16+, so both
 * would misclassify a few thousand recent code points.
 *
 * BERT's classes are different: HF's BertNormalizer / BertPreTokenizer take
 * Mn, Cc/Cf/Co/Cs and P* from the unicode_categories crate, whose tables are
 * Unicode 8.0 (measured: over all 1,112,063 code points, every difference
 * between HF and Unicode 15.0 categories was a code point assigned after 8.0,
 * apart from 6 recategorised since, whose 8.0 categories are listed below).
 * So UNI_P, UNI_OTHER and UNI_MN, and the marks stripped by the fold, use
 * the Unicode 8.0 category and only code points of Age <= 8.0; a newer mark
 * or punctuation character is an ordinary character for BERT, as in HF.
 *
 * Output: a two-level table of per-code-point flags (uni_flags) and, for
 * BERT normalisation, the sorted list of code points whose
 * lowercase(strip_Mn(NFD(cp))) differs from cp itself, with their expansions
 * (Hangul syllables are decomposed algorithmically at run time instead).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include "../unicode.h"

static unsigned char flags[0x110000];

/* Assigned in Unicode 8.0 or earlier (the version of BERT's category tables). */
static int is_old(UChar32 c) {
    UVersionInfo v;
    u_charAge(c, v);
    return v[0] < 8 || (v[0] == 8 && v[1] == 0);
}

/* General category as of Unicode 8.0: the current one, except for code
 * points recategorised since (UnicodeData.txt history). */
static int8_t cat8(UChar32 c) {
    switch (c) {
    case 0x166D: return U_OTHER_PUNCTUATION; /* So since 12.0 */
    case 0x1734: return U_NON_SPACING_MARK;  /* Mc since 14.0 */
    case 0x1885:
    case 0x1886: return U_OTHER_LETTER;           /* Mn since 9.0 */
    case 0xA9BD: return U_COMBINING_SPACING_MARK; /* Mn since 12.0 */
    case 0x111C9: return U_OTHER_PUNCTUATION;     /* Mn since 11.0 */
    default: return (int8_t)u_charType(c);
    }
}

static int decode16(const UChar *s, int n, UChar32 *out) {
    int k = 0;
    for (int i = 0; i < n;) {
        UChar32 c;
        U16_NEXT(s, i, n, c);
        out[k++] = c;
    }
    return k;
}

int main(void) {
    UErrorCode st = U_ZERO_ERROR;
    const UNormalizer2 *nfd = unorm2_getNFDInstance(&st);
    if (U_FAILURE(st)) return 1;
    static UChar32 map_cp[0x110000];
    static int map_off[0x110000], map_len[0x110000];
    static UChar32 pool[1 << 20];
    int nmap = 0, npool = 0;
    for (UChar32 c = 0; c < 0x110000; c++) {
        int8_t t = u_charType(c);
        unsigned f = 0;
        int8_t t8 = is_old(c) ? cat8(c) : U_UNASSIGNED; /* BERT's view */
        if (t == U_UPPERCASE_LETTER || t == U_LOWERCASE_LETTER || t == U_TITLECASE_LETTER ||
            t == U_MODIFIER_LETTER || t == U_OTHER_LETTER)
            f |= UNI_L;
        if (t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER) f |= UNI_N;
        if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) f |= UNI_WS;
        if (t8 == U_CONNECTOR_PUNCTUATION || t8 == U_DASH_PUNCTUATION ||
            t8 == U_START_PUNCTUATION || t8 == U_END_PUNCTUATION || t8 == U_INITIAL_PUNCTUATION ||
            t8 == U_FINAL_PUNCTUATION || t8 == U_OTHER_PUNCTUATION ||
            (c < 128 && (c >= 33 && c <= 47 || c >= 58 && c <= 64 || c >= 91 && c <= 96 ||
                         c >= 123 && c <= 126)))
            f |= UNI_P;
        if (t8 == U_CONTROL_CHAR || t8 == U_FORMAT_CHAR || t8 == U_PRIVATE_USE_CHAR ||
            t8 == U_SURROGATE)
            f |= UNI_OTHER;
        if (t8 == U_NON_SPACING_MARK) f |= UNI_MN;
        if (c >= 0xAC00 && c < 0xAC00 + 11172) {
            flags[c] = (unsigned char)f;
            continue; /* Hangul: decomposed by code */
        }
        if (c < 0xD800 || c > 0xDFFF) {
            UChar src[2], dec[64], low[64];
            int32_t sn = 0;
            U16_APPEND_UNSAFE(src, sn, c);
            st = U_ZERO_ERROR;
            int32_t dn = unorm2_normalize(nfd, src, sn, dec, 64, &st);
            if (U_FAILURE(st)) return 1;
            UChar32 cps[64], outcp[64];
            int k = decode16(dec, dn, cps), m = 0;
            for (int i = 0; i < k; i++) {
                if (is_old(cps[i]) && cat8(cps[i]) == U_NON_SPACING_MARK) continue;
                /* lowercase char by char, as Rust's char::to_lowercase */
                UChar one[2];
                int32_t on = 0;
                U16_APPEND_UNSAFE(one, on, cps[i]);
                st = U_ZERO_ERROR;
                int32_t ln = u_strToLower(low, 64, one, on, "", &st);
                if (U_FAILURE(st)) return 1;
                m += decode16(low, ln, outcp + m);
            }
            if (!(m == 1 && outcp[0] == c)) {
                f |= UNI_MAPPED;
                map_cp[nmap] = c;
                map_off[nmap] = npool;
                map_len[nmap] = m;
                memcpy(pool + npool, outcp, (size_t)m * sizeof *outcp);
                npool += m;
                nmap++;
            }
        }
        flags[c] = (unsigned char)f;
    }
    /* two-level table: unique 256-entry blocks */
    static unsigned short stage1[0x1100];
    static unsigned char blocks[0x1100][256];
    int nblocks = 0;
    for (int b = 0; b < 0x1100; b++) {
        int found = -1;
        for (int j = 0; j < nblocks && found < 0; j++)
            if (!memcmp(blocks[j], flags + b * 256, 256)) found = j;
        if (found < 0) {
            memcpy(blocks[nblocks], flags + b * 256, 256);
            found = nblocks++;
        }
        stage1[b] = (unsigned short)found;
    }
    printf("/* tokenize/unicode_tables.c — GENERATED by tokenize/gen/gen_unicode_tables.c from ICU "
           "%s\n"
           " * (Unicode %s). Do not edit. */\n#include \"tokenize/unicode.h\"\n\n"
           "/* clang-format off: generated tables, laid out by their generator */\n",
           U_ICU_VERSION, U_UNICODE_VERSION);
    printf("const uint16_t uni_stage1[0x1100] = {");
    for (int b = 0; b < 0x1100; b++) printf("%s%d,", b % 24 ? "" : "\n", stage1[b]);
    printf("\n};\n\nconst uint8_t uni_stage2[%d][256] = {\n", nblocks);
    for (int j = 0; j < nblocks; j++) {
        printf("{");
        for (int i = 0; i < 256; i++) printf("%s%d,", i % 32 ? "" : "\n", blocks[j][i]);
        printf("},\n");
    }
    printf("};\n\nconst int32_t uni_map_n = %d;\nconst uni_map_entry uni_map[%d] = {", nmap, nmap);
    for (int i = 0; i < nmap; i++)
        printf("%s{0x%X,%d,%d},", i % 6 ? "" : "\n", map_cp[i], map_off[i], map_len[i]);
    printf("\n};\n\nconst int32_t uni_map_pool[%d] = {", npool ? npool : 1);
    for (int i = 0; i < npool; i++) printf("%s0x%X,", i % 10 ? "" : "\n", pool[i]);
    printf("\n};\n");
    return 0;
}
