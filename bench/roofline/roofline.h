/* bench/roofline/roofline.h — what one training step costs on a named GPU, from the
 * ops the step actually issues (`kf bench train --roofline DEVICE`).
 *
 * The step is the trainer's own (step_run, trainer/train/step.h: supervision
 * with its teacher passes, the model's forward and backward, the optimizer),
 * run on a recording backend
 * (kernels/record.h): dry, it computes nothing and needs no GPU and almost
 * no memory; over the CUDA backend it also times each op. Each recorded op
 * costs its roofline time on the device,
 *     max(flops / peak of its unit and precision, bytes / bandwidth)
 * (kernels/op_cost.h has the counts), and the step's estimate is their sum:
 * ops run one after another on one stream, so nothing overlaps. It is a
 * bound for the ops as the model issues them (linear layers with their
 * epilogues, 16-bit copies in the 16-bit modes, the output layer in chunks:
 * kernels.h): real kernels reach a fraction of either peak.
 */
#ifndef KF_BENCH_ROOFLINE_ROOFLINE_H
#define KF_BENCH_ROOFLINE_ROOFLINE_H

#include <stdint.h>

#include "common/runconfig.h"
#include "kernels/op_cost.h"
#include "trainer/model/model.h"

/** A GPU's nominal dense peaks (NVIDIA data sheets). */
typedef struct roofline_device {
    const char *name;    /* as given to --roofline: "h100", "h200", "a100" */
    const char *desc;    /* "H100 SXM" */
    double tensor_flops; /* dense fp16/bf16 tensor-core FLOP/s */
    double fp32_flops;   /* fp32 FLOP/s (no tensor cores, no TF32) */
    double mem_bytes;    /* HBM bytes/s */
    double bus_bytes;    /* host <-> device bytes/s, one direction (PCIe) */
} roofline_device;

/** The device called name, or NULL. */
const roofline_device *roofline_device_find(const char *name);

/** The valid device names, ", "-separated (for error messages). */
const char *roofline_device_names(void);

/** The roofline time (s) of an op of cost c on d. GEMMs use the tensor peak
 *  in fp16 mode, attention too when attn_tc (tensor-core attention kernels),
 *  else the fp32 peak; a transfer moves its bytes at the bus rate;
 *  bookkeeping costs nothing. */
double roofline_op_seconds(const roofline_device *d, const kf_op_cost *c, int attn_tc);

/** The student's model FLOPs of one step of stage st on B samples of n
 *  tokens (forward + backward; the teacher passes are not credited):
 *    6 * (rows * P_block + noise_rows * P_noise + out_rows * P_head)
 *    + 12 * blocks * pairs * H
 *  with rows the backbone rows of the student's layout, P_block the matmul
 *  parameters of all blocks, P_noise the noise encoder's, P_head the output
 *  layer's (per head), pairs the (query, key) pairs its mask scores, H the
 *  hidden size (the input embedding is a gather: no FLOPs). tokens: the
 *  tokens the step predicts (B * (n - 1) for AR, B * (n - k) * k for PFLM). */
typedef struct roofline_flops {
    double total, rows, tokens;
} roofline_flops;
roofline_flops roofline_step_flops(const model_config *c, int64_t B, int64_t n,
                                   const runconfig_stage *st);

/** A stage's student (and its teacher) on a backend, ready to run training
 *  steps: the models (random weights when init, else as allocated: a dry
 *  backend needs none), the optimizer's moments and EMA, the supervision. */
typedef struct roofline_stage roofline_stage;

/** base: the architecture (sup_student_config derives the student; a
 *  self_forcing stage gets a PFLM(k/2) teacher, distillation kinds an AR
 *  one). zero1_ranks > 1: the optimizer state is that of the first rank's
 *  shard under ZeRO-1 over that many ranks (trainer/train/dist.h), and the
 *  step updates only the shard; 1: the whole buffer. NULL with err set when
 *  the stage kind cannot run. */
