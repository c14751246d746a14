/* trainer/cli/cli_eval.c — `kf eval CKPT --data DIR`: validation metrics.
 *
 * AR checkpoint: next-token NLL and perplexity over the split.
 * PFLM checkpoint: per-position NLL L_1..L_k, per-position accuracy and
 * whole-block accuracy (all k tokens right; the paper's Table 2 metric)
 * against supervision built exactly as in training (trainer/train/supervision.h)
 * from a frozen teacher (--teacher): an AR teacher gives forward-distillation
 * targets (the teacher's exact k-token inverse-CDF blocks), a PFLM(k/2)
 * teacher self-forcing targets; --supervision picks the noise-inversion ones
 * (the ablation's variants A and B). `kf eval --completions ...` and `kf eval
 * genppl ...` are the other modes (trainer/cli/cli_eval.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "kernels/kernels.h"
#include "pipeline/shard_reader.h"
#include "trainer/cli/cli_eval.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/eval.h"
#include "trainer/model/model.h"
#include "trainer/train/checkpoint.h"
#include "trainer/train/supervision.h"

static const char USAGE[] =
    "usage: kf eval CKPT --data DIR [--k K] [--teacher TCKPT] [--supervision KIND]\n"
    "               [--tau T] [--split valid|train] [--samples N] [--batch B] [--seed S]\n"
    "               [--backend cpu|cuda|auto]\n"
    "       kf eval --completions FILE.jsonl --evaluator CKPT ...   (see --completions --help)\n"
    "       kf eval genppl FILE.jsonl --evaluator GPT2_DIR ...     (see genppl --help)\n"
    "\n"
    "AR checkpoint: validation next-token NLL and perplexity. PFLM checkpoint: per-position\n"
    "NLL L_1..L_K, per-position and whole-block accuracy against targets built as in\n"
    "training from --teacher (AR: forward distillation, the teacher's exact K-token\n"
    "inverse-CDF blocks; PFLM(K/2): self-forcing). CKPT / TCKPT: a .safetensors file, a\n"
    "stage's final/ directory or a step-N checkpoint directory.\n"
    "\n"
    "  --k K            PFLM window evaluated (default k_train)\n"
    "  --supervision S  distill_ar | self_forcing | noise_inversion_causal |\n"
    "                   noise_inversion_mtp (default: from the teacher and the head)\n"
    "  --tau T          temperature of the targets (default 1)\n"
    "  --samples N      samples of the split evaluated (default 64; 0: all)\n"
    "  --batch B        samples per pass (default 8); --seed S noise seed (default 0)\n"
    "\n"
    "Prints one JSON object on stdout.\n";

/* sha receives the sha256 of the weights file. */
static int load_ckpt(kf_backend *be, const char *ref, model **out, char sha[65], kf_err *err) {
    char path[4096];
    if (ckpt_resolve_teacher(ref, path, sizeof path, sha, err)) return -1;
    *out = model_load(be, path, err);
    return *out ? 0 : -1;
}

int eval_main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "genppl")) return genppl_main(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--completions")) return quality_eval_main(argc, argv);
    const char *ckpt = NULL, *data = NULL, *teacher_ref = NULL, *sup_name = NULL;
    const char *split = "valid", *backend = "cpu";
    int64_t k = 0, samples = 64, batch = 8, seed = 0;
    double tau = 1.0;
    const cli_opt opts[] = {
        {"--data", CLI_STR, .out = &data},
        {"--teacher", CLI_STR, .out = &teacher_ref},
        {"--supervision", CLI_STR, .out = &sup_name},
        {"--split", CLI_STR, .out = &split},
        {"--backend", CLI_STR, .out = &backend},
        {"--tau", CLI_FLOAT, .out = &tau, .lo = 0, .hi = INFINITY, .above = true},
        {"--k", CLI_INT, .out = &k, .lo = 0, .hi = INFINITY},
        {"--samples", CLI_INT, .out = &samples, .lo = 0, .hi = INFINITY},
        {"--batch", CLI_INT, .out = &batch, .lo = 1, .hi = INFINITY},
        {"--seed", CLI_INT, .out = &seed, .lo = 0, .hi = INFINITY},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf eval", USAGE, opts, .pos = &ckpt, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!ckpt || !data) {
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    omp_env_passive();

    kf_err err = {{0}};
    kf_backend *be = kernels_create(backend, &err);
    model *m = NULL, *teacher = NULL;
    shard_set *ss = NULL;
    int rc = KF_EXIT_ERROR;
    char sha[65], teacher_sha[65];
    if (!be || load_ckpt(be, ckpt, &m, sha, &err)) goto fail;
    if (shard_set_open(data, split, &ss, &err)) goto fail;
    if (shard_set_vocab_size(ss) > m->cfg.vocab) {
        kf_err_set(&err, "%s: the data's vocabulary (%lld ids) exceeds the model's (%lld)", data,
                   (long long)shard_set_vocab_size(ss), (long long)m->cfg.vocab);
        goto fail;
    }
    eval_opts o = {
        .k = k, .tau = tau, .samples = samples, .batch = batch, .seed = (uint64_t)seed, .kind = -1};
    if (sup_name && (o.kind = sup_kind_from_name(sup_name)) < 0) {
        kf_err_set(&err,
                   "--supervision %s: unknown (distill_ar, self_forcing, "
                   "noise_inversion_causal, noise_inversion_mtp)",
                   sup_name);
        goto fail;
    }
    if (m->cfg.kind == MODEL_PFLM) {
        if (!teacher_ref) {
            kf_err_set(&err,
                       "a PFLM checkpoint is evaluated against a teacher's targets: give "
                       "--teacher TCKPT (the AR or PFLM(k/2) checkpoint it was trained from)");
            goto fail;
        }
        if (load_ckpt(be, teacher_ref, &teacher, teacher_sha, &err)) goto fail;
        /* a model scored against its own targets: every accuracy is 1 by construction */
        if (!strcmp(sha, teacher_sha))
            fprintf(stderr,
                    "kf eval: warning: --teacher %s has the same weights as %s (sha256 %.12s...): "
                    "a model is not its own teacher; give the checkpoint it was trained from\n",
                    teacher_ref, ckpt, sha);
    }
    eval_result r;
    if (eval_run(m, teacher, ss, &o, &r, &err)) goto fail;
    eval_print_json(stdout, m, &o, &r);
    eval_result_free(&r);
    rc = KF_EXIT_OK;
fail:
    if (rc) fprintf(stderr, "kf eval: %s\n", err.msg);
    shard_set_close(ss);
    model_free(teacher);
    model_free(m);
    if (be) be->destroy(be);
    return rc;
}
