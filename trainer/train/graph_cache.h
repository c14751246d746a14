/* trainer/train/graph_cache.h — when recorded CUDA graphs (kernels.h
 * graph_begin) may be launched, recorded or must run eagerly.
 *
 * A graph replays the addresses, shapes and by-value arguments it was
 * recorded with. So a set of graphs is recorded on a run whose key
 * (everything its ops depend on but the model's buffers) equals the
 * previous run's, which ran eagerly and so grew every buffer, and launched
 * while the key and the model's buffers (model_allocs) stay the same. The
 * training step (train.c) and the teacher passes (supervision.c) both run
 * their graphs by this rule. */
#ifndef KF_TRAINER_TRAIN_GRAPH_CACHE_H
#define KF_TRAINER_TRAIN_GRAPH_CACHE_H

#include <stddef.h>
#include <stdint.h>

/** How a run goes. */
typedef enum { GRAPH_EAGER, GRAPH_RECORD, GRAPH_LAUNCH } graph_mode;

/** The state of one set of graphs: zeroed (or graph_cache_init) before use. */
typedef struct graph_cache {
    int state;       /* internal */
    int64_t *key;    /* [n] the key of the run that set state */
    size_t n;        /* key length */
    uint64_t allocs; /* model_allocs() when the graphs were recorded */
} graph_cache;

/** Makes c a cache for keys of n values; no graphs recorded yet. */
void graph_cache_init(graph_cache *c, size_t n);

/** Frees c's key (not the graphs: they are the caller's). */
void graph_cache_free(graph_cache *c);

/** The mode of a run with key [n]: GRAPH_LAUNCH when the graphs were
 *  recorded with this key and the model's buffers since; else the caller
 *  frees its graphs and runs GRAPH_RECORD when the previous run had this
 *  key, GRAPH_EAGER otherwise (also after graph_cache_recorded(c, 0)). */
graph_mode graph_cache_mode(graph_cache *c, const int64_t *key);

/** After a GRAPH_RECORD run: ok, the backend gave graphs (launched from
 *  the next run on); !ok, it makes none (every later run eager). */
void graph_cache_recorded(graph_cache *c, int ok);

#endif
