/*
 * The registry of usage-limit sets (behaviour.md §7, gateway/limiter.h):
 * one set per upstream and per client key, bound from a config; a reload or
 * a live change keeps what a staying limit counted and seeds a new one from
 * the stored usage buckets; LimitsChanged only for a set that had other
 * limits; rolling windows time-scaled; views in config order.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "limiter.h"
#include "test_config_env.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define SEC  ((int64_t)1000)
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

/* 2026-11-29T16:23:59Z, a Sunday: 59 s into its minute, so the minute's end is 1 s away. */
#define T0       ((int64_t)1795969439000)
#define MIN0     (T0 / MIN)               /* the epoch minute holding T0 */
#define DAY0     ((int64_t)1795910400000) /* 2026-11-29T00:00Z */
#define NEXT_DAY ((int64_t)1795996800000) /* 2026-11-30T00:00Z */
#define WEEK0    ((int64_t)1795392000000) /* Monday 2026-11-23T00:00Z */
#define MONTH0   ((int64_t)1793491200000) /* 2026-11-01T00:00Z */

/* ---- fakes: the usage history and the LimitsChanged listener ----------------------------------- */

typedef struct {
    sl_bucket_kind_t kind;
    const char *name;
    int64_t minute, requests, tokens, cost_micros;
} bucket_t;

static struct {
    const bucket_t *buckets; /* oldest first, as the recorder gives them */
    size_t n_buckets;
    int history_calls;
    int64_t since_ms[16]; /* per history call */
    int changed_calls;
    const sl_limit_set_t *changed_set;
    sl_limit_t changed_limits[8];
    size_t changed_n;
} fake;

/* Like sl_recorder_load_usage: every bucket whose minute contains or follows since_ms. */
static void
on_history(void *ctx, int64_t since_ms, sl_usage_cb add, void *add_ctx)
{
    cr_assert_eq(ctx, &fake);
    cr_assert_lt(fake.history_calls, (int)N(fake.since_ms));
    fake.since_ms[fake.history_calls++] = since_ms;
    for (size_t i = 0; i < fake.n_buckets; i++) {
        const bucket_t *b = &fake.buckets[i];
        if ((b->minute + 1) * MIN <= since_ms)
            continue;
        /* The name is valid only during the call: a copy freed after it lets ASan catch a kept pointer. */
        char *name = strdup(b->name);
        add(add_ctx, b->kind, name, b->minute, b->requests, b->tokens, b->cost_micros);
        free(name);
    }
}

static void
on_changed(void *ctx, const sl_limit_set_t *set, const sl_limit_t *limits, size_t n)
{
    cr_assert_eq(ctx, &fake);
    cr_assert_leq(n, N(fake.changed_limits));
    fake.changed_calls++;
    fake.changed_set = set;
    fake.changed_n = n;
    if (n > 0) /* limits may be NULL then */
        memcpy(fake.changed_limits, limits, n * sizeof(*limits));
}

#define GIVE_HISTORY(table)                                                                                  \
    do {                                                                                                     \
        fake.buckets = (table);                                                                              \
        fake.n_buckets = N(table);                                                                           \
    } while (0)

/* ---- the limiter under test, its configs and bound sets, freed by fini even after a failure --------- */

static sl_limiter_t *lim;
static sl_config_t *configs[4];
static size_t n_configs;
static sl_limit_sets_t bound[8];
static size_t n_bound;

static void
start(double time_scale)
{
    sl_retry_params_t params = {.time_scale = time_scale};
    lim = sl_limiter_new(&params, on_history, on_changed, &fake);
    cr_assert_not_null(lim);
}

static const sl_config_t *
load(const char *yaml)
{
    cr_assert_lt(n_configs, N(configs));
    configs[n_configs] = test_config_of(yaml);
    cr_assert_not_null(configs[n_configs], "the test config parses");
    return configs[n_configs++];
}

static sl_limit_sets_t *
bind_at(const sl_config_t *config, int64_t now_ms)
{
    cr_assert_lt(n_bound, N(bound));
    bound[n_bound] = sl_limiter_bind(lim, config, now_ms);
    cr_assert_not_null(bound[n_bound].providers);
    cr_assert_not_null(bound[n_bound].clients);
    return &bound[n_bound++];
}

static void
setup(void)
{
    memset(&fake, 0, sizeof(fake));
    lim = NULL;
    n_configs = n_bound = 0;
}

static void
teardown(void)
{
    for (size_t i = 0; i < n_bound; i++)
        sl_limit_sets_free(&bound[i]);
    sl_limiter_free(lim);
    for (size_t i = 0; i < n_configs; i++)
        sl_config_free(configs[i]);
}

TestSuite(limiter, .init = setup, .fini = teardown);

/* ---- configs ---------------------------------------------------------------------------------- */

#define UP(name)                                                                                             \
    "  - name: " name "\n"                                                                                   \
    "    protocol: anthropic\n"                                                                              \
    "    base_url: \"http://127.0.0.1:9/\"\n"

