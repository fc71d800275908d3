/*
 * The wire helpers of each dialect (formats.md): where a client's gateway key
 * is, how an upstream request head is written, and the errors and keep-alive
 * bytes the gateway itself writes. Each dialect is one const sl_dialect_def_t
 * in its own file (dialect_anthropic.c, dialect_openai.c, dialect_gemini.c,
 * dialect_bedrock.c); dialect.c holds the table and everything the dialects
 * share, driven by the data in their rows. All of it is pure: no IO, no
 * clock, no state.
 */
#ifndef SL_DIALECT_H
#define SL_DIALECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"
#include "core/xalloc.h"

/* The header carrying the message code of every error the gateway writes. */
#define SL_ERROR_CODE_HEADER "x-sluice-error"
/* Every gateway-written message starts with this, so users can tell it from a provider's words. */
#define SL_MESSAGE_PREFIX "sluice: "

/* ---- client headers ---------------------------------------------------------------------------- */

/* One header as received: not NUL-terminated, names in any case. */
typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} sl_header_t;

/*
 * The client's headers, reached through one callback so that the shell can
 * hand over h2o's header vector without copying it. at() fills *out with the
 * i-th header (0-based, in the order received, repeated names kept) and
 * returns true, or returns false when i is past the last one.
 */
typedef struct {
    bool (*at)(const void *ctx, size_t i, sl_header_t *out);
    const void *ctx;
} sl_headers_t;

/* Headers held in a plain array (tests, and callers that already have one). */
typedef struct {
    const sl_header_t *items;
    size_t n;
} sl_header_array_t;

/* A view of an array; the array must outlive the view. */
sl_headers_t sl_headers_of_array(const sl_header_array_t *array);

/*
 * Finds the first header named name (ASCII case-insensitive). Returns true and
 * points *value / *value_len into the header source, or returns false and
 * leaves them untouched.
 */
bool sl_headers_find(const sl_headers_t *headers, const char *name, const char **value, size_t *value_len);

/* ---- the client's gateway key ------------------------------------------------------------------ */

/* Keys longer than this are refused as malformed (no configured key is near it). */
#define SL_CLIENT_KEY_MAX 1024

typedef enum {
    SL_KEY_FOUND,
    SL_KEY_ABSENT,    /* none of the dialect's places holds a key */
    SL_KEY_MALFORMED, /* a place holds something that is not a key: not Bearer, bad %-escape, too long */
} sl_key_status_t;

/*
 * The gateway key a client sent in dialect d, looked for in the dialect's
 * places in order (Anthropic: x-api-key, then Authorization: Bearer; OpenAI
 * and Bedrock: Authorization: Bearer; Gemini: x-goog-api-key, then the `key`
 * query parameter). An empty place counts as absent and the next is tried;
 * the first non-empty place decides. query is the part after '?' (NULL or
 * empty when there is none). On SL_KEY_FOUND the key is copied, %-decoded
 * when it came from the query, into out (NUL-terminated) and its length
 * stored in *out_len; otherwise out and *out_len are left untouched.
 */
sl_key_status_t sl_dialect_client_key(sl_dialect_t d, const sl_headers_t *headers, const char *query,
                                      size_t query_len, char out[SL_CLIENT_KEY_MAX], size_t *out_len);

/*
 * Appends target (a path with an optional query) to out without its `key`
 * query parameters (by %-decoded name, so `%6Bey=` goes too), dropping the
 * '?' when nothing is left: the form in which a path may be logged, stored or
 * put in an event.
 */
void sl_path_strip_key(const char *target, size_t len, sl_strbuf_t *out);

/* Whether target has a query, the only place a `key` parameter can be: one without needs no stripping. */
bool sl_path_has_query(const char *target, size_t len);

/* ---- the upstream request ---------------------------------------------------------------------- */

/* A provider's base_url taken apart; the views point into the URL string. */
typedef struct {
    bool is_tls;
    const char *host; /* an IPv6 literal without its brackets */
    size_t host_len;
    uint16_t port;           /* 443 / 80 when the URL gives none */
    bool port_is_default;    /* whether Host may leave the port out */
    const char *path_prefix; /* "" or "/relay/v1": no trailing slash */
    size_t path_prefix_len;
} sl_base_url_t;

/*
 * Parses an http:// or https:// base URL: host (name, IPv4, or [IPv6]), an
 * optional port (1..65535; an empty one means the default), an optional path
 * prefix whose trailing slashes are dropped. No user info, query or fragment.
 * Returns 0 and fills *out, or -1 with *out untouched.
 */
int sl_base_url_parse(const char *url, sl_base_url_t *out);

/* What the client asked for, as the upstream head needs it. */
typedef struct {
    const char *method; /* "POST", "GET" */
    /*
     * The client's path and query as received ("/v1/messages?beta=true").
     * The dialect maps it onto the provider's base URL: OpenAI drops the
     * client's "/v1" (the base URL carries it), Gemini and Bedrock put the
     * upstream model into the path and Gemini drops `key` from the query.
     */
    const char *target;
    size_t target_len;
    /* The upstream model name (after model_map); NULL leaves the client's in the path. */
    const char *model;
    const sl_headers_t *headers; /* the client's */
    uint64_t body_len;           /* content-length; GET and HEAD send none */
} sl_upstream_request_t;

