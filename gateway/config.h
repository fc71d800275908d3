/*
 * The configuration loader: YAML (config.md) -> one immutable, validated
 * sl_config_t (its plain data is core/types.h). Parsing and validation are
 * pure: the text comes in, the environment is reached only through
 * sl_config_env_t, and every problem is reported (with its path and line)
 * instead of stopping at the first.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/msg.h"
#include "core/types.h"

/* How the loader reaches the world; tests pass their own. */
typedef struct {
    /* The value of an environment variable, or NULL when unset. */
    const char *(*getenv)(void *ctx, const char *name);
    /*
     * The bytes of a zone's TZif file (caller frees), or NULL when there is
     * no such file: name is an IANA name ("Europe/Berlin", under
     * /usr/share/zoneinfo or $TZDIR) or an absolute path; NULL names the
     * system's zone (/etc/localtime).
     */
    char *(*read_zone)(void *ctx, const char *name, size_t *len);
    /* Whether a file (TLS cert/key) can be read. */
    bool (*file_readable)(void *ctx, const char *path);
    void *ctx;
} sl_config_env_t;

/* The process environment and file system. */
const sl_config_env_t *sl_config_env_system(void);

typedef struct {
    /*
     * Always set (except on YAML syntax errors that stop the parser early, when
     * it holds the defaults): the parts that validated, defaults elsewhere. Use
     * it as the running config only when errors is empty; in safe mode its
     * listen sections are used when no error lies under them.
     */
    sl_config_t *config;
    sl_msgs_t errors;   /* every problem; each has path and line args where it has a place */
    sl_msgs_t warnings; /* accepted, but probably not what was meant */
} sl_config_result_t;

/*
 * Parses and validates YAML text. source_path is recorded in the config and
 * used in messages (NULL for the embedded default). The zone is read and
 * parsed here, through env: `timezone`'s, or the system's (TZ when it names
 * a zone or is a POSIX TZ string, else /etc/localtime, else UTC). The caller
 * owns the result and frees it with sl_config_result_free.
 */
sl_config_result_t sl_config_parse(const char *yaml, size_t len, const char *source_path,
                                   const sl_config_env_t *env);

/* Reads a file and parses it; an unreadable or oversized file is an error in the result. */
sl_config_result_t sl_config_load_file(const char *path, const sl_config_env_t *env);

/*
 * The embedded default of config.md: 127.0.0.1:8080 / :8081 and one provider
 * per dialect whose key is in the environment. Returns its YAML (caller frees).
 */
char *sl_config_default_yaml(const sl_config_env_t *env);

/* Whether any error lies at path or under it (e.g. "listen.gateway"). */
bool sl_config_errors_under(const sl_msgs_t *errors, const char *path);

/*
 * A one-line summary: providers, routes, clients, addresses. The ports shown
 * are the ones given (those listened on, which --port and --control-port may
 * have moved from the file's). Caller frees.
 */
char *sl_config_summary(const sl_config_t *config, uint16_t gateway_port, uint16_t control_port);

void sl_config_result_free(sl_config_result_t *result);
/* Frees a config taken out of a result (set result.config = NULL before freeing the result). */
void sl_config_free(sl_config_t *config);

/* Bounds on the file the loader reads. */
#define SL_CONFIG_MAX_FILE_BYTES (1024 * 1024)

#endif
