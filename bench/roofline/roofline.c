/* bench/roofline/roofline.c — one training step priced on a named GPU (see roofline.h). */
#include "bench/roofline/roofline.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/record.h"
#include "pipeline/shard_reader.h"
#include "trainer/infer/decode.h"
#include "trainer/train/dist.h"
#include "trainer/train/optim.h"
#include "trainer/train/step.h"
#include "trainer/train/supervision.h"
#include "trainer/train/train.h"

/* Dense (no sparsity) peaks from NVIDIA's data sheets; the bus is PCIe, one
 * direction (Gen5 x16 for H100/H200 SXM, Gen4 x16 for A100). */
static const roofline_device devices[] = {
    {"h100", "H100 SXM", 989e12, 67e12, 3.35e12, 64e9},
    {"h200", "H200 SXM", 989e12, 67e12, 4.8e12, 64e9},
    {"a100", "A100 SXM", 312e12, 19.5e12, 2.04e12, 32e9},
};
#define N_DEVICES ((int)(sizeof devices / sizeof *devices))

const roofline_device *roofline_device_find(const char *name) {
    for (int i = 0; i < N_DEVICES; i++)
        if (!strcmp(devices[i].name, name)) return &devices[i];
    return NULL;
}

const char *roofline_device_names(void) { return "h100, h200, a100"; }

double roofline_op_seconds(const roofline_device *d, const kf_op_cost *c, int attn_tc) {
    if (c->unit == KF_COST_NONE) return 0;
    if (c->unit == KF_COST_HOST) return c->bytes / d->bus_bytes;
    int tensor = c->lowp && (c->unit == KF_COST_GEMM || (c->unit == KF_COST_ATTN && attn_tc));
    double compute = c->flops / (tensor ? d->tensor_flops : d->fp32_flops);
    double memory = c->bytes / d->mem_bytes;
    return compute > memory ? compute : memory;
}

roofline_flops roofline_step_flops(const model_config *c, int64_t B, int64_t n,
                                   const runconfig_stage *st) {
    double H = (double)c->hidden, V = (double)c->vocab, nb = (double)c->blocks;
    double p_block = nb * (3 * H * H + H * H + 2 * (4 * H * H) + 4 * H + H);
    double k = (double)c->k_train, np, rows, noise, out, pairs;
    int mtp = c->head == HEAD_MTP;
    double zd = mtp ? 2 * H * k : 2 * H;
    double p_noise = zd * H + H + 2 * (4 * H * H) + 4 * H + H;
    double p_head = H * V + V;
    if (st->kind == RC_KIND_AR) {
        np = (double)n - 1;
        rows = out = np, noise = 0;
        pairs = np * (np + 1) / 2;
    } else if (st->kind == RC_KIND_MDLM) { /* every row sees every row */
        np = (double)n;
        rows = out = np, noise = 0;
        pairs = np * np;
    } else if (mtp) {
        np = (double)n - k;
        rows = 2 * np, noise = np, out = np * k;
        pairs = np * (np + 1) / 2 + np * (np + 1) / 2 + np;
    } else {
        np = (double)n - k;
        rows = np + np * k, noise = out = np * k;
        pairs = np * (np + 1) / 2 + k * np * (np + 1) / 2 + np * k * (k + 1) / 2;
    }
    roofline_flops f;
    f.total =
        (double)B * (6 * (rows * p_block + noise * p_noise + out * p_head) + 12 * nb * pairs * H);
    f.rows = (double)B * rows;
    f.tokens = (double)B * np * (st->kind == RC_KIND_AR || st->kind == RC_KIND_MDLM ? 1 : k);
    return f;
}

/* ---------------------------------------------------------------- the step */

struct roofline_stage {
    const runconfig_stage *st;
    model *m, *teacher;
    model_ws *ws;
    sup_ctx *sup;
    dist d;  /* one rank: the collectives are not backend ops, and not priced */
    step *s; /* the trainer's step (trainer/train/step.h) */
    /* the synthetic micro-batch */
    loader_batch lb;
    roofline_marks *mk;
};

