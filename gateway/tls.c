#include "tls.h"

#include <stdio.h>
#include <string.h>

#include <h2o.h>
#include <h2o/http2.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "core/cidr.h"

static void
describe_error(const char *what, char *err, size_t err_size)
{
    unsigned long e = ERR_get_error();
    snprintf(err, err_size, "%s: %s", what, e != 0 ? ERR_reason_error_string(e) : "unknown error");
    ERR_clear_error();
}

SSL_CTX *
sl_tls_server_ctx(const char *cert_file, const char *key_file, char *err, size_t err_size)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        describe_error("cannot create a TLS context", err, err_size);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        char what[600];
        snprintf(what, sizeof(what), "cannot use TLS certificate %s with key %s", cert_file, key_file);
        describe_error(what, err, err_size);
        SSL_CTX_free(ctx);
        return NULL;
    }
    h2o_ssl_register_alpn_protocols(ctx, h2o_http2_alpn_protocols);
    return ctx;
}

static int
verify_host_name(int preverify_ok, X509_STORE_CTX *store)
{
    if (!preverify_ok)
        return 0;
    if (X509_STORE_CTX_get_error_depth(store) != 0)
        return 1;
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    const char *name = ssl != NULL ? SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) : NULL;
    X509 *cert = X509_STORE_CTX_get_current_cert(store);
    int family;
    uint8_t addr[16];
    int ok = name != NULL && cert != NULL &&
             (sl_ip_parse(name, &family, addr) ? X509_check_ip_asc(cert, name, 0) == 1
                                               : X509_check_host(cert, name, strlen(name), 0, NULL) == 1);
    if (!ok)
        X509_STORE_CTX_set_error(store, X509_V_ERR_HOSTNAME_MISMATCH);
    return ok;
}

SSL_CTX *
sl_tls_upstream_ctx(char *err, size_t err_size)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL || SSL_CTX_set_default_verify_paths(ctx) != 1) {
        describe_error("cannot create the upstream TLS context", err, err_size);
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_host_name);
    return ctx;
}

SSL_CTX *
sl_tls_upstream_ctx_for_address(char *err, size_t err_size)
{
    SSL_CTX *ctx = sl_tls_upstream_ctx(err, err_size);
    if (ctx != NULL)
        SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    return ctx;
}
