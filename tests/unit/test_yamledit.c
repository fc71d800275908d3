/*
 * Minimal YAML edits: every result is compared whole against the original
 * with only the expected bytes changed, and read back through the loader.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/xalloc.h"
#include "yamledit.h"
#include "test_config_env.h"

static char err[256];

/* A config the loader accepts, with every kind of secret and both styles. */
static const char base[] = "# sluice config\n"
                           "version: 1\n"
                           "listen:\n"
                           "  gateway: {bind: 127.0.0.1, port: 8080}\n"
                           "  control: {bind: 127.0.0.1, port: 8081, key: \"ctl-secret-1\"}   # control key\n"
                           "clients:\n"
                           "  - name: alice\n"
                           "    key: \"${ALICE_KEY}\"\n"
                           "    limits:\n"
                           "      - {per: minute, requests: 30}\n"
                           "      - {per: day, cost: 20}\n"
                           "  - name: bob   # no limits\n"
                           "    key: bob-literal-key\n"
                           "providers:\n"
                           "  - name: anthropic\n"
                           "    protocol: anthropic          # the first one\n"
                           "    key: \"${ANTHROPIC_KEY}\"\n"
                           "    headers: {\"x-relay-team\": \"infra\", \"X-Api-Token\": 'tok-123'}\n"
                           "    limits:\n"
                           "      # per five minutes\n"
                           "      - {per: minute, every: 5, tokens: 10000000}\n"
                           "  - name: relay\n"
                           "    protocol: anthropic\n"
                           "    base_url: https://relay.example\n"
                           "    key: sk-relay-literal   # literal\n"
                           "\n"
                           "  # the flow one\n"
                           "  - {name: flowy, protocol: openai-chat, key: \"${RELAY_KEY}\"}\n"
                           "routes:\n"
                           "  - match: \"claude-*\"\n"
                           "    failover: [anthropic, relay]\n";

/* s with its one occurrence of old replaced by new (caller frees). */
static char *
replaced(const char *s, const char *old, const char *new)
{
    const char *at = strstr(s, old);
    cr_assert_not_null(at, "'%s' not in the text", old);
    cr_assert_null(strstr(at + 1, old), "'%s' twice in the text", old);
    sl_strbuf_t b = {0};
    sl_strbuf_append(&b, s, (size_t)(at - s));
    sl_strbuf_append(&b, new, strlen(new));
    sl_strbuf_append(&b, at + strlen(old), strlen(at + strlen(old)));
    return sl_strbuf_finish(&b);
}

/* Asserts out is s with old replaced by new, byte for byte; frees out. */
static void
assert_edit(char *out, const char *s, const char *old, const char *new)
{
    cr_assert_not_null(out, "failed: %s", err);
    char *want = replaced(s, old, new);
    cr_assert_str_eq(out, want);
    free(want);
    free(out);
}

static sl_config_result_t
load(const char *yaml)
{
    sl_config_result_t res = sl_config_parse(yaml, strlen(yaml), "test.yaml", &test_env);
    for (size_t i = 0; i < res.errors.len; i++)
        cr_log_error("%s", res.errors.items[i].text);
    cr_assert_eq(res.errors.len, 0, "the result does not load:\n%s", yaml);
    return res;
}

static const sl_provider_t *
provider(const sl_config_t *c, const char *name)
{
    for (size_t i = 0; i < c->n_providers; i++) {
        if (strcmp(c->providers[i].name, name) == 0)
            return &c->providers[i];
    }
    cr_assert_fail("no provider %s", name);
    return NULL;
}

static void
assert_limits(const sl_limit_t *got, size_t n_got, const sl_limit_t *want, size_t n_want)
{
    cr_assert_eq(n_got, n_want);
    for (size_t i = 0; i < n_want; i++) {
        cr_assert_eq(got[i].per, want[i].per, "limit %zu", i);
        cr_assert_eq(got[i].every, want[i].every ? want[i].every : 1, "limit %zu", i);
        cr_assert_eq(got[i].measure, want[i].measure, "limit %zu", i);
        cr_assert_eq(got[i].amount, want[i].amount, "limit %zu: %lld", i, (long long)got[i].amount);
    }
}

static char *
set_limits(const char *yaml, const char *section, const char *name, const sl_limit_t *limits, size_t n)
{
    return sl_yamledit_set_limits(yaml, strlen(yaml), section, name, limits, n, err, sizeof(err));
}

static const sl_limit_t two[] = {
    {SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 100},
    {SL_PER_DAY, 1, SL_MEASURE_COST, 500000},
};

static char *
redact(const char *yaml)
{
    return sl_yamledit_redact_secrets(yaml, strlen(yaml), err, sizeof(err));
}

static char *
restore(const char *new_yaml, const char *current)
{
    return sl_yamledit_restore_secrets(new_yaml, strlen(new_yaml), current, strlen(current), err,
                                       sizeof(err));
}

static char *
delete_paths(const char *yaml, const char *const *paths, size_t n)
{
    return sl_yamledit_delete_paths(yaml, strlen(yaml), paths, n, err, sizeof(err));
}

/* ---- set_limits ------------------------------------------------------------ */

Test(yamledit_limits, replaces_a_block_list_line_for_line_keeping_the_comment_above_it)
{
    char *out = set_limits(base, "providers", "anthropic", two, 2);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    const sl_provider_t *p = provider(res.config, "anthropic");
    assert_limits(p->limits, p->n_limits, two, 2);
    sl_config_result_free(&res);
    assert_edit(out, base, "      - {per: minute, every: 5, tokens: 10000000}\n",
                "      - {per: minute, requests: 100}\n"
                "      - {per: day, cost: 0.5}\n");
}

