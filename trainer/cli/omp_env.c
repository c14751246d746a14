/* trainer/cli/omp_env.c — re-exec with an OMP_WAIT_POLICY (see omp_env.h). */
#include "trainer/cli/omp_env.h"

#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

static void omp_env_policy(const char *policy) {
    if (getenv("OMP_WAIT_POLICY")) return;
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return;
    size_t cap = 1 << 16, n;
    char *buf = kf_malloc(cap);
    n = fread(buf, 1, cap - 1, f);
    fclose(f);
    if (n == 0 || n >= cap - 1) return free(buf);
    buf[n] = 0;
    int argc = 0;
    for (size_t i = 0; i < n; i++) argc += buf[i] == 0;
    char **argv = kf_calloc((size_t)argc + 1, sizeof *argv);
    for (size_t i = 0, a = 0; i < n && a < (size_t)argc; a++) {
        argv[a] = buf + i;
        i += strlen(buf + i) + 1;
    }
    setenv("OMP_WAIT_POLICY", policy, 1);
    execv("/proc/self/exe", argv);
    free(argv);
    free(buf); /* exec failed: carry on with the default policy */
}

void omp_env_passive(void) { omp_env_policy("passive"); }

void omp_env_decode(bool spin_ok) {
    if (getenv("OMP_WAIT_POLICY")) return; /* before omp_get_max_threads starts libgomp */
    const char *gemm = getenv("KF_CPU_GEMM");
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    bool spin = spin_ok && omp_get_max_threads() <= cpus && !(gemm && !strcmp(gemm, "openblas"));
    if (!spin) omp_env_policy("passive"); /* else libgomp's default: a bounded spin */
}
