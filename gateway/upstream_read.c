#define _GNU_SOURCE /* memmem */
/*
 * Reading the upstream's answer: the hop's callbacks, the stream's events scanned and
 * classified (SSE or eventstream frames), a whole answer's tail and usage, an error answer judged.
 */
#include "req.h"

/* An upstream read at least this large is handed over to the answer buffer, not copied (on_hop_body). */
#define HANDOVER_MIN_BYTES (64 * 1024)

/* The hop failed before anything of it reached the client: failover.c takes it from here. */
static void
hop_failed_before_content(request_t *r, sl_failure_source_t source, const sl_stream_verdict_t *v,
                          const char *detail, const sl_connection_facts_t *conn)
{
    sl_failure_t f = {.source = source, .dialect = r->in.endpoint.dialect, .status = r->rd.up_status};
    int64_t hint = -1;
    if (v != NULL) {
        f.status = v->status;
        f.code = v->code;
        hint = sl__failure_hint(NULL, v->message, strlen(v->message));
    }
    sl__hop_failed(r, &f, detail, hint, conn);
}

/* A non-2xx answer's body (its first 64 KiB) is in: what it says decides what happens. */
static void
judge_error_answer(request_t *r)
{
    /* An upstream without a count-tokens endpoint: the gateway estimates. */
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS && (r->rd.up_status == 404 || r->rd.up_status == 405)) {
        sl__close_attempt(r, SL_HOP_STATUS, SL_CODE_GW_UPSTREAM_STATUS, "no count-tokens endpoint");
        sl__release_upstream(r);
        sl__new_attempt(r, r->cur);
        sl__answer_token_estimate(r);
        return;
    }
    sl_failure_t f = {.source = SL_FAILURE_STATUS,
                      .dialect = r->in.endpoint.dialect,
                      .status = r->rd.up_status,
                      .body = r->out.rx->bytes,
                      .body_len = r->out.rx->size};
    ssize_t i = h2o_find_header_by_str(&r->rd.up_headers, H2O_STRLIT("x-amzn-errortype"), -1);
    char type[64] = "";
    if (i >= 0) {
        snprintf(type, sizeof(type), "%.*s", (int)r->rd.up_headers.entries[i].value.len,
                 r->rd.up_headers.entries[i].value.base);
        f.code = type;
    }
    char detail[32];
    snprintf(detail, sizeof(detail), "%d", r->rd.up_status);
    sl_headers_t up_headers = {.at = sl__header_at, .ctx = &r->rd.up_headers};
    sl__hop_failed(r, &f, detail, sl__failure_hint(&up_headers, r->out.rx->bytes, r->out.rx->size), NULL);
}

/*
 * The answer going out could not be finished: never a clean end (behaviour.md
 * §9). A stream gets the gateway's error in its own format, named for what
 * happened — cut after content, or (the last candidate, not held) ended or
 * broken before any; a whole answer is aborted.
 */
static void
broken_while_streaming(request_t *r, sl_hop_end_t how, const char *detail)
{
    bool before_content = r->rd.events && r->rd.stream.phase == SL_STREAM_HELD;
    sl_code_t code = !before_content                  ? SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT
                     : how == SL_HOP_END_EOS          ? SL_CODE_GW_UPSTREAM_STREAM_ENDED_EARLY
                     : how == SL_HOP_END_IDLE_TIMEOUT ? SL_CODE_GW_UPSTREAM_IDLE_TIMEOUT
                                                      : SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_CONTENT;
    sl__close_attempt(r, SL_HOP_ERROR, code, detail);
    sl_msg_t msg = sl__failure_msg(r, code, sl__provider_of(r, r->cur)->name, r->rd.up_status, detail);
    sl__end_with_error(r, END_BROKEN, r->rd.up_status, &msg);
    sl_msg_free(&msg);
}

/*
 * Responses: the answer's id, from the first `"id":"…"` of a response.created
 * event or of a whole answer (OpenAI writes the response's own id first). A
 * later turn names it as previous_response_id, and must go to this upstream.
 */