Test(yamledit_limits, adds_limits_after_the_last_entry_of_a_block_item)
{
    const sl_limit_t one[] = {{SL_PER_MINUTE, 5, SL_MEASURE_TOKENS, 10000000}};
    char *out = set_limits(base, "providers", "relay", one, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    const sl_provider_t *p = provider(res.config, "relay");
    assert_limits(p->limits, p->n_limits, one, 1);
    sl_config_result_free(&res);
    assert_edit(out, base, "    key: sk-relay-literal   # literal\n",
                "    key: sk-relay-literal   # literal\n"
                "    limits:\n"
                "      - {per: minute, every: 5, tokens: 10000000}\n");
}

Test(yamledit_limits, appends_a_flow_list_to_a_flow_item)
{
    const sl_limit_t one[] = {{SL_PER_HOUR, 1, SL_MEASURE_REQUESTS, 5}};
    char *out = set_limits(base, "providers", "flowy", one, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    const sl_provider_t *p = provider(res.config, "flowy");
    assert_limits(p->limits, p->n_limits, one, 1);
    sl_config_result_free(&res);
    assert_edit(out, base, "key: \"${RELAY_KEY}\"}",
                "key: \"${RELAY_KEY}\", limits: [{per: hour, requests: 5}]}");
}

Test(yamledit_limits, replaces_a_flow_list_with_a_flow_list)
{
    const char *yaml = "providers:\n"
                       "  - name: a\n"
                       "    protocol: anthropic\n"
                       "    limits: [{per: minute, requests: 1}]   # keep me\n"
                       "    max_concurrent: 4\n";
    char *out = set_limits(yaml, "providers", "a", two, 2);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    assert_limits(res.config->providers[0].limits, res.config->providers[0].n_limits, two, 2);
    cr_assert_eq(res.config->providers[0].max_concurrent, 4);
    sl_config_result_free(&res);
    assert_edit(out, yaml, "[{per: minute, requests: 1}]",
                "[{per: minute, requests: 100}, {per: day, cost: 0.5}]");
}

Test(yamledit_limits, replaces_a_clients_limits)
{
    const sl_limit_t one[] = {{SL_PER_WEEK, 1, SL_MEASURE_TOKENS, 7}};
    char *out = set_limits(base, "clients", "alice", one, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    assert_limits(res.config->clients[0].limits, res.config->clients[0].n_limits, one, 1);
    cr_assert_eq(res.config->clients[1].n_limits, 0);
    sl_config_result_free(&res);
    assert_edit(out, base, "      - {per: minute, requests: 30}\n      - {per: day, cost: 20}\n",
                "      - {per: week, tokens: 7}\n");
}

Test(yamledit_limits, an_unknown_name_or_section_is_an_error)
{
    cr_assert_null(set_limits(base, "providers", "nobody", two, 2));
    cr_assert_str_eq(err, "providers has no item named 'nobody'");
    cr_assert_null(set_limits(base, "clients", "anthropic", two, 2));
    cr_assert_str_eq(err, "clients has no item named 'anthropic'");
    cr_assert_null(set_limits("version: 1\n", "providers", "a", two, 2));
    cr_assert_str_eq(err, "the configuration has no providers");
}

Test(yamledit_limits, unparsable_yaml_and_bad_limits_are_errors)
{
    cr_assert_null(set_limits("providers: [\n  - name: a\n", "providers", "a", two, 2));
    cr_assert(strncmp(err, "line ", 5) == 0, "%s", err);
    const sl_limit_t zero[] = {{SL_PER_DAY, 1, SL_MEASURE_REQUESTS, 0}};
    cr_assert_null(set_limits(base, "providers", "relay", zero, 1));
    cr_assert_str_eq(err, "limits[0]: the amount must be at least 1");
}

Test(yamledit_limits, none_removes_a_block_entry_with_its_lines)
{
    char *out = set_limits(base, "providers", "anthropic", NULL, 0);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    cr_assert_eq(provider(res.config, "anthropic")->n_limits, 0);
    sl_config_result_free(&res);
    assert_edit(out, base,
                "    limits:\n"
                "      # per five minutes\n"
                "      - {per: minute, every: 5, tokens: 10000000}\n",
                "");
}

Test(yamledit_limits, none_removes_a_flow_entry_with_its_comma)
{
    const char *yaml = "providers:\n  - {name: a, limits: [{per: day, requests: 1}], protocol: anthropic}\n"
                       "  - {name: b, protocol: anthropic, limits: [{per: day, requests: 1}]}\n";
    char *out = set_limits(yaml, "providers", "a", NULL, 0);
    cr_assert_not_null(out, "%s", err);
    char *step = replaced(yaml, "a, limits: [{per: day, requests: 1}], protocol", "a, protocol");
    cr_assert_str_eq(out, step);
    free(out);
    out = set_limits(step, "providers", "b", NULL, 0);
    assert_edit(out, step, "anthropic, limits: [{per: day, requests: 1}]}", "anthropic}");
    free(step);
}

Test(yamledit_limits, none_on_an_item_without_limits_changes_nothing)
{
    char *out = set_limits(base, "providers", "relay", NULL, 0);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, base);
    free(out);
}

Test(yamledit_limits, cost_is_exact_usd_and_every_only_above_one)
{
    const sl_limit_t costs[] = {
        {SL_PER_DAY, 1, SL_MEASURE_COST, 20000000},  {SL_PER_DAY, 1, SL_MEASURE_COST, 500000},
        {SL_PER_DAY, 1, SL_MEASURE_COST, 1},         {SL_PER_MONTH, 1, SL_MEASURE_COST, 1234567},
        {SL_PER_HOUR, 0, SL_MEASURE_COST, 20500000}, {SL_PER_HOUR, 3, SL_MEASURE_REQUESTS, 9},
    };
    char *out = set_limits(base, "providers", "anthropic", costs, 6);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    const sl_provider_t *p = provider(res.config, "anthropic");
    assert_limits(p->limits, p->n_limits, costs, 6);
    sl_config_result_free(&res);
    assert_edit(out, base, "      - {per: minute, every: 5, tokens: 10000000}\n",
                "      - {per: day, cost: 20}\n"
                "      - {per: day, cost: 0.5}\n"
                "      - {per: day, cost: 0.000001}\n"
                "      - {per: month, cost: 1.234567}\n"
                "      - {per: hour, cost: 20.5}\n"
                "      - {per: hour, every: 3, requests: 9}\n");
}

Test(yamledit_limits, keeps_an_unusual_indentation_and_a_file_without_a_final_newline)
{
    const char *yaml = "providers:\n"
                       "- name: a\n"
                       "  protocol: anthropic\n"
                       "  limits:\n"
                       "  - {per: day, requests: 1}\n"
                       "- name: b\n"
                       "  protocol: anthropic";
    char *out = set_limits(yaml, "providers", "a", two, 2);
    assert_edit(out, yaml, "  - {per: day, requests: 1}\n",
                "  - {per: minute, requests: 100}\n  - {per: day, cost: 0.5}\n");
    out = set_limits(yaml, "providers", "b", two, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    assert_limits(res.config->providers[1].limits, res.config->providers[1].n_limits, two, 1);
    sl_config_result_free(&res);
    sl_strbuf_t want = {0};
    sl_strbuf_appendf(&want, "%s\n  limits:\n    - {per: minute, requests: 100}\n", yaml);
    cr_assert_str_eq(out, want.data);
    free(want.data);
    free(out);
}

Test(yamledit_limits, a_value_that_is_not_a_list_is_replaced_from_the_colon)
{
    const char *yaml = "providers:\n"
                       "  - name: a\n"
                       "    limits: |\n"
                       "      - {per: day, requests: 1}\n"
                       "    protocol: anthropic\n"
                       "  - name: b\n"
                       "    limits:   # a mapping\n"
                       "      per: day\n"
                       "      requests: 1\n"
                       "    protocol: anthropic\n";
    char *out = set_limits(yaml, "providers", "a", two, 1);
    char *step = replaced(yaml, " |\n      - {per: day, requests: 1}\n", " [{per: minute, requests: 100}]\n");
    cr_assert_str_eq(out, step);
    free(out);
    out = set_limits(step, "providers", "b", two, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    assert_limits(res.config->providers[1].limits, res.config->providers[1].n_limits, two, 1);
    sl_config_result_free(&res);
    assert_edit(out, step, "   # a mapping\n      per: day\n      requests: 1\n",
                " [{per: minute, requests: 100}]\n");
    free(step);
}

Test(yamledit_limits, a_null_value_becomes_a_flow_list)
{
    const char *yaml = "providers:\n  - name: a\n    limits:\n    protocol: anthropic\n";
    char *out = set_limits(yaml, "providers", "a", two, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    assert_limits(res.config->providers[0].limits, res.config->providers[0].n_limits, two, 1);
    sl_config_result_free(&res);
    assert_edit(out, yaml, "    limits:\n", "    limits: [{per: minute, requests: 100}]\n");
}

Test(yamledit_limits, counts_bytes_not_characters_after_non_ascii_text)
{
    const char *yaml = "# Grüße, 日本語 ✓\n"
                       "providers:\n"
                       "  - name: a   # «é»\n"
                       "    protocol: anthropic\n"
                       "    base_url: \"https://relay.example/ü\"\n"
                       "    limits: [{per: day, requests: 1}]\n";
    char *out = set_limits(yaml, "providers", "a", two, 1);
    assert_edit(out, yaml, "[{per: day, requests: 1}]", "[{per: minute, requests: 100}]");
}

Test(yamledit_limits, edits_the_first_document_and_keeps_the_rest)
{
    const char *yaml = "\xEF\xBB\xBF---\n"
                       "providers:\n"
                       "  - {name: a, protocol: anthropic}\n"
                       "...\n"
                       "---\n"
                       "providers:\n"
                       "  - {name: a, protocol: anthropic}\n";
    char *out = set_limits(yaml, "providers", "a", two, 1);
    cr_assert_not_null(out, "%s", err);
    char *want = replaced(yaml, "anthropic}\n...", "anthropic, limits: [{per: minute, requests: 100}]}\n...");
    cr_assert_str_eq(out, want);
    free(want);
    free(out);
}

Test(yamledit_limits, refuses_anchors_and_aliases)
{
    const char *anchored =
        "providers:\n  - name: a\n    protocol: anthropic\n    limits: &l [{per: day, requests: "
        "1}]\n  - {name: b, protocol: anthropic, limits: *l}\n";
    cr_assert_null(set_limits(anchored, "providers", "a", two, 1));
    cr_assert_str_eq(err, "providers[a].limits: anchors and aliases are not edited");
    cr_assert_null(set_limits(anchored, "providers", "b", two, 1));
    cr_assert_str_eq(err, "providers[b].limits: anchors and aliases are not edited");
    const char *item = "providers:\n  - &p {name: a, protocol: anthropic}\n  - *p\n";
    cr_assert_null(set_limits(item, "providers", "a", two, 1));
    cr_assert_str_eq(err, "providers[a]: the item is under an anchor; edit it by hand");
    cr_assert_null(
        set_limits("providers: &ps\n  - {name: a, protocol: anthropic}\n", "providers", "a", two, 1));
    cr_assert_str_eq(err, "providers[a]: the item is under an anchor; edit it by hand");
    cr_assert_null(set_limits("providers:\n  - *p\n", "providers", "x", two, 1));
    cr_assert_str_eq(err, "providers has no item named 'x' (aliases in the list are not followed)");
}

Test(yamledit_limits, refuses_what_it_cannot_indent)
{
    const char *tagged = "providers:\n  - name: a\n    limits: !!seq\n      - {per: day, requests: 1}\n";
    cr_assert_null(set_limits(tagged, "providers", "a", two, 1));
    cr_assert_str_eq(err, "cannot tell the indentation of the limits");
    const char *complex = "providers:\n  - ? name\n    : a\n    protocol: anthropic\n";
    cr_assert_null(set_limits(complex, "providers", "a", two, 1));
    cr_assert_str_eq(err, "cannot tell the item's indentation");
}

/* The mapping and 63 lists are 64 levels: the most it reads. */
static const char *
nested(int lists)
{
    static char text[200];
    int n = snprintf(text, sizeof(text), "providers: ");
    for (int i = 0; i < lists; i++)
        text[n++] = '[';
    for (int i = 0; i < lists; i++)
        text[n++] = ']';
    text[n] = '\0';
    return text;
}

Test(yamledit_limits, refuses_a_document_nested_too_deep)
{
    cr_assert_null(set_limits(nested(63), "providers", "a", two, 1));
    cr_assert_str_eq(err, "providers has no item named 'a'");
    cr_assert_null(set_limits(nested(64), "providers", "a", two, 1));
    cr_assert_str_eq(err, "line 1: nested deeper than 64 levels");
}

/* ---- redact ----------------------------------------------------------------- */

static char *
replaced_all(const char *s, const char *const (*pairs)[2], size_t n)
{
    char *cur = sl_xstrdup(s);
    for (size_t i = 0; i < n; i++) {
        char *next = replaced(cur, pairs[i][0], pairs[i][1]);
        free(cur);
        cur = next;
    }
    return cur;
}

static const char *const base_secrets[][2] = {
    {"key: \"ctl-secret-1\"}", "key: \"***\"}"},
    {"key: bob-literal-key\n", "key: \"***\"\n"},
    {"\"x-relay-team\": \"infra\"", "\"x-relay-team\": \"***\""},
    {"\"X-Api-Token\": 'tok-123'", "\"X-Api-Token\": \"***\""},
    {"key: sk-relay-literal   #", "key: \"***\"   #"},
};

Test(yamledit_redact, replaces_every_literal_secret_and_keeps_references)
{
    char *out = redact(base);
    cr_assert_not_null(out, "%s", err);
    char *want = replaced_all(base, base_secrets, sizeof(base_secrets) / sizeof(base_secrets[0]));
    cr_assert_str_eq(out, want);
    sl_config_result_t res = load(out);
    cr_assert_str_eq(res.config->control.key, "***");
    cr_assert_str_eq(provider(res.config, "anthropic")->key, "sk-ant-api03-aaaaaaaaaaaaaaaaaaaabcd");
    sl_config_result_free(&res);
    free(want);
    free(out);
}

Test(yamledit_redact, aws_secrets_but_not_the_access_key_id)
{
    const char *yaml = "providers:\n"
                       "  - name: br\n"
                       "    protocol: bedrock\n"
                       "    region: us-east-1\n"
                       "    aws:\n"
                       "      access_key_id: AKIAEXAMPLE\n"
                       "      secret_access_key: wJalrXUtnFEMI   # secret\n"
                       "      session_token: 'tok'\n";
    char *out = redact(yaml);
    const char *const pairs[][2] = {{"wJalrXUtnFEMI", "\"***\""}, {"'tok'", "\"***\""}};
    char *want = replaced_all(yaml, pairs, 2);
    cr_assert_str_eq(out, want);
    free(want);
    free(out);
}

Test(yamledit_redact, keeps_variables_empty_values_and_other_fields)
{
    const char *yaml = "clients:\n"
                       "  - {name: a, key: \"${ALICE_KEY}\"}\n"
                       "  - {name: b, key: 'Bearer ${BOB_KEY}'}\n"
                       "  - {name: c, key: }\n"
                       "  - {name: d, key: ~}\n"
                       "providers:\n"
                       "  - {name: p, protocol: anthropic, base_url: \"https://x.example\", models: [key]}\n";
    char *out = redact(yaml);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, yaml);
    free(out);
}

Test(yamledit_redact, a_block_scalar_and_a_duplicate_key)
{
    const char *yaml = "listen:\n"
                       "  control:\n"
                       "    key: |\n"
                       "      line-one\n"
                       "    key: second\n"
                       "    port: 9\n";
    char *out = redact(yaml);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "listen:\n"
                          "  control:\n"
                          "    key: \"***\"\n"
                          "    key: \"***\"\n"
                          "    port: 9\n");
    free(out);
}

Test(yamledit_redact, a_collection_at_a_secret_is_redacted_leaf_by_leaf)
{
    const char *yaml = "clients:\n  - name: a\n    key: [sk-1, {inner: sk-2, ref: \"${X}\"}]\n";
    char *out = redact(yaml);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "clients:\n  - name: a\n    key: [\"***\", {inner: \"***\", ref: \"${X}\"}]\n");
    char *back = restore(out, yaml);
    cr_assert_not_null(back, "%s", err);
    cr_assert_str_eq(back, yaml);
    free(back);
    free(out);
}

Test(yamledit_redact, refuses_an_alias_or_anchor_at_a_secret)
{
    cr_assert_null(redact("x: &k sk-1\nclients:\n  - {name: a, key: *k}\n"));
    cr_assert_str_eq(err, "clients[a].key: anchors and aliases are not supported at a secret");
    cr_assert_null(redact("clients:\n  - {name: a, key: &k sk-1}\n"));
    cr_assert_str_eq(err, "clients[a].key: anchors and aliases are not supported at a secret");
    cr_assert_null(redact("clients: [\n"));
}

/* ---- restore ---------------------------------------------------------------- */

Test(yamledit_restore, a_redacted_text_comes_back_byte_for_byte)
{
    char *redacted = redact(base);
    cr_assert_not_null(redacted, "%s", err);
    cr_assert_str_neq(redacted, base);
    char *out = restore(redacted, base);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, base);
    free(out);
    free(redacted);
}

Test(yamledit_restore, items_are_matched_by_name_and_headers_in_any_case)
{
    const char *current = "providers:\n"
                          "  - name: a\n"
                          "    protocol: anthropic\n"
                          "    key: 'sk-a'\n"
                          "    headers: {X-Api-Token: tok-a}\n"
                          "  - name: b\n"
                          "    protocol: anthropic\n"
                          "    key: sk-b\n";
    const char *pushed = "providers:\n"
                         "  - name: b\n"
                         "    protocol: anthropic\n"
                         "    key: \"***\"\n"
                         "  - name: a\n"
                         "    protocol: anthropic\n"
                         "    key: '***'   # kept\n"
                         "    headers:\n"
                         "      x-api-token: \"***\"\n";
    char *out = restore(pushed, current);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "providers:\n"
                          "  - name: b\n"
                          "    protocol: anthropic\n"
                          "    key: sk-b\n"
                          "  - name: a\n"
                          "    protocol: anthropic\n"
                          "    key: 'sk-a'   # kept\n"
                          "    headers:\n"
                          "      x-api-token: tok-a\n");
    sl_config_result_t res = load(out);
    cr_assert_str_eq(provider(res.config, "a")->key, "sk-a");
    cr_assert_str_eq(provider(res.config, "b")->key, "sk-b");
    cr_assert_str_eq(provider(res.config, "a")->headers[0].value, "tok-a");
    sl_config_result_free(&res);
    free(out);
}

