/*
 * What goes to the client and when (behaviour.md §4): the opening hold, the response head,
 * flushing held bytes, the 15 s keep-alives, the final send, a client that stops reading or leaves.
 */
#include "req.h"

static void
on_generator_proceed(h2o_generator_t *generator, h2o_req_t *req)
{
    (void)req;
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, generator, generator);
    r->sending = false;
    sl_timer_cancel(&r->io->timers, &r->stall_timer);
    h2o_buffer_consume(&r->tx, r->tx->size);
    sl__flush_to_client(r);
}

static void
on_generator_stop(h2o_generator_t *generator, h2o_req_t *req)
{
    (void)req;
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, generator, generator);
    /* The client went away mid-answer. */
    r->req = NULL;
    r->client_fd = -1;
    sl_timer_cancel(&r->io->timers, &r->stall_timer);
    if (r->state != REQ_DONE) {
        sl__close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT,
                          "client went away");
        sl__finish(r, SL_ROW_CANCELLED, r->up_status, false, SL_CODE_GW_UPSTREAM_STATUS, NULL);
    }
}

bool
sl__is_hop_by_hop(const h2o_iovec_t *name)
{
    static const char *const drop[] = {"connection", "keep-alive", "transfer-encoding", "te",
                                       "trailer",    "upgrade",    "content-length",    "date",
                                       "server"};
    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
        if (h2o_memis(name->base, name->len, drop[i], strlen(drop[i])))
            return true;
    }
    return name->len >= 6 && strncasecmp(name->base, "proxy-", 6) == 0;
}

/* Starts the client's answer with the upstream's status and headers (unless keep-alives already sent a head).
 */
void
sl__start_response(request_t *r)
{
    if (r->answer_started || r->req == NULL)
        return;
    r->answer_started = true;
    sl__unwatch_client(r);
    sl_timer_cancel(&r->io->timers, &r->keepalive_timer);
    if (!r->response_started) {
        r->response_started = true;
        h2o_req_t *req = r->req;
        req->res.status = r->up_status;
        req->res.reason = sl__reason_phrase(r->up_status);
        for (size_t i = 0; i < r->up_headers.size; i++) {
            h2o_header_t *h = &r->up_headers.entries[i];
            h2o_add_header_by_str(&req->pool, &req->res.headers, h->name->base, h->name->len, 1, NULL,
                                  h->value.base, h->value.len);
        }
        /* A whole answer keeps its length; a stream (or one the gateway may extend with an error) is chunked.
         */
        if (!r->events && r->up_content_length >= 0)
            req->res.content_length = (size_t)r->up_content_length;
        r->generator = (h2o_generator_t){on_generator_proceed, on_generator_stop};
        h2o_start_response(req, &r->generator);
    }
    if (sl__events_on(r)) {
        sl_proto_event_t ev;
        sl__emit(r, sl_bus_request_headers(&ev, sl_wall_ms(), r->id, r->up_status, r->ttfb_ms));
    }
    /* A whole answer's head is its first token; a stream's is its first content event. */
    if (!r->events || r->stream.phase == SL_STREAM_FLOWING)
        sl__first_token(r);
}

/*
 * A client that stops reading must not hold its upstream (and a max_concurrent
 * slot) for the whole total timeout, nor its connection and buffers for ever
 * once the answer has ended: a send that has not completed after
 * idle_timeout_secs lets the upstream go, aborts the answer and, on HTTP/1,
 * shuts the connection down so that h2o fails the send and lets the request go.
 */
static void
on_client_stalled(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, stall_timer, t);
    sl_log_debug("request %llu: the client read nothing for %u s", (unsigned long long)r->id,
                 r->config->failover.idle_timeout_secs);
    if (r->state != REQ_DONE) {
        sl__close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_CLIENT_STALLED, "the client stopped reading");
        sl__finish(r, SL_ROW_CANCELLED, r->up_status, true, SL_CODE_GW_CLIENT_STALLED, NULL);
        r->final_queued = true;
        r->final_state = H2O_SEND_STATE_ERROR;
        r->parsed = r->rx->size = 0;
    }
    if (r->client_fd >= 0)
        shutdown(r->client_fd, SHUT_RDWR);
}

