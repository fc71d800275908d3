/* h2o's HTTP/1 response head without printf: see head_sprintf.h for what and why. */
#include "head_sprintf.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "core/text.h"

/* glibc's fortified entry points (declared by <stdio.h> only under _FORTIFY_SOURCE). */
int __sprintf_chk(char *restrict s, int flag, size_t slen, const char *restrict format, ...);
int __vsprintf_chk(char *restrict s, int flag, size_t slen, const char *restrict format, va_list ap);

static char *
put_str(char *dst, const char *s)
{
    size_t n = strlen(s);
    memcpy(dst, s, n);
    return dst + n;
}

/* %d */
static char *
put_int(char *dst, int v)
{
    if (v < 0) {
        *dst++ = '-';
        return dst + sl_u64_decimal(dst, (uint64_t)(-(int64_t)v));
    }
    return dst + sl_u64_decimal(dst, (uint64_t)v);
}

#define PUT_LIT(dst, lit) (memcpy((dst), (lit), sizeof(lit) - 1), (dst) + sizeof(lit) - 1)

size_t
sl_head_format(char *dst, int status, const char *reason, const char *date, const char *connection,
               bool has_length, size_t length)
{
    char *p = PUT_LIT(dst, "HTTP/1.1 ");
    p = put_int(p, status);
    *p++ = ' ';
    p = put_str(p, reason);
    p = PUT_LIT(p, "\r\nDate: ");
    p = put_str(p, date);
    p = PUT_LIT(p, "\r\nConnection: ");
    p = put_str(p, connection);
    p = PUT_LIT(p, "\r\n");
    if (has_length) {
        p = PUT_LIT(p, "Content-Length: ");
        p += sl_u64_decimal(p, length);
        p = PUT_LIT(p, "\r\n");
    }
    *p = '\0';
    return (size_t)(p - dst);
}

/* The bytes sl_head_format will write for these strings, NUL included. */
static size_t
head_bound(const char *reason, const char *date, const char *connection)
{
    return SL_HEAD_FIXED_MAX + strlen(reason) + strlen(date) + strlen(connection);
}

int
__sprintf_chk(char *restrict s, int flag, size_t slen, const char *restrict format, ...)
{
    va_list ap;
    va_start(ap, format);
    bool plain = strcmp(format, SL_H2O_HEAD_FORMAT) == 0;
    if (plain || strcmp(format, SL_H2O_HEAD_FORMAT_LENGTH) == 0) {
        va_list args;
        va_copy(args, ap);
        int status = va_arg(args, int);
        const char *reason = va_arg(args, const char *);
        const char *date = va_arg(args, const char *);
        const char *connection = va_arg(args, const char *);
        size_t length = plain ? 0 : va_arg(args, size_t);
        va_end(args);
        /*
         * A NULL string (glibc prints "(null)") and a destination that might be too small (glibc's check
         * fails as it would have) go to glibc.
         */
        bool strings = reason != NULL && date != NULL && connection != NULL;
        if (strings && (slen == SIZE_MAX || head_bound(reason, date, connection) <= slen)) {
            va_end(ap);
            return (int)sl_head_format(s, status, reason, date, connection, !plain, length);
        }
    }
    int n = __vsprintf_chk(s, flag, slen, format, ap);
    va_end(ap);
    return n;
}
