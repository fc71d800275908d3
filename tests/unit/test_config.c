/* The config loader: every kind of problem, with its path and line; defaults; the embedded default. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "test_config_env.h"

#define ZONEINFO "/usr/share/zoneinfo"

static sl_config_result_t res;

static void
teardown(void)
{
    sl_config_result_free(&res);
}

TestSuite(config, .fini = teardown);

static sl_config_result_t
parse(const char *yaml)
{
    return sl_config_parse(yaml, strlen(yaml), "test.yaml", &test_env);
}

static const sl_msg_t *
find(const sl_msgs_t *msgs, sl_code_t code)
{
    for (size_t i = 0; i < msgs->len; i++) {
        if (msgs->items[i].code == code)
            return &msgs->items[i];
    }
    return NULL;
}

/* Asserts the result has exactly one error, with this code, path and line. */
/* The abbreviation of the config's zone at instant t. */
static const char *
abbr_at(const sl_config_t *c, int64_t t)
{
    sl_tz_local_t l;
    cr_assert_not_null(c->tz);
    cr_assert(sl_tz_local(c->tz, t, &l));
    return l.abbr;
}

static const sl_msg_t *
assert_single_error(sl_code_t code, const char *path, const char *line)
{
    for (size_t i = 0; i < res.errors.len; i++)
        cr_log_info("error: %s [%s]", res.errors.items[i].text, sl_code_slug(res.errors.items[i].code));
    cr_assert_eq(res.errors.len, 1, "expected 1 error, got %zu", res.errors.len);
    const sl_msg_t *m = &res.errors.items[0];
    cr_assert_eq(m->code, code, "code %s, expected %s", sl_code_slug(m->code), sl_code_slug(code));
    cr_assert_str_eq(sl_msg_arg(m, "path"), path);
    cr_assert_str_eq(sl_msg_arg(m, "line"), line);
    return m;
}

static void
assert_no_errors(void)
{
    for (size_t i = 0; i < res.errors.len; i++)
        cr_log_error("unexpected: %s", res.errors.items[i].text);
    cr_assert_eq(res.errors.len, 0);
}

Test(config, empty_file_gives_defaults)
{
    res = parse("");
    assert_no_errors();
    const sl_config_t *c = res.config;
    cr_assert_str_eq(c->gateway.bind, "127.0.0.1");
    cr_assert_eq(c->gateway.port, 8080);
    cr_assert_eq(c->control.port, 8081);
    cr_assert_null(c->control.key);
    cr_assert_eq(c->failover.wait_secs, 120);
    cr_assert_eq(c->failover.failures_to_pause, 3);
    cr_assert_eq(c->failover.pause_secs, 60);
    cr_assert_eq(c->failover.max_pause_secs, 600);
    cr_assert_eq(c->failover.rate_limit_max_pause_secs, 3600);
    cr_assert_eq(c->failover.no_balance_pause_secs, 1800);
    cr_assert_eq(c->failover.quota_pause_secs, 3600);
    cr_assert_eq(c->failover.idle_timeout_secs, 300);
    cr_assert_eq(c->failover.connect_timeout_secs, 10);
    cr_assert_eq(c->failover.total_timeout_secs, 3600);
    cr_assert_eq(c->failover.first_token_secs, 0, "no first-token hedge unless asked for");
    cr_assert_eq(c->max_body_bytes, 33554432);
    cr_assert_eq(c->max_waiting_bytes, 1073741824);
    cr_assert_eq(c->retention_days, 30);
    cr_assert_eq(c->shutdown_grace_secs, 30);
    cr_assert(c->redact);
    cr_assert_str_eq(c->store_path, "sluice.db");
    cr_assert_null(c->timezone);
    cr_assert_str_eq(abbr_at(c, 1774746000), "UTC", "the system's zone (the test environment's is UTC)");
    cr_assert_not(c->has_routes);
    cr_assert_not_null(find(&res.warnings, SL_CODE_CONFIG_NO_PROVIDERS));
}

static const char full_example[] =
    "version: 1\n"
    "listen:\n"
    "  gateway: {bind: 127.0.0.1, port: 8080, allow_from: [127.0.0.0/8, '::1']}\n"
    "  control: {bind: 127.0.0.1, port: 8081, key: \"${RELAY_KEY}\"}\n"
    "clients:\n"
    "  - name: alice\n"
    "    key: \"${ALICE_KEY}\"\n"
    "    limits:\n"
    "      - {per: minute, requests: 30}\n"
    "      - {per: day, cost: 20}\n"
    "providers:\n"
    "  - name: anthropic\n"
    "    protocol: anthropic\n"
    "    base_url: https://api.anthropic.com/\n"
    "    key: \"${ANTHROPIC_KEY}\"\n"
    "    models: [\"claude-*\"]\n"
    "    model_map: {\"claude-sonnet-4\": \"claude-sonnet-4-20250514\"}\n"
    "    headers: {\"x-relay-team\": \"${TEAM}\"}\n"
    "    max_concurrent: 64\n"
    "    limits:\n"
    "      - {per: minute, every: 5, tokens: 10000000}\n"
    "  - name: relay\n"
    "    protocol: anthropic\n"
    "    base_url: https://relay.example/prefix\n"
    "    key: \"${RELAY_KEY}\"\n"
    "  - name: openai-a\n"
    "    protocol: openai-chat\n"
    "  - name: openai-b\n"
    "    protocol: openai-chat\n"
    "    disabled: true\n"
    "routes:\n"
    "  - match: \"claude-*\"\n"
    "    failover: [anthropic, relay]\n"
    "  - match: \"gpt-*\"\n"
    "    load_balance: [openai-a, {name: openai-b, weight: 3}]\n"
    "failover:\n"
    "  wait_secs: 0\n"
    "timezone: Europe/Berlin\n"
    "pricing:\n"
    "  \"claude-sonnet-*\": {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}\n"
    "store: {path: /var/lib/sluice/sluice.db, retention_days: 7}\n"
    "security: {redact: false}\n"
    "limits: {max_body_bytes: 1048576, max_waiting_bytes: 0}\n"
    "shutdown_grace_secs: 5\n";

