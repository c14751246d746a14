/* bench/cli/bench_train.c — `kf bench train`: training throughput per stage kind.
 *
 * For each selected stage of a run config, runs the real stage loop
 * (train_run, in a temporary run directory) for warmup + measured steps and
 * reads ms/step and the exposed gradient all-reduce time (ms_grad_wait) from
 * its log. Stages that need a teacher get a randomly initialised one of the
 * right kind (an AR model, or a PFLM(k/2)), written to the temporary
 * directory: speed does not depend on the teacher's values.
 *
 * FLOPs counted per step: the student's forward + backward
 * (roofline_step_flops; teacher passes are overhead the MFU figure does not
 * credit). The peak is measured in the same run: the backend's matmul on square
 * matrices in the stage's precision (on the CPU best of several before and
 * after each stage), alongside the device's nominal dense peak when the
 * device is known.
 *
 * With --roofline DEVICE it runs nothing for real: bench/roofline/roofline.h
 * prices one step of each selected stage on the named GPU from the ops the
 * step issues.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/roofline/roofline.h"
#include "commands.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/runconfig.h"
#include "kernels/kernels.h"
#include "pipeline/shard_reader.h"
#include "trainer/cli/omp_env.h"
#include "trainer/model/model.h"
#include "trainer/train/dist.h"
#include "trainer/train/optim.h"
#include "trainer/train/supervision.h"
#include "trainer/train/train.h"

#ifdef KF_CUDA
#include <cuda_runtime.h>
#endif

/* Best GFLOP/s of the backend's own matmul (the GEMM training runs: on the CPU
 * the project's fixed-order kernel, or OpenBLAS under KF_CPU_GEMM=openblas). */
static double backend_peak(kf_backend *be, kf_precision p, int n, int reps) {
    size_t bytes = (size_t)n * n * 4;
    float *a = be->alloc(be, bytes), *b = be->alloc(be, bytes), *c = be->alloc(be, bytes);
    be->set_precision(be, p);
    be->matmul(be, c, a, b, n, n, n, 0, 0, 1.0f, 0.0f);
    be->sync(be);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = clock_now_s();
        for (int i = 0; i < 10; i++) be->matmul(be, c, a, b, n, n, n, 0, 0, 1.0f, 0.0f);
        be->sync(be);
        double g = 10 * 2.0 * n * n * (double)n / (clock_now_s() - t) / 1e9;
        if (g > best) best = g;
    }
    be->free(be, a), be->free(be, b), be->free(be, c);
    return best;
}

/* Nominal dense peak (GFLOP/s) of the GPU in the given precision, 0 when unknown. */
static double nominal_peak(int lowp, char *name, size_t cap) {
    snprintf(name, cap, "cpu");
#ifdef KF_CUDA
    struct cudaDeviceProp p;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
        return 0;
    snprintf(name, cap, "%s", p.name);
    /* dense (no sparsity) tensor-core fp16 and bf16 (the same) / true fp32,
     * from NVIDIA's data sheets */
    if (strstr(p.name, "H100") && strstr(p.name, "PCIe")) return lowp ? 756e3 : 51e3;
    if (strstr(p.name, "H100") || strstr(p.name, "H200")) return lowp ? 989e3 : 67e3;
    if (strstr(p.name, "A100")) return lowp ? 312e3 : 19.5e3;
#else
    (void)lowp;
#endif
    return 0;
}

/* Mean of a log field (ms_step, ms_grad_wait) over records with step > warmup. */
static double read_mean(const char *log, const char *key, int64_t warmup, char *phase, size_t cap) {
    char *buf;
    size_t len;
    kf_err err = {{0}};
    if (fs_read_file(log, &buf, &len, &err)) return -1;
    double sum = 0;
    int cnt = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        json_doc *d = json_parse(line, strlen(line), log, &err);
        if (!d) continue;
        const json *r = json_root(d), *s = json_get(r, "step"), *ms = json_get(r, key),
                   *ph = json_get(r, "phase");
        if (s && ms && ms->type == JSON_NUMBER && s->i > warmup) {
            sum += ms->num;
            cnt++;
            if (ph && ph->type == JSON_STRING) snprintf(phase, cap, "%s", ph->str.s);
        }
        json_free(d);
    }
    free(buf);
    return cnt ? sum / cnt : -1;
}

