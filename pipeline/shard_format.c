/* pipeline/shard_format.c — byte layout helpers and the meta record. */
#include "pipeline/shard_format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32.h"

int shard_id_bytes(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

size_t shard_value_bytes(int32_t seq_len, int32_t id_bytes, const char *packing) {
    return (size_t)seq_len * (size_t)id_bytes + (strcmp(packing, "pad") ? 0 : 4);
}

void shard_key_encode(uint64_t index, uint8_t out[8]) {
    for (int i = 7; i >= 0; i--, index >>= 8) out[i] = (uint8_t)(index & 0xff);
}

uint64_t shard_key_decode(const void *p) {
    const uint8_t *b = p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | b[i];
    return v;
}

void shard_put_le(uint8_t *p, uint32_t v, int nbytes) {
    for (int i = 0; i < nbytes; i++, v >>= 8) p[i] = (uint8_t)(v & 0xff);
}

void shard_ids_put(uint8_t *out, const int32_t *ids, int32_t n, int32_t id_bytes) {
    if (id_bytes == 2) {
        for (int32_t i = 0; i < n; i++) {
            out[2 * i] = (uint8_t)ids[i];
            out[2 * i + 1] = (uint8_t)(ids[i] >> 8);
        }
    } else {
        for (int32_t i = 0; i < n; i++) shard_put_le(out + 4 * (size_t)i, (uint32_t)ids[i], 4);
    }
}

uint32_t shard_ids_get(const uint8_t *in, int32_t n, int32_t id_bytes, int32_t *ids) {
    uint32_t max = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t id = id_bytes == 2 ? (uint32_t)in[2 * i] | (uint32_t)in[2 * i + 1] << 8
                                    : shard_get_le(in + 4 * (size_t)i, 4);
        if (id > max) max = id;
        if (ids) ids[i] = (int32_t)id;
    }
    return max;
}

