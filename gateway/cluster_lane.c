/* A worker's connection to its cluster's Redis, on the worker's h2o loop (cluster_lane.h). */
#include "cluster_lane.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o/socket/evloop.h>
#include <hiredis/async.h>

#include "cluster_scripts.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

struct sl_cluster_lane {
    h2o_loop_t *loop;
    sl_timerheap_t *timers;
    const sl_cluster_t *cluster;
    redisAsyncContext *ac; /* NULL: no connection (the reconnect timer is armed) */
    h2o_socket_t *sock;    /* ac's descriptor on the loop */
    bool ready;            /* connected: commands may go */
    bool refused;          /* Redis refused the login: no use trying again with the same password */
    bool wants_write;      /* commands wait to be written, by sl_cluster_lane_flush */
    sl_timer_t reconnect;
    int64_t backoff_ms;
    sl_script_shas_t shas;
};

/* A command in flight; it owns its arguments (an EVAL is sent again whole when Redis lost the script). */
typedef struct {
    sl_cluster_lane_t *lane;
    sl_cluster_reply_cb done;
    void *ctx;
    bool by_sha, whole;
    sl_cluster_args_t args;
} lane_cmd_t;

/* ---- hiredis on h2o ------------------------------------------------------------------------------ */

static void
on_readable(h2o_socket_t *sock, const char *err)
{
    (void)err; /* DONT_READ: h2o reads nothing, so it reports no error; hiredis finds it */
    sl_cluster_lane_t *lane = sock->data;
    if (lane->ac != NULL)
        redisAsyncHandleRead(lane->ac);
}

static void
on_writable(h2o_socket_t *sock, const char *err)
{
    (void)err;
    sl_cluster_lane_t *lane = sock->data;
    if (lane->ac != NULL)
        redisAsyncHandleWrite(lane->ac);
}

static void
ev_add_read(void *p)
{
    sl_cluster_lane_t *lane = p;
    h2o_socket_read_start(lane->sock, on_readable);
}

static void
ev_del_read(void *p)
{
    sl_cluster_lane_t *lane = p;
    h2o_socket_read_stop(lane->sock);
}

static void
arm_write(sl_cluster_lane_t *lane)
{
    if (!h2o_socket_is_writing(lane->sock))
        h2o_socket_notify_write(lane->sock, on_writable);
}

/* Connected, the loop iteration's commands go in one write at its end; connecting, the connection's
 * writability says it is made. */
static void
ev_add_write(void *p)
{
    sl_cluster_lane_t *lane = p;
    if (lane->ready)
        lane->wants_write = true;
    else
        arm_write(lane);
}

/* A write notification fires once: nothing to take back. */
static void
ev_del_write(void *p)
{
    (void)p;
}

static void on_reconnect(sl_timer_t *t);

/* The connection is gone (hiredis frees it next): the socket goes with it, and a new one is tried later. */
static void
ev_cleanup(void *p)
{
    sl_cluster_lane_t *lane = p;
    if (lane->sock == NULL)
        return;
    h2o_socket_close(lane->sock); /* closes the descriptor: hiredis must not close it again */
    lane->sock = NULL;
    lane->ac->c.fd = -1;
    lane->ac = NULL;
    lane->ready = false;
    lane->wants_write = false;
    if (!lane->refused)
        sl_timer_arm(lane->timers, &lane->reconnect, sl_now_ms() + lane->backoff_ms, on_reconnect);
    lane->backoff_ms = lane->backoff_ms * 2 > 2000 ? 2000 : lane->backoff_ms * 2;
}

/* ---- the connection ------------------------------------------------------------------------------ */

static void
on_connect(const redisAsyncContext *ac, int status)
{
    sl_cluster_lane_t *lane = ac->data;
    if (status != REDIS_OK) {
        sl_log_debug("cluster %s: a worker cannot connect to Redis: %s", sl_cluster_name(lane->cluster),
                     ac->errstr);
        return;
    }
    lane->ready = !lane->refused;
    lane->backoff_ms = 100;
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
    sl_cluster_lane_t *lane = ac->data;
    if (status != REDIS_OK)
        sl_log_debug("cluster %s: a worker's connection to Redis broke: %s", sl_cluster_name(lane->cluster),
                     ac->errstr);
}

/* The cluster's thread says so too (and is degraded): here the lane just stays out of use. */
static void
on_login(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    sl_cluster_lane_t *lane = ac->data;
    redisReply *r = reply;
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        lane->refused = true;
        lane->ready = false;
    }
}

