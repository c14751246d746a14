/* trainer/cli/omp_env.h — OpenMP start-up settings for the compute commands.
 *
 * libgomp reads OMP_WAIT_POLICY only when the process starts, so a command
 * that wants a policy re-executes itself once with it set. Which policy:
 *
 * - passive for training and evaluation: with KF_CPU_GEMM=openblas products
 *   run on OpenBLAS's own threads, and mpirun -np 2 on 2 cores puts two
 *   processes' workers on each core; idle workers spinning after every
 *   parallel region take the cores away (measured here: up to 2x slower
 *   training steps on 2 cores).
 * - libgomp's default for decoding when its threads fit on the CPUs: a
 *   worker spins a while (GOMP_SPINCOUNT, 300,000 turns) before it sleeps.
 *   A step at small batch is some 50 parallel regions of 0.1-0.3 ms (each
 *   linear layer's panels split between the threads), and a worker put to
 *   sleep after each wakes late for the next. The 124M shape at batch 1 on
 *   a 2-vCPU Zen 4, two threads, runs alternating: AR 60-61 tokens/s with
 *   the default, 50-57 sleeping, 59-75 spinning without bound
 *   (OMP_WAIT_POLICY=active); K-Forcing 228-231, 176-193 and 231-240
 *   (docs/decode_cpu.md, Two threads). The bounded spin gives most of it
 *   and leaves the core to others when decoding pauses.
 */
#ifndef KF_TRAINER_CLI_OMP_ENV_H
#define KF_TRAINER_CLI_OMP_ENV_H

#include <stdbool.h>

/** Unless OMP_WAIT_POLICY is already set (the user's choice wins), sets it to
 * "passive" and re-executes the current process with the same arguments
 * (/proc/self/exe, /proc/self/cmdline). Returns only when no re-exec
 * happened (already set, or the re-exec failed). Call before any thread or
 * MPI start-up. */
void omp_env_passive(void);

/** The policy for a decoding command: libgomp's default (no re-exec) when
 * spinning may (spin_ok: false where CPU time is what is measured, since
 * spinning workers bill it), the OpenMP threads (omp_get_max_threads) fit
 * on the CPUs this process may run on (sched_getaffinity) and KF_CPU_GEMM
 * is not "openblas"; else "passive", set as omp_env_passive() sets it. */
void omp_env_decode(bool spin_ok);

#endif