static const char config_a[] = "providers:\n" UP("up1") "    limits:\n"
                                                        "      - {per: minute, every: 5, tokens: 10000}\n"
                                                        "      - {per: hour, requests: 100}\n" UP(
                                                            "up2") "    limits:\n"
                                                                   "      - {per: week, tokens: 500}\n"
                                                                   "clients:\n"
                                                                   "  - name: alice\n"
                                                                   "    key: k1\n"
                                                                   "    limits:\n"
                                                                   "      - {per: minute, requests: 30}\n"
                                                                   "      - {per: day, cost: 20}\n"
                                                                   "  - name: bob\n"
                                                                   "    key: k2\n";

/*
 * A reload of config_a: up1 keeps its limits with other amounts; up2 and
 * bob are as they were; alice keeps her minute (another amount), her day
 * limit counts tokens instead of cost, and she gets an hourly one.
 */
static const char config_b[] = "providers:\n" UP("up1") "    limits:\n"
                                                        "      - {per: minute, every: 5, tokens: 20000}\n"
                                                        "      - {per: hour, requests: 50}\n" UP(
                                                            "up2") "    limits:\n"
                                                                   "      - {per: week, tokens: 500}\n"
                                                                   "clients:\n"
                                                                   "  - name: alice\n"
                                                                   "    key: k1\n"
                                                                   "    limits:\n"
                                                                   "      - {per: minute, requests: 40}\n"
                                                                   "      - {per: day, tokens: 1000}\n"
                                                                   "      - {per: hour, requests: 500}\n"
                                                                   "  - name: bob\n"
                                                                   "    key: k2\n";

static void
assert_limit_eq(const sl_limit_t *got, const sl_limit_t *want, const char *what)
{
    cr_assert_eq(got->per, want->per, "%s: per", what);
    cr_assert_eq(got->every, want->every, "%s: every", what);
    cr_assert_eq(got->measure, want->measure, "%s: measure", what);
    cr_assert_eq(got->amount, want->amount, "%s: amount", what);
}

static void
assert_set_has_limits_of(const sl_limit_set_t *set, const sl_limit_t *limits, size_t n)
{
    cr_assert_eq(set->n, n, "%s has %zu limits, not %zu", set->name, n, set->n);
    for (size_t i = 0; i < n; i++)
        assert_limit_eq(&set->states[i].limit, &limits[i], set->name);
}

/* ---- bind ------------------------------------------------------------------------------------- */

Test(limiter, bind_creates_one_set_per_provider_and_per_client_in_config_order_with_their_limits)
{
    start(0);
    const sl_config_t *c = load(config_a);
    sl_limit_sets_t *s = bind_at(c, T0);

    cr_assert_eq(s->providers[0]->kind, SL_BUCKET_PROVIDER);
    cr_assert_str_eq(s->providers[0]->name, "up1");
    cr_assert_eq(s->providers[1]->kind, SL_BUCKET_PROVIDER);
    cr_assert_str_eq(s->providers[1]->name, "up2");
    cr_assert_eq(s->clients[0]->kind, SL_BUCKET_CLIENT);
    cr_assert_str_eq(s->clients[0]->name, "alice");
    cr_assert_eq(s->clients[1]->kind, SL_BUCKET_CLIENT);
    cr_assert_str_eq(s->clients[1]->name, "bob");

    for (size_t i = 0; i < c->n_providers; i++)
        assert_set_has_limits_of(s->providers[i], c->providers[i].limits, c->providers[i].n_limits);
    for (size_t i = 0; i < c->n_clients; i++)
        assert_set_has_limits_of(s->clients[i], c->clients[i].limits, c->clients[i].n_limits);
    /* Spelled out too, so a config parse change cannot make both sides agree on nonsense. */
    cr_assert_eq(s->providers[0]->n, 2);
    cr_assert_eq(s->providers[0]->states[0].limit.amount, 10000);
    cr_assert_eq(s->providers[0]->states[0].window_ms, 5 * MIN);
    cr_assert_eq(s->providers[0]->states[1].window_ms, HOUR);
    cr_assert_eq(s->providers[1]->states[0].window_ms, 0, "a calendar period has no window");
    cr_assert_eq(s->clients[0]->states[1].limit.amount, 20000000);
    cr_assert_eq(s->clients[1]->n, 0, "a key without limits has an empty set");

    for (size_t i = 0; i < c->n_providers; i++)
        cr_assert_eq(sl_limit_set_views(s->providers[i], T0, NULL, 0), c->providers[i].n_limits);
    cr_assert_eq(fake.changed_calls, 0);
}

