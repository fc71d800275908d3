#include "refusal.h"

#include <stdio.h>
#include <string.h>

#include "core/dialect.h"
#include "core/msg.h"
#include "core/route.h"

/* The most of h2o's reason that is kept: its reasons are short fixed phrases. */
#define H2O_TEXT_MAX 80

sl_refusal_t
sl_refusal_of(int status, const char *text, size_t text_len, uint64_t body_limit)
{
    sl_refusal_t r = {.status = status};
    if (text_len > H2O_TEXT_MAX)
        text_len = H2O_TEXT_MAX;
    snprintf(r.detail, sizeof(r.detail), "%.*s", (int)text_len, text);
    switch (status) {
    case 413:
        r.code = SL_CODE_GW_REQUEST_TOO_LARGE;
        /* h2o stops at its limit: the body's real size is not known, only that it is larger. */
        snprintf(r.size, sizeof(r.size), "more than %llu", (unsigned long long)body_limit);
        snprintf(r.max, sizeof(r.max), "%llu", (unsigned long long)body_limit);
        break;
    case 417:
        r.code = SL_CODE_GW_REQUEST_BAD_EXPECTATION;
        break;
    default:
        /* 400 (broken chunked encoding or content-length, an unknown transfer-encoding, bad header bytes). */
        r.code = SL_CODE_GW_REQUEST_MALFORMED_HTTP;
        if (status < 400 || status > 499)
            r.status = 400;
        break;
    }
    return r;
}

typedef struct {
    h2o_filter_t super;
    uint64_t body_limit;
    sl_refusal_env_t *(*env_of)(h2o_req_t *req);
} refusal_filter_t;

typedef struct {
    h2o_ostream_t super;
    refusal_filter_t *filter;
} refusal_ostream_t;

/*
 * h2o's own answers are sent with h2o_send_inline: one buffer, final at
 * once. The head is not out before the first send, so the status line stays
 * and everything else is replaced here.
 */
static void
do_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t n, h2o_send_state_t state)
{
    refusal_ostream_t *o = (refusal_ostream_t *)self;
    char text[H2O_TEXT_MAX];
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof(text); i++) {
        size_t take = bufs[i].len < sizeof(text) - len ? bufs[i].len : sizeof(text) - len;
        memcpy(text + len, bufs[i].base, take);
        len += take;
    }
    sl_refusal_t refusal = sl_refusal_of(req->res.status, text, len, o->filter->body_limit);
    sl_endpoint_t endpoint;
    sl_dialect_t dialect = SL_DIALECT_OPENAI_CHAT;
    if (sl_endpoint_parse(req->input.method.base, req->input.method.len, req->input.path.base,
                          req->input.path.len, &endpoint) &&
        endpoint.dialect < SL_DIALECT_COUNT)
        dialect = endpoint.dialect;
    sl_msg_t msg =
        sl_msg_make(refusal.code, "detail", refusal.detail, "size", refusal.size, "max", refusal.max, NULL);

    sl_strbuf_t body = {0};
    sl_error_head_t head;
    sl_dialect_render_error(dialect, refusal.status, sl_code_slug(refusal.code), msg.text, &body, &head);
    memset(&req->res.headers, 0, sizeof(req->res.headers));
    req->res.status = refusal.status;
    req->res.reason = refusal.status == 413   ? "Request Entity Too Large"
                      : refusal.status == 417 ? "Expectation Failed"
                                              : "Bad Request";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, head.content_type,
                   strlen(head.content_type));
    const char *slug = sl_code_slug(refusal.code);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT(SL_ERROR_CODE_HEADER), 0, NULL, slug,
                          strlen(slug));
    if (head.type_header != NULL)
        h2o_add_header_by_str(&req->pool, &req->res.headers, head.type_header, strlen(head.type_header), 0,
                              NULL, head.type_value, strlen(head.type_value));
    h2o_iovec_t out = {h2o_mem_alloc_pool(&req->pool, body.len), body.len};
    memcpy(out.base, body.data, body.len);
    req->res.content_length = out.len;
    free(sl_strbuf_finish(&body));

    sl_refusal_env_t *env = o->filter->env_of(req);
    if (env != NULL) {
        sl_snapshot_lease_t *lease = sl_snapshot_lease(&env->io->snapshots);
        sl_request_record_refused(req, env->io, env->gateway, lease, refusal.status, &msg);
        sl_snapshot_lease_drop(lease);
        /* h2o stopped reading the body and will close once the answer is out: linger, so it is read. */
        if (req->version < 0x200 && !req->http1_is_persistent)
            sl_linger_start(env->lingers, req);
    }
    sl_msg_free(&msg);
    h2o_ostream_send_next(self, req, &out, 1, state);
}

static void
on_setup_ostream(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    if (req->res.status >= 400) {
        refusal_ostream_t *o = (refusal_ostream_t *)h2o_add_ostream(req, sizeof(*o), slot);
        o->filter = (refusal_filter_t *)self;
        o->super.do_send = do_send;
        slot = &o->super.next;
    }
    h2o_setup_next_ostream(req, slot);
}

void
sl_refusal_install(h2o_hostconf_t *host, uint64_t body_limit, sl_refusal_env_t *(*env_of)(h2o_req_t *req))
{
    refusal_filter_t *f = (refusal_filter_t *)h2o_create_filter(&host->fallback_path, sizeof(*f));
    f->super.on_setup_ostream = on_setup_ostream;
    f->body_limit = body_limit;
    f->env_of = env_of;
}
