#define _GNU_SOURCE /* accept4, pipe2 */
/*
 * The demo upstream's shell: a poll() loop over a listening socket, a wake
 * pipe and the connections, one timer per connection (the next piece of
 * its answer is due at due_ms). Every decision is core/demo_script.c's;
 * this file reads requests, writes answers and keeps time.
 */
#include "demo.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/demo_script.h"
#include "core/dialect.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

/* Bounds: what one request may hold, how many connections, how long an idle one is kept. */
#define MAX_HEAD      (64 * 1024)
#define MAX_BODY      (8 * 1024 * 1024)
#define MAX_HEADERS   100
#define MAX_CONNS     1024
#define IDLE_MS       65000
#define MAX_POLL_WAIT 1000
#define NO_PIN        (-1)

typedef enum {
    CONN_READING,   /* waiting for (the rest of) a request */
    CONN_ANSWERING, /* an answer is being sent, piece by piece */
    CONN_CLOSING,   /* flush what is queued, then close */
} conn_state_t;

typedef struct {
    int fd;
    conn_state_t state;
    char *in;
    size_t in_len, in_cap;
    sl_strbuf_t out;
    size_t out_off;
    sl_demo_answer_t ans;
    uint64_t serial;
    bool head_sent;
    size_t next_piece;
    int64_t due_ms;
    bool keep_alive;
    int64_t active_ms; /* the last byte read or written */
} conn_t;

struct sl_demo {
    int listen_fd;
    int wake[2];
    uint16_t port;
    pthread_t thread;
    int64_t start_ms;
    _Atomic int pin; /* a sl_demo_trouble_t, or NO_PIN to cycle */
    atomic_bool stopping;
    uint64_t seed;
    uint64_t serial;
    conn_t **conns;
    size_t n_conns;
};

static sl_demo_phase_t
phase_now(const sl_demo_t *d, int64_t now)
{
    int pin = atomic_load(&((sl_demo_t *)d)->pin);
    return sl_demo_phase_at(now - d->start_ms, pin != NO_PIN,
                            pin != NO_PIN ? (sl_demo_trouble_t)pin : SL_DEMO_CALM);
}

/* ---- connections ---------------------------------------------------------------------------------- */

static void
conn_close(sl_demo_t *d, size_t i)
{
    conn_t *c = d->conns[i];
    /* Unread input at close() turns the FIN into a RST, which may destroy the answer before the peer
     * reads it (a 400 to a request whose body is still coming): send the FIN, take what has arrived. */
    shutdown(c->fd, SHUT_WR);
    char sink[4096];
    for (int k = 0; k < 64 && recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; k++)
        ;
    close(c->fd);
    free(c->in);
    free(c->out.data);
    sl_demo_answer_free(&c->ans);
    free(c);
    d->conns[i] = d->conns[--d->n_conns];
}

/* Starts sending ans (taken over) on c: the head and pieces go out as their delays pass. */
static void
conn_answer(conn_t *c, sl_demo_answer_t *ans, int64_t now)
{
    sl_demo_answer_free(&c->ans);
    c->ans = *ans;
    *ans = (sl_demo_answer_t){0};
    c->state = CONN_ANSWERING;
    c->head_sent = false;
    c->next_piece = 0;
    c->due_ms = now + c->ans.head_delay_ms;
}

/* A plain answer of the server itself (garbage in, unknown paths): JSON, then close unless keep is set. */
static void
conn_plain(conn_t *c, int status, const char *message, bool keep, int64_t now)
{
    sl_demo_answer_t a = {.status = status,
                          .reason = status == 404   ? "Not Found"
                                    : status == 413 ? "Payload Too Large"
                                                    : "Bad Request",
                          .content_type = "application/json",
                          .end = SL_DEMO_END_FINISH};
    sl_strbuf_appendf(&a.body, "{\"error\":{\"message\":\"demo upstream: %s\"}}", message);
    a.pieces = sl_xmalloc(sizeof *a.pieces);
    a.pieces[0] = (sl_demo_piece_t){0, a.body.len, 0};
    a.n_pieces = 1;
    c->keep_alive = c->keep_alive && keep;
    conn_answer(c, &a, now);
}

