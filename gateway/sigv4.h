/*
 * AWS Signature Version 4 for the gateway's upstream Bedrock requests
 * (formats.md, Bedrock; config.md: `aws: {access_key_id, secret_access_key,
 * session_token?}`), checked against AWS's published test suite.
 *
 * Pure: the time is a parameter and nothing is read from the environment —
 * the config loader resolves the credentials (the file's, or the AWS_*
 * variables) and the caller passes them in. HMAC-SHA256 and SHA-256 come
 * from OpenSSL, which is why this lives in the shell and not in core/
 * (core links nothing but jansson).
 *
 * Paths are signed the way AWS checks them for every service but S3: the
 * canonical URI is the path as sent on the wire, URI-encoded once more. A
 * Bedrock model id "anthropic.claude-3-haiku-20240307-v1:0" is sent as
 * `…-v1%3A0` (sl_sigv4_encode_segment) and signed as `…-v1%253A0`.
 */
#ifndef SL_SIGV4_H
#define SL_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dialect.h"
#include "core/xalloc.h"

typedef struct sl_aws_credentials {
    const char *access_key_id;
    const char *secret_access_key;
    const char *session_token; /* NULL or "" for long-term credentials */
} sl_aws_credentials_t;

/* A header the request carries and the signature covers. */
typedef struct {
    const char *name;  /* any case; signed lowercased */
    const char *value; /* as sent; signed trimmed, each inner run of white space as one space */
} sl_sigv4_header_t;

typedef struct {
    const char *method; /* "POST" */
    const char *path;   /* as sent: percent-encoded, starting with '/', no dot or empty segments */
    const char *query;  /* as sent, without the '?'; NULL or "" for none */
    /*
     * The headers to sign: host is required, content-type belongs here when
     * sent. Repeated names are signed as one header, values joined by ','
     * in the given order. x-amz-date, x-amz-security-token,
     * x-amz-content-sha256 and authorization are the signer's own and must
     * not be passed.
     */
    const sl_sigv4_header_t *headers;
    size_t n_headers;
    const char *payload; /* the body; may be NULL when payload_len is 0 */
    size_t payload_len;
    const char *region;       /* "us-east-1" */
    const char *service;      /* "bedrock" for bedrock-runtime */
    int64_t unix_ms;          /* wall-clock time of the request, ms since the epoch (not a monotonic clock) */
    bool sign_content_sha256; /* also sign (and have the caller send) x-amz-content-sha256 */
} sl_sigv4_request_t;

/* The outcome: what to send, and the intermediate texts for tests and debugging. */
typedef struct {
    char amz_date[17];          /* the x-amz-date value, "20150830T123600Z" */
    char payload_hash[65];      /* hex SHA-256 of the body: the x-amz-content-sha256 value */
    const char *security_token; /* the x-amz-security-token value (the caller's token), or NULL */
    char *authorization;        /* the Authorization value; owned, see sl_sigv4_free */
    char *canonical_request;    /* owned */
    char *string_to_sign;       /* owned */
} sl_sigv4_t;

/* The service name bedrock-runtime.{region}.amazonaws.com is signed for (not "bedrock-runtime"). */
#define SL_SIGV4_BEDROCK_SERVICE "bedrock"

/*
 * Signs req with creds. Returns true with *out filled (free it with
 * sl_sigv4_free); the caller sends x-amz-date: out->amz_date, Authorization:
 * out->authorization, x-amz-security-token: out->security_token when it is
 * not NULL, and x-amz-content-sha256: out->payload_hash when asked for it —
 * with the headers, path, query and body exactly as passed. Returns false
 * with *out untouched when the request cannot be signed: no host header, a
 * header name that is empty, not an HTTP token or one of the signer's own,
 * a path not starting with '/', an empty method, region, service, access key
 * id or secret, a time before 1970 or after 9999, or OpenSSL failing. The
 * secret and the keys derived from it are wiped before returning.
 */
bool sl_sigv4_sign(const sl_sigv4_request_t *req, const sl_aws_credentials_t *creds, sl_sigv4_t *out);

/* Frees what sl_sigv4_sign allocated in s and clears those fields; s itself is the caller's. */
void sl_sigv4_free(sl_sigv4_t *s);

/*
 * Appends s[0..n) to out as one path segment, as AWS encodes it for the wire:
 * every byte but A-Z a-z 0-9 - . _ ~ becomes %XX (uppercase), '/' and ':'
 * included. For a Bedrock model id or inference-profile ARN in
 * /model/{modelId}/converse-stream.
 */
void sl_sigv4_encode_segment(sl_strbuf_t *out, const char *s, size_t n);

/*
 * Signs a head that sl_dialect_upstream_head left SL_UPSTREAM_AUTH_SIGV4_PENDING
 * (Bedrock without a key) with AWS SigV4 for service "bedrock" in region:
 * the method and target as written in the head, its host header, and the
 * body; x-amz-date, x-amz-security-token (with a session token) and
 * authorization are inserted before the head's final blank line. head is a
 * NUL-terminated string of the head (malloc), replaced by the signed one.
 * Returns false, head untouched, when the head has no host header or the
 * signer refuses. Pure: the time is passed in.
 */
bool sl_sigv4_sign_head(char **head, const sl_upstream_head_t *info, const char *body, size_t body_len,
                        const char *region, const sl_aws_credentials_t *creds, int64_t unix_ms);

#endif
