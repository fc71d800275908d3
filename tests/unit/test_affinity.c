/* Affinity: SipHash, conversation keys, the LRU table with idle expiry, sticky vs sealed candidates. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/affinity.h"
#include "core/jscan.h"
#include "core/route.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const sl_hash_key_t ref_key = {0x0706050403020100u, 0x0f0e0d0c0b0a0908u};
static const sl_hash_key_t seed = {0x243F6A8885A308D3u, 0x13198A2E03707344u};

/* ---- SipHash ---------------------------------------------------------------- */

Test(affinity, siphash_matches_the_reference_vectors)
{
    /* From the SipHash paper's test vectors (key 00..0f, message 00..len-1); also what OpenSSL's SIPHASH
     * gives. */
    static const struct {
        size_t len;
        uint64_t want;
    } vectors[] = {
        {0, 0x726fdb47dd0e0e31u},
        {1, 0x74f839c593dc67fdu},
        {15, 0xa129ca6149be45e5u},
        {63, 0x958a324ceb064572u},
    };
    unsigned char msg[64];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (unsigned char)i;
    for (size_t v = 0; v < N(vectors); v++) {
        uint64_t got = sl_siphash(&ref_key, msg, vectors[v].len);
        cr_assert_eq(got, vectors[v].want, "len %zu: %016llx", vectors[v].len, (unsigned long long)got);
    }
}

Test(affinity, siphash_gives_the_same_result_however_the_input_is_split)
{
    unsigned char msg[200];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (unsigned char)(i * 7 + 3);
    uint64_t whole = sl_siphash(&ref_key, msg, sizeof msg);
    for (size_t a = 0; a < 20; a++) {
        for (size_t b = a; b < a + 30 && b <= sizeof msg; b++) {
            sl_siphash_t h;
            sl_siphash_init(&h, &ref_key);
            sl_siphash_update(&h, msg, a);
            sl_siphash_update(&h, msg + a, b - a);
            sl_siphash_update(&h, msg + b, sizeof msg - b);
            cr_assert_eq(sl_siphash_final(&h), whole, "split at %zu, %zu", a, b);
        }
    }
    sl_siphash_t h;
    sl_siphash_init(&h, &ref_key);
    sl_siphash_update(&h, msg, 10);
    uint64_t early = sl_siphash_final(&h);
    cr_assert_eq(early, sl_siphash(&ref_key, msg, 10));
    sl_siphash_update(&h, msg + 10, sizeof msg - 10);
    cr_assert_eq(sl_siphash_final(&h), whole, "final must not disturb the state");
}

/* ---- conversation keys ------------------------------------------------------ */

Test(affinity, session_headers_rank_in_spec_order)
{
    static const struct {
        const char *name;
        int rank;
    } cases[] = {
        {"x-sluice-session", 0},
        {"X-Sluice-Session", 0},
        {"x-claude-code-session-id", 1},
        {"session-id", 2},
        {"Session-Id", 2},
        {"thread-id", -1},
        {"session", -1},
        {"x-session-id", -1},
        {"session-id2", -1},
        {"", -1},
    };
    for (size_t i = 0; i < N(cases); i++)
        cr_assert_eq(sl_affinity_session_header_rank(cases[i].name, strlen(cases[i].name)), cases[i].rank,
                     "%s", cases[i].name);
    cr_assert_eq(sl_affinity_session_header_rank("session-idXX", 10), 2,
                 "the length, not a NUL, ends the name");
}

static uint64_t
session_key(const char *client, const char *session)
{
    return sl_affinity_key_session(&seed, client, strlen(client), session, strlen(session));
}