roofline_stage *roofline_stage_create(kf_backend *be, const model_config *base,
                                      const runconfig_stage *st, int zero1_ranks, int init,
                                      kf_err *err) {
    int kind = sup_kind_from_name(runconfig_kind_name(st->kind));
    if (kind < 0)
        return kf_err_set(err, "stage %s: kind %s does not train", st->name,
                          runconfig_kind_name(st->kind)),
               NULL;
    sup_config sc = {.kind = (sup_kind)kind,
                     .k = st->kind == RC_KIND_AR ? 1 : st->k,
                     .tau_min = st->tau_min,
                     .tau_max = st->tau_max,
                     .seed = st->opt.seed,
                     .teacher_precision = optim_precision(st->opt.teacher_precision),
                     .teacher_follow = st->opt.teacher_follow,
                     .mask_id = base->mask_id,
                     .strata = st->opt.batch};
    roofline_stage *s = kf_calloc(1, sizeof *s);
    s->st = st;
    model_config mc = sup_student_config(&sc, base);
    if (model_config_check(&mc, err)) {
        free(s);
        return NULL;
    }
    s->m = model_create(be, &mc);
    if (sc.kind != SUP_AR && sc.kind != SUP_MDLM) {
        model_config tc = sup_teacher_config(&sc, base);
        s->teacher = model_create(be, &tc);
        if (init) model_init(s->teacher, st->opt.seed + 1);
    }
    if (init) model_init(s->m, st->opt.seed);
    s->ws = model_ws_create(s->m);
    s->sup = sup_create(&sc, s->teacher, err);
    if (!s->sup) {
        roofline_stage_free(s);
        return NULL;
    }
    s->d = (dist){.world = 1, .local_world = 1};
    /* ZeRO-1: the first rank's shard (the largest) of the optimizer state */
    dist zd = {.world = zero1_ranks > 1 ? zero1_ranks : 1};
    step_opts so = {.be = be,
                    .m = s->m,
                    .ws = s->ws,
                    .sup = s->sup,
                    .st = st,
                    .o = &st->opt,
                    .d = &s->d,
                    .accum = 1,
                    .bucket = INT64_MAX,
                    .zero1 = zero1_ranks > 1,
                    .shard = dist_shard(&zd, s->m->n_params, 0),
                    .graphs = 0}; /* each op as called: a timed recorder times each */
    s->s = step_create(&so);
    return s;
}

void roofline_stage_free(roofline_stage *s) {
    if (!s) return;
    step_free(s->s);
    sup_free(s->sup);
    model_ws_free(s->ws);
    model_free(s->teacher);
    model_free(s->m);
    free(s->lb.ids), free(s->lb.len), free(s->lb.pos);
    free(s);
}

model *roofline_stage_model(roofline_stage *s) { return s->m; }

/* Ops recorded so far (0 on a backend that records nothing). */
static int64_t n_recorded(const kf_backend *be) {
    int64_t n = 0;
    if (kernels_record_is(be)) kernels_record_ops(be, &n);
    return n;
}

static const loader_batch *synthetic_batch(void *ctx, int64_t a) {
    return &((roofline_stage *)ctx)->lb;
}

static void mark_part(void *ctx, step_part part) {
    roofline_stage *s = ctx;
    int64_t n = n_recorded(s->m->be);
    switch (part) {
    case STEP_SUPERVISION: s->mk->begin = n; break;
    case STEP_STUDENT: s->mk->teacher = n; break;
    case STEP_OPTIMIZER: s->mk->student = n; break;
    case STEP_END: s->mk->end = n; break;
    }
}

void roofline_stage_step(roofline_stage *s, int64_t B, int64_t n, roofline_marks *mk) {
    loader_batch *lb = &s->lb;
    lb->ids = kf_realloc(lb->ids, (size_t)(B * n) * sizeof *lb->ids);
    lb->len = kf_realloc(lb->len, (size_t)B * sizeof *lb->len);
    lb->pos = kf_realloc(lb->pos, (size_t)B * sizeof *lb->pos);
    /* any ids of the model's vocabulary: the costs do not depend on them */
    for (int64_t i = 0; i < B * n; i++) lb->ids[i] = (int32_t)((i * 7919) % (s->m->cfg.vocab - 1));
    for (int64_t b = 0; b < B; b++) lb->len[b] = (int32_t)n, lb->pos[b] = b;
    lb->n = B, lb->seq_len = n;
    s->mk = mk;
    s->s->mark = mark_part;
    s->s->mark_ctx = s;
    step_run(s->s, 0, synthetic_batch, s);
}

/* ---------------------------------------------------------------- report */

