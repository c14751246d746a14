/* tokenize/strmap.h — an open-addressing hash map from byte strings to
 * int32 values (internal to tokenize/). Keys are copied into the map's own
 * pool. Used for vocabularies (token bytes -> id). */
#ifndef KF_TOKENIZE_STRMAP_H
#define KF_TOKENIZE_STRMAP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct strmap_slot {
    uint32_t hash; /* low 32 bits of the key's hash */
    uint32_t off;  /* key bytes at pool[off .. off+len) */
    uint32_t len;
    int32_t val; /* < 0: empty slot */
} strmap_slot;

typedef struct strmap {
    strmap_slot *slots;
    size_t mask, n;
    char *pool;
    size_t pool_n, pool_cap;
} strmap;

/** A fast 64-bit hash of n bytes (not cryptographic). */
static inline uint64_t strmap_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return h;
}

/** Makes m empty, sized for about expected keys. */
void strmap_init(strmap *m, size_t expected);
void strmap_free(strmap *m);

/** Inserts or overwrites key -> val (val >= 0). Returns the previous value or -1. */
int32_t strmap_put(strmap *m, const void *key, size_t len, int32_t val);

/** The value for key, whose strmap_hash is h, or -1 when absent (for a
 * caller that needs the hash for more than this lookup). */
static inline int32_t strmap_get_hashed(const strmap *m, const void *key, size_t len, uint64_t h) {
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        const strmap_slot *s = &m->slots[i];
        if (s->val < 0) return -1;
        if (s->hash == (uint32_t)h && s->len == len && !memcmp(m->pool + s->off, key, len))
            return s->val;
    }
}

/** The value for key, or -1 when absent. */
static inline int32_t strmap_get(const strmap *m, const void *key, size_t len) {
    return strmap_get_hashed(m, key, len, strmap_hash(key, len));
}

#endif
