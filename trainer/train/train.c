/* trainer/train/train.c — the stage loop (see train.h). */
#include "trainer/train/train.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/runconfig.h"
#include "common/sha256.h"
#include "common/stage_status.h"
#include "common/writer_lock.h"
#include "trainer/model/model.h"
#include "trainer/train/checkpoint.h"
#include "trainer/train/loader.h"
#include "trainer/train/optim.h"
#include "trainer/train/step.h"
#include "trainer/train/supervision.h"

static volatile sig_atomic_t g_preempt; /* the first signal that asked for a checkpoint */

static void on_signal(int sig) {
    if (!g_preempt) g_preempt = sig;
}

model_config train_base_config(const runconfig_model *rm, int64_t data_vocab) {
    return (model_config){.hidden = rm->hidden,
                          .heads = rm->heads,
                          .blocks = rm->blocks,
                          .vocab = rm->vocab,
                          .seq_len = rm->seq_len,
                          .mask_id = runconfig_mask_id(rm, data_vocab),
                          .noise_cycles = rm->noise_cycles,
                          .kind = MODEL_AR,
                          .head = HEAD_SHARED,
                          .k_train = 1};
}

void train_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Ctrl-C checkpoints like SIGTERM; the handler is then reset, so a second
     * Ctrl-C aborts at once (`kf jobs run` forwards its SIGINT as SIGTERM:
     * one Ctrl-C reaches the trainer once, from the terminal) */
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGINT, &sa, NULL);
    /* A write to a connection whose peer died (Open MPI's TCP transport when
     * a rank's node is lost; stderr after the launcher went) must fail with
     * EPIPE and reach a path that says why (an MPI error, the watchdog), not
     * end the rank silently by SIGPIPE's default action */
    signal(SIGPIPE, SIG_IGN);
    /* a launcher may start the trainer with these blocked (kf jobs run:
     * PROC_HOLD_SIGNALS), so that none kills it before this point; any
     * held arrives now, at the handlers */
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGUSR1), sigaddset(&held, SIGTERM), sigaddset(&held, SIGINT);
    sigprocmask(SIG_UNBLOCK, &held, NULL);
}

typedef struct trainer {
    const train_args *a;
    dist *d;
    runconfig *rc;
    const runconfig_stage *st;
    const runconfig_opts *o;
    kf_backend *be;
    model *m;
    model_ws *ws;
    sup_ctx *sup; /* builds inputs + targets per micro-batch */
    step *s;      /* the step: the optimizer state, the micro-batches */
    loader *ld, *vld;
    int64_t accum, micro, seq_len;
    model *teacher;
    ckpt_identity id;
    int64_t step;
    char stage_dir[4096], ckpt_dir[4096], final_dir[4096];
    kf_jsonl *log;
    kf_err log_err; /* rank 0: why a record did not reach log.jsonl ("": none did not) */
    double t0, last_tps;
    int64_t last_ckpt_step;
    writer_lock lock; /* rank 0: the stage's writer lock, held until teardown */
} trainer;

static void write_status(trainer *t, const char *state, const char *reason) {
    if (t->d->rank != 0) return;
    stage_status st = {.step = t->step, .steps = t->st->steps, .tokens_per_s = t->last_tps};
    snprintf(st.state, sizeof st.state, "%s", state);
    snprintf(st.reason, sizeof st.reason, "%s", reason);
    if (t->last_ckpt_step >= 0)
        snprintf(st.checkpoint, sizeof st.checkpoint, "step-%" PRId64, t->last_ckpt_step);
    kf_err err = {{0}};
    if (stage_status_write(t->stage_dir, &st, &err)) kf_log_warn("status: %s", err.msg);
}

static void fill_meta(trainer *t, ckpt_meta *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->stage, sizeof m->stage, "%s", t->st->name);
    snprintf(m->kind, sizeof m->kind, "%s", runconfig_kind_name(t->st->kind));
    m->step = t->step;
    m->cursor = t->step * t->o->batch;
    m->global_batch = t->o->batch;
    m->world = t->d->world;
    memcpy(m->config_hash, t->rc->hash, 65);
    if (t->s) m->opt = t->s->os; /* an import stage has no optimizer */
    snprintf(m->phase, sizeof m->phase, "%s",
             runconfig_prec_name(runconfig_precision_at(t->o, t->step)));
    m->id = t->id;
}

/* This rank's RNG state: the noise stream at the first stream position of
 * its slice of the next step. */
static rng_state rank_rng(const trainer *t) {
    rng_state r = rng_state_make(t->o->seed, TRAIN_NOISE_STREAM);
    r.counter = (uint64_t)(t->step * t->o->batch + (int64_t)t->d->rank * t->accum * t->micro);
    return r;
}

