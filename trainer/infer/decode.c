/* trainer/infer/decode.c — KV-cached AR and K-Forcing decoding (see decode.h). */
#include "trainer/infer/decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

static int64_t steps_of(const decode_opts *o) { return (o->max_new + o->k - 1) / o->k; }

int64_t decode_noise_steps(int64_t per_step) {
    KF_CHECK(per_step >= 1, "decode_noise_steps: %lld rows a step", (long long)per_step);
    return (DECODE_NOISE_ROWS + per_step - 1) / per_step;
}

/* Encodes the noise rows of steps [s0, s1) into c's noise table, step by
 * step, sample by sample, each step's `emit` (MTP: 1) rows in order:
 * row (s, b, i) of the table is base[s - s0] + b * rows + i. */
static void noise_pass(model *m, model_cache *c, const decode_opts *o, const uint64_t *keys,
                       int64_t B, int64_t s0, int64_t s1, int64_t *base, double *z, double *tau) {
    int mtp = m->cfg.head == HEAD_MTP;
    int64_t k = o->k, zdim = mtp ? m->cfg.k_train : 1, n = 0;
    for (int64_t s = s0; s < s1; s++) {
        int64_t emit = o->max_new - s * k < k ? o->max_new - s * k : k, rows = mtp ? 1 : emit;
        base[s - s0] = n;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < rows; i++, n++) {
                for (int64_t e = 0; e < zdim; e++)
                    z[n * zdim + e] = rng_uniform01(o->seed, keys[b], (uint64_t)(s * k + i + e));
                tau[n] = o->tau;
            }
    }
    model_cache_noise_encode(m, c, n, z, tau);
}

int64_t decode_cache_rows(const model *m, const decode_opts *o, int64_t P) {
    /* the last step feeds the previous step's k tokens (none after the
     * prefill) plus its noise rows: one per token it still has to emit (the
     * MTP baseline's one row carries them all); AR feeds one token per step */
    if (m->cfg.kind == MODEL_AR) return P + o->max_new - 1;
    int64_t before = (steps_of(o) - 1) * o->k;
    return P + before + (m->cfg.head == HEAD_MTP ? 1 : o->max_new - before);
}

double decode_release_penalty(const char *table, int64_t k) {
    static const struct {
        const char *name;
        double by_k[3]; /* k = 2, 3, 4 */
    } tables[] = {{"lm1b", {0.2, 0.4, 0.5}}, {"owt", {0.3, 0.5, 0.5}}};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        if (!strcmp(table, tables[i].name))
            return k >= 2 && k <= 4 ? tables[i].by_k[k - 2] : DECODE_FREQ_PENALTY_DEFAULT;
    return -1;
}

int decode_check(const model *m, const decode_opts *o, int64_t P, kf_err *err) {
    if (m->cfg.kind == MODEL_AR && o->k != 1)
        return kf_err_set(err, "--k %lld: an AR checkpoint decodes one token per step (k = 1)",
                          (long long)o->k);
    if (o->k < 1 || o->k > m->cfg.k_train)
        return kf_err_set(err, "--k %lld: must be in [1, k_train = %lld] for this checkpoint",
                          (long long)o->k, (long long)m->cfg.k_train);
    if (m->cfg.head == HEAD_MTP && o->k != m->cfg.k_train)
        return kf_err_set(err, "--k %lld: the MTP baseline decodes exactly k_train = %lld tokens",
                          (long long)o->k, (long long)m->cfg.k_train);
    if (!(o->tau > 0)) return kf_err_set(err, "--tau %g: must be > 0", o->tau);
    if (o->n_position_temp) {
        if (m->cfg.kind == MODEL_AR)
            return kf_err_set(err,
                              "--position-temp: an AR checkpoint samples every token at --tau");
        if (o->n_position_temp < o->k)
            return kf_err_set(err, "--position-temp: %lld temperatures for %lld positions per step",
                              (long long)o->n_position_temp, (long long)o->k);
        for (int64_t j = 0; j < o->n_position_temp; j++)
            if (!(o->position_temp[j] >= 0) || !isfinite(o->position_temp[j]))
                return kf_err_set(err, "--position-temp: %g at position %lld: must be >= 0",
                                  o->position_temp[j], (long long)j);
    }
    if (o->max_new < 1) return kf_err_set(err, "--max-new must be >= 1");
    if (P < 1) return kf_err_set(err, "a prefix needs at least one token");
    int64_t rows = decode_cache_rows(m, o, P);
    if (rows > m->cfg.seq_len)
        return kf_err_set(
            err,
            "prefix of %lld tokens + %lld new tokens needs %lld positions; the model's "
            "context is %lld (shorten the prefix or --max-new)",
            (long long)P, (long long)o->max_new, (long long)rows, (long long)m->cfg.seq_len);
    return 0;
}

