/*
 * What requests share about upstreams and client keys (behaviour.md §6-8,
 * cluster.md): an upstream's pause after a 429 (or an operator's) and the
 * probe that ends it, its max_concurrent slots, the lines of requests
 * waiting for it or for a key, and the usage windows and periods of both.
 * The request path reaches this state only through sl_shared_state_t, so it
 * does not know whether one process keeps it (shared_local.c) or a store
 * several instances share.
 *
 * Asynchronous: a call with an answer gives it through its callback, on the
 * caller's worker. The local implementation answers before the call
 * returns (or, for tests, a loop turn later); a remote one later, so a
 * caller continues in the callback, never after the call. Calls that give
 * something back (a release, a settlement, leaving lines) answer nothing:
 * they are the implementation's to complete. A call with an answer takes a
 * sl_shared_call_t of the caller's (zeroed
 * once; one call at a time per handle): a caller that goes away, or starts
 * another call on the same handle, first cancels it (sl_shared_cancel). A
 * cancelled call's callback never runs, and what it took (a slot, a
 * reservation, a place in a line) is given back; what it reported (a pause
 * starting) stands.
 *
 * Reads for views and waiting decisions (sl_shared_pause_of,
 * sl_shared_upstream_view) are synchronous: every implementation keeps the
 * pauses it knows at hand (cluster.md: cached until their end, invalidated
 * by published changes).
 *
 * Usage persistence (the request DB's minute buckets) is not in here: it is
 * the same whatever keeps the counters (accounting.c).
 */
#ifndef SL_SHARED_STATE_H
#define SL_SHARED_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/breaker.h"
#include "core/limits.h"
#include "core/outcome.h"
#include "core/retry.h"
#include "core/throttle.h"
#include "core/timerheap.h"
#include "limiter.h"
#include "upstream.h"
#include "waitq.h"

typedef struct sl_shared_state sl_shared_state_t;

/*
 * A call not answered yet. Zero it once and set timers to the caller's
 * worker's timer heap (NULL: the caller runs on no worker loop, e.g. the
 * control thread); the implementation owns what pending points to.
 */
typedef struct sl_shared_inbox sl_shared_inbox_t;

typedef struct {
    void *pending;
    sl_timerheap_t *timers;       /* where an answer that comes later is delivered */
    sl_shared_inbox_t *inbox;     /* where an answer made on another thread is handed over; NULL: none */
    struct sl_cluster_lane *lane; /* the caller's worker's own connection to the cluster; NULL: none */
} sl_shared_call_t;

/*
 * An answer made on another thread (a remote store's reply) for a caller on
 * a worker: posted to that worker's inbox, opened on its loop.
 */
typedef struct sl_shared_letter {
    h2o_multithread_message_t super;
    void (*open)(struct sl_shared_letter *letter); /* on the inbox's worker; owns the letter */
} sl_shared_letter_t;

/* A worker's inbox on its loop's queue (lives as long as the process). */
sl_shared_inbox_t *sl_shared_inbox_new(h2o_multithread_queue_t *queue);
/* From any thread: letter->open runs on the inbox's worker. */
void sl_shared_inbox_post(sl_shared_inbox_t *inbox, sl_shared_letter_t *letter);

/* Usage reserved in one limit set (behaviour.md §7), settled with the real figure when it is over. */
typedef struct {
    sl_limit_set_t *set; /* NULL: nothing reserved */
    int64_t at_ms;       /* wall clock: when it counts; the settlement lands there too */
    sl_amounts_t amounts;
    int64_t shared_at_ms; /* a cluster's: when its counters took it (Redis's clock); 0: they did not */
} sl_charge_t;

/* One line a request waits in: an upstream's, or a client key's (exactly one of the two is set). */
typedef struct {
    sl_upstream_t *up;
    sl_limit_set_t *key;
} sl_line_t;

/* ---- claiming an upstream for a hop --------------------------------------------------------- */

typedef struct {
    sl_upstream_t *up;
    sl_limit_set_t *limits;  /* the upstream's usage limits; NULL: none */
    sl_amounts_t need;       /* the hop's estimate, reserved in limits when taken */
    uint32_t max_concurrent; /* 0: no cap */
    bool bypass_breaker;     /* the only candidate, or every candidate is cooling (behaviour.md §8) */
    sl_waiter_t *waiter;     /* its place in the upstream's line; NULL: it is in no line */
    uint32_t limit_parts;    /* > 1: limits count amount / limit_parts (sl_limits_check_share); 0, 1: whole */
    int64_t now_ms, wall_ms;
} sl_upstream_claim_t;