static void
write_head(conn_t *c)
{
    const sl_demo_answer_t *a = &c->ans;
    sl_strbuf_appendf(&c->out, "HTTP/1.1 %d %s\r\ncontent-type: %s\r\nx-request-id: req_demo_%" PRIx64 "\r\n",
                      a->status, a->reason, a->content_type, c->serial);
    if (a->headers.len > 0)
        sl_strbuf_append(&c->out, a->headers.data, a->headers.len);
    if (a->chunked)
        sl_strbuf_appendf(&c->out, "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n");
    else
        sl_strbuf_appendf(&c->out, "content-length: %zu\r\n", a->body.len);
    if (!c->keep_alive)
        sl_strbuf_appendf(&c->out, "connection: close\r\n");
    sl_strbuf_append(&c->out, "\r\n", 2);
}

/* Moves c's answer on as far as its timers allow; false when c is to be closed now. */
static bool
conn_advance(conn_t *c, int64_t now)
{
    while (c->state == CONN_ANSWERING && c->out_off == c->out.len && now >= c->due_ms) {
        sl_demo_answer_t *a = &c->ans;
        if (!c->head_sent) {
            if (a->end == SL_DEMO_END_CLOSE_BEFORE_HEAD)
                return false;
            write_head(c);
            c->head_sent = true;
            c->due_ms = now + (a->n_pieces > 0 ? a->pieces[0].delay_ms : 0);
            continue;
        }
        if (c->next_piece < a->n_pieces) {
            const sl_demo_piece_t *p = &a->pieces[c->next_piece++];
            if (p->len > 0 && a->chunked)
                sl_strbuf_appendf(&c->out, "%zx\r\n", p->len);
            sl_strbuf_append(&c->out, a->body.data + p->off, p->len);
            if (p->len > 0 && a->chunked)
                sl_strbuf_append(&c->out, "\r\n", 2);
            c->due_ms = now + (c->next_piece < a->n_pieces ? a->pieces[c->next_piece].delay_ms : 0);
            continue;
        }
        if (a->end == SL_DEMO_END_CUT) {
            c->state = CONN_CLOSING;
            break;
        }
        if (a->chunked)
            sl_strbuf_append(&c->out, "0\r\n\r\n", 5);
        sl_demo_answer_free(a);
        c->state = c->keep_alive ? CONN_READING : CONN_CLOSING;
    }
    return true;
}

/* Writes what is queued; false when the connection is gone. */
static bool
conn_flush(conn_t *c, int64_t now)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        c->out_off += (size_t)n;
        c->active_ms = now;
    }
    c->out.len = c->out_off = 0;
    return true;
}

/* ---- requests ------------------------------------------------------------------------------------- */

static bool
is_token_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

typedef struct {
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
    sl_header_t headers[MAX_HEADERS];
    size_t n_headers;
    size_t head_len; /* through the blank line */
    uint64_t body_len;
    bool keep_alive;
} head_t;

typedef enum { HEAD_MORE, HEAD_OK, HEAD_BAD, HEAD_TOO_LARGE } head_status_t;

