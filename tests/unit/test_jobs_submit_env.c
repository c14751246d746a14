/* tests/unit/test_jobs_submit_env.c — the launch environment of a run's
 * submissions (jobs/submit_env.h). Seeded random schedules: an environment
 * is drawn over a pool of recorded and unrecorded names (values empty, with
 * '=', with a newline), recorded, changed at random, and compared; the count
 * of differences and each warning are checked against a model kept here
 * (which variables count, and their values, from the pool, not from the
 * code). The file itself is parsed independently: header, sorted lines,
 * exactly the recorded variables. Then damaged files: warned about with the
 * file and line, never fatal. KF_TEST_SEED=N replays another schedule. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/rng.h"
#include "jobs/submit_env.h"
#include "tests/test.h"

/* name, whether submit_env records it (decided here, from the header's list) */
static const struct {
    const char *name;
    int recorded;
} POOL[] = {
    {"OMPI_MCA_btl", 1},
    {"OMPI_MCA_btl_tcp_if_include", 1},
    {"PMIX_MCA_gds", 1},
    {"UCX_TLS", 1},
    {"NCCL_SOCKET_IFNAME", 1},
    {"NCCL_IB_DISABLE", 1},
    {"FI_PROVIDER", 1},
    {"OMP_NUM_THREADS", 1},
    {"OMPI_COMM_WORLD_RANK", 0},
    {"OMP_WAIT_POLICY", 0},
    {"KF_CPU_ISA", 0},
    {"XNCCL_DEBUG", 0},
    {"NCCL", 0},
    {"UCX", 0},
};
enum { NP = sizeof POOL / sizeof *POOL };
static const char *VALUES[] = {"", "tcp", "self,tcp", "eth0", "a=b", "1", "2", "x\ny", "ib0 "};
enum { NV = sizeof VALUES / sizeof *VALUES };

static uint64_t seed = 1234;

/* the model: what the file holds for an environment (-1: nothing) */
static int counted(int name, int value) {
    return value >= 0 && POOL[name].recorded && !strchr(VALUES[value], '\n');
}

static void apply(const int *env) {
    for (int i = 0; i < NP; i++)
        if (env[i] < 0) unsetenv(POOL[i].name);
        else setenv(POOL[i].name, VALUES[env[i]], 1);
}

/* The file's lines after the header, checked against env's recorded set. */
static void check_file(const char *path, const int *env, uint64_t round) {
    char *text;
    size_t len;
    kf_err err;
    T_REQUIRE(fs_read_file(path, &text, &len, &err) == 0, "read %s: %s", path, err.msg);
    char want[4096] = "# kf submit env v1\n";
    /* sorted by name: selection over the pool */
    int used[NP] = {0};
    for (;;) {
        int best = -1;
        for (int i = 0; i < NP; i++)
            if (!used[i] && counted(i, env[i]) &&
                (best < 0 || strcmp(POOL[i].name, POOL[best].name) < 0))
                best = i;
        if (best < 0) break;
        used[best] = 1;
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s=%s\n", POOL[best].name,
                 VALUES[env[best]]);
    }
    T_EQ_STR(text, want, "round %llu (seed %llu): the file", (unsigned long long)round,
             (unsigned long long)seed);
    free(text);
}

