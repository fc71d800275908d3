/*
 * Every answer the gateway writes itself (behaviour.md §9, formats.md "Errors the gateway
 * writes"): its errors whole or in the stream, the final 429, GET /v1/models, count-tokens estimates,
 * an upstream's failure handed over, an operator's cancel.
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
void
sl__send_made_answer(h2o_req_t *req, int status, const char *content_type, sl_strbuf_t *body)
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

/* An error made by the gateway, in the client's dialect, as the whole answer. */
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
    sl__send_made_answer(req, status, head.content_type, &body);
}

/* After sluice retried or waited, a handed-over error tells the SDK not to multiply the wait. */
void
sl__add_should_retry(request_t *r)
{
    if (r->waited && r->req != NULL && !r->response_started)
        h2o_add_header_by_str(&r->req->pool, &r->req->res.headers, H2O_STRLIT("x-should-retry"), 0, NULL,
                              H2O_STRLIT("false"));
}

/* The final answer when no candidate could serve: the gateway's own error. */
void
sl__answer_with_failure(request_t *r)
{
    sl_code_t code = r->last.any ? r->last.code : SL_CODE_GW_ROUTE_NO_MATCH;
    const char *provider =
        r->n_attempts > 0 ? r->config->providers[r->attempts[r->n_attempts - 1].provider].name : "";
    char status[16];
    snprintf(status, sizeof(status), "%d", r->last.status);
    char secs[16];
    snprintf(secs, sizeof(secs), "%u",
             code == SL_CODE_GW_UPSTREAM_TOTAL_TIMEOUT ? r->config->failover.total_timeout_secs
                                                       : r->config->failover.idle_timeout_secs);
    sl_msg_t msg = sl_msg_make(code, "provider", provider, "reason", r->last.detail, "status", status, "code",
                               r->last.detail, "secs", secs, "model", r->in.model, "dialect",
                               sl_dialect_slug(r->in.endpoint.dialect), "max", r->last.detail, NULL);
    int http_status = sl_code_status(code) != 0 ? sl_code_status(code) : 502;
    r->gateway_error = true;
    if (r->keepalive_started) {
        /* The 200 head is out: the failure is told inside the stream (behaviour.md §4). */
        sl__append_stream_error(r, code, msg.text);
        sl__finish(r, SL_ROW_FAILED, http_status, true, code, msg.text);
        sl_msg_free(&msg);
        sl__queue_final(r, H2O_SEND_STATE_FINAL);
        return;
    }
    if (r->req != NULL) {
        sl__add_should_retry(r);
        sl_request_send_error(r->req, r->in.endpoint.dialect, http_status, code, msg.text);
    }
    sl__finish(r, SL_ROW_FAILED, http_status, true, code, msg.text);
    sl_msg_free(&msg);
}

/* The upstream's own answer goes to the client unchanged: status, headers, body. */
void
sl__pass_through(request_t *r)
{
    if (r->keepalive_started) {
        /* The 200 head is out: the upstream's status can only be told inside the stream. */
        sl__end_hop(r);
        char status[16];
        snprintf(status, sizeof(status), "%d", r->up_status);
        sl_msg_t msg = sl_msg_make(SL_CODE_GW_UPSTREAM_STATUS, "provider", sl__provider_of(r, r->cur)->name,
                                   "status", status, NULL);
        sl__append_stream_error(r, SL_CODE_GW_UPSTREAM_STATUS, msg.text);
        sl__finish(r, SL_ROW_FAILED, r->up_status, true, r->last.code, msg.text);
        sl_msg_free(&msg);
        sl__queue_final(r, H2O_SEND_STATE_FINAL);
        return;
    }
    r->handing_over = true;
    r->state = REQ_STREAMING;
    r->events = false;
    r->parsed = r->rx->size;
    sl__add_should_retry(r);
    sl__start_response(r);
    if (r->hop == NULL) {
        sl__finish(r, SL_ROW_FAILED, r->up_status, true, r->last.code, r->last.detail);
        sl__queue_final(r, H2O_SEND_STATE_FINAL);
    } else {
        sl__flush_to_client(r);
    }
}

/*
 * The answer going out could not be finished: never a clean end (behaviour.md
 * §9). A stream gets the gateway's error in its own format, named for what
 * happened — cut after content, or (the last candidate, not held) ended or
 * broken before any; a whole answer is aborted.
 */
void
sl__fail_streaming(request_t *r, sl_hop_end_t how, const char *detail)
{
    sl__end_hop(r);
    bool before_content = r->events && r->stream.phase == SL_STREAM_HELD;
    sl_code_t code = !before_content                  ? SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT
                     : how == SL_HOP_END_EOS          ? SL_CODE_GW_UPSTREAM_STREAM_ENDED_EARLY
                     : how == SL_HOP_END_IDLE_TIMEOUT ? SL_CODE_GW_UPSTREAM_IDLE_TIMEOUT
                                                      : SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_CONTENT;
    char secs[16];
    snprintf(secs, sizeof(secs), "%u", r->config->failover.idle_timeout_secs);
    sl_msg_t msg = sl_msg_make(code, "provider", sl__provider_of(r, r->cur)->name, "secs", secs, NULL);
    sl__close_attempt(r, SL_ROW_HOP_ERROR, code, detail);
    r->gateway_error = r->events;
    sl__finish(r, SL_ROW_FAILED, r->up_status, true, code, msg.text);
    if (r->events)
        sl__append_stream_error(r, code, msg.text);
    sl_msg_free(&msg);
    sl__queue_final(r, r->events ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_ERROR);
}

