/*
 * The connection of one instance to its cluster's Redis (cluster.md): a
 * thread of its own runs hiredis's asynchronous API over poll(), with two
 * connections (commands, and the subscription to the cluster's events
 * channel: a subscribed connection takes no other command), the heartbeat
 * that keeps this instance listed as live and measures Redis's clock, and
 * reconnection with backoff.
 *
 * Joined or degraded: degraded starts with a broken connection, or after 3
 * commands in a row got no answer within timeout_ms; it ends with the next
 * heartbeat answered in time. The state is readable from any thread.
 *
 * Commands may be sent from any thread; their answers (and the hooks) run
 * on the cluster's thread, so whoever needs one on a worker posts it there.
 */
#ifndef SL_CLUSTER_H
#define SL_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "core/types.h"

typedef struct sl_cluster sl_cluster_t;

typedef enum { SL_CLUSTER_CONNECTING, SL_CLUSTER_JOINED, SL_CLUSTER_DEGRADED } sl_cluster_state_t;

/* What the cluster's thread tells the rest of the instance. */
typedef struct {
    /* A line published on the events channel by any instance (this one's own too). */
    void (*on_message)(void *ctx, const char *line, size_t len);
    /* Joined (again): read the shared state; redis_restarted: Redis lost its data, announce this instance's.
     */
    void (*on_joined)(void *ctx, bool redis_restarted);
    /* The state, or while joined the count of live instances, changed (reason: why it degraded; NULL when
     * joined). */
    void (*on_state)(void *ctx, sl_cluster_state_t state, const char *reason, uint32_t instances);
    /* What this instance's heartbeat holds, for the others to read (written into out, NUL-terminated). */
    void (*describe)(void *ctx, char *out, size_t size);
    /* Each heartbeat, joined: renew what this instance holds (slot leases). */
    void (*on_heartbeat)(void *ctx);
    /* Every SL_CLUSTER_TICK_MS, joined: send what was batched (settlements). */
    void (*on_tick)(void *ctx);
    void *ctx;
} sl_cluster_hooks_t;

/*
 * Starts the thread; it connects in the background (a Redis that is down at
 * start makes the instance degraded, not stopped). instance names this
 * instance in keys and messages. NULL only when the thread cannot start.
 */
sl_cluster_t *sl_cluster_start(const sl_cluster_config_t *config, const char *instance,
                               const sl_cluster_hooks_t *hooks);

/* Stops the thread and closes the connections; a command still unanswered is answered with NULL. */
void sl_cluster_stop(sl_cluster_t *c);

const char *sl_cluster_instance(const sl_cluster_t *c);
const char *sl_cluster_name(const sl_cluster_t *c);
/* The heartbeat keys' common prefix ("{sl:NAME}:hb:"): a heartbeat's key is it and the instance. */
const char *sl_cluster_hb_prefix(const sl_cluster_t *c);
uint32_t sl_cluster_timeout_ms(const sl_cluster_t *c);

/* Where Redis is and how to log in to it (the strings live as long as c). */
typedef struct {
    const char *host, *unix_path, *user, *password;
    uint16_t port;
    uint32_t db;
} sl_cluster_endpoint_t;
sl_cluster_endpoint_t sl_cluster_endpoint(const sl_cluster_t *c);

sl_cluster_state_t sl_cluster_state(const sl_cluster_t *c);
/* Whether the instance was joined at least once since it started (degraded then, else still alone). */
bool sl_cluster_ever_joined(const sl_cluster_t *c);
static inline bool
sl_cluster_joined(const sl_cluster_t *c)
{
    return sl_cluster_state(c) == SL_CLUSTER_JOINED;
}
/* Live instances (this one included) as of the last heartbeat; 0 before the first. */
uint32_t sl_cluster_instances(const sl_cluster_t *c);
/* Redis's clock minus this instance's wall clock, ms (0 before the first heartbeat). */
int64_t sl_cluster_clock_offset_ms(const sl_cluster_t *c);

/* A live instance as of the last heartbeat answered: its name and what its heartbeat holds (describe's). */
typedef struct {
    char *name, *body;
} sl_cluster_member_t;

/* A copy of the live instances (this one included; none before the first heartbeat), for any thread. */
size_t sl_cluster_roster(const sl_cluster_t *c, sl_cluster_member_t **out);
void sl_cluster_roster_free(sl_cluster_member_t *members, size_t n);

/*
 * The answer to a command, on the cluster's thread: Redis's reply, or NULL
 * when there is none (not joined, the connection broke, the cluster
 * stopped). Called exactly once, however late: a caller that gave up
 * waiting (its own timeout_ms) undoes what a late reply did.
 */
typedef void (*sl_cluster_reply_cb)(void *ctx, const redisReply *reply);

/*
 * Sends a command (argv is copied; done may be NULL: no answer wanted). Not
 * joined: answered with NULL without being sent.
 */
void sl_cluster_command(sl_cluster_t *c, int argc, const char *const *argv, const size_t *lens,
                        sl_cluster_reply_cb done, void *ctx);

/* The same with NUL-terminated arguments. */
void sl_cluster_commandv(sl_cluster_t *c, sl_cluster_reply_cb done, void *ctx, int argc,
                         const char *const *argv);

/* A command's arguments, built one by one (each copied). */
typedef struct {
    char **argv;
    size_t *lens;
    int argc, cap;
    uint32_t borrowed; /* bit i: argv[i] is the caller's constant (sl_cluster_args_add_static), not a copy */
} sl_cluster_args_t;

void sl_cluster_args_add(sl_cluster_args_t *a, const char *s);
/*
 * s is a constant that outlives the command (a script's text): not copied,
 * and a script cache finds it by its address (cluster_scripts.h).
 */
void sl_cluster_args_add_static(sl_cluster_args_t *a, const char *s);
void sl_cluster_args_addf(sl_cluster_args_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sends them as sl_cluster_command does, and frees them (a is empty again). */
void sl_cluster_send(sl_cluster_t *c, sl_cluster_args_t *a, sl_cluster_reply_cb done, void *ctx);
void sl_cluster_args_free(sl_cluster_args_t *a);

/* Publishes a line on the cluster's events channel (no answer; dropped when not joined). */
void sl_cluster_publish(sl_cluster_t *c, const char *line, size_t len);

/* The state's slug for logs and /healthz: "connecting", "joined", "degraded". */
const char *sl_cluster_state_slug(sl_cluster_state_t state);

/* Commands in a row that get no answer in time before the instance is degraded. */
#define SL_CLUSTER_FAILURES_TO_DEGRADE 3
/* The heartbeat: refreshed every second, gone 3 s after its instance stopped refreshing it. */
#define SL_CLUSTER_HEARTBEAT_MS     1000
#define SL_CLUSTER_HEARTBEAT_TTL_MS 3000
/* Settlements go in one batch per tick. */
#define SL_CLUSTER_TICK_MS 100

#endif