/* Totals of a group of recorded ops (one op name, or one op and shape). */
typedef struct tally {
    const char *op;
    const char *shape; /* NULL: every shape of op */
    int64_t calls;
    double flops, bytes, est, meas;
    double compute; /* the compute-bound part of est */
    int bus;        /* host transfers */
} tally;

static tally *tally_find(tally *t, int *n, const char *op, const char *shape) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(t[i].op, op) &&
            (shape ? t[i].shape && !strcmp(t[i].shape, shape) : !t[i].shape))
            return &t[i];
    t[*n] = (tally){.op = op, .shape = shape};
    return &t[(*n)++];
}

static void tally_add(tally *t, const roofline_device *d, const kf_op_rec *r, int attn_tc) {
    double est = roofline_op_seconds(d, &r->cost, attn_tc);
    t->calls++;
    t->flops += r->cost.flops;
    t->bytes += r->cost.bytes;
    t->est += est;
    t->meas += r->seconds;
    t->bus |= r->cost.unit == KF_COST_HOST;
    if (r->cost.unit != KF_COST_HOST && est > r->cost.bytes / d->mem_bytes) t->compute += est;
}

/* What limits a group: the bus (transfers), the arithmetic, or memory. */
static const char *bound_name(const tally *t) {
    return t->bus ? "bus" : t->compute > t->est / 2 ? "compute" : "memory";
}

