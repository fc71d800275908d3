/*
 * sluicectl: the command-line client of sluice's control endpoint. The
 * shell around the pure half (cli.h): it reads the key, connects with
 * libwebsockets (its own context, serviced on the main thread), says hello,
 * sends the command's request, and writes what cli.h formats. One state
 * enum and one message dispatch (on_message) drive it.
 */
#include "cli.h"

#include <errno.h>
#include <libwebsockets.h>
#include <openssl/x509.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TICK_US       (100 * LWS_US_PER_MS)
#define CLOSE_WAIT_US (1000 * LWS_US_PER_MS)
#define KEY_MAX       4096
/* A bigger message than this from the server is a fault, not something to buffer. */
#define RX_MAX (256u << 20)

typedef enum conn_state {
    CONN_HANDSHAKE, /* connecting, upgrading, hello sent: waiting for welcome */
    CONN_WAITING,   /* a request sent: waiting for its ok / error / snapshot */
    CONN_STREAMING, /* events: subscribed, printing */
    CONN_CLOSING,   /* finished: closing the connection */
    CONN_DONE,
} conn_state_t;

typedef struct out_msg {
    unsigned char *buf; /* LWS_PRE bytes of headroom, then the message */
    size_t len;
} out_msg_t;

typedef struct ctl {
    sl_cli_args_t args;
    char url[sizeof(((sl_cli_endpoint_t *)0)->authority) + sizeof(((sl_cli_endpoint_t *)0)->path) + 8];
    char *key;
    char *yaml; /* config put: the file */
    bool put_sent;

    struct lws_context *context;
    struct lws *wsi;
    conn_state_t state;
    int exit_code;
    uint32_t next_req;
    uint32_t pending_req; /* the request whose reply we wait for */
    lws_usec_t deadline;  /* monotonic; 0: none */
    lws_usec_t close_by;  /* CONN_CLOSING: give up on a clean close after this */
    bool output_closed;   /* stdout went away (a pipe's reader left) */
    lws_sorted_usec_list_t tick;

    out_msg_t *queue;
    size_t queue_head, queue_len, queue_cap;

    unsigned char *rx;
    size_t rx_len, rx_cap;
    bool rx_binary, rx_overflow;

    sl_cli_stream_t stream;
    /* `events`: the lines of the frame being read, written when it ends (one write per frame, not per event).
     */
    sl_strbuf_t frame_out, frame_err;

    /* `metrics`: a plain HTTP GET of /metrics instead of a WebSocket session. */
    int http_status;
    sl_strbuf_t http_body;
} ctl_t;

static volatile sig_atomic_t interrupted;

static void
on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static uint64_t
wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Writes b to f and empties it; a stdout that went away (EPIPE) ends the run quietly. */
static void
flush_to(ctl_t *c, sl_strbuf_t *b, FILE *f)
{
    if (b->len > 0 && !c->output_closed) {
        if (fwrite(b->data, 1, b->len, f) != b->len || fflush(f) != 0)
            c->output_closed = true;
    }
    free(sl_strbuf_finish(b));
}

/* Ends the run with code: a clean close when connected. */
static void
finish(ctl_t *c, int code)
{
    if (c->state == CONN_CLOSING || c->state == CONN_DONE)
        return;
    c->exit_code = code;
    if (c->wsi != NULL) {
        c->state = CONN_CLOSING;
        c->close_by = lws_now_usecs() + CLOSE_WAIT_US;
        lws_callback_on_writable(c->wsi);
    } else {
        c->state = CONN_DONE;
    }
}

__attribute__((format(printf, 3, 4))) static void
fail(ctl_t *c, int code, const char *fmt, ...)
{
    if (c->state == CONN_CLOSING || c->state == CONN_DONE)
        return;
    va_list ap;
    fputs("sluicectl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    finish(c, code);
}

/* Encodes m (and frees it) onto the queue; the WRITEABLE callback sends it. */
static void
send_message(ctl_t *c, sl_proto_message_t *m)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int rc = sl_proto_encode(m, &sb);
    sl_proto_message_free(m);
    if (rc != 0) {
        msgpack_sbuffer_destroy(&sb);
        fail(c, SL_CLI_EXIT_USAGE, "cannot encode the request (a value the protocol cannot carry)");
        return;
    }
    if (c->queue_len == c->queue_cap) {
        c->queue_cap = c->queue_cap ? c->queue_cap * 2 : 4;
        c->queue = sl_xrealloc(c->queue, c->queue_cap * sizeof *c->queue);
    }
    out_msg_t *o = &c->queue[c->queue_len++];
    o->buf = sl_xmalloc(LWS_PRE + sb.size);
    memcpy(o->buf + LWS_PRE, sb.data, sb.size);
    o->len = sb.size;
    msgpack_sbuffer_destroy(&sb);
    if (c->wsi != NULL)
        lws_callback_on_writable(c->wsi);
}

