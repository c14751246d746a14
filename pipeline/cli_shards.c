/* pipeline/cli_shards.c — `kf shards build|verify|inspect|stats`. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "common/blas_threads.h"
#include "common/cli.h"
#include "common/config.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "pipeline/build.h"
#include "pipeline/build_config.h"
#include "pipeline/manifest.h"
#include "pipeline/shard_reader.h"
#include "pipeline/shard_writer.h"
#include "tokenize/tokenizer.h"

static const char *usage_text =
    "usage: kf shards build CONFIG [--jobs N] [--only NAME] [--force] [key.path=value ...]\n"
    "       kf shards verify DIR\n"
    "       kf shards inspect DIR [--split train|valid] [--index I] [--decode] [--vocab VDIR]\n"
    "       kf shards stats DIR [--split train|valid] [--top K] [--vocab VDIR]\n"
    "\n"
    "build    reads the `shards:` sets of CONFIG (see pipeline/build_config.h), tokenizes\n"
    "         and packs them with N worker threads (default: online CPUs) into\n"
    "         OUT/{train,valid}/shard-NNNNN.lmdb + OUT/manifest.yaml. Same input and\n"
    "         config give the same manifest for any N; rerunning after a crash\n"
    "         keeps finished shards. --only builds one set; --force rebuilds every\n"
    "         shard (after tokenizer code changes, which the config hash cannot see).\n"
    "verify   recomputes every sample's checksum and every shard's sha256; exits 1\n"
    "         naming the shard and sample on any corruption.\n"
    "inspect  prints the manifest summary, or sample I (global index in the split;\n"
    "         --decode prints its text; the vocabulary defaults to data/vocab/gpt2\n"
    "         for gpt2 sets, else give --vocab).\n"
    "stats    samples, tokens, padding fraction and the K most frequent tokens.\n";

static int usage(int code) {
    fputs(usage_text, code ? stderr : stdout);
    return code;
}

static int cmd_build(int argc, char **argv) {
    blas_threads_stop(); /* a build never calls BLAS */
    const char *config = NULL, *only = NULL;
    int64_t jobs = sysconf(_SC_NPROCESSORS_ONLN);
    bool force = false;
    char **over = kf_calloc((size_t)argc + 1, sizeof *over);
    int nover = 0;
    const cli_opt opts[] = {
        {"--jobs", CLI_INT, .out = &jobs, .lo = 1, .hi = INFINITY},
        {"--force", CLI_FLAG, .out = &force},
        {"--only", CLI_STR, .out = &only},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf shards build", usage_text,      opts, .pos = &config, .max_pos = 1,
                           .over = over,      .n_over = &nover};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return free(over), code;
    if (!config) return free(over), usage(KF_EXIT_USAGE);
    kf_err err = {{0}};
    cfg_node *root = cfg_load_file(config, &err);
    build_config *sets = NULL;
    tok ***toks = NULL;
    int nsets = -1, rc = KF_EXIT_ERROR;
    if (!root) goto out;
    for (int i = 0; i < nover; i++)
        if (cfg_override(root, over[i], &err)) goto out;
    cfg_find(root, "name"); /* the run's name: not ours to check, but read */
    nsets = build_config_read(root, &sets, &err);
    if (nsets < 0) goto out;
    /* Sets with the same tokenizer and vocabulary share their workers'
     * tokenizers (one load, warm caches). */
    toks = kf_calloc((size_t)nsets, sizeof *toks);
    int found = 0;
    for (int i = 0; i < nsets; i++) {
        if (only && strcmp(only, sets[i].name)) continue;
        found = 1;
        int j = 0;
        while (j < i && !(toks[j] && !strcmp(sets[j].tokenizer, sets[i].tokenizer) &&
                          !strcmp(sets[j].vocab, sets[i].vocab)))
            j++;
        if (j == i) toks[i] = kf_calloc((size_t)jobs, sizeof **toks);
        if (shards_build(&sets[i], (int)jobs, force, toks[j], NULL, &err)) goto out;
    }
    if (!found) {
        kf_err_set(&err, "%s: no shard set named '%s' under shards:", config, only);
        goto out;
    }
    rc = KF_EXIT_OK;
out:
    if (rc) kf_err_report("kf shards", &err);
    for (int i = 0; i < nsets; i++) {
        for (int k = 0; toks && toks[i] && k < jobs; k++) tok_free(toks[i][k]);
        free(toks ? toks[i] : NULL);
    }
    free(toks);
    build_config_free(sets, nsets);
    cfg_free(root);
    free(over);
    return rc;
}