roofline_stage *roofline_stage_create(kf_backend *be, const model_config *base,
                                      const runconfig_stage *st, int zero1_ranks, int init,
                                      kf_err *err);
void roofline_stage_free(roofline_stage *s);

/** The stage's student. */
model *roofline_stage_model(roofline_stage *s);

/** Where each part of a recorded step begins and ends: indices into the
 *  record of the stage's backend (a recorder, kernels/record.h). begin: the
 *  supervision's first op (after set_precision); teacher: the student's
 *  first; student: the optimizer's first; end: past the closing sync. */
typedef struct roofline_marks {
    int64_t begin, teacher, student, end;
} roofline_marks;

/** The trainer's first optimizer step (step_run, trainer/train/step.h) on
 *  one rank with one micro-batch of B synthetic samples of n tokens, every
 *  op as called (no graphs); the collectives are not backend ops and are not
 *  priced. Under ZeRO-1 the update is the first rank's shard's, but the
 *  gradient norm is the whole buffer's (one rank computes a 1/ranks part).
 *  When the stage's backend is a recorder, mk receives the parts (else zeros). */
void roofline_stage_step(roofline_stage *s, int64_t B, int64_t n, roofline_marks *mk);

/** Estimates one training step of each selected stage of the config (every
 *  training stage when n_stages is 0) on the device called device, and
 *  prints per op and in total FLOPs, bytes and roofline time, the parts
 *  (teacher passes, student, optimizer), the estimated step time, tokens/s,
 *  MFU and the dominant ops. On a build with a GPU (resources.backend not
 *  cpu) the step also runs there and each op's measured time is printed
 *  beside its estimate. @return the command's exit code (KF_EXIT_USAGE for
 *  an unknown device, naming the valid ones). */
int roofline_bench(const char *config, int n_over, char **over, const char **stages, int n_stages,
                   const char *device);

/** Prints, under `title`, each stage's step time step_s[i] (seconds; 0:
 *  not run, left out) against the first AR stage's, with the goal (at most
 *  1.5 (k + 1) times) beside each self-forcing stage. Prints
 *  nothing when no AR stage has a time. Shared by the roofline's estimates
 *  and `kf bench train`'s measurements. */
void roofline_print_vs_ar(const runconfig *rc, const double *step_s, const char *title);

/** `kf bench decode --roofline DEVICE`'s arguments. */
typedef struct roofline_decode_args {
    const char *config; /* a run config: the model's shape (no checkpoint needed) */
    int n_over;
    char **over;               /* key.path=value overrides of config */
    const char *device;        /* h100, h200, a100 */
    const int64_t *batch, *ks; /* batch sizes; PFLM tokens per step */
    int n_batch, n_k;
    int64_t cache_len;   /* rows in the cache before the priced step; 0: seq_len / 2 */
    int64_t prefix_len;  /* the prompt's tokens (prefilled); 0: min(64, cache_len) */
    double freq_penalty; /* the PFLM sampler's (AR samples without) */
    int precision;       /* a kf_precision */
} roofline_decode_args;

/** Prices one decode step of an AR model (k = 1) and of a PFLM at each k
 *  (one model, k_train the largest k) at each batch size on the named
 *  device: decode_run (trainer/infer/decode.h: the model's step and the
 *  sampler) runs on a recording backend from a synthetic prefix until the
 *  first step whose cache holds at least cache_len rows, and that step's
 *  ops are priced as roofline_op_seconds prices them. Prints per method and
 *  batch size the estimated step time, tokens per step, tokens/s, the ratio
 *  to AR's tokens/s, the time and bytes of the blocks, attn_decode, the
 *  output layer with the sampler and host transfers, host waits, and the
 *  costliest op. On a build with a GPU (resources.backend not cpu) the
 *  steps run there (random weights) and the measured time of the step's
 *  ops, one by one, is printed beside. @return the command's exit code
 *  (KF_EXIT_USAGE: an unknown device). */
int roofline_decode_bench(const roofline_decode_args *a);

#endif
