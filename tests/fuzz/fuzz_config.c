/*
 * The YAML config loader on arbitrary text, in the fake environment of the
 * unit tests (variables, zones and readable files are tables): whatever the
 * text, a result comes back and everything in it is freed.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../unit/test_config_env.h"
#include "config.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_config_result_t res = sl_config_parse((const char *)data, size, "fuzz.yaml", &test_env);
    if (res.config != NULL) {
        char *summary = sl_config_summary(res.config, res.config->gateway.port, res.config->control.port);
        free(summary);
    }
    sl_config_result_free(&res);
    return 0;
}
