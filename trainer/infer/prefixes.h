/* trainer/infer/prefixes.h — the prompts of `kf sample --prefix-file F.jsonl`.
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

#endif
