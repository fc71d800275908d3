#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

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
