/* jobs/plan.h — the stage DAG of a run config and rough resource estimates.
 *
 * Estimates are first-order: parameters from the model shape (docs/architecture.md
 * "Reference model"), training FLOPs per step as 6·P per trained row plus 2·P
 * per teacher row (rows: seq_len context rows and k noise rows per position,
 * the fully causal layout), attention by its mask structure, and memory as
 * fp32 weights + gradients + EMA + AdamW moments (+ a frozen teacher), the
 * EMA and moments a rank's shard of them under ZeRO-1 (resources.zero1).
 * Activations are not counted.
 */
#ifndef KF_JOBS_PLAN_H
#define KF_JOBS_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "common/runconfig.h"

typedef struct plan_stage {
    double params;         /* student parameters */
    double teacher_params; /* 0 without a teacher */
    double flops_per_step; /* training FLOPs per optimizer step */
    double flops;          /* for all steps */
    double mem_bytes;      /* per rank: weights, grads, EMA, AdamW (ZeRO-1: a shard), teacher */
    double ckpt_bytes;     /* one resumable checkpoint */
    double seconds;        /* at the assumed throughput */
    double jobs;           /* Slurm jobs needed at the time limit (>= 1; a double, as
                            * a config may ask for more than int64_t counts) */
} plan_stage;

/** Parameters of the model for a stage kind with k (PFLM kinds add the noise
 * encoder; the MTP baseline k heads). */
double plan_params(const runconfig_model *m, runconfig_kind kind, int64_t k);

/** Estimates stage i at flops_per_s per rank. */
void plan_estimate(const runconfig *rc, int i, double flops_per_s, plan_stage *out);

/** Prints the DAG and the estimates (kf jobs plan). */
void plan_print(FILE *f, const runconfig *rc, double flops_per_s);

#endif
