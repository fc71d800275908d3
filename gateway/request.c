#define _GNU_SOURCE /* memmem */
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <arpa/inet.h>

#include <h2o/socket.h>

#include "core/cidr.h"
#include "core/answer_usage.h"
#include "core/bodyedit.h"
#include "core/classify.h"
#include "core/dialect.h"
#include "core/jscan.h"
#include "core/hints.h"
#include "core/limits.h"
#include "core/pricing.h"
#include "core/retry.h"
#include "sigv4.h"
#include "core/route.h"
#include "core/sse.h"
#include "core/eventstream.h"
#include "core/stream_bedrock.h"
#include "core/stream_class.h"
#include "core/text.h"
#include "core/xalloc.h"
#include "hop.h"
#include "waitq.h"
#include "intake.h"
#include "log.h"

#define HOLD_CAP              (1u << 20)  /* opening bytes held before the first content (behaviour.md §4) */
#define ERROR_BODY_CAP        (64u << 10) /* an error answer is read this far before it is judged */
#define CLIENT_BUFFER_CAP     (4u << 20)  /* bytes waiting for a slow client before upstream reads pause */
#define MAX_ATTEMPTS          64
#define ANSWER_TAIL_CAP       (16u << 10) /* the end of a whole JSON answer, kept to read its usage */
#define WATCH_CLIENT_AFTER_MS 20          /* see watch_client_soon */

typedef enum {
    REQ_ROUTING,       /* choosing the next candidate */
    REQ_BACKOFF,       /* every candidate of the round failed; a retry round starts when the pause ends */
    REQ_QUEUED,        /* no candidate can take it now: it waits on their queues (behaviour.md §6) */
    REQ_WAITING_HEAD,  /* a hop is out, nothing has come back */
    REQ_HELD,          /* a 2xx head came; its bytes are held until content */
    REQ_READING_ERROR, /* a non-2xx head came; its body is read to judge it */
    REQ_STREAMING,     /* the answer is going to the client */
    REQ_DONE,
} req_state_t;

typedef struct {
    size_t provider;
    const char *model;
    sl_row_hop_outcome_t outcome;
    int status;
    bool has_error;
    sl_code_t error_code;
    char error_detail[128];
    int64_t started_ms, ms;
    sl_row_skip_t skipped;
    bool closed;        /* its outcome is set: reported once */
    uint32_t retry;     /* the retry round of this hop; 0 = the first round */
    int64_t pause_ms;   /* time queued before this hop; -1 = none */
    int64_t backoff_ms; /* the pause before its round, on the round's first hop only; -1 = none */
} attempt_t;

/* What a usage limit set was charged for this request (behaviour.md §7), settled when it is over. */
typedef struct {
    sl_limit_set_t *set; /* NULL: nothing charged */
    int64_t at_ms;       /* wall clock: when it was charged; the settlement lands there too */
    sl_amounts_t amounts;
} charge_t;

/* Why the last hop failed, kept for the final answer when no candidate is left. */
typedef struct {
    bool any;
    sl_code_t code;
    int status;
    char detail[160];
} last_failure_t;

typedef struct {
    h2o_linklist_t link; /* in io->requests while it lives */
    h2o_req_t *req;
    sl_worker_io_t *io;
    sl_gateway_t *gw;
    sl_snapshot_t *snapshot;
    const sl_config_t *config;
    uint64_t id;
    int64_t started_ms, started_wall_ms;
    req_state_t state;
    sl_intake_t in;
    h2o_iovec_t path; /* as the client sent it; lives in the request pool */

    sl_candidate_t *cands;
    sl_row_skip_t *skips;
    size_t n_cands, next;
    size_t n_offered;     /* candidates not skipped for config reasons */
    bool cooling_ignored; /* every candidate was cooling: all are tried (fail open) */

    size_t cur; /* the candidate of the hop in flight */
    sl_hop_t *hop;
    sl_upstream_t *up; /* the upstream of the current hop; in_flight counted while set */
    bool is_probe;
    char *head;        /* the upstream request head (malloc) */
    h2o_iovec_t body;  /* the body sent upstream: the client's, or body_copy */
    char *body_copy;   /* the client's body with the upstream's model name (malloc), for this hop only */
    char *answer_tail; /* the last bytes of a whole (non-SSE) 2xx answer (malloc), where its usage is */
    size_t answer_tail_len, answer_tail_cap;
    int up_status;
    h2o_headers_t up_headers; /* the upstream's answer headers, hop-by-hop ones dropped */
    int64_t up_content_length;
    bool events; /* the answer is a stream of events this gateway understands: SSE, or (frames) eventstream */
    bool frames; /* Bedrock: application/vnd.amazon.eventstream frames instead of SSE */

    h2o_buffer_t *rx; /* upstream bytes not yet handed to h2o */
    h2o_buffer_t *tx; /* the bytes of the h2o_send in flight */
    size_t parsed;    /* rx[0..parsed) are whole events (or, without SSE, any bytes): forwardable */
    sl_sse_scanner_t scanner;
    char scratch[4096];
    sl_stream_t stream;
    bool response_started; /* h2o has the head (the answer's, or the keep-alive one) */
    bool answer_started;   /* the answer itself began going out */
    bool sending, final_queued, reads_paused;
    bool handing_over; /* the answer going out is a failure handed over as the upstream sent it */
    bool told_error;   /* the upstream's stream already told the client of an error after content */
    bool resent_on_fresh_connection;
    h2o_send_state_t final_state;
    h2o_generator_t generator;

    last_failure_t last;
    uint64_t conversation; /* the affinity key; 0 = none */
    /* Retrying (behaviour.md §5) and the 15 s rule (§4). */
    int64_t deadline_ms;    /* arrival + failover.wait_secs: nothing waits or retries past it */
    uint32_t round;         /* 0 = the first round, then the retry round */
    bool *in_round;         /* candidates taking part in this round */
    bool *failed_temporary; /* candidates whose failure in this round was temporary */
    int64_t hint_ms;        /* the longest retry hint an upstream gave in this round; -1 = none */
    int64_t round_backoff_ms;
    bool waited; /* sluice retried or waited: a handed-over error says x-should-retry: false */
    sl_timer_t start_timer, backoff_timer, keepalive_timer;
    sl_timer_t stall_timer; /* armed while a send to the client is in flight (see on_client_stalled) */
    int client_fd;          /* HTTP/1: the client's socket, shut down when it stalls; else -1 */
    sl_timer_t watch_timer; /* a request still unanswered this long has its client watched */
    bool end_follows;       /* the bytes being processed are the upstream's last (see flush_to_client) */
    /* Waiting on upstreams that are paused or busy (behaviour.md §6). */
    sl_timer_t wait_timer;
    sl_waiter_t *waiter; /* while it is in upstream queues */
    bool queued;         /* RequestQueued went out, RequestDequeued not yet */
    int64_t queued_since_ms;
    int64_t pause_ms;           /* time queued before the next hop (its AttemptView pause_ms); -1 = none */
    bool throttle_probe;        /* the hop in flight is its upstream's probe after a 429 pause */
    bool counts_waiting;        /* its body counts against limits.max_waiting_bytes */
    sl_upstream_t *dispatching; /* it left this upstream's queue for a hop: the next goes once it is sent */
    bool keepalive_started;     /* a 200 SSE head and keep-alives went out while nothing else could */
    int64_t last_sent_ms;       /* when the client last got bytes (or the request arrived) */
    sl_watch_entry_t watch;     /* the HTTP/1.1 client socket while nothing has been sent */
    char response_id[128];      /* Responses: the id of the answer being served, "" until seen */
    uint64_t bytes_out;         /* body bytes handed to the client */
    bool first_token_seen;
    bool gateway_error;  /* the gateway wrote the error the client got */
    bool sealed_history; /* the body carries history bound to one upstream account */
    sl_affinity_effect_t affinity_effect;
    int64_t ttfb_ms, ttft_ms;
    /* Usage limits (behaviour.md §7). */
    sl_limit_set_t *key_limits; /* the client key's limits; NULL: none */
    charge_t key_charge;        /* the key's charge, once, at admission */
    charge_t up_charge;         /* the current hop's upstream charge, from when it was sent */
    bool key_waiting;           /* it waits in the key's queue (gate key_window) */
    int64_t key_pause_ms;       /* time it waited for its key: part of the first hop's pause_ms */
    bool hop_uncounted;     /* a 429, or resent on a fresh connection: its upstream charge is taken back */
    bool key_counts_tokens; /* the key's limits count tokens or cost: its usage must be reported */
    uint32_t hops_sent;     /* a request answered by the gateway alone costs its key nothing */
    bool hop_needs_usage;   /* so do the hop's upstream's limits (or the key's) */
    bool strip_usage_chunk; /* sluice asked a Chat stream for usage the client did not ask for */
    int64_t *recovery_ms;   /* per candidate: when its full window has room, its period resets */
    char too_large_limit[SL_LIMIT_TEXT_MAX]; /* the limit a request too large for it met, for the message */
    attempt_t *attempts;                     /* owned; grows with the hops, most requests make one or two */
    size_t n_attempts, cap_attempts;
    bool recorded;
} request_t;

static void next_hop(request_t *r);
static bool schedule_retry(request_t *r);
static size_t pinned_candidate(const request_t *r);
static void fail_streaming(request_t *r, sl_hop_end_t how, const char *detail);
static void start_hop(request_t *r, size_t cand);
static void wait_or_give_up(request_t *r);
static void stop_waiting(request_t *r, bool for_hop);
static void wake_next_in_line(request_t *r);
static void end_dispatch(request_t *r);
static void throttle_answered(request_t *r);
static void emit_throttle(request_t *r, const char *provider, const sl_throttle_t *t);
static bool may_wait(const request_t *r);
static void queue_final(request_t *r, h2o_send_state_t state);
static void append_stream_error(request_t *r, sl_code_t code, const char *text);
static int64_t failure_hint(const request_t *r, const sl_headers_t *headers, const char *body, size_t len);
static void watch_client(request_t *r);
static void unwatch_client(request_t *r);
static void emit_attempt(request_t *r, const attempt_t *a);
static void answer_token_estimate(request_t *r);
static void answer_too_large(request_t *r, const sl_wait_decision_t *d, const char *subject);
static bool admit_key(request_t *r);
static void process(request_t *r);
static void flush_to_client(request_t *r);

/* ---- small helpers ---------------------------------------------------------------------- */

/*
 * Times on the two clocks: waiting runs on sl_now_ms's (monotonic), events
 * and usage limits on the wall clock. now and wall are the same moment.
 */
/* A monotonic time as a wall-clock one for events; -1 and SL_THROTTLE_NEVER become -1 ("none"). */
static int64_t
wall_of(int64_t now, int64_t wall, int64_t t)
{
    return t < 0 || t == SL_THROTTLE_NEVER ? -1 : wall + (t - now);
}

/* A wall-clock time (a limit's recovery) on sl_now_ms's clock. */
static int64_t
mono_of(int64_t now, int64_t wall, int64_t t)
{
    return now + (t - wall);
}

static const sl_provider_t *
provider_of(const request_t *r, size_t cand)
{
    return &r->config->providers[r->cands[cand].provider];
}

static bool
header_at(const void *ctx, size_t i, sl_header_t *out)
{
    const h2o_headers_t *h = ctx;
    if (i >= h->size)
        return false;
    out->name = h->entries[i].name->base;
    out->name_len = h->entries[i].name->len;
    out->value = h->entries[i].value.base;
    out->value_len = h->entries[i].value.len;
    return true;
}

sl_headers_t
sl_request_headers(const h2o_req_t *req)
{
    return (sl_headers_t){.at = header_at, .ctx = &req->headers};
}

