/* pipeline/build_outdir.c — a build's output directory: its lock, its
 * cleanup before a build and after one (contract: build_outdir.h). */
#include "pipeline/build_outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "pipeline/manifest.h"

/* Takes OUT/.build.lock (flock: released by the kernel even on kill -9), so
 * concurrent builds of one set run one after the other (the second then
 * reuses every shard). Returns the lock's fd, or -1. */
int build_out_lock(const build_config *c, kf_err *err) {
    char path[4096];
    if (fs_mkdir_p(c->out, err)) return -1;
    snprintf(path, sizeof path, "%s/.build.lock", c->out);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return kf_err_set(err, "%s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        kf_log_info("shards %s: waiting for another build of %s", c->name, c->out);
        if (flock(fd, LOCK_EX) != 0) {
            close(fd);
            return kf_err_set(err, "%s: cannot lock: %s", path, strerror(errno));
        }
    }
    return fd;
}

/* Removes the old manifest first (so a half-rebuilt set is never readable),
 * then temp files of a killed build. */
int build_out_prepare(const build_config *c, kf_err *err) {
    char path[4096];
    static const char *const splits[2] = {"train", "valid"};
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/%s", c->out, splits[s]);
        if (fs_mkdir_p(path, err)) return -1;
    }
    snprintf(path, sizeof path, "%s/%s", c->out, MANIFEST_FILE);
    if (unlink(path) != 0 && errno != ENOENT)
        return kf_err_set(err, "%s: cannot remove: %s", path, strerror(errno));
    if (fs_fsync_dir(c->out, err)) return -1;
    const char *dirs[3] = {c->out, NULL, NULL};
    char d1[4096], d2[4096];
    snprintf(d1, sizeof d1, "%s/train", c->out);
    snprintf(d2, sizeof d2, "%s/valid", c->out);
    dirs[1] = d1;
    dirs[2] = d2;
    for (int i = 0; i < 3; i++) {
        DIR *d = opendir(dirs[i]);
        if (!d) return kf_err_set(err, "%s: %s", dirs[i], strerror(errno));
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            int stale =
                i == 0 ? !strncmp(e->d_name, "." MANIFEST_FILE ".tmp", strlen(MANIFEST_FILE) + 5)
                       : (!strncmp(e->d_name, "shard-", 6) && n > 9 &&
                          !strcmp(e->d_name + n - 9, ".lmdb.tmp"));
            if (!stale) continue;
            snprintf(path, sizeof path, "%s/%s", dirs[i], e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    return 0;
}

/* Removes shard files numbered >= n in a split directory, then fsyncs it:
 * this makes the shards' names durable before the manifest lists them. */
int build_out_remove_orphans(const build_config *c, const char *split, int64_t n, kf_err *err) {
    char dir[4096], path[4096 + 260];
    snprintf(dir, sizeof dir, "%s/%s", c->out, split);
    DIR *d = opendir(dir);
    if (!d) return kf_err_set(err, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long k;
        char tail[16];
        if (sscanf(e->d_name, "shard-%lld%15s", &k, tail) == 2 && !strcmp(tail, ".lmdb") &&
            k >= n) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
    return fs_fsync_dir(dir, err);
}