static void test_schedule(const char *run, const char *path) {
    int a[NP], b[NP];
    for (uint64_t r = 0; r < 300; r++) {
        uint64_t c = r * 64;
        for (int i = 0; i < NP; i++)
            a[i] = rng_below(seed, 1, c++, 3) ? (int)rng_below(seed, 2, c++, NV) : -1;
        apply(a);
        kf_err err;
        T_REQUIRE(submit_env_record(run, &err) == 0, "record: %s", err.msg);
        check_file(path, a, r);
        int want = 0;
        for (int i = 0; i < NP; i++) {
            uint64_t u = rng_below(seed, 3, c++, 100);
            b[i] = u < 50     ? a[i]
                   : u < 70   ? (int)rng_below(seed, 4, c++, NV)
                   : u < 85   ? -1
                   : a[i] < 0 ? (int)rng_below(seed, 5, c++, NV)
                              : a[i];
            int ca = counted(i, a[i]), cb = counted(i, b[i]);
            want += ca != cb || (ca && strcmp(VALUES[a[i]], VALUES[b[i]]));
        }
        apply(b);
        char *out = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        int got = submit_env_compare(run, f);
        fclose(f);
        T_EQ_INT(got, want, "round %llu (seed %llu): differences", (unsigned long long)r,
                 (unsigned long long)seed);
        int lines = 0;
        for (const char *s = out; (s = strchr(s, '\n')); s++) lines++;
        T_EQ_INT(lines, want, "round %llu: warning lines", (unsigned long long)r);
        for (int i = 0; i < NP; i++) {
            int ca = counted(i, a[i]), cb = counted(i, b[i]);
            if (ca != cb || (ca && strcmp(VALUES[a[i]], VALUES[b[i]]))) {
                char key[128];
                snprintf(key, sizeof key, "warning: %s was ", POOL[i].name);
                T_CHECK(strstr(out, key), "round %llu: %s named in: %s", (unsigned long long)r,
                        POOL[i].name, out);
            }
        }
        free(out);
    }
}

/* A damaged file is one warning naming it and its line; the rest compares. */
static void test_damaged(const char *run, const char *path) {
    static const struct {
        const char *text, *where;
        int diff; /* with OMPI_MCA_btl=tcp set and nothing else recorded */
    } cases[] = {
        {"# kf submit env v1\nOMPI_MCA_btl=tcp\n", NULL, 0},
        {"# kf submit env v2\nOMPI_MCA_btl=tcp\n", "env:1:", 1},
        {"", "env:1:", 1},
        {"# kf submit env v1\nOMPI_MCA_btl=tcp", "env:1:", 1}, /* torn: no final newline */
        {"# kf submit env v1\nPATH=/bin\nOMPI_MCA_btl=tcp\n", "env:2:", 1},
        {"# kf submit env v1\nOMPI_MCA_btl=tcp\n=x\n", "env:3:", 1},
        {"# kf submit env v1\nOMPI_MCA_btl=self\n", "OMPI_MCA_btl was 'self'", 1},
        {"# kf submit env v1\n", "OMPI_MCA_btl was unset", 1},
    };
    for (int i = 0; i < NP; i++) unsetenv(POOL[i].name);
    setenv("OMPI_MCA_btl", "tcp", 1);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        kf_err err;
        T_REQUIRE(fs_write_atomic(path, cases[k].text, strlen(cases[k].text), &err) == 0, "%s",
                  err.msg);
        char *out = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        int got = submit_env_compare(run, f);
        fclose(f);
        T_EQ_INT(got, cases[k].diff, "case %zu: differences", k);
        if (cases[k].where)
            T_CHECK(strstr(out, cases[k].where), "case %zu: names %s: %s", k, cases[k].where, out);
        else T_EQ_STR(out, "", "case %zu: no warning", k);
        free(out);
    }
    remove(path);
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    T_EQ_INT(submit_env_compare(run, f), 0, "no file (a run submitted before it existed)");
    fclose(f);
    T_EQ_STR(out, "", "no file: no warning");
    free(out);
}

int main(void) {
    const char *s = getenv("KF_TEST_SEED");
    if (s && *s) seed = strtoull(s, NULL, 10);
    char run[] = "/tmp/kf-test-submit-env.XXXXXX", dir[sizeof run + 8], path[sizeof run + 16];
    if (!mkdtemp(run)) return perror("mkdtemp"), 1;
    snprintf(dir, sizeof dir, "%s/slurm", run);
    snprintf(path, sizeof path, "%s/env", dir);
    kf_err err;
    T_REQUIRE(fs_mkdir_p(dir, &err) == 0, "%s", err.msg);
    test_schedule(run, path);
    test_damaged(run, path);
    fs_rm_rf(run, &err);
    return T_DONE();
}