static void
await_reply(ctl_t *c, uint32_t req)
{
    c->pending_req = req;
    c->state = CONN_WAITING;
    c->deadline = lws_now_usecs() + (lws_usec_t)c->args.timeout_ms * LWS_US_PER_MS;
}

static void
start_command(ctl_t *c)
{
    sl_proto_message_t m;
    uint32_t req = c->next_req++;
    if (sl_cli_build_request(&c->args, req, wall_ms(), c->yaml, &m) != 0) {
        finish(c, SL_CLI_EXIT_USAGE);
        return;
    }
    c->put_sent = m.kind == SL_PROTO_MESSAGE_PUT_CONFIG;
    send_message(c, &m);
    await_reply(c, req);
}

static void
resubscribe(ctl_t *c)
{
    sl_proto_message_t m;
    uint32_t req = c->next_req++;
    sl_cli_build_subscribe(&c->args, req, &m);
    send_message(c, &m);
    c->pending_req = req;
}

static void
on_welcome(ctl_t *c, const sl_proto_welcome_msg_t *w)
{
    (void)w;
    c->deadline = 0;
    start_command(c);
}

static void
on_refused(ctl_t *c, const sl_proto_refused_msg_t *r)
{
    sl_strbuf_t err = {0};
    sl_strbuf_appendf(&err, "sluicectl: ");
    sl_cli_refused_line(r, &err);
    if (r->message.code != NULL && strcmp(r->message.code, "control.protocol.mismatch") == 0)
        sl_strbuf_appendf(&err,
                          "sluicectl: this sluicectl speaks control protocol %d; use the sluicectl that came "
                          "with the server\n",
                          SL_PROTO_VERSION);
    flush_to(c, &err, stderr);
    finish(c, SL_CLI_EXIT_USAGE);
}

static void
on_error_reply(ctl_t *c, const sl_proto_error_msg_t *e)
{
    sl_strbuf_t err = {0};
    sl_cli_error_lines(e, &err);
    flush_to(c, &err, stderr);
    finish(c, SL_CLI_EXIT_ERROR);
}

static void
on_ok(ctl_t *c, const sl_proto_ok_msg_t *ok)
{
    if (c->args.command == SL_CLI_CONFIG_PUT && !c->put_sent) {
        if (!ok->has_revision) {
            fail(c, SL_CLI_EXIT_USAGE, "the server's get_config answer has no revision");
            return;
        }
        sl_proto_message_t m;
        uint32_t req = c->next_req++;
        sl_cli_build_put_config(req, c->yaml, ok->revision, &m);
        c->put_sent = true;
        send_message(c, &m);
        await_reply(c, req);
        return;
    }
    sl_strbuf_t out = {0}, err = {0};
    sl_cli_ok_lines(&c->args, ok, wall_ms(), &out, &err);
    flush_to(c, &out, stdout);
    flush_to(c, &err, stderr);
    finish(c, SL_CLI_EXIT_OK);
}

/* Writes the event stream's lines of the frame read so far. */
static void
flush_frame(ctl_t *c)
{
    flush_to(c, &c->frame_out, stdout);
    flush_to(c, &c->frame_err, stderr);
}

