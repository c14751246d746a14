/* bench/cli/bench_decode.c — `kf bench decode CKPT...`: decoding throughput of AR
 * against K-Forcing, by the paper's protocol (section "Inference speed"):
 *
 *   prefixes    the first samples of the validation split of a shard set that
 *               have at least P tokens; P = 6 for `pad` (LM1B-style) data and
 *               64 for `wrap` (OWT-style) data unless --prefix-len says
 *   length      generate up to the data's sequence length (6 -> 128,
 *               64 -> 1024), capped so every method's cache fits the model's
 *               context; when k does not divide it, the last step emits the
 *               tokens left (decode.h), so LM1B's 122 new tokens run at k = 3
 *               and 4 as in the paper
 *   sampler     the released one: PFLM tokens are argmaxes under a frequency
 *               penalty (default 0.5, --freq-penalty), AR tokens inverse-CDF
 *               samples at tau without one
 *   timing      per (method, batch size): one warm-up run, then R timed runs
 *               (default 5) of trainer/infer/decode.h's decode_run, each model's
 *               output layer packed once beforehand (model_heads_pack, as a
 *               server keeps it between batches); throughput =
 *               generated tokens (special tokens included, no truncation) /
 *               seconds, averaged over the timed runs: wall-clock, or with
 *               --clock cpu the process's CPU time (all threads), which a
 *               shared machine's other jobs barely move when decoding runs on
 *               one thread (OMP_NUM_THREADS=1). At each
 *               batch size the methods take turns run by run (warm-ups, then
 *               run 1 of every method, run 2, ...), so a change in the
 *               machine's load during the benchmark (a shared machine) falls
 *               on every method alike rather than on whichever ran then
 *   methods     the AR checkpoint (one token per step, inverse-CDF sampling)
 *               and every PFLM checkpoint at each requested k <= k_train
 *               (default 2, 3, 4); speedup = tokens/s over AR's at that batch
 *
 * roofline    on the CPU backend: the read bandwidth and the GEMM's FLOP/s of
 *               the benchmark's threads measured first, and each method's
 *               tokens/s at its steps' roofline (decode_limits.h), the
 *               fraction reached and whether the reads or the FLOPs bound
 *               it, in the table and the JSON
 *   threads     --threads 1,2: every method at each count, the counts taking
 *               turns run by run as the methods do, the limits measured at
 *               each; the gain of each count over the first beside the
 *               gain its roofline allows
 *   read beside --read-beside: the read at a run's thread count measured just
 *               before and just after every timed run, and each run's
 *               tokens/s over the roofline at that read: a host whose
 *               memory speed changes within seconds is then compared with
 *               itself (a full read evicts the caches, so the runs start
 *               cold: for models far larger than the caches)
 *
 * Output: a table on stdout; asked for, the same as JSON (--json FILE) and a
 * grouped bar chart (--png FILE; bench/plot/chart.h): one group per batch
 * size, one bar per method.
 *
 * With --roofline DEVICE it decodes nothing for real: bench/roofline/roofline.h
 * prices one decode step of a run config's model shape on the named GPU.
 */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/plot/chart.h"
#include "bench/roofline/decode_limits.h"
#include "bench/roofline/roofline.h"
#include "commands.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "kernels/kernels.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/decode.h"
#include "trainer/infer/prefixes.h"
#include "trainer/infer/quality.h"
#include "trainer/model/model.h"
#include "trainer/train/optim.h"

#define MAX_LIST 16
#define MAX_METHODS 32

