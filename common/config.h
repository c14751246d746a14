/* common/config.h — strict YAML configuration with file:line:col errors.
 *
 * A YAML file (or string) is loaded with libyaml into a tree of nodes
 * (scalar / sequence / mapping); every node knows where it came from. Readers
 * look values up by dotted path with typed getters; every lookup marks the
 * node as used, and cfg_check_unused then reports the first key nobody read,
 * so each consumer is strict without writing its schema twice:
 *
 *   kf_err err;
 *   cfg_node *root = cfg_load_file("configs/tiny.yaml", &err);
 *   if (!root || cfg_override(root, "model.hidden=256", &err)) die(err.msg);
 *   int64_t hidden; double lr; const char *name;
 *   if (cfg_get_int(root, "model.hidden", &hidden, &err) ||
 *       cfg_opt_double(root, "defaults.lr", 1e-4, &lr, &err) ||
 *       cfg_get_str(root, "name", &name, &err) ||
 *       cfg_check_unused(root, &err)) die(err.msg);
 *   if (hidden % 64) die(cfg_err_at(cfg_find(root, "model.hidden"), &err,
 *                                   "must be a multiple of 64"), err.msg);
 *   cfg_free(root);
 *
 * Paths: keys joined by '.', sequence items by [i] or .i (0-based):
 * "stages[1].k" and "stages.1.k" name the same node. Keys containing '.' or
 * '[' cannot be addressed (they are legal YAML but not useful here).
 *
 * Messages (all 1-based):
 *   "FILE:LINE:COL: key 'model.hidden': expected an integer, got 'x'"
 *   "FILE:LINE:COL: missing required key 'model.heads'"   (at the mapping)
 *   "FILE:LINE:COL: unknown key 'model.hiden'"
 *   "FILE:LINE:COL: duplicate key 'model.hidden' (first at LINE:COL)"
 *   "override 'model.hiden=1': unknown key 'model.hiden'"
 * A node created or replaced by an override has no file position; its
 * location prints as "override 'TEXT'".
 *
 * Scalars follow YAML 1.2's core schema for the typed getters: integers are
 * decimal (optionally signed), 0x.. or 0o..; doubles also accept 1e-4, .5,
 * .inf/-.inf/.nan; booleans are true/false (any case of True/TRUE); null is
 * ~, null or empty. A quoted scalar is always a string: cfg_get_int on "12"
 * (quoted) is an error. Anchors, aliases and merge keys ("<<") are rejected,
 * as are non-scalar keys and multiple documents.
 */
#ifndef KF_COMMON_CONFIG_H
#define KF_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/strbuf.h"

typedef enum cfg_kind { CFG_SCALAR, CFG_SEQ, CFG_MAP } cfg_kind;

/** One node. Fields are public for iteration; use the functions to change
 * the tree. Strings are owned by the tree. */
typedef struct cfg_node {
    cfg_kind kind;
    char *where;           /* "FILE:LINE:COL" or "override 'TEXT'" */
    const char *file;      /* file name given at load (shared), NULL for overrides */
    int line, col;         /* 1-based position in file; 0 for overrides */
    char *path;            /* full path from the root, e.g. "stages[1].k"; "" for the root */
    char *key;             /* key under its parent mapping, NULL otherwise */
    int key_line, key_col; /* position of that key (0 for overrides) */
    struct cfg_node *parent;
    /* CFG_SCALAR */
    char *value; /* text as written (NUL-terminated) */
    bool quoted; /* written quoted or as a block scalar: always a string */
    /* CFG_SEQ: items; CFG_MAP: values in file order (their ->key is the key) */
    struct cfg_node **items;
    size_t n;
    bool used; /* set by lookups; read by cfg_check_unused */
} cfg_node;

/** Loads a YAML file with one document whose top level is a mapping.
 * @return the root (free with cfg_free), or NULL with err set to
 * "FILE:LINE:COL: what" (syntax errors, duplicates, anchors, ...). */
cfg_node *cfg_load_file(const char *path, kf_err *err);

/** Same from text; name is used as FILE in messages. An empty text gives an
 * empty mapping. */
cfg_node *cfg_load_string(const char *text, const char *name, kf_err *err);

/** Frees the whole tree (NULL allowed). Only call on a root. */
void cfg_free(cfg_node *root);

