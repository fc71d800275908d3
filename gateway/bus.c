#include "bus.h"

#include "core/text.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dialect.h"
#include "core/mask.h"
#include "core/text.h"
#include "core/xalloc.h"

/* ---- the batch ------------------------------------------------------------------------------- */

void
sl_bus_emit(sl_bus_batch_t *batch, sl_proto_event_t *ev)
{
    if (batch->len == batch->cap) {
        batch->cap = batch->cap ? batch->cap * 2 : 64;
        batch->items = sl_xrealloc(batch->items, batch->cap * sizeof(*batch->items));
    }
    batch->items[batch->len++] = *ev;
    memset(ev, 0, sizeof(*ev));
}

static void
free_events(sl_proto_event_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_proto_event_free(&items[i]);
}

void
sl_bus_batch_clear(sl_bus_batch_t *batch)
{
    free_events(batch->items, batch->len);
    free(batch->items);
    *batch = (sl_bus_batch_t){0};
}

/* ---- the bus --------------------------------------------------------------------------------- */

/* Pending events in arrival order: items[(head + i) % cap] for i < len. */
typedef struct {
    sl_proto_event_t *items;
    size_t head, len, cap;
} ring_t;

struct sl_bus {
    pthread_mutex_t lock;
    size_t cap;
    ring_t pending;
    ring_t spare; /* the storage the last drain handed back, so a flush rarely allocates under the lock */
    sl_bus_wake_fn wake;
    void *wake_ctx;
    uint64_t unreported; /* dropped since the last drain */
    atomic_bool active;
    atomic_bool eager;
    atomic_bool watched;
    atomic_uint_fast64_t dropped;
};

static sl_proto_event_t *
ring_at(ring_t *r, size_t i)
{
    return &r->items[(r->head + i) % r->cap];
}

/* Grows r to hold at least want events (want <= max), in order from index 0. */
static void
ring_reserve(ring_t *r, size_t want, size_t max)
{
    if (r->cap >= want)
        return;
    size_t cap = r->cap ? r->cap : 64;
    while (cap < want)
        cap *= 2;
    if (cap > max)
        cap = max;
    sl_proto_event_t *items = sl_xmalloc(cap * sizeof(*items));
    for (size_t i = 0; i < r->len; i++)
        items[i] = *ring_at(r, i);
    free(r->items);
    *r = (ring_t){.items = items, .head = 0, .len = r->len, .cap = cap};
}

static void
ring_free_events(ring_t *r)
{
    for (size_t i = 0; i < r->len; i++)
        sl_proto_event_free(ring_at(r, i));
    r->head = r->len = 0;
}

sl_bus_t *
sl_bus_new(size_t cap)
{
    sl_bus_t *bus = sl_xcalloc(1, sizeof(*bus));
    if (pthread_mutex_init(&bus->lock, NULL) != 0) {
        free(bus);
        return NULL;
    }
    bus->cap = cap > 0 ? cap : 1;
    atomic_init(&bus->active, false);
    atomic_init(&bus->eager, true);
    atomic_init(&bus->watched, true);
    atomic_init(&bus->dropped, 0);
    return bus;
}

void
sl_bus_free(sl_bus_t *bus)
{
    if (bus == NULL)
        return;
    ring_free_events(&bus->pending);
    free(bus->pending.items);
    free(bus->spare.items);
    pthread_mutex_destroy(&bus->lock);
    free(bus);
}

void
sl_bus_set_active(sl_bus_t *bus, bool active)
{
    pthread_mutex_lock(&bus->lock);
    atomic_store(&bus->active, active);
    ring_t gone = {0};
    if (!active) {
        gone = bus->pending;
        bus->pending = (ring_t){0};
        bus->unreported = 0;
    }
    pthread_mutex_unlock(&bus->lock);
    ring_free_events(&gone);
    free(gone.items);
}

bool
sl_bus_is_active(const sl_bus_t *bus)
{
    return atomic_load_explicit(&bus->active, memory_order_relaxed);
}

void
sl_bus_set_wake(sl_bus_t *bus, sl_bus_wake_fn fn, void *ctx)
{
    pthread_mutex_lock(&bus->lock);
    bus->wake = fn;
    bus->wake_ctx = ctx;
    pthread_mutex_unlock(&bus->lock);
}

void
sl_bus_set_eager(sl_bus_t *bus, bool eager)
{
    atomic_store(&bus->eager, eager);
}

void
sl_bus_set_watched(sl_bus_t *bus, bool watched)
{
    atomic_store(&bus->watched, watched);
}

bool
sl_bus_is_watched(const sl_bus_t *bus)
{
    return atomic_load_explicit(&bus->watched, memory_order_relaxed);
}

bool
sl_bus_wants_wake(bool eager, size_t before, size_t after, size_t cap)
{
    if (eager)
        return before == 0 && after > 0;
    size_t mark = cap / 4 > 0 ? cap / 4 : 1;
    return before < mark && after >= mark;
}

