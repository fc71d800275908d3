/*
 * The request path's entry and dispatch: a client request served (intake, candidates, the
 * first hop), each hop started and the next one chosen, an operator's cancel, the request's end.
 */
#include "request.h"

#include "req.h"

/* ---- small helpers ---------------------------------------------------------------------- */

/*
 * Times on the two clocks: waiting runs on sl_now_ms's (monotonic), events
 * and usage limits on the wall clock. now and wall are the same moment.
 */
/* A monotonic time as a wall-clock one for events; -1 and SL_THROTTLE_NEVER become -1 ("none"). */
int64_t
sl__wall_of(int64_t now, int64_t wall, int64_t t)
{
    return t < 0 || t == SL_THROTTLE_NEVER ? -1 : wall + (t - now);
}

/* A wall-clock time (a limit's recovery) on sl_now_ms's clock. */
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

attempt_t *
sl__new_attempt(request_t *r, size_t cand)
{
    if (r->n_attempts == MAX_ATTEMPTS)
        return NULL;
    if (r->n_attempts == r->cap_attempts) {
        r->cap_attempts = r->cap_attempts == 0 ? 2 : r->cap_attempts * 2;
        r->attempts = sl_xrealloc(r->attempts, r->cap_attempts * sizeof(*r->attempts));
    }
    attempt_t *a = &r->attempts[r->n_attempts++];
    *a = (attempt_t){.provider = r->cands[cand].provider,
                     .model = r->cands[cand].model,
                     .started_ms = sl_now_ms(),
                     .skipped = SL_ROW_SKIP_NONE,
                     .retry = r->round,
                     .backoff_ms = -1,
                     .pause_ms = -1};
    return a;
}

attempt_t *
sl__current_attempt(request_t *r)
{
    return r->n_attempts > 0 ? &r->attempts[r->n_attempts - 1] : NULL;
}

void
sl__close_attempt(request_t *r, sl_row_hop_outcome_t outcome, sl_code_t code, const char *detail)
{
    attempt_t *a = sl__current_attempt(r);
    if (a == NULL || a->skipped != SL_ROW_SKIP_NONE || a->closed)
        return;
    a->closed = true;
    a->outcome = outcome;
    a->status = r->up_status;
    a->ms = sl_now_ms() - a->started_ms;
    if (outcome != SL_ROW_HOP_SERVED) {
        a->has_error = true;
        a->error_code = code;
        snprintf(a->error_detail, sizeof(a->error_detail), "%s", detail != NULL ? detail : "");
    }
    sl__emit_attempt(r, a);
}

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
    free(r->body_copy);
    r->body_copy = NULL;
    free(r->answer_tail);
    r->answer_tail = NULL;
    r->answer_tail_len = r->answer_tail_cap = 0;
}

/* ---- answering the client ----------------------------------------------------------------- */

void
sl__finish(request_t *r, sl_row_outcome_t outcome, int status, bool has_error, sl_code_t code,
           const char *detail)
{
    sl__end_hop(r);
    r->state = REQ_DONE;
    sl_timer_cancel(&r->io->timers, &r->start_timer);
    sl_timer_cancel(&r->io->timers, &r->backoff_timer);
    sl_timer_cancel(&r->io->timers, &r->keepalive_timer);
    sl__unwatch_client(r);
    sl__stop_waiting(r, false);
    if (r->key_charge.set != NULL) {
        /*
         * The key was charged once, at admission; sluice's own retries are not its client's, and neither is
         * a request the gateway answered without any upstream (a final 429, an estimate).
         */
        sl_amounts_t used = r->hops_sent > 0 ? sl__usage_real(r, &r->key_charge, outcome == SL_ROW_SERVED)
                                             : (sl_amounts_t){0};
        sl__settle(r, &r->key_charge, &used, &r->key_charge.set->queue);
    }
    if (!r->recorded && r->in.endpoint.op != SL_OP_LIST_MODELS)
        sl__emit_end(r, outcome, status, code, detail);
    sl__record(r, outcome, status, has_error, code, detail);
}

void
sl_request_cancel(sl_worker_io_t *io, uint64_t id)
{
    for (h2o_linklist_t *l = io->requests.next; l != &io->requests; l = l->next) {
        request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, link, l);
        if (r->id == id) {
            sl__cancel_by_operator(r);
            return;
        }
    }
}

