/* jobs/plan.c — the DAG printout and first-order resource estimates. */
#include "jobs/plan.h"

#include <math.h>
#include <string.h>

double plan_params(const runconfig_model *m, runconfig_kind kind, int64_t k) {
    double H = (double)m->hidden, V = (double)m->vocab;
    double p = V * H                                      /* vocab_embed */
               + (double)m->blocks * (12 * H * H + 7 * H) /* norms, qkv, out, mlp with biases */
               + H + H * V + V;                           /* output layer */
    if (kind == RC_KIND_AR || kind == RC_KIND_IMPORT || kind == RC_KIND_MDLM) return p;
    if (kind == RC_KIND_MEDUSA) return p + (double)k * (H * H + H + H * V); /* residual + linear */
    p += 10 * H * H + 8 * H; /* noise encoder: proj 2H->H, LN, MLP */
    if (kind == RC_KIND_NI_MTP) p += (double)(k - 1) * (2 * H + H * V + V); /* extra heads */
    return p;
}

/* Causal attention FLOPs of one forward over `rows` rows per sample when each
 * row sees about `seen` keys on average: QK^T and AV, 2 FLOPs per MAC. */
static double attn_fwd(const runconfig_model *m, double rows, double seen) {
    return 4.0 * (double)m->blocks * rows * seen * (double)m->hidden;
}

void plan_estimate(const runconfig *rc, int i, double flops_per_s, plan_stage *o) {
    const runconfig_stage *s = &rc->stages[i];
    const runconfig_model *m = &rc->model;
    memset(o, 0, sizeof *o);
    double L = (double)m->seq_len, k = (double)s->k, B = (double)s->opt.batch;
    o->params = plan_params(m, s->kind, s->k);
    double per_sample = 0;
    switch (s->kind) {
    case RC_KIND_IMPORT: break;
    case RC_KIND_AR: per_sample = 6 * o->params * L + 3 * attn_fwd(m, L, L / 2); break;
    case RC_KIND_MDLM: per_sample = 6 * o->params * L + 3 * attn_fwd(m, L, L); break;
    case RC_KIND_DISTILL_AR:
    case RC_KIND_NI_MTP:
    case RC_KIND_NI_CAUSAL: {
        const runconfig_stage *t = s->teacher_stage >= 0 ? &rc->stages[s->teacher_stage] : NULL;
        o->teacher_params = plan_params(m, t ? t->kind : RC_KIND_AR, t ? t->k : 1);
        double rows = s->kind == RC_KIND_NI_MTP ? 2 * L : (1 + k) * L;
        per_sample = 2 * o->teacher_params * L +
                     2 * attn_fwd(m, L, L / 2) /* teacher (k-token CDFs) */
                     + 6 * o->params * rows + 3 * attn_fwd(m, rows, L / 2 + k);
        break;
    }
    case RC_KIND_MEDUSA: { /* the frozen backbone's forward, the heads' forward and backward */
        double heads = o->params - plan_params(m, RC_KIND_AR, 1);
        per_sample = 2 * (o->params - heads) * L + attn_fwd(m, L, L / 2) + 6 * heads * L;
        break;
    }
    case RC_KIND_SELF_FORCING: {
        double h = k / 2; /* the teacher's k */
        o->teacher_params = o->params;
        per_sample = 2 * o->teacher_params * (1 + h) * L +
                     attn_fwd(m, (1 + h) * L, L / 2 + h) /* SingleForward */
                     + 2 * o->teacher_params * k * L +
                     attn_fwd(m, k * L, L / 2 + k) /* DoubleForward */
                     + 6 * o->params * (1 + k) * L + 3 * attn_fwd(m, (1 + k) * L, L / 2 + k);
        break;
    }
    }
    double ranks = (double)rc->res.ranks;
    o->flops_per_step = per_sample * B;
    o->flops = o->flops_per_step * (double)s->steps;
    /* weights and gradients 8 bytes; EMA and AdamW 12, a shard of them with ZeRO-1 */
    o->mem_bytes = (8 + 12 / (rc->res.zero1 ? ranks : 1)) * o->params + 4 * o->teacher_params;
    o->ckpt_bytes = 16 * o->params;
    o->seconds = o->flops / (flops_per_s * ranks);
    double usable = (double)(rc->res.time_limit_s - rc->res.signal_lead);
    if (usable < 60) usable = (double)rc->res.time_limit_s;
    o->jobs = s->kind == RC_KIND_IMPORT ? 1 : fmax(1, ceil(o->seconds / usable));
}

