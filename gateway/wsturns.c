#include "wsturns.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include <h2o/websocket.h>

#include "core/dialect.h"
#include "core/msg.h"
#include "core/sse.h"
#include "core/xalloc.h"
#include "hop.h"
#include "intake.h"
#include "log.h"
#include "request.h"

/* A turn's answer is read at most this far when it is an error (its JSON goes back in an error event). */
#define ERROR_BODY_CAP (64u << 10)

typedef struct turn turn_t;
struct turn {
    turn_t *next;
    char *body; /* the POST /v1/responses body (malloc) */
    size_t len;
};

typedef struct {
    h2o_websocket_conn_t *ws;
    sl_worker_io_t *io;
    char *credential; /* "authorization: Bearer …\r\n" as the client sent it (malloc) */
    char *user_agent; /* "user-agent: …\r\n" or "" (malloc) */
    turn_t *head, *tail;
    /* The turn in flight. */
    sl_hop_t *hop;
    char *request; /* its head (malloc) */
    turn_t *current;
    int status;
    h2o_buffer_t *rx;
    sl_sse_scanner_t scanner;
    char scratch[4096];
    bool closing; /* the client is gone: nothing more is sent */
} session_t;

static void start_next_turn(session_t *s);

/* ---- sending to the client ------------------------------------------------------------------------ */

static void
send_frame(session_t *s, uint8_t opcode, const char *data, size_t len)
{
    if (s->closing || s->ws == NULL)
        return;
    struct wslay_event_msg msg = {.opcode = opcode, .msg = (const uint8_t *)data, .msg_length = len};
    /* wslay copies the message. */
    wslay_event_queue_msg(s->ws->ws_ctx, &msg);
    h2o_websocket_proceed(s->ws);
}

/* An `error` event with the same JSON an SSE stream or an error answer carries; status when known. */
static void
send_error_event(session_t *s, int status, json_t *error)
{
    json_t *ev = json_pack("{s:s, s:o}", "type", "error", "error", error);
    if (status > 0)
        json_object_set_new(ev, "status", json_integer(status));
    char *text = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    send_frame(s, WSLAY_TEXT_FRAME, text, strlen(text));
    free(text);
}

/* The gateway's own error for a turn, in the Responses error shape. */
static void
send_gateway_error(session_t *s, int status, sl_code_t code, const char *detail)
{
    sl_msg_t msg = sl_msg_make(code, "detail", detail != NULL ? detail : "", NULL);
    send_error_event(s, status,
                     json_pack("{s:s, s:s, s:n, s:s}", "message", msg.text, "type",
                               status == 400 ? "invalid_request_error" : "server_error", "param", "code",
                               sl_code_slug(code)));
    sl_msg_free(&msg);
}

/* ---- the turn in flight: a stream from the gateway's own HTTP path -------------------------------- */

static void
end_turn(session_t *s)
{
    free(s->request);
    s->request = NULL;
    if (s->current != NULL) {
        free(s->current->body);
        free(s->current);
        s->current = NULL;
    }
    h2o_buffer_consume(&s->rx, s->rx->size);
    s->hop = NULL;
}

static void
on_turn_head(void *data, int status, const h2o_header_t *headers, size_t n)
{
    (void)headers;
    (void)n;
    session_t *s = data;
    s->status = status;
    sl_sse_init(&s->scanner, SL_SSE_MAX_EVENT_DEFAULT, s->scratch, sizeof(s->scratch));
}

/* Each whole SSE event goes out as a message: its data (the event's JSON); a keep-alive as a ping. */
static void
relay_events(session_t *s)
{
    for (;;) {
        sl_sse_event_t ev;
        sl_sse_status_t st = sl_sse_next(&s->scanner, s->rx->bytes, s->rx->size, &ev);
        if (st == SL_SSE_MORE)
            return;
        if (st == SL_SSE_TOO_LARGE) {
            send_gateway_error(s, 502, SL_CODE_GW_WS_TURN_FAILED, "an event is too large");
            h2o_buffer_consume(&s->rx, s->rx->size);
            return;
        }
        if (ev.comment_only)
            send_frame(s, WSLAY_PING, "", 0);
        else if (ev.data != NULL)
            send_frame(s, WSLAY_TEXT_FRAME, ev.data, ev.data_len);
        h2o_buffer_consume(&s->rx, ev.len);
    }
}

static void
on_turn_body(void *data, h2o_buffer_t **input, bool end_follows)
{
    (void)end_follows; /* each event is relayed as its own WebSocket message anyway */
    session_t *s = data;
    size_t n = (*input)->size;
    if (s->status >= 300 && s->rx->size + n > ERROR_BODY_CAP)
        n = s->rx->size < ERROR_BODY_CAP ? ERROR_BODY_CAP - s->rx->size : 0;
    h2o_iovec_t dst = h2o_buffer_reserve(&s->rx, n);
    memcpy(dst.base, (*input)->bytes, n);
    s->rx->size += n;
    h2o_buffer_consume(input, (*input)->size);
    if (s->status >= 200 && s->status < 300)
        relay_events(s);
}

static void
on_turn_end(void *data, sl_hop_end_t how, const char *detail)
{
    session_t *s = data;
    if (s->status >= 300) {
        /* An answer made before any stream (a refused key, a final 429): its error object as an event. */
        json_t *body = json_loadb(s->rx->bytes, s->rx->size, 0, NULL);
        json_t *error = json_object_get(body, "error");
        if (json_is_object(error))
            send_error_event(s, s->status, json_incref(error));
        else
            send_gateway_error(s, s->status, SL_CODE_GW_WS_TURN_FAILED, "an answer without an error object");
        json_decref(body);
    } else if (how != SL_HOP_END_EOS) {
        send_gateway_error(s, 502, SL_CODE_GW_WS_TURN_FAILED, detail != NULL ? detail : sl_hop_end_name(how));
    }
    end_turn(s);
    start_next_turn(s);
}

