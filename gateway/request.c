/*
 * The request path's spine: a client request served (intake, candidates,
 * the first hop), its phase moved along one table, each hop started and the
 * next chosen, an operator's cancel, and the one exit (sl__end_request)
 * every request leaves by: whatever happened, the client's answer, the
 * events, the row and the usage settlement come from there, in one order.
 */
#include "request.h"

#include "req.h"

/* ---- phases -------------------------------------------------------------------------------- */

#define TO(phase) (1u << (phase))

/* Where each phase may go (behaviour.md §1-6): one bit per phase. */
static const unsigned phase_moves[PHASE_COUNT] = {
    [PHASE_ROUTING] = TO(PHASE_ROUTING) | TO(PHASE_WAITING_HEAD) | TO(PHASE_QUEUED) | TO(PHASE_DONE),
    [PHASE_BACKOFF] = TO(PHASE_ROUTING) | TO(PHASE_DONE),
    [PHASE_QUEUED] = TO(PHASE_ROUTING) | TO(PHASE_QUEUED) | TO(PHASE_DONE),
    [PHASE_WAITING_HEAD] = TO(PHASE_HELD) | TO(PHASE_READING_ERROR) | TO(PHASE_STREAMING) |
                           TO(PHASE_ROUTING) | TO(PHASE_BACKOFF) | TO(PHASE_DONE),
    [PHASE_HELD] = TO(PHASE_STREAMING) | TO(PHASE_ROUTING) | TO(PHASE_BACKOFF) | TO(PHASE_DONE),
    [PHASE_READING_ERROR] = TO(PHASE_STREAMING) | TO(PHASE_ROUTING) | TO(PHASE_BACKOFF) | TO(PHASE_DONE),
    [PHASE_STREAMING] = TO(PHASE_DONE),
    [PHASE_DONE] = 0,
};

static const char *const phase_names[PHASE_COUNT] = {"routing", "backoff",       "queued",    "waiting_head",
                                                     "held",    "reading_error", "streaming", "done"};

const req_moves_t sl__phase_moves = {"phase", phase_moves, phase_names, PHASE_COUNT};

const char *
sl__state_name(const req_moves_t *m, unsigned state)
{
    return state < m->count ? m->names[state] : "?";
}

void
sl__illegal_move(const req_moves_t *m, uint64_t id, unsigned from, unsigned to)
{
    sl_log_error("request %llu: %s %s -> %s is not a move of the request path", (unsigned long long)id,
                 m->what, sl__state_name(m, from), sl__state_name(m, to));
    assert(!"illegal move of the request path");
}

void
sl__set_phase(request_t *r, req_phase_t to)
{
    sl__check_move(&sl__phase_moves, r->id, r->phase, to);
    r->phase = to;
}

void
sl__exchange_phase(request_t *r, req_phase_t *other)
{
    req_phase_t to = *other;
    *other = r->phase;
    r->phase = to;
}

/* ---- small helpers ------------------------------------------------------------------------- */

/*
 * Times on the two clocks: waiting runs on sl_now_ms's (monotonic), events
 * and usage limits on the wall clock. now and wall are the same moment.
 */
int64_t
sl__wall_of(int64_t now, int64_t wall, int64_t t)
{
    return t < 0 || t == SL_THROTTLE_NEVER ? -1 : wall + (t - now);
}

int64_t
sl__mono_of(int64_t now, int64_t wall, int64_t t)
{
    return now + (t - wall);
}

const sl_provider_t *
sl__provider_of(const request_t *r, size_t cand)
{
    return &r->config->providers[r->cands[cand].provider];
}

bool
sl__header_at(const void *ctx, size_t i, sl_header_t *out)
{
    const h2o_headers_t *h = ctx;
    if (i >= h->size)
        return false;
    out->name = h->entries[i].name->base;
    out->name_len = h->entries[i].name->len;
    out->value = h->entries[i].value.base;
    out->value_len = h->entries[i].value.len;
    return true;
}

