/* trainer/cli/cli_eval.h — the modes of `kf eval` besides validation NLL,
 * each in its own file; eval_main (trainer/cli/cli_eval.c) dispatches to them.
 * Each takes `kf eval`'s arguments (argv[0] is "eval") and returns the
 * process exit status (common/error.h: KF_EXIT_*).
 */
#ifndef KF_TRAINER_CLI_CLI_EVAL_H
#define KF_TRAINER_CLI_CLI_EVAL_H

/** `kf eval --completions FILE.jsonl --evaluator CKPT [--eos ID] [--batch B]
 *  [--backend B]` (trainer/cli/cli_eval_completions.c). FILE is `kf sample`
 *  output: one JSON object per line with "prefix" (array of ids, optional)
 *  and "completion" (array of ids; also accepted: "completion_ids"). Prints
 *  one JSON object (samples, tokens, gen_ppl, nll, distinct_1..3, entropy,
 *  mean_len) on stdout. */
int quality_eval_main(int argc, char **argv);

/** `kf eval genppl FILE.jsonl --evaluator DIR [--vocab DIR] ...`
 *  (trainer/cli/cli_eval_genppl.c; argv[1] is "genppl"): the paper's Gen-PPL
 *  (trainer/infer/genppl.h); --help describes the options. */
int genppl_main(int argc, char **argv);

#endif
