#include "core/pricing.h"

#include "core/route.h"

const sl_price_t *
sl_price_for(const sl_price_t *pricing, size_t n, const char *model)
{
    for (size_t i = 0; i < n; i++) {
        if (sl_glob_match(pricing[i].model_glob, model))
            return &pricing[i];
    }
    return NULL;
}

static __int128
part(int64_t tokens, int64_t micros_per_million)
{
    return tokens > 0 ? (__int128)tokens * micros_per_million : 0;
}

int64_t
sl_cost_micros(const sl_price_t *price, const sl_usage_t *usage)
{
    if (price == NULL)
        return 0;
    int64_t cache_read = price->cache_read > 0 ? price->cache_read : price->input;
    int64_t cache_write = price->cache_write > 0 ? price->cache_write : price->input;
    __int128 total = part(usage->input, price->input) + part(usage->output, price->output) +
                     part(usage->cache_read, cache_read) + part(usage->cache_write, cache_write);
    __int128 micros = (total + 999999) / 1000000;
    return micros > INT64_MAX ? INT64_MAX : (int64_t)micros;
}

sl_usage_t
sl_usage_estimate(size_t body_len, bool has_max_tokens, int64_t max_tokens)
{
    return (sl_usage_t){
        .input = (int64_t)((body_len + 3) / 4),
        .output = has_max_tokens && max_tokens >= 0 ? max_tokens : SL_ESTIMATE_DEFAULT_OUTPUT,
    };
}
