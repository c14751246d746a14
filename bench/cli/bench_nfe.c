/* bench/cli/bench_nfe.c — `kf bench nfe RUN`: the paper's quality–NFE comparison
 * (its Table 3) of every decoding paradigm present in a run directory.
 *
 * The same held-out prefixes (trainer/infer/prefixes.h: the validation split
 * of the run's data.valid, the protocol's prefix length) are completed by
 * every paradigm trainer/infer/paradigms.h finds in the run, at each k:
 * AR; MDLM at --mdlm-k (default 1, 2); Medusa and PTP at their stage's k;
 * K-Forcing at --kf-k (default 2, 3, 4) up to its k. Per row: NFE per
 * completion (paradigms.h: steps, or 2 x speculative iterations), tokens
 * emitted per speculative iteration, the quality of the completions
 * (trainer/infer/quality.h: Gen-PPL under the run's AR stage, entropy,
 * distinct-2/3, length before EOS) and tokens/s (generated tokens / the
 * seconds spent generating them; scoring is not timed). A paradigm the run
 * lacks is printed, and written to the JSON, as absent with the reason.
 *
 * Output: the table on stdout; asked for, the JSON (--json) and a chart of
 * Gen-PPL against NFE (--png; bench/plot/chart.h, one line per paradigm).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/plot/chart.h"
#include "commands.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/progress.h"
#include "kernels/kernels.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/decode.h"
#include "trainer/infer/paradigms.h"
#include "trainer/infer/prefixes.h"
#include "trainer/infer/quality.h"

#define MAX_K 8
#define MAX_ROWS 32

static const char USAGE[] =
    "usage: kf bench nfe RUN [--samples S] [--batch B] [--prefix-len P] [--max-new N]\n"
    "                    [--kf-k 2,3,4] [--mdlm-k 1,2] [--tau T] [--freq-penalty F]\n"
    "                    [--seed S] [--backend cpu|cuda|auto] [--clock wall|cpu]\n"
    "                    [--json OUT.json] [--png OUT.png] [--completions DIR]\n"
    "\n"
    "The paper's quality-NFE comparison (Table 3) on the run directory RUN (made by\n"
    "kf jobs run): the same S held-out prefixes (the validation split of the run's\n"
    "data.valid; P = 64 tokens for `wrap` data, 6 for `pad`, at most half the context)\n"
    "are completed to N new tokens (default: the data's sequence length minus P, capped\n"
    "by every model's context) by each decoding paradigm the run holds:\n"
    "  AR         the `ar` stage (or an `import` of an AR model): one token per pass,\n"
    "             inverse-CDF sampling at --tau\n"
    "  MDLM       an `mdlm` stage, unmasking k tokens per pass (--mdlm-k)\n"
    "  Medusa     a `medusa` stage: k heads draft, one AR pass verifies\n"
    "  PTP        the `noise_inversion_causal` stage (ablation variant B) drafts k\n"
    "             tokens, the AR stage verifies (trainer/infer/speculative.h: lossless\n"
    "             at --tau; rows decode one at a time, their acceptance being ragged)\n"
    "  K-Forcing  the PFLM stage with the largest k, at each --kf-k up to it\n"
    "A paradigm the run lacks (no such stage, not trained, or not decodable by this\n"
    "build) is listed as absent with the reason; nothing is decoded in its place.\n"
    "\n"
    "Per paradigm and k: NFE per completion (one per forward pass; a speculative\n"
    "iteration counts 2, its draft and its verifying pass, as the paper counts),\n"
    "acc/iter and tok/iter (speculative: drafts accepted and tokens emitted per\n"
    "iteration, the latter counting the verifier's own token), Gen-PPL under the AR\n"
    "stage (the run's own scorer), mean unigram entropy (nats), distinct-2/3,\n"
    "mean length before EOS, and tokens/s (generated tokens / seconds generating them,\n"
    "--clock); FLAG marks Gen-PPL > 1.3x, entropy or length < 0.9x AR's.\n"
    "\n"
    "  --samples S      prefixes completed by every paradigm (default 128)\n"
    "  --batch B        sequences decoded together (default 16)\n"
    "  --kf-k LIST      K-Forcing tokens per pass (default 2,3,4)\n"
    "  --mdlm-k LIST    MDLM tokens unmasked per pass (default 1,2)\n"
    "  --tau T          sampling temperature (default 1, the paper's)\n"
    "  --freq-penalty F K-Forcing's frequency penalty (decode.h; default 0: the\n"
    "                   push-forward map's own samples, as `kf jobs run` samples)\n"
    "  --clock C        wall (default) or cpu: the process's CPU time, every thread's\n"
    "                   (a loaded machine; CPU backend only)\n"
    "  --json F         also write the rows as JSON to F: per row method, k, stage, nfe,\n"
    "                   accepted_per_iter and tokens_per_iter (null unless speculative),\n"
    "                   gen_ppl, entropy, distinct_2, distinct_3, length, tokens_per_s,\n"
    "                   seconds, flag; and `absent`: method and reason\n"
    "  --png F          also draw Gen-PPL against NFE, one line per paradigm, to F\n"
    "  --completions D  also write each row's completions to D/METHOD-kK.jsonl (prefix,\n"
    "                   completion, eos: `kf eval genppl` scores them with GPT-2-large,\n"
    "                   the paper's evaluator, docs/eval.md)\n";

typedef struct nfe_args {
    const char *run, *backend, *clock_name, *json_path, *png_path, *completions;
    int64_t samples, batch, P, N, seed, kf_k[MAX_K], mdlm_k[MAX_K];
    int n_kf_k, n_mdlm_k;
    double tau, pen;
} nfe_args;

/* One measured row: a paradigm at one k. */
typedef struct nfe_row {
    const paradigm *p;
    int64_t k;
    double nfe;       /* mean per completion */
    double acc, tpi;  /* speculative: drafts accepted, tokens emitted per iteration; else NaN */
    double tps, secs; /* tokens/s, seconds generating */
    quality_row q;
    int32_t *out; /* the completions [S*N] */
} nfe_row;

