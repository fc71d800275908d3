/* OpenSSL contexts: the gateway listener's, and the one every upstream connection verifies with. */
#ifndef SL_TLS_H
#define SL_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

/* A server context with the certificate chain and key (PEM files), TLS 1.2+, ALPN h2 and http/1.1.
 * NULL with a reason in err on failure. */
SSL_CTX *sl_tls_server_ctx(const char *cert_file, const char *key_file, char *err, size_t err_size);

/*
 * The upstream client context: the system CA bundle (or $SSL_CERT_FILE /
 * $SSL_CERT_DIR), peer verification on, and our own check of the host name
 * against the certificate at depth 0 — h2o 2.2.5 skips its own check when a
 * TLS 1.3 handshake ends with bytes pending (stack-notes.md).
 */
SSL_CTX *sl_tls_upstream_ctx(char *err, size_t err_size);

/*
 * The same, for upstreams named by an IP address, with TLS 1.3 at least:
 * on TLS 1.2 h2o runs its own name check, which knows only DNS names, so a
 * valid certificate for an address would be refused.
 */
SSL_CTX *sl_tls_upstream_ctx_for_address(char *err, size_t err_size);

#endif
