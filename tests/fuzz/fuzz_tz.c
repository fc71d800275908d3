/*
 * Time zones from outside bytes: a TZif file (input starting "TZif") or
 * else a POSIX TZ string (the input up to its first NUL). Whatever the
 * bytes, the parser returns a zone or an error; a zone converts every
 * instant of its range to a local time that converts back to an instant at
 * or before it, and local times in and past the calendar to instants.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/tz.h"
#include "fuzz_check.h"

static void
exercise(const sl_tz_t *tz, int64_t seed)
{
    CHECK(tz->n_types >= 1 && tz->min_utoff <= tz->max_utoff);
    static const int64_t instants[] = {
        0, -1, 1774746000, 4102444800, -2208988800, SL_TZ_RANGE_SECS, -SL_TZ_RANGE_SECS};
    for (size_t i = 0; i <= sizeof(instants) / sizeof(instants[0]); i++) {
        int64_t t = i < sizeof(instants) / sizeof(instants[0]) ? instants[i] : seed % SL_TZ_RANGE_SECS;
        sl_tz_local_t l;
        CHECK(sl_tz_local(tz, t, &l));
        CHECK(l.month >= 1 && l.month <= 12 && l.mday >= 1 && l.mday <= 31 && l.wday >= 0 && l.wday <= 6);
        CHECK(l.utoff >= tz->min_utoff && l.utoff <= tz->max_utoff && strlen(l.abbr) < SL_TZ_ABBR_MAX);
        int64_t back;
        if (sl_tz_utc_of_local(tz, l.year, l.month, l.mday, l.hour * 3600 + l.min * 60 + l.sec, &back))
            CHECK(back <= t);
    }
    int64_t t;
    sl_tz_utc_of_local(tz, seed % 40000, seed % 29 - 7, seed % 71 - 20, seed % 200000 - 50000, &t);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t seed = 0;
    memcpy(&seed, data, size < sizeof(seed) ? size : sizeof(seed));
    seed = seed < 0 ? -(seed + 1) : seed;
    sl_tz_t *tz;
    if (size >= 4 && memcmp(data, "TZif", 4) == 0) {
        tz = sl_tz_parse_tzif(data, size, NULL, 0);
    } else {
        char *spec = malloc(size + 1);
        memcpy(spec, data, size);
        spec[size] = '\0';
        tz = sl_tz_parse_posix(spec, NULL, 0);
        free(spec);
    }
    if (tz != NULL)
        exercise(tz, seed);
    sl_tz_free(tz);
    return 0;
}
