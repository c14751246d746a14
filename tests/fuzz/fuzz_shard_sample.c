/* tests/fuzz/fuzz_shard_sample.c — the sample decoder shard_value_decode
 * (pipeline/shard_format.h), which turns a stored shard value into ids.
 *
 * Input: 8 bytes of format (vocab_size: 31 bits LE, seq_len: 2 bytes LE, mod
 * 4096, plus 1; packing: wrap or pad by the low bit of byte 6), then the
 * value; inputs shorter than a value are padded with zeros, as the reader
 * only hands over values of exactly shard_value_bytes. An accepted value has
 * every id below vocab_size and, in pad mode, a length of at most seq_len;
 * a rejected one does not. */
#include "fuzz_util.h"
#include "pipeline/shard_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    shard_meta m;
    memset(&m, 0, sizeof m);
    m.vocab_size =
        (int64_t)(data[0] | data[1] << 8 | data[2] << 16 | (uint32_t)(data[3] & 0x7f) << 24);
    if (m.vocab_size <= 0) return 0;
    m.seq_len = (int32_t)((data[4] | data[5] << 8) % 4096) + 1;
    snprintf(m.packing, sizeof m.packing, "%s", data[6] & 1 ? "pad" : "wrap");
    m.id_bytes = shard_id_bytes(m.vocab_size);
    size_t need = shard_value_bytes(m.seq_len, m.id_bytes, m.packing);
    uint8_t *value = calloc(need, 1);
    memcpy(value, data + 8, size - 8 < need ? size - 8 : need);
    int32_t *ids = malloc((size_t)m.seq_len * sizeof *ids), len = -1;
    const char *bad = shard_value_decode(value, &m, ids, &len);
    fuzz_check((bad == NULL) == (shard_value_check(value, &m) == NULL));
    uint32_t max = shard_ids_get(value, m.seq_len, m.id_bytes, NULL);
    if (!bad) {
        fuzz_check(len >= 0 && len <= m.seq_len);
        for (int32_t i = 0; i < m.seq_len; i++) fuzz_check(ids[i] >= 0 && ids[i] < m.vocab_size);
        fuzz_check(max < (uint64_t)m.vocab_size);
        /* re-encoding the ids gives the stored bytes back */
        uint8_t *again = calloc(need, 1);
        shard_ids_put(again, ids, m.seq_len, m.id_bytes);
        fuzz_check(!memcmp(again, value, (size_t)m.seq_len * m.id_bytes));
        free(again);
    } else {
        fuzz_check(max >= (uint64_t)m.vocab_size || !strcmp(m.packing, "pad"));
    }
    free(ids);
    free(value);
    return 0;
}
