/* SHA-256 against the FIPS 180-4 example vectors, streaming in odd-sized
 * pieces, against the system's sha256sum on a file, and the SHA-extension
 * block function against the portable one. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sha256.h"
#include "common/sha256_blocks.h"
#include "tests/test.h"

int main(void) {
    char hex[65];
    sha256_hex("abc", 3, hex);
    T_CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            "abc: %s", hex);
    sha256_hex("", 0, hex);
    T_CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            "empty: %s", hex);
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(m448, strlen(m448), hex);
    T_CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
            "448-bit: %s", hex);
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjkl"
                       "mnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    sha256_hex(m896, strlen(m896), hex);
    T_CHECK(!strcmp(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
            "896-bit: %s", hex);

    /* A million 'a', fed in pieces of varying size to exercise buffering. */
    size_t N = 1000000;
    char *a = malloc(N);
    memset(a, 'a', N);
    sha256_ctx c;
    uint8_t d[32];
    sha256_init(&c);
    for (size_t off = 0, step = 1; off < N; off += step, step = step * 7 % 1013 + 1)
        sha256_update(&c, a + off, off + step > N ? N - off : step);
    sha256_final(&c, d);
    sha256_to_hex(d, hex);
    T_CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
            "million a: %s", hex);

    /* Every length 0..200 streamed byte by byte equals one-shot. */
    int same = 1;
    for (size_t n = 0; n <= 200; n++) {
        char one[65], two[65];
        sha256_hex(a, n, one);
        sha256_init(&c);
        for (size_t i = 0; i < n; i++) sha256_update(&c, a + i, 1);
        sha256_final(&c, d);
        sha256_to_hex(d, two);
        same &= !strcmp(one, two);
    }
    T_CHECK(same, "byte-by-byte streaming differs from one-shot");

    /* A file with pseudo-random bytes vs sha256sum. */
    char path[] = "/tmp/kf_test_sha256_XXXXXX";
    int fd = mkstemp(path);
    T_REQUIRE(fd >= 0, "mkstemp");
    uint32_t x = 12345;
    for (size_t i = 0; i < 300000; i++) {
        x = x * 1664525u + 1013904223u;
        a[i] = (char)(x >> 24);
    }
    T_EQ_INT(write(fd, a, 300000), 300000, "write");
    close(fd);
    kf_err err = {{0}};
    T_EQ_INT(sha256_file_hex(path, hex, &err), 0, "sha256_file_hex: %s", err.msg);
    char cmd[256], want[65] = {0};
    snprintf(cmd, sizeof cmd, "sha256sum %s", path);
    FILE *p = popen(cmd, "r");
    T_CHECK(p, "sha256sum did not run");
    if (p) {
        T_EQ_INT(fscanf(p, "%64s", want), 1, "sha256sum did not run");
    }
    if (p) pclose(p);
    T_CHECK(!strcmp(hex, want), "file: %s, sha256sum: %s", hex, want);
    unlink(path);
    T_EQ_INT(sha256_file_hex(path, hex, &err), -1, "missing file error: %s", err.msg);
    T_CHECK(strstr(err.msg, path), "missing file error: %s", err.msg);

    /* Both block functions on pseudo-random blocks and chaining values, run
     * 1..64 blocks at a time (the vectors above went through the faster one). */
    if (sha256_shani_available()) {
        int agree = 1;
        for (size_t nb = 1; nb <= 64 && agree; nb++) {
            uint32_t h1[8], h2[8];
            for (int i = 0; i < 8; i++) {
                x = x * 1664525u + 1013904223u;
                h1[i] = h2[i] = x;
            }
            size_t off = (nb * 977) % (300000 - 64 * 64);
            sha256_blocks_portable(h1, (const uint8_t *)a + off, nb);
            sha256_blocks_shani(h2, (const uint8_t *)a + off, nb);
            agree &= !memcmp(h1, h2, sizeof h1);
        }
        T_CHECK(agree, "sha256_blocks_shani differs from sha256_blocks_portable");
    } else {
        printf(
            "note: this CPU has no SHA extensions; only the portable block function was tested\n");
    }
    free(a);
    return T_DONE();
}