static int parse_args(int argc, char **argv, nfe_args *a, int *code) {
    *a = (nfe_args){.backend = "auto",
                    .clock_name = "wall",
                    .samples = 128,
                    .batch = 16,
                    .seed = 1,
                    .kf_k = {2, 3, 4},
                    .n_kf_k = 3,
                    .mdlm_k = {1, 2},
                    .n_mdlm_k = 2,
                    .tau = 1.0};
    const cli_opt opts[] = {
        {"--samples", CLI_INT, .out = &a->samples, .lo = 1, .hi = 1 << 20},
        {"--batch", CLI_INT, .out = &a->batch, .lo = 1, .hi = 1 << 16},
        {"--prefix-len", CLI_INT, .out = &a->P, .lo = 1, .hi = INFINITY},
        {"--max-new", CLI_INT, .out = &a->N, .lo = 1, .hi = INFINITY},
        {"--kf-k", CLI_INT_LIST, .out = a->kf_k, .n = &a->n_kf_k, .cap = MAX_K, .lo = 1, .hi = 64},
        {"--mdlm-k", CLI_INT_LIST, .out = a->mdlm_k, .n = &a->n_mdlm_k, .cap = MAX_K, .lo = 1,
         .hi = 1 << 20},
        {"--tau", CLI_FLOAT, .out = &a->tau, .lo = 0, .hi = INFINITY, .above = true},
        {"--freq-penalty", CLI_FLOAT, .out = &a->pen, .lo = 0, .hi = INFINITY},
        {"--seed", CLI_INT, .out = &a->seed, .lo = 0, .hi = INFINITY},
        {"--backend", CLI_STR, .out = &a->backend},
        {"--clock", CLI_STR, .out = &a->clock_name},
        {"--json", CLI_STR, .out = &a->json_path},
        {"--png", CLI_STR, .out = &a->png_path},
        {"--completions", CLI_STR, .out = &a->completions},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf bench nfe", USAGE, opts, .pos = &a->run, .max_pos = 1};
    if (cli_parse(&spec, argc, argv, code)) return 1;
    *code = KF_EXIT_USAGE;
    if (!a->run) {
        fprintf(stderr, "kf bench nfe: RUN (a run directory) is required\n%s", USAGE);
        return 1;
    }
    if (strcmp(a->clock_name, "wall") && strcmp(a->clock_name, "cpu")) {
        fprintf(stderr, "kf bench nfe: --clock: expected wall or cpu, got '%s'\n", a->clock_name);
        return 1;
    }
    if (strcmp(a->backend, "cpu") && strcmp(a->backend, "cuda") && strcmp(a->backend, "auto")) {
        fprintf(stderr, "kf bench nfe: --backend: expected cpu, cuda or auto, got '%s'\n",
                a->backend);
        return 1;
    }
    return 0;
}

/* The rows to measure: each present paradigm at each of its k. */
static int plan_rows(const paradigm_set *s, const nfe_args *a, nfe_row *rows) {
    int n = 0;
    for (int id = 0; id < PARADIGM_COUNT; id++) {
        const paradigm *p = &s->p[id];
        if (!p->present) continue;
        const int64_t *ks = &p->k_max; /* AR, Medusa, PTP: their own k */
        int nk = 1;
        if (id == PARADIGM_KF) ks = a->kf_k, nk = a->n_kf_k;
        if (id == PARADIGM_MDLM) ks = a->mdlm_k, nk = a->n_mdlm_k;
        for (int j = 0; j < nk && n < MAX_ROWS; j++)
            if (ks[j] <= p->k_max)
                rows[n++] = (nfe_row){.p = p, .k = ks[j], .acc = NAN, .tpi = NAN};
    }
    return n;
}

static paradigm_opts opts_of(const nfe_args *a, const nfe_row *r, int64_t N) {
    return (paradigm_opts){.k = r->k,
                           .tau = a->tau,
                           .freq_penalty = (float)a->pen,
                           .max_new = N,
                           .seed = (uint64_t)a->seed};
}

/* The completion length: --max-new, or the data's length minus P, cut until
 * every row fits its models' context. */
static int plan_length(const nfe_args *a, const nfe_row *rows, int n, int64_t P, int64_t data_len,
                       int64_t *N, kf_err *err) {
    *N = a->N ? a->N : data_len - P;
    for (int i = 0; i < n; i++) {
        paradigm_opts o = opts_of(a, &rows[i], *N);
        while (!a->N && o.max_new > 1 && paradigm_check(rows[i].p, &o, P, err)) o.max_new--;
        *N = o.max_new;
    }
    for (int i = 0; i < n; i++) {
        paradigm_opts o = opts_of(a, &rows[i], *N);
        if (*N < 1 || paradigm_check(rows[i].p, &o, P, err)) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", *N < 1 ? "no room to generate" : err->msg);
            return kf_err_set(err, "%s k=%lld (stage %s): %s", paradigm_name(rows[i].p->id),
                              (long long)rows[i].k, rows[i].p->stage, msg);
        }
    }
    return 0;
}