static void
capture_response_id(request_t *r, const char *data, size_t len)
{
    if (!sl_dialect_def(r->in.endpoint.dialect)->names_response_id || r->response_id[0] != '\0')
        return;
    static const char needle[] = "\"id\":\"";
    const char *at = memmem(data, len, needle, sizeof(needle) - 1);
    if (at == NULL)
        return;
    at += sizeof(needle) - 1;
    const char *end = memchr(at, '"', len - (size_t)(at - data));
    if (end != NULL && (size_t)(end - at) < sizeof(r->response_id))
        snprintf(r->response_id, sizeof(r->response_id), "%.*s", (int)(end - at), at);
}

/*
 * Gemini may send an error after earlier chunks as bare JSON, which SSE
 * cannot frame: it is rewritten in place as the `data:` event it stands
 * for, so everything after sees one shape (and a client's SDK can read
 * it). Returns false while the object has not closed yet: wait for more.
 */
static bool
frame_bare_gemini_error(request_t *r)
{
    const char *at = r->out.rx->bytes + r->out.parsed;
    size_t n = r->out.rx->size - r->out.parsed, i = 0;
    while (i < n && (at[i] == ' ' || at[i] == '\t' || at[i] == '\r' || at[i] == '\n'))
        i++;
    if (i == n || at[i] != '{')
        return true;
    size_t taken = 0;
    sl_stream_verdict_t v;
    switch (sl_gemini_bare_error(at, n, &taken, &v)) {
    case SL_GEMINI_BARE_MORE:
        return false;
    case SL_GEMINI_BARE_NONE:
        return true;
    default:
        break;
    }
    static const char prefix[] = "data: ", suffix[] = "\n\n";
    size_t grow = sizeof(prefix) - 1 + sizeof(suffix) - 1;
    h2o_buffer_reserve(&r->out.rx, grow);
    char *base = r->out.rx->bytes + r->out.parsed;
    size_t rest = r->out.rx->size - r->out.parsed - taken;
    memmove(base + taken + grow, base + taken, rest);
    memmove(base + i + sizeof(prefix) - 1, base + i, taken - i);
    memcpy(base + i, prefix, sizeof(prefix) - 1);
    memcpy(base + taken + sizeof(prefix) - 1, suffix, sizeof(suffix) - 1);
    r->out.rx->size += grow;
    return true;
}

/* What the next event of a stream is. */
typedef enum {
    NEXT_EVENT,   /* *len bytes make an event, classified into *v */
    NEXT_MORE,    /* no whole event yet */
    NEXT_DROPPED, /* an event was taken out of the stream (read, not forwarded): look again */
    NEXT_BROKEN,  /* the framing is broken (*detail says how): the stream cannot go on */
} next_event_t;

/* The next SSE event of rx[parsed..), classified. */
static next_event_t
next_sse_event(request_t *r, size_t *len, sl_stream_verdict_t *v, const char **detail)
{
    if (sl_dialect_def(r->in.endpoint.dialect)->bare_json_errors && !frame_bare_gemini_error(r))
        return NEXT_MORE;
    sl_sse_event_t ev;
    sl_sse_status_t st =
        sl_sse_next(&r->rd.scanner, r->out.rx->bytes + r->out.parsed, r->out.rx->size - r->out.parsed, &ev);
    if (st == SL_SSE_MORE)
        return NEXT_MORE;
    if (st == SL_SSE_TOO_LARGE) {
        *detail = "an event is too large";
        return NEXT_BROKEN;
    }
    if (ev.data != NULL && sl_sse_event_is(&ev, "response.created"))
        capture_response_id(r, ev.data, ev.data_len);
    sl_stream_feed(&r->rd.stream, &ev, v);
    if (r->strip_usage_chunk && ev.data != NULL && sl_openai_chat_usage_only(ev.data, ev.data_len)) {
        /* Asked for by sluice, not by the client: its usage is read, the chunk goes no further. */
        char *at = r->out.rx->bytes + r->out.parsed;
        memmove(at, at + ev.len, r->out.rx->size - r->out.parsed - ev.len);
        r->out.rx->size -= ev.len;
        return NEXT_DROPPED;
    }
    *len = ev.len;
    return NEXT_EVENT;
}