Test(affinity, session_keys_are_scoped_to_the_client_and_unambiguous)
{
    cr_assert_eq(session_key("alice", "s1"), session_key("alice", "s1"));
    cr_assert_neq(session_key("alice", "s1"), session_key("alice", "s2"));
    cr_assert_neq(session_key("alice", "s1"), session_key("bob", "s1"));
    cr_assert_neq(session_key("ab", "c"), session_key("a", "bc"));
    cr_assert_neq(session_key("alice", "r1"), sl_affinity_key_response(&seed, "alice", 5, "r1", 2),
                  "session and response keys are apart");
    sl_hash_key_t other = {1, 2};
    cr_assert_neq(sl_affinity_key_session(&seed, "a", 1, "s", 1),
                  sl_affinity_key_session(&other, "a", 1, "s", 1));
}

static uint64_t
message_key(const char *client, const char *body)
{
    sl_jscan_t r;
    cr_assert(sl_jscan(body, strlen(body), &r), "%s", body);
    return sl_affinity_key_message(&seed, client, strlen(client), body, r.first_user);
}

Test(affinity, message_keys_follow_the_first_user_text_only)
{
    const char *turn1 =
        "{\"model\":\"claude\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"fix the bug\",\"cache_control\":{\"type\":\"ephemeral\"}}]}]}";
    const char *turn2 =
        "{\"model\":\"claude-other\",\"system\":\"changed\",\"messages\":[{\"role\":\"user\","
        "\"content\":[{\"type\":\"text\",\"text\":\"fix the bug\"}]},{\"role\":\"assistant\","
        "\"content\":\"done\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"thanks\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}]}]}";
    const char *as_string = "{\"messages\":[{\"role\":\"user\",\"content\":\"fix the bug\"}]}";
    const char *other = "{\"messages\":[{\"role\":\"user\",\"content\":\"fix the other bug\"}]}";
    cr_assert_eq(message_key("k", turn1), message_key("k", turn2),
                 "a later turn keeps the conversation's key");
    cr_assert_eq(message_key("k", turn1), message_key("k", as_string), "string and block forms agree");
    cr_assert_neq(message_key("k", turn1), message_key("k", other));
    cr_assert_neq(message_key("k", turn1), message_key("j", turn1), "keys are per client");
    const char *img1 =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"data\":"
        "\"AAAA\"}}]}]}";
    const char *img2 =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"data\":"
        "\"BBBB\"}}]}]}";
    cr_assert_eq(message_key("k", img1), message_key("k", img1));
    cr_assert_neq(message_key("k", img1), message_key("k", img2), "a text-less message is hashed whole");
    cr_assert_neq(message_key("k", img1), message_key("k", "{}"));
    cr_assert_eq(message_key("k", "{}"), message_key("k", "{\"messages\":[]}"),
                 "no message: the client's key");
    const char *two_pieces =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"ab\"},{\"text\":\"c\"}]}]}";
    const char *split_else =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"},{\"text\":\"bc\"}]}]}";
    cr_assert_neq(message_key("k", two_pieces), message_key("k", split_else));
}

Test(affinity, upstreams_are_named_by_their_provider_name)
{
    cr_assert_eq(sl_affinity_upstream_id("anthropic"), sl_affinity_upstream_id("anthropic"));
    cr_assert_neq(sl_affinity_upstream_id("anthropic"), sl_affinity_upstream_id("relay"));
    cr_assert_neq(sl_affinity_upstream_id("anthropic-2"), sl_affinity_upstream_id("anthropic-3"));
    /* 0 is a pin's "none". */
    cr_assert_neq(sl_affinity_upstream_id(""), 0);
}

/* ---- the table -------------------------------------------------------------- */

static sl_affinity_pin_t
pin(uint64_t upstream, bool sealed)
{
    return (sl_affinity_pin_t){upstream, sealed, 0};
}

static bool
has(sl_affinity_t *t, uint64_t key, int64_t now)
{
    sl_affinity_pin_t p;
    return sl_affinity_get(t, key, now, &p);
}