Test(limiter, binding_the_same_config_again_returns_the_same_sets_and_keeps_what_was_counted)
{
    start(0);
    sl_limit_sets_t *first = bind_at(load(config_a), T0);
    sl_limit_set_t *up1 = first->providers[0], *alice = first->clients[0];
    sl_limit_state_t *up1_states = up1->states, *alice_states = alice->states;
    sl_limits_add(up1->states, up1->n, T0, T0, &(sl_amounts_t){.requests = 3, .tokens = 400});
    sl_limits_add(alice->states, alice->n, T0, T0, &(sl_amounts_t){.requests = 2, .cost_micros = 1500000});
    int history_calls = fake.history_calls;

    /* A reload parses the file anew: another config object with the same content. */
    sl_limit_sets_t *second = bind_at(load(config_a), T0 + SEC / 2);

    cr_assert_eq(second->providers[0], first->providers[0]);
    cr_assert_eq(second->providers[1], first->providers[1]);
    cr_assert_eq(second->clients[0], first->clients[0]);
    cr_assert_eq(second->clients[1], first->clients[1]);
    cr_assert_eq(up1->states, up1_states, "identical limits leave the states alone");
    cr_assert_eq(alice->states, alice_states);
    cr_assert_eq(sl_limit_used(&up1->states[0], T0 + SEC), 400);
    cr_assert_eq(sl_limit_used(&up1->states[1], T0 + SEC), 3);
    cr_assert_eq(sl_limit_used(&alice->states[0], T0 + SEC), 2);
    cr_assert_eq(sl_limit_used(&alice->states[1], T0 + SEC), 1500000);
    cr_assert_eq(fake.history_calls, history_calls, "nothing new to seed");
    cr_assert_eq(fake.changed_calls, 0);
}

Test(limiter, a_set_dropped_by_a_reload_is_kept_with_its_count_until_the_config_names_it_again)
{
    start(0);
    sl_limit_sets_t *a = bind_at(load(config_a), T0);
    sl_limit_set_t *up2 = a->providers[1];
    sl_limits_add(up2->states, up2->n, T0, T0, &(sl_amounts_t){.tokens = 120});
    bind_at(load("providers:\n" UP("up1") "    limits:\n"
                                          "      - {per: minute, every: 5, tokens: 10000}\n"
                                          "      - {per: hour, requests: 100}\n"),
            T0);
    int history_calls = fake.history_calls;

    sl_limit_sets_t *again = bind_at(load(config_a), T0 + SEC);
    cr_assert_eq(again->providers[1], up2);
    cr_assert_eq(sl_limit_used(&up2->states[0], T0 + SEC), 120);
    cr_assert_eq(fake.history_calls, history_calls);
    cr_assert_eq(fake.changed_calls, 0);
}

/* ---- reload: what stays keeps its count, what is new starts from history ------------------------ */

Test(limiter, a_reloaded_limit_with_the_same_per_every_and_measure_keeps_its_count_and_takes_the_new_amount)
{
    start(0);
    sl_limit_sets_t *a = bind_at(load(config_a), T0);
    sl_limit_set_t *up1 = a->providers[0], *alice = a->clients[0];
    sl_limits_add(up1->states, up1->n, T0, T0, &(sl_amounts_t){.requests = 3, .tokens = 400});
    sl_limits_add(alice->states, alice->n, T0, T0, &(sl_amounts_t){.requests = 2, .cost_micros = 1500000});
    sl_limit_state_t *before = up1->states;

    sl_limit_sets_t *b = bind_at(load(config_b), T0 + SEC / 2);

    cr_assert_eq(b->providers[0], up1);
    cr_assert_neq(up1->states, before, "other limits are a new array, swapped in whole");
    cr_assert_eq(up1->n, 2);
    cr_assert_eq(up1->states[0].limit.amount, 20000);
    cr_assert_eq(up1->states[1].limit.amount, 50);
    cr_assert_eq(up1->states[0].window_ms, 5 * MIN);
    cr_assert_eq(sl_limit_used(&up1->states[0], T0 + SEC), 400);
    cr_assert_eq(sl_limit_used(&up1->states[1], T0 + SEC), 3);
    /*
     * The count also leaves the window when it would have: the slot came along. Hour slots are 60 s: T0's is
     * [T0 - 59 s, T0 + 1 s), and it leaves a margin slot and the hour after its end.
     */
    cr_assert_eq(sl_limit_resets_at_ms(&up1->states[1], T0 + SEC), T0 + SEC + MIN + HOUR);
    cr_assert_eq(alice->states[0].limit.amount, 40);
    cr_assert_eq(sl_limit_used(&alice->states[0], T0 + SEC), 2);
}

Test(limiter, limits_that_stay_in_another_order_keep_their_counts)
{
    start(0);
    sl_limit_sets_t *a = bind_at(load(config_a), T0);
    sl_limit_set_t *up1 = a->providers[0];
    sl_limits_add(up1->states, up1->n, T0, T0, &(sl_amounts_t){.requests = 3, .tokens = 400});
    int history_calls = fake.history_calls;

    bind_at(load("providers:\n" UP("up1") "    limits:\n"
                                          "      - {per: hour, requests: 100}\n"
                                          "      - {per: minute, every: 5, tokens: 10000}\n"),
            T0);

    cr_assert_eq(up1->states[0].limit.per, SL_PER_HOUR);
    cr_assert_eq(sl_limit_used(&up1->states[0], T0), 3);
    cr_assert_eq(up1->states[1].limit.per, SL_PER_MINUTE);
    cr_assert_eq(sl_limit_used(&up1->states[1], T0), 400);
    cr_assert_eq(fake.history_calls, history_calls, "nothing is new");
    cr_assert_eq(fake.changed_calls, 1, "the order is part of the limits a view shows");
}

