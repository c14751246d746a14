/* tests/unit/test_cuda_limits.c — CUDA ops at sizes past a launch limit: a
 * grid's y and z dimensions stop at 65535 blocks, so an op that put the batch
 * there failed to launch for larger batches. Compared with the CPU backend.
 *
 * Needs a GPU (make test-cuda) or the CPU emulation harness, which checks the
 * limits as the hardware does (tests/scripts/test_gpu_emu.sh runs it once:
 * 65536 emulated blocks take seconds).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/test.h"

/* attn_decode with 65536 samples of one query over a one-row cache: each
 * output row is that sample's v row, on both backends. */
static void decode_many_samples(kf_backend *cpu, kf_backend *gpu) {
    const int64_t B = 65536, cap = 1, P = 0, Q = 1, nh = 1, D = 16, H = nh * D;
    size_t bytes = (size_t)(B * H) * sizeof(float);
    float *h = malloc(bytes), *out[2];
    kf_backend *be[2] = {cpu, gpu};
    for (int64_t i = 0; i < B * H; i++) h[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int s = 0; s < 2; s++) {
        kf_backend *b = be[s];
        float *q = b->alloc(b, bytes), *kc = b->alloc(b, bytes), *vc = b->alloc(b, bytes);
        float *o = b->alloc(b, bytes);
        b->upload(b, q, h, bytes);
        b->upload(b, kc, h, bytes);
        b->upload(b, vc, h, bytes);
        b->attn_decode(b, o, q, H, kc, vc, B, cap, P, Q, nh, D);
        out[s] = malloc(bytes);
        b->download(b, out[s], o, bytes);
        b->free(b, q), b->free(b, kc), b->free(b, vc), b->free(b, o);
    }
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < B * H; i++)
        if (memcmp(&out[0][i], &out[1][i], sizeof(float))) bad++, first = first < 0 ? i : first;
    printf("attn_decode, %lld samples: %lld of %lld outputs differ from the cpu\n", (long long)B,
           (long long)bad, (long long)(B * H));
    T_CHECK(bad == 0, "attn_decode, %lld samples: got %lld outputs unlike the cpu's (first %lld: "
            "%.9g vs %.9g), want 0", (long long)B, (long long)bad, (long long)first,
            first < 0 ? 0.0 : out[1][first], first < 0 ? 0.0 : out[0][first]);
    free(h), free(out[0]), free(out[1]);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps every line printed before it */
    char msg[256] = "";
    kf_backend *cpu = kernels_cpu_create(), *gpu = kernels_cuda_create(0, msg, sizeof msg);
    T_CHECK(gpu != NULL, "no CUDA backend: %s", msg);
    if (!gpu) return T_DONE();
    decode_many_samples(cpu, gpu);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    return T_DONE();
}
