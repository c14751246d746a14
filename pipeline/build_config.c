/* pipeline/build_config.c — read and validate the `shards:` section. */
#include "pipeline/build_config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sha256.h"
#include "pipeline/doc_reader.h"

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* One of words[] (NULL-terminated), as an index. */
static int get_enum(cfg_node *n, const char *key, const char *def, const char *const *words,
                    int *out, kf_err *err) {
    const char *s;
    if (def ? cfg_opt_str(n, key, def, &s, err) : cfg_get_str(n, key, &s, err)) return -1;
    for (int i = 0; words[i]; i++)
        if (!strcmp(s, words[i])) {
            *out = i;
            return 0;
        }
    char list[256] = "";
    for (int i = 0; words[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", words[i]);
    return cfg_err_at(cfg_find(n, key), err, "'%s' is not one of: %s", s, list);
}

/* A path the build will read: it must exist and be readable now, so a typo
 * fails before any work. */
static int check_path(cfg_node *n, const char *path, kf_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return cfg_err_at(n, err, "%s: %s", path, strerror(errno));
    if (access(path, R_OK | (S_ISDIR(st.st_mode) ? X_OK : 0)) != 0)
        return cfg_err_at(n, err, "%s: not readable: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return cfg_err_at(n, err, "%s: not a regular file or directory", path);
    return 0;
}

static int read_inputs(cfg_node *set, const char *key, build_inputs *out, kf_err *err) {
    cfg_node *list;
    if (cfg_get_node(set, key, CFG_SEQ, &list, err)) return -1;
    if (list->n == 0) return cfg_err_at(list, err, "must list at least one input");
    out->n = (int)list->n;
    out->v = kf_calloc(list->n, sizeof *out->v);
    for (size_t i = 0; i < list->n; i++) {
        cfg_node *it = list->items[i];
        build_input *in = &out->v[i];
        static const char *const formats[] = {"lines", "text", "jsonl", NULL};
        if (it->kind != CFG_MAP)
            return cfg_err_at(it, err, "expected a mapping {path: ..., format: lines|text|jsonl}");
        if (cfg_get_str(it, "path", &in->path, err)) return -1;
        if (check_path(cfg_find(it, "path"), in->path, err)) return -1;
        struct stat st;
        stat(in->path, &st);
        const char *def = S_ISDIR(st.st_mode) || build_is_archive_name(in->path) ? "text"
                          : ends_with(in->path, ".jsonl")                        ? "jsonl"
                                                                                 : "lines";
        int f;
        if (get_enum(it, "format", def, formats, &f, err)) return -1;
        in->format = (input_format)f;
        if (cfg_opt_str(it, "text_field", "text", &in->text_field, err) ||
            cfg_opt_str(it, "suffix", ".txt", &in->suffix, err))
            return -1;
    }
    return 0;
}

static int read_set(cfg_node *set, build_config *c, kf_err *err) {
    static const char *const toks[] = {"gpt2", "bert", NULL},
                             *const packs[] = {"wrap", "pad", NULL},
                             *const detoks[] = {"none", "lm1b", "wikitext", NULL};
    int t, p, d;
    int64_t seq_len;
    if (set->kind != CFG_MAP)
        return cfg_err_at(
            set, err, "expected a mapping (out, tokenizer, vocab, packing, seq_len, inputs, ...)");
    c->name = set->key;
    for (const char *q = c->name; *q; q++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", *q))
            return cfg_err_at(set, err, "set names may only use letters, digits, '.', '_' and '-'");
    if (cfg_get_str(set, "out", &c->out, err) || get_enum(set, "tokenizer", NULL, toks, &t, err) ||
        cfg_get_str(set, "vocab", &c->vocab, err) ||
        get_enum(set, "packing", NULL, packs, &p, err) ||
        cfg_get_int(set, "seq_len", &seq_len, err) ||
        get_enum(set, "detok", "none", detoks, &d, err) ||
        cfg_opt_bool(set, "allow_special", false, &c->allow_special, err) ||
        cfg_opt_int(set, "docs_per_shard", 8192, &c->docs_per_shard, err))
        return -1;
    c->tokenizer = toks[t];
    c->packing = packs[p];
    c->detok = (detok_kind)d;
    if (seq_len < 3 || seq_len > (1 << 20))
        return cfg_err_at(cfg_find(set, "seq_len"), err, "must be in [3, 1048576]");
    c->seq_len = (int32_t)seq_len;
    if (c->docs_per_shard < 1)
        return cfg_err_at(cfg_find(set, "docs_per_shard"), err, "must be >= 1");
    if (check_path(cfg_find(set, "vocab"), c->vocab, err)) return -1;
    if (read_inputs(set, "inputs", &c->inputs, err)) return -1;
    cfg_node *valid = cfg_find(set, "valid");
    if (valid && !cfg_is_null(valid)) {
        if (valid->kind != CFG_MAP)
            return cfg_err_at(valid, err, "expected {last: N} or {inputs: [...]}");
        cfg_node *last = cfg_find(valid, "last"), *vin = cfg_find(valid, "inputs");
        if (!!last == !!vin)
            return cfg_err_at(valid, err, "give exactly one of 'last' and 'inputs'");
        if (last) {
            if (cfg_as_int(last, &c->valid_last, err)) return -1;
            if (c->valid_last < 1)
                return cfg_err_at(last, err,
                                  "must be >= 1 (an empty validation split cannot validate; "
                                  "leave out `valid:` for a set without one)");
        } else if (read_inputs(valid, "inputs", &c->valid_inputs, err)) {
            return -1;
        }
    }
    return 0;
}

int build_config_read(cfg_node *root, build_config **out, kf_err *err) {
    cfg_node *sets;
    if (cfg_get_node(root, "shards", CFG_MAP, &sets, err)) return -1;
    if (sets->n == 0) return cfg_err_at(sets, err, "defines no shard set");
    build_config *v = kf_calloc(sets->n, sizeof *v);
    for (size_t i = 0; i < sets->n; i++)
        if (read_set(sets->items[i], &v[i], err)) goto fail;
    if (cfg_check_unused(sets, err)) goto fail;
    *out = v;
    return (int)sets->n;
fail:
    build_config_free(v, (int)sets->n);
    return -1;
}

void build_config_free(build_config *sets, int n) {
    for (int i = 0; sets && i < n; i++) {
        free(sets[i].inputs.v);
        free(sets[i].valid_inputs.v);
    }
    free(sets);
}

static void hash_str(sha256_ctx *h, const char *k, const char *v) {
    sha256_update(h, k, strlen(k) + 1);
    sha256_update(h, v, strlen(v) + 1);
}

static void hash_inputs(sha256_ctx *h, const char *k, const build_inputs *in) {
    static const char *const formats[] = {"lines", "text", "jsonl"};
    for (int i = 0; i < in->n; i++) {
        hash_str(h, k, formats[in->v[i].format]);
        hash_str(h, "text_field", in->v[i].text_field);
        hash_str(h, "suffix", in->v[i].suffix);
    }
}

void build_config_hash(const build_config *c, const char *vocab_sha256, char out[65]) {
    static const char *const detoks[] = {"none", "lm1b", "wikitext"};
    char num[64];
    sha256_ctx h;
    sha256_init(&h);
    hash_str(&h, "format", "kforcing-shards-1");
    hash_str(&h, "tokenizer", c->tokenizer);
    hash_str(&h, "vocab_sha256", vocab_sha256);
    hash_str(&h, "packing", c->packing);
    snprintf(num, sizeof num, "%d", c->seq_len);
    hash_str(&h, "seq_len", num);
    hash_str(&h, "detok", detoks[c->detok]);
    hash_str(&h, "allow_special", c->allow_special ? "true" : "false");
    snprintf(num, sizeof num, "%" PRId64, c->docs_per_shard);
    hash_str(&h, "docs_per_shard", num);
    hash_inputs(&h, "input", &c->inputs);
    snprintf(num, sizeof num, "%" PRId64, c->valid_last);
    hash_str(&h, "valid_last", num);
    hash_inputs(&h, "valid_input", &c->valid_inputs);
    uint8_t d[32];
    sha256_final(&h, d);
    sha256_to_hex(d, out);
}

int build_config_train_vocab(const runconfig *rc, char **vocab, char **kind, kf_err *err) {
    *vocab = *kind = NULL;
    cfg_node *root = cfg_load_string(rc->canonical, "run config", err);
    if (!root) return -1;
    build_config *sets = NULL;
    int n = cfg_find(root, "shards") ? build_config_read(root, &sets, err) : 0;
    for (int i = 0; i < n && !*vocab; i++)
        if (!strcmp(sets[i].out, rc->data_train)) {
            *vocab = kf_strdup(sets[i].vocab);
            *kind = kf_strdup(sets[i].tokenizer);
        }
    build_config_free(sets, n);
    cfg_free(root);
    return n < 0 ? -1 : 0;
}
