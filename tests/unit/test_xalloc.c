#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

Test(strbuf, append_u64_writes_the_decimal_as_printf_would)
{
    const uint64_t values[] = {0, 7, 10, 443, 65535, 1234567890123ull, UINT64_MAX};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        sl_strbuf_t a = {0}, b = {0};
        sl_strbuf_append_str(&a, "n=");
        sl_strbuf_append_u64(&a, values[i]);
        sl_strbuf_appendf(&b, "n=%llu", (unsigned long long)values[i]);
        char *x = sl_strbuf_finish(&a), *y = sl_strbuf_finish(&b);
        cr_assert_str_eq(x, y);
        free(x);
        free(y);
    }
}

Test(strbuf, a_reserved_buffer_grows_once_and_is_a_string_before_any_append)
{
    sl_strbuf_t b = {0};
    sl_strbuf_reserve(&b, 1000);
    cr_assert_geq(b.cap, 1001);
    cr_assert_str_eq(b.data, "");
    char *before = b.data;
    for (int i = 0; i < 100; i++)
        sl_strbuf_append(&b, "0123456789", 10);
    cr_assert_eq(b.data, before, "1 000 bytes fit in what was reserved");
    cr_assert_eq(b.len, 1000);
    char *s = sl_strbuf_finish(&b);
    cr_assert_eq(strlen(s), 1000);
    free(s);
}
