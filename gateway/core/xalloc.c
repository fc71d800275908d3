#include "xalloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"

static void *
check(void *p)
{
    if (p == NULL) {
        fputs("sluice: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *
sl_xmalloc(size_t n)
{
    return check(malloc(n ? n : 1));
}

void *
sl_xcalloc(size_t count, size_t size)
{
    return check(calloc(count ? count : 1, size ? size : 1));
}

void *
sl_xrealloc(void *p, size_t n)
{
    return check(realloc(p, n ? n : 1));
}

char *
sl_xstrdup(const char *s)
{
    return sl_xstrndup(s, strlen(s));
}

char *
sl_xstrndup(const char *s, size_t n)
{
    char *d = sl_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static void
reserve(sl_strbuf_t *b, size_t extra)
{
    /* A size no memory can hold fails as an allocation would, before len + extra + 1 wraps around (at -O3,
     * GCC otherwise sees a SIZE_MAX copy on paths the callers rule out). */
    if (extra > SIZE_MAX / 2 - b->len)
        check(NULL);
    if (b->len + extra + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + extra + 1)
            cap *= 2;
        b->data = sl_xrealloc(b->data, cap);
        b->cap = cap;
    }
}

void
sl_strbuf_reserve(sl_strbuf_t *b, size_t n)
{
    reserve(b, n);
    b->data[b->len] = '\0';
}

void
sl_strbuf_append(sl_strbuf_t *b, const char *s, size_t n)
{
    reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void
sl_strbuf_append_str(sl_strbuf_t *b, const char *s)
{
    sl_strbuf_append(b, s, strlen(s));
}

void
sl_strbuf_append_u64(sl_strbuf_t *b, uint64_t v)
{
    char digits[SL_U64_DECIMAL_MAX];
    sl_strbuf_append(b, digits, sl_u64_decimal(digits, v));
}

void
sl_strbuf_appendf(sl_strbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *
sl_strbuf_finish(sl_strbuf_t *b)
{
    char *s = b->data != NULL ? b->data : sl_xstrdup("");
    memset(b, 0, sizeof(*b));
    return s;
}
