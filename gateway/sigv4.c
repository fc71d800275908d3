/*
 * AWS Signature Version 4 (see sigv4.h): canonical request, string to sign,
 * the derived key chain, the Authorization value.
 */
#include "sigv4.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/text.h"

#define ALGORITHM  "AWS4-HMAC-SHA256"
#define TERMINATOR "aws4_request"

/* Headers the signer adds itself: passed in as well, they would be signed twice. */
static const char *const own_headers[] = {"x-amz-date", "x-amz-security-token", "x-amz-content-sha256",
                                          "authorization"};

static bool
is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

/* RFC 9110 tchar: what a header name may be made of. */
static bool
is_token(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!is_unreserved(c) && strchr("!#$%&'*+^`|", c) == NULL)
            return false;
    }
    return true;
}

static void
append_escaped(sl_strbuf_t *out, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";
    char e[3] = {'%', hex[c >> 4], hex[c & 15]};
    sl_strbuf_append(out, e, 3);
}

/* AWS's URI encoding: every byte but the unreserved ones as %XX; '/' kept for paths. */
static void
append_encoded(sl_strbuf_t *out, const char *s, size_t n, bool keep_slash)
{
    size_t run = 0; /* unreserved bytes not yet appended, so plain text is copied in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_unreserved(c) || (keep_slash && c == '/')) {
            run++;
            continue;
        }
        sl_strbuf_append(out, s + i - run, run);
        run = 0;
        append_escaped(out, c);
    }
    sl_strbuf_append(out, s + n - run, run);
}

void
sl_sigv4_encode_segment(sl_strbuf_t *out, const char *s, size_t n)
{
    append_encoded(out, s, n, false);
}

/*
 * A query key or value arrives as sent, so it is decoded before it is
 * encoded again: %3a, %3A and a bare ':' must all sign as %3A. A '%' that
 * starts no escape is a literal one.
 */
static char *
canonical_query_part(const char *s, size_t n)
{
    sl_strbuf_t out = {0};
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%' && n - i > 2 && sl_hex_digit(s[i + 1]) >= 0 && sl_hex_digit(s[i + 2]) >= 0) {
            c = (unsigned char)(sl_hex_digit(s[i + 1]) << 4 | sl_hex_digit(s[i + 2]));
            i += 2;
        }
        if (is_unreserved(c))
            sl_strbuf_append(&out, (const char *)&c, 1);
        else
            append_escaped(&out, c);
    }
    return sl_strbuf_finish(&out);
}

typedef struct {
    char *key, *value;
} param_t;

static int
cmp_param(const void *a, const void *b)
{
    const param_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->value, y->value);
}

/* Parameters sorted by encoded key, then value; a key without '=' has an empty value. */
static void
append_canonical_query(sl_strbuf_t *out, const char *query)
{
    if (query == NULL || *query == '\0')
        return;
    size_t cap = 1;
    for (const char *p = query; *p; p++)
        cap += *p == '&';
    param_t *params = sl_xcalloc(cap, sizeof *params);
    size_t n = 0;
    for (const char *p = query; *p;) {
        size_t len = strcspn(p, "&");
        if (len > 0) {
            const char *eq = memchr(p, '=', len);
            size_t key_len = eq ? (size_t)(eq - p) : len;
            params[n].key = canonical_query_part(p, key_len);
            params[n].value = eq ? canonical_query_part(eq + 1, len - key_len - 1) : sl_xstrdup("");
            n++;
        }
        p += len + (p[len] == '&');
    }
    qsort(params, n, sizeof *params, cmp_param);
    for (size_t i = 0; i < n; i++) {
        sl_strbuf_appendf(out, "%s%s=%s", i ? "&" : "", params[i].key, params[i].value);
        free(params[i].key);
        free(params[i].value);
    }
    free(params);
}

typedef struct {
    char *name; /* lowercased copy */
    const char *value;
    size_t order; /* position in the request, so repeated names keep their values' order */
} header_t;

