/* jobs/corpus_words.h — do completions use real words? The words of a run's
 * own training text, and the share of a completion's words found there.
 *
 * A word is a maximal run of ASCII letters; a lower-case word has no capital
 * letter (capitalised words are mostly names, which a small model may invent
 * plausibly). The corpus vocabulary is every lower-case word that occurs at
 * least twice in the training split of a shard set (once could be a typo or
 * a word cut by the packer), its text recovered by decoding the samples:
 * special tokens (BOS, EOS, ...) end a document; in `wrap` packing the
 * samples are consecutive blocks of one stream, so a word cut between two
 * blocks is joined again, and in `pad` packing each sample is a document.
 *
 * Of a completion only the words whole within it count: a word touching the
 * start (it may continue the prompt's last word) or the end of a completion
 * cut by the length limit (not stopped by EOS) is left out. Per set of
 * completions (one row of the samples table), in groups (the completions of
 * one prompt):
 *
 *   corpus-word rate  counted lower-case words in the vocabulary / counted
 *                     lower-case words;
 *   distinct words    per group, distinct counted lower-case words / counted
 *                     lower-case words; the mean over the groups with words.
 *                     Low when a model repeats itself or gives every
 *                     completion of a prompt the same words. Per group, so
 *                     that it does not fall with the number of completions
 *                     (real text's share of distinct words does: about 0.4
 *                     over all 128 completions of 64 tokens of this
 *                     vocabulary, 0.5 at 64 bytes).
 */
#ifndef KF_JOBS_CORPUS_WORDS_H
#define KF_JOBS_CORPUS_WORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tokenize/tokenizer.h"

/* The targets the samples table checks: AR's completions at least 80%
 * corpus words, every PFLM row at least 0.95x AR's rate, and every row at
 * least 0.4 distinct words (below them a row is flagged). */
#define WORDS_MIN_AR_RATE 0.80
#define WORDS_MIN_RATE_RATIO 0.95
#define WORDS_MIN_DISTINCT 0.40

/** The lower-case words of a training text with their counts. */
typedef struct corpus_words corpus_words;

/** Counts the lower-case words of the training split of the shard set in
 * data_dir, decoded with tk (the set's tokenizer).
 * @return 0, or -1 with err set (the set cannot be read or decoded). */
int corpus_words_load(const char *data_dir, const tok *tk, corpus_words **out, kf_err *err);

/** Occurrences of the lower-case word w (n bytes) in the training text. */
int64_t corpus_words_count(const corpus_words *c, const char *w, size_t n);

/** Distinct lower-case words (any count). */
int64_t corpus_words_distinct(const corpus_words *c);

void corpus_words_free(corpus_words *c);

/** The words of a set of completions, added one completion at a time. */
typedef struct words_tally words_tally;

words_tally *words_tally_new(void);

/** Adds the counted lower-case words of one completion's text (len bytes)
 * to group (>= 0); stopped: the completion ended with EOS (its last word is
 * whole). */
void words_tally_add(words_tally *t, const corpus_words *c, const char *text, size_t len,
                     bool stopped, int64_t group);

/** The corpus-word rate and the distinct fraction (NaN when no word
 * counted); *words receives the number of words counted (may be NULL). */
void words_tally_result(const words_tally *t, double *rate, double *distinct, int64_t *words);

void words_tally_free(words_tally *t);

#endif