static const char *
reason_phrase(int status)
{
    static const struct {
        int status;
        const char *text;
    } phrases[] = {
        {200, "OK"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {402, "Payment Required"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {413, "Payload Too Large"},
        {422, "Unprocessable Entity"},
        {429, "Too Many Requests"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {502, "Bad Gateway"},
        {503, "Service Unavailable"},
        {504, "Gateway Timeout"},
        {529, "Overloaded"},
    };
    for (size_t i = 0; i < sizeof(phrases) / sizeof(phrases[0]); i++) {
        if (phrases[i].status == status)
            return phrases[i].text;
    }
    return status < 300 ? "OK" : "Error";
}

static attempt_t *
new_attempt(request_t *r, size_t cand)
{
    if (r->n_attempts == MAX_ATTEMPTS)
        return NULL;
    if (r->n_attempts == r->cap_attempts) {
        r->cap_attempts = r->cap_attempts == 0 ? 2 : r->cap_attempts * 2;
        r->attempts = sl_xrealloc(r->attempts, r->cap_attempts * sizeof(*r->attempts));
    }
    attempt_t *a = &r->attempts[r->n_attempts++];
    *a = (attempt_t){.provider = r->cands[cand].provider,
                     .model = r->cands[cand].model,
                     .started_ms = sl_now_ms(),
                     .skipped = SL_ROW_SKIP_NONE,
                     .retry = r->round,
                     .backoff_ms = -1,
                     .pause_ms = -1};
    return a;
}

static attempt_t *
current_attempt(request_t *r)
{
    return r->n_attempts > 0 ? &r->attempts[r->n_attempts - 1] : NULL;
}

static void
close_attempt(request_t *r, sl_row_hop_outcome_t outcome, sl_code_t code, const char *detail)
{
    attempt_t *a = current_attempt(r);
    if (a == NULL || a->skipped != SL_ROW_SKIP_NONE || a->closed)
        return;
    a->closed = true;
    a->outcome = outcome;
    a->status = r->up_status;
    a->ms = sl_now_ms() - a->started_ms;
    if (outcome != SL_ROW_HOP_SERVED) {
        a->has_error = true;
        a->error_code = code;
        snprintf(a->error_detail, sizeof(a->error_detail), "%s", detail != NULL ? detail : "");
    }
    emit_attempt(r, a);
}

/* Who sent the request: the client's name, "local" when no keys are configured, "unknown" when refused. */
static const char *
client_name(const request_t *r)
{
    if (r->in.client != NULL)
        return r->in.client->name;
    return r->config->n_clients == 0 ? "local" : "unknown";
}

/* ---- events ------------------------------------------------------------------------------- */

static bool
events_on(const request_t *r)
{
    return r->gw->bus != NULL && sl_bus_is_active(r->gw->bus);
}

static void
emit(request_t *r, sl_proto_event_t *ev)
{
    sl_bus_emit(&r->io->events, ev);
}

/* The conversation's session header, the first of x-sluice-session, x-claude-code-session-id, session-id. */
static bool
session_header(const request_t *r, const h2o_iovec_t **value)
{
    const h2o_headers_t *h = &r->req->headers;
    int best_rank = -1;
    for (size_t i = 0; i < h->size; i++) {
        int rank = sl_affinity_session_header_rank(h->entries[i].name->base, h->entries[i].name->len);
        if (rank >= 0 && (best_rank < 0 || rank < best_rank)) {
            best_rank = rank;
            *value = &h->entries[i].value;
        }
    }
    return best_rank >= 0;
}

static void
emit_started(request_t *r)
{
    if (!events_on(r) || r->req == NULL)
        return;
    const h2o_iovec_t *session = NULL;
    char session_text[256] = "";
    if (session_header(r, &session))
        snprintf(session_text, sizeof(session_text), "%.*s", (int)session->len, session->base);
    sl_bus_started_t st = {
        .id = r->id,
        .client = client_name(r),
        .dialect =
            r->in.endpoint.dialect < SL_DIALECT_COUNT ? r->in.endpoint.dialect : SL_DIALECT_OPENAI_CHAT,
        .model = r->in.model,
        .stream = r->in.stream,
        .path = r->path.base,
        .path_len = r->path.len,
        .session = session != NULL ? session_text : NULL,
    };
    sl_proto_event_t ev;
    emit(r, sl_bus_request_started(&ev, r->started_wall_ms, &st));
}

static void
emit_routed(request_t *r, size_t route, sl_affinity_effect_t effect)
{
    if (!events_on(r))
        return;
    const char *names[r->n_cands + 1];
    for (size_t i = 0; i < r->n_cands; i++)
        names[i] = provider_of(r, i)->name;
    const char *route_name = route == SL_ROUTE_BY_MODELS ? "models" : r->config->routes[route].match;
    sl_proto_affinity_t affinity =
        effect == SL_AFFINITY_SEALED ? SL_PROTO_AFFINITY_SEALED : SL_PROTO_AFFINITY_STICKY;
    bool has_affinity = effect == SL_AFFINITY_STICKY || effect == SL_AFFINITY_SEALED;
    sl_proto_event_t ev;
    emit(r, sl_bus_request_routed(&ev, sl_wall_ms(), r->id, route_name, names, r->n_cands,
                                  has_affinity ? &affinity : NULL));
}

/*
 * A hop's error as a message (AttemptView.error, the attempt's row): its one
 * detail fills the template's one placeholder besides {provider} ({status},
 * {secs}, {reason}, ...). name is room for that placeholder's name, which
 * must outlive the message (sl_msg_make keeps names by pointer).
 */
static sl_msg_t
hop_msg(sl_code_t code, const char *provider, const char *detail, char name[32])
{
    if (!sl_msg_template_other(sl_code_template(code), "provider", name, 32))
        snprintf(name, 32, "detail");
    return sl_msg_make(code, "provider", provider, name, detail, NULL);
}

static void
emit_attempt(request_t *r, const attempt_t *a)
{
    if (!events_on(r))
        return;
    sl_msg_t msg = {0};
    char name[32];
    if (a->has_error)
        msg = hop_msg(a->error_code, r->config->providers[a->provider].name, a->error_detail, name);
    bool skipped = a->skipped != SL_ROW_SKIP_NONE;
    sl_bus_attempt_t view = {
        .provider = r->config->providers[a->provider].name,
        .model = a->model,
        /* The row enums list the protocol's values in the same order (ServeSkip without "none"). */
        .outcome = skipped ? SL_PROTO_OUTCOME_SKIPPED : (sl_proto_outcome_t)a->outcome,
        .status = a->status,
        .error = a->has_error ? &msg : NULL,
        .ms = a->ms,
        .pause_ms = a->pause_ms >= 0 ? a->pause_ms : SL_BUS_ABSENT,
        .retry = a->retry > 0 ? (int64_t)a->retry : SL_BUS_ABSENT,
        .backoff_ms = a->backoff_ms >= 0 ? a->backoff_ms : SL_BUS_ABSENT,
        .skip = skipped ? (sl_proto_serve_skip_t)(a->skipped - 1) : SL_PROTO_SERVE_SKIP_DISABLED,
    };
    sl_proto_event_t ev;
    emit(r, sl_bus_attempt(&ev, sl_wall_ms(), r->id, &view));
    if (a->has_error)
        sl_msg_free(&msg);
}

/* The first content reached the client (or, for a whole answer, its head did). */
static void
first_token(request_t *r)
{
    if (r->first_token_seen)
        return;
    r->first_token_seen = true;
    r->ttft_ms = sl_now_ms() - r->started_ms;
    if (events_on(r)) {
        sl_proto_event_t ev;
        emit(r, sl_bus_request_first_token(&ev, sl_wall_ms(), r->id, r->ttft_ms));
    }
}

static void
emit_end(request_t *r, sl_row_outcome_t outcome, int status, sl_code_t code, const char *text)
{
    if (!events_on(r))
        return;
    sl_proto_event_t ev;
    int64_t duration = sl_now_ms() - r->started_ms;
    if (outcome == SL_ROW_CANCELLED) {
        emit(r, sl_bus_request_cancelled(&ev, sl_wall_ms(), r->id, duration));
    } else if (r->gateway_error) {
        sl_msg_t msg = sl_msg_make(code, NULL);
        if (text != NULL) {
            free(msg.text);
            msg.text = sl_xstrdup(text);
        }
        emit(r, sl_bus_request_failed(&ev, sl_wall_ms(), r->id, sl_bus_failure_source(code), &msg, duration));
        sl_msg_free(&msg);
    } else {
        const sl_usage_t *u = &r->stream.usage;
        sl_proto_usage_t usage = {(uint64_t)u->input, (uint64_t)u->output, (uint64_t)u->cache_read,
                                  (uint64_t)u->cache_write, outcome == SL_ROW_ANSWERED_LOCALLY};
        bool has_usage = u->input || u->output || u->cache_read || u->cache_write;
        /* What is still in rx goes out with the final send that follows. */
        emit(r, sl_bus_request_finished(&ev, sl_wall_ms(), r->id, status, r->bytes_out + r->rx->size,
                                        duration, has_usage ? &usage : NULL, SL_BUS_ABSENT));
    }
}

/* HealthChanged for a breaker transition; state copied under the upstream's lock by the caller. */
static void
emit_health(request_t *r, const char *provider, sl_breaker_t b)
{
    sl_log_info("upstream %s: breaker %s (%s)", provider, sl_breaker_state_slug(b.state),
                sl_breaker_reason_slug(&b));
    if (!events_on(r))
        return;
    int64_t until = SL_BUS_ABSENT;
    if (b.state != SL_BREAKER_CLOSED && b.until_ms != SL_BREAKER_UNTIL_CLEARED)
        until = sl_wall_ms() + (b.until_ms - sl_now_ms());
    sl_code_t code = SL_CODE_GW_BREAKER_RECOVERED;
    const char *slug = sl_breaker_reason_slug(&b);
    if (slug != NULL)
        sl_code_from_slug(slug, &code);
    char count[16], until_text[64] = "it is cleared";
    snprintf(count, sizeof(count), "%u", b.failures);
    if (until >= 0)
        sl_text_local_time(r->config->tz, until, until_text, sizeof(until_text));
    sl_msg_t reason = sl_msg_make(code, "provider", provider, "count", count, "until", until_text, NULL);
    sl_proto_event_t ev;
    emit(r, sl_bus_health_changed(&ev, sl_wall_ms(), provider, b.state, until, &reason));
    sl_msg_free(&reason);
}

/* ---- the request DB row ----------------------------------------------------------------- */

static void
fill_row_msg(sl_row_msg_t *m, sl_code_t code, const char *provider, const char *detail)
{
    char name[32];
    sl_msg_t msg = hop_msg(code, provider, detail, name);
    *m = sl_row_msg_from(&msg);
    sl_msg_free(&msg);
}

static void
record(request_t *r, sl_row_outcome_t outcome, int status, bool has_error, sl_code_t code, const char *detail)
{
    if (r->recorded)
        return;
    r->recorded = true;
    if (r->gw->recorder == NULL) {
        atomic_fetch_add(&r->gw->rows_dropped, 1);
        return;
    }
    sl_request_row_t *row = sl_request_row_new(r->n_attempts);
    row->id = r->id;
    row->started_at_ms = r->started_wall_ms;
    row->client = sl_xstrdup(client_name(r));
    row->dialect =
        r->in.endpoint.dialect < SL_DIALECT_COUNT ? r->in.endpoint.dialect : SL_DIALECT_OPENAI_CHAT;
    row->model = sl_xstrdup(r->in.model);
    if (r->n_attempts > 0 && outcome == SL_ROW_SERVED)
        row->provider = sl_xstrdup(r->config->providers[r->attempts[r->n_attempts - 1].provider].name);
    row->path = sl_xstrndup(r->path.base, r->path.len);
    row->status = (uint32_t)status;
    row->outcome = outcome;
    if (has_error)
        fill_row_msg(&row->error, code, row->provider != NULL ? row->provider : "", detail);
    row->duration_ms = sl_now_ms() - r->started_ms;
    row->ttfb_ms = r->ttfb_ms;
    row->ttft_ms = r->ttft_ms;
    const sl_usage_t *u = &r->stream.usage;
    if (u->input || u->output || u->cache_read || u->cache_write) {
        row->has_usage = true;
        row->usage = (sl_row_usage_t){(uint64_t)u->input, (uint64_t)u->output, (uint64_t)u->cache_read,
                                      (uint64_t)u->cache_write, outcome == SL_ROW_ANSWERED_LOCALLY};
    }
    row->cost_micros = SL_ROW_ABSENT;
    if (row->has_usage && row->provider != NULL) {
        const sl_price_t *price =
            sl_price_for(r->config->pricing, r->config->n_pricing, r->cands[r->cur].model);
        if (price != NULL)
            row->cost_micros = sl_cost_micros(price, u);
    }
    for (size_t i = 0; i < r->n_attempts; i++) {
        const attempt_t *a = &r->attempts[i];
        sl_attempt_row_t *ar = &row->attempts[i];
        ar->provider = sl_xstrdup(r->config->providers[a->provider].name);
        ar->model = sl_xstrdup(a->model != NULL ? a->model : "");
        ar->outcome = a->skipped != SL_ROW_SKIP_NONE ? SL_ROW_HOP_SKIPPED : a->outcome;
        ar->status = (uint32_t)a->status;
        if (a->has_error)
            fill_row_msg(&ar->error, a->error_code, ar->provider, a->error_detail);
        ar->ms = a->ms;
        ar->pause_ms = a->pause_ms >= 0 ? a->pause_ms : SL_ROW_ABSENT;
        ar->retry = a->retry;
        ar->backoff_ms = a->backoff_ms >= 0 ? a->backoff_ms : SL_ROW_ABSENT;
        ar->skipped = a->skipped;
    }
    if (!sl_recorder_submit(r->gw->recorder, row)) {
        sl_log_debug("request %llu: the request DB queue is full, row dropped", (unsigned long long)r->id);
        if (events_on(r)) {
            sl_proto_event_t ev;
            emit(r, sl_bus_rows_dropped(&ev, sl_wall_ms(), 1));
        }
    }
}

/* ---- usage accounting (behaviour.md §7) ------------------------------------------------------ */

/* Before the upstream reports usage: request bytes / 4 + max_tokens (4096 without), priced for model. */
static sl_amounts_t
usage_estimate(const request_t *r, const char *model)
{
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS)
        return (sl_amounts_t){.requests = 1};
    sl_usage_t u = sl_usage_estimate(r->in.body_len, r->in.fields.has_max_tokens, r->in.fields.max_tokens);
    const sl_price_t *price = sl_price_for(r->config->pricing, r->config->n_pricing, model);
    return (sl_amounts_t){1, u.input + u.output, sl_cost_micros(price, &u)};
}

/*
 * What was really used, once it is over: the usage the upstream reported;
 * without a report, the estimate when an answer was served (it was billed
 * somehow), else nothing. Counting tokens costs none.
 */
static sl_amounts_t
usage_real(const request_t *r, const charge_t *c, bool served)
{
    const sl_usage_t *u = &r->stream.usage;
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS)
        return (sl_amounts_t){.requests = 1};
    if (u->input || u->output || u->cache_read || u->cache_write) {
        const char *model = r->n_cands > 0 ? r->cands[r->cur].model : r->in.model;
        const sl_price_t *price = sl_price_for(r->config->pricing, r->config->n_pricing, model);
        return (sl_amounts_t){1, u->input + u->output + u->cache_read + u->cache_write,
                              sl_cost_micros(price, u)};
    }
    if (served)
        return (sl_amounts_t){1, c->amounts.tokens, c->amounts.cost_micros};
    return (sl_amounts_t){.requests = 1};
}

/* The request DB keeps usage per minute, so that a restart rebuilds every window and period. */
static void
persist_usage(request_t *r, const sl_limit_set_t *set, int64_t at_ms, const sl_amounts_t *a)
{
    if (r->gw->recorder == NULL || (a->requests == 0 && a->tokens == 0 && a->cost_micros == 0))
        return;
    sl_recorder_add_usage(r->gw->recorder, set->kind, set->name, at_ms / 60000, a->requests, a->tokens,
                          a->cost_micros);
}

/* With the wait lock held: whether set's limits count tokens or cost, so the upstream must report usage. */
static bool
counts_tokens(const sl_limit_set_t *set)
{
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        if (set->states[i].limit.measure != SL_MEASURE_REQUESTS)
            return true;
    }
    return false;
}

/* With the wait lock held: set is charged a at wall time now (the estimate, reserving room). */
static void
charge_locked(charge_t *c, sl_limit_set_t *set, int64_t now_wall, const sl_amounts_t *a)
{
    sl_limits_add(set->states, set->n, now_wall, now_wall, a);
    *c = (charge_t){set, now_wall, *a};
}

/*
 * The hop's bytes go out now: its upstream charge moves from when it was
 * admitted to now. A connection may take a while (a handshake, a busy
 * loop), and the upstream counts a request from when it arrives; counted
 * from admission, it would leave sluice's window before it leaves the
 * upstream's, and the requests let in then would overshoot the limit there.
 */
static void
recharge_at_send(request_t *r)
{
    charge_t *c = &r->up_charge;
    int64_t now = sl_wall_ms();
    if (c->set == NULL || now <= c->at_ms)
        return;
    sl_amounts_t back = {-c->amounts.requests, -c->amounts.tokens, -c->amounts.cost_micros};
    sl_waitq_lock();
    sl_limits_add(c->set->states, c->set->n, c->at_ms, now, &back);
    sl_limits_add(c->set->states, c->set->n, now, now, &c->amounts);
    sl_waitq_unlock();
    if (c->at_ms / 60000 != now / 60000) {
        persist_usage(r, c->set, c->at_ms, &back);
        persist_usage(r, c->set, now, &c->amounts);
    }
    c->at_ms = now;
}

/*
 * The estimate charged before is replaced by real, at the charge's own
 * time. When room came free, the head of waiters (may be NULL) may go.
 */
static void
settle(request_t *r, charge_t *c, const sl_amounts_t *real, sl_waitq_t *waiters)
{
    if (c->set == NULL)
        return;
    sl_amounts_t delta = {real->requests - c->amounts.requests, real->tokens - c->amounts.tokens,
                          real->cost_micros - c->amounts.cost_micros};
    sl_waitq_lock();
    sl_limits_add(c->set->states, c->set->n, c->at_ms, sl_wall_ms(), &delta);
    if (waiters != NULL && (delta.requests < 0 || delta.tokens < 0 || delta.cost_micros < 0))
        sl_waitq_wake(waiters, 1);
    sl_waitq_unlock();
    persist_usage(r, c->set, c->at_ms, &delta);
    c->set = NULL;
}

/* ---- upstream bookkeeping ----------------------------------------------------------------- */

static void
release_upstream(request_t *r)
{
    if (r->up == NULL)
        return;
    sl_upstream_t *up = r->up;
    /* A 429 (or a request the upstream never read) is not counted against its limits; anything else is. */
    bool served = r->answer_started && !r->handing_over;
    sl_amounts_t used = r->hop_uncounted ? (sl_amounts_t){0} : usage_real(r, &r->up_charge, served);
    settle(r, &r->up_charge, &used, NULL);
    pthread_mutex_lock(&up->lock);
    up->in_flight--;
    if (r->is_probe)
        sl_breaker_release_probe(&up->breaker);
    pthread_mutex_unlock(&up->lock);
    /* A slot came free (the queue's head may take it); a probe that never got an answer is handed back. */
    sl_waitq_lock();
    if (r->throttle_probe)
        sl_throttle_probe_abandoned(&up->throttle);
    sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
    r->throttle_probe = false;
    r->up = NULL;
    r->is_probe = false;
}

/* What the hop's outcome tells the breaker (behaviour.md §8). */
static void
breaker_account(request_t *r, const sl_failure_class_info_t *info)
{
    if (r->up == NULL)
        return;
    sl_breaker_params_t params = sl_breaker_params_from_failover(&r->config->failover);
    pthread_mutex_lock(&r->up->lock);
    bool changed = false;
    if (info == NULL || info->breaker_answer)
        changed = sl_breaker_on_success(&r->up->breaker);
    else if (info->breaker_cause != SL_BREAKER_CAUSE_NONE)
        changed = sl_breaker_on_failure(&r->up->breaker, info->breaker_cause, sl_now_ms(), &params, 0);
    if (info != NULL && info->breaker_cause == SL_BREAKER_CAUSE_NONE && !info->breaker_answer && r->is_probe)
        sl_breaker_release_probe(&r->up->breaker);
    r->is_probe = false;
    sl_breaker_t now_state = r->up->breaker;
    pthread_mutex_unlock(&r->up->lock);
    if (changed)
        emit_health(r, r->up->name, now_state);
}

static void
end_hop(request_t *r)
{
    end_dispatch(r);
    if (r->hop != NULL) {
        sl_hop_cancel(r->hop);
        r->hop = NULL;
    }
    release_upstream(r);
    free(r->head);
    r->head = NULL;
    free(r->body_copy);
    r->body_copy = NULL;
    free(r->answer_tail);
    r->answer_tail = NULL;
    r->answer_tail_len = r->answer_tail_cap = 0;
}

/* ---- answering the client ----------------------------------------------------------------- */

static void
finish(request_t *r, sl_row_outcome_t outcome, int status, bool has_error, sl_code_t code, const char *detail)
{
    end_hop(r);
    r->state = REQ_DONE;
    sl_timer_cancel(&r->io->timers, &r->start_timer);
    sl_timer_cancel(&r->io->timers, &r->backoff_timer);
    sl_timer_cancel(&r->io->timers, &r->keepalive_timer);
    unwatch_client(r);
    stop_waiting(r, false);
    if (r->key_charge.set != NULL) {
        /*
         * The key was charged once, at admission; sluice's own retries are not its client's, and neither is
         * a request the gateway answered without any upstream (a final 429, an estimate).
         */
        sl_amounts_t used =
            r->hops_sent > 0 ? usage_real(r, &r->key_charge, outcome == SL_ROW_SERVED) : (sl_amounts_t){0};
        settle(r, &r->key_charge, &used, &r->key_charge.set->queue);
    }
    if (!r->recorded && r->in.endpoint.op != SL_OP_LIST_MODELS)
        emit_end(r, outcome, status, code, detail);
    record(r, outcome, status, has_error, code, detail);
}