/* A whole-buffer copy of optimizer state x for the checkpoint: x itself, or
 * under ZeRO-1 (collective) on rank 0 a new buffer that every rank's shard
 * is gathered into, elsewhere NULL (only rank 0 writes the files, in the
 * format of the all-reduce runs). Free it with state_done. */
static float *state_full(trainer *t, const float *x) {
    if (!t->s->opt.zero1) return (float *)x;
    float *full =
        t->d->rank == 0 ? t->be->alloc(t->be, (size_t)t->m->n_params * sizeof(float)) : NULL;
    dist_gather_root(t->d, t->be, full, x, t->m->n_params);
    return full;
}

static void state_done(trainer *t, float *full) {
    if (t->s->opt.zero1 && full) t->be->free(t->be, full);
}

/* Whether a record is missing from rank 0's log.jsonl (collective). After
 * making the records so far durable (rank 0): a checkpoint at step N claims
 * the log holds steps 1..N, since a resume from it never logs them again. */
static int log_lost(trainer *t) {
    if (t->d->rank == 0 && !t->log_err.msg[0]) kf_jsonl_sync(t->log, &t->log_err);
    return dist_allreduce_max_int(t->d, t->log_err.msg[0] != 0);
}

/* Writes checkpoint step-N unless log.jsonl lost a record: 0, or -1 (the
 * caller ends the stage with stage_log_failed). Collective. */
static int checkpoint(trainer *t) {
    if (log_lost(t)) return -1;
    if (t->last_ckpt_step == t->step) return 0;
    ckpt_meta meta;
    fill_meta(t, &meta);
    rng_state r = rank_rng(t);
    float *ema = state_full(t, t->s->ema), *am = state_full(t, t->s->adam_m),
          *av = state_full(t, t->s->adam_v);
    ckpt_save(t->ckpt_dir, t->d, t->m, ema, am, av, &meta, &r, (int)t->o->keep_checkpoints);
    state_done(t, ema), state_done(t, am), state_done(t, av);
    t->last_ckpt_step = t->step;
    if (t->d->rank == 0) kf_log_info("%s: checkpoint step-%" PRId64, t->st->name, t->step);
    return 0;
}

/* Validation loss of the current params over the first eval_batches global
 * batches of the valid split (the same samples whatever the rank count),
 * each rank its slice: {sum, count} summed over ranks. */
static double evaluate(trainer *t) {
    loader_seek(t->vld, 0);
    double acc[2] = {0, 0};
    step *s = t->s;
    t->be->zero(t->be, &s->dev->loss, sizeof(double));
    for (int64_t i = 0; i < t->o->eval_batches * t->accum; i++) {
        step_build(s, loader_next(t->vld), -1);
        model_forward(t->m, t->ws, &s->sb->in, MODEL_NO_LOGITS, NULL);
        /* the step's micro-batches are done: the first one's buffer holds the targets */
        model_loss_acc(t->m, t->ws, step_targets(s, &s->mbs[0]), NULL, &s->dev->loss);
        acc[1] += (double)s->sb->n_targets;
    }
    t->be->download(t->be, &acc[0], &s->dev->loss, sizeof(double));
    dist_allreduce_sum_f64(t->d, acc, 2);
    return acc[1] > 0 ? acc[0] / acc[1] : 0;
}

/* Evaluates params and EMA (swapped in and out through the accumulator;
 * under ZeRO-1 the EMA's shards are gathered into the params). */
static void evaluate_both(trainer *t, double *val, double *val_ema) {
    size_t bytes = (size_t)t->m->n_params * sizeof(float);
    *val = evaluate(t);
    step *s = t->s;
    const dist_range *sh = &s->opt.shard;
    t->be->copy(t->be, s->acc, t->m->params, bytes);
    t->be->copy(t->be, t->m->params + sh->off, s->ema, (size_t)sh->count * sizeof(float));
    if (s->opt.zero1) dist_allgather(t->d, t->be, t->m->params, t->m->n_params);
    model_params_changed(t->m);
    *val_ema = evaluate(t);
    t->be->copy(t->be, t->m->params, s->acc, bytes);
    model_params_changed(t->m);
}

/* One optimizer step (train.h describes the sequence), then its log record. */
/* The loader's micro-batch a of the current step. */
static const loader_batch *next_batch(void *ctx, int64_t a) {
    trainer *t = ctx;
    const loader_batch *lb = loader_next(t->ld);
    KF_CHECK(lb->step == t->step && lb->micro == a, "loader out of step (%lld.%lld vs %lld.%lld)",
             (long long)lb->step, (long long)lb->micro, (long long)t->step, (long long)a);
    return lb;
}

