/* bench/roofline/decode_limits.h — the CPU roofline of a decoding run: the
 * machine's limits measured in the benchmark's own process (read bandwidth,
 * the fixed GEMM's FLOP/s) and a run's time at those limits, step by step.
 * `kf bench decode` prints each method's tokens/s as a fraction of it. */
#ifndef KF_BENCH_ROOFLINE_DECODE_LIMITS_H
#define KF_BENCH_ROOFLINE_DECODE_LIMITS_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "trainer/model/model.h"

/** What the CPU gives the benchmark's threads (OMP_NUM_THREADS), measured
 *  now by `now` (a clock of common/clock.h): bytes/s of a streaming read
 *  of 512 MiB, the same read on one thread in turns with it
 *  (read_bw1: what more threads add to the bandwidth, under the same load),
 *  each read at the SIMD level the kernels run at with a prefetch 4 KiB
 *  ahead on huge pages, as the decode kernels stream their weights (best of
 *  5), and FLOP/s of b's matmul at 512^3 in fp32 whatever b's precision
 *  (the decode kernels accumulate 16-bit weights in fp32; best of 10),
 *  also on one thread in turns with it (gemm_flops1). */
typedef struct decode_limits {
    double read_bw, read_bw1, gemm_flops, gemm_flops1;
} decode_limits;
void decode_limits_measure(kf_backend *b, double (*now)(void), decode_limits *out);

/** Seconds decode_run (trainer/infer/decode.h) needs at the limits l to
 *  complete B prefixes of P tokens by N tokens, k per step (AR: model kind
 *  AR, k 1): the sum over its steps (the prefill, then one per k tokens) of
 *  max(bytes read / read_bw, FLOPs / gemm_flops). Bytes: every linear
 *  weight (bf16 halves them), the K/V cache, and the output layer: fp32
 *  logits, or with `screen` (the fused argmax: PFLM without a frequency
 *  penalty) its int8 copy, whose dot products count a quarter of fp32's. */
double decode_roofline_s(const model *m, int64_t B, int64_t P, int64_t N, int64_t k,
                         kf_precision prec, int screen, const decode_limits *l);

#endif