static const sl_hop_callbacks_t turn_callbacks = {NULL, on_turn_head, on_turn_body, on_turn_end};

static void
start_next_turn(session_t *s)
{
    if (s->hop != NULL || s->head == NULL || s->closing)
        return;
    turn_t *t = s->head;
    s->head = t->next;
    if (s->head == NULL)
        s->tail = NULL;
    s->current = t;
    s->status = 0;
    sl_strbuf_t head = {0};
    sl_strbuf_appendf(
        &head,
        "POST /v1/responses HTTP/1.1\r\nhost: sluice.internal\r\ncontent-type: application/json\r\n"
        "accept: text/event-stream\r\ncontent-length: %zu\r\n%s%s\r\n",
        t->len, s->credential, s->user_agent);
    s->request = sl_strbuf_finish(&head);
    /* The gateway's own path bounds the turn (deadline, hold, idle timeouts); these are backstops. */
    sl_hop_params_t params = {
        .peer = s->io->turns_peer,
        .head = h2o_iovec_init(s->request, strlen(s->request)),
        .body = h2o_iovec_init(t->body, t->len),
        .connect_ms = 5000,
        .idle_ms = 24 * 3600 * 1000,
        .total_ms = 24 * 3600 * 1000,
    };
    s->hop = sl_hop_start(s->io, &params, &turn_callbacks, s);
}

/* ---- messages from the client ----------------------------------------------------------------------- */

/* A `response.create` message as the body of POST /v1/responses: its fields, streamed; NULL when it is none.
 */
static char *
turn_body(const char *text, size_t len, size_t *out_len, const char **why)
{
    json_t *root = json_loadb(text, len, 0, NULL);
    const char *type = json_string_value(json_object_get(root, "type"));
    if (!json_is_object(root) || type == NULL || strcmp(type, "response.create") != 0) {
        *why = json_is_object(root) ? "another type" : "not a JSON object";
        json_decref(root);
        return NULL;
    }
    json_object_del(root, "type");
    json_object_set_new(root, "stream", json_true());
    char *body = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    *out_len = strlen(body);
    return body;
}

static void
free_session(session_t *s)
{
    while (s->head != NULL) {
        turn_t *t = s->head;
        s->head = t->next;
        free(t->body);
        free(t);
    }
    if (s->hop != NULL)
        sl_hop_cancel(s->hop);
    end_turn(s);
    h2o_buffer_dispose(&s->rx);
    free(s->credential);
    free(s->user_agent);
    free(s);
}

static void
on_ws_message(h2o_websocket_conn_t *conn, const struct wslay_event_on_msg_recv_arg *arg)
{
    session_t *s = conn->data;
    if (arg == NULL) {
        /* The client closed or the connection broke: a turn in flight is cancelled like a client leaving. */
        s->closing = true;
        s->ws = NULL;
        h2o_websocket_close(conn);
        free_session(s);
        return;
    }
    if (arg->opcode != WSLAY_TEXT_FRAME && arg->opcode != WSLAY_BINARY_FRAME)
        return;
    size_t len = 0;
    const char *why = NULL;
    char *body = turn_body((const char *)arg->msg, arg->msg_length, &len, &why);
    if (body == NULL) {
        send_gateway_error(s, 400, SL_CODE_GW_WS_BAD_EVENT, why);
        return;
    }
    turn_t *t = sl_xcalloc(1, sizeof(*t));
    t->body = body;
    t->len = len;
    if (s->tail != NULL)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    start_next_turn(s);
}

/* ---- the handshake ---------------------------------------------------------------------------------- */

static char *
header_line(h2o_req_t *req, const h2o_token_t *token)
{
    ssize_t i = h2o_find_header(&req->headers, token, -1);
    if (i < 0)
        return sl_xstrdup("");
    sl_strbuf_t line = {0};
    sl_strbuf_appendf(&line, "%s: %.*s\r\n", token->buf.base, (int)req->headers.entries[i].value.len,
                      req->headers.entries[i].value.base);
    return sl_strbuf_finish(&line);
}

int
sl_wsturns_upgrade(h2o_req_t *req, const char *client_key, sl_worker_io_t *io, const sl_config_t *config,
                   bool peer_is_loopback)
{
    sl_headers_t headers = sl_request_headers(req);
    sl_intake_input_t in = {
        .method = req->method.base,
        .method_len = req->method.len,
        .path = req->path.base,
        .path_len = req->path.len,
        .headers = &headers,
        .body = "",
        .peer_is_loopback = peer_is_loopback,
        .websocket = true,
    };
    sl_intake_t accepted;
    sl_intake_refusal_t refusal;
    if (!sl_intake(config, &in, &accepted, &refusal)) {
        sl_request_send_error(req, SL_DIALECT_OPENAI_RESPONSES, refusal.status, refusal.msg.code,
                              refusal.msg.text);
        sl_msg_free(&refusal.msg);
        return 0;
    }
    session_t *s = sl_xcalloc(1, sizeof(*s));
    s->io = io;
    s->credential = header_line(req, H2O_TOKEN_AUTHORIZATION);
    s->user_agent = header_line(req, H2O_TOKEN_USER_AGENT);
    h2o_buffer_init(&s->rx, &h2o_socket_buffer_prototype);
    s->ws = h2o_upgrade_to_websocket(req, client_key, s, on_ws_message);
    return 0;
}