void
sl_bus_flush(sl_bus_t *bus, sl_bus_batch_t *batch)
{
    size_t n = batch->len;
    if (n == 0)
        return;
    batch->len = 0;
    sl_proto_event_t *items = batch->items;
    if (!sl_bus_is_active(bus)) {
        free_events(items, n);
        return;
    }
    /* Of a batch larger than the whole queue only the newest cap events could survive anyway. */
    size_t first = n > bus->cap ? n - bus->cap : 0;
    free_events(items, first);

    pthread_mutex_lock(&bus->lock);
    if (!atomic_load(&bus->active)) {
        pthread_mutex_unlock(&bus->lock);
        free_events(items + first, n - first);
        return;
    }
    ring_t *q = &bus->pending;
    size_t before = q->len;
    if (q->items == NULL && bus->spare.items != NULL) {
        *q = bus->spare;
        bus->spare = (ring_t){0};
    }
    size_t want = q->len + (n - first);
    ring_reserve(q, want < bus->cap ? want : bus->cap, bus->cap);
    /*
     * A full queue takes each new event in the slot of its oldest one; the
     * displaced event goes back into the batch's consumed front, to be freed
     * after the lock is released.
     */
    size_t displaced = 0;
    for (size_t i = first; i < n; i++) {
        if (q->len < q->cap) {
            *ring_at(q, q->len++) = items[i];
        } else {
            sl_proto_event_t old = q->items[q->head];
            q->items[q->head] = items[i];
            q->head = (q->head + 1) % q->cap;
            items[displaced++] = old;
        }
    }
    uint64_t lost = first + displaced;
    bus->unreported += lost;
    sl_bus_wake_fn wake =
        sl_bus_wants_wake(atomic_load(&bus->eager), before, q->len, bus->cap) ? bus->wake : NULL;
    void *wake_ctx = bus->wake_ctx;
    pthread_mutex_unlock(&bus->lock);

    if (lost > 0)
        atomic_fetch_add(&bus->dropped, lost);
    free_events(items, displaced);
    if (wake != NULL)
        wake(wake_ctx);
}

size_t
sl_bus_drain(sl_bus_t *bus, sl_bus_on_event_fn on_event, void *ctx, uint64_t *dropped)
{
    pthread_mutex_lock(&bus->lock);
    ring_t taken = bus->pending;
    bus->pending = bus->spare;
    bus->spare = (ring_t){0};
    uint64_t unreported = bus->unreported;
    bus->unreported = 0;
    pthread_mutex_unlock(&bus->lock);

    if (dropped != NULL)
        *dropped = unreported;
    size_t delivered = taken.len;
    for (size_t i = 0; i < taken.len; i++) {
        sl_proto_event_t *ev = ring_at(&taken, i);
        on_event(ctx, ev);
        sl_proto_event_free(ev);
    }
    taken.head = taken.len = 0;

    /* The emptied storage becomes the next drain's swap partner, so flushes rarely allocate under the lock.
     */
    pthread_mutex_lock(&bus->lock);
    ring_t old = bus->spare;
    bus->spare = taken;
    pthread_mutex_unlock(&bus->lock);
    free(old.items);
    return delivered;
}

uint64_t
sl_bus_dropped(const sl_bus_t *bus)
{
    return atomic_load(&bus->dropped);
}

/* ---- building events ------------------------------------------------------------------------- */

#define ASCII_ONES  0x0101010101010101ULL
#define ASCII_HIGHS 0x8080808080808080ULL

/* A NUL-terminated copy of s[0..n) that the protocol accepts: valid UTF-8, no NUL. */
static char *
text_dup(const char *s, size_t n)
{
    char *out = sl_xmalloc(n + 1);
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        /* Most text is ASCII: copied eight bytes at a time while no byte is NUL or above 0x7f. */
        uint64_t w;
        if (n - i >= 8 && (memcpy(&w, p + i, 8), ((w - ASCII_ONES) | w) & ASCII_HIGHS) == 0) {
            memcpy(out + i, &w, 8);
            i += 8;
            continue;
        }
        if (p[i] != 0 && p[i] < 0x80) {
            out[i] = (char)p[i];
            i++;
            continue;
        }
        size_t len = p[i] == 0 ? 0 : sl_utf8_len(p + i, n - i);
        if (len == 0 || len == SL_UTF8_CUT) {
            out[i++] = '?';
            continue;
        }
        memcpy(out + i, p + i, len);
        i += len;
    }
    out[n] = '\0';
    return out;
}

