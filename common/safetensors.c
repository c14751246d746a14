/* common/safetensors.c — safetensors writer (atomic) and validating reader (mmap). */
#include "common/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/utf8.h"

enum { NDTYPES = ST_U8 + 1 };
static const char *const DT_NAME[NDTYPES] = {"F64", "F32", "F16", "BF16", "I64", "I32", "U8"};
static const size_t DT_SIZE[NDTYPES] = {8, 4, 2, 2, 8, 4, 1};

/* The reference implementation refuses headers above 100 MB; so do we. */
#define MAX_HEADER (100u << 20)

const char *safetensors_dtype_name(safetensors_dtype dt) {
    KF_CHECK((unsigned)dt < NDTYPES, "bad dtype %d", (int)dt);
    return DT_NAME[dt];
}

/* ---- writer ---- */

struct safetensors_writer {
    safetensors_tensor *t;
    size_t n, cap;
    char **mk, **mv;
    size_t nmeta;
};

safetensors_writer *safetensors_writer_new(void) {
    return kf_calloc(1, sizeof(safetensors_writer));
}

void safetensors_add(safetensors_writer *w, const char *name, safetensors_dtype dt, int ndim,
                     const int64_t *shape, const void *data) {
    KF_CHECK((unsigned)dt < NDTYPES, "safetensors_add(%s): bad dtype %d", name, (int)dt);
    KF_CHECK(ndim >= 0 && ndim <= ST_MAX_DIMS, "safetensors_add(%s): %d dimensions (max %d)", name,
             ndim, ST_MAX_DIMS);
    KF_CHECK(strcmp(name, "__metadata__") != 0 && name[0],
             "safetensors_add: reserved or empty name '%s'", name);
    for (size_t i = 0; i < w->n; i++)
        KF_CHECK(strcmp(w->t[i].name, name), "safetensors_add: tensor '%s' added twice", name);
    if (w->n == w->cap) w->t = kf_realloc(w->t, (w->cap = w->cap ? 2 * w->cap : 16) * sizeof *w->t);
    safetensors_tensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = kf_strdup(name);
    t->dtype = dt;
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++) {
        KF_CHECK(shape[d] >= 0, "safetensors_add(%s): negative dimension %" PRId64, name, shape[d]);
        t->shape[d] = shape[d];
        t->numel *= shape[d];
    }
    t->nbytes = (uint64_t)t->numel * DT_SIZE[dt];
    t->offset = w->n > 1 ? w->t[w->n - 2].offset + w->t[w->n - 2].nbytes : 0;
    t->data = data;
    KF_CHECK(data || !t->nbytes, "safetensors_add(%s): NULL data", name);
}

void safetensors_set_meta(safetensors_writer *w, const char *key, const char *value) {
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strcmp(w->mk[i], key)) continue;
        free(w->mv[i]);
        w->mv[i] = kf_strdup(value);
        return;
    }
    w->mk = kf_realloc(w->mk, (w->nmeta + 1) * sizeof *w->mk);
    w->mv = kf_realloc(w->mv, (w->nmeta + 1) * sizeof *w->mv);
    w->mk[w->nmeta] = kf_strdup(key);
    w->mv[w->nmeta++] = kf_strdup(value);
}

void safetensors_writer_free(safetensors_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free((char *)w->t[i].name);
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->t);
    free(w->mk);
    free(w->mv);
    free(w);
}

/* Appends the JSON-quoted string s to the header buffer. */
static void put_str(char **h, size_t *len, size_t *cap, const char *s) {
    size_t n = strlen(s), need = json_escape(NULL, 0, s, n);
    while (*len + need + 1 > *cap) *h = kf_realloc(*h, *cap *= 2);
    json_escape(*h + *len, need, s, n);
    *len += need;
}

static void put_fmt(char **h, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put_fmt(char **h, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*h + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        *h = kf_realloc(*h, *cap *= 2);
    }
}

