/* trainer/cli/omp_env.c — re-exec with OMP_WAIT_POLICY=passive (see omp_env.h). */
#include "trainer/cli/omp_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

void omp_env_passive(void) {
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
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    free(argv);
    free(buf); /* exec failed: carry on with the default policy */
}