Test(affinity, get_returns_what_was_put)
{
    sl_affinity_t *t = sl_affinity_new(16, 1000);
    sl_affinity_pin_t p = {99, true, 0};
    cr_assert_not(sl_affinity_get(t, 42, 0, &p));
    cr_assert_eq(p.upstream, 99, "a miss leaves out untouched");
    sl_affinity_put(t, 42, pin(7, false), 0);
    sl_affinity_put(t, 43, pin(8, true), 0);
    cr_assert(sl_affinity_get(t, 42, 10, &p));
    cr_assert_eq(p.upstream, 7);
    cr_assert_not(p.sealed);
    cr_assert(sl_affinity_get(t, 43, 10, &p));
    cr_assert_eq(p.upstream, 8);
    cr_assert(p.sealed);
    cr_assert_eq(sl_affinity_count(t), 2);
    sl_affinity_free(t);
}

Test(affinity, a_full_table_evicts_the_least_recently_used)
{
    sl_affinity_t *t = sl_affinity_new(3, 1000000);
    sl_affinity_put(t, 1, pin(1, false), 0);
    sl_affinity_put(t, 2, pin(2, false), 1);
    sl_affinity_put(t, 3, pin(3, false), 2);
    cr_assert(has(t, 1, 3), "a get makes 1 the most recent");
    sl_affinity_put(t, 4, pin(4, false), 4);
    cr_assert_eq(sl_affinity_count(t), 3);
    cr_assert_not(has(t, 2, 5), "2 was the least recently used");
    cr_assert(has(t, 1, 5));
    cr_assert(has(t, 3, 5));
    cr_assert(has(t, 4, 5));
    sl_affinity_put(t, 3, pin(33, false), 6); /* an update refreshes too */
    sl_affinity_put(t, 5, pin(5, false), 7);
    cr_assert_not(has(t, 1, 8));
    cr_assert(has(t, 3, 8));
    sl_affinity_free(t);
}

Test(affinity, entries_expire_after_the_idle_time)
{
    sl_affinity_t *t = sl_affinity_new(8, SL_AFFINITY_DEFAULT_IDLE_MS);
    int64_t h = SL_AFFINITY_DEFAULT_IDLE_MS;
    sl_affinity_put(t, 1, pin(1, true), 1000);
    cr_assert(has(t, 1, 1000 + h - 1), "alive just before an hour");
    cr_assert(has(t, 1, 1000 + 2 * h - 2), "the get restarted the idle timer");
    cr_assert_not(has(t, 1, 1000 + 3 * h - 2), "idle for exactly an hour is gone");
    cr_assert_eq(sl_affinity_count(t), 0, "an expired entry met by get is dropped");
    sl_affinity_put(t, 2, pin(2, false), 0);
    cr_assert(has(t, 2, -500), "a clock read before the last use counts as no idle time");
    sl_affinity_free(t);
}

Test(affinity, puts_drop_idle_entries_from_the_old_end)
{
    sl_affinity_t *t = sl_affinity_new(100, 1000);
    for (uint64_t k = 0; k < 10; k++)
        sl_affinity_put(t, k, pin(k, false), (int64_t)k);
    cr_assert_eq(sl_affinity_count(t), 10);
    /* each put drops at most two idle entries: the cost per call stays bounded */
    sl_affinity_put(t, 100, pin(0, false), 5000);
    cr_assert_eq(sl_affinity_count(t), 9);
    for (int i = 0; i < 5; i++)
        sl_affinity_put(t, 100, pin(0, false), 5000);
    cr_assert_eq(sl_affinity_count(t), 1);
    sl_affinity_free(t);
}

Test(affinity, sealing_only_grows_for_the_same_upstream)
{
    sl_affinity_t *t = sl_affinity_new(8, 1000);
    sl_affinity_pin_t p;
    sl_affinity_put(t, 1, pin(5, false), 0);
    sl_affinity_put(t, 1, pin(5, true), 1);
    sl_affinity_put(t, 1, pin(5, false), 2);
    cr_assert(sl_affinity_get(t, 1, 3, &p));
    cr_assert(p.sealed, "a later unsealed turn keeps the seal");
    cr_assert_eq(p.upstream, 5);
    sl_affinity_put(t, 1, pin(6, false), 4);
    cr_assert(sl_affinity_get(t, 1, 5, &p));
    cr_assert_not(p.sealed, "a released pin moved to another upstream starts unsealed");
    cr_assert_eq(p.upstream, 6);
    cr_assert_eq(sl_affinity_count(t), 1);
    sl_affinity_free(t);
}

