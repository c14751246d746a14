/* trainer/cli/cli_sample.c — `kf sample CKPT`: completions from an AR or PFLM
 * checkpoint with the KV-cached decoder (trainer/infer/decode.h), as JSONL. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "kernels/kernels.h"
#include "tokenize/tokenizer.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/decode.h"
#include "trainer/infer/prefixes.h"
#include "trainer/infer/speculative.h"
#include "trainer/model/model.h"
#include "trainer/train/checkpoint.h"
#include "trainer/train/optim.h"

static const char USAGE[] =
    "usage: kf sample CKPT [--k K] [--tau T] [--freq-penalty P] [--prefix-file F.jsonl]\n"
    "                 [--batch B] [--n-per-prefix M] [--max-new N] [--seed S]\n"
    "                 [--position-temp T0,T1,...]\n"
    "                 [--vocab DIR] [--eos ID] [--bos ID] [--backend cpu|cuda|auto]\n"
    "                 [--precision fp32|fp16|bf16] [--draft DCKPT [--greedy]]\n"
    "\n"
    "Generates completions with the KV-cached decoder: an AR checkpoint one token per\n"
    "step (inverse-CDF sampling at temperature T), a PFLM checkpoint K <= k_train tokens\n"
    "per step (K-Forcing; T conditions the noise encoder). CKPT is a .safetensors file, a\n"
    "stage's final/ directory or a step-N checkpoint directory (its EMA weights).\n"
    "\n"
    "  --prefix-file F  JSONL, one prefix per line: {\"prefix\": [ids...]} or, with --vocab,\n"
    "                   {\"text\": \"...\"}; without it one prefix holding the BOS token\n"
    "  --vocab DIR      tokenizer files (vocab.json+merges.txt: gpt2, vocab.txt: bert) to\n"
    "                   encode text prefixes and detokenise completions\n"
    "  --n-per-prefix M completions per prefix (default 1); --batch B sequences per\n"
    "                   decoding batch (default 16; a batch holds prefixes of one length)\n"
    "  --max-new N      tokens generated per completion (default 64)\n"
    "  --k K (default k_train)  --tau T (default 1)\n"
    "  --freq-penalty P each emitted token's logits -= P x its count among the tokens\n"
    "                   generated so far; default 0.5 for a PFLM checkpoint (the released\n"
    "                   sampler's default; its scripts suggest 0.2-0.5 by k and dataset),\n"
    "                   0 for AR (the release samples AR without it)\n"
    "  --freq-penalty-table lm1b|owt  PFLM: the penalty the release's scripts use at the\n"
    "                   decoding k (lm1b 0.2/0.4/0.5, owt 0.3/0.5/0.5 for k = 2/3/4; 0.5\n"
    "                   at other k) instead of one value\n"
    "  --seed S         completion j of prefix i uses draws keyed (S, i*M + j)\n"
    "  --position-temp LIST  PFLM: one temperature per output position of a step; 0 =\n"
    "                   the argmax (push-forward decoding, the default), T > 0 = sampling\n"
    "                   the head's softmax at T. Not the released sampler (argmax with the\n"
    "                   frequency penalty): an older commit of the release used\n"
    "                   0,0.3,0.5,0.7 (OWT) and 0,0.2,0.4,0.6 (LM1B) before the penalty\n"
    "  --eos ID, --bos ID  override the tokenizer's (text is cut at the first EOS)\n"
    "  --precision P    the GEMMs and attention in fp32 (default), or in fp16 or bf16 with\n"
    "                   fp32 accumulation (the paper decodes in bf16); logits stay fp32\n"
    "  --draft DCKPT    speculative decoding (trainer/infer/speculative.h): CKPT (an AR)\n"
    "                   verifies K tokens a step drafted by DCKPT, a noise_inversion_causal\n"
    "                   PFLM (PTP) or a medusa stage's model; the output is CKPT's in\n"
    "                   distribution (--k defaults to the draft's k_train; no penalty)\n"
    "  --greedy         with --draft: CKPT's greedy tokens\n"
    "\n"
    "Output (stdout): one JSON object per completion: prefix (ids), completion (ids),\n"
    "text (detokenised, truncated at the first EOS; with --vocab), k, tau, seed, eos (the\n"
    "EOS id, when known), model_sha256 (of the weights file), tokens_per_s (the batch's\n"
    "generated tokens / wall-clock seconds); with --draft also method (ptp, medusa), nfe\n"
    "(2 x draft-verify iterations, the paper's count), iters, accepted (draft tokens).\n";

typedef struct job {
    int32_t *prefix;
    int64_t n;
    int64_t index; /* prefix number * M + copy: the RNG key */
} job;

