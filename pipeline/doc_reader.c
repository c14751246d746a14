/* pipeline/doc_reader.c — inputs -> documents (see doc_reader.h). */
#include "pipeline/doc_reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"

#define CHUNK (1u << 20)

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

bool build_is_archive_name(const char *name) {
    static const char *const sufs[] = {".tar",     ".tgz", ".tar.gz", ".tar.xz", ".txz",
                                       ".tar.bz2", ".xz",  ".gz",     ".bz2",    NULL};
    for (int i = 0; sufs[i]; i++)
        if (ends_with(name, sufs[i])) return true;
    return false;
}

/* A byte stream: a plain file or an archive member. read returns bytes, 0 at
 * the end, -1 on error (with the message in *err). */
typedef struct stream {
    ssize_t (*read)(struct stream *s, void *buf, size_t n, kf_err *err);
    int fd;
    struct archive *a;
    const char *name; /* for messages */
} stream;

typedef struct rd {
    const doc_sink *sink;
    const build_input *in;
    kf_err *err;
    int64_t disk_base;   /* on-disk bytes of inputs finished */
    int64_t file_pos;    /* bytes read of the current top-level plain file */
    struct archive *top; /* the top-level archive being read, or NULL */
    char *buf;
    size_t cap;
} rd;

static void report(rd *r) {
    if (!r->sink->progress) return;
    r->sink->progress(r->sink->ctx,
                      r->disk_base + (r->top ? archive_filter_bytes(r->top, -1) : r->file_pos));
}

static ssize_t fd_read(stream *s, void *buf, size_t n, kf_err *err) {
    for (;;) {
        ssize_t k = read(s->fd, buf, n);
        if (k >= 0) return k;
        if (errno != EINTR) return kf_err_set(err, "%s: read error: %s", s->name, strerror(errno));
    }
}

static ssize_t member_read(stream *s, void *buf, size_t n, kf_err *err) {
    la_ssize_t k = archive_read_data(s->a, buf, n);
    if (k < 0)
        return kf_err_set(err, "%s: truncated or corrupt archive member: %s", s->name,
                          archive_error_string(s->a));
    return k;
}

static int emit(rd *r, const char *text, size_t len) {
    if (len == 0) return r->sink->empty(r->sink->ctx, r->err);
    return r->sink->doc(r->sink->ctx, text, len, r->err);
}

/* One JSONL line: {"<text_field>": "..."}; blank lines are empty documents. */
static int emit_json(rd *r, const stream *s, int64_t line_no, const char *p, size_t n) {
    size_t ws = 0;
    while (ws < n && strchr(" \t\r", p[ws])) ws++;
    if (ws == n) return emit(r, p, 0);
    kf_err jerr;
    json_doc *d = json_parse(p, n, "", &jerr);
    if (!d)
        return kf_err_set(r->err, "%s:%lld: invalid JSON (%s)", s->name, (long long)line_no,
                          jerr.msg);
    const json *root = json_root(d), *t = json_get(root, r->in->text_field);
    int rc;
    if (!t || t->type != JSON_STRING)
        rc = kf_err_set(r->err, "%s:%lld: %s field '%s'", s->name, (long long)line_no,
                        t ? "non-string" : "no", r->in->text_field);
    else rc = emit(r, t->str.s, t->str.len);
    json_free(d);
    return rc;
}

static int emit_line(rd *r, const stream *s, int64_t line_no, const char *p, size_t n) {
    if (n && p[n - 1] == '\r') n--; /* CRLF files */
    if (r->in->format == FMT_JSONL) return emit_json(r, s, line_no, p, n);
    return emit(r, p, n);
}

static void grow(rd *r, size_t need) {
    if (need <= r->cap) return;
    r->cap = need > 2 * r->cap ? need : 2 * r->cap;
    r->buf = kf_realloc(r->buf, r->cap);
}