/* Sends a whole answer the gateway made itself; takes the body. Other headers are added before. */
static void
send_made_answer(h2o_req_t *req, int status, const char *content_type, sl_strbuf_t *body)
{
    req->res.status = status;
    req->res.reason = reason_phrase(status);
    req->res.content_length = body->len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type,
                   strlen(content_type));
    size_t len = body->len;
    char *bytes = sl_strbuf_finish(body);
    h2o_send_inline(req, bytes, len); /* h2o copies it into the request pool */
    free(bytes);
}

/* An error made by the gateway, in the client's dialect, as the whole answer. */
void
sl_request_send_error(h2o_req_t *req, sl_dialect_t dialect, int status, sl_code_t code, const char *text)
{
    sl_strbuf_t body = {0};
    sl_error_head_t head;
    sl_dialect_render_error(dialect < SL_DIALECT_COUNT ? dialect : SL_DIALECT_OPENAI_CHAT, status,
                            sl_code_slug(code), text, &body, &head);
    const char *slug = sl_code_slug(code);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT(SL_ERROR_CODE_HEADER), 0, NULL, slug,
                          strlen(slug));
    if (head.type_header != NULL)
        h2o_add_header_by_str(&req->pool, &req->res.headers, head.type_header, strlen(head.type_header), 0,
                              NULL, head.type_value, strlen(head.type_value));
    send_made_answer(req, status, head.content_type, &body);
}

/* After sluice retried or waited, a handed-over error tells the SDK not to multiply the wait. */
static void
add_should_retry(request_t *r)
{
    if (r->waited && r->req != NULL && !r->response_started)
        h2o_add_header_by_str(&r->req->pool, &r->req->res.headers, H2O_STRLIT("x-should-retry"), 0, NULL,
                              H2O_STRLIT("false"));
}

/* The final answer when no candidate could serve: the gateway's own error. */
static void
answer_with_failure(request_t *r)
{
    sl_code_t code = r->last.any ? r->last.code : SL_CODE_GW_ROUTE_NO_MATCH;
    const char *provider =
        r->n_attempts > 0 ? r->config->providers[r->attempts[r->n_attempts - 1].provider].name : "";
    char status[16];
    snprintf(status, sizeof(status), "%d", r->last.status);
    char secs[16];
    snprintf(secs, sizeof(secs), "%u",
             code == SL_CODE_GW_UPSTREAM_TOTAL_TIMEOUT ? r->config->failover.total_timeout_secs
                                                       : r->config->failover.idle_timeout_secs);
    sl_msg_t msg = sl_msg_make(code, "provider", provider, "reason", r->last.detail, "status", status, "code",
                               r->last.detail, "secs", secs, "model", r->in.model, "dialect",
                               sl_dialect_slug(r->in.endpoint.dialect), "max", r->last.detail, NULL);
    int http_status = sl_code_status(code) != 0 ? sl_code_status(code) : 502;
    r->gateway_error = true;
    if (r->keepalive_started) {
        /* The 200 head is out: the failure is told inside the stream (behaviour.md §4). */
        append_stream_error(r, code, msg.text);
        finish(r, SL_ROW_FAILED, http_status, true, code, msg.text);
        sl_msg_free(&msg);
        queue_final(r, H2O_SEND_STATE_FINAL);
        return;
    }
    if (r->req != NULL) {
        add_should_retry(r);
        sl_request_send_error(r->req, r->in.endpoint.dialect, http_status, code, msg.text);
    }
    finish(r, SL_ROW_FAILED, http_status, true, code, msg.text);
    sl_msg_free(&msg);
}

static void
on_generator_proceed(h2o_generator_t *generator, h2o_req_t *req)
{
    (void)req;
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, generator, generator);
    r->sending = false;
    sl_timer_cancel(&r->io->timers, &r->stall_timer);
    h2o_buffer_consume(&r->tx, r->tx->size);
    flush_to_client(r);
}

static void
on_generator_stop(h2o_generator_t *generator, h2o_req_t *req)
{
    (void)req;
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, generator, generator);
    /* The client went away mid-answer. */
    r->req = NULL;
    r->client_fd = -1;
    sl_timer_cancel(&r->io->timers, &r->stall_timer);
    if (r->state != REQ_DONE) {
        close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT, "client went away");
        finish(r, SL_ROW_CANCELLED, r->up_status, false, SL_CODE_GW_UPSTREAM_STATUS, NULL);
    }
}

static bool
is_hop_by_hop(const h2o_iovec_t *name)
{
    static const char *const drop[] = {"connection", "keep-alive", "transfer-encoding", "te",
                                       "trailer",    "upgrade",    "content-length",    "date",
                                       "server"};
    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
        if (h2o_memis(name->base, name->len, drop[i], strlen(drop[i])))
            return true;
    }
    return name->len >= 6 && strncasecmp(name->base, "proxy-", 6) == 0;
}

/* Starts the client's answer with the upstream's status and headers (unless keep-alives already sent a head).
 */
static void
start_response(request_t *r)
{
    if (r->answer_started || r->req == NULL)
        return;
    r->answer_started = true;
    unwatch_client(r);
    sl_timer_cancel(&r->io->timers, &r->keepalive_timer);
    if (!r->response_started) {
        r->response_started = true;
        h2o_req_t *req = r->req;
        req->res.status = r->up_status;
        req->res.reason = reason_phrase(r->up_status);
        for (size_t i = 0; i < r->up_headers.size; i++) {
            h2o_header_t *h = &r->up_headers.entries[i];
            h2o_add_header_by_str(&req->pool, &req->res.headers, h->name->base, h->name->len, 1, NULL,
                                  h->value.base, h->value.len);
        }
        /* A whole answer keeps its length; a stream (or one the gateway may extend with an error) is chunked.
         */
        if (!r->events && r->up_content_length >= 0)
            req->res.content_length = (size_t)r->up_content_length;
        r->generator = (h2o_generator_t){on_generator_proceed, on_generator_stop};
        h2o_start_response(req, &r->generator);
    }
    if (events_on(r)) {
        sl_proto_event_t ev;
        emit(r, sl_bus_request_headers(&ev, sl_wall_ms(), r->id, r->up_status, r->ttfb_ms));
    }
    /* A whole answer's head is its first token; a stream's is its first content event. */
    if (!r->events || r->stream.phase == SL_STREAM_FLOWING)
        first_token(r);
}

/*
 * A client that stops reading must not hold its upstream (and a max_concurrent
 * slot) for the whole total timeout, nor its connection and buffers for ever
 * once the answer has ended: a send that has not completed after
 * idle_timeout_secs lets the upstream go, aborts the answer and, on HTTP/1,
 * shuts the connection down so that h2o fails the send and lets the request go.
 */
static void
on_client_stalled(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, stall_timer, t);
    sl_log_debug("request %llu: the client read nothing for %u s", (unsigned long long)r->id,
                 r->config->failover.idle_timeout_secs);
    if (r->state != REQ_DONE) {
        close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_CLIENT_STALLED, "the client stopped reading");
        finish(r, SL_ROW_CANCELLED, r->up_status, true, SL_CODE_GW_CLIENT_STALLED, NULL);
        r->final_queued = true;
        r->final_state = H2O_SEND_STATE_ERROR;
        r->parsed = r->rx->size = 0;
    }
    if (r->client_fd >= 0)
        shutdown(r->client_fd, SHUT_RDWR);
}

/* Every send to the client starts the stall clock; its completion stops it (on_generator_proceed). */
static void
send_to_client(request_t *r, h2o_req_t *req, h2o_iovec_t *buf, size_t n, h2o_send_state_t state)
{
    sl_timer_arm(&r->io->timers, &r->stall_timer,
                 sl_now_ms() + (int64_t)r->config->failover.idle_timeout_secs * 1000, on_client_stalled);
    h2o_send(req, buf, n, state);
}

static void
pause_upstream_reads(request_t *r)
{
    r->reads_paused = true;
    sl_hop_pause_reading(r->hop);
}

static void
resume_upstream_reads(request_t *r)
{
    r->reads_paused = false;
    sl_hop_resume_reading(r->hop);
}

/*
 * Hands rx[0..parsed) to h2o when no send is in flight. The buffer is
 * swapped, not copied; a partial event at its tail moves to a fresh buffer.
 */
static void
flush_to_client(request_t *r)
{
    /* While a hold goes on behind keep-alives, held bytes stay held. */
    if (r->sending || r->req == NULL || !r->response_started || (!r->answer_started && !r->final_queued))
        return;
    /*
     * A whole answer's end came with these bytes: they go out with it, in one
     * send (one write). A stream's first content goes at once all the same.
     */
    if (r->end_follows && !r->final_queued && !r->events)
        return;
    bool last = r->final_queued && r->parsed == r->rx->size;
    if (r->parsed == 0 && !last) {
        if (r->reads_paused && r->hop != NULL)
            resume_upstream_reads(r);
        return;
    }
    h2o_buffer_t *out = r->rx;
    r->rx = r->tx;
    if (r->parsed < out->size) {
        size_t tail = out->size - r->parsed;
        h2o_iovec_t dst = h2o_buffer_reserve(&r->rx, tail);
        memcpy(dst.base, out->bytes + r->parsed, tail);
        r->rx->size += tail;
        out->size = r->parsed;
    }
    r->tx = out;
    r->parsed = 0;
    r->sending = true;
    r->bytes_out += r->tx->size;
    r->last_sent_ms = sl_now_ms();
    h2o_iovec_t buf = h2o_iovec_init(r->tx->bytes, r->tx->size);
    h2o_req_t *req = r->req;
    if (last) {
        /* h2o owns the end from here and may dispose the request (and r) before returning. */
        r->req = NULL;
        send_to_client(r, req, &buf, 1, r->final_state);
        return;
    }
    if (r->reads_paused && r->hop != NULL && r->rx->size < CLIENT_BUFFER_CAP / 2)
        resume_upstream_reads(r);
    send_to_client(r, req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
}

/* Queues the end of the answer: what is parsed goes out, then the stream closes (or aborts). */
static void
queue_final(request_t *r, h2o_send_state_t state)
{
    r->final_queued = true;
    r->final_state = state;
    r->parsed = r->rx->size;
    flush_to_client(r);
}

/* Appends the gateway's in-stream error after what was forwarded (a partial event is dropped). */
static void
append_stream_error(request_t *r, sl_code_t code, const char *text)
{
    r->gateway_error = true;
    /* Only keep-alives went out: what a hop given up on left held (its opening events, its error) is no part
     * of this answer, which is the gateway's error alone. */
    if (!r->answer_started)
        r->parsed = 0;
    if (r->rx->size > r->parsed)
        r->rx->size = r->parsed;
    sl_strbuf_t ev = {0};
    sl_stream_error_t form = sl_dialect_render_stream_error(r->in.endpoint.dialect, sl_code_status(code),
                                                            sl_code_slug(code), text, &ev);
    if (form.form == SL_STREAM_ERROR_NEEDS_EXCEPTION_FRAME) {
        /* Bedrock: the payload goes in an exception frame the AWS SDK raises as that exception. */
        sl_strbuf_t frame = {0};
        sl_es_encode_exception(&frame, form.exception_type, ev.data, ev.len);
        free(sl_strbuf_finish(&ev));
        ev = frame;
    }
    h2o_iovec_t dst = h2o_buffer_reserve(&r->rx, ev.len);
    memcpy(dst.base, ev.data, ev.len);
    r->rx->size += ev.len;
    free(sl_strbuf_finish(&ev));
    r->parsed = r->rx->size;
}

/* ---- failures and failover ----------------------------------------------------------------- */

/* Whether a candidate after the current one could still be tried. */
static bool
has_next_candidate(const request_t *r)
{
    for (size_t i = r->cur + 1; i < r->n_cands; i++) {
        if (r->in_round[i] && r->skips[i] == SL_ROW_SKIP_NONE)
            return true;
    }
    return false;
}

static void
remember_failure(request_t *r, sl_code_t code, const char *detail)
{
    r->last.any = true;
    r->last.code = code;
    r->last.status = r->up_status;
    snprintf(r->last.detail, sizeof(r->last.detail), "%s", detail != NULL ? detail : "");
}

/*
 * A hop failed before anything reached the client. Every failure fails over
 * (formats.md, "Error classification") except a request error; with no
 * candidate left the caller hands the upstream's answer over (pass_through)
 * or, when there is none, answers with the gateway's error.
 */
static bool
fail_over(request_t *r, const sl_failure_t *f, const char *detail, int64_t hint_ms)
{
    sl_failure_class_t cls = sl_classify_failure(f);
    const sl_failure_class_info_t *info = sl_failure_class_info(cls);
    sl_code_t code = sl_failure_code(f, cls);
    breaker_account(r, info);
    if (cls == SL_FAILURE_RATE_LIMITED && r->up != NULL) {
        /* Not a failure (§6): the whole upstream pauses, and this request waits in its place or goes
         * elsewhere. */
        sl_upstream_t *up = r->up;
        sl_waitq_lock();
        bool changed =
            sl_throttle_on_429(&up->throttle, sl_now_ms(), hint_ms,
                               r->config->failover.rate_limit_max_pause_secs, &r->gw->retry_params);
        sl_throttle_t throttle = up->throttle;
        sl_waitq_unlock();
        r->throttle_probe = false;
        r->hop_uncounted = true;
        if (changed)
            emit_throttle(r, up->name, &throttle);
        close_attempt(r, f->source == SL_FAILURE_STATUS ? SL_ROW_HOP_STATUS : SL_ROW_HOP_ERROR, code, detail);
        remember_failure(r, code, detail);
        end_hop(r);
        r->skips[r->cur] = SL_ROW_SKIP_THROTTLED;
        r->next = r->cur + 1;
        next_hop(r);
        return true;
    }
    throttle_answered(r);
    close_attempt(r, f->source == SL_FAILURE_STATUS ? SL_ROW_HOP_STATUS : SL_ROW_HOP_ERROR, code, detail);
    remember_failure(r, code, detail);
    r->failed_temporary[r->cur] = info->retried;
    if (hint_ms > r->hint_ms)
        r->hint_ms = hint_ms;
    sl_log_debug("request %llu: %s failed (%s: %s)", (unsigned long long)r->id, provider_of(r, r->cur)->name,
                 info->name, detail != NULL ? detail : "");
    /* A request error is the client's: handed back at once, no failover, no retry. */
    if (!info->fails_over)
        return false;
    /* A conversation's own upstream is waited for while it can still serve before the deadline (§1.5). */
    if (info->retried && r->cur == pinned_candidate(r) && schedule_retry(r)) {
        end_hop(r);
        return true;
    }
    if (has_next_candidate(r)) {
        end_hop(r);
        r->next = r->cur + 1;
        next_hop(r);
        return true;
    }
    if (schedule_retry(r)) {
        end_hop(r);
        return true;
    }
    return false;
}

/* The upstream's own answer goes to the client unchanged: status, headers, body. */
static void
pass_through(request_t *r)
{
    if (r->keepalive_started) {
        /* The 200 head is out: the upstream's status can only be told inside the stream. */
        end_hop(r);
        char status[16];
        snprintf(status, sizeof(status), "%d", r->up_status);
        sl_msg_t msg = sl_msg_make(SL_CODE_GW_UPSTREAM_STATUS, "provider", provider_of(r, r->cur)->name,
                                   "status", status, NULL);
        append_stream_error(r, SL_CODE_GW_UPSTREAM_STATUS, msg.text);
        finish(r, SL_ROW_FAILED, r->up_status, true, r->last.code, msg.text);
        sl_msg_free(&msg);
        queue_final(r, H2O_SEND_STATE_FINAL);
        return;
    }
    r->handing_over = true;
    r->state = REQ_STREAMING;
    r->events = false;
    r->parsed = r->rx->size;
    add_should_retry(r);
    start_response(r);
    if (r->hop == NULL) {
        finish(r, SL_ROW_FAILED, r->up_status, true, r->last.code, r->last.detail);
        queue_final(r, H2O_SEND_STATE_FINAL);
    } else {
        flush_to_client(r);
    }
}

static void
judge_error_answer(request_t *r)
{
    /* An upstream without a count-tokens endpoint: the gateway estimates. */
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS && (r->up_status == 404 || r->up_status == 405)) {
        close_attempt(r, SL_ROW_HOP_STATUS, SL_CODE_GW_UPSTREAM_STATUS, "no count-tokens endpoint");
        release_upstream(r);
        attempt_t *a = new_attempt(r, r->cur);
        if (a != NULL)
            a->outcome = SL_ROW_HOP_ESTIMATED;
        answer_token_estimate(r);
        return;
    }
    sl_failure_t f = {.source = SL_FAILURE_STATUS,
                      .dialect = r->in.endpoint.dialect,
                      .status = r->up_status,
                      .body = r->rx->bytes,
                      .body_len = r->rx->size};
    ssize_t i = h2o_find_header_by_str(&r->up_headers, H2O_STRLIT("x-amzn-errortype"), -1);
    char type[64] = "";
    if (i >= 0) {
        snprintf(type, sizeof(type), "%.*s", (int)r->up_headers.entries[i].value.len,
                 r->up_headers.entries[i].value.base);
        f.code = type;
    }
    char detail[32];
    snprintf(detail, sizeof(detail), "%d", r->up_status);
    sl_headers_t up_headers = {.at = header_at, .ctx = &r->up_headers};
    if (fail_over(r, &f, detail, failure_hint(r, &up_headers, r->rx->bytes, r->rx->size)))
        return;
    release_upstream(r);
    pass_through(r);
}

