/* tests/fuzz/fuzz_detok.c — the MDLM detokenisers detok_lm1b and
 * detok_wikitext (tokenize/detok.c). Input: the text; both run on it, each
 * appending to a buffer that already holds a marker, which must stay in
 * front (they append, never overwrite). */
#include "fuzz_util.h"
#include "tokenize/tokenizer.h"

static void run(void (*detok)(const char *, size_t, tok_bytes *), const uint8_t *data,
                size_t size) {
    tok_bytes out = {0};
    tok_bytes_append(&out, "MARK", 4);
    detok((const char *)data, size, &out);
    fuzz_check(out.n >= 4 && !memcmp(out.v, "MARK", 4));
    tok_bytes_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run(detok_lm1b, data, size);
    run(detok_wikitext, data, size);
    return 0;
}