/* Reads a whole stream and splits it into documents by the input's format. */
static int consume(rd *r, stream *s) {
    size_t have = 0, start = 0, scan = 0;
    int64_t line_no = 0;
    grow(r, CHUNK);
    for (;;) {
        if (r->in->format != FMT_TEXT && start > 0 && have - start < r->cap / 2) {
            memmove(r->buf, r->buf + start, have - start);
            have -= start;
            scan -= start;
            start = 0;
        }
        if (r->cap - have < CHUNK / 2) grow(r, r->cap * 2);
        ssize_t k = s->read(s, r->buf + have, r->cap - have, r->err);
        if (k < 0) return -1;
        if (!r->top) r->file_pos += k;
        report(r);
        if (k == 0) break;
        have += (size_t)k;
        if (r->in->format == FMT_TEXT) continue;
        char *nl;
        while ((nl = memchr(r->buf + scan, '\n', have - scan)) != NULL) {
            size_t end = (size_t)(nl - r->buf);
            if (emit_line(r, s, ++line_no, r->buf + start, end - start)) return -1;
            start = scan = end + 1;
        }
        scan = have;
    }
    if (r->in->format == FMT_TEXT) return emit(r, r->buf, have);
    if (have > start) return emit_line(r, s, ++line_no, r->buf + start, have - start);
    return 0;
}

static int read_plain(rd *r, const char *path) {
    stream s = {fd_read, open(path, O_RDONLY), NULL, path};
    if (s.fd < 0) return kf_err_set(r->err, "%s: %s", path, strerror(errno));
    r->file_pos = 0;
    int rc = consume(r, &s);
    struct stat st;
    if (fstat(s.fd, &st) == 0 && !r->top) r->disk_base += st.st_size;
    close(s.fd);
    return rc;
}

/* Nested archives read their bytes from the parent's current member. */
typedef struct nested {
    struct archive *parent;
    char buf[1 << 16];
} nested;

static la_ssize_t nested_read(struct archive *a, void *ud, const void **out) {
    nested *n = ud;
    *out = n->buf;
    la_ssize_t k = archive_read_data(n->parent, n->buf, sizeof n->buf);
    if (k < 0) archive_set_error(a, -1, "%s", archive_error_string(n->parent));
    return k;
}

static struct archive *archive_new(void) {
    struct archive *a = archive_read_new();
    KF_CHECK(a, "libarchive: out of memory");
    archive_read_support_filter_all(a);
    archive_read_support_format_all(a);
    archive_read_support_format_raw(a); /* a bare .xz/.gz of text: one file */
    return a;
}

static int read_archive(rd *r, struct archive *a, const char *name);

/* Hands the current member (size bytes, a nested archive) whole to
 * sink->member. */
static int hand_member(rd *r, struct archive *a, const char *name, int64_t size) {
    char *data = kf_malloc(size ? (size_t)size : 1);
    for (size_t have = 0; have < (size_t)size;) {
        la_ssize_t k = archive_read_data(a, data + have, (size_t)size - have);
        if (k <= 0) {
            free(data);
            return kf_err_set(r->err, "%s: truncated or corrupt archive member: %s", name,
                              k ? archive_error_string(a) : "ends early");
        }
        have += (size_t)k;
    }
    report(r);
    return r->sink->member(r->sink->ctx, r->in, name, data, (size_t)size, r->err);
}

static int read_member_archive(rd *r, struct archive *parent, const char *name) {
    struct archive *a = archive_new();
    nested *n = kf_malloc(sizeof *n);
    n->parent = parent;
    int rc;
    if (archive_read_open(a, n, NULL, nested_read, NULL) != ARCHIVE_OK)
        rc = kf_err_set(r->err, "%s: cannot open archive (truncated or corrupt?): %s", name,
                        archive_error_string(a));
    else rc = read_archive(r, a, name);
    archive_read_free(a);
    free(n);
    return rc;
}