/* The hop ended or broke before content: fail over, or with none left hand over what the upstream sent. */
static void
hop_failed_before_content(request_t *r, sl_failure_source_t source, const sl_stream_verdict_t *v,
                          const char *detail)
{
    sl_failure_t f = {.source = source, .dialect = r->in.endpoint.dialect, .status = r->up_status};
    int64_t hint = -1;
    if (v != NULL) {
        f.status = v->status;
        f.code = v->code;
        hint = failure_hint(r, NULL, v->message, strlen(v->message));
    }
    if (fail_over(r, &f, detail, hint))
        return;
    attempt_t *a = current_attempt(r);
    if (r->up_status == 0 || a == NULL) {
        end_hop(r);
        answer_with_failure(r);
        return;
    }
    /* No retry can happen: the upstream's held bytes go out as they are (behaviour.md §4), and a
     * stream that ended without its end marker is closed with the gateway's error. */
    release_upstream(r);
    r->handing_over = true;
    r->state = REQ_STREAMING;
    add_should_retry(r);
    start_response(r);
    if (r->hop == NULL) {
        if (r->events && !sl_stream_complete(&r->stream)) {
            sl_msg_t msg = sl_msg_make(r->last.code, "provider", provider_of(r, r->cur)->name, NULL);
            append_stream_error(r, r->last.code, msg.text);
            sl_msg_free(&msg);
        }
        finish(r, SL_ROW_FAILED, r->up_status, true, r->last.code, r->last.detail);
        queue_final(r, H2O_SEND_STATE_FINAL);
    } else {
        r->parsed = r->rx->size;
        flush_to_client(r);
    }
}

/* ---- retry rounds, the 15 s rule, clients that leave ---------------------------------------- */

/* A draw from [0, 1) for the pause's jitter; nothing depends on its quality. */
static double
jitter_unit(void)
{
    static _Thread_local uint64_t state;
    if (state == 0)
        state = (uint64_t)sl_wall_ms() * 0x9E3779B97F4A7C15ull | 1;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (double)(state >> 11) / (double)(1ull << 53);
}

/* The pause before retry round `round`: the schedule, lengthened by the round's hint (behaviour.md §5). */
static int64_t
retry_pause(const request_t *r, uint32_t round, int64_t hint_ms, bool *by_hint)
{
    int64_t pause = sl_retry_pause_ms(round, jitter_unit(), &r->gw->retry_params);
    return sl_retry_hint_floor(pause, hint_ms, &r->gw->retry_params, by_hint);
}

/* The retry hint of a failure: the upstream's headers (when it answered) and its error text. */
static int64_t
failure_hint(const request_t *r, const sl_headers_t *headers, const char *body, size_t len)
{
    (void)r;
    return sl_hint_find(headers, body, len, sl_wall_ms()).ms;
}

/* Whether this request may still wait or retry at all (behaviour.md §5): wait_secs 0 never does. */
static bool
may_wait(const request_t *r)
{
    return sl_retry_may_wait(r->config->failover.wait_secs, r->in.endpoint.op == SL_OP_COUNT_TOKENS) &&
           sl_now_ms() < r->deadline_ms;
}

static void
on_backoff_done(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, backoff_timer, t);
    if (events_on(r)) {
        sl_proto_event_t ev;
        emit(r, sl_bus_request_dequeued(&ev, sl_wall_ms(), r->id, NULL));
    }
    r->next = 0;
    next_hop(r);
}

/* The candidate a conversation stays on (affinity moved it first), or SL_RETRY_UNPINNED. */
static size_t
pinned_candidate(const request_t *r)
{
    if (r->affinity_effect != SL_AFFINITY_STICKY && r->affinity_effect != SL_AFFINITY_SEALED)
        return SL_RETRY_UNPINNED;
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] == SL_ROW_SKIP_NONE)
            return i;
    }
    return SL_RETRY_UNPINNED;
}

/*
 * Every candidate of the round has failed. When some failed temporarily and
 * the next pause ends before the deadline, starts the pause before a retry
 * round of exactly those (behaviour.md §5) and returns true; else false and
 * the caller hands the last failure over.
 */
static bool
schedule_retry(request_t *r)
{
    if (!may_wait(r))
        return false;
    size_t n = r->n_cands;
    bool cooling[n + 1], next[n + 1];
    int64_t now = sl_now_ms();
    for (size_t i = 0; i < n; i++) {
        sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
        pthread_mutex_lock(&up->lock);
        cooling[i] = sl_breaker_is_cooling(&up->breaker, now);
        pthread_mutex_unlock(&up->lock);
    }
    /* A conversation that stays on an upstream (moved first by affinity) retries only that upstream. */
    size_t pinned = pinned_candidate(r);
    bool temporary[n + 1];
    for (size_t i = 0; i < n; i++)
        temporary[i] = r->in_round[i] && r->failed_temporary[i];
    if (sl_retry_select(temporary, cooling, n, pinned, next) == 0)
        return false;
    bool by_hint = false;
    int64_t pause = retry_pause(r, r->round + 1, r->hint_ms, &by_hint);
    if (!sl_retry_fits(now, pause, r->deadline_ms))
        return false;

    r->round++;
    r->round_backoff_ms = pause;
    r->hint_ms = -1;
    r->waited = true;
    for (size_t i = 0; i < n; i++) {
        r->in_round[i] = next[i];
        r->failed_temporary[i] = false;
    }
    r->state = REQ_BACKOFF;
    sl_timer_arm(&r->io->timers, &r->backoff_timer, now + pause, on_backoff_done);
    sl_log_debug("request %llu: retry round %u in %lld ms", (unsigned long long)r->id, r->round,
                 (long long)pause);
    if (events_on(r)) {
        const char *names[n + 1];
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (next[i])
                names[k++] = provider_of(r, i)->name;
        }
        sl_msg_t last = sl_msg_make(r->last.code, "provider", provider_of(r, r->cur)->name, "reason",
                                    r->last.detail, "code", r->last.detail, "status", r->last.detail, NULL);
        int64_t wall = sl_wall_ms();
        sl_proto_event_t ev;
        emit(r, sl_bus_request_retrying(&ev, wall, r->id, names, k, r->round, wall + pause,
                                        wall + (r->deadline_ms - now), by_hint, &last));
        sl_msg_free(&last);
    }
    return true;
}

/*
 * The 15 s rule (behaviour.md §4): a streamed request that has sent nothing
 * for 15 s gets a 200 SSE head and a keep-alive now, and another every 15 s
 * until its answer starts.
 */
static void
on_keepalive(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, keepalive_timer, t);
    if (r->req == NULL || r->answer_started || r->state == REQ_DONE)
        return;
    int64_t now = sl_now_ms();
    int64_t due = sl_keepalive_due_ms(true, now, now, &r->gw->retry_params);
    if (!r->response_started) {
        h2o_req_t *req = r->req;
        unwatch_client(r); /* with a head out, h2o notices a client that leaves */
        req->res.status = 200;
        req->res.reason = "OK";
        const char *type = sl_dialect_stream_content_type(r->in.endpoint.dialect);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, type, strlen(type));
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
        r->generator = (h2o_generator_t){on_generator_proceed, on_generator_stop};
        h2o_start_response(req, &r->generator);
        r->response_started = true;
        r->keepalive_started = true;
    }
    if (!r->sending) {
        size_t len;
        const char *bytes = sl_dialect_keep_alive(r->in.endpoint.dialect, &len);
        h2o_iovec_t buf = h2o_iovec_init(bytes, len);
        r->sending = true;
        r->last_sent_ms = now;
        send_to_client(r, r->req, &buf, len > 0 ? 1 : 0, H2O_SEND_STATE_IN_PROGRESS);
    }
    sl_timer_arm(&r->io->timers, &r->keepalive_timer, due, on_keepalive);
}

/* An HTTP/1.1 client left before its answer started: no further hop, and the request ends cancelled. */
static void
on_client_gone(void *data)
{
    request_t *r = data;
    if (r->state == REQ_DONE)
        return;
    sl_log_debug("request %llu: the client went away", (unsigned long long)r->id);
    close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_UPSTREAM_STATUS, "client went away");
    finish(r, SL_ROW_CANCELLED, 0, false, SL_CODE_GW_UPSTREAM_STATUS, NULL);
    /* h2o learns of it when it writes: answer, so the connection closes and the request is disposed. */
    if (r->req != NULL && !r->response_started) {
        sl_strbuf_t body = {0};
        send_made_answer(r->req, 499, "text/plain", &body);
    }
}

static void
watch_client(request_t *r)
{
    if (r->req == NULL || r->req->version >= 0x200 || r->response_started || r->watch.active)
        return;
    h2o_socket_t *sock = r->req->conn->callbacks->get_socket(r->req->conn);
    if (sock != NULL)
        sl_watch_add(r->io->watch, &r->watch, h2o_socket_get_fd(sock), on_client_gone, r);
}

static void
unwatch_client(request_t *r)
{
    sl_timer_cancel(&r->io->timers, &r->watch_timer);
    sl_watch_remove(r->io->watch, &r->watch);
}

static void
on_watch_due(sl_timer_t *t)
{
    watch_client(H2O_STRUCT_FROM_MEMBER(request_t, watch_timer, t));
}

/*
 * Watching a client costs two epoll_ctl calls; an answer that comes within
 * WATCH_CLIENT_AFTER_MS (every cached or tiny one) never needs them, and a
 * client that leaves sooner is noticed that much later.
 */
static void
watch_client_soon(request_t *r)
{
    sl_timer_arm(&r->io->timers, &r->watch_timer, sl_now_ms() + WATCH_CLIENT_AFTER_MS, on_watch_due);
}

/*
 * The answer going out could not be finished: never a clean end (behaviour.md
 * §9). A stream gets the gateway's error in its own format, named for what
 * happened — cut after content, or (the last candidate, not held) ended or
 * broken before any; a whole answer is aborted.
 */
static void
fail_streaming(request_t *r, sl_hop_end_t how, const char *detail)
{
    end_hop(r);
    bool before_content = r->events && r->stream.phase == SL_STREAM_HELD;
    sl_code_t code = !before_content                  ? SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT
                     : how == SL_HOP_END_EOS          ? SL_CODE_GW_UPSTREAM_STREAM_ENDED_EARLY
                     : how == SL_HOP_END_IDLE_TIMEOUT ? SL_CODE_GW_UPSTREAM_IDLE_TIMEOUT
                                                      : SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_CONTENT;
    char secs[16];
    snprintf(secs, sizeof(secs), "%u", r->config->failover.idle_timeout_secs);
    sl_msg_t msg = sl_msg_make(code, "provider", provider_of(r, r->cur)->name, "secs", secs, NULL);
    close_attempt(r, SL_ROW_HOP_ERROR, code, detail);
    r->gateway_error = r->events;
    finish(r, SL_ROW_FAILED, r->up_status, true, code, msg.text);
    if (r->events)
        append_stream_error(r, code, msg.text);
    sl_msg_free(&msg);
    queue_final(r, r->events ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_ERROR);
}

/*
 * An operator cancelled the request (the control protocol's cancel_request):
 * whatever it waits for or sends stops, and the client is told in its own
 * format — a whole 503 gw.cancelled before any answer went out, else the
 * gateway's in-stream error (a whole answer already going out is cut).
 */
static void
cancel_by_operator(request_t *r)
{
    if (r->state == REQ_DONE)
        return;
    sl_log_info("request %llu: cancelled by an operator", (unsigned long long)r->id);
    sl_msg_t msg = sl_msg_make(SL_CODE_GW_CANCELLED, NULL);
    close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_CANCELLED, msg.text);
    r->gateway_error = true;
    if (!r->response_started) {
        int status = sl_code_status(SL_CODE_GW_CANCELLED);
        if (r->req != NULL)
            sl_request_send_error(r->req, r->in.endpoint.dialect, status, SL_CODE_GW_CANCELLED, msg.text);
        finish(r, SL_ROW_CANCELLED, status, true, SL_CODE_GW_CANCELLED, msg.text);
    } else {
        bool in_stream = r->events || r->keepalive_started;
        finish(r, SL_ROW_CANCELLED, r->up_status > 0 ? r->up_status : 200, true, SL_CODE_GW_CANCELLED,
               msg.text);
        if (in_stream)
            append_stream_error(r, SL_CODE_GW_CANCELLED, msg.text);
        queue_final(r, in_stream ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_ERROR);
    }
    sl_msg_free(&msg);
}

void
sl_request_cancel(sl_worker_io_t *io, uint64_t id)
{
    for (h2o_linklist_t *l = io->requests.next; l != &io->requests; l = l->next) {
        request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, link, l);
        if (r->id == id) {
            cancel_by_operator(r);
            return;
        }
    }
}

/* ---- waiting on paused and busy upstreams (behaviour.md §6) -------------------------------- */

static void
emit_throttle(request_t *r, const char *provider, const sl_throttle_t *t)
{
    sl_throttle_state_t kind = sl_throttle_kind(t);
    sl_log_info("upstream %s: %s", provider,
                kind == SL_THROTTLE_FREE ? "rate limit over" : sl_throttle_kind_slug(kind));
    if (!events_on(r))
        return;
    sl_bus_throttle_facts_t f = {
        .t = t,
        .t_until_ms = wall_of(sl_now_ms(), sl_wall_ms(), sl_throttle_shown_until_ms(t)),
        .limits = SL_LIMIT_OK,
        .tz = r->config->tz,
    };
    sl_proto_event_t ev;
    emit(r, sl_bus_throttle_changed(&ev, sl_wall_ms(), provider, sl_bus_throttle_view(provider, &f)));
}

/* The upstream of the hop answered (anything but a 429): its streak resets and a probe passes. */
static void
throttle_answered(request_t *r)
{
    if (r->up == NULL)
        return;
    sl_upstream_t *up = r->up;
    sl_waitq_lock();
    bool changed = sl_throttle_on_answer(&up->throttle, sl_now_ms());
    sl_throttle_t throttle = up->throttle;
    /* The queue moves one at a time, in order: each request that leaves wakes the next. */
    if (changed)
        sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
    r->throttle_probe = false;
    if (changed)
        emit_throttle(r, up->name, &throttle);
}

/* Leaves every queue; the waiting bytes it counted are given back. */
/* The heads of the queues it waited in may go now. */
static void
wake_next_in_line(request_t *r)
{
    sl_waitq_lock();
    for (size_t i = 0; i < r->n_cands; i++)
        sl_waitq_wake(&r->snapshot->upstreams[r->cands[i].provider]->waitq, 1);
    if (r->key_limits != NULL)
        sl_waitq_wake(&r->key_limits->queue, 1);
    sl_waitq_unlock();
}

/* The request released from a queue is on its way (or gone): the next in that queue may go. */
static void
end_dispatch(request_t *r)
{
    sl_upstream_t *up = r->dispatching;
    if (up == NULL)
        return;
    r->dispatching = NULL;
    sl_waitq_lock();
    up->dispatching = false;
    sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
}

/* Leaves every queue. Leaving for a hop, the next in line goes once this one is sent; otherwise now. */
static void
stop_waiting(request_t *r, bool for_hop)
{
    sl_timer_cancel(&r->io->timers, &r->wait_timer);
    if (r->waiter != NULL) {
        sl_waiter_release(r->waiter);
        r->waiter = NULL;
        if (!for_hop)
            wake_next_in_line(r);
    }
    if (!for_hop)
        end_dispatch(r);
    if (r->counts_waiting) {
        atomic_fetch_sub(&r->gw->waiting_bytes, r->in.body_len);
        r->counts_waiting = false;
    }
    r->queued = false;
}