/* Writes row r's completions as JSONL (kf sample's keys: prefix, completion,
 * eos), so that `kf eval genppl` can score them with GPT-2-large. */
static int write_completions(const char *dir, const nfe_row *r, const int32_t *pre, int64_t S,
                             int64_t P, int64_t N, int32_t eos, kf_err *err) {
    char path[4200], name[32];
    snprintf(name, sizeof name, "%s", paradigm_name(r->p->id));
    for (char *c = name; *c; c++) *c = *c == '-' ? '_' : (char)(*c | 0x20); /* k_forcing */
    snprintf(path, sizeof path, "%s/%s-k%lld.jsonl", dir, name, (long long)r->k);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (int64_t b = 0; b < S; b++) {
        fprintf(f, "{\"prefix\": [");
        for (int64_t i = 0; i < P; i++) fprintf(f, i ? ", %d" : "%d", pre[b * P + i]);
        fprintf(f, "], \"completion\": [");
        for (int64_t i = 0; i < N; i++) fprintf(f, i ? ", %d" : "%d", r->out[b * N + i]);
        fprintf(f, "], \"eos\": %d}\n", eos);
    }
    fclose(f);
    int rc = fs_mkdir_p(dir, err) ? -1 : fs_write_atomic(path, text, len, err);
    free(text);
    return rc;
}

/* Generates row r's S completions (batch at a time) into r->out [S*N],
 * timing the generation alone, then scores them. */