static int by_est(const void *a, const void *b) {
    double x = ((const tally *)a)->est, y = ((const tally *)b)->est;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The conversion passes around op r as their own memory-bound record
 * ("convert16", op_cost.h convert_bytes; no bytes: none). Attention's is the
 * tensor-core forward's, run only with attn_tc. */
static kf_op_rec convert_rec(const kf_op_rec *r, int attn_tc) {
    double bytes = r->cost.unit == KF_COST_ATTN && !attn_tc ? 0 : r->cost.convert_bytes;
    return (kf_op_rec){.op = "convert16",
                       .cost = {.bytes = bytes, .unit = KF_COST_SIMT, .lowp = 1}};
}

static double sum_est(const roofline_device *d, const kf_op_rec *ops, int64_t from, int64_t to,
                      int attn_tc) {
    double s = 0;
    for (int64_t i = from; i < to; i++) {
        kf_op_rec cv = convert_rec(&ops[i], attn_tc);
        s += roofline_op_seconds(d, &ops[i].cost, attn_tc) +
             roofline_op_seconds(d, &cv.cost, attn_tc);
    }
    return s;
}

/* Device ops (kernels, copies, memsets: not transfers or bookkeeping)
 * recorded in [from, to). */
static int64_t device_ops(const kf_op_rec *ops, int64_t from, int64_t to) {
    int64_t n = 0;
    for (int64_t i = from; i < to; i++)
        n += ops[i].cost.unit != KF_COST_NONE && ops[i].cost.unit != KF_COST_HOST;
    return n;
}

/* How train_step launches a step of this shape with CUDA graphs: each
 * micro-batch's ops after its uploads (but the last with several ranks,
 * whose backward feeds the all-reduce), then the update, as one graph each;
 * the teacher passes (sup_build_slot: self_forcing's rounds, distill_ar's
 * k passes) as one graph per micro-batch. */
static void report_graphs(const kf_backend *be, const roofline_marks *mk, const runconfig_stage *st,
                          int64_t ranks, int64_t B) {
    int64_t n_ops;
    const kf_op_rec *ops = kernels_record_ops(be, &n_ops);
    int64_t accum = st->opt.batch / (ranks * B);
    int64_t te = device_ops(ops, mk->begin, mk->teacher),
            stu = device_ops(ops, mk->teacher, mk->student),
            opt = device_ops(ops, mk->student, mk->end);
    int64_t graphed = ranks > 1 ? accum - 1 : accum;
    int64_t tg = st->kind == RC_KIND_SELF_FORCING || st->kind == RC_KIND_DISTILL_AR;
    if (st->kind == RC_KIND_MDLM) { /* step.c: per-sample loss weights run eagerly */
        printf("CUDA graphs: none (the loss's per-sample time weights are host values of its "
               "ops); %lld ops a micro-batch, %lld the update\n",
               (long long)stu, (long long)opt);
        return;
    }
    printf("CUDA graphs: %lld launches per step: %lld of the %lld micro-batches (%lld ops each%s) "
           "and the update (%lld ops)",
           (long long)(graphed + 1 + tg * accum), (long long)graphed, (long long)accum,
           (long long)stu, ranks > 1 ? "; the last, which feeds the all-reduce, eager" : "",
           (long long)opt);
    if (tg)
        printf("; the teacher passes of each micro-batch (%lld ops) as one graph\n", (long long)te);
    else printf("\n");
}

/* Prints the step's table, parts, totals and dominant ops; returns the
 * estimated step time (s). */
static double report(const roofline_device *d, const runconfig_stage *st, const roofline_stage *s,
                     int zero1_ranks, int64_t B, int64_t n, const kf_backend *be,
                     const roofline_marks *mk, int attn_tc, int timed) {
    const model_config *mc = &s->m->cfg;
    int64_t n_ops;
    const kf_op_rec *ops = kernels_record_ops(be, &n_ops);
    int64_t cnt = mk->end - mk->begin;
    /* room for every op and its conversion */
    tally *byop = kf_calloc((size_t)(2 * cnt + 1), sizeof *byop);
    tally *byshape = kf_calloc((size_t)(2 * cnt + 1), sizeof *byshape);
    int nop = 0, nshape = 0, syncs = 0, calls = 0;
    tally all = {.op = "total"};
    for (int64_t i = mk->begin; i < mk->end; i++) {
        const kf_op_rec *r = &ops[i];
        if (r->cost.unit == KF_COST_NONE && !r->cost.host_sync) continue;
        kf_op_rec cv = convert_rec(r, attn_tc);
        for (int part = 0; part < 2; part++) {
            const kf_op_rec *x = part ? &cv : r;
            if (part && x->cost.bytes == 0) break;
            tally_add(tally_find(byop, &nop, x->op, NULL), d, x, attn_tc);
            /* r's shape: it outlives cv */
            tally_add(tally_find(byshape, &nshape, x->op, r->cost.shape), d, x, attn_tc);
            tally_add(&all, d, x, attn_tc);
        }
        syncs += r->cost.host_sync;
        calls++;
    }
    all.calls = calls; /* ops, not their conversion passes */
    qsort(byop, (size_t)nop, sizeof *byop, by_est);
    qsort(byshape, (size_t)nshape, sizeof *byshape, by_est);
    runconfig_prec prec = runconfig_precision_at(&st->opt, 0);
    int lowp = prec != RC_PREC_FP32;
    printf("\nstage %s (%s, k %lld): %lld x %lld, V %lld, batch %lld x %lld, %s phase, %s; %s\n",
           st->name, runconfig_kind_name(st->kind), (long long)mc->k_train, (long long)mc->blocks,
           (long long)mc->hidden, (long long)mc->vocab, (long long)B, (long long)n,
           runconfig_prec_name(prec),
           attn_tc ? "tensor-core attention" : "attention on the fp32 units (KF_CUDA_TC=0)",
           timed ? "run and timed on this GPU" : "dry: nothing computed");
    printf("%-16s %6s %10s %9s %9s %6s %8s%s\n", "op", "calls", "GFLOP", "GB", "est ms", "share",
           "bound", timed ? "   meas ms" : "");
    for (int i = 0; i < nop; i++) {
        const tally *t = &byop[i];
        printf("%-16s %6lld %10.1f %9.2f %9.3f %5.1f%% %8s", t->op, (long long)t->calls,
               t->flops / 1e9, t->bytes / 1e9, t->est * 1e3, 100 * t->est / all.est, bound_name(t));
        if (timed) printf(" %9.3f", t->meas * 1e3);
        printf("\n");
    }
    printf("%-16s %6lld %10.1f %9.2f %9.3f %5.1f%% %8s", "total", (long long)all.calls,
           all.flops / 1e9, all.bytes / 1e9, all.est * 1e3, 100.0, "");
    if (timed) printf(" %9.3f", all.meas * 1e3);
    printf("\n");
    printf("parts: teacher passes %.3f ms, student forward + backward %.3f ms, optimizer %.3f ms; "
           "%d host syncs (downloads, reductions, sync)\n",
           sum_est(d, ops, mk->begin, mk->teacher, attn_tc) * 1e3,
           sum_est(d, ops, mk->teacher, mk->student, attn_tc) * 1e3,
           sum_est(d, ops, mk->student, mk->end, attn_tc) * 1e3, syncs);
    roofline_flops f = roofline_step_flops(mc, B, n, st);
    double peak = lowp ? d->tensor_flops : d->fp32_flops;
    printf(
        "step: estimated %.2f ms, %.0f tokens/s; model FLOPs (6 N tokens + attention) %.2f TFLOP, "
        "MFU %.1f%% of %.0f TFLOP/s (%s dense)",
        all.est * 1e3, f.tokens / all.est, f.total / 1e12, 100 * f.total / (all.est * peak),
        peak / 1e12, lowp ? "fp16/bf16 tensor" : "fp32");
    if (timed)
        printf("; measured %.2f ms, MFU %.1f%%", all.meas * 1e3, 100 * f.total / (all.meas * peak));
    printf(
        "\npeak device memory: %.2f GB (parameters, gradients, optimizer, teacher, activations)\n",
        (double)kernels_record_peak_bytes(be) / 1e9);
    /* AdamW's two moments and the EMA, 3 floats per element updated */
    printf("optimizer state (AdamW moments, EMA): %.2f GB per rank",
           12.0 * (double)s->s->opt.shard.count / 1e9);
    if (zero1_ranks > 1)
        printf(" (ZeRO-1 over %d ranks; %.2f GB with the all-reduce)", zero1_ranks,
               12.0 * (double)s->m->n_params / 1e9);
    printf("\n");
    printf("dominant ops (op, shape: est ms, share):\n");
    for (int i = 0; i < nshape && i < 10; i++)
        printf("  %-14s %-52s %6lld x %8.3f ms %5.1f%%\n", byshape[i].op, byshape[i].shape,
               (long long)byshape[i].calls, byshape[i].est * 1e3, 100 * byshape[i].est / all.est);
    free(byop);
    free(byshape);
    return all.est;
}

/* The data's vocabulary decides the mask token; without built shards the
 * model's last id is taken as the mask (its cost is one column fill). */
static int64_t data_vocab(const runconfig *rc) {
    shard_set *ss;
    kf_err err = {{0}};
    int64_t dv = rc->model.vocab - 1;
    if (shard_set_open(rc->data_train, "train", &ss, &err) == 0) {
        dv = shard_set_vocab_size(ss);
        shard_set_close(ss);
    }
    return dv;
}

/* The config's architecture (the stages' models start from it). */
static model_config base_config(const runconfig *rc) {
    return train_base_config(&rc->model, data_vocab(rc));
}

void roofline_print_vs_ar(const runconfig *rc, const double *step_s, const char *title) {
    double ar = 0;
    for (int i = 0; i < rc->n_stages && ar == 0; i++)
        if (rc->stages[i].kind == RC_KIND_AR) ar = step_s[i];
    if (ar <= 0) return;
    printf("\n%s:\n", title);
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *st = &rc->stages[i];
        if (step_s[i] <= 0) continue;
        printf("  %-8s %-14s %10.2f ms %7.2fx", st->name, runconfig_kind_name(st->kind),
               step_s[i] * 1e3, step_s[i] / ar);
        /* the goal: a self-forcing step at most 1.5 (k + 1) AR steps */
        if (st->kind == RC_KIND_SELF_FORCING)
            printf("  (goal <= %.1fx)", 1.5 * (double)(st->k + 1));
        printf("\n");
    }
}

