/*
 * What goes to the client and when (behaviour.md §4): what it has been sent
 * (out.state, moved along one table), the response head, flushing held
 * bytes, the 15 s keep-alives, the gateway's in-stream error, the final
 * send, and a client that stops reading or leaves.
 */
#include "req.h"

/* ---- what the client has been sent ----------------------------------------------------------- */

#define TO(state) (1u << (state))

static const unsigned out_moves[OUT_COUNT] = {
    [OUT_NONE] = TO(OUT_KEEPALIVE) | TO(OUT_ANSWER) | TO(OUT_CLOSED),
    [OUT_KEEPALIVE] = TO(OUT_ANSWER) | TO(OUT_FINAL) | TO(OUT_CLOSED),
    [OUT_ANSWER] = TO(OUT_FINAL) | TO(OUT_CLOSED),
    [OUT_FINAL] = TO(OUT_CLOSED),
    [OUT_CLOSED] = TO(OUT_CLOSED),
};

static const char *const out_names[OUT_COUNT] = {"none", "keepalive", "answer", "final", "closed"};

const req_moves_t sl__client_out_moves = {"client output", out_moves, out_names, OUT_COUNT};

void
sl__set_client_out(request_t *r, client_out_t to)
{
    sl__check_move(&sl__client_out_moves, r->id, r->out.state, to);
    r->out.state = to;
    /* Past this, h2o owns the request: nothing may touch it. */
    if (to == OUT_CLOSED)
        r->req = NULL;
}

/* ---- the response ----------------------------------------------------------------------------- */

static void
on_generator_proceed(h2o_generator_t *generator, h2o_req_t *req)
{
    (void)req;
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, out.generator, generator);
    r->out.sending = false;
    sl_timer_cancel(&r->io->timers, &r->out.stall_timer);
    h2o_buffer_consume(&r->out.tx, r->out.tx->size);
    sl__flush_to_client(r);
}

/* h2o gave up on the answer: the client went away (or a stalled one was shut down). */
static void
on_generator_stop(h2o_generator_t *generator, h2o_req_t *req)
{
    (void)req;
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, out.generator, generator);
    sl__set_client_out(r, OUT_CLOSED);
    r->out.client_fd = -1;
    sl_timer_cancel(&r->io->timers, &r->out.stall_timer);
    sl__end_request(r, &(req_end_t){.how = END_CLIENT_LEFT, .status = r->rd.up_status});
}

static void
start_h2o_response(request_t *r, int status)
{
    h2o_req_t *req = r->req;
    req->res.status = status;
    req->res.reason = sl__reason_phrase(status);
    r->out.generator = (h2o_generator_t){on_generator_proceed, on_generator_stop};
    h2o_start_response(req, &r->out.generator);
}

bool
sl__is_hop_by_hop(const h2o_iovec_t *name)
{
#define HEADER(s)                                                                                            \
    {                                                                                                        \
        s, sizeof(s) - 1                                                                                     \
    }
    static const struct {
        const char *name;
        size_t len;
    } drop[] = {HEADER("connection"), HEADER("keep-alive"), HEADER("transfer-encoding"), HEADER("te"),
                HEADER("trailer"),    HEADER("upgrade"),    HEADER("content-length"),    HEADER("date"),
                HEADER("server")};
#undef HEADER
    /* h2o gives header names in lower case. */
    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
        if (name->len == drop[i].len && memcmp(name->base, drop[i].name, drop[i].len) == 0)
            return true;
    }
    return name->len >= 6 && strncasecmp(name->base, "proxy-", 6) == 0;
}

/* Starts the client's answer with the upstream's status and headers (unless keep-alives already sent a head).
 */
void
sl__start_response(request_t *r)
{
    if (r->out.state != OUT_NONE && r->out.state != OUT_KEEPALIVE)
        return;
    bool had_head = r->out.state == OUT_KEEPALIVE;
    /* sluice's own time: arrival to the upstream send, and the upstream bytes that start the answer to it. */
    if (r->m.sent_ns > 0 && r->m.upstream_in_ns > 0)
        r->m.overhead_ns = (r->m.sent_ns - r->m.arrival_ns) + (sl_now_ns() - r->m.upstream_in_ns);
    sl__set_client_out(r, OUT_ANSWER);
    sl_timer_cancel(&r->io->timers, &r->out.keepalive_timer);
    if (!had_head) {
        h2o_req_t *req = r->req;
        for (size_t i = 0; i < r->rd.up_headers.size; i++) {
            h2o_header_t *h = &r->rd.up_headers.entries[i];
            /* on_hop_head kept every name h2o knows as its token: any other is not one. */
            if (h2o_iovec_is_token(h->name))
                h2o_add_header(&req->pool, &req->res.headers, (const h2o_token_t *)h->name, NULL,
                               h->value.base, h->value.len);
            else
                h2o_add_header_by_str(&req->pool, &req->res.headers, h->name->base, h->name->len, 0, NULL,
                                      h->value.base, h->value.len);
        }
        /* A whole answer keeps its length; a stream (or one the gateway may extend with an error) is chunked.
         */
        if (!r->rd.events && r->rd.up_content_length >= 0)
            req->res.content_length = (size_t)r->rd.up_content_length;
        start_h2o_response(r, r->rd.up_status);
    }
    sl__emit_headers(r);
    /* A whole answer's head is its first token; a stream's is its first content event. */
    if (!r->rd.events || r->rd.stream.phase == SL_STREAM_FLOWING)
        sl__first_token(r);
}

