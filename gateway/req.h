/*
 * The state of one client request, shared by the files of the request path (request.c,
 * routing.c, admission.c, upstream_write.c, upstream_read.c, hold.c, failover.c, answer.c,
 * accounting.c, telemetry.c). Nothing outside them includes it.
 */
#ifndef SL_REQ_H
#define SL_REQ_H

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
#include "core/next_step.h"
#include "core/outcome.h"
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
#include "core/otlp.h"
#include "core/trace_context.h"
#include "core/xalloc.h"
#include "hop.h"
#include "shared_state.h"
#include "waitq.h"
#include "intake.h"
#include "log.h"

#define HOLD_CAP              (1u << 20)  /* opening bytes held before the first content (behaviour.md §4) */
#define ERROR_BODY_CAP        (64u << 10) /* an error answer is read this far before it is judged */
#define CLIENT_BUFFER_CAP     (4u << 20)  /* bytes waiting for a slow client before upstream reads pause */
#define MAX_ATTEMPTS          64
#define ANSWER_TAIL_CAP       (16u << 10) /* the end of a whole JSON answer, kept to read its usage */
#define WATCH_CLIENT_AFTER_MS 20          /* see sl__watch_client_soon */

/*
 * The life of a request (behaviour.md §1-6). Moved only by sl__set_phase
 * (request.c), along its table of allowed moves.
 */
typedef enum {
    PHASE_ROUTING,       /* choosing the next candidate */
    PHASE_BACKOFF,       /* every candidate of the round failed; a retry round starts when the pause ends */
    PHASE_QUEUED,        /* no candidate can take it now: it waits in queues (§6, §7) */
    PHASE_WAITING_HEAD,  /* a hop is out, nothing has come back */
    PHASE_HELD,          /* a 2xx head came; its bytes are held until content (§4) */
    PHASE_READING_ERROR, /* a non-2xx head came; its body is read to judge it */
    PHASE_STREAMING,     /* the answer is going to the client */
    PHASE_DONE,          /* ended: answered (or the client is gone), recorded, settled */
    PHASE_COUNT
} req_phase_t;

/*
 * What the client has been sent. Moved only by sl__set_client_out (hold.c),
 * along its table of allowed moves.
 */
typedef enum {
    OUT_NONE,      /* nothing: any answer may still come, whole */
    OUT_KEEPALIVE, /* a 200 stream head and keep-alives: a failure can only be told inside the stream */
    OUT_ANSWER,    /* the answer is going out: its head, then its bytes */
    OUT_FINAL,     /* its end is queued: what is parsed goes out, then the stream ends (or aborts) */
    OUT_CLOSED,    /* h2o has the answer's end, or the client is gone: r->req is NULL from here */
    OUT_COUNT
} client_out_t;

/* Whose words the answer going out is. */
typedef enum {
    ANSWER_UPSTREAM,    /* the upstream's answer */
    ANSWER_HANDED_OVER, /* the upstream's failure, passed on as it sent it */
    ANSWER_GATEWAY,     /* the gateway's own error */
} answer_kind_t;

/* How a request ends (sl__end_request): what the client gets follows from this and from what it has. */
typedef enum {
    END_SERVED,         /* the upstream's answer is whole: what is left goes out, then the end */
    END_HANDED_OVER,    /* the upstream's failure, as it sent it, is the answer */
    END_GATEWAY_ERROR,  /* the gateway's error: whole while nothing went out, else inside the stream */
    END_BROKEN,         /* the answer going out cannot be finished: an in-stream error, or a whole one cut */
    END_LOCAL,          /* the gateway's own answer (the models list, a token estimate), given whole */
    END_CANCELLED,      /* an operator cancelled it */
    END_CLIENT_LEFT,    /* the client went away */
    END_CLIENT_STALLED, /* the client read nothing for idle_timeout_secs */
} req_end_how_t;

typedef struct {
    req_end_how_t how;
    int status;          /* the row's (and a whole answer's) status */
    const sl_msg_t *msg; /* the error the client gets (and the row keeps); NULL for none */
    sl_strbuf_t *body;   /* END_LOCAL: the answer's body (taken) */
    const char *type;    /* END_LOCAL: its content type */
    bool cut; /* END_HANDED_OVER: a stream that ended without its end marker gets the gateway's error */
} req_end_t;