static void train_step(trainer *t) {
    double t_start = clock_now_s();
    step_result sr = step_run(t->s, t->step, next_batch, t);
    const optim_result r = sr.r;
    double loss = sr.loss, norm = sr.count, exposed = sr.exposed;
    runconfig_prec prec = sr.prec;
    t->step++;
    double dt = clock_now_s() - t_start;
    double tokens = (double)t->o->batch * (double)t->seq_len;
    t->last_tps = tokens / dt;
    if (t->d->rank != 0) return;
    kf_rec rec;
    kf_rec_init(&rec);
    kf_rec_int(&rec, "step", t->step);
    kf_rec_double(&rec, "loss", loss / norm);
    kf_rec_double(&rec, "lr", r.lr);
    kf_rec_double(&rec, "grad_norm", r.grad_norm);
    kf_rec_double(&rec, "loss_scale", r.scale_used);
    kf_rec_int(&rec, "skipped", r.skipped);
    kf_rec_int(&rec, "skipped_total", t->s->os.skipped);
    kf_rec_str(&rec, "phase", runconfig_prec_name(prec));
    kf_rec_int(&rec, "tokens", (int64_t)tokens);
    kf_rec_double(&rec, "tokens_per_s", t->last_tps);
    kf_rec_double(&rec, "ms_step", dt * 1e3);
    kf_rec_double(&rec, "ms_grad_wait", exposed * 1e3);
    kf_rec_double(&rec, "time", clock_now_s() - t->t0);
    if (!t->log_err.msg[0]) kf_jsonl_append(t->log, &rec, &t->log_err);
    kf_rec_free(&rec);
    if (r.skipped)
        kf_log_warn("%s: step %" PRId64 " skipped (non-finite gradients); loss scale now %g",
                    t->st->name, t->step, t->s->os.scale);
    if (t->step % t->o->log_every == 0 || t->step == t->st->steps)
        kf_log_info("%s: step %" PRId64 "/%" PRId64 " loss %.4f lr %.3g |g| %.3g scale %g %s "
                    "%.0f tok/s %.0f ms/step",
                    t->st->name, t->step, t->st->steps, loss / norm, r.lr, r.grad_norm,
                    r.scale_used, runconfig_prec_name(prec), t->last_tps, dt * 1e3);
}

static void log_eval(trainer *t) {
    double v, ve;
    evaluate_both(t, &v, &ve);
    if (t->d->rank != 0) return;
    kf_rec rec;
    kf_rec_init(&rec);
    kf_rec_int(&rec, "step", t->step);
    kf_rec_double(&rec, "val_loss", v);
    kf_rec_double(&rec, "val_loss_ema", ve);
    kf_rec_double(&rec, "time", clock_now_s() - t->t0);
    if (!t->log_err.msg[0]) kf_jsonl_append(t->log, &rec, &t->log_err);
    kf_rec_free(&rec);
    kf_log_info("%s: step %" PRId64 " validation loss %.4f (EMA %.4f)", t->st->name, t->step, v,
                ve);
}

/* The weights file a stage reference (an earlier stage's name or a path)
 * stands for, verified; sha receives its sha256. */
static int resolve_ref(trainer *t, const char *ref, int stage_idx, char *out, size_t cap,
                       char sha[65], kf_err *err) {
    char p[4096];
    if (stage_idx >= 0) {
        snprintf(p, sizeof p, "%s/stages/%s/final", t->a->run_dir, t->rc->stages[stage_idx].name);
        if (!fs_is_dir(p))
            return kf_err_set(err,
                              "stage '%s' needs stage '%s' to be finished first (%s is missing)",
                              t->st->name, ref, p);
        kf_err why = {{0}};
        if (ckpt_resolve_teacher(p, out, cap, sha, &why) == 0) return 0;
        /* running again cannot help: say which file is at fault and what mends it */
        return kf_err_set(err,
                          "the final weights of stage '%s', this stage's teacher, do not verify: "
                          "%s. Remove them (rm -r %s) and run kf jobs run (or resume) again: "
                          "stage '%s' is finished again from its newest checkpoint; weights it "
                          "got from kf import are imported again with kf import WEIGHTS "
                          "--run-dir %s --stage %s --force",
                          ref, why.msg, p, ref, t->a->run_dir, ref);
    }
    if (ckpt_resolve_teacher(ref, out, cap, sha, err) == 0) return 0;
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return kf_err_set(err, "stage '%s', %s: %s", t->st->name,
                      ref == t->st->teacher ? "teacher" : "init", why);
}

