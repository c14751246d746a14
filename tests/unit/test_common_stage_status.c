/* tests/unit/test_common_stage_status.c — the stage status file: what
 * stage_status_write puts down, stage_status_read gives back; the exact text
 * jobs and users read; a missing file, unknown keys and malformed values. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/stage_status.h"
#include "tests/test.h"

int main(void) {
    char dir[] = "/tmp/kf_status_XXXXXX", p[PATH_MAX];
    KF_CHECK(mkdtemp(dir), "mkdtemp");
    fs_path_join(p, sizeof p, dir, "status");
    kf_err err = {{0}};
    stage_status got;
    T_EQ_INT(stage_status_read(dir, &got, &err), 1, "no status file yet");

    stage_status st = {.state = "running",
                       .step = 12,
                       .steps = 400,
                       .checkpoint = "step-10",
                       .tokens_per_s = 1234.56};
    T_EQ_INT(stage_status_write(dir, &st, &err), 0, "write: %s", err.msg);
    char *text;
    size_t len;
    T_EQ_INT(fs_read_file(p, &text, &len, &err), 0, "read back: %s", err.msg);
    const char *want_head = "state: running\nstep: 12\nsteps: 400\ncheckpoint: \"step-10\"\n"
                            "tokens_per_s: 1234.6\nupdated: ";
    T_CHECK(!strncmp(text, want_head, strlen(want_head)), "text:\n%s", text);
    free(text);

    T_EQ_INT(stage_status_read(dir, &got, &err), 0, "read: %s", err.msg);
    T_EQ_STR(got.state, "running", "state");
    T_EQ_INT(got.step, 12, "step");
    T_EQ_INT(got.steps, 400, "steps");
    T_EQ_STR(got.checkpoint, "step-10", "checkpoint");
    T_NEAR(got.tokens_per_s, 1234.6, 1e-9, "tokens_per_s");
    T_CHECK(got.updated > 0, "updated %lld", (long long)got.updated);
    T_EQ_STR(got.reason, "", "no reason while running");

    stage_status dead = {.state = "failed", .step = 7, .steps = 9};
    snprintf(dead.reason, sizeof dead.reason, "cannot open \"x\":\nno space");
    T_EQ_INT(stage_status_write(dir, &dead, &err), 0, "write: %s", err.msg);
    T_EQ_INT(stage_status_read(dir, &got, &err), 0, "read: %s", err.msg);
    T_EQ_STR(got.reason, "cannot open 'x': no space", "reason: quotes and line breaks made safe");

    const char *later = "state: done\nstep: 3\nsteps: 3\ncheckpoint: \"\"\nnew_key: 7\n";
    T_EQ_INT(fs_write_atomic(p, later, strlen(later), &err), 0, "write: %s", err.msg);
    T_EQ_INT(stage_status_read(dir, &got, &err), 0, "an unknown key is ignored: %s", err.msg);
    T_EQ_STR(got.state, "done", "state beside an unknown key");
    T_EQ_STR(got.checkpoint, "", "empty checkpoint");

    const char *bad = "state: done\nstep: x3\n";
    T_EQ_INT(fs_write_atomic(p, bad, strlen(bad), &err), 0, "write: %s", err.msg);
    T_EQ_INT(stage_status_read(dir, &got, &err), -1, "malformed step refused");
    T_CHECK(strstr(err.msg, "status:2: key 'step'"), "error names file, line and key: %s", err.msg);

    fs_rm_rf(dir, &err);
    return T_DONE();
}
