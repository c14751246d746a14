/* tokenize/tokenizer.h — GPT-2 byte-level BPE, BERT uncased WordPiece, and the
 * MDLM detokenizers.
 *
 * A tok is loaded once from a vocabulary directory and is then used to encode
 * and decode text. Encoding is deterministic and matches HuggingFace
 * tokenizers (and tiktoken for GPT-2) id for id; tests/scripts/test_tokenize_*
 * check that against the real libraries.
 *
 * Vocabulary directories (HuggingFace layout):
 *   gpt2: vocab.json (token string -> id, 50257 entries) and merges.txt
 *         (one "a b" merge per line, rank = line order; a "#version" first
 *         line is skipped).
 *   bert: vocab.txt (one token per line, id = line number from 0).
 *
 * Threads: a tok is NOT thread-safe for tok_encode (it owns a cache and
 * scratch space); give each thread its own tok (tok_load takes about 70 ms
 * for gpt2). tok_decode and the getters only read and may be called
 * concurrently. Memory: the GPT-2 cache is bounded (about 3 MiB); BPE on a
 * piece of n bytes takes O(n log n) time and O(n) scratch.
 */
#ifndef KF_TOKENIZE_TOKENIZER_H
#define KF_TOKENIZE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/** A growable vector of token ids. Zero-initialise ({0}) before first use;
 * free with tok_ids_free. Appending functions never clear it. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

/** A growable byte buffer (not NUL-terminated unless stated). Zero-initialise
 * before first use; free with tok_bytes_free. */
typedef struct tok_bytes {
    char *v;
    size_t n, cap;
} tok_bytes;

void tok_ids_push(tok_ids *a, int32_t id);
void tok_ids_free(tok_ids *a);
void tok_bytes_append(tok_bytes *b, const void *p, size_t n);
void tok_bytes_free(tok_bytes *b);

/** A loaded tokenizer. */
typedef struct tok tok;

/** Loads a tokenizer.
 * @param kind "gpt2" or "bert" (BERT is always uncased).
 * @param vocab_dir directory holding the files listed above.
 * @param err set on failure (unknown kind, missing/unreadable file, malformed
 *        line: the message names the file and line).
 * @return the tokenizer, or NULL on failure. */
tok *tok_load(const char *kind, const char *vocab_dir, kf_err *err);

/** Loads the tokenizer whose files vocab_dir holds: gpt2 when it has
 *  vocab.json, bert when it has vocab.txt.
 * @return the tokenizer, or NULL (err names the directory when it has
 *         neither file, or the file and line as tok_load does). */
tok *tok_load_dir(const char *vocab_dir, kf_err *err);

/** A second tokenizer over t's vocabulary that shares t's read-only tables
 * (nothing is read or parsed: about a microsecond, against tens of
 * milliseconds for tok_load). It has its own workspace and encoder cache, so
 * t and its clones may encode on different threads at once. Each is freed
 * with tok_free, in any order; the tables go with the last one. */
tok *tok_clone(tok *t);

/** Frees t (NULL is allowed); see tok_clone for shared tables. */
void tok_free(tok *t);

/** "gpt2" or "bert-uncased": the name recorded in shard manifests. */
const char *tok_name(const tok *t);

/** 64 lowercase hex chars: sha256 over the concatenated bytes of the vocab
 * files in this order — gpt2: vocab.json then merges.txt; bert: vocab.txt.
 * Recorded in shards so a mismatched vocabulary is detected. */
const char *tok_vocab_sha256(const tok *t);

/** Number of ids (gpt2: 50257, bert-base-uncased: 30522). Valid ids are
 * 0 .. size-1. */
int64_t tok_vocab_size(const tok *t);

/** Encodes len bytes of UTF-8 text, appending ids to out. No special tokens
 * are added. Invalid UTF-8 is replaced by U+FFFD exactly as Python's
 * bytes.decode("utf-8", errors="replace") does (maximal subparts); the number
 * of replacements is added to *n_replaced when it is non-NULL.
 * @param allow_special gpt2: a literal "<|endoftext|>" becomes id 50256
 *        (otherwise it is encoded as plain text). bert: literal "[CLS]",
 *        "[SEP]", "[PAD]", "[UNK]", "[MASK]" (those present in vocab.txt)
 *        become their ids, matched in the raw text before normalisation as
 *        HF does for special added tokens; otherwise they are text.
 * @return 0 (encoding cannot fail; kept int for future input limits).
 *
 * Character classes: GPT-2's \p{L}, \p{N}, \s are Unicode 15.0 (as HF's
 * Oniguruma and tiktoken's regex crate); BERT's punctuation, control and Mn
 * classes are Unicode 8.0 (as HF's unicode_categories tables), so e.g. a mark
 * added in Unicode 14 is an ordinary character, exactly as in HF. Tested on every
 * assigned code point. Not applied: NFD's canonical reordering (only visible
 * for non-Mn marks with a nonzero combining class, e.g. U+1D165). */
int tok_encode(tok *t, const char *text, size_t len, int allow_special, tok_ids *out,
               int64_t *n_replaced);

/** Decodes n ids, appending the bytes to out. gpt2: exact inverse of encoding
 * (byte-level). bert: HF's WordPiece decoder with cleanup off: "##" pieces
 * are glued to the previous token, others separated by one space, special
 * tokens kept (lossy: case, accents and spacing are not restored).
 * @return 0, or -1 with err set when an id is out of range (message names the
 *         id and its position). */
int tok_decode(const tok *t, const int32_t *ids, size_t n, tok_bytes *out, kf_err *err);

/** Id of a special token by role, or -1 when this tokenizer has none.
 * gpt2: "eos" and "bos" are both <|endoftext|> (50256).
 * bert: "cls" [CLS], "sep" [SEP], "pad" [PAD], "unk" [UNK], "mask" [MASK],
 * looked up in vocab.txt. */
int32_t tok_special_id(const tok *t, const char *name);

/** MDLM's lm1b_detokenizer (mdlm/dataloader.py), byte for byte: undoes the
 * LM1B tokenization's spacing (" 's" -> "'s", " , " -> ", ", etc.). Appends
 * to out. */
void detok_lm1b(const char *in, size_t len, tok_bytes *out);

/** MDLM's wt_detokenizer (mdlm/dataloader.py) for WikiText: "@-@" -> "-",
 * number separators, punctuation and bracket spacing, " \n" fixes. Appends
 * to out. */
void detok_wikitext(const char *in, size_t len, tok_bytes *out);

#endif