Test(affinity, forget_drops_one_entry_even_mid_bucket)
{
    /* capacity 4: keys equal modulo 4 share a bucket */
    sl_affinity_t *t = sl_affinity_new(4, 1000);
    for (uint64_t k = 1; k <= 13; k += 4)
        sl_affinity_put(t, k, pin(k, false), 0);
    cr_assert(sl_affinity_forget(t, 5));
    cr_assert_not(sl_affinity_forget(t, 5));
    cr_assert_not(has(t, 5, 1));
    cr_assert(has(t, 1, 1));
    cr_assert(has(t, 9, 1));
    cr_assert(has(t, 13, 1));
    cr_assert_eq(sl_affinity_count(t), 3);
    sl_affinity_put(t, 17, pin(17, false), 2); /* reuses the freed slot; nothing is evicted */
    cr_assert_eq(sl_affinity_count(t), 4);
    cr_assert(has(t, 1, 3));
    sl_affinity_free(t);
}

/* A plain reference: an array ordered oldest first. */
typedef struct {
    uint64_t key, upstream;
    int64_t last;
    bool sealed;
} ref_entry_t;

typedef struct {
    ref_entry_t e[64];
    size_t n, cap;
    int64_t idle;
} ref_t;

static void
ref_remove(ref_t *r, size_t i)
{
    memmove(r->e + i, r->e + i + 1, (r->n - i - 1) * sizeof(ref_entry_t));
    r->n--;
}

static ssize_t
ref_find(ref_t *r, uint64_t key)
{
    for (size_t i = 0; i < r->n; i++) {
        if (r->e[i].key == key)
            return (ssize_t)i;
    }
    return -1;
}

static bool
ref_get(ref_t *r, uint64_t key, int64_t now, sl_affinity_pin_t *out)
{
    ssize_t i = ref_find(r, key);
    if (i < 0)
        return false;
    ref_entry_t e = r->e[i];
    ref_remove(r, (size_t)i);
    if (now - e.last >= r->idle)
        return false;
    if (now > e.last)
        e.last = now;
    r->e[r->n++] = e;
    *out = pin(e.upstream, e.sealed);
    return true;
}

static void
ref_put(ref_t *r, uint64_t key, sl_affinity_pin_t p, int64_t now)
{
    for (int k = 0; k < 2 && r->n > 0 && now - r->e[0].last >= r->idle; k++)
        ref_remove(r, 0);
    ssize_t i = ref_find(r, key);
    ref_entry_t e = {key, p.upstream, now, p.sealed};
    if (i >= 0) {
        e.sealed = p.sealed || (r->e[i].sealed && r->e[i].upstream == p.upstream);
        e.last = now > r->e[i].last ? now : r->e[i].last;
        ref_remove(r, (size_t)i);
    } else if (r->n == r->cap) {
        ref_remove(r, 0);
    }
    r->e[r->n++] = e;
}