/* A skip that waiting (or time) can end: the candidate is looked at again. */
static bool
skip_may_pass(sl_row_skip_t skip)
{
    return skip == SL_ROW_SKIP_THROTTLED || skip == SL_ROW_SKIP_BUSY || skip == SL_ROW_SKIP_WINDOW_FULL ||
           skip == SL_ROW_SKIP_PERIOD_USED_UP;
}

/* Something it waits on may have changed (a wake-up, or its timer): look again. */
static void
look_again(request_t *r)
{
    if (r->state != REQ_QUEUED)
        return;
    if (r->key_waiting) {
        if (admit_key(r)) {
            r->next = 0;
            next_hop(r);
        }
        return;
    }
    for (size_t i = 0; i < r->n_cands; i++) {
        if (skip_may_pass(r->skips[i]))
            r->skips[i] = SL_ROW_SKIP_NONE;
    }
    r->next = 0;
    next_hop(r);
}

static void
on_wait_timer(sl_timer_t *t)
{
    look_again(H2O_STRUCT_FROM_MEMBER(request_t, wait_timer, t));
}

void
sl_request_wake(void *owner)
{
    look_again(owner);
}

/*
 * The final 429 (§6, §7): nothing can be sent before the deadline, with
 * code and its message (taken). The headers tell SDKs when to come back.
 */
static void
answer_final_429(request_t *r, const sl_wait_decision_t *d, sl_code_t code, sl_msg_t msg)
{
    r->gateway_error = true;
    if (r->keepalive_started) {
        append_stream_error(r, code, msg.text);
        finish(r, SL_ROW_FAILED, 429, true, code, msg.text);
        sl_msg_free(&msg);
        queue_final(r, H2O_SEND_STATE_FINAL);
        return;
    }
    if (r->req != NULL) {
        h2o_mem_pool_t *pool = &r->req->pool;
        h2o_headers_t *h = &r->req->res.headers;
        if (d->retry_after_ms >= 0) {
            char secs[24], ms[24];
            snprintf(secs, sizeof(secs), "%lld", (long long)d->retry_after_secs);
            snprintf(ms, sizeof(ms), "%lld", (long long)d->retry_after_ms);
            h2o_iovec_t v1 = h2o_strdup(pool, secs, SIZE_MAX), v2 = h2o_strdup(pool, ms, SIZE_MAX);
            h2o_add_header(pool, h, H2O_TOKEN_RETRY_AFTER, NULL, v1.base, v1.len);
            h2o_add_header_by_str(pool, h, H2O_STRLIT("retry-after-ms"), 0, NULL, v2.base, v2.len);
        }
        const char *should = d->should_retry ? "true" : "false";
        h2o_add_header_by_str(pool, h, H2O_STRLIT("x-should-retry"), 0, NULL, should, strlen(should));
        sl_request_send_error(r->req, r->in.endpoint.dialect, 429, code, msg.text);
    }
    finish(r, SL_ROW_FAILED, 429, true, code, msg.text);
    sl_msg_free(&msg);
}

/* A request that would wait is answered instead, with code and a Retry-After (seconds) for its client. */
static void
refuse_to_wait(request_t *r, sl_code_t code, const char *retry_after_secs)
{
    r->last.any = true;
    r->last.code = code;
    r->last.status = 0;
    r->last.detail[0] = '\0';
    if (r->req != NULL && !r->response_started)
        h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, retry_after_secs,
                       strlen(retry_after_secs));
    answer_with_failure(r);
}

/* Waiting costs memory: whether this request's body still fits under limits.max_waiting_bytes. */
static bool
may_start_waiting(const request_t *r)
{
    return r->counts_waiting ||
           atomic_load(&r->gw->waiting_bytes) + r->in.body_len <= r->config->max_waiting_bytes;
}

/*
 * The request has joined the queues it waits in (the gates, for
 * RequestQueued): it looks again when woken, or at timer_ms at the latest.
 */
static void
start_waiting(request_t *r, int64_t now, const sl_bus_gate_t *gates, size_t n_gates, int64_t timer_ms)
{
    r->state = REQ_QUEUED;
    r->waited = true;
    if (!r->counts_waiting) {
        atomic_fetch_add(&r->gw->waiting_bytes, r->in.body_len);
        r->counts_waiting = true;
    }
    if (!r->queued) {
        r->queued = true;
        r->queued_since_ms = now;
        if (events_on(r)) {
            sl_proto_event_t ev;
            int64_t wall = sl_wall_ms();
            emit(r, sl_bus_request_queued(&ev, wall, r->id, gates, n_gates, wall + (r->deadline_ms - now)));
        }
    }
    sl_timer_arm(&r->io->timers, &r->wait_timer, timer_ms < r->deadline_ms ? timer_ms : r->deadline_ms,
                 on_wait_timer);
}

/* The gate a skipped candidate puts on waiting (§2, §6, §7). */
static sl_wait_gate_t
gate_of(const request_t *r, size_t i, int64_t now)
{
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
    if (!r->in_round[i])
        return (sl_wait_gate_t){.skip = SL_WAIT_SKIP_OTHER, .recovery_ms = SL_THROTTLE_NEVER};
    switch (r->skips[i]) {
    case SL_ROW_SKIP_THROTTLED:
        return (sl_wait_gate_t){.skip = SL_WAIT_SKIP_THROTTLED,
                                .recovery_ms = sl_throttle_recovery_ms(&up->throttle, now)};
    case SL_ROW_SKIP_BUSY:
        return (sl_wait_gate_t){.skip = SL_WAIT_SKIP_BUSY, .recovery_ms = now};
    case SL_ROW_SKIP_WINDOW_FULL:
        return (sl_wait_gate_t){.skip = SL_WAIT_SKIP_WINDOW_FULL, .recovery_ms = r->recovery_ms[i]};
    case SL_ROW_SKIP_PERIOD_USED_UP:
        return (sl_wait_gate_t){.skip = SL_WAIT_SKIP_PERIOD_USED_UP, .recovery_ms = r->recovery_ms[i]};
    default:
        return (sl_wait_gate_t){.skip = SL_WAIT_SKIP_OTHER, .recovery_ms = SL_THROTTLE_NEVER};
    }
}

static sl_proto_serve_skip_t
serve_skip_of(sl_wait_skip_t skip)
{
    switch (skip) {
    case SL_WAIT_SKIP_THROTTLED:
        return SL_PROTO_SERVE_SKIP_THROTTLED;
    case SL_WAIT_SKIP_WINDOW_FULL:
        return SL_PROTO_SERVE_SKIP_WINDOW_FULL;
    case SL_WAIT_SKIP_PERIOD_USED_UP:
        return SL_PROTO_SERVE_SKIP_PERIOD_USED_UP;
    default:
        return SL_PROTO_SERVE_SKIP_BUSY;
    }
}

/*
 * No candidate can take the request now, but some are only paused, busy or
 * out of usage room: the pure rule decides whether it waits on them (and
 * until when), or gets the final 429 at once, or the last failure.
 */
static void
wait_or_give_up(request_t *r)
{
    /* Count-tokens never queue: while their upstream is unavailable the gateway estimates (§6). */
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS) {
        answer_token_estimate(r);
        return;
    }
    size_t n = r->n_cands;
    int64_t now = sl_now_ms();
    sl_wait_gate_t gates[n + 1];
    bool wait_on[n + 1];
    sl_waitq_lock();
    /*
     * Draining: nothing starts to wait, and whoever waits is woken to end
     * here (read under the wait lock, which the drain's wake-up takes after
     * setting stopping, so no one joins unseen). A waiting request would be
     * cut at the end of the grace; answered now, its client can retry
     * elsewhere at once.
     */
    if (atomic_load(&r->gw->stopping)) {
        sl_waitq_unlock();
        refuse_to_wait(r, SL_CODE_GW_SHUTTING_DOWN, "1");
        return;
    }
    for (size_t i = 0; i < n; i++)
        gates[i] = gate_of(r, i, now);
    size_t own = pinned_candidate(r);
    sl_wait_request_t req = {.now_ms = now,
                             .deadline_ms = r->deadline_ms,
                             .own = own == SL_RETRY_UNPINNED ? SL_WAIT_NO_OWN : own,
                             .sealed = r->affinity_effect == SL_AFFINITY_SEALED};
    /* wait_secs 0 never waits (§5, §6). */
    if (!may_wait(r))
        req.deadline_ms = now;
    sl_wait_decision_t d = sl_wait_decide(gates, n, &req, wait_on);
    /*
     * A request behind others in a paused upstream's line waits for the
     * line (a busy gate: woken as it moves), but what holds the line is the
     * pause: RequestQueued says so, with the pause's end.
     */
    int64_t behind_pause_until[n + 1];
    for (size_t i = 0; i < n; i++) {
        const sl_throttle_t *t = &r->snapshot->upstreams[r->cands[i].provider]->throttle;
        behind_pause_until[i] = gates[i].skip == SL_WAIT_SKIP_BUSY && sl_throttle_kind(t) != SL_THROTTLE_FREE
                                    ? sl_throttle_recovery_ms(t, now)
                                    : -1;
    }
    bool joined = false;
    if (d.action == SL_WAIT_WAIT && may_start_waiting(r)) {
        if (r->waiter == NULL)
            r->waiter = sl_waiter_new(r->io->inbox, r, r->id);
        for (size_t i = 0; i < n; i++) {
            if (wait_on[i])
                sl_waiter_join(r->waiter, &r->snapshot->upstreams[r->cands[i].provider]->waitq);
        }
        joined = true;
    }
    sl_waitq_unlock();

    if (d.action == SL_WAIT_WAIT && !joined) {
        refuse_to_wait(r, SL_CODE_GW_WAIT_OVERLOADED, "5");
        return;
    }
    switch (d.action) {
    case SL_WAIT_SEND_NOW:
    case SL_WAIT_WAIT: {
        sl_bus_gate_t bus_gates[n + 1];
        size_t k = 0;
        int64_t wall = sl_wall_ms();
        for (size_t i = 0; i < n; i++) {
            if (!wait_on[i] && d.action == SL_WAIT_WAIT)
                continue;
            if (gates[i].skip == SL_WAIT_SKIP_OTHER || gates[i].skip == SL_WAIT_SKIP_PERIOD_USED_UP)
                continue;
            bool paused = behind_pause_until[i] >= 0;
            bool timed = gates[i].skip != SL_WAIT_SKIP_BUSY;
            bus_gates[k++] = (sl_bus_gate_t){
                .upstream = provider_of(r, i)->name,
                .skip = paused ? SL_PROTO_SERVE_SKIP_THROTTLED : serve_skip_of(gates[i].skip),
                .until_ms = paused  ? wall_of(now, wall, behind_pause_until[i])
                            : timed ? wall_of(now, wall, gates[i].recovery_ms)
                                    : -1,
            };
        }
        /* Woken by a message when a slot frees or a probe passes; the timer covers pauses, windows and the
         * deadline. */
        start_waiting(r, now, bus_gates, k, d.action == SL_WAIT_SEND_NOW ? now : d.wake_ms);
        break;
    }
    case SL_WAIT_FINAL_429: {
        sl_code_t code = SL_CODE_GW_WAIT_MIXED;
        sl_code_from_slug(sl_wait_code_slug(d.code), &code);
        /* Only windows too small for the request itself: waiting can never help (§7). */
        if (d.code == SL_WAIT_CODE_WINDOW_FULL && !d.should_retry) {
            answer_too_large(r, &d, "the upstreams for this model");
            break;
        }
        answer_final_429(r, &d, code, sl_msg_make(code, NULL));
        break;
    }
    default:
        answer_with_failure(r);
        break;
    }
}

/* The final 429 for a request that no limit of subject can ever take (§7): x-should-retry false. */
static void
answer_too_large(request_t *r, const sl_wait_decision_t *d, const char *subject)
{
    char limit[SL_LIMIT_TEXT_MAX];
    snprintf(limit, sizeof(limit), "%s", r->too_large_limit[0] ? r->too_large_limit : "?");
    answer_final_429(r, d, SL_CODE_GW_LIMIT_TOO_LARGE,
                     sl_msg_make(SL_CODE_GW_LIMIT_TOO_LARGE, "subject", subject, "limit", limit, NULL));
}

/*
 * A client key's limits (§7), once per request before any candidate: a
 * full minute/hour window holds the request in the key's queue (gate
 * key_window, in arrival order) within its deadline; a used-up period or a
 * request larger than a whole limit is answered 429 at once. Admitted, the
 * key is charged the estimate; finish() settles the real figure. Returns
 * true when the request goes on to its candidates now.
 */
static bool
admit_key(request_t *r)
{
    sl_limit_set_t *set = r->key_limits;
    if (set == NULL || r->key_charge.set != NULL)
        return true;
    int64_t now = sl_now_ms(), wall = sl_wall_ms();
    sl_amounts_t need = usage_estimate(r, r->in.model);
    sl_waitq_lock();
    if (set->n == 0) {
        sl_waitq_unlock();
        return true;
    }
    if (atomic_load(&r->gw->stopping)) {
        sl_waitq_unlock();
        refuse_to_wait(r, SL_CODE_GW_SHUTTING_DOWN, "1");
        return false;
    }
    /* Nobody overtakes the key's queue. */
    bool first = r->waiter != NULL ? sl_waitq_is_head(&set->queue, r->waiter) : set->queue.len == 0;
    sl_limits_check_t c = sl_limits_check(set->states, set->n, wall, &need);
    if (c.verdict == SL_LIMIT_OK && first) {
        charge_locked(&r->key_charge, set, wall, &need);
        r->key_counts_tokens = counts_tokens(set);
        if (r->waiter != NULL) {
            sl_waiter_leave_all(r->waiter);
            sl_waitq_wake(&set->queue, 1);
        }
        sl_waitq_unlock();
        persist_usage(r, set, wall, &need);
        if (r->key_waiting) {
            /* Its wait for upstreams, if any, is a queueing of its own. */
            r->key_waiting = false;
            r->key_pause_ms = now - r->queued_since_ms;
            r->queued = false;
            if (events_on(r)) {
                sl_proto_event_t ev;
                emit(r, sl_bus_request_dequeued(&ev, wall, r->id, NULL));
            }
        }
        return true;
    }
    sl_limit_t which = set->states[c.which].limit;
    sl_wait_gate_t gate = {.skip = SL_WAIT_SKIP_BUSY, .recovery_ms = now}; /* room, but others are first */
    if (c.verdict == SL_LIMIT_WINDOW_FULL)
        gate = (sl_wait_gate_t){SL_WAIT_SKIP_WINDOW_FULL, mono_of(now, wall, c.recovery_ms)};
    else if (c.verdict == SL_LIMIT_PERIOD_USED_UP)
        gate = (sl_wait_gate_t){SL_WAIT_SKIP_PERIOD_USED_UP, mono_of(now, wall, c.recovery_ms)};
    else if (c.verdict == SL_LIMIT_NEVER)
        gate = (sl_wait_gate_t){SL_WAIT_SKIP_WINDOW_FULL, SL_THROTTLE_NEVER};
    sl_wait_request_t wr = {
        .now_ms = now, .deadline_ms = may_wait(r) ? r->deadline_ms : now, .own = SL_WAIT_NO_OWN};
    bool wait_on[1];
    sl_wait_decision_t d = sl_wait_decide(&gate, 1, &wr, wait_on);
    bool joined = d.action == SL_WAIT_WAIT && may_start_waiting(r);
    if (joined) {
        if (r->waiter == NULL)
            r->waiter = sl_waiter_new(r->io->inbox, r, r->id);
        sl_waiter_join(r->waiter, &set->queue);
    }
    sl_waitq_unlock();

    char limit[SL_LIMIT_TEXT_MAX];
    sl_limit_describe(&which, limit, sizeof(limit));
    if (d.action == SL_WAIT_WAIT && !joined) {
        refuse_to_wait(r, SL_CODE_GW_WAIT_OVERLOADED, "5");
        return false;
    }
    if (d.action != SL_WAIT_WAIT) {
        if (c.verdict == SL_LIMIT_NEVER) {
            snprintf(r->too_large_limit, sizeof(r->too_large_limit), "%s", limit);
            answer_too_large(r, &d, "this key");
        } else if (c.verdict == SL_LIMIT_PERIOD_USED_UP) {
            char until[64];
            sl_text_local_time(r->config->tz, c.recovery_ms, until, sizeof(until));
            answer_final_429(r, &d, SL_CODE_GW_KEY_USED_UP,
                             sl_msg_make(SL_CODE_GW_KEY_USED_UP, "limit", limit, "until", until, NULL));
        } else {
            answer_final_429(r, &d, SL_CODE_GW_KEY_WINDOW_FULL,
                             sl_msg_make(SL_CODE_GW_KEY_WINDOW_FULL, "limit", limit, NULL));
        }
        return false;
    }
    r->key_waiting = true;
    sl_bus_gate_t bus_gate = {
        .upstream = client_name(r),
        .skip = SL_PROTO_SERVE_SKIP_KEY_WINDOW,
        .until_ms = gate.skip == SL_WAIT_SKIP_WINDOW_FULL ? wall_of(now, wall, gate.recovery_ms) : -1,
    };
    start_waiting(r, now, &bus_gate, 1, d.wake_ms);
    return false;
}