sl_headers_t
sl_request_headers(const h2o_req_t *req)
{
    return (sl_headers_t){.at = sl__header_at, .ctx = &req->headers};
}

/* ---- the one exit -------------------------------------------------------------------------- */

/* How the end reaches the client. */
typedef enum {
    DELIVER_NOTHING,      /* the client is gone, or h2o already has the end */
    DELIVER_WHOLE_ERROR,  /* the gateway's error as the whole answer */
    DELIVER_WHOLE_LOCAL,  /* the gateway's own answer, whole */
    DELIVER_STREAM_ERROR, /* the gateway's error inside the stream, then its end */
    DELIVER_FINAL,        /* what is left, then the end */
    DELIVER_ABORT,        /* the answer is cut: h2o ends it as an error */
    DELIVER_CLOSE,        /* an HTTP/1 client left before any answer: a bare one makes h2o close */
} delivery_t;

/*
 * How an end reaches the client, from how the request ends, what the client
 * already has (out), and whether its answer is a stream the gateway can
 * write an error into (in_stream: a stream of events, or keep-alives).
 */
static delivery_t
delivery_of(req_end_how_t how, client_out_t out, bool in_stream, bool cut)
{
    if (out == OUT_CLOSED)
        return DELIVER_NOTHING;
    switch (how) {
    case END_SERVED:
        return DELIVER_FINAL;
    case END_HANDED_OVER:
        return cut ? DELIVER_STREAM_ERROR : DELIVER_FINAL;
    case END_LOCAL:
        return out == OUT_NONE ? DELIVER_WHOLE_LOCAL : DELIVER_ABORT;
    case END_GATEWAY_ERROR:
    case END_CANCELLED:
        if (out == OUT_NONE)
            return DELIVER_WHOLE_ERROR;
        return in_stream ? DELIVER_STREAM_ERROR : DELIVER_ABORT;
    case END_BROKEN:
        return in_stream ? DELIVER_STREAM_ERROR : DELIVER_ABORT;
    case END_CLIENT_LEFT:
        return out == OUT_NONE ? DELIVER_CLOSE : DELIVER_ABORT;
    case END_CLIENT_STALLED:
        return DELIVER_ABORT;
    }
    return DELIVER_ABORT;
}

static const struct {
    sl_row_outcome_t row;
    sl_hop_outcome_t hop; /* how an attempt still open ends */
} end_outcomes[] = {
    [END_SERVED] = {SL_ROW_SERVED, SL_HOP_SERVED},
    [END_HANDED_OVER] = {SL_ROW_FAILED, SL_HOP_STATUS},
    [END_GATEWAY_ERROR] = {SL_ROW_FAILED, SL_HOP_ERROR},
    [END_BROKEN] = {SL_ROW_FAILED, SL_HOP_ERROR},
    [END_LOCAL] = {SL_ROW_ANSWERED_LOCALLY, SL_HOP_ESTIMATED},
    [END_CANCELLED] = {SL_ROW_CANCELLED, SL_HOP_CANCELLED},
    [END_CLIENT_LEFT] = {SL_ROW_CANCELLED, SL_HOP_CLIENT_LEFT},
    [END_CLIENT_STALLED] = {SL_ROW_CANCELLED, SL_HOP_CANCELLED},
};

/*
 * Ends the request, in one fixed order: the open attempt closes, the hop and
 * its upstream are let go (settling the upstream's charge), timers and
 * queues are left, the key's charge settles, RequestFinished/Failed/Cancelled
 * goes out, the row is written — and last what the client gets, chosen from
 * how it ends and what it already has, since h2o may dispose the request
 * (and r) inside that final send. A second call does nothing.
 */
