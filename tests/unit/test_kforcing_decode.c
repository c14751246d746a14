/* Decoding tests:
 * (c) KV-cached decoding (decode_run) equals uncached decoding — a full
 *     forward over the whole sequence so far plus the step's noise rows at
 *     every step — for AR and PFLM models, k = 1..k_train, with and without
 *     the frequency penalty, for the MTP baseline, and for AR and PFLM with
 *     the GPT-2 architecture options (model.h);
 * (e) temperature: AR draws from one prefix at tau = 0.01 are (nearly)
 *     identical and at tau = 1 diverse (distinct tokens counted);
 * (f) position temperatures (an older commit of the released sampler): all
 *     zeros is the argmax decoding, hot positions sample, bad lists are refused;
 * (g) the paper's LM1B protocol, 6 -> 128 tokens in a 128-token model at
 *     k = 3 and 4 (122 is no multiple of either): accepted, the last step
 *     emits the 2 missing tokens, and the tokens equal those of the same
 *     weights in a model with room for a full last window. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include <omp.h>

#include "tests/test.h"
#include "trainer/infer/decode.h"
#include "trainer/model/layout.h"
#include "trainer/model/model.h"

enum { V = 17, BATCH = 3, P = 4, NEW = 7 };

static void randomize(model *m, double scale) {
    float *h = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < m->n_params; i++)
        h[i] = (float)(scale * (rng_uniform01(4, 7, (uint64_t)i) - 0.5));
    for (int t = 0; t < m->n_tensors; t++)
        if (strstr(m->tensors[t].name, "norm") && strstr(m->tensors[t].name, ".weight"))
            for (int64_t e = 0; e < m->tensors[t].numel; e++) h[m->tensors[t].offset + e] += 1.0f;
    m->be->upload(m->be, m->params, h, (size_t)m->n_params * sizeof(float));
    free(h);
}

/* The same algorithm without a cache: every step recomputes the sequence. */
static void uncached(model *m, const int32_t *prefix, const decode_opts *o, const uint64_t *keys,
                     int32_t *out) {
    kf_backend *be = m->be;
    int ar = m->cfg.kind == MODEL_AR, mtp = m->cfg.head == HEAD_MTP;
    int64_t k = o->k, zd = mtp ? m->cfg.k_train : 1, nn = ar ? 0 : mtp ? 1 : k;
    model_ws *ws = model_ws_create(m);
    int32_t *dv = be->alloc(be, sizeof(int32_t) * 64), *dh = be->alloc(be, sizeof(int32_t) * 64);
    double *dz = be->alloc(be, sizeof(double)), *dt = be->alloc(be, sizeof(double));
    for (int64_t b = 0; b < BATCH; b++) {
        int32_t seq[64];
        int64_t n = 0;
        memcpy(seq, prefix + b * P, P * sizeof(int32_t));
        for (int64_t s = 0; n < NEW; s++) {
            int64_t len = P + n;
            layout l;
            layout_ar(&l, len + nn);
            int32_t ids[64] = {0};
            double z[64 * 4] = {0};
            memcpy(ids, seq, (size_t)len * sizeof(int32_t));
            for (int64_t i = 0; i < nn; i++) {
                l.noise[len + i] = 1;
                for (int64_t e = 0; e < zd; e++)
                    z[(len + i) * zd + e] =
                        rng_uniform01(o->seed, keys[b], (uint64_t)(s * k + i + e));
            }
            l.n_out = ar ? 1 : nn;
            for (int64_t i = 0; i < l.n_out; i++) l.out_rows[i] = (int32_t)(ar ? len - 1 : len + i);
            model_input in = {.lay = &l, .B = 1, .ids = ids, .z = z, .tau = &o->tau};
            float *lg = (float *)model_forward(m, ws, &in, 0, NULL);
            for (int64_t j = 0; j < k && n < NEW; j++) {
                float *row = lg + j * V; /* output j (shared head) or head j (MTP) */
                if (o->freq_penalty != 0.0f && n > 0) {
                    be->upload(be, dh, seq + P, (size_t)n * sizeof(int32_t));
                    be->freq_penalty(be, row, dh, n, 1, V, o->freq_penalty);
                }
                int32_t id;
                double pt = o->position_temp ? o->position_temp[j] : 0.0;
                if (ar || pt > 0) {
                    double zz = rng_uniform01(o->seed, keys[b],
                                              (ar ? 0 : DECODE_POSITION_DRAWS) + (uint64_t)n);
                    be->upload(be, dz, &zz, sizeof zz);
                    be->upload(be, dt, ar ? &o->tau : &pt, sizeof(double));
                    be->sample_icdf(be, dv, row, dt, dz, 1, V);
                } else {
                    be->argmax(be, dv, row, 1, V);
                }
                be->download(be, &id, dv, sizeof id);
                seq[P + n++] = id;
            }
            layout_free(&l);
        }
        memcpy(out + b * NEW, seq + P, NEW * sizeof(int32_t));
    }
    be->free(be, dv);
    be->free(be, dh);
    be->free(be, dz);
    be->free(be, dt);
    model_ws_free(ws);
}

