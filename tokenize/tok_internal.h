/* tokenize/tok_internal.h — the tokenizer object and the per-kind entry
 * points behind tokenizer.h (internal to tokenize/). */
#ifndef KF_TOKENIZE_TOK_INTERNAL_H
#define KF_TOKENIZE_TOK_INTERNAL_H

#include "tokenize/strmap.h"
#include "tokenize/tokenizer.h"

typedef struct gpt2_state gpt2_state;
typedef struct bert_state bert_state;

struct tok {
    const char *name;
    char sha[65];
    int64_t vocab_size;
    char **id_bytes; /* id -> token bytes (gpt2: raw bytes; bert: vocab.txt line) */
    uint32_t *id_len;
    gpt2_state *gpt2; /* exactly one of these is set */
    bert_state *bert;
    int *refs; /* toks sharing the read-only parts above (tok_clone) */
};

/* *_load returns 0, or -1 with err set; vocab files are read from dir and
 * hashed into t->sha in the documented order. *_clone makes a state sharing
 * the read-only tables, with its own workspace and cache; *_free frees the
 * tables too when `tables` is set (the last user). */
int gpt2_load(tok *t, const char *dir, kf_err *err);
gpt2_state *gpt2_clone(const gpt2_state *g);
void gpt2_free(gpt2_state *g, int tables);
void gpt2_encode(tok *t, const char *text, size_t len, int allow_special, tok_ids *out);
int32_t gpt2_special_id(const tok *t, const char *name);

int bert_load(tok *t, const char *dir, kf_err *err);
bert_state *bert_clone(const bert_state *b);
void bert_free(bert_state *b, int tables);
void bert_encode(tok *t, const char *text, size_t len, int allow_special, tok_ids *out);
int bert_decode(const tok *t, const int32_t *ids, size_t n, tok_bytes *out, kf_err *err);
int32_t bert_special_id(const tok *t, const char *name);

#endif