Test(yamledit_restore, a_sentinel_without_a_current_secret_is_an_error)
{
    const char *current = "providers:\n  - {name: openai, protocol: openai-chat, key: \"${X}\"}\n"
                          "  - {name: empty, protocol: openai-chat, key: ~}\n";
    cr_assert_null(restore("providers:\n  - {name: other, protocol: openai-chat, key: \"***\"}\n", current));
    cr_assert_str_eq(err, "providers[other].key: '***' but the current configuration has no secret there");
    cr_assert_null(restore("providers:\n  - {name: empty, protocol: openai-chat, key: \"***\"}\n", current));
    cr_assert_str_eq(err, "providers[empty].key: '***' but the current configuration has no secret there");
    char *out = restore("providers:\n  - {name: openai, protocol: openai-chat, key: \"***\"}\n", current);
    cr_assert_str_eq(out, "providers:\n  - {name: openai, protocol: openai-chat, key: \"${X}\"}\n");
    free(out);
    cr_assert_null(restore("listen:\n  control: {key: \"***\"}\n", current));
    cr_assert_str_eq(err, "listen.control.key: '***' but the current configuration has no secret there");
}

Test(yamledit_restore, requotes_a_value_that_would_not_read_the_same_where_it_goes)
{
    const char *current = "providers:\n"
                          "  - name: a\n"
                          "    protocol: anthropic\n"
                          "    key: sk,1\n"
                          "  - name: b\n"
                          "    protocol: anthropic\n"
                          "    key: sk-part-one\n"
                          "      part-two\n";
    const char *pushed = "providers:\n"
                         "  - {name: a, protocol: anthropic, key: \"***\"}\n"
                         "  - name: b\n"
                         "    protocol: anthropic\n"
                         "    key: \"***\"\n";
    char *out = restore(pushed, current);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    cr_assert_str_eq(provider(res.config, "a")->key, "sk,1");
    cr_assert_str_eq(provider(res.config, "b")->key, "sk-part-one part-two");
    sl_config_result_free(&res);
    const char *const pairs[][2] = {{"key: \"***\"}", "key: \"sk,1\"}"},
                                    {"key: \"***\"\n", "key: \"sk-part-one part-two\"\n"}};
    char *want = replaced_all(pushed, pairs, 2);
    cr_assert_str_eq(out, want);
    free(want);
    free(out);
}