static kf_backend *make_backend(trainer *t) {
    const char *want = t->rc->res.backend;
    kf_backend *b = NULL;
    if (strcmp(want, "cpu")) {
        char msg[512] = "";
        b = kernels_cuda_create(t->d->local_rank, msg, sizeof msg);
        KF_CHECK(b || !strcmp(want, "auto"), "resources.backend is cuda, but: %s", msg);
    }
    if (!b) b = kernels_cpu_create();
    return t->a->wrap_backend ? t->a->wrap_backend(b, t->a->hook_ctx) : b;
}

/* Imports a checkpoint file as this stage's final weights. */
static int run_import(trainer *t, kf_err *err) {
    if (t->d->rank == 0) {
        char sha[65];
        if (!fs_exists(t->st->path))
            return kf_err_set(err, "import: %s: no such file", t->st->path);
        if (sha256_file_hex(t->st->path, sha, err)) return -1;
        model *m = model_load(t->be, t->st->path, err);
        if (!m) return -1;
        t->m = m;
        t->step = 0;
        ckpt_meta meta;
        fill_meta(t, &meta);
        meta.id.model = m->cfg;
        ckpt_write_final(t->final_dir, m, m->params, &meta);
        model_free(m);
        t->m = NULL;
        kf_log_info("%s: imported %s (sha256 %.12s...) as %s", t->st->name, t->st->path, sha,
                    t->final_dir);
    }
    dist_barrier(t->d);
    return 0;
}

static int setup(trainer *t, kf_err *err) {
    const train_args *a = t->a;
    if (runconfig_load(a->config, a->n_over, a->over, &t->rc, err)) return -1;
    t->st = runconfig_stage_find(t->rc, a->stage);
    if (!t->st) return kf_err_set(err, "%s: no stage named '%s'", a->config, a->stage);
    t->o = &t->st->opt;
    snprintf(t->stage_dir, sizeof t->stage_dir, "%s/stages/%s", a->run_dir, t->st->name);
    fs_path_join(t->ckpt_dir, sizeof t->ckpt_dir, t->stage_dir, "ckpt");
    fs_path_join(t->final_dir, sizeof t->final_dir, t->stage_dir, "final");
    t->last_ckpt_step = -1;
    /* One writer per stage: rank 0 takes the stage's lock before it writes
     * anything, and a refusal stops every rank. */
    int bad = 0;
    if (t->d->rank == 0) {
        char lp[4200], what[160];
        fs_path_join(lp, sizeof lp, t->stage_dir, "lock");
        snprintf(what, sizeof what, "kf train --stage %s", t->st->name);
        bad = fs_mkdir_p(t->stage_dir, err) || writer_lock_take(lp, what, &t->lock, err) ||
              fs_mkdir_p(t->ckpt_dir, err);
    }
    if (dist_allreduce_max_int(t->d, bad)) {
        if (!bad) kf_err_set(err, "rank 0 could not start the stage (its error says why)");
        return -1;
    }
    t->be = make_backend(t);
    if (dist_attach_backend(t->d, t->be, err)) return -1;
    return 0;
}

/* output_layer.linear.bias = log of the training split's token frequencies
 * (add-0.5 smoothing), centred: a student trained from scratch then starts
 * at the unigram model instead of spending its first hundreds of steps
 * moving 50k biases by lr per step. Counted over every target position of
 * the split (deterministic; a pure function of the manifest). */
static int unigram_bias(trainer *t, kf_err *err) {
    const model_tensor *bt = model_find(t->m, "output_layer.linear.bias");
    KF_CHECK(bt, "model has no output_layer.linear.bias");
    shard_set *ss;
    if (shard_set_open(t->rc->data_train, "train", &ss, err)) return -1;
    int64_t V = t->m->cfg.vocab, n = shard_set_count(ss), L = shard_set_seq_len(ss);
    double *cnt = kf_calloc((size_t)V, sizeof *cnt), tot = 0;
    int32_t *ids = kf_malloc((size_t)L * sizeof *ids), len;
    for (int64_t i = 0; i < n; i++) {
        if (shard_set_get(ss, i, ids, &len, err)) {
            shard_set_close(ss);
            free(cnt), free(ids);
            return -1;
        }
        for (int64_t p = 1; p < len; p++) cnt[ids[p]] += 1, tot += 1;
    }
    shard_set_close(ss);
    float *bias = kf_malloc((size_t)V * sizeof *bias);
    double mean = 0;
    for (int64_t v = 0; v < V; v++)
        mean += log((cnt[v] + 0.5) / (tot + 0.5 * (double)V)) / (double)V;
    for (int64_t v = 0; v < V; v++)
        bias[v] = (float)(log((cnt[v] + 0.5) / (tot + 0.5 * (double)V)) - mean);
    t->be->upload(t->be, t->m->params + bt->offset, bias, (size_t)V * sizeof *bias);
    model_params_changed(t->m);
    free(cnt), free(ids), free(bias);
    return 0;
}

