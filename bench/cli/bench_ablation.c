/* bench/cli/bench_ablation.c — `kf bench ablation [RUN_DIR] [key=value...]`: the
 * paper's Table 2 ablation, run by bench/ablation.sh (training every variant
 * through `kf jobs run configs/ablation.yaml`, then `kf eval` on each). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "commands.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/fsutil.h"

static const char usage[] =
    "usage: kf bench ablation [RUN_DIR] [key=value...]\n"
    "\n"
    "Trains configs/ablation.yaml (AR, PFLM(1) -> PFLM(2), and K-Forcing(k=4) variants\n"
    "A: noise inversion + MTP head, B: noise inversion + fully causal, C: self-forcing +\n"
    "fully causal, all from the same AR checkpoint for the same steps) and prints the\n"
    "per-position validation NLL L_1..L_4 of each on its own supervision (the paper's\n"
    "Table 2). Runs bench/ablation.sh from the repository root (the current directory).\n"
    "RUN_DIR defaults to runs/ablation; overrides go to `kf jobs run`.\n";

int bench_ablation_main(int argc, char **argv) {
    const char *run_dir = NULL;
    char **over = kf_calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0, code;
    const cli_opt opts[] = {CLI_OPT_END};
    cli_spec spec = {"kf bench ablation", usage, opts, .pos = &run_dir, .max_pos = 1, .over = over,
                     .n_over = &n_over};
    if (cli_parse(&spec, argc, argv, &code)) {
        free(over);
        return code;
    }
    const char *script = "bench/ablation.sh";
    if (!fs_exists(script)) {
        fprintf(stderr, "kf bench ablation: %s not found: run from the repository root\n", script);
        free(over);
        return KF_EXIT_ERROR;
    }
    /* bash SCRIPT RUN_DIR [key=value...]: the script takes its first
     * argument as RUN_DIR, so the default is passed when overrides follow */
    char **args = kf_calloc((size_t)n_over + 4, sizeof *args);
    int n = 0;
    args[n++] = "bash";
    args[n++] = (char *)script;
    args[n++] = (char *)(run_dir ? run_dir : "runs/ablation");
    for (int i = 0; i < n_over; i++) args[n++] = over[i];
    args[n] = NULL;
    execvp("bash", args);
    perror("kf bench ablation: bash");
    free(args);
    free(over);
    return KF_EXIT_ERROR;
}