/* The upstream's answer being read (upstream_read.c): one per hop. */
typedef struct {
    int up_status;
    h2o_headers_t up_headers; /* hop-by-hop ones dropped */
    int64_t up_content_length;
    bool events; /* a stream of events this gateway understands: SSE, or (frames) eventstream */
    bool frames; /* Bedrock: application/vnd.amazon.eventstream frames instead of SSE */
    sl_sse_scanner_t scanner;
    char scratch[4096];
    sl_stream_t stream;
    bool told_error;   /* an error event of the upstream's went to the client as it was */
    char *answer_tail; /* the last bytes of a whole (non-SSE) 2xx answer (malloc), where its usage is */
    size_t answer_tail_len, answer_tail_cap;
} hop_read_t;

/* One hop, or one candidate skipped, as its row and AttemptView tell it. */
typedef struct {
    size_t provider;
    const char *model;
    sl_hop_outcome_t outcome;
    int status;
    bool has_error;
    sl_code_t error_code;
    char error_detail[128];
    int64_t started_ms, ms;
    int64_t started_ns, ended_ns; /* monotonic, for its trace span */
    sl_attempt_label_t label;     /* its outcome in the metrics and its span, once closed */
    sl_skip_t skipped;
    bool closed;             /* its outcome is set: reported once */
    bool has_reason;         /* a failed hop: the step the request took after it */
    sl_step_reason_t reason; /* read only with has_reason */
    uint32_t retry;          /* the retry round of this hop; 0 = the first round */
    int64_t pause_ms;        /* time queued before this hop; -1 = none */
    int64_t backoff_ms;      /* the pause before its round, on the round's first hop only; -1 = none */
    bool hedge;              /* a first-token hedge: sent while an earlier hop still waited for content */
} attempt_t;

/* Why the last hop failed, kept for the final answer when no candidate is left. */
typedef struct {
    bool any;
    sl_code_t code;
    size_t provider; /* the provider concerned; SIZE_MAX = none */
    int status;
    char detail[160];
} last_failure_t;

/*
 * Everything one hop keeps while it is out, in the request's fields or, for
 * the other hop of a first-token hedge, parked here (hedge.c swaps them).
 */
typedef struct {
    req_phase_t hop_phase; /* the request's phase while this hop is the installed one */
    size_t cur, attempt;
    sl_hop_t *hop;
    sl_upstream_t *up;
    bool is_probe, fresh, strip_usage_chunk;
    char *head, *body_copy;
    h2o_iovec_t body;
    hop_read_t rd;
    h2o_buffer_t *rx;
    size_t parsed;
    bool end_follows;
    bool throttle_probe;
    sl_upstream_t *dispatching;
    sl_charge_t up_charge;
    bool up_charge_persisted, hop_uncounted, hop_needs_usage;
    uint64_t up_slot;
    int64_t sent_ns, upstream_in_ns;
} hop_slot_t;

typedef enum {
    HEDGE_NONE,     /* one hop (or none) is out */
    HEDGE_CLAIMING, /* the hedge's upstream is being claimed; the first hop goes on */
    HEDGE_RUNNING,  /* two hops are out: the first to have content wins */
} hedge_state_t;

/* Which of a hedge's two hops: the request's fields hold one, the parked slot the other. */
typedef enum { HEDGE_HOP_FIRST, HEDGE_HOP_SECOND } hedge_hop_t;

typedef struct request request_t;

/*
 * A request event held unbuilt while nobody watches live (telemetry.c): its
 * kind, when it happened, and what its builder reads besides the request.
 */
typedef enum { HELD_STARTED, HELD_ROUTED, HELD_ATTEMPT, HELD_HEADERS, HELD_FIRST_TOKEN } held_kind_t;

typedef struct {
    held_kind_t kind;
    int64_t at_ms;
    union {
        struct {
            size_t route;
            sl_affinity_effect_t effect;
        } routed;
        size_t attempt; /* an index into the request's attempts */
        struct {
            int status;
            int64_t ttfb_ms;
        } headers;
        int64_t ttft_ms;
    };
} held_event_t;

/* Held events a request keeps at most: a full hold is built (telemetry.c). */
#define HELD_EVENTS_MAX 8

/* What a hedged hop's callbacks carry: the request and which hop they are for. */
typedef struct {
    request_t *r;
    hedge_hop_t which;
} hedge_tag_t;

