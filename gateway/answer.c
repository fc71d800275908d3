/*
 * Every answer the gateway writes itself (behaviour.md §9, formats.md
 * "Errors the gateway writes"): its errors as whole answers, the final 429
 * and its headers, GET /v1/models, count-tokens estimates, an upstream's
 * failure handed over, and the bare answer that makes h2o close an HTTP/1
 * connection whose client left. The in-stream forms are hold.c's; which one
 * a request gets is sl__end_request's choice.
 */
#include "req.h"

const char *
sl__reason_phrase(int status)
{
    static const struct {
        int status;
        const char *text;
    } phrases[] = {
        {200, "OK"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {402, "Payment Required"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {413, "Payload Too Large"},
        {422, "Unprocessable Entity"},
        {429, "Too Many Requests"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {502, "Bad Gateway"},
        {503, "Service Unavailable"},
        {504, "Gateway Timeout"},
        {529, "Overloaded"},
    };
    for (size_t i = 0; i < sizeof(phrases) / sizeof(phrases[0]); i++) {
        if (phrases[i].status == status)
            return phrases[i].text;
    }
    return status < 300 ? "OK" : "Error";
}

/* Sends a whole answer the gateway made itself; takes the body. Other headers are added before. */
static void
send_made_answer(h2o_req_t *req, int status, const char *content_type, sl_strbuf_t *body)
{
    req->res.status = status;
    req->res.reason = sl__reason_phrase(status);
    req->res.content_length = body->len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type,
                   strlen(content_type));
    size_t len = body->len;
    char *bytes = sl_strbuf_finish(body);
    h2o_send_inline(req, bytes, len); /* h2o copies it into the request pool */
    free(bytes);
}

void
sl_request_send_error(h2o_req_t *req, sl_dialect_t dialect, int status, sl_code_t code, const char *text)
{
    sl_strbuf_t body = {0};
    sl_error_head_t head;
    sl_dialect_render_error(dialect < SL_DIALECT_COUNT ? dialect : SL_DIALECT_OPENAI_CHAT, status,
                            sl_code_slug(code), text, &body, &head);
    const char *slug = sl_code_slug(code);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT(SL_ERROR_CODE_HEADER), 0, NULL, slug,
                          strlen(slug));
    if (head.type_header != NULL)
        h2o_add_header_by_str(&req->pool, &req->res.headers, head.type_header, strlen(head.type_header), 0,
                              NULL, head.type_value, strlen(head.type_value));
    send_made_answer(req, status, head.content_type, &body);
}

/* The whole answers go to h2o at once, and with them the request: it is closed to us from here. */
static h2o_req_t *
take_for_whole_answer(request_t *r)
{
    h2o_req_t *req = r->req;
    sl__set_client_out(r, OUT_CLOSED);
    return req;
}

void
sl__send_whole_error(request_t *r, int status, const sl_msg_t *msg)
{
    h2o_req_t *req = take_for_whole_answer(r);
    sl_request_send_error(req, r->in.endpoint.dialect, status, msg->code, msg->text);
}

void
sl__send_whole_local(request_t *r, const char *type, sl_strbuf_t *body)
{
    send_made_answer(take_for_whole_answer(r), 200, type, body);
}

/* h2o 2.2.5 learns that an HTTP/1 client left only when it writes: a bare answer closes the connection. */
void
sl__send_close(request_t *r)
{
    sl_strbuf_t body = {0};
    send_made_answer(take_for_whole_answer(r), 499, "text/plain", &body);
}

/* After sluice retried or waited, a handed-over error tells the SDK not to multiply the wait. */
static void
add_should_retry(request_t *r)
{
    if (r->retry.waited && r->out.state == OUT_NONE)
        h2o_add_header_by_str(&r->req->pool, &r->req->res.headers, H2O_STRLIT("x-should-retry"), 0, NULL,
                              H2O_STRLIT("false"));
}

/* The final answer when no candidate could serve: the gateway's own error, from the last failure. */
void
sl__answer_with_failure(request_t *r)
{
    if (!r->retry.last.any)
        sl__remember_failure(r, SL_CODE_GW_ROUTE_NO_MATCH, NULL);
    sl_msg_t msg = sl__last_failure_msg(r);
    int status = sl_code_status(msg.code) != 0 ? sl_code_status(msg.code) : 502;
    add_should_retry(r);
    sl__end_with_error(r, END_GATEWAY_ERROR, status, &msg);
    sl_msg_free(&msg);
}

/*
 * The upstream's own answer goes to the client unchanged: status, headers,
 * body — now, or as the rest of it still arrives. Behind keep-alives the
 * status cannot be sent any more: a 2xx stream (an error event inside it)
 * goes on in the stream already started, any other answer is told as the
 * gateway's error inside the stream.
 */
void
sl__hand_over(request_t *r, bool cut)
{
    bool fits_the_stream = r->rd.events && r->rd.up_status >= 200 && r->rd.up_status < 300;
    if (r->out.state == OUT_KEEPALIVE && !fits_the_stream) {
        char status[16];
        snprintf(status, sizeof(status), "%d", r->rd.up_status);
        sl_msg_t msg = sl_msg_make(SL_CODE_GW_UPSTREAM_STATUS, "provider", sl__provider_of(r, r->cur)->name,
                                   "status", status, NULL);
        sl__end_with_error(r, END_GATEWAY_ERROR, r->rd.up_status, &msg);
        sl_msg_free(&msg);
        return;
    }
    sl__release_upstream(r);
    r->out.answer = ANSWER_HANDED_OVER;
    sl__set_phase(r, PHASE_STREAMING);
    r->out.parsed = r->out.rx->size;
    add_should_retry(r);
    sl__start_response(r);
    if (r->hop != NULL) {
        sl__flush_to_client(r);
        return;
    }
    sl_msg_t msg = sl__last_failure_msg(r);
    sl__end_request(r,
                    &(req_end_t){.how = END_HANDED_OVER, .status = r->rd.up_status, .msg = &msg, .cut = cut});
    sl_msg_free(&msg);
}

/* Adds the headers that tell an SDK when to come back. */
static void
add_retry_headers(request_t *r, const sl_wait_decision_t *d)
{
    if (r->out.state != OUT_NONE)
        return;
    h2o_mem_pool_t *pool = &r->req->pool;
    h2o_headers_t *h = &r->req->res.headers;
    if (d->retry_after_ms >= 0) {
        char secs[24], ms[24];
        snprintf(secs, sizeof(secs), "%lld", (long long)d->retry_after_secs);
        snprintf(ms, sizeof(ms), "%lld", (long long)d->retry_after_ms);
        h2o_iovec_t v1 = h2o_strdup(pool, secs, SIZE_MAX), v2 = h2o_strdup(pool, ms, SIZE_MAX);
        h2o_add_header(pool, h, H2O_TOKEN_RETRY_AFTER, NULL, v1.base, v1.len);
        h2o_add_header_by_str(pool, h, H2O_STRLIT("retry-after-ms"), 0, NULL, v2.base, v2.len);
    }
    const char *should = d->should_retry ? "true" : "false";
    h2o_add_header_by_str(pool, h, H2O_STRLIT("x-should-retry"), 0, NULL, should, strlen(should));
}

/*
 * The final 429 (§6, §7): nothing can be sent before the deadline. msg is
 * taken. The headers tell SDKs when to come back.
 */
void
sl__answer_final_429(request_t *r, const sl_wait_decision_t *d, sl_msg_t msg)
{
    add_retry_headers(r, d);
    sl__end_with_error(r, END_GATEWAY_ERROR, 429, &msg);
    sl_msg_free(&msg);
}

/* A request that would wait is answered instead, with code and a Retry-After (seconds) for its client. */
void
sl__refuse_to_wait(request_t *r, sl_code_t code, const char *retry_after_secs)
{
    sl__remember_failure(r, code, NULL);
    if (r->out.state == OUT_NONE)
        h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, retry_after_secs,
                       strlen(retry_after_secs));
    sl__answer_with_failure(r);
}

