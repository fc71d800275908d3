/*
 * What the dialects share, driven by the data in their rows: key lookup,
 * base URL parsing, the upstream head, error rendering up to the point where
 * the shapes differ, and the dispatch table.
 */
#include "core/dialect.h"
#include "core/text.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const sl_dialect_def_t *const dialect_defs[SL_DIALECT_COUNT] = {
    [SL_DIALECT_ANTHROPIC] = &sl__dialect_anthropic,
    [SL_DIALECT_OPENAI_CHAT] = &sl__dialect_openai_chat,
    [SL_DIALECT_OPENAI_RESPONSES] = &sl__dialect_openai_responses,
    [SL_DIALECT_GEMINI] = &sl__dialect_gemini,
    [SL_DIALECT_BEDROCK] = &sl__dialect_bedrock,
};

const sl_dialect_def_t *
sl_dialect_def(sl_dialect_t d)
{
    assert(d < SL_DIALECT_COUNT && dialect_defs[d]->id == d);
    return dialect_defs[d];
}

const char *
sl_dialect_slug(sl_dialect_t d)
{
    return d < SL_DIALECT_COUNT ? dialect_defs[d]->slug : "unknown";
}

/* ---- small byte helpers ------------------------------------------------------------------------ */

static char
lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Whether s[0..n) equals the lowercase literal want, ignoring ASCII case. */
static bool
name_is(const char *s, size_t n, const char *want)
{
    size_t i = 0;
    for (; i < n && want[i] != '\0'; i++) {
        if (lower(s[i]) != want[i])
            return false;
    }
    return i == n && want[i] == '\0';
}

static bool
is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static void
trim_ows(const char **s, size_t *n)
{
    while (*n > 0 && is_ows(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && is_ows((*s)[*n - 1]))
        (*n)--;
}

static const char *
find_bytes(const char *hay, size_t hay_len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; n <= hay_len && i <= hay_len - n; i++) {
        if (memcmp(hay + i, needle, n) == 0)
            return hay + i;
    }
    return NULL;
}

/*
 * Decodes the %-escape or plain byte at s[*i] (i < n) and advances *i.
 * Returns the byte, or -1 for a broken escape.
 */
static int
decode_byte(const char *s, size_t n, size_t *i)
{
    if (s[*i] != '%')
        return (unsigned char)s[(*i)++];
    if (n - *i < 3)
        return -1;
    int hi = sl_hex_digit(s[*i + 1]), lo = sl_hex_digit(s[*i + 2]);
    if (hi < 0 || lo < 0)
        return -1;
    *i += 3;
    return hi * 16 + lo;
}

/* Whether the %-decoded s[0..n) equals the literal want. */
static bool
decoded_is(const char *s, size_t n, const char *want)
{
    size_t i = 0, w = 0;
    while (i < n) {
        int c = decode_byte(s, n, &i);
        if (c < 0 || want[w] == '\0' || (char)c != want[w])
            return false;
        w++;
    }
    return want[w] == '\0';
}

/* ---- client headers ---------------------------------------------------------------------------- */

static bool
array_at(const void *ctx, size_t i, sl_header_t *out)
{
    const sl_header_array_t *a = ctx;
    if (i >= a->n)
        return false;
    *out = a->items[i];
    return true;
}

sl_headers_t
sl_headers_of_array(const sl_header_array_t *array)
{
    return (sl_headers_t){.at = array_at, .ctx = array};
}

bool
sl_headers_find(const sl_headers_t *headers, const char *name, const char **value, size_t *value_len)
{
    sl_header_t h;
    for (size_t i = 0; headers->at(headers->ctx, i, &h); i++) {
        if (h.name_len == strlen(name) && strncasecmp(h.name, name, h.name_len) == 0) {
            *value = h.value;
            *value_len = h.value_len;
            return true;
        }
    }
    return false;
}

/* ---- the client's gateway key ------------------------------------------------------------------ */