/* ---- reading the upstream's answer ---------------------------------------------------------- */

/* The conversation stays with the upstream that served it (sticky; sealed when its history is bound). */
static void
remember_conversation(request_t *r)
{
    if (r->conversation == 0)
        return;
    sl_affinity_pin_t pin = {
        .upstream = sl_affinity_upstream_id(&r->gw->affinity_key, provider_of(r, r->cur)->name),
        .sealed = r->sealed_history,
    };
    pthread_mutex_lock(&r->gw->affinity_lock);
    sl_affinity_put(r->gw->affinity, r->conversation, pin, sl_now_ms());
    pthread_mutex_unlock(&r->gw->affinity_lock);
}

/*
 * Responses: the answer's id, from the first `"id":"…"` of a response.created
 * event or of a whole answer (OpenAI writes the response's own id first). A
 * later turn names it as previous_response_id, and must go to this upstream.
 */
static void
capture_response_id(request_t *r, const char *data, size_t len)
{
    if (r->in.endpoint.dialect != SL_DIALECT_OPENAI_RESPONSES || r->response_id[0] != '\0')
        return;
    static const char needle[] = "\"id\":\"";
    const char *at = memmem(data, len, needle, sizeof(needle) - 1);
    if (at == NULL)
        return;
    at += sizeof(needle) - 1;
    const char *end = memchr(at, '"', len - (size_t)(at - data));
    if (end != NULL && (size_t)(end - at) < sizeof(r->response_id))
        snprintf(r->response_id, sizeof(r->response_id), "%.*s", (int)(end - at), at);
}

/* A served Responses answer seals its id to the upstream that holds it. */
static void
remember_response(request_t *r)
{
    if (r->response_id[0] == '\0')
        return;
    const char *client = r->in.client != NULL ? r->in.client->name : "";
    uint64_t key = sl_affinity_key_response(&r->gw->affinity_key, client, strlen(client), r->response_id,
                                            strlen(r->response_id));
    sl_affinity_pin_t pin = {
        .upstream = sl_affinity_upstream_id(&r->gw->affinity_key, provider_of(r, r->cur)->name),
        .sealed = true,
    };
    pthread_mutex_lock(&r->gw->affinity_lock);
    sl_affinity_put(r->gw->affinity, key, pin, sl_now_ms());
    pthread_mutex_unlock(&r->gw->affinity_lock);
}

/* Content arrived (or the hold is over): from here the answer streams to the client. */
static void
release_hold(request_t *r)
{
    r->state = REQ_STREAMING;
    throttle_answered(r);
    breaker_account(r, NULL);
    remember_conversation(r);
    start_response(r);
}

/* Classifies the whole events in rx; returns false when the hop was abandoned meanwhile. */
/*
 * Gemini may send an error after earlier chunks as bare JSON, which SSE
 * cannot frame: it is rewritten in place as the `data:` event it stands
 * for, so everything after sees one shape (and a client's SDK can read
 * it). Returns false while the object has not closed yet: wait for more.
 */
static bool
frame_bare_gemini_error(request_t *r)
{
    const char *at = r->rx->bytes + r->parsed;
    size_t n = r->rx->size - r->parsed, i = 0;
    while (i < n && (at[i] == ' ' || at[i] == '\t' || at[i] == '\r' || at[i] == '\n'))
        i++;
    if (i == n || at[i] != '{')
        return true;
    size_t taken = 0;
    sl_stream_verdict_t v;
    switch (sl_gemini_bare_error(at, n, &taken, &v)) {
    case SL_GEMINI_BARE_MORE:
        return false;
    case SL_GEMINI_BARE_NONE:
        return true;
    default:
        break;
    }
    static const char prefix[] = "data: ", suffix[] = "\n\n";
    size_t grow = sizeof(prefix) - 1 + sizeof(suffix) - 1;
    h2o_buffer_reserve(&r->rx, grow);
    char *base = r->rx->bytes + r->parsed;
    size_t rest = r->rx->size - r->parsed - taken;
    memmove(base + taken + grow, base + taken, rest);
    memmove(base + i + sizeof(prefix) - 1, base + i, taken - i);
    memcpy(base + i, prefix, sizeof(prefix) - 1);
    memcpy(base + taken + sizeof(prefix) - 1, suffix, sizeof(suffix) - 1);
    r->rx->size += grow;
    return true;
}

/* What the next event of a stream is. */
typedef enum {
    NEXT_EVENT,   /* *len bytes make an event, classified into *v */
    NEXT_MORE,    /* no whole event yet */
    NEXT_DROPPED, /* an event was taken out of the stream (read, not forwarded): look again */
    NEXT_BROKEN,  /* the framing is broken (*detail says how): the stream cannot go on */
} next_event_t;

/* The next SSE event of rx[parsed..), classified. */
static next_event_t
next_sse_event(request_t *r, size_t *len, sl_stream_verdict_t *v, const char **detail)
{
    if (r->in.endpoint.dialect == SL_DIALECT_GEMINI && !frame_bare_gemini_error(r))
        return NEXT_MORE;
    sl_sse_event_t ev;
    sl_sse_status_t st = sl_sse_next(&r->scanner, r->rx->bytes + r->parsed, r->rx->size - r->parsed, &ev);
    if (st == SL_SSE_MORE)
        return NEXT_MORE;
    if (st == SL_SSE_TOO_LARGE) {
        *detail = "an event is too large";
        return NEXT_BROKEN;
    }
    if (ev.data != NULL && sl_sse_event_is(&ev, "response.created"))
        capture_response_id(r, ev.data, ev.data_len);
    sl_stream_feed(&r->stream, &ev, v);
    if (r->strip_usage_chunk && ev.data != NULL && sl_openai_chat_usage_only(ev.data, ev.data_len)) {
        /* Asked for by sluice, not by the client: its usage is read, the chunk goes no further. */
        char *at = r->rx->bytes + r->parsed;
        memmove(at, at + ev.len, r->rx->size - r->parsed - ev.len);
        r->rx->size -= ev.len;
        return NEXT_DROPPED;
    }
    *len = ev.len;
    return NEXT_EVENT;
}

/* The next eventstream frame of rx[parsed..) (Bedrock), classified; a bad frame breaks the stream. */
static next_event_t
next_frame(request_t *r, size_t *len, sl_stream_verdict_t *v, const char **detail)
{
    sl_es_message_t frame;
    sl_es_status_t st =
        sl_es_next(r->rx->bytes + r->parsed, r->rx->size - r->parsed, SL_ES_MAX_MESSAGE_DEFAULT, &frame);
    if (st == SL_ES_NEED_MORE)
        return NEXT_MORE;
    if (st != SL_ES_MESSAGE) {
        *detail = st == SL_ES_TOO_LARGE ? "an eventstream frame is too large" : "a broken eventstream frame";
        return NEXT_BROKEN;
    }
    sl_bedrock_message_t m;
    sl_bedrock_message_from(&frame, &m);
    sl_bedrock_stream_feed(&r->stream, &m, v);
    *len = frame.len;
    return NEXT_EVENT;
}

/*
 * Reads the stream's whole events: a held answer is released at its first
 * content, or fails over on an error before it; an error after content is
 * the client's to see. Returns false when the request moved on (failed
 * over, failed), true when it waits for more bytes.
 */
static bool
scan_events(request_t *r)
{
    for (;;) {
        size_t len = 0;
        sl_stream_verdict_t v;
        const char *broken = NULL;
        next_event_t next =
            r->frames ? next_frame(r, &len, &v, &broken) : next_sse_event(r, &len, &v, &broken);
        if (next == NEXT_MORE)
            return true;
        if (next == NEXT_DROPPED)
            continue;
        if (next == NEXT_BROKEN) {
            if (r->state == REQ_HELD)
                hop_failed_before_content(r, SL_FAILURE_BROKEN_BEFORE_CONTENT, NULL, broken);
            else
                fail_streaming(r, SL_HOP_END_BROKEN, broken);
            return false;
        }
        if (v.kind == SL_STREAM_ERROR && r->state == REQ_STREAMING)
            r->told_error = true;
        if (r->state == REQ_HELD && v.kind == SL_STREAM_ERROR) {
            char detail[128];
            snprintf(detail, sizeof(detail), "%s", v.code[0] ? v.code : "in-stream error");
            /* The error event itself belongs to what the client may get. */
            r->parsed += len;
            hop_failed_before_content(r, SL_FAILURE_STREAM_ERROR, &v, detail);
            return false;
        }
        r->parsed += len;
        if (r->state == REQ_HELD && r->stream.phase == SL_STREAM_FLOWING) {
            release_hold(r);
            /* The first content goes out now; what came in the same read follows when this send is done. */
            flush_to_client(r);
        } else if (r->stream.phase == SL_STREAM_FLOWING && !r->first_token_seen && r->answer_started) {
            throttle_answered(r);
            breaker_account(r, NULL);
            remember_conversation(r);
            first_token(r);
            flush_to_client(r);
        }
    }
}

/*
 * The bytes of a whole (non-SSE) answer not yet passed on may go to the
 * client. A 2xx answer's last bytes are kept: its usage comes at the end.
 */
static void
pass_whole_answer_bytes(request_t *r)
{
    const char *fresh = r->rx->bytes + r->parsed;
    size_t n = r->rx->size - r->parsed;
    r->parsed = r->rx->size;
    if (r->up_status >= 300 || r->handing_over || n == 0)
        return;
    /* Sized to what came, up to the cap: most answers are far smaller, and a 16 KiB malloc per request
     * made glibc consolidate its free lists each time. */
    size_t want = r->answer_tail_len + n < ANSWER_TAIL_CAP ? r->answer_tail_len + n : ANSWER_TAIL_CAP;
    if (want > r->answer_tail_cap) {
        size_t cap = r->answer_tail_cap * 2 > want ? r->answer_tail_cap * 2 : want;
        r->answer_tail_cap = cap < ANSWER_TAIL_CAP ? cap : ANSWER_TAIL_CAP;
        r->answer_tail = sl_xrealloc(r->answer_tail, r->answer_tail_cap);
    }
    if (n >= ANSWER_TAIL_CAP) {
        memcpy(r->answer_tail, fresh + n - ANSWER_TAIL_CAP, ANSWER_TAIL_CAP);
        r->answer_tail_len = ANSWER_TAIL_CAP;
        return;
    }
    size_t keep = r->answer_tail_len + n <= ANSWER_TAIL_CAP ? r->answer_tail_len : ANSWER_TAIL_CAP - n;
    memmove(r->answer_tail, r->answer_tail + r->answer_tail_len - keep, keep);
    memcpy(r->answer_tail + keep, fresh, n);
    r->answer_tail_len = keep + n;
}

/* A whole answer has ended: its usage, when its tail tells it, is what the hop used. */
static void
read_answer_usage(request_t *r)
{
    if (r->answer_tail == NULL)
        return;
    sl_usage_t u;
    if (sl_answer_usage(r->in.endpoint.dialect, r->answer_tail, r->answer_tail_len, &u))
        r->stream.usage = u;
}

static void
process(request_t *r)
{
    /* A whole Responses answer names its own id first: it is in the first bytes. */
    if (!r->events && (r->state == REQ_HELD || r->state == REQ_STREAMING) && r->up_status < 300)
        capture_response_id(r, r->rx->bytes, r->rx->size);
    switch (r->state) {
    case REQ_HELD:
        if (r->events) {
            if (!scan_events(r))
                return;
        }
        if (r->state == REQ_HELD && r->rx->size > HOLD_CAP)
            release_hold(r);
        if (r->state == REQ_STREAMING) {
            if (!r->events)
                pass_whole_answer_bytes(r);
            flush_to_client(r);
        }
        break;
    case REQ_STREAMING:
        if (r->events) {
            if (!scan_events(r))
                return;
        } else {
            pass_whole_answer_bytes(r);
        }
        flush_to_client(r);
        if (r->hop != NULL && !r->reads_paused && r->rx->size >= CLIENT_BUFFER_CAP)
            pause_upstream_reads(r);
        break;
    case REQ_READING_ERROR:
        if (r->rx->size >= ERROR_BODY_CAP)
            judge_error_answer(r);
        break;
    default:
        break;
    }
}

static void
on_hop_head(void *data, int status, const h2o_header_t *headers, size_t n)
{
    request_t *r = data;
    r->up_status = status;
    r->ttfb_ms = sl_now_ms() - r->started_ms;
    r->up_content_length = -1;
    memset(&r->up_headers, 0, sizeof(r->up_headers));
    bool event_stream = false, frames = false;
    h2o_mem_pool_t *pool = r->req != NULL ? &r->req->pool : NULL;
    for (size_t i = 0; i < n && pool != NULL; i++) {
        const h2o_iovec_t *name = headers[i].name;
        if (h2o_memis(name->base, name->len, H2O_STRLIT("content-length")))
            r->up_content_length = (int64_t)h2o_strtosize(headers[i].value.base, headers[i].value.len);
        if (h2o_memis(name->base, name->len, H2O_STRLIT("content-type"))) {
            event_stream |= h2o_strstr(headers[i].value.base, headers[i].value.len,
                                       H2O_STRLIT("text/event-stream")) != SIZE_MAX;
            frames |= h2o_strstr(headers[i].value.base, headers[i].value.len,
                                 H2O_STRLIT("application/vnd.amazon.eventstream")) != SIZE_MAX;
        }
        if (is_hop_by_hop(name))
            continue;
        h2o_iovec_t v = h2o_strdup(pool, headers[i].value.base, headers[i].value.len);
        h2o_iovec_t nm = h2o_strdup(pool, name->base, name->len);
        h2o_add_header_by_str(pool, &r->up_headers, nm.base, nm.len, 0, NULL, v.base, v.len);
    }
    const sl_stream_class_vtable_t *vt = sl_stream_class_for(r->in.endpoint.dialect);
    r->frames = frames && r->in.endpoint.dialect == SL_DIALECT_BEDROCK;
    r->events = (event_stream && vt != NULL) || r->frames;
    if (r->frames) {
        sl_bedrock_stream_init(&r->stream);
    } else if (r->events) {
        sl_stream_init(&r->stream, vt);
        sl_sse_init(&r->scanner, SL_SSE_MAX_EVENT_DEFAULT, r->scratch, sizeof(r->scratch));
    }
    if (status < 200 || status > 299) {
        r->state = REQ_READING_ERROR;
        return;
    }
    /*
     * Held until its first content, so an early failure can fail over or be retried invisibly: a hop to a
     * non-last candidate always; the last one when the client streams and the request may still wait.
     */
    if (has_next_candidate(r) || (r->events && r->in.stream && may_wait(r))) {
        r->state = REQ_HELD;
    } else {
        r->state = REQ_STREAMING;
        /* A whole answer is the upstream's success now; a stream's is its first content. */
        if (!r->events) {
            throttle_answered(r);
            breaker_account(r, NULL);
            remember_conversation(r);
        }
        start_response(r);
    }
}

static void
on_hop_body(void *data, h2o_buffer_t **input, bool end_follows)
{
    request_t *r = data;
    r->end_follows = end_follows;
    size_t n = (*input)->size;
    h2o_iovec_t dst = h2o_buffer_reserve(&r->rx, n);
    memcpy(dst.base, (*input)->bytes, n);
    r->rx->size += n;
    h2o_buffer_consume(input, n);
    process(r);
}

static sl_failure_source_t
source_of_end(sl_hop_end_t how, bool had_head)
{
    switch (how) {
    case SL_HOP_END_CONNECT_FAILED:
        return SL_FAILURE_CONNECT_FAILED;
    case SL_HOP_END_BROKEN_BEFORE_HEAD:
        return SL_FAILURE_BROKEN_BEFORE_HEAD;
    case SL_HOP_END_IDLE_TIMEOUT:
        return SL_FAILURE_IDLE_TIMEOUT;
    case SL_HOP_END_TOTAL_TIMEOUT:
        return SL_FAILURE_TOTAL_TIMEOUT;
    case SL_HOP_END_EOS:
        return SL_FAILURE_ENDED_EARLY;
    case SL_HOP_END_BROKEN:
    default:
        return had_head ? SL_FAILURE_BROKEN_BEFORE_CONTENT : SL_FAILURE_BROKEN_BEFORE_HEAD;
    }
}

