/* jobs/corpus_words.c — a training text's words and completions' use of them
 * (see corpus_words.h). */
#include "jobs/corpus_words.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/shard_reader.h"
#include "tokenize/strmap.h"

struct corpus_words {
    strmap count; /* lower-case word -> occurrences */
};

struct words_tally {
    strmap seen; /* (group, counted word) -> 1 */
    int64_t words, known;
    int64_t *gwords, *gdistinct; /* per group */
    int64_t ng;
    char *key; /* group (8 bytes) + word */
    size_t key_cap;
};

static bool is_letter(unsigned char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* A word being read across the pieces of a stream. */
typedef struct word_scan {
    char *buf;
    size_t n, cap;
    bool upper; /* it holds a capital letter */
} word_scan;

/* Ends the word in s (if any): counts it when it is lower-case. */
static void scan_end(word_scan *s, corpus_words *c) {
    if (s->n && !s->upper) {
        int32_t old = strmap_get(&c->count, s->buf, s->n);
        strmap_put(&c->count, s->buf, s->n, old < 0 ? 1 : (old < INT32_MAX ? old + 1 : old));
    }
    s->n = 0;
    s->upper = false;
}

static void scan_bytes(word_scan *s, corpus_words *c, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (!is_letter(ch)) {
            scan_end(s, c);
            continue;
        }
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 64;
            s->buf = kf_realloc(s->buf, s->cap);
        }
        s->buf[s->n++] = (char)ch;
        s->upper |= ch <= 'Z';
    }
}

static bool is_special(int32_t id, const int32_t special[6]) {
    for (int r = 0; r < 6; r++)
        if (id == special[r]) return true;
    return false;
}

int corpus_words_load(const char *data_dir, const tok *tk, corpus_words **out, kf_err *err) {
    *out = NULL;
    shard_set *set;
    if (shard_set_open(data_dir, "train", &set, err)) return -1;
    static const char *const roles[] = {"bos", "eos", "cls", "sep", "pad", "mask"};
    int32_t special[6];
    for (int i = 0; i < 6; i++) special[i] = shard_set_special_id(set, roles[i]);
    bool wrap = !strcmp(shard_set_packing(set), "wrap");
    int64_t L = shard_set_seq_len(set), n = shard_set_count(set);
    int32_t *ids = kf_malloc((size_t)L * sizeof *ids);
    corpus_words *c = kf_calloc(1, sizeof *c);
    strmap_init(&c->count, 1 << 16);
    word_scan s = {0};
    tok_bytes text = {0};
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i++) {
        int32_t len;
        rc = shard_set_get(set, i, ids, &len, err);
        /* the sample's first and last tokens are the packer's BOS/CLS and
         * EOS/SEP; the special ids between them end documents */
        for (int32_t a = 1; !rc && a < len - 1;) {
            int32_t b = a;
            while (b < len - 1 && !is_special(ids[b], special)) b++;
            text.n = 0;
            rc = tok_decode(tk, ids + a, (size_t)(b - a), &text, err);
            if (!rc) scan_bytes(&s, c, text.v, text.n);
            if (b < len - 1) scan_end(&s, c); /* a special token */
            a = b + 1;
        }
        if (!wrap) scan_end(&s, c);
    }
    scan_end(&s, c);
    free(s.buf);
    free(text.v);
    free(ids);
    shard_set_close(set);
    if (rc) return corpus_words_free(c), -1; /* err names the shard and sample */
    *out = c;
    return 0;
}

int64_t corpus_words_count(const corpus_words *c, const char *w, size_t n) {
    int32_t v = strmap_get(&c->count, w, n);
    return v < 0 ? 0 : v;
}

int64_t corpus_words_distinct(const corpus_words *c) { return (int64_t)c->count.n; }

void corpus_words_free(corpus_words *c) {
    if (!c) return;
    strmap_free(&c->count);
    free(c);
}

words_tally *words_tally_new(void) {
    words_tally *t = kf_calloc(1, sizeof *t);
    strmap_init(&t->seen, 256);
    return t;
}

void words_tally_add(words_tally *t, const corpus_words *c, const char *text, size_t len,
                     bool stopped, int64_t group) {
    if (group >= t->ng) {
        int64_t ng = group + 1;
        t->gwords = kf_realloc(t->gwords, (size_t)ng * sizeof *t->gwords);
        t->gdistinct = kf_realloc(t->gdistinct, (size_t)ng * sizeof *t->gdistinct);
        for (int64_t g = t->ng; g < ng; g++) t->gwords[g] = t->gdistinct[g] = 0;
        t->ng = ng;
    }
    for (size_t i = 0; i < len;) {
        if (!is_letter((unsigned char)text[i])) {
            i++;
            continue;
        }
        size_t j = i;
        bool upper = false;
        for (; j < len && is_letter((unsigned char)text[j]); j++) upper |= text[j] <= 'Z';
        /* whole within the completion: not glued to the prompt, not cut */
        bool whole = i > 0 && (j < len || stopped);
        if (whole && !upper) {
            t->words++;
            t->known += corpus_words_count(c, text + i, j - i) >= 2;
            t->gwords[group]++;
            size_t n = sizeof group + (j - i);
            if (n > t->key_cap) t->key = kf_realloc(t->key, t->key_cap = 2 * n);
            memcpy(t->key, &group, sizeof group);
            memcpy(t->key + sizeof group, text + i, j - i);
            t->gdistinct[group] += strmap_put(&t->seen, t->key, n, 1) < 0;
        }
        i = j;
    }
}

void words_tally_result(const words_tally *t, double *rate, double *distinct, int64_t *words) {
    double sum = 0;
    int64_t groups = 0;
    for (int64_t g = 0; g < t->ng; g++)
        if (t->gwords[g]) sum += (double)t->gdistinct[g] / (double)t->gwords[g], groups++;
    *rate = t->words ? (double)t->known / (double)t->words : NAN;
    *distinct = groups ? sum / (double)groups : NAN;
    if (words) *words = t->words;
}

void words_tally_free(words_tally *t) {
    if (!t) return;
    strmap_free(&t->seen);
    free(t->gwords);
    free(t->gdistinct);
    free(t->key);
    free(t);
}