Test(config, full_example_loads_every_section)
{
    res = parse(full_example);
    assert_no_errors();
    cr_assert_eq(res.warnings.len, 0);
    const sl_config_t *c = res.config;
    cr_assert_eq(c->gateway.n_allow_from, 2);
    cr_assert_str_eq(c->control.key, "relay-secret-123456");
    cr_assert_eq(c->n_clients, 1);
    cr_assert_str_eq(c->clients[0].key, "alice-key-0001");
    cr_assert_eq(c->clients[0].n_limits, 2);
    cr_assert_eq(c->clients[0].limits[0].per, SL_PER_MINUTE);
    cr_assert_eq(c->clients[0].limits[0].measure, SL_MEASURE_REQUESTS);
    cr_assert_eq(c->clients[0].limits[0].amount, 30);
    cr_assert_eq(c->clients[0].limits[1].measure, SL_MEASURE_COST);
    cr_assert_eq(c->clients[0].limits[1].amount, 20000000, "cost is integer micro-dollars");

    cr_assert_eq(c->n_providers, 4);
    const sl_provider_t *a = &c->providers[0];
    cr_assert_str_eq(a->base_url, "https://api.anthropic.com", "trailing slash trimmed");
    cr_assert_str_eq(a->key, "sk-ant-api03-aaaaaaaaaaaaaaaaaaaabcd");
    cr_assert_eq(a->n_model_map, 1);
    cr_assert_str_eq(a->model_map[0].value, "claude-sonnet-4-20250514");
    cr_assert_str_eq(a->headers[0].value, "infra", "${VAR} expanded in headers");
    cr_assert_eq(a->max_concurrent, 64);
    cr_assert_eq(a->limits[0].every, 5);
    cr_assert_eq(a->limits[0].amount, 10000000);
    cr_assert_str_eq(c->providers[1].base_url, "https://relay.example/prefix", "a relay's prefix is kept");
    cr_assert_str_eq(c->providers[2].base_url, "https://api.openai.com/v1",
                     "default base URL of the dialect");
    cr_assert(c->providers[3].disabled);

    cr_assert(c->has_routes);
    cr_assert_eq(c->n_routes, 2);
    cr_assert_eq(c->routes[0].kind, SL_ROUTE_FAILOVER);
    cr_assert_eq(c->routes[0].members[1].provider, 1);
    cr_assert_eq(c->routes[1].kind, SL_ROUTE_LOAD_BALANCE);
    cr_assert_eq(c->routes[1].members[0].weight, 1);
    cr_assert_eq(c->routes[1].members[1].weight, 3);

    cr_assert_eq(c->failover.wait_secs, 0, "0 = never wait or retry");
    cr_assert_eq(c->failover.pause_secs, 60, "defaults fill the rest of a section");
    cr_assert_str_eq(c->timezone, "Europe/Berlin");
    cr_assert_str_eq(abbr_at(c, 1774745999), "CET", "the zone is read at load");
    cr_assert_str_eq(abbr_at(c, 1774746000), "CEST");
    cr_assert_eq(c->n_pricing, 1);
    cr_assert_eq(c->pricing[0].input, 3000000);
    cr_assert_eq(c->pricing[0].cache_read, 300000);
    cr_assert_eq(c->pricing[0].cache_write, 3750000);
    cr_assert_eq(c->retention_days, 7);
    cr_assert_not(c->redact);
    cr_assert_eq(c->max_body_bytes, 1048576);
    cr_assert_eq(c->shutdown_grace_secs, 5);
}

