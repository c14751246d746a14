/* pipeline/packer.c — wrap and pad packing (see packer.h). */
#include "pipeline/packer.h"

#include <stdlib.h>
#include <string.h>

struct packer {
    tok *t;
    const build_config *c;
    manifest_special sp;
    int pad_mode;
    tok_ids ids; /* the current document's ids (pad) / the unconsumed stream (wrap) */
    tok_bytes detok;
    int32_t *sample;
    shard_writer *w;
    shard_meta *stats;
};

static int32_t pick(const tok *t, const char *a, const char *b) {
    int32_t id = tok_special_id(t, a);
    return id >= 0 ? id : tok_special_id(t, b);
}

int packer_specials(const tok *t, const build_config *c, manifest_special *o, kf_err *err) {
    o->bos = pick(t, "bos", "cls");
    o->eos = pick(t, "eos", "sep");
    o->cls = pick(t, "cls", "bos");
    o->sep = pick(t, "sep", "eos");
    o->pad = pick(t, "pad", "eos");
    int pad = !strcmp(c->packing, "pad");
    if (pad ? (o->cls < 0 || o->sep < 0 || o->pad < 0) : (o->bos < 0 || o->eos < 0))
        return kf_err_set(err, "shards.%s: tokenizer %s has no %s ids for %s packing", c->name,
                          tok_name(t), pad ? "cls/sep/pad" : "bos/eos", c->packing);
    return 0;
}

packer *packer_new(tok *t, const build_config *c, const manifest_special *sp) {
    packer *p = kf_calloc(1, sizeof *p);
    p->t = t;
    p->c = c;
    p->sp = *sp;
    p->pad_mode = !strcmp(c->packing, "pad");
    p->sample = kf_malloc(sizeof *p->sample * (size_t)c->seq_len);
    return p;
}

void packer_free(packer *p) {
    if (!p) return;
    tok_ids_free(&p->ids);
    tok_bytes_free(&p->detok);
    free(p->sample);
    free(p);
}

void packer_begin(packer *p, shard_writer *w, shard_meta *stats) {
    p->w = w;
    p->stats = stats;
    p->ids.n = 0;
}

static int emit(packer *p, int32_t len, kf_err *err) {
    p->stats->tokens += len;
    return shard_writer_append(p->w, p->sample, len, err);
}

static int add_pad(packer *p, kf_err *err) {
    int32_t L = p->c->seq_len, body = L - 2;
    size_t n = p->ids.n;
    if (n > (size_t)body) {
        n = (size_t)body;
        p->stats->truncated++;
    }
    p->sample[0] = p->sp.cls;
    memcpy(p->sample + 1, p->ids.v, n * sizeof *p->sample);
    p->sample[n + 1] = p->sp.sep;
    for (int32_t i = (int32_t)n + 2; i < L; i++) p->sample[i] = p->sp.pad;
    p->ids.n = 0;
    return emit(p, (int32_t)n + 2, err);
}

static int drain_wrap(packer *p, kf_err *err) {
    int32_t L = p->c->seq_len;
    size_t body = (size_t)L - 2, off = 0;
    while (p->ids.n - off >= body) {
        p->sample[0] = p->sp.bos;
        memcpy(p->sample + 1, p->ids.v + off, body * sizeof *p->sample);
        p->sample[L - 1] = p->sp.eos;
        off += body;
        if (emit(p, L, err)) return -1;
    }
    /* Keep the stream small: move the unconsumed tail to the front. */
    memmove(p->ids.v, p->ids.v + off, (p->ids.n - off) * sizeof *p->ids.v);
    p->ids.n -= off;
    return 0;
}

int packer_add(packer *p, const char *text, size_t len, kf_err *err) {
    if (p->c->detok != DETOK_NONE) {
        p->detok.n = 0;
        if (p->c->detok == DETOK_LM1B) detok_lm1b(text, len, &p->detok);
        else detok_wikitext(text, len, &p->detok);
        text = p->detok.v;
        len = p->detok.n;
    }
    tok_encode(p->t, text, len, p->c->allow_special, &p->ids, &p->stats->replaced);
    p->stats->docs++;
    if (p->pad_mode) return add_pad(p, err);
    tok_ids_push(&p->ids, p->sp.eos);
    return drain_wrap(p, err);
}

void packer_end(packer *p) {
    if (!p->pad_mode) p->stats->dropped_tokens += (int64_t)p->ids.n;
    p->ids.n = 0;
}
