/* trainer/train/graph_cache.c — the record/launch rule of CUDA graphs
 * (see graph_cache.h). */
#include "trainer/train/graph_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/model/model.h"

enum { GC_NONE, GC_WARM, GC_READY, GC_OFF };

void graph_cache_init(graph_cache *c, size_t n) {
    *c = (graph_cache){.state = GC_NONE, .n = n};
    c->key = kf_calloc(n ? n : 1, sizeof *c->key);
}

void graph_cache_free(graph_cache *c) {
    free(c->key);
    c->key = NULL;
}

graph_mode graph_cache_mode(graph_cache *c, const int64_t *key) {
    if (c->state == GC_OFF) return GRAPH_EAGER;
    int same = c->state != GC_NONE && !memcmp(c->key, key, c->n * sizeof *key);
    if (same && c->state == GC_READY && c->allocs == model_allocs()) return GRAPH_LAUNCH;
    memcpy(c->key, key, c->n * sizeof *key);
    c->state = GC_WARM;
    return same ? GRAPH_RECORD : GRAPH_EAGER;
}

void graph_cache_recorded(graph_cache *c, int ok) {
    c->state = ok ? GC_READY : GC_OFF;
    c->allocs = model_allocs();
}
