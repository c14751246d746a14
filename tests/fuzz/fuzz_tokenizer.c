/* tests/fuzz/fuzz_tokenizer.c — GPT-2 and BERT encode/decode and their
 * vocabulary files (tokenize/tokenizer.h), over the small vocabularies in
 * tests/fuzz/vocab/ (a 769-token byte-level BPE (no <|endoftext|>) and a 155-token WordPiece;
 * KF_FUZZ_VOCAB names another directory holding gpt2/ and bert/).
 *
 * Input: a mode byte, then the payload. Mode bits: 0 = bert (else gpt2),
 * 1 = allow_special, 2 = the payload is ids (16 bits LE each, some beyond
 * the vocabulary) to decode, 3 = the payload is a vocabulary file (bert's
 * vocab.txt, or gpt2's merges.txt beside the committed vocab.json) to load
 * and then encode a fixed text with. Checks: ids below the vocabulary size;
 * GPT-2 decodes its encoding back to the text when no byte was replaced and
 * no special token was allowed; decoding fails exactly when an id is out of
 * range. */
#include "fuzz_util.h"
#include "tokenize/tokenizer.h"

static tok *gpt2, *bert;
static char vocab_root[PATH_MAX];

static tok *load(const char *kind) {
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/%s", vocab_root, kind);
    kf_err err;
    tok *t = tok_load(kind, dir, &err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: %s (run from the repository root, or set KF_FUZZ_VOCAB)\n",
                err.msg);
        exit(2);
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *env = getenv("KF_FUZZ_VOCAB");
    snprintf(vocab_root, sizeof vocab_root, "%s", env ? env : "tests/fuzz/vocab");
    gpt2 = load("gpt2");
    bert = load("bert");
    return 0;
}

static void encode(tok *t, int is_bert, const char *text, size_t n, int allow_special) {
    tok_ids ids = {0};
    int64_t replaced = 0;
    fuzz_check(tok_encode(t, text, n, allow_special, &ids, &replaced) == 0);
    for (size_t i = 0; i < ids.n; i++) fuzz_check(ids.v[i] >= 0 && ids.v[i] < tok_vocab_size(t));
    tok_bytes out = {0};
    kf_err err;
    fuzz_check(tok_decode(t, ids.v, ids.n, &out, &err) == 0);
    if (!is_bert && !allow_special && replaced == 0) {
        int same = out.n == n && (n == 0 || !memcmp(out.v, text, n));
        if (!same)
            fprintf(stderr, "decode(encode(text)) differs: %zu bytes back for %zu\n", out.n, n);
        fuzz_check(same);
    }
    tok_bytes_free(&out);
    tok_ids_free(&ids);
}

static void decode(tok *t, const uint8_t *p, size_t n) {
    size_t count = n / 2;
    int32_t *ids = malloc(count * sizeof *ids + 1);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        ids[i] = (int32_t)((p[2 * i] | p[2 * i + 1] << 8) % (tok_vocab_size(t) + 8));
        if (p[2 * i + 1] == 0xff) ids[i] = -1 - p[2 * i]; /* negative ids too */
        bad |= ids[i] < 0 || ids[i] >= tok_vocab_size(t);
    }
    tok_bytes out = {0};
    kf_err err;
    fuzz_check((tok_decode(t, ids, count, &out, &err) != 0) == bad);
    tok_bytes_free(&out);
    free(ids);
}

static void load_vocab(int is_bert, const uint8_t *p, size_t n) {
    const char *dir = fuzz_dir();
    char src[PATH_MAX + 32], vocab[PATH_MAX];
    kf_err err;
    snprintf(vocab, sizeof vocab, "%s/v", dir);
    if (is_bert) {
        fuzz_write(vocab, "vocab.txt", p, n, NULL, 0);
    } else {
        char *json;
        size_t len;
        snprintf(src, sizeof src, "%s/gpt2/vocab.json", vocab_root);
        fuzz_check(fs_read_file(src, &json, &len, &err) == 0);
        fuzz_write(vocab, "vocab.json", json, len, NULL, 0);
        free(json);
        fuzz_write(vocab, "merges.txt", p, n, NULL, 0);
    }
    tok *t = tok_load_dir(vocab, &err);
    if (!t) return;
    static const char text[] =
        "Hello, world! The tokenizer's caf\xc3\xa9 na\xc3\xafve [CLS] <|endoftext|> 123\n";
    encode(t, is_bert, text, sizeof text - 1, 1);
    encode(t, is_bert, text, sizeof text - 1, 0);
    tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0], is_bert = mode & 1;
    tok *t = is_bert ? bert : gpt2;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (mode & 8) load_vocab(is_bert, p, n);
    else if (mode & 4) decode(t, p, n);
    else encode(t, is_bert, (const char *)p, n, mode & 2);
    return 0;
}