/* Cached against uncached decoding; returns how many tokens differ from the
 * push-forward (all-argmax) decoding when position temperatures pt are given. */
static int compare(model *m, int64_t k, double tau, float pen, const double *pt, const char *what) {
    int32_t prefix[BATCH * P], a[BATCH * NEW], b[BATCH * NEW];
    uint64_t keys[BATCH] = {5, 9, 123};
    for (int i = 0; i < BATCH * P; i++) prefix[i] = (int32_t)rng_below(2, 2, (uint64_t)i, V - 1);
    decode_opts o = {.k = k,
                     .tau = tau,
                     .freq_penalty = pen,
                     .max_new = NEW,
                     .seed = 77,
                     .position_temp = pt,
                     .n_position_temp = pt ? k : 0};
    decode_run(m, NULL, prefix, BATCH, P, &o, keys, a);
    uncached(m, prefix, &o, keys, b);
    int same = memcmp(a, b, sizeof a) == 0;
    printf("(c) %s k=%lld penalty=%.1f%s: cached %s uncached (first: %d %d %d %d)\n", what,
           (long long)k, pen, pt ? " position temperatures" : "", same ? "==" : "!=", a[0], a[1],
           a[2], a[3]);
    T_CHECK(same, "(c) %s k=%lld: KV-cached decoding differs from uncached", what, (long long)k);
    if (!pt) return 0;
    o.position_temp = NULL;
    o.n_position_temp = 0;
    decode_run(m, NULL, prefix, BATCH, P, &o, keys, b);
    int differ = 0;
    for (int i = 0; i < BATCH * NEW; i++) differ += a[i] != b[i];
    /* the first step's position 0 is an argmax of the same context and noise */
    for (int i = 0; i < BATCH; i++)
        T_EQ_INT(a[i * NEW], b[i * NEW], "(c) %s: sequence %d's first token is not the argmax's",
                 what, i);
    return differ;
}

