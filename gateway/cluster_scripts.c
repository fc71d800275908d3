/* The scripts' SHA-1s (cluster_scripts.h). */
#include "cluster_scripts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "core/xalloc.h"

const char *
sl_script_sha(sl_script_shas_t *shas, const char *script, size_t len, bool constant)
{
    for (size_t i = 0; constant && i < shas->n; i++) {
        if (shas->shas[i].source == script)
            return shas->shas[i].hex;
    }
    for (size_t i = 0; i < shas->n; i++) {
        if (shas->shas[i].len == len && memcmp(shas->shas[i].text, script, len) == 0) {
            if (constant)
                shas->shas[i].source = script;
            return shas->shas[i].hex;
        }
    }
    if (shas->n == sizeof(shas->shas) / sizeof(shas->shas[0]))
        return NULL;
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)script, len, digest);
    struct sl_script_sha *e = &shas->shas[shas->n++];
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
        snprintf(e->hex + 2 * i, 3, "%02x", digest[i]);
    e->text = sl_xmalloc(len);
    memcpy(e->text, script, len);
    e->len = len;
    e->source = constant ? script : NULL;
    return e->hex;
}

void
sl_script_shas_dispose(sl_script_shas_t *shas)
{
    for (size_t i = 0; i < shas->n; i++)
        free(shas->shas[i].text);
    shas->n = 0;
}