Test(config, unknown_root_field_names_path_and_line)
{
    res = parse("version: 1\nshutdown_grace_secs: 3\nbogus: 1\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNKNOWN_FIELD, "bogus", "3");
    cr_assert_str_eq(sl_msg_arg(m, "field"), "bogus");
}

Test(config, unknown_nested_field_suggests_the_near_name)
{
    res = parse("providers:\n"
                "  - {name: a, protocol: anthropic}\n"
                "  - name: b\n"
                "    protocol: anthropic\n"
                "    limts: []\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNKNOWN_FIELD, "providers[1].limts", "5");
    cr_assert(strstr(m->text, "did you mean 'limits'") != NULL, "%s", m->text);
    cr_assert_str_eq(m->text, "providers[1].limts (line 5): unknown field 'limts'; did you mean 'limits'?");
}

Test(config, wrong_type_for_a_number)
{
    res = parse("listen:\n  gateway: {port: eighty}\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "listen.gateway.port", "2");
    cr_assert_str_eq(sl_msg_arg(m, "expected"), "an integer");
}

Test(config, quoted_number_is_a_string_not_a_number)
{
    res = parse("shutdown_grace_secs: \"5\"\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "shutdown_grace_secs", "1");
}

Test(config, wrong_type_for_a_list_and_a_mapping)
{
    res = parse("providers: 5\nfailover: [1]\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "expected"), "a list");
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[1], "expected"), "a mapping");
}

Test(config, null_where_a_string_is_needed)
{
    res = parse("providers:\n  - name:\n    protocol: anthropic\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "providers[0].name", "2");
}

Test(config, booleans_are_true_or_false_only)
{
    res = parse("security: {redact: yes}\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "security.redact", "1");
}

Test(config, wait_secs_range_is_0_to_600)
{
    res = parse("failover: {wait_secs: 600}\n");
    assert_no_errors();
    cr_assert_eq(res.config->failover.wait_secs, 600);
    sl_config_result_free(&res);

    res = parse("failover:\n  wait_secs: 601\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_OUT_OF_RANGE, "failover.wait_secs", "2");
    cr_assert_str_eq(m->text, "failover.wait_secs (line 2): 601 is out of range 0..600");
    cr_assert_eq(res.config->failover.wait_secs, 120, "a bad value leaves the default");
}

Test(config, negative_and_huge_numbers_are_out_of_range)
{
    res = parse("failover: {pause_secs: -5, idle_timeout_secs: 99999999999999999999999}\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_OUT_OF_RANGE);
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_OUT_OF_RANGE);
}

Test(config, unknown_enum_value_lists_the_allowed_ones)
{
    res = parse("providers:\n  - name: a\n    protocol: antropic\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNKNOWN_VALUE, "providers[0].protocol", "3");
    cr_assert_str_eq(sl_msg_arg(m, "allowed"), "anthropic, openai-chat, openai-responses, gemini, bedrock");
}

Test(config, missing_required_fields)
{
    res = parse("providers:\n  - models: [x]\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_MISSING_FIELD);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "field"), "name");
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[1], "field"), "protocol");
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "path"), "providers[0]");
}

Test(config, duplicate_provider_names)
{
    res = parse("providers:\n"
                "  - {name: a, protocol: anthropic}\n"
                "  - {name: a, protocol: gemini}\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_DUPLICATE_NAME, "providers[1].name", "3");
    cr_assert_str_eq(sl_msg_arg(m, "first_line"), "2");
    cr_assert_eq(res.config->n_providers, 1);
}

Test(config, duplicate_client_names_and_keys)
{
    res = parse("clients:\n"
                "  - {name: alice, key: k1}\n"
                "  - {name: alice, key: k2}\n"
                "  - {name: bob, key: k1}\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_DUPLICATE_NAME);
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_DUPLICATE_CLIENT_KEY);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[1], "other"), "alice");
}

Test(config, duplicate_mapping_key)
{
    res = parse("failover:\n  wait_secs: 10\n  wait_secs: 20\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_DUPLICATE_KEY, "failover.wait_secs", "3");
    cr_assert_str_eq(sl_msg_arg(m, "first_line"), "2");
    cr_assert_eq(res.config->failover.wait_secs, 10, "the first value stands");
}

Test(config, route_naming_an_unknown_provider)
{
    res = parse("providers:\n  - {name: a, protocol: anthropic}\n"
                "routes:\n  - match: \"claude-*\"\n    failover: [a, b]\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNKNOWN_PROVIDER, "routes[0].failover[1]", "5");
    cr_assert_str_eq(sl_msg_arg(m, "name"), "b");
}

Test(config, routes_before_providers_still_resolve)
{
    res =
        parse("routes:\n  - {match: \"*\", failover: [a]}\nproviders:\n  - {name: a, protocol: anthropic}\n");
    assert_no_errors();
    cr_assert_eq(res.config->routes[0].members[0].provider, 0);
}

Test(config, route_needs_exactly_one_member_list)
{
    res = parse("providers:\n  - {name: a, protocol: anthropic}\n"
                "routes:\n"
                "  - {match: x, failover: [a], load_balance: [a]}\n"
                "  - {match: y}\n"
                "  - {match: z, failover: []}\n");
    cr_assert_eq(res.errors.len, 3);
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(res.errors.items[i].code, SL_CODE_CONFIG_ROUTE_MEMBERS);
}

Test(config, route_context_fallback_lists_providers)
{
    res = parse("providers:\n  - {name: a, protocol: openai-chat}\n  - {name: b, protocol: openai-chat}\n"
                "  - {name: big, protocol: openai-chat, model_map: {gpt-x: gpt-x-1m}}\n"
                "routes:\n  - {match: \"gpt-*\", failover: [a, b], context_fallback: [big]}\n"
                "  - {match: \"*\", failover: [a]}\n");
    assert_no_errors();
    cr_assert_eq(res.config->routes[0].n_context_fallback, 1);
    cr_assert_eq(res.config->routes[0].context_fallback[0].provider, 2);
    cr_assert_eq(res.config->routes[1].n_context_fallback, 0, "without it, nothing changes");
}

Test(config, first_token_secs_is_0_to_600_and_a_route_may_set_its_own)
{
    res = parse("providers:\n  - {name: a, protocol: openai-chat}\n  - {name: b, protocol: openai-chat}\n"
                "routes:\n  - {match: \"gpt-*\", failover: [a, b], first_token_secs: 8}\n"
                "  - {match: \"o-*\", failover: [a, b], first_token_secs: 0}\n"
                "  - {match: \"*\", failover: [a, b]}\n"
                "failover: {first_token_secs: 600}\n");
    assert_no_errors();
    cr_assert_eq(res.config->failover.first_token_secs, 600);
    cr_assert(res.config->routes[0].has_first_token_secs);
    cr_assert_eq(res.config->routes[0].first_token_secs, 8);
    cr_assert(res.config->routes[1].has_first_token_secs, "0 turns the hedge off for this route");
    cr_assert_eq(res.config->routes[1].first_token_secs, 0);
    cr_assert_not(res.config->routes[2].has_first_token_secs, "without it, failover's applies");
    sl_config_result_free(&res);

    res = parse("failover:\n  first_token_secs: 601\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_OUT_OF_RANGE, "failover.first_token_secs", "2");
    cr_assert_str_eq(m->text, "failover.first_token_secs (line 2): 601 is out of range 0..600");
    sl_config_result_free(&res);

    res = parse("providers:\n  - {name: a, protocol: openai-chat}\n"
                "routes:\n  - {match: \"*\", failover: [a], first_token_secs: -1}\n");
    assert_single_error(SL_CODE_CONFIG_OUT_OF_RANGE, "routes[0].first_token_secs", "4");
}

Test(config, route_context_fallback_names_known_providers_once)
{
    res = parse("providers:\n  - {name: a, protocol: openai-chat}\n  - {name: big, protocol: openai-chat}\n"
                "routes:\n  - match: x\n    failover: [a]\n    context_fallback: [big, ghost, big]\n"
                "  - {match: y, failover: [a], context_fallback: big}\n");
    cr_assert_eq(res.errors.len, 3);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_UNKNOWN_PROVIDER);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "path"), "routes[0].context_fallback[1]");
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_ROUTE_DUPLICATE_MEMBER);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[1], "path"), "routes[0].context_fallback[2]");
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[2], "path"), "routes[1].context_fallback");
}