void decode_run(model *m, const model_heads *heads, const int32_t *prefix, int64_t B, int64_t P,
                const decode_opts *o, const uint64_t *keys, int32_t *out) {
    kf_err err;
    KF_CHECK(decode_check(m, o, P, &err) == 0, "decode_run: %s", err.msg);
    kf_backend *be = m->be;
    int64_t V = m->cfg.vocab, k = o->k, steps = steps_of(o), total = steps * k;
    int ar = m->cfg.kind == MODEL_AR, mtp = m->cfg.head == HEAD_MTP;
    int64_t zdim = mtp ? m->cfg.k_train : 1, nnoise = ar ? 0 : mtp ? 1 : k;
    model_heads *own = heads ? NULL : model_heads_pack(m);
    model_cache *c = model_cache_create(m, heads ? heads : own, B, decode_cache_rows(m, o, P));
    int64_t qmax = P + k + nnoise;
    /* noise passes of `window` steps: their rows' z and tau, and each
     * step's first row in the table */
    int64_t window = ar ? 1 : decode_noise_steps(B * nnoise);
    int32_t *gen = kf_malloc((size_t)(B * total) * sizeof(int32_t));
    int32_t *ids = kf_calloc((size_t)(B * qmax), sizeof(int32_t));
    double *z = kf_malloc((size_t)(window * B * nnoise * zdim + 1) * sizeof(double));
    double *tau = kf_malloc((size_t)(window * B * nnoise + 1) * sizeof(double));
    int64_t *base = kf_malloc((size_t)window * sizeof(int64_t));
    uint8_t *noise = kf_calloc((size_t)qmax, 1);
    int32_t outrows[64];
    /* the tokens generated so far, position-major (freq_penalty's history):
     * each position's sampler writes its ids there, so a step waits for the
     * device once, whatever its k */
    int32_t *dev_hist = be->alloc(be, (size_t)(B * total + 1) * sizeof(int32_t));
    int32_t *dev_ids = be->alloc(be, (size_t)(k * B) * sizeof(int32_t));
    double *dev_z = be->alloc(be, (size_t)B * sizeof(double));
    double *dev_ptau =
        be->alloc(be, (size_t)B * sizeof(double)); /* a sampled token's temperature */
    double ptau_dev = -1.0;                        /* the value dev_ptau holds (-1: none yet) */
    int32_t *step_ids = kf_malloc((size_t)(k * B) * sizeof(int32_t));
    double *zs = kf_malloc((size_t)B * sizeof(double)),
           *ptau = kf_malloc((size_t)B * sizeof(double));

    int64_t n = 0; /* tokens generated per sequence */
    for (int64_t s = 0; s < steps; s++) {
        if (o->on_step) o->on_step(o->on_step_ctx, s, model_cache_len(c));
        if (!ar && s % window == 0)
            noise_pass(m, c, o, keys, B, s, s + window < steps ? s + window : steps, base, z, tau);
        /* this step's rows: the new context tokens, then the noise rows; the
         * last step emits only the tokens still missing (fewer than k when k
         * does not divide max_new) and feeds only their noise rows */
        int64_t emit = ar ? 1 : (o->max_new - n < k ? o->max_new - n : k);
        int64_t nctx = s == 0 ? P : (ar ? 1 : k), nz = mtp ? nnoise : ar ? 0 : emit, Q = nctx + nz;
        memset(noise, 0, (size_t)Q);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < nctx; i++)
                ids[b * Q + i] = s == 0 ? prefix[b * P + i] : gen[b * total + n - nctx + i];
        for (int64_t i = 0; i < nz; i++) { /* noise_pass's rows */
            noise[nctx + i] = 1;
            for (int64_t b = 0; b < B; b++)
                ids[b * Q + nctx + i] = (int32_t)(base[s % window] + b * nz + i);
        }
        int64_t nout = ar || mtp ? 1 : emit;
        for (int64_t j = 0; j < nout; j++) outrows[j] = (int32_t)(ar ? nctx - 1 : nctx + j);
        /* K-Forcing tokens are argmaxes: without a penalty (which depends on
         * the tokens of this very step) the output layer computes them
         * directly, never materialising the logits */
        int fused = !ar && o->freq_penalty == 0.0f && !o->n_position_temp;
        float *logits = (float *)model_decode_step(m, c, Q, noise, ids, NULL, NULL, nout, outrows,
                                                   nctx, fused ? dev_ids : NULL);
        /* this step's ids on the device, [emit, B]: the fused argmax's, or
         * each position's sampler's, written into the history */
        const int32_t *picked = fused ? dev_ids : dev_hist + n * B;
        for (int64_t j = 0; !fused && j < emit; j++) {
            int64_t nj = n + j;             /* tokens before this one */
            float *lj = logits + j * B * V; /* output j of every sequence (head j for MTP) */
            if (o->freq_penalty != 0.0f && nj > 0)
                be->freq_penalty(be, lj, dev_hist, nj, B, V, o->freq_penalty);
            double pt = ar || !o->n_position_temp ? 0.0 : o->position_temp[j];
            if (ar || pt > 0) {
                uint64_t i0 = ar ? 0 : DECODE_POSITION_DRAWS;
                double t = ar ? o->tau : pt;
                for (int64_t b = 0; b < B; b++)
                    zs[b] = rng_uniform01(o->seed, keys[b], i0 + (uint64_t)nj);
                be->upload(be, dev_z, zs, (size_t)B * sizeof(double));
                if (t != ptau_dev) { /* AR's never changes: one upload */
                    for (int64_t b = 0; b < B; b++) ptau[b] = t;
                    be->upload(be, dev_ptau, ptau, (size_t)B * sizeof(double));
                    ptau_dev = t;
                }
                be->sample_icdf(be, dev_hist + nj * B, lj, dev_ptau, dev_z, B, V);
            } else {
                be->argmax(be, dev_hist + nj * B, lj, B, V);
            }
        }
        /* the step's one wait for the device */
        be->download(be, step_ids, picked, (size_t)(emit * B) * sizeof(int32_t));
        for (int64_t j = 0; j < emit; j++, n++)
            for (int64_t b = 0; b < B; b++) gen[b * total + n] = step_ids[j * B + b];
    }
    for (int64_t b = 0; b < B; b++)
        memcpy(out + b * o->max_new, gen + b * total, (size_t)o->max_new * sizeof(int32_t));
    be->free(be, dev_hist);
    be->free(be, dev_ids);
    be->free(be, dev_z);
    be->free(be, dev_ptau);
    free(gen);
    free(ids);
    free(z);
    free(tau);
    free(base);
    free(noise);
    free(step_ids);
    free(zs);
    free(ptau);
    model_cache_free(c);
    model_heads_free(own);
}