/* Every send to the client starts the stall clock; its completion stops it (on_generator_proceed). */
static void
send_to_client(request_t *r, h2o_req_t *req, h2o_iovec_t *buf, size_t n, h2o_send_state_t state)
{
    sl_timer_arm(&r->io->timers, &r->stall_timer,
                 sl_now_ms() + (int64_t)r->config->failover.idle_timeout_secs * 1000, on_client_stalled);
    h2o_send(req, buf, n, state);
}

void
sl__pause_upstream_reads(request_t *r)
{
    r->reads_paused = true;
    sl_hop_pause_reading(r->hop);
}

static void
resume_upstream_reads(request_t *r)
{
    r->reads_paused = false;
    sl_hop_resume_reading(r->hop);
}

/*
 * Hands rx[0..parsed) to h2o when no send is in flight. The buffer is
 * swapped, not copied; a partial event at its tail moves to a fresh buffer.
 */
void
sl__flush_to_client(request_t *r)
{
    /* While a hold goes on behind keep-alives, held bytes stay held. */
    if (r->sending || r->req == NULL || !r->response_started || (!r->answer_started && !r->final_queued))
        return;
    /*
     * A whole answer's end came with these bytes: they go out with it, in one
     * send (one write). A stream's first content goes at once all the same.
     */
    if (r->end_follows && !r->final_queued && !r->events)
        return;
    bool last = r->final_queued && r->parsed == r->rx->size;
    if (r->parsed == 0 && !last) {
        if (r->reads_paused && r->hop != NULL)
            resume_upstream_reads(r);
        return;
    }
    h2o_buffer_t *out = r->rx;
    r->rx = r->tx;
    if (r->parsed < out->size) {
        size_t tail = out->size - r->parsed;
        h2o_iovec_t dst = h2o_buffer_reserve(&r->rx, tail);
        memcpy(dst.base, out->bytes + r->parsed, tail);
        r->rx->size += tail;
        out->size = r->parsed;
    }
    r->tx = out;
    r->parsed = 0;
    r->sending = true;
    r->bytes_out += r->tx->size;
    r->last_sent_ms = sl_now_ms();
    h2o_iovec_t buf = h2o_iovec_init(r->tx->bytes, r->tx->size);
    h2o_req_t *req = r->req;
    if (last) {
        /* h2o owns the end from here and may dispose the request (and r) before returning. */
        r->req = NULL;
        send_to_client(r, req, &buf, 1, r->final_state);
        return;
    }
    if (r->reads_paused && r->hop != NULL && r->rx->size < CLIENT_BUFFER_CAP / 2)
        resume_upstream_reads(r);
    send_to_client(r, req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
}

/* Queues the end of the answer: what is parsed goes out, then the stream closes (or aborts). */
void
sl__queue_final(request_t *r, h2o_send_state_t state)
{
    r->final_queued = true;
    r->final_state = state;
    r->parsed = r->rx->size;
    sl__flush_to_client(r);
}

/* Appends the gateway's in-stream error after what was forwarded (a partial event is dropped). */
void
sl__append_stream_error(request_t *r, sl_code_t code, const char *text)
{
    r->gateway_error = true;
    /* Only keep-alives went out: what a hop given up on left held (its opening events, its error) is no part
     * of this answer, which is the gateway's error alone. */
    if (!r->answer_started)
        r->parsed = 0;
    if (r->rx->size > r->parsed)
        r->rx->size = r->parsed;
    sl_strbuf_t ev = {0};
    sl_stream_error_t form = sl_dialect_render_stream_error(r->in.endpoint.dialect, sl_code_status(code),
                                                            sl_code_slug(code), text, &ev);
    if (form.form == SL_STREAM_ERROR_NEEDS_EXCEPTION_FRAME) {
        /* Bedrock: the payload goes in an exception frame the AWS SDK raises as that exception. */
        sl_strbuf_t frame = {0};
        sl_es_encode_exception(&frame, form.exception_type, ev.data, ev.len);
        free(sl_strbuf_finish(&ev));
        ev = frame;
    }
    h2o_iovec_t dst = h2o_buffer_reserve(&r->rx, ev.len);
    memcpy(dst.base, ev.data, ev.len);
    r->rx->size += ev.len;
    free(sl_strbuf_finish(&ev));
    r->parsed = r->rx->size;
}

/*
 * The 15 s rule (behaviour.md §4): a streamed request that has sent nothing
 * for 15 s gets a 200 SSE head and a keep-alive now, and another every 15 s
 * until its answer starts.
 */
void
sl__on_keepalive(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, keepalive_timer, t);
    if (r->req == NULL || r->answer_started || r->state == REQ_DONE)
        return;
    int64_t now = sl_now_ms();
    int64_t due = sl_keepalive_due_ms(true, now, now, &r->gw->retry_params);
    if (!r->response_started) {
        h2o_req_t *req = r->req;
        sl__unwatch_client(r); /* with a head out, h2o notices a client that leaves */
        req->res.status = 200;
        req->res.reason = "OK";
        const char *type = sl_dialect_stream_content_type(r->in.endpoint.dialect);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, type, strlen(type));
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
        r->generator = (h2o_generator_t){on_generator_proceed, on_generator_stop};
        h2o_start_response(req, &r->generator);
        r->response_started = true;
        r->keepalive_started = true;
    }
    if (!r->sending) {
        size_t len;
        const char *bytes = sl_dialect_keep_alive(r->in.endpoint.dialect, &len);
        h2o_iovec_t buf = h2o_iovec_init(bytes, len);
        r->sending = true;
        r->last_sent_ms = now;
        send_to_client(r, r->req, &buf, len > 0 ? 1 : 0, H2O_SEND_STATE_IN_PROGRESS);
    }
    sl_timer_arm(&r->io->timers, &r->keepalive_timer, due, sl__on_keepalive);
}