/* The final 429 for a request that no limit of subject can ever take (§7): x-should-retry false. */
void
sl__answer_too_large(request_t *r, const sl_wait_decision_t *d, const char *subject)
{
    char limit[SL_LIMIT_TEXT_MAX];
    snprintf(limit, sizeof(limit), "%s", r->wait.too_large_limit[0] ? r->wait.too_large_limit : "?");
    sl__answer_final_429(r, d,
                         sl_msg_make(SL_CODE_GW_LIMIT_TOO_LARGE, "subject", subject, "limit", limit, NULL));
}

/* GET /v1/models: the models routes can serve, in Anthropic's shape when asked in it, else OpenAI's. */
void
sl__answer_models(request_t *r)
{
    const sl_config_t *c = r->config;
    bool anthropic = h2o_find_header_by_str(&r->req->headers, H2O_STRLIT("anthropic-version"), -1) >= 0;
    sl_strbuf_t body = {0};
    sl_strbuf_appendf(&body, anthropic ? "{\"data\":[" : "{\"object\":\"list\",\"data\":[");
    size_t listed = 0;
    for (size_t i = 0; i < c->n_providers; i++) {
        const sl_provider_t *p = &c->providers[i];
        for (size_t m = 0; m < p->n_models + p->n_model_map; m++) {
            const char *name = m < p->n_models ? p->models[m] : p->model_map[m - p->n_models].name;
            if (strpbrk(name, "*?\"\\") != NULL || p->disabled)
                continue;
            if (anthropic)
                sl_strbuf_appendf(&body, "%s{\"type\":\"model\",\"id\":\"%s\",\"display_name\":\"%s\"}",
                                  listed ? "," : "", name, name);
            else
                sl_strbuf_appendf(&body, "%s{\"id\":\"%s\",\"object\":\"model\",\"owned_by\":\"%s\"}",
                                  listed ? "," : "", name, p->name);
            listed++;
        }
    }
    sl_strbuf_appendf(&body, anthropic ? "],\"has_more\":false}" : "]}");
    sl__end_request(r,
                    &(req_end_t){.how = END_LOCAL, .status = 200, .body = &body, .type = "application/json"});
}

/*
 * Count-tokens answered here when no upstream can: an estimate of about one
 * token per 4 bytes of body, marked as such in a header and in the DB row.
 */
void
sl__answer_token_estimate(request_t *r)
{
    sl__end_hop(r);
    int64_t tokens = (int64_t)(r->in.body_len + 3) / 4;
    sl_strbuf_t body = {0};
    sl_strbuf_appendf(&body, sl_dialect_def(r->in.endpoint.dialect)->estimate_format, (long long)tokens);
    r->rd.stream.usage.input = tokens;
    if (r->out.state == OUT_NONE)
        h2o_add_header_by_str(&r->req->pool, &r->req->res.headers, H2O_STRLIT("x-sluice-estimated"), 0, NULL,
                              H2O_STRLIT("true"));
    sl__end_request(r,
                    &(req_end_t){.how = END_LOCAL, .status = 200, .body = &body, .type = "application/json"});
}
