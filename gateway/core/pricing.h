/*
 * What a request costs (config.md `pricing`): USD per million tokens by
 * model glob, kept as integer micro-dollars per million tokens, applied to
 * normalised token usage. Used by cost limits (behaviour.md §7) and the
 * request DB.
 */
#ifndef SL_PRICING_H
#define SL_PRICING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"
#include "core/stream_class.h"

/* The first price whose glob matches model, in config order; NULL when none does. */
const sl_price_t *sl_price_for(const sl_price_t *pricing, size_t n, const char *model);

/*
 * The cost of usage at price, in micro-dollars, rounded up (a limit is
 * never undercounted). A missing cache price counts those tokens at the
 * input price. 0 when price is NULL.
 */
int64_t sl_cost_micros(const sl_price_t *price, const sl_usage_t *usage);

/*
 * A request's usage before the upstream reports any (behaviour.md §7):
 * input = body bytes / 4 (rounded up), output = max_tokens when the
 * request sets it, else 4096.
 */
sl_usage_t sl_usage_estimate(size_t body_len, bool has_max_tokens, int64_t max_tokens);

/* Without max_tokens, the output a request is assumed to ask for. */
#define SL_ESTIMATE_DEFAULT_OUTPUT 4096

#endif