Test(config, control_metrics_is_keyed_or_open)
{
    res = parse("listen: {control: {metrics: open}}\n");
    assert_no_errors();
    cr_assert(res.config->control.metrics_open);
    sl_config_result_free(&res);
    res = parse("listen: {control: {port: 9000}}\n");
    assert_no_errors();
    cr_assert_not(res.config->control.metrics_open, "keyed by default");
    sl_config_result_free(&res);
    res = parse("listen: {control: {metrics: public}}\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNKNOWN_VALUE, "listen.control.metrics", "1");
    cr_assert_str_eq(sl_msg_arg(m, "allowed"), "keyed, open");
}

Test(config, telemetry_names_a_collector_a_service_and_a_sample)
{
    res = parse("version: 1\n");
    assert_no_errors();
    cr_assert_null(res.config->otlp_endpoint, "no traces unless asked");
    sl_config_result_free(&res);
    res = parse("telemetry: {otlp_endpoint: \"http://127.0.0.1:4318\"}\n");
    assert_no_errors();
    cr_assert_str_eq(res.config->otlp_endpoint, "http://127.0.0.1:4318");
    cr_assert_str_eq(res.config->service_name, "sluice");
    cr_assert_eq(res.config->trace_sample_ppm, 1000000, "every trace by default");
    sl_config_result_free(&res);
    res = parse(
        "telemetry: {otlp_endpoint: \"https://otel.example.com/v1/traces\", service_name: edge, sample: "
        "0.25}\n");
    assert_no_errors();
    cr_assert_str_eq(res.config->service_name, "edge");
    cr_assert_eq(res.config->trace_sample_ppm, 250000);
}

Test(config, telemetry_refuses_a_bad_endpoint_or_sample)
{
    res = parse("telemetry: {otlp_endpoint: \"grpc://collector:4317\"}\n");
    assert_single_error(SL_CODE_CONFIG_BAD_URL, "telemetry.otlp_endpoint", "1");
    sl_config_result_free(&res);
    res = parse("telemetry: {otlp_endpoint: \"http://c:4318\",\n  sample: 1.5}\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_OUT_OF_RANGE, "telemetry.sample", "2");
    cr_assert_str_eq(sl_msg_arg(m, "max"), "1");
    sl_config_result_free(&res);
    res = parse("telemetry: {otlp_endpoint: \"http://c:4318\", sample: half}\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "telemetry.sample", "1");
    sl_config_result_free(&res);
    res = parse("telemetry: {sample: 0.5}\n");
    m = assert_single_error(SL_CODE_CONFIG_MISSING_FIELD, "telemetry", "1");
    cr_assert_str_eq(sl_msg_arg(m, "field"), "otlp_endpoint");
}

Test(config, route_mixing_protocols_is_a_warning)
{
    res = parse("providers:\n  - {name: a, protocol: anthropic}\n  - {name: b, protocol: gemini}\n"
                "routes:\n  - {match: x, failover: [a, b]}\n");
    assert_no_errors();
    const sl_msg_t *w = find(&res.warnings, SL_CODE_CONFIG_ROUTE_MIXED_PROTOCOLS);
    cr_assert_not_null(w);
    cr_assert_str_eq(sl_msg_arg(w, "protocols"), "anthropic, gemini");
}

Test(config, unset_variable_is_named)
{
    res = parse("providers:\n  - name: a\n    protocol: anthropic\n    key: \"pre-${NOPE_NOT_SET}\"\n");
    const sl_msg_t *m = assert_single_error(SL_CODE_CONFIG_UNSET_VARIABLE, "providers[0].key", "4");
    cr_assert_str_eq(sl_msg_arg(m, "variable"), "NOPE_NOT_SET");
}

Test(config, variables_expand_inside_text_and_empty_counts_as_set)
{
    res = parse("clients:\n  - {name: a, key: \"x-${ALICE_KEY}-${EMPTY}-$HOME\"}\n");
    assert_no_errors();
    cr_assert_str_eq(res.config->clients[0].key, "x-alice-key-0001--$HOME", "only ${NAME} is a reference");
}

Test(config, malformed_variable_reference)
{
    res = parse("clients:\n  - {name: a, key: \"${1BAD}\"}\n");
    assert_single_error(SL_CODE_CONFIG_BAD_VARIABLE, "clients[0].key", "2");
}

Test(config, variables_are_not_expanded_outside_secrets)
{
    res = parse("store: {path: \"${HOME}/x.db\"}\n");
    assert_no_errors();
    cr_assert_str_eq(res.config->store_path, "${HOME}/x.db");
}

Test(config, limits_with_every)
{
    res = parse("clients:\n  - name: a\n    key: k\n    limits:\n"
                "      - {per: minute, every: 5, tokens: 100}\n"
                "      - {per: hour, every: 2, requests: 10}\n"
                "      - {per: month, cost: 0.5}\n");
    assert_no_errors();
    const sl_client_t *c = &res.config->clients[0];
    cr_assert_eq(c->n_limits, 3);
    cr_assert_eq(c->limits[0].every, 5);
    cr_assert_eq(c->limits[1].per, SL_PER_HOUR);
    cr_assert_eq(c->limits[1].every, 2);
    cr_assert_eq(c->limits[2].every, 1);
    cr_assert_eq(c->limits[2].amount, 500000);
}

Test(config, limit_problems)
{
    res = parse("clients:\n  - name: a\n    key: k\n    limits:\n"
                "      - {per: day, every: 2, requests: 10}\n"
                "      - {per: minute, requests: 1, tokens: 2}\n"
                "      - {per: minute}\n"
                "      - {per: fortnight, requests: 1}\n"
                "      - {per: minute, every: 0, requests: 1}\n"
                "      - {per: minute, cost: 1.0000001}\n");
    cr_assert_eq(res.errors.len, 6);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_LIMIT_EVERY);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "line"), "5");
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_LIMIT_MEASURE);
    cr_assert_eq(res.errors.items[2].code, SL_CODE_CONFIG_LIMIT_MEASURE);
    cr_assert_eq(res.errors.items[3].code, SL_CODE_CONFIG_UNKNOWN_VALUE);
    cr_assert_eq(res.errors.items[4].code, SL_CODE_CONFIG_OUT_OF_RANGE);
    cr_assert_eq(res.errors.items[5].code, SL_CODE_CONFIG_WRONG_TYPE);
    cr_assert_eq(res.config->n_clients, 1);
    cr_assert_eq(res.config->clients[0].n_limits, 0, "no bad entry is half-kept");
}