typedef struct {
    sl_skip_t skip;        /* SL_SKIP_NONE: taken (a slot, the reservation, the breaker's leave) */
    int64_t recovery_ms;   /* a full window or used-up period: when it has room (sl_now_ms's clock);
                              SL_THROTTLE_NEVER: the hop is larger than a whole limit */
    bool reached_limits;   /* limits were checked (the throttle let it through): counts_tokens is known */
    bool counts_tokens;    /* its limits count tokens or cost: the upstream must report usage */
    bool throttle_probe;   /* taken as the probe after a 429 pause */
    bool breaker_probe;    /* taken as the breaker's half-open probe */
    bool dispatching;      /* taken from the head of its line: the next goes once this one is sent */
    sl_charge_t charge;    /* taken with limits: the estimate reserved */
    sl_limit_t limit;      /* the limit that decided, with limits_changed or a too-large hop */
    bool throttle_changed; /* what ThrottleChanged shows for the 429 state moved: throttle is it now */
    sl_throttle_t throttle;
    bool limits_changed; /* what ThrottleChanged shows for the limits moved: shown, until shown_until_ms */
    sl_limit_verdict_t shown;
    int64_t shown_until_ms; /* wall clock */
    bool breaker_changed;   /* HealthChanged: breaker is the breaker now */
    sl_breaker_t breaker;
    /* taken: its max_concurrent slot as leased cluster-wide, handed back by the release; 0: none */
    uint64_t slot;
    /*
     * Nothing taken: the state it needs (limits, slots) is shared and cannot
     * be reached (a cluster's when_redis_down: closed); the request is
     * answered 503 gw.cluster.unavailable.
     */
    bool unavailable;
} sl_upstream_claim_result_t;

typedef void (*sl_upstream_claim_cb)(void *ctx, const sl_upstream_claim_result_t *result);

/* What a hop took, given back when it is over. */
typedef struct {
    sl_upstream_t *up;
    sl_charge_t *charge; /* settled with used, then cleared; NULL or empty: none */
    sl_amounts_t used;   /* what it really used */
    bool throttle_probe; /* it was the probe after a 429 pause and got no answer: another may go */
    bool breaker_probe;  /* it held the breaker's probe: released */
    uint64_t slot;       /* the claim's slot */
    /*
     * Given back unused because the cluster had no slot for it: its dispatch
     * (when it was released from the line) ends too, and nobody in line is
     * woken, for nobody could take it either.
     */
    bool unused;
    bool dispatching;
    int64_t wall_ms;
} sl_upstream_release_t;

/* ---- a client key's admission ------------------------------------------------------------------ */

typedef struct {
    sl_limit_set_t *key;
    sl_amounts_t need;
    sl_waiter_t *waiter;  /* its place in the key's line; NULL: in none */
    uint32_t limit_parts; /* > 1: limits count amount / limit_parts (sl_limits_check_share); 0, 1: whole */
    int64_t wall_ms;
} sl_key_claim_t;

typedef struct {
    bool admitted;           /* the estimate is reserved in charge (nothing when the key has no limits) */
    bool draining;           /* the gateway is shutting down: nothing is admitted from a line any more */
    sl_limits_check_t check; /* not admitted: why (SL_LIMIT_OK: room, but others are first in line) */
    sl_limit_t limit;        /* not admitted: the limit that decided */
    bool counts_tokens;      /* admitted: the key's limits count tokens or cost */
    sl_charge_t charge;
    bool unavailable; /* not admitted: the key's limits are shared and cannot be reached (as for an upstream)
                       */
} sl_key_claim_result_t;

typedef void (*sl_key_claim_cb)(void *ctx, const sl_key_claim_result_t *result);

/* ---- news of the 429 state, and joining lines -------------------------------------------------- */

/* Whether what ThrottleChanged shows for up moved, and its throttle as it is now. */
typedef struct {
    sl_upstream_t *up;
    bool changed;
    sl_throttle_t throttle;
} sl_throttle_news_t;

typedef void (*sl_throttle_news_cb)(void *ctx, const sl_throttle_news_t *news);

/* joined false with draining: the gateway is shutting down, nobody joins a line any more. */
typedef struct {
    bool joined, draining;
} sl_lines_joined_t;

typedef void (*sl_lines_joined_cb)(void *ctx, const sl_lines_joined_t *result);

/* An upstream's pause as this instance knows it. */
typedef struct {
    sl_throttle_state_t kind;
    int64_t recovery_ms; /* when it may take a request again (sl_now_ms's clock); SL_THROTTLE_NEVER */
} sl_pause_t;