/* The next eventstream frame of rx[parsed..) (Bedrock), classified; a bad frame breaks the stream. */
static next_event_t
next_frame(request_t *r, size_t *len, sl_stream_verdict_t *v, const char **detail)
{
    sl_es_message_t frame;
    sl_es_status_t st = sl_es_next(r->out.rx->bytes + r->out.parsed, r->out.rx->size - r->out.parsed,
                                   SL_ES_MAX_MESSAGE_DEFAULT, &frame);
    if (st == SL_ES_NEED_MORE)
        return NEXT_MORE;
    if (st != SL_ES_MESSAGE) {
        *detail = st == SL_ES_TOO_LARGE ? "an eventstream frame is too large" : "a broken eventstream frame";
        return NEXT_BROKEN;
    }
    sl_bedrock_message_t m;
    sl_bedrock_message_from(&frame, &m);
    sl_bedrock_stream_feed(&r->rd.stream, &m, v);
    *len = frame.len;
    return NEXT_EVENT;
}

/*
 * Reads the stream's whole events: a held answer is released at its first
 * content, or fails over on an error before it; an error after content is
 * the client's to see. Returns false when the request moved on (failed
 * over, failed), true when it waits for more bytes.
 */
static bool
scan_events(request_t *r)
{
    for (;;) {
        size_t len = 0;
        sl_stream_verdict_t v;
        const char *broken = NULL;
        next_event_t next =
            r->rd.frames ? next_frame(r, &len, &v, &broken) : next_sse_event(r, &len, &v, &broken);
        if (next == NEXT_MORE)
            return true;
        if (next == NEXT_DROPPED)
            continue;
        if (next == NEXT_BROKEN) {
            if (r->phase == PHASE_HELD)
                hop_failed_before_content(r, SL_FAILURE_BROKEN_BEFORE_CONTENT, NULL, broken, NULL);
            else
                broken_while_streaming(r, SL_HOP_END_BROKEN, broken);
            return false;
        }
        if (v.kind == SL_STREAM_ERROR && r->phase == PHASE_STREAMING)
            r->rd.told_error = true;
        if (r->phase == PHASE_HELD && v.kind == SL_STREAM_ERROR) {
            char detail[128];
            snprintf(detail, sizeof(detail), "%s", v.code[0] ? v.code : "in-stream error");
            /* The error event itself belongs to what the client may get. */
            r->out.parsed += len;
            hop_failed_before_content(r, SL_FAILURE_STREAM_ERROR, &v, detail, NULL);
            return false;
        }
        r->out.parsed += len;
        if (r->phase == PHASE_HELD && r->rd.stream.phase == SL_STREAM_FLOWING) {
            /* The first content goes out now; what came in the same read follows when this send is done. */
            sl__release_hold(r);
        } else if (r->rd.stream.phase == SL_STREAM_FLOWING && !r->out.first_token_seen &&
                   r->out.state == OUT_ANSWER) {
            sl__upstream_served(r);
            sl__first_token(r);
            sl__flush_to_client(r);
        }
    }
}

/*
 * The bytes of a whole (non-SSE) answer not yet passed on may go to the
 * client. A 2xx answer's last bytes are kept: its usage comes at the end.
 */