static const char USAGE[] =
    "usage: kf bench decode CKPT... --data DIR [--batch 4,16,128] [--k 2,3,4]\n"
    "                       [--prefix-len P] [--max-new N] [--runs R] [--tau T] [--seed S]\n"
    "                       [--backend cpu|cuda|auto] [--clock wall|cpu] [--json OUT.json]\n"
    "                       [--png OUT.png] [--precision fp32|fp16|bf16] [--threads 1,2]\n"
    "                       [--read-beside]\n"
    "       kf bench decode [CONFIG] --roofline DEVICE [--batch 4,16,128] [--k 2,3,4]\n"
    "                       [--cache-len L] [--prefix-len P] [--freq-penalty F]\n"
    "                       [--precision fp32|fp16|bf16] [key.path=value ...]\n"
    "\n"
    "Decoding throughput, the paper's protocol: prefixes from the validation split of the\n"
    "shard set DIR (P = 6 tokens for `pad` data, 64 for `wrap` data), completions up to the\n"
    "data's sequence length (capped by every model's context; the last step emits fewer\n"
    "than k tokens when k does not divide the length), one warm-up and R timed runs per\n"
    "method and batch size; tokens/s = generated tokens (special tokens included) /\n"
    "seconds (--clock), averaged over the runs (the methods take turns run by run, so a\n"
    "load change on a shared machine hits all alike). Decoding is the released sampler's:\n"
    "PFLM argmax with the frequency penalty, AR inverse-CDF sampling at --tau.\n"
    "Each CKPT is a checkpoint file or a directory holding model.safetensors (a stage's\n"
    "final/): the AR one is the baseline, each PFLM one runs at every --k <= its k_train.\n"
    "Quality of each method's completions of the largest batch (trainer/infer/quality.h): Gen-PPL\n"
    "under the AR checkpoint, mean unigram entropy per completion (nats), distinct-2/3 and\n"
    "mean length before EOS; a row with Gen-PPL > 1.3x, entropy or length < 0.9x AR's\n"
    "reads FLAG with the reasons. A prefix of the default length is cut to half the\n"
    "smallest context. On the CPU backend the run first measures the read bandwidth\n"
    "and the GEMM's FLOP/s at each thread count (--clock; with more than one thread,\n"
    "also one thread's, the counts in turns), and prints each method's tokens/s\n"
    "at the roofline of its steps (max of bytes / bandwidth, FLOPs / GEMM rate) and the\n"
    "fraction reached (bench/roofline/decode_limits.h).\n"
    "\n"
    "  --batch LIST   batch sizes (default 4,16,128)\n"
    "  --k LIST       K-Forcing tokens per step (default 2,3,4)\n"
    "  --runs R       timed runs after the warm-up (default 5)\n"
    "  --clock C      wall (default): wall-clock seconds; cpu: the process's CPU time\n"
    "                 (every thread's), for a loaded machine: with OMP_NUM_THREADS=1\n"
    "                 other jobs barely change it (cache and memory sharing still do);\n"
    "                 CPU backend only. Idle OpenMP workers spin a while on the wall\n"
    "                 clock when the threads fit on the CPUs, and sleep at once on the\n"
    "                 CPU clock (unless OMP_WAIT_POLICY is set)\n"
    "  --tau T        temperature (default 1)\n"
    "  --precision P  GEMMs and attention in fp32 (default), fp16 or bf16 (the paper's\n"
    "                 throughput runs), fp32 accumulation; Gen-PPL is scored in fp32\n"
    "  --freq-penalty P  PFLM frequency penalty (default 0.5, the released sampler's;\n"
    "                 0: the fused argmax path; AR samples without one, as the release)\n"
    "  --threads LIST  OpenMP thread counts to time every method at, the counts taking\n"
    "                 turns run by run like the methods (default: OMP_NUM_THREADS's);\n"
    "                 with two or more, a table of each count's tokens/s over the\n"
    "                 first count's beside the same ratio of the rooflines: what the\n"
    "                 measured read and GEMM allow more threads to add (CPU backend)\n"
    "  --read-beside  also read the memory at a run's thread count just before and just\n"
    "                 after every timed run (CPU backend), and print, over the runs whose\n"
    "                 two reads agree within 15%, each method's tokens/s over the roofline\n"
    "                 at its runs' own read: the host's memory speed can change within\n"
    "                 seconds. The read evicts the caches: for models larger than them\n"
    "  --json F, --png F  also write the table as JSON to F, the bar chart as a PNG to F\n"
    "                 (default: neither, only the table on stdout)\n"
    "\n"
    "--roofline DEVICE (h100, h200, a100) decodes nothing: for the model shape of the run\n"
    "config CONFIG (default configs/tiny.yaml; no checkpoint, no shards: random or no\n"
    "weights), an AR model and a PFLM with k_train the largest --k run decode_run (the\n"
    "model's step and the sampler above) on a recording backend from a synthetic prefix\n"
    "of P tokens (default min(64, L)) until the first step whose cache holds at least L\n"
    "rows (--cache-len, default half the config's seq_len: the middle of a completion),\n"
    "and that step's ops are priced at max(FLOPs / peak, bytes / bandwidth) on DEVICE.\n"
    "Prints per batch size and method (AR, then PFLM(k) for each --k): tokens per step,\n"
    "the cache rows, the estimated step time, tokens/s and its ratio to AR's, the time\n"
    "and MB of the blocks (their weights), attn_decode (the cache), the output layer\n"
    "with the sampler and host transfers, host waits per step and the costliest op.\n"
    "On a GPU (resources.backend not cpu) the steps also run there and the step's\n"
    "measured time (its ops timed one by one) is printed beside. --data, --runs,\n"
    "--clock, --tau, --seed, --backend, --max-new, --threads, --read-beside, --json and\n"
    "--png do not apply.\n";

typedef struct method {
    char label[32];
    const char *path;
    model *m;
    const model_heads *heads; /* the model's output layer, packed once */
    int64_t k;
    int threads;                        /* OpenMP threads it decodes on */
    int base;                           /* the AR method at the same thread count (-1: none) */
    double tps[MAX_LIST], sd[MAX_LIST]; /* per batch size */
    double roof[MAX_LIST];              /* tokens/s at the CPU roofline (0: not measured) */
    bool read_bound[MAX_LIST];          /* most of the roofline's time in read-bound steps */
    quality_row q;                      /* of the largest batch's completions */
} method;

/* The released sampler: PFLM argmaxes under the frequency penalty, AR samples without it. */
static decode_opts method_opts(const method *x, double tau, double pen, int64_t N, int64_t seed) {
    return (decode_opts){.k = x->k,
                         .tau = tau,
                         .max_new = N,
                         .seed = (uint64_t)seed,
                         .freq_penalty = x->m->cfg.kind == MODEL_AR ? 0.0f : (float)pen};
}

static model *load(kf_backend *be, const char *path, kf_err *err) {
    char p[4200];
    snprintf(p, sizeof p, "%s%s", path, fs_is_dir(path) ? "/model.safetensors" : "");
    if (!fs_exists(p)) {
        kf_err_set(err, "%s: no such checkpoint", p);
        return NULL;
    }
    return model_load(be, p, err);
}

/* The parsed command line. */
typedef struct decode_args {
    const char *ckpts[MAX_METHODS], *data, *backend, *json_path, *png_path, *clock_name, *precision;
    const char *roofline; /* --roofline DEVICE; NULL: measure */
    char **over;          /* --roofline: the config's overrides */
    int nck, nb, nk, n_over, nt;
    int64_t cache_len; /* --roofline: the cache rows before the priced step (0: seq_len / 2) */
    int prec;          /* --precision as a kf_precision */
    int64_t bs[MAX_LIST], ks[MAX_LIST], P, N, runs, seed; /* P, N: 0 = the protocol's */
    int64_t ts[MAX_LIST];                                 /* --threads (nt 0: OpenMP's count) */
    double tau, pen;
    bool cpu_clock, beside; /* beside: --read-beside */
} decode_args;