/* Builds the model, teacher, loaders and optimizer buffers for a training stage. */
static int setup_training(trainer *t, kf_err *err) {
    const runconfig_stage *st = t->st;
    int64_t world = t->d->world;
    t->micro = t->o->micro_batch ? t->o->micro_batch : t->o->batch / world;
    if (t->micro < 1 || t->o->batch % (world * t->micro))
        return kf_err_set(err,
                          "stage %s: global batch %lld does not split into %lld ranks x "
                          "micro_batch %lld",
                          st->name, (long long)t->o->batch, (long long)world, (long long)t->micro);
    loader_opts lo = {.data_dir = t->rc->data_train,
                      .split = "train",
                      .seed = t->o->seed,
                      .shuffle = 1,
                      .global_batch = t->o->batch,
                      .micro_batch = t->micro,
                      .rank = t->d->rank,
                      .world = t->d->world,
                      .depth = 4};
    if (loader_open(&lo, &t->ld, err)) return -1;
    loader_opts vo = lo;
    vo.data_dir = t->rc->data_valid, vo.split = "valid", vo.shuffle = 0;
    vo.depth = 1;
    if (loader_open(&vo, &t->vld, err)) return -1;
    t->accum = loader_accum(t->ld);
    /* bucket_mb 0: one bucket larger than any model, launched after the backward */
    double bucket = t->rc->res.bucket_mb * (1 << 20) / sizeof(float);
    int64_t bucket_floats = t->rc->res.bucket_mb == 0 ? INT64_MAX
                            : bucket >= 1             ? (int64_t)bucket
                                                      : 1;
    const shard_set *ss = loader_shards(t->ld);
    t->seq_len = shard_set_seq_len(ss);
    const runconfig_model *rm = &t->rc->model;
    if (t->seq_len != rm->seq_len)
        return kf_err_set(err, "%s: model.seq_len is %lld but the shards in %s have seq_len %lld",
                          t->rc->path, (long long)rm->seq_len, t->rc->data_train,
                          (long long)t->seq_len);
    int64_t dv = shard_set_vocab_size(ss);
    if (rm->vocab < dv)
        return kf_err_set(err, "%s: model.vocab %lld is smaller than the data's vocabulary (%lld)",
                          t->rc->path, (long long)rm->vocab, (long long)dv);

    /* identity */
    sup_config sc = {.kind = (sup_kind)sup_kind_from_name(runconfig_kind_name(st->kind)),
                     .k = st->kind == RC_KIND_AR ? 1 : st->k,
                     .tau_min = st->tau_min,
                     .tau_max = st->tau_max,
                     .seed = t->o->seed,
                     .teacher_precision = optim_precision(t->o->teacher_precision),
                     .teacher_follow = t->o->teacher_follow,
                     .mask_id = runconfig_mask_id(rm, dv),
                     .strata = t->o->batch};
    model_config base = train_base_config(rm, dv);
    model_config *mc = &t->id.model;
    *mc = sup_student_config(&sc, &base);
    if (model_config_check(mc, err)) return -1;
    snprintf(t->id.data_manifest, sizeof t->id.data_manifest, "%s", shard_set_manifest_sha256(ss));
    snprintf(t->id.tokenizer, sizeof t->id.tokenizer, "%s", shard_set_tokenizer(ss));
    snprintf(t->id.vocab_sha256, sizeof t->id.vocab_sha256, "%s", shard_set_vocab_sha256(ss));
    snprintf(t->id.teacher_precision, sizeof t->id.teacher_precision, "%s",
             t->o->teacher_follow ? "follow" : runconfig_prec_name(t->o->teacher_precision));

    t->m = model_create(t->be, mc);
    model_init(t->m, t->o->seed);
    t->ws = model_ws_create(t->m);

    model *teacher = NULL;
    if (st->teacher) {
        char tf[4096];
        if (resolve_ref(t, st->teacher, st->teacher_stage, tf, sizeof tf, t->id.teacher_sha256,
                        err))
            return -1;
        teacher = model_load(t->be, tf, err);
        if (!teacher) return -1;
        if (t->d->rank == 0)
            kf_log_info("%s: teacher %s (sha256 %.12s...), its passes in %s", st->name, tf,
                        t->id.teacher_sha256, t->id.teacher_precision);
    }
    if (!st->init && t->o->unigram_bias && unigram_bias(t, err)) return -1;
    if (st->init) {
        char initf[4096], sha[65];
        if (resolve_ref(t, st->init, st->init_stage, initf, sizeof initf, sha, err)) return -1;
        model *src = model_load(t->be, initf, err);
        if (!src) return -1;
        const model_config *a = &src->cfg, *b = &t->m->cfg;
        if (a->pos != b->pos || a->tied_head != b->tied_head || a->norm_bias != b->norm_bias ||
            a->attn_bias != b->attn_bias ||
            (a->kind == MODEL_PFLM && a->noise_cycles != b->noise_cycles)) {
            model_free(src);
            return kf_err_set(err,
                              "%s: init %s has other architecture options (positions, biases, "
                              "tied head, noise_cycles) than this stage's model: its weights "
                              "would be misread",
                              st->name, initf);
        }
        int n = model_copy_matching(t->m, src);
        model_free(src);
        if (t->d->rank == 0) kf_log_info("%s: %d tensors initialised from %s", st->name, n, initf);
    }
    t->teacher = teacher;
    t->sup = sup_create(&sc, teacher, err);
    if (!t->sup) return -1;
    sup_set_graphs(t->sup, t->accum);
    int zero1 = t->rc->res.zero1;
    step_opts so = {.be = t->be,
                    .m = t->m,
                    .ws = t->ws,
                    .sup = t->sup,
                    .st = st,
                    .o = t->o,
                    .d = t->d,
                    .accum = t->accum,
                    .bucket = bucket_floats,
                    .pad = !strcmp(shard_set_packing(ss), "pad"),
                    .zero1 = zero1,
                    .shard = zero1 ? dist_shard(t->d, t->m->n_params, t->d->rank)
                                   : (dist_range){0, t->m->n_params},
                    .graphs = 1};
    t->s = step_create(&so);
    return 0;
}