static int cmp_len(const void *a, const void *b) {
    const job *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The parsed command line. */
typedef struct sample_args {
    const char *ckpt, *prefix_file, *vocab, *backend, *precision, *draft;
    bool greedy;
    /* k 0, eos and bos -2, pen NAN: from the checkpoint and the tokenizer */
    int64_t k, batch, per, max_new, seed, eos, bos;
    int prec; /* --precision as a kf_precision */
    double tau, pen, ptemp[64];
    const char *pen_table; /* --freq-penalty-table, or NULL */
    int nptemp;
} sample_args;

/* What the run needs: the tokenizer, the prefixes, the model and its decoding options. */
typedef struct sample_plan {
    char path[4096]; /* the checkpoint's weights */
    char sha[65];    /* their sha256: which weights made the completions */
    tok *tk;
    int32_t **pre;
    int64_t *plen, npre, eos;
    kf_backend *be;
    model *m;
    decode_opts o;
    model *draft; /* --draft, or NULL */
    spec_opts so;
} sample_plan;

/* Parses the options into a; nonzero when the command ends here, with its
 * exit status in *code. */
static int parse_args(int argc, char **argv, sample_args *a, int *code) {
    *a = (sample_args){.backend = "cpu",
                       .precision = "fp32",
                       .batch = 16,
                       .per = 1,
                       .max_new = 64,
                       .eos = -2,
                       .bos = -2,
                       .tau = 1.0,
                       .pen = NAN};
    const cli_opt opts[] = {
        {"--k", CLI_INT, .out = &a->k, .lo = 1, .hi = INFINITY},
        {"--tau", CLI_FLOAT, .out = &a->tau, .lo = 0, .hi = INFINITY, .above = true},
        {"--freq-penalty", CLI_FLOAT, .out = &a->pen},
        {"--freq-penalty-table", CLI_STR, .out = &a->pen_table},
        {"--position-temp", CLI_FLOAT_LIST, .out = a->ptemp, .n = &a->nptemp, .cap = 64},
        {"--prefix-file", CLI_STR, .out = &a->prefix_file},
        {"--batch", CLI_INT, .out = &a->batch, .lo = 1, .hi = INFINITY},
        {"--n-per-prefix", CLI_INT, .out = &a->per, .lo = 1, .hi = INFINITY},
        {"--max-new", CLI_INT, .out = &a->max_new, .lo = 1, .hi = INFINITY},
        {"--seed", CLI_INT, .out = &a->seed, .lo = 0, .hi = INFINITY},
        {"--vocab", CLI_STR, .out = &a->vocab},
        {"--eos", CLI_INT, .out = &a->eos, .lo = -1, .hi = INFINITY},
        {"--bos", CLI_INT, .out = &a->bos, .lo = 0, .hi = INFINITY},
        {"--backend", CLI_STR, .out = &a->backend},
        {"--precision", CLI_STR, .out = &a->precision},
        {"--draft", CLI_STR, .out = &a->draft},
        {"--greedy", CLI_FLAG, .out = &a->greedy},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf sample", USAGE, opts, .pos = &a->ckpt, .max_pos = 1};
    if (cli_parse(&spec, argc, argv, code)) return 1;
    if (!a->ckpt) {
        fputs(USAGE, stderr);
        *code = KF_EXIT_USAGE;
        return 1;
    }
    if (a->pen_table && (decode_release_penalty(a->pen_table, 2) < 0 || !isnan(a->pen))) {
        fprintf(stderr,
                "kf sample: --freq-penalty-table: expected lm1b or owt, without "
                "--freq-penalty (got '%s')\n",
                a->pen_table);
        *code = KF_EXIT_USAGE;
        return 1;
    }
    if ((a->greedy && !a->draft) ||
        (a->draft && (a->nptemp || a->pen_table || (!isnan(a->pen) && a->pen != 0)))) {
        fprintf(stderr, "kf sample: --greedy needs --draft; --draft takes no frequency penalty "
                        "or position temperatures (the output is the AR's)\n");
        *code = KF_EXIT_USAGE;
        return 1;
    }
    if ((a->prec = optim_precision_parse(a->precision)) < 0) {
        fprintf(stderr, "kf sample: --precision: expected fp32, fp16 or bf16, got '%s'\n",
                a->precision);
        *code = KF_EXIT_USAGE;
        return 1;
    }
    return 0;
}

/* The tokenizer (--vocab), the EOS id and the prefixes: the file's, or one
 * holding the BOS token. Returns an exit status. */
static int plan_prefixes(sample_plan *p, const sample_args *a, kf_err *err) {
    tok *tk = NULL;
    if (a->vocab && !(tk = p->tk = tok_load_dir(a->vocab, err))) return KF_EXIT_ERROR;
    p->eos = a->eos;
    int64_t bos = a->bos;
    if (p->eos == -2)
        p->eos = tk ? (tok_special_id(tk, "eos") >= 0 ? tok_special_id(tk, "eos")
                                                      : tok_special_id(tk, "sep"))
                    : -1;
    if (bos == -2)
        bos = tk ? (tok_special_id(tk, "bos") >= 0 ? tok_special_id(tk, "bos")
                                                   : tok_special_id(tk, "cls"))
                 : -1;
    if (a->prefix_file)
        return prefixes_read(a->prefix_file, tk, &p->pre, &p->plen, &p->npre, err) ? KF_EXIT_ERROR
                                                                                   : KF_EXIT_OK;
    if (bos < 0) {
        kf_err_set(
            err, "without --prefix-file the prefix is the BOS token: give --vocab DIR or --bos ID");
        return KF_EXIT_USAGE;
    }
    p->npre = 1;
    p->pre = kf_malloc(sizeof *p->pre);
    p->plen = kf_malloc(sizeof *p->plen);
    p->pre[0] = kf_malloc(sizeof(int32_t));
    p->pre[0][0] = (int32_t)bos;
    p->plen[0] = 1;
    return KF_EXIT_OK;
}

/* The model, its decoding options (k and the penalty by default from its
 * kind) and every prefix checked against them. Returns an exit status. */
static int plan_model(sample_plan *p, const sample_args *a, kf_err *err) {
    p->be = kernels_create(a->backend, err);
    model *m = p->m = p->be ? model_load(p->be, p->path, err) : NULL;
    if (!m) return KF_EXIT_ERROR;
    if (m->cfg.bidir) {
        kf_err_set(err,
                   "%s: a masked-diffusion model (bidirectional attention); kf sample decodes "
                   "causal models left to right",
                   p->path);
        return KF_EXIT_ERROR;
    }
    p->be->set_precision(p->be, (kf_precision)a->prec);
    if (a->draft) {
        char dpath[4096], dsha[65];
        if (ckpt_resolve_teacher(a->draft, dpath, sizeof dpath, dsha, err) ||
            !(p->draft = model_load(p->be, dpath, err)))
            return KF_EXIT_ERROR;
        if (spec_draft_of(p->draft) == SPEC_MEDUSA && m->cfg.kind == MODEL_AR &&
            p->draft->cfg.hidden == m->cfg.hidden && p->draft->cfg.blocks == m->cfg.blocks &&
            p->draft->cfg.heads == m->cfg.heads && p->draft->cfg.vocab == m->cfg.vocab)
            spec_medusa_attach(p->draft, m);
        p->so = (spec_opts){.k = a->k ? a->k : p->draft->cfg.k_train,
                            .tau = a->tau,
                            .greedy = a->greedy,
                            .max_new = a->max_new,
                            .seed = (uint64_t)a->seed};
    }
    int64_t k = a->k ? a->k : m->cfg.kind == MODEL_AR ? 1 : m->cfg.k_train;
    if (p->draft) k = 1; /* the verifier's decode_opts, checked below */
    double pen = !isnan(a->pen)            ? a->pen
                 : m->cfg.kind == MODEL_AR ? 0.0
                 : a->pen_table            ? decode_release_penalty(a->pen_table, k)
                                           : DECODE_FREQ_PENALTY_DEFAULT;
    p->o = (decode_opts){.k = k,
                         .tau = a->tau,
                         .freq_penalty = (float)pen,
                         .max_new = a->max_new,
                         .seed = (uint64_t)a->seed,
                         .position_temp = a->nptemp ? a->ptemp : NULL,
                         .n_position_temp = a->nptemp};
    for (int64_t i = 0; i < p->npre; i++) {
        for (int64_t j = 0; j < p->plen[i]; j++)
            if (p->pre[i][j] >= m->cfg.vocab) {
                kf_err_set(
                    err, "%s: prefix %lld has token id %d, outside the model's vocabulary of %lld",
                    a->prefix_file ? a->prefix_file : "prefix", (long long)i + 1, p->pre[i][j],
                    (long long)m->cfg.vocab);
                return KF_EXIT_ERROR;
            }
        if (p->draft ? spec_check(m, p->draft, &p->so, p->plen[i], err)
                     : decode_check(m, &p->o, p->plen[i], err)) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            kf_err_set(err, "prefix %lld: %s", (long long)i + 1, msg);
            return KF_EXIT_ERROR;
        }
    }
    return KF_EXIT_OK;
}

static void plan_free(sample_plan *p) {
    for (int64_t i = 0; i < p->npre; i++) free(p->pre[i]);
    free(p->pre);
    free(p->plen);
    model_free(p->m);
    model_free(p->draft);
    tok_free(p->tk);
    if (p->be) p->be->destroy(p->be);
}

/* One completion c of prefix pre (P tokens) as a JSON line; with a
 * tokenizer, its text up to the first EOS. */
static void print_completion(const sample_plan *p, const sample_args *a, const int32_t *pre,
                             int64_t P, const int32_t *c, double tps, const spec_stats *st) {
    int64_t max_new = a->max_new;
    printf("{\"prefix\": [");
    for (int64_t j = 0; j < P; j++) printf(j ? ", %d" : "%d", pre[j]);
    printf("], \"completion\": [");
    for (int64_t j = 0; j < max_new; j++) printf(j ? ", %d" : "%d", c[j]);
    printf("]");
    if (p->tk) {
        int64_t n = 0;
        while (n < max_new && c[n] != p->eos) n++;
        tok_bytes txt = {0};
        /* ids past the tokenizer (the model's mask token) are left out */
        int32_t *keep = kf_malloc((size_t)(n + 1) * sizeof(int32_t));
        int64_t nk = 0;
        for (int64_t j = 0; j < n; j++)
            if (c[j] < tok_vocab_size(p->tk)) keep[nk++] = c[j];
        kf_err err = {{0}}; /* a text that does not decode is left out */
        if (tok_decode(p->tk, keep, (size_t)nk, &txt, &err) == 0) {
            printf(", \"text\": ");
            json_write_str(stdout, txt.v ? txt.v : "", txt.n);
        }
        free(keep);
        tok_bytes_free(&txt);
    }
    printf(", \"k\": %lld, \"tau\": %g, \"seed\": %lld", (long long)(st ? p->so.k : p->o.k), a->tau,
           (long long)a->seed);
    if (st)
        printf(", \"method\": \"%s\", \"nfe\": %lld, \"iters\": %lld, \"accepted\": %lld",
               spec_draft_name(spec_draft_of(p->draft)), (long long)st->nfe, (long long)st->iters,
               (long long)st->accepted);
    /* where kf eval --completions truncates by default (when known) */
    if (p->eos >= 0) printf(", \"eos\": %lld", (long long)p->eos);
    printf(", \"model_sha256\": \"%s\", \"tokens_per_s\": %.1f}\n", p->sha, tps);
}

/* Decodes every (prefix, copy) in batches of prefixes of one length and
 * prints each batch's completions as it ends. Returns an exit status. */
static int run_batches(sample_plan *p, const sample_args *a, kf_err *err) {
    int64_t nj = p->npre * a->per, max_new = a->max_new;
    job *jobs = kf_malloc((size_t)nj * sizeof *jobs);
    for (int64_t i = 0; i < p->npre; i++)
        for (int64_t c = 0; c < a->per; c++)
            jobs[i * a->per + c] = (job){p->pre[i], p->plen[i], i * a->per + c};
    qsort(jobs, (size_t)nj, sizeof *jobs, cmp_len);
    model_heads *heads = model_heads_pack(p->m);
    model_heads *dheads = p->draft ? model_heads_pack(p->draft) : NULL;
    spec_stats *st = p->draft ? kf_malloc((size_t)a->batch * sizeof *st) : NULL;
    int rc = KF_EXIT_OK;
    for (int64_t s = 0; s < nj && !rc;) {
        int64_t e = s;
        while (e < nj && e - s < a->batch && jobs[e].n == jobs[s].n) e++;
        int64_t B = e - s, P = jobs[s].n;
        int32_t *pb = kf_malloc((size_t)(B * P) * sizeof(int32_t));
        int32_t *out = kf_malloc((size_t)(B * max_new) * sizeof(int32_t));
        uint64_t *keys = kf_malloc((size_t)B * sizeof(uint64_t));
        for (int64_t b = 0; b < B; b++) {
            memcpy(pb + b * P, jobs[s + b].prefix, (size_t)P * sizeof(int32_t));
            keys[b] = (uint64_t)jobs[s + b].index;
        }
        double t0 = clock_now_s();
        if (p->draft) spec_run(p->m, heads, p->draft, dheads, pb, B, P, &p->so, keys, out, st);
        else decode_run(p->m, heads, pb, B, P, &p->o, keys, out);
        p->be->sync(p->be);
        double tps = (double)(B * max_new) / (clock_now_s() - t0);
        for (int64_t b = 0; b < B; b++)
            print_completion(p, a, pb + b * P, P, out + b * max_new, tps, st ? st + b : NULL);
        free(pb);
        free(out);
        free(keys);
        s = e;
        if (fs_flush_stdout(err)) rc = KF_EXIT_ERROR; /* e.g. a full disk under `> FILE` */
    }
    model_heads_free(heads);
    model_heads_free(dheads);
    free(st);
    free(jobs);
    return rc;
}

int sample_main(int argc, char **argv) {
    sample_args a;
    int rc;
    if (parse_args(argc, argv, &a, &rc)) return rc;
    omp_env_decode(true);
    kf_err err = {{0}};
    sample_plan p = {0};
    if (ckpt_resolve_teacher(a.ckpt, p.path, sizeof p.path, p.sha, &err)) rc = KF_EXIT_ERROR;
    else if (!(rc = plan_prefixes(&p, &a, &err)) && !(rc = plan_model(&p, &a, &err)))
        rc = run_batches(&p, &a, &err);
    if (rc) fprintf(stderr, "kf sample: %s\n", err.msg);
    plan_free(&p);
    return rc;
}
