/* kernels/cpu/cpu_backend.h — CPU-backend-only introspection.
 *
 * The op table itself is created by kernels_cpu_create() (kernels/kernels.h).
 * This header adds what only tests and benchmarks of the CPU reference need.
 */
#ifndef KF_KERNELS_CPU_BACKEND_H
#define KF_KERNELS_CPU_BACKEND_H

#include "kernels/kernels.h"

/** Number of (query, key) pairs attn_fwd and attn_bwd have scored on this CPU
 *  backend since it was created (each visible pair once per call). Lets tests
 *  check that attention costs what its mask structure costs. */
int64_t kernels_cpu_attn_pairs(kf_backend *b);

/** Whether head_pack built the int8 screen for this packed output layer
 *  (cpu_head_screen.c: a CPU with AVX-512 VNNI, finite weights, and
 *  KF_CPU_HEAD_SCREEN not 0), i.e. whether an argmax-only head_fwd goes
 *  through it. Lets tests say which path they checked. */
int kernels_cpu_head_screened(const void *head);

#endif
