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
#include "core/dialect.h"
#include "core/jscan.h"
#include "core/hints.h"
#include "core/limits.h"
#include "core/pricing.h"
#include "core/retry.h"
#include "core/sigv4.h"
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
#define WATCH_CLIENT_AFTER_MS 20          /* see sl__watch_client_soon */

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
    bool end_follows;       /* the bytes being processed are the upstream's last (see sl__flush_to_client) */
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

/* ---- request.c ---- */
int64_t sl__wall_of(int64_t now, int64_t wall, int64_t t);
int64_t sl__mono_of(int64_t now, int64_t wall, int64_t t);
const sl_provider_t *sl__provider_of(const request_t *r, size_t cand);
bool sl__header_at(const void *ctx, size_t i, sl_header_t *out);
attempt_t *sl__new_attempt(request_t *r, size_t cand);
attempt_t *sl__current_attempt(request_t *r);
void sl__close_attempt(request_t *r, sl_row_hop_outcome_t outcome, sl_code_t code, const char *detail);
void sl__end_hop(request_t *r);
void sl__finish(request_t *r, sl_row_outcome_t outcome, int status, bool has_error, sl_code_t code,
                const char *detail);
void sl__start_hop(request_t *r, size_t cand);
void sl__next_hop(request_t *r);

/* ---- routing.c ---- */
void sl__remember_conversation(request_t *r);
void sl__remember_response(request_t *r);
bool sl__choose_candidates(request_t *r);

/* ---- admission.c ---- */
void sl__throttle_answered(request_t *r);
void sl__end_dispatch(request_t *r);
void sl__stop_waiting(request_t *r, bool for_hop);
bool sl__skip_may_pass(sl_row_skip_t skip);
void sl__wait_or_give_up(request_t *r);
bool sl__admit_key(request_t *r);
sl_row_skip_t sl__claim_upstream(request_t *r, size_t cand);
bool sl__repeats_a_skip(const request_t *r, const attempt_t *a, sl_row_skip_t skip);

/* ---- upstream_write.c ---- */
h2o_iovec_t sl__body_for_hop(request_t *r, const char *model, bool needs_usage);
bool sl__sign_for_aws(request_t *r, const sl_provider_t *p, const sl_upstream_head_t *info);

/* ---- hold.c ---- */
bool sl__is_hop_by_hop(const h2o_iovec_t *name);
void sl__start_response(request_t *r);
void sl__pause_upstream_reads(request_t *r);
void sl__flush_to_client(request_t *r);
void sl__queue_final(request_t *r, h2o_send_state_t state);
void sl__append_stream_error(request_t *r, sl_code_t code, const char *text);
void sl__on_keepalive(sl_timer_t *t);
void sl__unwatch_client(request_t *r);
void sl__watch_client_soon(request_t *r);
void sl__release_hold(request_t *r);

/* ---- failover.c ---- */
bool sl__has_next_candidate(const request_t *r);
bool sl__fail_over(request_t *r, const sl_failure_t *f, const char *detail, int64_t hint_ms);
int64_t sl__failure_hint(const request_t *r, const sl_headers_t *headers, const char *body, size_t len);
bool sl__may_wait(const request_t *r);
size_t sl__pinned_candidate(const request_t *r);

/* ---- answer.c ---- */
const char *sl__reason_phrase(int status);
void sl__send_made_answer(h2o_req_t *req, int status, const char *content_type, sl_strbuf_t *body);
void sl__add_should_retry(request_t *r);
void sl__answer_with_failure(request_t *r);
void sl__pass_through(request_t *r);
void sl__fail_streaming(request_t *r, sl_hop_end_t how, const char *detail);
void sl__cancel_by_operator(request_t *r);
void sl__answer_final_429(request_t *r, const sl_wait_decision_t *d, sl_code_t code, sl_msg_t msg);
void sl__refuse_to_wait(request_t *r, sl_code_t code, const char *retry_after_secs);
void sl__answer_too_large(request_t *r, const sl_wait_decision_t *d, const char *subject);
void sl__answer_models(h2o_req_t *req, const sl_config_t *c);
void sl__answer_token_estimate(request_t *r);

/* ---- accounting.c ---- */
sl_amounts_t sl__usage_estimate(const request_t *r, const char *model);
sl_amounts_t sl__usage_real(const request_t *r, const charge_t *c, bool served);
void sl__persist_usage(request_t *r, const sl_limit_set_t *set, int64_t at_ms, const sl_amounts_t *a);
bool sl__counts_tokens(const sl_limit_set_t *set);
void sl__charge_locked(charge_t *c, sl_limit_set_t *set, int64_t now_wall, const sl_amounts_t *a);
void sl__recharge_at_send(request_t *r);
void sl__settle(request_t *r, charge_t *c, const sl_amounts_t *real, sl_waitq_t *waiters);
void sl__release_upstream(request_t *r);
void sl__breaker_account(request_t *r, const sl_failure_class_info_t *info);

/* ---- telemetry.c ---- */
const char *sl__client_name(const request_t *r);
bool sl__events_on(const request_t *r);
void sl__emit(request_t *r, sl_proto_event_t *ev);
bool sl__session_header(const request_t *r, const h2o_iovec_t **value);
void sl__emit_started(request_t *r);
void sl__emit_routed(request_t *r, size_t route, sl_affinity_effect_t effect);
void sl__emit_attempt(request_t *r, const attempt_t *a);
void sl__first_token(request_t *r);
void sl__emit_end(request_t *r, sl_row_outcome_t outcome, int status, sl_code_t code, const char *text);
void sl__emit_health(request_t *r, const char *provider, sl_breaker_t b);
void sl__record(request_t *r, sl_row_outcome_t outcome, int status, bool has_error, sl_code_t code,
                const char *detail);
void sl__emit_throttle(request_t *r, const char *provider, const sl_throttle_t *t);
sl_limit_verdict_t sl__shown_verdict(sl_limit_verdict_t v);
void sl__emit_limit_throttle(request_t *r, const char *provider, sl_limit_verdict_t v, int64_t until_wall,
                             const sl_limit_t *limit, const sl_throttle_t *t);
extern const sl_hop_callbacks_t sl__hop_callbacks;

#endif