struct request {
    h2o_linklist_t link; /* in io->requests while it lives */
    h2o_req_t *req;      /* NULL once out.state is OUT_CLOSED */
    sl_worker_io_t *io;
    sl_gateway_t *gw;
    sl_snapshot_lease_t *lease; /* this worker's, on snapshot: held while the request lives */
    sl_snapshot_t *snapshot;
    const sl_config_t *config;
    uint64_t id;
    int64_t started_ms, started_wall_ms;
    req_phase_t phase;
    sl_intake_t in;
    h2o_iovec_t path; /* as the client sent it; lives in the request pool */
    sl_timer_t start_timer;

    /* The candidates and the conversation (routing.c). */
    sl_candidate_t *cands;
    sl_skip_t *skips;
    size_t n_cands, next;
    size_t n_offered;      /* candidates not skipped for config reasons */
    bool cooling_ignored;  /* every candidate was cooling: all are tried (fail open) */
    uint64_t conversation; /* the affinity key; 0 = none */
    bool sealed_history;   /* the body carries history bound to one upstream account */
    sl_affinity_effect_t affinity_effect;
    uint64_t home;         /* the upstream the conversation goes back to (sl_affinity_pin_t.home); 0 = none */
    size_t route;          /* the route that matched (an index into config->routes, or SL_ROUTE_BY_MODELS) */
    bool routed;           /* route is set: the request got as far as its candidates */
    bool context_switched; /* the route's context_fallback replaced the candidates (§1.6) */
    char response_id[128]; /* Responses: the id of the answer being served, "" until seen */

    /* Its events while nobody watches live (telemetry.c). */
    struct {
        held_event_t events[HELD_EVENTS_MAX];
        size_t n;
        bool built;          /* its events are built as they happen, and those held so far were */
        h2o_linklist_t link; /* in io->held_events while it holds any, oldest request first */
    } held;

    /* The hop in flight (request.c, upstream_write.c). */
    size_t cur; /* its candidate */
    sl_hop_t *hop;
    sl_upstream_t *up;      /* its upstream; its claim (a slot, probes, the charge) held while set */
    bool is_probe;          /* it is its upstream's half-open breaker probe */
    bool fresh;             /* it goes out on a connection opened for it (a stale keep-alive's resend) */
    char *head;             /* the upstream request head (malloc) */
    char *body_copy;        /* the client's body with the upstream's model name (malloc), for this hop only */
    h2o_iovec_t body;       /* the body sent upstream: the client's, or body_copy (never outlives it) */
    bool strip_usage_chunk; /* sluice asked a Chat stream for usage the client did not ask for */

    /* The upstream's answer being read (upstream_read.c). */
    hop_read_t rd;

    /* What goes to the client (hold.c). */
    struct {
        client_out_t state;
        answer_kind_t answer;
        h2o_buffer_t *rx; /* upstream bytes not yet handed to h2o */
        h2o_buffer_t *tx; /* the bytes of the h2o_send in flight */
        size_t parsed;    /* rx[0..parsed) are whole events (or, without SSE, any bytes): forwardable */
        bool sending;     /* an h2o_send is in flight (h2o allows one) */
        bool reads_paused;
        bool end_follows; /* the bytes being processed are the upstream's last (see sl__flush_to_client) */
        h2o_send_state_t final_state;
        h2o_generator_t generator;
        sl_timer_t keepalive_timer;
        sl_timer_t stall_timer; /* armed while a send to the client is in flight (see on_client_stalled) */
        int client_fd;          /* HTTP/1: the client's socket, shut down when it stalls; else -1 */
        sl_timer_t watch_timer; /* a request still going this long has its HTTP/1 client watched */
        sl_watch_entry_t watch; /* the HTTP/1 client socket, watched for the client leaving */
        int64_t last_sent_ms;   /* when the client last got bytes (or the request arrived) */
        uint64_t bytes_out;     /* body bytes handed to the client */
        bool first_token_seen;
        int64_t ttfb_ms, ttft_ms;
    } out;

    /* Retrying (behaviour.md §5, failover.c). */
    struct {
        int64_t deadline_ms;    /* arrival + failover.wait_secs: nothing waits or retries past it */
        uint32_t round;         /* 0 = the first round, then the retry round */
        bool *in_round;         /* candidates taking part in this round */
        bool *failed_temporary; /* candidates whose failure in this round was temporary */
        int64_t hint_ms;        /* the longest retry hint an upstream gave in this round; -1 = none */
        int64_t round_backoff_ms;
        bool waited; /* sluice retried or waited: a handed-over error says x-should-retry: false */
        last_failure_t last;
        sl_timer_t backoff_timer;
    } retry;

