/* common/proc.c — fork/exec/wait with signal forwarding and output capture. */
#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid, pending_sig;
static const int fwd_sigs[3] = {SIGINT, SIGTERM, SIGUSR1}; /* what proc_run forwards */

/* A signal that comes before the child exists is kept and sent once it does.
 * SIGINT goes on as SIGTERM: a Ctrl-C at the terminal also reaches the child
 * itself (same process group), and a second SIGINT there means "abort". */
static void forward(int sig) {
    if (sig == SIGINT) sig = SIGTERM;
    if (child_pid > 0) kill((pid_t)child_pid, sig);
    else pending_sig = sig;
}

static int status_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 255;
}

/* Forks argv with stdout going to out_fd (-1: inherited) and stderr to
 * /dev/null when quiet. With mask, the child resets the forwarded signals
 * to their defaults (it must not run the parent's handler) and then takes
 * mask as its signal mask. A child that cannot exec exits 127 after saying
 * so. */
static pid_t spawn(char *const argv[], int out_fd, bool quiet, const sigset_t *mask, kf_err *err) {
    fflush(stdout), fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return kf_err_set(err, "fork: %s", strerror(errno)), -1;
    if (pid == 0) {
        if (mask) {
            for (int i = 0; i < 3; i++) signal(fwd_sigs[i], SIG_DFL);
            sigprocmask(SIG_SETMASK, mask, NULL);
        }
        /* the child outlives no killed parent: a trainer gets SIGTERM (checkpoint,
         * exit 75) rather than train on unwatched, holding its stage's lock */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(128 + SIGTERM);
        if (out_fd >= 0) dup2(out_fd, 1);
        if (quiet) {
            int dn = open("/dev/null", 1);
            if (dn >= 0) dup2(dn, 2);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "kf: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

static int wait_for(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 255;
    return status_code(st);
}

int proc_run(char *const argv[], unsigned flags, kf_err *err) {
    struct sigaction sa = {0}, old[3];
    sigset_t fwd, mask, child_mask;
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    sigemptyset(&fwd);
    pending_sig = 0;
    for (int i = 0; i < 3; i++) sigaction(fwd_sigs[i], &sa, &old[i]), sigaddset(&fwd, fwd_sigs[i]);
    /* blocked from the fork until child_pid is set: a signal in between
     * waits, and is forwarded as the mask is restored */
    sigprocmask(SIG_BLOCK, &fwd, &mask);
    child_mask = mask;
    if (flags & PROC_HOLD_SIGNALS) sigorset(&child_mask, &mask, &fwd);
    pid_t pid = spawn(argv, -1, false, &child_mask, err);
    if (pid >= 0) child_pid = pid;
    if (pid >= 0 && pending_sig) kill(pid, pending_sig);
    sigprocmask(SIG_SETMASK, &mask, NULL);
    int rc = pid < 0 ? -1 : wait_for(pid);
    for (int i = 0; i < 3; i++) sigaction(fwd_sigs[i], &old[i], NULL);
    child_pid = 0;
    return rc;
}

int proc_capture(char *const argv[], char **out, bool quiet, kf_err *err) {
    *out = NULL;
    int fds[2];
    if (pipe(fds)) return kf_err_set(err, "pipe: %s", strerror(errno));
    pid_t pid = spawn(argv, fds[1], quiet, NULL, err);
    close(fds[1]);
    if (pid < 0) return close(fds[0]), -1;
    size_t len = 0, cap = 4096;
    char *buf = kf_malloc(cap);
    for (;;) {
        if (len + 1 >= cap) buf = kf_realloc(buf, cap *= 2);
        ssize_t r = read(fds[0], buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fds[0]);
    buf[len] = 0;
    *out = buf;
    return wait_for(pid);
}

bool proc_in_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char buf[PATH_MAX];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, name);
        if (access(buf, X_OK) == 0) return true;
        p += n + (p[n] == ':');
    }
    return false;
}

const char *proc_self_exe(void) {
    static char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    KF_CHECK(n > 0, "cannot read /proc/self/exe");
    buf[n] = 0;
    /* the binary was replaced (rebuilt) while running: its path names the new one */
    static const char deleted[] = " (deleted)";
    size_t d = strlen(deleted);
    if ((size_t)n > d && !strcmp(buf + n - d, deleted)) buf[n - d] = 0;
    return buf;
}
