/* tokenize/detok.c — MDLM's lm1b_detokenizer and wt_detokenizer
 * (kuleshov-group/mdlm, dataloader.py), rule for rule and in the same order.
 *
 * Each rule is one pass from one buffer into the other, reproducing Python's
 * semantics exactly: str.replace and re.sub scan left to right and never
 * overlap matches; `$` matches at the end or before a final "\n"; \w is a
 * letter, a number or '_'; \s is Python's str.isspace. The patterns' fixed
 * parts are ASCII, so working on UTF-8 bytes is equivalent to working on
 * characters; only \w and \s need decoding. A pass that would change
 * nothing returns before copying (most rules rarely match a sentence).
 */
#include <string.h>

#include "common/utf8.h"
#include "tokenize/tokenizer.h"
#include "tokenize/unicode.h"

typedef struct pass {
    tok_bytes a, b;
    tok_bytes *cur, *next;
    uint64_t seen[4]; /* bytes that occur in the text, or may (a superset) */
} pass;

static void seen_add(pass *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        p->seen[(unsigned char)s[i] >> 6] |= 1ull << ((unsigned char)s[i] & 63);
}

/* Can `pat` occur? Rules only delete or move text, or write their constant
 * replacement (seen_add'ed), so a byte absent at the start stays absent. */
static int seen_all(const pass *p, const char *pat) {
    for (const unsigned char *c = (const unsigned char *)pat; *c; c++)
        if (!(p->seen[*c >> 6] >> (*c & 63) & 1)) return 0;
    return 1;
}

static void pass_swap(pass *p) {
    tok_bytes *t = p->cur;
    p->cur = p->next;
    p->next = t;
    p->next->n = 0;
}

static void put(pass *p, const char *s, size_t n) { tok_bytes_append(p->next, s, n); }

/* str.replace(from, to) */
static void rep(pass *p, const char *from, const char *to) {
    if (!seen_all(p, from)) return;
    const char *s = p->cur->v, *end = s + p->cur->n;
    size_t fl = strlen(from), tl = strlen(to);
    const char *hit = memmem(s, (size_t)(end - s), from, fl);
    if (!hit) return;
    seen_add(p, to, tl);
    do {
        put(p, s, (size_t)(hit - s));
        put(p, to, tl);
        s = hit + fl;
    } while (s < end && (hit = memmem(s, (size_t)(end - s), from, fl)));
    put(p, s, (size_t)(end - s));
    pass_swap(p);
}

static int is_word_cp(uint32_t c) { return c == '_' || (uni_flags(c) & (UNI_L | UNI_N)); }
static int is_py_space(uint32_t c) { return (c >= 0x1C && c <= 0x1F) || (uni_flags(c) & UNI_WS); }

/* Code point at s[i] and its length (bad bytes count as one non-word char). */
static uint32_t cp_at(const char *s, size_t i, size_t n, size_t *l) {
    uint32_t cp;
    int bad;
    *l = utf8_decode((const unsigned char *)s + i, n - i, &cp, &bad);
    return cp;
}

/* End of the \w+ run starting at i (== i when there is none). */
static size_t word_end(const char *s, size_t i, size_t n) {
    size_t l;
    while (i < n && is_word_cp(cp_at(s, i, n, &l))) i += l;
    return i;
}

/* Where Python's `$` first matches: before a final "\n", else at the end. */
static size_t dollar(const char *s, size_t n) { return (n && s[n - 1] == '\n') ? n - 1 : n; }

/* re.sub(r" \'(\w+)", r"'\1") */
static void lm1b_apostrophe(pass *p) {
    const char *s = p->cur->v;
    size_t n = p->cur->n, i = 0, from = 0;
    if (!memmem(s, n, " '", 2)) return;
    while (i + 2 < n) {
        size_t e;
        if (s[i] == ' ' && s[i + 1] == '\'' && (e = word_end(s, i + 2, n)) > i + 2) {
            put(p, s + from, i - from);
            put(p, s + i + 1, e - i - 1);
            i = from = e;
        } else {
            i++;
        }
    }
    put(p, s + from, n - from);
    pass_swap(p);
}