    /* Waiting on upstreams and the key (behaviour.md §6, §7; admission.c). */
    struct {
        sl_timer_t wait_timer;
        sl_waiter_t *waiter; /* while it is in queues */
        bool queued;         /* RequestQueued went out, RequestDequeued not yet */
        int64_t queued_since_ms;
        bool counts_waiting; /* its body counts against limits.max_waiting_bytes */
        sl_upstream_t
            *dispatching;      /* it left this upstream's queue for a hop: the next goes once it is sent */
        bool throttle_probe;   /* the hop in flight is its upstream's probe after a 429 pause */
        bool key_waiting;      /* it waits in the key's queue (gate key_window) */
        bool woken;            /* woken while its claim was out: it looks again once it is in line */
        int64_t key_pause_ms;  /* time it waited for its key: part of the first hop's pause_ms */
        int64_t *recovery_ms;  /* per candidate: when its full window has room, its period resets */
        sl_shared_call_t call; /* the shared state's answer awaited: a claim, the key's admission, a line */
        size_t claiming;       /* the candidate whose upstream is being claimed */
        char too_large_limit[SL_LIMIT_TEXT_MAX]; /* the limit a request too large for it met */
    } wait;

    /* Usage limits (behaviour.md §7; accounting.c). */
    struct {
        sl_limit_set_t *key_limits; /* the client key's limits; NULL: none */
        sl_charge_t key_charge;     /* the key's charge, once, at admission */
        sl_charge_t up_charge;      /* the current hop's upstream charge, from when it was sent */
        bool up_charge_persisted;   /* the request DB counts up_charge (from when the hop was sent) */
        uint64_t up_slot;           /* the current hop's slot leased cluster-wide (0: none) */
        sl_shared_call_t news;      /* the shared state's news of the hop's 429 state awaited */
        bool hop_uncounted;         /* a 429: its upstream charge is taken back */
        bool key_counts_tokens;     /* the key's limits count tokens or cost: its usage must be reported */
        uint32_t hops_sent;         /* a request answered by the gateway alone costs its key nothing */
        bool hop_needs_usage;       /* so do the hop's upstream's limits (or the key's) */
    } acct;

    /* The record (telemetry.c). */
    attempt_t *attempts; /* owned; grows with the hops, most requests make one or two */
    size_t n_attempts, cap_attempts;
    size_t attempt; /* the hop in flight's attempt (an index into attempts); SIZE_MAX: none */
    bool recorded;

    /* What the metrics count at the end (telemetry.c, metrics.h). */
    struct {
        sl_trouble_t trouble; /* the first trouble the request met (core/rescue.h) */
        sl_gate_t wait_gate;  /* what it first waited for; SL_GATE_COUNT: it did not wait */
        bool has_failure;     /* the last failed hop's class: */
        sl_failure_class_t failure;
        int64_t arrival_ns, sent_ns, upstream_in_ns; /* arrival; the hop's send; the latest upstream read */
        int64_t overhead_ns; /* sluice's own time, once its answer started; -1: not measured */
    } m;

    /* Its trace (observability.md; telemetry.c): set at arrival when telemetry is configured. */
    struct {
        bool on;      /* hops send a traceparent */
        bool sampled; /* its spans are exported at its end */
        bool has_parent;
        uint8_t trace_id[16], span_id[8], parent_span_id[8];
        int64_t arrival_unix_ns; /* the wall clock at m.arrival_ns */
        sl_span_event_t events[SL_SPAN_EVENTS_MAX];
        size_t n_events;
    } trace;

    /* The first-token hedge (behaviour.md §4; hedge.c). */
    struct {
        hedge_state_t state;
        hedge_hop_t installed; /* whose hop the request's fields hold while a hedge is out */
        hop_slot_t parked;     /* the other hop's */
        hedge_tag_t tags[2];   /* by hedge_hop_t */
        sl_timer_t timer;      /* the first hop's first_token_secs */
        size_t armed_attempt;  /* the attempt the timer was armed for */
        size_t next_cand;      /* the next later candidate the hedge may claim */
        size_t first_provider; /* the hedged (first) hop's provider, for the metrics */
        size_t resume_after;   /* the hedge failed: failover goes on after this candidate; SIZE_MAX: none */
    } hedge;
};

