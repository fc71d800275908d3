/* The upstream registry: upstreams bound from a config, found by name (pause_provider, resume_provider). */
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
    sl_config_t *c = test_config_of(yaml);
    cr_assert_not_null(c);
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

TestSuite(upstreams, .init = setup, .fini = teardown);

Test(upstreams, an_upstream_is_found_by_its_name_and_an_unknown_name_finds_none)
{
    cr_assert_eq(sl_upstreams_find(reg, "a"), bound[0]);
    cr_assert_eq(sl_upstreams_find(reg, "b"), bound[1]);
    cr_assert_null(sl_upstreams_find(reg, "nope"));
    cr_assert_null(sl_upstreams_find(reg, "A"), "names are exact");
}
