/*
 * OpenAI Chat Completions and Responses (formats.md): one error body, two
 * in-stream forms. The base URL carries "/v1" (as the SDK's does), so the
 * client's "/v1" is dropped from the path.
 */
#include "core/dialect.h"
#include "core/stream_class.h"

static const char *const error_types[SL_ERROR_KIND_COUNT] = {
    [SL_ERROR_KIND_BAD_REQUEST] = "invalid_request_error",
    [SL_ERROR_KIND_UNAUTHORIZED] = "authentication_error",
    [SL_ERROR_KIND_FORBIDDEN] = "permission_error",
    [SL_ERROR_KIND_NOT_FOUND] = "not_found_error",
    [SL_ERROR_KIND_TOO_LARGE] = "invalid_request_error",
    [SL_ERROR_KIND_RATE_LIMITED] = "rate_limit_error",
    [SL_ERROR_KIND_INTERNAL] = "server_error",
    [SL_ERROR_KIND_UNAVAILABLE] = "server_error",
};

static void
do_render_error(const sl_error_parts_t *e, sl_strbuf_t *out, sl_error_head_t *head)
{
    (void)head;
    sl_strbuf_appendf(out, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
                      e->message, e->type, e->code);
}

static sl_stream_error_t
do_render_responses_stream_error(const sl_error_parts_t *e, sl_strbuf_t *out)
{
    sl_strbuf_appendf(out,
                      "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":"
                      "\"failed\",\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}}\n\n",
                      e->code, e->message);
    return (sl_stream_error_t){.form = SL_STREAM_ERROR_READY};
}

/* Chat Completions and Responses share OpenAI's wire: its key, its paths, its errors, its keep-alive. */
#define OPENAI_WIRE                                                                                          \
    .key_places = {{SL_KEY_PLACE_BEARER, "authorization"}}, .n_key_places = 1,                               \
    .key_hint = "Authorization: Bearer", .client_prefix = "/v1", .credential_header = "authorization",       \
    .credential_scheme = "Bearer ", .error_types = error_types, .stream_content_type = "text/event-stream",  \
    .keep_alive = ": keep-alive\n\n", .do_render_error = do_render_error

const sl_dialect_def_t sl__dialect_openai_chat = {
    OPENAI_WIRE,
    .id = SL_DIALECT_OPENAI_CHAT,
    .slug = "openai-chat",
    .stream = &sl__stream_openai_chat,
    .asks_for_usage = true,
    .estimate_format = "{\"input_tokens\":%lld}",
    .stream_error_prefix = "data: ",
};

const sl_dialect_def_t sl__dialect_openai_responses = {
    OPENAI_WIRE,
    .id = SL_DIALECT_OPENAI_RESPONSES,
    .slug = "openai-responses",
    .stream = &sl__stream_openai_responses,
    .names_response_id = true,
    .estimate_format = "{\"object\":\"response.input_tokens\",\"input_tokens\":%lld}",
    .do_render_stream_error = do_render_responses_stream_error,
};