static char *
str_dup(const char *s)
{
    return text_dup(s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

static char *
opt_dup(const char *s)
{
    return s != NULL ? text_dup(s, strlen(s)) : NULL;
}

static uint64_t
u64_of(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

static bool
named_before(const sl_msg_t *msg, size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (strcmp(msg->args[j].name, msg->args[i].name) == 0)
            return true;
    }
    return false;
}

static char *
scrubbed_dup(const char *s)
{
    char *out = str_dup(s);
    sl_scrub_secrets(out, strlen(out));
    return out;
}

sl_proto_msg_t
sl_bus_msg_from(const sl_msg_t *msg)
{
    /* Callers pass every argument any code of a call site might name; only this code's belong in args,
     * and the first of a repeated name is the one the text used. */
    const char *tmpl = sl_code_template(msg->code);
    sl_proto_msg_t out = {
        .code = sl_xstrdup(sl_code_slug(msg->code)),
        .args = msg->nargs > 0 ? sl_xcalloc(msg->nargs, sizeof(*out.args)) : NULL,
        .text = scrubbed_dup(msg->text),
    };
    for (size_t i = 0; i < msg->nargs; i++) {
        if (tmpl == NULL || !sl_msg_template_names(tmpl, msg->args[i].name) || named_before(msg, i))
            continue;
        out.args[out.args_len].key = str_dup(msg->args[i].name);
        out.args[out.args_len].value = scrubbed_dup(msg->args[i].value);
        out.args_len++;
    }
    if (out.args_len == 0) {
        free(out.args);
        out.args = NULL;
    }
    return out;
}

static sl_proto_msg_t *
msg_box(const sl_msg_t *msg)
{
    if (msg == NULL)
        return NULL;
    sl_proto_msg_t *m = sl_xmalloc(sizeof(*m));
    *m = sl_bus_msg_from(msg);
    return m;
}

static const struct {
    const char *prefix;
    sl_proto_failure_source_t source;
} failure_sources[] = {
    {"gw.auth.", SL_PROTO_FAILURE_SOURCE_AUTH},         {"gw.request.", SL_PROTO_FAILURE_SOURCE_REQUEST},
    {"gw.dialect.", SL_PROTO_FAILURE_SOURCE_REQUEST},   {"gw.not_found", SL_PROTO_FAILURE_SOURCE_REQUEST},
    {"gw.route.", SL_PROTO_FAILURE_SOURCE_CONFIG},      {"gw.safe_mode", SL_PROTO_FAILURE_SOURCE_CONFIG},
    {"gw.upstream.", SL_PROTO_FAILURE_SOURCE_UPSTREAM}, {"gw.breaker.", SL_PROTO_FAILURE_SOURCE_UPSTREAM},
};

sl_proto_failure_source_t
sl_bus_failure_source(sl_code_t code)
{
    const char *slug = sl_code_slug(code);
    for (size_t i = 0; slug != NULL && i < sizeof(failure_sources) / sizeof(failure_sources[0]); i++) {
        if (strncmp(slug, failure_sources[i].prefix, strlen(failure_sources[i].prefix)) == 0)
            return failure_sources[i].source;
    }
    return SL_PROTO_FAILURE_SOURCE_INTERNAL;
}

static const sl_proto_dialect_t dialects[SL_DIALECT_COUNT] = {
    [SL_DIALECT_ANTHROPIC] = SL_PROTO_DIALECT_ANTHROPIC,
    [SL_DIALECT_OPENAI_CHAT] = SL_PROTO_DIALECT_OPENAI_CHAT,
    [SL_DIALECT_OPENAI_RESPONSES] = SL_PROTO_DIALECT_OPENAI_RESPONSES,
    [SL_DIALECT_GEMINI] = SL_PROTO_DIALECT_GEMINI,
    [SL_DIALECT_BEDROCK] = SL_PROTO_DIALECT_BEDROCK,
};
_Static_assert(SL_DIALECT_COUNT == SL_PROTO_DIALECT_COUNT, "every gateway dialect is a protocol dialect");

static const sl_proto_health_state_t health_states[SL_BREAKER_STATE_COUNT] = {
    [SL_BREAKER_CLOSED] = SL_PROTO_HEALTH_STATE_OK,
    [SL_BREAKER_OPEN] = SL_PROTO_HEALTH_STATE_OPEN,
    [SL_BREAKER_HALF_OPEN] = SL_PROTO_HEALTH_STATE_HALF_OPEN,
};

sl_proto_event_t *
sl_bus_request_started(sl_proto_event_t *out, int64_t at_ms, const sl_bus_started_t *s)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_STARTED);
    sl_proto_request_started_t *e = &out->request_started;
    e->at_ms = u64_of(at_ms);
    e->id = s->id;
    e->client = str_dup(s->client);
    if (s->key != NULL) {
        char masked[SL_MASKED_KEY_MAX];
        e->key_masked = str_dup(sl_mask_key(s->key, masked));
    }
    /* An unknown dialect (a refused request whose path told nothing) reads as the default one. */
    e->dialect = s->dialect < SL_DIALECT_COUNT ? dialects[s->dialect] : SL_PROTO_DIALECT_OPENAI_CHAT;
    e->model = str_dup(s->model);
    e->stream = s->stream;
    const char *path = s->path != NULL ? s->path : "";
    size_t path_len = s->path != NULL ? s->path_len : 0;
    if (!sl_path_has_query(path, path_len)) {
        e->path = text_dup(path, path_len);
    } else {
        sl_strbuf_t clean = {0};
        sl_path_strip_key(path, path_len, &clean);
        size_t clean_len = clean.len;
        char *stripped = sl_strbuf_finish(&clean);
        e->path = text_dup(stripped, clean_len);
        free(stripped);
    }
    e->session = opt_dup(s->session);
    e->instance = opt_dup(s->instance);
    return out;
}

sl_proto_event_t *
sl_bus_request_routed(sl_proto_event_t *out, int64_t at_ms, uint64_t id, const char *route,
                      const char *const *candidates, size_t n_candidates, const sl_proto_affinity_t *affinity)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_ROUTED);
    sl_proto_request_routed_t *e = &out->request_routed;
    e->at_ms = u64_of(at_ms);
    e->id = id;
    e->route = str_dup(route);
    e->candidates = n_candidates > 0 ? sl_xcalloc(n_candidates, sizeof(*e->candidates)) : NULL;
    for (size_t i = 0; i < n_candidates; i++)
        e->candidates[i] = str_dup(candidates[i]);
    e->candidates_len = n_candidates;
    if (affinity != NULL) {
        e->has_affinity = true;
        e->affinity = *affinity;
    }
    return out;
}