void
sl__start_hop(request_t *r, size_t cand)
{
    const sl_provider_t *p = sl__provider_of(r, cand);
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[cand].provider];
    r->cur = cand;
    attempt_t *a = sl__new_attempt(r, cand);
    if (a == NULL) {
        sl__answer_with_failure(r);
        return;
    }
    a->backoff_ms = r->round_backoff_ms;
    r->round_backoff_ms = -1;
    sl_row_skip_t skip = sl__claim_upstream(r, cand);
    if (skip != SL_ROW_SKIP_NONE) {
        if (sl__repeats_a_skip(r, a, skip)) {
            r->n_attempts--;
        } else {
            a->skipped = skip;
            sl__emit_attempt(r, a);
        }
        r->skips[cand] = skip;
        if (skip == SL_ROW_SKIP_BUSY && !r->last.any) {
            r->last.any = true;
            r->last.code = SL_CODE_GW_UPSTREAM_BUSY;
            r->last.status = 0;
            snprintf(r->last.detail, sizeof(r->last.detail), "%u", p->max_concurrent);
        }
        r->next = cand + 1;
        sl__next_hop(r);
        return;
    }
    r->up = up;
    r->hop_uncounted = false;
    if (r->key_pause_ms > 0) {
        a->pause_ms = r->key_pause_ms;
        r->key_pause_ms = 0;
    }
    if (r->queued) {
        a->pause_ms = (a->pause_ms > 0 ? a->pause_ms : 0) + sl_now_ms() - r->queued_since_ms;
        sl__stop_waiting(r, true);
        if (sl__events_on(r)) {
            sl_proto_event_t ev;
            sl__emit(r, sl_bus_request_dequeued(&ev, sl_wall_ms(), r->id, p->name));
        }
    }
    sl_headers_t headers = sl_request_headers(r->req);
    r->body = sl__body_for_hop(r, r->cands[cand].model, r->hop_needs_usage);
    sl_upstream_request_t ureq = {
        .method = "POST",
        .target = r->req->path.base,
        .target_len = r->req->path.len,
        .model = r->cands[cand].model,
        .headers = &headers,
        .body_len = r->body.len,
    };
    sl_strbuf_t head = {0};
    sl_upstream_head_t info;
    sl_head_status_t built = sl_dialect_upstream_head(p, &ureq, &head, &info);
    if (built != SL_HEAD_OK) {
        /* The client's path (a byte no request line may carry) or the provider's config: nothing to retry. */
        free(sl_strbuf_finish(&head));
        sl__end_hop(r);
        r->last.any = true;
        r->last.code =
            built == SL_HEAD_BAD_TARGET ? SL_CODE_GW_REQUEST_BAD_PATH : SL_CODE_GW_UPSTREAM_UNUSABLE;
        snprintf(r->last.detail, sizeof(r->last.detail), "%s",
                 built == SL_HEAD_BAD_TARGET ? "the path" : "its base URL or key");
        sl__close_attempt(r, SL_ROW_HOP_ERROR, r->last.code, r->last.detail);
        sl__answer_with_failure(r);
        return;
    }
    r->head = sl_strbuf_finish(&head);
    if (info.auth == SL_UPSTREAM_AUTH_SIGV4_PENDING && !sl__sign_for_aws(r, p, &info)) {
        sl__end_hop(r);
        r->last.any = true;
        r->last.code = SL_CODE_GW_UPSTREAM_UNUSABLE;
        snprintf(r->last.detail, sizeof(r->last.detail), "%s", "no AWS credentials to sign with");
        sl__close_attempt(r, SL_ROW_HOP_ERROR, r->last.code, r->last.detail);
        sl__answer_with_failure(r);
        return;
    }
    r->up_status = 0;
    r->state = REQ_WAITING_HEAD;
    h2o_buffer_consume(&r->rx, r->rx->size);
    r->parsed = 0;
    memset(&r->stream, 0, sizeof(r->stream));
    const sl_failover_t *fo = &r->config->failover;
    bool by_address = false;
    sl_hop_params_t params = {
        .pool = sl_upstream_pool(up, r->io->loop, &by_address),
        .by_address = by_address,
        .head = h2o_iovec_init(r->head, strlen(r->head)),
        .body = r->body,
        .connect_ms = fo->connect_timeout_secs * 1000,
        .idle_ms = fo->idle_timeout_secs * 1000,
        .total_ms = fo->total_timeout_secs * 1000,
    };
    r->hops_sent++;
    r->hop = sl_hop_start(r->io, &params, &sl__hop_callbacks, r);
}