/* Drops log records past the checkpoint being resumed (and a torn last
 * line), so log.jsonl reads as one history even after a crash repeated
 * steps. Rank 0 only; atomic. A log that cannot be trimmed is an error: the
 * repeated steps would be logged twice. */
static int trim_log(trainer *t, int64_t step, kf_err *err) {
    char p[4096];
    fs_path_join(p, sizeof p, t->stage_dir, "log.jsonl");
    char *buf;
    size_t len;
    if (!fs_exists(p)) return 0;
    if (fs_read_file(p, &buf, &len, err)) return -1;
    char *out = kf_malloc(len + 1);
    size_t n = 0;
    kf_err perr = {{0}};
    for (char *line = buf, *nl; (nl = memchr(line, '\n', len - (size_t)(line - buf)));
         line = nl + 1) {
        json_doc *d = json_parse(line, (size_t)(nl - line), p, &perr);
        const json *sj = d ? json_get(json_root(d), "step") : NULL;
        if (sj && sj->type == JSON_NUMBER && sj->i <= step) {
            memcpy(out + n, line, (size_t)(nl - line) + 1);
            n += (size_t)(nl - line) + 1;
        }
        json_free(d);
    }
    int rv = n != len ? fs_write_atomic(p, out, n, err) : 0;
    free(out);
    free(buf);
    return rv ? kf_err_set(err, "dropping the records past step %" PRId64 " from the log: %s", step,
                           err->msg)
              : 0;
}

/* --resume: the newest verified checkpoint, if any (rank 0 chooses, every
 * rank loads the same one). */