static uint64_t
rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(affinity, behaves_like_a_plain_lru_list_under_random_operations)
{
    ref_t ref = {.cap = 8, .idle = 50};
    sl_affinity_t *t = sl_affinity_new(ref.cap, ref.idle);
    uint64_t s = 0x1234567u;
    int64_t now = 0;
    for (int step = 0; step < 200000; step++) {
        now += (int64_t)(rng(&s) % 4);
        uint64_t key = rng(&s) % 24 * 8; /* multiples of 8: many keys share a bucket */
        switch (rng(&s) % 4) {
        case 0:
        case 1: {
            sl_affinity_pin_t p = pin(rng(&s) % 3, rng(&s) % 4 == 0);
            sl_affinity_put(t, key, p, now);
            ref_put(&ref, key, p, now);
            break;
        }
        case 2: {
            sl_affinity_pin_t a = {77, false, 0}, b = {77, false, 0};
            bool got = sl_affinity_get(t, key, now, &a), want = ref_get(&ref, key, now, &b);
            cr_assert_eq(got, want, "step %d: get %llu", step, (unsigned long long)key);
            cr_assert(a.upstream == b.upstream && a.sealed == b.sealed, "step %d", step);
            break;
        }
        default: {
            ssize_t i = ref_find(&ref, key);
            if (i >= 0)
                ref_remove(&ref, (size_t)i);
            cr_assert_eq(sl_affinity_forget(t, key), i >= 0, "step %d: forget", step);
            break;
        }
        }
        cr_assert_eq(sl_affinity_count(t), ref.n, "step %d: count", step);
    }
    sl_affinity_free(t);
}

static uint64_t
nth_key(uint64_t k)
{
    return sl_siphash(&seed, &k, sizeof k);
}

Test(affinity, a_hundred_thousand_conversations_fit_and_the_oldest_go_first)
{
    sl_affinity_t *t = sl_affinity_new(SL_AFFINITY_DEFAULT_CAPACITY, SL_AFFINITY_DEFAULT_IDLE_MS);
    for (uint64_t k = 0; k < SL_AFFINITY_DEFAULT_CAPACITY + 1000; k++)
        sl_affinity_put(t, nth_key(k), pin(k, false), (int64_t)k);
    cr_assert_eq(sl_affinity_count(t), SL_AFFINITY_DEFAULT_CAPACITY);
    size_t alive = 0;
    for (uint64_t k = 0; k < 1000; k++)
        alive += has(t, nth_key(k), SL_AFFINITY_DEFAULT_CAPACITY + 1000);
    cr_assert_eq(alive, 0, "the first thousand were evicted");
    for (uint64_t k = 1000; k < SL_AFFINITY_DEFAULT_CAPACITY + 1000; k += 997)
        cr_assert(has(t, nth_key(k), SL_AFFINITY_DEFAULT_CAPACITY + 1000), "entry %llu",
                  (unsigned long long)k);
    sl_affinity_free(t);
}

/* ---- applying an entry ------------------------------------------------------ */

#define GLOBS(...) .models = (char *[]){__VA_ARGS__}, .n_models = N(((char *[]){__VA_ARGS__}))

