/*
 * What instances of one cluster tell each other through Redis (cluster.md):
 * the text of a published change of an upstream's pause, the names of the
 * keys that hold shared state, and the conversion between this instance's
 * clocks and Redis's. Pure: the shell (gateway/cluster.c,
 * gateway/shared_cluster.c) does the I/O.
 *
 * A message is one line of text, fields separated by one space:
 *
 *     v1 ORIGIN OP UNTIL CONSECUTIVE GRACE UPSTREAM
 *
 * ORIGIN is the sending instance (no space: the config allows none);
 * UNTIL a Redis-clock time in ms, "never" (a manual pause without end) or
 * "-" (none); UPSTREAM comes last and may hold spaces. A change of limits
 * names its subject in place of UNTIL (p: an upstream, k: a client key)
 * and carries the limits in place of CONSECUTIVE and GRACE:
 *
 *     v1 ORIGIN limits KIND LIMITS - NAME
 *
 * LIMITS is "-" (none) or PER/EVERY/MEASURE/AMOUNT joined by commas, e.g.
 * "minute/5/tokens/10000,day/1/cost/20000000".
 *
 * A replaced config carries its revision in UNTIL and "-" for UPSTREAM; its
 * text waits in the config key (sl_cluster_config_record).
 */
#ifndef SL_CLUSTER_MSG_H
#define SL_CLUSTER_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"

typedef enum {
    SL_CLUSTER_PAUSE_429,       /* a 429 paused the upstream until UNTIL (CONSECUTIVE, GRACE as it counted) */
    SL_CLUSTER_PAUSE_MANUAL,    /* an operator paused it until UNTIL */
    SL_CLUSTER_RESUME,          /* an operator resumed it */
    SL_CLUSTER_ANSWERED,        /* it answered something other than a 429: the probe passed */
    SL_CLUSTER_PROBE_ABANDONED, /* the probe went away without an answer: another may go */
    SL_CLUSTER_SLOT_FREED,      /* a max_concurrent slot came free while some instance found them all taken */
    SL_CLUSTER_LIMITS,          /* an operator replaced the usage limits of an upstream or a client key */
    SL_CLUSTER_BREAKER_OPEN,    /* its breaker opened until UNTIL: CONSECUTIVE its trips, GRACE its cause */
    SL_CLUSTER_BREAKER_CLOSED,  /* its breaker closed: a probe passed */
    SL_CLUSTER_CONFIG,          /* an operator replaced the config (put_config): UNTIL is its revision */
    SL_CLUSTER_OP_COUNT
} sl_cluster_op_t;

/* "Never" as a Redis-clock time: a manual pause until resumed. */
#define SL_CLUSTER_NEVER INT64_MAX

/* Limits one message carries, at most (a subject's limits beyond it are refused by the sender). */
#define SL_CLUSTER_MAX_LIMITS 16

typedef struct {
    sl_cluster_op_t op;
    const char *origin; /* decoded: points into the text */
    size_t origin_len;
    const char *upstream; /* decoded: points into the text */
    size_t upstream_len;
    int64_t until_ms; /* Redis clock; SL_CLUSTER_NEVER; -1: none */
    uint32_t consecutive;
    int64_t grace_ms;
    /* SL_CLUSTER_LIMITS: whose ('p' an upstream, 'k' a client key; upstream names it) and which */
    char subject_kind;
    sl_limit_t limits[SL_CLUSTER_MAX_LIMITS];
    size_t n_limits;
} sl_cluster_msg_t;

/* The message as a line (NUL-terminated) in out; returns its length, 0 when it does not fit in size. */
size_t sl_cluster_msg_encode(const sl_cluster_msg_t *m, char *out, size_t size);

/* Parses a line; false when it is not a message of this version (it is then ignored). */
bool sl_cluster_msg_decode(const char *text, size_t len, sl_cluster_msg_t *out);

/*
 * A key of the cluster named name: "{sl:NAME}:KIND" or, with id,
 * "{sl:NAME}:KIND:ID" (the braces keep one cluster's keys in one Redis
 * Cluster slot). Returns the length written (NUL-terminated), 0 when it does
 * not fit.
 */
size_t sl_cluster_key(char *out, size_t size, const char *name, const char *kind, const char *id);

/*
 * The counter of one limit of a subject ('p': an upstream, 'k': a client
 * key, named subject): "{sl:NAME}:win:T:SUBJECT:PER:EVERY:MEASURE" for a
 * rolling window (a hash of slot number to amount, the slots those of
 * core/limits.h), "{sl:NAME}:period:T:SUBJECT:PER:MEASURE:START" for the
 * calendar period starting at period_start_ms. Returns the length, 0 when
 * it does not fit.
 */
size_t sl_cluster_limit_key(char *out, size_t size, const char *name, char subject_kind, const char *subject,
                            const sl_limit_t *limit, int64_t period_start_ms);

/*
 * A waiting request's ticket in an upstream's line across the cluster
 * (tickets:UPSTREAM, a sorted set scored by its arrival on Redis's clock):
 * "INSTANCE:ID", the id zero-padded to 20 digits, so that tickets of one
 * arrival millisecond sort by instance, then id (Redis orders equal scores
 * by member). Returns the length, 0 when it does not fit.
 */
size_t sl_cluster_ticket_name(char *out, size_t size, const char *instance, uint64_t id);

/*
 * The config key's value: "REVISION ORIGIN\n" then the config's text (its
 * secrets redacted). Returns a new string (caller frees) of *len bytes.
 */
char *sl_cluster_config_record(uint64_t revision, const char *origin, const char *text, size_t text_len,
                               size_t *len);

/*
 * Parses a config key's value: the revision, the origin (pointing into
 * record, origin_len bytes) and the text (pointing into record). False
 * when it is not one.
 */
bool sl_cluster_config_parse(const char *record, size_t len, uint64_t *revision, const char **origin,
                             size_t *origin_len, const char **text, size_t *text_len);

/*
 * Whether a pushed config (revision, origin) comes after the last one an
 * instance applied: a higher revision, or at the same revision (two pushes
 * at once on two instances) the origin that sorts later, so every instance
 * ends with the same one.
 */
bool sl_cluster_config_is_newer(uint64_t revision, const char *origin, size_t origin_len,
                                uint64_t last_revision, const char *last_origin);

/*
 * Clocks. offset_ms is Redis's clock minus this instance's wall clock (as
 * measured with the heartbeats); mono and wall are this instance's
 * monotonic and wall clocks read together. SL_CLUSTER_NEVER and the
 * throttle's "never" (INT64_MAX) map to each other.
 */
int64_t sl_cluster_redis_ms_of(int64_t mono_ms, int64_t now_mono, int64_t now_wall, int64_t offset_ms);
int64_t sl_cluster_mono_ms_of(int64_t redis_ms, int64_t now_mono, int64_t now_wall, int64_t offset_ms);

/*
 * The offset from one TIME read: Redis said redis_ms while this instance's
 * wall clock read sent_wall before the command and got_wall after its
 * reply; the reply is taken to stand at the middle of the round trip.
 */
int64_t sl_cluster_offset_ms(int64_t redis_ms, int64_t sent_wall, int64_t got_wall);

#endif