int safetensors_write(safetensors_writer *w, const char *path, kf_err *err) {
    size_t cap = 1024, len = 8; /* the 8-byte length is filled in at the end */
    char *h = kf_malloc(cap);
    put_fmt(&h, &len, &cap, "{");
    if (w->nmeta) {
        put_fmt(&h, &len, &cap, "\"__metadata__\":{");
        for (size_t i = 0; i < w->nmeta; i++) {
            if (i) put_fmt(&h, &len, &cap, ",");
            put_str(&h, &len, &cap, w->mk[i]);
            put_fmt(&h, &len, &cap, ":");
            put_str(&h, &len, &cap, w->mv[i]);
        }
        put_fmt(&h, &len, &cap, "}");
    }
    for (size_t i = 0; i < w->n; i++) {
        const safetensors_tensor *t = &w->t[i];
        if (i || w->nmeta) put_fmt(&h, &len, &cap, ",");
        put_str(&h, &len, &cap, t->name);
        put_fmt(&h, &len, &cap, ":{\"dtype\":\"%s\",\"shape\":[", DT_NAME[t->dtype]);
        for (int d = 0; d < t->ndim; d++)
            put_fmt(&h, &len, &cap, "%s%" PRId64, d ? "," : "", t->shape[d]);
        put_fmt(&h, &len, &cap, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", t->offset,
                t->offset + t->nbytes);
    }
    put_fmt(&h, &len, &cap, "}");
    while (len % 8) put_fmt(&h, &len, &cap, " "); /* the data buffer starts 8-aligned */
    uint64_t hn = len - 8;
    for (int i = 0; i < 8; i++) h[i] = (char)(hn >> (8 * i));

    fs_atomic a;
    int rc = fs_atomic_begin(&a, path, err);
    if (!rc) {
        rc = fs_atomic_write(&a, h, len, err);
        for (size_t i = 0; i < w->n && !rc; i++)
            rc = fs_atomic_write(&a, w->t[i].data, w->t[i].nbytes, err);
        rc = rc ? (fs_atomic_abort(&a), -1) : fs_atomic_commit(&a, err);
    }
    free(h);
    return rc;
}

/* ---- reader ---- */