/* What a run needs, built from the arguments: the models, one method per
 * (checkpoint, k), the prefixes and the lengths. */
typedef struct decode_plan {
    kf_backend *be;
    model *models[MAX_METHODS];
    model_heads *heads[MAX_METHODS];
    method mt[MAX_METHODS * MAX_LIST];
    int nm, ar; /* ar: the AR method's index (at the first thread count), -1 without one */
    int32_t *pre, eos;
    int64_t P, N, bmax;
    int qb; /* the batch size whose completions are scored: the largest */
    /* the CPU backend's at each thread count and at one thread, measured at
     * the start (nlim 0: not measured) */
    decode_limits lim[MAX_LIST + 1];
    int nlim;
    /* the read's stream, for the limits and --read-beside (NULL: not the
     * CPU backend) */
    decode_read_probe *probe;
    /* --read-beside: per method, batch size and timed run, its tokens/s and
     * the read just before and after it (BESIDE doubles; NULL: not asked) */
    double *beside;
} decode_plan;

enum { BESIDE_TPS, BESIDE_BEFORE, BESIDE_AFTER, BESIDE };

/* Method i's run r (from 0) at batch index b in p->beside. */
static double *beside_at(const decode_plan *p, const decode_args *a, int i, int b, int64_t r) {
    return p->beside +
           (((size_t)i * (size_t)a->nb + (size_t)b) * (size_t)a->runs + (size_t)r) * BESIDE;
}

/* A run whose reads before and after it agree within 15%: the host's memory
 * speed did not visibly change while it ran. */
static bool beside_steady(const double *v) {
    double lo = fmin(v[BESIDE_BEFORE], v[BESIDE_AFTER]),
           hi = fmax(v[BESIDE_BEFORE], v[BESIDE_AFTER]);
    return lo > 0 && hi <= 1.15 * lo;
}

/* Tokens/s of method x's runs at batch B at the limits l; *read_bound: most
 * of the roofline's time in steps bound by the read. */
static double method_roof(const method *x, const decode_plan *p, const decode_args *a, int64_t B,
                          const decode_limits *l, bool *read_bound) {
    int screen = x->m->cfg.kind == MODEL_PFLM && a->pen == 0;
    double tr, t = decode_roofline_s(x->m, B, p->P, p->N, x->k, a->prec, screen, l, &tr);
    if (read_bound) *read_bound = tr > t / 2;
    return (double)(B * p->N) / t;
}

/* The limits measured at `threads` threads; NULL when not measured. */
static const decode_limits *plan_limits(const decode_plan *p, int threads) {
    for (int i = 0; i < p->nlim; i++)
        if (p->lim[i].threads == threads) return &p->lim[i];
    return NULL;
}

/* Method i's steady runs at batch index b (beside_steady): their count,
 * mean read, tokens/s and fraction of the roofline at each run's own read
 * (with the GEMM rate measured at the start). */
static int beside_summary(const decode_plan *p, const decode_args *a, int i, int b, double *bw,
                          double *tps, double *frac) {
    const method *x = &p->mt[i];
    decode_limits l = *plan_limits(p, x->threads);
    int n = 0;
    *bw = *tps = *frac = 0;
    for (int64_t r = 0; r < a->runs; r++) {
        const double *v = beside_at(p, a, i, b, r);
        if (!beside_steady(v)) continue;
        l.read_bw = (v[BESIDE_BEFORE] + v[BESIDE_AFTER]) / 2;
        *bw += l.read_bw;
        *tps += v[BESIDE_TPS];
        *frac += v[BESIDE_TPS] / method_roof(x, p, a, a->bs[b], &l, NULL);
        n++;
    }
    if (n) *bw /= n, *tps /= n, *frac /= n;
    return n;
}

/* The table as JSON: one row per method and batch size; with --read-beside
 * each row's runs as [tokens/s, read before, read after (bytes/s)] and
 * beside_summary's figures. */
