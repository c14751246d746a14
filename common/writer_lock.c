/* common/writer_lock.c — exclusive writer locks held for a process's life
 * (common/writer_lock.h). */
#include "common/writer_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* F_OFD_SETLK where the kernel has it (a lock of this open file, not of the
 * process: two opens in one process conflict), F_SETLK before Linux 3.15. */
static int lock_cmd(int fd, int ofd_cmd, int posix_cmd, struct flock *fl) {
    int r = fcntl(fd, ofd_cmd, fl);
    if (r < 0 && errno == EINVAL) {
        fl->l_pid = 0;
        r = fcntl(fd, posix_cmd, fl);
    }
    return r;
}

static struct flock whole_file(short type) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET; /* l_start = l_len = 0: the whole file */
    return fl;
}

static void copy_field(char *dst, size_t cap, const char *v) {
    size_t n = strcspn(v, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

/* Parses the holder text; a damaged or empty file leaves fields empty. */
static void parse_holder(const char *text, writer_holder *h) {
    memset(h, 0, sizeof *h);
    for (const char *line = text; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (!strncmp(line, "host: ", 6)) copy_field(h->host, sizeof h->host, line + 6);
        else if (!strncmp(line, "pid: ", 5)) h->pid = strtoll(line + 5, NULL, 10);
        else if (!strncmp(line, "slurm_job: ", 11))
            copy_field(h->slurm_job, sizeof h->slurm_job, line + 11);
        else if (!strncmp(line, "what: ", 6)) copy_field(h->what, sizeof h->what, line + 6);
        else if (!strncmp(line, "since: ", 7)) h->since = strtoll(line + 7, NULL, 10);
    }
}

/* The holder writes its text just after taking the lock: a reader that finds
 * the file still empty (or half written) looks again for up to 0.5 s. */
static void read_holder(int fd, writer_holder *h) {
    for (int tries = 0; tries < 50; tries++) {
        char buf[1024];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        parse_holder(buf, h);
        if (h->pid > 0 && h->since > 0) return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void writer_holder_text(const writer_holder *h, char *out, size_t cap) {
    char when[32] = "an unknown time";
    time_t t = (time_t)h->since;
    struct tm tm;
    if (h->since > 0 && localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    char job[64] = "";
    if (*h->slurm_job) snprintf(job, sizeof job, ", Slurm job %s", h->slurm_job);
    snprintf(out, cap, "%s (host %s, pid %lld%s) since %s", *h->what ? h->what : "another writer",
             *h->host ? h->host : "?", h->pid, job, when);
}

static int record_holder(int fd, const char *what, kf_err *err) {
    char host[128] = "?", text[512];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    const char *job = getenv("SLURM_JOB_ID");
    int n =
        snprintf(text, sizeof text, "host: %s\npid: %lld\nslurm_job: %s\nwhat: %s\nsince: %lld\n",
                 host, (long long)getpid(), job ? job : "", what, (long long)time(NULL));
    if (n < 0 || (size_t)n >= sizeof text) n = (int)sizeof text - 1;
    if (ftruncate(fd, 0) || pwrite(fd, text, (size_t)n, 0) != n)
        return kf_err_set(err, "lock file: cannot record the holder: %s", strerror(errno));
    return 0;
}

int writer_lock_take(const char *path, const char *what, writer_lock *l, kf_err *err) {
    l->fd = -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return kf_err_set(err, "cannot open lock file %s: %s", path, strerror(errno));
    const char *w = getenv("KF_LOCK_WAIT_S"), *job = getenv("SLURM_JOB_ID");
    double wait_s = w && *w ? atof(w) : 150;
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    time_t start = time(NULL);
    for (;;) {
        struct flock fl = whole_file(F_WRLCK);
        if (lock_cmd(fd, F_OFD_SETLK, F_SETLK, &fl) == 0) break;
        int e = errno;
        if (e != EAGAIN && e != EACCES) {
            close(fd);
            return kf_err_set(err,
                              "cannot lock %s: %s (the file system must support fcntl locks: "
                              "NFS v4, or Lustre mounted with -o flock)",
                              path, strerror(e));
        }
        writer_holder h;
        read_holder(fd, &h);
        if (job && *job && !strcmp(job, h.slurm_job) && strcmp(host, h.host) &&
            difftime(time(NULL), start) < wait_s) {
            sleep(1); /* our own job's earlier start, on a node that lost it: wait it out */
            continue;
        }
        close(fd);
        char who[400];
        writer_holder_text(&h, who, sizeof who);
        return kf_err_set(err,
                          "%s is held by %s: one writer at a time (wait for it to end, or stop "
                          "it; the lock goes when its process exits)",
                          path, who);
    }
    if (record_holder(fd, what, err)) {
        close(fd);
        return -1;
    }
    l->fd = fd;
    return 0;
}

void writer_lock_release(writer_lock *l) {
    if (l->fd < 0) return;
    close(l->fd); /* closing the descriptor drops the lock */
    l->fd = -1;
}

int writer_lock_probe(const char *path, writer_holder *h) {
    memset(h, 0, sizeof *h);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        snprintf(h->what, sizeof h->what, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct flock fl = whole_file(F_WRLCK);
    int rc;
    if (lock_cmd(fd, F_OFD_GETLK, F_GETLK, &fl)) {
        snprintf(h->what, sizeof h->what, "cannot probe %s: %s", path, strerror(errno));
        rc = -1;
    } else if (fl.l_type == F_UNLCK) {
        rc = 0;
    } else {
        read_holder(fd, h);
        rc = 1;
    }
    close(fd);
    return rc;
}
