/*
 * Bedrock Converse (formats.md): the model id in the path, Bearer for a
 * Bedrock API key and SigV4 otherwise, errors typed by a header. The AWS SDK
 * matches x-amzn-errortype case-sensitively and wants PascalCase there, while
 * an eventstream exception frame's :exception-type is camelCase: both
 * columns are kept.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dialect.h"
#include "core/sigv4.h"

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

bool
sl_dialect_sign_head(char **head, const sl_upstream_head_t *info, const char *body, size_t body_len,
                     const char *region, const sl_aws_credentials_t *creds, int64_t unix_ms)
{
    const char *h = *head;
    const char *host = strstr(h, "\r\nhost: ");
    const char *end = strstr(h, "\r\n\r\n");
    const char *space = strchr(h, ' ');
    if (host == NULL || end == NULL || space == NULL || host > end)
        return false;
    host += 8;
    const char *host_end = strstr(host, "\r\n");
    char method[16], *target = strndup(h + info->target_off, info->target_len),
                     *host_value = strndup(host, (size_t)(host_end - host));
    snprintf(method, sizeof(method), "%.*s", (int)(space - h), h);
    char *query = strchr(target, '?');
    if (query != NULL)
        *query++ = '\0';
    sl_sigv4_header_t signed_headers[] = {{"host", host_value}};
    sl_sigv4_request_t req = {
        .method = method,
        .path = target,
        .query = query,
        .headers = signed_headers,
        .n_headers = 1,
        .payload = body,
        .payload_len = body_len,
        .region = region,
        .service = SL_SIGV4_BEDROCK_SERVICE,
        .unix_ms = unix_ms,
    };
    sl_sigv4_t sig;
    bool ok = sl_sigv4_sign(&req, creds, &sig);
    if (ok) {
        sl_strbuf_t out = {0};
        size_t before = (size_t)(end - h) + 2;
        sl_strbuf_append(&out, h, before);
        sl_strbuf_appendf(&out, "x-amz-date: %s\r\n", sig.amz_date);
        if (sig.security_token != NULL)
            sl_strbuf_appendf(&out, "x-amz-security-token: %s\r\n", sig.security_token);
        sl_strbuf_appendf(&out, "authorization: %s\r\n\r\n", sig.authorization);
        sl_sigv4_free(&sig);
        free(*head);
        *head = sl_strbuf_finish(&out);
    }
    free(target);
    free(host_value);
    return ok;
}
