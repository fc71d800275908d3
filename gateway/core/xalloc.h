/*
 * Allocation that never returns NULL (out of memory aborts: a gateway that
 * cannot allocate a few bytes cannot answer anyone), and a small growable
 * string used to build texts.
 */
#ifndef SL_XALLOC_H
#define SL_XALLOC_H

#include <stddef.h>
#include <stdint.h>

void *sl_xmalloc(size_t n);
void *sl_xcalloc(size_t count, size_t size);
void *sl_xrealloc(void *p, size_t n);
char *sl_xstrdup(const char *s);
char *sl_xstrndup(const char *s, size_t n);

/* Zero-initialise; sl_strbuf_finish hands the NUL-terminated string to the caller. */
typedef struct {
    char *data;
    size_t len, cap;
} sl_strbuf_t;

void sl_strbuf_append(sl_strbuf_t *b, const char *s, size_t n);
/* Room for n more bytes (and the NUL) at once: a builder that knows its usual size grows once. */
void sl_strbuf_reserve(sl_strbuf_t *b, size_t n);
void sl_strbuf_appendf(sl_strbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The hot-path forms of appendf's "%s" and "%" PRIu64 (no format parsing). */
void sl_strbuf_append_str(sl_strbuf_t *b, const char *s);
void sl_strbuf_append_u64(sl_strbuf_t *b, uint64_t v);
/* Returns the built string (caller frees); never NULL. The buffer is empty afterwards. */
char *sl_strbuf_finish(sl_strbuf_t *b);

#endif