/* An HTTP/1.1 client left before its answer started: no further hop, and the request ends cancelled. */
static void
on_client_gone(void *data)
{
    request_t *r = data;
    if (r->state == REQ_DONE)
        return;
    sl_log_debug("request %llu: the client went away", (unsigned long long)r->id);
    sl__close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_UPSTREAM_STATUS, "client went away");
    sl__finish(r, SL_ROW_CANCELLED, 0, false, SL_CODE_GW_UPSTREAM_STATUS, NULL);
    /* h2o learns of it when it writes: answer, so the connection closes and the request is disposed. */
    if (r->req != NULL && !r->response_started) {
        sl_strbuf_t body = {0};
        sl__send_made_answer(r->req, 499, "text/plain", &body);
    }
}

static void
watch_client(request_t *r)
{
    if (r->req == NULL || r->req->version >= 0x200 || r->response_started || r->watch.active)
        return;
    h2o_socket_t *sock = r->req->conn->callbacks->get_socket(r->req->conn);
    if (sock != NULL)
        sl_watch_add(r->io->watch, &r->watch, h2o_socket_get_fd(sock), on_client_gone, r);
}

void
sl__unwatch_client(request_t *r)
{
    sl_timer_cancel(&r->io->timers, &r->watch_timer);
    sl_watch_remove(r->io->watch, &r->watch);
}

static void
on_watch_due(sl_timer_t *t)
{
    watch_client(H2O_STRUCT_FROM_MEMBER(request_t, watch_timer, t));
}

/*
 * Watching a client costs two epoll_ctl calls; an answer that comes within
 * WATCH_CLIENT_AFTER_MS (every cached or tiny one) never needs them, and a
 * client that leaves sooner is noticed that much later.
 */
void
sl__watch_client_soon(request_t *r)
{
    sl_timer_arm(&r->io->timers, &r->watch_timer, sl_now_ms() + WATCH_CLIENT_AFTER_MS, on_watch_due);
}

/* Content arrived (or the hold is over): from here the answer streams to the client. */
void
sl__release_hold(request_t *r)
{
    r->state = REQ_STREAMING;
    sl__throttle_answered(r);
    sl__breaker_account(r, NULL);
    sl__remember_conversation(r);
    sl__start_response(r);
}