static void
lane_connect(sl_cluster_lane_t *lane)
{
    sl_cluster_endpoint_t at = sl_cluster_endpoint(lane->cluster);
    redisAsyncContext *ac =
        at.unix_path != NULL ? redisAsyncConnectUnix(at.unix_path) : redisAsyncConnect(at.host, at.port);
    if (ac == NULL || ac->err) {
        if (ac != NULL)
            redisAsyncFree(ac);
        sl_timer_arm(lane->timers, &lane->reconnect, sl_now_ms() + lane->backoff_ms, on_reconnect);
        lane->backoff_ms = lane->backoff_ms * 2 > 2000 ? 2000 : lane->backoff_ms * 2;
        return;
    }
    lane->ac = ac;
    lane->sock = h2o_evloop_socket_create(lane->loop, ac->c.fd, H2O_SOCKET_FLAG_DONT_READ);
    lane->sock->data = lane;
    ac->data = lane;
    ac->ev.data = lane;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    /* The first command is what makes hiredis find out that the connection is made. */
    if (at.password != NULL) {
        const char *argv[] = {"AUTH", at.user != NULL ? at.user : at.password, at.password};
        int argc = at.user != NULL ? 3 : 2;
        redisAsyncCommandArgv(ac, on_login, NULL, argc, argv, NULL);
    }
    if (at.db != 0) {
        char db[12];
        snprintf(db, sizeof(db), "%u", at.db);
        redisAsyncCommandArgv(ac, on_login, NULL, 2, (const char *[]){"SELECT", db}, NULL);
    }
    /* Named for whoever reads CLIENT LIST (an error, e.g. a name Redis refuses, changes nothing). */
    char name[240];
    snprintf(name, sizeof(name), "sluice:%s:worker", sl_cluster_instance(lane->cluster));
    redisAsyncCommandArgv(ac, NULL, NULL, 3, (const char *[]){"CLIENT", "SETNAME", name}, NULL);
}

static void
on_reconnect(sl_timer_t *t)
{
    sl_cluster_lane_t *lane = H2O_STRUCT_FROM_MEMBER(sl_cluster_lane_t, reconnect, t);
    if (lane->ac == NULL)
        lane_connect(lane);
}

sl_cluster_lane_t *
sl_cluster_lane_new(h2o_loop_t *loop, sl_timerheap_t *timers, const sl_cluster_t *cluster)
{
    sl_cluster_lane_t *lane = sl_xcalloc(1, sizeof(*lane));
    lane->loop = loop;
    lane->timers = timers;
    lane->cluster = cluster;
    lane->backoff_ms = 100;
    lane_connect(lane);
    return lane;
}

/* ---- commands ------------------------------------------------------------------------------------ */

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* A script goes by its SHA-1, not its few kilobytes, once Redis knows it. */
static bool
issue(lane_cmd_t *m)
{
    sl_cluster_lane_t *lane = m->lane;
    char **argv = m->args.argv;
    size_t *lens = m->args.lens;
    const char *sha = NULL;
    if (!m->whole && m->args.argc >= 2 && strcmp(argv[0], "EVAL") == 0)
        sha = sl_script_sha(&lane->shas, argv[1], lens[1], (m->args.borrowed & 2u) != 0);
    m->by_sha = sha != NULL;
    if (!m->by_sha)
        return redisAsyncCommandArgv(lane->ac, on_reply, m, m->args.argc, (const char **)argv, lens) ==
               REDIS_OK;
    const char *head = argv[0], *script = argv[1];
    size_t head_len = lens[0], script_len = lens[1];
    argv[0] = "EVALSHA", lens[0] = 7;
    argv[1] = (char *)sha, lens[1] = 40;
    int rc = redisAsyncCommandArgv(lane->ac, on_reply, m, m->args.argc, (const char **)argv, lens);
    argv[0] = (char *)head, lens[0] = head_len;
    argv[1] = (char *)script, lens[1] = script_len;
    return rc == REDIS_OK;
}

static void
on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    lane_cmd_t *m = privdata;
    redisReply *r = reply;
    if (r != NULL && m->by_sha && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Redis does not know the script (yet, or any more since a restart): the whole EVAL caches it. */
        m->whole = true;
        if (m->lane->ready && issue(m))
            return;
        r = NULL;
    }
    m->done(m->ctx, r);
    sl_cluster_args_free(&m->args);
    free(m);
}

/*
 * What the iteration buffered goes in one write, without waiting for the
 * loop's next poll. A failed or partial write is left to the writable
 * notification: hiredis then finds the error and breaks the connection
 * outside any caller's call.
 */
void
sl_cluster_lane_flush(sl_cluster_lane_t *lane)
{
    if (lane == NULL || !lane->wants_write || lane->ac == NULL)
        return;
    lane->wants_write = false;
    int done = 0;
    if (redisBufferWrite(&lane->ac->c, &done) == REDIS_ERR || !done)
        arm_write(lane);
    if (!h2o_socket_is_reading(lane->sock))
        h2o_socket_read_start(lane->sock, on_readable);
}

bool
sl_cluster_lane_send(sl_cluster_lane_t *lane, sl_cluster_args_t *a, sl_cluster_reply_cb done, void *ctx)
{
    if (lane == NULL || !lane->ready)
        return false;
    lane_cmd_t *m = sl_xmalloc(sizeof(*m));
    *m = (lane_cmd_t){.lane = lane, .done = done, .ctx = ctx, .args = *a};
    /* Refused while the connection is breaking (its pending commands are being answered with NULL). */
    if (!issue(m)) {
        free(m);
        return false;
    }
    *a = (sl_cluster_args_t){0};
    return true;
}