/* Parses the request head at in[0..len): request line, headers, the body's framing. */
static head_status_t
parse_head(const char *in, size_t len, head_t *h, const char **why)
{
    const char *end = NULL;
    for (size_t i = 0; i + 3 < len && i + 3 < MAX_HEAD; i++) {
        if (in[i] == '\r' && in[i + 1] == '\n' && in[i + 2] == '\r' && in[i + 3] == '\n') {
            end = in + i + 2; /* the head's lines end here; the blank line follows */
            break;
        }
    }
    if (end == NULL) {
        *why = "request head too large";
        return len >= MAX_HEAD ? HEAD_TOO_LARGE : HEAD_MORE;
    }
    *h = (head_t){.head_len = (size_t)(end - in) + 2, .keep_alive = true};
    *why = "malformed request line";
    const char *p = in;
    const char *eol = memchr(p, '\r', (size_t)(end - p));
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (sp1 == NULL || sp1 == p)
        return HEAD_BAD;
    for (const char *m = p; m < sp1; m++) {
        if (!is_token_char(*m))
            return HEAD_BAD;
    }
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (sp2 == NULL || sp2 == sp1 + 1 || sp1[1] != '/')
        return HEAD_BAD;
    for (const char *t = sp1 + 1; t < sp2; t++) {
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
            return HEAD_BAD;
    }
    size_t vlen = (size_t)(eol - sp2 - 1);
    if (vlen == 8 && memcmp(sp2 + 1, "HTTP/1.0", 8) == 0)
        h->keep_alive = false;
    else if (vlen != 8 || memcmp(sp2 + 1, "HTTP/1.1", 8) != 0)
        return HEAD_BAD;
    h->method = p;
    h->method_len = (size_t)(sp1 - p);
    h->target = sp1 + 1;
    h->target_len = (size_t)(sp2 - sp1 - 1);

    bool have_length = false;
    *why = "malformed header";
    for (p = eol + 2; p < end; p = eol + 2) {
        eol = memchr(p, '\r', (size_t)(end - p) + 1);
        if (eol == NULL || eol[1] != '\n')
            return HEAD_BAD;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL || colon == p)
            return HEAD_BAD;
        for (const char *n = p; n < colon; n++) {
            if (!is_token_char(*n))
                return HEAD_BAD;
        }
        const char *v = colon + 1, *ve = eol;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (const char *x = v; x < ve; x++) {
            if ((unsigned char)*x < 0x20 && *x != '\t')
                return HEAD_BAD;
        }
        if (h->n_headers == MAX_HEADERS) {
            *why = "too many headers";
            return HEAD_BAD;
        }
        size_t nlen = (size_t)(colon - p), len_v = (size_t)(ve - v);
        h->headers[h->n_headers++] = (sl_header_t){p, nlen, v, len_v};
        if (nlen == 14 && strncasecmp(p, "content-length", 14) == 0) {
            uint64_t n = 0;
            if (len_v == 0 || len_v > 12)
                return HEAD_BAD;
            for (size_t k = 0; k < len_v; k++) {
                if (v[k] < '0' || v[k] > '9')
                    return HEAD_BAD;
                n = n * 10 + (uint64_t)(v[k] - '0');
            }
            if (have_length && n != h->body_len)
                return HEAD_BAD;
            have_length = true;
            h->body_len = n;
        } else if (nlen == 17 && strncasecmp(p, "transfer-encoding", 17) == 0) {
            *why = "request bodies must have a content-length";
            return HEAD_BAD;
        } else if (nlen == 10 && strncasecmp(p, "connection", 10) == 0) {
            if (len_v == 5 && strncasecmp(v, "close", 5) == 0)
                h->keep_alive = false;
        }
    }
    if (h->body_len > MAX_BODY) {
        *why = "request body too large";
        return HEAD_TOO_LARGE;
    }
    return HEAD_OK;
}

/* Answers one whole request (head h, body at body). */
static void
dispatch(sl_demo_t *d, conn_t *c, const head_t *h, const char *body, int64_t now)
{
    char method[16];
    if (h->method_len >= sizeof method) {
        conn_plain(c, 404, "unknown method", true, now);
        return;
    }
    memcpy(method, h->method, h->method_len);
    method[h->method_len] = '\0';
    sl_demo_request_t req;
    sl_demo_parse_t r = sl_demo_request_parse(method, h->target, h->target_len, body, h->body_len, &req);
    if (r == SL_DEMO_PARSE_NOT_FOUND) {
        conn_plain(c, 404, "no such path (the demo upstream serves /a/... and /b/... in every dialect)", true,
                   now);
        return;
    }
    sl_header_array_t arr = {h->headers, h->n_headers};
    sl_headers_t headers = sl_headers_of_array(&arr);
    const char *q = memchr(h->target, '?', h->target_len);
    char key[SL_CLIENT_KEY_MAX];
    size_t key_len = 0;
    sl_demo_answer_t a;
    if (sl_dialect_client_key(req.dialect, &headers, q ? q + 1 : NULL,
                              q ? h->target_len - (size_t)(q + 1 - h->target) : 0, key,
                              &key_len) != SL_KEY_FOUND ||
        strcmp(key, SL_DEMO_UPSTREAM_KEY) != 0) {
        sl_demo_answer_error(req.dialect, 401, NULL, &a);
        sl_log_debug("demo: /%c %s: wrong upstream key", req.upstream, sl_dialect_slug(req.dialect));
        conn_answer(c, &a, now);
        return;
    }
    if (r == SL_DEMO_PARSE_BAD_BODY) {
        sl_demo_answer_error(req.dialect, 400, NULL, &a);
        conn_answer(c, &a, now);
        return;
    }
    req.unix_secs = sl_wall_ms() / 1000;
    req.serial = ++d->serial;
    c->serial = req.serial;
    sl_demo_trouble_t mode = phase_now(d, now).mode;
    /* decide() mixes its number, so seed + serial gives unrelated plans request after request. */
    sl_demo_plan_t plan = sl_demo_decide(&req, mode, d->seed + req.serial);
    sl_log_debug("demo: /%c %s %s%s -> %d %s", req.upstream, sl_dialect_slug(req.dialect), req.model,
                 req.stream ? " (stream)" : "", plan.status, sl_demo_outcome_name(plan.outcome));
    sl_demo_answer_build(&req, &plan, &a);
    conn_answer(c, &a, now);
}