Test(yamledit_restore, duplicate_entries_are_matched_in_order)
{
    const char *current = "listen:\n  control:\n    key: first\n    key: second\n"
                          "clients:\n  - {name: a, key: one}\n  - {name: a, key: two}\n";
    char *out = restore("clients: [{name: a, key: \"***\"}]\nlisten: {control: {key: \"***\"}}\n", current);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "clients: [{name: a, key: one}]\nlisten: {control: {key: \"first\"}}\n");
    free(out);
    out = restore("clients:\n  - {name: a, key: \"${X}\"}\n  - {name: a, key: \"***\"}\n", current);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "clients:\n  - {name: a, key: \"${X}\"}\n  - {name: a, key: two}\n");
    free(out);
}

Test(yamledit_restore, leaves_a_sentinel_elsewhere_and_refuses_anchors)
{
    const char *current = "clients:\n  - {name: a, key: sk-a}\n";
    const char *pushed = "clients:\n  - {name: a, key: sk-new}\nstore: {path: \"***\"}\n";
    char *out = restore(pushed, current);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, pushed);
    free(out);
    cr_assert_null(restore("clients:\n  - {name: a, key: &k \"***\"}\n", current));
    cr_assert_str_eq(err, "clients[a].key: anchors and aliases are not supported at a secret");
    cr_assert_null(
        restore("clients:\n  - {name: a, key: \"***\"}\n", "clients:\n  - {name: a, key: &k s}\n"));
    cr_assert_str_eq(err, "clients[a].key: anchors and aliases are not supported at a secret");
}

/* ---- a URL's password (cluster.redis, store.url) ---------------------------------- */

Test(yamledit_url_secret, redact_masks_only_the_password_of_cluster_redis)
{
    const char *yaml = "cluster:\n"
                       "  redis: redis://app:hunter2@10.0.0.5:6380/2   # the shared one\n"
                       "  name: prod\n";
    char *out = redact(yaml);
    assert_edit(out, yaml, "redis://app:hunter2@10.0.0.5:6380/2", "\"redis://app:***@10.0.0.5:6380/2\"");
    out = redact(yaml);
    sl_config_result_t res = load(out);
    cr_assert_str_eq(res.config->cluster.redis_password, "***");
    cr_assert_str_eq(res.config->cluster.redis_user, "app");
    cr_assert_str_eq(res.config->cluster.redis_host, "10.0.0.5");
    sl_config_result_free(&res);
    free(out);
}

Test(yamledit_url_secret, redact_in_every_quoting_and_store_url_too)
{
    const char *yaml = "cluster: {redis: 'redis://:p@ss\"w\\d@[::1]:6379', name: prod}\n"
                       "store:\n"
                       "  url: \"postgres://sluice:pg-secret@db.internal/sluice\"\n";
    char *out = redact(yaml);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "cluster: {redis: \"redis://:***@[::1]:6379\", name: prod}\n"
                          "store:\n"
                          "  url: \"postgres://sluice:***@db.internal/sluice\"\n");
    free(out);
}

Test(yamledit_url_secret, redact_keeps_references_urls_without_a_password_and_the_rest)
{
    const char *yaml = "cluster:\n"
                       "  redis: \"redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0\"\n"
                       "  instance: \"${HOSTNAME}\"\n"
                       "store: {url: \"unix:///run/pg\"}\n";
    char *out = redact(yaml);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, yaml);
    free(out);
    const char *plain = "cluster: {redis: redis://127.0.0.1:6379/0}\n";
    out = redact(plain);
    cr_assert_str_eq(out, plain);
    free(out);
    const char *empty = "cluster: {redis: \"redis://:@h\"}\n";
    out = redact(empty);
    cr_assert_str_eq(out, empty);
    free(out);
}

Test(yamledit_url_secret, a_collection_at_the_url_is_redacted_whole_leaf_by_leaf)
{
    const char *yaml = "cluster:\n  redis: [redis://:pw@h, plain]\n";
    char *out = redact(yaml);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "cluster:\n  redis: [\"***\", \"***\"]\n");
    char *back = restore(out, yaml);
    cr_assert_str_eq(back, yaml);
    free(back);
    free(out);
    cr_assert_null(redact("x: &u redis://:pw@h\ncluster: {redis: *u}\n"));
    cr_assert_str_eq(err, "cluster.redis: anchors and aliases are not supported at a secret");
}

Test(yamledit_url_secret, a_redacted_url_comes_back_byte_for_byte)
{
    const char *current = "version: 1\n"
                          "cluster:\n"
                          "  redis: redis://:hunter2@127.0.0.1:6379/0   # comment kept\n"
                          "  name: prod\n"
                          "store: {url: 'postgres://u:p''q@db/s'}\n";
    char *redacted = redact(current);
    cr_assert_not_null(redacted, "%s", err);
    cr_assert_null(strstr(redacted, "hunter2"));
    cr_assert_null(strstr(redacted, "p''q"));
    char *out = restore(redacted, current);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, current);
    free(out);
    free(redacted);
}

Test(yamledit_url_secret, an_edited_url_keeps_the_current_password)
{
    const char *current = "cluster:\n  redis: 'redis://app:hun\"ter2@10.0.0.5:6379/0'\n";
    const char *pushed = "cluster:\n  redis: \"redis://app:***@10.0.0.9:6380/1\"\n  name: eu\n";
    char *out = restore(pushed, current);
    assert_edit(out, pushed, "\"redis://app:***@10.0.0.9:6380/1\"",
                "\"redis://app:hun\\\"ter2@10.0.0.9:6380/1\"");
    out = restore(pushed, current);
    sl_config_result_t res = load(out);
    cr_assert_str_eq(res.config->cluster.redis_password, "hun\"ter2");
    cr_assert_str_eq(res.config->cluster.redis_host, "10.0.0.9");
    cr_assert_eq(res.config->cluster.redis_port, 6380);
    sl_config_result_free(&res);
    free(out);
    /* A reference stays a reference. */
    out =
        restore("cluster: {redis: \"redis://:***@h2\"}\n", "cluster: {redis: \"redis://:${REDIS_PW}@h1\"}\n");
    cr_assert_str_eq(out, "cluster: {redis: \"redis://:${REDIS_PW}@h2\"}\n");
    free(out);
}