Test(config, every_problem_is_reported_in_file_order)
{
    res = parse("routes:\n  - {match: x, failover: [ghost]}\n"
                "version: 1\n"
                "listen: {gateway: {port: 99999}}\n"
                "providers:\n  - {name: a, protocol: nope}\n"
                "failover: {wait_secs: 700}\n"
                "extra: true\n");
    cr_assert_eq(res.errors.len, 5);
    const char *lines[] = {"2", "4", "6", "7", "8"};
    for (size_t i = 0; i < 5; i++)
        cr_assert_str_eq(sl_msg_arg(&res.errors.items[i], "line"), lines[i], "error %zu", i);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_UNKNOWN_PROVIDER);
}

Test(config, yaml_syntax_error_has_a_line)
{
    res = parse("version: 1\nproviders:\n  - name: a\n   protocol: [\n");
    cr_assert_eq(res.errors.len, 1);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_YAML_SYNTAX);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "line"), "4");
    cr_assert_not_null(res.config, "a config with defaults still comes back");
}

Test(config, bedrock_without_key_or_aws_takes_the_aws_variables_once_at_load)
{
    static const char yaml[] =
        "providers:\n"
        "  - {name: env, protocol: bedrock, region: us-east-1}\n"
        "  - name: file\n    protocol: bedrock\n    region: us-east-1\n"
        "    aws: {access_key_id: AKIAFILE, secret_access_key: file-secret}\n"
        "  - {name: keyed, protocol: bedrock, region: us-east-1, key: \"${RELAY_KEY}\"}\n"
        "  - {name: other, protocol: anthropic}\n";
    const char *vars[][2] = {{"AWS_ACCESS_KEY_ID", "AKIAENV"},
                             {"AWS_SECRET_ACCESS_KEY", "env-secret"},
                             {"AWS_SESSION_TOKEN", "env-token"},
                             {NULL, NULL}};
    sl_config_env_t env = test_env;
    env.ctx = (void *)vars;
    res = sl_config_parse(yaml, strlen(yaml), NULL, &env);
    assert_no_errors();
    const sl_provider_t *p = res.config->providers;
    cr_assert_str_eq(p[0].aws_access_key_id, "AKIAENV");
    cr_assert_str_eq(p[0].aws_secret_access_key, "env-secret");
    cr_assert_str_eq(p[0].aws_session_token, "env-token");
    /* The copies are the config's: the variables may change or go after the load. */
    cr_assert_neq(p[0].aws_secret_access_key, vars[1][1]);
    cr_assert_str_eq(p[1].aws_access_key_id, "AKIAFILE", "the file's aws wins");
    cr_assert_str_eq(p[1].aws_secret_access_key, "file-secret");
    cr_assert_null(p[1].aws_session_token, "the file's aws is taken whole");
    cr_assert_null(p[2].aws_access_key_id, "a key is sent as Bearer: nothing to sign with");
    cr_assert_null(p[3].aws_access_key_id, "only bedrock signs");
    sl_config_result_free(&res);

    /* Without an access key id and a secret there are no credentials; an empty token is none. */
    const char *partial[][2] = {{"AWS_ACCESS_KEY_ID", "AKIAENV"}, {"AWS_SESSION_TOKEN", "t"}, {NULL, NULL}};
    env.ctx = (void *)partial;
    res = sl_config_parse(yaml, strlen(yaml), NULL, &env);
    cr_assert_null(res.config->providers[0].aws_access_key_id);
    cr_assert_null(res.config->providers[0].aws_secret_access_key);
    cr_assert_null(res.config->providers[0].aws_session_token);
    sl_config_result_free(&res);
    const char *no_token[][2] = {{"AWS_ACCESS_KEY_ID", "AKIAENV"},
                                 {"AWS_SECRET_ACCESS_KEY", "s"},
                                 {"AWS_SESSION_TOKEN", ""},
                                 {NULL, NULL}};
    env.ctx = (void *)no_token;
    res = sl_config_parse(yaml, strlen(yaml), NULL, &env);
    cr_assert_str_eq(res.config->providers[0].aws_access_key_id, "AKIAENV");
    cr_assert_null(res.config->providers[0].aws_session_token);
}