static void
pass_whole_answer_bytes(request_t *r)
{
    const char *fresh = r->out.rx->bytes + r->out.parsed;
    size_t n = r->out.rx->size - r->out.parsed;
    r->out.parsed = r->out.rx->size;
    if (r->rd.up_status >= 300 || r->out.answer == ANSWER_HANDED_OVER || n == 0)
        return;
    /* Sized to what came, up to the cap: most answers are far smaller, and a 16 KiB malloc per request
     * made glibc consolidate its free lists each time. */
    size_t want = r->rd.answer_tail_len + n < ANSWER_TAIL_CAP ? r->rd.answer_tail_len + n : ANSWER_TAIL_CAP;
    if (want > r->rd.answer_tail_cap) {
        size_t cap = r->rd.answer_tail_cap * 2 > want ? r->rd.answer_tail_cap * 2 : want;
        r->rd.answer_tail_cap = cap < ANSWER_TAIL_CAP ? cap : ANSWER_TAIL_CAP;
        r->rd.answer_tail = sl_xrealloc(r->rd.answer_tail, r->rd.answer_tail_cap);
    }
    if (n >= ANSWER_TAIL_CAP) {
        memcpy(r->rd.answer_tail, fresh + n - ANSWER_TAIL_CAP, ANSWER_TAIL_CAP);
        r->rd.answer_tail_len = ANSWER_TAIL_CAP;
        return;
    }
    size_t keep = r->rd.answer_tail_len + n <= ANSWER_TAIL_CAP ? r->rd.answer_tail_len : ANSWER_TAIL_CAP - n;
    memmove(r->rd.answer_tail, r->rd.answer_tail + r->rd.answer_tail_len - keep, keep);
    memcpy(r->rd.answer_tail + keep, fresh, n);
    r->rd.answer_tail_len = keep + n;
}

/* A whole answer has ended: its usage, when its tail tells it, is what the hop used; its finish reason is the
 * trace's. */
static void
read_answer_usage(request_t *r)
{
    if (r->rd.answer_tail == NULL)
        return;
    sl_usage_t u;
    if (sl_answer_usage(r->in.endpoint.dialect, r->rd.answer_tail, r->rd.answer_tail_len, &u))
        r->rd.stream.usage = u;
    if (r->trace.sampled)
        sl_answer_finish_reason(r->in.endpoint.dialect, r->rd.answer_tail, r->rd.answer_tail_len,
                                r->rd.stream.finish_reason);
}

static void
process(request_t *r)
{
    /* A whole Responses answer names its own id first: it is in the first bytes. */
    if (!r->rd.events && (r->phase == PHASE_HELD || r->phase == PHASE_STREAMING) && r->rd.up_status < 300)
        capture_response_id(r, r->out.rx->bytes, r->out.rx->size);
    switch (r->phase) {
    case PHASE_HELD:
        if (r->rd.events) {
            if (!scan_events(r))
                return;
        }
        if (r->phase == PHASE_HELD && r->out.rx->size > HOLD_CAP)
            sl__release_hold(r);
        if (r->phase == PHASE_STREAMING) {
            if (!r->rd.events)
                pass_whole_answer_bytes(r);
            sl__flush_to_client(r);
        }
        break;
    case PHASE_STREAMING:
        if (r->rd.events) {
            if (!scan_events(r))
                return;
        } else {
            pass_whole_answer_bytes(r);
        }
        sl__flush_to_client(r);
        if (r->hop != NULL && !r->out.reads_paused && r->out.rx->size >= CLIENT_BUFFER_CAP)
            sl__pause_upstream_reads(r);
        break;
    case PHASE_READING_ERROR:
        if (r->out.rx->size >= ERROR_BODY_CAP)
            judge_error_answer(r);
        break;
    default:
        break;
    }
}

