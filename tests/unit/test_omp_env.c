/* tests/unit/test_omp_env.c — the wait policy a command re-executes with
 * (trainer/cli/omp_env.h).
 *
 * The program runs itself as a child (`--child decode|passive SPIN_OK`),
 * which calls omp_env_decode / omp_env_passive and prints the
 * OMP_WAIT_POLICY it ends up with after the re-exec. Every combination of
 * the inputs (thread count below, at and above the CPUs it may use, the
 * child pinned to one CPU or not, KF_CPU_GEMM, a policy the user set,
 * spin_ok) is run, and the policy is checked against the rule written out
 * here on its own ("unset": libgomp's default, no re-exec).
 */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc.h"
#include "tests/test.h"
#include "trainer/cli/omp_env.h"

static int child(const char *fn, const char *spin_ok) {
    if (!strcmp(fn, "decode")) omp_env_decode(!strcmp(spin_ok, "1"));
    else omp_env_passive();
    const char *p = getenv("OMP_WAIT_POLICY");
    printf("%s\n", p ? p : "unset");
    return 0;
}

typedef struct run_case {
    bool decode; /* omp_env_decode, else omp_env_passive */
    bool spin_ok;
    int threads;      /* OMP_NUM_THREADS */
    bool pinned;      /* the child may run on one CPU only */
    const char *gemm; /* KF_CPU_GEMM, or NULL */
    const char *user; /* OMP_WAIT_POLICY set beforehand, or NULL */
} run_case;

/* The policy the child reports, "" when it could not be run. The child
 * inherits this process's environment and CPUs, set here for it. */
static void run_child(const run_case *c, const cpu_set_t *all, char *out, size_t cap) {
    char threads[16];
    snprintf(threads, sizeof threads, "%d", c->threads);
    setenv("OMP_NUM_THREADS", threads, 1);
    if (c->gemm) setenv("KF_CPU_GEMM", c->gemm, 1);
    else unsetenv("KF_CPU_GEMM");
    if (c->user) setenv("OMP_WAIT_POLICY", c->user, 1);
    else unsetenv("OMP_WAIT_POLICY");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
    out[0] = 0;
    if (c->pinned && sched_setaffinity(0, sizeof one, &one)) return;
    char *argv[] = {(char *)proc_self_exe(), "--child", c->decode ? "decode" : "passive",
                    c->spin_ok ? "1" : "0", NULL};
    char *got = NULL;
    kf_err err = {{0}};
    int rc = proc_capture(argv, &got, false, &err);
    if (c->pinned) sched_setaffinity(0, sizeof *all, all);
    if (rc == 0) snprintf(out, cap, "%.*s", (int)strcspn(got, "\n"), got);
    free(got);
}

/* The rule of omp_env.h, written out again. */
static const char *want_policy(const run_case *c, int cpus) {
    if (c->user) return c->user;
    if (!c->decode) return "passive";
    int usable = c->pinned ? 1 : cpus;
    bool openblas = c->gemm && !strcmp(c->gemm, "openblas");
    return c->spin_ok && c->threads <= usable && !openblas ? "unset" : "passive";
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--child")) return child(argv[2], argv[3]);
    cpu_set_t set;
    T_REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity");
    int cpus = CPU_COUNT(&set);
    const int threads[] = {1, cpus, cpus + 1};
    const char *gemms[] = {NULL, "openblas", "fixed"}, *users[] = {NULL, "active", "passive"};
    int cases = 0;
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 2; s++)
            for (int t = 0; t < 3; t++)
                for (int p = 0; p < 2; p++)
                    for (int g = 0; g < 3; g++)
                        for (int u = 0; u < 3; u++) {
                            run_case c = {d, s, threads[t], p, gemms[g], users[u]};
                            char got[64];
                            run_child(&c, &set, got, sizeof got);
                            T_EQ_STR(got, want_policy(&c, cpus),
                                     "%s, spin_ok %d, %d threads on %d CPUs, KF_CPU_GEMM %s, "
                                     "OMP_WAIT_POLICY %s before",
                                     c.decode ? "omp_env_decode" : "omp_env_passive", c.spin_ok,
                                     c.threads, c.pinned ? 1 : cpus, c.gemm ? c.gemm : "unset",
                                     c.user ? c.user : "unset");
                            cases++;
                        }
    printf("  %d combinations, %d CPUs usable\n", cases, cpus);
    return T_DONE();
}
