/* trainer/infer/genppl.c — Gen-PPL under a Hugging Face GPT-2: the scoring of
 * re-tokenised samples (see genppl.h; `kf eval genppl` is
 * trainer/cli/cli_eval_genppl.c). */
#include "trainer/infer/genppl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/progress.h"
#include "kernels/kernels.h"
#include "trainer/model/layout.h"

size_t genppl_cleanup(char *s, size_t len) {
    /* transformers' PreTrainedTokenizerBase.clean_up_tokenization, in its order */
    static const char *const from[] = {" .",   " ?",  " !",  " ,",   " ' ",
                                       " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t r = 0; r < sizeof from / sizeof *from; r++) {
        size_t fl = strlen(from[r]), tl = strlen(to[r]), w = 0;
        for (size_t i = 0; i < len;) {
            if (i + fl <= len && !memcmp(s + i, from[r], fl)) {
                memcpy(s + w, to[r], tl);
                w += tl;
                i += fl;
            } else {
                s[w++] = s[i++];
            }
        }
        len = w;
    }
    return len;
}

int64_t genppl_context(const model *ev) {
    return ev->cfg.pos == POS_LEARNED ? ev->cfg.n_positions : ev->cfg.seq_len;
}

void genppl_score(model *ev, int32_t *const *ids, const int64_t *lens, int64_t n,
                  int64_t max_length, int64_t batch, int progress, genppl_result *out) {
    memset(out, 0, sizeof *out);
    out->samples = n;
    int64_t ctx = genppl_context(ev), nw = 0, V = ev->cfg.vocab;
    /* the logits of a forward are [windows * ctx, V] floats: at most 1 GiB
     * (GPT-2's 50257 per row take 200 MB per 1024-token window) */
    int64_t fit = (int64_t)((1ull << 30) / ((uint64_t)ctx * (uint64_t)V * sizeof(float)));
    if (batch > fit) batch = fit > 1 ? fit : 1;
    /* windows: (sample, start, length), MDLM's split of each truncated text */
    for (int64_t i = 0; i < n; i++) {
        int64_t len = lens[i] < max_length ? lens[i] : max_length;
        nw += (len + ctx - 1) / ctx;
    }
    int64_t *ws = kf_malloc((size_t)(nw + 1) * 3 * sizeof(int64_t)), w = 0, total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = lens[i] < max_length ? lens[i] : max_length;
        for (int64_t s = 0; s < len; s += ctx, w++) {
            ws[3 * w] = i;
            ws[3 * w + 1] = s;
            ws[3 * w + 2] = len - s < ctx ? len - s : ctx;
            total += ws[3 * w + 2];
        }
        /* entropy of the sample's unigram distribution */
        if (len == 0) continue;
        int32_t *sorted = kf_malloc((size_t)len * sizeof(int32_t));
        memcpy(sorted, ids[i], (size_t)len * sizeof(int32_t));
        for (int64_t a = 1; a < len; a++) /* insertion sort: texts are short */
            for (int64_t b = a; b > 0 && sorted[b - 1] > sorted[b]; b--) {
                int32_t t = sorted[b];
                sorted[b] = sorted[b - 1];
                sorted[b - 1] = t;
            }
        double h = 0;
        for (int64_t a = 0; a < len;) {
            int64_t b = a;
            while (b < len && sorted[b] == sorted[a]) b++;
            double p = (double)(b - a) / (double)len;
            h -= p * log(p);
            a = b;
        }
        out->entropy += h;
        free(sorted);
    }
    int64_t nonempty = 0;
    for (int64_t i = 0; i < n; i++) nonempty += lens[i] > 0;
    out->entropy = nonempty ? out->entropy / (double)nonempty : NAN;
    if (progress) progress_begin("gen-ppl", (double)total, "tok");
    int32_t *bids = kf_malloc((size_t)(batch * ctx) * sizeof(int32_t)),
            *vl = kf_malloc((size_t)batch * sizeof(int32_t));
    int32_t *tg = kf_malloc((size_t)(batch * ctx) * sizeof(int32_t));
    float *nll = kf_malloc((size_t)(batch * ctx) * sizeof(float));
    model_ws *mws = model_ws_create(ev);
    kf_backend *be = ev->be;
    kf_precision saved = be->precision;
    be->set_precision(be, KF_PREC_FP32);
    int64_t done = 0;
    for (int64_t w0 = 0; w0 < nw; w0 += batch) {
        int64_t B = nw - w0 < batch ? nw - w0 : batch, L = 1;
        for (int64_t b = 0; b < B; b++) L = ws[3 * (w0 + b) + 2] > L ? ws[3 * (w0 + b) + 2] : L;
        memset(bids, 0, (size_t)(B * L) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++) {
            const int64_t *x = ws + 3 * (w0 + b);
            memcpy(bids + b * L, ids[x[0]] + x[1], (size_t)x[2] * sizeof(int32_t));
            vl[b] = (int32_t)x[2];
        }
        /* row t predicts token t+1 of its window; padding is neither attended nor scored */
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < L; t++)
                tg[b * L + t] = t + 1 < vl[b] ? bids[b * L + t + 1] : -1;
        layout lay;
        layout_ar(&lay, L);
        model_input in = {.lay = &lay, .B = B, .ids = bids, .valid_len = vl};
        model_forward(ev, mws, &in, 0, NULL);
        model_loss(ev, mws, tg, 0, 1.0f, NULL, nll);
        layout_free(&lay);
        for (int64_t b = 0; b < B; b++) {
            for (int64_t t = 0; t + 1 < vl[b]; t++) out->nll_sum += nll[b * L + t];
            out->tokens += vl[b] > 1 ? vl[b] - 1 : 0;
            done += vl[b];
        }
        if (progress) {
            char extra[64];
            snprintf(extra, sizeof extra, "ppl %.2f",
                     out->tokens ? exp(out->nll_sum / (double)out->tokens) : NAN);
            progress_update((double)done, extra);
        }
    }
    if (progress) progress_end();
    be->set_precision(be, saved);
    model_ws_free(mws);
    free(tg);
    out->gen_ppl = out->tokens ? exp(out->nll_sum / (double)out->tokens) : NAN;
    free(ws);
    free(bids);
    free(vl);
    free(nll);
}