static void
on_hop_end(void *data, sl_hop_end_t how, const char *detail)
{
    request_t *r = data;
    r->hop = NULL;
    r->end_follows = false;
    switch (r->state) {
    case REQ_WAITING_HEAD:
        /* A kept-alive connection the upstream had closed fails this way: resending is safe, nothing has
         * gone anywhere (stack-notes.md). Once per request, so a truly broken upstream still fails. */
        if (how == SL_HOP_END_BROKEN_BEFORE_HEAD && !r->resent_on_fresh_connection) {
            r->resent_on_fresh_connection = true;
            r->hop_uncounted = true;
            r->n_attempts--;
            release_upstream(r);
            free(r->head);
            r->head = NULL;
            start_hop(r, r->cur);
            break;
        }
        hop_failed_before_content(r, source_of_end(how, false), NULL, detail);
        break;
    case REQ_HELD:
        if (how == SL_HOP_END_EOS && !r->events) {
            release_hold(r);
            pass_whole_answer_bytes(r);
            read_answer_usage(r);
            remember_response(r);
            close_attempt(r, SL_ROW_HOP_SERVED, SL_CODE_GW_UPSTREAM_STATUS, NULL);
            finish(r, SL_ROW_SERVED, r->up_status, false, SL_CODE_GW_UPSTREAM_STATUS, NULL);
            queue_final(r, H2O_SEND_STATE_FINAL);
            break;
        }
        hop_failed_before_content(r, source_of_end(how, true), NULL,
                                  how == SL_HOP_END_EOS ? "the stream ended before any content" : detail);
        break;
    case REQ_READING_ERROR:
        judge_error_answer(r);
        break;
    case REQ_STREAMING: {
        /* An answer handed over after a failure is forwarded as the upstream ends it. */
        /* A stream that told its own error after content needs no second one from the gateway. */
        bool whole = how == SL_HOP_END_EOS &&
                     (!r->events || r->handing_over || r->told_error || sl_stream_complete(&r->stream));
        if (whole && !r->events)
            read_answer_usage(r);
        release_upstream(r);
        if (whole) {
            bool served = r->up_status < 300 && !r->handing_over;
            if (served) {
                remember_response(r);
                close_attempt(r, SL_ROW_HOP_SERVED, SL_CODE_GW_UPSTREAM_STATUS, NULL);
            }
            finish(r, served ? SL_ROW_SERVED : SL_ROW_FAILED, r->up_status, !served, r->last.code,
                   r->last.detail);
            queue_final(r, H2O_SEND_STATE_FINAL);
            break;
        }
        fail_streaming(r, how, detail);
        break;
    }
    default:
        break;
    }
}

/* Queues release one request at a time: the next may go once this one's bytes are on their way, so
 * the upstream receives them in arrival order. */
static void
on_hop_sent(void *data)
{
    request_t *r = data;
    end_dispatch(r);
    recharge_at_send(r);
}

static const sl_hop_callbacks_t hop_callbacks = {on_hop_sent, on_hop_head, on_hop_body, on_hop_end};

/* ---- hops ---------------------------------------------------------------------------------- */

/*
 * The body for this hop: the client's, or a copy with the upstream's model
 * name (model_map) and, for a Chat stream whose usage a limit needs, with
 * `stream_options.include_usage` (then the extra usage chunk is dropped on
 * the way back unless the client asked for it).
 */
static h2o_iovec_t
body_for_hop(request_t *r, const char *model, bool needs_usage)
{
    sl_body_edit_t edits[2];
    size_t n = 0;
    sl_strbuf_t quoted = {0};
    bool rename =
        r->in.endpoint.model[0] == '\0' && strcmp(model, r->in.model) != 0 && r->in.fields.model.len > 0;
    if (rename) {
        sl_strbuf_append(&quoted, "\"", 1);
        for (const char *p = model; *p; p++) {
            if (*p == '"' || *p == '\\')
                sl_strbuf_appendf(&quoted, "\\%c", *p);
            else if ((unsigned char)*p < 0x20)
                sl_strbuf_appendf(&quoted, "\\u%04x", *p);
            else
                sl_strbuf_append(&quoted, p, 1);
        }
        sl_strbuf_append(&quoted, "\"", 1);
        edits[n++] =
            (sl_body_edit_t){r->in.fields.model.off, r->in.fields.model.len, quoted.data, quoted.len};
    }
    r->strip_usage_chunk = needs_usage && r->in.endpoint.dialect == SL_DIALECT_OPENAI_CHAT && r->in.stream &&
                           sl_body_ask_for_usage(r->in.body, r->in.body_len, &r->in.fields, &edits[n]);
    if (r->strip_usage_chunk)
        n++;
    size_t len = 0;
    char *body = sl_body_apply(r->in.body, r->in.body_len, edits, n, &len);
    free(sl_strbuf_finish(&quoted));
    free(r->body_copy);
    r->body_copy = body;
    return body != NULL ? h2o_iovec_init(body, len) : h2o_iovec_init(r->in.body, r->in.body_len);
}

/* What a set's limits show for an upstream (ThrottleChanged): a full window or a used-up period, else
 * nothing. */
static sl_limit_verdict_t
shown_verdict(sl_limit_verdict_t v)
{
    return v == SL_LIMIT_WINDOW_FULL || v == SL_LIMIT_PERIOD_USED_UP ? v : SL_LIMIT_OK;
}

/*
 * An upstream's usage limits started or stopped holding it back (§7): its
 * Throttle shows window_full / period_used_up until the room comes back;
 * then whatever its 429 state is (t).
 */
static void
emit_limit_throttle(request_t *r, const char *provider, sl_limit_verdict_t v, int64_t until_wall,
                    const sl_limit_t *limit, const sl_throttle_t *t)
{
    if (v == SL_LIMIT_OK) {
        sl_log_info("upstream %s: usage limits have room again", provider);
        if (events_on(r))
            emit_throttle(r, provider, t);
        return;
    }
    char text[SL_LIMIT_TEXT_MAX], until[64];
    sl_limit_describe(limit, text, sizeof(text));
    sl_text_local_time(r->config->tz, until_wall, until, sizeof(until));
    bool full = v == SL_LIMIT_WINDOW_FULL;
    sl_log_info("upstream %s: %s (%s) until %s", provider, full ? "window full" : "period used up", text,
                until);
    if (!events_on(r))
        return;
    sl_bus_throttle_facts_t f = {
        .limits = v, .limit = limit, .limits_until_ms = until_wall, .tz = r->config->tz};
    sl_proto_event_t ev;
    emit(r, sl_bus_throttle_changed(&ev, sl_wall_ms(), provider, sl_bus_throttle_view(provider, &f)));
}

/*
 * Takes the upstream for a hop: room in its usage limits (charged with the
 * request's estimate), a slot under its max_concurrent and, unless the
 * breaker is bypassed, its permission (or its half-open probe). Returns
 * SL_ROW_SKIP_NONE when taken, else why it is skipped now (with
 * r->recovery_ms[cand] set for a limit).
 */
static sl_row_skip_t
claim_upstream(request_t *r, size_t cand)
{
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[cand].provider];
    sl_limit_set_t *set =
        r->snapshot->limits.providers != NULL ? r->snapshot->limits.providers[r->cands[cand].provider] : NULL;
    uint32_t max_concurrent = provider_of(r, cand)->max_concurrent;
    sl_amounts_t need = {0}; /* the estimate, made only for an upstream with limits */
    int64_t now = sl_now_ms(), wall = sl_wall_ms();
    sl_limits_check_t limits = {.verdict = SL_LIMIT_OK};
    bool limits_changed = false;
    sl_limit_t limit = {0};
    sl_waitq_lock();
    bool throttle_changed = sl_throttle_check(&up->throttle, now);
    /* Waiters go in arrival order: a request that is not first in the queue lets the first go. */
    bool first = r->waiter != NULL ? sl_waitq_is_head(&up->waitq, r->waiter) : up->waitq.len == 0;
    bool throttle_probe = false;
    /*
     * Whoever waits is served first, in arrival order: nobody overtakes the
     * queue's head, and the head goes only once the one released before it
     * is on its way — so the upstream receives them in arrival order.
     */
    bool in_line = !first || up->dispatching;
    bool admitted = !in_line && sl_throttle_admit(&up->throttle, now, first, &throttle_probe);
    sl_throttle_t throttle = up->throttle;
    /* Behind others in line it waits as for a slot: woken when the line moves, not by a timer. */
    sl_row_skip_t skip = admitted ? SL_ROW_SKIP_NONE : in_line ? SL_ROW_SKIP_BUSY : SL_ROW_SKIP_THROTTLED;
    bool breaker_changed = false;
    sl_breaker_t breaker = {0};
    if (admitted && set != NULL && set->n > 0) {
        need = usage_estimate(r, r->cands[cand].model);
        limits = sl_limits_check(set->states, set->n, wall, &need);
        limit = set->states[limits.which].limit;
        if (shown_verdict(limits.verdict) != set->shown && limits.verdict != SL_LIMIT_NEVER) {
            set->shown = shown_verdict(limits.verdict);
            set->shown_until_ms = limits.recovery_ms;
            set->shown_limit = set->states[limits.which].limit;
            limits_changed = true;
        }
        if (limits.verdict != SL_LIMIT_OK) {
            skip = limits.verdict == SL_LIMIT_PERIOD_USED_UP ? SL_ROW_SKIP_PERIOD_USED_UP
                                                             : SL_ROW_SKIP_WINDOW_FULL;
            r->recovery_ms[cand] =
                limits.verdict == SL_LIMIT_NEVER ? SL_THROTTLE_NEVER : mono_of(now, wall, limits.recovery_ms);
        }
    }
    if (admitted && skip == SL_ROW_SKIP_NONE) {
        pthread_mutex_lock(&up->lock);
        if (max_concurrent > 0 && up->in_flight >= max_concurrent) {
            skip = SL_ROW_SKIP_BUSY;
        } else {
            bool is_probe = false;
            sl_breaker_state_t state = sl_breaker_check(&up->breaker, now, &is_probe, &breaker_changed);
            /* A single candidate bypasses the breaker; so does a request whose candidates are all cooling. */
            if (state == SL_BREAKER_CLOSED || is_probe || r->cooling_ignored || r->n_offered == 1) {
                up->in_flight++;
                r->is_probe = is_probe;
            } else {
                skip = SL_ROW_SKIP_COOLING;
            }
        }
        breaker = up->breaker;
        pthread_mutex_unlock(&up->lock);
    }
    if (admitted) {
        if (skip != SL_ROW_SKIP_NONE && throttle_probe)
            sl_throttle_probe_abandoned(&up->throttle);
        else
            r->throttle_probe = throttle_probe;
        if (skip == SL_ROW_SKIP_NONE && r->waiter != NULL) {
            up->dispatching = true;
            r->dispatching = up;
        }
        if (skip == SL_ROW_SKIP_NONE && set != NULL && set->n > 0)
            charge_locked(&r->up_charge, set, wall, &need);
        r->hop_needs_usage = r->key_counts_tokens || counts_tokens(set);
    }
    sl_waitq_unlock();
    if (r->up_charge.set != NULL && skip == SL_ROW_SKIP_NONE)
        persist_usage(r, set, wall, &need);
    if (limits.verdict == SL_LIMIT_NEVER) {
        char text[SL_LIMIT_TEXT_MAX];
        sl_limit_describe(&limit, text, sizeof(text));
        snprintf(r->too_large_limit, sizeof(r->too_large_limit), "%s", text);
    }
    if (throttle_changed)
        emit_throttle(r, up->name, &throttle);
    if (limits_changed)
        emit_limit_throttle(r, up->name, shown_verdict(limits.verdict), limits.recovery_ms, &limit,
                            &throttle);
    if (breaker_changed)
        emit_health(r, up->name, breaker);
    return skip;
}

/*
 * A waiter that looks again and must still wait for the same reason is the
 * skip it already recorded in this round, not a new attempt: a request
 * woken many times in a long line keeps one row per upstream and reason.
 */
static bool
repeats_a_skip(const request_t *r, const attempt_t *a, sl_row_skip_t skip)
{
    for (const attempt_t *e = a - 1;
         e >= r->attempts && e->retry == a->retry && e->skipped != SL_ROW_SKIP_NONE; e--) {
        if (e->provider == a->provider && e->skipped == skip)
            return true;
    }
    return false;
}

/*
 * Bedrock without a key: the head is signed with SigV4, with the provider's
 * `aws` credentials or else the standard AWS_* environment, both resolved
 * at config load (config.md).
 */
static bool
sign_for_aws(request_t *r, const sl_provider_t *p, const sl_upstream_head_t *info)
{
    sl_aws_credentials_t creds = {p->aws_access_key_id, p->aws_secret_access_key, p->aws_session_token};
    if (creds.access_key_id == NULL || creds.secret_access_key == NULL || p->region == NULL)
        return false;
    return sl_sigv4_sign_head(&r->head, info, r->body.base, r->body.len, p->region, &creds, sl_wall_ms());
}

static void
start_hop(request_t *r, size_t cand)
{
    const sl_provider_t *p = provider_of(r, cand);
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[cand].provider];
    r->cur = cand;
    attempt_t *a = new_attempt(r, cand);
    if (a == NULL) {
        answer_with_failure(r);
        return;
    }
    a->backoff_ms = r->round_backoff_ms;
    r->round_backoff_ms = -1;
    sl_row_skip_t skip = claim_upstream(r, cand);
    if (skip != SL_ROW_SKIP_NONE) {
        if (repeats_a_skip(r, a, skip)) {
            r->n_attempts--;
        } else {
            a->skipped = skip;
            emit_attempt(r, a);
        }
        r->skips[cand] = skip;
        if (skip == SL_ROW_SKIP_BUSY && !r->last.any) {
            r->last.any = true;
            r->last.code = SL_CODE_GW_UPSTREAM_BUSY;
            r->last.status = 0;
            snprintf(r->last.detail, sizeof(r->last.detail), "%u", p->max_concurrent);
        }
        r->next = cand + 1;
        next_hop(r);
        return;
    }
    r->up = up;
    r->hop_uncounted = false;
    if (r->key_pause_ms > 0) {
        a->pause_ms = r->key_pause_ms;
        r->key_pause_ms = 0;
    }
    if (r->queued) {
        a->pause_ms = (a->pause_ms > 0 ? a->pause_ms : 0) + sl_now_ms() - r->queued_since_ms;
        stop_waiting(r, true);
        if (events_on(r)) {
            sl_proto_event_t ev;
            emit(r, sl_bus_request_dequeued(&ev, sl_wall_ms(), r->id, p->name));
        }
    }
    sl_headers_t headers = sl_request_headers(r->req);
    r->body = body_for_hop(r, r->cands[cand].model, r->hop_needs_usage);
    sl_upstream_request_t ureq = {
        .method = "POST",
        .target = r->req->path.base,
        .target_len = r->req->path.len,
        .model = r->cands[cand].model,
        .headers = &headers,
        .body_len = r->body.len,
    };
    sl_strbuf_t head = {0};
    sl_upstream_head_t info;
    sl_head_status_t built = sl_dialect_upstream_head(p, &ureq, &head, &info);
    if (built != SL_HEAD_OK) {
        /* The client's path (a byte no request line may carry) or the provider's config: nothing to retry. */
        free(sl_strbuf_finish(&head));
        end_hop(r);
        r->last.any = true;
        r->last.code =
            built == SL_HEAD_BAD_TARGET ? SL_CODE_GW_REQUEST_BAD_PATH : SL_CODE_GW_UPSTREAM_UNUSABLE;
        snprintf(r->last.detail, sizeof(r->last.detail), "%s",
                 built == SL_HEAD_BAD_TARGET ? "the path" : "its base URL or key");
        close_attempt(r, SL_ROW_HOP_ERROR, r->last.code, r->last.detail);
        answer_with_failure(r);
        return;
    }
    r->head = sl_strbuf_finish(&head);
    if (info.auth == SL_UPSTREAM_AUTH_SIGV4_PENDING && !sign_for_aws(r, p, &info)) {
        end_hop(r);
        r->last.any = true;
        r->last.code = SL_CODE_GW_UPSTREAM_UNUSABLE;
        snprintf(r->last.detail, sizeof(r->last.detail), "%s", "no AWS credentials to sign with");
        close_attempt(r, SL_ROW_HOP_ERROR, r->last.code, r->last.detail);
        answer_with_failure(r);
        return;
    }
    r->up_status = 0;
    r->state = REQ_WAITING_HEAD;
    h2o_buffer_consume(&r->rx, r->rx->size);
    r->parsed = 0;
    memset(&r->stream, 0, sizeof(r->stream));
    const sl_failover_t *fo = &r->config->failover;
    bool by_address = false;
    sl_hop_params_t params = {
        .pool = sl_upstream_pool(up, r->io->loop, &by_address),
        .by_address = by_address,
        .head = h2o_iovec_init(r->head, strlen(r->head)),
        .body = r->body,
        .connect_ms = fo->connect_timeout_secs * 1000,
        .idle_ms = fo->idle_timeout_secs * 1000,
        .total_ms = fo->total_timeout_secs * 1000,
    };
    r->hops_sent++;
    r->hop = sl_hop_start(r->io, &params, &hop_callbacks, r);
}

