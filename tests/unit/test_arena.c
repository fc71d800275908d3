/* The region allocator: zeroed, aligned, large blocks, one free. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "core/arena.h"

Test(arena, allocations_are_zeroed_and_aligned)
{
    sl_arena_t *a = sl_arena_new();
    for (size_t n = 1; n < 3000; n += 7) {
        unsigned char *p = sl_arena_alloc(a, n);
        cr_assert_eq((uintptr_t)p % _Alignof(max_align_t), 0);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(p[i], 0);
        memset(p, 0xab, n);
    }
    sl_arena_free(a);
}

Test(arena, large_allocations_and_strings)
{
    sl_arena_t *a = sl_arena_new();
    char *big = sl_arena_alloc(a, 100000);
    memset(big, 'x', 100000);
    cr_assert_str_eq(sl_arena_strdup(a, "hello"), "hello");
    cr_assert_str_eq(sl_arena_strndup(a, "hello world", 5), "hello");
    sl_arena_free(a);
    sl_arena_free(NULL);
}