/*
 * Content arrived (or the hold is over): from here the answer streams to the client. What is read so far
 * goes out before the upstream is credited (sl__upstream_served), which the client need not wait for.
 */
void
sl__release_hold(request_t *r)
{
    sl__hedge_content(r);
    sl__set_phase(r, PHASE_STREAMING);
    sl__start_response(r);
    sl__flush_to_client(r);
    sl__upstream_served(r);
}

/* ---- sending ------------------------------------------------------------------------------------ */

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
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, out.stall_timer, t);
    sl_log_debug("request %llu: the client read nothing for %u s", (unsigned long long)r->id,
                 r->config->failover.idle_timeout_secs);
    sl_msg_t msg = sl_msg_make(SL_CODE_GW_CLIENT_STALLED, NULL);
    sl__end_with_error(r, END_CLIENT_STALLED, r->rd.up_status, &msg);
    sl_msg_free(&msg);
    if (r->out.client_fd >= 0)
        shutdown(r->out.client_fd, SHUT_RDWR);
}

/* Every send to the client starts the stall clock; its completion stops it (on_generator_proceed). */
static void
send_to_client(request_t *r, h2o_req_t *req, h2o_iovec_t *buf, size_t n, h2o_send_state_t state)
{
    sl_timer_arm(&r->io->timers, &r->out.stall_timer,
                 sl_now_ms() + (int64_t)r->config->failover.idle_timeout_secs * 1000, on_client_stalled);
    h2o_send(req, buf, n, state);
}

void
sl__pause_upstream_reads(request_t *r)
{
    r->out.reads_paused = true;
    sl_hop_pause_reading(r->hop);
}

static void
resume_upstream_reads(request_t *r)
{
    r->out.reads_paused = false;
    sl_hop_resume_reading(r->hop);
}

/*
 * Hands rx[0..parsed) to h2o when no send is in flight, copying the smaller
 * side: mostly the buffer is swapped and a partial event at its tail moves
 * to the other buffer; but a stream's first content, found early in a large
 * read, is copied out alone, so that it does not wait for the rest to move.
 */