static int
cmp_header(const void *a, const void *b)
{
    const header_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

/* The value trimmed, each inner run of white space (folded lines included) as one space. */
static void
append_header_value(sl_strbuf_t *out, const char *v)
{
    bool space = false, started = false;
    for (; *v; v++) {
        if (strchr(" \t\r\n", *v)) {
            space = started;
            continue;
        }
        if (space)
            sl_strbuf_append(out, " ", 1);
        sl_strbuf_append(out, v, 1);
        space = false;
        started = true;
    }
}

static void
to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static bool
sha256_hex(const char *p, size_t n, char out[65])
{
    unsigned char digest[32];
    if (SHA256((const unsigned char *)p, n, digest) == NULL)
        return false;
    to_hex(digest, 32, out);
    return true;
}

static bool
hmac(const void *key, size_t key_len, const char *msg, size_t msg_len, unsigned char mac[32])
{
    unsigned int len = 0;
    if (key_len > INT_MAX)
        return false;
    return HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, msg_len, mac, &len) != NULL &&
           len == 32;
}

/* HMAC chain "AWS4"+secret → date → region → service → aws4_request, then the signature itself. */
static bool
signature_hex(const char *secret, const char *date, const char *region, const char *service, const char *sts,
              char out[65])
{
    size_t secret_len = strlen(secret);
    unsigned char *seed = sl_xmalloc(4 + secret_len);
    memcpy(seed, "AWS4", 4);
    memcpy(seed + 4, secret, secret_len);
    unsigned char k[32], mac[32];
    bool ok = hmac(seed, 4 + secret_len, date, strlen(date), k) && hmac(k, 32, region, strlen(region), k) &&
              hmac(k, 32, service, strlen(service), k) && hmac(k, 32, TERMINATOR, strlen(TERMINATOR), k) &&
              hmac(k, 32, sts, strlen(sts), mac);
    /* The secret must not outlive the call in freed heap or on the stack. */
    OPENSSL_cleanse(seed, 4 + secret_len);
    free(seed);
    OPENSSL_cleanse(k, sizeof k);
    if (ok)
        to_hex(mac, 32, out);
    return ok;
}

static bool
nonempty(const char *s)
{
    return s != NULL && *s != '\0';
}

/* Whether the caller's headers can be signed as given: token names, a host, none of the signer's own. */
static bool
headers_acceptable(const sl_sigv4_header_t *h, size_t n)
{
    bool host = false;
    for (size_t i = 0; i < n; i++) {
        if (h[i].name == NULL || h[i].value == NULL || !is_token(h[i].name))
            return false;
        for (size_t k = 0; k < sizeof own_headers / sizeof own_headers[0]; k++)
            if (strcasecmp(h[i].name, own_headers[k]) == 0)
                return false;
        host |= strcasecmp(h[i].name, "host") == 0;
    }
    return host;
}

/* Appends the canonical headers block (blank line included) to out and the signed-headers list to list. */
static void
append_headers(sl_strbuf_t *out, sl_strbuf_t *list, const sl_sigv4_header_t *given, size_t n_given,
               const sl_sigv4_t *res, bool with_hash)
{
    const sl_sigv4_header_t own[] = {
        {"x-amz-date", res->amz_date},
        {"x-amz-security-token", res->security_token},
        {"x-amz-content-sha256", with_hash ? res->payload_hash : NULL},
    };
    size_t n_own = sizeof own / sizeof own[0], n = 0;
    header_t *all = sl_xcalloc(n_given + n_own, sizeof *all);
    for (size_t i = 0; i < n_given + n_own; i++) {
        const sl_sigv4_header_t *h = i < n_given ? &given[i] : &own[i - n_given];
        if (h->value == NULL)
            continue;
        all[n].name = sl_xstrdup(h->name);
        for (char *c = all[n].name; *c; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
        all[n].value = h->value;
        all[n].order = i;
        n++;
    }
    qsort(all, n, sizeof *all, cmp_header);
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || strcmp(all[i].name, all[i - 1].name) != 0;
        bool last = i + 1 == n || strcmp(all[i].name, all[i + 1].name) != 0;
        if (first)
            sl_strbuf_appendf(out, "%s:", all[i].name);
        else
            sl_strbuf_append(out, ",", 1);
        append_header_value(out, all[i].value);
        if (last)
            sl_strbuf_append(out, "\n", 1);
    }
    sl_strbuf_append(out, "\n", 1);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(all[i].name, all[i - 1].name) == 0)
            continue;
        sl_strbuf_appendf(list, "%s%s", i ? ";" : "", all[i].name);
    }
    for (size_t i = 0; i < n; i++)
        free(all[i].name);
    free(all);
}

