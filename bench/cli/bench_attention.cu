/* bench/cli/bench_attention.cu — `kf bench attention`: throughput of
 * the fused attention kernels for causal attention over N tokens and for the
 * K-Forcing SingleForward(k) structure (N context + N*k noise tokens), and
 * the time of SingleForward(k) relative to causal attention.
 *
 * FLOPs are counted over the (query, key) pairs the structure makes visible
 * (what the kernels have to compute), the usual flash-attention convention:
 * forward 4*D per pair (QK^T and PV), backward 10*D per pair (2.5 x forward).
 * Timed with CUDA events on the backend's stream after warm-up; the median of
 * the timed repetitions is reported.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "commands.h"
#include "common/cli.h"
}

#include "kernels/cuda/cuda_attention_tc.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"

/* Visible pairs of one sample and head under the structure. */
static double visible_pairs(int64_t N, int64_t k) {
    double p = (double)N * (N + 1) / 2; /* context, causal */
    for (int64_t g = 0; g < N && k > 0; g++) p += (double)k * (g + 1) + (double)k * (k + 1) / 2;
    return p;
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    float fwd_ms, bwd_ms;
} timing;

static timing time_case(kf_backend *b, const kf_mask *m, int64_t B, int64_t nh, int64_t D,
                        int iters) {
    int64_t L = kf_mask_len(m), H = nh * D;
    float *qkv = (float *)b->alloc(b, (size_t)(B * L * 3 * H) * sizeof(float));
    float *out = (float *)b->alloc(b, (size_t)(B * L * H) * sizeof(float));
    float *dout = (float *)b->alloc(b, (size_t)(B * L * H) * sizeof(float));
    float *lse = (float *)b->alloc(b, (size_t)(B * nh * L) * sizeof(float));
    float *dqkv = (float *)b->alloc(b, (size_t)(B * L * 3 * H) * sizeof(float));
    /* random inputs: a scaled copy of the GEMM-free pseudo-random pattern below */
    size_t nq = (size_t)(B * L * 3 * H);
    float *h = (float *)malloc(nq * sizeof(float));
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < nq; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    b->upload(b, qkv, h, nq * sizeof(float));
    b->upload(b, dout, h, (size_t)(B * L * H) * sizeof(float));
    free(h);
    cudaStream_t st = (cudaStream_t)kernels_cuda_stream(b);
    cudaEvent_t e0, e1, e2;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaEventCreate(&e2));
    float *tf = (float *)malloc((size_t)iters * sizeof(float)),
          *tb = (float *)malloc((size_t)iters * sizeof(float));
    for (int it = -2; it < iters; it++) { /* two warm-up rounds */
        CUDA_OK(cudaEventRecord(e0, st));
        b->attn_fwd(b, out, lse, qkv, m, B, nh, D, NULL, NULL);
        CUDA_OK(cudaEventRecord(e1, st));
        b->attn_bwd(b, dqkv, dout, out, lse, qkv, m, B, nh, D, NULL, NULL, NULL, NULL);
        CUDA_OK(cudaEventRecord(e2, st));
        CUDA_OK(cudaEventSynchronize(e2));
        if (it < 0) continue;
        CUDA_OK(cudaEventElapsedTime(&tf[it], e0, e1));
        CUDA_OK(cudaEventElapsedTime(&tb[it], e1, e2));
    }
    qsort(tf, (size_t)iters, sizeof(float), cmp_f);
    qsort(tb, (size_t)iters, sizeof(float), cmp_f);
    timing t = {tf[iters / 2], tb[iters / 2]};
    free(tf), free(tb);
    cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2);
    b->free(b, qkv), b->free(b, out), b->free(b, dout), b->free(b, lse), b->free(b, dqkv);
    return t;
}

static const char usage[] =
    "usage: kf bench attention [--n N] [--batch B] [--heads H] [--head-dim D]\n"
    "                          [--iters I] [--fp32 | --bf16] [--simt] [--max-k K]\n"
    "Times the CUDA attention kernels (forward and backward) for causal attention\n"
    "over N tokens and for SingleForward(k), k = 1, 2, 4 ... max-k (N context +\n"
    "N*k noise tokens), and prints TFLOP/s over the visible (query, key) pairs and\n"
    "the time of SingleForward(k) relative to causal attention.\n"
    "The fp16 and bf16 phases run on the tensor-core kernels; --simt runs them on\n"
    "the SIMT kernels (as KF_CUDA_TC=0).\n"
    "Defaults: N=1024, B=8, H=12, D=64, I=10, fp16 phase, max-k 4.\n";

