/* tests/unit/test_pipeline_build.c — shard sets built through the library:
 * pad and wrap packing against the tokenizer run directly, every document
 * exactly once and in order, results independent of the worker count,
 * statistics (empty lines, invalid UTF-8, truncation, dropped tokens), the
 * writer/reader round trip with uint32 ids and map growth, the id codec and
 * the decoder's range checks, and corruption
 * and tampering detection. Needs data/vocab/gpt2 (scripts/setup.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "pipeline/build.h"
#include "pipeline/manifest.h"
#include "pipeline/shard_format.h"
#include "pipeline/shard_reader.h"
#include "pipeline/shard_writer.h"
#include "tests/test.h"
#include "tokenize/tokenizer.h"

#define NDOCS 300
#define EOT 50256

static char tmp[64];
static char *docs[NDOCS]; /* NULL for the empty lines */
static int ndocs_nonempty;

/* Lines of varied length with non-ASCII text, two invalid UTF-8 sequences
 * (lines 7 and 123) and empty lines (every 50th). */
static void write_corpus(const char *path) {
    static const char *words[] = {"alpha",  "beta",   "gamma", "naïve", "café",
                                  "日本語", "emoji😀", "x",     "-",     "1999"};
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < NDOCS; i++) {
        if (i % 50 == 49) {
            docs[i] = NULL;
            fputc('\n', f);
            continue;
        }
        char buf[2048];
        int n = snprintf(buf, sizeof buf, "doc %d:", i);
        for (int w = 0; w < (i * 7) % 41 + 1; w++)
            n += snprintf(buf + n, sizeof buf - n, " %s", words[(i + w * 3) % 10]);
        if (i == 7) n += snprintf(buf + n, sizeof buf - n, " bad\xff byte");
        if (i == 123) n += snprintf(buf + n, sizeof buf - n, " cut\xe2\x82x");
        docs[i] = strdup(buf);
        fprintf(f, "%s\n", buf);
        ndocs_nonempty++;
    }
    fclose(f);
}

static build_input corpus_input;

static build_config make_config(const char *out, const char *packing, int seq_len, int per_shard,
                                int valid_last) {
    build_config c = {0};
    c.name = "test";
    c.out = out;
    c.tokenizer = "gpt2";
    c.vocab = "data/vocab/gpt2";
    c.packing = packing;
    c.seq_len = seq_len;
    c.docs_per_shard = per_shard;
    c.inputs.n = 1;
    c.inputs.v = &corpus_input;
    c.valid_last = valid_last;
    return c;
}

static char *slurp(const char *path) {
    char *buf = NULL;
    size_t n;
    kf_err err;
    return fs_read_file(path, &buf, &n, &err) ? NULL : buf;
}

/* Non-empty documents in order, as (text) pointers. */
static const char *nth_doc(int k) {
    for (int i = 0; i < NDOCS; i++)
        if (docs[i] && k-- == 0) return docs[i];
    return NULL;
}

