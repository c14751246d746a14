/* common/stage_status.c — the stage status file (common/stage_status.h). */
#include "common/stage_status.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fsutil.h"

int stage_status_write(const char *stage_dir, const stage_status *s, kf_err *err) {
    char p[PATH_MAX], buf[768], reason[sizeof s->reason];
    fs_path_join(p, sizeof p, stage_dir, "status");
    snprintf(reason, sizeof reason, "%s", s->reason);
    for (char *c = reason; *c; c++)
        if (*c == '"') *c = '\'';
        else if (*c == '\n' || *c == '\r') *c = ' ';
    int n = snprintf(buf, sizeof buf,
                     "state: %s\nstep: %" PRId64 "\nsteps: %" PRId64 "\ncheckpoint: \"%s\"\n"
                     "tokens_per_s: %.1f\nupdated: %lld\nreason: \"%s\"\n",
                     s->state, s->step, s->steps, s->checkpoint, s->tokens_per_s,
                     (long long)time(NULL), reason);
    KF_CHECK(n > 0 && (size_t)n < sizeof buf, "status of %s does not fit", stage_dir);
    return fs_write_atomic(p, buf, (size_t)n, err);
}

/* Copies a value, without the quotes of a quoted one, into out (cap bytes). */
static int copy_value(const char *v, char *out, size_t cap) {
    size_t len = strlen(v);
    if (len >= 2 && v[0] == '"' && v[len - 1] == '"') v++, len -= 2;
    if (len >= cap) return -1;
    memcpy(out, v, len);
    out[len] = 0;
    return 0;
}

static int parse_line(char *key, char *v, stage_status *s) {
    char *end;
    errno = 0;
    if (!strcmp(key, "state")) return copy_value(v, s->state, sizeof s->state);
    if (!strcmp(key, "checkpoint")) return copy_value(v, s->checkpoint, sizeof s->checkpoint);
    if (!strcmp(key, "reason")) return copy_value(v, s->reason, sizeof s->reason);
    if (!strcmp(key, "tokens_per_s")) {
        s->tokens_per_s = strtod(v, &end);
        return errno || end == v || *end ? -1 : 0;
    }
    int64_t *dst = !strcmp(key, "step")      ? &s->step
                   : !strcmp(key, "steps")   ? &s->steps
                   : !strcmp(key, "updated") ? &s->updated
                                             : NULL;
    if (!dst) return 0; /* a key added later */
    *dst = strtoll(v, &end, 10);
    return errno || end == v || *end ? -1 : 0;
}

int stage_status_read(const char *stage_dir, stage_status *s, kf_err *err) {
    memset(s, 0, sizeof *s);
    char p[PATH_MAX];
    fs_path_join(p, sizeof p, stage_dir, "status");
    if (!fs_exists(p)) return 1;
    char *text;
    size_t len;
    if (fs_read_file(p, &text, &len, err)) return -1;
    int rc = 0, lineno = 0;
    for (char *line = text, *next; line && *line && !rc; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *colon = strstr(line, ": ");
        if (!colon) {
            rc = kf_err_set(err, "%s:%d: expected 'key: value', got '%.60s'", p, lineno, line);
            break;
        }
        *colon = 0;
        if (parse_line(line, colon + 2, s))
            rc = kf_err_set(err, "%s:%d: key '%s': malformed value '%.60s'", p, lineno, line,
                            colon + 2);
    }
    free(text);
    return rc;
}