/* What an upstream's ProviderView shows of the shared state. */
typedef struct {
    sl_throttle_t throttle;
    uint32_t queued;    /* requests in its line */
    uint32_t in_flight; /* its slots taken */
    sl_limit_verdict_t shown;
    sl_limit_t shown_limit;
    int64_t shown_until_ms; /* wall clock */
} sl_upstream_view_t;

/* ---- the interface ----------------------------------------------------------------------------- */

typedef struct {
    void (*claim_upstream)(sl_shared_state_t *ss, const sl_upstream_claim_t *claim, sl_shared_call_t *call,
                           sl_upstream_claim_cb done, void *ctx);
    void (*release_upstream)(sl_shared_state_t *ss, const sl_upstream_release_t *release);
    void (*hop_sent)(sl_shared_state_t *ss, sl_upstream_t *up, bool dispatching, sl_charge_t *charge,
                     int64_t wall_ms);
    void (*upstream_answered)(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms,
                              sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx);
    void (*upstream_rate_limited)(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, int64_t hint_ms,
                                  uint32_t max_pause_secs, const sl_retry_params_t *params,
                                  sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx);
    void (*pause_upstream)(sl_shared_state_t *ss, sl_upstream_t *up, int64_t until_ms, int64_t now_ms,
                           sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx);
    void (*resume_upstream)(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                            sl_throttle_news_cb done, void *ctx);
    void (*claim_key)(sl_shared_state_t *ss, const sl_key_claim_t *claim, sl_shared_call_t *call,
                      sl_key_claim_cb done, void *ctx);
    void (*settle)(sl_shared_state_t *ss, sl_charge_t *charge, const sl_amounts_t *used, bool wake_line,
                   int64_t wall_ms);
    void (*join_lines)(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *lines, size_t n,
                       sl_shared_call_t *call, sl_lines_joined_cb done, void *ctx);
    void (*leave_lines)(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *wake, size_t n);
    void (*end_dispatch)(sl_shared_state_t *ss, sl_upstream_t *up);
    sl_pause_t (*pause_of)(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms);
    sl_upstream_view_t (*upstream_view)(sl_shared_state_t *ss, sl_upstream_t *up, sl_limit_set_t *limits);
    void (*limits_replaced)(sl_shared_state_t *ss, sl_bucket_kind_t kind, const char *name,
                            const sl_limit_t *limits, size_t n);
    void (*config_replaced)(sl_shared_state_t *ss, const char *redacted, size_t len, uint64_t revision);
    void (*health_changed)(sl_shared_state_t *ss, sl_upstream_t *up, const sl_breaker_t *breaker,
                           int64_t now_ms);
    void (*cancel)(sl_shared_state_t *ss, sl_shared_call_t *call);
    void (*free)(sl_shared_state_t *ss);
} sl_shared_state_ops_t;

struct sl_shared_state {
    const sl_shared_state_ops_t *ops;
};

/*
 * Takes up for a hop, in this order (behaviour.md §6-8): its line (nobody
 * overtakes the head, and the head goes once the one released before it is
 * sent), its 429 throttle, room in its limits for need, a slot under
 * max_concurrent, its breaker. Answers what it took, or why it is skipped.
 */
static inline void
sl_shared_claim_upstream(sl_shared_state_t *ss, const sl_upstream_claim_t *claim, sl_shared_call_t *call,
                         sl_upstream_claim_cb done, void *ctx)
{
    ss->ops->claim_upstream(ss, claim, call, done, ctx);
}

/* Gives back what a claim took (its slot, its probes), settling its charge; the head of up's line may go. */
static inline void
sl_shared_release_upstream(sl_shared_state_t *ss, const sl_upstream_release_t *release)
{
    ss->ops->release_upstream(ss, release);
}

/*
 * The hop's bytes go out now (wall_ms): its charge moves from when it was
 * claimed to now (the upstream counts it from when it arrives), and when it
 * was released from up's line (dispatching), the next in line may go.
 */
static inline void
sl_shared_hop_sent(sl_shared_state_t *ss, sl_upstream_t *up, bool dispatching, sl_charge_t *charge,
                   int64_t wall_ms)
{
    ss->ops->hop_sent(ss, up, dispatching, charge, wall_ms);
}

/* up answered with anything but a 429: its 429 streak resets and a probe passes (its line moves on). */
static inline void
sl_shared_upstream_answered(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                            sl_throttle_news_cb done, void *ctx)
{
    ss->ops->upstream_answered(ss, up, now_ms, call, done, ctx);
}