static int resume(trainer *t, kf_err *err) {
    char path[4096] = "";
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    int found = 0;
    if (t->d->rank == 0) found = ckpt_find(t->ckpt_dir, path, sizeof path, &meta);
    dist_bcast(t->d, &found, sizeof found, 0);
    if (!found) {
        if (t->d->rank == 0)
            kf_log_info("%s: no checkpoint to resume from: starting at step 0", t->st->name);
        return 0;
    }
    dist_bcast(t->d, path, sizeof path, 0);
    dist_bcast(t->d, &meta, sizeof meta, 0);
    if (ckpt_check_compatible(&meta, &t->id, t->o->batch, err)) return -1;
    if (strcmp(meta.config_hash, t->rc->hash) && t->d->rank == 0)
        kf_log_warn("%s: the config changed since %s was written (hash %.12s... vs %.12s...); "
                    "continuing with the current one",
                    t->st->name, path, meta.config_hash, t->rc->hash);
    rng_state r;
    /* the checkpoint holds whole buffers, whoever wrote it: ZeRO-1 keeps its shard */
    step *s = t->s;
    float *full[3] = {s->ema, s->adam_m, s->adam_v};
    if (s->opt.zero1)
        for (int i = 0; i < 3; i++)
            full[i] = t->be->alloc(t->be, (size_t)t->m->n_params * sizeof(float));
    int have_rng = ckpt_load(path, t->d->rank, t->m, full[0], full[1], full[2], &r);
    if (s->opt.zero1) {
        float *mine[3] = {s->ema, s->adam_m, s->adam_v};
        for (int i = 0; i < 3; i++) {
            t->be->copy(t->be, mine[i], full[i] + s->opt.shard.off,
                        (size_t)s->opt.shard.count * sizeof(float));
            t->be->free(t->be, full[i]);
        }
    }
    t->step = meta.step;
    s->os = meta.opt;
    t->last_ckpt_step = meta.step;
    if (t->step > t->st->steps)
        return kf_err_set(err, "%s is at step %lld, past this stage's %lld steps", path,
                          (long long)t->step, (long long)t->st->steps);
    rng_state want = rank_rng(t);
    if (meta.world == t->d->world && have_rng &&
        (r.seed != want.seed || r.stream != want.stream || r.counter != want.counter))
        return kf_err_set(err,
                          "%s: rank %d's RNG state (counter %llu) disagrees with the data "
                          "cursor (expected %llu)",
                          path, t->d->rank, (unsigned long long)r.counter,
                          (unsigned long long)want.counter);
    KF_CHECK(meta.cursor == t->step * t->o->batch, "checkpoint cursor %lld is not step x batch",
             (long long)meta.cursor);
    loader_seek(t->ld, meta.cursor);
    if (t->d->rank == 0) {
        ckpt_set_latest(t->ckpt_dir, t->step);
        kf_log_info("%s: resumed from %s (step %lld, %s, loss scale %g, written by %d rank%s)",
                    t->st->name, path, (long long)t->step, meta.phase, s->os.scale, meta.world,
                    meta.world == 1 ? "" : "s");
    }
    return 0;
}

static void teardown(trainer *t) {
    step_free(t->s);
    sup_free(t->sup);
    model_free(t->teacher);
    loader_close(t->ld);
    loader_close(t->vld);
    model_ws_free(t->ws);
    model_free(t->m);
    /* last: everything above frees through it (NCCL's communicator, which
     * dist_finalize destroys later, does not use it) */
    if (t->be) t->be->destroy(t->be);
    kf_jsonl_close(t->log);
    runconfig_free(t->rc);
    writer_lock_release(&t->lock); /* last: every write of the stage is done */
}

/* Ends the stage on an error: the message, status "failed", resources freed. */
static int stage_failed(trainer *t, const kf_err *err) {
    int code = kf_err_report("kf", err);
    write_status(t, "failed", err->msg);
    teardown(t);
    return code;
}

/* Ends the stage when log.jsonl lost a record: no checkpoint is written past
 * it, so a resume repeats the steps since the last one and logs them. */
static int stage_log_failed(trainer *t) {
    kf_err err = {{0}};
    if (t->d->rank == 0)
        kf_err_set(&err,
                   "%s: log.jsonl does not hold every step up to %" PRId64 " (%s): stopping "
                   "without a checkpoint past it; --resume repeats the steps after step %" PRId64,
                   t->st->name, t->step, t->log_err.msg,
                   t->last_ckpt_step > 0 ? t->last_ckpt_step : 0);
    else kf_err_set(&err, "%s: rank 0 could not write the log: stopping", t->st->name);
    return stage_failed(t, &err);
}

