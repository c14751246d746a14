/* pipeline/manifest.c — write and read DATA/manifest.yaml (see manifest.h). */
#include "pipeline/manifest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/fsutil.h"
#include "common/sha256.h"
#include "common/strbuf.h"
#include "pipeline/shard_format.h"

void manifest_split_sum(manifest_split *s) {
    free(s->first);
    s->first = kf_calloc((size_t)s->nshards + 1, sizeof *s->first);
    s->samples = s->docs = s->empty_docs = s->replaced = s->raw_bytes = s->tokens = 0;
    s->truncated = s->dropped_tokens = 0;
    for (int i = 0; i < s->nshards; i++) {
        const shard_meta *m = &s->shards[i];
        s->first[i] = s->samples;
        s->samples += m->count;
        s->docs += m->docs;
        s->empty_docs += m->empty_docs;
        s->replaced += m->replaced;
        s->raw_bytes += m->raw_bytes;
        s->tokens += m->tokens;
        s->truncated += m->truncated;
        s->dropped_tokens += m->dropped_tokens;
    }
}

static void add_split(strbuf *t, const char *name, const manifest_split *s) {
    strbuf_printf(t, "  %s:\n", name);
    strbuf_printf(t, "    samples: %" PRId64 "\n", s->samples);
    strbuf_printf(t, "    documents: %" PRId64 "\n", s->docs);
    strbuf_printf(t, "    empty_documents: %" PRId64 "\n", s->empty_docs);
    strbuf_printf(t, "    replaced_utf8: %" PRId64 "\n", s->replaced);
    strbuf_printf(t, "    raw_bytes: %" PRId64 "\n", s->raw_bytes);
    strbuf_printf(t, "    tokens: %" PRId64 "\n", s->tokens);
    strbuf_printf(t, "    truncated_documents: %" PRId64 "\n", s->truncated);
    strbuf_printf(t, "    dropped_tokens: %" PRId64 "\n", s->dropped_tokens);
    if (s->nshards == 0) {
        strbuf_printf(t, "    shards: []\n");
        return;
    }
    strbuf_printf(t, "    shards:\n");
    for (int i = 0; i < s->nshards; i++)
        strbuf_printf(t,
                      "      - {file: %s/shard-%05d.lmdb, first: %" PRId64 ", count: %" PRId64
                      ", sha256: %s}\n",
                      name, i, s->first[i], s->shards[i].count, s->shards[i].samples_sha256);
}

int manifest_write(const char *dir, const manifest *m, kf_err *err) {
    strbuf t = {0};
    strbuf_printf(&t, "# kforcing shard set, written by `kf shards build`; do not edit (verify: kf "
                      "shards verify)\n");
    strbuf_printf(&t, "magic: %s\nversion: %d\n", MANIFEST_MAGIC, MANIFEST_VERSION);
    /* the name is the user's text: quoted with escapes, so any name reads back */
    strbuf_puts(&t, "name: ");
    cfg_emit_quoted(&t, m->name);
    strbuf_puts(&t, "\n");
    strbuf_printf(&t, "tokenizer: %s\nvocab_size: %" PRId64 "\nvocab_sha256: %s\n", m->tokenizer,
                  m->vocab_size, m->vocab_sha256);
    strbuf_printf(&t, "seq_len: %d\npacking: %s\nid_bytes: %d\n", m->seq_len, m->packing,
                  m->id_bytes);
    strbuf_printf(&t, "special: {bos: %d, eos: %d, cls: %d, sep: %d, pad: %d}\n", m->special.bos,
                  m->special.eos, m->special.cls, m->special.sep, m->special.pad);
    strbuf_printf(&t, "config_sha256: %s\nsplits:\n", m->config_sha256);
    add_split(&t, "train", &m->train);
    add_split(&t, "valid", &m->valid);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST_FILE);
    int rc = fs_write_atomic(path, t.s, t.len, err);
    free(t.s);
    return rc;
}