Test(yamledit_url_secret, a_whole_sentinel_at_the_url_gets_the_current_url)
{
    const char *current = "cluster:\n  redis: redis://:pw@h:1\n";
    char *out = restore("cluster: {redis: \"***\", name: x}\n", current);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "cluster: {redis: \"redis://:pw@h:1\", name: x}\n",
                     "a plain value going into a flow is quoted");
    free(out);
}

Test(yamledit_url_secret, a_sentinel_password_without_a_current_one_is_an_error)
{
    const char *pushed = "cluster:\n  redis: \"redis://:***@h\"\n";
    cr_assert_null(restore(pushed, "cluster:\n  redis: redis://h\n"));
    cr_assert_str_eq(err, "cluster.redis: '***' but the current configuration has no secret there");
    cr_assert_null(restore(pushed, "version: 1\n"));
    cr_assert_str_eq(err, "cluster.redis: '***' but the current configuration has no secret there");
    cr_assert_null(
        restore("store: {url: \"postgres://u:***@h/db\"}\n", "store: {url: \"postgres://u:@h/db\"}\n"));
    cr_assert_str_eq(err, "store.url: '***' but the current configuration has no secret there");
    /* A password that merely holds the sentinel is a new password. */
    const char *new_pw = "cluster:\n  redis: \"redis://:***x@h\"\n";
    char *out = restore(new_pw, "cluster:\n  redis: redis://:pw@h\n");
    cr_assert_str_eq(out, new_pw);
    free(out);
}

/* ---- delete_paths ------------------------------------------------------------- */

/* The paths of the loader's unknown-field errors, the way safe mode collects them (caller frees). */
static char **
unknown_fields(const char *yaml, size_t *n)
{
    sl_config_result_t res = sl_config_parse(yaml, strlen(yaml), "test.yaml", &test_env);
    char **paths = sl_xcalloc(res.errors.len, sizeof(char *));
    *n = 0;
    for (size_t i = 0; i < res.errors.len; i++) {
        if (res.errors.items[i].code == SL_CODE_CONFIG_UNKNOWN_FIELD)
            paths[(*n)++] = sl_xstrdup(sl_msg_arg(&res.errors.items[i], "path"));
    }
    sl_config_result_free(&res);
    return paths;
}

/* Repairs yaml as safe mode does; asserts the loader found want unknown fields and accepts the result. */
static char *
repair(const char *yaml, size_t want)
{
    size_t n;
    char **paths = unknown_fields(yaml, &n);
    cr_assert_eq(n, want, "%zu unknown fields", n);
    char *out = delete_paths(yaml, (const char *const *)paths, n);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    sl_config_result_free(&res);
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    return out;
}

Test(yamledit_delete, a_block_entry_goes_with_its_lines_and_comment)
{
    const char *yaml = "providers:\n"
                       "  - {name: a, protocol: anthropic}\n"
                       "  - name: b\n"
                       "    protocol: anthropic\n"
                       "    limts: []   # typo\n"
                       "    max_concurrent: 2\n"
                       "failover:\n"
                       "  # how long\n"
                       "  wiat_secs: 3\n"
                       "  wait_secs: 4\n";
    char *out = repair(yaml, 2);
    char *step = replaced(yaml, "    limts: []   # typo\n", "");
    assert_edit(out, step, "  wiat_secs: 3\n", "");
    free(step);
}

Test(yamledit_delete, flow_entries_go_with_one_comma)
{
    const char *yaml = "listen:\n"
                       "  gateway: {bind: 127.0.0.1, prot: 8080, port: 8080}\n"
                       "  control: {bogus: 1, port: 8081}\n"
                       "store: {path: x.db, retention: 3}\n"
                       "security: {redcat: true, redakt: false}\n";
    char *out = repair(yaml, 5);
    cr_assert_str_eq(out, "listen:\n"
                          "  gateway: {bind: 127.0.0.1, port: 8080}\n"
                          "  control: {port: 8081}\n"
                          "store: {path: x.db}\n"
                          "security: {}\n");
    free(out);
}

Test(yamledit_delete, two_in_a_row_in_a_flow_mapping_keep_a_comment_before_them)
{
    const char *yaml = "failover: {wait_secs: 3,   # c\n  a: 1, b: 2}\n";
    const char *paths[] = {"failover.b", "failover.a"};
    char *out = delete_paths(yaml, paths, 2);
    assert_edit(out, yaml, ",   # c\n  a: 1, b: 2}", "   # c\n}");
}

Test(yamledit_delete, the_first_entry_of_a_list_item_gives_its_line_to_the_next)
{
    const char *yaml = "clients:\n"
                       "  - bogus: 1   # first\n"
                       "    name: alice\n"
                       "    key: \"${ALICE_KEY}\"\n"
                       "    limits:\n"
                       "      - per: day\n"
                       "        requests: 3\n"
                       "        evry: 2\n";
    char *out = repair(yaml, 2);
    cr_assert_str_eq(out, "clients:\n"
                          "  - name: alice\n"
                          "    key: \"${ALICE_KEY}\"\n"
                          "    limits:\n"
                          "      - per: day\n"
                          "        requests: 3\n");
    free(out);
}

Test(yamledit_delete, an_emptied_block_mapping_becomes_empty_braces)
{
    const char *yaml = "security:   # masking\n"
                       "  redcat: true\n"
                       "store:\n"
                       "  path: x.db\n"
                       "limits:\n"
                       "  - boo: 1\n"
                       "    far: 2\n"
                       "version: 1\n";
    const char *paths[] = {"security.redcat", "limits[0].boo", "limits[0].far"};
    char *out = delete_paths(yaml, paths, 3);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "security: {}   # masking\n"
                          "store:\n"
                          "  path: x.db\n"
                          "limits:\n"
                          "  - {}\n"
                          "version: 1\n");
    free(out);
}

Test(yamledit_delete, nested_and_repeated_paths_and_dotted_keys)
{
    const char *yaml = "pricing:\n"
                       "  \"gpt-4.1\": {input: 1, output: 2, inptu: 3}\n"
                       "  gpt-4: {input: 1, output: 2}\n"
                       "  claude-[34]*: {input: 1, output: 2,\n    bogus: 3}\n"
                       "extra:\n"
                       "  inner: {a: 1}\n"
                       "version: 1\n";
    const char *paths[] = {"pricing.gpt-4.1.inptu", "extra.inner.a", "extra", "pricing.gpt-4.1.inptu",
                           "pricing.claude-[34]*.bogus"};
    char *out = delete_paths(yaml, paths, 5);
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "pricing:\n"
                          "  \"gpt-4.1\": {input: 1, output: 2}\n"
                          "  gpt-4: {input: 1, output: 2}\n"
                          "  claude-[34]*: {input: 1, output: 2}\n"
                          "version: 1\n");
    sl_config_result_t res = load(out);
    cr_assert_eq(res.config->n_pricing, 3);
    sl_config_result_free(&res);
    free(out);
}

