/* trainer/train/train.h — one stage of training: `kf train CONFIG --stage NAME
 * --run-dir RUN [--resume]`.
 *
 * Stage directory RUN/stages/NAME/:
 *   ckpt/        resumable checkpoints (trainer/train/checkpoint.h)
 *   final/       the finished stage's EMA weights + final.yaml + DONE
 *   log.jsonl    one record per optimizer step from rank 0: step, loss, lr,
 *                grad_norm, loss_scale, skipped (this step), skipped_total,
 *                phase, tokens, tokens_per_s, ms_step, ms_grad_wait (the
 *                gradient all-reduce's exposed time, dist_grads_wait), time
 *                (s since start); evaluations add val_loss and val_loss_ema.
 *                fsynced before each checkpoint; a record that cannot be
 *                written ends the stage (exit 1) before any checkpoint past
 *                it, and --resume drops the records past its checkpoint
 *   status       YAML, replaced atomically: state (running | preempted |
 *                failed | done), step, steps, checkpoint (latest step-N or
 *                ""), tokens_per_s, updated (unix time)
 *
 * One optimizer step (global batch G = world * accum * micro_batch):
 *   1. at the step boundary every rank contributes its preemption flag
 *      (SIGUSR1/SIGTERM set it) to an all-reduce MAX; if set, all ranks
 *      checkpoint this step and exit 75 (rank 0 contributes 2 once a log
 *      record failed to be written: all ranks exit 1, no checkpoint);
 *   2. each rank builds the supervision of its accum micro-batches (teacher
 *      passes for distillation kinds), counts the target tokens, and the
 *      counts are summed over ranks: the loss is the mean over the global
 *      batch's targets, whatever the split;
 *   3. per micro-batch: forward, loss (scaled by the fp16 loss scale / count),
 *      backward into zeroed gradients, added to the rank's accumulator in
 *      micro-batch order;
 *   4. the accumulators are summed over ranks in rank order (dist.h), so
 *      np=W with accum=1 equals np=1 with accum=W bit for bit; the sum runs
 *      in buckets of resources.bucket_mb during the last micro-batch's
 *      backward, each as soon as the backward has finished its gradients
 *      (same bits whatever the bucket size on the CPU backend);
 *   5. the optimizer (optim.h): the gradient check (norm, clip, skip) and
 *      AdamW and the EMA on the device; then the step's one host read (its
 *      loss and the check), the scaler's update, log, checkpoint every
 *      checkpoint_every steps.
 * With resources.zero1 (ZeRO-1, dist.h) step 4 is a reduce-scatter, step 5
 * updates this rank's shard (its AdamW moments and EMA are the shard's only)
 * from the global norm (dist_sumsq), then all-gathers the weights; the
 * results are the all-reduce's. Checkpoints, validation of the EMA and the
 * final weights gather the shards, so the files are the same either way.
 * At the end: a last checkpoint, final/ (EMA weights), status done, exit 0.
 * On a backend that records graphs (kernels.h graph_begin; the CUDA backend
 * unless KF_CUDA_GRAPHS=0) the device work of step 3 (per micro-batch, but
 * the last with several ranks) and of step 5 is recorded on the second step
 * of a shape and precision and launched from the third, with the same bits:
 * what changes per step is read from the device (kf_grad_ctl).
 *
 * Randomness: the distillation noise (z, tau) of a sample is drawn from
 * common/rng.h at (seed, TRAIN_NOISE_STREAM, stream position * draws + j), a
 * function of the sample's place in the global data stream only, so targets
 * do not depend on batch size or rank count. Each rank's RNG state recorded
 * in checkpoints is (seed, stream, counter = first stream position of its
 * slice of the next step).
 */
#ifndef KF_TRAINER_TRAIN_TRAIN_H
#define KF_TRAINER_TRAIN_TRAIN_H

#include <stdint.h>

#include "common/runconfig.h"
#include "kernels/kernels.h"
#include "trainer/model/model.h"
#include "trainer/train/dist.h"

#define TRAIN_NOISE_STREAM (0x4E4F495345ull << 24) /* "NOISE" */

typedef struct train_args {
    const char *config;  /* run config path */
    const char *stage;   /* stage name */
    const char *run_dir; /* RUN */
    int resume;          /* --resume */
    int n_over;          /* key.path=value overrides */
    char **over;
    int64_t stop_at; /* > 0: act as if preempted when this step is reached (tests, drills) */
    /* tests: wraps the stage's backend (e.g. in a recorder, kernels/record.h),
     * which then owns it; and is told before (begin 1) and after (0) each
     * optimizer step. NULL: none. */
    kf_backend *(*wrap_backend)(kf_backend *be, void *ctx);
    void (*on_step)(void *ctx, kf_backend *be, int begin);
    void *hook_ctx;
} train_args;

/** Runs one stage on this rank; collective over d.
 * @return the process exit code: 0 done, 1 error (message printed),
 * 75 preempted (checkpoint written). */
int train_run(const train_args *a, dist *d);

/** The architecture every stage of a run config shares: model.* of rm
 * (noise_cycles included), the mask token from the training data's
 * vocabulary data_vocab (runconfig_mask_id). Not a model by itself: a
 * stage's model is sup_student_config of it, its teacher's
 * sup_teacher_config (supervision.h); the trainer, `kf bench train` (its
 * stand-in teachers) and the roofline estimates all start here, so what one
 * writes fits what another reads. */
model_config train_base_config(const runconfig_model *rm, int64_t data_vocab);

/** Installs the SIGUSR1/SIGTERM/SIGINT handlers that request a preemption
 * checkpoint, and ignores SIGPIPE (a write to a dead peer's connection fails
 * with EPIPE instead of ending the rank without a word); then unblocks the
 * three signals, which a launcher may hold until this point
 * (PROC_HOLD_SIGNALS in common/proc.h). */
void train_install_signals(void);

#endif