static int measure(nfe_row *r, const paradigm_set *s, const nfe_args *a, const int32_t *pre,
                   int64_t S, int64_t P, int64_t N, int32_t eos, kf_err *err) {
    double (*now)(void) = strcmp(a->clock_name, "cpu") ? clock_now_s : clock_cpu_s;
    paradigm_opts o = opts_of(a, r, N);
    uint64_t *keys = kf_malloc((size_t)S * sizeof *keys);
    int64_t *rounds = kf_malloc((size_t)S * sizeof *rounds),
            *accepted = kf_malloc((size_t)S * sizeof *accepted);
    r->out = kf_malloc((size_t)(S * N) * sizeof *r->out);
    for (int64_t b = 0; b < S; b++) keys[b] = (uint64_t)b;
    char label[64];
    snprintf(label, sizeof label, "%s k=%lld", paradigm_name(r->p->id), (long long)r->k);
    progress_begin(label, (double)(S * N), "tok");
    double secs = 0;
    int rc = 0;
    for (int64_t b0 = 0; b0 < S && !rc; b0 += a->batch) {
        int64_t B = S - b0 < a->batch ? S - b0 : a->batch;
        double t0 = now();
        rc = paradigm_generate(r->p, pre + b0 * P, B, P, &o, keys + b0, r->out + b0 * N,
                               rounds + b0, accepted + b0, err);
        secs += now() - t0;
        progress_update((double)((b0 + B) * N), NULL);
    }
    progress_end();
    double iters = 0, acc = 0;
    for (int64_t b = 0; !rc && b < S; b++) iters += (double)rounds[b], acc += (double)accepted[b];
    free(keys);
    free(rounds);
    free(accepted);
    if (rc) return -1;
    r->nfe = paradigm_nfe(r->p->id, iters / (double)S);
    if (paradigm_speculative(r->p->id)) r->acc = acc / iters, r->tpi = (double)(S * N) / iters;
    r->secs = secs;
    r->tps = (double)(S * N) / secs;

    quality_sample *qs = kf_malloc((size_t)S * sizeof *qs);
    for (int64_t b = 0; b < S; b++) qs[b] = (quality_sample){pre + b * P, P, r->out + b * N, N};
    quality_stats_compute(qs, S, eos, (int32_t)r->p->m->cfg.mask_id, &r->q.st);
    quality_ppl ppl = {.ppl = NAN};
    if (quality_genppl(s->p[PARADIGM_AR].m, qs, S, eos, 16, &ppl, err)) {
        fprintf(stderr, "kf bench nfe: %s: Gen-PPL not measured: %s\n", label, err->msg);
        ppl.ppl = NAN;
    }
    r->q.gen_ppl = ppl.ppl;
    free(qs);
    return a->completions ? write_completions(a->completions, r, pre, S, P, N, eos, err) : 0;
}

/* A number for the table ("-" when not measured). */
static void cell(char *buf, size_t cap, int w, int prec, double v) {
    if (isfinite(v)) snprintf(buf, cap, "%*.*f", w, prec, v);
    else snprintf(buf, cap, "%*s", w, "-");
}

static void print_table(FILE *f, const paradigm_set *s, const nfe_row *rows, int n, int64_t S,
                        int64_t P, int64_t N, const nfe_args *a) {
    const nfe_row *ar = NULL;
    for (int i = 0; i < n; i++)
        if (rows[i].p->id == PARADIGM_AR) ar = &rows[i];
    fprintf(f,
            "\nquality-NFE: %lld prefixes of %lld tokens from %s (valid), %lld new tokens each, "
            "tau %g, batch %lld, %s clock\n"
            "NFE per completion (speculative: 2 x iterations); acc/iter, tok/iter: drafts "
            "accepted and tokens emitted per speculative iteration; Gen-PPL under stage %s\n\n",
            (long long)S, (long long)P, s->rc->data_valid, (long long)N, a->tau,
            (long long)a->batch, a->clock_name, s->p[PARADIGM_AR].stage);
    fprintf(f, "%-10s %3s %8s %8s %8s %9s%s\n", "method", "k", "NFE", "acc/iter", "tok/iter",
            "tokens/s", quality_header());
    for (int i = 0; i < n; i++) {
        const nfe_row *r = &rows[i];
        char nfe[32], acc[32], tpi[32], tps[32], q[256];
        cell(nfe, sizeof nfe, 8, 1, r->nfe);
        cell(acc, sizeof acc, 8, 2, r->acc);
        cell(tpi, sizeof tpi, 8, 2, r->tpi);
        cell(tps, sizeof tps, 9, 0, r->tps);
        quality_format(&r->q, ar && ar != r ? &ar->q : NULL, q, sizeof q);
        fprintf(f, "%-10s %3lld %s %s %s %s%s\n", paradigm_name(r->p->id), (long long)r->k, nfe,
                acc, tpi, tps, q);
    }
    fprintf(f, "\nstages:");
    for (int id = 0; id < PARADIGM_COUNT; id++)
        if (s->p[id].present)
            fprintf(f, " %s %s%s%s%s;", paradigm_name((paradigm_id)id), s->p[id].stage,
                    s->p[id].ver[0] ? " (verifier " : "", s->p[id].ver, s->p[id].ver[0] ? ")" : "");
    fprintf(f, "\n");
    for (int id = 0; id < PARADIGM_COUNT; id++)
        if (!s->p[id].present)
            fprintf(f, "%-10s absent: %s\n", paradigm_name((paradigm_id)id), s->p[id].why);
}