/* up answered 429: it pauses for hint_ms (else its backoff), at most max_pause_secs (behaviour.md §6). */
static inline void
sl_shared_upstream_rate_limited(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, int64_t hint_ms,
                                uint32_t max_pause_secs, const sl_retry_params_t *params,
                                sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx)
{
    ss->ops->upstream_rate_limited(ss, up, now_ms, hint_ms, max_pause_secs, params, call, done, ctx);
}

/*
 * An operator pauses up until until_ms (sl_now_ms's clock; SL_THROTTLE_NEVER:
 * until resumed); everyone in its line is woken to decide again.
 */
static inline void
sl_shared_pause_upstream(sl_shared_state_t *ss, sl_upstream_t *up, int64_t until_ms, int64_t now_ms,
                         sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx)
{
    ss->ops->pause_upstream(ss, up, until_ms, now_ms, call, done, ctx);
}

/* An operator resumes up: its pauses end into one probe (sl_throttle_resume); the head of its line goes. */
static inline void
sl_shared_resume_upstream(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                          sl_throttle_news_cb done, void *ctx)
{
    ss->ops->resume_upstream(ss, up, now_ms, call, done, ctx);
}

/*
 * A client key's admission (behaviour.md §7): need fits every limit of the
 * key and nobody is ahead in its line. Admitted, the estimate is reserved
 * and the request leaves the key's line (its next may look).
 */
static inline void
sl_shared_claim_key(sl_shared_state_t *ss, const sl_key_claim_t *claim, sl_shared_call_t *call,
                    sl_key_claim_cb done, void *ctx)
{
    ss->ops->claim_key(ss, claim, call, done, ctx);
}

/*
 * charge's estimate is replaced by used, at the charge's own time (now
 * wall_ms), and the charge is cleared. With wake_line, when room came free, the head of the
 * charged set's line may go.
 */
static inline void
sl_shared_settle(sl_shared_state_t *ss, sl_charge_t *charge, const sl_amounts_t *used, bool wake_line,
                 int64_t wall_ms)
{
    ss->ops->settle(ss, charge, used, wake_line, wall_ms);
}

/* waiter joins lines (in arrival order: a request that re-enters lands in its place), unless draining. */
static inline void
sl_shared_join_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *lines, size_t n,
                     sl_shared_call_t *call, sl_lines_joined_cb done, void *ctx)
{
    ss->ops->join_lines(ss, waiter, lines, n, call, done, ctx);
}

/*
 * waiter stops waiting for good and is released (the caller must not touch
 * it afterwards; NULL: it waited nowhere); the heads of wake (n lines) may
 * go.
 */
static inline void
sl_shared_leave_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *wake, size_t n)
{
    ss->ops->leave_lines(ss, waiter, wake, n);
}

/* A request released from up's line (dispatching) will not be sent after all: the next may go. */
static inline void
sl_shared_end_dispatch(sl_shared_state_t *ss, sl_upstream_t *up)
{
    ss->ops->end_dispatch(ss, up);
}

/* up's pause as known here. */
static inline sl_pause_t
sl_shared_pause_of(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms)
{
    return ss->ops->pause_of(ss, up, now_ms);
}

/* What up's ProviderView shows of the shared state (limits: its usage limits, may be NULL). */
static inline sl_upstream_view_t
sl_shared_upstream_view(sl_shared_state_t *ss, sl_upstream_t *up, sl_limit_set_t *limits)
{
    return ss->ops->upstream_view(ss, up, limits);
}

/*
 * An operator replaced the usage limits of an upstream or a client key
 * here (set_provider_limits, set_key_limits): in a cluster, every other
 * instance applies them too.
 */
static inline void
sl_shared_limits_replaced(sl_shared_state_t *ss, sl_bucket_kind_t kind, const char *name,
                          const sl_limit_t *limits, size_t n)
{
    ss->ops->limits_replaced(ss, kind, name, limits, n);
}

/*
 * An operator replaced the config here (put_config), now at revision; the
 * text with its secrets redacted. In a cluster every other instance applies
 * it too, with its own secrets and its own listen, store and
 * cluster.instance.
 */
static inline void
sl_shared_config_replaced(sl_shared_state_t *ss, const char *redacted, size_t len, uint64_t revision)
{
    ss->ops->config_replaced(ss, redacted, len, revision);
}

/*
 * up's breaker moved here (HealthChanged): breaker is it now. In a cluster
 * its verdict (open until, or closed again) holds on every instance; the
 * failures that led to it stay counted here only.
 */