static int cmd_verify(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return usage(0);
    if (argc != 2) return usage(KF_EXIT_USAGE);
    const char *dir = argv[1];
    manifest m;
    kf_err err;
    if (manifest_read(dir, &m, NULL, &err)) return kf_err_report("kf shards", &err);
    int bad = 0;
    int64_t samples = 0, shards = 0;
    for (int s = 0; s < 2; s++) {
        const char *name = s ? "valid" : "train";
        manifest_split *sp = manifest_split_get(&m, name);
        for (int i = 0; i < sp->nshards; i++) {
            char path[4096];
            shard_meta got;
            const shard_meta *want = &sp->shards[i];
            snprintf(path, sizeof path, "%s/%s/shard-%05d.lmdb", dir, name, i);
            if (shard_verify(path, &got, &err)) {
                fprintf(stderr, "kf shards verify: %s\n", err.msg);
                bad++;
            } else if (got.count != want->count ||
                       strcmp(got.samples_sha256, want->samples_sha256) ||
                       strcmp(got.tokenizer, m.tokenizer) ||
                       strcmp(got.vocab_sha256, m.vocab_sha256) || got.seq_len != m.seq_len ||
                       strcmp(got.packing, m.packing)) {
                fprintf(stderr,
                        "kf shards verify: %s: record (count %" PRId64
                        ", sha256 %s) disagrees with the manifest "
                        "(count %" PRId64 ", sha256 %s) or its format fields do\n",
                        path, got.count, got.samples_sha256, want->count, want->samples_sha256);
                bad++;
            }
            samples += want->count;
            shards++;
        }
    }
    manifest_free(&m);
    if (bad) {
        fprintf(stderr, "kf shards verify: %s: %d of %" PRId64 " shards are damaged\n", dir, bad,
                shards);
        return KF_EXIT_ERROR;
    }
    printf("ok: %s: %" PRId64 " shards, %" PRId64 " samples verified\n", dir, shards, samples);
    return KF_EXIT_OK;
}

/* Options shared by inspect and stats. */
typedef struct view_opts {
    const char *dir, *split, *vocab;
    int64_t index, top;
    bool decode;
} view_opts;

static int parse_view(int argc, char **argv, int is_stats, view_opts *o) {
    *o = (view_opts){.split = "train", .index = -1, .top = 20};
    const cli_opt inspect_opts[] = {
        {"--split", CLI_STR, .out = &o->split},
        {"--vocab", CLI_STR, .out = &o->vocab},
        {"--decode", CLI_FLAG, .out = &o->decode},
        {"--index", CLI_INT, .out = &o->index, .lo = 0, .hi = INFINITY},
        CLI_OPT_END,
    };
    const cli_opt stats_opts[] = {
        {"--split", CLI_STR, .out = &o->split},
        {"--vocab", CLI_STR, .out = &o->vocab},
        {"--top", CLI_INT, .out = &o->top, .lo = 0, .hi = INFINITY},
        CLI_OPT_END,
    };
    const cli_spec spec = {is_stats ? "kf shards stats" : "kf shards inspect", usage_text,
                           is_stats ? stats_opts : inspect_opts, .pos = &o->dir, .max_pos = 1};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) return code ? code : 1;
    return o->dir ? 0 : usage(KF_EXIT_USAGE);
}

/* The set's tokenizer for decoding: --vocab, or the gpt2 default; its
 * vocabulary must be the one the set was built with. NULL with err set. */
static tok *load_decoder(const shard_set *s, const char *vocab, kf_err *err) {
    const char *name = shard_set_tokenizer(s);
    const char *kind = !strcmp(name, "gpt2") ? "gpt2" : "bert";
    bool given = vocab;
    if (!vocab) {
        if (strcmp(kind, "gpt2")) {
            kf_err_set(err, "decoding a %s set needs --vocab DIR", name);
            return NULL;
        }
        vocab = "data/vocab/gpt2";
    }
    tok *t = tok_load(kind, vocab, err);
    if (t && strcmp(tok_vocab_sha256(t), shard_set_vocab_sha256(s))) {
        kf_err_set(err,
                   "%s%s: vocabulary sha256 %s differs from the set's %s: give --vocab DIR, the "
                   "`vocab:` the set was built with (its config's shards: section)",
                   vocab, given ? "" : " (the default)", tok_vocab_sha256(t),
                   shard_set_vocab_sha256(s));
        tok_free(t);
        return NULL;
    }
    return t;
}

static void print_split_summary(const char *name, const manifest_split *sp, int32_t seq_len) {
    printf("%s: %" PRId64 " samples in %d shards; %" PRId64 " documents (%" PRId64
           " empty), %" PRId64 " tokens, %.1f MB of text, %" PRId64
           " invalid UTF-8 replaced, %" PRId64 " truncated, %" PRId64 " tokens dropped\n",
           name, sp->samples, sp->nshards, sp->docs, sp->empty_docs, sp->tokens,
           sp->raw_bytes / 1e6, sp->replaced, sp->truncated, sp->dropped_tokens);
    for (int i = 0; i < sp->nshards; i++)
        printf("  %s/shard-%05d.lmdb  first %" PRId64 "  count %" PRId64 "  sha256 %s\n", name, i,
               sp->first[i], sp->shards[i].count, sp->shards[i].samples_sha256);
}