static void
on_hop_head(void *data, int status, const h2o_header_t *headers, size_t n)
{
    request_t *r = data;
    r->m.upstream_in_ns = sl_now_ns();
    r->rd.up_status = status;
    r->out.ttfb_ms = sl_now_ms() - r->started_ms;
    r->rd.up_content_length = -1;
    memset(&r->rd.up_headers, 0, sizeof(r->rd.up_headers));
    bool event_stream = false, frames = false;
    h2o_mem_pool_t *pool = r->req != NULL ? &r->req->pool : NULL;
    for (size_t i = 0; i < n && pool != NULL; i++) {
        const h2o_iovec_t *name = headers[i].name;
        if (h2o_memis(name->base, name->len, H2O_STRLIT("content-length")))
            r->rd.up_content_length = (int64_t)h2o_strtosize(headers[i].value.base, headers[i].value.len);
        if (h2o_memis(name->base, name->len, H2O_STRLIT("content-type"))) {
            event_stream |= h2o_strstr(headers[i].value.base, headers[i].value.len,
                                       H2O_STRLIT("text/event-stream")) != SIZE_MAX;
            frames |= h2o_strstr(headers[i].value.base, headers[i].value.len,
                                 H2O_STRLIT("application/vnd.amazon.eventstream")) != SIZE_MAX;
        }
        if (sl__is_hop_by_hop(name))
            continue;
        h2o_iovec_t v = h2o_strdup(pool, headers[i].value.base, headers[i].value.len);
        /* A known name is kept as h2o's token: nothing to copy, and nothing to look up when the answer
         * starts. */
        const h2o_token_t *token = h2o_lookup_token(name->base, name->len);
        if (token != NULL) {
            h2o_add_header(pool, &r->rd.up_headers, token, NULL, v.base, v.len);
        } else {
            h2o_iovec_t nm = h2o_strdup(pool, name->base, name->len);
            h2o_add_header_by_str(pool, &r->rd.up_headers, nm.base, nm.len, 0, NULL, v.base, v.len);
        }
    }
    const sl_stream_class_vtable_t *vt = sl_dialect_def(r->in.endpoint.dialect)->stream;
    r->rd.frames = frames && vt == NULL;
    r->rd.events = (event_stream && vt != NULL) || r->rd.frames;
    if (r->rd.frames) {
        sl_bedrock_stream_init(&r->rd.stream);
    } else if (r->rd.events) {
        sl_stream_init(&r->rd.stream, vt);
        sl_sse_init(&r->rd.scanner, SL_SSE_MAX_EVENT_DEFAULT, r->rd.scratch, sizeof(r->rd.scratch));
    }
    if (status < 200 || status > 299) {
        sl__set_phase(r, PHASE_READING_ERROR);
        return;
    }
    /*
     * Held until its first content, so an early failure can fail over or be retried invisibly: a hop to a
     * non-last candidate always; the last one when the client streams and the request may still wait.
     */
    if (sl__has_next_candidate(r) || (r->rd.events && r->in.stream && sl__may_wait(r))) {
        sl__set_phase(r, PHASE_HELD);
        /* A whole answer's content is its 2xx head: a first-token hedge is settled by it (§4). */
        if (!r->rd.events)
            sl__hedge_content(r);
    } else {
        sl__hedge_content(r);
        sl__set_phase(r, PHASE_STREAMING);
        /* A whole answer is the upstream's success now; a stream's is its first content. */
        if (!r->rd.events)
            sl__upstream_served(r);
        sl__start_response(r);
    }
}

static void
on_hop_body(void *data, h2o_buffer_t **input, bool end_follows)
{
    request_t *r = data;
    r->m.upstream_in_ns = sl_now_ns();
    r->out.end_follows = end_follows;
    /*
     * A large read into an empty rx is not copied: the connection's buffer becomes rx. A small one is, so
     * that the connection keeps its buffer (swapped, it starts its next read from an empty one, which cost
     * a fixed-rate p99 about 45 µs in bench/ab.mjs).
     */
    if (r->out.rx->size == 0 && (*input)->size >= HANDOVER_MIN_BYTES) {
        h2o_buffer_t *empty = r->out.rx;
        r->out.rx = *input;
        *input = empty;
    } else {
        size_t n = (*input)->size;
        h2o_iovec_t dst = h2o_buffer_reserve(&r->out.rx, n);
        memcpy(dst.base, (*input)->bytes, n);
        r->out.rx->size += n;
        h2o_buffer_consume(input, n);
    }
    process(r);
}

