/* pipeline/shard_writer.c — one LMDB shard: append, commit by rename, verify.
 * Layout and guarantees: shard_writer.h. */
#include "pipeline/shard_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "pipeline/shard_format.h"

/* Samples are buffered and put in one transaction per batch, so a
 * MDB_MAP_FULL can be handled by growing the map and replaying the batch. */
#define BATCH_SAMPLES 2048
#define INITIAL_MAP (1ull << 20) /* small: growth is cheap and always exercised */

struct shard_writer {
    char *path, *tmp;
    int fd; /* the unnamed (O_TMPFILE) file, or -1: the file is named tmp */
    MDB_env *env;
    size_t map_size;
    shard_meta m;
    size_t value_bytes;
    uint8_t *batch;  /* BATCH_SAMPLES values */
    uint8_t *checks; /* their check bytes */
    int64_t batch_n; /* samples in batch */
    int64_t count;   /* samples committed to LMDB + in batch */
    sha256_ctx hash;
};

static int lmdb_err(kf_err *err, const char *path, const char *what, int rc) {
    if (rc == EIO) { /* LMDB reports a short write (a full filesystem) as EIO */
        char dir[4096];
        struct statvfs s;
        fs_dirname(path, dir, sizeof dir);
        if (statvfs(dir, &s) == 0 && s.f_bavail == 0)
            return kf_err_set(err, "%s: %s: %s (a short write: the filesystem is full)", path, what,
                              strerror(ENOSPC));
    }
    return kf_err_set(err, "%s: %s: %s", path, what, mdb_strerror(rc));
}

int shard_writer_open(const char *path, const shard_meta *m, shard_writer **out, kf_err *err) {
    KF_CHECK(m->seq_len > 0 && m->vocab_size > 0, "shard_writer_open: bad seq_len/vocab_size");
    KF_CHECK(!strcmp(m->packing, "wrap") || !strcmp(m->packing, "pad"),
             "shard_writer_open: packing must be wrap or pad");
    shard_writer *w = kf_calloc(1, sizeof *w);
    w->fd = -1;
    w->path = kf_strdup(path);
    w->tmp = kf_malloc(strlen(path) + 5);
    sprintf(w->tmp, "%s.tmp", path);
    w->m = *m;
    w->m.id_bytes = shard_id_bytes(m->vocab_size);
    w->m.count = 0;
    w->m.samples_sha256[0] = 0;
    w->value_bytes = shard_value_bytes(w->m.seq_len, w->m.id_bytes, w->m.packing);
    w->batch = kf_malloc(w->value_bytes * BATCH_SAMPLES);
    w->checks = kf_malloc(SHARD_CHECK_BYTES * BATCH_SAMPLES);
    w->map_size = INITIAL_MAP;
    sha256_init(&w->hash);
    /* An unnamed file in the shard's directory (O_TMPFILE), named at commit:
     * creating and syncing it neither locks nor writes the directory, where
     * other shards are being named meanwhile (each such wait would idle a
     * core). LMDB opens it as /proc/self/fd/N. Filesystems without
     * O_TMPFILE (or no /proc) get the named file tmp (a stale one emptied,
     * not unlinked: one directory lock, not two). */
    char dir[4096], fdpath[32];
    const char *file = w->tmp;
    fs_dirname(path, dir, sizeof dir);
    w->fd =
        access("/proc/self/fd", X_OK) == 0 ? open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0644) : -1;
    if (w->fd >= 0) {
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", w->fd);
        file = fdpath;
    } else {
        int fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            kf_err_set(err, "%s: cannot create: %s", w->tmp, strerror(errno));
            goto fail;
        }
        close(fd);
    }
    int rc = mdb_env_create(&w->env);
    if (!rc) rc = mdb_env_set_maxdbs(w->env, 3);
    if (!rc) rc = mdb_env_set_mapsize(w->env, w->map_size);
    /* NOSYNC: durability comes from the caller's sync before publishing; NOLOCK: one
     * writer per file, and the file is invisible to readers until renamed. */
    if (!rc) rc = mdb_env_open(w->env, file, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOLOCK, 0644);
    if (rc) {
        lmdb_err(err, w->tmp, "cannot create shard", rc);
        goto fail;
    }
    /* Create both databases now, so a shard with no samples is still complete. */
    MDB_txn *txn;
    MDB_dbi dbi;
    rc = mdb_txn_begin(w->env, NULL, 0, &txn);
    if (!rc) {
        rc = mdb_dbi_open(txn, SHARD_DB_SAMPLES, MDB_CREATE, &dbi);
        if (!rc) rc = mdb_dbi_open(txn, SHARD_DB_CHECK, MDB_CREATE, &dbi);
        if (!rc) rc = mdb_txn_commit(txn);
        else mdb_txn_abort(txn);
    }
    if (rc) {
        lmdb_err(err, w->tmp, "cannot create shard", rc);
        goto fail;
    }
    *out = w;
    return 0;
fail:
    shard_writer_abort(w);
    return -1;
}

