/*
 * SigV4: AWS's published test suite (aws-sig-v4-test-suite, credentials
 * AKIDEXAMPLE, us-east-1, service "service", 20150830T123600Z) gives the same
 * canonical requests and Authorization values; a Bedrock ConverseStream
 * request is signed with its path encoded twice and checks out against an
 * independent recomputation; what cannot be signed is refused untouched.
 */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sigv4.h"

#define SUITE_MS     1440938160000LL /* 2015-08-30T12:36:00Z */
#define SUITE_AKID   "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_CRED   "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
#define EMPTY_HASH   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define STS_PREFIX   "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
#define HOST                                                                                                 \
    {                                                                                                        \
        "Host", "example.amazonaws.com"                                                                      \
    }
#define STS_TOKEN                                                                                            \
    "AQoDYXdzEPT//////////"                                                                                  \
    "wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUu"              \
    "wthAx7mSEI/qkPpKPi/"                                                                                    \
    "kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8Y"              \
    "QcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+"                                                    \
    "scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICC"                                             \
    "R/oLxBA=="
#define SUITE_TOKEN "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"

typedef struct {
    const char *name, *method, *path, *query;
    sl_sigv4_header_t headers[5];
    size_t n_headers;
    const char *payload, *token;
    const char *creq; /* NULL when only the signature is pinned */
    const char *sts_hash;
    const char *authz;
} vector_t;