void
sl__next_hop(request_t *r)
{
    r->state = REQ_ROUTING;
    for (size_t i = r->next; i < r->n_cands; i++) {
        if (r->in_round[i] && r->skips[i] == SL_ROW_SKIP_NONE) {
            sl__start_hop(r, i);
            return;
        }
    }
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->in_round[i] && sl__skip_may_pass(r->skips[i])) {
            sl__wait_or_give_up(r);
            return;
        }
    }
    sl__answer_with_failure(r);
}

static void
on_start(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, start_timer, t);
    r->next = 0;
    if (sl__admit_key(r))
        sl__next_hop(r);
}

/* ---- intake and GET /v1/models -------------------------------------------------------------- */

static void
on_request_disposed(void *p)
{
    request_t *r = p;
    h2o_linklist_unlink(&r->link);
    sl__unwatch_client(r);
    sl_timer_cancel(&r->io->timers, &r->start_timer);
    sl_timer_cancel(&r->io->timers, &r->backoff_timer);
    sl_timer_cancel(&r->io->timers, &r->keepalive_timer);
    sl_timer_cancel(&r->io->timers, &r->stall_timer);
    sl__stop_waiting(r, false);
    r->req = NULL;
    if (r->state != REQ_DONE) {
        sl__close_attempt(r, SL_ROW_HOP_CANCELLED, SL_CODE_GW_UPSTREAM_STATUS, "client went away");
        sl__finish(r, SL_ROW_CANCELLED, r->up_status, false, SL_CODE_GW_UPSTREAM_STATUS, NULL);
    }
    sl__end_hop(r);
    h2o_buffer_dispose(&r->rx);
    h2o_buffer_dispose(&r->tx);
    free(r->attempts);
    sl_snapshot_release(r->snapshot);
}

bool
sl_request_peer_is_loopback(h2o_req_t *req)
{
    struct sockaddr_storage ss;
    socklen_t len = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    if (len == 0)
        return false;
    char host[64];
    /* The worker's internal socket: Responses WebSocket turns, whose client was checked at the upgrade. */
    if (ss.ss_family == AF_UNIX)
        return true;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
    else
        return false;
    const char *mapped = strncmp(host, "::ffff:", 7) == 0 ? host + 7 : host;
    return sl_ip_is_loopback(mapped);
}

/* A request in the request's pool (freed with it), on the worker's list, with its own snapshot reference. */
static request_t *
request_new(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_t *snapshot)
{
    request_t *r = h2o_mem_alloc_shared(&req->pool, sizeof(*r), on_request_disposed);
    memset(r, 0, sizeof(*r));
    r->req = req;
    r->io = io;
    r->client_fd = -1;
    if (req->version < 0x200) {
        h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
        if (sock != NULL)
            r->client_fd = h2o_socket_get_fd(sock);
    }
    h2o_linklist_insert(&io->requests, &r->link);
    r->gw = gw;
    r->snapshot = snapshot;
    atomic_fetch_add(&snapshot->refs, 1);
    r->config = snapshot->config;
    r->id = atomic_fetch_add(&gw->next_id, 1) + 1;
    r->started_ms = sl_now_ms();
    r->started_wall_ms = sl_wall_ms();
    r->ttfb_ms = r->ttft_ms = SL_ROW_ABSENT;
    r->path = req->path;
    r->hint_ms = -1;
    r->round_backoff_ms = -1;
    r->last_sent_ms = r->started_ms;
    r->deadline_ms = sl_retry_deadline_ms(r->started_ms, r->config->failover.wait_secs, &gw->retry_params);
    h2o_buffer_init(&r->rx, &h2o_socket_buffer_prototype);
    h2o_buffer_init(&r->tx, &h2o_socket_buffer_prototype);
    return r;
}

void
sl_request_record_refused(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_t *snapshot,
                          int status, sl_code_t code, const char *text)
{
    request_t *r = request_new(req, io, gw, snapshot);
    if (!sl_endpoint_parse(req->input.method.base, req->input.method.len, req->input.path.base,
                           req->input.path.len, &r->in.endpoint))
        r->in.endpoint.dialect = SL_DIALECT_COUNT;
    memcpy(r->in.model, r->in.endpoint.model, sizeof(r->in.model));
    sl__emit_started(r);
    r->gateway_error = true;
    sl__finish(r, SL_ROW_FAILED, status, true, code, text);
}

