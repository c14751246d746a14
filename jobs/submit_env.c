/* jobs/submit_env.c — the launcher environment of a run's submissions (see
 * submit_env.h). */
#include "jobs/submit_env.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/strbuf.h"

#define ENV_HEADER "# kf submit env v1\n"
#define ENV_MAX_BYTES (1 << 20)

extern char **environ;

static const char *const PREFIXES[] = {"OMPI_MCA_", "PMIX_MCA_", "UCX_", "NCCL_", "FI_"};

int submit_env_recorded(const char *name) {
    for (size_t i = 0; i < sizeof PREFIXES / sizeof *PREFIXES; i++)
        if (!strncmp(name, PREFIXES[i], strlen(PREFIXES[i]))) return 1;
    return !strcmp(name, "OMP_NUM_THREADS");
}

/* The length of NAME in entry "NAME=VALUE" when NAME is a recorded variable,
 * else 0. */
static size_t recorded_name(const char *entry) {
    const char *eq = strchr(entry, '=');
    char name[256];
    if (!eq || eq == entry || (size_t)(eq - entry) >= sizeof name) return 0;
    memcpy(name, entry, (size_t)(eq - entry)), name[eq - entry] = 0;
    return submit_env_recorded(name) ? (size_t)(eq - entry) : 0;
}

/* "NAME=VALUE" entries of environ that are recorded, sorted by name. */
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}
static size_t current(char ***out) {
    size_t n = 0, cap = 16;
    char **v = kf_malloc(cap * sizeof *v);
    for (char **e = environ; *e; e++) {
        if (!recorded_name(*e) || strchr(*e, '\n')) continue;
        if (n == cap) v = kf_realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = *e;
    }
    qsort(v, n, sizeof *v, cmp_str);
    *out = v;
    return n;
}

static void env_path(const char *run, char *p, size_t cap) {
    char dir[PATH_MAX];
    fs_path_join(dir, sizeof dir, run, "slurm");
    fs_path_join(p, cap, dir, "env");
}

int submit_env_record(const char *run, kf_err *err) {
    char **v;
    size_t n = current(&v);
    strbuf sb = {0};
    strbuf_puts(&sb, ENV_HEADER);
    for (size_t i = 0; i < n; i++) strbuf_printf(&sb, "%s\n", v[i]);
    char p[PATH_MAX];
    env_path(run, p, sizeof p);
    int rv = fs_write_atomic(p, sb.s, sb.len, err);
    free(sb.s), free(v);
    return rv;
}

/* The value of name in the sorted "NAME=VALUE" list v, or NULL. */
static const char *lookup(char **v, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (!strncmp(v[i], name, len) && v[i][len] == '=') return v[i] + len + 1;
    return NULL;
}

static void say(FILE *warn, const char *name, size_t len, const char *was, const char *now) {
    fprintf(warn,
            "kf jobs: warning: %.*s was %s%s%s at the last submission, now %s%s%s: the jobs "
            "submitted now get this shell's environment (export it as before to keep the "
            "launch the same)\n",
            (int)len, name, was ? "'" : "", was ? was : "unset", was ? "'" : "", now ? "'" : "",
            now ? now : "unset", now ? "'" : "");
}

int submit_env_compare(const char *run, FILE *warn) {
    char p[PATH_MAX];
    env_path(run, p, sizeof p);
    if (!fs_exists(p)) return 0;
    kf_err err;
    char *text;
    size_t len;
    if (fs_read_file(p, &text, &len, &err)) {
        fprintf(warn, "kf jobs: warning: cannot read %s: %s\n", p, err.msg);
        return 1;
    }
    if (len > ENV_MAX_BYTES || strncmp(text, ENV_HEADER, strlen(ENV_HEADER)) ||
        (len && text[len - 1] != '\n') || memchr(text, 0, len)) {
        fprintf(warn,
                "kf jobs: warning: %s:1: not a kf submit env v1 file (%zu bytes); not "
                "compared\n",
                p, len);
        free(text);
        return 1;
    }
    /* split the recorded lines in place: rec[i] is "NAME=VALUE" */
    int diff = 0;
    size_t nrec = 0, cap = 16, line = 1;
    char **rec = kf_malloc(cap * sizeof *rec);
    for (char *s = text + strlen(ENV_HEADER); s < text + len; line++) {
        char *nl = strchr(s, '\n');
        *nl = 0;
        if (!recorded_name(s)) {
            fprintf(warn,
                    "kf jobs: warning: %s:%zu: not NAME=VALUE of a recorded variable: skipped\n", p,
                    line + 1);
            diff++;
        } else {
            if (nrec == cap) rec = kf_realloc(rec, (cap *= 2) * sizeof *rec);
            rec[nrec++] = s;
        }
        s = nl + 1;
    }
    char **cur;
    size_t ncur = current(&cur);
    for (size_t i = 0; i < nrec; i++) { /* recorded: changed or unset now */
        size_t nl = recorded_name(rec[i]);
        const char *now = lookup(cur, ncur, rec[i], nl);
        if (!now || strcmp(now, rec[i] + nl + 1))
            say(warn, rec[i], nl, rec[i] + nl + 1, now), diff++;
    }
    for (size_t i = 0; i < ncur; i++) { /* set now, not at the submission */
        size_t nl = recorded_name(cur[i]);
        if (!lookup(rec, nrec, cur[i], nl)) say(warn, cur[i], nl, NULL, cur[i] + nl + 1), diff++;
    }
    free(cur), free(rec), free(text);
    return diff;
}