/* The suite's cases as published; the canonical requests are the suite's .creq files. */
static const vector_t vectors[] = {
    {"get-vanilla",
     "GET",
     "/",
     "",
     {HOST},
     1,
     "",
     NULL,
     "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_HASH,
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-vanilla-empty-query-key",
     "GET",
     "/",
     "Param1=value1",
     {HOST},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"},
    {"get-vanilla-query-order-key-case",
     "GET",
     "/",
     "Param2=value2&Param1=value1",
     {HOST},
     1,
     "",
     NULL,
     "GET\n/"
     "\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-"
     "date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
    {"get-vanilla-query-order-key",
     "GET",
     "/",
     "Param1=value2&Param1=Value1",
     {HOST},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1"},
    {"get-vanilla-query-order-value",
     "GET",
     "/",
     "Param1=value2&Param1=value1",
     {HOST},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"},
    {"get-vanilla-query-order-encoded",
     "GET",
     "/",
     "Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
     {HOST},
     1,
     "",
     NULL,
     "GET\n/"
     "\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z"
     "\n\nhost;x-amz-date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac"},
    {"get-vanilla-query-unreserved",
     "GET",
     "/",
     "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~"
     "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
     {HOST},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
    {"get-vanilla-utf8-query",
     "GET",
     "/",
     "\xe1\x88\xb4=bar",
     {HOST},
     1,
     "",
     NULL,
     "GET\n/"
     "\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-"
     "date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
    {"get-unreserved",
     "GET",
     "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
     "",
     {HOST},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
    {"get-utf8",
     "GET",
     "/\xe1\x88\xb4",
     "",
     {HOST},
     1,
     "",
     NULL,
     "GET\n/"
     "%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
    {"get-space",
     "GET",
     "/example space/",
     "",
     {HOST},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
    {"get-special-character",
     "GET",
     "/example/$delete",
     "",
     {HOST},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=a853c9b21b528b19643d00910d35b83a10c366a10833ceefb45edd6c80e40f27"},
    {"get-header-key-duplicate",
     "GET",
     "/",
     "",
     {HOST, {"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}},
     4,
     "",
     NULL,
     "GET\n/"
     "\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;"
     "my-"
     "header1;x-amz-date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;my-header1;x-amz-date, "
                "Signature=c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
    {"get-header-value-order",
     "GET",
     "/",
     "",
     {HOST,
      {"My-Header1", "value4"},
      {"My-Header1", "value1"},
      {"My-Header1", "value3"},
      {"My-Header1", "value2"}},
     5,
     "",
     NULL,
     "GET\n/"
     "\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\nx-amz-date:20150830T123600Z\n\n"
     "host;my-header1;x-amz-date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;my-header1;x-amz-date, "
                "Signature=08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
    {"get-header-value-multiline",
     "GET",
     "/",
     "",
     {HOST, {"My-Header1", "value1\n  value2\n     value3"}},
     2,
     "",
     NULL,
     "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1 value2 value3\nx-amz-date:20150830T123600Z\n\n"
     "host;my-header1;x-amz-date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;my-header1;x-amz-date, "
                "Signature=cfd34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd"},
    {"get-header-value-trim",
     "GET",
     "/",
     "",
     {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}, HOST},
     3,
     "",
     NULL,
     "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b "
     "c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
                "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
    {"post-vanilla",
     "POST",
     "/",
     "",
     {HOST},
     1,
     "",
     NULL,
     "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
    {"post-vanilla-query",
     "POST",
     "/",
     "Param1=value1",
     {HOST},
     1,
     "",
     NULL,
     "POST\n/"
     "\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-"
     "date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
    {"post-header-key-case",
     "POST",
     "/",
     "",
     {{"HOST", "example.amazonaws.com"}},
     1,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;x-amz-date, "
                "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
    {"post-header-key-sort",
     "POST",
     "/",
     "",
     {{"My-Header1", "value1"}, HOST},
     2,
     "",
     NULL,
     "POST\n/"
     "\n\nhost:example.amazonaws.com\nmy-header1:value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-"
     "amz-"
     "date\n" EMPTY_HASH,
     NULL,
     SUITE_CRED "SignedHeaders=host;my-header1;x-amz-date, "
                "Signature=c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
    {"post-header-value-case",
     "POST",
     "/",
     "",
     {HOST, {"My-Header1", "VALUE1"}},
     2,
     "",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=host;my-header1;x-amz-date, "
                "Signature=cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
    {"post-x-www-form-urlencoded",
     "POST",
     "/",
     "",
     {{"Content-Type", "application/x-www-form-urlencoded"}, HOST},
     2,
     "Param1=value1",
     NULL,
     "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-date:"
     "20150830T123600Z\n\ncontent-type;host;x-amz-"
     "date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b"
     "6e",
     "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281",
     SUITE_CRED "SignedHeaders=content-type;host;x-amz-date, "
                "Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"},
    {"post-x-www-form-urlencoded-parameters",
     "POST",
     "/",
     "",
     {{"Content-Type", "application/x-www-form-urlencoded; charset=utf8"}, HOST},
     2,
     "Param1=value1",
     NULL,
     NULL,
     NULL,
     SUITE_CRED "SignedHeaders=content-type;host;x-amz-date, "
                "Signature=1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"},
    {"post-sts-header-before",
     "POST",
     "/",
     "",
     {HOST},
     1,
     "",
     STS_TOKEN,
     "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:" STS_TOKEN
     "\n\nhost;x-amz-date;x-amz-security-token\n" EMPTY_HASH,
     "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
     SUITE_CRED "SignedHeaders=host;x-amz-date;x-amz-security-token, "
                "Signature=85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"},
    {"get-vanilla-with-session-token",
     "GET",
     "/",
     "",
     {HOST},
     1,
     "",
     SUITE_TOKEN,
     NULL,
     "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
     SUITE_CRED "SignedHeaders=host;x-amz-date;x-amz-security-token, "
                "Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"},
};

static bool
sign_vector(const vector_t *v, const sl_sigv4_header_t *headers, size_t n_headers, sl_sigv4_t *out)
{
    sl_sigv4_request_t req = {
        .method = v->method,
        .path = v->path,
        .query = v->query,
        .headers = headers,
        .n_headers = n_headers,
        .payload = v->payload,
        .payload_len = strlen(v->payload),
        .region = "us-east-1",
        .service = "service",
        .unix_ms = SUITE_MS,
    };
    sl_aws_credentials_t creds = {SUITE_AKID, SUITE_SECRET, v->token};
    return sl_sigv4_sign(&req, &creds, out);
}

Test(sigv4_suite, published_vectors_sign_alike)
{
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        const vector_t *v = &vectors[i];
        sl_sigv4_t s;
        cr_assert(sign_vector(v, v->headers, v->n_headers, &s), "%s: refused", v->name);
        cr_assert_str_eq(s.amz_date, "20150830T123600Z");
        if (v->creq)
            cr_assert_str_eq(s.canonical_request, v->creq, "%s: canonical request", v->name);
        if (v->sts_hash) {
            char want[512];
            snprintf(want, sizeof want, STS_PREFIX "%s", v->sts_hash);
            cr_assert_str_eq(s.string_to_sign, want, "%s: string to sign", v->name);
        }
        cr_assert_str_eq(s.authorization, v->authz, "%s", v->name);
        if (v->token)
            cr_assert_str_eq(s.security_token, v->token);
        else
            cr_assert_null(s.security_token);
        sl_sigv4_free(&s);
    }
}

Test(sigv4_time, amz_date_is_utc_from_the_given_milliseconds)
{
    static const struct {
        int64_t ms;
        const char *want;
    } cases[] = {
        {0, "19700101T000000Z"},
        {SUITE_MS + 999, "20150830T123600Z"},
        {1709251199000LL, "20240229T235959Z"},
        {253402300799000LL, "99991231T235959Z"},
    };
    const vector_t *v = &vectors[0];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_sigv4_request_t req = {.method = "GET",
                                  .path = "/",
                                  .headers = v->headers,
                                  .n_headers = 1,
                                  .region = "us-east-1",
                                  .service = "service",
                                  .unix_ms = cases[i].ms};
        sl_aws_credentials_t creds = {SUITE_AKID, SUITE_SECRET, NULL};
        sl_sigv4_t s;
        cr_assert(sl_sigv4_sign(&req, &creds, &s));
        cr_assert_str_eq(s.amz_date, cases[i].want);
        char scope[64];
        snprintf(scope, sizeof scope, "Credential=AKIDEXAMPLE/%.8s/us-east-1/service/aws4_request,",
                 cases[i].want);
        cr_assert_not_null(strstr(s.authorization, scope), "%s", s.authorization);
        sl_sigv4_free(&s);
    }
}

typedef struct {
    const char *name;
    const char *method, *path, *region, *service, *akid, *secret;
    sl_sigv4_header_t header; /* signed beside host */
    bool no_host;
    int64_t unix_ms;
    bool null_payload;
} refusal_t;

#define OK_REQ "POST", "/model/x/converse", "us-east-1", "bedrock", SUITE_AKID, SUITE_SECRET

static const refusal_t refusals[] = {
    {"no host header", OK_REQ, {"content-type", "application/json"}, true, SUITE_MS, false},
    {"x-amz-date passed in", OK_REQ, {"X-Amz-Date", "20150830T123600Z"}, false, SUITE_MS, false},
    {"x-amz-security-token passed in", OK_REQ, {"x-amz-security-token", "t"}, false, SUITE_MS, false},
    {"x-amz-content-sha256 passed in", OK_REQ, {"X-AMZ-CONTENT-SHA256", EMPTY_HASH}, false, SUITE_MS, false},
    {"authorization passed in", OK_REQ, {"Authorization", "Bearer k"}, false, SUITE_MS, false},
    {"empty header name", OK_REQ, {"", "v"}, false, SUITE_MS, false},
    {"header name with a colon", OK_REQ, {"a:b", "v"}, false, SUITE_MS, false},
    {"header name with a space", OK_REQ, {"my header", "v"}, false, SUITE_MS, false},
    {"header name with a newline", OK_REQ, {"x\nhost", "v"}, false, SUITE_MS, false},
    {"null header value", OK_REQ, {"x-a", NULL}, false, SUITE_MS, false},
    {"path without a leading slash",
     "POST",
     "model/x",
     "us-east-1",
     "bedrock",
     SUITE_AKID,
     SUITE_SECRET,
     {"x-a", "v"},
     false,
     SUITE_MS,
     false},
    {"empty method",
     "",
     "/",
     "us-east-1",
     "bedrock",
     SUITE_AKID,
     SUITE_SECRET,
     {"x-a", "v"},
     false,
     SUITE_MS,
     false},
    {"empty region",
     "POST",
     "/",
     "",
     "bedrock",
     SUITE_AKID,
     SUITE_SECRET,
     {"x-a", "v"},
     false,
     SUITE_MS,
     false},
    {"no service",
     "POST",
     "/",
     "us-east-1",
     NULL,
     SUITE_AKID,
     SUITE_SECRET,
     {"x-a", "v"},
     false,
     SUITE_MS,
     false},
    {"empty access key id",
     "POST",
     "/",
     "us-east-1",
     "bedrock",
     "",
     SUITE_SECRET,
     {"x-a", "v"},
     false,
     SUITE_MS,
     false},
    {"no secret",
     "POST",
     "/",
     "us-east-1",
     "bedrock",
     SUITE_AKID,
     NULL,
     {"x-a", "v"},
     false,
     SUITE_MS,
     false},
    {"time before 1970", OK_REQ, {"x-a", "v"}, false, -1000, false},
    {"time after 9999", OK_REQ, {"x-a", "v"}, false, 253402300800000LL, false},
    {"payload length without a payload", OK_REQ, {"x-a", "v"}, false, SUITE_MS, true},
};

Test(sigv4_refusal, what_cannot_be_signed_is_refused_and_leaves_the_output_alone)
{
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        const refusal_t *r = &refusals[i];
        sl_sigv4_header_t h[2] = {r->header, {"host", "bedrock-runtime.us-east-1.amazonaws.com"}};
        sl_sigv4_request_t req = {
            .method = r->method,
            .path = r->path,
            .headers = h,
            .n_headers = r->no_host ? 1 : 2,
            .payload = r->null_payload ? NULL : "{}",
            .payload_len = 2,
            .region = r->region,
            .service = r->service,
            .unix_ms = r->unix_ms,
        };
        sl_aws_credentials_t creds = {r->akid, r->secret, NULL};
        sl_sigv4_t s;
        memset(&s, 0x6b, sizeof s);
        sl_sigv4_t before = s;
        cr_assert_not(sl_sigv4_sign(&req, &creds, &s), "%s: signed", r->name);
        cr_assert_eq(memcmp(&s, &before, sizeof s), 0, "%s: output touched", r->name);
    }
}

Test(sigv4_token, an_empty_session_token_is_no_token)
{
    sl_sigv4_t with_empty, without;
    vector_t v = vectors[0];
    v.token = "";
    cr_assert(sign_vector(&v, v.headers, v.n_headers, &with_empty));
    v.token = NULL;
    cr_assert(sign_vector(&v, v.headers, v.n_headers, &without));
    cr_assert_null(with_empty.security_token);
    cr_assert_str_eq(with_empty.authorization, without.authorization);
    cr_assert_str_eq(with_empty.authorization, vectors[0].authz);
    sl_sigv4_free(&with_empty);
    sl_sigv4_free(&without);
}

Test(sigv4_query, parts_are_decoded_then_encoded_once_and_sorted)
{
    static const struct {
        const char *query, *want;
    } cases[] = {
        {"a=%3a&b=%3A&c=:", "a=%3A&b=%3A&c=%3A"},
        {"p=100%", "p=100%25"},
        {"p=%zz&q=%4", "p=%25zz&q=%254"},
        {"flag", "flag="},
        {"&&b=2&a=1&", "a=1&b=2"},
        {"x=a+b&x=a b", "x=a%20b&x=a%2Bb"},
        {"k=v=w", "k=v%3Dw"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vector_t v = vectors[0];
        v.query = cases[i].query;
        sl_sigv4_t s;
        cr_assert(sign_vector(&v, v.headers, v.n_headers, &s));
        char want[256];
        snprintf(want, sizeof want, "GET\n/\n%s\nhost:", cases[i].want);
        cr_assert_eq(strncmp(s.canonical_request, want, strlen(want)), 0, "%s: %s", cases[i].query,
                     s.canonical_request);
        sl_sigv4_free(&s);
    }
}

Test(sigv4_path, a_segment_is_encoded_for_the_wire_with_colon_and_slash_escaped)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-haiku-20240307-v1%3A0"},
        {"arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
         "us.anthropic.claude-3-5-sonnet-20240620-v1:0",
         "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-5-"
         "sonnet-"
         "20240620-v1%3A0"},
        {"-._~AZaz09", "-._~AZaz09"},
        {"a b%c+d", "a%20b%25c%2Bd"},
        {"\xe1\x88\xb4", "%E1%88%B4"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_strbuf_t b = {0};
        sl_strbuf_append(&b, "/model/", 7);
        sl_sigv4_encode_segment(&b, cases[i].in, strlen(cases[i].in));
        char want[512];
        snprintf(want, sizeof want, "/model/%s", cases[i].want);
        cr_assert_str_eq(b.data, want);
        free(b.data);
    }
}

static void
sha256_hex(const char *s, char out[65])
{
    unsigned char d[32];
    SHA256((const unsigned char *)s, strlen(s), d);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void
hmac_step(const void *key, size_t key_len, const char *msg, unsigned char out[32])
{
    unsigned int len = 32;
    cr_assert_not_null(
        HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, strlen(msg), out, &len));
}

Test(sigv4_bedrock, converse_stream_request_is_signed_with_its_path_encoded_twice)
{
    static const char body[] = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"hi\"}]}]}";
    sl_strbuf_t path = {0};
    sl_strbuf_append(&path, "/model/", 7);
    const char *model = "anthropic.claude-3-haiku-20240307-v1:0";
    sl_sigv4_encode_segment(&path, model, strlen(model));
    sl_strbuf_append(&path, "/converse-stream", 16);
    sl_sigv4_header_t h[] = {
        {"host", "bedrock-runtime.eu-central-1.amazonaws.com"},
        {"content-type", "application/json"},
        {"accept", "application/vnd.amazon.eventstream"},
    };
    sl_sigv4_request_t req = {
        .method = "POST",
        .path = path.data,
        .headers = h,
        .n_headers = 3,
        .payload = body,
        .payload_len = strlen(body),
        .region = "eu-central-1",
        .service = SL_SIGV4_BEDROCK_SERVICE,
        .unix_ms = 1798761600123LL, /* 2027-01-01T00:00:00.123Z */
        .sign_content_sha256 = true,
    };
    sl_aws_credentials_t creds = {"ASIAEXAMPLE", "secret/with+chars", "session-token-value"};
    sl_sigv4_t s;
    cr_assert(sl_sigv4_sign(&req, &creds, &s));
    cr_assert_str_eq(path.data, "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream");

    char body_hash[65], want_creq[2048];
    sha256_hex(body, body_hash);
    cr_assert_str_eq(s.payload_hash, body_hash);
    cr_assert_str_eq(s.amz_date, "20270101T000000Z");
    cr_assert_str_eq(s.security_token, "session-token-value");
    snprintf(want_creq, sizeof want_creq,
             "POST\n/model/anthropic.claude-3-haiku-20240307-v1%%253A0/converse-stream\n\n"
             "accept:application/vnd.amazon.eventstream\ncontent-type:application/json\n"
             "host:bedrock-runtime.eu-central-1.amazonaws.com\nx-amz-content-sha256:%s\n"
             "x-amz-date:20270101T000000Z\nx-amz-security-token:session-token-value\n\n"
             "accept;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token\n%s",
             body_hash, body_hash);
    cr_assert_str_eq(s.canonical_request, want_creq);

    char creq_hash[65], want_sts[512];
    sha256_hex(s.canonical_request, creq_hash);
    snprintf(want_sts, sizeof want_sts,
             "AWS4-HMAC-SHA256\n20270101T000000Z\n20270101/eu-central-1/bedrock/aws4_request\n%s", creq_hash);
    cr_assert_str_eq(s.string_to_sign, want_sts);

    /* The key chain recomputed step by step, apart from the module. */
    unsigned char k[32], sig[32];
    hmac_step("AWS4secret/with+chars", 21, "20270101", k);
    hmac_step(k, 32, "eu-central-1", k);
    hmac_step(k, 32, "bedrock", k);
    hmac_step(k, 32, "aws4_request", k);
    hmac_step(k, 32, s.string_to_sign, sig);
    char want_auth[512];
    int at = snprintf(
        want_auth, sizeof want_auth,
        "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/20270101/eu-central-1/bedrock/aws4_request, "
        "SignedHeaders=accept;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token, "
        "Signature=");
    for (int i = 0; i < 32; i++)
        at += snprintf(want_auth + at, sizeof want_auth - (size_t)at, "%02x", sig[i]);
    cr_assert_str_eq(s.authorization, want_auth);

    /* Signing is a function of its inputs: again is the same, another secret is not. */
    sl_sigv4_t again, other;
    cr_assert(sl_sigv4_sign(&req, &creds, &again));
    cr_assert_str_eq(again.authorization, s.authorization);
    creds.secret_access_key = "secret/with+charz";
    cr_assert(sl_sigv4_sign(&req, &creds, &other));
    cr_assert_str_neq(other.authorization, s.authorization);
    sl_sigv4_free(&s);
    sl_sigv4_free(&again);
    sl_sigv4_free(&other);
    cr_assert_null(s.authorization);
    free(path.data);
}

/* ---- signing a built upstream head (Bedrock without a key) ------------------------------------------ */

#define BEDROCK_HEAD_LINE "POST /model/anthropic.claude%3Ax/converse-stream?x=1 HTTP/1.1\r\n"
#define BEDROCK_HEAD                                                                                         \
    BEDROCK_HEAD_LINE "host: bedrock-runtime.us-east-1.amazonaws.com\r\ncontent-length: 2\r\n"               \
                      "content-type: application/json\r\n\r\n"

Test(sigv4, a_bedrock_head_is_signed_over_its_own_method_target_host_and_body)
{
    char *head = strdup(BEDROCK_HEAD);
    sl_upstream_head_t info = {.auth = SL_UPSTREAM_AUTH_SIGV4_PENDING,
                               .target_off = 5,
                               .target_len = strlen(BEDROCK_HEAD_LINE) - 5 - strlen(" HTTP/1.1\r\n")};
    sl_aws_credentials_t creds = {SUITE_AKID, SUITE_SECRET, "session-token-1"};
    cr_assert(sl_sigv4_sign_head(&head, &info, "{}", 2, "us-east-1", &creds, SUITE_MS));

    /* The same request signed directly: what the head must now carry. */
    sl_sigv4_header_t host = {"host", "bedrock-runtime.us-east-1.amazonaws.com"};
    sl_sigv4_request_t req = {.method = "POST",
                              .path = "/model/anthropic.claude%3Ax/converse-stream",
                              .query = "x=1",
                              .headers = &host,
                              .n_headers = 1,
                              .payload = "{}",
                              .payload_len = 2,
                              .region = "us-east-1",
                              .service = "bedrock",
                              .unix_ms = SUITE_MS};
    sl_sigv4_t want;
    cr_assert(sl_sigv4_sign(&req, &creds, &want));
    char expected[2048];
    snprintf(expected, sizeof(expected),
             "%shost: bedrock-runtime.us-east-1.amazonaws.com\r\ncontent-length: 2\r\n"
             "content-type: application/json\r\nx-amz-date: 20150830T123600Z\r\n"
             "x-amz-security-token: session-token-1\r\nauthorization: %s\r\n\r\n",
             BEDROCK_HEAD_LINE, want.authorization);
    cr_assert_str_eq(head, expected, "the signature goes before the blank line, the head is otherwise kept");
    static const char scope[] =
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, "
        "SignedHeaders=host;x-amz-date;x-amz-security-token, Signature=";
    cr_assert(strncmp(want.authorization, scope, sizeof(scope) - 1) == 0, "%s", want.authorization);
    cr_assert_eq(strlen(want.authorization), sizeof(scope) - 1 + 64, "a 64-hex-digit signature");
    sl_sigv4_free(&want);
    free(head);
}

Test(sigv4, a_head_without_a_host_is_left_unsigned)
{
    const char *unsigned_head = "POST /model/x/converse HTTP/1.1\r\ncontent-length: 2\r\n\r\n";
    char *head = strdup(unsigned_head);
    sl_upstream_head_t info = {.auth = SL_UPSTREAM_AUTH_SIGV4_PENDING, .target_off = 5, .target_len = 17};
    sl_aws_credentials_t creds = {SUITE_AKID, SUITE_SECRET, NULL};
    cr_assert_not(sl_sigv4_sign_head(&head, &info, "{}", 2, "us-east-1", &creds, SUITE_MS));
    cr_assert_str_eq(head, unsigned_head);
    free(head);
}