static void write_json(FILE *f, const decode_plan *p, const decode_args *a) {
    const char *dev = p->be->name, *prec = a->precision, *clock = a->clock_name, *data = a->data;
    int64_t P = p->P, N = p->N;
    int runs = (int)a->runs, nb = a->nb, nm = p->nm;
    const int64_t *bs = a->bs;
    const method *mt = p->mt;
    fprintf(f, "{\"device\": \"%s\", \"precision\": \"%s\", \"clock\": \"%s\", \"data\": ", dev,
            prec, clock);
    json_write_str(f, data, strlen(data));
    fprintf(f,
            ", \"prefix_len\": %lld, \"max_new\": %lld, \"warmup\": 1, \"runs\": %d,\n \"rows\": [",
            (long long)P, (long long)N, runs);
    for (int i = 0; i < nm; i++)
        for (int b = 0; b < nb; b++) {
            /* decoding steps (forward passes) per completion, prefill included */
            fprintf(f,
                    "%s\n  {\"method\": \"%s\", \"k\": %lld, \"threads\": %d, \"batch\": %lld, "
                    "\"steps\": %lld, \"tokens_per_s\": %.2f, \"stdev\": %.2f, ",
                    i || b ? "," : "", mt[i].label, (long long)mt[i].k, mt[i].threads,
                    (long long)bs[b], (long long)((N + mt[i].k - 1) / mt[i].k), mt[i].tps[b],
                    mt[i].sd[b]);
            if (mt[i].roof[b] > 0)
                fprintf(f,
                        "\"roofline_tokens_per_s\": %.2f, \"roofline_fraction\": %.3f, "
                        "\"roofline_bound\": \"%s\", ",
                        mt[i].roof[b], mt[i].tps[b] / mt[i].roof[b],
                        mt[i].read_bound[b] ? "read" : "flops");
            int ar = mt[i].base;
            if (ar >= 0) fprintf(f, "\"speedup\": %.3f, ", mt[i].tps[b] / mt[ar].tps[b]);
            else fprintf(f, "\"speedup\": null, ");
            const quality_row *q = &mt[i].q;
            const double v[] = {q->gen_ppl, q->st.entropy, q->st.distinct[1], q->st.distinct[2],
                                q->st.mean_len};
            const char *key[] = {"gen_ppl", "entropy", "distinct_2", "distinct_3", "mean_len"};
            for (int j = 0; j < 5; j++)
                if (isfinite(v[j])) fprintf(f, "\"%s\": %.4g, ", key[j], v[j]);
                else fprintf(f, "\"%s\": null, ", key[j]);
            char flag[160] = "";
            if (ar >= 0) quality_flag(q, &mt[ar].q, flag, sizeof flag);
            fprintf(f, "\"flag\": ");
            json_write_str(f, flag, strlen(flag));
            fprintf(f, ", ");
            if (p->beside) {
                fprintf(f, "\"runs_beside\": [");
                for (int r = 0; r < runs; r++) {
                    const double *v = beside_at(p, a, i, b, r);
                    /* the reads in full: a reader recomputing which runs are
                     * steady (within 15%) must see what beside_steady saw */
                    fprintf(f, "%s[%.2f, %.17g, %.17g]", r ? ", " : "", v[BESIDE_TPS],
                            v[BESIDE_BEFORE], v[BESIDE_AFTER]);
                }
                double bw, tps, frac;
                int n = beside_summary(p, a, i, b, &bw, &tps, &frac);
                fprintf(f, "], \"beside_steady_runs\": %d, ", n);
                if (n)
                    fprintf(f, "\"beside_read\": %.4g, \"beside_roofline_fraction\": %.3f, ", bw,
                            frac);
            }
            fprintf(f, "\"ckpt\": ");
            json_write_str(f, mt[i].path, strlen(mt[i].path));
            fprintf(f, "}");
        }
    fprintf(f, "\n]}\n");
}

/* Parses the options into a; nonzero when the command ends here, with its
 * exit status in *code. */
static int parse_args(int argc, char **argv, decode_args *a, int *code) {
    *a = (decode_args){.backend = "auto",
                       .clock_name = "wall",
                       .precision = "fp32",
                       .nb = 3,
                       .nk = 3,
                       .bs = {4, 16, 128},
                       .ks = {2, 3, 4},
                       .runs = 5,
                       .seed = 1,
                       .tau = 1.0,
                       .pen = DECODE_FREQ_PENALTY_DEFAULT};
    const cli_opt opts[] = {
        {"--data", CLI_STR, .out = &a->data},
        {"--backend", CLI_STR, .out = &a->backend},
        {"--json", CLI_STR, .out = &a->json_path},
        {"--png", CLI_STR, .out = &a->png_path},
        {"--clock", CLI_STR, .out = &a->clock_name},
        {"--precision", CLI_STR, .out = &a->precision},
        {"--batch", CLI_INT_LIST, .out = a->bs, .n = &a->nb, .cap = MAX_LIST, .lo = 1,
         .hi = INFINITY},
        {"--k", CLI_INT_LIST, .out = a->ks, .n = &a->nk, .cap = MAX_LIST, .lo = 1, .hi = INFINITY},
        {"--prefix-len", CLI_INT, .out = &a->P, .lo = 1, .hi = INFINITY},
        {"--max-new", CLI_INT, .out = &a->N, .lo = 1, .hi = INFINITY},
        {"--runs", CLI_INT, .out = &a->runs, .lo = 1, .hi = INFINITY},
        {"--seed", CLI_INT, .out = &a->seed, .lo = 0, .hi = INFINITY},
        {"--tau", CLI_FLOAT, .out = &a->tau, .lo = 0, .hi = INFINITY, .above = true},
        {"--freq-penalty", CLI_FLOAT, .out = &a->pen, .lo = 0, .hi = INFINITY},
        {"--roofline", CLI_STR, .out = &a->roofline},
        {"--cache-len", CLI_INT, .out = &a->cache_len, .lo = 1, .hi = INFINITY},
        {"--threads", CLI_INT_LIST, .out = a->ts, .n = &a->nt, .cap = MAX_LIST, .lo = 1,
         .hi = 4096},
        {"--read-beside", CLI_FLAG, .out = &a->beside},
        CLI_OPT_END,
    };
    a->over = kf_calloc((size_t)argc + 1, sizeof *a->over);
    const cli_spec spec = {"kf bench decode",
                           USAGE,
                           opts,
                           .pos = a->ckpts,
                           .max_pos = MAX_METHODS,
                           .n_pos = &a->nck,
                           .over = a->over,
                           .n_over = &a->n_over};
    if (cli_parse(&spec, argc, argv, code)) return 1;
    *code = KF_EXIT_USAGE;
    if (strcmp(a->clock_name, "wall") && strcmp(a->clock_name, "cpu")) {
        fprintf(stderr, "kf bench decode: --clock: expected wall or cpu, got '%s'\n",
                a->clock_name);
        return 1;
    }
    a->cpu_clock = !strcmp(a->clock_name, "cpu");
    if ((a->prec = optim_precision_parse(a->precision)) < 0) {
        fprintf(stderr, "kf bench decode: --precision: expected fp32, fp16 or bf16, got '%s'\n",
                a->precision);
        return 1;
    }
    if (a->roofline) {
        if (a->nck > 1) {
            fprintf(stderr, "kf bench decode: --roofline takes one CONFIG, got %d\n", a->nck);
            return 1;
        }
        return 0;
    }
    if (a->n_over || a->cache_len) {
        fprintf(stderr, "kf bench decode: %s applies to --roofline only\n",
                a->n_over ? "a key.path=value override" : "--cache-len");
        return 1;
    }
    if (!a->nck || !a->data) {
        fprintf(stderr, "kf bench decode: at least one CKPT and --data DIR are required\n");
        fputs(USAGE, stderr);
        return 1;
    }
    if (strcmp(a->backend, "cpu") && strcmp(a->backend, "cuda") && strcmp(a->backend, "auto")) {
        fprintf(stderr, "kf bench decode: --backend must be cpu, cuda or auto\n");
        return 1;
    }
    for (int i = 0; i < a->nt; i++)
        for (int j = 0; j < i; j++)
            if (a->ts[i] == a->ts[j]) {
                fprintf(stderr, "kf bench decode: --threads: %lld given twice\n",
                        (long long)a->ts[i]);
                return 1;
            }
    return 0;
}

