#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/xalloc.h"
#include "recorder.h"
#include "worker.h"

static void
ok(sl_proto_message_t *reply, uint32_t req)
{
    sl_proto_message_init(reply, SL_PROTO_MESSAGE_OK);
    reply->ok.req = req;
}

void
sl_control_error(sl_proto_message_t *reply, uint32_t req, const sl_msg_t *message)
{
    sl_proto_message_init(reply, SL_PROTO_MESSAGE_ERROR);
    reply->error.req = req;
    reply->error.message = sl_bus_msg_from(message);
}

/* error with message (freed here) and every problem (copied). */
static void
fail(sl_proto_message_t *reply, uint32_t req, sl_msg_t message, const sl_msgs_t *problems)
{
    sl_control_error(reply, req, &message);
    sl_msg_free(&message);
    if (problems != NULL && problems->len > 0) {
        reply->error.has_problems = true;
        reply->error.problems = sl_xcalloc(problems->len, sizeof(*reply->error.problems));
        reply->error.problems_len = problems->len;
        for (size_t i = 0; i < problems->len; i++)
            reply->error.problems[i] = sl_bus_msg_from(&problems->items[i]);
    }
}

bool
sl_control_limit_from(const sl_proto_limit_t *in, sl_limit_t *out, const char **why)
{
    static const sl_limit_per_t pers[SL_PROTO_PERIOD_COUNT] = {
        [SL_PROTO_PERIOD_MINUTE] = SL_PER_MINUTE, [SL_PROTO_PERIOD_HOUR] = SL_PER_HOUR,
        [SL_PROTO_PERIOD_DAY] = SL_PER_DAY,       [SL_PROTO_PERIOD_WEEK] = SL_PER_WEEK,
        [SL_PROTO_PERIOD_MONTH] = SL_PER_MONTH,
    };
    int measures = in->has_requests + in->has_tokens + in->has_cost_micros;
    if (measures != 1) {
        *why = "a limit needs exactly one of requests, tokens, cost_micros";
        return false;
    }
    if (in->every < 1) {
        *why = "every must be at least 1";
        return false;
    }
    uint64_t amount = in->has_requests ? in->requests : in->has_tokens ? in->tokens : in->cost_micros;
    if (amount > (uint64_t)INT64_MAX) {
        *why = "the amount is too large";
        return false;
    }
    *out = (sl_limit_t){
        .per = pers[in->per],
        .every = in->every,
        .measure = in->has_requests ? SL_MEASURE_REQUESTS
                   : in->has_tokens ? SL_MEASURE_TOKENS
                                    : SL_MEASURE_COST,
        .amount = (int64_t)amount,
    };
    return true;
}

static void
set_limits(const sl_control_ctx_t *ctx, uint32_t req, sl_bucket_kind_t kind, const char *name,
           const sl_proto_limit_t *in, size_t n, sl_proto_message_t *reply)
{
    sl_limit_t *limits = n > 0 ? sl_xcalloc(n, sizeof(*limits)) : NULL;
    for (size_t i = 0; i < n; i++) {
        const char *why;
        if (!sl_control_limit_from(&in[i], &limits[i], &why)) {
            char index[24];
            snprintf(index, sizeof(index), "%zu", i);
            fail(reply, req, sl_msg_make(SL_CODE_CONTROL_BAD_LIMIT, "index", index, "reason", why, NULL),
                 NULL);
            free(limits);
            return;
        }
    }
    sl_msg_t err;
    if (sl_runtime_set_limits(ctx->runtime, kind, name, limits, n, &err) != 0)
        fail(reply, req, err, NULL);
    else
        ok(reply, req);
    free(limits);
}

static void
get_config(const sl_control_ctx_t *ctx, uint32_t req, sl_proto_message_t *reply)
{
    sl_runtime_config_view_t v;
    sl_runtime_get_config(ctx->runtime, &v);
    ok(reply, req);
    sl_proto_ok_msg_t *o = &reply->ok;
    o->yaml = v.yaml;
    v.yaml = NULL;
    o->has_revision = true;
    o->revision = v.revision;
    o->has_persisted = true;
    o->persisted = v.persisted;
    if (v.problems.len > 0) {
        o->has_problems = true;
        o->problems = sl_xcalloc(v.problems.len, sizeof(*o->problems));
        o->problems_len = v.problems.len;
        for (size_t i = 0; i < v.problems.len; i++)
            o->problems[i] = sl_bus_msg_from(&v.problems.items[i]);
    }
    o->repair_yaml = v.repair_yaml;
    v.repair_yaml = NULL;
    sl_runtime_config_view_free(&v);
}

static void
put_config(const sl_control_ctx_t *ctx, const sl_proto_put_config_msg_t *m, sl_proto_message_t *reply)
{
    sl_msg_t err;
    sl_msgs_t problems = {0};
    if (sl_runtime_put_config(ctx->runtime, m->yaml, strlen(m->yaml), m->expect_revision, &err, &problems) !=
        0)
        fail(reply, m->req, err, &problems);
    else
        ok(reply, m->req);
    sl_msgs_clear(&problems);
}

