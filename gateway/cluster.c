/*
 * The cluster's thread (cluster.h): hiredis's asynchronous API driven by a
 * poll() loop of its own. Everything but the submission queue, the state
 * and the clock offset belongs to that thread alone.
 */
#define _GNU_SOURCE /* pipe2 */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/async.h>

#include "cluster_scripts.h"
#include "core/cluster_msg.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

/* A command: queued by any thread, then in flight on the command connection until its answer. */
typedef struct cmd {
    struct cmd *next;
    sl_cluster_reply_cb done;
    void *ctx;
    int64_t deadline_ms; /* once sent */
    bool counted;        /* it missed its deadline and counted as a failure */
    bool as_script;      /* an EVAL sent as EVALSHA: sent again whole when Redis does not know the script */
    int argc;
    char **argv;
    size_t *lens;
} cmd_t;

/* One connection and the poll() interest hiredis asked for. */
typedef struct {
    redisAsyncContext *ac;
    short events;
} conn_t;

struct sl_cluster {
    /* the config, copied */
    char *host, *unix_path, *user, *password, *name, *instance;
    uint16_t port;
    uint32_t db, timeout_ms;
    char channel[160], hb_key[320], hb_prefix[200], instances_key[160];
    sl_cluster_hooks_t hooks;

    pthread_t thread;
    int wake_rd, wake_wr;
    pthread_mutex_t lock; /* guards queue and stopping */
    cmd_t *queue, *queue_tail;
    bool stopping;

    _Atomic int state;
    atomic_bool ever_joined;
    atomic_uint instances;
    atomic_int_fast64_t offset_ms;
    pthread_mutex_t roster_lock; /* guards the roster */
    sl_cluster_member_t *roster;
    size_t n_roster;

    /* the thread's own */
    conn_t cmd, sub;
    cmd_t *inflight, *inflight_tail;
    int failures;
    bool subscribed, beat_once;
    bool restarted; /* a new run id seen: told with the next join */
    int64_t beat_sent_wall;
    int64_t reconnect_at_ms, backoff_ms, next_beat_ms, next_tick_ms;
    char run_id[48];
    sl_script_shas_t shas;
};

const char *
sl_cluster_state_slug(sl_cluster_state_t state)
{
    switch (state) {
    case SL_CLUSTER_JOINED:
        return "joined";
    case SL_CLUSTER_DEGRADED:
        return "degraded";
    default:
        return "connecting";
    }
}

/* ---- commands ----------------------------------------------------------------------------------- */

static cmd_t *
cmd_new(int argc, const char *const *argv, const size_t *lens, sl_cluster_reply_cb done, void *ctx)
{
    size_t bytes = sizeof(cmd_t) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    for (int i = 0; i < argc; i++)
        bytes += lens[i] + 1;
    cmd_t *m = sl_xcalloc(1, bytes);
    m->done = done;
    m->ctx = ctx;
    m->argc = argc;
    m->argv = (char **)(m + 1);
    m->lens = (size_t *)(m->argv + argc);
    char *p = (char *)(m->lens + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(p, argv[i], lens[i]);
        p[lens[i]] = '\0';
        m->argv[i] = p;
        m->lens[i] = lens[i];
        p += lens[i] + 1;
    }
    return m;
}

static void
answer(cmd_t *m, const redisReply *reply)
{
    if (m->done != NULL)
        m->done(m->ctx, reply);
    free(m);
}

static void
wake(sl_cluster_t *c)
{
    char b = 1;
    ssize_t n = write(c->wake_wr, &b, 1);
    (void)n; /* a full pipe already wakes the thread */
}

void
sl_cluster_command(sl_cluster_t *c, int argc, const char *const *argv, const size_t *lens,
                   sl_cluster_reply_cb done, void *ctx)
{
    cmd_t *m = cmd_new(argc, argv, lens, done, ctx);
    pthread_mutex_lock(&c->lock);
    bool stopped = c->stopping;
    if (!stopped) {
        if (c->queue_tail != NULL)
            c->queue_tail->next = m;
        else
            c->queue = m;
        c->queue_tail = m;
    }
    pthread_mutex_unlock(&c->lock);
    if (stopped)
        answer(m, NULL);
    else
        wake(c);
}