/* Keys are visible ASCII: anything else is a client mistake, not a key to look up. */
static sl_key_status_t
store_key(const char *s, size_t n, char out[SL_CLIENT_KEY_MAX], size_t *out_len)
{
    if (n >= SL_CLIENT_KEY_MAX)
        return SL_KEY_MALFORMED;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return SL_KEY_MALFORMED;
    }
    memcpy(out, s, n);
    out[n] = '\0';
    *out_len = n;
    return SL_KEY_FOUND;
}

typedef struct {
    const sl_headers_t *headers;
    const char *query;
    size_t query_len;
} key_input_t;

static sl_key_status_t
key_from_header(const key_input_t *in, const char *name, char out[SL_CLIENT_KEY_MAX], size_t *out_len)
{
    const char *v;
    size_t n;
    if (!sl_headers_find(in->headers, name, &v, &n))
        return SL_KEY_ABSENT;
    trim_ows(&v, &n);
    return n == 0 ? SL_KEY_ABSENT : store_key(v, n, out, out_len);
}

static sl_key_status_t
key_from_bearer(const key_input_t *in, const char *name, char out[SL_CLIENT_KEY_MAX], size_t *out_len)
{
    static const char scheme[] = "bearer";
    const size_t scheme_len = sizeof(scheme) - 1;
    const char *v;
    size_t n;
    if (!sl_headers_find(in->headers, name, &v, &n))
        return SL_KEY_ABSENT;
    trim_ows(&v, &n);
    if (n == 0)
        return SL_KEY_ABSENT;
    /* RFC 9110 §11.1: the scheme is case-insensitive and followed by at least one space. */
    if (n <= scheme_len || !name_is(v, scheme_len, scheme) || !is_ows(v[scheme_len]))
        return SL_KEY_MALFORMED;
    v += scheme_len;
    n -= scheme_len;
    trim_ows(&v, &n);
    return n == 0 ? SL_KEY_MALFORMED : store_key(v, n, out, out_len);
}

/* Calls on_param for each non-empty `name[=value]` of a query; stops when it returns false. */
static void
each_param(const char *q, size_t n, bool (*on_param)(void *arg, const char *p, size_t len, size_t name_len),
           void *arg)
{
    size_t i = 0;
    while (i < n) {
        size_t end = i;
        while (end < n && q[end] != '&')
            end++;
        if (end > i) {
            const char *eq = memchr(q + i, '=', end - i);
            if (!on_param(arg, q + i, end - i, eq != NULL ? (size_t)(eq - (q + i)) : end - i))
                return;
        }
        i = end + 1;
    }
}

typedef struct {
    const char *name;
    char *out;
    size_t *out_len;
    sl_key_status_t status;
} query_key_t;

static bool
on_key_param(void *arg, const char *p, size_t len, size_t name_len)
{
    query_key_t *k = arg;
    if (!decoded_is(p, name_len, k->name))
        return true;
    if (name_len + 1 >= len)
        return true; /* empty: try the next */
    const char *v = p + name_len + 1;
    size_t vn = len - name_len - 1;
    char buf[SL_CLIENT_KEY_MAX];
    size_t bn = 0;
    for (size_t i = 0; i < vn;) {
        int c = decode_byte(v, vn, &i);
        if (c < 0 || bn == sizeof(buf)) {
            k->status = SL_KEY_MALFORMED;
            return false;
        }
        buf[bn++] = (char)c;
    }
    k->status = store_key(buf, bn, k->out, k->out_len);
    return false;
}

static sl_key_status_t
key_from_query(const key_input_t *in, const char *name, char out[SL_CLIENT_KEY_MAX], size_t *out_len)
{
    query_key_t k = {.name = name, .out = out, .out_len = out_len, .status = SL_KEY_ABSENT};
    if (in->query != NULL)
        each_param(in->query, in->query_len, on_key_param, &k);
    return k.status;
}

static sl_key_status_t (*const key_readers[])(const key_input_t *, const char *, char[SL_CLIENT_KEY_MAX],
                                              size_t *) = {
    [SL_KEY_PLACE_HEADER] = key_from_header,
    [SL_KEY_PLACE_BEARER] = key_from_bearer,
    [SL_KEY_PLACE_QUERY] = key_from_query,
};

