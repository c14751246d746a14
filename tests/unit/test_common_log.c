/* log: JSONL records (escaping, number formats, null for NaN, one line each,
 * partial tail line cut on reopen), info/warn lines and quiet mode. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "tests/test.h"

static void say_things(void) {
    kf_log_info("hello %d", 42);
    kf_log_warn("careful");
    kf_log_set_quiet(true);
    kf_log_info("hidden");
    kf_log_warn("still shown");
    kf_log_set_quiet(false);
}

int main(void) {
    /* Records. */
    kf_rec r;
    kf_rec_init(&r);
    T_CHECK(!strcmp(kf_rec_text(&r), "{}"), "empty record: %s", kf_rec_text(&r));
    kf_rec_int(&r, "step", -12345678901234LL);
    kf_rec_double(&r, "loss", 0.1);
    kf_rec_double(&r, "third", 1.0 / 3);
    kf_rec_double(&r, "bad", NAN);
    kf_rec_double(&r, "inf", -INFINITY);
    kf_rec_str(&r, "s\"k", "a\"b\\c\nd\x01");
    kf_rec_bool(&r, "ok", true);
    kf_rec_raw(&r, "arr", "[1,2]");
    const char *want =
        "{\"step\":-12345678901234,\"loss\":0.1,\"third\":0.333333333,\"bad\":null,\"inf\":null,"
        "\"s\\\"k\":\"a\\\"b\\\\c\\nd\\u0001\",\"ok\":true,\"arr\":[1,2]}";
    T_CHECK(!strcmp(kf_rec_text(&r), want), "record:\n got %s\nwant %s", kf_rec_text(&r), want);
    kf_err err = {{0}};
    json_doc *d = json_parse(kf_rec_text(&r), strlen(kf_rec_text(&r)), "rec", &err);
    T_CHECK(d, "record does not parse back: %s", err.msg);
    if (d) {
        T_CHECK(json_get(json_root(d), "s\"k"), "record does not parse back: %s", err.msg);
        T_EQ_STR(json_get(json_root(d), "s\"k")->str.s, "a\"b\\c\nd\x01",
                 "record does not parse back: %s", err.msg);
    }
    json_free(d);
    kf_rec_reset(&r);
    kf_rec_int(&r, "a", 1);
    T_CHECK(!strcmp(kf_rec_text(&r), "{\"a\":1}"), "reset: %s", kf_rec_text(&r));

    /* JSONL file: one line per append, appends after reopen, partial tail cut. */
    char path[] = "/tmp/kf_test_log_XXXXXX";
    close(mkstemp(path));
    kf_jsonl *l = kf_jsonl_open(path, &err);
    T_CHECK(l != NULL, "open: %s", err.msg);
    for (int i = 0; i < 3; i++) {
        kf_rec_reset(&r);
        kf_rec_int(&r, "step", i);
        kf_rec_double(&r, "loss", 1.0 / (i + 1));
        T_EQ_INT(kf_jsonl_append(l, &r, &err), 0, "append: %s", err.msg);
    }
    T_CHECK(!strcmp(kf_rec_text(&r), "{\"step\":2,\"loss\":0.333333333}"),
            "record after append: %s", kf_rec_text(&r));
    kf_jsonl_close(l);
    int fd = open(path, O_WRONLY | O_APPEND);
    T_EQ_INT(write(fd, "{\"step\":3,\"lo", 13), 13, "write partial");
    close(fd);
    l = kf_jsonl_open(path, &err);
    kf_rec_reset(&r);
    kf_rec_int(&r, "step", 3);
    kf_jsonl_append(l, &r, &err);
    kf_jsonl_close(l);
    char *text;
    size_t n;
    fs_read_file(path, &text, &n, &err);
    const char *want_file =
        "{\"step\":0,\"loss\":1}\n{\"step\":1,\"loss\":0.5}\n{\"step\":2,\"loss\":0.333333333}\n"
        "{\"step\":3}\n";
    T_CHECK(!strcmp(text, want_file), "file:\n%s", text);
    free(text);
    /* A file that is one partial line becomes empty. */
    fs_write_atomic(path, "{\"x", 3, &err);
    kf_jsonl_close(kf_jsonl_open(path, &err));
    fs_read_file(path, &text, &n, &err);
    T_EQ_INT(n, 0, "partial-only file kept %zu bytes", n);
    free(text);
    unlink(path);
    T_EQ_INT(kf_jsonl_open("/nonexistent-dir/x.jsonl", &err), NULL, "open error: %s", err.msg);
    T_CHECK(strstr(err.msg, "/nonexistent-dir/x.jsonl"), "open error: %s", err.msg);
    kf_rec_free(&r);

    /* Human lines. */
    char *out = t_capture_stderr(say_things);
    T_CHECK(strstr(out, " kf: hello 42\n"), "log lines:\n%s", out);
    T_CHECK(strstr(out, " kf: warning: careful\n"), "log lines:\n%s", out);
    T_CHECK(strstr(out, " kf: warning: still shown\n"), "log lines:\n%s", out);
    T_CHECK(!strstr(out, "hidden"), "log lines:\n%s", out);
    T_EQ_INT(out[4], '-', "timestamp format:\n%s", out);
    T_EQ_INT(out[7], '-', "timestamp format:\n%s", out);
    T_EQ_INT(out[10], ' ', "timestamp format:\n%s", out);
    T_EQ_INT(out[13], ':', "timestamp format:\n%s", out);
    free(out);

    return T_DONE();
}