int roofline_bench(const char *config, int n_over, char **over, const char **stages, int n_stages,
                   const char *device) {
    const roofline_device *d = roofline_device_find(device);
    if (!d) {
        fprintf(stderr, "kf bench train: --roofline: unknown device \"%s\" (valid: %s)\n", device,
                roofline_device_names());
        return KF_EXIT_USAGE;
    }
    kf_err err = {{0}};
    runconfig *rc;
    if (runconfig_load(config, n_over, over, &rc, &err)) return kf_err_report("kf", &err);
    for (int j = 0; j < n_stages; j++)
        if (!runconfig_stage_find(rc, stages[j])) {
            kf_err_set(&err, "%s: no stage named '%s'", config, stages[j]);
            runconfig_free(rc);
            return kf_err_report("kf", &err);
        }
    const char *tc = getenv("KF_CUDA_TC");
    int attn_tc = !(tc && !strcmp(tc, "0")); /* the CUDA backend's default, as it reads it */
    printf("roofline: %s, %.0f TFLOP/s fp16/bf16 tensor, %.1f TFLOP/s fp32, %.2f TB/s memory, "
           "%.0f GB/s bus; one training step of %s as the model issues it\n",
           d->desc, d->tensor_flops / 1e12, d->fp32_flops / 1e12, d->mem_bytes / 1e12,
           d->bus_bytes / 1e9, config);
    model_config base = base_config(rc);
    int code = KF_EXIT_OK;
    double *est = kf_calloc((size_t)rc->n_stages, sizeof *est);
    for (int i = 0; i < rc->n_stages && code == KF_EXIT_OK; i++) {
        const runconfig_stage *st = &rc->stages[i];
        int want = n_stages == 0 ? st->kind != RC_KIND_IMPORT : 0;
        for (int j = 0; j < n_stages; j++) want |= !strcmp(stages[j], st->name);
        if (!want) continue;
        /* on a GPU the step also runs there, each op timed; else dry */
        char why[512];
        kf_backend *gpu =
            strcmp(rc->res.backend, "cpu") ? kernels_cuda_create(0, why, sizeof why) : NULL;
        kf_backend *be = kernels_record_create(gpu, gpu != NULL);
        int64_t ranks = rc->res.ranks > 0 ? rc->res.ranks : 1;
        int zero1_ranks = rc->res.zero1 ? (int)ranks : 1;
        roofline_stage *s =
            roofline_stage_create(be, &base, st, zero1_ranks, strcmp(be->name, "dry") != 0, &err);
        if (!s) {
            code = kf_err_report("kf", &err);
            be->destroy(be);
            break;
        }
        int64_t B = st->opt.micro_batch ? st->opt.micro_batch : st->opt.batch / ranks;
        roofline_marks mk;
        int timed = strcmp(be->name, "dry") != 0;
        if (timed) roofline_stage_step(s, B, rc->model.seq_len, &mk); /* warm-up: allocations */
        kernels_record_clear(be);
        roofline_stage_step(s, B, rc->model.seq_len, &mk);
        est[i] = report(d, st, s, zero1_ranks, B, rc->model.seq_len, be, &mk, attn_tc, timed);
        report_graphs(be, &mk, st, ranks, B);
        roofline_stage_free(s);
        be->destroy(be);
    }
    if (code == KF_EXIT_OK) {
        char title[96];
        snprintf(title, sizeof title, "estimated step vs the AR step (%s)", d->name);
        roofline_print_vs_ar(rc, est, title);
    }
    free(est);
    runconfig_free(rc);
    return code;
}

