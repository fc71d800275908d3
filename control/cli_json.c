/*
 * JSON output: events, provider views, history rows, in-flight requests
 * and the cluster's instances as one JSON object per line, made by
 * encoding the value with the
 * protocol's codec and converting the msgpack it writes, so that field
 * names, their order and the enums' slugs are the wire's (the schema's).
 */
#include "cli.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *
object_json(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_STR: {
        json_t *s = json_stringn(o->via.str.ptr, o->via.str.size);
        return s != NULL ? s : json_string("\xef\xbf\xbd");
    }
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; i < o->via.array.size; i++)
            json_array_append_new(a, object_json(&o->via.array.ptr[i]));
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR)
                json_object_setn_new(m, kv->key.via.str.ptr, kv->key.via.str.size, object_json(&kv->val));
        }
        return m;
    }
    default: /* the wire has no floats, bins or exts (the codec refuses them) */
        return json_null();
    }
}

/* The value at path (map keys; "#0" takes an array's first item) inside o, or NULL. */
static const msgpack_object *
object_at(const msgpack_object *o, const char *const *path)
{
    for (; *path != NULL && o != NULL; path++) {
        if (strcmp(*path, "#0") == 0) {
            o = o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size > 0 ? &o->via.array.ptr[0] : NULL;
            continue;
        }
        const msgpack_object *found = NULL;
        if (o->type == MSGPACK_OBJECT_MAP)
            for (uint32_t i = 0; i < o->via.map.size && found == NULL; i++) {
                const msgpack_object *k = &o->via.map.ptr[i].key;
                if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(*path) &&
                    memcmp(k->via.str.ptr, *path, k->via.str.size) == 0)
                    found = &o->via.map.ptr[i].val;
            }
        o = found;
    }
    return o;
}

/* Encodes m with the codec and returns the JSON of the value at path in it (NULL if none or on failure). */
static json_t *
wire_json(const sl_proto_message_t *m, const char *const *path)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    json_t *j = NULL;
    if (sl_proto_encode(m, &sb) == 0) {
        msgpack_unpacked u;
        size_t off = 0;
        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *o = object_at(&u.data, path);
            if (o != NULL)
                j = object_json(o);
        }
        msgpack_unpacked_destroy(&u);
    }
    msgpack_sbuffer_destroy(&sb);
    return j;
}

/* Appends j as one compact JSON line ("null" for NULL) and releases it. */
static void
json_line(json_t *j, sl_strbuf_t *out)
{
    char *s = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : NULL;
    sl_strbuf_appendf(out, "%s\n", s != NULL ? s : "null");
    free(s);
    json_decref(j);
}

static void
wire_json_line(const sl_proto_message_t *m, const char *const *path, sl_strbuf_t *out)
{
    json_line(wire_json(m, path), out);
}

/*
 * The wrappers below borrow the caller's value into a message on the stack
 * (a shallow copy, never freed here): the codec only reads it.
 */
void
sl_cli_event_json(const sl_proto_event_t *ev, sl_strbuf_t *out)
{
    static const char *const path[] = {"event", NULL};
    sl_proto_message_t m;
    memset(&m, 0, sizeof m);
    m.kind = SL_PROTO_MESSAGE_EVENT;
    m.event.event = *ev;
    wire_json_line(&m, path, out);
}

/* The JSON line of the value at path in an ok carrying *ok's fields. */
static void
ok_json_line(const sl_proto_ok_msg_t *ok, const char *const *path, sl_strbuf_t *out)
{
    sl_proto_message_t m;
    memset(&m, 0, sizeof m);
    m.kind = SL_PROTO_MESSAGE_OK;
    m.ok = *ok;
    wire_json_line(&m, path, out);
}

void
sl_cli_provider_json(const sl_proto_provider_view_t *view, sl_strbuf_t *out)
{
    static const char *const path[] = {"providers", "#0", NULL};
    sl_proto_ok_msg_t ok = {
        .has_providers = true, .providers = (sl_proto_provider_view_t *)view, .providers_len = 1};
    ok_json_line(&ok, path, out);
}

void
sl_cli_history_json(const sl_proto_history_row_t *row, sl_strbuf_t *out)
{
    static const char *const path[] = {"rows", "#0", NULL};
    sl_proto_ok_msg_t ok = {.has_rows = true, .rows = (sl_proto_history_row_t *)row, .rows_len = 1};
    ok_json_line(&ok, path, out);
}

void
sl_cli_in_flight_json(const sl_proto_in_flight_request_t *request, sl_strbuf_t *out)
{
    static const char *const path[] = {"in_flight", "requests", "#0", NULL};
    sl_proto_in_flight_t in_flight = {.requests = (sl_proto_in_flight_request_t *)request, .requests_len = 1};
    sl_proto_ok_msg_t ok = {.in_flight = &in_flight};
    ok_json_line(&ok, path, out);
}

void
sl_cli_instances_json(const sl_proto_cluster_view_t *cluster, const sl_proto_instance_view_t *instances,
                      size_t n, sl_strbuf_t *out)
{
    static const char *const cluster_path[] = {"cluster", NULL};
    static const char *const instances_path[] = {"instances", NULL};
    sl_proto_message_t m;
    memset(&m, 0, sizeof m);
    m.kind = SL_PROTO_MESSAGE_OK;
    m.ok.cluster = (sl_proto_cluster_view_t *)cluster;
    m.ok.has_instances = true;
    m.ok.instances = (sl_proto_instance_view_t *)instances;
    m.ok.instances_len = n;
    json_t *j = json_object();
    json_t *c = wire_json(&m, cluster_path), *list = wire_json(&m, instances_path);
    json_object_set_new(j, "cluster", c != NULL ? c : json_null());
    json_object_set_new(j, "instances", list != NULL ? list : json_array());
    json_line(j, out);
}