static void
history(const sl_control_ctx_t *ctx, const sl_proto_history_msg_t *m, sl_proto_message_t *reply)
{
    const sl_store_where_t *db = sl_runtime_store(ctx->runtime);
    ok(reply, m->req);
    reply->ok.has_rows = true;
    if (db == NULL)
        return;
    sl_recorder_history_query_t q = {
        .since_ms = m->since_ms,
        .limit = m->limit,
        .filter = &m->filter,
        .cursor = m->cursor,
    };
    char err[256];
    if (sl_recorder_history(db, &q, &reply->ok.rows, &reply->ok.rows_len, &reply->ok.next_cursor, err,
                            sizeof(err)) != 0) {
        sl_proto_message_free(reply);
        fail(reply, m->req, sl_msg_make(SL_CODE_CONTROL_HISTORY_FAILED, "reason", err, NULL), NULL);
    }
}

static void
cancel(const sl_control_ctx_t *ctx, const sl_proto_cancel_request_msg_t *m, sl_proto_message_t *reply)
{
    char id[24];
    snprintf(id, sizeof(id), "%llu", (unsigned long long)m->id);
    /* The log has every request a client can name; its worker cancels it on its own loop. */
    if (ctx->cancel == NULL || !sl_inflight_has(ctx->inflight, m->id) || !ctx->cancel(ctx->cancel_ctx, m->id))
        fail(reply, m->req, sl_msg_make(SL_CODE_CONTROL_UNKNOWN_REQUEST, "id", id, NULL), NULL);
    else
        ok(reply, m->req);
}

void
sl_control_handle(const sl_control_ctx_t *ctx, const sl_proto_message_t *m, sl_proto_message_t *reply)
{
    sl_msg_t err;
    switch (m->kind) {
    case SL_PROTO_MESSAGE_GET_IN_FLIGHT: {
        ok(reply, m->get_in_flight.req);
        sl_proto_in_flight_t *f = sl_xcalloc(1, sizeof(*f));
        f->now_ms = (uint64_t)sl_wall_ms();
        f->requests_len = sl_inflight_view(ctx->inflight, &f->requests);
        reply->ok.in_flight = f;
        break;
    }
    case SL_PROTO_MESSAGE_GET_PROVIDERS:
        ok(reply, m->get_providers.req);
        reply->ok.has_providers = true;
        reply->ok.providers_len = sl_runtime_provider_views(ctx->runtime, &reply->ok.providers);
        reply->ok.store = sl_runtime_store_view(ctx->runtime);
        break;
    case SL_PROTO_MESSAGE_GET_INSTANCES:
        ok(reply, m->get_instances.req);
        reply->ok.has_instances = sl_runtime_cluster_view(ctx->runtime, &reply->ok.cluster,
                                                          &reply->ok.instances, &reply->ok.instances_len);
        break;
    case SL_PROTO_MESSAGE_GET_CONFIG:
        get_config(ctx, m->get_config.req, reply);
        break;
    case SL_PROTO_MESSAGE_PUT_CONFIG:
        put_config(ctx, &m->put_config, reply);
        break;
    case SL_PROTO_MESSAGE_SET_PROVIDER_LIMITS:
        set_limits(ctx, m->set_provider_limits.req, SL_BUCKET_PROVIDER, m->set_provider_limits.provider,
                   m->set_provider_limits.limits, m->set_provider_limits.limits_len, reply);
        break;
    case SL_PROTO_MESSAGE_SET_KEY_LIMITS:
        set_limits(ctx, m->set_key_limits.req, SL_BUCKET_CLIENT, m->set_key_limits.client,
                   m->set_key_limits.limits, m->set_key_limits.limits_len, reply);
        break;
    case SL_PROTO_MESSAGE_PAUSE_PROVIDER:
        if (sl_runtime_pause(ctx->runtime, m->pause_provider.provider, (int64_t)m->pause_provider.until_ms,
                             &err) != 0)
            fail(reply, m->pause_provider.req, err, NULL);
        else
            ok(reply, m->pause_provider.req);
        break;
    case SL_PROTO_MESSAGE_RESUME_PROVIDER:
        if (sl_runtime_resume(ctx->runtime, m->resume_provider.provider, &err) != 0)
            fail(reply, m->resume_provider.req, err, NULL);
        else
            ok(reply, m->resume_provider.req);
        break;
    case SL_PROTO_MESSAGE_CANCEL_REQUEST:
        cancel(ctx, &m->cancel_request, reply);
        break;
    case SL_PROTO_MESSAGE_HISTORY:
        history(ctx, &m->history, reply);
        break;
    default:
        fail(reply, 0,
             sl_msg_make(SL_CODE_CONTROL_NOT_A_REQUEST, "kind", sl_proto_message_kind_slug(m->kind), NULL),
             NULL);
        break;
    }
}

void
sl_control_reply_free(sl_proto_message_t *reply)
{
    /* get_in_flight's events belong to the in-flight log: free the arrays around them only. */
    if (reply->kind == SL_PROTO_MESSAGE_OK && reply->ok.in_flight != NULL) {
        free(reply->ok.in_flight->requests);
        free(reply->ok.in_flight);
        reply->ok.in_flight = NULL;
    }
    sl_proto_message_free(reply);
}