static void test_pad(tok *t) {
    char out1[128], out3[128];
    snprintf(out1, sizeof out1, "%s/pad1", tmp);
    snprintf(out3, sizeof out3, "%s/pad3", tmp);
    build_config c1 = make_config(out1, "pad", 48, 37, 40),
                 c3 = make_config(out3, "pad", 48, 37, 40);
    kf_err err;
    build_result r;
    T_EQ_INT(shards_build(&c1, 1, 0, NULL, &r, &err), 0, "pad build jobs=1: %s", err.msg);
    T_EQ_INT(shards_build(&c3, 3, 0, NULL, NULL, &err), 0, "pad build jobs=3: %s", err.msg);
    char p1[160], p3[160];
    snprintf(p1, sizeof p1, "%s/manifest.yaml", out1);
    snprintf(p3, sizeof p3, "%s/manifest.yaml", out3);
    char *m1 = slurp(p1), *m3 = slurp(p3);
    T_CHECK(m1, "pad manifests differ between --jobs 1 and 3");
    if (m1) {
        T_CHECK(m3, "pad manifests differ between --jobs 1 and 3");
        if (m3) {
            T_EQ_STR(m1, m3, "pad manifests differ between --jobs 1 and 3");
        }
    }
    /* a rebuild reuses every shard and writes the same bytes */
    T_EQ_INT(shards_build(&c1, 2, 0, NULL, &r, &err), 0, "rebuild: built %lld reused %lld (%s)",
             (long long)r.shards_built, (long long)r.shards_reused, err.msg);
    T_EQ_INT(r.shards_built, 0, "rebuild: built %lld reused %lld (%s)", (long long)r.shards_built,
             (long long)r.shards_reused, err.msg);
    T_CHECK(r.shards_reused > 0, "rebuild: built %lld reused %lld (%s)", (long long)r.shards_built,
            (long long)r.shards_reused, err.msg);
    char *m1b = slurp(p1);
    T_CHECK(m1, "rebuild changed the manifest");
    if (m1) {
        T_CHECK(m1b, "rebuild changed the manifest");
        if (m1b) {
            T_EQ_STR(m1, m1b, "rebuild changed the manifest");
        }
    }
    free(m1);
    free(m1b);
    free(m3);

    manifest m;
    T_EQ_INT(manifest_read(out1, &m, NULL, &err), 0, "manifest_read: %s", err.msg);
    int64_t empties = NDOCS / 50, truncated = 0, tokens = 0;
    int ok_all = 1, seen = 0;
    for (int s = 0; s < 2; s++) {
        shard_set *set;
        const char *split = s ? "valid" : "train";
        if (shard_set_open(out1, split, &set, &err)) {
            T_CHECK(0, "open %s: %s", split, err.msg);
            continue;
        }
        T_CHECK(shard_set_count(set) == (s ? 40 : ndocs_nonempty - 40), "%s count %lld", split,
                (long long)shard_set_count(set));
        T_EQ_STR(shard_set_packing(set), "pad", "pad set metadata");
        T_EQ_INT(shard_set_seq_len(set), 48, "pad set metadata");
        T_EQ_INT(shard_set_vocab_size(set), 50257, "pad set metadata");
        T_EQ_STR(shard_set_tokenizer(set), "gpt2", "pad set metadata");
        int32_t ids[48], len;
        for (int64_t i = 0; i < shard_set_count(set); i++, seen++) {
            const char *d = nth_doc(seen);
            tok_ids want = {0};
            tok_encode(t, d, strlen(d), 0, &want, NULL);
            size_t n = want.n > 46 ? 46 : want.n;
            truncated += want.n > 46;
            tokens += (int64_t)n + 2;
            int ok = shard_set_get(set, i, ids, &len, &err) == 0 && len == (int32_t)n + 2 &&
                     ids[0] == EOT && !memcmp(ids + 1, want.v, n * sizeof *ids) &&
                     ids[n + 1] == EOT;
            for (int j = (int)n + 2; ok && j < 48; j++) ok = ids[j] == EOT;
            if (!ok && ok_all)
                fprintf(stderr, "pad %s sample %lld differs from doc %d\n", split, (long long)i,
                        seen);
            ok_all &= ok;
            tok_ids_free(&want);
        }
        int32_t dummy[48];
        T_CHECK(shard_set_get(set, shard_set_count(set), dummy, NULL, &err) != 0,
                "index past the end must fail");
        T_CHECK(strstr(err.msg, "out of range"), "index past the end must fail");
        shard_set_close(set);
    }
    T_CHECK(ok_all, "every document exactly once, in order (%d of %d)", seen, ndocs_nonempty);
    T_EQ_INT(seen, ndocs_nonempty, "every document exactly once, in order (%d of %d)", seen,
             ndocs_nonempty);
    T_EQ_INT(m.train.empty_docs + m.valid.empty_docs, empties, "empty lines %lld, want %lld",
             (long long)(m.train.empty_docs + m.valid.empty_docs), (long long)empties);
    T_EQ_INT(m.train.replaced + m.valid.replaced, 2, "invalid UTF-8 replacements %lld, want 2",
             (long long)(m.train.replaced + m.valid.replaced));
    T_EQ_INT(m.train.truncated + m.valid.truncated, truncated, "truncated %lld, want %lld",
             (long long)(m.train.truncated + m.valid.truncated), (long long)truncated);
    T_CHECK(truncated > 0, "truncated %lld, want %lld",
            (long long)(m.train.truncated + m.valid.truncated), (long long)truncated);
    T_EQ_INT(m.train.tokens + m.valid.tokens, tokens, "tokens %lld want %lld",
             (long long)(m.train.tokens + m.valid.tokens), (long long)tokens);
    manifest_free(&m);
}

