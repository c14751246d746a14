/* trainer/cli/cli_sample.c — `kf sample CKPT`: completions from an AR or PFLM
 * checkpoint with the KV-cached decoder (trainer/infer/decode.h), as JSONL. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "kernels/kernels.h"
#include "tokenize/tokenizer.h"
#include "trainer/cli/omp_env.h"
#include "trainer/infer/decode.h"
#include "trainer/infer/prefixes.h"
#include "trainer/model/model.h"
#include "trainer/train/checkpoint.h"

static const char USAGE[] =
    "usage: kf sample CKPT [--k K] [--tau T] [--freq-penalty P] [--prefix-file F.jsonl]\n"
    "                 [--batch B] [--n-per-prefix M] [--max-new N] [--seed S]\n"
    "                 [--position-temp T0,T1,...]\n"
    "                 [--vocab DIR] [--eos ID] [--bos ID] [--backend cpu|cuda|auto]\n"
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
    "  --seed S         completion j of prefix i uses draws keyed (S, i*M + j)\n"
    "  --position-temp LIST  PFLM: one temperature per output position of a step; 0 =\n"
    "                   the argmax (push-forward decoding, the default), T > 0 = sampling\n"
    "                   the head's softmax at T. Not the released sampler (argmax with the\n"
    "                   frequency penalty): an older commit of the release used\n"
    "                   0,0.3,0.5,0.7 (OWT) and 0,0.2,0.4,0.6 (LM1B) before the penalty\n"
    "  --eos ID, --bos ID  override the tokenizer's (text is cut at the first EOS)\n"
    "\n"
    "Output (stdout): one JSON object per completion: prefix (ids), completion (ids),\n"
    "text (detokenised, truncated at the first EOS; with --vocab), tokens_per_s (the\n"
    "batch's generated tokens / wall-clock seconds).\n";

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

int sample_main(int argc, char **argv) {
    const char *ckpt = NULL, *prefix_file = NULL, *vocab = NULL, *backend = "cpu";
    int64_t k = 0, batch = 16, per = 1, max_new = 64, seed = 0, eos = -2, bos = -2;
    double tau = 1.0, pen = NAN, ptemp[64]; /* pen NAN: the default for the checkpoint's kind */
    int nptemp = 0;
    const cli_opt opts[] = {
        {"--k", CLI_INT, .out = &k, .lo = 1, .hi = INFINITY},
        {"--tau", CLI_FLOAT, .out = &tau, .lo = 0, .hi = INFINITY, .above = true},
        {"--freq-penalty", CLI_FLOAT, .out = &pen},
        {"--position-temp", CLI_FLOAT_LIST, .out = ptemp, .n = &nptemp, .cap = 64},
        {"--prefix-file", CLI_STR, .out = &prefix_file},
        {"--batch", CLI_INT, .out = &batch, .lo = 1, .hi = INFINITY},
        {"--n-per-prefix", CLI_INT, .out = &per, .lo = 1, .hi = INFINITY},
        {"--max-new", CLI_INT, .out = &max_new, .lo = 1, .hi = INFINITY},
        {"--seed", CLI_INT, .out = &seed, .lo = 0, .hi = INFINITY},
        {"--vocab", CLI_STR, .out = &vocab},
        {"--eos", CLI_INT, .out = &eos, .lo = -1, .hi = INFINITY},
        {"--bos", CLI_INT, .out = &bos, .lo = 0, .hi = INFINITY},
        {"--backend", CLI_STR, .out = &backend},
        {NULL},
    };
    const cli_spec spec = {"kf sample", USAGE, opts, .pos = &ckpt, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code;
    if (!ckpt) {
        fputs(USAGE, stderr);
        return KF_EXIT_USAGE;
    }
    omp_env_passive();

    kf_err err = {{0}};
    char path[4096], sha[65];
    if (ckpt_resolve_teacher(ckpt, path, sizeof path, sha, &err)) {
        fprintf(stderr, "kf sample: %s\n", err.msg);
        return KF_EXIT_ERROR;
    }
    tok *tk = NULL;
    if (vocab && !(tk = tok_load_dir(vocab, &err))) {
        fprintf(stderr, "kf sample: %s\n", err.msg);
        return KF_EXIT_ERROR;
    }
    if (eos == -2) eos = tk ? (tok_special_id(tk, "eos") >= 0 ? tok_special_id(tk, "eos") : tok_special_id(tk, "sep")) : -1;
    if (bos == -2) bos = tk ? (tok_special_id(tk, "bos") >= 0 ? tok_special_id(tk, "bos") : tok_special_id(tk, "cls")) : -1;

    int32_t **pre = NULL;
    int64_t *plen = NULL, npre = 0;
    if (prefix_file) {
        if (prefixes_read(prefix_file, tk, &pre, &plen, &npre, &err)) {
            fprintf(stderr, "kf sample: %s\n", err.msg);
            tok_free(tk);
            return KF_EXIT_ERROR;
        }
    } else {
        if (bos < 0) {
            fprintf(stderr, "kf sample: without --prefix-file the prefix is the BOS token: give "
                            "--vocab DIR or --bos ID\n");
            tok_free(tk);
            return KF_EXIT_USAGE;
        }
        npre = 1;
        pre = kf_malloc(sizeof *pre);
        plen = kf_malloc(sizeof *plen);
        pre[0] = kf_malloc(sizeof(int32_t));
        pre[0][0] = (int32_t)bos;
        plen[0] = 1;
    }

    kf_backend *be = kernels_create(backend, &err);
    model *m = be ? model_load(be, path, &err) : NULL;
    int rc = KF_EXIT_OK;
    if (!m) {
        fprintf(stderr, "kf sample: %s\n", err.msg);
        rc = KF_EXIT_ERROR;
        goto done;
    }
    if (!k) k = m->cfg.kind == MODEL_AR ? 1 : m->cfg.k_train;
    if (isnan(pen)) pen = m->cfg.kind == MODEL_AR ? 0.0 : DECODE_FREQ_PENALTY_DEFAULT;
    decode_opts o = {.k = k, .tau = tau, .freq_penalty = (float)pen, .max_new = max_new,
                     .seed = (uint64_t)seed, .position_temp = nptemp ? ptemp : NULL,
                     .n_position_temp = nptemp};
    for (int64_t i = 0; i < npre && !rc; i++) {
        for (int64_t j = 0; j < plen[i]; j++)
            if (pre[i][j] >= m->cfg.vocab) {
                fprintf(stderr, "kf sample: %s: prefix %lld has token id %d, outside the model's "
                                "vocabulary of %lld\n",
                        prefix_file ? prefix_file : "prefix", (long long)i + 1, pre[i][j],
                        (long long)m->cfg.vocab);
                rc = KF_EXIT_ERROR;
                break;
            }
        if (!rc && decode_check(m, &o, plen[i], &err)) {
            fprintf(stderr, "kf sample: prefix %lld: %s\n", (long long)i + 1, err.msg);
            rc = KF_EXIT_ERROR;
        }
    }
    if (rc) goto done;

    int64_t nj = npre * per;
    job *jobs = kf_malloc((size_t)nj * sizeof *jobs);
    for (int64_t i = 0; i < npre; i++)
        for (int64_t c = 0; c < per; c++) jobs[i * per + c] = (job){pre[i], plen[i], i * per + c};
    qsort(jobs, (size_t)nj, sizeof *jobs, cmp_len);
    model_heads *heads = model_heads_pack(m);
    for (int64_t s = 0; s < nj;) {
        int64_t e = s;
        while (e < nj && e - s < batch && jobs[e].n == jobs[s].n) e++;
        int64_t B = e - s, P = jobs[s].n;
        int32_t *pb = kf_malloc((size_t)(B * P) * sizeof(int32_t));
        int32_t *out = kf_malloc((size_t)(B * max_new) * sizeof(int32_t));
        uint64_t *keys = kf_malloc((size_t)B * sizeof(uint64_t));
        for (int64_t b = 0; b < B; b++) {
            memcpy(pb + b * P, jobs[s + b].prefix, (size_t)P * sizeof(int32_t));
            keys[b] = (uint64_t)jobs[s + b].index;
        }
        double t0 = clock_now_s();
        decode_run(m, heads, pb, B, P, &o, keys, out);
        be->sync(be);
        double tps = (double)(B * max_new) / (clock_now_s() - t0);
        for (int64_t b = 0; b < B; b++) {
            const int32_t *c = out + b * max_new;
            printf("{\"prefix\": [");
            for (int64_t j = 0; j < P; j++) printf(j ? ", %d" : "%d", pb[b * P + j]);
            printf("], \"completion\": [");
            for (int64_t j = 0; j < max_new; j++) printf(j ? ", %d" : "%d", c[j]);
            printf("]");
            if (tk) {
                int64_t n = 0;
                while (n < max_new && c[n] != eos) n++;
                tok_bytes txt = {0};
                /* ids past the tokenizer (the model's mask token) are left out */
                int32_t *keep = kf_malloc((size_t)(n + 1) * sizeof(int32_t));
                int64_t nk = 0;
                for (int64_t j = 0; j < n; j++)
                    if (c[j] < tok_vocab_size(tk)) keep[nk++] = c[j];
                if (tok_decode(tk, keep, (size_t)nk, &txt, &err) == 0) {
                    printf(", \"text\": ");
                    json_write_str(stdout, txt.v ? txt.v : "", txt.n);
                }
                free(keep);
                tok_bytes_free(&txt);
            }
            printf(", \"k\": %lld, \"tau\": %g, \"tokens_per_s\": %.1f}\n", (long long)k, tau, tps);
        }
        free(pb);
        free(out);
        free(keys);
        s = e;
        if (fs_flush_stdout(&err)) { /* e.g. a full disk under `> FILE` */
            fprintf(stderr, "kf sample: %s\n", err.msg);
            rc = KF_EXIT_ERROR;
            break;
        }
    }
    model_heads_free(heads);
    free(jobs);
done:
    for (int64_t i = 0; i < npre; i++) free(pre[i]);
    free(pre);
    free(plen);
    model_free(m);
    tok_free(tk);
    if (be) be->destroy(be);
    return rc;
}
