/* The upstream registry's operator entry points: pause_provider and resume_provider. */
#include <criterion/criterion.h>
#include <string.h>

#include "test_config_env.h"
#include "upstream.h"

static sl_config_t *
two_providers(void)
{
    static const char yaml[] = "providers:\n"
                               "  - {name: a, protocol: anthropic, base_url: \"http://127.0.0.1:9/\"}\n"
                               "  - {name: b, protocol: anthropic, base_url: \"https://example.com/\"}\n";
    sl_config_result_t res = sl_config_parse(yaml, strlen(yaml), NULL, &test_env);
    cr_assert_eq(res.errors.len, 0);
    sl_config_t *c = res.config;
    res.config = NULL;
    sl_config_result_free(&res);
    return c;
}

static sl_upstreams_t *reg;
static sl_upstream_t **bound;
static sl_config_t *config;

static void
setup(void)
{
    config = two_providers();
    reg = sl_upstreams_new();
    bound = sl_upstreams_bind(reg, config);
    cr_assert_not_null(bound);
}

static void
teardown(void)
{
    free(bound);
    sl_upstreams_free(reg);
    sl_config_free(config);
}

TestSuite(upstreams_operator, .init = setup, .fini = teardown);

Test(upstreams_operator, a_pause_shows_as_manual_until_its_end_then_resume_frees_it)
{
    sl_throttle_t after;
    bool changed = false;
    cr_assert(sl_upstreams_pause(reg, "a", 61000, 1000, &after, &changed));
    cr_assert(changed);
    cr_assert_eq(sl_throttle_kind(&after), SL_THROTTLE_MANUAL);
    cr_assert_eq(sl_throttle_recovery_ms(&bound[0]->throttle, 2000), 61000);
    /* Only the named upstream is paused. */
    cr_assert_eq(sl_throttle_kind(&bound[1]->throttle), SL_THROTTLE_FREE);

    cr_assert(sl_upstreams_resume(reg, "a", 2000, &after, &changed));
    cr_assert(changed);
    cr_assert_eq(sl_throttle_kind(&after), SL_THROTTLE_FREE);
    cr_assert(sl_upstreams_resume(reg, "a", 3000, &after, &changed));
    cr_assert_not(changed, "resuming a free upstream changes nothing");
}

Test(upstreams_operator, a_pause_without_an_end_lasts_until_resumed)
{
    sl_throttle_t after;
    bool changed = false;
    cr_assert(sl_upstreams_pause(reg, "b", 0, 1000, &after, &changed));
    cr_assert(changed);
    cr_assert_eq(sl_throttle_recovery_ms(&bound[1]->throttle, 999999), SL_THROTTLE_NEVER);
    cr_assert(sl_upstreams_resume(reg, "b", 5000, &after, &changed));
    cr_assert_eq(sl_throttle_kind(&after), SL_THROTTLE_FREE);
}

Test(upstreams_operator, a_resume_ends_a_running_429_pause_into_one_probe)
{
    sl_retry_params_t params = {0};
    sl_throttle_on_429(&bound[0]->throttle, 1000, -1, 60, &params);
    sl_throttle_t after;
    bool changed = false;
    cr_assert(sl_upstreams_resume(reg, "a", 2000, &after, &changed));
    cr_assert(changed);
    cr_assert_eq(sl_throttle_kind(&after), SL_THROTTLE_PROBING);
    cr_assert_eq(after.consecutive, 1, "the streak is kept");
}

Test(upstreams_operator, an_unknown_name_is_refused_and_nothing_changes)
{
    sl_throttle_t after = {0};
    bool changed = false;
    cr_assert_not(sl_upstreams_pause(reg, "nope", 61000, 1000, &after, &changed));
    cr_assert_not(sl_upstreams_resume(reg, "nope", 1000, &after, &changed));
    cr_assert_not(changed);
    cr_assert_eq(sl_throttle_kind(&bound[0]->throttle), SL_THROTTLE_FREE);
    cr_assert_eq(sl_throttle_kind(&bound[1]->throttle), SL_THROTTLE_FREE);
}
