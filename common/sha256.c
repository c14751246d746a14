/* common/sha256.c — SHA-256 per FIPS 180-4: padding and streaming here, the
 * block function portable (below) or on the SHA extensions (sha256_shani.c).
 *
 * Kept rather than OpenSSL's libcrypto because of the short messages the
 * shards hash (a sample's ids, a few hundred bytes, at every write and
 * verify): bench/bench_libs.c, both sides in one run on a loaded 2-core Xeon
 * with SHA-NI, median of 7 alternating rounds: 200,000 messages of 256 bytes
 * take 2.6x as long through libcrypto's EVP digest (one context reused; its
 * per-message init is the cost) as here; one 64 MiB buffer takes the same
 * time on both (1.00x: both run SHA-NI). */
#include "common/sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sha256_blocks.h"

const uint32_t sha256_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 =
            hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + sha256_K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

void sha256_blocks_portable(uint32_t h[8], const uint8_t *p, size_t nblocks) {
    for (; nblocks; nblocks--, p += 64) compress(h, p);
}

typedef void (*blocks_fn)(uint32_t h[8], const uint8_t *p, size_t nblocks);

/* Chosen on first use; every thread that races here stores the same value. */
static blocks_fn blocks(void) {
    static blocks_fn fn;
    blocks_fn f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
    if (!f) {
        f = sha256_shani_available() ? sha256_blocks_shani : sha256_blocks_portable;
        __atomic_store_n(&fn, f, __ATOMIC_RELAXED);
    }
    return f;
}

void sha256_init(sha256_ctx *c) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, H0, sizeof H0);
    c->nbytes = 0;
    c->nbuf = 0;
}

void sha256_update(sha256_ctx *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->nbytes += n;
    if (c->nbuf) {
        size_t take = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, take);
        c->nbuf += take;
        p += take;
        n -= take;
        if (c->nbuf < 64) return;
        blocks()(c->h, c->buf, 1);
        c->nbuf = 0;
    }
    if (n >= 64) {
        blocks()(c->h, p, n / 64);
        p += n / 64 * 64;
        n %= 64;
    }
    if (n) memcpy(c->buf, p, n);
    c->nbuf = n;
}

void sha256_final(sha256_ctx *c, uint8_t out[32]) {
    uint64_t bits = c->nbytes * 8;
    uint8_t pad[72] = {0x80};
    size_t npad = (c->nbuf < 56 ? 56 : 120) - c->nbuf;
    for (int i = 0; i < 8; i++) pad[npad + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(c, pad, npad + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void sha256_to_hex(const uint8_t d[32], char out[65]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = 0;
}

void sha256_hex(const void *p, size_t n, char out[65]) {
    sha256_ctx c;
    uint8_t d[32];
    sha256_init(&c);
    sha256_update(&c, p, n);
    sha256_final(&c, d);
    sha256_to_hex(d, out);
}

int sha256_file_hex(const char *path, char out[65], kf_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return kf_err_set(err, "%s: %s", path, strerror(errno));
    sha256_ctx c;
    sha256_init(&c);
    enum { BLOCK = 1 << 16 };
    uint8_t *buf = kf_malloc(BLOCK);
    size_t n;
    while ((n = fread(buf, 1, BLOCK, f)) > 0) sha256_update(&c, buf, n);
    int bad = ferror(f);
    int e = errno;
    fclose(f);
    free(buf);
    if (bad) return kf_err_set(err, "%s: read error: %s", path, strerror(e));
    uint8_t d[32];
    sha256_final(&c, d);
    sha256_to_hex(d, out);
    return 0;
}
