/* pipeline/shard_reader.c — random access over a split's shards (see
 * shard_reader.h). Each shard keeps one read-only environment and one
 * long-lived read transaction (cheap with MDB_NOLOCK, and shards never change
 * while listed). */
#include "pipeline/shard_reader.h"

#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/manifest.h"
#include "pipeline/shard_format.h"

typedef struct open_shard {
    char *path;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
} open_shard;

struct shard_set {
    manifest m;
    manifest_split *split;
    open_shard *shards;
    char manifest_sha256[65];
    size_t value_bytes;
};

void shard_set_close(shard_set *s) {
    if (!s) return;
    for (int i = 0; s->shards && i < s->split->nshards; i++) {
        if (s->shards[i].txn) mdb_txn_abort(s->shards[i].txn);
        if (s->shards[i].env) mdb_env_close(s->shards[i].env);
        free(s->shards[i].path);
    }
    free(s->shards);
    manifest_free(&s->m);
    free(s);
}

/* Opens shard i and checks its record against the manifest. */
static int open_one(shard_set *s, const char *dir, int i, kf_err *err) {
    open_shard *o = &s->shards[i];
    const shard_meta *want = &s->split->shards[i];
    size_t n = strlen(dir) + 64;
    o->path = kf_malloc(n);
    snprintf(o->path, n, "%s/%s/shard-%05d.lmdb", dir, s->split == &s->m.train ? "train" : "valid",
             i);
    shard_meta m;
    if (shard_env_open_ro(o->path, &o->env, err) || shard_meta_get(o->env, o->path, &m, err))
        return -1;
    if (strcmp(m.tokenizer, want->tokenizer) || strcmp(m.vocab_sha256, want->vocab_sha256) ||
        m.seq_len != want->seq_len || strcmp(m.packing, want->packing) ||
        m.vocab_size != want->vocab_size || m.count != want->count ||
        strcmp(m.samples_sha256, want->samples_sha256))
        return kf_err_set(
            err,
            "%s: shard record (tokenizer %s, seq_len %d, packing %s, count %" PRId64
            ", sha256 %.12s…) disagrees with the manifest (%s, %d, %s, %" PRId64 ", %.12s…): "
            "the set was modified; rebuild it",
            o->path, m.tokenizer, m.seq_len, m.packing, m.count, m.samples_sha256, want->tokenizer,
            want->seq_len, want->packing, want->count, want->samples_sha256);
    int rc = mdb_txn_begin(o->env, NULL, MDB_RDONLY, &o->txn);
    if (!rc) rc = mdb_dbi_open(o->txn, SHARD_DB_SAMPLES, 0, &o->dbi);
    if (rc) return kf_err_set(err, "%s: cannot read samples: %s", o->path, mdb_strerror(rc));
    return 0;
}

int shard_set_open(const char *data_dir, const char *split, shard_set **out, kf_err *err) {
    shard_set *s = kf_calloc(1, sizeof *s);
    if (manifest_read(data_dir, &s->m, s->manifest_sha256, err)) {
        free(s);
        return -1;
    }
    s->split = manifest_split_get(&s->m, split);
    if (!s->split) {
        kf_err_set(err, "unknown split '%s' (expected train or valid)", split);
        s->split = &s->m.train;
        shard_set_close(s);
        return -1;
    }
    s->value_bytes = shard_value_bytes(s->m.seq_len, s->m.id_bytes, s->m.packing);
    s->shards = kf_calloc((size_t)s->split->nshards + 1, sizeof *s->shards);
    for (int i = 0; i < s->split->nshards; i++)
        if (open_one(s, data_dir, i, err)) {
            shard_set_close(s);
            return -1;
        }
    *out = s;
    return 0;
}

int64_t shard_set_count(const shard_set *s) { return s->split->samples; }
int shard_set_seq_len(const shard_set *s) { return s->m.seq_len; }
int64_t shard_set_vocab_size(const shard_set *s) { return s->m.vocab_size; }
const char *shard_set_packing(const shard_set *s) { return s->m.packing; }
const char *shard_set_tokenizer(const shard_set *s) { return s->m.tokenizer; }
const char *shard_set_vocab_sha256(const shard_set *s) { return s->m.vocab_sha256; }
const char *shard_set_manifest_sha256(const shard_set *s) { return s->manifest_sha256; }

int32_t shard_set_special_id(const shard_set *s, const char *name) {
    const manifest_special *sp = &s->m.special;
    if (!strcmp(name, "bos")) return sp->bos;
    if (!strcmp(name, "eos")) return sp->eos;
    if (!strcmp(name, "cls")) return sp->cls;
    if (!strcmp(name, "sep")) return sp->sep;
    if (!strcmp(name, "pad")) return sp->pad;
    return -1;
}

int shard_set_get(shard_set *s, int64_t index, int32_t *ids, int32_t *len, kf_err *err) {
    const manifest_split *sp = s->split;
    if (index < 0 || index >= sp->samples)
        return kf_err_set(err, "sample %" PRId64 " out of range (the split has %" PRId64 ")", index,
                          sp->samples);
    /* Binary search for the last shard whose first <= index (skips empty shards). */
    int lo = 0, hi = sp->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (sp->first[mid] <= index) lo = mid;
        else hi = mid - 1;
    }
    open_shard *o = &s->shards[lo];
    int64_t local = index - sp->first[lo];
    uint8_t kb[8];
    shard_key_encode((uint64_t)local, kb);
    MDB_val k = {8, kb}, v;
    int rc = mdb_get(o->txn, o->dbi, &k, &v);
    if (rc) return kf_err_set(err, "%s: sample %" PRId64 ": %s", o->path, local, mdb_strerror(rc));
    if (v.mv_size != s->value_bytes)
        return kf_err_set(err, "%s: sample %" PRId64 ": value is %zu bytes, expected %zu", o->path,
                          local, v.mv_size, s->value_bytes);
    const char *why = shard_value_decode(v.mv_data, &sp->shards[lo], ids, len);
    if (why) return kf_err_set(err, "%s: sample %" PRId64 ": %s", o->path, local, why);
    return 0;
}