Test(config, unsupported_version)
{
    res = parse("version: 2\n");
    assert_single_error(SL_CODE_CONFIG_UNSUPPORTED_VERSION, "version", "1");
}

Test(config, bedrock_region_and_aws)
{
    res = parse("providers:\n"
                "  - name: br\n    protocol: bedrock\n    region: eu-west-1\n"
                "    aws: {access_key_id: \"${ALICE_KEY}\", secret_access_key: \"${BOB_KEY}\"}\n"
                "  - name: br2\n    protocol: bedrock\n"
                "  - name: an\n    protocol: anthropic\n    region: us-east-1\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_MISSING_FIELD);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[0], "field"), "region");
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_NOT_FOR_PROTOCOL);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[1], "path"), "providers[2].region");
    const sl_provider_t *p = &res.config->providers[0];
    cr_assert_str_eq(p->base_url, "https://bedrock-runtime.eu-west-1.amazonaws.com");
    cr_assert_str_eq(p->aws_access_key_id, "alice-key-0001");
    cr_assert_null(p->aws_session_token);
}

Test(config, models_default_to_everything)
{
    res = parse("providers:\n  - {name: a, protocol: gemini}\n");
    assert_no_errors();
    cr_assert_eq(res.config->providers[0].n_models, 1);
    cr_assert_str_eq(res.config->providers[0].models[0], "*");
    cr_assert_str_eq(res.config->providers[0].base_url, "https://generativelanguage.googleapis.com");
}

Test(config, bad_urls_names_and_headers)
{
    res = parse("providers:\n"
                "  - {name: a, protocol: anthropic, base_url: \"ftp://x\"}\n"
                "  - {name: \"b c\", protocol: anthropic}\n"
                "  - {name: d, protocol: anthropic, headers: {\"bad header\": v}}\n");
    cr_assert_eq(res.errors.len, 3);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_BAD_URL);
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_BAD_NAME);
    cr_assert_eq(res.errors.items[2].code, SL_CODE_CONFIG_BAD_HEADER);
}