typedef enum {
    SL_UPSTREAM_AUTH_NONE,   /* the provider has no key: nothing is sent */
    SL_UPSTREAM_AUTH_HEADER, /* the credential header is in the head (the key, or providers[].headers) */
    /*
     * Bedrock without a key: the head is complete except for the SigV4
     * headers, which the signer inserts before the final blank line.
     */
    SL_UPSTREAM_AUTH_SIGV4_PENDING,
} sl_upstream_auth_t;

typedef enum {
    SL_HEAD_OK,
    SL_HEAD_BAD_BASE_URL, /* sl_base_url_parse refuses the provider's base_url */
    SL_HEAD_BAD_TARGET,   /* a byte a request line cannot carry, or no model segment to rewrite */
    SL_HEAD_BAD_KEY,      /* the provider's key holds a byte a header cannot carry */
} sl_head_status_t;

typedef struct {
    sl_upstream_auth_t auth;
    size_t target_off, target_len; /* the request target inside the head (what SigV4 signs) */
} sl_upstream_head_t;

/*
 * The lines of a provider's request head that no request changes, built
 * once per config: host (with the port when it is not the scheme's
 * default), the provider's credential, accept-encoding: identity, then
 * p->headers, which replace the credential header but never the gateway's
 * own framing headers. status says whether any request can be sent
 * (SL_HEAD_BAD_BASE_URL, SL_HEAD_BAD_KEY); base views p->base_url, so the
 * head lives no longer than p.
 */
typedef struct {
    const sl_provider_t *provider;
    sl_head_status_t status;
    sl_base_url_t base;
    sl_upstream_auth_t auth;
    /*
     * Owned (sl_provider_head_free): host, then the credential and
     * accept-encoding from credential_at, then p->headers from
     * provider_headers_at; the request's own lines go between them.
     */
    char *lines;
    size_t credential_at, provider_headers_at, lines_len;
} sl_provider_head_t;

sl_head_status_t sl_dialect_provider_head(const sl_provider_t *p, sl_provider_head_t *out);
void sl_provider_head_free(sl_provider_head_t *head);

/*
 * Appends the HTTP/1.1 request head for req to the head's provider (in its
 * protocol) to out, ending with the blank line: request line (base path
 * prefix + dialect path), host, content-length, the credential,
 * accept-encoding, the client's pass-through headers (anthropic-version,
 * anthropic-beta, openai-beta, x-goog-api-client, accept, content-type,
 * user-agent; values holding CR, LF or NUL are dropped) unless the provider
 * sets the same header, then the provider's headers. Nothing else from the
 * client is sent. On SL_HEAD_OK fills *info; on any other status out and
 * *info are untouched.
 */
sl_head_status_t sl_dialect_upstream_head(const sl_provider_head_t *head, const sl_upstream_request_t *req,
                                          sl_strbuf_t *out, sl_upstream_head_t *info);

/* ---- errors the gateway writes, keep-alives ---------------------------------------------------- */

/* The head fields an error answer needs besides its status and x-sluice-error. */
typedef struct {
    const char *content_type; /* static */
    const char *type_header;  /* a header naming the error type (Bedrock "x-amzn-errortype"), or NULL */
    const char *type_value;   /* its value, static; NULL when type_header is */
} sl_error_head_t;

/*
 * Appends the body of a non-streamed error answer in dialect d to out and
 * fills *head. status picks the dialect's error type (formats.md, "Errors the
 * gateway writes"; another 4xx is typed as 400, anything else as 500; Gemini's
 * numeric code is status itself). code is the gw.* slug; message is plain
 * text, prefixed with SL_MESSAGE_PREFIX unless it already starts with it.
 * Both are JSON-escaped; invalid UTF-8 becomes U+FFFD.
 */
void sl_dialect_render_error(sl_dialect_t d, int status, const char *code, const char *message,
                             sl_strbuf_t *out, sl_error_head_t *head);

typedef enum {
    SL_STREAM_ERROR_READY, /* out holds the bytes to write into the stream as they are */
    /*
     * Bedrock: out holds the JSON payload of an AWS eventstream exception
     * frame whose :exception-type is exception_type; this module has no frame
     * encoder, so the bytes must not be written as they are.
     */
    SL_STREAM_ERROR_NEEDS_EXCEPTION_FRAME,
} sl_stream_error_form_t;

typedef struct {
    sl_stream_error_form_t form;
    const char *exception_type; /* static camelCase type; NULL with SL_STREAM_ERROR_READY */
} sl_stream_error_t;

/*
 * Appends the error that ends an already started stream in dialect d to out:
 * Anthropic `event: error`, Responses `event: response.failed`, Chat and
 * Gemini `data: {"error":…}`, each a whole SSE event; Bedrock an exception
 * frame's payload (see sl_stream_error_form_t). Arguments as for
 * sl_dialect_render_error.
 */
