/* tokenize/gpt2.c — GPT-2 byte-level BPE (vocab.json + merges.txt).
 *
 * Pipeline per text: split on "<|endoftext|>" when allowed, pre-tokenize with
 * a hand-written equivalent of GPT-2's regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * then map each piece to ids: (1) the piece is itself a token that BPE maps
 * to itself (learnt the first time the token is met as a piece, so this
 * shortcut is exact),
 * (2) a bounded cache, (3) BPE: repeatedly merge the leftmost pair of lowest
 * rank, as HuggingFace tokenizers and tiktoken do.
 */
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "tokenize/tok_internal.h"
#include "tokenize/unicode.h"

enum { C_L, C_N, C_WS, C_OTHER }; /* pre-tokenizer classes */
enum { NO_RANK = INT32_MAX, BPE_SHORT = 48 /* bytes; longer pieces use the heap */ };
enum { SELF_UNKNOWN = 0, SELF_YES = 1, SELF_NO = 2 };

/* Cache bounds: pieces longer than CACHE_MAX_KEY bytes are not cached; the
 * cache is emptied when it reaches CACHE_ENTRIES entries or its pools fill,
 * so it never holds more than about 3 MiB. */
enum {
    CACHE_SLOTS = 1 << 16,
    CACHE_ENTRIES = CACHE_SLOTS / 2,
    CACHE_MAX_KEY = 64,
    CACHE_KEY_POOL = 1 << 20,
    CACHE_ID_POOL = 1 << 18
};

typedef struct merge_slot {
    uint64_t key; /* (left id << 32) | right id; ~0 = empty */
    int32_t rank, merged;
} merge_slot;

typedef struct cache_slot {
    uint32_t hash, key_off, key_len, ids_off, nids; /* key_len 0 = empty */
} cache_slot;

struct gpt2_state {
    /* read-only after gpt2_load, shared by clones */
    strmap vocab; /* raw token bytes -> id */
    merge_slot *merges;
    size_t merge_mask;
    int32_t byte_id[256];
    uint8_t *self_ok;         /* id -> SELF_*: does BPE(bytes(id)) == [id]? (learnt
                                 lazily; shared by clones, see encode_piece) */
    int32_t eot;              /* <|endoftext|> */
    uint8_t ascii_class[128]; /* pre-tokenizer class of each ASCII byte */
    /* per state: BPE workspace */
    int32_t *w, *r, *mg;
    uint64_t *heap;
    size_t wcap;
    /* cache */
    cache_slot *cslots;
    size_t centries, ckey_n, cid_n;
    char *ckeys;
    int32_t *cids;
};

/* ---- byte <-> unicode map of GPT-2's encoder.py ---- */

