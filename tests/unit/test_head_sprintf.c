#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "head_sprintf.h"

int __sprintf_chk(char *restrict s, int flag, size_t slen, const char *restrict format, ...);

static const char DATE[] = "Mon, 07 Dec 2026 15:04:05 GMT";

/* What glibc's printf writes for the format with the length. */
static void
expect_like_printf(int status, const char *reason, const char *connection, size_t length)
{
    char want[512], got[512];
    snprintf(want, sizeof(want), SL_H2O_HEAD_FORMAT_LENGTH, status, reason, DATE, connection, length);
    memset(got, 'x', sizeof(got));
    int n = __sprintf_chk(got, 1, sizeof(got), SL_H2O_HEAD_FORMAT_LENGTH, status, reason, DATE, connection,
                          length);
    cr_assert_str_eq(got, want);
    cr_assert_eq(n, (int)strlen(want));

    snprintf(want, sizeof(want), SL_H2O_HEAD_FORMAT, status, reason, DATE, connection);
    n = __sprintf_chk(got, 1, (size_t)-1, SL_H2O_HEAD_FORMAT, status, reason, DATE, connection);
    cr_assert_str_eq(got, want);
    cr_assert_eq(n, (int)strlen(want));
}

Test(head_sprintf, h2o_heads_are_written_as_printf_writes_them)
{
    expect_like_printf(200, "OK", "keep-alive", 215);
    expect_like_printf(100, "Continue", "close", 0);
    expect_like_printf(429, "Too Many Requests", "keep-alive", 1);
    expect_like_printf(999, "", "upgrade", 9);
    expect_like_printf(0, "OK", "keep-alive", 10);
    expect_like_printf(-1, "?", "", 1234567890);
    expect_like_printf(2147483647, "OK", "keep-alive", SIZE_MAX);
    expect_like_printf(-2147483647 - 1, "OK", "keep-alive", SIZE_MAX - 1);
}

Test(head_sprintf, the_formatter_returns_its_length_and_terminates)
{
    char buf[SL_HEAD_FIXED_MAX + 64];
    size_t n = sl_head_format(buf, 503, "Service Unavailable", DATE, "close", false, 0);
    cr_assert_eq(n, strlen(buf));
    cr_assert_str_eq(
        buf,
        "HTTP/1.1 503 Service Unavailable\r\nDate: Mon, 07 Dec 2026 15:04:05 GMT\r\nConnection: close\r\n");
}

Test(head_sprintf, a_null_string_is_written_as_glibc_writes_it)
{
    char want[256], got[256];
    const char *none = NULL;
    /* Called through a pointer: GCC would refuse the NULL %s it sees at compile time. */
    int (*volatile sprintf_chk)(char *, int, size_t, const char *, ...) = __sprintf_chk;
    int (*volatile snprintf_p)(char *, size_t, const char *, ...) = snprintf;
    snprintf_p(want, sizeof(want), SL_H2O_HEAD_FORMAT, 200, none, DATE, "close");
    cr_assert_eq(sprintf_chk(got, 1, sizeof(got), SL_H2O_HEAD_FORMAT, 200, none, DATE, "close"),
                 (int)strlen(want));
    cr_assert_str_eq(got, want);
}

Test(head_sprintf, other_formats_go_to_glibc)
{
    char buf[64];
    cr_assert_eq(__sprintf_chk(buf, 1, sizeof(buf), "%s=%05.1f|%x", "k", 2.25, 255u), 10);
    cr_assert_str_eq(buf, "k=002.2|ff");
    /* A prefix of h2o's format is another format. */
    cr_assert_eq(__sprintf_chk(buf, 1, sizeof(buf), "HTTP/1.1 %d %s\r\n", 200, "OK"), 17);
    cr_assert_str_eq(buf, "HTTP/1.1 200 OK\r\n");
}

/*
 * ASan intercepts __vsprintf_chk with a check of its own (it reports the overflow and exits instead of
 * glibc's abort): the build without sanitizers pins glibc's.
 */
#ifdef __SANITIZE_ADDRESS__
#define UNDER_ASAN true
#else
#define UNDER_ASAN false
#endif

/* A destination known to be too small keeps glibc's fortify check: the process aborts. */
Test(head_sprintf, a_destination_too_small_fails_as_fortify_fails, .signal = SIGABRT, .disabled = UNDER_ASAN)
{
    /* Called through a pointer: GCC would refuse the overflow it sees at compile time. */
    int (*volatile sprintf_chk)(char *, int, size_t, const char *, ...) = __sprintf_chk;
    char buf[32];
    sprintf_chk(buf, 1, sizeof(buf), SL_H2O_HEAD_FORMAT_LENGTH, 200, "OK", DATE, "keep-alive", (size_t)215);
}
