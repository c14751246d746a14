/* tokenize/bert.c — BERT uncased WordPiece (vocab.txt), as HuggingFace's
 * BertNormalizer(clean_text, handle_chinese_chars, strip_accents, lowercase)
 * + BertPreTokenizer + WordPiece("##", [UNK], max 100 chars per word).
 *
 * One pass over the code points: cleaning (drop NUL, U+FFFD and Cc/Cf/Co/Cs
 * except \t\n\r; whitespace -> separator), CJK ideographs as their own words,
 * per-character NFD + strip Mn + lowercase (uni_bert_fold), punctuation as
 * single-character words; each finished word goes through greedy
 * longest-match-first WordPiece.
 */
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "tokenize/tok_internal.h"
#include "tokenize/unicode.h"

enum { MAX_WORD_CHARS = 100 };

static const char *const special_names[] = {"cls", "sep", "pad", "unk", "mask"};
static const char *const special_tokens[] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"};
enum { N_SPECIAL = 5 };

struct bert_state {
    strmap vocab;               /* token bytes -> id */
    int32_t special[N_SPECIAL]; /* ids of special_tokens, -1 if absent */
    int32_t unk;
    /* current word: UTF-8 bytes, preceded by "##" room for lookups */
    char *word;
    size_t wn, wcap, wchars;
    uint32_t *bounds; /* byte offset where each char of the word ends */
    size_t bcap;
};

static int is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static void word_add(bert_state *b, uint32_t cp) {
    if (b->wn + 2 + 4 > b->wcap) {
        b->wcap = 2 * b->wcap + 64;
        b->word = kf_realloc(b->word, b->wcap);
    }
    if (b->wchars + 1 > b->bcap) {
        b->bcap = 2 * b->bcap + 64;
        b->bounds = kf_realloc(b->bounds, b->bcap * sizeof *b->bounds);
    }
    b->wn += utf8_encode(cp, b->word + 2 + b->wn);
    b->bounds[b->wchars++] = (uint32_t)b->wn;
}

/* WordPiece over the current word, then clears it. */
static void word_flush(bert_state *b, tok_ids *out) {
    if (!b->wchars) return;
    char *w = b->word + 2; /* w[-2..-1] is scratch for the "##" prefix */
    size_t before = out->n;
    if (b->wchars > MAX_WORD_CHARS) goto unk;
    size_t start = 0, c0 = 0; /* byte offset and char index of the piece start */
    while (start < b->wn) {
        int32_t id = -1;
        size_t ci = b->wchars;
        for (; ci > c0; ci--) {
            size_t end = b->bounds[ci - 1];
            if (start == 0) {
                id = strmap_get(&b->vocab, w, end);
            } else {
                /* (w + start) - 2, not w[start - 2]: start - 2 wraps as size_t
                 * when start is 1, an out-of-range pointer offset (UB) */
                char *p = w + start - 2, save0 = p[0], save1 = p[1];
                p[0] = p[1] = '#';
                id = strmap_get(&b->vocab, p, end - start + 2);
                p[0] = save0;
                p[1] = save1;
            }
            if (id >= 0) break;
        }
        if (id < 0) goto unk;
        tok_ids_push(out, id);
        start = b->bounds[ci - 1];
        c0 = ci;
    }
    b->wn = b->wchars = 0;
    return;
unk:
    out->n = before;
    tok_ids_push(out, b->unk);
    b->wn = b->wchars = 0;
}

/* If allowed and s[i..] starts with a special token present in the vocab,
 * returns its index in special_tokens, else -1. */
static int special_at(const bert_state *b, const char *s, size_t n) {
    for (int k = 0; k < N_SPECIAL; k++) {
        size_t l = strlen(special_tokens[k]);
        if (b->special[k] >= 0 && l <= n && !memcmp(s, special_tokens[k], l)) return k;
    }
    return -1;
}