void
sl__flush_to_client(request_t *r)
{
    /* Nothing goes before the answer (held bytes stay held behind keep-alives), nor after its end. */
    if (r->out.sending || (r->out.state != OUT_ANSWER && r->out.state != OUT_FINAL))
        return;
    bool final = r->out.state == OUT_FINAL;
    /*
     * A whole answer's end came with these bytes: they go out with it, in one
     * send (one write). A stream's first content goes at once all the same.
     */
    if (r->out.end_follows && !final && !r->rd.events)
        return;
    bool last = final && r->out.parsed == r->out.rx->size;
    if (r->out.parsed == 0 && !last) {
        if (r->out.reads_paused && r->hop != NULL)
            resume_upstream_reads(r);
        return;
    }
    size_t tail = r->out.rx->size - r->out.parsed;
    if (tail > r->out.parsed) {
        h2o_iovec_t dst = h2o_buffer_reserve(&r->out.tx, r->out.parsed);
        memcpy(dst.base, r->out.rx->bytes, r->out.parsed);
        r->out.tx->size = r->out.parsed;
        h2o_buffer_consume(&r->out.rx, r->out.parsed);
    } else {
        h2o_buffer_t *out = r->out.rx;
        r->out.rx = r->out.tx;
        if (tail > 0) {
            h2o_iovec_t dst = h2o_buffer_reserve(&r->out.rx, tail);
            memcpy(dst.base, out->bytes + r->out.parsed, tail);
            r->out.rx->size += tail;
            out->size = r->out.parsed;
        }
        r->out.tx = out;
    }
    r->out.parsed = 0;
    r->out.sending = true;
    r->out.bytes_out += r->out.tx->size;
    r->out.last_sent_ms = sl_now_ms();
    h2o_iovec_t buf = h2o_iovec_init(r->out.tx->bytes, r->out.tx->size);
    h2o_req_t *req = r->req;
    if (last) {
        /* h2o owns the end from here and may dispose the request (and r) before returning. */
        sl__set_client_out(r, OUT_CLOSED);
        send_to_client(r, req, &buf, 1, r->out.final_state);
        return;
    }
    if (r->out.reads_paused && r->hop != NULL && r->out.rx->size < CLIENT_BUFFER_CAP / 2)
        resume_upstream_reads(r);
    send_to_client(r, req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
}

/* Queues the end of the answer: what is parsed goes out, then the stream closes (or aborts). */
void
sl__queue_final(request_t *r, h2o_send_state_t state)
{
    sl__set_client_out(r, OUT_FINAL);
    r->out.final_state = state;
    r->out.parsed = r->out.rx->size;
    sl__flush_to_client(r);
}

void
sl__abort_answer(request_t *r, bool drop_pending)
{
    if (drop_pending)
        r->out.parsed = r->out.rx->size = 0;
    sl__queue_final(r, H2O_SEND_STATE_ERROR);
}

/* Appends the gateway's in-stream error after what was forwarded (a partial event is dropped). */
void
sl__append_stream_error(request_t *r, sl_code_t code, const char *text)
{
    /* Only keep-alives went out: what a hop given up on left held (its opening events, its error) is no part
     * of this answer, which is the gateway's error alone. */
    if (r->out.state == OUT_KEEPALIVE)
        r->out.parsed = 0;
    if (r->out.rx->size > r->out.parsed)
        r->out.rx->size = r->out.parsed;
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
    h2o_iovec_t dst = h2o_buffer_reserve(&r->out.rx, ev.len);
    memcpy(dst.base, ev.data, ev.len);
    r->out.rx->size += ev.len;
    free(sl_strbuf_finish(&ev));
    r->out.parsed = r->out.rx->size;
}

/*
 * The 15 s rule (behaviour.md §4): a streamed request that has sent nothing
 * for 15 s gets a 200 SSE head and a keep-alive now, and another every 15 s
 * until its answer starts.
 */
void
sl__on_keepalive(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, out.keepalive_timer, t);
    if ((r->out.state != OUT_NONE && r->out.state != OUT_KEEPALIVE) || r->phase == PHASE_DONE)
        return;
    int64_t now = sl_now_ms();
    int64_t due = sl_keepalive_due_ms(true, now, now, &r->gw->retry_params);
    if (r->out.state == OUT_NONE) {
        h2o_req_t *req = r->req;
        const char *type = sl_dialect_stream_content_type(r->in.endpoint.dialect);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, type, strlen(type));
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
        sl__set_client_out(r, OUT_KEEPALIVE);
        start_h2o_response(r, 200);
    }
    if (!r->out.sending) {
        size_t len;
        const char *bytes = sl_dialect_keep_alive(r->in.endpoint.dialect, &len);
        h2o_iovec_t buf = h2o_iovec_init(bytes, len);
        r->out.sending = true;
        r->out.last_sent_ms = now;
        send_to_client(r, r->req, &buf, len > 0 ? 1 : 0, H2O_SEND_STATE_IN_PROGRESS);
    }
    sl_timer_arm(&r->io->timers, &r->out.keepalive_timer, due, sl__on_keepalive);
}

/* ---- a client that leaves ---------------------------------------------------------------------- */

/* An HTTP/1 client closed its connection: the request ends at once, whatever it was doing. */
static void
on_client_gone(void *data)
{
    request_t *r = data;
    sl_log_debug("request %llu: the client went away", (unsigned long long)r->id);
    sl__end_request(r, &(req_end_t){.how = END_CLIENT_LEFT, .status = r->rd.up_status});
}

/*
 * h2o 2.2.5 does not notice an HTTP/1 client that leaves while it has
 * nothing to write to it (stack-notes.md): while the request waits, is held,
 * or streams a slow answer. Its socket is watched until the request ends.
 */
static void
watch_client(request_t *r)
{
    if (r->req == NULL || r->req->version >= 0x200 || r->out.watch.active || r->phase == PHASE_DONE)
        return;
    h2o_socket_t *sock = r->req->conn->callbacks->get_socket(r->req->conn);
    if (sock != NULL)
        sl_watch_add(r->io->watch, &r->out.watch, h2o_socket_get_fd(sock), on_client_gone, r);
}

void
sl__unwatch_client(request_t *r)
{
    sl_timer_cancel(&r->io->timers, &r->out.watch_timer);
    sl_watch_remove(r->io->watch, &r->out.watch);
}

static void
on_watch_due(sl_timer_t *t)
{
    watch_client(H2O_STRUCT_FROM_MEMBER(request_t, out.watch_timer, t));
}

/*
 * Watching a client costs two epoll_ctl calls; an answer that comes within
 * WATCH_CLIENT_AFTER_MS (every cached or tiny one) never needs them, and a
 * client that leaves sooner is noticed that much later.
 */
void
sl__watch_client_soon(request_t *r)
{
    sl_timer_arm(&r->io->timers, &r->out.watch_timer, sl_now_ms() + WATCH_CLIENT_AFTER_MS, on_watch_due);
}