static int cmd_inspect(int argc, char **argv) {
    view_opts o;
    int prc = parse_view(argc, argv, 0, &o);
    if (prc) return prc == 1 ? 0 : prc;
    kf_err err;
    if (o.index < 0) {
        manifest m;
        char sha[65];
        if (manifest_read(o.dir, &m, sha, &err)) return kf_err_report("kf shards", &err);
        printf("%s: set '%s', tokenizer %s (vocab %" PRId64
               ", sha256 %s), seq_len %d, packing %s, manifest sha256 %s\n",
               o.dir, m.name, m.tokenizer, m.vocab_size, m.vocab_sha256, m.seq_len, m.packing, sha);
        printf("special ids: bos %d eos %d cls %d sep %d pad %d\n", m.special.bos, m.special.eos,
               m.special.cls, m.special.sep, m.special.pad);
        print_split_summary("train", &m.train, m.seq_len);
        print_split_summary("valid", &m.valid, m.seq_len);
        manifest_free(&m);
        return 0;
    }
    shard_set *s;
    if (shard_set_open(o.dir, o.split, &s, &err)) return kf_err_report("kf shards", &err);
    int L = shard_set_seq_len(s), rc = 0;
    int32_t *ids = kf_malloc(sizeof *ids * (size_t)L), len;
    tok *t = NULL;
    if (shard_set_get(s, o.index, ids, &len, &err) ||
        (o.decode && !(t = load_decoder(s, o.vocab, &err)))) {
        rc = kf_err_report("kf shards", &err);
    } else if (o.decode) {
        tok_bytes out = {0};
        if (tok_decode(t, ids, (size_t)len, &out, &err)) rc = kf_err_report("kf shards", &err);
        else fwrite(out.v, 1, out.n, stdout), putchar('\n');
        tok_bytes_free(&out);
    } else {
        printf("%s sample %" PRId64 ": length %d of %d\n", o.split, o.index, len, L);
        for (int i = 0; i < L; i++) printf("%d%c", ids[i], i + 1 < L ? ' ' : '\n');
    }
    tok_free(t);
    free(ids);
    shard_set_close(s);
    return rc;
}

typedef struct tok_count {
    int32_t id;
    int64_t n;
} tok_count;

static int by_count(const void *a, const void *b) {
    const tok_count *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? 1 : -1;
    return x->id - y->id;
}

static int cmd_stats(int argc, char **argv) {
    view_opts o;
    int prc = parse_view(argc, argv, 1, &o);
    if (prc) return prc == 1 ? 0 : prc;
    kf_err err;
    shard_set *s;
    if (shard_set_open(o.dir, o.split, &s, &err)) return kf_err_report("kf shards", &err);
    int64_t V = shard_set_vocab_size(s), n = shard_set_count(s), tokens = 0;
    int L = shard_set_seq_len(s), rc = 0;
    int32_t *ids = kf_malloc(sizeof *ids * (size_t)L), len;
    tok_count *counts = kf_calloc((size_t)V, sizeof *counts);
    for (int64_t v = 0; v < V; v++) counts[v].id = (int32_t)v;
    for (int64_t i = 0; i < n && !rc; i++) {
        if (shard_set_get(s, i, ids, &len, &err)) {
            rc = kf_err_report("kf shards", &err);
            break;
        }
        tokens += len;
        for (int32_t j = 0; j < len; j++) counts[ids[j]].n++;
    }
    if (!rc) {
        int64_t distinct = 0;
        for (int64_t v = 0; v < V; v++) distinct += counts[v].n > 0;
        qsort(counts, (size_t)V, sizeof *counts, by_count);
        double slots = (double)n * L;
        printf("%s %s: %" PRId64 " samples x %d = %.0f slots, %" PRId64
               " tokens, padding fraction %.4f, %" PRId64 " distinct ids of %" PRId64 "\n",
               o.dir, o.split, n, L, slots, tokens, slots > 0 ? 1.0 - tokens / slots : 0.0,
               distinct, V);
        kf_err derr;
        tok *t = load_decoder(s, o.vocab, &derr);
        printf("top %" PRId64 " tokens:\n", o.top);
        for (int64_t k = 0; k < o.top && k < V && counts[k].n > 0; k++) {
            tok_bytes text = {0};
            if (t) tok_decode(t, &counts[k].id, 1, &text, &derr);
            printf("  %8d  %10" PRId64 "  %6.3f%%  ", counts[k].id, counts[k].n,
                   100.0 * counts[k].n / tokens);
            if (t) json_write_str(stdout, text.v, text.n);
            putchar('\n');
            tok_bytes_free(&text);
        }
        tok_free(t);
    }
    free(counts);
    free(ids);
    shard_set_close(s);
    return rc;
}

int shards_main(int argc, char **argv) {
    if (argc < 2) return usage(KF_EXIT_USAGE);
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) return usage(0);
    if (!strcmp(sub, "build")) return cmd_build(argc - 1, argv + 1);
    if (!strcmp(sub, "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(sub, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(sub, "stats")) return cmd_stats(argc - 1, argv + 1);
    fprintf(stderr, "kf shards: unknown subcommand '%s'\n", sub);
    return usage(KF_EXIT_USAGE);
}
