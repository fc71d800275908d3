/*
 * The configuration: YAML (config.md) -> one immutable, validated
 * sl_config_t. Parsing and validation are pure: the text comes in, the
 * environment is reached only through sl_config_env_t, and every problem is
 * reported (with its path and line) instead of stopping at the first.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cidr.h"
#include "core/msg.h"

typedef enum {
    SL_DIALECT_ANTHROPIC,
    SL_DIALECT_OPENAI_CHAT,
    SL_DIALECT_OPENAI_RESPONSES,
    SL_DIALECT_GEMINI,
    SL_DIALECT_BEDROCK,
    SL_DIALECT_COUNT
} sl_dialect_t;

/* "anthropic", "openai-chat", … as written in the config. */
const char *sl_dialect_slug(sl_dialect_t d);

typedef enum { SL_PER_MINUTE, SL_PER_HOUR, SL_PER_DAY, SL_PER_WEEK, SL_PER_MONTH } sl_limit_per_t;
typedef enum { SL_MEASURE_REQUESTS, SL_MEASURE_TOKENS, SL_MEASURE_COST } sl_limit_measure_t;

typedef struct {
    sl_limit_per_t per;
    uint32_t every; /* rolling units for minute/hour; always 1 for calendar periods */
    sl_limit_measure_t measure;
    int64_t amount; /* requests, tokens, or micro-dollars for cost */
} sl_limit_t;

typedef struct {
    char *bind;               /* an IP literal */
    uint16_t port;            /* 0 = an ephemeral port, chosen at start */
    char *tls_cert, *tls_key; /* both NULL = plaintext */
    sl_cidr_t *allow_from;
    size_t n_allow_from; /* 0 = every address */
    char *key;           /* control endpoint only; NULL = generated at first start */
} sl_listen_t;

typedef struct {
    char *name, *value;
} sl_pair_t;

typedef struct {
    char *name;
    char *key;
    sl_limit_t *limits;
    size_t n_limits;
} sl_client_t;

typedef struct {
    char *name;
    sl_dialect_t protocol;
    char *base_url;
    char *key;     /* NULL = none */
    char **models; /* globs */
    size_t n_models;
    sl_pair_t *model_map; /* client model name -> upstream model name */
    size_t n_model_map;
    sl_pair_t *headers;
    size_t n_headers;
    uint32_t max_concurrent; /* 0 = unlimited */
    sl_limit_t *limits;
    size_t n_limits;
    bool disabled;
    char *region; /* bedrock */
    char *aws_access_key_id, *aws_secret_access_key,
        *aws_session_token; /* bedrock SigV4; NULL = from AWS_* env */
} sl_provider_t;

typedef enum { SL_ROUTE_FAILOVER, SL_ROUTE_LOAD_BALANCE } sl_route_kind_t;

typedef struct {
    size_t provider; /* index into sl_config_t.providers */
    uint32_t weight; /* load_balance only; 1 by default */
} sl_route_member_t;

typedef struct {
    char *match; /* model glob */
    sl_route_kind_t kind;
    sl_route_member_t *members;
    size_t n_members;
} sl_route_t;

typedef struct {
    uint32_t wait_secs;
    uint32_t failures_to_pause;
    uint32_t pause_secs, max_pause_secs;
    uint32_t rate_limit_max_pause_secs;
    uint32_t no_balance_pause_secs;
    uint32_t quota_pause_secs;
    uint32_t idle_timeout_secs, connect_timeout_secs, total_timeout_secs;
} sl_failover_t;

typedef struct {
    char *model_glob;
    /* micro-dollars per million tokens */
    int64_t input, output, cache_read, cache_write;
} sl_price_t;

typedef struct sl_config {
    char *source_path; /* NULL for the embedded default */
    uint32_t version;
    sl_listen_t gateway, control;
    sl_client_t *clients;
    size_t n_clients;
    sl_provider_t *providers;
    size_t n_providers;
    bool has_routes; /* false: every provider whose models match is a candidate */
    sl_route_t *routes;
    size_t n_routes;
    sl_failover_t failover;
    char *timezone; /* NULL = the system's zone */
    sl_price_t *pricing;
    size_t n_pricing;
    char *store_path;
    uint32_t retention_days;
    bool redact;
    uint64_t max_body_bytes, max_waiting_bytes;
    uint32_t shutdown_grace_secs;
    struct sl_arena *arena; /* owns every string and array above */
} sl_config_t;

/* How the loader reaches the world; tests pass their own. */
typedef struct {
    /* The value of an environment variable, or NULL when unset. */
    const char *(*getenv)(void *ctx, const char *name);
    /* Whether an IANA zone name is known (e.g. /usr/share/zoneinfo has it). */
    bool (*zone_exists)(void *ctx, const char *name);
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
 * used in messages (NULL for the embedded default). The caller owns the result
 * and frees it with sl_config_result_free.
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