static int cmp_offset(const void *a, const void *b) {
    const safetensors_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* A non-negative JSON integer. */
static bool get_u64(const json *j, uint64_t *out) {
    if (!j || j->type != JSON_NUMBER || !j->is_int || j->i < 0) return false;
    *out = (uint64_t)j->i;
    return true;
}

/* Validates one tensor entry into t (name set by the caller). */
static int parse_tensor(const json *v, safetensors_tensor *t, const char *path, kf_err *err) {
    const char *name = t->name;
    if (v->type != JSON_OBJECT)
        return kf_err_set(err, "%s: tensor '%s': expected an object", path, name);
    const json *dt = NULL, *shape = NULL, *off = NULL;
    for (size_t i = 0; i < v->n; i++) {
        const char *k = v->keys[i].s;
        const json **slot = !strcmp(k, "dtype")          ? &dt
                            : !strcmp(k, "shape")        ? &shape
                            : !strcmp(k, "data_offsets") ? &off
                                                         : NULL;
        if (!slot) return kf_err_set(err, "%s: tensor '%s': unknown field '%s'", path, name, k);
        if (*slot) return kf_err_set(err, "%s: tensor '%s': field '%s' repeated", path, name, k);
        *slot = &v->kids[i];
    }
    if (!dt || !shape || !off)
        return kf_err_set(err, "%s: tensor '%s': missing '%s'", path, name,
                          !dt      ? "dtype"
                          : !shape ? "shape"
                                   : "data_offsets");
    int d = -1;
    for (int i = 0; dt->type == JSON_STRING && i < NDTYPES; i++)
        if (!strcmp(dt->str.s, DT_NAME[i])) d = i;
    if (d < 0)
        return kf_err_set(
            err,
            "%s: tensor '%s': unsupported dtype %s%s%s (supported: F64 F32 F16 BF16 I64 I32 U8)",
            path, name, dt->type == JSON_STRING ? "'" : "",
            dt->type == JSON_STRING ? dt->str.s : "(not a string)",
            dt->type == JSON_STRING ? "'" : "");
    t->dtype = (safetensors_dtype)d;
    if (shape->type != JSON_ARRAY || shape->n > ST_MAX_DIMS)
        return kf_err_set(err, "%s: tensor '%s': shape must be a list of at most %d integers", path,
                          name, ST_MAX_DIMS);
    t->ndim = (int)shape->n;
    uint64_t numel = 1;
    for (size_t i = 0; i < shape->n; i++) {
        uint64_t s;
        if (!get_u64(&shape->kids[i], &s))
            return kf_err_set(err, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                              path, name, i);
        if (s && numel > UINT64_MAX / 8 / s)
            return kf_err_set(err, "%s: tensor '%s': shape overflows", path, name);
        numel *= s;
        t->shape[i] = (int64_t)s;
    }
    t->numel = (int64_t)numel;
    uint64_t b, e;
    if (off->type != JSON_ARRAY || off->n != 2 || !get_u64(&off->kids[0], &b) ||
        !get_u64(&off->kids[1], &e) || e < b)
        return kf_err_set(
            err, "%s: tensor '%s': data_offsets must be [BEGIN, END] with 0 <= BEGIN <= END", path,
            name);
    t->offset = b;
    t->nbytes = e - b;
    if (numel * DT_SIZE[d] != t->nbytes)
        return kf_err_set(err,
                          "%s: tensor '%s': shape and dtype need %" PRIu64
                          " bytes but data_offsets span %" PRIu64,
                          path, name, numel * DT_SIZE[d], t->nbytes);
    return 0;
}

static int parse_header(safetensors_file *f, const char *hdr, size_t hn, uint64_t data_len,
                        kf_err *err) {
    const char *path = f->path;
    if (hn == 0 || hdr[0] != '{')
        return kf_err_set(err, "%s: not a safetensors file (header does not start with '{')", path);
    kf_err jerr;
    json_doc *doc = json_parse(hdr, hn, path, &jerr);
    if (!doc) return kf_err_set(err, "%s: header JSON: %s", path, jerr.msg);
    const json *root = json_root(doc);
    int rc = 0;
    if (root->type != JSON_OBJECT) {
        rc = kf_err_set(err, "%s: header is not a JSON object", path);
        goto out;
    }
    f->tensors = kf_calloc(root->n ? root->n : 1, sizeof *f->tensors);
    for (size_t i = 0; i < root->n && !rc; i++) {
        const char *key = root->keys[i].s;
        const json *v = &root->kids[i];
        if (strlen(key) != root->keys[i].len) {
            rc = kf_err_set(err, "%s: tensor name with a NUL byte", path);
            break;
        }
        /* the writer (json_escape) would turn ill-formed bytes into U+FFFD:
         * a name read must be one that can be written back */
        if (!utf8_valid(key, root->keys[i].len)) {
            rc = kf_err_set(err, "%s: a name in the header is not valid UTF-8", path);
            break;
        }
        for (size_t j = 0; j < i && !rc; j++)
            if (!strcmp(root->keys[j].s, key))
                rc = kf_err_set(err, "%s: '%s' appears twice in the header", path, key);
        if (rc) break;
        if (!strcmp(key, "__metadata__")) {
            if (v->type != JSON_OBJECT) {
                rc = kf_err_set(err, "%s: __metadata__ must be an object", path);
                break;
            }
            f->meta_keys = kf_calloc(v->n ? v->n : 1, sizeof(char *));
            f->meta_values = kf_calloc(v->n ? v->n : 1, sizeof(char *));
            for (size_t m = 0; m < v->n; m++) {
                if (v->kids[m].type != JSON_STRING) {
                    rc = kf_err_set(err, "%s: __metadata__ '%s' is not a string", path,
                                    v->keys[m].s);
                    break;
                }
                if (!utf8_valid(v->keys[m].s, v->keys[m].len) ||
                    !utf8_valid(v->kids[m].str.s, v->kids[m].str.len)) {
                    rc = kf_err_set(err, "%s: __metadata__ entry %zu is not valid UTF-8", path, m);
                    break;
                }
                f->meta_keys[m] = kf_strdup(v->keys[m].s);
                f->meta_values[m] = kf_strdup(v->kids[m].str.s);
                f->nmeta++;
            }
            continue;
        }
        safetensors_tensor *t = &f->tensors[f->n++];
        t->name = kf_strdup(key);
        rc = parse_tensor(v, t, path, err);
    }
    if (rc) goto out;
    /* Sorted by offset, the tensors must tile the data buffer exactly. */
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < f->n; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        if (t->offset + t->nbytes > data_len) {
            rc = kf_err_set(err,
                            "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                            "] beyond the %" PRIu64 "-byte data (truncated file?)",
                            path, t->name, t->offset, t->offset + t->nbytes, data_len);
            goto out;
        }
        if (t->offset != at) {
            rc = kf_err_set(err,
                            "%s: tensor '%s': starts at %" PRIu64
                            " but the previous tensor ends at %" PRIu64 " (%s)",
                            path, t->name, t->offset, at, t->offset < at ? "overlap" : "gap");
            goto out;
        }
        at += t->nbytes;
    }
    if (at != data_len)
        rc = kf_err_set(err, "%s: %" PRIu64 " bytes after the last tensor (trailing garbage)", path,
                        data_len - at);