/* The protocol's values of outcome.h's and next_step.h's lists, by name: the same lists in the same order. */
static const sl_proto_outcome_t proto_outcomes[] = {
#define SL_PROTO_OF(name, slug) [SL_HOP_##name] = SL_PROTO_OUTCOME_##name,
    SL_HOP_OUTCOMES(SL_PROTO_OF)
#undef SL_PROTO_OF
};
static const sl_proto_serve_skip_t proto_skips[] = {
#define SL_PROTO_OF(name, slug) [SL_SKIP_##name] = SL_PROTO_SERVE_SKIP_##name,
    SL_SKIP_REASONS(SL_PROTO_OF)
#undef SL_PROTO_OF
};
static const sl_proto_step_reason_t proto_reasons[] = {
#define SL_PROTO_OF(name, slug, text) [SL_STEP_REASON_##name] = SL_PROTO_STEP_REASON_##name,
    SL_STEP_REASONS(SL_PROTO_OF)
#undef SL_PROTO_OF
};
_Static_assert(SL_HOP_OUTCOME_COUNT == SL_PROTO_OUTCOME_COUNT,
               "outcome.h and the schema list the same outcomes");
_Static_assert(SL_SKIP_COUNT == SL_PROTO_SERVE_SKIP_COUNT + 1,
               "outcome.h and the schema list the same skips");
_Static_assert(SL_STEP_REASON_COUNT == SL_PROTO_STEP_REASON_COUNT,
               "next_step.h and the schema list the same reasons");

sl_proto_outcome_t
sl_bus_outcome(sl_hop_outcome_t outcome)
{
    return proto_outcomes[outcome];
}

sl_proto_serve_skip_t
sl_bus_serve_skip(sl_skip_t skip)
{
    return proto_skips[skip];
}

sl_proto_step_reason_t
sl_bus_step_reason(sl_step_reason_t reason)
{
    return proto_reasons[reason];
}

sl_proto_event_t *
sl_bus_attempt(sl_proto_event_t *out, int64_t at_ms, uint64_t id, const sl_bus_attempt_t *a)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_ATTEMPT);
    sl_proto_attempt_t *e = &out->attempt;
    e->at_ms = u64_of(at_ms);
    e->id = id;
    sl_proto_attempt_view_t *v = &e->view;
    v->provider = str_dup(a->provider);
    v->model = opt_dup(a->model);
    v->outcome = proto_outcomes[a->outcome];
    v->has_status = a->status > 0;
    v->status = a->status > 0 ? (uint32_t)a->status : 0;
    v->error = msg_box(a->error);
    v->ms = u64_of(a->ms);
    v->has_pause_ms = a->pause_ms >= 0;
    v->pause_ms = u64_of(a->pause_ms);
    v->has_retry = a->retry >= 0;
    v->retry = (uint32_t)u64_of(a->retry);
    v->has_backoff_ms = a->backoff_ms >= 0;
    v->backoff_ms = u64_of(a->backoff_ms);
    v->has_skipped = a->outcome == SL_HOP_SKIPPED && a->skip != SL_SKIP_NONE;
    v->skipped = v->has_skipped ? proto_skips[a->skip] : 0;
    v->has_reason = a->has_reason;
    v->reason = a->has_reason ? proto_reasons[a->reason] : 0;
    v->has_hedge = a->hedge;
    v->hedge = a->hedge;
    return out;
}

sl_proto_event_t *
sl_bus_request_headers(sl_proto_event_t *out, int64_t at_ms, uint64_t id, int status, int64_t ttfb_ms)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_HEADERS);
    out->request_headers = (sl_proto_request_headers_t){
        .at_ms = u64_of(at_ms), .id = id, .status = (uint32_t)u64_of(status), .ttfb_ms = u64_of(ttfb_ms)};
    return out;
}

sl_proto_event_t *
sl_bus_request_first_token(sl_proto_event_t *out, int64_t at_ms, uint64_t id, int64_t ttft_ms)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_FIRST_TOKEN);
    out->request_first_token =
        (sl_proto_request_first_token_t){.at_ms = u64_of(at_ms), .id = id, .ttft_ms = u64_of(ttft_ms)};
    return out;
}

sl_proto_event_t *
sl_bus_request_finished(sl_proto_event_t *out, int64_t at_ms, uint64_t id, int status, uint64_t bytes,
                        int64_t duration_ms, const sl_proto_usage_t *usage, int64_t cost_micros)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_FINISHED);
    sl_proto_request_finished_t *e = &out->request_finished;
    e->at_ms = u64_of(at_ms);
    e->id = id;
    e->status = (uint32_t)u64_of(status);
    e->bytes = bytes;
    e->duration_ms = u64_of(duration_ms);
    if (usage != NULL) {
        e->usage = sl_xmalloc(sizeof(*e->usage));
        *e->usage = *usage;
    }
    e->has_cost_micros = cost_micros >= 0;
    e->cost_micros = u64_of(cost_micros);
    return out;
}

sl_proto_event_t *
sl_bus_request_failed(sl_proto_event_t *out, int64_t at_ms, uint64_t id, sl_proto_failure_source_t source,
                      const sl_msg_t *message, int64_t duration_ms)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_FAILED);
    sl_proto_request_failed_t *e = &out->request_failed;
    e->at_ms = u64_of(at_ms);
    e->id = id;
    e->source = source;
    e->message = sl_bus_msg_from(message);
    e->duration_ms = u64_of(duration_ms);
    return out;
}

