/* commands.h — the entry point of every kf subcommand.
 *
 * Each is defined in its component's cli/ folder or cli_*.c file
 * (pipeline/cli_shards.c, trainer/cli/, bench/cli/, jobs/cli_jobs.c, ...) and
 * listed once, in kf.c's command table. An entry point takes the arguments
 * after the binary's name (argv[0] is the command's own name) and returns the
 * process exit status (common/error.h: KF_EXIT_*).
 */
#ifndef KF_COMMANDS_H
#define KF_COMMANDS_H

int tokenize_main(int argc, char **argv);       /* tokenize/cli_tokenize.c */
int shards_main(int argc, char **argv);         /* pipeline/cli_shards.c */
int train_main(int argc, char **argv);          /* trainer/cli/cli_train.c */
int eval_main(int argc, char **argv);           /* trainer/cli/cli_eval.c */
int sample_main(int argc, char **argv);         /* trainer/cli/cli_sample.c */
int import_main(int argc, char **argv);         /* trainer/cli/cli_import.c */
int export_main(int argc, char **argv);         /* trainer/cli/cli_export.c */
int jobs_main(int argc, char **argv);           /* jobs/cli_jobs.c */
int plot_main(int argc, char **argv);           /* bench/cli/cli_plot.c */
int bench_train_main(int argc, char **argv);    /* bench/cli/bench_train.c */
int bench_decode_main(int argc, char **argv);   /* bench/cli/bench_decode.c */
int bench_ablation_main(int argc, char **argv); /* bench/cli/bench_ablation.c */
int bench_nfe_main(int argc, char **argv);      /* bench/cli/bench_nfe.c */
#ifdef KF_CUDA
int bench_attention_main(int argc, char **argv); /* bench/cli/bench_attention.cu */
#endif

#endif
