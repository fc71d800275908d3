/* Zones for tests: read from tzdata (/usr/share/zoneinfo; scripts/setup installs it) and parsed by core/tz.c.
 */
#ifndef TEST_ZONE_H
#define TEST_ZONE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/tz.h"

#define ZONEINFO "/usr/share/zoneinfo"

/* The bytes of a file (caller frees), NULL when it cannot be read. */
static inline char *
test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

/* The zone named name ("Europe/Berlin"); the test fails when tzdata lacks it. Free with sl_tz_free. */
static inline sl_tz_t *
test_zone(const char *name)
{
    char path[512], err[128] = "";
    int path_len = snprintf(path, sizeof path, ZONEINFO "/%s", name);
    cr_assert(path_len > 0 && (size_t)path_len < sizeof path, "zone name too long: %s", name);
    size_t len;
    char *bytes = test_read_file(path, &len);
    cr_assert_not_null(bytes, "%s: tzdata is not installed (scripts/setup)", path);
    sl_tz_t *tz = sl_tz_parse_tzif(bytes, len, err, sizeof err);
    free(bytes);
    cr_assert_not_null(tz, "%s: %s", name, err);
    return tz;
}

#endif
