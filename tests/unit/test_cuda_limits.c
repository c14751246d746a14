/* tests/unit/test_cuda_limits.c — CUDA ops at sizes past a launch limit: a
 * grid's y and z dimensions stop at 65535 blocks, so an op that put the batch
 * there failed to launch for larger batches. Compared with the CPU backend.
 * And the checks the backend makes on the device instead of stopping the
 * host (embed_bwd's token ids): a bad id ends the program at the next host
 * wait, naming the op (in a child process, forked before this one touches
 * the GPU). Likewise a host wait or an upload between graph_begin and
 * graph_end (kernels.h), which the capture cannot hold.
 *
 * Needs a GPU (make test-cuda) or the CPU emulation harness, which checks the
 * limits as the hardware does (tests/scripts/test_gpu_emu.sh runs it once:
 * 65536 emulated blocks take seconds).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
        b->attn_decode(b, o, q, H, kc, vc, B, cap, P, NULL, Q, nh, D);
        out[s] = malloc(bytes);
        b->download(b, out[s], o, bytes);
        b->free(b, q), b->free(b, kc), b->free(b, vc), b->free(b, o);
    }
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < B * H; i++)
        if (memcmp(&out[0][i], &out[1][i], sizeof(float))) bad++, first = first < 0 ? i : first;
    printf("attn_decode, %lld samples: %lld of %lld outputs differ from the cpu\n", (long long)B,
           (long long)bad, (long long)(B * H));
    T_EQ_INT(bad, 0,
             "attn_decode, %lld samples: got %lld outputs unlike the cpu's (first %lld: "
             "%.9g vs %.9g), want 0",
             (long long)B, (long long)bad, (long long)first, first < 0 ? 0.0 : out[1][first],
             first < 0 ? 0.0 : out[0][first]);
    free(h), free(out[0]), free(out[1]);
}

/* Runs body on a fresh CUDA backend in a child process (forked before this
 * one touches the GPU); returns its exit status (3: no backend) with its
 * stderr in out. */
static int in_child(void (*body)(kf_backend *), char *out, size_t cap) {
    int fd[2];
    T_REQUIRE(pipe(fd) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        char msg[256] = "";
        kf_backend *g = kernels_cuda_create(0, msg, sizeof msg);
        if (!g) _exit(3);
        body(g);
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < cap && (r = read(fd[0], out + len, cap - 1 - len)) > 0) len += (size_t)r;
    out[len] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* embed_bwd with token id 7 of a vocabulary of 5, then b->sync: the op
 * returns (the check runs on the device), the sync dies with its message. */
static void embed_bad_id(kf_backend *g) {
    const int32_t ids[4] = {1, 2, 7, 3};
    float dout[4 * 8];
    for (int i = 0; i < 4 * 8; i++) dout[i] = (float)i;
    float *tab = g->alloc(g, 5 * 8 * sizeof(float)), *dd = g->alloc(g, sizeof dout);
    int32_t *id = g->alloc(g, sizeof ids);
    g->upload(g, dd, dout, sizeof dout);
    g->upload(g, id, ids, sizeof ids);
    g->embed_bwd(g, tab, dd, id, NULL, 4, 8, 5);
    fputs("embed_bwd returned\n", stderr);
    g->sync(g);
}

static void embed_bad_id_dies(void) {
    char out[4096] = "";
    int code = in_child(embed_bad_id, out, sizeof out);
    printf("embed_bwd with an id outside the vocabulary: exit %d, stderr: %s", code, out);
    T_CHECK(code != 0, "embed_bwd, bad id: got exit 0, want a failure");
    T_CHECK(code != 3, "embed_bwd, bad id: got exit 3 (no backend), want the op's failure");
    T_CHECK(strstr(out, "embed_bwd returned") != NULL,
            "embed_bwd, bad id: got '%s', want the op to return before the check is reported", out);
    T_CHECK(strstr(out, "embed_bwd: a token id lies outside [0, vocab)") != NULL,
            "embed_bwd, bad id: got '%s', want the sync to name embed_bwd", out);
}

/* Between graph_begin and graph_end (kernels.h) only device work: a host
 * wait fails the capture, as CUDA refuses it; an upload dies before the
 * capture would keep the address of its staging memory. */
static void graph_sync(kf_backend *g) {
    float *x = g->alloc(g, 64 * sizeof(float));
    g->graph_begin(g);
    g->scale(g, x, 2.0f, 64);
    g->sync(g);
    fputs("sync returned\n", stderr);
}
static void graph_upload(kf_backend *g) {
    float h[64] = {0}, *x = g->alloc(g, sizeof h);
    g->graph_begin(g);
    g->upload(g, x, h, sizeof h);
    fputs("upload returned\n", stderr);
}

static void graph_refusals(void) {
    struct {
        void (*body)(kf_backend *);
        const char *what, *want;
    } cases[] = {
        {graph_sync, "sync in a graph", "operation not permitted when stream is capturing"},
        {graph_upload, "upload in a graph", "an upload between graph_begin and graph_end"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[4096] = "";
        int code = in_child(cases[i].body, out, sizeof out);
        printf("%s: exit %d, stderr: %s", cases[i].what, code, out);
        T_CHECK(code != 0 && code != 3, "%s: got exit %d, want the backend to die", cases[i].what,
                code);
        T_CHECK(strstr(out, cases[i].want) != NULL, "%s: got '%s', want '%s'", cases[i].what, out,
                cases[i].want);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps every line printed before it */
    embed_bad_id_dies();
    graph_refusals();
    char msg[256] = "";
    kf_backend *cpu = kernels_cpu_create(), *gpu = kernels_cuda_create(0, msg, sizeof msg);
    T_CHECK(gpu != NULL, "no CUDA backend: %s", msg);
    if (!gpu) return T_DONE();
    decode_many_samples(cpu, gpu);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    return T_DONE();
}
