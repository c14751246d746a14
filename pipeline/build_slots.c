/* pipeline/build_slots.c — CPU slots of one build: at most `jobs` threads
 * compute at once, the reader first (fields: build_state.h). */
#include <pthread.h>

#include "pipeline/build_state.h"

static int slot_free(const builder *b) {
    for (int s = 0; s < b->jobs; s++)
        if (!b->slot_busy[s]) return s;
    return -1;
}

/* Wakes whoever should take a free slot (under b->mu). */
static void token_wake(builder *b) {
    if (slot_free(b) < 0) return;
    if (b->reader_waiting) pthread_cond_signal(&b->reader_freed);
    else pthread_cond_signal(&b->token_freed);
}

/* Takes a slot under b->mu; see build_slot_take. */
int build_slot_take_locked(builder *b, int reader) {
    int s;
    if (reader) b->reader_waiting = 1;
    while ((!reader && b->reader_waiting) || (s = slot_free(b)) < 0)
        pthread_cond_wait(reader ? &b->reader_freed : &b->token_freed, &b->mu);
    b->slot_busy[s] = 1;
    if (reader) {
        b->reader_waiting = 0;
        token_wake(b); /* workers held back by the reader may take what is left */
    }
    return s;
}

/* Takes a free slot; returns its index. reader: take precedence over
 * waiting workers. */
int build_slot_take(builder *b, int reader) {
    pthread_mutex_lock(&b->mu);
    int s = build_slot_take_locked(b, reader);
    pthread_mutex_unlock(&b->mu);
    return s;
}

void build_slot_give_locked(builder *b, int s) {
    b->slot_busy[s] = 0;
    token_wake(b);
}

void build_slot_give(builder *b, int s) {
    pthread_mutex_lock(&b->mu);
    build_slot_give_locked(b, s);
    pthread_mutex_unlock(&b->mu);
}

/* The reader never blocks holding a slot: it gives its slot back for a wait
 * (under b->mu) and then takes one back before any waiting worker. */
void build_reader_pause_locked(builder *b) {
    b->slot_busy[b->reader_slot] = 0;
    token_wake(b);
}

void build_reader_resume_locked(builder *b) { b->reader_slot = build_slot_take_locked(b, 1); }