sl_proto_event_t *
sl_bus_request_cancelled(sl_proto_event_t *out, int64_t at_ms, uint64_t id, int64_t duration_ms)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_CANCELLED);
    out->request_cancelled =
        (sl_proto_request_cancelled_t){.at_ms = u64_of(at_ms), .id = id, .duration_ms = u64_of(duration_ms)};
    return out;
}

sl_proto_event_t *
sl_bus_breaker_health(sl_proto_event_t *out, const char *provider, const sl_breaker_t *b, const sl_tz_t *tz,
                      int64_t mono, int64_t wall)
{
    int64_t until = SL_BUS_ABSENT;
    if (b->state != SL_BREAKER_CLOSED && b->until_ms != SL_BREAKER_UNTIL_CLEARED)
        until = wall + (b->until_ms - mono);
    sl_code_t code = SL_CODE_GW_BREAKER_RECOVERED;
    const char *slug = sl_breaker_reason_slug(b);
    if (slug != NULL)
        sl_code_from_slug(slug, &code);
    char count[16], until_text[64] = "it is cleared";
    snprintf(count, sizeof(count), "%u", b->failures);
    if (until >= 0)
        sl_text_local_time(tz, until, until_text, sizeof(until_text));
    sl_msg_t reason = sl_msg_make(code, "provider", provider, "count", count, "until", until_text, NULL);
    sl_bus_health_changed(out, wall, provider, b->state, until, &reason);
    sl_msg_free(&reason);
    return out;
}

sl_proto_event_t *
sl_bus_health_changed(sl_proto_event_t *out, int64_t at_ms, const char *provider, sl_breaker_state_t state,
                      int64_t until_ms, const sl_msg_t *reason)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_HEALTH_CHANGED);
    sl_proto_health_changed_t *e = &out->health_changed;
    e->at_ms = u64_of(at_ms);
    e->provider = str_dup(provider);
    e->state = state < SL_BREAKER_STATE_COUNT ? health_states[state] : SL_PROTO_HEALTH_STATE_OPEN;
    e->has_until_ms = until_ms >= 0 && until_ms != SL_BREAKER_UNTIL_CLEARED;
    e->until_ms = e->has_until_ms ? (uint64_t)until_ms : 0;
    e->reason = msg_box(reason);
    return out;
}

sl_proto_event_t *
sl_bus_request_retrying(sl_proto_event_t *out, int64_t at_ms, uint64_t id, const char *const *upstreams,
                        size_t n_upstreams, uint32_t attempt, int64_t retry_at_ms, int64_t until_ms,
                        bool by_hint, const sl_msg_t *last_error)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_RETRYING);
    sl_proto_request_retrying_t *e = &out->request_retrying;
    e->at_ms = u64_of(at_ms);
    e->id = id;
    e->upstreams = n_upstreams > 0 ? sl_xcalloc(n_upstreams, sizeof(*e->upstreams)) : NULL;
    for (size_t i = 0; i < n_upstreams; i++)
        e->upstreams[i] = str_dup(upstreams[i]);
    e->upstreams_len = n_upstreams;
    e->attempt = attempt;
    e->retry_at_ms = u64_of(retry_at_ms);
    e->until_ms = u64_of(until_ms);
    e->cause = by_hint ? SL_PROTO_RETRY_CAUSE_HINT : SL_PROTO_RETRY_CAUSE_SCHEDULE;
    e->last_error = sl_bus_msg_from(last_error);
    return out;
}

sl_proto_event_t *
sl_bus_request_dequeued(sl_proto_event_t *out, int64_t at_ms, uint64_t id, const char *upstream)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_DEQUEUED);
    sl_proto_request_dequeued_t *e = &out->request_dequeued;
    e->at_ms = u64_of(at_ms);
    e->id = id;
    e->upstream = upstream != NULL ? str_dup(upstream) : NULL;
    return out;
}

sl_proto_event_t *
sl_bus_request_queued(sl_proto_event_t *out, int64_t at_ms, uint64_t id, const sl_bus_gate_t *gates, size_t n,
                      int64_t until_ms)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_REQUEST_QUEUED);
    sl_proto_request_queued_t *e = &out->request_queued;
    e->at_ms = u64_of(at_ms);
    e->id = id;
    e->upstreams = n > 0 ? sl_xcalloc(n, sizeof(*e->upstreams)) : NULL;
    e->gates = n > 0 ? sl_xcalloc(n, sizeof(*e->gates)) : NULL;
    for (size_t i = 0; i < n; i++) {
        e->upstreams[i] = str_dup(gates[i].upstream);
        e->gates[i].upstream = str_dup(gates[i].upstream);
        e->gates[i].skip = proto_skips[gates[i].skip];
        e->gates[i].has_until_ms = gates[i].until_ms >= 0;
        e->gates[i].until_ms = gates[i].until_ms >= 0 ? (uint64_t)gates[i].until_ms : 0;
    }
    e->upstreams_len = e->gates_len = n;
    e->until_ms = u64_of(until_ms);
    return out;
}