/* Takes the next whole request out of c's input, if there is one. False: close c now. */
static bool
conn_take_request(sl_demo_t *d, conn_t *c, int64_t now)
{
    if (c->state != CONN_READING || c->in_len == 0)
        return true;
    head_t h;
    const char *why = NULL;
    head_status_t hs = parse_head(c->in, c->in_len, &h, &why);
    if (hs == HEAD_MORE)
        return true;
    if (hs != HEAD_OK) {
        /* The rest of the input cannot be framed: answer, then close. */
        c->keep_alive = false;
        conn_plain(c, hs == HEAD_TOO_LARGE ? 413 : 400, why, false, now);
        c->in_len = 0;
        return true;
    }
    if (c->in_len < h.head_len + h.body_len)
        return true;
    c->keep_alive = h.keep_alive;
    dispatch(d, c, &h, c->in + h.head_len, now);
    size_t used = h.head_len + (size_t)h.body_len;
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
    return true;
}

/* Reads what has arrived; false when the peer closed or the socket failed. */
static bool
conn_read(conn_t *c, int64_t now)
{
    for (;;) {
        if (c->in_cap - c->in_len < 16384) {
            if (c->in_cap >= MAX_HEAD + MAX_BODY + 16384)
                return true; /* full: the current request is answered before more is read */
            c->in_cap = c->in_cap ? c->in_cap * 2 : 16384;
            c->in = sl_xrealloc(c->in, c->in_cap);
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n == 0)
            return false;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        c->in_len += (size_t)n;
        c->active_ms = now;
    }
}

static void
accept_all(sl_demo_t *d, int64_t now)
{
    for (;;) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (d->n_conns == MAX_CONNS) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = sl_xcalloc(1, sizeof *c);
        c->fd = fd;
        c->state = CONN_READING;
        c->keep_alive = true;
        c->active_ms = now;
        d->conns[d->n_conns++] = c;
    }
}

/* ---- the loop ------------------------------------------------------------------------------------- */

static void
log_phase(const sl_demo_phase_t *ph, bool pinned)
{
    if (pinned)
        sl_log_info("demo: %s (pinned)", sl_demo_trouble_describe(ph->mode));
    else
        sl_log_info("demo: %s for %" PRId64 " s", sl_demo_trouble_describe(ph->mode),
                    (ph->end_ms - ph->start_ms) / 1000);
}

