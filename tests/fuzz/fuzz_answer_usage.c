/*
 * Usage from the tail of a whole answer: sl_answer_usage over arbitrary
 * bytes, for every dialect, on the whole input and on a suffix of it (a tail
 * may start anywhere). What a suffix reads, the whole tail reads too: both
 * are read backwards from the same end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/answer_usage.h"
#include "fuzz_check.h"

static bool
usage_sane(const sl_usage_t *u)
{
    return u->input >= 0 && u->output >= 0 && u->cache_read >= 0 && u->cache_write >= 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cut = data[0];
    const char *tail = (const char *)data + 1;
    size_t len = size - 1;
    if (cut > len)
        cut = len;
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        sl_usage_t whole = {-7, -7, -7, -7}, part = {-7, -7, -7, -7};
        bool got_whole = sl_answer_usage((sl_dialect_t)d, tail, len, &whole);
        if (got_whole)
            CHECK(usage_sane(&whole));
        else
            CHECK(whole.input == -7 && whole.output == -7 && whole.cache_read == -7 &&
                  whole.cache_write == -7);
        if (cut > 0) {
            bool got_part = sl_answer_usage((sl_dialect_t)d, tail + cut, len - cut, &part);
            if (got_part) {
                CHECK(usage_sane(&part));
                CHECK(got_whole && memcmp(&part, &whole, sizeof part) == 0);
            }
        }
    }
    return 0;
}