sl_proto_throttle_t *
sl_bus_throttle_view(const char *provider, const sl_bus_throttle_facts_t *f)
{
    static const sl_proto_throttle_kind_t kinds[SL_THROTTLE_STATE_COUNT] = {
        [SL_THROTTLE_PAUSED] = SL_PROTO_THROTTLE_KIND_PAUSED,
        [SL_THROTTLE_PROBING] = SL_PROTO_THROTTLE_KIND_PROBING,
        [SL_THROTTLE_MANUAL] = SL_PROTO_THROTTLE_KIND_MANUAL,
    };
    sl_throttle_state_t state = f->t != NULL ? sl_throttle_kind(f->t) : SL_THROTTLE_FREE;
    if (state == SL_THROTTLE_FREE && f->limits == SL_LIMIT_OK)
        return NULL;
    sl_proto_throttle_t *view = sl_xcalloc(1, sizeof(*view));
    char until[64] = "", count[16], text[SL_LIMIT_TEXT_MAX];
    sl_msg_t reason;
    if (state != SL_THROTTLE_FREE) {
        view->kind = kinds[state];
        view->has_until_ms = f->t_until_ms >= 0;
        view->until_ms = u64_of(f->t_until_ms);
        view->consecutive = f->t->consecutive;
        sl_code_t code = SL_CODE_GW_UPSTREAM_PAUSED;
        const char *slug = sl_throttle_reason_slug(f->t);
        if (slug != NULL)
            sl_code_from_slug(slug, &code);
        if (f->t_until_ms >= 0)
            sl_text_local_time(f->tz, f->t_until_ms, until, sizeof(until));
        else
            snprintf(until, sizeof(until), "resumed");
        snprintf(count, sizeof(count), "%u", f->t->consecutive);
        reason = sl_msg_make(code, "provider", provider, "count", count, "until", until, NULL);
    } else {
        bool full = f->limits == SL_LIMIT_WINDOW_FULL;
        view->kind = full ? SL_PROTO_THROTTLE_KIND_WINDOW_FULL : SL_PROTO_THROTTLE_KIND_PERIOD_USED_UP;
        view->has_until_ms = f->limits_until_ms >= 0;
        view->until_ms = u64_of(f->limits_until_ms);
        sl_limit_describe(f->limit, text, sizeof(text));
        sl_text_local_time(f->tz, f->limits_until_ms, until, sizeof(until));
        reason = sl_msg_make(full ? SL_CODE_GW_UPSTREAM_WINDOW_FULL : SL_CODE_GW_UPSTREAM_PERIOD_USED_UP,
                             "provider", provider, "limit", text, "until", until, NULL);
    }
    view->reason = sl_bus_msg_from(&reason);
    sl_msg_free(&reason);
    return view;
}

sl_proto_event_t *
sl_bus_throttle_changed(sl_proto_event_t *out, int64_t at_ms, const char *provider, sl_proto_throttle_t *view)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_THROTTLE_CHANGED);
    sl_proto_throttle_changed_t *e = &out->throttle_changed;
    e->at_ms = u64_of(at_ms);
    e->provider = str_dup(provider);
    e->throttle = view;
    return out;
}

static const sl_proto_period_t periods[] = {
    [SL_PER_MINUTE] = SL_PROTO_PERIOD_MINUTE, [SL_PER_HOUR] = SL_PROTO_PERIOD_HOUR,
    [SL_PER_DAY] = SL_PROTO_PERIOD_DAY,       [SL_PER_WEEK] = SL_PROTO_PERIOD_WEEK,
    [SL_PER_MONTH] = SL_PROTO_PERIOD_MONTH,
};

/* A Limit's fields; LimitView extends Limit with the same leading members, so both use this. */
#define FILL_LIMIT(l, src)                                                                                   \
    do {                                                                                                     \
        uint64_t amount_ = u64_of((src)->amount);                                                            \
        (l)->per = periods[(src)->per];                                                                      \
        (l)->every = (src)->every;                                                                           \
        (l)->has_requests = (src)->measure == SL_MEASURE_REQUESTS;                                           \
        (l)->requests = (l)->has_requests ? amount_ : 0;                                                     \
        (l)->has_tokens = (src)->measure == SL_MEASURE_TOKENS;                                               \
        (l)->tokens = (l)->has_tokens ? amount_ : 0;                                                         \
        (l)->has_cost_micros = (src)->measure == SL_MEASURE_COST;                                            \
        (l)->cost_micros = (l)->has_cost_micros ? amount_ : 0;                                               \
    } while (0)

sl_proto_event_t *
sl_bus_cluster_changed(sl_proto_event_t *out, int64_t at_ms, sl_proto_cluster_state_t state,
                       uint32_t instances, const sl_msg_t *reason)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_CLUSTER_CHANGED);
    sl_proto_cluster_changed_t *e = &out->cluster_changed;
    e->at_ms = u64_of(at_ms);
    e->state = state;
    e->instances = instances;
    e->reason = msg_box(reason);
    return out;
}

sl_proto_event_t *
sl_bus_limits_changed(sl_proto_event_t *out, int64_t at_ms, sl_proto_limit_target_t target, const char *name,
                      const sl_limit_t *limits, size_t n)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_LIMITS_CHANGED);
    sl_proto_limits_changed_t *e = &out->limits_changed;
    e->at_ms = u64_of(at_ms);
    e->target = target;
    e->name = str_dup(name);
    e->limits = n > 0 ? sl_xcalloc(n, sizeof(*e->limits)) : NULL;
    e->limits_len = n;
    for (size_t i = 0; i < n; i++)
        FILL_LIMIT(&e->limits[i], &limits[i]);
    return out;
}