/* ---- request.c: phases, hops, the one exit ---- */

/* A state machine of the request path: moves[s] has bit t set when state s may move to state t. */
typedef struct {
    const char *what; /* for the log: "phase", "client output" */
    const unsigned *moves;
    const char *const *names;
    unsigned count;
} req_moves_t;

/* The phases' table (request.c) and the client output's (hold.c). */
extern const req_moves_t sl__phase_moves, sl__client_out_moves;
/* Whether m lets from move to to (states out of range never move). */
static inline bool
sl__may_move(const req_moves_t *m, unsigned from, unsigned to)
{
    return from < m->count && to < m->count && (m->moves[from] & (1u << to)) != 0;
}
const char *sl__state_name(const req_moves_t *m, unsigned state);
/* Logs request id's illegal move from -> to of m, and aborts under assert. */
void sl__illegal_move(const req_moves_t *m, uint64_t id, unsigned from, unsigned to);
/* A move about to be made by request id: an illegal one is logged, and aborts under assert. */
static inline void
sl__check_move(const req_moves_t *m, uint64_t id, unsigned from, unsigned to)
{
    if (!sl__may_move(m, from, to))
        sl__illegal_move(m, id, from, to);
}
/* The only way a phase moves: checked against its table. */
void sl__set_phase(request_t *r, req_phase_t to);
/* A first-token hedge's two hops trade places (hedge.c): *other, the parked hop's phase, and the request's
 * are exchanged. No phase moves: each hop keeps its own. */
void sl__exchange_phase(request_t *r, req_phase_t *other);
/*
 * The one exit: closes the open attempt, lets the hop go, leaves timers and
 * queues, settles the key, emits the end event, writes the row and, last,
 * gives the client what end->how and what it already has call for (a whole
 * error, an in-stream error, the final send, an abort). A second call does
 * nothing. end->body is taken; end->msg is borrowed.
 */
void sl__end_request(request_t *r, const req_end_t *end);
/* sl__end_request with how, the row's (and a whole answer's) status, and the message (borrowed). */
void sl__end_with_error(request_t *r, req_end_how_t how, int status, const sl_msg_t *msg);
/* A monotonic time t as wall clock (now and wall the same moment); -1 and SL_THROTTLE_NEVER become -1. */
int64_t sl__wall_of(int64_t now, int64_t wall, int64_t t);
/* A wall-clock time t (a limit's recovery) on sl_now_ms's clock. */
int64_t sl__mono_of(int64_t now, int64_t wall, int64_t t);
const sl_provider_t *sl__provider_of(const request_t *r, size_t cand);
/* sl_headers_t's accessor over an h2o_headers_t. */
bool sl__header_at(const void *ctx, size_t i, sl_header_t *out);
/* Starts a hop to candidate cand: its attempt, then its upstream's claim (a skip moves on to the next). */
void sl__start_hop(request_t *r, size_t cand);
/* The claimed hop (r->cur, r->up) is built and sent. */
void sl__send_hop(request_t *r);
/* The next candidate of the round from r->next on, else waiting, else the last failure. */
void sl__next_hop(request_t *r);
/* Lets the hop in flight go: its connection, its upstream's slot and charge, its buffers. */
void sl__end_hop(request_t *r);

/* ---- routing.c: candidates and conversations ---- */

/* The candidate list with this moment's skips (behaviour.md §2); false when nothing matches. */
bool sl__choose_candidates(request_t *r);
/* Whether a context-length error may still go on to the route's context_fallback, one of which is offered
 * (§1.6). */
bool sl__may_switch_to_context_fallback(const request_t *r);
/* The route's context_fallback becomes the candidate list (only when sl__may_switch_to_context_fallback). */
void sl__switch_to_context_fallback(request_t *r);
/* The conversation stays with the current candidate's upstream (sticky; sealed when its history is bound). */
void sl__remember_conversation(request_t *r);
/* A served Responses answer seals its id to the current candidate's upstream. */
void sl__remember_response(request_t *r);

/* ---- admission.c: claiming, waiting, the key's limits ---- */

/*
 * Claims candidate cand's upstream for a hop from the shared state; then
 * sl__send_hop with r->up set, or the skip recorded and the next candidate.
 */