static void byte_unicode_map(uint32_t b2u[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable =
            (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* Converts a token spelled in the byte-level alphabet back to raw bytes.
 * Returns the length, or -1 when a character is outside the alphabet. */
static long unicode_to_bytes(const int16_t *u2b, const char *s, size_t n, char *out) {
    long k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int bad;
        i += utf8_decode((const unsigned char *)s + i, n - i, &cp, &bad);
        if (bad || cp >= 512 || u2b[cp] < 0) return -1;
        out[k++] = (char)u2b[cp];
    }
    return k;
}

/* ---- merges ---- */

static inline size_t merge_home(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static inline int32_t merge_rank(const gpt2_state *g, int32_t a, int32_t b, int32_t *merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = merge_home(key, g->merge_mask);; i = (i + 1) & g->merge_mask) {
        const merge_slot *s = &g->merges[i];
        if (s->key == key) {
            *merged = s->merged;
            return s->rank;
        }
        if (s->key == ~0ull) return NO_RANK;
    }
}

/* ---- BPE ---- */

static void grow_work(gpt2_state *g, size_t n) {
    if (n <= g->wcap) return;
    g->wcap = 2 * n;
    g->w = kf_realloc(g->w, g->wcap * sizeof *g->w);
    g->r = kf_realloc(g->r, g->wcap * sizeof *g->r);
    g->mg = kf_realloc(g->mg, g->wcap * sizeof *g->mg);
    /* the heap holds at most n-1 initial pairs + one net entry per merge */
    g->heap = kf_realloc(g->heap, 2 * g->wcap * sizeof *g->heap);
}

/* Short pieces: rescan for the lowest rank after every merge (O(n^2), but
 * no bookkeeping, which wins for the usual 2-20 bytes). */
static void bpe_short(gpt2_state *g, const unsigned char *p, size_t n, tok_ids *out) {
    int32_t *w = g->w, *r = g->r, *mg = g->mg;
    size_t m = n;
    for (size_t i = 0; i < n; i++) w[i] = g->byte_id[p[i]];
    for (size_t i = 0; i + 1 < m; i++) r[i] = merge_rank(g, w[i], w[i + 1], &mg[i]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (r[i] < r[best]) best = i;
        if (r[best] == NO_RANK) break;
        w[best] = mg[best];
        memmove(w + best + 1, w + best + 2, (m - best - 2) * sizeof *w);
        if (best + 2 < m) {
            memmove(r + best + 1, r + best + 2, (m - best - 3) * sizeof *r);
            memmove(mg + best + 1, mg + best + 2, (m - best - 3) * sizeof *mg);
        }
        m--;
        if (best + 1 < m) r[best] = merge_rank(g, w[best], w[best + 1], &mg[best]);
        if (best > 0) r[best - 1] = merge_rank(g, w[best - 1], w[best], &mg[best - 1]);
    }
    for (size_t i = 0; i < m; i++) tok_ids_push(out, w[i]);
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Long pieces: symbols in a linked list over byte positions and a min-heap
 * of candidate merges keyed (rank, position of the left symbol), so the
 * lowest rank wins and ties go to the leftmost pair, as in the rescan; stale
 * entries are skipped (a rank identifies its pair, so an entry is current iff
 * its position still starts a symbol whose pair has that rank). O(n log n). */
static void bpe_long(gpt2_state *g, const unsigned char *p, size_t n, tok_ids *out) {
    int32_t *id = g->w, *nx = g->r, *pv = g->mg;
    uint64_t *heap = g->heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = g->byte_id[p[i]];
        nx[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        pv[i] = (int32_t)i - 1;
    }
    int32_t mrg = -1; /* merge_rank sets it whenever it finds a rank */
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t rk = merge_rank(g, id[i], id[i + 1], &mrg);
        if (rk != NO_RANK) heap_push(heap, &hn, (uint64_t)rk << 32 | i);
    }
    while (hn) {
        uint64_t e = heap_pop(heap, &hn);
        int32_t rk = (int32_t)(e >> 32), i = (int32_t)(uint32_t)e;
        if (id[i] < 0 || nx[i] < 0 || merge_rank(g, id[i], id[nx[i]], &mrg) != rk) continue;
        int32_t j = nx[i];
        id[i] = mrg;
        id[j] = -1; /* j no longer starts a symbol */
        nx[i] = nx[j];
        if (nx[i] >= 0) pv[nx[i]] = i;
        if (nx[i] >= 0 && (rk = merge_rank(g, id[i], id[nx[i]], &mrg)) != NO_RANK)
            heap_push(heap, &hn, (uint64_t)rk << 32 | (uint32_t)i);
        if (pv[i] >= 0 && (rk = merge_rank(g, id[pv[i]], id[i], &mrg)) != NO_RANK)
            heap_push(heap, &hn, (uint64_t)rk << 32 | (uint32_t)pv[i]);
    }
    for (int32_t i = 0; i >= 0; i = nx[i]) tok_ids_push(out, id[i]);
}

static void bpe(gpt2_state *g, const unsigned char *p, size_t n, tok_ids *out) {
    grow_work(g, n);
    if (n <= BPE_SHORT) bpe_short(g, p, n, out);
    else bpe_long(g, p, n, out);
}

/* ---- bounded cache: piece bytes -> ids ---- */

static void cache_alloc(gpt2_state *g) {
    g->cslots = kf_calloc(CACHE_SLOTS, sizeof *g->cslots);
    g->ckeys = kf_malloc(CACHE_KEY_POOL);
    g->cids = kf_malloc(CACHE_ID_POOL * sizeof *g->cids);
}

static void cache_clear(gpt2_state *g) {
    memset(g->cslots, 0, CACHE_SLOTS * sizeof *g->cslots);
    g->centries = g->ckey_n = g->cid_n = 0;
}

static void encode_piece(gpt2_state *g, const unsigned char *p, size_t n, tok_ids *out) {
    uint64_t h64 = strmap_hash(p, n); /* for the vocabulary and the cache */
    int32_t id = strmap_get_hashed(&g->vocab, p, n, h64);
    /* Relaxed atomics: clones on other threads may learn the same entry at
     * once; they store the same value (a function of the vocabulary). */
    uint8_t self = id >= 0 ? __atomic_load_n(&g->self_ok[id], __ATOMIC_RELAXED) : SELF_NO;
    if (self == SELF_YES) {
        tok_ids_push(out, id);
        return;
    }
    uint32_t h = (uint32_t)h64;
    size_t i = h & (CACHE_SLOTS - 1);
    if (n <= CACHE_MAX_KEY) {
        for (;; i = (i + 1) & (CACHE_SLOTS - 1)) {
            cache_slot *s = &g->cslots[i];
            if (!s->key_len) break;
            if (s->hash == h && s->key_len == n && !memcmp(g->ckeys + s->key_off, p, n)) {
                for (uint32_t k = 0; k < s->nids; k++) tok_ids_push(out, g->cids[s->ids_off + k]);
                return;
            }
        }
    }
    size_t before = out->n;
    bpe(g, p, n, out);
    size_t nids = out->n - before;
    if (self == SELF_UNKNOWN) { /* the first time this token is met as a piece */
        int yes = nids == 1 && out->v[before] == id;
        __atomic_store_n(&g->self_ok[id], yes ? SELF_YES : SELF_NO, __ATOMIC_RELAXED);
        if (yes) return; /* from now on found before the cache */
    }
    if (n > CACHE_MAX_KEY) return;
    if (g->centries >= CACHE_ENTRIES || g->ckey_n + n > CACHE_KEY_POOL ||
        g->cid_n + nids > CACHE_ID_POOL) {
        cache_clear(g);
        i = h & (CACHE_SLOTS - 1); /* the home slot is free now */
    }
    g->cslots[i] =
        (cache_slot){h, (uint32_t)g->ckey_n, (uint32_t)n, (uint32_t)g->cid_n, (uint32_t)nids};
    memcpy(g->ckeys + g->ckey_n, p, n);
    memcpy(g->cids + g->cid_n, out->v + before, nids * sizeof *out->v);
    g->ckey_n += n;
    g->cid_n += nids;
    g->centries++;
}

/* ---- pre-tokenizer ---- */

/* Class and length of the code point at s[i] (valid UTF-8). */
static inline int class_at(const uint8_t *ascii_class, const unsigned char *s, size_t i, size_t n,
                           size_t *l) {
    unsigned b = s[i];
    if (b < 0x80) {
        *l = 1;
        return ascii_class[b];
    }
    uint32_t cp;
    int bad;
    *l = utf8_decode(s + i, n - i, &cp, &bad);
    unsigned f = uni_flags(cp);
    return f & UNI_L ? C_L : f & UNI_N ? C_N : f & UNI_WS ? C_WS : C_OTHER;
}

/* Length of a contraction ('s 't 're 've 'm 'll 'd) at s[i] == '\'', or 0. */
static inline size_t contraction(const unsigned char *s, size_t i, size_t n) {
    if (i + 1 >= n) return 0;
    unsigned a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= n) return 0;
    unsigned b = s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static void encode_ordinary(gpt2_state *g, const unsigned char *s, size_t n, tok_ids *out) {
    const uint8_t *ascii_class = g->ascii_class;
    size_t i = 0;
    while (i < n) {
        size_t end, l;
        if (s[i] == '\'' && (end = contraction(s, i, n))) {
            encode_piece(g, s + i, end, out);
            i += end;
            continue;
        }
        int k = class_at(ascii_class, s, i, n, &l);
        size_t j = i + l;
        if (s[i] == ' ' && j < n) {
            size_t l2;
            int k2 = class_at(ascii_class, s, j, n, &l2);
            if (k2 != C_WS) {
                k = k2;
                j += l2;
            }
        }
        if (k != C_WS) {
            /* " ?\p{L}+", " ?\p{N}+" or " ?[^\s\p{L}\p{N}]+": extend the run */
            if (k == C_L) {
                while (j < n && s[j] < 0x80 && ascii_class[s[j]] == C_L) j++;
            }
            while (j < n && class_at(ascii_class, s, j, n, &l) == k) j += l;
            end = j;
        } else {
            /* "\s+(?!\S)|\s+": a whitespace run followed by text leaves its
             * last character to start the next piece, unless it is the only one */
            size_t last = i;
            j = i;
            while (j < n && class_at(ascii_class, s, j, n, &l) == C_WS) {
                last = j;
                j += l;
            }
            end = (j == n || last == i) ? j : last;
        }
        encode_piece(g, s + i, end - i, out);
        i = end;
    }
}

void gpt2_encode(tok *t, const char *text, size_t len, int allow_special, tok_ids *out) {
    gpt2_state *g = t->gpt2;
    const unsigned char *s = (const unsigned char *)text;
    static const char eot[] = "<|endoftext|>";
    if (allow_special) {
        const unsigned char *p = s, *end = s + len, *hit;
        while ((hit = memmem(p, (size_t)(end - p), eot, sizeof eot - 1))) {
            encode_ordinary(g, p, (size_t)(hit - p), out);
            tok_ids_push(out, g->eot);
            p = hit + sizeof eot - 1;
        }
        encode_ordinary(g, p, (size_t)(end - p), out);
        return;
    }
    encode_ordinary(g, s, len, out);
}

int32_t gpt2_special_id(const tok *t, const char *name) {
    if (!strcmp(name, "eos") || !strcmp(name, "bos")) return t->gpt2->eot;
    return -1;
}

/* ---- loading ---- */

static int load_vocab(tok *t, gpt2_state *g, const char *path, const int16_t *u2b, sha256_ctx *sha,
                      kf_err *err) {
    char *buf;
    size_t len;
    if (fs_read_file(path, &buf, &len, err)) return -1;
    sha256_update(sha, buf, len);
    json_doc *d = json_parse(buf, len, path, err);
    free(buf);
    if (!d) return -1;
    const json *root = json_root(d);
    int rc = -1;
    if (root->type != JSON_OBJECT || root->n == 0) {
        kf_err_set(err, "%s: expected a non-empty object {token: id}", path);
        goto out;
    }
    size_t n = root->n;
    t->vocab_size = (int64_t)n;
    t->id_bytes = kf_calloc(n, sizeof *t->id_bytes);
    t->id_len = kf_calloc(n, sizeof *t->id_len);
    strmap_init(&g->vocab, n);
    for (size_t i = 0; i < n; i++) {
        const json *v = &root->kids[i];
        const json_str *k = &root->keys[i];
        if (!v->is_int || v->i < 0 || v->i >= (int64_t)n) {
            kf_err_set(err, "%s:%d:%d: id of \"%s\" must be an integer in [0, %zu)", path, v->line,
                       v->col, k->s, n);
            goto out;
        }
        if (t->id_bytes[v->i]) {
            kf_err_set(err, "%s:%d:%d: id %lld used twice", path, v->line, v->col, (long long)v->i);
            goto out;
        }
        char *b = kf_malloc(k->len + 1);
        long bl = unicode_to_bytes(u2b, k->s, k->len, b);
        if (bl <= 0) {
            free(b);
            kf_err_set(err, "%s:%d: token \"%s\" is not in GPT-2's byte-level alphabet", path,
                       v->line, k->s);
            goto out;
        }
        t->id_bytes[v->i] = b;
        t->id_len[v->i] = (uint32_t)bl;
        strmap_put(&g->vocab, b, (size_t)bl, (int32_t)v->i);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        g->byte_id[b] = strmap_get(&g->vocab, &c, 1);
        if (g->byte_id[b] < 0) {
            kf_err_set(err, "%s: byte 0x%02x has no token (not a byte-level BPE vocabulary)", path,
                       b);
            goto out;
        }
    }
    rc = 0;
out:
    json_free(d);
    return rc;
}

static int load_merges(gpt2_state *g, const char *path, const int16_t *u2b, sha256_ctx *sha,
                       kf_err *err) {
    char *buf;
    size_t len;
    if (fs_read_file(path, &buf, &len, err)) return -1;
    sha256_update(sha, buf, len);
    size_t nlines = 1;
    for (size_t i = 0; i < len; i++) nlines += buf[i] == '\n';
    size_t cap = 16;
    while (cap < 2 * nlines) cap *= 2;
    g->merges = kf_malloc(cap * sizeof *g->merges);
    for (size_t i = 0; i < cap; i++) g->merges[i] = (merge_slot){~0ull, 0, 0};
    g->merge_mask = cap - 1;
    int32_t rank = 0;
    int lineno = 0, rc = -1;
    char *tmp = kf_malloc(len + 1);
    for (char *p = buf, *end = buf + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        lineno++;
        size_t ll = (size_t)(le - p);
        if (ll && p[ll - 1] == '\r') ll--;
        if (ll == 0 || (lineno == 1 && ll >= 8 && !memcmp(p, "#version", 8))) {
            p = le + 1;
            continue;
        }
        char *sp = memchr(p, ' ', ll);
        if (!sp || sp == p || sp == p + ll - 1 || memchr(sp + 1, ' ', (size_t)(p + ll - sp - 1))) {
            kf_err_set(err, "%s:%d: expected two tokens separated by one space", path, lineno);
            goto out;
        }
        long la = unicode_to_bytes(u2b, p, (size_t)(sp - p), tmp);
        long lb = la < 0 ? -1 : unicode_to_bytes(u2b, sp + 1, (size_t)(p + ll - sp - 1), tmp + la);
        int32_t a = la > 0 ? strmap_get(&g->vocab, tmp, (size_t)la) : -1;
        int32_t b = lb > 0 ? strmap_get(&g->vocab, tmp + la, (size_t)lb) : -1;
        int32_t m = (a >= 0 && b >= 0) ? strmap_get(&g->vocab, tmp, (size_t)(la + lb)) : -1;
        if (m < 0) {
            kf_err_set(err,
                       "%s:%d: merge \"%.*s\": a part or the merged token is not in vocab.json",
                       path, lineno, (int)ll, p);
            goto out;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        size_t i = merge_home(key, g->merge_mask);
        while (g->merges[i].key != ~0ull && g->merges[i].key != key) i = (i + 1) & g->merge_mask;
        if (g->merges[i].key == ~0ull)
            g->merges[i] = (merge_slot){key, rank, m}; /* first rank wins */
        rank++;
        p = le + 1;
    }
    rc = 0;
out:
    free(tmp);
    free(buf);
    return rc;
}

int gpt2_load(tok *t, const char *dir, kf_err *err) {
    gpt2_state *g = kf_calloc(1, sizeof *g);
    for (int c = 0; c < 128; c++) {
        unsigned f = uni_flags((uint32_t)c);
        g->ascii_class[c] = f & UNI_L ? C_L : f & UNI_N ? C_N : f & UNI_WS ? C_WS : C_OTHER;
    }
    t->gpt2 = g;
    t->name = "gpt2";
    uint32_t b2u[256];
    int16_t u2b[512];
    byte_unicode_map(b2u);
    for (int i = 0; i < 512; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = (int16_t)b;
    sha256_ctx sha;
    sha256_init(&sha);
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    if (load_vocab(t, g, path, u2b, &sha, err)) return -1;
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    if (load_merges(g, path, u2b, &sha, err)) return -1;
    uint8_t d[32];
    sha256_final(&sha, d);
    sha256_to_hex(d, t->sha);
    g->eot = strmap_get(&g->vocab, "<|endoftext|>", 13);
    g->self_ok = kf_calloc((size_t)t->vocab_size, 1); /* all SELF_UNKNOWN */
    cache_alloc(g);
    return 0;
}

gpt2_state *gpt2_clone(const gpt2_state *g) {
    gpt2_state *c = kf_calloc(1, sizeof *c);
    c->vocab = g->vocab; /* the struct: its arrays are shared */
    c->merges = g->merges;
    c->merge_mask = g->merge_mask;
    memcpy(c->byte_id, g->byte_id, sizeof c->byte_id);
    c->self_ok = g->self_ok;
    c->eot = g->eot;
    memcpy(c->ascii_class, g->ascii_class, sizeof c->ascii_class);
    cache_alloc(c);
    return c;
}

void gpt2_free(gpt2_state *g, int tables) {
    if (!g) return;
    if (tables) {
        strmap_free(&g->vocab);
        free(g->merges);
        free(g->self_ok);
    }
    free(g->w);
    free(g->r);
    free(g->mg);
    free(g->heap);
    free(g->cslots);
    free(g->ckeys);
    free(g->cids);
    free(g);
}
