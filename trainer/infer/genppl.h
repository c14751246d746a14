/* trainer/infer/genppl.h — the paper's Gen-PPL: completions from any model scored
 * by a Hugging Face GPT-2 (the paper: gpt2-large; docs/eval.md), run as
 * the one model (model_hf.h maps its checkpoint into it).
 *
 * Per sample (one JSONL line), as MDLM's compute_generative_perplexity and
 * the paper's appendix "Evaluation Protocol":
 *   1. text: the completion truncated at its first EOS and, with the prefix
 *      before it, stripped of special tokens, then detokenised with the
 *      generating model's tokenizer (--vocab); a BERT (LM1B) decode is
 *      followed by Hugging Face's clean_up_tokenization (" ." -> ".",
 *      " ' " -> "'", " n't" -> "n't", ...), as MDLM's batch_decode does.
 *      Samples given as text (strings: the release's output) are used as
 *      they are, the completion cut at its first "<|endoftext|>" or "[SEP]".
 *   2. re-tokenised with the evaluator's GPT-2 tokenizer (no special tokens
 *      added), truncated to max_length tokens;
 *   3. scored in windows of the evaluator's context (n_positions), each
 *      window restarting the context (MDLM's split): every token after a
 *      window's first is scored, NLL = -log p(token | window so far).
 * Gen-PPL = exp(sum of NLLs / scored tokens) over the whole file
 * (corpus level). Entropy: the mean over samples of the unigram entropy
 * (nats) of each sample's GPT-2 tokens (after truncation).
 * Steps 1 and 2 are `kf eval genppl`'s reading of the file
 * (trainer/cli/cli_eval_genppl.c); genppl_score truncates and scores (3).
 */
#ifndef KF_TRAINER_INFER_GENPPL_H
#define KF_TRAINER_INFER_GENPPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "trainer/model/model.h"

/** Hugging Face's clean_up_tokenization on len bytes of s, in place
 *  (returns the new length): the spacing a BERT decode leaves before
 *  punctuation and English contractions removed. */
size_t genppl_cleanup(char *s, size_t len);

/** Corpus-level result. */
typedef struct genppl_result {
    int64_t samples;
    int64_t tokens; /* scored tokens */
    double nll_sum;
    double gen_ppl; /* exp(nll_sum / tokens); NaN when tokens == 0 */
    double entropy; /* mean unigram entropy per sample (nats) */
} genppl_result;

/** The evaluator's context (window length): n_positions with learned
 *  positions, else its training seq_len. */
int64_t genppl_context(const model *ev);

/** Scores n samples already re-tokenised for the evaluator (an AR model,
 *  run in fp32; ids[i], lens[i] tokens each, at most max_length used),
 *  batch windows per forward, with a progress bar when progress is set. */
void genppl_score(model *ev, int32_t *const *ids, const int64_t *lens, int64_t n,
                  int64_t max_length, int64_t batch, int progress, genppl_result *out);

#endif