sl_key_status_t
sl_dialect_client_key(sl_dialect_t d, const sl_headers_t *headers, const char *query, size_t query_len,
                      char out[SL_CLIENT_KEY_MAX], size_t *out_len)
{
    const sl_dialect_def_t *def = sl_dialect_def(d);
    key_input_t in = {.headers = headers, .query = query, .query_len = query_len};
    for (size_t i = 0; i < def->n_key_places; i++) {
        const sl_key_place_t *place = &def->key_places[i];
        sl_key_status_t st = key_readers[place->kind](&in, place->name, out, out_len);
        if (st != SL_KEY_ABSENT)
            return st;
    }
    return SL_KEY_ABSENT;
}

/* ---- query rewriting --------------------------------------------------------------------------- */

typedef struct {
    const char *drop; /* parameter name to leave out, or NULL */
    sl_strbuf_t *out;
    bool any;
} query_copy_t;

static bool
on_copy_param(void *arg, const char *p, size_t len, size_t name_len)
{
    query_copy_t *c = arg;
    if (c->drop != NULL && decoded_is(p, name_len, c->drop))
        return true;
    sl_strbuf_append(c->out, c->any ? "&" : "?", 1);
    sl_strbuf_append(c->out, p, len);
    c->any = true;
    return true;
}

/* Appends "?query" without the parameters named drop (none when NULL); nothing when none is left. */
static void
append_query(sl_strbuf_t *out, const char *q, size_t n, const char *drop)
{
    query_copy_t c = {.drop = drop, .out = out, .any = false};
    each_param(q, n, on_copy_param, &c);
}

void
sl_path_strip_key(const char *target, size_t len, sl_strbuf_t *out)
{
    const char *q = memchr(target, '?', len);
    size_t path_len = q != NULL ? (size_t)(q - target) : len;
    sl_strbuf_append(out, target, path_len);
    if (q != NULL)
        append_query(out, q + 1, len - path_len - 1, "key");
}

bool
sl_path_has_query(const char *target, size_t len)
{
    return memchr(target, '?', len) != NULL;
}

/* ---- base URL ---------------------------------------------------------------------------------- */

static const struct {
    const char *prefix;
    bool is_tls;
    uint16_t port;
} url_schemes[] = {
    {"https://", true, 443},
    {"http://", false, 80},
};

static bool
is_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

static bool
is_ipv6_char(char c)
{
    return sl_hex_digit(c) >= 0 || c == ':' || c == '.';
}

/*
 * Whether s[0..n) can be written into a request head without ending a line
 * or a field early: no control bytes (a header value may hold spaces and
 * tabs, a request target none).
 */
static bool
is_field_safe(const char *s, size_t n, bool is_value)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0x7f || (c < ' ' && !(is_value && c == '\t')) || (c == ' ' && !is_value))
            return false;
    }
    return true;
}

int
sl_base_url_parse(const char *url, sl_base_url_t *out)
{
    size_t s = 0;
    while (s < sizeof(url_schemes) / sizeof(url_schemes[0]) &&
           strncasecmp(url, url_schemes[s].prefix, strlen(url_schemes[s].prefix)) != 0)
        s++;
    if (s == sizeof(url_schemes) / sizeof(url_schemes[0]) || strpbrk(url, "?#") != NULL)
        return -1;
    const char *auth = url + strlen(url_schemes[s].prefix);
    const char *path = auth + strcspn(auth, "/");
    const char *host = auth, *host_end, *port_at;
    if (*auth == '[') {
        host = auth + 1;
        host_end = memchr(host, ']', (size_t)(path - host));
        if (host_end == NULL || memchr(host, ':', (size_t)(host_end - host)) == NULL)
            return -1;
        for (const char *c = host; c < host_end; c++) {
            if (!is_ipv6_char(*c))
                return -1;
        }
        port_at = host_end + 1;
        if (port_at != path && *port_at != ':')
            return -1;
    } else {
        host_end = auth;
        while (host_end < path && is_host_char(*host_end))
            host_end++;
        port_at = host_end;
        if (port_at != path && *port_at != ':')
            return -1;
    }
    if (host_end == host)
        return -1;
    uint32_t port = url_schemes[s].port;
    if (port_at != path && port_at + 1 != path) {
        port = 0;
        for (const char *c = port_at + 1; c < path; c++) {
            if (*c < '0' || *c > '9' || (port = port * 10 + (uint32_t)(*c - '0')) > 65535)
                return -1;
        }
        if (port == 0)
            return -1;
    }
    size_t path_len = strlen(path);
    if (!is_field_safe(path, path_len, false))
        return -1;
    while (path_len > 0 && path[path_len - 1] == '/')
        path_len--;
    *out = (sl_base_url_t){
        .is_tls = url_schemes[s].is_tls,
        .host = host,
        .host_len = (size_t)(host_end - host),
        .port = (uint16_t)port,
        .port_is_default = port == url_schemes[s].port,
        .path_prefix = path,
        .path_prefix_len = path_len,
    };
    return 0;
}

