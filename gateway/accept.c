#include "accept.h"

#include <stdio.h>
#include <string.h>

#include <h2o/http2.h>

#include "core/codes.h"
#include "core/dialect.h"
#include "core/msg.h"
#include "core/xalloc.h"

/* picohttpparser, inside libh2o; Debian does not ship its header (stack-notes.md). */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len, const char **path,
                      size_t *path_len, int *minor_version, struct phr_header *headers, size_t *num_headers,
                      size_t last_len);

/* HTTP/2 with prior knowledge opens with this (RFC 9113 §3.4). */
static const char http2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN (sizeof(http2_preface) - 1)

static int
parse_head(const char *bytes, size_t len, struct phr_header *headers, size_t max_headers)
{
    const char *method, *path;
    size_t method_len, path_len, n = max_headers;
    int minor;
    return phr_parse_request(bytes, len, &method, &method_len, &path, &path_len, &minor, headers, &n, 0);
}

sl_first_bytes_t
sl_first_bytes_classify(const char *bytes, size_t len)
{
    size_t n = len < PREFACE_LEN ? len : PREFACE_LEN;
    if (memcmp(bytes, http2_preface, n) == 0)
        return n < PREFACE_LEN ? SL_FIRST_WAIT : SL_FIRST_HTTP2;
    /* h2o reads heads with these bounds: what fits them is h2o's to parse. */
    size_t in = len < H2O_MAX_REQLEN ? len : H2O_MAX_REQLEN;
    struct phr_header headers[H2O_MAX_HEADERS];
    int r = parse_head(bytes, in, headers, H2O_MAX_HEADERS);
    if (r > 0)
        return SL_FIRST_HTTP1;
    if (r == -2)
        return in == H2O_MAX_REQLEN ? SL_FIRST_HEAD_TOO_LARGE : SL_FIRST_WAIT;
    /* picohttpparser says -1 for too many headers too: a head that parses with more is only too large. */
    struct phr_header more[1024];
    return parse_head(bytes, in, more, 1024) != -1 ? SL_FIRST_HEAD_TOO_LARGE : SL_FIRST_MALFORMED;
}

typedef struct {
    const sl_accept_env_t *env;
    h2o_socket_t *sock;
    h2o_timeout_entry_t timeout;
    struct timeval connected_at;
    char *answer; /* the refusal being written */
} pending_t;

static void
pending_free(pending_t *p)
{
    h2o_timeout_unlink(&p->timeout);
    p->sock->data = NULL;
    free(p->answer);
    free(p);
}

static void
drop(pending_t *p)
{
    h2o_socket_t *sock = p->sock;
    pending_free(p);
    h2o_socket_close(sock);
}

static void
on_timeout(h2o_timeout_entry_t *entry)
{
    drop(H2O_STRUCT_FROM_MEMBER(pending_t, timeout, entry));
}

static void
hand_over(pending_t *p, bool http2)
{
    const sl_accept_env_t *env = p->env;
    h2o_socket_t *sock = p->sock;
    struct timeval connected_at = p->connected_at;
    pending_free(p);
    env->cb(env->data, sock, http2, connected_at);
}

static void
on_refusal_written(h2o_socket_t *sock, const char *err)
{
    pending_t *p = sock->data;
    if (err != NULL) {
        drop(p);
        return;
    }
    sl_lingers_t *lingers = p->env->lingers;
    pending_free(p);
    sl_linger_socket(lingers, sock);
}

/* The whole answer to a first head h2o would refuse in plain text: the OpenAI shape, as the path is unknown.
 */
static void
refuse(pending_t *p, sl_first_bytes_t what)
{
    bool large = what == SL_FIRST_HEAD_TOO_LARGE;
    sl_code_t code = large ? SL_CODE_GW_REQUEST_HEAD_TOO_LARGE : SL_CODE_GW_REQUEST_MALFORMED_HTTP;
    int status = large ? 431 : 400;
    char max[24];
    snprintf(max, sizeof(max), "%d", H2O_MAX_REQLEN);
    sl_msg_t msg =
        sl_msg_make(code, "detail", "the request line or a header cannot be parsed", "max", max, NULL);
    sl_strbuf_t body = {0}, out = {0};
    sl_error_head_t head;
    sl_dialect_render_error(SL_DIALECT_OPENAI_CHAT, status, sl_code_slug(code), msg.text, &body, &head);
    sl_strbuf_appendf(&out,
                      "HTTP/1.1 %d %s\r\nconnection: close\r\ncontent-type: %s\r\n" SL_ERROR_CODE_HEADER
                      ": %s\r\ncontent-length: %zu\r\n\r\n",
                      status, large ? "Request Header Fields Too Large" : "Bad Request", head.content_type,
                      sl_code_slug(code), body.len);
    sl_strbuf_append(&out, body.data, body.len);
    free(sl_strbuf_finish(&body));
    sl_msg_free(&msg);
    h2o_socket_read_stop(p->sock);
    h2o_iovec_t buf = {out.data, out.len};
    p->answer = sl_strbuf_finish(&out);
    buf.base = p->answer;
    h2o_socket_write(p->sock, &buf, 1, on_refusal_written);
}

static void
on_first_bytes(h2o_socket_t *sock, const char *err)
{
    pending_t *p = sock->data;
    if (err != NULL) {
        drop(p);
        return;
    }
    sl_first_bytes_t what = sl_first_bytes_classify(sock->input->bytes, sock->input->size);
    switch (what) {
    case SL_FIRST_WAIT:
        return;
    case SL_FIRST_HTTP1:
    case SL_FIRST_HTTP2:
        /* What was read stays in the socket's input: h2o's accept reads it first. */
        h2o_socket_read_stop(sock);
        hand_over(p, what == SL_FIRST_HTTP2);
        return;
    case SL_FIRST_MALFORMED:
    case SL_FIRST_HEAD_TOO_LARGE:
        refuse(p, what);
        return;
    }
}

static void
on_handshake(h2o_socket_t *sock, const char *err)
{
    pending_t *p = sock->data;
    if (err != NULL) {
        drop(p);
        return;
    }
    h2o_iovec_t proto = h2o_socket_ssl_get_selected_protocol(sock);
    for (const h2o_iovec_t *id = h2o_http2_alpn_protocols; id->len != 0; id++) {
        if (proto.len == id->len && memcmp(proto.base, id->base, proto.len) == 0) {
            hand_over(p, true);
            return;
        }
    }
    h2o_socket_read_start(sock, on_first_bytes);
    if (sock->input->size > 0)
        on_first_bytes(sock, NULL);
}

void
sl_accept_start(h2o_socket_t *sock, const sl_accept_env_t *env, struct timeval connected_at)
{
    pending_t *p = sl_xcalloc(1, sizeof(*p));
    *p = (pending_t){.env = env, .sock = sock, .connected_at = connected_at};
    p->timeout.cb = on_timeout;
    h2o_timeout_link(env->loop, env->timeout, &p->timeout);
    sock->data = p;
    if (env->ssl_ctx != NULL)
        h2o_socket_ssl_handshake(sock, env->ssl_ctx, NULL, on_handshake);
    else
        h2o_socket_read_start(sock, on_first_bytes);
}
