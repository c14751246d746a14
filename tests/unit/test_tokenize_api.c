/* Tests the tokenizer.h API: loading and its errors, vocabulary hash,
 * special ids, encode/decode round trips, invalid UTF-8 repair (as Python's
 * errors="replace"), --allow-special behaviour, the bounded BPE cache under
 * many distinct words, and WordPiece on a small vocabulary with outputs
 * derived by hand; clones (tok_clone) encoding on two threads at once, used
 * after their original is freed. Parity with the reference libraries is
 * tests/scripts/test_tokenize_parity.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "tests/test.h"
#include "tokenize/tokenizer.h"

static const char *gpt2_dir = "data/vocab/gpt2";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    KF_CHECK(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static int roundtrip(tok *t, const char *s, size_t n) {
    tok_ids ids = {0};
    tok_bytes back = {0};
    kf_err err = {{0}};
    tok_encode(t, s, n, 0, &ids, NULL);
    int ok = !tok_decode(t, ids.v, ids.n, &back, &err) && back.n == n &&
             (n == 0 || !memcmp(back.v, s, n));
    tok_ids_free(&ids);
    tok_bytes_free(&back);
    return ok;
}

static void test_gpt2(void) {
    kf_err err = {{0}};
    tok *t = tok_load("gpt2", gpt2_dir, &err);
    T_CHECK(t != NULL, "load gpt2: %s", err.msg);
    if (!t) return;
    T_CHECK(!strcmp(tok_name(t), "gpt2"), "name %s", tok_name(t));
    T_EQ_INT(tok_vocab_size(t), 50257, "vocab size %lld", (long long)tok_vocab_size(t));
    T_EQ_INT(tok_special_id(t, "eos"), 50256, "eos/bos");
    T_EQ_INT(tok_special_id(t, "bos"), 50256, "eos/bos");
    T_EQ_INT(tok_special_id(t, "cls"), -1, "gpt2 has no cls");

    /* sha256 over vocab.json then merges.txt */
    char *a, *b;
    size_t na, nb;
    T_CHECK(!fs_read_file("data/vocab/gpt2/vocab.json", &a, &na, &err), "read vocab files");
    T_CHECK(!fs_read_file("data/vocab/gpt2/merges.txt", &b, &nb, &err), "read vocab files");
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, a, na);
    sha256_update(&c, b, nb);
    uint8_t d[32];
    char hex[65];
    sha256_final(&c, d);
    sha256_to_hex(d, hex);
    T_CHECK(!strcmp(hex, tok_vocab_sha256(t)), "vocab sha256 %s vs %s", tok_vocab_sha256(t), hex);
    free(a);
    free(b);

    static const char *texts[] = {"Hello world's café — naïve 日本語 😀👨‍👩‍👧",
                                  "  lots   of\t\twhitespace \n\n ", "<|endoftext|> literal", "",
                                  "'''s 'S ’s 1234567 ١٢٣"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        T_CHECK(roundtrip(t, texts[i], strlen(texts[i])), "round trip \"%s\"", texts[i]);

    /* special token only with allow_special */
    const char *s = "a<|endoftext|>b";
    tok_ids plain = {0}, sp = {0};
    tok_encode(t, s, strlen(s), 0, &plain, NULL);
    tok_encode(t, s, strlen(s), 1, &sp, NULL);
    int has_plain = 0;
    for (size_t i = 0; i < plain.n; i++) has_plain |= plain.v[i] == 50256;
    T_CHECK(!has_plain, "plain text <|endoftext|> is split as text (%zu ids)", plain.n);
    T_CHECK(plain.n > 3, "plain text <|endoftext|> is split as text (%zu ids)", plain.n);
    T_EQ_INT(sp.n, 3, "allow_special: %zu ids", sp.n);
    T_EQ_INT(sp.v[1], 50256, "allow_special: %zu ids", sp.n);

    /* invalid UTF-8: each maximal subpart -> one U+FFFD, counted */
    static const struct {
        const char *bytes;
        size_t n;
        int64_t bad;
        const char *fixed;
    } inv[] = {
        {"a\x80"
         "b",
         3, 1,
         "a\xEF\xBF\xBD"
         "b"},
        {"\xE2\x82", 2, 1, "\xEF\xBF\xBD"}, /* truncated 3-byte: one subpart */
        {"\xF0\x9F\x98"
         "d",
         4, 1,
         "\xEF\xBF\xBD"
         "d"},
        {"\xED\xA0\x80", 3, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate: 3 */
        {"\xC0\xAF", 2, 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},                 /* overlong */
        {"\xF4\x90\x80\x80", 4, 4, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
    };
    for (size_t i = 0; i < sizeof inv / sizeof *inv; i++) {
        tok_ids x = {0}, y = {0};
        int64_t nbad = 0, nbad2 = 0;
        tok_encode(t, inv[i].bytes, inv[i].n, 0, &x, &nbad);
        tok_encode(t, inv[i].fixed, strlen(inv[i].fixed), 0, &y, &nbad2);
        T_EQ_INT(nbad, inv[i].bad, "invalid case %zu: %lld replacements, want %lld", i,
                 (long long)nbad, (long long)inv[i].bad);
        T_EQ_INT(nbad2, 0, "invalid case %zu: %lld replacements, want %lld", i, (long long)nbad,
                 (long long)inv[i].bad);
        T_EQ_INT(x.n, y.n, "invalid case %zu: ids differ from repaired text", i);
        T_CHECK(!memcmp(x.v, y.v, x.n * sizeof *x.v),
                "invalid case %zu: ids differ from repaired text", i);
        tok_ids_free(&x);
        tok_ids_free(&y);
    }

    /* many distinct pieces: the cache is bounded and results stay stable */
    tok_ids first = {0}, again = {0};
    char buf[64];
    for (int pass = 0; pass < 2; pass++) {
        tok_ids *o = pass ? &again : &first;
        for (int i = 0; i < 150000; i++) {
            int n = snprintf(buf, sizeof buf, " zq%xvk", (unsigned)(i * 2654435761u));
            tok_encode(t, buf, (size_t)n, 0, o, NULL);
        }
    }
    T_EQ_INT(first.n, again.n, "cache changes results");
    T_CHECK(!memcmp(first.v, again.v, first.n * sizeof *first.v), "cache changes results");

    int32_t badid[] = {1, 50257};
    tok_bytes out = {0};
    T_EQ_INT(tok_decode(t, badid, 2, &out, &err), -1, "unknown id: %s", err.msg);
    T_CHECK(strstr(err.msg, "50257"), "unknown id: %s", err.msg);
    T_CHECK(strstr(err.msg, "position 1"), "unknown id: %s", err.msg);
    tok_bytes_free(&out);
    tok_ids_free(&plain);
    tok_ids_free(&sp);
    tok_ids_free(&first);
    tok_ids_free(&again);
    tok_free(t);
}

static void test_load_errors(void) {
    kf_err err = {{0}};
    T_CHECK(!tok_load("gpt3", gpt2_dir, &err), "unknown kind: %s", err.msg);
    T_CHECK(strstr(err.msg, "gpt3"), "unknown kind: %s", err.msg);
    T_CHECK(!tok_load("gpt2", "/nonexistent-dir", &err), "missing dir: %s", err.msg);
    T_CHECK(strstr(err.msg, "/nonexistent-dir/vocab.json"), "missing dir: %s", err.msg);
    char dir[] = "/tmp/kf-tok-XXXXXX";
    KF_CHECK(mkdtemp(dir), "mkdtemp");
    char p1[300], p2[300];
    snprintf(p1, sizeof p1, "%s/vocab.json", dir);
    snprintf(p2, sizeof p2, "%s/merges.txt", dir);
    /* broken GPT-2 vocabularies, each refused with a message naming the fault */
    static const struct {
        const char *what, *vocab, *want;
    } bad[] = {
        /* a byte-level vocab needs all 256 bytes; this one has 2 tokens */
        {"incomplete vocab", "{\"a\": 0, \"b\": 1}", "byte 0x"},
        {"duplicate id", "{\"a\": 0, \"b\": 0}", "used twice"},
        {"bad json", "{\"a\": 0,}", "vocab.json:1:9"},
    };
    write_file(p2, "#version: 0.2\na b\n");
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        write_file(p1, bad[k].vocab);
        T_CHECK(!tok_load("gpt2", dir, &err), "%s: loaded", bad[k].what);
        T_CHECK(strstr(err.msg, bad[k].want), "%s: got '%s', want it to say '%s'", bad[k].what,
                err.msg, bad[k].want);
    }
    unlink(p1);
    unlink(p2);
    snprintf(p1, sizeof p1, "%s/vocab.txt", dir);
    write_file(p1, "[PAD]\nhello\n");
    T_CHECK(!tok_load("bert", dir, &err), "bert without [UNK]: %s", err.msg);
    T_CHECK(strstr(err.msg, "[UNK]"), "bert without [UNK]: %s", err.msg);
    unlink(p1);
    rmdir(dir);
}

static void expect_bert(tok *t, const char *text, int allow, const char *want) {
    tok_ids ids = {0};
    tok_encode(t, text, strlen(text), allow, &ids, NULL);
    char got[512] = "";
    size_t o = 0;
    for (size_t i = 0; i < ids.n && o < sizeof got - 12; i++)
        o += (size_t)snprintf(got + o, sizeof got - o, "%s%d", i ? " " : "", ids.v[i]);
    T_CHECK(!strcmp(got, want), "bert(\"%s\"): got \"%s\" want \"%s\"", text, got, want);
    tok_ids_free(&ids);
}

typedef struct enc_job {
    tok *t;
    const char *text;
    size_t len;
    tok_ids ids;
} enc_job;

static void *enc_run(void *arg) {
    enc_job *j = arg;
    for (size_t off = 0, n; off < j->len; off += n) { /* line by line, as the packer does */
        const char *nl = memchr(j->text + off, '\n', j->len - off);
        n = nl ? (size_t)(nl - (j->text + off)) + 1 : j->len - off;
        tok_encode(j->t, j->text + off, n, 0, &j->ids, NULL);
    }
    return NULL;
}

/* Clones share the tables the original learns lazily (which tokens BPE maps
 * to themselves) and may outlive it. */
static void test_clone(void) {
    kf_err err = {{0}};
    char *text;
    size_t len;
    T_CHECK(!fs_read_file("data/text/brown.txt", &text, &len, &err), "read brown.txt: %s", err.msg);
    if (len > 400000) len = 400000;
    tok *ref = tok_load("gpt2", gpt2_dir, &err);
    tok *t = tok_load("gpt2", gpt2_dir, &err);
    T_CHECK(ref, "load: %s", err.msg);
    T_CHECK(t, "load: %s", err.msg);
    if (!ref || !t) return;
    enc_job want = {ref, text, len, {0}};
    enc_run(&want);
    tok *c1 = tok_clone(t), *c2 = tok_clone(c1);
    T_EQ_STR(tok_name(c2), "gpt2", "a clone reports the original's name, hash and size");
    T_EQ_STR(tok_vocab_sha256(c2), tok_vocab_sha256(t),
             "a clone reports the original's name, hash and size");
    T_EQ_INT(tok_vocab_size(c2), tok_vocab_size(t),
             "a clone reports the original's name, hash and size");
    tok_free(t); /* the clones keep the tables */
    enc_job jobs[2] = {{c1, text, len, {0}}, {c2, text, len, {0}}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, enc_run, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        T_EQ_INT(jobs[i].ids.n, want.ids.n,
                 "clone %d on its own thread: %zu ids, want %zu (or different ids)", i + 1,
                 jobs[i].ids.n, want.ids.n);
        T_CHECK(!memcmp(jobs[i].ids.v, want.ids.v, want.ids.n * sizeof *want.ids.v),
                "clone %d on its own thread: %zu ids, want %zu (or different ids)", i + 1,
                jobs[i].ids.n, want.ids.n);
    }
    T_CHECK(want.ids.n > 50000, "the text gave %zu ids", want.ids.n);
    for (int i = 0; i < 2; i++) tok_ids_free(&jobs[i].ids);
    tok_ids_free(&want.ids);
    tok_free(c1);
    tok_free(c2);
    tok_free(ref);
    free(text);
}

static void test_bert(void) {
    char dir[] = "/tmp/kf-bert-XXXXXX";
    KF_CHECK(mkdtemp(dir), "mkdtemp");
    char path[300];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    /* ids:      0     1     2     3     4      5  6      7      8     9 10 11 12 13  14   15 */
    write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\nhello\n,\n!\nu\n##"
                     "n\n你\ncafe\n'\n");
    kf_err err = {{0}};
    tok *t = tok_load("bert", dir, &err);
    T_CHECK(t != NULL, "load bert: %s", err.msg);
    if (!t) return;
    T_EQ_STR(tok_name(t), "bert-uncased", "bert name/size");
    T_EQ_INT(tok_vocab_size(t), 16, "bert name/size");
    T_EQ_INT(tok_special_id(t, "cls"), 2, "bert special ids");
    T_EQ_INT(tok_special_id(t, "sep"), 3, "bert special ids");
    T_EQ_INT(tok_special_id(t, "pad"), 0, "bert special ids");
    T_EQ_INT(tok_special_id(t, "unk"), 1, "bert special ids");
    T_EQ_INT(tok_special_id(t, "mask"), 4, "bert special ids");
    T_EQ_INT(tok_special_id(t, "eos"), -1, "bert special ids");
    expect_bert(t, "UnAffable, HELLO!", 0,
                "5 6 7 9 8 10");                     /* lowercase + longest match + punctuation */
    expect_bert(t, "Café  h\xC3\xA9llo", 0, "14 8"); /* accents stripped (NFC é and e+U+0301) */
    expect_bert(t, "cafe\xCC\x81", 0, "14");
    expect_bert(t, "unknownword hello", 0, "1 8"); /* no piece for "k..." -> whole word [UNK] */
    expect_bert(t, "你好", 0, "13 1");             /* CJK split per character */
    expect_bert(t,
                "un\x01"
                "aff\xEF\xBF\xBD"
                "able",
                0, "5 6 7"); /* controls and U+FFFD dropped */
    expect_bert(t, "hello\xC2\xA0hello\xE2\x80\xA8hello", 0, "8 8 8"); /* NBSP, LS separate words */
    expect_bert(t, "unn", 0, "5 12");
    expect_bert(t, "[CLS] hello [SEP]", 1, "2 8 3");
    expect_bert(t, "[CLS] hello", 0, "1 1 1 8"); /* "[", "cls", "]" as text */
    char longw[202];
    memset(longw, 'u', 101);
    longw[101] = 0;
    expect_bert(t, longw, 0, "1"); /* > 100 chars -> [UNK] */
    memset(longw, 0, sizeof longw);
    memcpy(longw, "u", 1);
    for (int i = 1; i < 100; i++) longw[i] = 'n';
    char want[400] = "5"; /* longest match first: "un", then 98 x "##n" */
    for (int i = 2; i < 100; i++) strcat(want, " 12");
    expect_bert(t, longw, 0, want); /* exactly 100 chars: split */
    tok *c = tok_clone(t);
    tok_free(t);
    t = c; /* the rest runs on a clone whose original is gone */
    expect_bert(t, "UnAffable, HELLO!", 0, "5 6 7 9 8 10");
    int32_t ids[] = {5, 6, 7, 9, 8};
    tok_bytes out = {0};
    T_CHECK(!tok_decode(t, ids, 5, &out, &err), "bert decode: %.*s", (int)out.n, out.v);
    T_EQ_INT(out.n, 17, "bert decode: %.*s", (int)out.n, out.v);
    T_CHECK(!memcmp(out.v, "unaffable , hello", 17), "bert decode: %.*s", (int)out.n, out.v);
    tok_bytes_free(&out);
    tok_free(t);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    if (access("data/vocab/gpt2/vocab.json", R_OK)) {
        printf("FAIL: data/vocab/gpt2 missing (run scripts/setup.sh; tests run from the repository "
               "root)\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    test_gpt2();
    test_clone();
    test_load_errors();
    test_bert();
    return T_DONE();
}