/* wrap: shard u holds blocks of the stream encode(doc)+EOS over its own docs. */
static void test_wrap(tok *t) {
    char out[128];
    snprintf(out, sizeof out, "%s/wrap", tmp);
    const int L = 32, per = 17, body = L - 2;
    build_config c = make_config(out, "wrap", L, per, 0);
    kf_err err;
    T_EQ_INT(shards_build(&c, 2, 0, NULL, NULL, &err), 0, "wrap build: %s", err.msg);
    manifest m;
    shard_set *set;
    if (manifest_read(out, &m, NULL, &err) || shard_set_open(out, "train", &set, &err)) {
        T_CHECK(0, "open wrap set: %s", err.msg);
        return;
    }
    int units = (ndocs_nonempty + per - 1) / per, ok_all = 1;
    int64_t dropped = 0;
    T_EQ_INT(m.train.nshards, units, "wrap: %d shards, want %d", m.train.nshards, units);
    T_EQ_INT(m.valid.nshards, 0, "wrap: %d shards, want %d", m.train.nshards, units);
    T_EQ_INT(m.valid.samples, 0, "wrap: %d shards, want %d", m.train.nshards, units);
    for (int u = 0; u < units && u < m.train.nshards; u++) {
        tok_ids stream = {0};
        for (int k = u * per; k < (u + 1) * per && k < ndocs_nonempty; k++) {
            const char *d = nth_doc(k);
            tok_encode(t, d, strlen(d), 0, &stream, NULL);
            tok_ids_push(&stream, EOT);
        }
        int64_t blocks = (int64_t)stream.n / body;
        dropped += (int64_t)stream.n % body;
        int ok = m.train.shards[u].count == blocks;
        for (int64_t b = 0; ok && b < blocks; b++) {
            int32_t ids[32], len;
            ok = shard_set_get(set, m.train.first[u] + b, ids, &len, &err) == 0 && len == L &&
                 ids[0] == EOT && ids[L - 1] == EOT &&
                 !memcmp(ids + 1, stream.v + b * body, body * sizeof *ids);
        }
        if (!ok && ok_all) fprintf(stderr, "wrap shard %d differs from its documents' stream\n", u);
        ok_all &= ok;
        tok_ids_free(&stream);
    }
    T_CHECK(ok_all, "wrap shards are their units' streams cut into [BOS] block [EOS]");
    T_EQ_INT(m.train.dropped_tokens, dropped, "dropped tokens %lld want %lld",
             (long long)m.train.dropped_tokens, (long long)dropped);
    shard_set_close(set);
    manifest_free(&m);
}

/* uint32 ids (vocab > 65536), map growth past the 1 MiB initial map, and
 * detection of a flipped byte, a changed manifest and a missing shard. */
/* Distinct-looking ids per (sample, position), so a byte pattern is unique. */
static int32_t synth_id(int i, int j) {
    uint32_t x = (uint32_t)i * 2654435761u ^ (uint32_t)(j + 1) * 2246822519u;
    x ^= x >> 15;
    x *= 2654435761u;
    return (int32_t)((x ^ (x >> 13)) % 70000u);
}