/* The one dispatch point: every message from the server, by state and kind. */
static void
on_message(ctl_t *c, const sl_proto_message_t *m)
{
    sl_strbuf_t err = {0};
    switch (c->state) {
    case CONN_HANDSHAKE:
        if (m->kind == SL_PROTO_MESSAGE_WELCOME)
            on_welcome(c, &m->welcome);
        else if (m->kind == SL_PROTO_MESSAGE_REFUSED)
            on_refused(c, &m->refused);
        else if (m->kind == SL_PROTO_MESSAGE_ERROR) {
            sl_cli_error_lines(&m->error, &err);
            flush_to(c, &err, stderr);
            finish(c, SL_CLI_EXIT_USAGE);
        } else
            fail(c, SL_CLI_EXIT_USAGE, "the server answered hello with `%s`, not welcome",
                 sl_proto_message_kind_slug((int)m->kind));
        break;
    case CONN_WAITING:
    case CONN_STREAMING:
        /* Events gather for the frame's one write; anything else comes after the lines before it. */
        if (m->kind != SL_PROTO_MESSAGE_EVENT)
            flush_frame(c);
        switch (m->kind) {
        case SL_PROTO_MESSAGE_OK:
            if (c->state == CONN_WAITING && m->ok.req == c->pending_req)
                on_ok(c, &m->ok);
            break;
        case SL_PROTO_MESSAGE_ERROR:
            /* req 0: the server could not read what we sent */
            if (m->error.req == c->pending_req || m->error.req == 0)
                on_error_reply(c, &m->error);
            break;
        case SL_PROTO_MESSAGE_SNAPSHOT:
            if (c->args.command != SL_CLI_EVENTS)
                break;
            sl_cli_stream_snapshot(&c->stream, &m->snapshot, &c->frame_out, &c->frame_err);
            c->state = CONN_STREAMING;
            c->deadline = 0;
            break;
        case SL_PROTO_MESSAGE_EVENT:
            if (c->args.command == SL_CLI_EVENTS)
                sl_cli_stream_event(&c->stream, &m->event, &c->frame_out, &c->frame_err);
            break;
        case SL_PROTO_MESSAGE_EVENTS_DROPPED:
            if (c->args.command != SL_CLI_EVENTS)
                break;
            sl_cli_stream_dropped(&c->stream, m->events_dropped.count, &c->frame_err);
            resubscribe(c);
            break;
        default:
            break;
        }
        if (c->args.command == SL_CLI_EVENTS && sl_cli_stream_done(&c->stream)) {
            flush_frame(c);
            finish(c, SL_CLI_EXIT_OK);
        }
        break;
    case CONN_CLOSING:
    case CONN_DONE:
        break;
    }
    if (c->output_closed)
        finish(c, c->exit_code);
}

static void read_frame(ctl_t *c, const unsigned char *buf, size_t len);

/* One whole WebSocket message: a msgpack stream of protocol messages. */
static void
on_frame(ctl_t *c, const unsigned char *buf, size_t len)
{
    read_frame(c, buf, len);
    flush_frame(c);
}

static void
read_frame(ctl_t *c, const unsigned char *buf, size_t len)
{
    size_t off = 0;
    while (off < len && c->state != CONN_CLOSING && c->state != CONN_DONE) {
        sl_proto_message_t m;
        sl_proto_error_t err;
        size_t used;
        if (sl_proto_decode((const char *)buf + off, len - off, &m, &used, &err) != 0) {
            flush_frame(c);
            fail(c, SL_CLI_EXIT_USAGE, "cannot read the server's message (%s at \"%s\": %s)",
                 sl_proto_error_kind_slug(err.kind), err.path, err.detail);
            return;
        }
        on_message(c, &m);
        sl_proto_message_free(&m);
        off += used;
    }
}

static void
on_receive(ctl_t *c, struct lws *wsi, const void *in, size_t len)
{
    if (lws_is_first_fragment(wsi)) {
        c->rx_len = 0;
        c->rx_binary = lws_frame_is_binary(wsi);
        c->rx_overflow = false;
    }
    if (c->rx_len + len > RX_MAX) {
        c->rx_overflow = true;
    } else if (!c->rx_overflow) {
        if (c->rx_len + len > c->rx_cap) {
            size_t cap = c->rx_cap ? c->rx_cap : 4096;
            while (cap < c->rx_len + len)
                cap *= 2;
            c->rx = sl_xrealloc(c->rx, cap);
            c->rx_cap = cap;
        }
        memcpy(c->rx + c->rx_len, in, len);
        c->rx_len += len;
    }
    if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) != 0)
        return;
    if (c->rx_overflow)
        fail(c, SL_CLI_EXIT_USAGE, "the server sent a message above %u MiB", RX_MAX >> 20);
    else if (!c->rx_binary)
        fail(c, SL_CLI_EXIT_USAGE, "the server sent a text frame; the control protocol is binary msgpack");
    else
        on_frame(c, c->rx, c->rx_len);
    c->rx_len = 0;
}

