/* trainer/infer/prefixes.c — `kf sample`'s prefix file and the protocol's
 * held-out prefixes (prefixes.h). */
#include "trainer/infer/prefixes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "pipeline/shard_reader.h"

int prefixes_parse(const char *text, size_t len, const char *path, tok *tk, int32_t ***out,
                   int64_t **lens, int64_t *count, kf_err *err) {
    int64_t n = 0, cap = 0, line = 0;
    int32_t **pre = NULL;
    int64_t *pl = NULL;
    int rc = 0;
    for (const char *p = text; p < text + len && !rc;) {
        const char *e = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(text + len - p);
        line++;
        char name[4200];
        snprintf(name, sizeof name, "%s:%lld", path, (long long)line);
        int blank = 1;
        for (size_t i = 0; i < l; i++) blank &= p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
        if (!blank) {
            json_doc *d = json_parse(p, l, name, err);
            if (!d) {
                rc = -1;
                break;
            }
            const json *r = json_root(d);
            const json *ids = json_get(r, "prefix"), *tx = json_get(r, "text");
            tok_ids got = {0};
            if (ids && ids->type == JSON_ARRAY) {
                for (size_t i = 0; i < ids->n && !rc; i++) {
                    const json *v = &ids->kids[i];
                    if (v->type != JSON_NUMBER || !v->is_int || v->i < 0 || v->i > INT32_MAX)
                        rc = kf_err_set(err, "%s: prefix[%zu] is not a token id", name, i);
                    else tok_ids_push(&got, (int32_t)v->i);
                }
            } else if (tx && tx->type == JSON_STRING) {
                if (!tk) rc = kf_err_set(err, "%s: a text prefix needs --vocab DIR", name);
                else tok_encode(tk, tx->str.s, tx->str.len, 0, &got, NULL);
            } else {
                rc = kf_err_set(err, "%s: expected {\"prefix\": [ids]} or {\"text\": \"...\"}",
                                name);
            }
            if (!rc && got.n == 0) rc = kf_err_set(err, "%s: empty prefix", name);
            if (!rc) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 16;
                    pre = kf_realloc(pre, (size_t)cap * sizeof *pre);
                    pl = kf_realloc(pl, (size_t)cap * sizeof *pl);
                }
                pre[n] = kf_malloc(got.n * sizeof(int32_t));
                memcpy(pre[n], got.v, got.n * sizeof(int32_t));
                pl[n++] = (int64_t)got.n;
            }
            tok_ids_free(&got);
            json_free(d);
        }
        p += l + 1;
    }
    if (!rc && n == 0) rc = kf_err_set(err, "%s: no prefixes (the file is empty)", path);
    if (rc) {
        for (int64_t i = 0; i < n; i++) free(pre[i]);
        free(pre);
        free(pl);
        return -1;
    }
    *out = pre;
    *lens = pl;
    *count = n;
    return 0;
}

int prefixes_read(const char *path, tok *tk, int32_t ***out, int64_t **lens, int64_t *count,
                  kf_err *err) {
    char *text;
    size_t len;
    if (fs_read_file(path, &text, &len, err)) return -1;
    int rc = prefixes_parse(text, len, path, tk, out, lens, count, err);
    free(text);
    return rc;
}

int prefixes_from_shards(const char *dir, int64_t *P, int64_t ctx, int64_t B, int32_t **out,
                         int64_t *seq_len, int32_t *eos, kf_err *err) {
    shard_set *s;
    if (shard_set_open(dir, "valid", &s, err)) return -1;
    int L = shard_set_seq_len(s);
    if (*P == 0) {
        *P = strcmp(shard_set_packing(s), "pad") ? 64 : 6;
        if (*P > ctx / 2) *P = ctx / 2 > 1 ? ctx / 2 : 1;
    }
    *seq_len = L;
    *eos = shard_set_special_id(s, "eos");
    int rc = 0;
    if (*P > L)
        rc = kf_err_set(err, "prefix length %lld exceeds the data's sequence length %d",
                        (long long)*P, L);
    int32_t *ids = kf_malloc((size_t)L * sizeof(int32_t));
    int32_t *pre = kf_malloc((size_t)(B * *P) * sizeof(int32_t));
    int64_t got = 0;
    for (int64_t i = 0; !rc && i < shard_set_count(s) && got < B; i++) {
        int32_t len;
        if (shard_set_get(s, i, ids, &len, err)) rc = -1;
        else if (len >= *P) memcpy(pre + got++ * *P, ids, (size_t)*P * sizeof(int32_t));
    }
    if (!rc && got < B)
        rc = kf_err_set(err, "%s: only %lld validation samples have %lld tokens; %lld are needed",
                        dir, (long long)got, (long long)*P, (long long)B);
    free(ids);
    shard_set_close(s);
    if (rc) free(pre);
    else *out = pre;
    return rc;
}