static int get_hex(cfg_node *root, const char *key, char out[65], kf_err *err) {
    const char *s;
    if (cfg_get_str(root, key, &s, err)) return -1;
    size_t n = strspn(s, "0123456789abcdef");
    if (n != 64 || s[64])
        return cfg_err_at(cfg_find(root, key), err, "expected 64 lowercase hex digits");
    memcpy(out, s, 65);
    return 0;
}

static int get_word(cfg_node *root, const char *key, char *out, size_t cap, kf_err *err) {
    const char *s;
    if (cfg_get_str(root, key, &s, err)) return -1;
    if (strlen(s) >= cap) return cfg_err_at(cfg_find(root, key), err, "too long");
    strcpy(out, s);
    return 0;
}

static int get_count(cfg_node *n, const char *key, int64_t *out, kf_err *err) {
    if (cfg_get_int(n, key, out, err)) return -1;
    if (*out < 0) return cfg_err_at(cfg_find(n, key), err, "must be >= 0");
    return 0;
}

static int read_split(cfg_node *root, const char *name, const manifest *m, manifest_split *s,
                      kf_err *err) {
    char key[64];
    cfg_node *sp, *list;
    snprintf(key, sizeof key, "splits.%s", name);
    if (cfg_get_node(root, key, CFG_MAP, &sp, err)) return -1;
    int64_t *stats[] = {&s->samples,   &s->docs,   &s->empty_docs, &s->replaced,
                        &s->raw_bytes, &s->tokens, &s->truncated,  &s->dropped_tokens};
    const char *names[] = {"samples",   "documents", "empty_documents",     "replaced_utf8",
                           "raw_bytes", "tokens",    "truncated_documents", "dropped_tokens"};
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
        if (get_count(sp, names[i], stats[i], err)) return -1;
    if (cfg_get_node(sp, "shards", CFG_SEQ, &list, err)) return -1;
    s->nshards = (int)list->n;
    s->shards = kf_calloc(list->n + 1, sizeof *s->shards);
    s->first = kf_calloc(list->n + 1, sizeof *s->first);
    int64_t total = 0;
    for (size_t i = 0; i < list->n; i++) {
        cfg_node *e = list->items[i];
        shard_meta *sm = &s->shards[i];
        const char *file;
        char want[64];
        if (e->kind != CFG_MAP)
            return cfg_err_at(e, err, "expected a mapping {file, first, count, sha256}");
        if (cfg_get_str(e, "file", &file, err) || get_count(e, "first", &s->first[i], err) ||
            get_count(e, "count", &sm->count, err) || get_hex(e, "sha256", sm->samples_sha256, err))
            return -1;
        snprintf(want, sizeof want, "%s/shard-%05zu.lmdb", name, i);
        if (strcmp(file, want)) return cfg_err_at(cfg_find(e, "file"), err, "expected '%s'", want);
        if (s->first[i] != total)
            return cfg_err_at(cfg_find(e, "first"), err,
                              "expected %" PRId64 " (sum of earlier counts)", total);
        total += sm->count;
        strcpy(sm->tokenizer, m->tokenizer);
        strcpy(sm->vocab_sha256, m->vocab_sha256);
        strcpy(sm->packing, m->packing);
        sm->vocab_size = m->vocab_size;
        sm->seq_len = m->seq_len;
        sm->id_bytes = m->id_bytes;
    }
    s->first[list->n] = total;
    if (total != s->samples)
        return cfg_err_at(cfg_find(sp, "samples"), err,
                          "is %" PRId64 " but the shards hold %" PRId64, s->samples, total);
    return 0;
}

