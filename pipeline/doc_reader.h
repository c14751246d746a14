/* pipeline/doc_reader.h — turns a list of inputs (files, directories,
 * archives; see build_config.h for formats) into a stream of documents, in a
 * deterministic order: inputs in config order, directory entries in byte
 * order of names, archive members in archive order.
 *
 * Push model: docs_read calls the sink for every document. Everything is
 * streamed (archive members, nested archives and line files are never held
 * whole in memory, except one `text` document at a time), except the nested
 * archives a sink takes whole (doc_sink.member).
 */
#ifndef KF_PIPELINE_DOC_READER_H
#define KF_PIPELINE_DOC_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "pipeline/build_config.h"

typedef struct doc_sink {
    /** A non-empty document; text is valid only during the call. Return 0 to
     * go on, -1 (with err set) to stop reading. */
    int (*doc)(void *ctx, const char *text, size_t len, kf_err *err);
    /** An empty document (empty line, file or text field): counted, not kept.
     * Returns like doc. */
    int (*empty)(void *ctx, kf_err *err);
    /** Bytes of the inputs consumed so far, as stored on disk (compressed
     * bytes for archives), for progress; called often. May be NULL. */
    void (*progress)(void *ctx, int64_t disk_bytes);
    /** May be NULL. An archive member that is itself an archive (e.g.
     * OpenWebText's urlsf_subset*.xz), of at most DOCS_MEMBER_MAX bytes,
     * handed over whole (data is the sink's to free()) instead of being read
     * in line: the sink decodes it with docs_read_member, possibly on another
     * thread, and must take its documents before any later one. name is its
     * path for messages. Returns like doc. */
    int (*member)(void *ctx, const build_input *in, const char *name, void *data, size_t size,
                  kf_err *err);
    void *ctx;
} doc_sink;

/** Largest nested archive handed to doc_sink.member; larger ones stream. */
#define DOCS_MEMBER_MAX ((int64_t)256 << 20)

/** True when name looks like an archive or compressed file libarchive should
 * open (.tar .tgz .tar.gz .tar.xz .txz .tar.bz2 .xz .gz .bz2). */
bool build_is_archive_name(const char *name);

/** Total on-disk size of the inputs (files, directory trees, archives), for
 * ETA. Unreadable entries count 0 (reading them reports the error). */
int64_t docs_input_bytes(const build_inputs *in);

/** Reads every input in order and feeds the sink.
 * @return 0, or -1 with err set: unreadable path, truncated or corrupt
 *         archive (names the archive and member), malformed JSONL line or a
 *         missing/non-string text field (names FILE:LINE), or the sink's error. */
int docs_read(const build_inputs *in, const doc_sink *sink, kf_err *err);

/** Reads the documents of a nested archive handed to doc_sink.member (data,
 * size; name for messages; in: the input it belongs to) into sink, exactly as
 * docs_read would have read them in line. sink->member and sink->progress
 * are not used. Thread-safe (no shared state).
 * @return 0, or -1 with err set as docs_read. */
int docs_read_member(const build_input *in, const char *name, const void *data, size_t size,
                     const doc_sink *sink, kf_err *err);

#endif