Test(limiter, a_reloaded_limit_with_a_new_per_or_measure_starts_from_the_history_not_from_memory)
{
    start(0);
    sl_limit_sets_t *a = bind_at(load(config_a), T0);
    sl_limit_set_t *alice = a->clients[0];
    sl_limits_add(alice->states, alice->n, T0, T0,
                  &(sl_amounts_t){.requests = 2, .tokens = 50, .cost_micros = 1500000});
    static const bucket_t history[] = {
        {SL_BUCKET_CLIENT, "alice", MIN0 - 90, 4, 70, 0}, /* 14:53: in today, outside the hour */
        {SL_BUCKET_CLIENT, "alice", MIN0 - 1, 6, 8, 0},
        {SL_BUCKET_CLIENT, "alice", MIN0, 1, 7, 0},
    };
    GIVE_HISTORY(history);
    int history_calls = fake.history_calls;

    bind_at(load(config_b), T0);

    cr_assert_eq(alice->n, 3);
    cr_assert_eq(sl_limit_used(&alice->states[0], T0), 2, "a kept limit is not seeded again");
    cr_assert_eq(alice->states[1].limit.measure, SL_MEASURE_TOKENS);
    cr_assert_eq(sl_limit_used(&alice->states[1], T0), 70 + 8 + 7, "a new measure: today's tokens");
    cr_assert_eq(alice->states[2].limit.per, SL_PER_HOUR);
    cr_assert_eq(sl_limit_used(&alice->states[2], T0), 6 + 1, "a new per: the last hour's requests");
    cr_assert_eq(fake.history_calls, history_calls + 1, "asked once, for alice only");
    cr_assert_eq(fake.since_ms[history_calls], DAY0, "from the earliest start among the new limits");
}

Test(limiter, history_is_asked_from_the_lookback_of_the_new_limits_only)
{
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    cr_assert_eq(s->clients[1]->n, 0);
    cr_assert_eq(fake.history_calls, 3, "one read per set with limits: up1, up2, alice");
    /* A rolling window reads from the oldest slot that can still count: the window back, down to its slot's
     * start, and the margin slot before it (T0 is 59 s into a minute). */
    cr_assert_eq(fake.since_ms[0], T0 - HOUR - 59 * SEC - MIN,
                 "up1: its hour and two 1-minute slots, longer than its 5 minutes");
    cr_assert_eq(fake.since_ms[1], WEEK0, "up2: Monday");
    cr_assert_eq(fake.since_ms[2], DAY0, "alice: today, earlier than her minute");

    /* Each row is new to bob (another per or measure than the row before), so each reads the history. */
    static const struct {
        sl_limit_t limit;
        int64_t since_ms;
    } rows[] = {
        {{SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 10}, T0 - MIN - SEC},                    /* 1 s slots */
        {{SL_PER_MINUTE, 5, SL_MEASURE_REQUESTS, 10}, T0 - 5 * MIN - 4 * SEC - 5 * SEC},  /* 5 s slots */
        {{SL_PER_HOUR, 2, SL_MEASURE_TOKENS, 10}, T0 - 2 * HOUR - 119 * SEC - 120 * SEC}, /* 2 min slots */
        {{SL_PER_DAY, 1, SL_MEASURE_COST, 10}, DAY0},
        {{SL_PER_WEEK, 1, SL_MEASURE_TOKENS, 10}, WEEK0},
        {{SL_PER_MONTH, 1, SL_MEASURE_REQUESTS, 10}, MONTH0},
    };
    for (size_t i = 0; i < N(rows); i++) {
        int calls = fake.history_calls;
        cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "bob", &rows[i].limit, 1, T0));
        cr_assert_eq(fake.history_calls, calls + 1, "row %zu", i);
        cr_assert_eq(fake.since_ms[calls], rows[i].since_ms, "row %zu: since %lld", i,
                     (long long)fake.since_ms[calls]);
    }
    /* Only an amount changes: nothing new, no read. */
    sl_limit_t more = rows[N(rows) - 1].limit;
    more.amount = 20;
    int calls = fake.history_calls;
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "bob", &more, 1, T0));
    cr_assert_eq(fake.history_calls, calls);
    cr_assert_eq(s->clients[1]->states[0].limit.amount, 20);
}