/* As the loader leaves it: models "*" when the file gives none, member weights 1. */
static sl_provider_t providers[] = {
    {.name = "a", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
    {.name = "b", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
    {.name = "c", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*")},
    {.name = "off", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("*"), .disabled = true},
    {.name = "narrow", .protocol = SL_DIALECT_ANTHROPIC, GLOBS("claude-haiku-*")},
};

static sl_route_t routes[] = {
    {.match = "*",
     .kind = SL_ROUTE_FAILOVER,
     .members = (sl_route_member_t[]){{0, 1}, {3, 1}, {1, 1}, {4, 1}, {2, 1}},
     .n_members = 5},
};

static const sl_config_t config = {
    .providers = providers,
    .n_providers = N(providers),
    .has_routes = true,
    .routes = routes,
    .n_routes = N(routes),
};

static const char *
describe(const sl_config_t *c, const sl_candidate_t *cand, size_t n)
{
    static char buf[512];
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s%s%s", i ? "," : "",
                               c->providers[cand[i].provider].name, cand[i].skip ? ":" : "",
                               sl_skip_slug(cand[i].skip));
    return buf;
}

static const char *
applied(const sl_config_t *c, const char *upstream, bool sealed, bool sealed_history,
        sl_affinity_effect_t want)
{
    sl_candidate_t cand[8];
    size_t n, route;
    cr_assert(sl_route_select(c, SL_DIALECT_ANTHROPIC, "claude-opus-4", 0, cand, &n, &route));
    sl_affinity_pin_t p = {upstream ? sl_affinity_upstream_id(upstream) : 0, sealed, 0};
    sl_affinity_effect_t got =
        sl_affinity_apply(c, upstream ? &p : NULL, sealed_history, NULL, NULL, cand, n);
    cr_assert_eq(got, want, "pin %s: effect %d, expected %d", upstream ? upstream : "none", got, want);
    return describe(c, cand, n);
}

Test(affinity, no_entry_leaves_the_routed_order)
{
    const sl_config_t *c = &config;
    cr_assert_str_eq(applied(c, NULL, false, true, SL_AFFINITY_NONE),
                     "a,off:disabled,b,narrow:not_offered,c");
}

Test(affinity, sticky_moves_the_serving_upstream_first)
{
    const sl_config_t *c = &config;
    cr_assert_str_eq(applied(c, "b", false, false, SL_AFFINITY_STICKY),
                     "b,a,off:disabled,narrow:not_offered,c");
    cr_assert_str_eq(applied(c, "c", false, false, SL_AFFINITY_STICKY),
                     "c,a,off:disabled,b,narrow:not_offered");
    cr_assert_str_eq(applied(c, "a", false, false, SL_AFFINITY_STICKY),
                     "a,off:disabled,b,narrow:not_offered,c");
}

Test(affinity, sealed_keeps_only_the_pinned_upstream)
{
    const sl_config_t *c = &config;
    cr_assert_str_eq(applied(c, "b", true, false, SL_AFFINITY_SEALED),
                     "b,a:pinned_elsewhere,off:disabled,narrow:not_offered,c:pinned_elsewhere");
    /* sealed history in the request seals a sticky entry */
    cr_assert_str_eq(applied(c, "c", false, true, SL_AFFINITY_SEALED),
                     "c,a:pinned_elsewhere,off:disabled,b:pinned_elsewhere,narrow:not_offered");
}

Test(affinity, a_pin_the_config_cannot_serve_gives_way)
{
    const sl_config_t *c = &config;
    const char *routed = "a,off:disabled,b,narrow:not_offered,c";
    cr_assert_str_eq(applied(c, "off", true, true, SL_AFFINITY_RELEASED), routed, "disabled");
    cr_assert_str_eq(applied(c, "narrow", true, false, SL_AFFINITY_RELEASED), routed,
                     "not offering the model");
    cr_assert_str_eq(applied(c, "removed", true, true, SL_AFFINITY_RELEASED), routed, "gone from the config");
    cr_assert_str_eq(applied(c, "removed", false, false, SL_AFFINITY_RELEASED), routed, "sticky alike");
}

/* The facts the shell gathers for "can take it again" (not paused, window not full, breaker not open). */
typedef struct {
    const sl_config_t *config;
    const char *ready;  /* the one provider that can take it again; NULL: none can */
    size_t asked;       /* how often ready was called */
    size_t asked_about; /* the provider it was last called for */
} ready_facts_t;

static bool
home_ready(void *ctx, size_t provider)
{
    ready_facts_t *f = ctx;
    f->asked++;
    f->asked_about = provider;
    return f->ready != NULL && strcmp(f->config->providers[provider].name, f->ready) == 0;
}

static const char *
applied_home(const char *upstream, const char *home, bool sealed, ready_facts_t *facts,
             sl_affinity_effect_t want)
{
    sl_candidate_t cand[8];
    size_t n, route;
    cr_assert(sl_route_select(&config, SL_DIALECT_ANTHROPIC, "claude-opus-4", 0, cand, &n, &route));
    sl_affinity_pin_t p = {sl_affinity_upstream_id(upstream), sealed,
                           home != NULL ? sl_affinity_upstream_id(home) : 0};
    facts->config = &config;
    sl_affinity_effect_t got = sl_affinity_apply(&config, &p, false, home_ready, facts, cand, n);
    cr_assert_eq(got, want, "pin %s home %s: effect %d, expected %d", upstream, home ? home : "-", got, want);
    return describe(&config, cand, n);
}

/* behaviour.md §1.5: a sticky conversation that failed over goes back once its home can take it again. */
Test(affinity, a_conversation_that_failed_over_goes_back_home_once_it_can_take_it)
{
    ready_facts_t f = {.ready = "a"};
    cr_assert_str_eq(applied_home("c", "a", false, &f, SL_AFFINITY_RETURNED),
                     "a,c,off:disabled,b,narrow:not_offered",
                     "home first, the fallback that served it second");
    cr_assert_eq(f.asked, 1);
    cr_assert_str_eq(config.providers[f.asked_about].name, "a", "asked about home only");
    /* Home still paused, full or cooling: the conversation stays where it is. */
    f = (ready_facts_t){.ready = NULL};
    cr_assert_str_eq(applied_home("c", "a", false, &f, SL_AFFINITY_STICKY),
                     "c,a,off:disabled,b,narrow:not_offered");
    /* A home that is not the route's first (a load_balance pick, an earlier failover) works alike. */
    f = (ready_facts_t){.ready = "b"};
    cr_assert_str_eq(applied_home("c", "b", false, &f, SL_AFFINITY_RETURNED),
                     "b,c,a,off:disabled,narrow:not_offered");
}

Test(affinity, home_is_asked_about_only_when_the_conversation_is_away_from_it)
{
    ready_facts_t f = {.ready = "a"};
    cr_assert_str_eq(applied_home("a", "a", false, &f, SL_AFFINITY_STICKY),
                     "a,off:disabled,b,narrow:not_offered,c", "at home");
    cr_assert_str_eq(applied_home("c", NULL, false, &f, SL_AFFINITY_STICKY),
                     "c,a,off:disabled,b,narrow:not_offered", "no home recorded");
    cr_assert_eq(f.asked, 0);
    /* A home the config can no longer serve this from (disabled, not offered) is not gone back to. */
    cr_assert_str_eq(applied_home("c", "off", false, &f, SL_AFFINITY_STICKY),
                     "c,a,off:disabled,b,narrow:not_offered");
    cr_assert_str_eq(applied_home("c", "narrow", false, &f, SL_AFFINITY_STICKY),
                     "c,a,off:disabled,b,narrow:not_offered");
    cr_assert_eq(f.asked, 0);
}

Test(affinity, sealed_history_never_goes_back)
{
    ready_facts_t f = {.ready = "a"};
    cr_assert_str_eq(applied_home("c", "a", true, &f, SL_AFFINITY_SEALED),
                     "c,a:pinned_elsewhere,off:disabled,b:pinned_elsewhere,narrow:not_offered");
    cr_assert_eq(f.asked, 0);
}

Test(affinity, the_table_keeps_the_home_of_an_entry)
{
    sl_affinity_t *t = sl_affinity_new(4, 1000);
    sl_affinity_put(t, 7, (sl_affinity_pin_t){.upstream = 2, .home = 1}, 0);
    sl_affinity_pin_t got;
    cr_assert(sl_affinity_get(t, 7, 1, &got));
    cr_assert_eq(got.upstream, 2);
    cr_assert_eq(got.home, 1);
    sl_affinity_put(t, 7, (sl_affinity_pin_t){.upstream = 1, .home = 1}, 2);
    cr_assert(sl_affinity_get(t, 7, 3, &got));
    cr_assert_eq(got.upstream, 1);
    cr_assert_eq(got.home, 1, "back home");
    sl_affinity_free(t);
}

Test(affinity, effect_slugs_are_the_protocol_values)
{
    cr_assert_str_eq(sl_affinity_effect_slug(SL_AFFINITY_RETURNED), "returned");
    cr_assert_str_eq(sl_affinity_effect_slug(SL_AFFINITY_STICKY), "sticky");
    cr_assert_str_eq(sl_affinity_effect_slug(SL_AFFINITY_SEALED), "sealed");
    cr_assert_null(sl_affinity_effect_slug(SL_AFFINITY_NONE));
    cr_assert_null(sl_affinity_effect_slug(SL_AFFINITY_RELEASED));
}
