/*
 * Bedrock Converse (formats.md): the model id in the path, Bearer for a
 * Bedrock API key and SigV4 otherwise (the shell signs: gateway/sigv4.h),
 * errors typed by a header. The AWS SDK matches x-amzn-errortype
 * case-sensitively and wants PascalCase there, while an eventstream
 * exception frame's :exception-type is camelCase: both columns are kept.
 */
#include "core/dialect.h"

static const char *const camel_types[SL_ERROR_KIND_COUNT] = {
    [SL_ERROR_KIND_BAD_REQUEST] = "validationException",
    [SL_ERROR_KIND_UNAUTHORIZED] = "accessDeniedException",
    [SL_ERROR_KIND_FORBIDDEN] = "accessDeniedException",
    [SL_ERROR_KIND_NOT_FOUND] = "resourceNotFoundException",
    [SL_ERROR_KIND_TOO_LARGE] = "validationException",
    [SL_ERROR_KIND_RATE_LIMITED] = "throttlingException",
    [SL_ERROR_KIND_INTERNAL] = "internalServerException",
    [SL_ERROR_KIND_UNAVAILABLE] = "serviceUnavailableException",
};

static const char *const pascal_types[SL_ERROR_KIND_COUNT] = {
    [SL_ERROR_KIND_BAD_REQUEST] = "ValidationException",
    [SL_ERROR_KIND_UNAUTHORIZED] = "AccessDeniedException",
    [SL_ERROR_KIND_FORBIDDEN] = "AccessDeniedException",
    [SL_ERROR_KIND_NOT_FOUND] = "ResourceNotFoundException",
    [SL_ERROR_KIND_TOO_LARGE] = "ValidationException",
    [SL_ERROR_KIND_RATE_LIMITED] = "ThrottlingException",
    [SL_ERROR_KIND_INTERNAL] = "InternalServerException",
    [SL_ERROR_KIND_UNAVAILABLE] = "ServiceUnavailableException",
};

static void
do_render_error(const sl_error_parts_t *e, sl_strbuf_t *out, sl_error_head_t *head)
{
    sl_strbuf_appendf(out, "{\"message\":\"%s\"}", e->message);
    head->type_header = "x-amzn-errortype";
    head->type_value = pascal_types[e->kind];
}

static sl_stream_error_t
do_render_stream_error(const sl_error_parts_t *e, sl_strbuf_t *out)
{
    sl_strbuf_appendf(out, "{\"message\":\"%s\"}", e->message);
    return (sl_stream_error_t){.form = SL_STREAM_ERROR_NEEDS_EXCEPTION_FRAME, .exception_type = e->type};
}

const sl_dialect_def_t sl__dialect_bedrock = {
    .id = SL_DIALECT_BEDROCK,
    .slug = "bedrock",
    .key_places = {{SL_KEY_PLACE_BEARER, "authorization"}},
    .key_hint = "Authorization: Bearer",
    .n_key_places = 1,
    .model_marker = "/model/",
    .model_end = '/',
    .credential_header = "authorization",
    .credential_scheme = "Bearer ",
    .sigv4_without_key = true,
    .error_types = camel_types,
    .estimate_format = "{\"inputTokens\":%lld}",
    .stream_content_type = "application/vnd.amazon.eventstream",
    .keep_alive = "",
    .do_render_error = do_render_error,
    .do_render_stream_error = do_render_stream_error,
};
