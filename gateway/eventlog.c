#define _GNU_SOURCE /* pthread_setname_np */
#include "eventlog.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/xalloc.h"
#include "log.h"

struct sl_eventlog {
    sl_bus_t *bus;
    pthread_t tid;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool pending, stopping;
};

static void
on_wake(void *ctx)
{
    sl_eventlog_t *log = ctx;
    pthread_mutex_lock(&log->lock);
    log->pending = true;
    pthread_cond_signal(&log->wake);
    pthread_mutex_unlock(&log->lock);
}

void
sl_eventlog_write(const sl_proto_event_t *ev)
{
    if (!sl_log_enabled(SL_LOG_DEBUG))
        return;
    const char *kind = sl_proto_event_kind_slug(ev->kind);
    switch (ev->kind) {
    case SL_PROTO_EVENT_REQUEST_STARTED:
        sl_log_debug("event %s id=%llu client=%s model=%s stream=%d path=%s%s%s", kind,
                     (unsigned long long)ev->request_started.id, ev->request_started.client,
                     ev->request_started.model, ev->request_started.stream, ev->request_started.path,
                     ev->request_started.instance != NULL ? " instance=" : "",
                     ev->request_started.instance != NULL ? ev->request_started.instance : "");
        break;
    case SL_PROTO_EVENT_ATTEMPT: {
        const sl_proto_attempt_view_t *v = &ev->attempt.view;
        sl_log_debug("event %s id=%llu provider=%s outcome=%s status=%u retry=%u backoff_ms=%lld%s%s%s%s",
                     kind, (unsigned long long)ev->attempt.id, v->provider, sl_proto_outcome_slug(v->outcome),
                     v->has_status ? v->status : 0, v->has_retry ? v->retry : 0,
                     v->has_backoff_ms ? (long long)v->backoff_ms : -1LL, v->error != NULL ? " error=" : "",
                     v->error != NULL ? v->error->code : "", v->has_reason ? " reason=" : "",
                     v->has_reason ? sl_proto_step_reason_slug(v->reason) : "");
        break;
    }
    case SL_PROTO_EVENT_REQUEST_RETRYING:
        sl_log_debug("event %s id=%llu attempt=%u upstreams=%zu cause=%s last_error=%s", kind,
                     (unsigned long long)ev->request_retrying.id, ev->request_retrying.attempt,
                     ev->request_retrying.upstreams_len,
                     sl_proto_retry_cause_slug(ev->request_retrying.cause),
                     ev->request_retrying.last_error.code);
        break;
    case SL_PROTO_EVENT_REQUEST_QUEUED: {
        const sl_proto_request_queued_t *q = &ev->request_queued;
        sl_log_debug("event %s id=%llu gates=%zu first=%s:%s", kind, (unsigned long long)q->id, q->gates_len,
                     q->gates_len > 0 ? q->gates[0].upstream : "-",
                     q->gates_len > 0 ? sl_proto_serve_skip_slug(q->gates[0].skip) : "-");
        break;
    }
    case SL_PROTO_EVENT_THROTTLE_CHANGED: {
        const sl_proto_throttle_t *t = ev->throttle_changed.throttle;
        sl_log_debug("event %s provider=%s throttle=%s consecutive=%u", kind, ev->throttle_changed.provider,
                     t != NULL ? sl_proto_throttle_kind_slug(t->kind) : "free",
                     t != NULL ? t->consecutive : 0);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_DEQUEUED:
        sl_log_debug("event %s id=%llu", kind, (unsigned long long)ev->request_dequeued.id);
        break;
    case SL_PROTO_EVENT_REQUEST_CANCELLED:
        sl_log_debug("event %s id=%llu", kind, (unsigned long long)ev->request_cancelled.id);
        break;
    case SL_PROTO_EVENT_REQUEST_FINISHED:
        sl_log_debug("event %s id=%llu status=%u bytes=%llu", kind,
                     (unsigned long long)ev->request_finished.id, ev->request_finished.status,
                     (unsigned long long)ev->request_finished.bytes);
        break;
    case SL_PROTO_EVENT_REQUEST_FAILED:
        sl_log_debug("event %s id=%llu code=%s", kind, (unsigned long long)ev->request_failed.id,
                     ev->request_failed.message.code);
        break;
    case SL_PROTO_EVENT_HEALTH_CHANGED:
        sl_log_debug("event %s provider=%s state=%s", kind, ev->health_changed.provider,
                     sl_proto_health_state_slug(ev->health_changed.state));
        break;
    case SL_PROTO_EVENT_ROWS_DROPPED:
        sl_log_debug("event %s count=%llu", kind, (unsigned long long)ev->rows_dropped.count);
        break;
    case SL_PROTO_EVENT_LIMITS_CHANGED:
        sl_log_debug("event %s target=%s name=%s limits=%zu", kind,
                     sl_proto_limit_target_slug(ev->limits_changed.target), ev->limits_changed.name,
                     ev->limits_changed.limits_len);
        break;
    case SL_PROTO_EVENT_CLUSTER_CHANGED:
        sl_log_debug("event %s state=%s instances=%u%s%s", kind,
                     sl_proto_cluster_state_slug(ev->cluster_changed.state), ev->cluster_changed.instances,
                     ev->cluster_changed.reason != NULL ? " reason=" : "",
                     ev->cluster_changed.reason != NULL ? ev->cluster_changed.reason->code : "");
        break;
    default:
        sl_log_debug("event %s", kind);
        break;
    }
}

static void
log_event(void *ctx, sl_proto_event_t *ev)
{
    (void)ctx;
    sl_eventlog_write(ev);
    sl_proto_event_free(ev);
}

static void *
eventlog_main(void *arg)
{
    sl_eventlog_t *log = arg;
    pthread_setname_np(pthread_self(), "sl-eventlog");
    for (;;) {
        pthread_mutex_lock(&log->lock);
        while (!log->pending && !log->stopping)
            pthread_cond_wait(&log->wake, &log->lock);
        bool stopping = log->stopping;
        log->pending = false;
        pthread_mutex_unlock(&log->lock);
        uint64_t dropped = 0;
        sl_bus_drain(log->bus, log_event, log, &dropped);
        if (dropped > 0)
            sl_log_warn("event log: %llu event(s) dropped", (unsigned long long)dropped);
        if (stopping)
            return NULL;
    }
}

sl_eventlog_t *
sl_eventlog_start(sl_bus_t *bus)
{
    sl_eventlog_t *log = sl_xcalloc(1, sizeof(*log));
    log->bus = bus;
    pthread_mutex_init(&log->lock, NULL);
    pthread_cond_init(&log->wake, NULL);
    sl_bus_set_wake(bus, on_wake, log);
    sl_bus_set_active(bus, true);
    pthread_create(&log->tid, NULL, eventlog_main, log);
    return log;
}

void
sl_eventlog_stop(sl_eventlog_t *log)
{
    pthread_mutex_lock(&log->lock);
    log->stopping = true;
    pthread_cond_signal(&log->wake);
    pthread_mutex_unlock(&log->lock);
    pthread_join(log->tid, NULL);
    sl_bus_set_wake(log->bus, NULL, NULL);
    sl_bus_set_active(log->bus, false);
    pthread_cond_destroy(&log->wake);
    pthread_mutex_destroy(&log->lock);
    free(log);
}