void
sl_bus_provider_view(sl_proto_provider_view_t *out, const sl_bus_provider_facts_t *f)
{
    const sl_provider_t *p = f->provider;
    memset(out, 0, sizeof(*out));
    out->name = str_dup(p->name);
    out->protocol = (sl_proto_dialect_t)p->protocol;
    out->base_url = str_dup(p->base_url);
    out->disabled = p->disabled;
    out->health = f->health < SL_BREAKER_STATE_COUNT ? health_states[f->health] : SL_PROTO_HEALTH_STATE_OPEN;
    out->throttle = sl_bus_throttle_view(p->name, &f->throttle);
    out->limits = f->n_limits > 0 ? sl_xcalloc(f->n_limits, sizeof(*out->limits)) : NULL;
    out->limits_len = f->n_limits;
    for (size_t i = 0; i < f->n_limits; i++) {
        FILL_LIMIT(&out->limits[i], &f->limits[i].limit);
        out->limits[i].used = u64_of(f->limits[i].used);
        out->limits[i].resets_at_ms = u64_of(f->limits[i].resets_at_ms);
    }
    out->in_flight = f->in_flight;
    out->has_max_concurrent = p->max_concurrent > 0;
    out->max_concurrent = p->max_concurrent;
    out->queued = f->queued;
}

sl_proto_event_t *
sl_bus_config_reloaded(sl_proto_event_t *out, int64_t at_ms, uint64_t revision,
                       sl_proto_config_source_t source)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_CONFIG_RELOADED);
    out->config_reloaded =
        (sl_proto_config_reloaded_t){.at_ms = u64_of(at_ms), .revision = revision, .source = source};
    return out;
}

sl_proto_event_t *
sl_bus_config_rejected(sl_proto_event_t *out, int64_t at_ms, sl_proto_config_source_t source,
                       const sl_msgs_t *problems)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_CONFIG_REJECTED);
    sl_proto_config_rejected_t *e = &out->config_rejected;
    e->at_ms = u64_of(at_ms);
    e->source = source;
    e->problems = problems->len > 0 ? sl_xcalloc(problems->len, sizeof(*e->problems)) : NULL;
    e->problems_len = problems->len;
    for (size_t i = 0; i < problems->len; i++)
        e->problems[i] = sl_bus_msg_from(&problems->items[i]);
    return out;
}

sl_proto_event_t *
sl_bus_rows_dropped(sl_proto_event_t *out, int64_t at_ms, uint64_t count)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_ROWS_DROPPED);
    out->rows_dropped = (sl_proto_rows_dropped_t){.at_ms = u64_of(at_ms), .count = count};
    return out;
}

sl_proto_event_t *
sl_bus_store_changed(sl_proto_event_t *out, int64_t at_ms, bool degraded, bool postgres, const char *reason,
                     int64_t spooled_rows)
{
    sl_proto_event_init(out, SL_PROTO_EVENT_STORE_CHANGED);
    sl_proto_store_changed_t *e = &out->store_changed;
    e->at_ms = u64_of(at_ms);
    e->state = degraded ? SL_PROTO_STORE_STATE_DEGRADED : SL_PROTO_STORE_STATE_OK;
    e->store_kind = postgres ? SL_PROTO_STORE_KIND_POSTGRES : SL_PROTO_STORE_KIND_SQLITE;
    e->reason = reason != NULL ? scrubbed_dup(reason) : NULL;
    e->has_spooled_rows = spooled_rows >= 0;
    e->spooled_rows = u64_of(spooled_rows);
    return out;
}

/* ---- the in-flight log ----------------------------------------------------------------------- */

/* What an event does to the log, and where its request id is. */
typedef enum { ROLE_OTHER = 0, ROLE_START, ROLE_STEP, ROLE_END } role_t;

#define REQUEST_EVENT(KIND, member, role) [KIND] = {role, offsetof(sl_proto_event_t, member.id)}

static const struct {
    role_t role;
    size_t id_offset;
} event_roles[SL_PROTO_EVENT_KIND_COUNT] = {
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_STARTED, request_started, ROLE_START),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_ROUTED, request_routed, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_ATTEMPT, attempt, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_HEADERS, request_headers, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_FIRST_TOKEN, request_first_token, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_QUEUED, request_queued, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_DEQUEUED, request_dequeued, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_RETRYING, request_retrying, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_SECRETS_FOUND, secrets_found, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_CONTENT_MATCHED, content_matched, ROLE_STEP),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_FINISHED, request_finished, ROLE_END),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_FAILED, request_failed, ROLE_END),
    REQUEST_EVENT(SL_PROTO_EVENT_REQUEST_CANCELLED, request_cancelled, ROLE_END),
};

/* Every event variant starts with at_ms, so any member reads it. */
_Static_assert(offsetof(sl_proto_event_t, request_started.at_ms) ==
                   offsetof(sl_proto_event_t, rows_dropped.at_ms),
               "at_ms is common to every event");

static uint64_t
event_at_ms(const sl_proto_event_t *ev)
{
    return ev->request_started.at_ms;
}

/* One live request; id 0 marks an empty slot. */
typedef struct {
    uint64_t id;
    sl_proto_event_t *events;
    size_t len, cap;
} entry_t;

/* Open addressing with linear probing over a power-of-two table, at most half full. */
struct sl_inflight {
    entry_t *slots;
    size_t mask;
    size_t count;
};

