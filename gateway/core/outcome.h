/*
 * The closed lists of how things ended and why a candidate was passed
 * over, each written once: its C name and its spelling, which is the
 * request DB's and the control protocol's (protocol/schema.toml lists the
 * same values in the same order; bus.c maps them by name, checked at
 * compile time). Everything else (the DB's names, the protocol mapping,
 * the enums) comes from these tables.
 */
#ifndef SL_OUTCOME_H
#define SL_OUTCOME_H

#include <stdbool.h>

/* How a request ended (the requests row's `outcome`). */
#define SL_REQUEST_OUTCOMES(X)                                                                               \
    X(SERVED, "served")                                                                                      \
    X(FAILED, "failed")                                                                                      \
    X(CANCELLED, "cancelled")                                                                                \
    X(ANSWERED_LOCALLY, "answered_locally")

/* How one hop ended (the protocol's Outcome; the attempts row's `outcome`). */
#define SL_HOP_OUTCOMES(X)                                                                                   \
    X(SERVED, "served")                     /* its answer reached the client */                              \
    X(STATUS, "status")                     /* the upstream answered a non-2xx status */                     \
    X(ERROR, "error")                       /* connect, break, in-stream error, early end, timeout */        \
    X(SKIPPED, "skipped")                   /* not sent to: the skip says why */                             \
    X(ESTIMATED, "estimated")               /* count-tokens answered with the gateway's estimate */          \
    X(CANCELLED, "cancelled")               /* an operator cancelled, or the client stopped reading */       \
    X(CLIENT_LEFT, "client_left")           /* the client went away while it was out */                      \
    X(STALE_CONNECTION, "stale_connection") /* a reused keep-alive connection had been closed (§3) */       \
    X(HEDGE_LOST, "hedge_lost")             /* a first-token hedge's other hop had content first (§4) */

/* Why a candidate was not sent to (behaviour.md §2; the protocol's ServeSkip). */
#define SL_SKIP_REASONS(X)                                                                                   \
    X(DISABLED, "disabled")                 /* the provider is disabled in the config */                     \
    X(NOT_OFFERED, "not_offered")           /* not the client's dialect, or not among its models */          \
    X(PINNED_ELSEWHERE, "pinned_elsewhere") /* sealed history belongs to another upstream */                 \
    X(COOLING, "cooling")                   /* its breaker is open */                                        \
    X(THROTTLED, "throttled")               /* paused after a 429, probing, or paused by an operator */      \
    X(BUSY, "busy")                         /* max_concurrent full, or others are ahead in its queue */      \
    X(WINDOW_FULL, "window_full")           /* a minute/hour usage window is full */                         \
    X(PERIOD_USED_UP, "period_used_up")     /* a day/week/month usage period is used up */                   \
    X(KEY_WINDOW, "key_window")             /* the client key's own window is full */

typedef enum {
#define SL_OUTCOME_ENUM(name, slug) SL_ROW_##name,
    SL_REQUEST_OUTCOMES(SL_OUTCOME_ENUM)
#undef SL_OUTCOME_ENUM
        SL_ROW_OUTCOME_COUNT
} sl_row_outcome_t;

typedef enum {
#define SL_HOP_OUTCOME_ENUM(name, slug) SL_HOP_##name,
    SL_HOP_OUTCOMES(SL_HOP_OUTCOME_ENUM)
#undef SL_HOP_OUTCOME_ENUM
        SL_HOP_OUTCOME_COUNT
} sl_hop_outcome_t;

/* SL_SKIP_NONE: the candidate was not skipped. */
typedef enum {
    SL_SKIP_NONE,
#define SL_SKIP_ENUM(name, slug) SL_SKIP_##name,
    SL_SKIP_REASONS(SL_SKIP_ENUM)
#undef SL_SKIP_ENUM
        SL_SKIP_COUNT
} sl_skip_t;

/* The spellings; "" for a value out of range (and for SL_SKIP_NONE). Never NULL. */
const char *sl_row_outcome_slug(sl_row_outcome_t outcome);
const char *sl_hop_outcome_slug(sl_hop_outcome_t outcome);
const char *sl_skip_slug(sl_skip_t skip);

/* The value spelled slug; -1 when none is (SL_SKIP_NONE is never found). */
int sl_row_outcome_from_slug(const char *slug);
int sl_hop_outcome_from_slug(const char *slug);
int sl_skip_from_slug(const char *slug);

/* A skip that waiting (or time) can end: the candidate is looked at again (throttled, busy, limits). */
bool sl_skip_may_pass(sl_skip_t skip);

#endif