void
sl__end_request(request_t *r, const req_end_t *end)
{
    if (r->phase == PHASE_DONE)
        return;
    sl_row_outcome_t outcome = end_outcomes[end->how].row;
    sl_code_t code = end->msg != NULL ? end->msg->code : SL_CODE_GW_UPSTREAM_STATUS;
    const char *text = end->msg != NULL ? end->msg->text : NULL;
    sl__hedge_drop(r, end->how == END_CLIENT_LEFT ? SL_HOP_CLIENT_LEFT : SL_HOP_CANCELLED, code, text);
    sl__close_attempt(r, end_outcomes[end->how].hop, code, text);
    bool in_stream = r->rd.events || r->out.state == OUT_KEEPALIVE;
    delivery_t delivery = delivery_of(end->how, r->out.state, in_stream, end->cut);
    sl__end_hop(r);
    if (end->how == END_GATEWAY_ERROR || delivery == DELIVER_WHOLE_ERROR || delivery == DELIVER_STREAM_ERROR)
        r->out.answer = ANSWER_GATEWAY;
    else if (end->how == END_HANDED_OVER)
        r->out.answer = ANSWER_HANDED_OVER;
    sl__set_phase(r, PHASE_DONE);
    sl_timer_cancel(&r->io->timers, &r->start_timer);
    sl_timer_cancel(&r->io->timers, &r->retry.backoff_timer);
    sl_timer_cancel(&r->io->timers, &r->out.keepalive_timer);
    sl__unwatch_client(r);
    sl__stop_waiting(r, false);
    /* News of the last hop's 429 state still to come is the shared state's to announce, not this request's.
     */
    sl_shared_cancel(r->gw->shared, &r->acct.news);
    sl__settle_key(r, outcome == SL_ROW_SERVED);
    if (r->in.endpoint.op != SL_OP_LIST_MODELS)
        sl__emit_end(r, outcome, end->status, end->msg);
    sl__record(r, outcome, end->status, end->msg);
    sl__count_request(r, outcome, end->status, end->how == END_BROKEN || delivery == DELIVER_STREAM_ERROR);
    sl__trace_end(r, outcome, end->status, end->msg);
    switch (delivery) {
    case DELIVER_NOTHING:
        break;
    case DELIVER_WHOLE_ERROR:
        sl__send_whole_error(r, end->status, end->msg);
        break;
    case DELIVER_WHOLE_LOCAL:
        sl__send_whole_local(r, end->type, end->body);
        return;
    case DELIVER_STREAM_ERROR:
        sl__append_stream_error(r, code, text);
        sl__queue_final(r, H2O_SEND_STATE_FINAL);
        break;
    case DELIVER_FINAL:
        sl__queue_final(r, H2O_SEND_STATE_FINAL);
        break;
    case DELIVER_ABORT:
        sl__abort_answer(r, end->how == END_CLIENT_STALLED);
        break;
    case DELIVER_CLOSE:
        sl__send_close(r);
        break;
    }
    if (end->body != NULL)
        free(sl_strbuf_finish(end->body));
}

/* Ends the request with the gateway's error: code's message with its arguments (NULL-terminated pairs). */
void
sl__end_with_error(request_t *r, req_end_how_t how, int status, const sl_msg_t *msg)
{
    req_end_t end = {.how = how, .status = status, .msg = msg};
    sl__end_request(r, &end);
}

void
sl_request_cancel(sl_worker_io_t *io, uint64_t id)
{
    for (h2o_linklist_t *l = io->requests.next; l != &io->requests; l = l->next) {
        request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, link, l);
        if (r->id == id && r->phase != PHASE_DONE) {
            sl_log_info("request %llu: cancelled by an operator", (unsigned long long)r->id);
            sl_msg_t msg = sl_msg_make(SL_CODE_GW_CANCELLED, NULL);
            int status = r->out.state == OUT_NONE ? sl_code_status(SL_CODE_GW_CANCELLED)
                         : r->rd.up_status > 0    ? r->rd.up_status
                                                  : 200;
            sl__end_with_error(r, END_CANCELLED, status, &msg);
            sl_msg_free(&msg);
            return;
        }
    }
}

