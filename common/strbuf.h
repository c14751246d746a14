/* common/strbuf.h — a growable NUL-terminated string, for text built piece
 * by piece before it is written in one go (config emission, checkpoint
 * metadata, the shards manifest).
 *
 * A zeroed strbuf ({0}) is empty with s == NULL; after any append s is a
 * malloc'd NUL-terminated string of len bytes, which the caller frees.
 * Allocation failure is fatal (kf_realloc).
 */
#ifndef KF_COMMON_STRBUF_H
#define KF_COMMON_STRBUF_H

#include <stddef.h>

typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

/** Appends the n bytes at s. */
void strbuf_put(strbuf *b, const char *s, size_t n);

/** Appends the NUL-terminated string s. */
void strbuf_puts(strbuf *b, const char *s);

/** Appends printf(fmt, ...). */
void strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