/* ---------------------------------------------------------------- decoding */

/* decode_run's step hook: the recorder's op count when the wanted step
 * begins, and its cache rows. */
typedef struct step_mark {
    const kf_backend *be;
    int64_t want, begin, cache;
} step_mark;

static void mark_step(void *ctx, int64_t step, int64_t cache_len) {
    step_mark *sm = ctx;
    if (step != sm->want) return;
    sm->begin = n_recorded(sm->be);
    sm->cache = cache_len;
}

/* Where an op's time goes: the blocks (their weights, and the row work
 * around them), the attention over the cache, the output layer with the
 * sampler, host transfers. */
enum { PART_BLOCKS, PART_ATTN, PART_OUT, PART_BUS, N_PARTS };
static int decode_part(const kf_op_rec *r) {
    if (r->cost.unit == KF_COST_HOST) return PART_BUS;
    if (!strcmp(r->op, "attn_decode")) return PART_ATTN;
    const char *out[] = {"head_fwd", "freq_penalty", "argmax", "sample_icdf"};
    for (size_t i = 0; i < sizeof out / sizeof *out; i++)
        if (!strcmp(r->op, out[i])) return PART_OUT;
    return PART_BLOCKS;
}

/* One method at one batch size: the step priced, by part. */
typedef struct decode_row {
    int64_t cache, k;
    int syncs;
    tally part[N_PARTS], all, top;
} decode_row;

/* decode_run of m (tokens k per step) on its recorder after a prefix of P
 * tokens, up to the first step whose cache holds at least L rows, that
 * step's ops tallied; or the step after it where that one begins a pass of
 * the noise encoder over several steps' rows (decode_noise_steps), which
 * the steps between passes do without. */