/* ---- hops ---------------------------------------------------------------------------------- */

/* The gateway's error for a hop that could not even be built (its path, its provider's config). */
static void
unusable_hop(request_t *r, sl_code_t code, const char *what)
{
    sl__end_hop(r);
    sl__remember_failure(r, code, what);
    sl__close_attempt(r, SL_HOP_ERROR, code, what);
    sl__answer_with_failure(r);
}

void
sl__start_hop(request_t *r, size_t cand)
{
    r->cur = cand;
    r->hedge.resume_after = SIZE_MAX;
    attempt_t *a = sl__new_attempt(r, cand);
    if (a == NULL) {
        sl__answer_with_failure(r);
        return;
    }
    a->backoff_ms = r->retry.round_backoff_ms;
    r->retry.round_backoff_ms = -1;
    /* Why this hop goes where it goes, when a failure did not say (§1.5); a failure's reason replaces it. */
    if (r->affinity_effect == SL_AFFINITY_RETURNED && cand == 0 && r->retry.round == 0) {
        a->has_reason = true;
        a->reason = SL_STEP_REASON_BACK_TO_EARLIER;
    }
    sl__claim_upstream(r, cand);
}

void
sl__send_hop(request_t *r)
{
    size_t cand = r->cur;
    const sl_provider_t *p = sl__provider_of(r, cand);
    sl_upstream_t *up = r->up;
    r->m.sent_ns = sl_now_ns();
    r->acct.hop_uncounted = false;
    sl__note_queued_time(r, &r->attempts[r->attempt], p->name);
    sl_strbuf_t head = {0};
    /* A request line, host, length, credential and a few headers: grown once, not six times. */
    sl_strbuf_reserve(&head, 1024);
    sl_upstream_head_t info;
    sl_head_status_t built = sl__build_hop_request(r, cand, &head, &info);
    if (built != SL_HEAD_OK) {
        free(sl_strbuf_finish(&head));
        if (built == SL_HEAD_BAD_TARGET)
            unusable_hop(r, SL_CODE_GW_REQUEST_BAD_PATH, "the path");
        else
            unusable_hop(r, SL_CODE_GW_UPSTREAM_UNUSABLE, "its base URL or key");
        return;
    }
    r->head = sl_strbuf_finish(&head);
    if (info.auth == SL_UPSTREAM_AUTH_SIGV4_PENDING && !sl__sign_for_aws(r, p, &info)) {
        unusable_hop(r, SL_CODE_GW_UPSTREAM_UNUSABLE, "no AWS credentials to sign with");
        return;
    }
    sl__reset_answer(r);
    sl__set_phase(r, PHASE_WAITING_HEAD);
    const sl_failover_t *fo = &r->config->failover;
    sl_hop_params_t params = {
        .peer = sl_upstream_peer(up),
        .fresh = r->fresh,
        .head = h2o_iovec_init(r->head, strlen(r->head)),
        .body = r->body,
        .connect_ms = fo->connect_timeout_secs * 1000,
        .idle_ms = fo->idle_timeout_secs * 1000,
        .total_ms = fo->total_timeout_secs * 1000,
    };
    r->fresh = false;
    r->acct.hops_sent++;
    r->hop = sl_hop_start(r->io, &params, &sl__hop_callbacks, r);
    sl__hedge_arm(r);
}

void
sl__next_hop(request_t *r)
{
    sl__set_phase(r, PHASE_ROUTING);
    for (size_t i = r->next; i < r->n_cands; i++) {
        if (r->retry.in_round[i] && r->skips[i] == SL_SKIP_NONE) {
            sl__start_hop(r, i);
            return;
        }
    }
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->retry.in_round[i] && sl_skip_may_pass(r->skips[i])) {
            sl__wait_or_give_up(r);
            return;
        }
    }
    sl__answer_with_failure(r);
}