/* ---- the upstream head ------------------------------------------------------------------------- */

/* What the client may send upstream (config.md); everything else stays with the gateway. */
#define NAME(s)                                                                                              \
    {                                                                                                        \
        s, sizeof(s) - 1                                                                                     \
    }
static const struct {
    const char *name;
    size_t len;
} passthrough_headers[] = {
    NAME("anthropic-version"), NAME("anthropic-beta"), NAME("openai-beta"),
    NAME("x-goog-api-client"), NAME("accept"),         NAME("content-type"),
    NAME("user-agent"),
};
#undef NAME

/*
 * Headers only the gateway writes: framing and hop-by-hop ones (a provider's
 * headers cannot replace them without breaking the connection) and
 * accept-encoding (answers must stay readable for classification).
 */
static const struct {
    const char *name;
    bool is_prefix;
} gateway_headers[] = {
    {"host", false},       {"content-length", false},    {"accept-encoding", false},
    {"connection", false}, {"keep-alive", false},        {"te", false},
    {"trailer", false},    {"transfer-encoding", false}, {"upgrade", false},
    {"proxy-", true},
};

static const char *
passthrough_name(const char *name, size_t n)
{
    /* Asked of every header of every request: most differ in length from all seven. */
    for (size_t i = 0; i < sizeof(passthrough_headers) / sizeof(passthrough_headers[0]); i++) {
        if (passthrough_headers[i].len == n && name_is(name, n, passthrough_headers[i].name))
            return passthrough_headers[i].name;
    }
    return NULL;
}

static bool
is_gateway_header(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(gateway_headers) / sizeof(gateway_headers[0]); i++) {
        size_t g = strlen(gateway_headers[i].name);
        if (gateway_headers[i].is_prefix ? n >= g && strncasecmp(name, gateway_headers[i].name, g) == 0
                                         : name_is(name, n, gateway_headers[i].name))
            return true;
    }
    return false;
}

/* Whether the provider sets a header of this name itself (one it is allowed to set). */
static bool
provider_sets(const sl_provider_t *p, const char *name, size_t n)
{
    for (size_t i = 0; i < p->n_headers; i++) {
        if (strlen(p->headers[i].name) == n && strncasecmp(p->headers[i].name, name, n) == 0 &&
            !is_gateway_header(p->headers[i].name))
            return true;
    }
    return false;
}

static bool
is_tchar(char c)
{
    return is_host_char(c) || (c != '\0' && strchr("!#$%&'*+^`|", c) != NULL);
}

static bool
is_token(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (!is_tchar(*s))
            return false;
    }
    return true;
}

/* RFC 3986 unreserved bytes stay, everything else is %-encoded, so a model id is one path segment. */
static void
append_segment(sl_strbuf_t *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        if (is_host_char(*s)) {
            sl_strbuf_append(out, s, 1);
        } else {
            char e[3] = {'%', hex[(unsigned char)*s >> 4], hex[(unsigned char)*s & 15]};
            sl_strbuf_append(out, e, 3);
        }
    }
}

