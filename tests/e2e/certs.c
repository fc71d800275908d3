#include "certs.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct test_ca {
    EVP_PKEY *key;
    X509 *cert;
    char cert_file[64];
    long next_serial; /* a verifier may reject two certificates of one issuer sharing a serial */
};

static void
fail(const char *what)
{
    fprintf(stderr, "test certificates: %s\n", what);
    ERR_print_errors_fp(stderr);
    abort();
}

static EVP_PKEY *
make_key(void)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    if (key == NULL)
        fail("EC key generation");
    return key;
}

/* Adds one extension in OpenSSL's config syntax; ctx carries issuer and subject for the key ids. */
static void
add_ext(X509 *cert, X509V3_CTX *ctx, int nid, const char *value)
{
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
    if (ext == NULL || X509_add_ext(cert, ext, -1) != 1)
        fail(value);
    X509_EXTENSION_free(ext);
}

/* Backdated an hour, so a verifier whose clock lags a little still accepts it; valid for a day. */
static X509 *
new_cert(const char *common_name, long serial, EVP_PKEY *key)
{
    X509 *cert = X509_new();
    X509_NAME *name = X509_NAME_new();
    if (cert == NULL || name == NULL ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)common_name, -1, -1, 0) !=
            1 ||
        X509_set_version(cert, X509_VERSION_3) != 1 ||
        ASN1_INTEGER_set(X509_get_serialNumber(cert), serial) != 1 ||
        X509_gmtime_adj(X509_getm_notBefore(cert), -3600) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600) == NULL ||
        X509_set_subject_name(cert, name) != 1 || X509_set_pubkey(cert, key) != 1)
        fail("certificate fields");
    X509_NAME_free(name);
    return cert;
}

static void
write_pem(char path[64], const void *obj, bool is_key)
{
    snprintf(path, 64, "/tmp/sluice-tls-XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL)
        fail("temporary file");
    int ok = is_key ? PEM_write_PrivateKey(f, (EVP_PKEY *)obj, NULL, NULL, 0, NULL, NULL)
                    : PEM_write_X509(f, (X509 *)obj);
    if (fclose(f) != 0 || ok != 1)
        fail("writing PEM");
}

test_ca_t *
ca_create(const char *common_name)
{
    test_ca_t *ca = calloc(1, sizeof(*ca));
    ca->key = make_key();
    ca->next_serial = 2;
    ca->cert = new_cert(common_name, 1, ca->key);
    if (X509_set_issuer_name(ca->cert, X509_get_subject_name(ca->cert)) != 1)
        fail("issuer");
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, ca->cert, ca->cert, NULL, NULL, 0);
    add_ext(ca->cert, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(ca->cert, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_ext(ca->cert, &ctx, NID_subject_key_identifier, "hash");
    if (X509_sign(ca->cert, ca->key, EVP_sha256()) == 0)
        fail("signing the CA");
    write_pem(ca->cert_file, ca->cert, false);
    return ca;
}

const char *
ca_cert_file(const test_ca_t *ca)
{
    return ca->cert_file;
}

pem_pair_t
ca_issue(test_ca_t *ca, const char *san)
{
    EVP_PKEY *key = make_key();
    /* The CN is never consulted once a subjectAltName exists; it only names the file in a debugger. */
    X509 *cert = new_cert("sluice test leaf", ca->next_serial++, key);
    if (X509_set_issuer_name(cert, X509_get_subject_name(ca->cert)) != 1)
        fail("issuer");
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, ca->cert, cert, NULL, NULL, 0);
    add_ext(cert, &ctx, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(cert, &ctx, NID_key_usage, "critical,digitalSignature");
    add_ext(cert, &ctx, NID_ext_key_usage, "serverAuth");
    add_ext(cert, &ctx, NID_subject_key_identifier, "hash");
    add_ext(cert, &ctx, NID_authority_key_identifier, "keyid:always");
    add_ext(cert, &ctx, NID_subject_alt_name, san);
    if (X509_sign(cert, ca->key, EVP_sha256()) == 0)
        fail("signing a leaf");
    pem_pair_t p;
    write_pem(p.cert_file, cert, false);
    write_pem(p.key_file, key, true);
    X509_free(cert);
    EVP_PKEY_free(key);
    return p;
}

void
pem_pair_remove(pem_pair_t *p)
{
    if (p->cert_file[0] != '\0')
        unlink(p->cert_file);
    if (p->key_file[0] != '\0')
        unlink(p->key_file);
    memset(p, 0, sizeof(*p));
}

void
ca_free(test_ca_t *ca)
{
    if (ca == NULL)
        return;
    unlink(ca->cert_file);
    X509_free(ca->cert);
    EVP_PKEY_free(ca->key);
    free(ca);
}