static void
next_hop(request_t *r)
{
    r->state = REQ_ROUTING;
    for (size_t i = r->next; i < r->n_cands; i++) {
        if (r->in_round[i] && r->skips[i] == SL_ROW_SKIP_NONE) {
            start_hop(r, i);
            return;
        }
    }
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->in_round[i] && skip_may_pass(r->skips[i])) {
            wait_or_give_up(r);
            return;
        }
    }
    answer_with_failure(r);
}

static sl_row_skip_t
row_skip_of(sl_skip_t s)
{
    switch (s) {
    case SL_SKIP_DISABLED:
        return SL_ROW_SKIP_DISABLED;
    case SL_SKIP_NONE:
        return SL_ROW_SKIP_NONE;
    default:
        return SL_ROW_SKIP_NOT_OFFERED;
    }
}

/* The conversation's name: a session header, else the client and its first user message (behaviour.md §1.5).
 */
static uint64_t
conversation_key(request_t *r)
{
    const sl_hash_key_t *key = &r->gw->affinity_key;
    const char *client = r->in.client != NULL ? r->in.client->name : "";
    char previous[128];
    size_t previous_len;
    if (r->in.fields.previous_response_id.len > 0 &&
        sl_jscan_string(r->in.body, r->in.fields.previous_response_id, previous, sizeof(previous),
                        &previous_len))
        return sl_affinity_key_response(key, client, strlen(client), previous, previous_len);
    const h2o_iovec_t *session = NULL;
    if (session_header(r, &session))
        return sl_affinity_key_session(key, client, strlen(client), session->base, session->len);
    if (r->in.fields.first_user.len > 0)
        return sl_affinity_key_message(key, client, strlen(client), r->in.body, r->in.fields.first_user);
    return 0;
}

static sl_affinity_effect_t
apply_affinity(request_t *r)
{
    r->sealed_history = r->in.fields.encrypted_content || r->in.fields.thinking_signature ||
                        r->in.fields.previous_response_id.len > 0;
    r->conversation = conversation_key(r);
    if (r->conversation == 0)
        return SL_AFFINITY_NONE;
    sl_affinity_pin_t pin;
    pthread_mutex_lock(&r->gw->affinity_lock);
    bool found = sl_affinity_get(r->gw->affinity, r->conversation, sl_now_ms(), &pin);
    pthread_mutex_unlock(&r->gw->affinity_lock);
    sl_affinity_effect_t effect = sl_affinity_apply(r->config, &r->gw->affinity_key, found ? &pin : NULL,
                                                    r->sealed_history, r->cands, r->n_cands);
    if (effect != SL_AFFINITY_NONE)
        sl_log_debug("request %llu: affinity %s", (unsigned long long)r->id,
                     effect == SL_AFFINITY_RELEASED ? "released" : sl_affinity_effect_slug(effect));
    return effect;
}

/* The candidate list with this moment's skips (behaviour.md §2); false when nothing matches. */
static bool
choose_candidates(request_t *r)
{
    const sl_config_t *c = r->config;
    r->cands = h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->cands) * (c->n_providers + 1));
    r->skips = h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->skips) * (c->n_providers + 1));
    r->in_round = h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->in_round) * (c->n_providers + 1));
    r->failed_temporary =
        h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->failed_temporary) * (c->n_providers + 1));
    r->recovery_ms = h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->recovery_ms) * (c->n_providers + 1));
    for (size_t i = 0; i <= c->n_providers; i++) {
        r->in_round[i] = true;
        r->failed_temporary[i] = false;
    }
    size_t route;
    uint64_t counter = atomic_fetch_add(&r->gw->balance_counter, 1);
    if (!sl_route_select(c, r->in.endpoint.dialect, r->in.model, counter, r->cands, &r->n_cands, &route))
        return false;
    r->affinity_effect = apply_affinity(r);
    emit_routed(r, route, r->affinity_effect);
    bool cooling[r->n_cands + 1];
    size_t offered = 0;
    int64_t now = sl_now_ms();
    for (size_t i = 0; i < r->n_cands; i++) {
        r->skips[i] = row_skip_of(r->cands[i].skip);
        cooling[i] = false;
        if (r->skips[i] != SL_ROW_SKIP_NONE)
            continue;
        offered++;
        sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
        pthread_mutex_lock(&up->lock);
        cooling[i] = sl_breaker_is_cooling(&up->breaker, now);
        pthread_mutex_unlock(&up->lock);
    }
    /* Compact to the offered candidates for the cooling rule, then map back. */
    bool off_cooling[offered + 1], off_skip[offered + 1];
    size_t k = 0;
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] == SL_ROW_SKIP_NONE)
            off_cooling[k++] = cooling[i];
    }
    size_t skipped = sl_breaker_filter(off_cooling, offered, off_skip);
    r->cooling_ignored = offered > 1 && skipped == 0 && offered > 0 && off_cooling[0];
    r->n_offered = offered;
    k = 0;
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] == SL_ROW_SKIP_NONE && off_skip[k++])
            r->skips[i] = SL_ROW_SKIP_COOLING;
    }
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] != SL_ROW_SKIP_NONE) {
            attempt_t *a = new_attempt(r, i);
            if (a != NULL) {
                a->skipped = r->skips[i];
                emit_attempt(r, a);
            }
        }
    }
    return offered > 0;
}

static void
on_start(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, start_timer, t);
    r->next = 0;
    if (admit_key(r))
        next_hop(r);
}

/* ---- intake and GET /v1/models -------------------------------------------------------------- */

static void
on_request_disposed(void *p)
{
    request_t *r = p;
    h2o_linklist_unlink(&r->link);
    unwatch_client(r);
    sl_timer_cancel(&r->io->timers, &r->start_timer);
    sl_timer_cancel(&r->io->timers, &r->backoff_timer);
    sl_timer_cancel(&r->io->timers, &r->keepalive_timer);
    sl_timer_cancel(&r->io->timers, &r->stall_timer);
    stop_waiting(r, false);
    r->req = NULL;
    if (r->state != REQ_DONE) {
        close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_UPSTREAM_STATUS, "client went away");
        finish(r, SL_ROW_CANCELLED, r->up_status, false, SL_CODE_GW_UPSTREAM_STATUS, NULL);
    }
    end_hop(r);
    h2o_buffer_dispose(&r->rx);
    h2o_buffer_dispose(&r->tx);
    free(r->attempts);
    sl_snapshot_release(r->snapshot);
}

bool
sl_request_peer_is_loopback(h2o_req_t *req)
{
    struct sockaddr_storage ss;
    socklen_t len = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    if (len == 0)
        return false;
    char host[64];
    /* The worker's internal socket: Responses WebSocket turns, whose client was checked at the upgrade. */
    if (ss.ss_family == AF_UNIX)
        return true;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
    else
        return false;
    const char *mapped = strncmp(host, "::ffff:", 7) == 0 ? host + 7 : host;
    return sl_ip_is_loopback(mapped);
}

/* GET /v1/models: the models routes can serve, in Anthropic's shape when asked in it, else OpenAI's. */
static void
answer_models(h2o_req_t *req, const sl_config_t *c)
{
    bool anthropic = h2o_find_header_by_str(&req->headers, H2O_STRLIT("anthropic-version"), -1) >= 0;
    sl_strbuf_t body = {0};
    sl_strbuf_appendf(&body, anthropic ? "{\"data\":[" : "{\"object\":\"list\",\"data\":[");
    size_t listed = 0;
    for (size_t i = 0; i < c->n_providers; i++) {
        const sl_provider_t *p = &c->providers[i];
        for (size_t m = 0; m < p->n_models + p->n_model_map; m++) {
            const char *name = m < p->n_models ? p->models[m] : p->model_map[m - p->n_models].name;
            if (strpbrk(name, "*?\"\\") != NULL || p->disabled)
                continue;
            if (anthropic)
                sl_strbuf_appendf(&body, "%s{\"type\":\"model\",\"id\":\"%s\",\"display_name\":\"%s\"}",
                                  listed ? "," : "", name, name);
            else
                sl_strbuf_appendf(&body, "%s{\"id\":\"%s\",\"object\":\"model\",\"owned_by\":\"%s\"}",
                                  listed ? "," : "", name, p->name);
            listed++;
        }
    }
    sl_strbuf_appendf(&body, anthropic ? "],\"has_more\":false}" : "]}");
    send_made_answer(req, 200, "application/json", &body);
}

/*
 * Count-tokens answered here when no upstream can: an estimate of about one
 * token per 4 bytes of body, marked as such in a header and in the DB row.
 */
static void
answer_token_estimate(request_t *r)
{
    end_hop(r);
    int64_t tokens = (int64_t)(r->in.body_len + 3) / 4;
    sl_strbuf_t body = {0};
    if (r->in.endpoint.dialect == SL_DIALECT_OPENAI_RESPONSES)
        sl_strbuf_appendf(&body, "{\"object\":\"response.input_tokens\",\"input_tokens\":%lld}",
                          (long long)tokens);
    else
        sl_strbuf_appendf(&body, "{\"input_tokens\":%lld}", (long long)tokens);
    r->stream.usage.input = tokens;
    finish(r, SL_ROW_ANSWERED_LOCALLY, 200, false, SL_CODE_GW_NOT_FOUND, NULL);
    h2o_req_t *req = r->req;
    if (req == NULL) {
        free(sl_strbuf_finish(&body));
        return;
    }
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-sluice-estimated"), 0, NULL,
                          H2O_STRLIT("true"));
    send_made_answer(req, 200, "application/json", &body);
}

/* A request in the request's pool (freed with it), on the worker's list, with its own snapshot reference. */
static request_t *
request_new(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_t *snapshot)
{
    request_t *r = h2o_mem_alloc_shared(&req->pool, sizeof(*r), on_request_disposed);
    memset(r, 0, sizeof(*r));
    r->req = req;
    r->io = io;
    r->client_fd = -1;
    if (req->version < 0x200) {
        h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
        if (sock != NULL)
            r->client_fd = h2o_socket_get_fd(sock);
    }
    h2o_linklist_insert(&io->requests, &r->link);
    r->gw = gw;
    r->snapshot = snapshot;
    atomic_fetch_add(&snapshot->refs, 1);
    r->config = snapshot->config;
    r->id = atomic_fetch_add(&gw->next_id, 1) + 1;
    r->started_ms = sl_now_ms();
    r->started_wall_ms = sl_wall_ms();
    r->ttfb_ms = r->ttft_ms = SL_ROW_ABSENT;
    r->path = req->path;
    r->hint_ms = -1;
    r->round_backoff_ms = -1;
    r->last_sent_ms = r->started_ms;
    r->deadline_ms = sl_retry_deadline_ms(r->started_ms, r->config->failover.wait_secs, &gw->retry_params);
    h2o_buffer_init(&r->rx, &h2o_socket_buffer_prototype);
    h2o_buffer_init(&r->tx, &h2o_socket_buffer_prototype);
    return r;
}

void
sl_request_record_refused(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_t *snapshot,
                          int status, sl_code_t code, const char *text)
{
    request_t *r = request_new(req, io, gw, snapshot);
    if (!sl_endpoint_parse(req->input.method.base, req->input.method.len, req->input.path.base,
                           req->input.path.len, &r->in.endpoint))
        r->in.endpoint.dialect = SL_DIALECT_COUNT;
    memcpy(r->in.model, r->in.endpoint.model, sizeof(r->in.model));
    emit_started(r);
    r->gateway_error = true;
    finish(r, SL_ROW_FAILED, status, true, code, text);
}

int
sl_request_serve(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_t *snapshot)
{
    request_t *r = request_new(req, io, gw, snapshot);

    /* Safe mode and shutdown refuse everything, in the client's dialect when its path tells it. */
    sl_code_t refused = snapshot->safe_mode ? SL_CODE_GW_SAFE_MODE : SL_CODE_GW_SHUTTING_DOWN;
    if (snapshot->safe_mode || atomic_load(&gw->stopping)) {
        if (!sl_endpoint_parse(req->method.base, req->method.len, req->path.base, req->path.len,
                               &r->in.endpoint))
            r->in.endpoint.dialect = SL_DIALECT_COUNT;
        sl_msg_t msg = sl_msg_make(refused, NULL);
        emit_started(r);
        r->gateway_error = true;
        sl_request_send_error(req, r->in.endpoint.dialect, sl_code_status(refused), refused, msg.text);
        finish(r, SL_ROW_FAILED, sl_code_status(refused), true, refused, msg.text);
        sl_msg_free(&msg);
        return 0;
    }

    sl_headers_t headers = sl_request_headers(req);
    sl_intake_input_t input = {
        .method = req->method.base,
        .method_len = req->method.len,
        .path = req->path.base,
        .path_len = req->path.len,
        .headers = &headers,
        .body = req->entity.base != NULL ? req->entity.base : "",
        .body_len = req->entity.len,
        .peer_is_loopback = sl_request_peer_is_loopback(req),
    };
    sl_intake_refusal_t refusal;
    bool accepted = sl_intake(r->config, &input, &r->in, &refusal);
    if (r->in.endpoint.op != SL_OP_LIST_MODELS)
        emit_started(r);
    if (!accepted) {
        r->gateway_error = true;
        char path[256];
        snprintf(path, sizeof(path), "%.*s", (int)req->path_normalized.len, req->path_normalized.base);
        char max[24];
        snprintf(max, sizeof(max), "%llu", (unsigned long long)r->config->max_body_bytes);
        sl_msg_t msg = sl_msg_make(refusal.code, "method", refusal.detail, "path", path, "where",
                                   refusal.detail, "detail", refusal.detail, "size", refusal.detail, "max",
                                   max, "what", refusal.detail, NULL);
        sl_request_send_error(req, r->in.endpoint.dialect, refusal.status, refusal.code, msg.text);
        finish(r, SL_ROW_FAILED, refusal.status, true, refusal.code, msg.text);
        sl_msg_free(&msg);
        return 0;
    }
    if (r->in.endpoint.op == SL_OP_LIST_MODELS) {
        answer_models(req, r->config);
        finish(r, SL_ROW_ANSWERED_LOCALLY, 200, false, SL_CODE_GW_NOT_FOUND, NULL);
        return 0;
    }
    if (!choose_candidates(r)) {
        if (r->in.endpoint.op == SL_OP_COUNT_TOKENS) {
            answer_token_estimate(r);
            return 0;
        }
        r->last.any = true;
        r->last.code = SL_CODE_GW_ROUTE_NO_MATCH;
        answer_with_failure(r);
        return 0;
    }
    if (r->in.client != NULL && snapshot->limits.clients != NULL)
        r->key_limits = snapshot->limits.clients[r->in.client - r->config->clients];
    watch_client_soon(r);
    /*
     * The first hop starts on the next loop turn: an HTTP/2 stream opened and
     * reset in one read is disposed before any upstream work (the rapid-reset
     * measure of stack-notes.md).
     */
    sl_timer_arm(&r->io->timers, &r->start_timer, sl_now_ms(), on_start);
    if (r->in.stream)
        sl_timer_arm(&r->io->timers, &r->keepalive_timer,
                     sl_keepalive_due_ms(true, r->started_ms, r->started_ms, &r->gw->retry_params),
                     on_keepalive);
    return 0;
}

void
sl_gateway_init(sl_gateway_t *gw, sl_recorder_t *recorder)
{
    gw->recorder = recorder;
    gw->bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    gw->retry_params = (sl_retry_params_t){.time_scale = 1};
    const char *scale = getenv("SLUICE_TEST_TIME_SCALE");
    if (scale != NULL) {
        char *end;
        double v = strtod(scale, &end);
        if (*end == '\0' && v > 0 && v <= 1) {
            gw->retry_params = (sl_retry_params_t){.time_scale = v, .no_jitter = true};
            sl_log_warn(
                "SLUICE_TEST_TIME_SCALE=%g: retry pauses, hints and keep-alives are scaled, without jitter "
                "(tests only)",
                v);
        }
    }
    pthread_mutex_init(&gw->affinity_lock, NULL);
    gw->affinity = sl_affinity_new(SL_AFFINITY_DEFAULT_CAPACITY, SL_AFFINITY_DEFAULT_IDLE_MS);
    /* The hash key only has to be unknown to clients. */
    if (getrandom(&gw->affinity_key, sizeof(gw->affinity_key), 0) != (ssize_t)sizeof(gw->affinity_key)) {
        gw->affinity_key.k0 = (uint64_t)sl_wall_ms() * 0x9E3779B97F4A7C15ull;
        gw->affinity_key.k1 = (uint64_t)sl_now_ms() ^ (uint64_t)(uintptr_t)gw;
    }
}
