/* safetensors: exact bytes of a written file, round trip of every dtype
 * (scalars and empty tensors included), a header in the reference writer's
 * style, and a clear error for each kind of corruption. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/safetensors.h"
#include "tests/test.h"

/* A file written by the reference implementation (Python safetensors 0.8.0,
 * torch 2.11: save_file of i.i64 [-5, 6], s.scalar 2.5 (F64, shape []),
 * e.empty zeros(0, 3), m.f32 arange(12).reshape(3, 4) / 8, z.bf16
 * [1.5, -2.5, 3], a.f16 [[0.5, 1], [2, -4]], u.u8 [1, 2, 3]; metadata
 * {format: pt, k: v}). Our writer's output was in turn loaded by
 * safetensors.torch.load_file with every value intact (checked by hand on the
 * GPU machine, which has PyTorch). */
static const unsigned char HF_FILE[] = {
    0xd0, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x5f, 0x5f, 0x6d, 0x65, 0x74, 0x61,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x7b, 0x22, 0x66, 0x6f, 0x72, 0x6d, 0x61, 0x74,
    0x22, 0x3a, 0x22, 0x70, 0x74, 0x22, 0x2c, 0x22, 0x6b, 0x22, 0x3a, 0x22, 0x76, 0x22, 0x7d, 0x2c,
    0x22, 0x69, 0x2e, 0x69, 0x36, 0x34, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22,
    0x3a, 0x22, 0x49, 0x36, 0x34, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b,
    0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73,
    0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x31, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x73, 0x2e, 0x73, 0x63, 0x61,
    0x6c, 0x61, 0x72, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46,
    0x36, 0x34, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x5d, 0x2c, 0x22,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31,
    0x36, 0x2c, 0x32, 0x34, 0x5d, 0x7d, 0x2c, 0x22, 0x65, 0x2e, 0x65, 0x6d, 0x70, 0x74, 0x79, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32, 0x22, 0x2c,
    0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x33, 0x5d, 0x2c, 0x22, 0x64,
    0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x34,
    0x2c, 0x32, 0x34, 0x5d, 0x7d, 0x2c, 0x22, 0x6d, 0x2e, 0x66, 0x33, 0x32, 0x22, 0x3a, 0x7b, 0x22,
    0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68,
    0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x2c, 0x34, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61,
    0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x34, 0x2c, 0x37, 0x32,
    0x5d, 0x7d, 0x2c, 0x22, 0x7a, 0x2e, 0x62, 0x66, 0x31, 0x36, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74,
    0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x42, 0x46, 0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61,
    0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66,
    0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x37, 0x32, 0x2c, 0x37, 0x38, 0x5d, 0x7d, 0x2c,
    0x22, 0x61, 0x2e, 0x66, 0x31, 0x36, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22,
    0x3a, 0x22, 0x46, 0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b,
    0x32, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65,
    0x74, 0x73, 0x22, 0x3a, 0x5b, 0x37, 0x38, 0x2c, 0x38, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x75, 0x2e,
    0x75, 0x38, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x55, 0x38,
    0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x5d, 0x2c, 0x22, 0x64,
    0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x38, 0x36,
    0x2c, 0x38, 0x39, 0x5d, 0x7d, 0x7d, 0x20, 0x20, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3e, 0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0xc0, 0x3e,
    0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x20, 0x3f, 0x00, 0x00, 0x40, 0x3f, 0x00, 0x00, 0x60, 0x3f,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x90, 0x3f, 0x00, 0x00, 0xa0, 0x3f, 0x00, 0x00, 0xb0, 0x3f,
    0xc0, 0x3f, 0x20, 0xc0, 0x40, 0x40, 0x00, 0x38, 0x00, 0x3c, 0x00, 0x40, 0x00, 0xc4, 0x01, 0x02,
    0x03};

static char dir[] = "/tmp/kf_test_st_XXXXXX";
static char path[600];
static kf_err err;

/* Writes 8-byte LE length + header + ndata bytes of data (value i & 255). */
static void craft(const char *header, size_t ndata) {
    size_t hn = strlen(header);
    char *b = malloc(8 + hn + ndata + 1);
    for (int i = 0; i < 8; i++) b[i] = (char)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, header, hn);
    for (size_t i = 0; i < ndata; i++) b[8 + hn + i] = (char)i;
    fs_write_atomic(path, b, 8 + hn + ndata, &err);
    free(b);
}