/* Every method at each --threads count: the first count's in place, then
 * a copy per further count (made before the originals take their label's
 * count), labelled with its count; each method's base is the AR method at
 * its count. */
static int plan_threads(decode_plan *p, const decode_args *a, kf_err *err) {
    int nt = a->nt ? a->nt : 1, n = p->nm;
    if (n * nt > MAX_METHODS * MAX_LIST)
        return kf_err_set(err, "%d methods at %d thread counts: more than %d rows", n, nt,
                          MAX_METHODS * MAX_LIST);
    for (int t = nt - 1; t >= 0; t--)
        for (int i = 0; i < n; i++) {
            method *x = &p->mt[t * n + i];
            if (t) *x = p->mt[i];
            x->threads = a->nt ? (int)a->ts[t] : omp_get_max_threads();
            x->base = p->ar >= 0 ? t * n + p->ar : -1;
            if (nt > 1) {
                size_t len = strlen(x->label);
                snprintf(x->label + len, sizeof x->label - len, " %dt", x->threads);
            }
        }
    p->nm = n * nt;
    return 0;
}

/* Loads every checkpoint (its output layer packed once) and makes its
 * methods: AR once, a PFLM checkpoint at every requested k it can run. */
static int plan_methods(decode_plan *p, const decode_args *a, kf_err *err) {
    for (int c = 0; c < a->nck; c++) {
        model *m = p->models[c] = load(p->be, a->ckpts[c], err);
        if (!m) return -1;
        p->heads[c] = model_heads_pack(m);
        if (m->cfg.kind == MODEL_AR) {
            if (p->ar >= 0)
                return kf_err_set(err, "%s and %s are both AR checkpoints: give one baseline",
                                  p->mt[p->ar].path, a->ckpts[c]);
            p->ar = p->nm;
            p->mt[p->nm++] =
                (method){.label = "AR", .path = a->ckpts[c], .m = m, .heads = p->heads[c], .k = 1};
            continue;
        }
        int any = 0;
        for (int j = 0; j < a->nk; j++) {
            int64_t k = a->ks[j];
            if (k > m->cfg.k_train || (m->cfg.head == HEAD_MTP && k != m->cfg.k_train)) continue;
            method *x = &p->mt[p->nm++];
            *x = (method){.path = a->ckpts[c], .m = m, .heads = p->heads[c], .k = k};
            /* several PFLM checkpoints are told apart by their position */
            char tag[12] = "";
            if (a->nck > 2) snprintf(tag, sizeof tag, "%d", c + 1);
            snprintf(x->label, sizeof x->label, "%s%s k=%lld",
                     m->cfg.head == HEAD_MTP ? "MTP" : "KF", tag, (long long)k);
            any = 1;
        }
        if (!any)
            return kf_err_set(err, "%s: k_train %lld: none of the requested --k values fits",
                              a->ckpts[c], (long long)m->cfg.k_train);
    }
    return plan_threads(p, a, err);
}

/* Reads the prefixes and fixes the completion length: the protocol's, capped
 * by every method's context; every method must be able to decode it. */
static int plan_lengths(decode_plan *p, const decode_args *a, kf_err *err) {
    int64_t ctx = INT64_MAX, data_len = 0;
    for (int c = 0; c < a->nck; c++)
        ctx = p->models[c]->cfg.seq_len < ctx ? p->models[c]->cfg.seq_len : ctx;
    if (prefixes_from_shards(a->data, &p->P, ctx, p->bmax, &p->pre, &data_len, &p->eos, err))
        return -1;
    if (p->N == 0) {
        p->N = data_len - p->P;
        for (int i = 0; i < p->nm; i++) {
            decode_opts o = method_opts(&p->mt[i], a->tau, a->pen, p->N, a->seed);
            while (p->N >= 1 && decode_cache_rows(p->mt[i].m, &o, p->P) > p->mt[i].m->cfg.seq_len)
                o.max_new = --p->N;
        }
        if (p->N < 1)
            return kf_err_set(
                err, "a prefix of %lld tokens leaves no room to generate in the models' context",
                (long long)p->P);
    }
    for (int i = 0; i < p->nm; i++) {
        decode_opts o = method_opts(&p->mt[i], a->tau, a->pen, p->N, a->seed);
        if (decode_check(p->mt[i].m, &o, p->P, err)) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return kf_err_set(err, "%s (%s): %s", p->mt[i].path, p->mt[i].label, msg);
        }
    }
    return 0;
}