/* 1234567 -> "1.23M" (with unit suffix for bytes/FLOPs). */
static const char *human(double x, char *buf, size_t cap) {
    static const char *sfx[] = {"", "K", "M", "G", "T", "P", "E", "Z", "Y"};
    int i = 0;
    while (fabs(x) >= 1000 && i < 8) x /= 1000, i++;
    snprintf(buf, cap, i ? "%.3g%s" : "%.0f%s", x, sfx[i]);
    return buf;
}

static const char *duration(double s, char *buf, size_t cap) {
    if (s < 120) snprintf(buf, cap, "%.0fs", s);
    else if (s < 7200) snprintf(buf, cap, "%.1fmin", s / 60);
    else if (s < 172800) snprintf(buf, cap, "%.1fh", s / 3600);
    else snprintf(buf, cap, "%.1fd", s / 86400);
    return buf;
}

void plan_print(FILE *f, const runconfig *rc, double flops_per_s) {
    const runconfig_model *m = &rc->model;
    const runconfig_resources *r = &rc->res;
    char a[32], b[32], c[32], d[32], e[32], g[32];
    fprintf(f, "run %s  (%s, config sha256 %.16s)\n", rc->name, rc->path, rc->hash);
    fprintf(f, "data: train %s, valid %s\n", rc->data_train, rc->data_valid);
    fprintf(f, "model: hidden %lld, heads %lld, blocks %lld, vocab %lld, seq_len %lld\n",
            (long long)m->hidden, (long long)m->heads, (long long)m->blocks, (long long)m->vocab,
            (long long)m->seq_len);
    fprintf(f,
            "resources per stage job: %lld rank(s) on %lld node(s), %lld GPU(s)/node, backend %s, "
            "time limit %s, USR1 %llds before the limit%s%s\n\n",
            (long long)r->ranks, (long long)r->nodes, (long long)r->gpus_per_node, r->backend,
            r->time_limit, (long long)r->signal_lead, *r->partition ? ", partition " : "",
            r->partition);
    fprintf(f, "%-3s %-12s %-22s %3s %-18s %9s %6s %8s %9s %9s %9s %9s %5s\n", "#", "stage", "kind",
            "k", "teacher", "steps", "batch", "params", "FLOP", "mem/rank", "ckpt", "time", "jobs");
    double total_s = 0;
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *s = &rc->stages[i];
        plan_stage p;
        plan_estimate(rc, i, flops_per_s, &p);
        total_s += p.seconds;
        char teacher[64];
        if (s->kind == RC_KIND_IMPORT) snprintf(teacher, sizeof teacher, "(import)");
        else if (!s->teacher) snprintf(teacher, sizeof teacher, "-");
        else if (s->teacher_stage >= 0) snprintf(teacher, sizeof teacher, "%s/final", s->teacher);
        else snprintf(teacher, sizeof teacher, "%.17s", s->teacher);
        if (s->kind == RC_KIND_IMPORT) {
            fprintf(f, "%-3d %-12s %-22s %3s %-18s %9s %6s %8s %9s %9s %9s %9s %5s\n", i, s->name,
                    runconfig_kind_name(s->kind), "-", teacher, "-", "-",
                    human(p.params, a, sizeof a), "-", "-", "-", "-", "-");
            fprintf(f, "    import %s\n", s->path);
            continue;
        }
        fprintf(f, "%-3d %-12s %-22s %3lld %-18s %9lld %6lld %8s %9s %8sB %8sB %9s %5s\n", i,
                s->name, runconfig_kind_name(s->kind), (long long)s->k, teacher,
                (long long)s->steps, (long long)s->opt.batch, human(p.params, a, sizeof a),
                human(p.flops, b, sizeof b), human(p.mem_bytes, c, sizeof c),
                human(p.ckpt_bytes, d, sizeof d), duration(p.seconds, e, sizeof e),
                human(p.jobs, g, sizeof g));
        if (s->teacher && s->teacher_stage < 0)
            fprintf(f, "    teacher checkpoint %s\n", s->teacher);
        if (s->init && strcmp(s->init, s->teacher ? s->teacher : ""))
            fprintf(f, "    student initialised from %s\n", s->init);
    }
    fprintf(f, "\nDAG (each arrow: the stage's final weights teach the next):\n");
    for (int i = 0; i < rc->n_stages; i++) {
        const runconfig_stage *s = &rc->stages[i];
        if (s->teacher_stage >= 0) fprintf(f, "  %s -> %s\n", s->teacher, s->name);
        else if (s->teacher) fprintf(f, "  [%s] -> %s\n", s->teacher, s->name);
        else fprintf(f, "  %s (no teacher)\n", s->name);
    }
    fprintf(f, "Jobs run in config order, each after the previous one (afterok).\n");
    fprintf(
        f,
        "Estimated total: %s at %sFLOP/s per rank (--flops to change; activations not counted).\n",
        duration(total_s, a, sizeof a), human(flops_per_s, b, sizeof b));
}
