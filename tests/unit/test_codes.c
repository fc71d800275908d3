/* The message-code table: slugs unique and well-formed, lookups agree, the catalog file matches. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/codes.h"

Test(codes, slugs_are_unique_and_well_formed)
{
    for (int i = 0; i < SL_CODE_COUNT; i++) {
        const char *slug = sl_code_slug((sl_code_t)i);
        cr_assert(sl_code_slug_is_well_formed(slug), "malformed slug '%s'", slug);
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(slug, sl_code_slug((sl_code_t)j), "slug '%s' appears twice", slug);
    }
}

Test(codes, well_formed_check_bites)
{
    cr_assert(sl_code_slug_is_well_formed("gw.upstream.paused"));
    cr_assert_not(sl_code_slug_is_well_formed("gw"));
    cr_assert_not(sl_code_slug_is_well_formed("gw..x"));
    cr_assert_not(sl_code_slug_is_well_formed("Gw.x"));
    cr_assert_not(sl_code_slug_is_well_formed("gw.x."));
    cr_assert_not(sl_code_slug_is_well_formed("gw.x-y"));
}

Test(codes, slug_lookup_round_trips)
{
    for (int i = 0; i < SL_CODE_COUNT; i++) {
        sl_code_t c;
        cr_assert_eq(sl_code_from_slug(sl_code_slug((sl_code_t)i), &c), 0);
        cr_assert_eq(c, (sl_code_t)i);
    }
    sl_code_t c;
    cr_assert_eq(sl_code_from_slug("gw.no_such_code", &c), -1);
}

Test(codes, statuses_and_texts_are_sane)
{
    for (int i = 0; i < SL_CODE_COUNT; i++) {
        int status = sl_code_status((sl_code_t)i);
        cr_assert(status == 0 || (status >= 400 && status <= 599), "%s: status %d", sl_code_slug(i), status);
        const char *t = sl_code_template((sl_code_t)i);
        cr_assert_gt(strlen(t), 0);
        int depth = 0;
        for (const char *p = t; *p; p++) {
            depth += (*p == '{') - (*p == '}');
            cr_assert(depth == 0 || depth == 1, "%s: unbalanced braces", sl_code_slug(i));
        }
        cr_assert_eq(depth, 0, "%s: unbalanced braces", sl_code_slug(i));
        /* Answers to clients say who is talking. */
        if (status != 0)
            cr_assert(strncmp(t, "sluice: ", 8) == 0, "%s: client text must start with 'sluice: '",
                      sl_code_slug(i));
    }
}

Test(codes, catalog_file_lists_every_code)
{
    const char *path = getenv("SLUICE_CATALOG");
    cr_assert_not_null(path, "SLUICE_CATALOG is set by meson");
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    size_t entries = 0;
    for (const char *p = text; (p = strstr(p, "\"code\": ")) != NULL; p++)
        entries++;
    cr_assert_eq(entries, SL_CODE_COUNT);
    for (int i = 0; i < SL_CODE_COUNT; i++) {
        char needle[128];
        snprintf(needle, sizeof(needle), "\"code\": \"%s\", \"status\": %d", sl_code_slug(i),
                 sl_code_status(i));
        cr_assert(strstr(text, needle) != NULL, "catalog lacks %s", needle);
    }
}
