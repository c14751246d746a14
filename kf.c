/* kf — one binary, git-style subcommands. This file only dispatches: each
 * command's entry point lives in its component (e.g. pipeline/cli_shards.c).
 * Entry points are weak so a build without a component still links and says
 * which command it lacks. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"

typedef int (*kf_cmd_fn)(int argc, char **argv);

#define KF_CMD(fn) int fn(int argc, char **argv) __attribute__((weak))
KF_CMD(tokenize_main);
KF_CMD(shards_main);
KF_CMD(train_main);
KF_CMD(eval_main);
KF_CMD(sample_main);
KF_CMD(bench_train_main);
KF_CMD(bench_attention_main);
KF_CMD(bench_decode_main);
KF_CMD(bench_ablation_main);
KF_CMD(jobs_main);
KF_CMD(import_main);
KF_CMD(plot_main);

static const struct {
    const char *name;
    const char *help;
} cmds[] = {
    {"tokenize", "gpt2|bert --vocab DIR [--decode] [--allow-special]   stdin -> ids"},
    {"shards", "build CONFIG [--jobs N] | verify DIR | inspect DIR | stats DIR"},
    {"train", "CONFIG --stage NAME --run-dir RUN [--resume] [key=value...]"},
    {"eval", "CKPT --data DIR [--k K]   validation NLL / per-position NLL"},
    {"sample", "CKPT [--k K] [--tau T] [--freq-penalty P] --prefix-file F.jsonl"},
    {"bench", "train|attention|decode|ablation ...   (tokenizer, shards: bench/*.sh)"},
    {"jobs", "plan|run|submit CONFIG | status|resume|cancel RUN"},
    {"import", "CKPT.safetensors --run-dir RUN --stage NAME   register a checkpoint"},
    {"plot", "LOG.jsonl [-o OUT.png]   loss curve"},
};


static const struct {
    const char *name;
    kf_cmd_fn fn;
    const char *help;
} benches[] = {
    {"train", bench_train_main, "tokens/s, ms/step and MFU per stage kind"},
    {"attention", bench_attention_main, "attention kernels: causal and SingleForward(k)"},
    {"decode", bench_decode_main, "AR vs K-Forcing decoding throughput"},
    {"ablation", bench_ablation_main, "noise-inversion variants A/B vs K-Forcing (paper Table 2)"},
};

/* `kf bench NAME ...`: each benchmark lives with the component it measures. */
static int bench_dispatch(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h")) {
        for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
            if (strcmp(benches[i].name, argv[1])) continue;
            if (!benches[i].fn) {
                fprintf(stderr, "kf: benchmark '%s' is not in this build\n", argv[1]);
                return KF_EXIT_ERROR;
            }
            return benches[i].fn(argc - 1, argv + 1);
        }
        fprintf(stderr, "kf bench: unknown benchmark '%s'\n", argv[1]);
    }
    FILE *f = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout : stderr;
    fprintf(f, "usage: kf bench NAME [ARGS...]\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(f, "  %-10s %s%s\n", benches[i].name, benches[i].help, benches[i].fn ? "" : "   [not in this build]");
    fprintf(f, "\nscripts (they drive whole kf processes): bench/tokenize.sh (GPT-2 encoding vs tiktoken),\n"
               "bench/shards.sh (kf shards build --jobs scaling), bench/ablation.sh\n");
    return f == stdout ? KF_EXIT_OK : KF_EXIT_USAGE;
}

static kf_cmd_fn lookup(const char *name) {
    if (!strcmp(name, "tokenize")) return tokenize_main;
    if (!strcmp(name, "shards")) return shards_main;
    if (!strcmp(name, "train")) return train_main;
    if (!strcmp(name, "eval")) return eval_main;
    if (!strcmp(name, "sample")) return sample_main;
    if (!strcmp(name, "bench")) return bench_dispatch;
    if (!strcmp(name, "jobs")) return jobs_main;
    if (!strcmp(name, "import")) return import_main;
    if (!strcmp(name, "plot")) return plot_main;
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: kf COMMAND [ARGS...]   (kf COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-9s %s%s\n", cmds[i].name, cmds[i].help,
                lookup(cmds[i].name) ? "" : "   [not in this build]");
    fprintf(f, "\nexit codes: 0 done, 1 error, 2 usage, 75 preempted (checkpoint written, requeue)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return KF_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return KF_EXIT_OK;
    }
    int known = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) known |= !strcmp(cmds[i].name, argv[1]);
    if (!known) {
        fprintf(stderr, "kf: unknown command '%s'\n\n", argv[1]);
        usage(stderr);
        return KF_EXIT_USAGE;
    }
    kf_cmd_fn fn = lookup(argv[1]);
    if (!fn) {
        fprintf(stderr, "kf: command '%s' is not in this build\n", argv[1]);
        return KF_EXIT_ERROR;
    }
    return fn(argc - 1, argv + 1);
}