static sl_failure_source_t
source_of_end(sl_hop_end_t how, bool had_head)
{
    switch (how) {
    case SL_HOP_END_CONNECT_FAILED:
        return SL_FAILURE_CONNECT_FAILED;
    case SL_HOP_END_BROKEN_BEFORE_HEAD:
        return SL_FAILURE_BROKEN_BEFORE_HEAD;
    case SL_HOP_END_IDLE_TIMEOUT:
        return SL_FAILURE_IDLE_TIMEOUT;
    case SL_HOP_END_TOTAL_TIMEOUT:
        return SL_FAILURE_TOTAL_TIMEOUT;
    case SL_HOP_END_EOS:
        return SL_FAILURE_ENDED_EARLY;
    case SL_HOP_END_BROKEN:
    default:
        return had_head ? SL_FAILURE_BROKEN_BEFORE_CONTENT : SL_FAILURE_BROKEN_BEFORE_HEAD;
    }
}

/* The upstream's answer is whole and went out (or goes out with what is left): the request was served. */
static void
served(request_t *r)
{
    sl__remember_response(r);
    sl__end_request(r, &(req_end_t){.how = END_SERVED, .status = r->rd.up_status});
}

static void
on_hop_end(void *data, sl_hop_end_t how, const char *detail)
{
    request_t *r = data;
    sl_connection_facts_t conn;
    sl_hop_connection_facts(r->hop, &conn);
    r->hop = NULL;
    r->out.end_follows = false;
    switch (r->phase) {
    case PHASE_WAITING_HEAD:
        hop_failed_before_content(r, source_of_end(how, false), NULL, detail, &conn);
        break;
    case PHASE_HELD:
        if (how == SL_HOP_END_EOS && !r->rd.events) {
            sl__release_hold(r);
            pass_whole_answer_bytes(r);
            read_answer_usage(r);
            served(r);
            break;
        }
        hop_failed_before_content(r, source_of_end(how, true), NULL,
                                  how == SL_HOP_END_EOS ? "the stream ended before any content" : detail,
                                  NULL);
        break;
    case PHASE_READING_ERROR:
        judge_error_answer(r);
        break;
    case PHASE_STREAMING: {
        bool handed_over = r->out.answer == ANSWER_HANDED_OVER;
        /* An answer handed over after a failure is forwarded as the upstream ends it; a stream that told
         * its own error after content needs no second one from the gateway. */
        bool whole = how == SL_HOP_END_EOS &&
                     (!r->rd.events || handed_over || r->rd.told_error || sl_stream_complete(&r->rd.stream));
        if (!whole) {
            broken_while_streaming(r, how, detail);
            break;
        }
        if (!r->rd.events)
            read_answer_usage(r);
        sl__release_upstream(r);
        if (r->rd.up_status < 300 && !handed_over) {
            served(r);
            break;
        }
        sl_msg_t msg = sl__last_failure_msg(r);
        sl__end_request(r, &(req_end_t){.how = END_HANDED_OVER, .status = r->rd.up_status, .msg = &msg});
        sl_msg_free(&msg);
        break;
    }
    default:
        break;
    }
}

void
sl__reset_answer(request_t *r)
{
    r->rd.up_status = 0;
    r->rd.told_error = false;
    h2o_buffer_consume(&r->out.rx, r->out.rx->size);
    r->out.parsed = 0;
    memset(&r->rd.stream, 0, sizeof(r->rd.stream));
}

/* Queues release one request at a time: the next may go once this one's bytes are on their way, so
 * the upstream receives them in arrival order. */
static void
on_hop_sent(void *data)
{
    sl__hop_sent(data);
}

const sl_hop_callbacks_t sl__hop_callbacks = {on_hop_sent, on_hop_head, on_hop_body, on_hop_end};