void bert_encode(tok *t, const char *text, size_t len, int allow_special, tok_ids *out) {
    bert_state *b = t->bert;
    const unsigned char *s = (const unsigned char *)text;
    b->wn = b->wchars = 0;
    for (size_t i = 0; i < len;) {
        if (allow_special && s[i] == '[') {
            int k = special_at(b, text + i, len - i);
            if (k >= 0) {
                word_flush(b, out);
                tok_ids_push(out, b->special[k]);
                i += strlen(special_tokens[k]);
                continue;
            }
        }
        uint32_t cp;
        int bad;
        i += utf8_decode(s + i, len - i, &cp, &bad);
        unsigned f = uni_flags(cp);
        int tnr = cp == '\t' || cp == '\n' || cp == '\r';
        /* controls are dropped before whitespace is mapped, so \v \f U+0085
         * (Cc and White_Space) vanish instead of separating words */
        if (cp == 0 || cp == 0xFFFD || ((f & UNI_OTHER) && !tnr)) continue;
        if (tnr || (f & UNI_WS)) {
            word_flush(b, out);
            continue;
        }
        int cjk = is_cjk(cp);
        if (cjk) word_flush(b, out);
        uint32_t folded[UNI_FOLD_MAX];
        int nf = uni_bert_fold(cp, folded);
        for (int k = 0; k < nf; k++) {
            if (uni_flags(folded[k]) & UNI_P) {
                word_flush(b, out);
                word_add(b, folded[k]);
                word_flush(b, out);
            } else {
                word_add(b, folded[k]);
            }
        }
        if (cjk) word_flush(b, out);
    }
    word_flush(b, out);
}

int bert_decode(const tok *t, const int32_t *ids, size_t n, tok_bytes *out, kf_err *err) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return kf_err_set(err, "token id %d at position %zu is out of range [0, %lld)", ids[i],
                              i, (long long)t->vocab_size);
        const char *p = t->id_bytes[ids[i]];
        size_t l = t->id_len[ids[i]];
        if (l >= 2 && p[0] == '#' && p[1] == '#') {
            p += 2;
            l -= 2;
        } else if (i > 0) {
            tok_bytes_append(out, " ", 1);
        }
        tok_bytes_append(out, p, l);
    }
    return 0;
}

int32_t bert_special_id(const tok *t, const char *name) {
    for (int k = 0; k < N_SPECIAL; k++)
        if (!strcmp(name, special_names[k])) return t->bert->special[k];
    return -1;
}

int bert_load(tok *t, const char *dir, kf_err *err) {
    bert_state *b = kf_calloc(1, sizeof *b);
    t->bert = b;
    t->name = "bert-uncased";
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    char *buf;
    size_t len;
    if (fs_read_file(path, &buf, &len, err)) return -1;
    sha256_hex(buf, len, t->sha);
    size_t nlines = 0;
    for (size_t i = 0; i < len; i++) nlines += buf[i] == '\n';
    nlines += len && buf[len - 1] != '\n';
    if (!nlines) {
        free(buf);
        return kf_err_set(err, "%s: empty vocabulary", path);
    }
    t->id_bytes = kf_calloc(nlines, sizeof *t->id_bytes);
    t->id_len = kf_calloc(nlines, sizeof *t->id_len);
    t->vocab_size = (int64_t)nlines;
    strmap_init(&b->vocab, nlines);
    size_t id = 0;
    for (char *p = buf, *end = buf + len; p < end; id++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        size_t l = (size_t)(le - p);
        while (l && (p[l - 1] == '\r' || p[l - 1] == ' ' || p[l - 1] == '\t'))
            l--; /* as HF's trim_end */
        t->id_bytes[id] = kf_malloc(l + 1);
        memcpy(t->id_bytes[id], p, l);
        t->id_bytes[id][l] = 0;
        t->id_len[id] = (uint32_t)l;
        strmap_put(&b->vocab, p, l, (int32_t)id); /* a repeated line: the later id wins, as in HF */
        p = le + 1;
    }
    free(buf);
    for (int k = 0; k < N_SPECIAL; k++)
        b->special[k] = strmap_get(&b->vocab, special_tokens[k], strlen(special_tokens[k]));
    b->unk = b->special[3];
    if (b->unk < 0) return kf_err_set(err, "%s: no [UNK] token", path);
    return 0;
}

bert_state *bert_clone(const bert_state *b) {
    bert_state *c = kf_calloc(1, sizeof *c);
    c->vocab = b->vocab; /* the struct: its arrays are shared */
    memcpy(c->special, b->special, sizeof c->special);
    c->unk = b->unk;
    return c;
}

void bert_free(bert_state *b, int tables) {
    if (!b) return;
    if (tables) strmap_free(&b->vocab);
    free(b->word);
    free(b->bounds);
    free(b);
}