void
sl_cluster_commandv(sl_cluster_t *c, sl_cluster_reply_cb done, void *ctx, int argc, const char *const *argv)
{
    size_t lens[16];
    if (argc > 16)
        argc = 16;
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    sl_cluster_command(c, argc, argv, lens, done, ctx);
}

void
sl_cluster_args_add(sl_cluster_args_t *a, const char *s)
{
    if (a->argc == a->cap) {
        a->cap = a->cap * 2 + 16;
        a->argv = sl_xrealloc(a->argv, (size_t)a->cap * sizeof(*a->argv));
        a->lens = sl_xrealloc(a->lens, (size_t)a->cap * sizeof(*a->lens));
    }
    a->argv[a->argc] = sl_xstrdup(s);
    a->lens[a->argc] = strlen(s);
    a->argc++;
}

void
sl_cluster_args_add_static(sl_cluster_args_t *a, const char *s)
{
    if (a->argc >= 32) {
        sl_cluster_args_add(a, s);
        return;
    }
    sl_cluster_args_add(a, "");
    free(a->argv[a->argc - 1]);
    a->argv[a->argc - 1] = (char *)s;
    a->lens[a->argc - 1] = strlen(s);
    a->borrowed |= 1u << (a->argc - 1);
}

void
sl_cluster_args_addf(sl_cluster_args_t *a, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    sl_cluster_args_add(a, buf);
}

void
sl_cluster_args_free(sl_cluster_args_t *a)
{
    for (int i = 0; i < a->argc; i++) {
        if (i >= 32 || !(a->borrowed & (1u << i)))
            free(a->argv[i]);
    }
    free(a->argv);
    free(a->lens);
    *a = (sl_cluster_args_t){0};
}

void
sl_cluster_send(sl_cluster_t *c, sl_cluster_args_t *a, sl_cluster_reply_cb done, void *ctx)
{
    sl_cluster_command(c, a->argc, (const char *const *)a->argv, a->lens, done, ctx);
    sl_cluster_args_free(a);
}

void
sl_cluster_publish(sl_cluster_t *c, const char *line, size_t len)
{
    const char *argv[] = {"PUBLISH", c->channel, line};
    size_t lens[] = {7, strlen(c->channel), len};
    sl_cluster_command(c, 3, argv, lens, NULL, NULL);
}

/* ---- state -------------------------------------------------------------------------------------- */

static void
set_state(sl_cluster_t *c, sl_cluster_state_t state, const char *reason)
{
    if (state == SL_CLUSTER_JOINED)
        atomic_store(&c->ever_joined, true);
    sl_cluster_state_t was = (sl_cluster_state_t)atomic_exchange(&c->state, (int)state);
    if (was == state)
        return;
    uint32_t n = atomic_load(&c->instances);
    if (state == SL_CLUSTER_JOINED)
        sl_log_info("cluster %s: joined as %s (%u instance%s live)", c->name, c->instance, n,
                    n == 1 ? "" : "s");
    else
        sl_log_warn("cluster %s: degraded: %s", c->name, reason);
    if (c->hooks.on_state != NULL)
        c->hooks.on_state(c->hooks.ctx, state, reason, n);
}

/* A command got no answer in time: after a few in a row the instance goes on alone. */
static void
count_failure(sl_cluster_t *c)
{
    if (++c->failures >= SL_CLUSTER_FAILURES_TO_DEGRADE && atomic_load(&c->state) == SL_CLUSTER_JOINED)
        set_state(c, SL_CLUSTER_DEGRADED, "Redis answered no command within timeout_ms");
}

/* ---- hiredis on poll() -------------------------------------------------------------------------- */

static void
add_read(void *p)
{
    ((conn_t *)p)->events |= POLLIN;
}
static void
del_read(void *p)
{
    ((conn_t *)p)->events &= (short)~POLLIN;
}
static void
add_write(void *p)
{
    ((conn_t *)p)->events |= POLLOUT;
}
static void
del_write(void *p)
{
    ((conn_t *)p)->events &= (short)~POLLOUT;
}
static void
cleanup(void *p)
{
    conn_t *conn = p;
    conn->events = 0;
    conn->ac = NULL;
}

static void
attach(conn_t *conn, redisAsyncContext *ac)
{
    conn->ac = ac;
    conn->events = 0;
    ac->ev.data = conn;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
}

/* ---- the connections ---------------------------------------------------------------------------- */