Test(limiter, only_buckets_of_the_sets_own_kind_and_name_count)
{
    static const bucket_t history[] = {
        {SL_BUCKET_PROVIDER, "alice", MIN0, 100, 100, 100},
        {SL_BUCKET_CLIENT, "alicia", MIN0, 1000, 1000, 1000},
        {SL_BUCKET_CLIENT, "alic", MIN0, 2000, 2000, 2000},
        {SL_BUCKET_CLIENT, "alice", MIN0, 3, 30, 300},
        {SL_BUCKET_PROVIDER, "up1", MIN0, 7, 70, 0},
        {SL_BUCKET_CLIENT, "up1", MIN0, 9000, 9000, 0},
    };
    GIVE_HISTORY(history);
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);

    sl_limit_set_t *up1 = s->providers[0], *up2 = s->providers[1], *alice = s->clients[0];
    cr_assert_eq(sl_limit_used(&up1->states[0], T0), 70);
    cr_assert_eq(sl_limit_used(&up1->states[1], T0), 7);
    cr_assert_eq(sl_limit_used(&up2->states[0], T0), 0);
    cr_assert_eq(sl_limit_used(&alice->states[0], T0), 3);
    cr_assert_eq(sl_limit_used(&alice->states[1], T0), 300);
}

Test(limiter, a_bucket_older_than_the_window_does_not_count)
{
    static const bucket_t history[] = {
        {SL_BUCKET_CLIENT, "alice", MIN0 - 2, 100, 0, 0}, /* read (after since), but left the window */
        {SL_BUCKET_CLIENT, "alice", MIN0 - 1, 20, 0, 0},
        {SL_BUCKET_CLIENT, "alice", MIN0, 3, 0, 0},
    };
    GIVE_HISTORY(history);
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    sl_limit_set_t *alice = s->clients[0];
    cr_assert_eq(sl_limit_used(&alice->states[0], T0), 20 + 3);
    /*
     * The previous minute counts as spent at its end (T0 - 59 s - 1 ms), in the 1 s slot ending at T0 - 59 s:
     * it leaves a margin slot and the minute after that, at T0 + 2 s.
     */
    cr_assert_eq(sl_limit_used(&alice->states[0], T0 + 2 * SEC - 1), 23);
    cr_assert_eq(sl_limit_used(&alice->states[0], T0 + 2 * SEC), 3);
}

/*
 * The margin slot in history: a minute bucket is spent at its last ms, and the slot holding that counts for
 * a margin slot and the window past its end. With slots longer than 30 s, that can be more than the window
 * and one minute, the look-back the limiter reads history for.
 */
Test(limiter, a_bucket_still_counting_by_its_margin_slot_is_read_back)
{
    /*
     * 45 minutes in slots of 45 s. Minute MIN0 - 47 is [T0 - 47 min 59 s, T0 - 46 min 59 s); its last ms is
     * in the slot [T0 - 47 min 14 s, T0 - 46 min 29 s), which counts until + 45 s + 45 min: T0 - 44 s. The
     * limiter reads history from now - 45 min - 1 min, the end of that minute at now = T0 - 50 s.
     */
    static const bucket_t history[] = {
        {SL_BUCKET_CLIENT, "bob", MIN0 - 47, 7, 0, 0},
    };
    static const sl_limit_t limits[] = {{SL_PER_MINUTE, 45, SL_MEASURE_REQUESTS, 10}};
    GIVE_HISTORY(history);
    start(0);
    int64_t now = T0 - 50 * SEC;
    sl_limit_sets_t *s = bind_at(load(config_a), now);
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "bob", limits, N(limits), now));
    sl_limit_state_t *bob = &s->clients[1]->states[0];
    cr_assert_eq(bob->slot_ms, 45 * SEC);

    /* The same usage charged live counts until T0 - 44 s. */
    sl_limit_state_t live;
    sl_limit_state_init(&live, &limits[0], 45 * MIN, NULL);
    sl_limit_add(&live, (MIN0 - 46) * MIN - 1, (MIN0 - 46) * MIN - 1, 7);
    cr_assert_eq(sl_limit_used(&live, now), 7);
    cr_assert_eq(sl_limit_resets_at_ms(&live, now), T0 - 44 * SEC);

    cr_expect_lt(fake.since_ms[fake.history_calls - 1], (MIN0 - 46) * MIN,
                 "history read from before the bucket's minute ends");
    cr_expect_eq(sl_limit_used(bob, now), 7, "seeded like the live count");
    cr_expect_eq(sl_limit_resets_at_ms(bob, now), T0 - 44 * SEC);
}

