/* tokenize/strmap.c — see strmap.h. Linear probing; the table is kept at most
 * half full so probes stay short. */
#include "tokenize/strmap.h"

#include <stdlib.h>

#include "common/error.h"

static void alloc_slots(strmap *m, size_t cap) {
    m->slots = kf_malloc(cap * sizeof *m->slots);
    for (size_t i = 0; i < cap; i++) m->slots[i] = (strmap_slot){0, 0, 0, -1};
    m->mask = cap - 1;
}

void strmap_init(strmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    memset(m, 0, sizeof *m);
    alloc_slots(m, cap);
}

void strmap_free(strmap *m) {
    free(m->slots);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

static void insert_slot(strmap *m, strmap_slot s) {
    size_t i = s.hash & m->mask;
    while (m->slots[i].val >= 0) i = (i + 1) & m->mask;
    m->slots[i] = s;
}

int32_t strmap_put(strmap *m, const void *key, size_t len, int32_t val) {
    KF_CHECK(val >= 0, "strmap values must be >= 0");
    uint64_t h = strmap_hash(key, len);
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        strmap_slot *s = &m->slots[i];
        if (s->val < 0) break;
        if (s->hash == (uint32_t)h && s->len == len && !memcmp(m->pool + s->off, key, len)) {
            int32_t old = s->val;
            s->val = val;
            return old;
        }
    }
    if (2 * (m->n + 1) > m->mask + 1) { /* grow: rehash every slot */
        strmap_slot *old = m->slots;
        size_t oldcap = m->mask + 1;
        alloc_slots(m, 2 * oldcap);
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].val >= 0) insert_slot(m, old[i]);
        free(old);
    }
    if (!m->pool ||
        m->pool_n + len > m->pool_cap) { /* !pool: an empty first key adds 0 to NULL (UB) */
        m->pool_cap = 2 * (m->pool_n + len) + 4096;
        m->pool = kf_realloc(m->pool, m->pool_cap);
    }
    KF_CHECK(m->pool_n + len < UINT32_MAX, "strmap pool over 4 GiB");
    memcpy(m->pool + m->pool_n, key, len);
    insert_slot(m, (strmap_slot){(uint32_t)h, (uint32_t)m->pool_n, (uint32_t)len, val});
    m->pool_n += len;
    m->n++;
    return -1;
}