static void decode_row_run(model *m, const model_heads *heads, const roofline_decode_args *a,
                           int64_t L, int64_t P, const roofline_device *d, int64_t B, int64_t k,
                           int attn_tc, decode_row *row) {
    kf_backend *be = m->be;
    int ar = m->cfg.kind == MODEL_AR;
    /* cache rows before step s >= 1: P + (s - 1) k; the run ends after it */
    step_mark sm = {.be = be, .want = 1 + (L - P + k - 1) / k};
    int64_t pass = ar ? 1 : decode_noise_steps(B * (m->cfg.head == HEAD_MTP ? 1 : k));
    if (pass > 1 && sm.want % pass == 0) sm.want++;
    decode_opts o = {.k = k,
                     .tau = 1.0,
                     .freq_penalty = ar ? 0.0f : (float)a->freq_penalty,
                     .max_new = (sm.want + 1) * k,
                     .seed = 1,
                     .on_step = mark_step,
                     .on_step_ctx = &sm};
    int32_t *pre = kf_malloc((size_t)(B * P) * sizeof *pre), *out;
    uint64_t *keys = kf_malloc((size_t)B * sizeof *keys);
    out = kf_malloc((size_t)(B * o.max_new) * sizeof *out);
    for (int64_t i = 0; i < B * P; i++) pre[i] = (int32_t)((i * 7919) % (m->cfg.vocab - 1));
    for (int64_t b = 0; b < B; b++) keys[b] = (uint64_t)b;
    kernels_record_clear(be);
    decode_run(m, heads, pre, B, P, &o, keys, out);
    int64_t n;
    const kf_op_rec *ops = kernels_record_ops(be, &n);
    *row = (decode_row){.cache = sm.cache, .k = k, .all = {.op = "total"}};
    tally *byop = kf_calloc((size_t)(2 * (n - sm.begin) + 1), sizeof *byop);
    int nop = 0;
    for (int64_t i = sm.begin; i < n; i++) {
        const kf_op_rec *r = &ops[i];
        kf_op_rec cv = convert_rec(r, attn_tc);
        for (int part = 0; part < 2; part++) {
            const kf_op_rec *x = part ? &cv : r;
            if (x->cost.unit == KF_COST_NONE || (part && x->cost.bytes == 0)) continue;
            tally_add(&row->part[decode_part(r)], d, x, attn_tc);
            tally_add(&row->all, d, x, attn_tc);
            tally_add(tally_find(byop, &nop, x->op, NULL), d, x, attn_tc);
        }
        row->syncs += r->cost.host_sync;
    }
    for (int i = 0; i < nop; i++)
        if (byop[i].est > row->top.est) row->top = byop[i];
    free(byop);
    free(pre);
    free(keys);
    free(out);
}

static void print_row(int64_t B, const char *label, const decode_row *r, const decode_row *ar,
                      int timed) {
    double tps = (double)(B * r->k) / r->all.est;
    printf("%5lld %-8s %4lld %6lld %9.4f", (long long)B, label, (long long)r->k,
           (long long)r->cache, r->all.est * 1e3);
    if (timed) printf(" %9.4f", r->all.meas * 1e3);
    printf(" %10.0f %6.2fx", tps, tps / ((double)B * (double)ar->k / ar->all.est));
    for (int p = 0; p < N_PARTS; p++)
        printf("  %8.4f %10.3f", r->part[p].est * 1e3, r->part[p].bytes / 1e6);
    printf(" %5d  %s %.0f%%\n", r->syncs, r->top.op ? r->top.op : "-",
           100 * r->top.est / r->all.est);
}