Test(limiter, a_bucket_before_the_calendar_period_does_not_count)
{
    static const bucket_t history[] = {
        {SL_BUCKET_CLIENT, "bob", WEEK0 / MIN - 1, 0, 500, 0}, /* last week's Sunday 23:59 */
        {SL_BUCKET_CLIENT, "bob", DAY0 / MIN - 1, 0, 30, 0},   /* yesterday 23:59 */
        {SL_BUCKET_CLIENT, "bob", DAY0 / MIN, 0, 5, 0},        /* today 00:00 */
        {SL_BUCKET_CLIENT, "bob", MIN0, 0, 1, 0},
    };
    GIVE_HISTORY(history);
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    static const sl_limit_t limits[] = {
        {SL_PER_DAY, 1, SL_MEASURE_TOKENS, 1000},
        {SL_PER_WEEK, 1, SL_MEASURE_TOKENS, 1000},
    };
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "bob", limits, N(limits), T0));
    sl_limit_set_t *bob = s->clients[1];
    cr_assert_eq(sl_limit_used(&bob->states[0], T0), 5 + 1);
    cr_assert_eq(sl_limit_used(&bob->states[1], T0), 30 + 5 + 1);
    cr_assert_eq(sl_limit_resets_at_ms(&bob->states[0], T0), NEXT_DAY);
    cr_assert_eq(sl_limit_resets_at_ms(&bob->states[1], T0), NEXT_DAY, "Sunday: the week ends tonight");
}

Test(limiter, calendar_periods_count_in_the_zone_of_the_config_bound_last)
{
    start(0);
    const sl_config_t *a = load(config_a); /* no timezone: the system's, UTC in the test environment */
    sl_limit_sets_t *s = bind_at(a, T0);
    sl_limit_state_t *up2_week = &s->providers[1]->states[0];
    cr_assert_eq(up2_week->tz, a->tz);
    cr_assert_eq(sl_limit_resets_at_ms(up2_week, T0), NEXT_DAY, "Sunday: the UTC week ends at midnight UTC");
    /* A reload to Berlin without up2: every set, up2's too, counts Berlin's days from now on. */
    static const char berlin[] = "timezone: Europe/Berlin\n"
                                 "providers:\n" UP("up1") "clients:\n"
                                                          "  - name: alice\n"
                                                          "    key: k1\n"
                                                          "    limits:\n"
                                                          "      - {per: day, cost: 20}\n";
    const sl_config_t *b = load(berlin);
    sl_limit_sets_t *s2 = bind_at(b, T0);
    cr_assert_eq(up2_week->tz, b->tz);
    cr_assert_eq(s2->clients[0]->states[0].tz, b->tz, "a kept limit");
    cr_assert_eq(s2->providers[0]->n, 0);
    /* The running week keeps its end; the next is Berlin's, Monday 00:00 CET to Monday 00:00 CET. */
    cr_assert_eq(sl_limit_resets_at_ms(up2_week, NEXT_DAY), NEXT_DAY + 7 * DAY - HOUR);
    cr_assert_eq(up2_week->period_start_ms, NEXT_DAY - HOUR);
    /* A limit set live afterwards on bob (kept, though the reload dropped him) counts in Berlin too. */
    static const sl_limit_t daily[] = {{SL_PER_DAY, 1, SL_MEASURE_REQUESTS, 5}};
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "bob", daily, N(daily), T0));
    cr_assert_eq(s->clients[1]->states[0].tz, b->tz);
    cr_assert_eq(sl_limit_resets_at_ms(&s->clients[1]->states[0], T0), NEXT_DAY - HOUR);
}

Test(limiter, a_bucket_of_the_current_minute_counts_as_of_now)
{
    static const bucket_t history[] = {
        {SL_BUCKET_CLIENT, "alice", MIN0, 3, 0, 0},
    };
    GIVE_HISTORY(history);
    start(0);
    /* 30 s into the minute: its start, its end and now are all in different slots. */
    int64_t now = T0 - 29 * SEC;
    sl_limit_sets_t *s = bind_at(load(config_a), now);
    sl_limit_state_t *minute = &s->clients[0]->states[0];
    cr_assert_eq(sl_limit_used(minute, now), 3);
    /* Charged as of now: now's slot end (now + 1 s), a margin slot and the minute. */
    cr_assert_eq(sl_limit_resets_at_ms(minute, now), now + 2 * SEC + MIN);
    cr_assert_eq(sl_limit_used(minute, now + 2 * SEC + MIN - 1), 3);
    cr_assert_eq(sl_limit_used(minute, now + 2 * SEC + MIN), 0);
}

/* ---- LimitsChanged ---------------------------------------------------------------------------- */

Test(limiter, the_changed_callback_is_not_called_when_a_set_is_created)
{
    start(0);
    bind_at(load(config_a), T0);
    cr_assert_eq(fake.changed_calls, 0);
    /* A key new in a reload is created too, not changed. */
    bind_at(load("clients:\n  - {name: carol, key: k3, limits: [{per: minute, requests: 5}]}\n"), T0);
    cr_assert_eq(fake.changed_calls, 0);
}

