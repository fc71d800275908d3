/* The spellings of outcome.h's lists. */
#include "outcome.h"

#include <string.h>

#define SL_SLUG_ROW(name, slug) slug,

static const char *const row_outcome_slugs[] = {SL_REQUEST_OUTCOMES(SL_SLUG_ROW)};
static const char *const hop_outcome_slugs[] = {SL_HOP_OUTCOMES(SL_SLUG_ROW)};
static const char *const skip_slugs[] = {"", SL_SKIP_REASONS(SL_SLUG_ROW)};

#undef SL_SLUG_ROW

_Static_assert(sizeof(row_outcome_slugs) / sizeof(row_outcome_slugs[0]) == SL_ROW_OUTCOME_COUNT,
               "one slug each");
_Static_assert(sizeof(hop_outcome_slugs) / sizeof(hop_outcome_slugs[0]) == SL_HOP_OUTCOME_COUNT,
               "one slug each");
_Static_assert(sizeof(skip_slugs) / sizeof(skip_slugs[0]) == SL_SKIP_COUNT, "one slug each");

static const char *
slug_at(const char *const *slugs, int count, int i)
{
    return i >= 0 && i < count ? slugs[i] : "";
}

static int
index_of(const char *const *slugs, int count, const char *slug)
{
    for (int i = 0; slug != NULL && i < count; i++) {
        if (slugs[i][0] != '\0' && strcmp(slugs[i], slug) == 0)
            return i;
    }
    return -1;
}

const char *
sl_row_outcome_slug(sl_row_outcome_t outcome)
{
    return slug_at(row_outcome_slugs, SL_ROW_OUTCOME_COUNT, (int)outcome);
}

const char *
sl_hop_outcome_slug(sl_hop_outcome_t outcome)
{
    return slug_at(hop_outcome_slugs, SL_HOP_OUTCOME_COUNT, (int)outcome);
}

const char *
sl_skip_slug(sl_skip_t skip)
{
    return slug_at(skip_slugs, SL_SKIP_COUNT, (int)skip);
}

int
sl_row_outcome_from_slug(const char *slug)
{
    return index_of(row_outcome_slugs, SL_ROW_OUTCOME_COUNT, slug);
}

int
sl_hop_outcome_from_slug(const char *slug)
{
    return index_of(hop_outcome_slugs, SL_HOP_OUTCOME_COUNT, slug);
}

int
sl_skip_from_slug(const char *slug)
{
    return index_of(skip_slugs, SL_SKIP_COUNT, slug);
}

bool
sl_skip_may_pass(sl_skip_t skip)
{
    return skip == SL_SKIP_THROTTLED || skip == SL_SKIP_BUSY || skip == SL_SKIP_WINDOW_FULL ||
           skip == SL_SKIP_PERIOD_USED_UP;
}
