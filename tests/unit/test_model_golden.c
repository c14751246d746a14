/* Golden test: a tiny fixed-seed model's logits, loss and
 * gradients after one AdamW step, and its losses over 10 AdamW steps, for an
 * AR model and a PFLM (SingleForward, k = 2). The values were recorded once
 * from this implementation into tests/golden/model_tiny.bin (re-record with
 * KF_GOLDEN_RECORD=1 after an intended change) and are asserted with
 * per-tensor tolerances. Then save -> load -> continue: 4 steps, a
 * checkpoint of weights and AdamW moments through safetensors, a fresh model
 * loaded from it and 4 more steps equal 8 uninterrupted steps bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include <omp.h>

#include "tests/test.h"
#include "tests/unit/model_fit.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"

#define GOLDEN "tests/golden/model_tiny.bin"

typedef struct rec {
    char name[32];
    int64_t n;
    float *v;
} rec;

static rec recs[64];
static int nrec;

static void put(const char *name, const float *v, int64_t n) {
    rec *r = &recs[nrec++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->n = n;
    r->v = malloc((size_t)n * sizeof(float));
    memcpy(r->v, v, (size_t)n * sizeof(float));
}

/* One batch for cfg: token rows from a fixed stream, noise from another. */
static void batch(const layout *l, int64_t B, int32_t V, int32_t *ids, double *z, double *tau,
                  int32_t *tg, int64_t rows) {
    for (int64_t i = 0; i < B * l->L; i++) {
        ids[i] = (int32_t)rng_below(21, 1, (uint64_t)i, (uint64_t)V - 1);
        z[i] = rng_uniform01(21, 2, (uint64_t)i);
    }
    for (int64_t b = 0; b < B; b++) tau[b] = 0.5 + 0.25 * (double)b;
    for (int64_t r = 0; r < rows; r++)
        tg[r] = (int32_t)rng_below(21, 3, (uint64_t)r, (uint64_t)V - 1);
}

static void run_case(kf_backend *be, const model_config *cfg, const layout *l, const char *tag) {
    enum { B = 2 };
    model *m = model_create(be, cfg);
    model_init(m, 1234);
    model_ws *ws = model_ws_create(m);
    int64_t rows = B * l->n_out, V = cfg->vocab;
    int32_t *ids = malloc(sizeof(int32_t) * B * l->L), *tg = malloc(sizeof(int32_t) * rows);
    double *z = malloc(sizeof(double) * B * l->L), tau[B];
    batch(l, B, (int32_t)V, ids, z, tau, tg, rows);
    sup_batch sb = {.lay = l,
                    .in = {.lay = l, .B = B, .ids = ids, .z = z, .tau = tau},
                    .targets = tg,
                    .rows = rows};
    fit_state st;
    fit_init(&st, m);
    float losses[10];
    char nm[32];
    for (int s = 0; s < 10; s++) {
        losses[s] = (float)fit_step(m, ws, &st, &sb, 1e-2f, 1.0f);
        if (s == 0) {
            /* after one step: logits, loss and gradients of the next pass */
            const float *lg = model_forward(m, ws, &sb.in, 0, NULL);
            float *h = malloc(sizeof(float) * (size_t)(rows * V));
            be->download(be, h, lg, sizeof(float) * (size_t)(rows * V));
            snprintf(nm, sizeof nm, "%s.logits", tag);
            put(nm, h, rows * V);
            model_zero_grads(m);
            model_forward(m, ws, &sb.in, MODEL_TRAIN, NULL); /* the head runs in model_loss */
            int64_t cnt;
            float loss = (float)(model_loss(m, ws, tg, 0, 1.0f, &cnt, NULL) / (double)cnt);
            snprintf(nm, sizeof nm, "%s.loss", tag);
            put(nm, &loss, 1);
            model_backward(m, ws);
            float *g = malloc(sizeof(float) * (size_t)m->n_params);
            be->download(be, g, m->grads, sizeof(float) * (size_t)m->n_params);
            for (int t = 0; t < m->n_tensors; t++) {
                snprintf(nm, sizeof nm, "%s.g%d", tag, t);
                put(nm, g + m->tensors[t].offset, m->tensors[t].numel);
            }
            free(g);
            free(h);
        }
    }
    snprintf(nm, sizeof nm, "%s.losses", tag);
    put(nm, losses, 10);
    fit_free(&st, m);
    model_ws_free(ws);
    model_free(m);
    free(ids);
    free(tg);
    free(z);
}