/** Applies one command-line override "a.b.c=VALUE". VALUE is parsed as YAML
 * (a scalar, or a flow sequence/mapping such as [1, 2] or {a: 1}); an empty
 * VALUE is an empty (null) scalar. A missing key is created, and so are
 * missing intermediate mappings; a sequence index must exist. The new node is
 * not marked used: an override naming a key that no reader asks for is caught
 * by cfg_check_unused as "override 'a.b.x=1': unknown key 'a.b.x'".
 * @return 0, or -1 with err set (bad syntax, path through a scalar, index out
 * of range). */
int cfg_override(cfg_node *root, const char *assignment, kf_err *err);

/** The node at path under n, or NULL when absent; marks it (and every node on
 * the way) used. path "" is n itself. */
cfg_node *cfg_find(cfg_node *n, const char *path);

/** Like cfg_find, but a missing node is an error ("missing required key")
 * and so is a node of another kind (kind < 0 accepts any kind). */
int cfg_get_node(cfg_node *n, const char *path, int kind, cfg_node **out, kf_err *err);

/** Typed reads of a node itself (e.g. a sequence item); mark it used.
 * Errors name the node's location and path. */
int cfg_as_int(cfg_node *n, int64_t *out, kf_err *err);
int cfg_as_double(cfg_node *n, double *out, kf_err *err);
int cfg_as_bool(cfg_node *n, bool *out, kf_err *err);
/** Any scalar, as written (the returned text is owned by the tree). */
int cfg_as_str(cfg_node *n, const char **out, kf_err *err);

/** True when n is a null scalar (~, null, Null, NULL or empty, unquoted). */
bool cfg_is_null(const cfg_node *n);

/** Required typed values at path under n. */
int cfg_get_int(cfg_node *n, const char *path, int64_t *out, kf_err *err);
int cfg_get_double(cfg_node *n, const char *path, double *out, kf_err *err);
int cfg_get_bool(cfg_node *n, const char *path, bool *out, kf_err *err);
int cfg_get_str(cfg_node *n, const char *path, const char **out, kf_err *err);

/** Optional typed values: def when the key is absent or null, an error when
 * present with the wrong type. */
int cfg_opt_int(cfg_node *n, const char *path, int64_t def, int64_t *out, kf_err *err);
int cfg_opt_double(cfg_node *n, const char *path, double def, double *out, kf_err *err);
int cfg_opt_bool(cfg_node *n, const char *path, bool def, bool *out, kf_err *err);
int cfg_opt_str(cfg_node *n, const char *path, const char *def, const char **out, kf_err *err);

/** Formats "WHERE: key 'PATH': MESSAGE" into err for a value that parsed but
 * is not acceptable (out of range, unknown enum word), and returns -1. For the
 * root (path "") the "key ''" part is left out. */
int cfg_err_at(const cfg_node *n, kf_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Marks n and, when recursive, everything under it as used (for subtrees
 * that are consumed as a whole, e.g. copied verbatim). */
void cfg_mark_used(cfg_node *n, bool recursive);

/** Finds the first mapping entry (in file order, depth first) that no lookup
 * used and reports it as "WHERE: unknown key 'PATH'". Entries under an unused
 * key are not visited (the unused key itself is reported).
 * @return 0 when every key was used, else -1 with err set. */
int cfg_check_unused(const cfg_node *root, kf_err *err);

/** The canonical YAML text of the tree (malloc'ed, caller frees): block
 * mappings in file order, two-space indentation, sequences of scalars in flow
 * style ([a, b]), other sequences in block style, scalars plain when that
 * reads back as the same value, otherwise double-quoted with escapes.
 * Comments and original formatting are dropped. Loading the text gives a tree
 * with the same canonical text. */
char *cfg_emit(const cfg_node *root);

/** Appends v to o as a double-quoted YAML scalar that reads back as exactly
 * v: '"' and '\\' escaped, control characters and the code points libyaml
 * would not take back as written (C1 controls, U+2028/9, U+FFFE/F) as
 * escapes. v must be UTF-8 (cfg_load only gives such strings). */
void cfg_emit_quoted(strbuf *o, const char *v);

/** sha256 (hex) of cfg_emit(root): equal for configs that mean the same,
 * whatever their formatting or comments. */
void cfg_hash(const cfg_node *root, char out[65]);

#endif
