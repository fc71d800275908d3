/*
 * Test certificates made at test time with the OpenSSL 3 API, so no key
 * material lives in the repository: a self-signed CA and leaves it signs,
 * written as PEM to temporary files. Keys are EC P-256 (fast to make).
 */
#ifndef TEST_CERTS_H
#define TEST_CERTS_H

typedef struct test_ca test_ca_t;

typedef struct {
    char cert_file[64]; /* PEM certificate */
    char key_file[64];  /* PEM private key, unencrypted */
} pem_pair_t;

/* Makes a CA named common_name and writes its certificate (ca_cert_file). Aborts on failure.
 * The caller owns the result: free it with ca_free, which also removes the file. */
test_ca_t *ca_create(const char *common_name);
/* The PEM file holding the CA certificate; valid until ca_free. */
const char *ca_cert_file(const test_ca_t *ca);
/* Issues a server certificate signed by ca whose subjectAltName is san in OpenSSL's
 * config syntax (e.g. "IP:127.0.0.1,DNS:localhost"). Aborts on failure.
 * The files are the caller's: remove them with pem_pair_remove. */
pem_pair_t ca_issue(test_ca_t *ca, const char *san);
/* Removes both files of p; a zeroed pair is left alone. */
void pem_pair_remove(pem_pair_t *p);
/* Frees ca and removes its certificate file; NULL is allowed. */
void ca_free(test_ca_t *ca);

#endif
