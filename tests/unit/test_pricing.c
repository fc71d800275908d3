/*
 * What a request costs and what it is assumed to use before the upstream
 * says (core/pricing.h): prices by model glob in config order, micro-dollars
 * rounded up so a cost limit is never undercounted, cache tokens at the
 * input price when no cache price is set, and the estimate of behaviour.md §7.
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "core/pricing.h"

/* USD per million tokens, as micro-dollars per million tokens. */
#define USD(x) ((int64_t)((x)*1000000))

static const sl_price_t pricing[] = {
    {.model_glob = "claude-sonnet-*",
     .input = USD(3),
     .output = USD(15),
     .cache_read = USD(0.3),
     .cache_write = USD(3.75)},
    {.model_glob = "claude-*", .input = USD(1), .output = USD(5)},
};

Test(pricing, the_first_matching_glob_in_config_order_sets_the_price)
{
    cr_assert_eq(sl_price_for(pricing, 2, "claude-sonnet-4"), &pricing[0]);
    cr_assert_eq(sl_price_for(pricing, 2, "claude-haiku-4"), &pricing[1]);
    cr_assert_null(sl_price_for(pricing, 2, "gpt-5"));
    cr_assert_null(sl_price_for(NULL, 0, "claude-sonnet-4"));
}

Test(pricing, cost_counts_every_kind_of_token_at_its_price)
{
    sl_usage_t u = {.input = 1000, .output = 200, .cache_read = 10000, .cache_write = 400};
    /* 1000 x 3 + 200 x 15 + 10000 x 0.3 + 400 x 3.75 = 3000 + 3000 + 3000 + 1500 micro-dollars. */
    cr_assert_eq(sl_cost_micros(&pricing[0], &u), 10500);
    cr_assert_eq(sl_cost_micros(NULL, &u), 0, "no price, no cost");
}

Test(pricing, cache_tokens_without_a_cache_price_count_at_the_input_price)
{
    sl_usage_t u = {.cache_read = 1000, .cache_write = 1000};
    cr_assert_eq(sl_cost_micros(&pricing[1], &u), 2000);
}

Test(pricing, a_fraction_of_a_micro_dollar_rounds_up)
{
    sl_usage_t one = {.input = 1};
    cr_assert_eq(sl_cost_micros(&pricing[0], &one), 3, "3 micro-dollars per token");
    const sl_price_t cheap = {.model_glob = "*", .input = 1, .output = 1};
    cr_assert_eq(sl_cost_micros(&cheap, &one), 1, "a millionth of a micro-dollar still counts as one");
    sl_usage_t none = {0};
    cr_assert_eq(sl_cost_micros(&cheap, &none), 0);
}

Test(pricing, huge_usage_saturates_instead_of_wrapping)
{
    const sl_price_t dear = {.model_glob = "*", .input = INT64_MAX, .output = INT64_MAX};
    sl_usage_t u = {.input = INT64_MAX, .output = INT64_MAX};
    cr_assert_eq(sl_cost_micros(&dear, &u), INT64_MAX);
    sl_usage_t negative = {.input = -5, .output = 10};
    cr_assert_eq(sl_cost_micros(&pricing[1], &negative), 50, "a negative count costs nothing");
}

Test(pricing, the_estimate_is_bytes_over_four_and_max_tokens_or_4096)
{
    sl_usage_t e = sl_usage_estimate(401, true, 256);
    cr_assert_eq(e.input, 101, "rounded up");
    cr_assert_eq(e.output, 256);
    e = sl_usage_estimate(400, false, 0);
    cr_assert_eq(e.input, 100);
    cr_assert_eq(e.output, SL_ESTIMATE_DEFAULT_OUTPUT);
    cr_assert_eq(SL_ESTIMATE_DEFAULT_OUTPUT, 4096);
    cr_assert_eq(sl_usage_estimate(0, true, 0).output, 0, "max_tokens 0 is taken as given");
    cr_assert_eq(e.cache_read + e.cache_write, 0);
}
