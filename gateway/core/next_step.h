/*
 * What a request does after one of its hops failed before anything reached
 * the client (behaviour.md §3, §5, §6): the one place that answers "why was
 * this request retried, failed over, resent or handed back?". Pure: the
 * caller gathers the facts (the failure's class, the candidates, the
 * deadline, a jitter draw) and carries the step out; the step's reason goes
 * into the failed attempt's row and its AttemptView.
 */
#ifndef SL_NEXT_STEP_H
#define SL_NEXT_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "classify.h"
#include "retry.h"

typedef enum {
    SL_STEP_FAILOVER,     /* on to the next candidate: one that can take it now, else wait (§6) or give up */
    SL_STEP_RETRY_ROUND,  /* a pause (pause_ms), then a round over the candidates of next_round (§5) */
    SL_STEP_RESEND_FRESH, /* the same hop again, on a connection opened for it (§3) */
    SL_STEP_CONTEXT_FALLBACK, /* on to the route's context_fallback candidates, which replace the rest (§1.6)
                               */
    SL_STEP_HAND_OVER,        /* the upstream's own answer goes to the client as it is */
    SL_STEP_GATEWAY_ERROR,    /* no upstream answer to hand over: the gateway's error, from the failure */
    SL_STEP_OTHER_HOP,        /* one hop of a first-token hedge failed: the other goes on alone (§4) */
} sl_step_kind_t;

/*
 * Why the step was taken: slug (the attempt's `reason`, DB and protocol) and an English line.
 * BACK_TO_EARLIER is no step after a failure: it is the reason on the hop of a sticky conversation that
 * went back to the candidate it had failed over from (behaviour.md §1.5).
 */
#define SL_STEP_REASONS(X)                                                                                   \
    X(STALE_CONNECTION, "stale_connection",                                                                  \
      "a reused kept-alive connection closed before any answer: the request is sent again on a fresh one")   \
    X(RATE_LIMITED, "rate_limited", "the upstream answered 429: it pauses, another candidate or its queue")  \
    X(NEXT_CANDIDATE, "next_candidate", "the next candidate is tried")                                       \
    X(PINNED_RETRY, "pinned_retry", "the conversation stays on this upstream: it is retried after a pause")  \
    X(RETRY_ROUND, "retry_round",                                                                            \
      "every candidate failed, some temporarily: those are retried after a pause")                           \
    X(REQUEST_ERROR, "request_error", "the client's own error: handed back at once")                         \
    X(CONTEXT_FALLBACK, "context_fallback",                                                                  \
      "the request is longer than this model's context: on to the route's context_fallback")                 \
    X(NOT_RETRIED, "not_retried", "no candidate of the round failed temporarily")                            \
    X(NO_WAITING, "no_waiting", "this request may not wait or retry (wait_secs 0, or counting tokens)")      \
    X(DEADLINE, "deadline", "the next pause would end after the request's deadline")                         \
    X(BACK_TO_EARLIER, "back_to_earlier",                                                                    \
      "the conversation failed over earlier: it goes back to this candidate, which can take it again")       \
    X(HEDGE_FAILED, "hedge_failed", "the first-token hedge failed before content: the first hop goes on")    \
    X(HEDGE_GOES_ON, "hedge_goes_on", "the hop failed before content: its first-token hedge goes on alone")

typedef enum {
#define SL_STEP_REASON_ENUM(name, slug, text) SL_STEP_REASON_##name,
    SL_STEP_REASONS(SL_STEP_REASON_ENUM)
#undef SL_STEP_REASON_ENUM
        SL_STEP_REASON_COUNT
} sl_step_reason_t;

/* "stale_connection", …; "" for a value out of range. Never NULL. */
const char *sl_step_reason_slug(sl_step_reason_t reason);
/* The reason whose slug is slug; false (and *out untouched) when none is. */
bool sl_step_reason_from_slug(const char *slug, sl_step_reason_t *out);

/* How the connection of a hop that broke before its response head had been used (hop.h gathers it). */
typedef struct {
    bool reused;            /* it came from the upstream's keep-alive pool, not opened for this hop */
    bool any_byte;          /* something of an answer came back before it broke */
    int64_t ms_after_write; /* from the request's bytes going out to the break */
} sl_connection_facts_t;

/*
 * The stale keep-alive rule (§3): a *reused* connection that failed on
 * write or closed within 1 s of the write, before any byte came back (the
 * server had closed an idle connection). Never a connection opened for
 * this hop, never after a byte or a longer hold. Timeouts never get here:
 * the caller asks only for a break before the head.
 */