static void test_writer_reader(void) {
    char dir[128], path[192];
    kf_err err;
    snprintf(dir, sizeof dir, "%s/raw", tmp);
    snprintf(path, sizeof path, "%s/train", dir);
    fs_mkdir_p(path, &err);
    snprintf(path, sizeof path, "%s/valid", dir);
    fs_mkdir_p(path, &err);
    shard_meta fmt = {.vocab_size = 70000, .seq_len = 1024};
    strcpy(fmt.tokenizer, "synthetic");
    memset(fmt.vocab_sha256, 'a', 64);
    strcpy(fmt.packing, "pad");
    snprintf(path, sizeof path, "%s/train/shard-00000.lmdb", dir);
    shard_writer *w;
    T_EQ_INT(shard_writer_open(path, &fmt, &w, &err), 0, "writer open: %s", err.msg);
    int32_t ids[1024];
    const int n = 700; /* 700 x 4100 bytes: several map doublings */
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 1024; j++) ids[j] = synth_id(i, j);
        if (shard_writer_append(w, ids, 1 + i % 1024, &err)) break;
    }
    shard_meta stats = {0}, rec;
    T_EQ_INT(shard_writer_count(w), n, "count");
    T_EQ_INT(shard_writer_commit(w, &stats, &rec, &err), 0, "commit: %s", err.msg);
    T_EQ_INT(rec.id_bytes, 4, "uint32 ids for vocab 70000 (id_bytes %d)", rec.id_bytes);
    T_EQ_INT(rec.count, n, "uint32 ids for vocab 70000 (id_bytes %d)", rec.id_bytes);
    char tmpname[200];
    snprintf(tmpname, sizeof tmpname, "%s.tmp", path);
    T_CHECK(!fs_exists(tmpname), "commit renames the temp file");
    T_CHECK(fs_exists(path), "commit renames the temp file");

    manifest m = {0};
    strcpy(m.name, "raw \"q\" \\ x\t"); /* the user's text: quotes, a backslash, a tab */
    strcpy(m.tokenizer, fmt.tokenizer);
    memcpy(m.vocab_sha256, fmt.vocab_sha256, 65);
    m.vocab_size = fmt.vocab_size;
    m.seq_len = fmt.seq_len;
    strcpy(m.packing, "pad");
    m.id_bytes = 4;
    m.special = (manifest_special){-1, -1, -1, -1, -1};
    memset(m.config_sha256, 'b', 64);
    m.train.nshards = 1;
    m.train.shards = &rec;
    manifest_split_sum(&m.train);
    manifest_split_sum(&m.valid);
    T_EQ_INT(manifest_write(dir, &m, &err), 0, "manifest_write: %s", err.msg);
    /* the name reads back as written (fuzz_manifest, regress-name-with-quote);
     * a name with nothing to escape keeps the line it always had */
    manifest back;
    int rd = manifest_read(dir, &back, NULL, &err);
    T_EQ_INT(rd, 0, "manifest with quotes in its name reads back: %s", err.msg);
    if (rd == 0) {
        T_EQ_STR(back.name, m.name, "manifest name round trip");
        manifest_free(&back);
    }
    char *mtext, mfile[600];
    size_t mlen;
    snprintf(mfile, sizeof mfile, "%s/" MANIFEST_FILE, dir);
    if (fs_read_file(mfile, &mtext, &mlen, &err) == 0) {
        T_CHECK(strstr(mtext, "\nname: \"raw \\\"q\\\" \\\\ x\\t\"\n"),
                "manifest name line escaped, got:\n%s", mtext);
        free(mtext);
    }
    strcpy(m.name, "raw");
    T_EQ_INT(manifest_write(dir, &m, &err), 0, "manifest_write: %s", err.msg);
    if (fs_read_file(mfile, &mtext, &mlen, &err) == 0) {
        T_CHECK(strstr(mtext, "\nname: \"raw\"\n"), "plain name line, got:\n%s", mtext);
        /* the tokenizer is written plain, so only a kind name is accepted
         * (fuzz_manifest, regress-tokenizer-not-a-name) */
        char *tk = strstr(mtext, "\ntokenizer: "), edited[8192];
        if (tk && mlen < sizeof edited - 16) {
            snprintf(edited, sizeof edited, "%.*s\ntokenizer: \"a: b\"%s", (int)(tk - mtext), mtext,
                     strchr(tk + 1, '\n'));
            fs_write_atomic(mfile, edited, strlen(edited), &err);
            T_EQ_INT(manifest_read(dir, &back, NULL, &err), -1, "tokenizer 'a: b' refused");
            T_CHECK(strstr(err.msg, "tokenizer name"), "tokenizer 'a: b': got '%s'", err.msg);
            fs_write_atomic(mfile, mtext, mlen, &err);
        }
        free(mtext);
    }
    free(m.train.first);
    free(m.valid.first);
    shard_set *s;
    int ok = shard_set_open(dir, "train", &s, &err) == 0;
    T_CHECK(ok, "open raw: %s", err.msg);
    if (ok) {
        int good = 1;
        for (int i = 0; i < n && good; i += 37) {
            int32_t got[1024], len;
            good = shard_set_get(s, i, got, &len, &err) == 0 && len == 1 + i % 1024;
            for (int j = 0; good && j < 1024; j++) good = got[j] == synth_id(i, j);
        }
        T_CHECK(good, "uint32 round trip");
        shard_set_close(s);
    }
    T_EQ_INT(shard_verify(path, NULL, &err), 0, "verify intact: %s", err.msg);

    /* Flip one id of sample 345 wherever its bytes occur (LMDB may keep an
     * older copy of a page): verify must name that sample. */
    char *buf;
    size_t len;
    fs_read_file(path, &buf, &len, &err);
    uint8_t pat[64];
    for (int j = 0; j < 16; j++) {
        uint32_t v = (uint32_t)synth_id(345, j + 100);
        memcpy(pat + 4 * j, &v, 4);
    }
    int hits = 0;
    for (char *p = buf; (p = memmem(p, len - (size_t)(p - buf), pat, sizeof pat)) != NULL;
         p++, hits++)
        p[0] ^= 1;
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
    T_CHECK(hits > 0, "sample bytes found in the file");
    T_CHECK(shard_verify(path, NULL, &err) != 0, "verify names sample 345: %s", err.msg);
    T_CHECK(strstr(err.msg, "sample 345"), "verify names sample 345: %s", err.msg);

    /* A manifest whose count disagrees with the shards, and a missing shard. */
    char mpath[192];
    snprintf(mpath, sizeof mpath, "%s/manifest.yaml", dir);
    char *text = slurp(mpath), *q = text ? strstr(text, "count: 700") : NULL;
    if (q) {
        memcpy(q, "count: 699", 10);
        fs_write_atomic(mpath, text, strlen(text), &err);
    }
    T_CHECK(q, "tampered manifest refused with file:line: %s", err.msg);
    T_CHECK(shard_set_open(dir, "train", &s, &err) != 0,
            "tampered manifest refused with file:line: %s", err.msg);
    T_CHECK(strstr(err.msg, "manifest.yaml:"), "tampered manifest refused with file:line: %s",
            err.msg);
    free(text);
    unlink(path);
    T_CHECK(shard_set_open(dir, "train", &s, &err) != 0, "missing shard refused");
    T_CHECK(shard_set_open(tmp, "train", &s, &err) != 0, "no manifest: %s", err.msg);
    T_CHECK(strstr(err.msg, "no manifest"), "no manifest: %s", err.msg);
}