/* The plan: backend, methods, prefixes and lengths. */
static int plan_make(decode_plan *p, const decode_args *a, kf_err *err) {
    *p = (decode_plan){.ar = -1, .eos = -1, .P = a->P, .N = a->N};
    for (int b = 0; b < a->nb; b++) {
        p->bmax = a->bs[b] > p->bmax ? a->bs[b] : p->bmax;
        p->qb = a->bs[b] > a->bs[p->qb] ? b : p->qb;
    }
    if (!(p->be = kernels_create(a->backend, err))) return -1;
    p->be->set_precision(p->be, (kf_precision)a->prec);
    if (a->nt && strcmp(p->be->name, "cpu"))
        return kf_err_set(err,
                          "--threads sets the CPU backend's OpenMP threads, not the %s "
                          "backend's",
                          p->be->name);
    if (a->beside && strcmp(p->be->name, "cpu"))
        return kf_err_set(err, "--read-beside reads the CPU's memory, not the %s backend's",
                          p->be->name);
    if (a->cpu_clock && strcmp(p->be->name, "cpu"))
        return kf_err_set(
            err,
            "--clock cpu times the CPU backend only (the %s backend's work is not this "
            "process's CPU time)",
            p->be->name);
    if (plan_methods(p, a, err)) return -1;
    return plan_lengths(p, a, err);
}

static void plan_free(decode_plan *p, int nck) {
    for (int c = 0; c < nck; c++) {
        model_heads_free(p->heads[c]);
        if (p->models[c]) model_free(p->models[c]);
    }
    if (p->be) p->be->destroy(p->be);
    free(p->pre);
    free(p->beside);
    decode_read_probe_free(p->probe);
}

/* Method i's quality of the completions qs of n prefixes, scored after the
 * clock stopped (scoring does not count against the method). */
static void score_quality(decode_plan *p, int i, quality_sample *qs, int64_t n, kf_err *err) {
    method *x = &p->mt[i];
    quality_stats_compute(qs, n, p->eos, (int32_t)x->m->cfg.mask_id, &x->q.st);
    quality_ppl ppl = {.ppl = NAN};
    if (p->ar >= 0 && quality_genppl(p->mt[p->ar].m, qs, n, p->eos, 16, &ppl, err)) {
        fprintf(stderr, "kf bench decode: %s: Gen-PPL not measured: %s\n", x->label, err->msg);
        ppl.ppl = NAN;
    }
    x->q.gen_ppl = ppl.ppl;
}

/* Times every method at every batch size (the methods taking turns run by
 * run) into tps and sd; the largest batch's last completions are scored.
 * With --read-beside each timed run is framed by two reads at its thread
 * count, outside its clock, into p->beside. */
static void run_batches(decode_plan *p, const decode_args *a, kf_err *err) {
    double (*now)(void) = a->cpu_clock ? clock_cpu_s : clock_now_s;
    int64_t bmax = p->bmax, P = p->P, N = p->N;
    int nt0 = omp_get_max_threads();
    uint64_t *keys = kf_malloc((size_t)bmax * sizeof(uint64_t));
    int32_t *out = kf_malloc((size_t)(bmax * N) * sizeof(int32_t));
    for (int64_t b = 0; b < bmax; b++) keys[b] = (uint64_t)b;
    double *sum = kf_malloc((size_t)p->nm * sizeof(double)),
           *sum2 = kf_malloc((size_t)p->nm * sizeof(double));
    quality_sample *qs = kf_malloc((size_t)bmax * sizeof *qs);
    for (int64_t b = 0; b < bmax; b++) qs[b] = (quality_sample){p->pre + b * P, P, out + b * N, N};
    decode_read_probe *probe = a->beside ? p->probe : NULL;
    if (probe) p->beside = kf_calloc((size_t)(p->nm * a->nb * a->runs * BESIDE), sizeof(double));
    for (int b = 0; b < a->nb; b++) {
        int64_t B = a->bs[b];
        for (int i = 0; i < p->nm; i++) sum[i] = sum2[i] = 0;
        for (int64_t r = 0; r <= a->runs; r++) /* r = 0: warm-up */
            for (int i = 0; i < p->nm; i++) {
                decode_opts o = method_opts(&p->mt[i], a->tau, a->pen, N, a->seed);
                omp_set_num_threads(p->mt[i].threads);
                double *v = probe && r ? beside_at(p, a, i, b, r - 1) : NULL;
                if (v) v[BESIDE_BEFORE] = decode_read_probe_run(probe, p->mt[i].threads, now);
                double t0 = now();
                decode_run(p->mt[i].m, p->mt[i].heads, p->pre, B, P, &o, keys, out);
                double tps = (double)(B * N) / (now() - t0);
                if (r == 0) continue;
                if (v) {
                    v[BESIDE_AFTER] = decode_read_probe_run(probe, p->mt[i].threads, now);
                    v[BESIDE_TPS] = tps;
                    fprintf(stderr,
                            "  batch %lld %-8s run %lld: %10.1f tokens/s, read %.1f before, %.1f "
                            "after (GB/s)\n",
                            (long long)B, p->mt[i].label, (long long)r, tps, v[BESIDE_BEFORE] / 1e9,
                            v[BESIDE_AFTER] / 1e9);
                }
                sum[i] += tps;
                sum2[i] += tps * tps;
                if (b == p->qb && r == a->runs) score_quality(p, i, qs, B, err);
            }
        omp_set_num_threads(nt0);
        for (int i = 0; i < p->nm; i++) {
            method *x = &p->mt[i];
            x->tps[b] = sum[i] / (double)a->runs;
            double var = sum2[i] / (double)a->runs - x->tps[b] * x->tps[b];
            x->sd[b] = var > 0 ? sqrt(var) : 0;
            const decode_limits *l = plan_limits(p, x->threads);
            if (l) x->roof[b] = method_roof(x, p, a, B, l, &x->read_bound[b]);
            fprintf(stderr, "  batch %lld %-8s %10.1f tokens/s\n", (long long)B, x->label,
                    x->tps[b]);
        }
    }
    free(qs);
    free(sum);
    free(sum2);
    free(keys);
    free(out);
}