static size_t
slot_of(const sl_inflight_t *log, uint64_t id)
{
    return (size_t)((id * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & log->mask;
}

static entry_t *
find(const sl_inflight_t *log, uint64_t id)
{
    for (size_t i = slot_of(log, id);; i = (i + 1) & log->mask) {
        if (log->slots[i].id == id)
            return &log->slots[i];
        if (log->slots[i].id == 0)
            return NULL;
    }
}

static entry_t *
insert_slot(sl_inflight_t *log, uint64_t id)
{
    size_t i = slot_of(log, id);
    while (log->slots[i].id != 0)
        i = (i + 1) & log->mask;
    return &log->slots[i];
}

static void
grow(sl_inflight_t *log)
{
    entry_t *old = log->slots;
    size_t old_size = log->mask + 1;
    log->mask = old_size * 2 - 1;
    log->slots = sl_xcalloc(old_size * 2, sizeof(*log->slots));
    for (size_t i = 0; i < old_size; i++) {
        if (old[i].id != 0)
            *insert_slot(log, old[i].id) = old[i];
    }
    free(old);
}

/* Empties slot i, then moves later entries of its probe run back so every lookup still finds them. */
static void
remove_at(sl_inflight_t *log, size_t i)
{
    entry_t *e = &log->slots[i];
    free_events(e->events, e->len);
    free(e->events);
    *e = (entry_t){0};
    log->count--;
    for (size_t j = (i + 1) & log->mask; log->slots[j].id != 0; j = (j + 1) & log->mask) {
        size_t home = slot_of(log, log->slots[j].id);
        /* The entry at j may fill the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays)
            continue;
        log->slots[i] = log->slots[j];
        log->slots[j] = (entry_t){0};
        i = j;
    }
}

static void
entry_append(entry_t *e, sl_proto_event_t *ev)
{
    if (e->len == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 8;
        e->events = sl_xrealloc(e->events, e->cap * sizeof(*e->events));
    }
    e->events[e->len++] = *ev;
    memset(ev, 0, sizeof(*ev));
}

sl_inflight_t *
sl_inflight_new(void)
{
    sl_inflight_t *log = sl_xcalloc(1, sizeof(*log));
    log->mask = 63;
    log->slots = sl_xcalloc(log->mask + 1, sizeof(*log->slots));
    return log;
}

void
sl_inflight_free(sl_inflight_t *log)
{
    if (log == NULL)
        return;
    for (size_t i = 0; i <= log->mask; i++) {
        free_events(log->slots[i].events, log->slots[i].len);
        free(log->slots[i].events);
    }
    free(log->slots);
    free(log);
}

bool
sl_inflight_apply(sl_inflight_t *log, sl_proto_event_t *ev)
{
    if ((size_t)ev->kind >= SL_PROTO_EVENT_KIND_COUNT || event_roles[ev->kind].role == ROLE_OTHER)
        return false;
    uint64_t id;
    memcpy(&id, (const char *)ev + event_roles[ev->kind].id_offset, sizeof(id));
    if (id == 0)
        return false;
    entry_t *e = find(log, id);
    switch (event_roles[ev->kind].role) {
    case ROLE_START:
        if (e != NULL)
            return false;
        if ((log->count + 1) * 2 > log->mask + 1)
            grow(log);
        e = insert_slot(log, id);
        e->id = id;
        log->count++;
        entry_append(e, ev);
        return true;
    case ROLE_STEP:
        if (e == NULL)
            return false;
        entry_append(e, ev);
        return true;
    case ROLE_END:
        if (e != NULL)
            remove_at(log, (size_t)(e - log->slots));
        return false;
    default:
        return false;
    }
}

bool
sl_inflight_has(const sl_inflight_t *log, uint64_t id)
{
    return id != 0 && find((sl_inflight_t *)log, id) != NULL;
}

size_t
sl_inflight_count(const sl_inflight_t *log)
{
    return log->count;
}

size_t
sl_inflight_expire(sl_inflight_t *log, int64_t cutoff_ms)
{
    size_t forgotten = 0;
    for (size_t i = 0; i <= log->mask;) {
        const entry_t *e = &log->slots[i];
        if (e->id != 0 && (int64_t)event_at_ms(&e->events[e->len - 1]) < cutoff_ms) {
            /* The backward shift may move an unvisited entry into slot i: look at it again. */
            remove_at(log, i);
            forgotten++;
            continue;
        }
        i++;
    }
    return forgotten;
}

static int
by_id(const void *a, const void *b)
{
    uint64_t x = ((const sl_proto_in_flight_request_t *)a)->id;
    uint64_t y = ((const sl_proto_in_flight_request_t *)b)->id;
    return (x > y) - (x < y);
}

size_t
sl_inflight_view(const sl_inflight_t *log, sl_proto_in_flight_request_t **out)
{
    *out = NULL;
    if (log->count == 0)
        return 0;
    sl_proto_in_flight_request_t *reqs = sl_xmalloc(log->count * sizeof(*reqs));
    size_t n = 0;
    for (size_t i = 0; i <= log->mask; i++) {
        const entry_t *e = &log->slots[i];
        if (e->id != 0)
            reqs[n++] =
                (sl_proto_in_flight_request_t){.id = e->id, .events = e->events, .events_len = e->len};
    }
    qsort(reqs, n, sizeof(*reqs), by_id);
    *out = reqs;
    return n;
}

bool
sl_bus_throttle_is_pause(const sl_proto_throttle_t *t)
{
    return t != NULL &&
           (t->kind == SL_PROTO_THROTTLE_KIND_PAUSED || t->kind == SL_PROTO_THROTTLE_KIND_PROBING ||
            t->kind == SL_PROTO_THROTTLE_KIND_MANUAL);
}