bool
sl_sigv4_sign(const sl_sigv4_request_t *req, const sl_aws_credentials_t *creds, sl_sigv4_t *out)
{
    if (!nonempty(req->method) || req->path == NULL || req->path[0] != '/' || !nonempty(req->region) ||
        !nonempty(req->service) || !nonempty(creds->access_key_id) || !nonempty(creds->secret_access_key) ||
        req->unix_ms < 0 || (req->payload == NULL && req->payload_len > 0) ||
        !headers_acceptable(req->headers, req->n_headers))
        return false;

    sl_sigv4_t res = {0};
    time_t secs = (time_t)(req->unix_ms / 1000);
    struct tm tm;
    if (gmtime_r(&secs, &tm) == NULL ||
        strftime(res.amz_date, sizeof res.amz_date, "%Y%m%dT%H%M%SZ", &tm) != 16)
        return false;
    if (!sha256_hex(req->payload ? req->payload : "", req->payload_len, res.payload_hash))
        return false;
    res.security_token = nonempty(creds->session_token) ? creds->session_token : NULL;

    sl_strbuf_t b = {0}, list = {0};
    sl_strbuf_appendf(&b, "%s\n", req->method);
    append_encoded(&b, req->path, strlen(req->path), true);
    sl_strbuf_append(&b, "\n", 1);
    append_canonical_query(&b, req->query);
    sl_strbuf_append(&b, "\n", 1);
    append_headers(&b, &list, req->headers, req->n_headers, &res, req->sign_content_sha256);
    char *signed_headers = sl_strbuf_finish(&list);
    sl_strbuf_appendf(&b, "%s\n%s", signed_headers, res.payload_hash);
    res.canonical_request = sl_strbuf_finish(&b);

    char date[9];
    memcpy(date, res.amz_date, 8);
    date[8] = '\0';
    char creq_hash[65], sig[65];
    bool ok = sha256_hex(res.canonical_request, strlen(res.canonical_request), creq_hash);
    if (ok) {
        sl_strbuf_appendf(&b, ALGORITHM "\n%s\n%s/%s/%s/" TERMINATOR "\n%s", res.amz_date, date, req->region,
                          req->service, creq_hash);
        res.string_to_sign = sl_strbuf_finish(&b);
        ok =
            signature_hex(creds->secret_access_key, date, req->region, req->service, res.string_to_sign, sig);
    }
    if (ok) {
        sl_strbuf_appendf(&b,
                          ALGORITHM " Credential=%s/%s/%s/%s/" TERMINATOR ", SignedHeaders=%s, Signature=%s",
                          creds->access_key_id, date, req->region, req->service, signed_headers, sig);
        res.authorization = sl_strbuf_finish(&b);
    }
    free(signed_headers);
    if (!ok) {
        sl_sigv4_free(&res);
        return false;
    }
    *out = res;
    return true;
}

void
sl_sigv4_free(sl_sigv4_t *s)
{
    free(s->authorization);
    free(s->canonical_request);
    free(s->string_to_sign);
    s->authorization = s->canonical_request = s->string_to_sign = NULL;
}

bool
sl_sigv4_sign_head(char **head, const sl_upstream_head_t *info, const char *body, size_t body_len,
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