Test(config, listen_addresses_and_ranges)
{
    res = parse("listen:\n  gateway: {bind: localhost6, allow_from: [10.0.0.0/8, 10.0.0.0/33, fe80::/10]}\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_BAD_ADDRESS);
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_BAD_CIDR);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[1], "path"), "listen.gateway.allow_from[1]");
    cr_assert(sl_config_errors_under(&res.errors, "listen.gateway"));
    cr_assert_not(sl_config_errors_under(&res.errors, "listen.control"));
}

Test(config, remote_control_needs_tls)
{
    res = parse("listen:\n  control: {bind: 0.0.0.0}\n");
    assert_single_error(SL_CODE_CONFIG_CONTROL_REMOTE_WITHOUT_TLS, "listen.control.bind", "2");
    sl_config_result_free(&res);

    res = parse("listen:\n  control: {bind: 0.0.0.0, tls: {cert: /ok/c.pem, key: /ok/k.pem}}\n");
    assert_no_errors();
    cr_assert_str_eq(res.config->control.tls_cert, "/ok/c.pem");
}

Test(config, tls_needs_cert_and_key_that_exist)
{
    res = parse("listen:\n"
                "  gateway: {tls: {cert: /ok/c.pem}}\n"
                "  control: {tls: {cert: /ok/c.pem, key: /missing/k.pem}}\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_TLS_INCOMPLETE);
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_FILE_MISSING);
    cr_assert_str_eq(sl_msg_arg(&res.errors.items[1], "path"), "listen.control.tls.key");
    cr_assert_null(res.config->gateway.tls_cert, "no half TLS setting is kept");
}

Test(config, timezone_must_be_known)
{
    static const char *const bad[] = {"timezone: Mars/Olympus\n", "timezone: ../../etc/passwd\n",
                                      "timezone: /usr/share/zoneinfo/UTC\n", "timezone: ''\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        res = parse(bad[i]);
        assert_single_error(SL_CODE_CONFIG_UNKNOWN_TIMEZONE, "timezone", "1");
        cr_assert_null(res.config->timezone, "%s", bad[i]);
        cr_assert_str_eq(abbr_at(res.config, 1774746000), "UTC", "%s: the system's zone stays", bad[i]);
        sl_config_result_free(&res);
    }
}

Test(config, the_system_zone_is_tz_when_it_names_one_else_the_systems)
{
    static const struct {
        const char *tz, *summer, *winter;
    } rows[] = {
        {"Europe/Berlin", "CEST", "CET"},
        {":Europe/Berlin", "CEST", "CET"},
        {"<+0530>-5:30", "+0530", "+0530"},
        {"CET-1CEST,M3.5.0,M10.5.0/3", "CEST", "CET"},
        {"Nowhere/Zone", "UTC", "UTC"}, /* neither a zone nor a TZ string: the system's */
        {"", "UTC", "UTC"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *vars[][2] = {{"TZ", rows[i].tz}, {NULL, NULL}};
        sl_config_env_t env = test_env;
        env.ctx = (void *)vars;
        res = sl_config_parse("", 0, NULL, &env);
        assert_no_errors();
        cr_assert_str_eq(abbr_at(res.config, 1780272000), rows[i].summer, "TZ=%s", rows[i].tz);
        cr_assert_str_eq(abbr_at(res.config, 1767225600), rows[i].winter, "TZ=%s", rows[i].tz);
        sl_config_result_free(&res);
    }
}

Test(config, a_config_that_did_not_load_still_has_a_zone)
{
    res = parse("timezone: Europe/Berlin\nproviders: [\n");
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_YAML_SYNTAX);
    cr_assert_str_eq(abbr_at(res.config, 1774746000), "UTC");
    sl_config_result_free(&res);
    res = sl_config_load_file("/nonexistent/sluice.yaml", &test_env);
    cr_assert_str_eq(abbr_at(res.config, 1774746000), "UTC");
}

Test(config, the_system_environment_reads_zones_by_name_path_and_its_own)
{
    const sl_config_env_t *env = sl_config_env_system();
    static const char *const names[] = {"Europe/Berlin", ZONEINFO "/Asia/Kolkata", NULL};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t len = 0;
        char *bytes = env->read_zone(env->ctx, names[i], &len);
        cr_assert_not_null(bytes, "%s", names[i] ? names[i] : "/etc/localtime");
        cr_assert(len > 44 && memcmp(bytes, "TZif", 4) == 0);
        free(bytes);
    }
    size_t len;
    cr_assert_null(env->read_zone(env->ctx, "Mars/Olympus", &len));
}

Test(config, max_pause_below_pause_is_rejected)
{
    res = parse("failover:\n  pause_secs: 120\n  max_pause_secs: 60\n");
    assert_single_error(SL_CODE_CONFIG_PAUSE_ORDER, "failover.max_pause_secs", "3");
}

Test(config, non_scalar_key)
{
    res = parse("? [a, b]\n: 1\n");
    assert_single_error(SL_CODE_CONFIG_WRONG_TYPE, "", "1");
}

Test(config, pricing_needs_input_and_output)
{
    res = parse("pricing:\n  \"gpt-*\": {input: 1}\n  \"o3\": {input: 2, output: -1}\n");
    cr_assert_eq(res.errors.len, 2);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_MISSING_FIELD);
    cr_assert_eq(res.errors.items[1].code, SL_CODE_CONFIG_OUT_OF_RANGE);
    cr_assert_eq(res.config->n_pricing, 0);
}