/* One column heading per batch size, "BS=<size> <what>", right-aligned in
 * width characters after two spaces. */
static void print_batch_heads(const decode_args *a, const char *what, int width) {
    for (int b = 0; b < a->nb; b++) {
        char h[48];
        snprintf(h, sizeof h, "BS=%lld %s", (long long)a->bs[b], what);
        printf("  %*s", width, h);
    }
}

/* The table: one row per method, one column per batch size, then the
 * quality of the largest batch's completions. */
static void print_table(const decode_plan *p, const decode_args *a) {
    const method *mt = p->mt;
    printf("\nquality of the BS=%lld completions: Gen-PPL under the AR checkpoint, mean unigram "
           "entropy "
           "(nats), distinct-2/3, mean length before EOS\n%-10s",
           (long long)a->bs[p->qb], "method");
    print_batch_heads(a, "tok/s (x AR)", 22);
    printf(" %s\n", quality_header());
    for (int i = 0; i < p->nm; i++) {
        printf("%-10s", mt[i].label);
        int ar = mt[i].base;
        for (int b = 0; b < a->nb; b++) {
            char cell[48];
            if (ar >= 0)
                snprintf(cell, sizeof cell, "%.0f (%.2fx)", mt[i].tps[b],
                         mt[i].tps[b] / mt[ar].tps[b]);
            else snprintf(cell, sizeof cell, "%.0f", mt[i].tps[b]);
            printf("  %22s", cell);
        }
        char q[256];
        quality_format(&mt[i].q, ar >= 0 ? &mt[ar].q : NULL, q, sizeof q);
        printf(" %s\n", q);
    }
}

/* The measured limits, one thread count after another. */
static void print_limits(const decode_plan *p) {
    for (int i = 0; i < p->nlim; i++) {
        const decode_limits *l = &p->lim[i];
        printf("%s%d thread%s: read %.1f GB/s, GEMM %.1f GFLOP/s", i ? "; " : "", l->threads,
               l->threads > 1 ? "s" : "", l->read_bw / 1e9, l->gemm_flops / 1e9);
    }
}

/* Each method's tokens/s as a fraction of its CPU roofline (decode_limits.h). */
static void print_roofline(const decode_plan *p, const decode_args *a) {
    if (!p->nlim) return;
    printf("\nroofline: ");
    print_limits(p);
    printf(" (measured here, %s clock); tokens/s at the roofline, the fraction reached and "
           "what bounds most of the roofline's time (the read or the FLOPs)\n%-10s",
           a->clock_name, "method");
    print_batch_heads(a, "roof (frac, bound)", 26);
    printf("\n");
    for (int i = 0; i < p->nm; i++) {
        printf("%-10s", p->mt[i].label);
        for (int b = 0; b < a->nb; b++) {
            char cell[48];
            snprintf(cell, sizeof cell, "%.0f (%.2f, %s)", p->mt[i].roof[b],
                     p->mt[i].tps[b] / p->mt[i].roof[b], p->mt[i].read_bound[b] ? "read" : "flops");
            printf("  %26s", cell);
        }
        printf("\n");
    }
}

/* With two or more --threads counts: each method's tokens/s at every count
 * over the first count's, beside its roofline's ratio, the gain the
 * measured read and GEMM allow. */
static void print_scaling(const decode_plan *p, const decode_args *a) {
    if (a->nt < 2) return;
    int n = p->nm / a->nt;
    printf("\nthreads: tokens/s over the %lld-thread run's (the roofline's ratio: what the "
           "measured limits allow)\n%-10s",
           (long long)a->ts[0], "method");
    print_batch_heads(a, "gain (roof)", 22);
    printf("\n");
    for (int i = n; i < p->nm; i++) {
        const method *x = &p->mt[i], *x0 = &p->mt[i % n];
        printf("%-10s", x->label);
        for (int b = 0; b < a->nb; b++) {
            char cell[48];
            if (x->roof[b] > 0)
                snprintf(cell, sizeof cell, "%.2fx (%.2fx)", x->tps[b] / x0->tps[b],
                         x->roof[b] / x0->roof[b]);
            else snprintf(cell, sizeof cell, "%.2fx", x->tps[b] / x0->tps[b]);
            printf("  %22s", cell);
        }
        printf("\n");
    }
}

/* With --read-beside: each method's runs compared with the roofline at the
 * read measured around them. */