void sl__claim_upstream(request_t *r, size_t cand);
/* The claim of candidate cand's upstream for a hop, as the request stands now. */
sl_upstream_claim_t sl__upstream_claim_of(request_t *r, size_t cand);
/* A claim's answer: what the hop took goes into the request (its upstream, probes, charge, slot), or why
 * cand is skipped; the claim's ThrottleChanged / HealthChanged go out. */
void sl__apply_claim(request_t *r, size_t cand, const sl_upstream_claim_result_t *res);
/* The client key's limits, once per request; admitted (or without limits), routing starts at the first
 * candidate. */
void sl__admit_key_then_route(request_t *r);
/* No candidate can take it now: wait on the ones that may recover, or give up (final 429, last failure). */
void sl__wait_or_give_up(request_t *r);
/* Leaves every queue; leaving for a hop, the next in line goes once this one is sent. */
void sl__stop_waiting(request_t *r, bool for_hop);
/* The request released from a queue is on its way (or gone): the next in that queue may go. */
void sl__end_dispatch(request_t *r);
/* A hop goes out after waiting: the time queued is its attempt's pause_ms (RequestDequeued to provider). */
void sl__note_queued_time(request_t *r, attempt_t *a, const char *provider);
/* The hop's upstream answered (anything but a 429): its 429 streak resets, a probe passes. */
void sl__throttle_answered(request_t *r);
/* The hop's upstream answered 429: it pauses (for hint_ms, else its backoff); the hop's charge is taken back.
 */
void sl__throttle_pause(request_t *r, int64_t hint_ms);

/* ---- upstream_write.c: what a hop sends ---- */

/* The head (into *head) and body (r->body, r->body_copy) of a hop to candidate cand. */
sl_head_status_t sl__build_hop_request(request_t *r, size_t cand, sl_strbuf_t *head,
                                       sl_upstream_head_t *info);
/* Signs r->head with SigV4 (Bedrock without a key); false without credentials or a region. */
bool sl__sign_for_aws(request_t *r, const sl_provider_t *p, const sl_upstream_head_t *info);

/* ---- upstream_read.c: the upstream's answer ---- */

/* Forgets the previous hop's answer before a new hop. */
void sl__reset_answer(request_t *r);
extern const sl_hop_callbacks_t sl__hop_callbacks;

/* ---- failover.c: after a failed hop ---- */

/*
 * A hop failed before its answer reached the client: classifies f, asks
 * core/next_step.c what now (conn: how a connection that broke before the
 * head was used; NULL otherwise), records the attempt with the reason, and
 * carries the step out.
 */
void sl__hop_failed(request_t *r, const sl_failure_t *f, const char *detail, int64_t hint_ms,
                    const sl_connection_facts_t *conn);
/* Keeps code and detail (with the current candidate and status) as the last failure. */
void sl__remember_failure(request_t *r, sl_code_t code, const char *detail);
/* The last failure as its message (the caller frees it). */
sl_msg_t sl__last_failure_msg(const request_t *r);
bool sl__has_next_candidate(const request_t *r);
/* Whether the request may still wait or retry at all (wait_secs > 0, not counting tokens, before the
 * deadline). */
bool sl__may_wait(const request_t *r);
/* The candidate a conversation stays on, or SL_RETRY_UNPINNED. */
size_t sl__pinned_candidate(const request_t *r);
/* The retry hint of a failure: the upstream's headers (NULL: none) and its error text. */
int64_t sl__failure_hint(const sl_headers_t *headers, const char *body, size_t len);

/* ---- hold.c: what goes to the client ---- */

/* The only way out.state moves: checked against the table; OUT_CLOSED lets go of r->req. */
void sl__set_client_out(request_t *r, client_out_t to);
bool sl__is_hop_by_hop(const h2o_iovec_t *name);
/* Starts the answer with the upstream's head (behind keep-alives: its bytes only). */
void sl__start_response(request_t *r);
/* Held content arrived (or the hold is over): the answer streams from here, what is parsed first. */
void sl__release_hold(request_t *r);
/* Hands what is parsed to h2o when no send is in flight. */
void sl__flush_to_client(request_t *r);
/* Queues the end: what is parsed goes out, then the stream ends with state. */
void sl__queue_final(request_t *r, h2o_send_state_t state);
/* Cuts the answer (an error end for h2o); drop_pending: what is not out yet is dropped too. */
void sl__abort_answer(request_t *r, bool drop_pending);
/* Appends the gateway's in-stream error in the client's format after what was forwarded. */
void sl__append_stream_error(request_t *r, sl_code_t code, const char *text);
void sl__pause_upstream_reads(request_t *r);
/* The 15 s rule's timer callback. */
void sl__on_keepalive(sl_timer_t *t);
/* Watches an HTTP/1 client for leaving, from WATCH_CLIENT_AFTER_MS on, until the request ends. */
void sl__watch_client_soon(request_t *r);
void sl__unwatch_client(request_t *r);

