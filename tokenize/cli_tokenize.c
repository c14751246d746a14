/* tokenize/cli_tokenize.c — `kf tokenize`: stdin text -> one line of ids per
 * input line (or the inverse with --decode). Input is read in large blocks
 * and output is assembled in a buffer, so the command is bound by the
 * tokenizer rather than by I/O. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "common/blas_threads.h"
#include "common/cli.h"
#include "tokenize/tokenizer.h"

enum { IN_BLOCK = 8 << 20, OUT_FLUSH = 1 << 20 };

static const char usage[] =
    "usage: kf tokenize gpt2|bert --vocab DIR [--decode] [--allow-special]\n"
    "\n"
    "Reads text on stdin and writes, for each input line (split on \\n), one line of\n"
    "space-separated token ids; no special tokens are added. Invalid UTF-8 is\n"
    "replaced by U+FFFD (count reported on stderr).\n"
    "\n"
    "  gpt2             byte-level BPE from DIR/vocab.json and DIR/merges.txt\n"
    "  bert             uncased WordPiece from DIR/vocab.txt\n"
    "  --vocab DIR      vocabulary directory (e.g. data/vocab/gpt2)\n"
    "  --decode         the inverse: each line of ids -> its text\n"
    "  --allow-special  literal special tokens in the text (gpt2: <|endoftext|>;\n"
    "                   bert: [CLS] [SEP] [PAD] [UNK] [MASK]) become their ids\n"
    "  --help           this text\n";

static void out_flush(tok_bytes *o) {
    if (o->n && fwrite(o->v, 1, o->n, stdout) != o->n) {
        fprintf(stderr, "kf tokenize: error: writing stdout: %s\n", strerror(errno));
        exit(KF_EXIT_ERROR);
    }
    o->n = 0;
}

static void put_ids(tok_bytes *o, const tok_ids *ids) {
    if (o->cap - o->n < ids->n * 12 + 1) {
        out_flush(o);
        if (o->cap < ids->n * 12 + 1) {
            o->cap = ids->n * 12 + 1 + OUT_FLUSH;
            o->v = kf_realloc(o->v, o->cap);
        }
    }
    char *p = o->v + o->n;
    for (size_t i = 0; i < ids->n; i++) {
        if (i) *p++ = ' ';
        char tmp[12];
        int k = 0;
        uint32_t v = (uint32_t)ids->v[i];
        do tmp[k++] = (char)('0' + v % 10);
        while ((v /= 10));
        while (k) *p++ = tmp[--k];
    }
    *p++ = '\n';
    o->n = (size_t)(p - o->v);
    if (o->n >= OUT_FLUSH) out_flush(o);
}

/* Parses a line of space-separated ids into ids. Returns 0 or -1 (message in err). */
static int parse_ids(const char *s, size_t n, long lineno, tok_ids *ids, kf_err *err) {
    size_t i = 0;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
        if (i == n) break;
        int64_t v = 0;
        size_t st = i;
        while (i < n && s[i] >= '0' && s[i] <= '9' && v <= INT32_MAX) v = v * 10 + (s[i++] - '0');
        if (i == st || v > INT32_MAX || (i < n && s[i] != ' ' && s[i] != '\t' && s[i] != '\r'))
            return kf_err_set(err, "stdin:%ld: expected space-separated token ids, got \"%.*s\"",
                              lineno, (int)(n - st > 20 ? 20 : n - st), s + st);
        tok_ids_push(ids, (int32_t)v);
    }
    return 0;
}

int tokenize_main(int argc, char **argv) {
    blas_threads_stop(); /* tokenizing never calls BLAS */
    const char *kind = NULL, *vocab = NULL;
    bool decode = false, allow_special = false;
    const cli_opt opts[] = {
        {"--vocab", CLI_STR, .out = &vocab},
        {"--decode", CLI_FLAG, .out = &decode},
        {"--allow-special", CLI_FLAG, .out = &allow_special},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf tokenize", usage, opts, .pos = &kind, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!kind || !vocab) {
        fprintf(stderr, "kf tokenize: %s is required\n%s",
                kind ? "--vocab DIR" : "the tokenizer (gpt2|bert)", usage);
        return KF_EXIT_USAGE;
    }
    if (strcmp(kind, "gpt2") && strcmp(kind, "bert")) {
        fprintf(stderr, "kf tokenize: unknown tokenizer \"%s\"\n%s", kind, usage);
        return KF_EXIT_USAGE;
    }
    kf_err err = {{0}};
    tok *t = tok_load(kind, vocab, &err);
    if (!t) {
        fprintf(stderr, "kf tokenize: error: %s\n", err.msg);
        return KF_EXIT_ERROR;
    }
    tok_bytes o = {0};
    o.cap = OUT_FLUSH + 4096;
    o.v = kf_malloc(o.cap);
    tok_ids ids = {0};
    tok_bytes text = {0};
    int64_t n_replaced = 0;
    long lineno = 0;
    int rc = KF_EXIT_OK;
    /* buf holds [pending partial line][new block] */
    size_t cap = IN_BLOCK, have = 0;
    char *buf = kf_malloc(cap);
    int eof = 0;
    while (!eof || have) {
        if (!eof) {
            if (cap - have < IN_BLOCK / 2) {
                cap *= 2;
                buf = kf_realloc(buf, cap);
            }
            ssize_t r = read(0, buf + have, cap - have);
            if (r < 0) {
                if (errno == EINTR) continue;
                fprintf(stderr, "kf tokenize: error: reading stdin: %s\n", strerror(errno));
                rc = KF_EXIT_ERROR;
                break;
            }
            if (r == 0) eof = 1;
            have += (size_t)r;
            if (!eof && !memchr(buf + have - (size_t)r, '\n', (size_t)r)) continue;
        }
        size_t pos = 0;
        for (;;) {
            char *nl = memchr(buf + pos, '\n', have - pos);
            if (!nl && !(eof && pos < have)) break;
            size_t end = nl ? (size_t)(nl - buf) : have;
            lineno++;
            ids.n = 0;
            if (!decode) {
                tok_encode(t, buf + pos, end - pos, allow_special, &ids, &n_replaced);
                put_ids(&o, &ids);
            } else {
                text.n = 0;
                if (parse_ids(buf + pos, end - pos, lineno, &ids, &err) ||
                    tok_decode(t, ids.v, ids.n, &text, &err)) {
                    fprintf(stderr, "kf tokenize: error: %s%s\n",
                            strstr(err.msg, "stdin:") ? "" : "stdin: ", err.msg);
                    rc = KF_EXIT_ERROR;
                    goto done;
                }
                tok_bytes_append(&text, "\n", 1);
                if (o.n + text.n > OUT_FLUSH) out_flush(&o);
                if (text.n > o.cap) fwrite(text.v, 1, text.n, stdout);
                else tok_bytes_append(&o, text.v, text.n);
            }
            pos = nl ? end + 1 : have;
        }
        memmove(buf, buf + pos, have - pos);
        have -= pos;
    }
done:
    out_flush(&o);
    if (fflush(stdout)) {
        fprintf(stderr, "kf tokenize: error: writing stdout: %s\n", strerror(errno));
        rc = KF_EXIT_ERROR;
    }
    if (n_replaced)
        fprintf(stderr, "kf tokenize: %lld invalid UTF-8 sequence(s) replaced by U+FFFD\n",
                (long long)n_replaced);
    free(buf);
    tok_ids_free(&ids);
    tok_bytes_free(&text);
    tok_bytes_free(&o);
    tok_free(t);
    return rc;
}
