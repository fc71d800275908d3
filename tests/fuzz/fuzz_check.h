/* What a fuzz target asserts: a broken property aborts, so libFuzzer and the corpus replay both catch it. */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include <stdlib.h>

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            abort();                                                                                         \
    } while (0)

#endif
