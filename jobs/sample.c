/* jobs/sample.c — completions at k = 1, 2, 4 with tokens/s after a local run. */
#include "jobs/sample.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "jobs/proc.h"

static const char *const prompts[] = {"The city council voted on Tuesday to",
                                      "Scientists say the new study shows that"};
#define N_PROMPTS 2
#define PER_PROMPT "8"
#define MAX_NEW "64"

/* The `vocab:` of the shards set whose `out:` is data.train, or NULL. */
static char *find_vocab(const char *run, const runconfig *rc, kf_err *err) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/run.yaml", run);
    cfg_node *root = cfg_load_file(p, err);
    if (!root) return NULL;
    char *vocab = NULL;
    cfg_node *sets = cfg_find(root, "shards");
    for (size_t i = 0; sets && sets->kind == CFG_MAP && i < sets->n && !vocab; i++) {
        cfg_node *out = cfg_find(sets->items[i], "out"), *v = cfg_find(sets->items[i], "vocab");
        if (out && v && out->kind == CFG_SCALAR && v->kind == CFG_SCALAR && !strcmp(out->value, rc->data_train))
            vocab = kf_strdup(v->value);
    }
    cfg_free(root);
    return vocab;
}

typedef struct result {
    double tps;      /* mean tokens/s over the output lines */
    char text[96];   /* the first completion, one line */
    int lines;
} result;

/* Runs kf sample, keeps its JSONL in out_path and summarises it. */
static int sample_one(const char *kf, const char *ckpt, int k, const char *prefixes, const char *vocab,
                      const char *out_path, result *r, kf_err *err) {
    char kbuf[16];
    snprintf(kbuf, sizeof kbuf, "%d", k);
    /* explicit, not kf sample's defaults: plain push-forward decoding (no
     * frequency penalty) at every k, so the tokens/s compare like for like */
    char *argv[] = {(char *)kf, "sample", (char *)ckpt, "--k", kbuf, "--prefix-file", (char *)prefixes,
                    "--vocab", (char *)vocab, "--n-per-prefix", PER_PROMPT, "--max-new", MAX_NEW,
                    "--seed", "1", "--tau", "1", "--freq-penalty", "0", NULL};
    char *out;
    int code = proc_capture(argv, &out, false, err);
    if (code < 0) return -1;
    if (code) {
        free(out);
        return kf_err_set(err, "kf sample %s --k %d failed (exit %d)", ckpt, k, code);
    }
    int rv = fs_write_atomic(out_path, out, strlen(out), err);
    memset(r, 0, sizeof *r);
    for (char *line = out; *line && !rv;) {
        char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        json_doc *d = json_parse(line, n, out_path, err);
        if (!d) {
            rv = -1;
            break;
        }
        const json *tps = json_get(json_root(d), "tokens_per_s"), *tx = json_get(json_root(d), "text");
        if (tps && tps->type == JSON_NUMBER) r->tps += tps->num;
        if (!r->lines && tx && tx->type == JSON_STRING) {
            /* one line: control characters become spaces; cut at a UTF-8 boundary */
            size_t j = 0, len = tx->str.len;
            const unsigned char *t = (const unsigned char *)tx->str.s;
            for (; j < len && j + 4 < sizeof r->text; j++) r->text[j] = t[j] < 0x20 ? ' ' : (char)t[j];
            if (j < len) {
                while (j > 0 && (t[j] & 0xC0) == 0x80) j--;
                memcpy(r->text + j, "...", 4);
            } else {
                r->text[j] = 0;
            }
        }
        r->lines++;
        json_free(d);
        line = end ? end + 1 : line + n;
    }
    free(out);
    if (!rv && r->lines == 0) rv = kf_err_set(err, "kf sample %s --k %d printed no completions", ckpt, k);
    if (!rv) r->tps /= r->lines;
    return rv;
}

int sample_run(const char *run, const runconfig *rc, const char *kf, kf_err *err) {
    char *help[] = {(char *)kf, "sample", "--help", NULL}, *ignored;
    int code = proc_capture(help, &ignored, true, err);
    free(ignored);
    if (code) {
        fprintf(stderr, "kf jobs: samples skipped: this build has no kf sample\n");
        return 0;
    }
    char *vocab = find_vocab(run, rc, err);
    if (!vocab) {
        fprintf(stderr, "kf jobs: samples skipped: no `shards:` set of the config has out: %s "
                "(its vocab: would encode the prompts)\n", rc->data_train);
        return 0;
    }
    const runconfig_stage *ar = NULL, *pflm = NULL;
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *s = &rc->stages[i];
        if (s->kind == RC_KIND_AR && !ar) ar = s;
        if (s->kind == RC_KIND_DISTILL_AR || s->kind == RC_KIND_SELF_FORCING) pflm = s;
    }
    char dir[PATH_MAX], prefixes[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/samples", run);
    snprintf(prefixes, sizeof prefixes, "%s/prefixes.jsonl", dir);
    char text[1024];
    size_t n = 0;
    for (int i = 0; i < N_PROMPTS; i++) n += (size_t)snprintf(text + n, sizeof text - n, "{\"text\": \"%s\"}\n", prompts[i]);
    if (fs_mkdir_p(dir, err) || fs_write_atomic(prefixes, text, n, err)) return free(vocab), -1;

    printf("\nsamples: %d prompts x %s completions of %s tokens (CPU, one process), in %s/\n", N_PROMPTS,
           PER_PROMPT, MAX_NEW, dir);
    printf("%-6s %3s %10s %8s  %s\n", "model", "k", "tokens/s", "vs AR", "first completion");
    double ar_tps = 0;
    int rv = 0;
    for (int pass = 0; pass < 2 && !rv; pass++) {
        const runconfig_stage *s = pass ? pflm : ar;
        if (!s) continue;
        for (int k = 1; k <= (pass ? s->k : 1) && !rv; k *= 2) {
            char ckpt[PATH_MAX + 64], out[PATH_MAX + 64];
            snprintf(ckpt, sizeof ckpt, "%s/stages/%s/final", run, s->name);
            snprintf(out, sizeof out, "%s/%s-k%d.jsonl", dir, s->name, k);
            result r;
            rv = sample_one(kf, ckpt, k, prefixes, vocab, out, &r, err);
            if (rv) break;
            if (!pass) ar_tps = r.tps;
            char vs[16] = "-";
            if (ar_tps > 0) snprintf(vs, sizeof vs, "%.2fx", r.tps / ar_tps);
            /* GPT-2 pieces carry their leading space; WordPiece text does not */
            const char *sep = r.text[0] == ' ' || !r.text[0] ? "" : " ";
            /* text stops at the first EOS: say so when that is the first token */
            printf("%-6s %3d %10.0f %8s  \"%s%s%s\"%s\n", s->name, k, r.tps, vs, prompts[0], sep, r.text,
                   r.text[0] ? "" : "  (EOS at once)");
            fflush(stdout);
        }
    }
    free(vocab);
    return rv;
}