/* An option table entry (this file is C++: no designated initialisers). */
static cli_opt cli_option(const char *name, cli_kind kind, void *out, double lo = 0,
                          double hi = 0) {
    cli_opt o = {};
    o.name = name, o.kind = kind, o.out = out, o.lo = lo, o.hi = hi;
    return o;
}

extern "C" int bench_attention_main(int argc, char **argv) {
    int64_t N = 1024, B = 8, nh = 12, D = 64, max_k = 4, iters = 10;
    bool fp32 = false, bf16 = false, simt_flag = false;
    const cli_opt opts[] = {cli_option("--n", CLI_INT, &N, 1, INFINITY),
                            cli_option("--batch", CLI_INT, &B, 1, INFINITY),
                            cli_option("--heads", CLI_INT, &nh, 1, INFINITY),
                            cli_option("--head-dim", CLI_INT, &D, 1, INFINITY),
                            cli_option("--iters", CLI_INT, &iters, 1, 1e6),
                            cli_option("--max-k", CLI_INT, &max_k, 1, INFINITY),
                            cli_option("--fp32", CLI_FLAG, &fp32),
                            cli_option("--bf16", CLI_FLAG, &bf16),
                            cli_option("--simt", CLI_FLAG, &simt_flag),
                            cli_option(NULL, CLI_FLAG, NULL)};
    cli_spec spec = {};
    spec.cmd = "kf bench attention";
    spec.usage = usage;
    spec.opts = opts;
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (fp32 && bf16) {
        fprintf(stderr, "kf bench attention: --fp32 and --bf16 exclude each other\n");
        return KF_EXIT_USAGE;
    }
    kf_precision prec = fp32 ? KF_PREC_FP32 : bf16 ? KF_PREC_BF16 : KF_PREC_FP16;
    int simt = simt_flag;
    char msg[256] = "";
    kf_backend *b = kernels_cuda_create(0, msg, sizeof msg);
    if (!b) {
        fprintf(stderr, "kf bench attention: needs the CUDA backend: %s\n", msg);
        return 1;
    }
    b->set_precision(b, prec);
    if (simt) cu_impl(b)->attn_tc.on = 0;
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, kernels_cuda_device(b)));
    printf("attention on %s: B=%lld heads=%lld head_dim=%lld N=%lld, %s phase%s, median of %d\n",
           prop.name, (long long)B, (long long)nh, (long long)D, (long long)N,
           kernels_precision_name(prec),
           attn_tc_supported(b, D) ? " (tensor cores)" : " (fp32 SIMT kernels)", (int)iters);
    printf("%-22s %8s %9s %9s %9s %9s %9s %10s\n", "structure", "tokens", "fwd ms", "bwd ms",
           "fwd TF/s", "bwd TF/s", "all TF/s", "time/causal");
    double causal_ms = 0;
    for (int64_t k = 0; k <= max_k; k = k ? 2 * k : 1) {
        kf_mask m = {N, k, k ? N : 0, 0, NULL, NULL, 0};
        timing t = time_case(b, &m, B, nh, D, (int)iters);
        double pairs = visible_pairs(N, k) * (double)(B * nh);
        double ff = 4.0 * D * pairs, fb = 10.0 * D * pairs;
        double all = t.fwd_ms + t.bwd_ms;
        if (k == 0) causal_ms = all;
        char name[64];
        if (k == 0) snprintf(name, sizeof name, "causal");
        else snprintf(name, sizeof name, "SingleForward k=%lld", (long long)k);
        printf("%-22s %8lld %9.3f %9.3f %9.2f %9.2f %9.2f %10.2f\n", name,
               (long long)kf_mask_len(&m), t.fwd_ms, t.bwd_ms, ff / t.fwd_ms / 1e9,
               fb / t.bwd_ms / 1e9, (ff + fb) / all / 1e9, all / causal_ms);
        fflush(stdout);
    }
    printf("(dense attention over the same tokens would cost (k+1)^2 x causal; O(k) means ~(k+1) "
           "x)\n");
    b->destroy(b);
    return 0;
}