/* Appends the dialect's path for the client's target; -1 when it has no model segment to rewrite. */
static int
append_upstream_path(const sl_dialect_def_t *def, const sl_base_url_t *base, const sl_upstream_request_t *req,
                     sl_strbuf_t *out)
{
    const char *path = req->target;
    const char *q = memchr(req->target, '?', req->target_len);
    size_t path_len = q != NULL ? (size_t)(q - req->target) : req->target_len;
    if (def->client_prefix != NULL) {
        size_t n = strlen(def->client_prefix);
        if (path_len >= n && memcmp(path, def->client_prefix, n) == 0 && (path_len == n || path[n] == '/')) {
            path += n;
            path_len -= n;
        }
    }
    if (base->path_prefix_len + path_len == 0) {
        sl_strbuf_append(out, "/", 1);
    } else {
        sl_strbuf_append(out, base->path_prefix, base->path_prefix_len);
    }
    if (def->model_marker != NULL && req->model != NULL) {
        const char *at = find_bytes(path, path_len, def->model_marker);
        if (at == NULL)
            return -1;
        const char *seg = at + strlen(def->model_marker);
        const char *seg_end = memchr(seg, def->model_end, (size_t)(path + path_len - seg));
        if (seg_end == NULL)
            seg_end = path + path_len;
        sl_strbuf_append(out, path, (size_t)(seg - path));
        append_segment(out, req->model);
        sl_strbuf_append(out, seg_end, (size_t)(path + path_len - seg_end));
    } else {
        sl_strbuf_append(out, path, path_len);
    }
    if (q != NULL) {
        const char *drop = NULL;
        for (size_t i = 0; i < def->n_key_places; i++) {
            if (def->key_places[i].kind == SL_KEY_PLACE_QUERY)
                drop = def->key_places[i].name;
        }
        append_query(out, q + 1, req->target_len - path_len - 1, drop);
    }
    return 0;
}

static void
append_header(sl_strbuf_t *out, const char *name, size_t name_len, const char *value, size_t value_len)
{
    sl_strbuf_append(out, name, name_len);
    sl_strbuf_append(out, ": ", 2);
    sl_strbuf_append(out, value, value_len);
    sl_strbuf_append(out, "\r\n", 2);
}

static void
append_host(sl_strbuf_t *out, const sl_base_url_t *base)
{
    bool bracket = memchr(base->host, ':', base->host_len) != NULL;
    sl_strbuf_append(out, "host: ", 6);
    sl_strbuf_append(out, "[", bracket);
    sl_strbuf_append(out, base->host, base->host_len);
    sl_strbuf_append(out, "]", bracket);
    if (!base->port_is_default) {
        sl_strbuf_append(out, ":", 1);
        sl_strbuf_append_u64(out, base->port);
    }
    sl_strbuf_append(out, "\r\n", 2);
}

/* Appends the provider's credential; returns how the request is authenticated. */
static sl_upstream_auth_t
append_credential(const sl_dialect_def_t *def, const sl_provider_t *p, sl_strbuf_t *out)
{
    size_t name_len = strlen(def->credential_header);
    if (provider_sets(p, def->credential_header, name_len))
        return SL_UPSTREAM_AUTH_HEADER;
    if (p->key == NULL)
        return def->sigv4_without_key ? SL_UPSTREAM_AUTH_SIGV4_PENDING : SL_UPSTREAM_AUTH_NONE;
    sl_strbuf_append(out, def->credential_header, name_len);
    sl_strbuf_append(out, ": ", 2);
    sl_strbuf_append_str(out, def->credential_scheme);
    sl_strbuf_append_str(out, p->key);
    sl_strbuf_append(out, "\r\n", 2);
    return SL_UPSTREAM_AUTH_HEADER;
}

static void
append_passthrough(const sl_provider_t *p, const sl_headers_t *headers, sl_strbuf_t *out)
{
    sl_header_t h;
    for (size_t i = 0; headers->at(headers->ctx, i, &h); i++) {
        const char *name = passthrough_name(h.name, h.name_len);
        if (name != NULL && !provider_sets(p, name, h.name_len) && is_field_safe(h.value, h.value_len, true))
            append_header(out, name, h.name_len, h.value, h.value_len);
    }
}

static void
append_provider_headers(const sl_provider_t *p, sl_strbuf_t *out)
{
    for (size_t i = 0; i < p->n_headers; i++) {
        const sl_pair_t *h = &p->headers[i];
        size_t vn = strlen(h->value);
        if (is_token(h->name) && !is_gateway_header(h->name) && is_field_safe(h->value, vn, true))
            append_header(out, h->name, strlen(h->name), h->value, vn);
    }
}