static int
on_writeable(ctl_t *c, struct lws *wsi)
{
    if (c->state == CONN_CLOSING) {
        lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
        return -1;
    }
    if (c->queue_head == c->queue_len)
        return 0;
    out_msg_t *o = &c->queue[c->queue_head++];
    int n = lws_write(wsi, o->buf + LWS_PRE, o->len, LWS_WRITE_BINARY);
    free(o->buf);
    o->buf = NULL;
    if (n < 0 || (size_t)n < o->len) {
        fail(c, SL_CLI_EXIT_USAGE, "cannot send to %s", c->url);
        return -1;
    }
    if (c->queue_head == c->queue_len)
        c->queue_head = c->queue_len = 0;
    else
        lws_callback_on_writable(wsi);
    return 0;
}

static void
on_closed(ctl_t *c)
{
    c->wsi = NULL;
    switch (c->state) {
    case CONN_HANDSHAKE:
        fail(c, SL_CLI_EXIT_USAGE, "%s closed the connection during the handshake", c->url);
        break;
    case CONN_WAITING:
        fail(c, SL_CLI_EXIT_USAGE, "%s closed the connection before answering", c->url);
        break;
    case CONN_STREAMING:
        fprintf(stderr, "sluicectl: %s closed the connection\n", c->url);
        finish(c, SL_CLI_EXIT_OK);
        break;
    case CONN_CLOSING:
    case CONN_DONE:
        break;
    }
    c->state = CONN_DONE;
}

/* `metrics`: the answer to GET /metrics is in; its summary goes to stdout. */
static void
on_metrics(ctl_t *c)
{
    c->wsi = NULL;
    size_t len = c->http_body.len;
    char *text = sl_strbuf_finish(&c->http_body);
    if (c->http_status == 401 || c->http_status == 403) {
        fprintf(stderr, "sluicectl: %s refused the control key for /metrics (HTTP %d)\n", c->url,
                c->http_status);
        c->exit_code = SL_CLI_EXIT_ERROR;
    } else if (c->http_status != 200 || len == 0) {
        fprintf(stderr, "sluicectl: GET /metrics on %s answered HTTP %d\n", c->url, c->http_status);
        c->exit_code = SL_CLI_EXIT_ERROR;
    } else {
        sl_strbuf_t out = {0};
        if (c->args.json)
            sl_cli_metrics_json(text, &out);
        else
            sl_cli_metrics_text(text, &out);
        char *s = sl_strbuf_finish(&out);
        fputs(s, stdout);
        free(s);
        c->exit_code = SL_CLI_EXIT_OK;
    }
    free(text);
    c->state = CONN_DONE;
}

/* The lws callbacks of the HTTP GET (`metrics`); 0 for the reasons that are not its own. */
static int
on_http(ctl_t *c, struct lws *wsi, enum lws_callback_reasons reason, void *in, size_t len, bool *handled)
{
    *handled = true;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        unsigned char **p = (unsigned char **)in, *end = *p + len;
        char value[600];
        snprintf(value, sizeof value, "Bearer %s", c->key);
        return lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, (unsigned char *)value,
                                            (int)strlen(value), p, end)
                   ? -1
                   : 0;
    }
    case LWS_CALLBACK_ESTABLISHED_CLIENT_HTTP:
        c->http_status = (int)lws_http_client_http_response(wsi);
        c->state = CONN_WAITING;
        return 0;
    case LWS_CALLBACK_RECEIVE_CLIENT_HTTP: {
        char buf[LWS_PRE + 8192], *p = buf + LWS_PRE;
        int n = (int)sizeof(buf) - LWS_PRE;
        return lws_http_client_read(wsi, &p, &n) < 0 ? -1 : 0;
    }
    case LWS_CALLBACK_RECEIVE_CLIENT_HTTP_READ:
        if (c->http_body.len + len > (64u << 20))
            return -1;
        sl_strbuf_append(&c->http_body, in, len);
        return 0;
    case LWS_CALLBACK_COMPLETED_CLIENT_HTTP:
        on_metrics(c);
        return -1; /* done: close */
    case LWS_CALLBACK_CLOSED_CLIENT_HTTP:
        if (c->state != CONN_DONE)
            on_metrics(c);
        return 0;
    default:
        *handled = false;
        return 0;
    }
}

