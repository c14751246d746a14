/* fsutil: atomic writes (content, replacement, no temp files left, a writer
 * killed mid-write leaves the old file), read_file, mkdir_p, rm_rf (links not
 * followed), rename_atomic, dirname. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "tests/test.h"

/* Entries in dir, hidden temporaries included. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static int file_is(const char *path, const char *want) {
    char *b;
    size_t n;
    kf_err err;
    if (fs_read_file(path, &b, &n, &err)) return 0;
    int ok = n == strlen(want) && !memcmp(b, want, n) && b[n] == 0;
    free(b);
    return ok;
}

int main(void) {
    char root[] = "/tmp/kf_test_fsutil_XXXXXX";
    T_REQUIRE(mkdtemp(root) != NULL, "mkdtemp");
    char p[512], q[512], dir[512];
    kf_err err = {{0}};

    /* dirname */
    struct {
        const char *in, *out;
    } dn[] = {{"a/b/c", "a/b"}, {"c", "."},      {"/c", "/"},
              {"a/b/", "a"},    {"/a//b", "/a"}, {"/", "/"}};
    for (size_t i = 0; i < sizeof dn / sizeof dn[0]; i++) {
        fs_dirname(dn[i].in, dir, sizeof dir);
        T_CHECK(!strcmp(dir, dn[i].out), "dirname(%s) = %s, want %s", dn[i].in, dir, dn[i].out);
    }

    /* mkdir_p: nested, idempotent, refuses a file in the way. */
    snprintf(p, sizeof p, "%s/x/y/z", root);
    T_EQ_INT(fs_mkdir_p(p, &err), 0, "mkdir_p: %s", err.msg);
    T_CHECK(fs_is_dir(p), "mkdir_p: %s", err.msg);
    T_EQ_INT(fs_mkdir_p(p, &err), 0, "mkdir_p existing: %s", err.msg);

    /* Atomic write, replace, read back with the terminating NUL. */
    snprintf(p, sizeof p, "%s/x/f.txt", root);
    T_EQ_INT(fs_write_atomic(p, "hello", 5, &err), 0, "write_atomic: %s", err.msg);
    T_CHECK(file_is(p, "hello"), "write_atomic: %s", err.msg);
    T_EQ_INT(fs_write_atomic(p, "bye", 3, &err), 0, "replace: %s", err.msg);
    T_CHECK(file_is(p, "bye"), "replace: %s", err.msg);
    T_EQ_INT(fs_write_atomic(p, "", 0, &err), 0, "empty: %s", err.msg);
    T_CHECK(file_is(p, ""), "empty: %s", err.msg);
    snprintf(dir, sizeof dir, "%s/x", root);
    T_EQ_INT(count_entries(dir), 2, "temporary files left in %s (%d entries)", dir,
             count_entries(dir));

    snprintf(q, sizeof q, "%s/x/f.txt/sub", root);
    T_EQ_INT(fs_mkdir_p(q, &err), -1, "mkdir_p through a file: %s", err.msg);
    T_CHECK(strstr(err.msg, "not a directory"), "mkdir_p through a file: %s", err.msg);

    /* A bigger file, streamed. */
    snprintf(q, sizeof q, "%s/x/big.bin", root);
    fs_atomic a;
    T_EQ_INT(fs_atomic_begin(&a, q, &err), 0, "begin: %s", err.msg);
    char block[4096];
    for (int i = 0; i < 4096; i++) block[i] = (char)i;
    for (int i = 0; i < 100; i++) fs_atomic_write(&a, block, sizeof block, &err);
    T_CHECK(!fs_exists(q), "target visible before commit");
    T_EQ_INT(fs_atomic_commit(&a, &err), 0, "commit: %s", err.msg);
    char *buf;
    size_t len;
    T_EQ_INT(fs_read_file(q, &buf, &len, &err), 0, "streamed content: %zu bytes", len);
    T_EQ_INT(len, 409600, "streamed content: %zu bytes", len);
    T_CHECK(!memcmp(buf + 4096 * 7, block, 4096), "streamed content: %zu bytes", len);
    free(buf);

    /* Abort keeps the old target and removes the temporary. */
    T_EQ_INT(fs_atomic_begin(&a, p, &err), 0, "begin: %s", err.msg);
    fs_atomic_write(&a, "partial", 7, &err);
    fs_atomic_abort(&a);
    T_CHECK(file_is(p, ""), "abort changed the directory");
    T_EQ_INT(count_entries(dir), 3, "abort changed the directory");

    /* A writer killed before commit leaves the old file intact. */
    fs_write_atomic(p, "old", 3, &err);
    pid_t pid = fork();
    if (pid == 0) {
        fs_atomic b;
        if (fs_atomic_begin(&b, p, NULL)) _exit(2);
        fs_atomic_write(&b, "new-but-torn", 12, NULL);
        fflush(b.f);
        kill(getpid(), SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    T_CHECK(WIFSIGNALED(st), "killed writer damaged the target");
    T_CHECK(file_is(p, "old"), "killed writer damaged the target");

    /* Errors name the path. */
    snprintf(q, sizeof q, "%s/nope/f", root);
    T_EQ_INT(fs_write_atomic(q, "x", 1, &err), -1, "write into missing dir: %s", err.msg);
    T_CHECK(strstr(err.msg, q), "write into missing dir: %s", err.msg);
    T_EQ_INT(fs_read_file(q, &buf, &len, &err), -1, "read missing: %s", err.msg);
    T_CHECK(strstr(err.msg, q), "read missing: %s", err.msg);
    T_CHECK(strstr(err.msg, "No such file"), "read missing: %s", err.msg);
    T_EQ_INT(fs_read_file(root, &buf, &len, &err), -1, "read dir: %s", err.msg);
    T_CHECK(strstr(err.msg, "directory"), "read dir: %s", err.msg);
    struct stat sb;
    T_EQ_INT(fs_open_stat(q, &sb, &err), -1, "open_stat missing: %s", err.msg);
    T_CHECK(strstr(err.msg, q), "open_stat missing: %s", err.msg);
    int fd = fs_open_stat(p, &sb, &err);
    T_CHECK(fd >= 0, "open_stat %s: %s", p, err.msg);
    T_EQ_INT(sb.st_size, 3, "open_stat size of \"old\"");
    if (fd >= 0) close(fd);

    /* rename_atomic of a directory (checkpoint commit), then replacing a link. */
    snprintf(p, sizeof p, "%s/x/y", root);
    snprintf(q, sizeof q, "%s/x/step-1", root);
    T_EQ_INT(fs_rename_atomic(p, q, &err), 0, "rename dir: %s", err.msg);
    T_CHECK(fs_is_dir(q), "rename dir: %s", err.msg);
    T_CHECK(!fs_exists(p), "rename dir: %s", err.msg);
    T_EQ_INT(fs_rename_atomic(p, q, &err), -1, "rename missing: %s", err.msg);
    T_CHECK(strstr(err.msg, p), "rename missing: %s", err.msg);

    /* rm_rf removes a tree but never follows a link out of it. */
    char outside[512], link[512];
    snprintf(outside, sizeof outside, "%s/keep", root);
    fs_mkdir_p(outside, &err);
    snprintf(p, sizeof p, "%s/keep/precious", root);
    fs_write_atomic(p, "1", 1, &err);
    snprintf(link, sizeof link, "%s/x/step-1/z/link", root);
    T_EQ_INT(symlink(outside, link), 0, "symlink");
    snprintf(q, sizeof q, "%s/x", root);
    T_EQ_INT(fs_rm_rf(q, &err), 0, "rm_rf: %s", err.msg);
    T_CHECK(!fs_exists(q), "rm_rf: %s", err.msg);
    T_CHECK(file_is(p, "1"), "rm_rf followed a symbolic link");
    T_EQ_INT(fs_rm_rf(q, &err), 0, "rm_rf of a missing path: %s", err.msg);
    T_EQ_INT(fs_fsync_dir(root, &err), 0, "fsync: %s", err.msg);
    T_EQ_INT(fs_fsync_path(p, &err), 0, "fsync: %s", err.msg);
    T_EQ_INT(fs_rm_rf(root, &err), 0, "cleanup: %s", err.msg);
    T_CHECK(!fs_exists(root), "cleanup: %s", err.msg);

    /* A failed stdout write (a full disk under `> FILE`) names the file. */
    T_EQ_INT(fs_flush_stdout(&err), 0, "flush to the terminal or pipe: %s", err.msg);
    fflush(stdout);
    int saved = dup(1), full = open("/dev/full", O_WRONLY);
    T_CHECK(saved >= 0, "dup stdout");
    T_REQUIRE(full >= 0, "open /dev/full");
    T_EQ_INT(dup2(full, 1), 1, "redirect stdout to /dev/full");
    close(full);
    printf("lost\n");
    int rc = fs_flush_stdout(&err);
    clearerr(stdout);
    dup2(saved, 1);
    close(saved);
    T_EQ_INT(rc, -1, "flush to /dev/full");
    T_EQ_STR(err.msg, "stdout (/dev/full): write: No space left on device", "flush to /dev/full");
    return T_DONE();
}