static int record(void) {
    FILE *f = fopen(GOLDEN, "wb");
    if (!f) return -1;
    fwrite("KFGOLD1", 1, 8, f);
    fwrite(&nrec, sizeof nrec, 1, f);
    for (int i = 0; i < nrec; i++) {
        fwrite(recs[i].name, 1, 32, f);
        fwrite(&recs[i].n, sizeof(int64_t), 1, f);
        fwrite(recs[i].v, sizeof(float), (size_t)recs[i].n, f);
    }
    return fclose(f);
}

/* Compares every record with the golden file: max |diff| <= tol * max(1, max |golden|). */
static void compare(void) {
    FILE *f = fopen(GOLDEN, "rb");
    T_CHECK(f != NULL, "%s missing (record with KF_GOLDEN_RECORD=1)", GOLDEN);
    if (!f) return;
    char magic[8];
    int n = 0;
    T_EQ_INT(fread(magic, 1, 8, f), 8, "bad golden magic");
    T_CHECK(!memcmp(magic, "KFGOLD1", 8), "bad golden magic");
    T_EQ_INT(fread(&n, sizeof n, 1, f), 1, "golden has %d records, want %d", n, nrec);
    T_EQ_INT(n, nrec, "golden has %d records, want %d", n, nrec);
    double worst_g = 0;
    for (int i = 0; i < nrec && i < n; i++) {
        char name[32];
        int64_t cnt;
        if (fread(name, 1, 32, f) != 32 || fread(&cnt, sizeof cnt, 1, f) != 1) break;
        T_EQ_STR(name, recs[i].name, "record %d: %s/%lld vs %s/%lld", i, name, (long long)cnt,
                 recs[i].name, (long long)recs[i].n);
        T_EQ_INT(cnt, recs[i].n, "record %d: %s/%lld vs %s/%lld", i, name, (long long)cnt,
                 recs[i].name, (long long)recs[i].n);
        if (cnt != recs[i].n) break;
        float *g = malloc(sizeof(float) * (size_t)cnt);
        if (fread(g, sizeof(float), (size_t)cnt, f) != (size_t)cnt) break;
        double mx = 0, d = 0;
        for (int64_t e = 0; e < cnt; e++) {
            mx = fmax(mx, fabs(g[e]));
            d = fmax(d, fabs((double)g[e] - recs[i].v[e]));
        }
        /* logits and loss are forward values; gradients pass through more
         * ops; the loss curve compounds 10 steps */
        double tol = strstr(name, ".g") ? 1e-3 : strstr(name, "losses") ? 1e-3 : 1e-4;
        double rel = d / fmax(1e-3, mx);
        if (strstr(name, ".g")) worst_g = fmax(worst_g, rel);
        else printf("golden %-14s max |diff| %.3g (relative %.3g)\n", name, d, rel);
        T_CHECK(rel <= tol, "golden %s: max |diff| %.3g relative to %.3g exceeds %g", name, d, mx,
                tol);
        free(g);
    }
    printf("golden gradients: worst relative difference %.3g\n", worst_g);
    fclose(f);
}