static void close_both(sl_cluster_t *c, const char *why);

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    sl_cluster_t *c = ac->data;
    if (c->cmd.ac == ac)
        c->cmd.ac = NULL;
    if (c->sub.ac == ac)
        c->sub.ac = NULL;
    if (!c->stopping)
        close_both(c, "the connection to Redis broke");
}

static void
on_connect(const redisAsyncContext *ac, int status)
{
    if (status == REDIS_OK)
        return;
    /* hiredis frees the context after this callback, without a disconnect callback. */
    sl_cluster_t *c = ac->data;
    if (c->cmd.ac == ac)
        c->cmd.ac = NULL;
    if (c->sub.ac == ac)
        c->sub.ac = NULL;
    char why[160];
    snprintf(why, sizeof(why), "cannot connect to Redis: %s", ac->errstr);
    close_both(c, why);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Takes m out of the in-flight list. */
static void
unlink_inflight(sl_cluster_t *c, cmd_t *m)
{
    cmd_t *prev = NULL;
    for (cmd_t *x = c->inflight; x != NULL; prev = x, x = x->next) {
        if (x != m)
            continue;
        if (prev != NULL)
            prev->next = m->next;
        else
            c->inflight = m->next;
        if (c->inflight_tail == m)
            c->inflight_tail = prev;
        return;
    }
}

/* Sends a command on the command connection; it is in flight until its answer. */
static void
send_cmd(sl_cluster_t *c, cmd_t *m)
{
    if (c->cmd.ac == NULL) {
        answer(m, NULL);
        return;
    }
    m->next = NULL;
    m->deadline_ms = sl_now_ms() + c->timeout_ms;
    if (c->inflight_tail != NULL)
        c->inflight_tail->next = m;
    else
        c->inflight = m;
    c->inflight_tail = m;
    int rc;
    const char *sha = NULL;
    /* A script goes by its SHA-1, not its few kilobytes, once Redis knows it. */
    if (!m->as_script && m->argc >= 2 && strcmp(m->argv[0], "EVAL") == 0)
        sha = sl_script_sha(&c->shas, m->argv[1], m->lens[1], false);
    if (sha != NULL) {
        m->as_script = true;
        const char *head = m->argv[0], *script = m->argv[1];
        size_t head_len = m->lens[0], script_len = m->lens[1];
        m->argv[0] = "EVALSHA", m->lens[0] = 7;
        m->argv[1] = (char *)sha, m->lens[1] = 40;
        rc = redisAsyncCommandArgv(c->cmd.ac, on_reply, m, m->argc, (const char **)m->argv, m->lens);
        m->argv[0] = (char *)head, m->lens[0] = head_len;
        m->argv[1] = (char *)script, m->lens[1] = script_len;
    } else {
        rc = redisAsyncCommandArgv(c->cmd.ac, on_reply, m, m->argc, (const char **)m->argv, m->lens);
    }
    if (rc != REDIS_OK) {
        unlink_inflight(c, m);
        answer(m, NULL);
    }
}

static void
send_own(sl_cluster_t *c, sl_cluster_reply_cb done, int argc, const char *const *argv)
{
    size_t lens[10];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    send_cmd(c, cmd_new(argc, argv, lens, done, c));
}

static void
on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    sl_cluster_t *c = ac->data;
    cmd_t *m = privdata;
    unlink_inflight(c, m);
    redisReply *r = reply;
    if (r != NULL && m->as_script && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Redis does not know the script (yet, or any more since a restart): the whole EVAL caches it. */
        send_cmd(c, m);
        return;
    }
    if (reply != NULL && !m->counted)
        c->failures = 0;
    answer(m, reply);
}

/* Subscribed and a heartbeat answered in time: joined. */
static void
maybe_joined(sl_cluster_t *c)
{
    if (!c->subscribed || !c->beat_once || atomic_load(&c->state) == SL_CLUSTER_JOINED)
        return;
    bool redis_restarted = c->restarted;
    c->restarted = false;
    c->backoff_ms = 100;
    set_state(c, SL_CLUSTER_JOINED, NULL);
    if (c->hooks.on_joined != NULL)
        c->hooks.on_joined(c->hooks.ctx, redis_restarted);
}

static bool
reply_is_error(const redisReply *r)
{
    return r == NULL || r->type == REDIS_REPLY_ERROR;
}