bool sl_connection_was_stale(const sl_connection_facts_t *c);

/* The window after the write within which a close counts as a stale keep-alive. */
#define SL_STALE_CLOSE_MS 1000

typedef struct {
    sl_failure_class_t cls;    /* classify.c's verdict on the failure */
    bool stale;                /* sl_connection_was_stale said so (only for a break before the head) */
    bool has_answer;           /* the upstream answered with a head: that answer can be handed over */
    bool has_next;             /* a later candidate of this round can still be tried */
    bool pinned_here;          /* the request's conversation stays on this candidate (§1.5) */
    bool has_context_fallback; /* the route's context_fallback may take a context-length error (§1.6) */
    bool may_wait; /* it may still wait or retry: wait_secs > 0, not counting tokens, deadline ahead */
    /*
     * The round's candidates, for the retry round: temporary[i], candidate i
     * failed temporarily in this round (this failure included); cooling[i],
     * its breaker is cooling now. pinned: sl_retry_select's (SL_RETRY_UNPINNED
     * when none).
     */
    const bool *temporary, *cooling;
    size_t n;
    size_t pinned;
    uint32_t next_round; /* the 1-based number of the round a retry would start */
    int64_t hint_ms;     /* the longest retry hint of the round (unscaled; <= 0 = none) */
    double jitter_unit;  /* the caller's draw from [0, 1) */
    const sl_retry_params_t *params;
    int64_t now_ms, deadline_ms;
} sl_step_facts_t;

typedef struct {
    sl_step_kind_t kind;
    sl_step_reason_t reason;
    int64_t pause_ms; /* SL_STEP_RETRY_ROUND: the pause before the round */
    bool by_hint;     /* SL_STEP_RETRY_ROUND: the upstream's hint set the pause */
} sl_step_t;

/*
 * The step after a failed hop, in the order of behaviour.md: a stale
 * keep-alive is resent fresh; a 429 fails over (the upstream pauses); a
 * context-length error goes on to the route's context_fallback when it may;
 * a request error is handed back; a conversation that stays on this upstream
 * retries it after a pause when that fits the deadline and its breaker is
 * not cooling (it has just opened: let go); otherwise the next
 * candidate; with none left, a retry round over the round's temporary
 * failures when the request may wait and the pause fits; else the failure
 * is handed over (or, with no upstream answer, the gateway's error).
 * next_round (f->n entries) is set for SL_STEP_RETRY_ROUND and left
 * untouched otherwise.
 */
sl_step_t sl_next_step(const sl_step_facts_t *f, bool *next_round);

/*
 * As sl_next_step, for a hop that failed while the other hop of its
 * first-token hedge is still out (§4): the other goes on alone (the
 * failed one was the hedge: hedge_failed; the first: hedge_goes_on) —
 * unless the failure is the client's own (it is handed back as ever).
 */
sl_step_t sl_next_step_hedged(const sl_step_facts_t *f, bool failed_is_hedge, bool *next_round);

/* Whether a hop gets a first-token hedge now, and if not, why (behaviour.md §4). */
typedef enum {
    SL_HEDGE_START,         /* send the request to the next candidate that can take it now, too */
    SL_HEDGE_OFF,           /* first_token_secs is 0 */
    SL_HEDGE_NOT_YET,       /* the hop has been out for less than first_token_secs */
    SL_HEDGE_LAST,          /* the hop's candidate is the last: nobody to hedge with */
    SL_HEDGE_SEALED,        /* sealed history pins the request to this upstream */
    SL_HEDGE_HAS_CONTENT,   /* content came (for a whole answer: its 2xx head) */
    SL_HEDGE_ALREADY,       /* a hedge is out, or this hop had one */
    SL_HEDGE_PAST_DEADLINE, /* the request's wait deadline has passed */
} sl_hedge_verdict_t;

typedef struct {
    uint32_t first_token_secs; /* the route's, else failover's; 0 = off */
    bool has_later;            /* a later candidate of the round is not skipped */
    bool sealed_history;
    bool has_content;
    bool hedged; /* a hedge is out for this hop, or was */
    int64_t sent_ms, now_ms, deadline_ms;
} sl_hedge_facts_t;

sl_hedge_verdict_t sl_hedge_decide(const sl_hedge_facts_t *f);
/* "start", "off", …: for logs and tests. */
const char *sl_hedge_verdict_name(sl_hedge_verdict_t v);

#endif