/* re.sub(r' (\w+) \. ', r' \1. ') */
static void lm1b_period(pass *p) {
    const char *s = p->cur->v;
    size_t n = p->cur->n, i = 0, from = 0;
    if (!memmem(s, n, " . ", 3)) return;
    while (i < n) {
        size_t e;
        if (s[i] == ' ' && (e = word_end(s, i + 1, n)) > i + 1 && e + 3 <= n &&
            !memcmp(s + e, " . ", 3)) {
            put(p, s + from, e - from);
            put(p, ". ", 2);
            i = from = e + 3;
        } else {
            i++;
        }
    }
    put(p, s + from, n - from);
    pass_swap(p);
}

static int ascii_word(unsigned char c) {
    return c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* Does the \w run that ends at e (> 0) start right after a space? Backwards
 * over ASCII (a code point boundary precedes every ASCII byte, valid UTF-8
 * or not); -1 when a non-ASCII byte is met: the caller decodes forwards. */
static int word_after_space_ascii(const char *s, size_t e) {
    size_t j = e;
    while (j > 0 && (unsigned char)s[j - 1] < 0x80 && ascii_word((unsigned char)s[j - 1])) j--;
    if (j > 0 && (unsigned char)s[j - 1] >= 0x80) return -1;
    return j < e && j > 0 && s[j - 1] == ' ';
}

/* re.sub(r' (\w+) \.$', r' \1.') */
static void lm1b_period_end(pass *p) {
    const char *s = p->cur->v;
    size_t n = p->cur->n, d = dollar(s, n);
    if (d < 4 || s[d - 2] != ' ' || s[d - 1] != '.') return;
    /* the \w run that ends at d-2 must start right after a space */
    int match = word_after_space_ascii(s, d - 2);
    if (match < 0) {
        size_t run = SIZE_MAX, i = 0, l;
        while (i < d - 2) {
            int w = is_word_cp(cp_at(s, i, n, &l));
            if (w && run == SIZE_MAX) run = i;
            if (!w) run = SIZE_MAX;
            i += l;
        }
        match = run != SIZE_MAX && run > 0 && s[run - 1] == ' ' && i == d - 2;
    }
    if (!match) return;
    put(p, s, d - 2);
    put(p, s + d - 1, n - d + 1);
    pass_swap(p);
}

/* re.sub(r' \?$', '?') and the like: drop the space before a final mark. */
static void drop_space_before_end(pass *p, char mark) {
    const char *s = p->cur->v;
    size_t n = p->cur->n, d = dollar(s, n);
    if (d < 2 || s[d - 2] != ' ' || s[d - 1] != mark) return;
    put(p, s, d - 2);
    put(p, s + d - 1, n - d + 1);
    pass_swap(p);
}

/* lm1b's re.sub(r'O ([^F]+) C', r'O\1C') where F (the forbidden set) holds
 * O and C: X runs to the first forbidden char, which must be C after a space. */
static void lm1b_wrapped(pass *p, char open, char close) {
    const char *s = p->cur->v;
    size_t n = p->cur->n, i = 0, from = 0;
    if (!memchr(s, open, n)) return;
    while (i + 1 < n) {
        if (s[i] == open && s[i + 1] == ' ') {
            size_t q = i + 2;
            while (q < n && s[q] != open && s[q] != close) q++;
            if (q < n && s[q] == close && q >= i + 4 && s[q - 1] == ' ') {
                put(p, s + from, i - from);
                put(p, &open, 1);
                put(p, s + i + 2, q - 1 - (i + 2));
                put(p, &close, 1);
                i = from = q + 1;
                continue;
            }
        }
        i++;
    }
    put(p, s + from, n - from);
    pass_swap(p);
}

/* wt's re.sub(r"O\s*([^C]*?)\s*C", r"O\1C"): the text up to the next C,
 * with surrounding whitespace removed. */
static void wt_bracket(pass *p, char open, char close) {
    const char *s = p->cur->v;
    size_t n = p->cur->n, i = 0, from = 0;
    if (!memchr(s, open, n)) return;
    while (i < n) {
        const char *q = s[i] == open ? memchr(s + i + 1, close, n - i - 1) : NULL;
        if (!q) {
            i++;
            continue;
        }
        size_t a = i + 1, c = (size_t)(q - s), l, last = a;
        while (a < c && is_py_space(cp_at(s, a, n, &l))) a += l;
        for (size_t k = a; k < c; k += l) /* end of the last non-space char */
            if (!is_py_space(cp_at(s, k, n, &l))) last = k + l;
        if (last < a) last = a;
        put(p, s + from, i - from);
        put(p, &open, 1);
        put(p, s + a, last - a);
        put(p, &close, 1);
        i = from = c + 1;
    }
    put(p, s + from, n - from);
    pass_swap(p);
}

static void pass_begin(pass *p, const char *in, size_t len) {
    memset(p, 0, sizeof *p);
    p->cur = &p->a;
    p->next = &p->b;
    tok_bytes_append(p->cur, in, len);
    tok_bytes_append(p->next, "", 0);
    seen_add(p, in, len);
}

static void pass_end(pass *p, tok_bytes *out) {
    tok_bytes_append(out, p->cur->v, p->cur->n);
    tok_bytes_free(&p->a);
    tok_bytes_free(&p->b);
}

void detok_lm1b(const char *in, size_t len, tok_bytes *out) {
    if (len == 0) return; /* empty text: the passes' buffers would be NULL */
    pass p;
    pass_begin(&p, in, len);
    rep(&p, "http : / / ", "http://");
    rep(&p, "https : / / ", "https://");
    lm1b_apostrophe(&p);
    lm1b_period(&p);
    lm1b_period_end(&p);
    rep(&p, " ? ", "? ");
    drop_space_before_end(&p, '?');
    rep(&p, " ! ", "! ");
    drop_space_before_end(&p, '!');
    rep(&p, " , ", ", ");
    rep(&p, " : ", ": ");
    rep(&p, " ; ", "; ");
    rep(&p, " / ", "/");
    lm1b_wrapped(&p, '"', '"');
    lm1b_wrapped(&p, '\'', '\'');
    lm1b_wrapped(&p, '(', ')');
    lm1b_wrapped(&p, '[', ']');
    rep(&p, "$ ", "$");
    rep(&p, "\xC2\xA3 ", "\xC2\xA3"); /* "£ " */
    pass_end(&p, out);
}

/* wt's re.sub(r"/' [0-9]/", r"/'[0-9]/"): MDLM's replacement is the literal
 * text "/'[0-9]/" (the digit is lost); reproduced as it is. */
static void wt_slash_quote(pass *p) {
    const char *s = p->cur->v;
    size_t n = p->cur->n, i = 0, from = 0;
    if (!memmem(s, n, "/' ", 3)) return;
    seen_add(p, "/'[0-9]/", 8);
    while (i + 5 <= n) {
        if (s[i] == '/' && s[i + 1] == '\'' && s[i + 2] == ' ' && s[i + 3] >= '0' &&
            s[i + 3] <= '9' && s[i + 4] == '/') {
            put(p, s + from, i - from);
            put(p, "/'[0-9]/", 8);
            i = from = i + 5;
        } else {
            i++;
        }
    }
    put(p, s + from, n - from);
    pass_swap(p);
}

void detok_wikitext(const char *in, size_t len, tok_bytes *out) {
    if (len == 0) return; /* empty text: the passes' buffers would be NULL */
    pass p;
    pass_begin(&p, in, len);
    rep(&p, "s '", "s'");
    wt_slash_quote(&p);
    rep(&p, " @-@ ", "-");
    rep(&p, " @,@ ", ",");
    rep(&p, " @.@ ", ".");
    rep(&p, " : ", ": ");
    rep(&p, " ; ", "; ");
    rep(&p, " . ", ". ");
    rep(&p, " ! ", "! ");
    rep(&p, " ? ", "? ");
    rep(&p, " , ", ", ");
    wt_bracket(&p, '(', ')');
    wt_bracket(&p, '[', ']');
    wt_bracket(&p, '{', '}');
    wt_bracket(&p, '"', '"');
    wt_bracket(&p, '\'', '\'');
    rep(&p, "= = = =", "====");
    rep(&p, "= = =", "===");
    rep(&p, "= =", "==");
    rep(&p, " \xC2\xB0 ", "\xC2\xB0"); /* " ° " */
    rep(&p, " \n", "\n");
    rep(&p, "\n ", "\n");
    rep(&p, " N ", " 1 ");
    rep(&p, " 's", "'s");
    pass_end(&p, out);
}
