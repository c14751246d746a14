/* common/strbuf.c — see strbuf.h. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

void strbuf_put(strbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->s = kf_realloc(b->s, cap);
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void strbuf_puts(strbuf *b, const char *s) { strbuf_put(b, s, strlen(s)); }

void strbuf_printf(strbuf *b, const char *fmt, ...) {
    for (;;) { /* format into the free space; grow and retry when it does not fit */
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        KF_CHECK(n >= 0, "strbuf_printf: bad format %s", fmt);
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->s = kf_realloc(b->s, b->cap);
    }
}
