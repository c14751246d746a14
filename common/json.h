/* common/json.h — a small, fast JSON (RFC 8259) parser into a read-only tree,
 * and string escaping for writers.
 *
 * Kept rather than jansson because it is faster on what kforcing parses
 * (log.jsonl lines, completion files, vocabularies): bench/bench_libs.c,
 * both in one run on a loaded 2-core Xeon, median of 7 alternating rounds:
 * 100,000 log.jsonl lines parsed and their "loss" read take 3.5x as long
 * with jansson's json_loadb (one allocation per node and a hash table per
 * object, against one arena per document here).
 *
 * The parser is strict (no comments, no trailing commas, no NaN, no leading
 * zeros, UTF-8 input; lone surrogates in \u escapes become U+FFFD) and
 * reports the first error as "NAME:LINE:COL: what" (1-based). Every node
 * lives in one arena owned by the json_doc, so freeing the document frees
 * the whole tree; nodes and strings stay valid until json_free.
 *
 * Typical use:
 *   json_doc *d = json_parse(buf, len, "vocab.json", &err);
 *   const json *root = json_root(d);
 *   for (size_t i = 0; i < root->n; i++) use(root->keys[i], root->kids[i]);
 *   json_free(d);
 */
#ifndef KF_COMMON_JSON_H
#define KF_COMMON_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

typedef enum json_type {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_type;

/** A decoded string: NUL-terminated, but may also contain NULs (from \u0000),
 * so len is authoritative. */
typedef struct json_str {
    const char *s;
    size_t len;
} json_str;

/** One node. Fields by type:
 *  JSON_BOOL:   b (0/1).
 *  JSON_NUMBER: num (nearest double); is_int = 1 when the literal has no
 *               fraction/exponent and fits int64, then i holds it exactly.
 *  JSON_STRING: str.
 *  JSON_ARRAY:  n children in kids[0..n-1].
 *  JSON_OBJECT: n members, keys[i] -> kids[i], in document order (duplicate
 *               keys are kept; json_get returns the last, as most parsers do).
 * line/col: 1-based position of the node's first character, for messages. */
typedef struct json {
    json_type type;
    int b, is_int;
    int32_t line, col;
    double num;
    int64_t i;
    json_str str;
    size_t n;
    struct json *kids;
    json_str *keys;
} json;

/** A parsed document (owns every node). */
typedef struct json_doc json_doc;

/** Parses len bytes. name is used in error messages (e.g. the file path).
 * Nesting deeper than 512 levels is an error (bounded recursion).
 * @return the document, or NULL with err set to "NAME:LINE:COL: message". */
json_doc *json_parse(const char *text, size_t len, const char *name, kf_err *err);

/** The root value of d. */
const json *json_root(const json_doc *d);

/** Frees d and every node in it (NULL allowed). */
void json_free(json_doc *d);

/** The member named key of an object (last one when repeated), or NULL if
 * obj is not an object or has no such member. Linear scan: for big objects,
 * iterate keys/kids instead. */
const json *json_get(const json *obj, const char *key);

/** Writes s (n bytes) as a quoted JSON string to f: '"', '\\' and control
 * characters are escaped (\n, \t, ... or \u00XX); well-formed UTF-8 is
 * written as it is and each maximal ill-formed subpart becomes U+FFFD (as
 * Python's errors="replace"), so the output is always valid JSON text even
 * for bytes such as a GPT-2 decode cut inside a character. */
void json_write_str(FILE *f, const char *s, size_t n);

/** Same escaping into a buffer: writes at most cap bytes to dst and returns
 * the length the full quoted string needs (like snprintf; no NUL added). At
 * most 6*n+2 bytes are ever needed (a lone ill-formed byte becomes 3). */
size_t json_escape(char *dst, size_t cap, const char *s, size_t n);

#endif
