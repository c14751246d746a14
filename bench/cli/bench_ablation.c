/* bench/cli/bench_ablation.c — `kf bench ablation [RUN_DIR] [key=value...]`: the
 * paper's Table 2 ablation, run by bench/ablation.sh (training every variant
 * through `kf jobs run configs/ablation.yaml`, then `kf eval` on each). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fsutil.h"

int bench_ablation_main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf(
            "usage: kf bench ablation [RUN_DIR] [key=value...]\n"
            "\n"
            "Trains configs/ablation.yaml (AR, PFLM(1) -> PFLM(2), and K-Forcing(k=4) variants\n"
            "A: noise inversion + MTP head, B: noise inversion + fully causal, C: self-forcing +\n"
            "fully causal, all from the same AR checkpoint for the same steps) and prints the\n"
            "per-position validation NLL L_1..L_4 of each on its own supervision (the paper's\n"
            "Table 2). Runs bench/ablation.sh from the repository root (the current directory).\n"
            "RUN_DIR defaults to runs/ablation; overrides go to `kf jobs run`.\n");
        return KF_EXIT_OK;
    }
    const char *script = "bench/ablation.sh";
    if (!fs_exists(script)) {
        fprintf(stderr, "kf bench ablation: %s not found: run from the repository root\n", script);
        return KF_EXIT_ERROR;
    }
    char *args[64];
    int n = 0;
    args[n++] = "bash";
    args[n++] = (char *)script;
    for (int i = 1; i < argc && n < 63; i++) args[n++] = argv[i];
    args[n] = NULL;
    execvp("bash", args);
    perror("kf bench ablation: bash");
    return KF_EXIT_ERROR;
}