uint32_t shard_get_le(const uint8_t *p, int nbytes) {
    uint32_t v = 0;
    for (int i = nbytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

void shard_check_bytes(const void *value, size_t n, uint8_t out[SHARD_CHECK_BYTES]) {
    shard_put_le(out, crc32_update(0, value, n), 4);
}

const char *shard_value_decode(const uint8_t *value, const shard_meta *m, int32_t *ids,
                               int32_t *len) {
    if (shard_ids_get(value, m->seq_len, m->id_bytes, ids) >= (uint64_t)m->vocab_size)
        return "token id out of the vocabulary's range";
    int32_t n = m->seq_len;
    if (!strcmp(m->packing, "pad")) {
        uint32_t l = shard_get_le(value + (size_t)m->seq_len * m->id_bytes, 4);
        if (l > (uint32_t)m->seq_len) return "stored length exceeds seq_len";
        n = (int32_t)l;
    }
    if (len) *len = n;
    return NULL;
}

const char *shard_value_check(const uint8_t *value, const shard_meta *m) {
    return shard_value_decode(value, m, NULL, NULL);
}

int shard_env_open_ro(const char *path, MDB_env **env, kf_err *err) {
    int rc = mdb_env_create(env);
    if (!rc) rc = mdb_env_set_maxdbs(*env, 3);
    if (!rc) rc = mdb_env_open(*env, path, MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK, 0444);
    if (rc) {
        mdb_env_close(*env);
        *env = NULL;
        return kf_err_set(err, "%s: cannot open shard: %s", path,
                          rc == ENOENT ? "no such file" : mdb_strerror(rc));
    }
    return 0;
}

/* The meta record as (name, kind, offset): one table drives put and get. */
enum { F_STR, F_I64, F_I32 };
static const struct {
    const char *name;
    int kind;
    size_t off, cap;
} fields[] = {
#define S(f)                                                                                       \
    { #f, F_STR, offsetof(shard_meta, f), sizeof(((shard_meta *)0)->f) }
#define I(f)                                                                                       \
    { #f, F_I64, offsetof(shard_meta, f), 0 }
#define J(f)                                                                                       \
    { #f, F_I32, offsetof(shard_meta, f), 0 }
    S(tokenizer), S(vocab_sha256),   I(vocab_size),     J(seq_len),       S(packing),
    J(id_bytes),  I(count),          S(samples_sha256), S(source_sha256), S(config_sha256),
    I(docs),      I(empty_docs),     I(replaced),       I(raw_bytes),     I(tokens),
    I(truncated), I(dropped_tokens),
#undef S
#undef I
#undef J
};
#define NFIELDS (sizeof fields / sizeof fields[0])

static int put_str(MDB_txn *txn, MDB_dbi dbi, const char *k, const char *v) {
    MDB_val key = {strlen(k), (void *)k}, val = {strlen(v), (void *)v};
    return mdb_put(txn, dbi, &key, &val, 0);
}

int shard_meta_put(MDB_env *env, const shard_meta *m) {
    MDB_txn *txn;
    MDB_dbi dbi;
    int rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc) return rc;
    rc = mdb_dbi_open(txn, SHARD_DB_META, MDB_CREATE, &dbi);
    char buf[32];
    if (!rc) rc = put_str(txn, dbi, "magic", SHARD_MAGIC);
    snprintf(buf, sizeof buf, "%d", SHARD_VERSION);
    if (!rc) rc = put_str(txn, dbi, "version", buf);
    for (size_t i = 0; !rc && i < NFIELDS; i++) {
        const char *p = (const char *)m + fields[i].off;
        if (fields[i].kind == F_STR) {
            rc = put_str(txn, dbi, fields[i].name, p);
            continue;
        }
        int64_t v = fields[i].kind == F_I64 ? *(const int64_t *)p : *(const int32_t *)p;
        snprintf(buf, sizeof buf, "%" PRId64, v);
        rc = put_str(txn, dbi, fields[i].name, buf);
    }
    if (rc) {
        mdb_txn_abort(txn);
        return rc;
    }
    return mdb_txn_commit(txn);
}

static int get_str(MDB_txn *txn, MDB_dbi dbi, const char *k, char *out, size_t cap) {
    MDB_val key = {strlen(k), (void *)k}, val;
    if (mdb_get(txn, dbi, &key, &val) || val.mv_size >= cap) return -1;
    memcpy(out, val.mv_data, val.mv_size);
    out[val.mv_size] = 0;
    return 0;
}

int shard_meta_get(MDB_env *env, const char *path, shard_meta *m, kf_err *err) {
    MDB_txn *txn;
    MDB_dbi dbi;
    int rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (!rc && (rc = mdb_dbi_open(txn, SHARD_DB_META, 0, &dbi)) != 0) mdb_txn_abort(txn);
    if (rc)
        return kf_err_set(err, "%s: not a kforcing shard (no meta record: %s)", path,
                          mdb_strerror(rc));
    memset(m, 0, sizeof *m);
    char buf[128];
    int bad = 0;
    if (get_str(txn, dbi, "magic", buf, sizeof buf) || strcmp(buf, SHARD_MAGIC))
        bad = kf_err_set(err, "%s: not a kforcing shard (bad magic)", path);
    else if (get_str(txn, dbi, "version", buf, sizeof buf) || atoi(buf) != SHARD_VERSION)
        bad = kf_err_set(err, "%s: shard format version %s, this build reads %d", path, buf,
                         SHARD_VERSION);
    for (size_t i = 0; !bad && i < NFIELDS; i++) {
        char *p = (char *)m + fields[i].off;
        if (fields[i].kind == F_STR) {
            if (get_str(txn, dbi, fields[i].name, p, fields[i].cap))
                bad = kf_err_set(err, "%s: shard meta field '%s' missing or too long", path,
                                 fields[i].name);
            continue;
        }
        char *end;
        errno = 0;
        long long v =
            get_str(txn, dbi, fields[i].name, buf, sizeof buf) ? -1 : strtoll(buf, &end, 10);
        if (v < 0 || errno || *end || (fields[i].kind == F_I32 && v > INT32_MAX)) {
            bad = kf_err_set(err, "%s: shard meta field '%s' missing or invalid", path,
                             fields[i].name);
            continue;
        }
        if (fields[i].kind == F_I64) *(int64_t *)p = v;
        else *(int32_t *)p = (int32_t)v;
    }
    mdb_txn_abort(txn);
    if (bad) return -1;
    if (m->seq_len <= 0 || m->vocab_size <= 0 || m->id_bytes != shard_id_bytes(m->vocab_size) ||
        (strcmp(m->packing, "wrap") && strcmp(m->packing, "pad")) ||
        strlen(m->samples_sha256) != 64)
        return kf_err_set(
            err, "%s: shard meta is inconsistent (seq_len/vocab_size/id_bytes/packing/sha256)",
            path);
    return 0;
}