int
sl_request_serve(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_t *snapshot)
{
    request_t *r = request_new(req, io, gw, snapshot);

    /* Safe mode and shutdown refuse everything, in the client's dialect when its path tells it. */
    sl_code_t refused = snapshot->safe_mode ? SL_CODE_GW_SAFE_MODE : SL_CODE_GW_SHUTTING_DOWN;
    if (snapshot->safe_mode || atomic_load(&gw->stopping)) {
        if (!sl_endpoint_parse(req->method.base, req->method.len, req->path.base, req->path.len,
                               &r->in.endpoint))
            r->in.endpoint.dialect = SL_DIALECT_COUNT;
        sl_msg_t msg = sl_msg_make(refused, NULL);
        sl__emit_started(r);
        r->gateway_error = true;
        sl_request_send_error(req, r->in.endpoint.dialect, sl_code_status(refused), refused, msg.text);
        sl__finish(r, SL_ROW_FAILED, sl_code_status(refused), true, refused, msg.text);
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
        r->gateway_error = true;
        char path[256];
        snprintf(path, sizeof(path), "%.*s", (int)req->path_normalized.len, req->path_normalized.base);
        char max[24];
        snprintf(max, sizeof(max), "%llu", (unsigned long long)r->config->max_body_bytes);
        sl_msg_t msg = sl_msg_make(refusal.code, "method", refusal.detail, "path", path, "where",
                                   refusal.detail, "detail", refusal.detail, "size", refusal.detail, "max",
                                   max, "what", refusal.detail, NULL);
        sl_request_send_error(req, r->in.endpoint.dialect, refusal.status, refusal.code, msg.text);
        sl__finish(r, SL_ROW_FAILED, refusal.status, true, refusal.code, msg.text);
        sl_msg_free(&msg);
        return 0;
    }
    if (r->in.endpoint.op == SL_OP_LIST_MODELS) {
        sl__answer_models(req, r->config);
        sl__finish(r, SL_ROW_ANSWERED_LOCALLY, 200, false, SL_CODE_GW_NOT_FOUND, NULL);
        return 0;
    }
    if (!sl__choose_candidates(r)) {
        if (r->in.endpoint.op == SL_OP_COUNT_TOKENS) {
            sl__answer_token_estimate(r);
            return 0;
        }
        r->last.any = true;
        r->last.code = SL_CODE_GW_ROUTE_NO_MATCH;
        sl__answer_with_failure(r);
        return 0;
    }
    if (r->in.client != NULL && snapshot->limits.clients != NULL)
        r->key_limits = snapshot->limits.clients[r->in.client - r->config->clients];
    sl__watch_client_soon(r);
    /*
     * The first hop starts on the next loop turn: an HTTP/2 stream opened and
     * reset in one read is disposed before any upstream work (the rapid-reset
     * measure of stack-notes.md).
     */
    sl_timer_arm(&r->io->timers, &r->start_timer, sl_now_ms(), on_start);
    if (r->in.stream)
        sl_timer_arm(&r->io->timers, &r->keepalive_timer,
                     sl_keepalive_due_ms(true, r->started_ms, r->started_ms, &r->gw->retry_params),
                     sl__on_keepalive);
    return 0;
}

void
sl_gateway_init(sl_gateway_t *gw, sl_recorder_t *recorder)
{
    gw->recorder = recorder;
    gw->bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    gw->retry_params = (sl_retry_params_t){.time_scale = 1};
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
    pthread_mutex_init(&gw->affinity_lock, NULL);
    gw->affinity = sl_affinity_new(SL_AFFINITY_DEFAULT_CAPACITY, SL_AFFINITY_DEFAULT_IDLE_MS);
    /* The hash key only has to be unknown to clients. */
    if (getrandom(&gw->affinity_key, sizeof(gw->affinity_key), 0) != (ssize_t)sizeof(gw->affinity_key)) {
        gw->affinity_key.k0 = (uint64_t)sl_wall_ms() * 0x9E3779B97F4A7C15ull;
        gw->affinity_key.k1 = (uint64_t)sl_now_ms() ^ (uint64_t)(uintptr_t)gw;
    }
}
