/* Anthropic Messages (formats.md): x-api-key, errors typed in error.type, `event: error` in a stream. */
#include "core/dialect.h"
#include "core/stream_class.h"

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

const sl_dialect_def_t sl__dialect_anthropic = {
    .id = SL_DIALECT_ANTHROPIC,
    .slug = "anthropic",
    /* SDK 0.x sends x-api-key, 1.x with an auth token sends Bearer; the native header wins. */
    .key_places = {{SL_KEY_PLACE_HEADER, "x-api-key"}, {SL_KEY_PLACE_BEARER, "authorization"}},
    .n_key_places = 2,
    .key_hint = "x-api-key or Authorization: Bearer",
    .credential_header = "x-api-key",
    .credential_scheme = "",
    .stream = &sl__stream_anthropic,
    .error_types = error_types,
    .stream_content_type = "text/event-stream",
    .keep_alive = ": keep-alive\n\n",
    .estimate_format = "{\"input_tokens\":%lld}",
    .do_render_error = do_render_error,
    .stream_error_prefix = "event: error\ndata: ",
};
