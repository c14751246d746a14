/* tests/unit/test_common_writer_lock.c — writer locks: a second writer is
 * refused naming the holder (another process, and another open in this one),
 * a probe sees a live holder, and kill -9 of the holder frees the lock with
 * no stale state left behind. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/writer_lock.h"
#include "tests/test.h"

int main(void) {
    char dir[] = "/tmp/kf_lock_XXXXXX", p[PATH_MAX];
    KF_CHECK(mkdtemp(dir), "mkdtemp");
    fs_path_join(p, sizeof p, dir, "lock");
    writer_holder h;
    kf_err err = {{0}};
    T_EQ_INT(writer_lock_probe(p, &h), 0, "no lock file: free");

    /* a child takes the lock and waits to be killed */
    int ready[2];
    KF_CHECK(pipe(ready) == 0, "pipe");
    setenv("SLURM_JOB_ID", "4242", 1);
    pid_t child = fork();
    KF_CHECK(child >= 0, "fork");
    if (child == 0) {
        writer_lock l;
        kf_err e = {{0}};
        char c = writer_lock_take(p, "test holder", &l, &e) ? 'n' : 'y';
        if (write(ready[1], &c, 1) != 1) _exit(2);
        for (;;) pause();
    }
    char c = 0;
    KF_CHECK(read(ready[0], &c, 1) == 1, "child never reported");
    T_EQ_INT(c, 'y', "the child took the free lock");

    T_EQ_INT(writer_lock_probe(p, &h), 1, "probe: held by the child");
    T_EQ_INT(h.pid, child, "probe: holder pid");
    T_EQ_STR(h.slurm_job, "4242", "probe: holder's Slurm job");
    T_EQ_STR(h.what, "test holder", "probe: what the holder runs");
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    T_EQ_STR(h.host, host, "probe: holder host");

    /* a second writer is refused at once, told who holds it (another Slurm
     * job: no waiting) */
    setenv("SLURM_JOB_ID", "7", 1);
    writer_lock mine;
    char want[64];
    snprintf(want, sizeof want, "pid %d, Slurm job 4242", (int)child);
    T_EQ_INT(writer_lock_take(p, "second", &mine, &err), -1, "second writer refused");
    T_CHECK(strstr(err.msg, want) && strstr(err.msg, "test holder") && strstr(err.msg, host),
            "refusal names holder, host, pid and job: %s", err.msg);
    T_EQ_INT(mine.fd, -1, "a refused take holds nothing");

    /* the same Slurm job on this host is a live second writer: refused without
     * waiting; on another host it is an earlier start of a requeued job whose
     * node lost it: waited for (KF_LOCK_WAIT_S), then refused */
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("KF_LOCK_WAIT_S", "30", 1);
    time_t t0 = time(NULL);
    T_EQ_INT(writer_lock_take(p, "again", &mine, &err), -1, "own job, this host: refused");
    T_CHECK(difftime(time(NULL), t0) < 30, "own job, this host: not waited for");
    char lost[256];
    snprintf(lost, sizeof lost,
             "host: lost-node\npid: %d\nslurm_job: 4242\nwhat: test holder\n"
             "since: %lld\n",
             (int)child, (long long)time(NULL));
    FILE *lf = fopen(p, "w"); /* the text is advice: rewriting it leaves the lock held */
    KF_CHECK(lf && fputs(lost, lf) >= 0 && fclose(lf) == 0, "rewrite %s", p);
    setenv("KF_LOCK_WAIT_S", "1", 1);
    t0 = time(NULL);
    T_EQ_INT(writer_lock_take(p, "requeued", &mine, &err), -1, "own job, lost node: refused");
    T_CHECK(difftime(time(NULL), t0) >= 1, "own job on a lost node: waited for");
    T_CHECK(strstr(err.msg, "host lost-node"), "refusal names the lost node: %s", err.msg);

    /* kill -9: the kernel drops the lock; nothing stale is left */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    T_EQ_INT(writer_lock_probe(p, &h), 0, "after kill -9: free");
    unsetenv("SLURM_JOB_ID");
    T_EQ_INT(writer_lock_take(p, "after", &mine, &err), 0, "after kill -9: taken: %s", err.msg);

    /* a second open in the same process conflicts too (open file description locks) */
    writer_lock again;
    T_EQ_INT(writer_lock_take(p, "again", &again, &err), -1, "same process, second take refused");
    snprintf(want, sizeof want, "pid %d)", (int)getpid());
    T_CHECK(strstr(err.msg, want) != NULL, "refusal names this pid: %s", err.msg);
    T_EQ_INT(writer_lock_probe(p, &h), 1, "probe sees this process's own lock");
    writer_lock_release(&mine);
    T_EQ_INT(writer_lock_probe(p, &h), 0, "released: free");
    T_EQ_INT(writer_lock_take(p, "again", &again, &err), 0, "released: taken again");
    writer_lock_release(&again);

    /* a damaged lock file is only advice: taking and probing still work */
    KF_CHECK(fs_write_atomic(p, "\x01garbage", 8, &err) == 0, "%s", err.msg);
    T_EQ_INT(writer_lock_take(p, "over garbage", &mine, &err), 0, "garbage file: taken");
    T_EQ_INT(writer_lock_probe(p, &h), 1, "garbage rewritten: held");
    T_EQ_STR(h.what, "over garbage", "holder text rewritten");
    writer_lock_release(&mine);

    fs_rm_rf(dir, &err);
    return T_DONE();
}