/* Puts the buffered batch in one transaction, growing the map on MAP_FULL. */
static int flush_batch(shard_writer *w, kf_err *err) {
    if (w->batch_n == 0) return 0;
    int64_t first = w->count - w->batch_n;
    for (;;) {
        MDB_txn *txn;
        MDB_dbi dbi, cdbi;
        int rc = mdb_txn_begin(w->env, NULL, 0, &txn);
        if (rc) return lmdb_err(err, w->tmp, "txn_begin", rc);
        rc = mdb_dbi_open(txn, SHARD_DB_SAMPLES, MDB_CREATE, &dbi);
        if (!rc) rc = mdb_dbi_open(txn, SHARD_DB_CHECK, MDB_CREATE, &cdbi);
        for (int64_t i = 0; !rc && i < w->batch_n; i++) {
            uint8_t kb[8];
            shard_key_encode((uint64_t)(first + i), kb);
            MDB_val k = {8, kb}, v = {w->value_bytes, w->batch + (size_t)i * w->value_bytes};
            MDB_val c = {SHARD_CHECK_BYTES, w->checks + (size_t)i * SHARD_CHECK_BYTES};
            rc = mdb_put(txn, dbi, &k, &v, MDB_APPEND);
            if (!rc) rc = mdb_put(txn, cdbi, &k, &c, MDB_APPEND);
        }
        if (!rc) rc = mdb_txn_commit(txn);
        else mdb_txn_abort(txn);
        if (rc == MDB_MAP_FULL) {
            w->map_size *= 2;
            rc = mdb_env_set_mapsize(w->env, w->map_size);
            if (rc) return lmdb_err(err, w->tmp, "growing the map", rc);
            continue;
        }
        if (rc) return lmdb_err(err, w->tmp, "writing samples", rc);
        w->batch_n = 0;
        return 0;
    }
}

int shard_writer_append(shard_writer *w, const int32_t *ids, int32_t len, kf_err *err) {
    int pad = !strcmp(w->m.packing, "pad");
    KF_CHECK(pad ? (len >= 0 && len <= w->m.seq_len) : len == w->m.seq_len,
             "shard_writer_append: length %d invalid for %s packing (seq_len %d)", len,
             w->m.packing, w->m.seq_len);
    uint8_t *v = w->batch + (size_t)w->batch_n * w->value_bytes;
    int32_t lo = 0, hi = 0; /* checked once per sample: the loop below stays tight */
    for (int32_t i = 0; i < w->m.seq_len; i++) {
        lo = ids[i] < lo ? ids[i] : lo;
        hi = ids[i] > hi ? ids[i] : hi;
    }
    KF_CHECK(lo >= 0 && hi < w->m.vocab_size, "shard_writer_append: id %d out of range [0, %lld)",
             lo < 0 ? lo : hi, (long long)w->m.vocab_size);
    shard_ids_put(v, ids, w->m.seq_len, w->m.id_bytes);
    if (pad) shard_put_le(v + (size_t)w->m.seq_len * w->m.id_bytes, (uint32_t)len, 4);
    sha256_update(&w->hash, v, w->value_bytes);
    shard_check_bytes(v, w->value_bytes, w->checks + (size_t)w->batch_n * SHARD_CHECK_BYTES);
    w->batch_n++;
    w->count++;
    if (w->batch_n == BATCH_SAMPLES) return flush_batch(w, err);
    return 0;
}

int64_t shard_writer_count(const shard_writer *w) { return w->count; }

int shard_writer_commit(shard_writer *w, const shard_meta *stats, shard_meta *final_meta,
                        kf_err *err) {
    if (flush_batch(w, err)) goto fail;
    uint8_t d[32];
    sha256_final(&w->hash, d);
    shard_meta m = w->m;
    memcpy(m.source_sha256, stats->source_sha256, sizeof m.source_sha256);
    memcpy(m.config_sha256, stats->config_sha256, sizeof m.config_sha256);
    m.docs = stats->docs;
    m.empty_docs = stats->empty_docs;
    m.replaced = stats->replaced;
    m.raw_bytes = stats->raw_bytes;
    m.tokens = stats->tokens;
    m.truncated = stats->truncated;
    m.dropped_tokens = stats->dropped_tokens;
    m.count = w->count;
    sha256_to_hex(d, m.samples_sha256);
    for (;;) {
        int rc = shard_meta_put(w->env, &m);
        if (rc == MDB_MAP_FULL) {
            w->map_size *= 2;
            if ((rc = mdb_env_set_mapsize(w->env, w->map_size)) == 0) continue;
        }
        if (rc) {
            lmdb_err(err, w->tmp, "writing shard meta", rc);
            goto fail;
        }
        break;
    }
    /* Start the write-back now, without waiting for it or forcing a journal
     * commit and a disk cache flush per shard (those cost a build with every
     * core busy about 6%): the data is on its way while the next shards are
     * packed, and the caller's one fsync per shard before the manifest
     * (shard_writer.h) then finds little left to do. */
    int fd;
    if (mdb_env_get_fd(w->env, &fd) == 0) sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    mdb_env_close(w->env);
    w->env = NULL;
    /* The directory is not fsynced here: each fsync stalls the other shards'
     * commits in it. The caller syncs it once before publishing
     * (shard_writer.h). An unnamed file replaces an older shard in two steps
     * (no shard is listed anywhere during a build). */
    if (w->fd >= 0) {
        char fdpath[32];
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", w->fd);
        if ((unlink(w->path) != 0 && errno != ENOENT) ||
            linkat(AT_FDCWD, fdpath, AT_FDCWD, w->path, AT_SYMLINK_FOLLOW) != 0) {
            kf_err_set(err, "%s: cannot name the new shard: %s", w->path, strerror(errno));
            goto fail;
        }
        close(w->fd);
    } else if (rename(w->tmp, w->path) != 0) {
        kf_err_set(err, "rename %s -> %s: %s", w->tmp, w->path, strerror(errno));
        goto fail;
    }
    if (final_meta) *final_meta = m;
    free(w->batch);
    free(w->checks);
    free(w->tmp);
    free(w->path);
    free(w);
    return 0;
fail:
    shard_writer_abort(w);
    return -1;
}

