/* common/fsutil.c — atomic, durable file operations (POSIX). */
#include "common/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fs_dirname(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "a/b/" names b */
    while (n > 0 && path[n - 1] != '/') n--;
    while (n > 1 && path[n - 1] == '/') n--;
    if (n == 0) snprintf(out, cap, ".");
    else snprintf(out, cap, "%.*s", (int)n, path);
}

void fs_path_join(char *out, size_t cap, const char *a, const char *b) {
    int n = snprintf(out, cap, "%s/%s", a, b);
    KF_CHECK(n > 0 && (size_t)n < cap, "path too long: %s/%s", a, b);
}

int fs_fsync_path(const char *path, kf_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kf_err_set(err, "%s: cannot open to fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* Some filesystems refuse fsync on directories; the data is then as safe as they allow. */
    if (rc && e != EINVAL && e != EBADF) return kf_err_set(err, "%s: fsync: %s", path, strerror(e));
    return 0;
}

int fs_fsync_dir(const char *dir, kf_err *err) { return fs_fsync_path(dir, err); }

static int fsync_parent(const char *path, kf_err *err) {
    char dir[4096];
    fs_dirname(path, dir, sizeof dir);
    return fs_fsync_dir(dir, err);
}

int fs_atomic_begin(fs_atomic *a, const char *path, kf_err *err) {
    static atomic_uint seq;
    char dir[4096];
    fs_dirname(path, dir, sizeof dir);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t cap = strlen(dir) + strlen(base) + 64;
    a->tmp = kf_malloc(cap);
    snprintf(a->tmp, cap, "%s/.%s.tmp.%ld.%u", dir, base, (long)getpid(),
             atomic_fetch_add(&seq, 1));
    a->path = kf_strdup(path);
    int fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    a->f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!a->f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(a->tmp);
        }
        kf_err_set(err, "%s: cannot create temporary file %s: %s", path, a->tmp, strerror(e));
        free(a->tmp);
        free(a->path);
        a->tmp = a->path = NULL;
        return -1;
    }
    return 0;
}

int fs_atomic_write(fs_atomic *a, const void *p, size_t n, kf_err *err) {
    if (n && fwrite(p, 1, n, a->f) != n)
        return kf_err_set(err, "%s: write: %s", a->tmp, strerror(errno));
    return 0;
}

static void release(fs_atomic *a) {
    free(a->tmp);
    free(a->path);
    a->tmp = a->path = NULL;
    a->f = NULL;
}

void fs_atomic_abort(fs_atomic *a) {
    if (a->f) fclose(a->f);
    if (a->tmp) unlink(a->tmp);
    release(a);
}

int fs_atomic_commit(fs_atomic *a, kf_err *err) {
    const char *what = NULL;
    int e = 0;
    if (fflush(a->f)) what = "write";
    else if (fsync(fileno(a->f))) what = "fsync";
    if (what) e = errno;
    if (fclose(a->f) && !what) {
        e = errno;
        what = "close";
    }
    int rc = what ? -1 : 0;
    a->f = NULL;
    if (!rc && rename(a->tmp, a->path)) {
        rc = -1;
        e = errno;
        what = "rename";
    }
    if (rc) {
        kf_err_set(err, "%s: %s: %s", a->path, what, strerror(e));
        unlink(a->tmp);
        release(a);
        return -1;
    }
    rc = fsync_parent(a->path, err);
    release(a);
    return rc;
}

int fs_write_atomic(const char *path, const void *data, size_t len, kf_err *err) {
    fs_atomic a;
    if (fs_atomic_begin(&a, path, err)) return -1;
    if (fs_atomic_write(&a, data, len, err)) {
        fs_atomic_abort(&a);
        return -1;
    }
    return fs_atomic_commit(&a, err);
}

int fs_open_stat(const char *path, struct stat *st, kf_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kf_err_set(err, "%s: %s", path, strerror(errno));
    if (fstat(fd, st)) {
        int e = errno;
        close(fd);
        return kf_err_set(err, "%s: %s", path, strerror(e));
    }
    return fd;
}

int fs_read_file(const char *path, char **buf, size_t *len, kf_err *err) {
    *buf = NULL;
    *len = 0;
    struct stat st;
    int fd = fs_open_stat(path, &st, err);
    if (fd < 0) return -1;
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return kf_err_set(err, "%s: is a directory", path);
    }
    /* st_size is only a hint (pipes, /proc): read until EOF, growing as needed. */
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    char *p = kf_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) p = kf_realloc(p, cap *= 2);
        ssize_t r = read(fd, p + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(p);
            return kf_err_set(err, "%s: read: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    p[n] = 0;
    *buf = p;
    *len = n;
    return 0;
}

bool fs_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

bool fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int fs_mkdir_p(const char *dir, kf_err *err) {
    size_t n = strlen(dir);
    char *p = kf_malloc(n + 1);
    memcpy(p, dir, n + 1);
    int rc = 0;
    /* Create each prefix ending before a '/', then the whole path. */
    for (size_t i = 1; i <= n && !rc; i++) {
        if (i < n && p[i] != '/') continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) && errno != EEXIST)
            rc = kf_err_set(err, "%s: mkdir: %s", p, strerror(errno));
        else if (!fs_is_dir(p)) rc = kf_err_set(err, "%s: exists and is not a directory", p);
        p[i] = c;
    }
    free(p);
    return rc;
}

int fs_rm_rf(const char *path, kf_err *err) {
    struct stat st;
    if (lstat(path, &st))
        return errno == ENOENT ? 0 : kf_err_set(err, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return kf_err_set(err, "%s: opendir: %s", path, strerror(errno));
        struct dirent *e;
        int rc = 0;
        while (!rc && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            size_t cap = strlen(path) + strlen(e->d_name) + 2;
            char *child = kf_malloc(cap);
            snprintf(child, cap, "%s/%s", path, e->d_name);
            rc = fs_rm_rf(child, err);
            free(child);
        }
        closedir(d);
        if (rc) return rc;
        if (rmdir(path)) return kf_err_set(err, "%s: rmdir: %s", path, strerror(errno));
        return 0;
    }
    if (unlink(path) && errno != ENOENT)
        return kf_err_set(err, "%s: unlink: %s", path, strerror(errno));
    return 0;
}

int fs_rename_atomic(const char *from, const char *to, kf_err *err) {
    if (rename(from, to)) return kf_err_set(err, "rename %s -> %s: %s", from, to, strerror(errno));
    char d1[4096], d2[4096];
    fs_dirname(to, d1, sizeof d1);
    fs_dirname(from, d2, sizeof d2);
    if (fs_fsync_dir(d1, err)) return -1;
    return strcmp(d1, d2) ? fs_fsync_dir(d2, err) : 0;
}

int fs_flush_stdout(kf_err *err) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    int e = errno ? errno : EIO; /* ferror alone: an earlier write failed */
    char target[PATH_MAX];
    ssize_t n = readlink("/proc/self/fd/1", target, sizeof target - 1);
    if (n > 0) target[n] = 0;
    return kf_err_set(err, "%s%s%s: write: %s", n > 0 ? "stdout (" : "stdout", n > 0 ? target : "",
                      n > 0 ? ")" : "", strerror(e));
}