/* The hop in flight is over (or abandoned): its connection, its upstream slot and its buffers go. */
void
sl__end_hop(request_t *r)
{
    sl__end_dispatch(r);
    if (r->hop != NULL) {
        sl_hop_cancel(r->hop);
        r->hop = NULL;
    }
    sl__release_upstream(r);
    free(r->head);
    r->head = NULL;
    r->body = h2o_iovec_init(NULL, 0);
    free(r->body_copy);
    r->body_copy = NULL;
    free(r->rd.answer_tail);
    r->rd.answer_tail = NULL;
    r->rd.answer_tail_len = r->rd.answer_tail_cap = 0;
}

static void
on_start(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, start_timer, t);
    sl__admit_key_then_route(r);
}

/* ---- a request's life in the pool ----------------------------------------------------------- */

/*
 * Freed requests a worker keeps for its next ones: a request_t is 11.7 KB,
 * a large malloc whose free and allocation consolidate malloc's bins on
 * every request otherwise. Requests end on the thread they began on.
 */
#define REQUESTS_KEPT 64
static __thread h2o_mem_recycle_t request_recycle = {.max = REQUESTS_KEPT};

/* The request's pool is being cleared: the request ends (if it had not) and its memory goes back. */
static void
on_request_disposed(void *p)
{
    request_t *r = *(request_t **)p;
    h2o_linklist_unlink(&r->link);
    if (h2o_linklist_is_linked(&r->held.link))
        h2o_linklist_unlink(&r->held.link);
    sl__unwatch_client(r);
    sl_timer_cancel(&r->io->timers, &r->out.stall_timer);
    /* An HTTP/2 stream reset, or a connection gone, before the request ended. */
    sl__set_client_out(r, OUT_CLOSED);
    if (r->phase != PHASE_DONE)
        sl__end_request(r, &(req_end_t){.how = END_CLIENT_LEFT, .status = r->rd.up_status});
    sl__end_hop(r);
    h2o_buffer_dispose(&r->out.rx);
    h2o_buffer_dispose(&r->out.tx);
    free(r->attempts);
    sl_snapshot_lease_drop(r->lease);
    h2o_mem_free_recycle(&request_recycle, r);
}

bool
sl_request_peer_is_loopback(h2o_req_t *req)
{
    struct sockaddr_storage ss;
    socklen_t len = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    if (len == 0)
        return false;
    /* The worker's internal socket: Responses WebSocket turns, whose client was checked at the upgrade. */
    if (ss.ss_family == AF_UNIX)
        return true;
    return sl_sockaddr_is_loopback((struct sockaddr *)&ss);
}

/*
 * All zero but its two SSE scratch buffers (8 KiB of the 11.7 KB), which the
 * scanner writes before it reads them: zeroing the whole request was the
 * largest single cost of a request in callgrind (11 700 of 100 700
 * instructions).
 */
static void
zero_request(request_t *r)
{
    const size_t first = offsetof(request_t, rd.scratch),
                 second = offsetof(request_t, hedge.parked.rd.scratch);
    const size_t len = sizeof(r->rd.scratch);
    _Static_assert(offsetof(request_t, rd.scratch) + sizeof(((request_t *)0)->rd.scratch) <=
                       offsetof(request_t, hedge.parked.rd.scratch),
                   "the request's own scratch comes before the parked hop's");
    memset(r, 0, first);
    memset((char *)r + first + len, 0, second - (first + len));
    memset((char *)r + second + len, 0, sizeof(*r) - (second + len));
}

