/*
 * h2o's HTTP/1 response head, written without printf.
 *
 * h2o 2.2.5 writes the first lines of every HTTP/1 answer with one sprintf
 * (lib/http1.c, flatten_headers): "HTTP/1.1 %d %s\r\nDate: %s\r\nConnection:
 * %s\r\n", with "Content-Length: %zu\r\n" when the length is known. Debian
 * builds h2o with _FORTIFY_SOURCE, so the call is __sprintf_chk. glibc's
 * printf engine took about 2 200 instructions for it, 4 % of a proxied
 * request's (bench/README.md); plain copies take a tenth of that.
 *
 * This module interposes __sprintf_chk for the whole process (as read_budget.c
 * interposes read): a call with exactly one of those two formats is written by
 * sl_head_format, byte for byte what printf writes; every other call (and one
 * with a NULL string, which glibc prints as "(null)") goes on to glibc's
 * __vsprintf_chk, which also keeps the fortify check of the destination's
 * size. It is linked into the daemon itself (meson.build), not the gateway's
 * library.
 */
#ifndef SL_HEAD_SPRINTF_H
#define SL_HEAD_SPRINTF_H

#include <stdbool.h>
#include <stddef.h>

/* h2o 2.2.5's two formats (lib/http1.c), matched by content. */
#define SL_H2O_HEAD_FORMAT        "HTTP/1.1 %d %s\r\nDate: %s\r\nConnection: %s\r\n"
#define SL_H2O_HEAD_FORMAT_LENGTH SL_H2O_HEAD_FORMAT "Content-Length: %zu\r\n"

/* The most sl_head_format writes besides its strings (the terminating NUL included). */
#define SL_HEAD_FIXED_MAX (sizeof(SL_H2O_HEAD_FORMAT_LENGTH) + 11 + 20)

/*
 * Writes SL_H2O_HEAD_FORMAT's lines (or with has_length, SL_H2O_HEAD_FORMAT_LENGTH's) into dst and a NUL;
 * returns the length written, NUL not counted. dst must hold SL_HEAD_FIXED_MAX plus the strings' lengths.
 */
size_t sl_head_format(char *dst, int status, const char *reason, const char *date, const char *connection,
                      bool has_length, size_t length);

#endif
