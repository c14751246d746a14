/* bench/roofline/decode_limits.h — the CPU roofline of a decoding run: the
 * machine's limits measured in the benchmark's own process (read bandwidth,
 * the fixed GEMM's FLOP/s) and a run's time at those limits, step by step.
 * `kf bench decode` prints each method's tokens/s as a fraction of it. */
#ifndef KF_BENCH_ROOFLINE_DECODE_LIMITS_H
#define KF_BENCH_ROOFLINE_DECODE_LIMITS_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "trainer/model/model.h"

/** What the CPU gives the benchmark at one OpenMP thread count, measured
 *  by `now` (a clock of common/clock.h): bytes/s of a streaming read of
 *  512 MiB split between the threads, each part read at the SIMD level the
 *  kernels run at with a prefetch 4 KiB ahead on huge pages, as the decode
 *  kernels stream their weights (best of 5), and FLOP/s of b's matmul at
 *  512^3 in fp32 whatever b's precision (the decode kernels accumulate
 *  16-bit weights in fp32; best of 10). */
typedef struct decode_limits {
    int threads;
    double read_bw, gemm_flops;
} decode_limits;

/** The read of decode_limits: a 512 MiB stream allocated once and read on
 *  demand, so a timed run can be paired with the read of its moment (a
 *  shared host moves the memory's speed within seconds). Reading it
 *  evicts the caches. */
typedef struct decode_read_probe decode_read_probe;

/** A probe with its stream allocated and written (paged in). */
decode_read_probe *decode_read_probe_create(void);

/** Bytes/s of one read of the whole stream on `threads` threads, each a
 *  contiguous part at the SIMD level the kernels run at, timed by `now`.
 *  Leaves omp_get_max_threads() as it found it. */
double decode_read_probe_run(decode_read_probe *p, int threads, double (*now)(void));

/** Frees the stream; NULL is a no-op. */
void decode_read_probe_free(decode_read_probe *p);

/** Measures out[i] at threads[i] threads for each i < n, the read on
 *  probe's stream. The counts take turns, read by read and product by
 *  product, so each sees the same load of a shared machine: out[i] /
 *  out[j] is what more threads add, now. Leaves omp_get_max_threads() as
 *  it found it. */
void decode_limits_measure(kf_backend *b, decode_read_probe *probe, double (*now)(void),
                           const int *threads, int n, decode_limits *out);

/** Seconds decode_run (trainer/infer/decode.h) needs at the limits l to
 *  complete B prefixes of P tokens by N tokens, k per step (AR: model kind
 *  AR, k 1): the sum over its steps (the prefill, then one per k tokens) of
 *  max(bytes read / read_bw, FLOPs / gemm_flops), and as much for each
 *  pass of the noise encoder over the noise rows of decode_noise_steps
 *  steps (decode.h). FLOPs: every row's through the blocks, but the last
 *  block's projection and MLP for the output rows alone, as
 *  model_decode_step runs them. Bytes: every linear weight (bf16 halves them), the
 *  K/V cache, and the output layer: fp32
 *  logits, or with `screen` (the fused argmax: PFLM without a frequency
 *  penalty) its int8 copy, whose dot products count a quarter of fp32's.
 *  read_bound_s (may be NULL) gets the part of it in steps whose reads
 *  take longer than their FLOPs: the run is bound by the memory where that
 *  is most of it. */
double decode_roofline_s(const model *m, int64_t B, int64_t P, int64_t N, int64_t k,
                         kf_precision prec, int screen, const decode_limits *l,
                         double *read_bound_s);

#endif