sl_stream_error_t sl_dialect_render_stream_error(sl_dialect_t d, int status, const char *code,
                                                 const char *message, sl_strbuf_t *out);

/* The content type of a streamed answer in dialect d (the 15 s keep-alive head uses it). Static. */
const char *sl_dialect_stream_content_type(sl_dialect_t d);

/*
 * The bytes that keep a held stream alive (behaviour.md §4): an SSE comment,
 * Gemini a bare newline (Gemini CLI stalls on comments), Bedrock none
 * (*len == 0: only the head is sent). Static.
 */
const char *sl_dialect_keep_alive(sl_dialect_t d, size_t *len);

/* ---- for dialect implementations --------------------------------------------------------------- */

/* The statuses of formats.md's table; each dialect names an error type per row. */
typedef enum {
    SL_ERROR_KIND_BAD_REQUEST,  /* 400, and other 4xx */
    SL_ERROR_KIND_UNAUTHORIZED, /* 401 */
    SL_ERROR_KIND_FORBIDDEN,    /* 403 */
    SL_ERROR_KIND_NOT_FOUND,    /* 404 */
    SL_ERROR_KIND_TOO_LARGE,    /* 413 */
    SL_ERROR_KIND_RATE_LIMITED, /* 429 */
    SL_ERROR_KIND_INTERNAL,     /* 500, and other statuses */
    SL_ERROR_KIND_UNAVAILABLE,  /* 502, 503, 504 */
    SL_ERROR_KIND_COUNT
} sl_error_kind_t;

typedef enum {
    SL_KEY_PLACE_HEADER, /* the header's whole value */
    SL_KEY_PLACE_BEARER, /* the token of an `Authorization: Bearer` header */
    SL_KEY_PLACE_QUERY,  /* a query parameter; never sent upstream */
} sl_key_place_kind_t;

typedef struct {
    sl_key_place_kind_t kind;
    const char *name; /* lowercase header or parameter name */
} sl_key_place_t;

#define SL_DIALECT_MAX_KEY_PLACES 2

/* An error ready to render: type chosen, code and message JSON-escaped (no quotes). */
typedef struct {
    int status;
    sl_error_kind_t kind;
    const char *type; /* the dialect's error_types[kind] */
    const char *code;
    const char *message;
} sl_error_parts_t;

struct sl_stream_class_vtable;

/*
 * One dialect: data rows first, functions only where the shapes differ.
 * Everything the gateway does differently per dialect is here: the request
 * path asks the row, never the dialect's name.
 */
typedef struct {
    sl_dialect_t id;
    const char *slug; /* as written in the config's `protocol` */
    sl_key_place_t key_places[SL_DIALECT_MAX_KEY_PLACES];
    size_t n_key_places;
    const char *key_hint; /* where a client sends its key, for the gateway's message ("x-api-key or …") */
    /* Upstream path: client_prefix is dropped from the client's path (the base URL carries it). */
    const char *client_prefix;
    /* The model segment follows model_marker and runs to model_end; NULL when the model is in the body. */
    const char *model_marker;
    char model_end;
    /* Upstream credential: credential_header: credential_scheme KEY. */
    const char *credential_header;
    const char *credential_scheme;
    bool sigv4_without_key;
    /* Its streams. */
    const struct sl_stream_class_vtable
        *stream;           /* classifies SSE events; NULL: eventstream frames (Bedrock) */
    bool bare_json_errors; /* an error may come as bare JSON after earlier events (Gemini): framed as an event
                            */
    bool names_response_id; /* its answers carry an id later turns name (Responses' previous_response_id) */
    bool asks_for_usage;    /* a stream reports usage only when asked (Chat's stream_options.include_usage) */
    /* Answers. */
    const char *const *error_types; /* SL_ERROR_KIND_COUNT names, by kind */
    const char *stream_content_type;
    const char *keep_alive;
    const char *estimate_format; /* a count-tokens estimate's body, with one %lld for the tokens */
    void (*do_render_error)(const sl_error_parts_t *e, sl_strbuf_t *out, sl_error_head_t *head);
    /* An error inside a stream: stream_error_prefix + the whole error + a blank line, unless this is set. */
    const char *stream_error_prefix;
    sl_stream_error_t (*do_render_stream_error)(const sl_error_parts_t *e, sl_strbuf_t *out);
} sl_dialect_def_t;

/* The row of dialect d; d must be below SL_DIALECT_COUNT. */
const sl_dialect_def_t *sl_dialect_def(sl_dialect_t d);

/* "anthropic", "openai-chat", … as written in the config; "unknown" for d past the last dialect. Static. */
const char *sl_dialect_slug(sl_dialect_t d);

extern const sl_dialect_def_t sl__dialect_anthropic, sl__dialect_openai_chat, sl__dialect_openai_responses,
    sl__dialect_gemini, sl__dialect_bedrock;

#endif
