/* kf — one binary, git-style subcommands. This file only dispatches: each
 * command's entry point lives in its component (commands.h lists them) and
 * appears once in the tables below. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/error.h"

typedef int (*kf_cmd_fn)(int argc, char **argv);

static const struct {
    const char *name;
    kf_cmd_fn fn;
    const char *help;
} benches[] = {
    {"train", bench_train_main, "tokens/s, ms/step and MFU per stage kind"},
#ifdef KF_CUDA
    {"attention", bench_attention_main, "attention kernels: causal and SingleForward(k)"},
#else
    {"attention", NULL, "attention kernels: causal and SingleForward(k)"},
#endif
    {"decode", bench_decode_main, "AR vs K-Forcing decoding throughput"},
    {"ablation", bench_ablation_main, "noise-inversion variants A/B vs K-Forcing (paper Table 2)"},
    {"nfe", bench_nfe_main, "AR, MDLM, Medusa, PTP, K-Forcing: quality vs NFE (paper Table 3)"},
};

/* `kf bench NAME ...`: the benchmarks are bench/cli/bench_*.{c,cu}. */
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
        fprintf(f, "  %-10s %s%s\n", benches[i].name, benches[i].help,
                benches[i].fn ? "" : "   [not in this build]");
    fprintf(f, "\nscripts (they drive whole kf processes): bench/tokenize.sh (GPT-2 encoding vs "
               "tiktoken),\n"
               "bench/shards.sh (kf shards build --jobs scaling), bench/ablation.sh\n");
    return f == stdout ? KF_EXIT_OK : KF_EXIT_USAGE;
}

/* The commands, each once: name, entry point, one line of help. */
static const struct {
    const char *name;
    kf_cmd_fn fn;
    const char *help;
} cmds[] = {
    {"tokenize", tokenize_main,
     "gpt2|bert --vocab DIR [--decode] [--allow-special]   stdin -> ids"},
    {"shards", shards_main,
     "build CONFIG [--jobs N] [--only SET] [--force] | verify|inspect|stats DIR"},
    {"train", train_main, "CONFIG --stage NAME --run-dir RUN [--resume] [key=value...]"},
    {"eval", eval_main,
     "CKPT --data DIR [--k K] [--teacher TCKPT]   validation NLL / per-position NLL\n"
     "            --completions F.jsonl --evaluator CKPT   Gen-PPL, entropy, distinct-n, length\n"
     "            genppl F.jsonl --evaluator GPT2_DIR --vocab DIR   the paper's Gen-PPL"},
    {"sample", sample_main, "CKPT [--k K] [--tau T] [--freq-penalty P] --prefix-file F.jsonl"},
    {"bench", bench_dispatch,
     "train|attention|decode|ablation|nfe ...   (tokenizer, shards: bench/*.sh)"},
    {"jobs", jobs_main, "plan|run|submit CONFIG | status|resume|cancel RUN | check RUN STAGE"},
    {"import", import_main,
     "CKPT.safetensors --run-dir RUN --stage NAME   register a checkpoint\n"
     "            GPT2_DIR --out CKPT.safetensors   a Hugging Face GPT-2 as a checkpoint"},
    {"export", export_main,
     "CKPT --to release|hf --out DIR   released .ckpt / Hugging Face folder"},
    {"plot", plot_main, "LOG.jsonl [-o OUT.png]   loss curve"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kf COMMAND [ARGS...]   (kf COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-9s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f,
            "\nexit codes: 0 done, 1 error, 2 usage, 75 preempted (checkpoint written, requeue)\n");
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
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmds[i].name, argv[1])) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kf: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return KF_EXIT_USAGE;
}