Test(limiter, the_changed_callback_is_called_once_with_the_new_limits_when_a_set_changes)
{
    start(0);
    bind_at(load(config_a), T0);
    const sl_config_t *b = load("providers:\n" UP("up1") "    limits:\n"
                                                         "      - {per: minute, every: 5, tokens: 20000}\n"
                                                         "      - {per: hour, requests: 100}\n" UP(
                                                             "up2") "    limits:\n"
                                                                    "      - {per: week, tokens: 500}\n");
    sl_limit_sets_t *s = bind_at(b, T0);
    cr_assert_eq(fake.changed_calls, 1, "only up1 changed");
    cr_assert_eq(fake.changed_set, s->providers[0]);
    cr_assert_eq(fake.changed_n, 2);
    assert_limit_eq(&fake.changed_limits[0], &(sl_limit_t){SL_PER_MINUTE, 5, SL_MEASURE_TOKENS, 20000},
                    "changed[0]");
    assert_limit_eq(&fake.changed_limits[1], &(sl_limit_t){SL_PER_HOUR, 1, SL_MEASURE_REQUESTS, 100},
                    "changed[1]");
}

Test(limiter, the_changed_callback_is_not_called_when_identical_limits_are_bound_again)
{
    start(0);
    bind_at(load(config_a), T0);
    bind_at(load(config_a), T0 + MIN);
    bind_at(load(config_a), T0 + HOUR);
    cr_assert_eq(fake.changed_calls, 0);
    static const sl_limit_t same[] = {
        {SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 30},
        {SL_PER_DAY, 1, SL_MEASURE_COST, 20000000},
    };
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "alice", same, N(same), T0));
    cr_assert_eq(fake.changed_calls, 0);
}

Test(limiter, a_key_without_limits_that_gets_some_is_a_change)
{
    start(0);
    sl_limit_sets_t *a = bind_at(load(config_a), T0);
    bind_at(load("clients:\n  - {name: bob, key: k2, limits: [{per: minute, requests: 5}]}\n"), T0);
    cr_assert_eq(fake.changed_calls, 1);
    cr_assert_eq(fake.changed_set, a->clients[1]);
    cr_assert_eq(a->clients[1]->n, 1);
    cr_assert_eq(a->clients[1]->states[0].limit.amount, 5);
}

/* ---- sl_limiter_replace ----------------------------------------------------------------------- */

Test(limiter, replace_of_an_unknown_name_returns_false_and_changes_nothing)
{
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    int history_calls = fake.history_calls;
    sl_limit_state_t *states = s->clients[0]->states;
    static const sl_limit_t limits[] = {{SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 1}};

    cr_assert_not(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "nobody", limits, 1, T0));
    cr_assert_not(sl_limiter_replace(lim, SL_BUCKET_PROVIDER, "alice", limits, 1, T0),
                  "alice is a key, not an upstream");
    cr_assert_not(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "up1", limits, 1, T0));
    cr_assert_eq(fake.history_calls, history_calls);
    cr_assert_eq(fake.changed_calls, 0);
    cr_assert_eq(s->clients[0]->states, states);
    cr_assert_eq(s->clients[0]->n, 2);
}

Test(limiter, replace_of_a_known_name_keeps_what_stays_seeds_what_is_new_and_tells_once)
{
    static const bucket_t history[] = {
        {SL_BUCKET_CLIENT, "alice", DAY0 / MIN - 1, 9, 40, 0}, /* yesterday: in the week only */
        {SL_BUCKET_CLIENT, "alice", MIN0 - 1, 9, 2, 0},
    };
    GIVE_HISTORY(history);
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    sl_limit_set_t *alice = s->clients[0];
    cr_assert_eq(sl_limit_used(&alice->states[0], T0), 9, "seeded at creation");
    sl_limits_add(alice->states, alice->n, T0, T0, &(sl_amounts_t){.requests = 1, .cost_micros = 700});
    int history_calls = fake.history_calls;

    static const sl_limit_t limits[] = {
        {SL_PER_WEEK, 1, SL_MEASURE_TOKENS, 100},
        {SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 10},
    };
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "alice", limits, N(limits), T0 + SEC / 2));

    assert_set_has_limits_of(alice, limits, N(limits));
    cr_assert_eq(sl_limit_used(&alice->states[0], T0 + SEC / 2), 40 + 2, "new: from the history");
    cr_assert_eq(sl_limit_used(&alice->states[1], T0 + SEC / 2), 9 + 1, "kept: from memory");
    cr_assert_eq(fake.history_calls, history_calls + 1);
    cr_assert_eq(fake.since_ms[history_calls], WEEK0);
    cr_assert_eq(fake.changed_calls, 1);
    cr_assert_eq(fake.changed_set, alice);
    cr_assert_eq(fake.changed_n, 2);
    assert_limit_eq(&fake.changed_limits[0], &limits[0], "changed[0]");
    assert_limit_eq(&fake.changed_limits[1], &limits[1], "changed[1]");
    cr_assert_eq(sl_limit_set_views(alice, T0 + SEC / 2, NULL, 0), 2);
}

Test(limiter, replace_with_no_limits_empties_the_set_and_is_a_change)
{
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_PROVIDER, "up2", NULL, 0, T0));
    cr_assert_eq(s->providers[1]->n, 0);
    cr_assert_eq(fake.changed_calls, 1);
    cr_assert_eq(fake.changed_n, 0);
    cr_assert_eq(sl_limit_set_views(s->providers[1], T0, NULL, 0), 0);
}