/* ---- answer.c: the answers the gateway writes ---- */

const char *sl__reason_phrase(int status);
/* The gateway's error (msg, borrowed) as the whole answer, in the client's dialect. */
void sl__send_whole_error(request_t *r, int status, const sl_msg_t *msg);
/* The gateway's own answer (body taken) as the whole answer. */
void sl__send_whole_local(request_t *r, const char *type, sl_strbuf_t *body);
/* A bare answer to an HTTP/1 client that left: it makes h2o close the connection. */
void sl__send_close(request_t *r);
/* Ends with the gateway's error made of the last failure. */
void sl__answer_with_failure(request_t *r);
/* The upstream's failure goes to the client as it sent it (cut: a stream that ended without its end marker).
 */
void sl__hand_over(request_t *r, bool cut);
/* Ends with the final 429 of d; msg is taken. */
void sl__answer_final_429(request_t *r, const sl_wait_decision_t *d, sl_msg_t msg);
/* Answers a request that would wait (code, a Retry-After in seconds) instead. */
void sl__refuse_to_wait(request_t *r, sl_code_t code, const char *retry_after_secs);
/* The final 429 for a request no limit of subject can ever take. */
void sl__answer_too_large(request_t *r, const sl_wait_decision_t *d, const char *subject);
/* GET /v1/models. */
void sl__answer_models(request_t *r);
/* Count-tokens answered with the gateway's estimate. */
void sl__answer_token_estimate(request_t *r);

/* ---- hedge.c: the first-token hedge (behaviour.md §4) ---- */

/* The hop just sent gets its hedge timer, when its route hedges and a later candidate is there. */
void sl__hedge_arm(request_t *r);
/* The installed hop has content (a stream's first, or a whole answer's 2xx head): the other is closed. */
void sl__hedge_content(request_t *r);
/* The installed hop failed and has ended: the other goes on alone. */
void sl__hedge_other_goes_on(request_t *r);
/* A hedge still being claimed is given up (the first hop failed before it went out). */
void sl__hedge_abandon(request_t *r);
/* The request ends: the other hop (if any) is closed with outcome, code and detail, its timer stopped. */
void sl__hedge_drop(request_t *r, sl_hop_outcome_t outcome, sl_code_t code, const char *detail);
/* Two hops are out. */
bool sl__hedge_running(const request_t *r);
/* Two hops are out and the request's fields are the hedge's. */
bool sl__hedge_is_installed(const request_t *r);

/* ---- accounting.c: usage and the upstream's books ---- */

/* Starts a shared-state call on call: one left pending there is cancelled first. Returns call. */
sl_shared_call_t *sl__shared_call(request_t *r, sl_shared_call_t *call);

/* The estimate (bytes / 4 + max_tokens) priced for model, before the upstream reports usage. */
sl_amounts_t sl__usage_estimate(const request_t *r, const char *model);
/* What was really used: the reported usage, else the estimate when served, else one request. */
sl_amounts_t sl__usage_real(const request_t *r, const sl_charge_t *c, bool served);
/* Adds a to the request DB's per-minute usage buckets of set. */
void sl__persist_usage(request_t *r, const sl_limit_set_t *set, int64_t at_ms, const sl_amounts_t *a);
/* The hop's bytes go out now: its upstream charge moves to now (counted from here), its line moves on. */
void sl__hop_sent(request_t *r);
/* Settles the key's charge once the request is over (served: the upstream's answer went out). */
void sl__settle_key(request_t *r, bool served);
/* Lets the hop's upstream go: its charge settles, its slot and probe are freed, its queue moves. */
void sl__release_upstream(request_t *r);
/* What the hop's outcome tells the breaker (info NULL: a success). */
void sl__breaker_account(request_t *r, const sl_failure_class_info_t *info);
/* The upstream answered sensibly: throttle streak reset, breaker success, the conversation stays. */
void sl__upstream_served(request_t *r);