/* The id codec at both widths, and the decoder's range and length checks. */
static void test_ids_codec(void) {
    int32_t ids[5] = {0, 1, 255, 256, 50257}, got[5];
    uint8_t v[5 * 4 + 4];
    for (int w = 2; w <= 4; w += 2) {
        shard_ids_put(v, ids, 5, w);
        int same = 1;
        for (int i = 0; i < 5; i++) same &= shard_get_le(v + w * i, w) == (uint32_t)ids[i];
        T_CHECK(same, "%d-byte ids round trip, largest 50257", w);
        T_EQ_INT(shard_ids_get(v, 5, w, got), 50257, "%d-byte ids round trip, largest 50257", w);
        T_CHECK(!memcmp(got, ids, sizeof ids), "%d-byte ids round trip, largest 50257", w);
    }
    shard_meta m = {.vocab_size = 50258, .seq_len = 5, .id_bytes = 2};
    strcpy(m.packing, "pad");
    shard_ids_put(v, ids, 5, 2);
    shard_put_le(v + 10, 4, 4);
    int32_t len;
    T_EQ_INT(shard_value_decode(v, &m, got, &len), NULL, "a pad value decodes (length 4)");
    T_EQ_INT(len, 4, "a pad value decodes (length 4)");
    m.vocab_size = 50257;
    T_CHECK(shard_value_decode(v, &m, got, &len) != NULL,
            "id 50257 is out of a 50257-token vocabulary");
    m.vocab_size = 50258;
    shard_put_le(v + 10, 6, 4);
    T_CHECK(shard_value_decode(v, &m, got, &len) != NULL,
            "a stored length over seq_len is refused");
}

int main(void) {
    kf_err err;
    test_ids_codec();
    tok *t = tok_load("gpt2", "data/vocab/gpt2", &err);
    T_CHECK(t != NULL, "GPT-2 vocabulary (run scripts/setup.sh): %s", err.msg);
    if (!t) return T_DONE();
    strcpy(tmp, "/tmp/kf_test_pipeline_XXXXXX");
    T_REQUIRE(mkdtemp(tmp) != NULL, "mkdtemp");
    char path[128];
    snprintf(path, sizeof path, "%s/docs.txt", tmp);
    write_corpus(path);
    corpus_input = (build_input){
        .path = strdup(path), .format = FMT_LINES, .text_field = "text", .suffix = ".txt"};
    test_pad(t);
    test_wrap(t);
    test_writer_reader();
    tok_free(t);
    fs_rm_rf(tmp, &err);
    return T_DONE();
}
