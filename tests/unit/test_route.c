/* Routing: globs, endpoint recognition, candidate lists (failover, load balance, model_map, skips). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/route.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- globs ---------------------------------------------------------------- */

Test(route, glob_star_question_and_literals)
{
    static const struct {
        const char *pattern, *s;
        bool match;
    } cases[] = {
        {"*", "", true},
        {"*", "anything", true},
        {"", "", true},
        {"", "a", false},
        {"claude-*", "claude-sonnet-4", true},
        {"claude-*", "claude-", true},
        {"claude-*", "claude", false},
        {"claude-*", "xclaude-a", false},
        {"*-mini", "gpt-4o-mini", true},
        {"*-mini", "gpt-4o-mini-2", false},
        {"gpt-?o", "gpt-4o", true},
        {"gpt-?o", "gpt-o", false},
        {"gpt-?o", "gpt-44o", false},
        {"?", "", false},
        {"??", "ab", true},
        {"a*b*c", "abc", true},
        {"a*b*c", "aXbYc", true},
        {"a*b*c", "aXbYcZ", false},
        {"a*b*c", "acb", false},
        {"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
        {"**", "x", true},
        {"*?", "", false},
        {"*?", "x", true},
        {"o[13]*", "o1-mini", false}, /* no classes: '[' is a literal */
        {"o[13]*", "o[13]x", true},
        {"Claude-*", "claude-x", false},
        {"gemini-2.5-*", "gemini-2.5-pro", true},
        {"gemini-2.5-*", "gemini-2x5-pro", false},
    };
    for (size_t i = 0; i < N(cases); i++)
        cr_assert_eq(sl_glob_match(cases[i].pattern, cases[i].s), cases[i].match, "'%s' vs '%s'",
                     cases[i].pattern, cases[i].s);
}

/* ---- endpoints ------------------------------------------------------------ */

Test(route, every_dialect_path_is_recognised)
{
    static const struct {
        const char *method, *target;
        sl_dialect_t dialect;
        sl_op_t op;
        bool stream;
        const char *model, *query;
    } cases[] = {
        {"POST", "/v1/messages", SL_DIALECT_ANTHROPIC, SL_OP_GENERATE, false, "", NULL},
        {"POST", "/v1/messages?beta=true", SL_DIALECT_ANTHROPIC, SL_OP_GENERATE, false, "", "beta=true"},
        {"POST", "/v1/messages/count_tokens", SL_DIALECT_ANTHROPIC, SL_OP_COUNT_TOKENS, false, "", NULL},
        {"POST", "/v1/messages/count_tokens?beta=true", SL_DIALECT_ANTHROPIC, SL_OP_COUNT_TOKENS, false, "",
         "beta=true"},
        {"POST", "/v1/chat/completions", SL_DIALECT_OPENAI_CHAT, SL_OP_GENERATE, false, "", NULL},
        {"POST", "/v1/responses", SL_DIALECT_OPENAI_RESPONSES, SL_OP_GENERATE, false, "", NULL},
        {"POST", "/v1/responses/input_tokens", SL_DIALECT_OPENAI_RESPONSES, SL_OP_COUNT_TOKENS, false, "",
         NULL},
        {"GET", "/v1/responses", SL_DIALECT_OPENAI_RESPONSES, SL_OP_WEBSOCKET, true, "", NULL},
        {"GET", "/v1/models", SL_DIALECT_COUNT, SL_OP_LIST_MODELS, false, "", NULL},
        {"GET", "/v1/models?limit=20", SL_DIALECT_COUNT, SL_OP_LIST_MODELS, false, "", "limit=20"},
        {"POST", "/v1beta/models/gemini-2.5-pro:generateContent", SL_DIALECT_GEMINI, SL_OP_GENERATE, false,
         "gemini-2.5-pro", NULL},
        {"POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", SL_DIALECT_GEMINI,
         SL_OP_GENERATE, true, "gemini-2.5-pro", "alt=sse"},
        {"POST", "/v1beta/models/gemini-2.5-flash:countTokens?key=abc", SL_DIALECT_GEMINI, SL_OP_COUNT_TOKENS,
         false, "gemini-2.5-flash", "key=abc"},
        {"POST", "/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse", SL_DIALECT_GEMINI, SL_OP_GENERATE,
         true, "gemini-2.5-pro", "alt=sse"},
        {"POST", "/v1/models/gemini-2.5-pro:generateContent", SL_DIALECT_GEMINI, SL_OP_GENERATE, false,
         "gemini-2.5-pro", NULL},
        {"POST", "/v1/models/gemini-2.5-pro:countTokens", SL_DIALECT_GEMINI, SL_OP_COUNT_TOKENS, false,
         "gemini-2.5-pro", NULL},
        {"POST", "/v1alpha/models/gemini-2.5-pro:streamGenerateContent?alt=sse", SL_DIALECT_GEMINI,
         SL_OP_GENERATE, true, "gemini-2.5-pro", "alt=sse"},
        {"POST", "/v1alpha/models/gemini-2.5-pro:generateContent", SL_DIALECT_GEMINI, SL_OP_GENERATE, false,
         "gemini-2.5-pro", NULL},
        {"POST", "/v1alpha/models/gemini-2.5-pro:countTokens", SL_DIALECT_GEMINI, SL_OP_COUNT_TOKENS, false,
         "gemini-2.5-pro", NULL},
        {"POST", "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse", SL_DIALECT_BEDROCK,
         SL_OP_GENERATE, false, "anthropic.claude-3-5-sonnet-20240620-v1:0", NULL},
        {"POST", "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse-stream", SL_DIALECT_BEDROCK,
         SL_OP_GENERATE, true, "anthropic.claude-3-5-sonnet-20240620-v1:0", NULL},
        {"POST",
         "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-x/"
         "converse-stream",
         SL_DIALECT_BEDROCK, SL_OP_GENERATE, true,
         "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x", NULL},
        {"POST", "/v1/messages?", SL_DIALECT_ANTHROPIC, SL_OP_GENERATE, false, "", ""},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_endpoint_t e;
        memset(&e, 0xAB, sizeof e);
        const char *t = cases[i].target;
        cr_assert(sl_endpoint_parse(cases[i].method, strlen(cases[i].method), t, strlen(t), &e), "%s %s",
                  cases[i].method, t);
        cr_assert_eq(e.dialect, cases[i].dialect, "%s", t);
        cr_assert_eq(e.op, cases[i].op, "%s", t);
        cr_assert_eq(e.stream_by_path, cases[i].stream, "%s", t);
        cr_assert_str_eq(e.model, cases[i].model, "%s", t);
        if (cases[i].query == NULL) {
            cr_assert_null(e.query, "%s", t);
            cr_assert_eq(e.query_len, 0);
        } else {
            cr_assert_not_null(e.query, "%s", t);
            cr_assert_eq(e.query_len, strlen(cases[i].query), "%s", t);
            cr_assert(memcmp(e.query, cases[i].query, e.query_len) == 0, "%s", t);
            cr_assert_eq(e.query, t + strlen(t) - e.query_len, "the query points into the target");
        }
    }
}

Test(route, other_methods_and_paths_are_not_endpoints)
{
    static const struct {
        const char *method, *target;
    } cases[] = {
        {"GET", "/v1/messages"},
        {"PUT", "/v1/messages"},
        {"post", "/v1/messages"},
        {"POST", "/v1/messages/"},
        {"POST", "/v1/message"},
        {"POST", "/v1/messagesx"},
        {"POST", "/V1/messages"},
        {"POST", "/messages"},
        {"POST", "/v1/messages/count_tokens/x"},
        {"POST", "/v1/chat/completions/"},
        {"GET", "/v1/chat/completions"},
        {"POST", "/v1/models"},
        {"GET", "/v1/models/claude-x"},
        {"POST", "/v1/responses/resp_123"},
        {"GET", "/v1/responses/input_tokens"},
        {"GET", "/v1beta/models/gemini-2.5-pro:generateContent"},
        {"POST", "/v1beta/models/:generateContent"},
        {"POST", "/v1beta/models/gemini-2.5-pro"},
        {"POST", "/v1beta/models/gemini-2.5-pro:embedContent"},
        {"POST", "/v1beta/models/gemini-2.5-pro:generatecontent"},
        {"POST", "/v1beta/models/a/b:generateContent"},
        {"POST", "/v1beta/models/bad%zzname:generateContent"},
        {"POST", "/v1beta/models/nul%00:generateContent"},
        {"POST", "/v1beta/models/trunc%4:generateContent"},
        {"POST", "/v2/models/gemini-2.5-pro:generateContent"},
        {"POST", "/v1beta2/models/gemini-2.5-pro:generateContent"},
        {"POST", "/models/gemini-2.5-pro:generateContent"},
        {"POST", "/v1/v1beta/models/gemini-2.5-pro:generateContent"},
        {"GET", "/v1/models/gemini-2.5-pro:generateContent"},
        {"POST", "/v1alpha/models/:countTokens"},
        {"POST", "/model//converse"},
        {"POST", "/model/m/invoke"},
        {"POST", "/model/m/converse/"},
        {"POST", "/model/a/b/converse"},
        {"POST", "/model/line%0Abreak/converse"},
        {"GET", "/model/m/converse"},
        {"POST", "/"},
        {"POST", ""},
        {"POST", "?x=1"},
        {"", "/v1/messages"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        sl_endpoint_t e, before;
        memset(&e, 0x5A, sizeof e);
        before = e;
        const char *t = cases[i].target;
        cr_assert_not(sl_endpoint_parse(cases[i].method, strlen(cases[i].method), t, strlen(t), &e), "%s %s",
                      cases[i].method, t);
        cr_assert(memcmp(&e, &before, sizeof e) == 0, "%s %s: out was written", cases[i].method, t);
    }
}

Test(route, model_in_path_is_bounded)
{
    char path[SL_ENDPOINT_MODEL_MAX + 64], model[SL_ENDPOINT_MODEL_MAX + 1];
    sl_endpoint_t e;
    memset(model, 'm', SL_ENDPOINT_MODEL_MAX - 1);
    model[SL_ENDPOINT_MODEL_MAX - 1] = '\0';
    snprintf(path, sizeof path, "/model/%s/converse", model);
    cr_assert(sl_endpoint_parse("POST", 4, path, strlen(path), &e));
    cr_assert_eq(strlen(e.model), SL_ENDPOINT_MODEL_MAX - 1);
    model[SL_ENDPOINT_MODEL_MAX - 1] = 'm';
    model[SL_ENDPOINT_MODEL_MAX] = '\0';
    snprintf(path, sizeof path, "/model/%s/converse", model);
    cr_assert_not(sl_endpoint_parse("POST", 4, path, strlen(path), &e));
}

Test(route, targets_need_not_be_nul_terminated)
{
    static const char buf[] = "POST/v1/chat/completionsXYZ";
    sl_endpoint_t e;
    cr_assert(sl_endpoint_parse(buf, 4, buf + 4, 20, &e));
    cr_assert_eq(e.dialect, SL_DIALECT_OPENAI_CHAT);
    cr_assert_not(sl_endpoint_parse(buf, 4, buf + 4, 21, &e));
}

/* ---- candidates ----------------------------------------------------------- */

/*
 * Configs as the loader leaves them (tests/unit/test_config.c checks that):
 * every provider has its model globs ("*" when the file gives none), every
 * route member a weight (1 when the file gives none).
 */
#define GLOBS(...) .models = (char *[]){__VA_ARGS__}, .n_models = N(((char *[]){__VA_ARGS__}))
#define MEMBERS(...)                                                                                         \
    .members = (sl_route_member_t[]){__VA_ARGS__}, .n_members = N(((sl_route_member_t[]){__VA_ARGS__}))

static sl_provider_t routed_providers[] = {
    {.name = "anthropic",
     .protocol = SL_DIALECT_ANTHROPIC,
     GLOBS("claude-*"),
     .model_map = (sl_pair_t[]){{"claude-sonnet-4", "claude-sonnet-4-20250514"},
                                {"sonnet", "claude-sonnet-4-20250514"}},
     .n_model_map = 2},
    {.name = "relay", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
    {.name = "off", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*"), .disabled = true},
    {.name = "openai-a", .protocol = SL_DIALECT_OPENAI_CHAT, GLOBS("gpt-*")},
    {.name = "openai-b", .protocol = SL_DIALECT_OPENAI_CHAT, GLOBS("gpt-*")},
    {.name = "openai-c", .protocol = SL_DIALECT_OPENAI_CHAT, GLOBS("*")},
    {.name = "gemini", .protocol = SL_DIALECT_GEMINI, GLOBS("gemini-*")},
};

enum { ANTHROPIC, RELAY, OFF, OPENAI_A, OPENAI_B, OPENAI_C, GEMINI };

static sl_route_t routed_routes[] = {
    {.match = "claude-*", .kind = SL_ROUTE_FAILOVER, MEMBERS({ANTHROPIC, 1}, {OFF, 1}, {RELAY, 1})},
    {.match = "sonnet",
     .kind = SL_ROUTE_FAILOVER,
     MEMBERS({RELAY, 1}, {ANTHROPIC, 1}),
     .context_fallback = (sl_route_member_t[]){{ANTHROPIC, 1}, {OFF, 1}, {GEMINI, 1}, {RELAY, 1}},
     .n_context_fallback = 4},
    {.match = "gpt-lb-*",
     .kind = SL_ROUTE_LOAD_BALANCE,
     MEMBERS({OFF, 1}, {OPENAI_A, 2}, {ANTHROPIC, 1}, {OPENAI_B, 1})},
    {.match = "gpt-4o*", .kind = SL_ROUTE_LOAD_BALANCE, MEMBERS({OPENAI_A, 1}, {OPENAI_B, 3})},
    {.match = "gpt-*", .kind = SL_ROUTE_LOAD_BALANCE, MEMBERS({OPENAI_A, 1}, {OPENAI_B, 1}, {OPENAI_C, 1})},
    {.match = "mixed-*", .kind = SL_ROUTE_FAILOVER, MEMBERS({GEMINI, 1}, {OPENAI_A, 1}, {ANTHROPIC, 1})},
    {.match = "*", .kind = SL_ROUTE_FAILOVER, MEMBERS({RELAY, 1})},
};

static const sl_config_t routed = {
    .providers = routed_providers,
    .n_providers = N(routed_providers),
    .has_routes = true,
    .routes = routed_routes,
    .n_routes = N(routed_routes),
};

/* Candidates as "name:model:skip,…" for compact expectations. */
static const char *
describe(const sl_config_t *c, const sl_candidate_t *cand, size_t n)
{
    static char buf[1024];
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s:%s%s%s", i ? "," : "",
                               c->providers[cand[i].provider].name, cand[i].model, cand[i].skip ? ":" : "",
                               sl_skip_slug(cand[i].skip));
    }
    return buf;
}

static const char *
route_of(const sl_config_t *c, sl_dialect_t d, const char *model, uint64_t counter, size_t *route)
{
    sl_candidate_t cand[16];
    size_t n = 0;
    cr_assert(c->n_providers <= N(cand));
    cr_assert(sl_route_select(c, d, model, counter, cand, &n, route), "no route for %s", model);
    return describe(c, cand, n);
}

Test(route, failover_lists_members_in_order_with_their_skips)
{
    const sl_config_t *c = &routed;
    size_t r;
    cr_assert_str_eq(route_of(c, SL_DIALECT_ANTHROPIC, "claude-opus-4", 0, &r),
                     "anthropic:claude-opus-4,off:claude-opus-4:disabled,relay:claude-opus-4");
    cr_assert_eq(r, 0);
    /* the counter plays no part in failover */
    cr_assert_str_eq(route_of(c, SL_DIALECT_ANTHROPIC, "claude-opus-4", 7, &r),
                     "anthropic:claude-opus-4,off:claude-opus-4:disabled,relay:claude-opus-4");
}

Test(route, model_map_renames_per_provider)
{
    const sl_config_t *c = &routed;
    size_t r;
    cr_assert_str_eq(route_of(c, SL_DIALECT_ANTHROPIC, "claude-sonnet-4", 0, &r),
                     "anthropic:claude-sonnet-4-20250514,off:claude-sonnet-4:disabled,relay:claude-sonnet-4");
    /* a mapped alias is offered even though no models glob matches it */
    cr_assert_str_eq(route_of(c, SL_DIALECT_ANTHROPIC, "sonnet", 0, &r),
                     "relay:sonnet,anthropic:claude-sonnet-4-20250514");
    cr_assert_eq(r, 1);
}

static const char *
context_fallback_of(const sl_config_t *c, size_t route, sl_dialect_t d, const char *model)
{
    sl_candidate_t cand[16];
    size_t n = sl_route_context_fallback(c, route, d, model, cand);
    return describe(c, cand, n);
}

/* behaviour.md §1.6: the route's context_fallback, whatever the models globs say, mapped names sent. */
Test(route, context_fallback_lists_its_providers_with_their_names_and_skips)
{
    const sl_config_t *c = &routed;
    cr_assert_str_eq(context_fallback_of(c, 1, SL_DIALECT_ANTHROPIC, "sonnet"),
                     "anthropic:claude-sonnet-4-20250514,off:sonnet:disabled,gemini:sonnet:not_offered,"
                     "relay:sonnet");
    cr_assert_str_eq(context_fallback_of(c, 1, SL_DIALECT_ANTHROPIC, "other-model"),
                     "anthropic:other-model,off:other-model:disabled,gemini:other-model:not_offered,"
                     "relay:other-model");
    cr_assert_str_eq(context_fallback_of(c, 0, SL_DIALECT_ANTHROPIC, "claude-x"), "", "a route without one");
    cr_assert_str_eq(context_fallback_of(c, SL_ROUTE_BY_MODELS, SL_DIALECT_ANTHROPIC, "claude-x"), "");
}

Test(route, other_dialects_and_unmatched_models_are_not_offered)
{
    const sl_config_t *c = &routed;
    size_t r;
    cr_assert_str_eq(route_of(c, SL_DIALECT_GEMINI, "mixed-1", 0, &r),
                     "gemini:mixed-1:not_offered,openai-a:mixed-1:not_offered,anthropic:mixed-1:not_offered");
    cr_assert_str_eq(
        route_of(c, SL_DIALECT_OPENAI_CHAT, "claude-opus-4", 0, &r),
        "anthropic:claude-opus-4:not_offered,off:claude-opus-4:disabled,relay:claude-opus-4:not_offered");
    cr_assert_str_eq(
        route_of(c, SL_DIALECT_OPENAI_CHAT, "mixed-gpt", 0, &r),
        "gemini:mixed-gpt:not_offered,openai-a:mixed-gpt:not_offered,anthropic:mixed-gpt:not_offered");
}

Test(route, first_matching_route_wins_and_star_is_the_default)
{
    const sl_config_t *c = &routed;
    size_t r;
    cr_assert_str_eq(route_of(c, SL_DIALECT_ANTHROPIC, "llama-3", 0, &r), "relay:llama-3");
    cr_assert_eq(r, 6);
    route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-4o-mini", 0, &r);
    cr_assert_eq(r, 3, "gpt-4o* comes before gpt-*");
    route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-5", 0, &r);
    cr_assert_eq(r, 4);
}

Test(route, no_matching_route_leaves_the_outputs_untouched)
{
    sl_provider_t a = {.name = "a", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")};
    sl_route_t claude = {.match = "claude-*", .kind = SL_ROUTE_FAILOVER, MEMBERS({0, 1})};
    const sl_config_t config = {
        .providers = &a, .n_providers = 1, .has_routes = true, .routes = &claude, .n_routes = 1};
    const sl_config_t *c = &config;
    sl_candidate_t cand[4];
    memset(cand, 0x77, sizeof cand);
    size_t n = 99, r = 98;
    cr_assert_not(sl_route_select(c, SL_DIALECT_ANTHROPIC, "gpt-5", 0, cand, &n, &r));
    cr_assert_eq(n, 99);
    cr_assert_eq(r, 98);
    for (size_t i = 0; i < sizeof cand; i++)
        cr_assert_eq(((unsigned char *)cand)[i], 0x77);
}

/* How often each provider goes first over `count` consecutive counter values. */
static void
first_counts(const sl_config_t *c, sl_dialect_t d, const char *model, uint64_t from, uint64_t count,
             size_t firsts[16])
{
    memset(firsts, 0, 16 * sizeof(size_t));
    for (uint64_t k = from; k < from + count; k++) {
        sl_candidate_t cand[16];
        size_t n, r;
        cr_assert(sl_route_select(c, d, model, k, cand, &n, &r));
        firsts[cand[0].provider]++;
    }
}

Test(route, weighted_balance_matches_the_weights_exactly_over_every_cycle)
{
    const sl_config_t *c = &routed;
    size_t firsts[16];
    /* openai-a (index 3) weight 1, openai-b (index 4) weight 3: W = 4, any 4 consecutive counters */
    static const uint64_t starts[] = {0, 1, 2, 3, 1000001, UINT64_MAX - 10};
    for (size_t s = 0; s < N(starts); s++) {
        first_counts(c, SL_DIALECT_OPENAI_CHAT, "gpt-4o", starts[s], 4, firsts);
        cr_assert_eq(firsts[3], 1, "start %llu", (unsigned long long)starts[s]);
        cr_assert_eq(firsts[4], 3, "start %llu", (unsigned long long)starts[s]);
    }
    first_counts(c, SL_DIALECT_OPENAI_CHAT, "gpt-4o", 5, 4000, firsts);
    cr_assert_eq(firsts[3], 1000);
    cr_assert_eq(firsts[4], 3000);
}

Test(route, balanced_members_follow_the_first_as_failover_order)
{
    const sl_config_t *c = &routed;
    size_t r;
    /* equal weights rotate plainly: a, b, c, a, … with the others following in listed order */
    cr_assert_str_eq(route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-5", 0, &r),
                     "openai-a:gpt-5,openai-b:gpt-5,openai-c:gpt-5");
    cr_assert_str_eq(route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-5", 1, &r),
                     "openai-b:gpt-5,openai-c:gpt-5,openai-a:gpt-5");
    cr_assert_str_eq(route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-5", 2, &r),
                     "openai-c:gpt-5,openai-a:gpt-5,openai-b:gpt-5");
    cr_assert_str_eq(route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-5", 3, &r),
                     "openai-a:gpt-5,openai-b:gpt-5,openai-c:gpt-5");
}

Test(route, members_that_cannot_serve_are_never_picked_first)
{
    const sl_config_t *c = &routed;
    size_t firsts[16];
    /* off (disabled) and anthropic (not offered to a Chat client) are skipped: only openai-a (2) and openai-b
     * (1) */
    first_counts(c, SL_DIALECT_OPENAI_CHAT, "gpt-lb-1", 0, 300, firsts);
    cr_assert_eq(firsts[3], 200);
    cr_assert_eq(firsts[4], 100);
    cr_assert_eq(firsts[0] + firsts[2], 0);
    size_t r;
    /* openai-b first: the rest follow from there, wrapping, skipped members in their places */
    const char *want =
        "openai-b:gpt-lb-1,off:gpt-lb-1:disabled,openai-a:gpt-lb-1,anthropic:gpt-lb-1:not_offered";
    bool seen = false;
    for (uint64_t k = 0; k < 3; k++)
        seen |= strcmp(route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-lb-1", k, &r), want) == 0;
    cr_assert(seen, "no counter put openai-b first in the expected order");
    /* when no member can serve, the listed order stays */
    cr_assert_str_eq(route_of(c, SL_DIALECT_GEMINI, "gpt-lb-1", 5, &r),
                     "off:gpt-lb-1:disabled,openai-a:gpt-lb-1:not_offered,anthropic:gpt-lb-1:not_offered,"
                     "openai-b:gpt-lb-1:not_offered");
}

Test(route, weighted_picks_are_spread_not_bunched)
{
    static const uint32_t weights[][4] = {{1, 3}, {5, 1, 1}, {2, 3, 5}, {1, 100}, {7, 6, 1, 9}};
    sl_provider_t providers[] = {
        {.name = "a", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
        {.name = "b", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
        {.name = "c", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
        {.name = "d", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
    };
    for (size_t i = 0; i < N(weights); i++) {
        sl_route_member_t members[4];
        size_t n_members = 0;
        for (size_t m = 0; m < 4 && weights[i][m] > 0; m++)
            members[n_members++] = (sl_route_member_t){m, weights[i][m]};
        sl_route_t all = {
            .match = "*", .kind = SL_ROUTE_LOAD_BALANCE, .members = members, .n_members = n_members};
        const sl_config_t config = {.providers = providers,
                                    .n_providers = N(providers),
                                    .has_routes = true,
                                    .routes = &all,
                                    .n_routes = 1};
        const sl_config_t *c = &config;
        const sl_route_t *rt = &c->routes[0];
        uint64_t total = 0;
        for (size_t m = 0; m < rt->n_members; m++)
            total += rt->members[m].weight;
        /* Over two cycles, a member waits at most 2 picks longer than its fair gap (listed order would bunch
         * them). */
        uint64_t last[16];
        for (size_t m = 0; m < 16; m++)
            last[m] = UINT64_MAX;
        for (uint64_t k = 0; k < 2 * total; k++) {
            sl_candidate_t cand[16];
            size_t n, r;
            cr_assert(sl_route_select(c, SL_DIALECT_ANTHROPIC, "m", k, cand, &n, &r));
            size_t p = cand[0].provider;
            uint32_t w = rt->members[p].weight;
            uint64_t fair = (total + w - 1) / w;
            if (last[p] != UINT64_MAX)
                cr_assert_leq(k - last[p], fair + 2, "config %zu: %s waited %llu picks (fair %llu)", i,
                              c->providers[p].name, (unsigned long long)(k - last[p]),
                              (unsigned long long)fair);
            last[p] = k;
        }
    }
}

Test(route, without_routes_every_provider_of_the_dialect_offering_the_model_in_config_order)
{
    sl_provider_t providers[] = {
        {.name = "chat", .protocol = SL_DIALECT_OPENAI_CHAT, GLOBS("gpt-*")},
        {.name = "resp", .protocol = SL_DIALECT_OPENAI_RESPONSES, GLOBS("gpt-*")},
        {.name = "relay-off", .protocol = SL_DIALECT_OPENAI_CHAT, GLOBS("*"), .disabled = true},
        {.name = "relay",
         .protocol = SL_DIALECT_OPENAI_CHAT,
         GLOBS("*"),
         .model_map = (sl_pair_t[]){{"gpt-5", "gpt-5-2025"}},
         .n_model_map = 1},
        {.name = "claude", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("claude-*")},
    };
    const sl_config_t config = {.providers = providers, .n_providers = N(providers)};
    const sl_config_t *c = &config;
    size_t r;
    cr_assert_str_eq(route_of(c, SL_DIALECT_OPENAI_CHAT, "gpt-5", 0, &r),
                     "chat:gpt-5,relay-off:gpt-5:disabled,relay:gpt-5-2025");
    cr_assert_eq(r, SL_ROUTE_BY_MODELS);
    cr_assert_str_eq(route_of(c, SL_DIALECT_OPENAI_RESPONSES, "gpt-5", 0, &r), "resp:gpt-5");
    /* the relays offer "*": they take any name */
    cr_assert_str_eq(route_of(c, SL_DIALECT_OPENAI_CHAT, "llama", 0, &r),
                     "relay-off:llama:disabled,relay:llama");
    cr_assert_str_eq(route_of(c, SL_DIALECT_ANTHROPIC, "claude-x", 0, &r), "claude:claude-x");
    sl_candidate_t cand[8];
    size_t n = 5;
    cr_assert_not(sl_route_select(c, SL_DIALECT_ANTHROPIC, "gpt-5", 0, cand, &n, &r));
    cr_assert_not(sl_route_select(c, SL_DIALECT_GEMINI, "gemini-2.5-pro", 0, cand, &n, &r));
    cr_assert_eq(n, 5);
}

Test(route, skip_slugs_are_the_protocol_names)
{
    cr_assert_str_eq(sl_skip_slug(SL_SKIP_DISABLED), "disabled");
    cr_assert_str_eq(sl_skip_slug(SL_SKIP_NOT_OFFERED), "not_offered");
    cr_assert_str_eq(sl_skip_slug(SL_SKIP_PINNED_ELSEWHERE), "pinned_elsewhere");
    cr_assert_str_eq(sl_skip_slug(SL_SKIP_NONE), "");
    cr_assert_str_eq(sl_skip_slug(SL_SKIP_COUNT), "");
}
