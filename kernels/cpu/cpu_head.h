/* kernels/cpu/cpu_head.h — the packed output layer shared by cpu_head.c (the
 * exact kernel) and cpu_head_screen.c (the screened argmax). Private to the
 * CPU backend. */
#ifndef KF_KERNELS_CPU_HEAD_H
#define KF_KERNELS_CPU_HEAD_H

#include <stdint.h>

#include "kernels/kernels.h"

#define CPU_HEAD_PANEL 32 /* vocabulary entries per packed panel: two 16-float vectors */
#define CPU_HEAD_ROWS 4   /* rows per register block */

/* The int8 screen (cpu_head_screen.c): W quantised per vocabulary entry with
 * a rigorous bound on what quantisation can change of each logit. */
/* The int8 dot product a screen was packed for: vpdpbusd (|qx| <= 127) or
 * vpmaddubsw + vpmaddwd (|qx| <= 63), 512 or 256 bits wide. */
enum { CPU_SCREEN_AVX2, CPU_SCREEN_AVX512BW, CPU_SCREEN_VNNI };

typedef struct cpu_head_screen {
    int kind;      /* CPU_SCREEN_*: fixed at packing, whatever the level later */
    int64_t h4;    /* H rounded up to whole groups of 4 (one 32-bit lane) */
    int8_t *qw;    /* [panels][h4/4][PANEL][4]: round(w / sw), zeros past H and V */
    int32_t *corr; /* [panels*PANEL] offset * sum_h qw (x's u8 offset: 128 or 64) */
    float *sw;     /* [panels*PANEL] scale: max|w| / 127 */
    float *ew1;    /* [panels*PANEL] sum_h |w - sw*qw|, rounded up */
    float *w1;     /* [panels*PANEL] sum_h |w|, rounded up */
    float *bias;   /* [panels*PANEL] the logit's bias; -inf past V */
    float *babs;   /* [panels*PANEL] 2^-14 |bias|: slack for float rounding */
} cpu_head_screen;

typedef struct cpu_head {
    int64_t V, H, panels;
    float *w;                /* [panels][H][PANEL], entries past V zero */
    float *bias;             /* [panels * PANEL]; past V NaN, which never wins a comparison */
    cpu_head_screen *screen; /* NULL: argmax by the exact kernel alone */
} cpu_head;

/** Folds logit v of id i into the running first maximum (*val, *id): it
 *  replaces it when greater, or equal with a lower id; NaN never wins and a
 *  NaN *val (nothing yet) is always replaced. */
static inline void cpu_head_best_merge(float *val, int32_t *id, float v, int32_t i) {
    if (v != v) return;
    if (*val != *val || v > *val || (v == *val && i < *id)) {
        *val = v;
        *id = i;
    }
}

/** Builds hd->screen from the packed exact weights when the SIMD level is
 *  AVX2 or above and every weight and bias is finite (else leaves it NULL).
 *  The screen keeps the level it was packed for. */
void cpu_head_screen_pack(cpu_head *hd);
void cpu_head_screen_free(cpu_head *hd);

/** ids[r] for rows r < rows of xp ([nblk*ROWS, H], zero-padded), exactly the
 *  first maximum of the exact kernel's logits: an int8 pass bounds every
 *  logit, and only entries whose bound reaches the best lower bound are
 *  computed exactly. Rows the screen cannot bound go to the exact kernel. */
void cpu_head_screen_argmax(kf_backend *b, const cpu_head *hd, const float *xp, int64_t rows,
                            int32_t *ids);

/** ids[r] by the exact kernel over every logit (cpu_head.c). */
void cpu_head_exact_argmax(kf_backend *b, const cpu_head *hd, const float *xp, int64_t rows,
                           int32_t *ids);

#endif