/* save -> load -> continue equals uninterrupted training, bitwise. */
static void resume_bitwise(kf_backend *be) {
    model_config cfg = {.hidden = 16,
                        .heads = 2,
                        .blocks = 2,
                        .vocab = 11,
                        .mask_id = 10,
                        .seq_len = 16,
                        .kind = MODEL_PFLM,
                        .head = HEAD_SHARED,
                        .k_train = 2};
    layout l;
    layout_single(&l, 6, 2);
    enum { B = 2 };
    int64_t rows = B * l.n_out;
    int32_t ids[B * 32], tg[B * 32];
    double z[B * 32], tau[B];
    batch(&l, B, 11, ids, z, tau, tg, rows);
    sup_batch sb = {.lay = &l,
                    .in = {.lay = &l, .B = B, .ids = ids, .z = z, .tau = tau},
                    .targets = tg,
                    .rows = rows};
    size_t bytes = 0;
    float *ref = NULL, *got = NULL;
    char dir[] = "/tmp/kf-golden-XXXXXX";
    T_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char pw[256], pm[256], pv[256];
    snprintf(pw, sizeof pw, "%s/model.safetensors", dir);
    snprintf(pm, sizeof pm, "%s/adam_m.safetensors", dir);
    snprintf(pv, sizeof pv, "%s/adam_v.safetensors", dir);
    for (int pass = 0; pass < 2; pass++) {
        model *m = model_create(be, &cfg);
        model_init(m, 99);
        model_ws *ws = model_ws_create(m);
        fit_state st;
        fit_init(&st, m);
        for (int s = 0; s < 4; s++) fit_step(m, ws, &st, &sb, 1e-2f, 1.0f);
        if (pass == 1) {
            kf_err err;
            T_EQ_INT(model_save(m, pw, NULL, &err), 0, "save: %s", err.msg);
            T_EQ_INT(model_save(m, pm, st.m, &err), 0, "save: %s", err.msg);
            T_EQ_INT(model_save(m, pv, st.v, &err), 0, "save: %s", err.msg);
            int64_t step = st.step;
            fit_free(&st, m);
            model_ws_free(ws);
            model_free(m);
            m = model_load(be, pw, &err);
            T_CHECK(m != NULL, "load: %s", err.msg);
            if (!m) return;
            ws = model_ws_create(m);
            fit_init(&st, m);
            st.step = step;
            T_EQ_INT(model_load_into(m, pm, st.m, &err), 0, "load moments: %s", err.msg);
            T_EQ_INT(model_load_into(m, pv, st.v, &err), 0, "load moments: %s", err.msg);
        }
        for (int s = 0; s < 4; s++) fit_step(m, ws, &st, &sb, 1e-2f, 1.0f);
        bytes = (size_t)m->n_params * sizeof(float);
        float **dst = pass == 0 ? &ref : &got;
        *dst = malloc(bytes);
        be->download(be, *dst, m->params, bytes);
        fit_free(&st, m);
        model_ws_free(ws);
        model_free(m);
    }
    T_CHECK(memcmp(ref, got, bytes) == 0, "save -> load -> continue differs from uninterrupted");
    printf("save -> load -> continue: %s\n",
           memcmp(ref, got, bytes) == 0 ? "bitwise identical" : "DIFFERENT");
    unlink(pw);
    unlink(pm);
    unlink(pv);
    rmdir(dir);
    free(ref);
    free(got);
    layout_free(&l);
}

int main(void) {
    /* tiny models: one thread avoids OpenMP barrier waits on a loaded machine
     * (results do not depend on the thread count) */
    omp_set_num_threads(1);
    kf_backend *be = kernels_cpu_create();
    model_config ar = {.hidden = 16,
                       .heads = 2,
                       .blocks = 2,
                       .vocab = 11,
                       .mask_id = 10,
                       .seq_len = 16,
                       .kind = MODEL_AR,
                       .head = HEAD_SHARED,
                       .k_train = 1};
    layout l;
    layout_ar(&l, 8);
    run_case(be, &ar, &l, "ar");
    layout_free(&l);
    model_config pf = ar;
    pf.kind = MODEL_PFLM;
    pf.k_train = 2;
    layout_single(&l, 6, 2);
    run_case(be, &pf, &l, "pflm");
    layout_free(&l);
    if (getenv("KF_GOLDEN_RECORD")) {
        T_EQ_INT(record(), 0, "cannot write %s", GOLDEN);
        printf("recorded %d records into %s\n", nrec, GOLDEN);
    } else {
        compare();
    }
    resume_bitwise(be);
    be->destroy(be);
    return T_DONE();
}
