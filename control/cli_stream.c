/*
 * The event stream of `sluicectl events`: the snapshot's replay, then each
 * event as it arrives, gaps in seq noted on stderr, and the resync after
 * events_dropped that skips what was already printed (each request's
 * printed events are remembered by count until it ends). Stops after
 * --count lines.
 */
#include "cli_internal.h"

#include <stdlib.h>
#include <string.h>

static sl_cli_stream_shown_t *
shown_find(sl_cli_stream_t *s, uint64_t id)
{
    for (size_t i = 0; i < s->shown_len; i++)
        if (s->shown[i].id == id)
            return &s->shown[i];
    return NULL;
}

static void
shown_remove(sl_cli_stream_t *s, uint64_t id)
{
    sl_cli_stream_shown_t *e = shown_find(s, id);
    if (e != NULL)
        *e = s->shown[--s->shown_len];
}

static void
shown_note(sl_cli_stream_t *s, const sl_proto_event_t *ev)
{
    uint64_t id;
    if (!sl__cli_event_id(ev, &id))
        return;
    if (ev->kind == SL_PROTO_EVENT_REQUEST_FINISHED || ev->kind == SL_PROTO_EVENT_REQUEST_FAILED ||
        ev->kind == SL_PROTO_EVENT_REQUEST_CANCELLED) {
        shown_remove(s, id);
        return;
    }
    sl_cli_stream_shown_t *e = shown_find(s, id);
    if (e == NULL) {
        if (s->shown_len == s->shown_cap) {
            s->shown_cap = s->shown_cap ? s->shown_cap * 2 : 16;
            s->shown = sl_xrealloc(s->shown, s->shown_cap * sizeof *s->shown);
        }
        e = &s->shown[s->shown_len++];
        e->id = id;
        e->events = 0;
    }
    e->events++;
}

static void
print_event(sl_cli_stream_t *s, const sl_proto_event_t *ev, sl_strbuf_t *out)
{
    if (sl_cli_stream_done(s))
        return;
    if (s->json)
        sl_cli_event_json(ev, out);
    else
        sl_cli_event_line(ev, out);
    s->printed++;
    shown_note(s, ev);
}

bool
sl_cli_stream_done(const sl_cli_stream_t *s)
{
    return s->max_events != 0 && s->printed >= s->max_events;
}

void
sl_cli_stream_snapshot(sl_cli_stream_t *s, const sl_proto_snapshot_msg_t *snap, sl_strbuf_t *out,
                       sl_strbuf_t *err)
{
    (void)err;
    /* Requests that ended while events were being dropped: their end is lost, forget them. */
    for (size_t i = 0; i < s->shown_len;) {
        bool live = false;
        for (size_t k = 0; k < snap->in_flight_len && !live; k++)
            live = snap->in_flight[k].id == s->shown[i].id;
        if (live)
            i++;
        else
            s->shown[i] = s->shown[--s->shown_len];
    }
    if (s->topic_providers)
        for (size_t i = 0; i < snap->providers_len; i++) {
            sl_proto_event_t ev;
            memset(&ev, 0, sizeof ev);
            ev.kind = SL_PROTO_EVENT_PROVIDER_CHANGED;
            ev.provider_changed.at_ms = snap->now_ms;
            ev.provider_changed.view = snap->providers[i]; /* borrowed, not freed */
            print_event(s, &ev, out);
        }
    for (size_t i = 0; i < snap->in_flight_len; i++) {
        const sl_proto_in_flight_request_t *r = &snap->in_flight[i];
        sl_cli_stream_shown_t *e = shown_find(s, r->id);
        size_t skip = e != NULL ? e->events : 0;
        for (size_t k = skip; k < r->events_len; k++)
            print_event(s, &r->events[k], out);
    }
    s->synced = true;
    s->has_seq = true;
    s->seq = snap->seq;
}

void
sl_cli_stream_event(sl_cli_stream_t *s, const sl_proto_event_msg_t *ev, sl_strbuf_t *out, sl_strbuf_t *err)
{
    if (!s->synced)
        return; /* before the first snapshot, or while resyncing: the next snapshot reflects it */
    if (s->has_seq && ev->seq == s->seq + 2)
        sl_strbuf_appendf(err, "sluicectl: event %llu is missing from the stream\n",
                          (unsigned long long)(s->seq + 1));
    else if (s->has_seq && ev->seq > s->seq + 2)
        sl_strbuf_appendf(err, "sluicectl: events %llu to %llu are missing from the stream\n",
                          (unsigned long long)(s->seq + 1), (unsigned long long)(ev->seq - 1));
    s->has_seq = true;
    s->seq = ev->seq;
    print_event(s, &ev->event, out);
}

void
sl_cli_stream_dropped(sl_cli_stream_t *s, uint64_t count, sl_strbuf_t *err)
{
    sl_strbuf_appendf(err, "sluicectl: the server dropped %llu events (this client fell behind); resyncing\n",
                      (unsigned long long)count);
    s->synced = false;
}

void
sl_cli_stream_free(sl_cli_stream_t *s)
{
    free(s->shown);
    memset(s, 0, sizeof *s);
}
