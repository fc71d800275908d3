/* The recorded provider streams of ../shared/fixtures/streams, for the unit tests. */
#ifndef TEST_FIXTURE_H
#define TEST_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * The bytes of fixture name (SLUICE_FIXTURES, which meson sets, else the
 * shared/ beside the checkout), NUL-terminated; *len (may be NULL) gets the
 * length. The caller frees the result. Fails the test when it cannot be read.
 */
static inline char *
fixture_read(const char *name, size_t *len)
{
    const char *dir = getenv("SLUICE_FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir != NULL && *dir ? dir : "../shared/fixtures/streams", name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open fixture %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    cr_assert_geq(n, 0, "cannot size fixture %s", path);
    char *text = malloc((size_t)n + 1);
    cr_assert_not_null(text);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n, "cannot read fixture %s", path);
    fclose(f);
    text[n] = '\0';
    if (len != NULL)
        *len = (size_t)n;
    return text;
}

#endif