static void expect_error(const char *header, size_t ndata, const char *want) {
    craft(header, ndata);
    safetensors_file *f = NULL;
    err.msg[0] = 0;
    int rc = safetensors_open(path, &f, &err);
    T_EQ_INT(rc, -1, "header %s\n  got  '%s'\n  want '...%s...'", header, err.msg, want);
    T_EQ_INT(f, NULL, "header %s\n  got  '%s'\n  want '...%s...'", header, err.msg, want);
    T_CHECK(strstr(err.msg, want), "header %s\n  got  '%s'\n  want '...%s...'", header, err.msg,
            want);
    T_CHECK(strstr(err.msg, path), "header %s\n  got  '%s'\n  want '...%s...'", header, err.msg,
            want);
}

int main(void) {
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/m.safetensors", dir);

    /* A small file, byte for byte. */
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    safetensors_writer *wr = safetensors_writer_new();
    safetensors_add(wr, "w", ST_F32, 2, shape, w);
    safetensors_set_meta(wr, "format", "pt");
    T_EQ_INT(safetensors_write(wr, path, &err), 0, "write: %s", err.msg);
    safetensors_writer_free(wr);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,"
                      "3],\"data_offsets\":[0,24]}}";
    size_t hn = (strlen(hdr) + 7) / 8 * 8;
    char *buf;
    size_t len;
    fs_read_file(path, &buf, &len, &err);
    T_EQ_INT(len, 8 + hn + 24, "file size %zu want %zu", len, 8 + hn + 24);
    uint64_t got_hn = 0;
    for (int i = 0; i < 8; i++) got_hn |= (uint64_t)(unsigned char)buf[i] << (8 * i);
    T_EQ_INT(got_hn, hn, "header bytes: %.*s", (int)hn, buf + 8);
    T_CHECK(!memcmp(buf + 8, hdr, strlen(hdr)), "header bytes: %.*s", (int)hn, buf + 8);
    int spaces = 1;
    for (size_t i = strlen(hdr); i < hn; i++) spaces &= buf[8 + i] == ' ';
    T_CHECK(spaces, "padding or data wrong");
    T_CHECK(!memcmp(buf + 8 + hn, w, 24), "padding or data wrong");
    free(buf);

    /* Every dtype, a scalar, an empty tensor, awkward names and metadata. */
    double f64[3] = {1.5, -2.25, 1e300};
    _Float16 f16[4] = {1.5f16, -2.0f16, 0.099975586f16, 65504.0f16};
    uint16_t bf16[2] = {0x3fc0, 0xc020}; /* 1.5, -2.5 */
    int64_t i64[2] = {INT64_MIN, 7};
    int32_t i32[1] = {-3};
    uint8_t u8[5] = {0, 1, 2, 254, 255};
    int64_t s3[1] = {3}, s4[2] = {2, 2}, s2[1] = {2}, s5[3] = {1, 5, 1}, s0[2] = {0, 4};
    wr = safetensors_writer_new();
    safetensors_add(wr, "a.f64", ST_F64, 1, s3, f64);
    safetensors_add(wr, "b/f16 \"q\"", ST_F16, 2, s4, f16);
    safetensors_add(wr, "c.bf16", ST_BF16, 1, s2, bf16);
    safetensors_add(wr, "d.i64", ST_I64, 1, s2, i64);
    safetensors_add(wr, "e.scalar", ST_I32, 0, NULL, i32);
    safetensors_add(wr, "f.empty", ST_F32, 2, s0, NULL);
    safetensors_add(wr, "g.u8", ST_U8, 3, s5, u8);
    safetensors_set_meta(wr, "k", "v1");
    safetensors_set_meta(wr, "k", "v\n2\\");
    T_EQ_INT(safetensors_write(wr, path, &err), 0, "write: %s", err.msg);
    safetensors_writer_free(wr);
    safetensors_file *f;
    T_EQ_INT(safetensors_open(path, &f, &err), 0, "open: %s", err.msg);
    if (f) {
        T_EQ_INT(f->n, 7, "counts / meta");
        T_EQ_INT(f->nmeta, 1, "counts / meta");
        T_EQ_STR(safetensors_meta(f, "k"), "v\n2\\", "counts / meta");
        const safetensors_tensor *t = safetensors_find(f, "b/f16 \"q\"");
        float out[4];
        T_CHECK(t, "f16 round trip");
        if (t) {
            T_EQ_INT(t->dtype, ST_F16, "f16 round trip");
            T_EQ_INT(t->ndim, 2, "f16 round trip");
            T_EQ_INT(t->numel, 4, "f16 round trip");
            T_EQ_INT(safetensors_read_f32(t, out, &err), 0, "f16 round trip");
            T_NEAR(out[0], 1.5f, 0, "f16 round trip");
            T_NEAR(out[3], 65504.0f, 0, "f16 round trip");
        }
        t = safetensors_find(f, "a.f64");
        T_CHECK(t, "f64");
        if (t) {
            T_CHECK(!memcmp(t->data, f64, 24), "f64");
            T_EQ_INT(safetensors_read_f32(t, out, &err), 0, "f64");
            T_NEAR(out[1], -2.25f, 0, "f64");
        }
        t = safetensors_find(f, "c.bf16");
        T_CHECK(t, "bf16");
        if (t) {
            T_EQ_INT(safetensors_read_f32(t, out, &err), 0, "bf16");
            T_NEAR(out[0], 1.5f, 0, "bf16");
            T_NEAR(out[1], -2.5f, 0, "bf16");
        }
        t = safetensors_find(f, "d.i64");
        T_CHECK(t, "i64");
        if (t) {
            T_CHECK(!memcmp(t->data, i64, 16), "i64");
        }
        T_CHECK(t, "int as float: %s", err.msg);
        if (t) {
            T_EQ_INT(safetensors_read_f32(t, out, &err), -1, "int as float: %s", err.msg);
            T_EQ_STR(err.msg, "tensor 'd.i64': dtype I64 is not a float", "int as float: %s",
                     err.msg);
        }
        t = safetensors_find(f, "e.scalar");
        T_CHECK(t, "scalar");
        if (t) {
            T_EQ_INT(t->ndim, 0, "scalar");
            T_EQ_INT(t->numel, 1, "scalar");
            T_EQ_INT(t->nbytes, 4, "scalar");
            T_EQ_INT(*(const int32_t *)t->data, -3, "scalar");
        }
        t = safetensors_find(f, "f.empty");
        T_CHECK(t, "empty");
        if (t) {
            T_EQ_INT(t->numel, 0, "empty");
            T_EQ_INT(t->nbytes, 0, "empty");
            T_EQ_INT(t->shape[1], 4, "empty");
        }
        t = safetensors_find(f, "g.u8");
        T_CHECK(t, "u8");
        if (t) {
            T_CHECK(!memcmp(t->data, u8, 5), "u8");
            T_EQ_INT(t->shape[1], 5, "u8");
        }
        T_CHECK(!safetensors_find(f, "nope"), "missing lookups");
        T_CHECK(!safetensors_meta(f, "nope"), "missing lookups");
        T_CHECK((uintptr_t)f->tensors[0].data % 8 == 0, "data buffer not 8-aligned");
    }
    safetensors_close(f);

    /* The reference writer's style: spaces, metadata last, tensors out of order. */
    craft("{\"b\": {\"dtype\": \"I32\", \"shape\": [2, 2], \"data_offsets\": [4, 20]}, "
          "\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}, \"__metadata__\": "
          "{\"foo\": \"bar\"}}   ",
          20);
    T_EQ_INT(safetensors_open(path, &f, &err), 0, "reference style: %s", err.msg);
    if (f) {
        T_EQ_INT(f->n, 2, "reference style content");
        T_EQ_STR(f->tensors[0].name, "a", "reference style content");
        T_EQ_STR(safetensors_meta(f, "foo"), "bar", "reference style content");
        T_EQ_INT(((const uint8_t *)safetensors_find(f, "b")->data)[0], 4,
                 "reference style content");
        safetensors_close(f);
    }

    /* The reference implementation's file. */
    fs_write_atomic(path, HF_FILE, sizeof HF_FILE, &err);
    T_EQ_INT(safetensors_open(path, &f, &err), 0, "reference file: %s", err.msg);
    if (f) {
        float m[12], z[3], a[4], sc;
        const safetensors_tensor *ti = safetensors_find(f, "i.i64"),
                                 *tm = safetensors_find(f, "m.f32"),
                                 *tz = safetensors_find(f, "z.bf16"),
                                 *ta = safetensors_find(f, "a.f16"),
                                 *ts = safetensors_find(f, "s.scalar"),
                                 *te = safetensors_find(f, "e.empty"),
                                 *tu = safetensors_find(f, "u.u8");
        int ok = ti && tm && tz && ta && ts && te && tu && f->n == 7 &&
                 !strcmp(safetensors_meta(f, "k"), "v");
        ok = ok && ((const int64_t *)ti->data)[0] == -5 && tm->ndim == 2 && tm->shape[0] == 3 &&
             tm->shape[1] == 4;
        ok = ok && !safetensors_read_f32(tm, m, &err) && m[11] == 11.0f / 8 &&
             !safetensors_read_f32(tz, z, &err) && z[1] == -2.5f && z[2] == 3 &&
             !safetensors_read_f32(ta, a, &err) && a[3] == -4 &&
             !safetensors_read_f32(ts, &sc, &err) && sc == 2.5f && ts->ndim == 0 &&
             te->numel == 0 && te->shape[1] == 3 && ((const uint8_t *)tu->data)[2] == 3;
        T_CHECK(ok, "reference file content differs");
        safetensors_close(f);
    }

    /* Corruptions. */
    const char *ok = "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char h[512];
    snprintf(h, sizeof h, "{%s}", ok);
    expect_error(h, 9, "1 bytes after the last tensor (trailing garbage)");
    expect_error(h, 7, "tensor 'x': data_offsets [0, 8] beyond the 7-byte data (truncated file?)");
    expect_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                 "tensor 'x': shape and dtype need 12 bytes but data_offsets span 8");
    expect_error("{\"x\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                 "tensor 'x': unsupported dtype 'Q8'");
    expect_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                 "tensor 'x': shape[0] is not a non-negative integer");
    expect_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                 "tensor 'x': data_offsets must be");
    expect_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
                 "tensor 'x': missing 'data_offsets'");
    /* names the writer could not write back (found by fuzz_safetensors) */
    expect_error("{\"x\xc8\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                 "a name in the header is not valid UTF-8");
    expect_error("{\"__metadata__\":{\"fo\xc8mat\":\"pt\"}}", 0,
                 "__metadata__ entry 0 is not valid UTF-8");
    expect_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"z\":1}}", 8,
                 "tensor 'x': unknown field 'z'");
    snprintf(h, sizeof h, "{%s,\"y\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", ok);
    expect_error(h, 8, "tensor 'y': starts at 4 but the previous tensor ends at 8 (overlap)");
    snprintf(h, sizeof h, "{%s,\"y\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[12,16]}}",
             ok);
    expect_error(h, 16, "tensor 'y': starts at 12 but the previous tensor ends at 8 (gap)");
    snprintf(h, sizeof h, "{%s,%s}", ok, ok);
    expect_error(h, 8, "'x' appears twice in the header");
    snprintf(h, sizeof h, "{\"__metadata__\":{\"a\":1},%s}", ok);
    expect_error(h, 8, "__metadata__ 'a' is not a string");
    snprintf(h, sizeof h, "{%s", ok);
    expect_error(h, 8, "header JSON: ");
    expect_error("[1]", 0, "header does not start with '{'");
    expect_error("[1]", 0, "not a safetensors file");
    /* Header length beyond the file. */
    fs_write_atomic(path, "\xff\x00\x00\x00\x00\x00\x00\x00{}", 10, &err);
    T_EQ_INT(safetensors_open(path, &f, &err), -1, "length: %s", err.msg);
    T_CHECK(strstr(err.msg, "header length 255 exceeds the file (10 bytes)"), "length: %s",
            err.msg);
    fs_write_atomic(path, "abc", 3, &err);
    T_EQ_INT(safetensors_open(path, &f, &err), -1, "tiny: %s", err.msg);
    T_CHECK(strstr(err.msg, "3 bytes, need at least 8"), "tiny: %s", err.msg);
    unlink(path);
    T_EQ_INT(safetensors_open(path, &f, &err), -1, "missing: %s", err.msg);
    T_CHECK(strstr(err.msg, "No such file"), "missing: %s", err.msg);
    /* An empty header is a valid file with no tensors. */
    craft("{}      ", 0);
    T_EQ_INT(safetensors_open(path, &f, &err), 0, "empty file: %s", err.msg);
    T_EQ_INT(f->n, 0, "empty file: %s", err.msg);
    safetensors_close(f);

    /* F16 reads (portable bit conversion) agree with the compiler's _Float16
     * conversion bit for bit on all 65536 values: subnormals, inf, NaN. */
    static uint16_t all16[65536];
    static float all32[65536];
    for (uint32_t i = 0; i < 65536; i++) all16[i] = (uint16_t)i;
    int64_t n16 = 65536;
    wr = safetensors_writer_new();
    safetensors_add(wr, "h", ST_F16, 1, &n16, all16);
    T_EQ_INT(safetensors_write(wr, path, &err), 0, "write f16: %s", err.msg);
    safetensors_writer_free(wr);
    T_EQ_INT(safetensors_open(path, &f, &err), 0, "open f16: %s", err.msg);
    if (f) {
        T_EQ_INT(safetensors_read_f32(&f->tensors[0], all32, &err), 0, "read f16: %s", err.msg);
        uint32_t first_bad = 65536, got_bits = 0, want_bits = 0;
        for (uint32_t i = 0; i < 65536 && first_bad == 65536; i++) {
            _Float16 h;
            memcpy(&h, &all16[i], 2);
            float want = (float)h;
            if (memcmp(&want, &all32[i], 4)) {
                first_bad = i;
                memcpy(&got_bits, &all32[i], 4);
                memcpy(&want_bits, &want, 4);
            }
        }
        T_EQ_INT(first_bad, 65536, "f16 0x%04x reads as float bits 0x%08x, want 0x%08x", first_bad,
                 got_bits, want_bits);
        safetensors_close(f);
    }
    fs_rm_rf(dir, &err);
    return T_DONE();
}