Test(yamledit_delete, a_path_that_names_no_entry_is_an_error)
{
    const char *yaml = "providers:\n  - {name: a, protocol: anthropic}\nx: &a 1\ny: *a\n";
    const char *const bad[][2] = {
        {"providers[1].name", "providers[1].name: no such entry"},
        {"providers[0].nope", "providers[0].nope: no such entry"},
        {"providers[0]", "providers[0]: a list item, not a mapping entry"},
        {"providers[-1].name", "providers[-1].name: no such entry"},
        {"x", "x: under or holding an anchor; delete it by hand"},
        {"providers[0].", "providers[0].: no such entry"},
        {"providers.", "providers.: no such entry"},
        {"y.z", "y.z: passes through an alias"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        cr_assert_null(delete_paths(yaml, &bad[i][0], 1), "%s", bad[i][0]);
        cr_assert_str_eq(err, bad[i][1]);
    }
    char *out = delete_paths(yaml, (const char *[]){"y"}, 1);
    assert_edit(out, yaml, "y: *a\n", "");
    cr_assert_null(delete_paths("base: &b {bogus: 1}\n", (const char *[]){"base.bogus"}, 1));
    cr_assert_str_eq(err, "base.bogus: under or holding an anchor; delete it by hand");
    cr_assert_null(delete_paths("? bogus\n: 1\nversion: 1\n", (const char *[]){"bogus"}, 1));
    cr_assert_str_eq(err, "cannot delete 'bogus': it does not start its line");
}

/* ---- bounded work ------------------------------------------------------------- */

/*
 * A quadratic search would take minutes on these (10^10 steps); linear work
 * takes about a second, under the sanitizers too.
 */
enum { MANY = 100000 };

Test(yamledit_bounds, deleting_many_paths_from_a_big_mapping, .timeout = 20)
{
    sl_strbuf_t b = {0};
    sl_strbuf_appendf(&b, "version: 1\n");
    for (int i = 0; i < MANY; i++)
        sl_strbuf_appendf(&b, "k%06d: %d\n", i, i);
    size_t len = b.len;
    char *yaml = sl_strbuf_finish(&b);
    char **paths = sl_xmalloc(MANY * sizeof(char *));
    for (int i = 0; i < MANY; i++) {
        paths[i] = sl_xmalloc(16);
        snprintf(paths[i], 16, "k%06d", MANY - 1 - i);
    }
    char *out = sl_yamledit_delete_paths(yaml, len, (const char *const *)paths, MANY, err, sizeof(err));
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, "version: 1\n");
    free(out);
    for (int i = 0; i < MANY; i++)
        free(paths[i]);
    free(paths);
    free(yaml);
}

Test(yamledit_bounds, restoring_many_secrets, .timeout = 20)
{
    sl_strbuf_t b = {0};
    sl_strbuf_appendf(&b, "clients:\n");
    for (int i = 0; i < MANY; i++)
        sl_strbuf_appendf(&b, "  - {name: c%06d, key: k%06d}\n", i, i);
    size_t len = b.len;
    char *yaml = sl_strbuf_finish(&b);
    char *redacted = sl_yamledit_redact_secrets(yaml, len, err, sizeof(err));
    cr_assert_not_null(redacted, "%s", err);
    cr_assert_not_null(strstr(redacted, "  - {name: c099999, key: \"***\"}\n"));
    char *out = sl_yamledit_restore_secrets(redacted, strlen(redacted), yaml, len, err, sizeof(err));
    cr_assert_not_null(out, "%s", err);
    cr_assert_str_eq(out, yaml);
    free(out);
    free(redacted);
    free(yaml);
}

/* ---- keep_entries ------------------------------------------------------------- */

static char *
keep(const char *new_yaml, const char *current, const char *const *paths, size_t n)
{
    err[0] = '\0';
    return sl_yamledit_keep_entries(new_yaml, strlen(new_yaml), current, strlen(current), paths, n, err,
                                    sizeof(err));
}

/* Asserts out is YAML that parses (a redaction reads it whole). */
static void
assert_parses(const char *out)
{
    char why[256];
    char *again = sl_yamledit_redact_secrets(out, strlen(out), why, sizeof(why));
    cr_assert_not_null(again, "the result does not parse (%s):\n%s", why, out);
    free(again);
}

/* Asserts keep(new_yaml, current, paths) is want byte for byte, and parses. */
static void
assert_kept(const char *new_yaml, const char *current, const char *const *paths, size_t n, const char *want)
{
    char *out = keep(new_yaml, current, paths, n);
    cr_assert_not_null(out, "failed: %s", err);
    cr_assert_str_eq(out, want);
    assert_parses(out);
    free(out);
}

/* Asserts keep(new_yaml, current, paths) fails with the reason want. */
static void
assert_not_kept(const char *new_yaml, const char *current, const char *const *paths, size_t n,
                const char *want)
{
    char *out = keep(new_yaml, current, paths, n);
    cr_assert_null(out, "kept:\n%s", out);
    cr_assert_str_eq(err, want);
}

static const char *const own[] = {"listen", "store", "cluster.instance"};

/* Two instances of one cluster: the pushed config (a's) and b's own, each in its own style. */
static const char pushed_config[] =
    "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
    "clients: [{name: tester, key: \"k\"}]\n"
    "providers:\n"
    "  - {name: one, protocol: anthropic, base_url: \"http://127.0.0.1:1\", key: k1}\n"
    "store: {path: /tmp/a.db}\n"
    "cluster: {redis: \"redis://127.0.0.1:1\", name: t1, instance: a, timeout_ms: 200}\n";

static const char own_config[] = "# b's config\n"
                                 "listen:\n"
                                 "  gateway: {bind: 127.0.0.1, port: 18080}   # b's port\n"
                                 "  control:\n"
                                 "    port: 18081\n"
                                 "clients: [{name: old, key: \"old\"}]\n"
                                 "store:\n"
                                 "  path: /tmp/b.db\n"
                                 "cluster:\n"
                                 "  redis: \"redis://127.0.0.1:1\"\n"
                                 "  name: t1\n"
                                 "  instance: \"b\"\n";

