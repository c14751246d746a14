/* tokenize/tokenizer.c — the public API of tokenizer.h: vectors, loading by
 * kind, UTF-8 repair before encoding, and decoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/utf8.h"
#include "tokenize/tok_internal.h"

void tok_ids_push(tok_ids *a, int32_t id) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = kf_realloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = id;
}

void tok_ids_free(tok_ids *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

void tok_bytes_append(tok_bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 256;
        b->v = kf_realloc(b->v, b->cap);
    }
    if (n) memcpy(b->v + b->n, p, n); /* p may be NULL when n is 0 */
    b->n += n;
}

void tok_bytes_free(tok_bytes *b) {
    free(b->v);
    memset(b, 0, sizeof *b);
}

tok *tok_load_dir(const char *vocab_dir, kf_err *err) {
    char p[4096];
    snprintf(p, sizeof p, "%s/vocab.json", vocab_dir);
    if (fs_exists(p)) return tok_load("gpt2", vocab_dir, err);
    snprintf(p, sizeof p, "%s/vocab.txt", vocab_dir);
    if (fs_exists(p)) return tok_load("bert", vocab_dir, err);
    kf_err_set(err, "--vocab %s: neither vocab.json (gpt2) nor vocab.txt (bert) is there",
               vocab_dir);
    return NULL;
}

tok *tok_load(const char *kind, const char *vocab_dir, kf_err *err) {
    tok *t = kf_calloc(1, sizeof *t);
    t->refs = kf_malloc(sizeof *t->refs);
    *t->refs = 1;
    int rc;
    if (!strcmp(kind, "gpt2")) rc = gpt2_load(t, vocab_dir, err);
    else if (!strcmp(kind, "bert")) rc = bert_load(t, vocab_dir, err);
    else rc = kf_err_set(err, "unknown tokenizer \"%s\" (expected gpt2 or bert)", kind);
    if (rc) {
        tok_free(t);
        return NULL;
    }
    return t;
}

tok *tok_clone(tok *t) {
    tok *c = kf_malloc(sizeof *c);
    *c = *t; /* name, sha, sizes and the id -> bytes table are shared */
    c->gpt2 = t->gpt2 ? gpt2_clone(t->gpt2) : NULL;
    c->bert = t->bert ? bert_clone(t->bert) : NULL;
    __atomic_add_fetch(t->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void tok_free(tok *t) {
    if (!t) return;
    /* acq_rel: the last one frees tables the others read */
    int last = __atomic_sub_fetch(t->refs, 1, __ATOMIC_ACQ_REL) == 0;
    if (last) {
        for (int64_t i = 0; t->id_bytes && i < t->vocab_size; i++) free(t->id_bytes[i]);
        free(t->id_bytes);
        free(t->id_len);
        free(t->refs);
    }
    gpt2_free(t->gpt2, last);
    bert_free(t->bert, last);
    free(t);
}

const char *tok_name(const tok *t) { return t->name; }
const char *tok_vocab_sha256(const tok *t) { return t->sha; }
int64_t tok_vocab_size(const tok *t) { return t->vocab_size; }

/* Length of the valid UTF-8 prefix of s[0..n). ASCII is skipped 8 bytes at
 * a time since most text is ASCII. */
static size_t valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int bad;
        size_t l = utf8_decode(s + i, n - i, &cp, &bad);
        if (bad) return i;
        i += l;
    }
    return n;
}

int tok_encode(tok *t, const char *text, size_t len, int allow_special, tok_ids *out,
               int64_t *n_replaced) {
    const unsigned char *s = (const unsigned char *)text;
    size_t ok = valid_prefix(s, len);
    tok_bytes fixed = {0};
    if (ok < len) { /* repair a copy: each maximal ill-formed subpart -> U+FFFD */
        int64_t nbad = 0;
        tok_bytes_append(&fixed, s, ok);
        for (size_t i = ok; i < len;) {
            uint32_t cp;
            int bad;
            size_t l = utf8_decode(s + i, len - i, &cp, &bad);
            if (bad) {
                tok_bytes_append(&fixed, "\xEF\xBF\xBD", 3);
                nbad++;
            } else {
                tok_bytes_append(&fixed, s + i, l);
            }
            i += l;
        }
        if (n_replaced) *n_replaced += nbad;
        text = fixed.v;
        len = fixed.n;
    }
    if (t->gpt2) gpt2_encode(t, text, len, allow_special, out);
    else bert_encode(t, text, len, allow_special, out);
    tok_bytes_free(&fixed);
    return 0;
}

int tok_decode(const tok *t, const int32_t *ids, size_t n, tok_bytes *out, kf_err *err) {
    if (t->bert) return bert_decode(t, ids, n, out, err);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return kf_err_set(err, "token id %d at position %zu is out of range [0, %lld)", ids[i],
                              i, (long long)t->vocab_size);
        tok_bytes_append(out, t->id_bytes[ids[i]], t->id_len[ids[i]]);
    }
    return 0;
}

int32_t tok_special_id(const tok *t, const char *name) {
    return t->gpt2 ? gpt2_special_id(t, name) : bert_special_id(t, name);
}