int manifest_read(const char *dir, manifest *m, char sha256_out[65], kf_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST_FILE);
    memset(m, 0, sizeof *m);
    if (!fs_exists(path))
        return kf_err_set(
            err,
            "%s: no manifest (not a shard set, or its build has not finished: run kf shards build)",
            path);
    cfg_node *root = cfg_load_file(path, err);
    if (!root) return -1;
    int rc = -1;
    const char *magic;
    int64_t version, v;
    if (cfg_get_str(root, "magic", &magic, err)) goto out;
    if (strcmp(magic, MANIFEST_MAGIC)) {
        cfg_err_at(cfg_find(root, "magic"), err, "expected '%s'", MANIFEST_MAGIC);
        goto out;
    }
    if (cfg_get_int(root, "version", &version, err)) goto out;
    if (version != MANIFEST_VERSION) {
        cfg_err_at(cfg_find(root, "version"), err, "version %" PRId64 ", this build reads %d",
                   version, MANIFEST_VERSION);
        goto out;
    }
    if (get_word(root, "name", m->name, sizeof m->name, err) ||
        get_word(root, "tokenizer", m->tokenizer, sizeof m->tokenizer, err) ||
        get_hex(root, "vocab_sha256", m->vocab_sha256, err) ||
        get_hex(root, "config_sha256", m->config_sha256, err) ||
        get_word(root, "packing", m->packing, sizeof m->packing, err) ||
        cfg_get_int(root, "vocab_size", &m->vocab_size, err))
        goto out;
    if (m->vocab_size <= 0 || m->vocab_size > INT32_MAX) {
        cfg_err_at(cfg_find(root, "vocab_size"), err, "out of range");
        goto out;
    }
    /* written plain: a tokenizer's kind name (tok_name), never YAML syntax */
    if (strspn(m->tokenizer, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(m->tokenizer) ||
        !m->tokenizer[0]) {
        cfg_err_at(cfg_find(root, "tokenizer"), err, "expected a tokenizer name ([a-z0-9_-]+)");
        goto out;
    }
    if (strcmp(m->packing, "wrap") && strcmp(m->packing, "pad")) {
        cfg_err_at(cfg_find(root, "packing"), err, "expected wrap or pad");
        goto out;
    }
    if (cfg_get_int(root, "seq_len", &v, err)) goto out;
    if (v < 1 || v > (1 << 24)) {
        cfg_err_at(cfg_find(root, "seq_len"), err, "out of range");
        goto out;
    }
    m->seq_len = (int32_t)v;
    if (cfg_get_int(root, "id_bytes", &v, err)) goto out;
    if (v != shard_id_bytes(m->vocab_size)) {
        cfg_err_at(cfg_find(root, "id_bytes"), err, "must be %d for vocab_size %" PRId64,
                   shard_id_bytes(m->vocab_size), m->vocab_size);
        goto out;
    }
    m->id_bytes = (int32_t)v;
    const char *roles[] = {"bos", "eos", "cls", "sep", "pad"};
    int32_t *ids[] = {&m->special.bos, &m->special.eos, &m->special.cls, &m->special.sep,
                      &m->special.pad};
    for (int i = 0; i < 5; i++) {
        char key[32];
        snprintf(key, sizeof key, "special.%s", roles[i]);
        if (cfg_get_int(root, key, &v, err)) goto out;
        if (v < -1 || v >= m->vocab_size) {
            cfg_err_at(cfg_find(root, key), err, "not a token id (or -1)");
            goto out;
        }
        *ids[i] = (int32_t)v;
    }
    if (read_split(root, "train", m, &m->train, err) ||
        read_split(root, "valid", m, &m->valid, err) || cfg_check_unused(root, err))
        goto out;
    if (sha256_out && sha256_file_hex(path, sha256_out, err)) goto out;
    rc = 0;
out:
    cfg_free(root);
    if (rc) manifest_free(m);
    return rc;
}

manifest_split *manifest_split_get(manifest *m, const char *name) {
    if (!strcmp(name, "train")) return &m->train;
    if (!strcmp(name, "valid")) return &m->valid;
    return NULL;
}

void manifest_free(manifest *m) {
    free(m->train.shards);
    free(m->train.first);
    free(m->valid.shards);
    free(m->valid.first);
    m->train.shards = m->valid.shards = NULL;
    m->train.first = m->valid.first = NULL;
}
