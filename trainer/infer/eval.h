/* trainer/infer/eval.h — validation metrics of a checkpoint on a shard set (used by
 * `kf eval` and `kf bench ablation`).
 *
 * AR model: mean next-token NLL over every counted target (padding excluded)
 * and its perplexity. PFLM model: against the targets of a supervision kind
 * (supervision.h) built from the teacher exactly as in training, with tau
 * fixed to opts.tau and noise keyed by (seed, sample index): per-position NLL
 * L_1..L_k and accuracy (argmax == target), and whole-block accuracy (all k
 * positions of a context position right).
 */
#ifndef KF_TRAINER_INFER_EVAL_H
#define KF_TRAINER_INFER_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "pipeline/shard_reader.h"
#include "trainer/model/model.h"

typedef struct eval_opts {
    int64_t k;       /* PFLM window evaluated; 0: k_train */
    double tau;      /* target temperature */
    int64_t samples; /* samples of the split (from index 0); 0: all */
    int64_t batch;
    uint64_t seed;
    int kind; /* sup_kind, or -1: distill_ar / noise_inversion_mtp for an AR
                 teacher (by the student's head), self_forcing for a PFLM one */
} eval_opts;

typedef struct eval_result {
    int kind;  /* the sup_kind used */
    int64_t k; /* 1 for AR */
    int64_t samples;
    int64_t targets;  /* counted targets */
    double nll;       /* mean NLL over all counted targets (a masked-diffusion model:
                         its NELBO per valid token, MDLM's perplexity bound) */
    double ppl;       /* exp(nll) */
    double *nll_pos;  /* [k] mean NLL per position */
    double *acc_pos;  /* [k] accuracy per position */
    double block_acc; /* PFLM: fraction of blocks with all k right */
    int64_t blocks;
} eval_result;

/** Evaluates m on ss (teacher: NULL for AR). @return 0, or -1 with err
 *  (bad k, wrong teacher for the supervision, unreadable data). */
int eval_run(model *m, model *teacher, shard_set *ss, const eval_opts *o, eval_result *r,
             kf_err *err);

/** One JSON object (with a newline) describing r. */
void eval_print_json(FILE *f, const model *m, const eval_opts *o, const eval_result *r);

void eval_result_free(eval_result *r);

#endif
