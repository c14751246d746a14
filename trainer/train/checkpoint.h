/* trainer/train/checkpoint.h — resumable training checkpoints and final weights.
 *
 * Layout of a stage's checkpoint directory CK (RUN/stages/NAME/ckpt):
 *
 *   CK/step-N/model.safetensors     weights        (reference tensor names)
 *   CK/step-N/ema.safetensors       EMA weights
 *   CK/step-N/adam_m.safetensors    AdamW first moments  (same names/shapes)
 *   CK/step-N/adam_v.safetensors    AdamW second moments
 *   CK/step-N/rank-RRRRR.yaml       one per rank: that rank's RNG state
 *   CK/step-N/state.yaml            the manifest, written last (below)
 *   CK/latest                       "step-N\n": the newest committed checkpoint
 *
 * state.yaml: format/version, stage, kind, step (optimizer steps done),
 * data cursor, global batch, world size, config hash, the optimizer state
 * (AdamW step, loss scale, good steps, skipped steps), precision phase, the
 * identity the run depends on (model config, dataset manifest sha256,
 * tokenizer + vocab sha256, teacher sha256, teacher precision), and every other file's size and
 * sha256.
 *
 * Commit protocol, collective over all ranks:
 *   rank 0 clears a leftover step-N.tmp/; barrier; every rank writes its files
 *   into step-N.tmp/ (each file atomically and fsynced; rank 0 writes the four
 *   tensor files); barrier; rank 0 hashes every file, writes state.yaml
 *   (fsync), renames step-N.tmp -> step-N, fsyncs CK, replaces CK/latest by
 *   rename, then applies retention and removes stale *.tmp directories;
 *   barrier. A crash at any point leaves every committed checkpoint intact,
 *   and at worst a *.tmp directory that is ignored.
 *
 * Retention keeps the newest K checkpoints that verify: the one just written,
 * then older ones newest first, each verified (sizes and sha256) before it is
 * counted; one that does not verify is moved to CK/corrupt/ (never counted,
 * never resumed from), and a checkpoint is removed only once K newer ones
 * verified, so the last good checkpoint is never removed.
 *
 * Resume never trusts `latest` alone: ckpt_find scans every step-N directory
 * newest first and takes the first whose state.yaml parses and whose files
 * all have the recorded sizes and sha256, moving each newer one that does not
 * to CK/corrupt/. The resume then points `latest` at the checkpoint it loaded
 * (a crash between the rename and the `latest` update, at a stage's last
 * step, would otherwise leave `latest` one checkpoint behind for good), and
 * when none verifies, `latest` is removed: it names an existing checkpoint
 * that verified, or is absent.
 *
 * Final weights (RUN/stages/NAME/final/): model.safetensors (the EMA weights:
 * the next stage's teacher), final.yaml (stage, step, config hash, model
 * config, model.safetensors' size and sha256) and DONE (completion marker,
 * written last). Written in final.tmp/ and renamed.
 */
#ifndef KF_TRAINER_TRAIN_CHECKPOINT_H
#define KF_TRAINER_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/rng.h"
#include "trainer/model/model.h"
#include "trainer/train/dist.h"
#include "trainer/train/optim.h"

#define CKPT_FORMAT "kforcing-checkpoint"
/* version 2 ends state.yaml with `state_sha256: "HEX"`, the sha256 of every
 * byte before that line (the manifest's own bytes: a damaged hash or counter
 * in it is caught, not resumed from); version 1 (without it) is still read */
#define CKPT_VERSION 2
#define CKPT_SELF_SHA "state_sha256: \""

/** What must match for a resume to be allowed (and is recorded). */
typedef struct ckpt_identity {
    model_config model;
    char data_manifest[65]; /* sha256 of the training set's manifest.yaml */
    char tokenizer[64];
    char vocab_sha256[65];
    char teacher_sha256[65];   /* "" when the stage has no teacher */
    char teacher_precision[8]; /* the teacher passes' (runconfig_prec_name); a checkpoint
                                  without it: "fp32", the only one there was */
} ckpt_identity;

/** Scalars of a training state. */
typedef struct ckpt_meta {
    char stage[64];
    char kind[32];
    int64_t step;   /* optimizer steps completed */
    int64_t cursor; /* loader stream position of the next step */
    int64_t global_batch;
    int world; /* ranks that wrote it */
    char config_hash[65];
    optim_state opt;
    char phase[8]; /* precision phase at `step`: runconfig_prec_name ("fp32" "fp16" "bf16") */
    ckpt_identity id;
} ckpt_meta;

/** Writes checkpoint step-meta->step under ckpt_dir by the commit protocol.
 * Collective: every rank calls it with its own rng. ema/adam_m/adam_v are
 * device buffers laid out like m->params. keep: retention K (>= 1).
 * I/O failures are fatal (the job must not continue as if it had a
 * checkpoint). */
void ckpt_save(const char *ckpt_dir, dist *d, const model *m, const float *ema, const float *adam_m,
               const float *adam_v, const ckpt_meta *meta, const rng_state *rng, int keep);

/** Verifies a checkpoint directory: state.yaml parses (format, version,
 * fields) and every listed file has its size and sha256.
 * @return 0, or -1 with err saying what is wrong. */
int ckpt_verify(const char *path, ckpt_meta *meta, kf_err *err);

/** Finds the newest checkpoint under ckpt_dir that verifies, moving each newer
 * one that does not (partial, corrupt) to ckpt_dir/corrupt/ with a warning
 * (kf_log_warn), and removing ckpt_dir/latest when none verifies. Only the
 * stage's writer (the holder of its lock, rank 0) may call it.
 * @return 1 with its path in out (cap bytes) and *meta filled, 0 when there is none. */
int ckpt_find(const char *ckpt_dir, char *out, size_t cap, ckpt_meta *meta);

/** Points ckpt_dir/latest at step-`step` (atomic replace; fatal on I/O
 * failure). Rank 0 only. */
void ckpt_set_latest(const char *ckpt_dir, int64_t step);

/** Refuses a resume whose identity differs (model shape, dataset manifest,
 * tokenizer, teacher, teacher precision) or whose global batch differs; a different world size
 * is fine. @return 0, or -1 with err naming every difference. */
int ckpt_check_compatible(const ckpt_meta *saved, const ckpt_identity *now, int64_t global_batch,
                          kf_err *err);

/** Loads weights, EMA and moments of checkpoint `path` into m->params, ema,
 * adam_m, adam_v (the tensor names and shapes must be m's), and this rank's
 * RNG state when the checkpoint has a file for `rank` (return 1) — 0 when it
 * was written by fewer ranks (the caller derives the state). Dies on a
 * read failure of a checkpoint that verified a moment ago. */
int ckpt_load(const char *path, int rank, model *m, float *ema, float *adam_m, float *adam_v,
              rng_state *rng);

/** Writes final_dir (RUN/stages/NAME/final) from the EMA buffer: final.tmp/,
 * then rename; DONE last. Rank 0 only. Fatal on I/O failure. */
void ckpt_write_final(const char *final_dir, const model *m, const float *ema,
                      const ckpt_meta *meta);

/** Resolves and verifies a model reference (a teacher, or the CKPT of kf
 * eval / kf sample): a final/ directory (its DONE marker and
 * recorded sha256 of model.safetensors are checked), a step-N checkpoint
 * directory (verified; its ema.safetensors is used) or a .safetensors file.
 * out receives the weights file, sha the file's sha256.
 * @return 0, or -1 with err. */
int ckpt_resolve_teacher(const char *ref, char *out, size_t cap, char sha[65], kf_err *err);

#endif