static const char USAGE[] =
    "usage: kf bench train [CONFIG] [--stage NAME]... [--steps N] [--warmup W] [key.path=value "
    "...]\n"
    "       kf bench train [CONFIG] [--stage NAME]... --roofline DEVICE [key.path=value ...]\n"
    "\n"
    "Runs W + N training steps of each selected stage of CONFIG (default\n"
    "configs/tiny.yaml; default: every training stage) with a random teacher where one\n"
    "is needed, and prints tokens/s, ms/step, the student's GFLOP/s and its fraction of\n"
    "the peak of the backend's matmul measured in the same run (and the nominal dense\n"
    "peak on a GPU). ms/wait: the gradient all-reduce's\n"
    "exposed time per step, after the backward (resources.bucket_mb sets its overlap;\n"
    "0 on one rank). With an AR stage among those run, each stage's ms/step is then\n"
    "given against the AR step's, beside the 1.5 (k + 1) goal of a self-forcing\n"
    "stage. Defaults: N 10, W 2.\n"
    "\n"
    "--roofline DEVICE (h100, h200, a100) trains nothing: one step of each stage (its\n"
    "micro-batch, its first precision phase) runs on a recording backend, and each op\n"
    "it issues is priced at max(FLOPs / peak, bytes / bandwidth) on DEVICE; prints per\n"
    "op and in total FLOPs, bytes and time, the estimated step time, tokens/s, MFU and\n"
    "the dominant ops, and each stage's estimate against the AR step's. Needs no GPU\n"
    "and no shards; on a GPU (resources.backend not cpu) the step also runs there and\n"
    "each op's measured time is printed beside.\n";

/* What every measured stage shares. */
typedef struct bench_run {
    const char *config; /* the run config */
    char **over;        /* the user's overrides */
    int n_over;
    runconfig *rc;
    int64_t data_vocab; /* the training shards' vocabulary */
    int64_t steps, warmup;
    dist d;
    kf_backend *be;
    int gpu;
    double peak_before; /* CPU: the backend's matmul before any stage */
    char tmp[32];       /* temporary directory (teachers, run directories) */
} bench_run;

/* A randomly initialised teacher for stage i, whose supervision is sc,
 * written to the temporary directory (path in teacher): speed does not
 * depend on its values. */
static void write_teacher(bench_run *br, int i, const sup_config *sc, const model_config *base,
                          char *teacher, size_t cap) {
    const runconfig_stage *st = &br->rc->stages[i];
    model_config tc = sup_teacher_config(sc, base);
    snprintf(teacher, cap, "%s/teacher-%s.safetensors", br->tmp, st->name);
    if (br->d.rank == 0) {
        kf_err err = {{0}};
        model *t = model_create(br->be, &tc);
        model_init(t, 99);
        if (model_save(t, teacher, NULL, &err)) KF_FATAL("bench: %s", err.msg);
        model_free(t);
    }
    dist_barrier(&br->d);
}

/* Trains stage i for warmup + steps steps in run (its own run directory);
 * returns train_run's exit code. */
static int run_stage(bench_run *br, int i, const char *teacher, const char *run) {
    const runconfig_stage *st = &br->rc->stages[i];
    char ov_teacher[4400], ov_init[4400], ov_steps[128], ov_log[128];
    char ov_ck[] = "defaults.checkpoint_every=0", ov_ev[] = "defaults.eval_batches=1";
    long long total = (long long)(br->steps + br->warmup);
    snprintf(ov_steps, sizeof ov_steps, "stages.%d.steps=%lld", i, total);
    snprintf(ov_log, sizeof ov_log, "stages.%d.log_every=%lld", i, total);
    char **ov = kf_calloc((size_t)br->n_over + 8, sizeof *ov);
    int no = 0;
    for (int j = 0; j < br->n_over; j++) ov[no++] = br->over[j];
    ov[no++] = ov_steps, ov[no++] = ov_ck, ov[no++] = ov_ev, ov[no++] = ov_log;
    if (st->teacher) {
        snprintf(ov_teacher, sizeof ov_teacher, "stages.%d.teacher=%s", i, teacher);
        ov[no++] = ov_teacher;
        if (st->init) {
            snprintf(ov_init, sizeof ov_init, "stages.%d.init=%s", i, teacher);
            ov[no++] = ov_init;
        }
    }
    train_args a = {
        .config = br->config, .stage = st->name, .run_dir = run, .n_over = no, .over = ov};
    int code = train_run(&a, &br->d);
    free(ov);
    return code;
}