/* ---- telemetry.c: attempts, messages, events, the row ---- */

/* Who sent the request: the client's name, "local" when no keys are configured, "unknown" when refused. */
const char *sl__client_name(const request_t *r);
bool sl__events_on(const request_t *r);
void sl__emit(request_t *r, sl_proto_event_t *ev);
/* The conversation's session header (the first of x-sluice-session, x-claude-code-session-id, session-id). */
bool sl__session_header(const request_t *r, const h2o_iovec_t **value);
/*
 * A hop's failure as its message: code's template filled with what it shows
 * of provider, status, the timeout's seconds, the request's model and
 * dialect, and the failure's own detail (its {reason}, {code} or {max}).
 */
sl_msg_t sl__failure_msg(const request_t *r, sl_code_t code, const char *provider, int status,
                         const char *detail);
/* A new attempt at candidate cand (NULL past MAX_ATTEMPTS). */
attempt_t *sl__new_attempt(request_t *r, size_t cand);
/* Closes the open attempt (if any) with outcome; the error is code and detail unless it served. */
void sl__close_attempt(request_t *r, sl_hop_outcome_t outcome, sl_code_t code, const char *detail);
/* As sl__close_attempt, with the step the request took after the failure. */
void sl__close_failed_attempt(request_t *r, sl_hop_outcome_t outcome, sl_attempt_label_t label,
                              sl_code_t code, const char *detail, sl_step_reason_t reason);
/* The current candidate is skipped now (a repeat of the round's same skip is not a new attempt). */
void sl__skip_attempt(request_t *r, attempt_t *a, sl_skip_t skip);
void sl__emit_attempt(request_t *r, const attempt_t *a);
void sl__emit_started(request_t *r);
void sl__emit_routed(request_t *r, size_t route, sl_affinity_effect_t effect);
void sl__emit_queued(request_t *r, const sl_bus_gate_t *gates, size_t n_gates);
void sl__emit_dequeued(request_t *r, const char *provider);
void sl__emit_retrying(request_t *r, const bool *next, int64_t pause_ms, bool by_hint);
void sl__emit_headers(request_t *r);
/* The first content (or a whole answer's head) reached the client: ttft, RequestFirstToken. */
void sl__first_token(request_t *r);
/* RequestFinished, RequestFailed (the gateway's error msg) or RequestCancelled. */
void sl__emit_end(request_t *r, sl_row_outcome_t outcome, int status, const sl_msg_t *msg);
void sl__emit_health(request_t *r, const char *provider, sl_breaker_t b);
/* Builds the events the request holds, in order; from then on its events are built as they happen. */
void sl__build_held_events(request_t *r);
void sl__emit_throttle(request_t *r, const char *provider, const sl_throttle_t *t);
void sl__emit_limit_throttle(request_t *r, const char *provider, sl_limit_verdict_t v, int64_t until_wall,
                             const sl_limit_t *limit, const sl_throttle_t *t);
/* The request's row (msg: the error the client got, NULL for none); once. */
void sl__record(request_t *r, sl_row_outcome_t outcome, int status, const sl_msg_t *msg);
/* The request's metrics at its end: its class, its rescue verdict, its duration, usage and time to first
 * token (stream_error: a 2xx stream that ended with an error in it). */
void sl__count_request(request_t *r, sl_row_outcome_t outcome, int status, bool stream_error);
/* Its trace context at arrival: the client's traceparent continued, or a new trace (sampled or not). */
void sl__trace_begin(request_t *r);
/* A span event of the request's (queued, backoff with its pause, first_token), when it is sampled. */
void sl__trace_event(request_t *r, sl_span_event_kind_t kind, int64_t value_ms);
/* The traceparent line ("traceparent: …\r\n") the current hop sends, in out; false when not traced. */
bool sl__trace_hop_header(const request_t *r, char *out, size_t size);
/* Its spans, handed to the exporter at its end (sampled requests only). */
void sl__trace_end(request_t *r, sl_row_outcome_t outcome, int status, const sl_msg_t *msg);
/* Notes the first trouble the request met (core/rescue.h). */
void sl__note_trouble(request_t *r, sl_trouble_t t);
/* The request's route slot in the metrics ("none" before it was routed). */
uint16_t sl__metrics_route(const request_t *r);
/* A provider's slot in the metrics (cached in its upstream). */
uint16_t sl__metrics_provider(const request_t *r, size_t provider);

#endif