static bool
method_has_body(const char *method)
{
    return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0;
}

sl_head_status_t
sl_dialect_provider_head(const sl_provider_t *p, sl_provider_head_t *out)
{
    *out = (sl_provider_head_t){.provider = p};
    if (sl_base_url_parse(p->base_url, &out->base) != 0)
        return out->status = SL_HEAD_BAD_BASE_URL;
    if (p->key != NULL && !is_field_safe(p->key, strlen(p->key), false))
        return out->status = SL_HEAD_BAD_KEY;
    sl_strbuf_t lines = {0};
    append_host(&lines, &out->base);
    out->credential_at = lines.len;
    out->auth = append_credential(sl_dialect_def(p->protocol), p, &lines);
    sl_strbuf_append(&lines, "accept-encoding: identity\r\n", 27);
    out->provider_headers_at = lines.len;
    append_provider_headers(p, &lines);
    out->lines_len = lines.len;
    out->lines = sl_strbuf_finish(&lines);
    return out->status = SL_HEAD_OK;
}

void
sl_provider_head_free(sl_provider_head_t *head)
{
    free(head->lines);
    head->lines = NULL;
    head->lines_len = 0;
}

sl_head_status_t
sl_dialect_upstream_head(const sl_provider_head_t *head, const sl_upstream_request_t *req, sl_strbuf_t *out,
                         sl_upstream_head_t *info)
{
    if (head->status != SL_HEAD_OK)
        return head->status;
    if (!is_token(req->method) || req->target_len == 0 || req->target[0] != '/' ||
        !is_field_safe(req->target, req->target_len, false))
        return SL_HEAD_BAD_TARGET;

    size_t start = out->len;
    sl_strbuf_append_str(out, req->method);
    sl_strbuf_append(out, " ", 1);
    size_t target_off = out->len;
    if (append_upstream_path(sl_dialect_def(head->provider->protocol), &head->base, req, out) != 0) {
        out->len = start;
        if (out->data != NULL)
            out->data[start] = '\0';
        return SL_HEAD_BAD_TARGET;
    }
    size_t target_len = out->len - target_off;
    sl_strbuf_append(out, " HTTP/1.1\r\n", 11);
    sl_strbuf_append(out, head->lines, head->credential_at);
    if (method_has_body(req->method)) {
        sl_strbuf_append(out, "content-length: ", 16);
        sl_strbuf_append_u64(out, req->body_len);
        sl_strbuf_append(out, "\r\n", 2);
    }
    sl_strbuf_append(out, head->lines + head->credential_at, head->provider_headers_at - head->credential_at);
    append_passthrough(head->provider, req->headers, out);
    sl_strbuf_append(out, head->lines + head->provider_headers_at,
                     head->lines_len - head->provider_headers_at);
    sl_strbuf_append(out, "\r\n", 2);
    *info = (sl_upstream_head_t){.auth = head->auth, .target_off = target_off, .target_len = target_len};
    return SL_HEAD_OK;
}

/* ---- errors ------------------------------------------------------------------------------------ */

static const struct {
    int status;
    sl_error_kind_t kind;
} status_kinds[] = {
    {400, SL_ERROR_KIND_BAD_REQUEST}, {401, SL_ERROR_KIND_UNAUTHORIZED}, {403, SL_ERROR_KIND_FORBIDDEN},
    {404, SL_ERROR_KIND_NOT_FOUND},   {413, SL_ERROR_KIND_TOO_LARGE},    {429, SL_ERROR_KIND_RATE_LIMITED},
    {500, SL_ERROR_KIND_INTERNAL},    {502, SL_ERROR_KIND_UNAVAILABLE},  {503, SL_ERROR_KIND_UNAVAILABLE},
    {504, SL_ERROR_KIND_UNAVAILABLE},
};