/* Reads every member of an open archive; name is its path for messages. */
static int read_archive(rd *r, struct archive *a, const char *name) {
    struct archive_entry *e;
    for (;;) {
        int rc = archive_read_next_header(a, &e);
        if (rc == ARCHIVE_EOF) return 0;
        if (rc < ARCHIVE_WARN)
            return kf_err_set(r->err, "%s: truncated or corrupt archive: %s", name,
                              archive_error_string(a));
        if (archive_entry_filetype(e) != AE_IFREG) continue;
        const char *member = archive_entry_pathname(e);
        size_t n = strlen(name) + strlen(member ? member : "") + 2;
        char *full = kf_malloc(n);
        snprintf(full, n, "%s/%s", name, member ? member : "");
        int raw = archive_format(a) == ARCHIVE_FORMAT_RAW;
        if (raw || (member && !build_is_archive_name(member) && ends_with(member, r->in->suffix))) {
            stream s = {member_read, -1, a, raw ? name : full};
            rc = consume(r, &s);
        } else if (member && build_is_archive_name(member)) {
            int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
            rc = r->sink->member && size >= 0 && size <= DOCS_MEMBER_MAX
                     ? hand_member(r, a, full, size)
                     : read_member_archive(r, a, full);
        } else {
            rc = 0; /* not selected by suffix */
        }
        free(full);
        if (rc) return -1;
    }
}

static int read_archive_file(rd *r, const char *path) {
    struct archive *a = archive_new();
    int rc;
    struct stat st;
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        rc = kf_err_set(r->err, "%s: cannot open archive (truncated or corrupt?): %s", path,
                        archive_error_string(a));
    } else {
        r->top = a;
        rc = read_archive(r, a, path);
        r->top = NULL;
    }
    archive_read_free(a);
    if (stat(path, &st) == 0) r->disk_base += st.st_size;
    return rc;
}

int docs_read_member(const build_input *in, const char *name, const void *data, size_t size,
                     const doc_sink *sink, kf_err *err) {
    doc_sink own = *sink;
    own.member = NULL; /* deeper levels are read in line */
    own.progress = NULL;
    rd r = {.sink = &own, .in = in, .err = err};
    struct archive *a = archive_new();
    int rc;
    if (archive_read_open_memory(a, data, size) != ARCHIVE_OK)
        rc = kf_err_set(err, "%s: cannot open archive (truncated or corrupt?): %s", name,
                        archive_error_string(a));
    else rc = read_archive(&r, a, name);
    archive_read_free(a);
    free(r.buf);
    return rc;
}

static int name_cmp(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int read_path(rd *r, const char *path, bool top);

static int read_dir(rd *r, const char *dir) {
    struct dirent **list;
    int n = scandir(dir, &list, NULL, name_cmp);
    if (n < 0) return kf_err_set(r->err, "%s: %s", dir, strerror(errno));
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *d = list[i]->d_name;
        if (!rc && strcmp(d, ".") && strcmp(d, "..")) {
            size_t len = strlen(dir) + strlen(d) + 2;
            char *p = kf_malloc(len);
            snprintf(p, len, "%s/%s", dir, d);
            rc = read_path(r, p, false);
            free(p);
        }
        free(list[i]);
    }
    free(list);
    return rc;
}

static int read_path(rd *r, const char *path, bool top) {
    struct stat st;
    if (stat(path, &st) != 0) return kf_err_set(r->err, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return read_dir(r, path);
    if (!S_ISREG(st.st_mode)) return 0;
    if (build_is_archive_name(path)) return read_archive_file(r, path);
    if (!top && !ends_with(path, r->in->suffix)) return 0;
    return read_plain(r, path);
}

int docs_read(const build_inputs *in, const doc_sink *sink, kf_err *err) {
    rd r = {.sink = sink, .err = err};
    int rc = 0;
    for (int i = 0; !rc && i < in->n; i++) {
        r.in = &in->v[i];
        rc = read_path(&r, in->v[i].path, true);
    }
    free(r.buf);
    return rc;
}

static int64_t tree_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) ? st.st_size : 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    int64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        char *p = kf_malloc(len);
        snprintf(p, len, "%s/%s", path, e->d_name);
        total += tree_bytes(p);
        free(p);
    }
    closedir(d);
    return total;
}

int64_t docs_input_bytes(const build_inputs *in) {
    int64_t total = 0;
    for (int i = 0; i < in->n; i++) total += tree_bytes(in->v[i].path);
    return total;
}