/* A request freed with the request's pool, on the worker's list, a user of the worker's snapshot lease. */
static request_t *
request_new(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_lease_t *lease)
{
    request_t **holder = h2o_mem_alloc_shared(&req->pool, sizeof(*holder), on_request_disposed);
    request_t *r = *holder = h2o_mem_alloc_recycle(&request_recycle, sizeof(*r));
    zero_request(r); /* phase PHASE_ROUTING, out.state OUT_NONE */
    r->req = req;
    r->io = io;
    /* The shared state's answers come on this worker. */
    r->wait.call.timers = r->acct.news.timers = &io->timers;
    r->wait.call.inbox = r->acct.news.inbox = io->shared_inbox;
    r->wait.call.lane = r->acct.news.lane = io->cluster_lane;
    r->out.client_fd = -1;
    r->attempt = SIZE_MAX;
    r->hedge.resume_after = SIZE_MAX;
    if (req->version < 0x200) {
        h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
        if (sock != NULL)
            r->out.client_fd = h2o_socket_get_fd(sock);
    }
    h2o_linklist_insert(&io->requests, &r->link);
    r->gw = gw;
    r->lease = lease;
    sl_snapshot_lease_hold(lease);
    r->snapshot = lease->snapshot;
    r->config = r->snapshot->config;
    r->id = atomic_fetch_add(&gw->next_id, 1) + 1;
    r->started_ms = sl_now_ms();
    r->started_wall_ms = sl_wall_ms();
    r->out.ttfb_ms = r->out.ttft_ms = SL_ROW_ABSENT;
    r->path = req->path;
    r->retry.hint_ms = -1;
    r->retry.round_backoff_ms = -1;
    r->out.last_sent_ms = r->started_ms;
    r->retry.deadline_ms =
        sl_retry_deadline_ms(r->started_ms, r->config->failover.wait_secs, &gw->retry_params);
    r->m.trouble = SL_TROUBLE_NONE;
    r->m.wait_gate = SL_GATE_COUNT;
    r->m.arrival_ns = sl_now_ns();
    r->m.overhead_ns = -1;
    sl__trace_begin(r);
    h2o_buffer_init(&r->out.rx, &h2o_socket_buffer_prototype);
    h2o_buffer_init(&r->out.tx, &h2o_socket_buffer_prototype);
    return r;
}

void
sl_request_record_refused(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_lease_t *lease,
                          int status, const sl_msg_t *msg)
{
    request_t *r = request_new(req, io, gw, lease);
    if (!sl_endpoint_parse(req->input.method.base, req->input.method.len, req->input.path.base,
                           req->input.path.len, &r->in.endpoint))
        r->in.endpoint.dialect = SL_DIALECT_COUNT;
    memcpy(r->in.model, r->in.endpoint.model, sizeof(r->in.model));
    sl__emit_started(r);
    /* refusal.c rewrites h2o's own answer: the client's answer is already on its way. */
    sl__set_client_out(r, OUT_CLOSED);
    sl__end_with_error(r, END_GATEWAY_ERROR, status, msg);
}