static inline void
sl_shared_health_changed(sl_shared_state_t *ss, sl_upstream_t *up, const sl_breaker_t *breaker,
                         int64_t now_ms)
{
    ss->ops->health_changed(ss, up, breaker, now_ms);
}

/* The call on call, if pending, will not answer; what it took is given back. */
static inline void
sl_shared_cancel(sl_shared_state_t *ss, sl_shared_call_t *call)
{
    if (call->pending != NULL)
        ss->ops->cancel(ss, call);
}

static inline void
sl_shared_state_free(sl_shared_state_t *ss)
{
    if (ss != NULL)
        ss->ops->free(ss);
}

/*
 * The state of one process: upstreams, limit sets and lines in this
 * process's memory under the wait lock (waitq.h). stopping is the
 * gateway's shutdown flag: once it is set, nobody joins a line or is
 * admitted from one (read under the same lock the drain's wake-up takes).
 *
 * With defer_answers (tests: SLUICE_TEST_SHARED_STATE=deferred), each
 * answer is delivered at the next turn of the caller's loop instead of
 * before the call returns, as a remote store's would be, so the suite can
 * show that the request path never reads an answer before it comes and
 * that a cancelled call gives back what it took.
 */
sl_shared_state_t *sl_shared_local_new(const atomic_bool *stopping, bool defer_answers);

/* ---- a cluster's instance (shared_cluster.c) ---------------------------------------------------- */

/* Retry-After of gw.cluster.unavailable: about when an instance tries Redis again (its backoff's cap). */
#define SL_CLUSTER_RETRY_AFTER_SECS "2"

struct sl_cluster;

/* An instance's part in its cluster, as its control stream shows it (ClusterChanged, get_instances). */
typedef enum { SL_CLUSTER_PART_JOINED, SL_CLUSTER_PART_DEGRADED, SL_CLUSTER_PART_ALONE } sl_cluster_part_t;

/* Joined; degraded once it had joined; alone until it first joins. From any thread. */
sl_cluster_part_t sl_cluster_part(const struct sl_cluster *cluster);

/* How the cluster's state reaches this instance's upstreams and control stream (from the cluster's thread).
 */
typedef struct {
    /* The upstream named name in the running config, or NULL. */
    sl_upstream_t *(*find)(void *ctx, const char *name);
    /* Calls each(each_ctx, up) for every upstream of the running config. */
    void (*each)(void *ctx, void (*each)(void *each_ctx, sl_upstream_t *up), void *each_ctx);
    /* Calls each(each_ctx, set) for every limit set (upstreams' and client keys') of the running config. */
    void (*each_set)(void *ctx, void (*each)(void *each_ctx, sl_limit_set_t *set), void *each_ctx);
    /* ThrottleChanged for a change another instance made. */
    void (*announce)(void *ctx, const sl_throttle_news_t *news);
    /* HealthChanged for a breaker verdict another instance made. */
    void (*announce_health)(void *ctx, sl_upstream_t *up, const sl_breaker_t *breaker);
    /* Another instance's operator replaced the limits of (kind, name): applied here as if pushed here. */
    void (*apply_limits)(void *ctx, sl_bucket_kind_t kind, const char *name, const sl_limit_t *limits,
                         size_t n);
    /*
     * Another instance's operator replaced the config (redacted text): applied
     * here if it is newer than the last one applied; at the first join only
     * noted (apply false: this instance starts with its own file).
     */
    void (*adopt_config)(void *ctx, const char *origin, size_t origin_len, uint64_t revision,
                         const char *text, size_t len, bool apply);
    /* ClusterChanged: joined, degraded after having joined, or alone (never joined yet); reason when not
     * joined. */
    void (*announce_cluster)(void *ctx, sl_cluster_part_t part, const char *reason, uint32_t instances);
    /* What this instance's heartbeat tells the others (its counts), NUL-terminated in out. */
    void (*describe)(void *ctx, char *out, size_t size);
    void *ctx;
} sl_shared_cluster_hooks_t;

/*
 * The state of an instance of the cluster config names (cluster.md): local
 * (sl_shared_local_new, answering at once) for what this instance decides,
 * kept in step with the others through Redis. Takes local; starts the
 * connection (*cluster, owned by the result: freeing it stops it). NULL when
 * the connection's thread cannot start.
 */
sl_shared_state_t *sl_shared_cluster_new(sl_shared_state_t *local, const sl_cluster_config_t *config,
                                         const char *instance, const sl_shared_cluster_hooks_t *hooks,
                                         struct sl_cluster **cluster);

#endif