Test(yamledit_keep, a_block_entry_replaces_a_flow_one_and_the_rest_stays_byte_for_byte)
{
    const char *paths[] = {"listen"};
    char *out = keep(pushed_config, own_config, paths, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    cr_assert_eq(res.config->gateway.port, 18080);
    cr_assert_eq(res.config->control.port, 18081);
    sl_config_result_free(&res);
    assert_edit(out, pushed_config, "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n",
                "listen:\n"
                "  gateway: {bind: 127.0.0.1, port: 18080}   # b's port\n"
                "  control:\n"
                "    port: 18081\n");
}

Test(yamledit_keep, a_flow_entry_replaces_a_block_one_and_the_rest_stays_byte_for_byte)
{
    const char *paths[] = {"listen"};
    char *out = keep(own_config, pushed_config, paths, 1);
    cr_assert_not_null(out, "%s", err);
    assert_parses(out);
    assert_edit(out, own_config,
                "listen:\n"
                "  gateway: {bind: 127.0.0.1, port: 18080}   # b's port\n"
                "  control:\n"
                "    port: 18081\n",
                "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n");
}

Test(yamledit_keep, the_trailing_comment_goes_with_the_entry_and_comments_around_it_stay)
{
    const char *new_yaml = "version: 1\n"
                           "# where the database is\n"
                           "store: {path: /tmp/a.db}   # a's store\n"
                           "# the end of the store\n"
                           "routes: []\n";
    const char *current = "store:   # b's store\n"
                          "  path: /tmp/b.db\n"
                          "  # retention in days\n"
                          "  retention_days: 3   # short\n"
                          "version: 1\n";
    const char *paths[] = {"store"};
    assert_kept(new_yaml, current, paths, 1,
                "version: 1\n"
                "# where the database is\n"
                "store:   # b's store\n"
                "  path: /tmp/b.db\n"
                "  # retention in days\n"
                "  retention_days: 3   # short\n"
                "# the end of the store\n"
                "routes: []\n");
}

Test(yamledit_keep, cluster_instance_is_replaced_inside_a_flow_mapping)
{
    const char *paths[] = {"cluster.instance"};
    char *out = keep(pushed_config, own_config, paths, 1);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    cr_assert_str_eq(res.config->cluster.instance, "b");
    sl_config_result_free(&res);
    assert_edit(out, pushed_config, "instance: a,", "instance: \"b\",");
}

Test(yamledit_keep, cluster_instance_is_replaced_inside_a_block_mapping_as_written)
{
    const char *paths[] = {"cluster.instance"};
    char *out = keep(own_config, pushed_config, paths, 1);
    cr_assert_not_null(out, "%s", err);
    assert_parses(out);
    assert_edit(out, own_config, "  instance: \"b\"\n", "  instance: a\n");
    const char *new_yaml = "cluster:\n  instance: 'x'   # mine\n  name: t1\n";
    assert_kept(new_yaml, "cluster: {instance: !!str y}\n", paths, 1,
                "cluster:\n  instance: !!str y   # mine\n  name: t1\n");
}

Test(yamledit_keep, a_top_level_entry_only_in_current_is_appended_to_the_top_level_mapping)
{
    const char *paths[] = {"store"};
    assert_kept("version: 1\nroutes: []   # none\n# the end\n", "store:\n  path: b.db  # b\nversion: 1\n",
                paths, 1, "version: 1\nroutes: []   # none\nstore:\n  path: b.db  # b\n# the end\n");
    /* A text without a final line break gets one first; current's last line gets one too. */
    assert_kept("version: 1", "store: {path: b.db}", paths, 1, "version: 1\nstore: {path: b.db}\n");
    /* The rest of the stream stays after the first document. */
    assert_kept("version: 1\n---\nother: 1\n", "store: {path: b.db}\n", paths, 1,
                "version: 1\nstore: {path: b.db}\n---\nother: 1\n");
}

Test(yamledit_keep, a_nested_entry_only_in_current_is_added_to_a_flow_parent)
{
    const char *paths[] = {"cluster.instance"};
    const char *current = "cluster:\n  instance: \"b\"   # mine\n";
    assert_kept("cluster: {redis: \"redis://h\", name: t1}   # shared\nversion: 1\n", current, paths, 1,
                "cluster: {redis: \"redis://h\", name: t1, instance: \"b\"}   # shared\nversion: 1\n");
    assert_kept("cluster: {}\n", current, paths, 1, "cluster: {instance: \"b\"}\n");
    assert_kept("cluster: { }\n", current, paths, 1, "cluster: {instance: \"b\" }\n");
    assert_kept("cluster: {name: t1,\n  redis: \"redis://h\"}\n", current, paths, 1,
                "cluster: {name: t1,\n  redis: \"redis://h\", instance: \"b\"}\n");
}

Test(yamledit_keep, a_nested_entry_only_in_current_is_added_to_a_block_parent)
{
    const char *paths[] = {"cluster.instance"};
    const char *current = "cluster: {name: t1, instance: b}\n";
    assert_kept("cluster:\n    name: t1\n    redis: redis://h   # shared\nversion: 1\n", current, paths, 1,
                "cluster:\n    name: t1\n    redis: redis://h   # shared\n    instance: b\nversion: 1\n");
    assert_kept("version: 1\ncluster:\n  name: t1", current, paths, 1,
                "version: 1\ncluster:\n  name: t1\n  instance: b\n");
    /* Deeper: at the inner mapping's column, before the outer one's next entry. */
    const char *const deep[] = {"a.b.c"};
    assert_kept("a:\n  b:\n    x: 1\n  y: 2\n", "a: {b: {c: 3}}\n", deep, 1,
                "a:\n  b:\n    x: 1\n    c: 3\n  y: 2\n");
}

Test(yamledit_keep, an_entry_only_in_new_is_deleted)
{
    const char *paths[] = {"listen", "store", "cluster.instance"};
    const char *current = "clients: []\ncluster: {name: t1}\n";
    char *out = keep(pushed_config, current, paths, 3);
    cr_assert_not_null(out, "%s", err);
    assert_parses(out);
    cr_assert_str_eq(out, "clients: [{name: tester, key: \"k\"}]\n"
                          "providers:\n"
                          "  - {name: one, protocol: anthropic, base_url: \"http://127.0.0.1:1\", key: k1}\n"
                          "cluster: {redis: \"redis://127.0.0.1:1\", name: t1, timeout_ms: 200}\n");
    free(out);
    out = keep(own_config, current, paths, 3);
    cr_assert_not_null(out, "%s", err);
    assert_parses(out);
    cr_assert_str_eq(out, "# b's config\n"
                          "clients: [{name: old, key: \"old\"}]\n"
                          "cluster:\n"
                          "  redis: \"redis://127.0.0.1:1\"\n"
                          "  name: t1\n");
    free(out);
}

Test(yamledit_keep, an_entry_in_neither_text_changes_nothing)
{
    const char *paths[] = {"store", "cluster.instance", "nope.deeper.still"};
    assert_kept("version: 1   # one\n", "clients: []\n", paths, 3, "version: 1   # one\n");
    assert_kept("cluster: ~\n", "version: 1\n", paths, 3, "cluster: ~\n");
    assert_kept(pushed_config, pushed_config, paths, 0, pushed_config);
}

Test(yamledit_keep, listen_store_and_cluster_instance_at_once_on_realistic_configs)
{
    char *out = keep(pushed_config, own_config, own, 3);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    cr_assert_eq(res.config->gateway.port, 18080);
    cr_assert_str_eq(res.config->store_path, "/tmp/b.db");
    cr_assert_str_eq(res.config->cluster.instance, "b");
    cr_assert_eq(res.config->n_providers, 1);
    sl_config_result_free(&res);
    cr_assert_str_eq(
        out, "listen:\n"
             "  gateway: {bind: 127.0.0.1, port: 18080}   # b's port\n"
             "  control:\n"
             "    port: 18081\n"
             "clients: [{name: tester, key: \"k\"}]\n"
             "providers:\n"
             "  - {name: one, protocol: anthropic, base_url: \"http://127.0.0.1:1\", key: k1}\n"
             "store:\n"
             "  path: /tmp/b.db\n"
             "cluster: {redis: \"redis://127.0.0.1:1\", name: t1, instance: \"b\", timeout_ms: 200}\n");
    free(out);
    /* And back: b's config pushed to a keeps a's. */
    out = keep(own_config, pushed_config, own, 3);
    cr_assert_not_null(out, "%s", err);
    res = load(out);
    cr_assert_eq(res.config->gateway.port, 0);
    cr_assert_str_eq(res.config->store_path, "/tmp/a.db");
    cr_assert_str_eq(res.config->cluster.instance, "a");
    sl_config_result_free(&res);
    cr_assert_str_eq(out, "# b's config\n"
                          "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
                          "clients: [{name: old, key: \"old\"}]\n"
                          "store: {path: /tmp/a.db}\n"
                          "cluster:\n"
                          "  redis: \"redis://127.0.0.1:1\"\n"
                          "  name: t1\n"
                          "  instance: a\n");
    free(out);
}

Test(yamledit_keep, a_pushed_config_without_the_own_entries_gets_them_all)
{
    const char *new_yaml = "clients: [{name: tester, key: \"k\"}]\n"
                           "cluster: {redis: \"redis://127.0.0.1:1\", name: t1}";
    char *out = keep(new_yaml, own_config, own, 3);
    cr_assert_not_null(out, "%s", err);
    sl_config_result_t res = load(out);
    cr_assert_eq(res.config->gateway.port, 18080);
    cr_assert_str_eq(res.config->store_path, "/tmp/b.db");
    cr_assert_str_eq(res.config->cluster.instance, "b");
    sl_config_result_free(&res);
    cr_assert_str_eq(out, "clients: [{name: tester, key: \"k\"}]\n"
                          "cluster: {redis: \"redis://127.0.0.1:1\", name: t1, instance: \"b\"}\n"
                          "listen:\n"
                          "  gateway: {bind: 127.0.0.1, port: 18080}   # b's port\n"
                          "  control:\n"
                          "    port: 18081\n"
                          "store:\n"
                          "  path: /tmp/b.db\n");
    free(out);
}

Test(yamledit_keep, a_nested_line_comes_before_a_top_level_one_and_an_inner_mapping_before_its_parent)
{
    const char *const paths[] = {"store", "a.y", "a.b.c"};
    assert_kept("a:\n  b:\n    x: 1", "a: {y: 2, b: {c: 3}}\nstore: {path: b.db}\n", paths, 3,
                "a:\n  b:\n    x: 1\n    c: 3\n  y: 2\nstore: {path: b.db}\n");
}

Test(yamledit_keep, a_plain_value_with_a_comma_is_quoted_into_a_flow_mapping)
{
    const char *paths[] = {"cluster.instance", "cluster.name"};
    assert_kept("cluster: {instance: a}\n", "cluster:\n  instance: b,c\n  name: x[y]\n", paths, 2,
                "cluster: {instance: \"b,c\", name: \"x[y]\"}\n");
    assert_kept("cluster:\n  instance: a\n", "cluster: {instance: 'b,c'}\n", paths, 1,
                "cluster:\n  instance: 'b,c'\n");
}

Test(yamledit_keep, an_empty_value_is_written_after_the_colon_and_emptied_where_it_stands)
{
    const char *paths[] = {"cluster.instance"};
    assert_kept("cluster:\n  instance:   # none yet\n  name: t\n", "cluster: {instance: b}\n", paths, 1,
                "cluster:\n  instance: b   # none yet\n  name: t\n");
    assert_kept("cluster: {instance: , name: t}\n", "cluster: {instance: b}\n", paths, 1,
                "cluster: {instance: b , name: t}\n");
    assert_kept("cluster:\n  instance: a   # c\n", "cluster:\n  instance:\n", paths, 1,
                "cluster:\n  instance:   # c\n");
    assert_kept("cluster: {instance: a}\n", "cluster:\n  instance:\n", paths, 1, "cluster: {instance: }\n");
    assert_kept("cluster: {name: t}\n", "cluster:\n  instance:\n", paths, 1,
                "cluster: {name: t, instance: }\n");
    assert_kept("cluster:\n  name: t\n", "cluster:\n  instance:\n", paths, 1,
                "cluster:\n  name: t\n  instance:\n");
}

Test(yamledit_keep, a_mapping_can_lose_all_its_entries_and_get_others)
{
    const char *paths[] = {"cluster.instance", "cluster.name"};
    const char *current = "cluster: {name: t2}\n";
    assert_kept("cluster: {instance: a}\n", current, paths, 2, "cluster: {name: t2}\n");
    assert_kept("cluster:   # c\n  instance: a\nversion: 1\n", current, paths, 2,
                "cluster:   # c\n  name: t2\nversion: 1\n");
    const char *const top[] = {"version", "store"};
    assert_kept("version: 1\n", "store: {path: x}\n", top, 2, "store: {path: x}\n");
}

Test(yamledit_keep, a_repeated_path_or_one_under_a_top_level_path_counts_once)
{
    const char *paths[] = {"cluster.instance", "cluster", "cluster.instance", "store", "store"};
    assert_kept("version: 1\n", "cluster:\n  instance: b\nstore: {path: x}\n", paths, 5,
                "version: 1\ncluster:\n  instance: b\nstore: {path: x}\n");
    assert_kept("cluster: {name: t, instance: a}\nversion: 1\n", "cluster:\n  instance: b\n", paths, 5,
                "cluster:\n  instance: b\nversion: 1\n");
}

Test(yamledit_keep, an_empty_new_text_is_an_empty_mapping)
{
    const char *paths[] = {"store", "cluster.instance"};
    assert_kept("", "store: {path: x}\n", paths, 1, "store: {path: x}\n");
    assert_kept("# nothing yet", "store:\n  path: x", paths, 1, "# nothing yet\nstore:\n  path: x\n");
    assert_not_kept("", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: new has no mapping to add it to");
    assert_not_kept("---\n", "store: {path: x}\n", paths, 1, "new: the top level is not a mapping");
    assert_not_kept("~\n", "store: {path: x}\n", paths, 1, "new: the top level is not a mapping");
    /* An empty current one has none of the entries: new's go. */
    assert_kept("store: {path: x}\nversion: 1\n", "# empty\n", paths, 2, "version: 1\n");
}

Test(yamledit_keep, refuses_what_it_cannot_splice)
{
    const char *paths[] = {"store", "cluster.instance"};
    assert_not_kept("{store: {path: x}, version: 1}\n", "store: {path: y}\n", paths, 1,
                    "new: the top-level mapping is flow style; edit it by hand");
    assert_not_kept("version: 1\n", "{store: {path: y}}\n", paths, 1,
                    "current: the top-level mapping is flow style; edit it by hand");
    assert_not_kept("- a\n", "store: {path: y}\n", paths, 1, "new: the top level is not a mapping");
    assert_not_kept("version: 1\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: new has no mapping to add it to");
    assert_not_kept("cluster: [a]\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: new has no mapping to add it to");
    assert_not_kept("cluster:\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: new has no mapping to add it to");
    assert_not_kept(
        "cluster: {instance: a}\n", "cluster:\n  instance: |\n    b\n", paths, 2,
        "cluster.instance: not a one-line scalar in current; only a top-level entry is copied whole");
    assert_not_kept("cluster:\n  instance: >\n    a\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: not a one-line scalar in new; only a top-level entry is copied whole");
    assert_not_kept("cluster: {instance: \"a\n  b\"}\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: not a one-line scalar in new; only a top-level entry is copied whole");
    assert_not_kept("cluster: {instance: [a]}\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: not a one-line scalar in new; only a top-level entry is copied whole");
    assert_not_kept("  store: {path: x}\n  version: 1\n", "store: {path: y}\n", paths, 1,
                    "store: new and current indent their top-level keys differently");
}

Test(yamledit_keep, text_that_does_not_parse_is_an_error)
{
    const char *paths[] = {"store"};
    cr_assert_null(keep("store: [\n  - a\n", "store: {path: y}\n", paths, 1));
    cr_assert(strncmp(err, "new: line ", 10) == 0, "%s", err);
    cr_assert_null(keep("store: {path: y}\n", "store: {path: y\nversion: 1\n", paths, 1));
    cr_assert(strncmp(err, "current: line ", 14) == 0, "%s", err);
    const char *bad[] = {"", "cluster..instance", ".store", "store."};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_null(keep("version: 1\n", "version: 1\n", &bad[i], 1), "%s", bad[i]);
        cr_assert(strstr(err, "not a path") != NULL, "%s", err);
    }
}

Test(yamledit_keep, refuses_anchors_and_aliases_at_or_around_an_entry)
{
    const char *paths[] = {"store", "cluster.instance"};
    assert_not_kept("store: &s {path: x}\nother: *s\n", "store: {path: y}\n", paths, 1,
                    "store: an anchor or alias stands at or under it in new; edit it by hand");
    assert_not_kept("version: 1\n", "base: &b {path: y}\nstore: *b\n", paths, 1,
                    "store: an anchor or alias stands at or under it in current; edit it by hand");
    assert_not_kept("version: 1\n", "x: &p y\nstore: {path: *p}\n", paths, 1,
                    "store: an anchor or alias stands at or under it in current; edit it by hand");
    assert_not_kept("cluster: &c {instance: a}\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: under an anchor in new; edit it by hand");
    assert_not_kept("cluster: &c {name: t}\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: under an anchor in new; edit it by hand");
    assert_not_kept("base: &c {name: t}\ncluster: *c\n", "cluster: {instance: b}\n", paths, 2,
                    "cluster.instance: passes through an alias in new");
    assert_not_kept("cluster: {instance: a}\n", "base: &c {instance: b}\ncluster: *c\n", paths, 2,
                    "cluster.instance: passes through an alias in current");
    /* Copying from under an anchor in current is fine: the text is literal. */
    assert_kept("cluster: {instance: a}\n", "cluster: &c {instance: b}\n", paths, 2,
                "cluster: {instance: b}\n");
}

Test(yamledit_keep, the_last_entry_keeps_the_texts_ending_and_appends_follow_in_the_order_given)
{
    const char *paths[] = {"store", "listen", "cluster"};
    /* new ends without a line break: the replaced last entry too, and what is appended starts on a new line.
     */
    assert_kept("version: 1\nstore: {path: a}",
                "listen: {gateway: {port: 1}}\nstore:\n  path: b\ncluster: {}", paths, 3,
                "version: 1\nstore:\n  path: b\nlisten: {gateway: {port: 1}}\ncluster: {}\n");
    assert_kept("store: {path: a}\nversion: 1\n", "store: {path: b}", paths, 1,
                "store: {path: b}\nversion: 1\n");
}

Test(yamledit_keep, refuses_a_top_level_key_that_does_not_start_its_line)
{
    const char *paths[] = {"store"};
    assert_not_kept("? store\n: {path: a}\n", "store: {path: b}\n", paths, 1,
                    "store: its key does not start its line in new");
    assert_not_kept("version: 1\n", "? store\n: {path: b}\n", paths, 1,
                    "store: its key does not start its line in current");
    assert_not_kept("? version\n: 1\n", "store: {path: b}\n", paths, 1,
                    "store: the first top-level key does not start its line in new");
}