int
sl_request_serve(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_lease_t *lease)
{
    request_t *r = request_new(req, io, gw, lease);
    const sl_snapshot_t *snapshot = r->snapshot;

    /* Safe mode and shutdown refuse everything, in the client's dialect when its path tells it. */
    if (snapshot->safe_mode || atomic_load(&gw->stopping)) {
        if (!sl_endpoint_parse(req->method.base, req->method.len, req->path.base, req->path.len,
                               &r->in.endpoint))
            r->in.endpoint.dialect = SL_DIALECT_COUNT;
        sl_msg_t msg =
            sl_msg_make(snapshot->safe_mode ? SL_CODE_GW_SAFE_MODE : SL_CODE_GW_SHUTTING_DOWN, NULL);
        sl__emit_started(r);
        sl__end_with_error(r, END_GATEWAY_ERROR, sl_code_status(msg.code), &msg);
        sl_msg_free(&msg);
        return 0;
    }

    sl_headers_t headers = sl_request_headers(req);
    sl_intake_input_t input = {
        .method = req->method.base,
        .method_len = req->method.len,
        .path = req->path.base,
        .path_len = req->path.len,
        .headers = &headers,
        .body = req->entity.base != NULL ? req->entity.base : "",
        .body_len = req->entity.len,
        .peer_is_loopback = sl_request_peer_is_loopback(req),
    };
    sl_intake_refusal_t refusal;
    bool accepted = sl_intake(r->config, &input, &r->in, &refusal);
    if (r->in.endpoint.op != SL_OP_LIST_MODELS)
        sl__emit_started(r);
    if (!accepted) {
        sl__end_with_error(r, END_GATEWAY_ERROR, refusal.status, &refusal.msg);
        sl_msg_free(&refusal.msg);
        return 0;
    }
    if (r->in.endpoint.op == SL_OP_LIST_MODELS) {
        sl__answer_models(r);
        return 0;
    }
    if (!sl__choose_candidates(r)) {
        if (r->in.endpoint.op == SL_OP_COUNT_TOKENS) {
            sl__answer_token_estimate(r);
            return 0;
        }
        sl__remember_failure(r, SL_CODE_GW_ROUTE_NO_MATCH, NULL);
        sl__answer_with_failure(r);
        return 0;
    }
    if (r->in.client != NULL && snapshot->limits.clients != NULL)
        r->acct.key_limits = snapshot->limits.clients[r->in.client - r->config->clients];
    sl__watch_client_soon(r);
    /*
     * The first hop starts on the next loop turn: an HTTP/2 stream opened and
     * reset in one read is disposed before any upstream work (the rapid-reset
     * measure of stack-notes.md).
     */
    sl_timer_arm(&r->io->timers, &r->start_timer, sl_now_ms(), on_start);
    if (r->in.stream)
        sl_timer_arm(&r->io->timers, &r->out.keepalive_timer,
                     sl_keepalive_due_ms(true, r->started_ms, r->started_ms, &r->gw->retry_params),
                     sl__on_keepalive);
    return 0;
}

void
sl_gateway_init(sl_gateway_t *gw, sl_recorder_t *recorder)
{
    gw->recorder = recorder;
    gw->bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    gw->metrics = sl_metrics_new();
    gw->tracer = sl_tracer_new();
    gw->retry_params = (sl_retry_params_t){.time_scale = 1};
    /* Tests: every answer of the shared state comes a loop turn later, as a remote store's would. */
    const char *shared = getenv("SLUICE_TEST_SHARED_STATE");
    bool deferred = shared != NULL && strcmp(shared, "deferred") == 0;
    if (deferred)
        sl_log_warn(
            "SLUICE_TEST_SHARED_STATE=deferred: the shared state answers a loop turn later (tests only)");
    gw->shared = sl_shared_local_new(&gw->stopping, deferred);
    const char *scale = getenv("SLUICE_TEST_TIME_SCALE");
    if (scale != NULL) {
        char *end;
        double v = strtod(scale, &end);
        if (*end == '\0' && v > 0 && v <= 1) {
            gw->retry_params = (sl_retry_params_t){.time_scale = v, .no_jitter = true};
            sl_log_warn(
                "SLUICE_TEST_TIME_SCALE=%g: retry pauses, hints and keep-alives are scaled, without jitter "
                "(tests only)",
                v);
        }
    }
    for (size_t i = 0; i < SL_AFFINITY_SHARDS; i++) {
        pthread_mutex_init(&gw->affinity[i].lock, NULL);
        gw->affinity[i].table =
            sl_affinity_new(SL_AFFINITY_DEFAULT_CAPACITY / SL_AFFINITY_SHARDS, SL_AFFINITY_DEFAULT_IDLE_MS);
    }
    /* The hash key only has to be unknown to clients. */
    if (getrandom(&gw->affinity_key, sizeof(gw->affinity_key), 0) != (ssize_t)sizeof(gw->affinity_key)) {
        gw->affinity_key.k0 = (uint64_t)sl_wall_ms() * 0x9E3779B97F4A7C15ull;
        gw->affinity_key.k1 = (uint64_t)sl_now_ms() ^ (uint64_t)(uintptr_t)gw;
    }
}