Test(config, embedded_default_without_keys_has_no_providers)
{
    char *yaml = sl_config_default_yaml(&test_env);
    res = parse(yaml);
    free(yaml);
    assert_no_errors();
    cr_assert_eq(res.config->n_providers, 0);
    cr_assert_eq(res.config->gateway.port, 8080);
    cr_assert_eq(res.config->control.port, 8081);
}

Test(config, embedded_default_has_one_provider_per_dialect_with_a_key)
{
    static const char *const vars[][2] = {
        {"ANTHROPIC_API_KEY", "sk-ant-xyz"},  {"OPENAI_API_KEY", "sk-proj-abc"},
        {"AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"}, {"AWS_SECRET_ACCESS_KEY", "secret"},
        {"AWS_REGION", "eu-central-1"},       {NULL, NULL}};
    sl_config_env_t env = test_env;
    env.ctx = (void *)vars;
    char *yaml = sl_config_default_yaml(&env);
    cr_assert_null(strstr(yaml, "sk-ant-xyz"), "the text holds references, not secrets");
    res = sl_config_parse(yaml, strlen(yaml), NULL, &env);
    free(yaml);
    assert_no_errors();
    const sl_config_t *c = res.config;
    cr_assert_null(c->source_path);
    cr_assert_eq(c->n_providers, 4);
    cr_assert_str_eq(c->providers[0].name, "anthropic");
    cr_assert_str_eq(c->providers[0].key, "sk-ant-xyz");
    cr_assert_eq(c->providers[1].protocol, SL_DIALECT_OPENAI_CHAT);
    cr_assert_eq(c->providers[2].protocol, SL_DIALECT_OPENAI_RESPONSES);
    cr_assert_eq(c->providers[3].protocol, SL_DIALECT_BEDROCK);
    cr_assert_str_eq(c->providers[3].base_url, "https://bedrock-runtime.eu-central-1.amazonaws.com");
}

Test(config, load_file_reports_unreadable_and_oversized_files)
{
    res = sl_config_load_file("/nonexistent/sluice.yaml", &test_env);
    cr_assert_eq(res.errors.len, 1);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_FILE_UNREADABLE);
    sl_config_result_free(&res);

    char path[] = "/tmp/sluice-test-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    static char chunk[65536];
    memset(chunk, '#', sizeof(chunk));
    for (int i = 0; i < SL_CONFIG_MAX_FILE_BYTES / (int)sizeof(chunk) + 1; i++)
        cr_assert_eq(write(fd, chunk, sizeof(chunk)), (ssize_t)sizeof(chunk));
    close(fd);
    res = sl_config_load_file(path, &test_env);
    unlink(path);
    cr_assert_eq(res.errors.len, 1);
    cr_assert_eq(res.errors.items[0].code, SL_CODE_CONFIG_FILE_TOO_LARGE);
}

Test(config, load_file_records_its_path)
{
    char path[] = "/tmp/sluice-test-XXXXXX";
    int fd = mkstemp(path);
    const char text[] = "failover: {wait_secs: 30}\n";
    cr_assert_eq(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    res = sl_config_load_file(path, &test_env);
    unlink(path);
    assert_no_errors();
    cr_assert_str_eq(res.config->source_path, path);
    cr_assert_eq(res.config->failover.wait_secs, 30);
}

Test(config, summary_names_providers_and_addresses)
{
    res = parse(full_example);
    char *s = sl_config_summary(res.config, 8080, 8081);
    cr_assert(strstr(s, "4 providers: anthropic (anthropic), relay (anthropic)") != NULL, "%s", s);
    cr_assert(strstr(s, "gateway 127.0.0.1:8080") != NULL, "%s", s);
    cr_assert(strstr(s, "sk-ant") == NULL, "no secret in the summary");
    free(s);
    /* --port and --control-port moved them: the line shows where sluice listens. */
    s = sl_config_summary(res.config, 18080, 18081);
    cr_assert(strstr(s, "gateway 127.0.0.1:18080") != NULL && strstr(s, "control 127.0.0.1:18081") != NULL,
              "%s", s);
    free(s);
}

Test(config, aliases_and_deep_nesting_do_not_crash)
{
    res = parse("a: &a [*a]\nproviders: &p [{name: x, protocol: anthropic, models: *p}]\n");
    cr_assert_geq(res.errors.len, 1);
}

Test(config, a_control_endpoint_off_loopback_needs_tls)
{
    res = parse("listen:\n"
                "  control: {bind: 0.0.0.0, port: 8081}\n");
    assert_single_error(SL_CODE_CONFIG_CONTROL_REMOTE_WITHOUT_TLS, "listen.control.bind", "2");
    sl_config_result_free(&res);
    res = parse("listen:\n"
                "  control: {bind: \"::1\", port: 8081}\n");
    assert_no_errors();
    sl_config_result_free(&res);
    res = parse("listen:\n"
                "  control: {bind: 0.0.0.0, port: 8081, tls: {cert: /ok/c.pem, key: /ok/k.pem}}\n");
    assert_no_errors();
}