int train_run(const train_args *a, dist *d) {
    trainer tr, *t = &tr;
    memset(t, 0, sizeof *t);
    t->a = a, t->d = d;
    t->lock.fd = -1;
    t->t0 = clock_now_s();
    kf_err err = {{0}};
    if (setup(t, &err)) {
        fprintf(stderr, "kf: error: %s\n", err.msg);
        teardown(t);
        return KF_EXIT_ERROR;
    }
    char p[4096];
    fs_path_join(p, sizeof p, t->final_dir, "DONE");
    if (fs_exists(p)) {
        if (d->rank == 0) kf_log_info("%s: already complete (%s)", t->st->name, p);
        teardown(t);
        return KF_EXIT_OK;
    }
    if (t->st->kind == RC_KIND_IMPORT) {
        int rc = run_import(t, &err);
        if (rc) return stage_failed(t, &err);
        write_status(t, "done", "");
        teardown(t);
        return KF_EXIT_OK;
    }
    if (setup_training(t, &err)) return stage_failed(t, &err);
    if (a->resume) {
        if (resume(t, &err)) return stage_failed(t, &err);
        /* also when no checkpoint was found: a run killed before its first
         * one logged steps. Rank 0 alone: a failure reaches every rank
         * through the refusal below. */
        if (d->rank == 0) trim_log(t, t->step, &err);
    } else if (d->rank == 0) {
        char found[4096];
        ckpt_meta m;
        /* Starting over would silently discard them: demand a decision. */
        if (ckpt_find(t->ckpt_dir, found, sizeof found, &m)) {
            kf_err_set(&err,
                       "%s already has checkpoints (newest %s): pass --resume to continue, "
                       "or remove the directory to start over",
                       t->ckpt_dir, found);
        }
    }
    int refuse = err.msg[0] != 0;
    refuse = dist_allreduce_max_int(d, refuse);
    if (refuse) {
        if (!err.msg[0]) kf_err_set(&err, "rank 0 refused to start");
        return stage_failed(t, &err);
    }
    if (d->rank == 0) {
        fs_path_join(p, sizeof p, t->stage_dir, "log.jsonl");
        t->log = kf_jsonl_open(p, &err);
        if (!t->log) return stage_failed(t, &err);
        kf_log_info("%s: %s, %lld steps, %lld params, global batch %lld = %d ranks x %lld "
                    "micro-batches x %lld, backend %s, %s%s",
                    t->st->name, runconfig_kind_name(t->st->kind), (long long)t->st->steps,
                    (long long)t->m->n_params, (long long)t->o->batch, d->world,
                    (long long)t->accum, (long long)t->micro, t->be->name, dist_build_info(),
                    t->s->opt.zero1 ? ", ZeRO-1 (optimizer state sharded)" : "");
    }
    write_status(t, "running", "");

    while (t->step < t->st->steps) {
        /* 1: preempted, checkpoint and exit 75; 2: rank 0's log lost a record */
        int stop = t->log_err.msg[0] ? 2 : g_preempt || (a->stop_at > 0 && t->step >= a->stop_at);
        stop = dist_allreduce_max_int(d, stop);
        if (stop == 2) return stage_log_failed(t);
        if (stop) {
            if (checkpoint(t)) return stage_log_failed(t);
            char why[64];
            if (g_preempt)
                snprintf(why, sizeof why, "%s",
                         g_preempt == SIGINT    ? "SIGINT"
                         : g_preempt == SIGTERM ? "SIGTERM"
                                                : "SIGUSR1");
            else if (a->stop_at > 0 && t->step >= a->stop_at)
                snprintf(why, sizeof why, "--stop-at %lld", (long long)a->stop_at);
            else snprintf(why, sizeof why, "another rank was signalled");
            write_status(t, "preempted", why);
            if (d->rank == 0)
                kf_log_info("%s: preempted at step %" PRId64 " (%s): checkpoint written, exit %d",
                            t->st->name, t->step, why, KF_EXIT_PREEMPTED);
            teardown(t);
            return KF_EXIT_PREEMPTED;
        }
        if (a->on_step) a->on_step(a->hook_ctx, t->be, 1);
        train_step(t);
        if (a->on_step) a->on_step(a->hook_ctx, t->be, 0);
        if (t->o->eval_every && t->step % t->o->eval_every == 0 && t->step < t->st->steps)
            log_eval(t);
        if (t->o->checkpoint_every && t->step % t->o->checkpoint_every == 0 &&
            t->step < t->st->steps) {
            if (checkpoint(t)) return stage_log_failed(t);
            write_status(t, "running", "");
        }
    }
    log_eval(t);
    if (checkpoint(t)) return stage_log_failed(t);
    if (d->rank == 0 && t->s->graph_steps)
        kf_log_info("%s: %lld steps ran as graphs (%lld graph launches)", t->st->name,
                    (long long)t->s->graph_steps, (long long)t->s->graph_launches);
    if (d->rank == 0 && sup_graph_launches(t->sup))
        kf_log_info("%s: the teacher's passes ran as graphs (%lld graph launches)", t->st->name,
                    (long long)sup_graph_launches(t->sup));
    float *ema = state_full(t, t->s->ema);
    if (d->rank == 0) {
        ckpt_meta meta;
        fill_meta(t, &meta);
        ckpt_write_final(t->final_dir, t->m, ema, &meta);
        kf_log_info("%s: done: %s", t->st->name, t->final_dir);
    }
    state_done(t, ema);
    write_status(t, "done", "");
    dist_barrier(d);
    teardown(t);
    return KF_EXIT_OK;
}