static int
on_lws(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    (void)user;
    ctl_t *c = lws_context_user(lws_get_context(wsi));
    if (c == NULL)
        return 0;
    if (c->args.command == SL_CLI_METRICS && reason != LWS_CALLBACK_CLIENT_CONNECTION_ERROR) {
        bool handled;
        int rc = on_http(c, wsi, reason, in, len, &handled);
        if (handled)
            return rc;
    }
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        c->wsi = NULL;
        fail(c, SL_CLI_EXIT_USAGE, "cannot connect to %s: %s%s", c->url,
             in != NULL ? (const char *)in : "connection failed",
             c->args.endpoint.tls && !c->args.insecure && in != NULL && strstr(in, "SSL") != NULL
                 ? " (is the server's certificate trusted? --cacert FILE, or --insecure)"
                 : "");
        c->state = CONN_DONE;
        break;
    case LWS_CALLBACK_CLIENT_ESTABLISHED: {
        sl_proto_message_t hello;
        sl_cli_build_hello(c->key, &hello);
        send_message(c, &hello);
        break;
    }
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (c->state != CONN_CLOSING && c->state != CONN_DONE)
            on_receive(c, wsi, in, len);
        break;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        return on_writeable(c, wsi);
    case LWS_CALLBACK_CLIENT_CLOSED:
        on_closed(c);
        break;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols protocols[] = {
    {SL_CLI_SUBPROTOCOL, on_lws, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* Deadlines, signals and a slow close, checked every TICK_US (lws_service blocks until its next timer). */
static void
check_time(ctl_t *c)
{
    if (interrupted) {
        interrupted = 0;
        if (c->state == CONN_STREAMING)
            finish(c, SL_CLI_EXIT_OK);
        else
            fail(c, SL_CLI_EXIT_USAGE, "interrupted");
    }
    lws_usec_t now = lws_now_usecs();
    if (c->deadline != 0 && now > c->deadline) {
        c->deadline = 0;
        if (c->state == CONN_HANDSHAKE)
            fail(c, SL_CLI_EXIT_USAGE, "no answer from %s within %d s (connect and handshake)", c->url,
                 SL_CLI_CONNECT_TIMEOUT_MS / 1000);
        else
            fail(c, SL_CLI_EXIT_USAGE, "no reply from %s within %llu s", c->url,
                 (unsigned long long)(c->args.timeout_ms / 1000));
    }
    if (c->state == CONN_CLOSING && now > c->close_by)
        c->state = CONN_DONE;
}

static void
on_tick(lws_sorted_usec_list_t *sul)
{
    ctl_t *c = lws_container_of(sul, ctl_t, tick);
    check_time(c);
    lws_sul_schedule(c->context, 0, &c->tick, on_tick, TICK_US);
}

/* The whole of a file (or stdin for "-"), NUL-terminated; NULL with errno set (EFBIG: above max bytes). */
static char *
read_all(const char *path, size_t max)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL)
        return NULL;
    sl_strbuf_t b = {0};
    char chunk[8192];
    size_t n;
    int error = 0;
    while (error == 0 && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > max)
            error = EFBIG;
        else
            sl_strbuf_append(&b, chunk, n);
    }
    if (error == 0 && ferror(f))
        error = errno != 0 ? errno : EIO;
    if (f != stdin)
        fclose(f);
    char *s = sl_strbuf_finish(&b);
    if (error != 0) {
        free(s);
        errno = error;
        return NULL;
    }
    return s;
}

/* --key, else $SLUICE_CONTROL_KEY, else the key file; NULL (after saying why) when there is none. */
static char *
find_key(const sl_cli_args_t *a)
{
    if (a->key != NULL && *a->key != '\0')
        return sl_xstrdup(a->key);
    const char *env = getenv("SLUICE_CONTROL_KEY");
    if (env != NULL && *env != '\0')
        return sl_xstrdup(env);
    errno = 0;
    char *key = read_all(a->key_file, KEY_MAX);
    if (key == NULL) {
        fprintf(stderr,
                "sluicectl: no control key: cannot read %s (%s); pass --key, set SLUICE_CONTROL_KEY, or "
                "--key-file PATH (sluice writes sluice.key beside its DB)\n",
                a->key_file, strerror(errno));
        return NULL;
    }
    sl_cli_trim(key);
    if (*key == '\0') {
        fprintf(stderr, "sluicectl: the key file %s is empty\n", a->key_file);
        free(key);
        return NULL;
    }
    return key;
}