static void json_num(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v)) fprintf(f, fmt, v);
    else fprintf(f, "null");
}

static void write_json(FILE *f, const char *dev, const paradigm_set *s, const nfe_row *rows, int n,
                       int64_t S, int64_t P, int64_t N, const nfe_args *a) {
    fprintf(f, "{\"run\": ");
    json_write_str(f, a->run, strlen(a->run));
    fprintf(f,
            ", \"device\": \"%s\", \"clock\": \"%s\", \"samples\": %lld, \"prefix_len\": %lld, "
            "\"max_new\": %lld, \"batch\": %lld, \"tau\": %g, \"seed\": %lld, \"scorer\": ",
            dev, a->clock_name, (long long)S, (long long)P, (long long)N, (long long)a->batch,
            a->tau, (long long)a->seed);
    json_write_str(f, s->p[PARADIGM_AR].stage, strlen(s->p[PARADIGM_AR].stage));
    fprintf(f, ",\n \"rows\": [");
    const nfe_row *ar = NULL;
    for (int i = 0; i < n; i++)
        if (rows[i].p->id == PARADIGM_AR) ar = &rows[i];
    for (int i = 0; i < n; i++) {
        const nfe_row *r = &rows[i];
        fprintf(f, "%s\n  {\"method\": \"%s\", \"k\": %lld, \"stage\": ", i ? "," : "",
                paradigm_name(r->p->id), (long long)r->k);
        json_write_str(f, r->p->stage, strlen(r->p->stage));
        if (r->p->ver[0]) {
            fprintf(f, ", \"verifier\": ");
            json_write_str(f, r->p->ver, strlen(r->p->ver));
        }
        json_num(f, "nfe", r->nfe, "%.4g");
        json_num(f, "accepted_per_iter", r->acc, "%.4g");
        json_num(f, "tokens_per_iter", r->tpi, "%.4g");
        json_num(f, "gen_ppl", r->q.gen_ppl, "%.6g");
        json_num(f, "entropy", r->q.st.entropy, "%.6g");
        json_num(f, "distinct_2", r->q.st.distinct[1], "%.6g");
        json_num(f, "distinct_3", r->q.st.distinct[2], "%.6g");
        json_num(f, "length", r->q.st.mean_len, "%.6g");
        json_num(f, "tokens_per_s", r->tps, "%.6g");
        json_num(f, "seconds", r->secs, "%.6g");
        char flag[160] = "";
        if (ar && ar != r) quality_flag(&r->q, &ar->q, flag, sizeof flag);
        fprintf(f, ", \"flag\": ");
        json_write_str(f, flag, strlen(flag));
        fprintf(f, "}");
    }
    fprintf(f, "\n ],\n \"absent\": [");
    int first = 1;
    for (int id = 0; id < PARADIGM_COUNT; id++) {
        if (s->p[id].present) continue;
        fprintf(f, "%s\n  {\"method\": \"%s\", \"reason\": ", first ? "" : ",",
                paradigm_name((paradigm_id)id));
        json_write_str(f, s->p[id].why, strlen(s->p[id].why));
        fprintf(f, "}");
        first = 0;
    }
    fprintf(f, "\n ]}\n");
}

