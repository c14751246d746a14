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

/** The SIMD level the CPU kernels run at: "vnni", "avx512", "avx2" or
 *  "base" — the best this CPU has, or a lower one forced with KF_CPU_ISA
 *  (for tests and benchmarks of each level on one machine). */
const char *kernels_cpu_isa(void);

/** Switches the CPU kernels to SIMD level `name` ("base", "avx2", "avx512",
 *  "vnni") for the rest of the process, so a test can run each level's
 *  kernels side by side. Returns 0, or -1 (nothing changed) for an unknown
 *  name or a level this CPU lacks. Call it between ops, never during one;
 *  heads packed before the switch keep the screen they were packed with. */
int kernels_cpu_set_isa(const char *name);

/** Sets for the rest of the process whether a decode-time linear layer's
 *  only row block prefetches the next panel (linear_packed_fwd): `on` 1
 *  for every block, 0 for none, -1 as KF_CPU_LONE_AHEAD or, unset, the CPU
 *  says (kernels_cpu_lone_ahead_policy), so a benchmark can time each in
 *  turns in one process. The results are the same bits either way. Call it
 *  between ops, never during one. */
void kernels_cpu_set_lone_ahead(int on);

/** In words, which lone row blocks prefetch the next panel as things
 *  stand: "never", "always" (forced, or the CPU's default) or the CPU's
 *  default rule ("blocks of several passes or 3.5+ FLOPs a weight byte").
 *  A static string. */
const char *kernels_cpu_lone_ahead_policy(void);

/** Whether head_pack built the int8 screen for this packed output layer
 *  (cpu_head_screen.c: a CPU with AVX2 or more, finite weights, and
 *  KF_CPU_HEAD_SCREEN not 0), i.e. whether an argmax-only head_fwd goes
 *  through it. Lets tests say which path they checked. */
int kernels_cpu_head_screened(const void *head);

#endif
