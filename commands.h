/* commands.h — the entry point of every kf subcommand.
 *
 * Each is defined in its component (pipeline/cli_shards.c, trainer/cli_*.c,
 * trainer/bench_*.c, jobs/cli_jobs.c, ...) and listed once, in kf.c's command
 * table. An entry point takes the arguments after the binary's name
 * (argv[0] is the command's own name) and returns the process exit status
 * (common/error.h: KF_EXIT_*).
 */
#ifndef KF_COMMANDS_H
#define KF_COMMANDS_H

int tokenize_main(int argc, char **argv);       /* tokenize/cli_tokenize.c */
int shards_main(int argc, char **argv);         /* pipeline/cli_shards.c */
int train_main(int argc, char **argv);          /* trainer/cli_train.c */
int eval_main(int argc, char **argv);           /* trainer/cli_eval.c */
int sample_main(int argc, char **argv);         /* trainer/cli_sample.c */
int import_main(int argc, char **argv);         /* trainer/cli_import.c */
int jobs_main(int argc, char **argv);           /* jobs/cli_jobs.c */
int plot_main(int argc, char **argv);           /* common/cli_plot.c */
int bench_train_main(int argc, char **argv);    /* trainer/bench_train.c */
int bench_decode_main(int argc, char **argv);   /* trainer/bench_decode.c */
int bench_ablation_main(int argc, char **argv); /* trainer/bench_ablation.c */
#ifdef KF_CUDA
int bench_attention_main(int argc, char **argv); /* kernels/cuda/cuda_bench_attention.cu */
#endif

#endif