static void *
run(void *arg)
{
    sl_demo_t *d = arg;
    struct pollfd *pfds = sl_xcalloc(MAX_CONNS + 2, sizeof *pfds);
    sl_demo_phase_t last = {0};
    int last_pin = -2;
    while (!atomic_load(&d->stopping)) {
        int64_t now = sl_now_ms();
        int pin = atomic_load(&d->pin);
        sl_demo_phase_t ph = phase_now(d, now);
        if (pin != last_pin || ph.number != last.number || ph.mode != last.mode) {
            log_phase(&ph, pin != NO_PIN);
            last = ph;
            last_pin = pin;
        }
        int64_t wait = MAX_POLL_WAIT;
        if (ph.end_ms != INT64_MAX && ph.end_ms - (now - d->start_ms) < wait)
            wait = ph.end_ms - (now - d->start_ms);
        pfds[0] = (struct pollfd){.fd = d->listen_fd, .events = POLLIN};
        pfds[1] = (struct pollfd){.fd = d->wake[0], .events = POLLIN};
        for (size_t i = 0; i < d->n_conns; i++) {
            conn_t *c = d->conns[i];
            short ev = 0;
            if (c->in_cap - c->in_len >= 16384 || c->in_cap < MAX_HEAD + MAX_BODY + 16384)
                ev |= POLLIN;
            if (c->out_off < c->out.len)
                ev |= POLLOUT;
            else if (c->state == CONN_ANSWERING && c->due_ms - now < wait)
                wait = c->due_ms - now;
            else if (c->state == CONN_READING && c->active_ms + IDLE_MS - now < wait)
                wait = c->active_ms + IDLE_MS - now;
            pfds[2 + i] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        size_t polled = d->n_conns;
        int n = poll(pfds, polled + 2, wait > 0 ? (int)wait : 0);
        if (n < 0 && errno != EINTR) {
            sl_log_error("demo: poll: %s", strerror(errno));
            break;
        }
        now = sl_now_ms();
        if (n > 0 && (pfds[1].revents & POLLIN)) {
            char buf[64];
            while (read(d->wake[0], buf, sizeof buf) > 0)
                ;
        }
        /* Backwards, so that closing (which moves the last connection into the hole) skips nobody. */
        for (size_t i = polled; i-- > 0;) {
            conn_t *c = d->conns[i];
            short re = pfds[2 + i].revents;
            bool alive = true;
            if (re & (POLLIN | POLLHUP | POLLERR))
                alive = conn_read(c, now);
            if (alive && (re & POLLERR))
                alive = false;
            if (alive)
                alive = conn_take_request(d, c, now);
            if (alive)
                alive = conn_advance(c, now);
            if (alive)
                alive = conn_flush(c, now);
            /* A pipelined request may be waiting once an answer is done. */
            if (alive && c->state == CONN_READING && c->in_len > 0) {
                alive = conn_take_request(d, c, now) && conn_advance(c, now) && conn_flush(c, now);
            }
            if (alive && c->state == CONN_CLOSING && c->out_off == c->out.len)
                alive = false;
            if (alive && c->state == CONN_READING && now - c->active_ms >= IDLE_MS)
                alive = false;
            if (!alive)
                conn_close(d, i);
        }
        if (n > 0 && (pfds[0].revents & POLLIN))
            accept_all(d, now);
    }
    free(pfds);
    return NULL;
}

/* ---- the API -------------------------------------------------------------------------------------- */

static int
parse_pin(const char *pin)
{
    if (pin == NULL || *pin == '\0' || strcasecmp(pin, "cycle") == 0)
        return NO_PIN;
    sl_demo_trouble_t m;
    return sl_demo_trouble_parse(pin, &m) ? (int)m : -2;
}

static void
set_err(char *err, size_t size, const char *fmt, const char *arg)
{
    if (err != NULL && size > 0)
        snprintf(err, size, fmt, arg);
}

sl_demo_t *
sl_demo_start(const char *pin, char *err, size_t err_size)
{
    int p = parse_pin(pin);
    if (p == -2) {
        set_err(err, err_size, "unknown demo mode '%s' (calm, overload, rate-limit, drop, slow, or cycle)",
                pin);
        return NULL;
    }
    sl_demo_t *d = sl_xcalloc(1, sizeof *d);
    d->listen_fd = -1;
    d->wake[0] = d->wake[1] = -1;
    atomic_init(&d->pin, p);
    atomic_init(&d->stopping, false);
    d->conns = sl_xcalloc(MAX_CONNS, sizeof *d->conns);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    d->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (d->listen_fd < 0 || bind(d->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(d->listen_fd, 512) != 0 || getsockname(d->listen_fd, (struct sockaddr *)&sa, &sl) != 0 ||
        pipe2(d->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        set_err(err, err_size, "demo upstream: cannot listen on 127.0.0.1: %s", strerror(errno));
        goto fail;
    }
    d->port = ntohs(sa.sin_port);
    d->start_ms = sl_now_ms();
    d->seed = (uint64_t)sl_wall_ms() * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)getpid() << 32);
    int rc = pthread_create(&d->thread, NULL, run, d);
    if (rc != 0) {
        set_err(err, err_size, "demo upstream: cannot start its thread: %s", strerror(rc));
        goto fail;
    }
    return d;
fail:
    if (d->listen_fd >= 0)
        close(d->listen_fd);
    if (d->wake[0] >= 0) {
        close(d->wake[0]);
        close(d->wake[1]);
    }
    free(d->conns);
    free(d);
    return NULL;
}

uint16_t
sl_demo_port(const sl_demo_t *d)
{
    return d->port;
}

const char *
sl_demo_trouble_now(const sl_demo_t *d)
{
    return sl_demo_trouble_describe(phase_now(d, sl_now_ms()).mode);
}

bool
sl_demo_pin(sl_demo_t *d, const char *mode)
{
    int p = parse_pin(mode);
    if (p == -2)
        return false;
    atomic_store(&d->pin, p);
    ssize_t w = write(d->wake[1], "p", 1);
    (void)w; /* a full pipe already wakes the thread */
    return true;
}

void
sl_demo_stop(sl_demo_t *d)
{
    if (d == NULL)
        return;
    atomic_store(&d->stopping, true);
    ssize_t w = write(d->wake[1], "x", 1);
    (void)w;
    pthread_join(d->thread, NULL);
    while (d->n_conns > 0)
        conn_close(d, d->n_conns - 1);
    close(d->listen_fd);
    close(d->wake[0]);
    close(d->wake[1]);
    free(d->conns);
    free(d);
}

/* ---- the config ----------------------------------------------------------------------------------- */

char *
sl_demo_config_yaml(uint16_t port)
{
    static const struct {
        const char *protocol, *path; /* the base URL's path after /a or /b */
    } dialects[] = {
        {"anthropic", ""}, {"openai-chat", "/v1"}, {"openai-responses", "/v1"},
        {"gemini", ""},    {"bedrock", ""},
    };
    static const struct {
        const char *match, *protocol;
    } routes[] = {
        {"claude-*", "anthropic"}, {"gpt-5*", "openai-responses"}, {"gpt-*", "openai-chat"},
        {"gemini-*", "gemini"},    {"anthropic.*", "bedrock"},     {"us.anthropic.*", "bedrock"},
    };
    sl_strbuf_t y = {0};
    sl_strbuf_appendf(
        &y,
        "# sluice demo mode: every provider below is the built-in simulated upstream on\n"
        "# 127.0.0.1:%u, whose trouble (overload bursts, 429 storms, dropped streams, slow\n"
        "# first tokens) hits the '-a' upstreams, so failover to '-b' shows.\n"
        "# Models: claude-* (Anthropic), gpt-5* (OpenAI Responses), other gpt-* (OpenAI Chat),\n"
        "# gemini-* (Gemini), anthropic.* and us.anthropic.* (Bedrock Converse); claude-haiku-* and\n"
        "# gpt-4.1 have one upstream each (no failover: their trouble is retried or waited out).\n"
        "version: 1\n"
        "listen:\n"
        "  gateway: {bind: 127.0.0.1, port: 8080}\n"
        "  control: {bind: 127.0.0.1, port: 8081}\n"
        "clients:\n"
        "  - name: demo\n"
        "    key: \"%s\"\n"
        "providers:\n",
        port, SL_DEMO_CLIENT_KEY);
    for (size_t i = 0; i < sizeof dialects / sizeof dialects[0]; i++) {
        for (char u = 'a'; u <= 'b'; u++) {
            sl_strbuf_appendf(&y,
                              "  - name: demo-%s-%c\n"
                              "    protocol: %s\n"
                              "    base_url: http://127.0.0.1:%u/%c%s\n"
                              "    key: %s\n",
                              dialects[i].protocol, u, dialects[i].protocol, port, u, dialects[i].path,
                              SL_DEMO_UPSTREAM_KEY);
            if (strcmp(dialects[i].protocol, "bedrock") == 0)
                sl_strbuf_appendf(&y, "    region: us-east-1\n");
            if (strcmp(dialects[i].protocol, "openai-chat") == 0 && u == 'a')
                sl_strbuf_appendf(&y, "    limits:\n      - {per: minute, requests: 20}\n");
            if (strcmp(dialects[i].protocol, "anthropic") == 0 && u == 'b')
                sl_strbuf_appendf(&y, "    max_concurrent: 4\n");
        }
    }
    /* Two models with one upstream each, so that every kind of trouble the web app's Trouble absorbed
     * panel counts happens in the cycle: with no upstream to fail over to, the 'a' upstream's failures
     * are retried and its full window makes the request wait. */
    sl_strbuf_appendf(&y, "routes:\n"
                          "  - match: \"claude-haiku-*\"\n    failover: [demo-anthropic-a]\n"
                          "  - match: \"gpt-4.1\"\n    failover: [demo-openai-chat-a]\n");
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        sl_strbuf_appendf(&y, "  - match: \"%s\"\n    failover: [demo-%s-a, demo-%s-b]\n", routes[i].match,
                          routes[i].protocol, routes[i].protocol);
    /* Short breaker pauses: an overload burst opens the 'a' breakers, and they should close again
     * before the next kind of trouble, or it would never reach them. */
    sl_strbuf_appendf(&y, "failover:\n  wait_secs: 60\n  pause_secs: 10\n  max_pause_secs: 30\n");
    return sl_strbuf_finish(&y);
}