static void
on_auth(void *ctx, const redisReply *r)
{
    sl_cluster_t *c = ctx;
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        char why[200];
        snprintf(why, sizeof(why), "Redis refused the password: %.*s", (int)r->len, r->str);
        close_both(c, why);
    }
}

static void
on_info(void *ctx, const redisReply *r)
{
    sl_cluster_t *c = ctx;
    if (reply_is_error(r) || r->type != REDIS_REPLY_STRING)
        return;
    const char *p = strstr(r->str, "run_id:");
    if (p == NULL)
        return;
    p += 7;
    size_t n = strcspn(p, "\r\n");
    char run_id[sizeof(c->run_id)];
    snprintf(run_id, sizeof(run_id), "%.*s", (int)n, p);
    /* A new run id after one was seen: Redis restarted, and without persistence its data is gone. */
    bool restarted = c->run_id[0] != '\0' && strcmp(run_id, c->run_id) != 0;
    memcpy(c->run_id, run_id, sizeof(run_id));
    c->beat_once = false;
    if (restarted) {
        sl_log_warn("cluster %s: Redis restarted (run id %s)", c->name, run_id);
        c->restarted = true;
    }
}

/* The heartbeat's answer lists the live instances after its two numbers: name, heartbeat, name, ... */
static void
keep_roster(sl_cluster_t *c, const redisReply *r)
{
    size_t n = (r->elements - 2) / 2;
    sl_cluster_member_t *members = n > 0 ? sl_xcalloc(n, sizeof(*members)) : NULL;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        const redisReply *name = r->element[2 + 2 * i], *body = r->element[3 + 2 * i];
        if (name->type != REDIS_REPLY_STRING || body->type != REDIS_REPLY_STRING)
            continue;
        members[kept].name = sl_xstrdup(name->str);
        members[kept].body = sl_xstrdup(body->str);
        kept++;
    }
    pthread_mutex_lock(&c->roster_lock);
    sl_cluster_member_t *old = c->roster;
    size_t n_old = c->n_roster;
    c->roster = members;
    c->n_roster = kept;
    pthread_mutex_unlock(&c->roster_lock);
    sl_cluster_roster_free(old, n_old);
}

static void
on_heartbeat(void *ctx, const redisReply *r)
{
    sl_cluster_t *c = ctx;
    int64_t got = sl_wall_ms();
    if (reply_is_error(r) || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
        return;
    /* An answer that came later than timeout_ms says nothing about now. */
    if (got - c->beat_sent_wall > (int64_t)c->timeout_ms)
        return;
    atomic_store(&c->offset_ms, sl_cluster_offset_ms(r->element[0]->integer, c->beat_sent_wall, got));
    unsigned was = atomic_exchange(&c->instances, (unsigned)r->element[1]->integer);
    keep_roster(c, r);
    c->beat_once = true;
    if (was != (unsigned)r->element[1]->integer && atomic_load(&c->state) == SL_CLUSTER_JOINED &&
        c->hooks.on_state != NULL)
        c->hooks.on_state(c->hooks.ctx, SL_CLUSTER_JOINED, NULL, (uint32_t)r->element[1]->integer);
    if (atomic_load(&c->state) != SL_CLUSTER_JOINED) {
        maybe_joined(c);
    } else if (c->restarted) {
        c->restarted = false;
        if (c->hooks.on_joined != NULL)
            c->hooks.on_joined(c->hooks.ctx, true);
    }
}

/* The heartbeat, and INFO before it: a Redis restarted between two beats shows a new run id. */
static void
heartbeat(sl_cluster_t *c)
{
    send_own(c, on_info, 2, (const char *[]){"INFO", "server"});
    char body[4096], ttl[16];
    if (c->hooks.describe != NULL)
        c->hooks.describe(c->hooks.ctx, body, sizeof(body));
    else
        snprintf(body, sizeof(body), "{\"pid\":%ld,\"at_ms\":%" PRId64 "}", (long)getpid(), sl_wall_ms());
    snprintf(ttl, sizeof(ttl), "%d", SL_CLUSTER_HEARTBEAT_TTL_MS);
    const char *argv[] = {
        "EVAL",      SL_CLUSTER_HEARTBEAT_LUA, "2", c->hb_key, c->instances_key, body, c->instance, ttl,
        c->hb_prefix};
    c->beat_sent_wall = sl_wall_ms();
    send_own(c, on_heartbeat, 9, argv);
}

static void
on_sub_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    sl_cluster_t *c = privdata;
    redisReply *r = reply;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "subscribe") == 0) {
        c->subscribed = true;
        maybe_joined(c);
        return;
    }
    if (strcmp(r->element[0]->str, "message") == 0 && r->element[2]->type == REDIS_REPLY_STRING &&
        c->hooks.on_message != NULL)
        c->hooks.on_message(c->hooks.ctx, r->element[2]->str, r->element[2]->len);
}

