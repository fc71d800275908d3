/* The cluster as the control plane shows it (cluster_view.h). */
#include "cluster_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/xalloc.h"

void
sl_cluster_describe(const sl_cluster_count_t *counts, size_t n, int64_t wall_ms, char *out, size_t size)
{
    json_t *up = json_object();
    for (size_t i = 0; i < n; i++)
        json_object_set_new(up, counts[i].name,
                            json_pack("[II]", (json_int_t)counts[i].in_flight, (json_int_t)counts[i].queued));
    json_t *body = json_pack("{sIsIso}", "pid", (json_int_t)getpid(), "at_ms", (json_int_t)wall_ms, "up", up);
    size_t len = json_dumpb(body, out, size > 0 ? size - 1 : 0, JSON_COMPACT);
    if (len == 0 || len >= size) {
        /* Too many upstreams for one heartbeat: the counts are left out, the instance still shows. */
        snprintf(out, size, "{\"pid\":%ld,\"at_ms\":%lld}", (long)getpid(), (long long)wall_ms);
    } else {
        out[len] = '\0';
    }
    json_decref(body);
}

/* A heartbeat's counts of one upstream; false when it has none. */
static bool
count_of(json_t *body, const char *upstream, uint32_t *in_flight, uint32_t *queued)
{
    json_t *pair = json_object_get(json_object_get(body, "up"), upstream);
    if (!json_is_array(pair) || json_array_size(pair) != 2)
        return false;
    json_int_t a = json_integer_value(json_array_get(pair, 0)),
               b = json_integer_value(json_array_get(pair, 1));
    *in_flight = a > 0 ? (uint32_t)a : 0;
    *queued = b > 0 ? (uint32_t)b : 0;
    return true;
}

void
sl_cluster_others_counts(const sl_cluster_member_t *roster, size_t n, const char *self,
                         sl_cluster_count_t *counts, size_t n_counts)
{
    for (size_t j = 0; j < n_counts; j++)
        counts[j].in_flight = counts[j].queued = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(roster[i].name, self) == 0)
            continue;
        json_t *body = json_loads(roster[i].body, 0, NULL);
        for (size_t j = 0; j < n_counts; j++) {
            uint32_t f, q;
            if (count_of(body, counts[j].name, &f, &q)) {
                counts[j].in_flight += f;
                counts[j].queued += q;
            }
        }
        json_decref(body);
    }
}

size_t
sl_cluster_instance_views(const sl_cluster_member_t *roster, size_t n, const char *self,
                          uint32_t own_in_flight, uint32_t own_queued, int64_t wall_ms,
                          sl_proto_instance_view_t **out)
{
    *out = n > 0 ? sl_xcalloc(n, sizeof(**out)) : NULL;
    for (size_t i = 0; i < n; i++) {
        sl_proto_instance_view_t *v = &(*out)[i];
        v->name = sl_xstrdup(roster[i].name);
        v->self = strcmp(roster[i].name, self) == 0;
        json_t *body = json_loads(roster[i].body, 0, NULL);
        json_int_t at = json_integer_value(json_object_get(body, "at_ms"));
        v->seen_ms = v->self ? (uint64_t)wall_ms : at > 0 ? (uint64_t)at : 0;
        if (v->self) {
            v->in_flight = own_in_flight;
            v->queued = own_queued;
        } else {
            const char *name;
            json_t *pair;
            json_object_foreach(json_object_get(body, "up"), name, pair)
            {
                json_int_t f = json_integer_value(json_array_get(pair, 0)),
                           q = json_integer_value(json_array_get(pair, 1));
                v->in_flight += f > 0 ? (uint32_t)f : 0;
                v->queued += q > 0 ? (uint32_t)q : 0;
            }
        }
        json_decref(body);
    }
    return n;
}