static sl_error_kind_t
kind_of_status(int status)
{
    for (size_t i = 0; i < sizeof(status_kinds) / sizeof(status_kinds[0]); i++) {
        if (status_kinds[i].status == status)
            return status_kinds[i].kind;
    }
    return status >= 400 && status < 500 ? SL_ERROR_KIND_BAD_REQUEST : SL_ERROR_KIND_INTERNAL;
}

/* Appends s as the inside of a JSON string; invalid UTF-8 bytes become U+FFFD. */
static void
append_json_escaped(sl_strbuf_t *out, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    static const char short_escapes[0x20] = {
        ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r'};
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), run = 0, i = 0;
    while (i < n) {
        unsigned char c = u[i];
        size_t len = 1;
        char esc[6];
        size_t esc_len = 0;
        if (c >= 0x80) {
            len = sl_utf8_len(u + i, n - i);
            if (len == 0 || len == SL_UTF8_CUT) {
                memcpy(esc, "\\ufffd", 6);
                esc_len = 6;
                len = 1;
            }
        } else if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            esc_len = 2;
        } else if (c < 0x20 && short_escapes[c] != 0) {
            esc[0] = '\\';
            esc[1] = short_escapes[c];
            esc_len = 2;
        } else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            esc_len = 6;
        }
        if (esc_len > 0) {
            sl_strbuf_append(out, s + i - run, run);
            sl_strbuf_append(out, esc, esc_len);
            run = 0;
        } else {
            run += len;
        }
        i += len;
    }
    sl_strbuf_append(out, s + i - run, run);
}

/* The escaped parts of an error; free with parts_free. */
typedef struct {
    sl_error_parts_t parts;
    char *code, *message;
} error_build_t;

static const sl_dialect_def_t *
parts_make(sl_dialect_t d, int status, const char *code, const char *message, error_build_t *b)
{
    assert(code != NULL && message != NULL);
    const sl_dialect_def_t *def = sl_dialect_def(d);
    sl_strbuf_t c = {0}, m = {0};
    append_json_escaped(&c, code);
    if (strncmp(message, SL_MESSAGE_PREFIX, strlen(SL_MESSAGE_PREFIX)) != 0)
        sl_strbuf_append(&m, SL_MESSAGE_PREFIX, strlen(SL_MESSAGE_PREFIX));
    append_json_escaped(&m, message);
    b->code = sl_strbuf_finish(&c);
    b->message = sl_strbuf_finish(&m);
    sl_error_kind_t kind = kind_of_status(status);
    b->parts = (sl_error_parts_t){.status = status,
                                  .kind = kind,
                                  .type = def->error_types[kind],
                                  .code = b->code,
                                  .message = b->message};
    return def;
}

static void
parts_free(error_build_t *b)
{
    free(b->code);
    free(b->message);
}

void
sl_dialect_render_error(sl_dialect_t d, int status, const char *code, const char *message, sl_strbuf_t *out,
                        sl_error_head_t *head)
{
    error_build_t b;
    const sl_dialect_def_t *def = parts_make(d, status, code, message, &b);
    *head = (sl_error_head_t){.content_type = "application/json"};
    def->do_render_error(&b.parts, out, head);
    parts_free(&b);
}

sl_stream_error_t
sl_dialect_render_stream_error(sl_dialect_t d, int status, const char *code, const char *message,
                               sl_strbuf_t *out)
{
    error_build_t b;
    const sl_dialect_def_t *def = parts_make(d, status, code, message, &b);
    sl_stream_error_t r = {.form = SL_STREAM_ERROR_READY};
    if (def->do_render_stream_error != NULL) {
        r = def->do_render_stream_error(&b.parts, out);
    } else {
        sl_error_head_t head;
        sl_strbuf_append(out, def->stream_error_prefix, strlen(def->stream_error_prefix));
        def->do_render_error(&b.parts, out, &head);
        sl_strbuf_append(out, "\n\n", 2);
    }
    parts_free(&b);
    return r;
}

const char *
sl_dialect_stream_content_type(sl_dialect_t d)
{
    return sl_dialect_def(d)->stream_content_type;
}

const char *
sl_dialect_keep_alive(sl_dialect_t d, size_t *len)
{
    const char *k = sl_dialect_def(d)->keep_alive;
    *len = strlen(k);
    return k;
}