static redisAsyncContext *
connect_one(sl_cluster_t *c, conn_t *conn, char *why, size_t why_size)
{
    redisAsyncContext *ac =
        c->unix_path != NULL ? redisAsyncConnectUnix(c->unix_path) : redisAsyncConnect(c->host, c->port);
    if (ac == NULL) {
        snprintf(why, why_size, "cannot connect to Redis: out of memory");
        return NULL;
    }
    if (ac->err) {
        snprintf(why, why_size, "cannot connect to Redis: %s", ac->errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = c;
    attach(conn, ac);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    return ac;
}

static void
auth_args(sl_cluster_t *c, const char **argv, int *argc)
{
    argv[0] = "AUTH";
    *argc = 1;
    if (c->user != NULL)
        argv[(*argc)++] = c->user;
    argv[(*argc)++] = c->password;
}

static void
connect_both(sl_cluster_t *c)
{
    char why[200];
    c->subscribed = false;
    c->beat_once = false;
    if (connect_one(c, &c->cmd, why, sizeof(why)) == NULL ||
        connect_one(c, &c->sub, why, sizeof(why)) == NULL) {
        close_both(c, why);
        return;
    }
    const char *argv[4];
    int argc;
    if (c->password != NULL) {
        auth_args(c, argv, &argc);
        send_own(c, on_auth, argc, argv);
        size_t lens[3];
        for (int i = 0; i < argc; i++)
            lens[i] = strlen(argv[i]);
        redisAsyncCommandArgv(c->sub.ac, NULL, NULL, argc, argv, lens);
    }
    if (c->db != 0) {
        char db[12];
        snprintf(db, sizeof(db), "%u", c->db);
        send_own(c, NULL, 2, (const char *[]){"SELECT", db});
    }
    /* Named for whoever reads CLIENT LIST (an error, e.g. a name Redis refuses, changes nothing). */
    char name[240];
    snprintf(name, sizeof(name), "sluice:%s:commands", c->instance);
    send_own(c, NULL, 3, (const char *[]){"CLIENT", "SETNAME", name});
    snprintf(name, sizeof(name), "sluice:%s:events", c->instance);
    redisAsyncCommandArgv(c->sub.ac, NULL, NULL, 3, (const char *[]){"CLIENT", "SETNAME", name}, NULL);
    heartbeat(c);
    c->next_beat_ms = sl_now_ms() + SL_CLUSTER_HEARTBEAT_MS;
    const char *sub[] = {"SUBSCRIBE", c->channel};
    size_t sub_lens[] = {9, strlen(c->channel)};
    redisAsyncCommandArgv(c->sub.ac, on_sub_message, c, 2, sub, sub_lens);
}

/* Closes both connections (their commands answered with NULL) and tries again after a backoff. */
static void
close_both(sl_cluster_t *c, const char *why)
{
    redisAsyncContext *cmd = c->cmd.ac, *sub = c->sub.ac;
    c->cmd.ac = c->sub.ac = NULL;
    c->cmd.events = c->sub.events = 0;
    c->subscribed = false;
    c->beat_once = false;
    if (cmd != NULL) {
        cmd->onDisconnect = NULL;
        redisAsyncFree(cmd);
    }
    if (sub != NULL) {
        sub->onDisconnect = NULL;
        redisAsyncFree(sub);
    }
    if (c->stopping)
        return;
    set_state(c, SL_CLUSTER_DEGRADED, why);
    c->reconnect_at_ms = sl_now_ms() + c->backoff_ms;
    c->backoff_ms = c->backoff_ms * 2 > 2000 ? 2000 : c->backoff_ms * 2;
}

/* ---- the loop ----------------------------------------------------------------------------------- */

static cmd_t *
take_queue(sl_cluster_t *c, bool *stopping)
{
    pthread_mutex_lock(&c->lock);
    cmd_t *q = c->queue;
    c->queue = c->queue_tail = NULL;
    *stopping = c->stopping;
    pthread_mutex_unlock(&c->lock);
    return q;
}

static int64_t
check_deadlines(sl_cluster_t *c, int64_t now)
{
    int64_t next = INT64_MAX;
    for (cmd_t *m = c->inflight; m != NULL; m = m->next) {
        if (m->counted)
            continue;
        if (m->deadline_ms <= now) {
            m->counted = true;
            count_failure(c);
        } else if (m->deadline_ms < next) {
            next = m->deadline_ms;
        }
    }
    return next;
}

static void
handle(conn_t *conn, short revents)
{
    if (conn->ac != NULL && (revents & (POLLIN | POLLERR | POLLHUP)))
        redisAsyncHandleRead(conn->ac);
    if (conn->ac != NULL && (revents & POLLOUT))
        redisAsyncHandleWrite(conn->ac);
}

static void *
cluster_main(void *arg)
{
    sl_cluster_t *c = arg;
    pthread_setname_np(pthread_self(), "sl-cluster");
    for (;;) {
        bool stopping;
        cmd_t *q = take_queue(c, &stopping);
        if (stopping) {
            while (q != NULL) {
                cmd_t *next = q->next;
                answer(q, NULL);
                q = next;
            }
            break;
        }
        int64_t now = sl_now_ms();
        if (c->cmd.ac == NULL && now >= c->reconnect_at_ms)
            connect_both(c);
        bool joined = atomic_load(&c->state) == SL_CLUSTER_JOINED;
        while (q != NULL) {
            cmd_t *next = q->next;
            if (joined)
                send_cmd(c, q);
            else
                answer(q, NULL);
            q = next;
        }
        if (c->cmd.ac != NULL && now >= c->next_beat_ms) {
            heartbeat(c);
            if (atomic_load(&c->state) == SL_CLUSTER_JOINED && c->hooks.on_heartbeat != NULL)
                c->hooks.on_heartbeat(c->hooks.ctx);
            c->next_beat_ms = now + SL_CLUSTER_HEARTBEAT_MS;
        }
        if (now >= c->next_tick_ms) {
            if (atomic_load(&c->state) == SL_CLUSTER_JOINED && c->hooks.on_tick != NULL)
                c->hooks.on_tick(c->hooks.ctx);
            c->next_tick_ms = now + SL_CLUSTER_TICK_MS;
        }
        int64_t due = check_deadlines(c, now);
        if (c->next_tick_ms < due)
            due = c->next_tick_ms;
        if (c->cmd.ac != NULL && c->next_beat_ms < due)
            due = c->next_beat_ms;
        if (c->cmd.ac == NULL && c->reconnect_at_ms < due)
            due = c->reconnect_at_ms;
        int wait = due == INT64_MAX ? 1000 : due <= now ? 0 : due - now > 1000 ? 1000 : (int)(due - now);
        struct pollfd fds[3] = {{.fd = c->wake_rd, .events = POLLIN},
                                {.fd = c->cmd.ac != NULL ? c->cmd.ac->c.fd : -1, .events = c->cmd.events},
                                {.fd = c->sub.ac != NULL ? c->sub.ac->c.fd : -1, .events = c->sub.events}};
        if (poll(fds, 3, wait) < 0 && errno != EINTR)
            break;
        if (fds[0].revents & POLLIN) {
            char buf[64];
            while (read(c->wake_rd, buf, sizeof(buf)) > 0) {
            }
        }
        if (fds[1].fd >= 0)
            handle(&c->cmd, fds[1].revents);
        if (fds[2].fd >= 0 && c->sub.ac != NULL && c->sub.ac->c.fd == fds[2].fd)
            handle(&c->sub, fds[2].revents);
    }
    close_both(c, "stopping");
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------------------------- */

static char *
dup_or_null(const char *s)
{
    return s != NULL ? sl_xstrdup(s) : NULL;
}

sl_cluster_t *
sl_cluster_start(const sl_cluster_config_t *config, const char *instance, const sl_cluster_hooks_t *hooks)
{
    sl_cluster_t *c = sl_xcalloc(1, sizeof(*c));
    c->host = dup_or_null(config->redis_host);
    c->unix_path = dup_or_null(config->redis_unix_path);
    c->user = dup_or_null(config->redis_user);
    c->password = dup_or_null(config->redis_password);
    c->name = sl_xstrdup(config->name != NULL ? config->name : "sluice");
    c->instance = sl_xstrdup(instance);
    c->port = config->redis_port != 0 ? config->redis_port : 6379;
    c->db = config->redis_db;
    c->timeout_ms = config->timeout_ms != 0 ? config->timeout_ms : 50;
    c->hooks = *hooks;
    sl_cluster_key(c->channel, sizeof(c->channel), c->name, "events", NULL);
    sl_cluster_key(c->hb_key, sizeof(c->hb_key), c->name, "hb", c->instance);
    sl_cluster_key(c->instances_key, sizeof(c->instances_key), c->name, "instances", NULL);
    sl_cluster_key(c->hb_prefix, sizeof(c->hb_prefix), c->name, "hb", "");
    pthread_mutex_init(&c->roster_lock, NULL);
    c->backoff_ms = 100;
    atomic_init(&c->state, SL_CLUSTER_CONNECTING);
    pthread_mutex_init(&c->lock, NULL);
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(c);
        return NULL;
    }
    c->wake_rd = fds[0];
    c->wake_wr = fds[1];
    if (pthread_create(&c->thread, NULL, cluster_main, c) != 0) {
        close(fds[0]);
        close(fds[1]);
        free(c);
        return NULL;
    }
    return c;
}

void
sl_cluster_stop(sl_cluster_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_mutex_unlock(&c->lock);
    wake(c);
    pthread_join(c->thread, NULL);
    close(c->wake_rd);
    close(c->wake_wr);
    pthread_mutex_destroy(&c->lock);
    free(c->host);
    free(c->unix_path);
    free(c->user);
    free(c->password);
    free(c->name);
    free(c->instance);
    sl_script_shas_dispose(&c->shas);
    sl_cluster_roster_free(c->roster, c->n_roster);
    pthread_mutex_destroy(&c->roster_lock);
    free(c);
}

const char *
sl_cluster_instance(const sl_cluster_t *c)
{
    return c->instance;
}

const char *
sl_cluster_name(const sl_cluster_t *c)
{
    return c->name;
}

const char *
sl_cluster_hb_prefix(const sl_cluster_t *c)
{
    return c->hb_prefix;
}

uint32_t
sl_cluster_timeout_ms(const sl_cluster_t *c)
{
    return c->timeout_ms;
}

sl_cluster_endpoint_t
sl_cluster_endpoint(const sl_cluster_t *c)
{
    return (sl_cluster_endpoint_t){.host = c->host,
                                   .unix_path = c->unix_path,
                                   .user = c->user,
                                   .password = c->password,
                                   .port = c->port,
                                   .db = c->db};
}

bool
sl_cluster_ever_joined(const sl_cluster_t *c)
{
    return atomic_load(&((sl_cluster_t *)c)->ever_joined);
}

sl_cluster_state_t
sl_cluster_state(const sl_cluster_t *c)
{
    return (sl_cluster_state_t)atomic_load(&((sl_cluster_t *)c)->state);
}

uint32_t
sl_cluster_instances(const sl_cluster_t *c)
{
    return atomic_load(&((sl_cluster_t *)c)->instances);
}

int64_t
sl_cluster_clock_offset_ms(const sl_cluster_t *c)
{
    return atomic_load(&((sl_cluster_t *)c)->offset_ms);
}

size_t
sl_cluster_roster(const sl_cluster_t *c, sl_cluster_member_t **out)
{
    sl_cluster_t *m = (sl_cluster_t *)c;
    pthread_mutex_lock(&m->roster_lock);
    size_t n = m->n_roster;
    *out = n > 0 ? sl_xcalloc(n, sizeof(**out)) : NULL;
    for (size_t i = 0; i < n; i++) {
        (*out)[i].name = sl_xstrdup(m->roster[i].name);
        (*out)[i].body = sl_xstrdup(m->roster[i].body);
    }
    pthread_mutex_unlock(&m->roster_lock);
    return n;
}

void
sl_cluster_roster_free(sl_cluster_member_t *members, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(members[i].name);
        free(members[i].body);
    }
    free(members);
}