int main(void) {
    /* tiny models: one thread avoids OpenMP barrier waits on a loaded machine
     * (results do not depend on the thread count) */
    omp_set_num_threads(1);
    kf_backend *be = kernels_cpu_create();
    model_config ar = {.hidden = 16,
                       .heads = 2,
                       .blocks = 2,
                       .vocab = V,
                       .mask_id = V - 1,
                       .seq_len = 32,
                       .kind = MODEL_AR,
                       .head = HEAD_SHARED,
                       .k_train = 1};
    model *m = model_create(be, &ar);
    randomize(m, 0.8);
    compare(m, 1, 1.0, 0.0f, NULL, "AR");
    compare(m, 1, 0.7, 0.5f, NULL, "AR");

    /* (e) temperature on the AR sampler: 64 draws of one token from one prefix */
    enum { DRAWS = 64 };
    int32_t prefix[DRAWS * P], got[DRAWS * 1];
    uint64_t keys[DRAWS];
    for (int d = 0; d < DRAWS; d++) {
        keys[d] = (uint64_t)d;
        for (int i = 0; i < P; i++) prefix[d * P + i] = i + 1;
    }
    int distinct[2];
    double taus[2] = {0.01, 1.0};
    for (int ti = 0; ti < 2; ti++) {
        decode_opts o = {.k = 1, .tau = taus[ti], .max_new = 1, .seed = 3};
        decode_run(m, NULL, prefix, DRAWS, P, &o, keys, got);
        int seen[V] = {0};
        distinct[ti] = 0;
        for (int d = 0; d < DRAWS; d++) distinct[ti] += !seen[got[d]]++;
    }
    printf("(e) distinct first tokens over %d draws: tau=0.01 -> %d, tau=1 -> %d\n", DRAWS,
           distinct[0], distinct[1]);
    T_CHECK(distinct[0] <= 2, "(e) tau=0.01 gave %d distinct tokens", distinct[0]);
    T_CHECK(distinct[1] >= 5, "(e) tau=1 gave only %d distinct tokens", distinct[1]);
    model_free(m);

    model_config pf = ar;
    pf.kind = MODEL_PFLM;
    pf.k_train = 3;
    m = model_create(be, &pf);
    randomize(m, 3.0);
    for (int64_t k = 1; k <= 3; k++) compare(m, k, 0.6, 0.0f, NULL, "PFLM");
    compare(m, 2, 0.6, 0.8f, NULL, "PFLM");
    /* (f) position temperatures: zeros are the argmax decoding; hot positions
     * sample (cached == uncached either way) */
    const double zeros[3] = {0, 0, 0}, hot[3] = {0, 3.0, 3.0};
    int d0 = compare(m, 3, 0.6, 0.0f, zeros, "PFLM");
    int d1 = compare(m, 3, 0.6, 0.0f, hot, "PFLM");
    printf("(f) tokens differing from the argmax decoding: temperatures 0,0,0 -> %d, 0,3,3 -> %d "
           "of %d\n",
           d0, d1, BATCH * NEW);
    T_EQ_INT(d0, 0, "(f) zero position temperatures changed %d tokens", d0);
    T_CHECK(d1 > 0, "(f) position temperatures 0,3,3 changed no token");
    decode_opts bad = {.k = 3, .tau = 1, .max_new = 3, .position_temp = hot, .n_position_temp = 2};
    kf_err err;
    T_CHECK(decode_check(m, &bad, P, &err) != 0, "(f) too few position temperatures accepted");
    T_CHECK(strstr(err.msg, "2 temperatures for 3"), "(f) too few position temperatures accepted");
    const double neg[3] = {0, -1, 0};
    bad.position_temp = neg;
    bad.n_position_temp = 3;
    T_CHECK(decode_check(m, &bad, P, &err) != 0, "(f) a negative position temperature accepted");
    T_CHECK(strstr(err.msg, "must be >= 0"), "(f) a negative position temperature accepted");
    model_free(m);

    /* (g) the exact LM1B protocol */
    model_config lm = pf;
    lm.k_train = 4;
    lm.seq_len = 128;
    model_config wide_cfg = lm;
    wide_cfg.seq_len = 256;
    m = model_create(be, &lm);
    randomize(m, 3.0);
    model *wide = model_create(be, &wide_cfg);
    model_copy_matching(wide, m);
    enum { LP = 6, LNEW = 122 };
    int32_t lpre[BATCH * LP], la[BATCH * LNEW], lb[BATCH * LNEW];
    for (int i = 0; i < BATCH * LP; i++) lpre[i] = (int32_t)rng_below(6, 1, (uint64_t)i, V - 1);
    uint64_t lkeys[BATCH] = {1, 2, 3};
    for (int64_t k = 3; k <= 4; k++) {
        decode_opts o = {.k = k, .tau = 1.0, .freq_penalty = 0.5f, .max_new = LNEW, .seed = 8};
        int ok = decode_check(m, &o, LP, &err) == 0;
        T_CHECK(ok, "(g) k=%lld: 6 -> 128 refused: %s", (long long)k, ok ? "" : err.msg);
        T_EQ_INT(decode_cache_rows(m, &o, LP), 128, "(g) k=%lld: cache rows got %lld want 128",
                 (long long)k, (long long)decode_cache_rows(m, &o, LP));
        if (!ok) continue;
        decode_run(m, NULL, lpre, BATCH, LP, &o, lkeys, la);
        decode_run(wide, NULL, lpre, BATCH, LP, &o, lkeys, lb);
        int differ = 0;
        for (int i = 0; i < BATCH * LNEW; i++) differ += la[i] != lb[i];
        printf("(g) k=%lld: 6 -> 128 in a 128-token model, %d of %d tokens differ from a full last "
               "window\n",
               (long long)k, differ, BATCH * LNEW);
        T_EQ_INT(differ, 0, "(g) k=%lld: %d tokens differ from the full-window decoding",
                 (long long)k, differ);
    }
    decode_opts over = {.k = 4, .tau = 1.0, .max_new = LNEW + 1, .seed = 8};
    T_CHECK(decode_check(m, &over, LP, &err) != 0,
            "(g) 6 + 123 tokens in a 128-token model accepted");
    T_CHECK(strstr(err.msg, "context"), "(g) 6 + 123 tokens in a 128-token model accepted");
    model_free(wide);
    model_free(m);

    pf.head = HEAD_MTP;
    m = model_create(be, &pf);
    randomize(m, 0.8);
    compare(m, 3, 0.6, 0.0f, NULL, "MTP");
    model_free(m);

    /* the GPT-2 options (learned positions, biases, tied head): AR and PFLM */
    model_config g = ar;
    g.pos = POS_LEARNED;
    g.n_positions = 32;
    g.tied_head = g.norm_bias = g.attn_bias = 1;
    m = model_create(be, &g);
    randomize(m, 0.8);
    compare(m, 1, 0.7, 0.5f, NULL, "GPT-2 options AR");
    model_free(m);
    g.kind = MODEL_PFLM;
    g.k_train = 3;
    m = model_create(be, &g);
    randomize(m, 3.0);
    for (int64_t k = 1; k <= 3; k++) compare(m, k, 0.6, 0.0f, NULL, "GPT-2 options PFLM");
    model_free(m);
    be->destroy(be);
    return T_DONE();
}
