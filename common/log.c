/* common/log.c — timestamped stderr lines and line-atomic JSONL appends. */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/progress.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int quiet_mode = -1; /* -1: not yet read from KF_QUIET */

void kf_log_set_quiet(bool quiet) { atomic_store(&quiet_mode, quiet ? 1 : 0); }

static bool is_quiet(void) {
    int q = atomic_load(&quiet_mode);
    if (q < 0) {
        const char *e = getenv("KF_QUIET");
        q = e && *e && strcmp(e, "0") != 0;
        atomic_store(&quiet_mode, q);
    }
    return q;
}

static void emit(const char *level, const char *fmt, va_list ap) {
    char ts[32], msg[4096];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    vsnprintf(msg, sizeof msg, fmt, ap);
    pthread_mutex_lock(&log_mu);
    progress_clear_line();
    fprintf(stderr, "%s kf: %s%s\n", ts, level, msg);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}

void kf_log_info(const char *fmt, ...) {
    if (is_quiet()) return;
    va_list ap;
    va_start(ap, fmt);
    emit("", fmt, ap);
    va_end(ap);
}

void kf_log_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit("warning: ", fmt, ap);
    va_end(ap);
}

/* ---- record builder ---- */

void kf_rec_init(kf_rec *r) { *r = (kf_rec){0}; }

void kf_rec_reset(kf_rec *r) {
    r->len = 0;
    r->nfields = 0;
}

void kf_rec_free(kf_rec *r) {
    free(r->buf);
    *r = (kf_rec){0};
}

static void reserve(kf_rec *r, size_t more) {
    if (r->len + more + 2 <= r->cap) return; /* +2: closing brace and NUL */
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + more + 2) cap *= 2;
    r->buf = kf_realloc(r->buf, cap);
    r->cap = cap;
}

static void put(kf_rec *r, const char *s, size_t n) {
    reserve(r, n);
    memcpy(r->buf + r->len, s, n);
    r->len += n;
}

static void put_quoted(kf_rec *r, const char *s) {
    size_t n = strlen(s), need = json_escape(NULL, 0, s, n);
    reserve(r, need);
    json_escape(r->buf + r->len, need, s, n);
    r->len += need;
}

/* buf holds "{" and the fields; the closing brace is added by kf_rec_text. */
static void open_brace(kf_rec *r) {
    if (!r->len) put(r, "{", 1);
}

/* Writes ',' when needed, then "key":. */
static void start_field(kf_rec *r, const char *key) {
    open_brace(r);
    if (r->nfields++) put(r, ",", 1);
    put_quoted(r, key);
    put(r, ":", 1);
}

void kf_rec_str(kf_rec *r, const char *key, const char *value) {
    start_field(r, key);
    put_quoted(r, value);
}

void kf_rec_int(kf_rec *r, const char *key, int64_t value) {
    char b[32];
    start_field(r, key);
    put(r, b, (size_t)snprintf(b, sizeof b, "%" PRId64, value));
}

void kf_rec_double(kf_rec *r, const char *key, double value) {
    char b[40];
    start_field(r, key);
    if (!isfinite(value)) put(r, "null", 4);
    else put(r, b, (size_t)snprintf(b, sizeof b, "%.9g", value));
}

void kf_rec_bool(kf_rec *r, const char *key, bool value) {
    start_field(r, key);
    put(r, value ? "true" : "false", value ? 4 : 5);
}

void kf_rec_raw(kf_rec *r, const char *key, const char *json) {
    start_field(r, key);
    put(r, json, strlen(json));
}

const char *kf_rec_text(kf_rec *r) {
    open_brace(r);
    r->buf[r->len] = '}'; /* reserve keeps two spare bytes */
    r->buf[r->len + 1] = 0;
    return r->buf;
}

/* ---- JSONL file ---- */

struct kf_jsonl {
    int fd;
    char *path;
};

/* Cuts a trailing partial line (no final '\n') left by a crash. */
static int drop_partial_line(int fd, const char *path, kf_err *err) {
    struct stat st;
    if (fstat(fd, &st)) return kf_err_set(err, "%s: %s", path, strerror(errno));
    off_t end = st.st_size;
    char b[4096];
    while (end > 0) {
        off_t start = end > (off_t)sizeof b ? end - (off_t)sizeof b : 0;
        ssize_t n = pread(fd, b, (size_t)(end - start), start);
        if (n != end - start) return kf_err_set(err, "%s: read: %s", path, strerror(errno));
        for (ssize_t i = n - 1; i >= 0; i--) {
            if (b[i] != '\n') continue;
            off_t keep = start + i + 1;
            if (keep == st.st_size) return 0;
            if (ftruncate(fd, keep))
                return kf_err_set(err, "%s: truncate: %s", path, strerror(errno));
            return 0;
        }
        end = start;
    }
    if (st.st_size && ftruncate(fd, 0))
        return kf_err_set(err, "%s: truncate: %s", path, strerror(errno));
    return 0;
}

kf_jsonl *kf_jsonl_open(const char *path, kf_err *err) {
    int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        kf_err_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (drop_partial_line(fd, path, err)) {
        close(fd);
        return NULL;
    }
    kf_jsonl *l = kf_malloc(sizeof *l);
    l->fd = fd;
    l->path = kf_strdup(path);
    return l;
}

int kf_jsonl_append(kf_jsonl *l, kf_rec *r, kf_err *err) {
    struct stat st;
    if (fstat(l->fd, &st)) return kf_err_set(err, "%s: %s", l->path, strerror(errno));
    kf_rec_text(r);
    r->buf[r->len + 1] = '\n'; /* "{...}\n" in one write: lines never interleave */
    size_t total = r->len + 2;
    const char *p = r->buf;
    int e = 0;
    while (total) {
        ssize_t w = write(l->fd, p, total);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        p += w;
        total -= (size_t)w;
    }
    kf_rec_text(r); /* restore the NUL */
    if (!total) return 0;
    /* a short write left the start of the record without its newline: the
     * next record would extend that line into one that parses as neither */
    if (p != r->buf && ftruncate(l->fd, st.st_size))
        return kf_err_set(err, "%s: write: %s; cutting the partial record off: %s", l->path,
                          strerror(e), strerror(errno));
    return kf_err_set(err, "%s: write: %s", l->path, strerror(e));
}

int kf_jsonl_sync(kf_jsonl *l, kf_err *err) {
    if (fsync(l->fd)) return kf_err_set(err, "%s: fsync: %s", l->path, strerror(errno));
    return 0;
}

void kf_jsonl_close(kf_jsonl *l) {
    if (!l) return;
    close(l->fd);
    free(l->path);
    free(l);
}
