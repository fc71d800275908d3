/* Anthropic Messages (formats.md): x-api-key, errors typed in error.type, `event: error` in a stream. */
#include "core/dialect.h"

static const char *const error_types[SL_ERROR_KIND_COUNT] = {
    [SL_ERROR_KIND_BAD_REQUEST] = "invalid_request_error",
    [SL_ERROR_KIND_UNAUTHORIZED] = "authentication_error",
    [SL_ERROR_KIND_FORBIDDEN] = "permission_error",
    [SL_ERROR_KIND_NOT_FOUND] = "not_found_error",
    [SL_ERROR_KIND_TOO_LARGE] = "request_too_large",
    [SL_ERROR_KIND_RATE_LIMITED] = "rate_limit_error",
    [SL_ERROR_KIND_INTERNAL] = "api_error",
    [SL_ERROR_KIND_UNAVAILABLE] = "api_error",
};

static void
do_render_error(const sl_error_parts_t *e, sl_strbuf_t *out, sl_error_head_t *head)
{
    (void)head;
    sl_strbuf_appendf(out,
                      "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"%s\",\"code\":\"%s\"}}",
                      e->type, e->message, e->code);
}

static sl_stream_error_t
do_render_stream_error(const sl_error_parts_t *e, sl_strbuf_t *out)
{
    sl_error_head_t head;
    sl_strbuf_append(out, "event: error\ndata: ", 19);
    do_render_error(e, out, &head);
    sl_strbuf_append(out, "\n\n", 2);
    return (sl_stream_error_t){.form = SL_STREAM_ERROR_READY};
}

const sl_dialect_def_t sl__dialect_anthropic = {
    .id = SL_DIALECT_ANTHROPIC,
    .slug = "anthropic",
    /* SDK 0.x sends x-api-key, 1.x with an auth token sends Bearer; the native header wins. */
    .key_places = {{SL_KEY_PLACE_HEADER, "x-api-key"}, {SL_KEY_PLACE_BEARER, "authorization"}},
    .n_key_places = 2,
    .credential_header = "x-api-key",
    .credential_scheme = "",
    .error_types = error_types,
    .stream_content_type = "text/event-stream",
    .keep_alive = ": keep-alive\n\n",
    .do_render_error = do_render_error,
    .do_render_stream_error = do_render_stream_error,
};