/* Gen-PPL against NFE: one line per paradigm, its points in NFE order. */
static int write_chart(const char *path, const nfe_row *rows, int n, int64_t N, kf_err *err) {
    chart_series ser[CHART_MAX_SERIES];
    double x[MAX_ROWS], y[MAX_ROWS];
    int ns = 0, used = 0;
    double lo = INFINITY, hi = 0;
    for (int id = 0; id < PARADIGM_COUNT && ns < CHART_MAX_SERIES; id++) {
        int first = used;
        for (int i = 0; i < n; i++) {
            if (rows[i].p->id != (paradigm_id)id || !isfinite(rows[i].q.gen_ppl)) continue;
            int j = used++; /* insertion by NFE */
            while (j > first && x[j - 1] > rows[i].nfe) {
                x[j] = x[j - 1];
                y[j] = y[j - 1];
                j--;
            }
            x[j] = rows[i].nfe;
            y[j] = rows[i].q.gen_ppl;
            lo = fmin(lo, y[j]);
            hi = fmax(hi, y[j]);
        }
        if (used > first)
            ser[ns++] = (chart_series){paradigm_name((paradigm_id)id), x + first, y + first,
                                       (size_t)(used - first)};
    }
    if (!ns) return kf_err_set(err, "%s: no row has a Gen-PPL to plot", path);
    char title[96];
    snprintf(title, sizeof title, "Gen-PPL vs NFE (%lld-token completions)", (long long)N);
    return chart_lines(path, title, "NFE per completion", ser, ns, lo > 0 && hi / lo > 5, err);
}

static int report(const paradigm_set *s, const char *dev, const nfe_row *rows, int n, int64_t S,
                  int64_t P, int64_t N, const nfe_args *a, kf_err *err) {
    print_table(stdout, s, rows, n, S, P, N, a);
    if (a->json_path) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        write_json(f, dev, s, rows, n, S, P, N, a);
        fclose(f);
        int rc = fs_write_atomic(a->json_path, text, len, err);
        free(text);
        if (rc) return -1;
        printf("wrote %s\n", a->json_path);
    }
    if (a->png_path) {
        if (write_chart(a->png_path, rows, n, N, err)) return -1;
        printf("wrote %s\n", a->png_path);
    }
    return 0;
}

int bench_nfe_main(int argc, char **argv) {
    nfe_args a;
    int code;
    if (parse_args(argc, argv, &a, &code)) return code;
    omp_env_passive();
    kf_err err = {{0}};
    kf_backend *be = kernels_create(a.backend, &err);
    paradigm_set s = {0};
    int32_t *pre = NULL, eos = -1;
    nfe_row rows[MAX_ROWS];
    int n = 0, rv = -1;
    int64_t P = a.P, N = 0, data_len = 0, ctx = INT64_MAX;
    if (be && strcmp(a.clock_name, "cpu") == 0 && strcmp(be->name, "cpu"))
        kf_err_set(&err, "--clock cpu times the CPU backend only, not %s", be->name);
    else if (be && paradigm_set_open(&s, a.run, be, &err) == 0) {
        n = plan_rows(&s, &a, rows);
        for (int i = 0; i < n; i++)
            ctx = rows[i].p->m->cfg.seq_len < ctx ? rows[i].p->m->cfg.seq_len : ctx;
        if (prefixes_from_shards(s.rc->data_valid, &P, ctx, a.samples, &pre, &data_len, &eos,
                                 &err) == 0 &&
            plan_length(&a, rows, n, P, data_len, &N, &err) == 0) {
            rv = 0;
            for (int i = 0; i < n && !rv; i++)
                rv = measure(&rows[i], &s, &a, pre, a.samples, P, N, eos, &err);
            if (!rv) rv = report(&s, be->name, rows, n, a.samples, P, N, &a, &err);
        }
    }
    if (rv) fprintf(stderr, "kf bench nfe: error: %s\n", err.msg);
    free(pre);
    for (int i = 0; i < n; i++) free(rows[i].out);
    paradigm_set_close(&s);
    if (be) be->destroy(be);
    return rv ? KF_EXIT_ERROR : KF_EXIT_OK;
}