void shard_writer_abort(shard_writer *w) {
    if (!w) return;
    if (w->env) mdb_env_close(w->env);
    if (w->fd >= 0) close(w->fd); /* an unnamed file: gone */
    else unlink(w->tmp);
    free(w->batch);
    free(w->checks);
    free(w->tmp);
    free(w->path);
    free(w);
}

int shard_verify(const char *path, shard_meta *out, kf_err *err) {
    MDB_env *env;
    shard_meta m;
    if (shard_env_open_ro(path, &env, err)) return -1;
    if (shard_meta_get(env, path, &m, err)) goto fail_env;
    MDB_txn *txn = NULL;
    MDB_dbi dbi, cdbi;
    MDB_cursor *cur = NULL, *ccur = NULL;
    int rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (!rc) rc = mdb_dbi_open(txn, SHARD_DB_SAMPLES, 0, &dbi);
    if (!rc) rc = mdb_dbi_open(txn, SHARD_DB_CHECK, 0, &cdbi);
    if (!rc) rc = mdb_cursor_open(txn, dbi, &cur);
    if (!rc) rc = mdb_cursor_open(txn, cdbi, &ccur);
    if (rc) {
        lmdb_err(err, path, "opening samples", rc);
        if (txn) mdb_txn_abort(txn);
        goto fail_env;
    }
    size_t vb = shard_value_bytes(m.seq_len, m.id_bytes, m.packing);
    sha256_ctx h;
    sha256_init(&h);
    int64_t i = 0;
    MDB_val k, v, ck, cv;
    int bad = 0, crc = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && !bad;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
        crc = mdb_cursor_get(ccur, &ck, &cv, i ? MDB_NEXT : MDB_FIRST);
        uint64_t key = k.mv_size == 8 ? shard_key_decode(k.mv_data) : UINT64_MAX;
        uint8_t want[SHARD_CHECK_BYTES];
        const char *why = NULL;
        if (key != (uint64_t)i) why = "key missing, malformed or out of order";
        else if (v.mv_size != vb) why = "value has the wrong size";
        else if (crc || ck.mv_size != 8 || shard_key_decode(ck.mv_data) != key ||
                 cv.mv_size != SHARD_CHECK_BYTES)
            why = "check record missing";
        else if (shard_check_bytes(v.mv_data, v.mv_size, want),
                 memcmp(want, cv.mv_data, SHARD_CHECK_BYTES))
            why = "bytes do not match the sample's checksum";
        else why = shard_value_check(v.mv_data, &m);
        if (why) bad = kf_err_set(err, "%s: sample %" PRId64 ": %s", path, i, why);
        else sha256_update(&h, v.mv_data, v.mv_size);
    }
    mdb_cursor_close(cur);
    mdb_cursor_close(ccur);
    mdb_txn_abort(txn);
    if (bad) goto fail_env;
    if (rc != MDB_NOTFOUND) {
        lmdb_err(err, path, "reading samples", rc);
        goto fail_env;
    }
    if (i != m.count) {
        kf_err_set(
            err,
            "%s: sample %" PRId64 ": %s (holds %" PRId64 " samples, its record says %" PRId64 ")",
            path, i < m.count ? i : m.count, i < m.count ? "missing" : "unexpected", i, m.count);
        goto fail_env;
    }
    uint8_t d[32];
    char hex[65];
    sha256_final(&h, d);
    sha256_to_hex(d, hex);
    if (strcmp(hex, m.samples_sha256)) {
        kf_err_set(err, "%s: samples sha256 %s does not match the recorded %s", path, hex,
                   m.samples_sha256);
        goto fail_env;
    }
    mdb_env_close(env);
    if (out) *out = m;
    return 0;
fail_env:
    mdb_env_close(env);
    return -1;
}
