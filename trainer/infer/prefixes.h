/* trainer/infer/prefixes.h — prompts for decoding: the prefix file of `kf
 * sample --prefix-file F.jsonl`, and the held-out prefixes of the paper's
 * protocol that `kf bench decode` and `kf bench nfe` complete.
 *
 * One JSON object per line: {"prefix": [ids]} (token ids, used as they are)
 * or {"text": "..."} (encoded with the vocabulary, no special tokens). Blank
 * lines are skipped; any other line that is not such an object, an empty
 * prefix, or a file without prefixes is an error naming FILE:LINE.
 */
#ifndef KF_TRAINER_INFER_PREFIXES_H
#define KF_TRAINER_INFER_PREFIXES_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tokenize/tokenizer.h"

/** Parses len bytes of JSONL (path: the file, for messages) into *count
 * prefixes: (*out)[i] holds (*lens)[i] ids. tk may be NULL when no line is a
 * text prompt. Free each (*out)[i], then *out and *lens, with free().
 * @return 0, or -1 with err set (nothing is returned). */
int prefixes_parse(const char *text, size_t len, const char *path, tok *tk, int32_t ***out,
                   int64_t **lens, int64_t *count, kf_err *err);

/** prefixes_parse over the file at path. */
int prefixes_read(const char *path, tok *tk, int32_t ***out, int64_t **lens, int64_t *count,
                  kf_err *err);

/** The protocol's prefixes: the first B samples of the validation split of the
 *  shard set dir that hold at least *P tokens, their first *P tokens each,
 *  into *out [B * *P] (free with free()). *P == 0 asks for the protocol's
 *  length: 64 tokens for `wrap` (OWT-style) data and 6 for `pad` (LM1B-style),
 *  cut to half of ctx (the smallest context of the models to run) when that
 *  is shorter. Also returns the data's sequence length and EOS id (-1: none).
 *  @return 0, or -1 with err (unreadable set, *P longer than the data's
 *  samples, fewer than B samples long enough). */
int prefixes_from_shards(const char *dir, int64_t *P, int64_t ctx, int64_t B, int32_t **out,
                         int64_t *seq_len, int32_t *eos, kf_err *err);

#endif
