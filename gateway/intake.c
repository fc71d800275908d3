#include "intake.h"

#include <stdio.h>
#include <string.h>

/* Refuses with status and the message (a NULL-terminated list of name, value pairs after code). */
#define refuse(r, status_, ...) ((r)->status = (status_), (r)->msg = sl_msg_make(__VA_ARGS__, NULL), false)

/* Compares without an early exit, so the time taken does not tell how much of a key matched. */
static bool
equal_in_constant_time(const char *known, const char *given, size_t given_len)
{
    size_t known_len = strlen(known);
    unsigned char diff = known_len != given_len;
    for (size_t i = 0; i < known_len; i++)
        diff |= (unsigned char)(known[i] ^ (given_len > 0 ? given[i % given_len] : 0));
    return diff == 0;
}

static const sl_client_t *
find_client(const sl_config_t *config, const char *key, size_t key_len)
{
    const sl_client_t *found = NULL;
    for (size_t i = 0; i < config->n_clients; i++) {
        if (equal_in_constant_time(config->clients[i].key, key, key_len) && found == NULL)
            found = &config->clients[i];
    }
    return found;
}

static bool
authenticate(const sl_config_t *config, const sl_intake_input_t *in, sl_intake_t *out, sl_intake_refusal_t *r)
{
    if (config->n_clients == 0) {
        /* With no keys configured the gateway is a local tool: this machine only. */
        if (!in->peer_is_loopback)
            return refuse(r, 401, SL_CODE_GW_AUTH_LOCAL_ONLY);
        out->client = NULL;
        return true;
    }
    sl_dialect_t d =
        out->endpoint.dialect < SL_DIALECT_COUNT ? out->endpoint.dialect : SL_DIALECT_OPENAI_CHAT;
    char key[SL_CLIENT_KEY_MAX];
    size_t key_len = 0;
    sl_key_status_t st = SL_KEY_ABSENT;
    /* GET /v1/models carries no dialect: any of the usual places will do. */
    static const sl_dialect_t any_dialect[] = {SL_DIALECT_ANTHROPIC, SL_DIALECT_GEMINI};
    if (out->endpoint.op == SL_OP_LIST_MODELS) {
        for (size_t i = 0; i < 2 && st != SL_KEY_FOUND; i++)
            st = sl_dialect_client_key(any_dialect[i], in->headers, out->endpoint.query,
                                       out->endpoint.query_len, key, &key_len);
    } else {
        st = sl_dialect_client_key(d, in->headers, out->endpoint.query, out->endpoint.query_len, key,
                                   &key_len);
    }
    if (st != SL_KEY_FOUND)
        return refuse(r, 401, SL_CODE_GW_AUTH_MISSING_KEY, "where", sl_dialect_def(d)->key_hint);
    out->client = find_client(config, key, key_len);
    if (out->client == NULL)
        return refuse(r, 401, SL_CODE_GW_AUTH_UNKNOWN_KEY);
    return true;
}

static bool
is_served(const sl_endpoint_t *e, const sl_intake_input_t *in, sl_intake_refusal_t *r)
{
    if (e->op == SL_OP_WEBSOCKET && !in->websocket)
        return refuse(r, 426, SL_CODE_GW_WS_UPGRADE_REQUIRED);
    return true;
}

bool
sl_intake(const sl_config_t *config, const sl_intake_input_t *in, sl_intake_t *out, sl_intake_refusal_t *r)
{
    memset(out, 0, sizeof(*out));
    if (!sl_endpoint_parse(in->method, in->method_len, in->path, in->path_len, &out->endpoint)) {
        out->endpoint.dialect = SL_DIALECT_COUNT;
        char method[32], path[256];
        snprintf(method, sizeof(method), "%.*s", (int)(in->method_len < 31 ? in->method_len : 31),
                 in->method);
        const char *q = memchr(in->path, '?', in->path_len);
        size_t path_len = q != NULL ? (size_t)(q - in->path) : in->path_len;
        snprintf(path, sizeof(path), "%.*s", (int)(path_len < 255 ? path_len : 255), in->path);
        return refuse(r, 404, SL_CODE_GW_NOT_FOUND, "method", method, "path", path);
    }
    if (!is_served(&out->endpoint, in, r) || !authenticate(config, in, out, r))
        return false;
    /* A WebSocket handshake has no body: its turns come as messages (wsturns.h). */
    if (out->endpoint.op == SL_OP_WEBSOCKET)
        return true;
    if (in->body_len > config->max_body_bytes) {
        char size[24], max[24];
        snprintf(size, sizeof(size), "%zu", in->body_len);
        snprintf(max, sizeof(max), "%llu", (unsigned long long)config->max_body_bytes);
        return refuse(r, 413, SL_CODE_GW_REQUEST_TOO_LARGE, "size", size, "max", max);
    }
    if (out->endpoint.op == SL_OP_LIST_MODELS)
        return true;
    out->body = in->body;
    out->body_len = in->body_len;
    if (!sl_jscan(in->body, in->body_len, &out->fields)) {
        char detail[160];
        snprintf(detail, sizeof(detail), "%s at byte %zu", sl_jscan_reason(out->fields.err),
                 out->fields.err_off);
        return refuse(r, 400, SL_CODE_GW_REQUEST_MALFORMED_JSON, "detail", detail);
    }
    if (out->endpoint.model[0] != '\0') {
        memcpy(out->model, out->endpoint.model, sizeof(out->model));
    } else {
        size_t n = 0;
        if (out->fields.model.len == 0 ||
            !sl_jscan_string(in->body, out->fields.model, out->model, sizeof(out->model), &n) || n == 0 ||
            memchr(out->model, '\0', n) != NULL)
            return refuse(r, 400, SL_CODE_GW_REQUEST_NO_MODEL);
    }
    out->stream = out->endpoint.stream_by_path || (out->fields.has_stream && out->fields.stream);
    return true;
}