/* ---- time scale ------------------------------------------------------------------------------- */

Test(limiter, rolling_windows_are_scaled_by_the_time_scale)
{
    static const bucket_t history[] = {
        {SL_BUCKET_CLIENT, "alice", MIN0 - 1, 20, 0, 0}, /* a minute ago: long out of a 600 ms window */
        {SL_BUCKET_CLIENT, "alice", MIN0, 3, 0, 0},
    };
    GIVE_HISTORY(history);
    start(0.01);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    sl_limit_state_t *minute = &s->clients[0]->states[0];
    cr_assert_eq(minute->window_ms, 600);
    cr_assert_eq(minute->slot_ms, 10);
    cr_assert_eq(s->providers[0]->states[0].window_ms, 3000, "5 minutes");
    cr_assert_eq(s->providers[0]->states[1].window_ms, 36000, "an hour");
    cr_assert_eq(s->clients[0]->states[1].window_ms, 0, "a day is a day");
    cr_assert_eq(fake.since_ms[2], DAY0, "alice's day still reaches back to midnight");
    cr_assert_eq(sl_limit_used(minute, T0), 3);
    cr_assert_eq(sl_limit_resets_at_ms(minute, T0), T0 + 10 + 10 + 600,
                 "slot end, a margin slot, the window");

    /* A limit new in a live change is scaled too. */
    static const sl_limit_t limits[] = {{SL_PER_MINUTE, 2, SL_MEASURE_TOKENS, 10}};
    cr_assert(sl_limiter_replace(lim, SL_BUCKET_CLIENT, "bob", limits, 1, T0));
    cr_assert_eq(s->clients[1]->states[0].window_ms, 1200);
    cr_assert_eq(fake.since_ms[3], T0 - 1200 - 20, "the window and the margin slot (20 ms)");
}

/* ---- views ------------------------------------------------------------------------------------ */

Test(limiter, views_show_each_limit_with_its_use_and_reset_time_in_config_order)
{
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    sl_limit_set_t *alice = s->clients[0];
    sl_limits_add(alice->states, alice->n, T0, T0, &(sl_amounts_t){.requests = 3, .cost_micros = 2500000});

    sl_limit_view_t v[4];
    cr_assert_eq(sl_limit_set_views(alice, T0 + SEC / 2, v, N(v)), 2);
    assert_limit_eq(&v[0].limit, &(sl_limit_t){SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 30}, "view 0");
    cr_assert_eq(v[0].used, 3);
    cr_assert_eq(v[0].resets_at_ms, T0 + 2 * SEC + MIN,
                 "when T0's slot leaves the window: its end, a margin slot and the minute later");
    assert_limit_eq(&v[1].limit, &(sl_limit_t){SL_PER_DAY, 1, SL_MEASURE_COST, 20000000}, "view 1");
    cr_assert_eq(v[1].used, 2500000);
    cr_assert_eq(v[1].resets_at_ms, NEXT_DAY);

    /* Past midnight: the day is a new one, the minute is long gone. */
    cr_assert_eq(sl_limit_set_views(alice, NEXT_DAY, v, N(v)), 2);
    cr_assert_eq(v[0].used, 0);
    cr_assert_eq(v[0].resets_at_ms, NEXT_DAY, "nothing counts: now");
    cr_assert_eq(v[1].used, 0);
    cr_assert_eq(v[1].resets_at_ms, NEXT_DAY + DAY);
}

Test(limiter, views_return_the_count_even_when_cap_is_smaller)
{
    start(0);
    sl_limit_sets_t *s = bind_at(load(config_a), T0);
    sl_limit_view_t v[3];
    memset(v, 0x5a, sizeof(v));
    sl_limit_view_t untouched;
    memset(&untouched, 0x5a, sizeof(untouched));

    cr_assert_eq(sl_limit_set_views(s->clients[0], T0, v, 1), 2);
    assert_limit_eq(&v[0].limit, &(sl_limit_t){SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 30}, "view 0");
    cr_assert_eq(v[0].used, 0);
    cr_assert_eq(v[0].resets_at_ms, T0);
    cr_assert_eq(memcmp(&v[1], &untouched, sizeof(untouched)), 0, "only cap views are written");
    cr_assert_eq(sl_limit_set_views(s->clients[0], T0, NULL, 0), 2);
    cr_assert_eq(sl_limit_set_views(s->clients[1], T0, v, N(v)), 0);
}

/* ---- freeing ---------------------------------------------------------------------------------- */

Test(limiter, sets_free_frees_both_arrays_and_leaves_them_null)
{
    start(0);
    sl_limit_sets_t s = sl_limiter_bind(lim, load(config_a), T0);
    sl_limit_set_t *up1 = s.providers[0];
    sl_limit_sets_free(&s);
    cr_assert_null(s.providers);
    cr_assert_null(s.clients);
    /* The sets themselves belong to the limiter and outlive the arrays. */
    cr_assert_str_eq(up1->name, "up1");
    cr_assert_eq(up1->n, 2);
}
