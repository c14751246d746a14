/* tests/fuzz/fuzz_doc_reader.c — the shard builder's input readers
 * (pipeline/doc_reader.h): tar/xz/gz archives through libarchive, nested
 * archives, and the lines/text/jsonl formats.
 *
 * Input: a mode byte, then the bytes of one input. Mode bits 0-1: format
 * (lines, text, jsonl; 3 = jsonl with text_field "body"); bit 2: read as a
 * nested archive from memory (docs_read_member), else as a file (written to
 * /dev/shm; bit 3 names it in.tar.xz so it goes through libarchive, else
 * in.jsonl or in.txt); bit 4: the member suffix filter is "" (all members)
 * instead of ".txt". Documents must be non-empty and, for a plain file, no
 * longer than it; docs_input_bytes must give the file's size. */
#include "fuzz_util.h"
#include "pipeline/doc_reader.h"

typedef struct count {
    size_t docs, empty, limit;
} count;

static int on_doc(void *ctx, const char *text, size_t len, kf_err *err) {
    count *c = ctx;
    fuzz_check(len > 0);
    fuzz_check(len <= c->limit);
    volatile char first = text[0], last = text[len - 1]; /* readable (ASan) */
    (void)first, (void)last;
    c->docs++;
    return 0;
}

static int on_empty(void *ctx, kf_err *err) {
    ((count *)ctx)->empty++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    static const input_format fmts[] = {FMT_LINES, FMT_TEXT, FMT_JSONL, FMT_JSONL};
    build_input in = {.format = fmts[mode & 3],
                      .text_field = (mode & 3) == 3 ? "body" : "text",
                      .suffix = mode & 16 ? "" : ".txt"};
    count c = {.limit = (mode & 4) || (mode & 8) ? SIZE_MAX : n};
    doc_sink sink = {.doc = on_doc, .empty = on_empty, .ctx = &c};
    kf_err err;
    if (mode & 4) {
        docs_read_member(&in, "fuzz.xz", p, n, &sink, &err);
    } else {
        char path[PATH_MAX];
        const char *name = mode & 8 ? "in.tar.xz" : in.format == FMT_JSONL ? "in.jsonl" : "in.txt";
        fuzz_write(fuzz_dir(), name, p, n, path, sizeof path);
        in.path = path;
        build_inputs all = {.n = 1, .v = &in};
        fuzz_check(docs_input_bytes(&all) == (int64_t)n);
        docs_read(&all, &sink, &err);
    }
    return 0;
}