static int
run(ctl_t *c)
{
    const sl_cli_endpoint_t *e = &c->args.endpoint;
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.gid = -1;
    info.uid = -1;
    info.user = c;
    info.fd_limit_per_thread = 4;
    if (e->tls) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        /* lws looks for CAs in its build-time directory (Debian's: "../share"); use OpenSSL's bundle instead.
         */
        const char *env = getenv(X509_get_default_cert_file_env());
        info.client_ssl_ca_filepath = c->args.cacert != NULL
                                          ? c->args.cacert
                                          : (env != NULL && *env ? env : X509_get_default_cert_file());
    }
    c->context = lws_create_context(&info);
    if (c->context == NULL) {
        fprintf(stderr, "sluicectl: cannot start libwebsockets%s\n",
                e->tls ? " (check --cacert and the TLS set-up)" : "");
        return SL_CLI_EXIT_USAGE;
    }

    struct lws_client_connect_info cc;
    memset(&cc, 0, sizeof cc);
    cc.context = c->context;
    cc.address = e->host;
    cc.port = e->port;
    cc.path = e->path;
    cc.host = e->authority;
    cc.origin = e->authority;
    cc.protocol = SL_CLI_SUBPROTOCOL;
    if (c->args.command == SL_CLI_METRICS) {
        cc.method = "GET";
        cc.path = "/metrics";
        cc.protocol = NULL;
        cc.local_protocol_name = SL_CLI_SUBPROTOCOL;
    }
    cc.pwsi = &c->wsi;
    if (e->tls) {
        cc.ssl_connection = LCCSCF_USE_SSL;
        if (c->args.insecure)
            cc.ssl_connection |= LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK |
                                 LCCSCF_ALLOW_EXPIRED | LCCSCF_ALLOW_INSECURE;
    }
    c->state = CONN_HANDSHAKE;
    c->deadline = lws_now_usecs() + (lws_usec_t)SL_CLI_CONNECT_TIMEOUT_MS * LWS_US_PER_MS;
    lws_sul_schedule(c->context, 0, &c->tick, on_tick, TICK_US);
    if (lws_client_connect_via_info(&cc) == NULL && c->state != CONN_DONE)
        fail(c, SL_CLI_EXIT_USAGE, "cannot connect to %s", c->url);

    while (c->state != CONN_DONE) {
        if (lws_service(c->context, 0) < 0)
            break;
        check_time(c);
    }
    lws_sul_cancel(&c->tick);
    /* Callbacks during the teardown must find nothing to do. */
    c->state = CONN_DONE;
    lws_context_destroy(c->context);
    return c->exit_code;
}

int
main(int argc, char **argv)
{
    static ctl_t c;
    char err[512];
    if (sl_cli_parse(argc, argv, &c.args, err, sizeof err) != 0) {
        fprintf(stderr, "sluicectl: %s\n%s\n", err, sl_cli_usage(c.args.command));
        return SL_CLI_EXIT_USAGE;
    }
    if (c.args.help) {
        fputs(sl_cli_help(c.args.command), stdout);
        return SL_CLI_EXIT_OK;
    }
    snprintf(c.url, sizeof c.url, "%s://%s%s", c.args.endpoint.tls ? "wss" : "ws", c.args.endpoint.authority,
             c.args.endpoint.path);

    if (c.args.command == SL_CLI_CONFIG_PUT) {
        errno = 0;
        c.yaml = read_all(c.args.config_file, 64u << 20);
        if (c.yaml == NULL) {
            fprintf(stderr, "sluicectl: cannot read %s: %s\n", c.args.config_file, strerror(errno));
            return SL_CLI_EXIT_USAGE;
        }
    }
    c.key = find_key(&c.args);
    if (c.key == NULL) {
        free(c.yaml);
        return SL_CLI_EXIT_USAGE;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: the poll in lws_service returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    lws_set_log_level(getenv("SLUICECTL_LWS_DEBUG") != NULL ? LLL_ERR | LLL_WARN | LLL_NOTICE | LLL_INFO : 0,
                      NULL);
    c.next_req = 1;
    c.stream.json = c.args.json;
    c.stream.topic_providers = c.args.topic_providers;
    c.stream.max_events = c.args.count;

    int code = run(&c);

    for (size_t i = c.queue_head; i < c.queue_len; i++)
        free(c.queue[i].buf);
    free(c.queue);
    free(c.rx);
    sl_cli_stream_free(&c.stream);
    free(c.key);
    free(c.yaml);
    return code;
}
