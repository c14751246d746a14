/* log: JSONL records (escaping, number formats, null for NaN, one line each,
 * partial tail line cut on reopen, no partial line left by a write that
 * fails part-way), info/warn lines and quiet mode. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/rng.h"
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

    /* Appends that fail part-way: a file size limit (EFBIG, as a full disk
     * gives ENOSPC) lets a seeded random number of the record's bytes, 0 to
     * all but its newline, reach the file. The failed append reports an
     * error and leaves the file as it was; once the limit goes, appends go
     * on, and the file is whole lines, each record appended with success
     * once, in order. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit was;
    getrlimit(RLIMIT_FSIZE, &was);
    char lpath[] = "/tmp/kf_test_log_XXXXXX";
    close(mkstemp(lpath));
    l = kf_jsonl_open(lpath, &err);
    T_REQUIRE(l != NULL, "open: %s", err.msg);
    int64_t next = 0, ok = 0;
    for (uint64_t trial = 0; trial < 40; trial++) {
        kf_rec_reset(&r);
        kf_rec_int(&r, "step", next);
        kf_rec_str(&r, "pad", "loss and the rest of a record");
        size_t len = strlen(kf_rec_text(&r)) + 1, cut = rng_below(11, 0, trial, len);
        struct stat st;
        stat(lpath, &st);
        struct rlimit lim = {.rlim_cur = (rlim_t)st.st_size + cut, .rlim_max = was.rlim_max};
        T_REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
        int rc = kf_jsonl_append(l, &r, &err);
        T_REQUIRE(setrlimit(RLIMIT_FSIZE, &was) == 0, "setrlimit back");
        T_EQ_INT(rc, -1, "trial %d: an append with %zu of %zu bytes room", (int)trial, cut, len);
        T_CHECK(strstr(err.msg, lpath), "trial %d: the error names the file: %s", (int)trial,
                err.msg);
        struct stat after;
        stat(lpath, &after);
        T_EQ_INT((int64_t)after.st_size, (int64_t)st.st_size,
                 "trial %d: file size after an append that failed after %zu bytes", (int)trial,
                 cut);
        next++;
        for (uint64_t k = 0; k <= rng_below(11, 1, trial, 3); k++) {
            kf_rec_reset(&r);
            kf_rec_int(&r, "step", next++);
            T_EQ_INT(kf_jsonl_append(l, &r, &err), 0, "trial %d: append: %s", (int)trial, err.msg);
            ok++;
        }
    }
    kf_rec_free(&r);
    T_EQ_INT(kf_jsonl_sync(l, &err), 0, "sync: %s", err.msg);
    kf_jsonl_close(l);
    T_REQUIRE(fs_read_file(lpath, &text, &n, &err) == 0, "%s", err.msg);
    int64_t lines = 0, prev = -1;
    for (char *line = text, *nl; (nl = memchr(line, '\n', n - (size_t)(line - text)));
         line = nl + 1, lines++) {
        json_doc *jd = json_parse(line, (size_t)(nl - line), lpath, &err);
        const json *sj = jd ? json_get(json_root(jd), "step") : NULL;
        T_CHECK(sj && sj->type == JSON_NUMBER, "line %lld parses with a step: %.*s",
                (long long)lines + 1, (int)(nl - line), line);
        if (sj && sj->type == JSON_NUMBER) {
            T_CHECK(sj->i > prev, "line %lld: step %lld after step %lld", (long long)lines + 1,
                    (long long)sj->i, (long long)prev);
            prev = sj->i;
        }
        json_free(jd);
    }
    T_EQ_INT(lines, ok, "lines in the file against appends that succeeded");
    T_CHECK(n > 0 && text[n - 1] == '\n', "the file ends with a newline");
    free(text);
    unlink(lpath);

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