/*
 * An operator cancelled the request (the control protocol's cancel_request):
 * whatever it waits for or sends stops, and the client is told in its own
 * format — a whole 503 gw.cancelled before any answer went out, else the
 * gateway's in-stream error (a whole answer already going out is cut).
 */
void
sl__cancel_by_operator(request_t *r)
{
    if (r->state == REQ_DONE)
        return;
    sl_log_info("request %llu: cancelled by an operator", (unsigned long long)r->id);
    sl_msg_t msg = sl_msg_make(SL_CODE_GW_CANCELLED, NULL);
    sl__close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_CANCELLED, msg.text);
    r->gateway_error = true;
    if (!r->response_started) {
        int status = sl_code_status(SL_CODE_GW_CANCELLED);
        if (r->req != NULL)
            sl_request_send_error(r->req, r->in.endpoint.dialect, status, SL_CODE_GW_CANCELLED, msg.text);
        sl__finish(r, SL_ROW_CANCELLED, status, true, SL_CODE_GW_CANCELLED, msg.text);
    } else {
        bool in_stream = r->events || r->keepalive_started;
        sl__finish(r, SL_ROW_CANCELLED, r->up_status > 0 ? r->up_status : 200, true, SL_CODE_GW_CANCELLED,
                   msg.text);
        if (in_stream)
            sl__append_stream_error(r, SL_CODE_GW_CANCELLED, msg.text);
        sl__queue_final(r, in_stream ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_ERROR);
    }
    sl_msg_free(&msg);
}

/*
 * The final 429 (§6, §7): nothing can be sent before the deadline, with
 * code and its message (taken). The headers tell SDKs when to come back.
 */
void
sl__answer_final_429(request_t *r, const sl_wait_decision_t *d, sl_code_t code, sl_msg_t msg)
{
    r->gateway_error = true;
    if (r->keepalive_started) {
        sl__append_stream_error(r, code, msg.text);
        sl__finish(r, SL_ROW_FAILED, 429, true, code, msg.text);
        sl_msg_free(&msg);
        sl__queue_final(r, H2O_SEND_STATE_FINAL);
        return;
    }
    if (r->req != NULL) {
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
        sl_request_send_error(r->req, r->in.endpoint.dialect, 429, code, msg.text);
    }
    sl__finish(r, SL_ROW_FAILED, 429, true, code, msg.text);
    sl_msg_free(&msg);
}

/* A request that would wait is answered instead, with code and a Retry-After (seconds) for its client. */
void
sl__refuse_to_wait(request_t *r, sl_code_t code, const char *retry_after_secs)
{
    r->last.any = true;
    r->last.code = code;
    r->last.status = 0;
    r->last.detail[0] = '\0';
    if (r->req != NULL && !r->response_started)
        h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, retry_after_secs,
                       strlen(retry_after_secs));
    sl__answer_with_failure(r);
}

/* The final 429 for a request that no limit of subject can ever take (§7): x-should-retry false. */
void
sl__answer_too_large(request_t *r, const sl_wait_decision_t *d, const char *subject)
{
    char limit[SL_LIMIT_TEXT_MAX];
    snprintf(limit, sizeof(limit), "%s", r->too_large_limit[0] ? r->too_large_limit : "?");
    sl__answer_final_429(r, d, SL_CODE_GW_LIMIT_TOO_LARGE,
                         sl_msg_make(SL_CODE_GW_LIMIT_TOO_LARGE, "subject", subject, "limit", limit, NULL));
}

/* GET /v1/models: the models routes can serve, in Anthropic's shape when asked in it, else OpenAI's. */
void
sl__answer_models(h2o_req_t *req, const sl_config_t *c)
{
    bool anthropic = h2o_find_header_by_str(&req->headers, H2O_STRLIT("anthropic-version"), -1) >= 0;
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
    sl__send_made_answer(req, 200, "application/json", &body);
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
    if (r->in.endpoint.dialect == SL_DIALECT_OPENAI_RESPONSES)
        sl_strbuf_appendf(&body, "{\"object\":\"response.input_tokens\",\"input_tokens\":%lld}",
                          (long long)tokens);
    else
        sl_strbuf_appendf(&body, "{\"input_tokens\":%lld}", (long long)tokens);
    r->stream.usage.input = tokens;
    sl__finish(r, SL_ROW_ANSWERED_LOCALLY, 200, false, SL_CODE_GW_NOT_FOUND, NULL);
    h2o_req_t *req = r->req;
    if (req == NULL) {
        free(sl_strbuf_finish(&body));
        return;
    }
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-sluice-estimated"), 0, NULL,
                          H2O_STRLIT("true"));
    sl__send_made_answer(req, 200, "application/json", &body);
}
