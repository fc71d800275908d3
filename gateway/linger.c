#include "linger.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "worker.h"

int64_t
sl_linger_close_at_ms(const sl_linger_state_t *s)
{
    if (s->discarded >= SL_LINGER_MAX_BYTES)
        return s->last_read_ms;
    int64_t total = s->started_ms + SL_LINGER_TOTAL_MS, idle = s->last_read_ms + SL_LINGER_IDLE_MS;
    return total < idle ? total : idle;
}

struct sl_lingers {
    h2o_loop_t *loop;
    sl_timerheap_t *timers;
    unsigned count;
};

typedef struct lingering lingering_t;

/* Lives in the request's pool: tells the linger when h2o is done with the connection. */
typedef struct {
    lingering_t *linger; /* NULL once the linger ended first */
} answer_mark_t;

struct lingering {
    sl_timer_t timer; /* first: the timer leads back to its linger */
    sl_lingers_t *owner;
    h2o_socket_t *sock; /* on sluice's own descriptor of the connection */
    bool tls;           /* h2o still writes TLS's close_notify after letting go: the write side stays */
    answer_mark_t *mark;
    sl_linger_state_t state;
};

static void
linger_end(lingering_t *l)
{
    if (l->mark != NULL)
        l->mark->linger = NULL;
    sl_timer_cancel(l->owner->timers, &l->timer);
    h2o_socket_read_stop(l->sock);
    h2o_socket_close(l->sock);
    l->owner->count--;
    free(l);
}

static void
on_timer(sl_timer_t *timer)
{
    lingering_t *l = (lingering_t *)timer;
    int64_t at = sl_linger_close_at_ms(&l->state);
    if (sl_now_ms() >= at)
        linger_end(l);
    else
        sl_timer_arm(l->owner->timers, &l->timer, at, on_timer);
}

static void
on_read(h2o_socket_t *sock, const char *err)
{
    lingering_t *l = sock->data;
    if (err != NULL) {
        /* The client closed (or reset): nothing left to wait for. */
        linger_end(l);
        return;
    }
    l->state.discarded += sock->input->size;
    l->state.last_read_ms = sl_now_ms();
    h2o_buffer_consume(&sock->input, sock->input->size);
    if (l->state.discarded >= SL_LINGER_MAX_BYTES)
        linger_end(l);
}

/* h2o has written the answer and is letting the connection go: the client may now see its end. */
static void
on_answer_done(void *p)
{
    answer_mark_t *mark = p;
    lingering_t *l = mark->linger;
    if (l == NULL)
        return;
    l->mark = NULL;
    if (!l->tls)
        shutdown(h2o_socket_get_fd(l->sock), SHUT_WR);
}

sl_lingers_t *
sl_lingers_new(h2o_loop_t *loop, sl_timerheap_t *timers)
{
    sl_lingers_t *lingers = sl_xcalloc(1, sizeof(*lingers));
    lingers->loop = loop;
    lingers->timers = timers;
    return lingers;
}

/* Lingers on sock (which the linger then owns) from now on; false when the worker already lingers on enough.
 */
static lingering_t *
linger_begin(sl_lingers_t *lingers, h2o_socket_t *sock, bool tls)
{
    if (lingers->count >= SL_LINGER_MAX_CONNS)
        return NULL;
    lingering_t *l = sl_xcalloc(1, sizeof(*l));
    l->owner = lingers;
    l->sock = sock;
    l->tls = tls;
    int64_t now = sl_now_ms();
    l->state = (sl_linger_state_t){.started_ms = now, .last_read_ms = now};
    sock->data = l;
    lingers->count++;
    h2o_socket_read_start(sock, on_read);
    sl_timer_arm(lingers->timers, &l->timer, sl_linger_close_at_ms(&l->state), on_timer);
    return l;
}

void
sl_linger_start(sl_lingers_t *lingers, h2o_req_t *req)
{
    if (lingers == NULL || req->version >= 0x200 || lingers->count >= SL_LINGER_MAX_CONNS)
        return;
    h2o_socket_t *client = req->conn->callbacks->get_socket(req->conn);
    if (client == NULL)
        return;
    /* A second descriptor keeps the connection open after h2o closes its own. */
    int fd = fcntl(h2o_socket_get_fd(client), F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return;
    lingering_t *l =
        linger_begin(lingers, h2o_evloop_socket_create(lingers->loop, fd, 0), client->ssl != NULL);
    l->mark = h2o_mem_alloc_shared(&req->pool, sizeof(*l->mark), on_answer_done);
    l->mark->linger = l;
}

void
sl_linger_socket(sl_lingers_t *lingers, h2o_socket_t *sock)
{
    bool tls = sock->ssl != NULL;
    if (!tls)
        shutdown(h2o_socket_get_fd(sock), SHUT_WR);
    if (lingers == NULL || linger_begin(lingers, sock, tls) == NULL)
        h2o_socket_close(sock);
}

unsigned
sl_lingers_count(const sl_lingers_t *lingers)
{
    return lingers != NULL ? lingers->count : 0;
}