static void print_beside(const decode_plan *p, const decode_args *a) {
    if (!p->beside || !p->nlim) return;
    printf("\nread beside each run, just before and after it at its thread count; over the runs "
           "whose two reads agree within 15%%: their number, mean read (GB/s), tokens/s and "
           "fraction of the roofline at each run's own read\n%-10s",
           "method");
    print_batch_heads(a, "runs, read, tok/s, frac", 32);
    printf("\n");
    for (int i = 0; i < p->nm; i++) {
        printf("%-10s", p->mt[i].label);
        for (int b = 0; b < a->nb; b++) {
            double bw, tps, frac;
            int n = beside_summary(p, a, i, b, &bw, &tps, &frac);
            char cell[64];
            if (n)
                snprintf(cell, sizeof cell, "%d/%lld, %.1f, %.1f, %.2f", n, (long long)a->runs,
                         bw / 1e9, tps, frac);
            else snprintf(cell, sizeof cell, "0/%lld", (long long)a->runs);
            printf("  %32s", cell);
        }
        printf("\n");
    }
}

/* The chart: groups = batch sizes, bars = methods (the first CHART_MAX_SERIES). */
static int write_chart(const decode_plan *p, const decode_args *a, kf_err *err) {
    int nb = a->nb, ns = p->nm < CHART_MAX_SERIES ? p->nm : CHART_MAX_SERIES;
    if (ns < p->nm) fprintf(stderr, "kf bench decode: the chart shows the first %d methods\n", ns);
    char gl[MAX_LIST][24];
    const char *groups[MAX_LIST], *series[CHART_MAX_SERIES];
    double *vals = kf_malloc((size_t)(nb * ns) * sizeof(double));
    for (int b = 0; b < nb; b++) {
        snprintf(gl[b], sizeof gl[b], "batch %lld", (long long)a->bs[b]);
        groups[b] = gl[b];
        for (int s = 0; s < ns; s++) vals[b * ns + s] = p->mt[s].tps[b];
    }
    for (int s = 0; s < ns; s++) series[s] = p->mt[s].label;
    char title[128];
    snprintf(title, sizeof title, "decode throughput (%s, %lld -> +%lld tokens)", p->be->name,
             (long long)p->P, (long long)p->N);
    int rc = chart_bars(a->png_path, title, "tokens/s", groups, nb, series, ns, vals, err);
    free(vals);
    return rc;
}

/* The table on stdout, the JSON and the chart where asked for. */
static int report(const decode_plan *p, const decode_args *a, kf_err *err) {
    print_table(p, a);
    print_roofline(p, a);
    print_scaling(p, a);
    print_beside(p, a);
    if (a->json_path) {
        char *jtext = NULL;
        size_t jlen = 0;
        FILE *jf = open_memstream(&jtext, &jlen);
        write_json(jf, p, a);
        fclose(jf);
        int rc = fs_write_atomic(a->json_path, jtext, jlen, err);
        free(jtext);
        if (rc) return -1;
        printf("wrote %s\n", a->json_path);
    }
    if (a->png_path) {
        if (write_chart(p, a, err)) return -1;
        printf("wrote %s\n", a->png_path);
    }
    return 0;
}

int bench_decode_main(int argc, char **argv) {
    decode_args a;
    decode_plan p;
    int code;
    if (parse_args(argc, argv, &a, &code)) {
        free(a.over);
        return code;
    }
    if (a.roofline) {
        roofline_decode_args r = {.config = a.nck ? a.ckpts[0] : "configs/tiny.yaml",
                                  .n_over = a.n_over,
                                  .over = a.over,
                                  .device = a.roofline,
                                  .batch = a.bs,
                                  .n_batch = a.nb,
                                  .ks = a.ks,
                                  .n_k = a.nk,
                                  .cache_len = a.cache_len,
                                  .prefix_len = a.P,
                                  .freq_penalty = a.pen,
                                  .precision = a.prec};
        code = roofline_decode_bench(&r);
        free(a.over);
        return code;
    }
    /* spinning OpenMP workers would bill the CPU clock; on the wall clock
     * they are what keeps a decoding step's regions fed (omp_env.h), where
     * no --threads count exceeds the threads that were checked to fit */
    bool fit = true;
    for (int i = 0; i < a.nt; i++) fit = fit && a.ts[i] <= omp_get_max_threads();
    omp_env_decode(!a.cpu_clock && fit);
    kf_err err = {{0}};
    code = KF_EXIT_ERROR;
    if (plan_make(&p, &a, &err) == 0) {
        printf("decode benchmark: %s backend in %s, prefixes of %lld tokens from %s (valid), %lld "
               "new tokens, 1 warm-up + %lld timed runs (%s clock), tau %g, PFLM frequency "
               "penalty %g\n",
               p.be->name, a.precision, (long long)p.P, a.data, (long long)p.N, (long long)a.runs,
               a.clock_name, a.tau, a.pen);
        if (!strcmp(p.be->name, "cpu")) {
            /* every count timed, and one thread's beside them: what more
             * threads add under the same load */
            int ts[MAX_LIST + 1], one = 0;
            p.nlim = a.nt ? a.nt : 1;
            for (int i = 0; i < p.nlim; i++) {
                ts[i] = a.nt ? (int)a.ts[i] : omp_get_max_threads();
                one = one || ts[i] == 1;
            }
            if (!one) ts[p.nlim++] = 1;
            p.probe = decode_read_probe_create();
            decode_limits_measure(p.be, p.probe, a.cpu_clock ? clock_cpu_s : clock_now_s, ts,
                                  p.nlim, p.lim);
            printf("CPU limits (the counts in turns): ");
            print_limits(&p);
            printf("\n");
        }
        run_batches(&p, &a, &err);
        if (report(&p, &a, &err) == 0) code = KF_EXIT_OK;
    }
    if (code) fprintf(stderr, "kf bench decode: error: %s\n", err.msg);
    plan_free(&p, a.nck);
    free(a.over);
    return code;
}