/* Prints stage i's row from its log (rank 0); returns its mean step (s). */
static double report_stage(bench_run *br, int i, const model_config *student, const char *run) {
    const runconfig_stage *st = &br->rc->stages[i];
    char log[4400], phase[16] = "?", dev[256];
    snprintf(log, sizeof log, "%s/stages/%s/log.jsonl", run, st->name);
    double ms = read_mean(log, "ms_step", br->warmup, phase, sizeof phase);
    double wait = read_mean(log, "ms_grad_wait", br->warmup, phase, sizeof phase);
    roofline_flops f = roofline_step_flops(student, st->opt.batch, br->rc->model.seq_len, st);
    int prec = optim_precision_parse(phase); /* "?" when the log has no phase */
    kf_precision kp = prec < 0 ? KF_PREC_FP32 : (kf_precision)prec;
    double peak;
    if (br->gpu) {
        peak = backend_peak(br->be, kp, 8192, 3);
    } else { /* the higher of the measurements before and right after: conservative */
        double now = backend_peak(br->be, kp, 1024, 4);
        peak = now > br->peak_before ? now : br->peak_before;
    }
    double nom = nominal_peak(kp != KF_PREC_FP32, dev, sizeof dev);
    double gflops = f.total / (ms * 1e-3) / 1e9;
    printf("%-8s %-24s %-5s %-5s %6d %9.1f %9.2f %10.0f %9.2f %10.1f %10.1f %5.1f%%", st->name,
           runconfig_kind_name(st->kind), br->gpu ? "cuda" : "cpu", phase, br->d.world, ms, wait,
           f.tokens / (ms * 1e-3), f.total / 1e9, gflops, peak, 100 * gflops / peak);
    if (nom > 0)
        printf("  (%.1f%% of %s nominal %.0f TFLOP/s)", 100 * gflops / nom, dev, nom / 1e3);
    printf("\n");
    fflush(stdout);
    return ms * 1e-3;
}

/* Loads the config and the data's vocabulary, starts the ranks and the
 * backend; -1 after printing why. */
static int bench_setup(bench_run *br, int *argc, char ***argv) {
    kf_err err = {{0}};
    if (runconfig_load(br->config, br->n_over, br->over, &br->rc, &err)) {
        fprintf(stderr, "kf: error: %s\n", err.msg);
        return -1;
    }
    shard_set *ss;
    if (shard_set_open(br->rc->data_train, "train", &ss, &err)) {
        fprintf(stderr, "kf: error: %s (build the shards first: kf shards build %s)\n", err.msg,
                br->config);
        return -1;
    }
    br->data_vocab = shard_set_vocab_size(ss);
    shard_set_close(ss);
    if (dist_init(&br->d, argc, argv, (double)br->rc->res.collective_timeout, &err)) {
        fprintf(stderr, "kf: error: %s\n", err.msg);
        return -1;
    }
    snprintf(br->tmp, sizeof br->tmp, "/tmp/kf_bench_train_XXXXXX");
    if (br->d.rank == 0 && !mkdtemp(br->tmp)) KF_FATAL("mkdtemp failed");
    dist_bcast(&br->d, br->tmp, sizeof br->tmp, 0);
    if (strcmp(br->rc->res.backend, "cpu"))
        br->be = kernels_cuda_create(br->d.local_rank, err.msg, sizeof err.msg);
    br->gpu = br->be != NULL;
    if (!br->be) br->be = kernels_cpu_create();
    br->peak_before = br->gpu ? 0 : backend_peak(br->be, KF_PREC_FP32, 1024, 4);
    return 0;
}