int roofline_decode_bench(const roofline_decode_args *a) {
    const roofline_device *d = roofline_device_find(a->device);
    if (!d) {
        fprintf(stderr, "kf bench decode: --roofline: unknown device \"%s\" (valid: %s)\n",
                a->device, roofline_device_names());
        return KF_EXIT_USAGE;
    }
    kf_err err = {{0}};
    runconfig *rc;
    if (runconfig_load(a->config, a->n_over, a->over, &rc, &err)) return kf_err_report("kf", &err);
    int64_t L = a->cache_len ? a->cache_len : rc->model.seq_len / 2;
    int64_t P = a->prefix_len ? a->prefix_len : L < 64 ? L : 64, kmax = 1;
    for (int j = 0; j < a->n_k; j++) kmax = a->ks[j] > kmax ? a->ks[j] : kmax;
    model_config base = base_config(rc);
    model_config ar_cfg = sup_student_config(&(sup_config){.kind = SUP_AR, .k = 1}, &base);
    model_config kf_cfg =
        sup_student_config(&(sup_config){.kind = SUP_DISTILL_AR, .k = kmax}, &base);
    /* the longest run: PFLM(kmax)'s, up to the step after the cache reaches L */
    int64_t need = L + 3 * kmax;
    if (P > L)
        kf_err_set(&err, "--prefix-len %lld exceeds the cache length %lld", (long long)P,
                   (long long)L);
    else if (need > rc->model.seq_len)
        kf_err_set(&err,
                   "a step at a cache of %lld rows needs %lld positions with k = %lld; the model's "
                   "context is %lld (lower --cache-len)",
                   (long long)L, (long long)need, (long long)kmax, (long long)rc->model.seq_len);
    if (err.msg[0]) {
        runconfig_free(rc);
        return kf_err_report("kf", &err);
    }
    const char *tc = getenv("KF_CUDA_TC");
    int attn_tc = !(tc && !strcmp(tc, "0"));
    char why[512];
    kf_backend *gpu =
        strcmp(rc->res.backend, "cpu") ? kernels_cuda_create(0, why, sizeof why) : NULL;
    kf_backend *be = kernels_record_create(gpu, gpu != NULL);
    int timed = gpu != NULL;
    be->set_precision(be, (kf_precision)a->precision);
    model *mar = model_create(be, &ar_cfg), *mkf = model_create(be, &kf_cfg);
    if (timed) model_init(mar, 1), model_init(mkf, 2); /* finite logits: valid ids */
    model_heads *har = model_heads_pack(mar), *hkf = model_heads_pack(mkf);
    printf("decode roofline: %s, %.0f TFLOP/s fp16/bf16 tensor, %.1f TFLOP/s fp32, %.2f TB/s "
           "memory, %.0f GB/s bus; one decode step of %s as decode_run issues it: %lld x %lld, "
           "V %lld, %s, at a cache of %lld rows (prefix %lld), PFLM frequency penalty %g, AR "
           "sampled; %s\n",
           d->desc, d->tensor_flops / 1e12, d->fp32_flops / 1e12, d->mem_bytes / 1e12,
           d->bus_bytes / 1e9, a->config, (long long)ar_cfg.blocks, (long long)ar_cfg.hidden,
           (long long)ar_cfg.vocab, kernels_precision_name((kf_precision)a->precision),
           (long long)L, (long long)P, a->freq_penalty,
           timed ? "run and timed on this GPU, op by op" : "dry: nothing computed");
    printf("parameters: AR %lld (%.3f MB fp32), PFLM %lld (%.3f MB)\n", (long long)mar->n_params,
           4e-6 * (double)mar->n_params, (long long)mkf->n_params, 4e-6 * (double)mkf->n_params);
    printf("%5s %-8s %4s %6s %9s%s %10s %7s  %8s %10s  %8s %10s  %8s %10s  %8s %10s %5s  %s\n",
           "batch", "method", "tok", "cache", "est ms", timed ? "   meas ms" : "", "tokens/s",
           "x AR", "blocks", "MB", "attn", "MB", "output", "MB", "bus", "MB", "syncs", "top op");
    for (int b = 0; b < a->n_batch; b++) {
        int64_t B = a->batch[b];
        decode_row ar, r;
        decode_row_run(mar, har, a, L, P, d, B, 1, attn_tc, &ar);
        print_row(B, "AR", &ar, &ar, timed);
        for (int j = 0; j < a->n_k; j++) {
            char label[24];
            snprintf(label, sizeof label, "PFLM(%lld)", (long long)a->ks[j]);
            decode_row_run(mkf, hkf, a, L, P, d, B, a->ks[j], attn_tc, &r);
            print_row(B, label, &r, &ar, timed);
        }
    }
    printf("tok: tokens per step; blocks: the transformer blocks, embedding and row moves (their "
           "weights read once a step), attn: attn_decode over the cache, output: the output "
           "layer and the sampler, bus: host transfers (est ms and MB each); syncs: host waits "
           "a step\n");
    model_heads_free(har);
    model_heads_free(hkf);
    model_free(mar);
    model_free(mkf);
    be->destroy(be);
    runconfig_free(rc);
    return KF_EXIT_OK;
}