out:
    json_free(doc);
    return rc;
}

int safetensors_open(const char *path, safetensors_file **out, kf_err *err) {
    *out = NULL;
    struct stat st;
    int fd = fs_open_stat(path, &st, err);
    if (fd < 0) return -1;
    uint64_t size = (uint64_t)st.st_size;
    if (!S_ISREG(st.st_mode) || size < 8) {
        close(fd);
        return kf_err_set(err, "%s: not a safetensors file (%" PRIu64 " bytes, need at least 8)",
                          path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return kf_err_set(err, "%s: mmap: %s", path, strerror(e));
    safetensors_file *f = kf_calloc(1, sizeof *f);
    f->path = kf_strdup(path);
    f->map = map;
    f->map_len = size;
    const unsigned char *p = map;
    uint64_t hn = 0;
    for (int i = 0; i < 8; i++) hn |= (uint64_t)p[i] << (8 * i);
    int rc;
    if (hn > size - 8)
        rc = kf_err_set(err, "%s: header length %" PRIu64 " exceeds the file (%" PRIu64 " bytes)",
                        path, hn, size);
    else if (hn > MAX_HEADER)
        rc = kf_err_set(err, "%s: header length %" PRIu64 " exceeds the 100 MB limit", path, hn);
    else rc = parse_header(f, (const char *)p + 8, (size_t)hn, size - 8 - hn, err);
    if (rc) {
        safetensors_close(f);
        return -1;
    }
    for (size_t i = 0; i < f->n; i++) f->tensors[i].data = p + 8 + hn + f->tensors[i].offset;
    *out = f;
    return 0;
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

const char *safetensors_meta(const safetensors_file *f, const char *key) {
    for (size_t i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
    return NULL;
}

/* IEEE binary16 bits to float, exactly (portable C: clang 14, which builds
 * the fuzzers, has no _Float16 on x86-64 without AVX512-FP16). */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    float f;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13 |
            (man ? 0x400000u : 0); /* inf; NaN quieted, as the hardware does */
    } else if (exp) {
        u = sign | (exp + 112) << 23 | man << 13;
    } else { /* zero or subnormal: man * 2^-24, exact in float */
        f = (float)man * 0x1p-24f;
        memcpy(&u, &f, 4);
        u |= sign;
    }
    memcpy(&f, &u, 4);
    return f;
}

int safetensors_read_f32(const safetensors_tensor *t, float *dst, kf_err *err) {
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case ST_F32: memcpy(dst, p, t->nbytes); return 0;
    case ST_F64:
        for (int64_t i = 0; i < t->numel; i++) {
            double v;
            memcpy(&v, p + 8 * i, 8);
            dst[i] = (float)v;
        }
        return 0;
    case ST_F16:
        for (int64_t i = 0; i < t->numel; i++)
            dst[i] = half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_BF16:
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t u = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &u, 4);
        }
        return 0;
    default:
        return kf_err_set(err, "tensor '%s': dtype %s is not a float", t->name, DT_NAME[t->dtype]);
    }
}

void safetensors_close(safetensors_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    for (size_t i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}