int bench_train_main(int argc, char **argv) {
    bench_run br = {.config = "configs/tiny.yaml", .steps = 10, .warmup = 2};
    const char *stages[32], *roofline = NULL;
    int n_st = 0;
    br.over = kf_calloc((size_t)argc + 8, sizeof *br.over);
    const cli_opt opts[] = {
        {"--stage", CLI_STR_LIST, .out = stages, .n = &n_st, .cap = 32},
        {"--steps", CLI_INT, .out = &br.steps, .lo = 1, .hi = INFINITY},
        {"--warmup", CLI_INT, .out = &br.warmup, .lo = 0, .hi = INFINITY},
        {"--roofline", CLI_STR, .out = &roofline},
        CLI_OPT_END,
    };
    const cli_spec spec = {"kf bench train",    USAGE,        opts,
                           .pos = &br.config,   .max_pos = 1, .over = br.over,
                           .n_over = &br.n_over};
    int code;
    if (cli_parse(&spec, argc, argv, &code)) {
        free(br.over);
        return code;
    }
    if (roofline) {
        code = roofline_bench(br.config, br.n_over, br.over, stages, n_st, roofline);
        free(br.over);
        return code;
    }
    omp_env_passive();
    if (bench_setup(&br, &argc, &argv)) {
        runconfig_free(br.rc);
        free(br.over);
        return KF_EXIT_ERROR;
    }
    const runconfig *rc = br.rc;
    if (br.d.rank == 0)
        printf("%-8s %-24s %-5s %-5s %6s %9s %9s %10s %9s %10s %10s %6s\n", "stage", "kind", "dev",
               "phase", "ranks", "ms/step", "ms/wait", "tokens/s", "GFLOP/st", "GFLOP/s", "peak",
               "MFU");
    code = KF_EXIT_OK;
    double *step_s = kf_calloc((size_t)rc->n_stages, sizeof *step_s);
    for (int i = 0; i < rc->n_stages && code == KF_EXIT_OK; i++) {
        const runconfig_stage *st = &rc->stages[i];
        if (st->kind == RC_KIND_IMPORT) continue;
        int want = n_st == 0;
        for (int j = 0; j < n_st; j++) want |= !strcmp(stages[j], st->name);
        if (!want) continue;
        model_config base = train_base_config(&rc->model, br.data_vocab);
        sup_config sc = {.kind = (sup_kind)sup_kind_from_name(runconfig_kind_name(st->kind)),
                         .k = st->kind == RC_KIND_AR ? 1 : st->k};
        model_config student = sup_student_config(&sc, &base);
        char teacher[4200] = "", run[4200];
        if (st->teacher) write_teacher(&br, i, &sc, &base, teacher, sizeof teacher);
        snprintf(run, sizeof run, "%s/run-%s", br.tmp, st->name);
        code = run_stage(&br, i, teacher, run);
        if (code == KF_EXIT_OK && br.d.rank == 0) step_s[i] = report_stage(&br, i, &student, run);
    }
    if (!br.gpu && br.d.rank == 0)
        printf(
            "peak: the backend's matmul (%s) 1024^3, best of 4 before the runs (%.1f GFLOP/s) and "
            "right after each stage, %s threads; FLOPs: the student's forward + backward\n",
            br.be->batch_invariant ? "fixed-order kernel" : "OpenBLAS", br.peak_before,
            getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "default");
    if (code == KF_EXIT_OK && br.d.rank == 0)
        roofline_print_vs_ar(rc, step_s, "measured step vs the AR step (same batch, ms/step)");
    free(step_s);
    kf_err err = {{0}};
    if (br.d.rank == 0) fs_rm_rf(br.tmp, &err);
    br.be->destroy(br.be);
    dist_finalize(&br.d);
    runconfig_free(br.rc);
    free(br.over);
    return code;
}
