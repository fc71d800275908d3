/*
 * Gemini (formats.md): the key in x-goog-api-key or ?key=, the model in the
 * path, google.rpc-style errors, and a bare newline as keep-alive because
 * Gemini CLI's bundled SDK stalls on SSE comments.
 */
#include "core/dialect.h"
#include "core/stream_class.h"

static const char *const error_types[SL_ERROR_KIND_COUNT] = {
    [SL_ERROR_KIND_BAD_REQUEST] = "INVALID_ARGUMENT",
    [SL_ERROR_KIND_UNAUTHORIZED] = "UNAUTHENTICATED",
    [SL_ERROR_KIND_FORBIDDEN] = "PERMISSION_DENIED",
    [SL_ERROR_KIND_NOT_FOUND] = "NOT_FOUND",
    [SL_ERROR_KIND_TOO_LARGE] = "INVALID_ARGUMENT",
    [SL_ERROR_KIND_RATE_LIMITED] = "RESOURCE_EXHAUSTED",
    [SL_ERROR_KIND_INTERNAL] = "INTERNAL",
    [SL_ERROR_KIND_UNAVAILABLE] = "UNAVAILABLE",
};

static void
do_render_error(const sl_error_parts_t *e, sl_strbuf_t *out, sl_error_head_t *head)
{
    (void)head;
    sl_strbuf_appendf(out,
                      "{\"error\":{\"code\":%d,\"message\":\"%s\",\"status\":\"%s\",\"details\":[{\"reason\":"
                      "\"%s\"}]}}",
                      e->status, e->message, e->type, e->code);
}

const sl_dialect_def_t sl__dialect_gemini = {
    .id = SL_DIALECT_GEMINI,
    .slug = "gemini",
    .key_places = {{SL_KEY_PLACE_HEADER, "x-goog-api-key"}, {SL_KEY_PLACE_QUERY, "key"}},
    .n_key_places = 2,
    .key_hint = "x-goog-api-key or ?key=",
    .model_marker = "/models/",
    .model_end = ':',
    .credential_header = "x-goog-api-key",
    .credential_scheme = "",
    .stream = &sl__stream_gemini,
    .bare_json_errors = true,
    .error_types = error_types,
    .stream_content_type = "text/event-stream",
    .keep_alive = "\n",
    .estimate_format = "{\"totalTokens\":%lld}",
    .do_render_error = do_render_error,
    .stream_error_prefix = "data: ",
};
