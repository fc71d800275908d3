/*
 * The configuration as plain data (config.md): what every part of sluice
 * reads, built by the shell's loader (gateway/config.h: YAML -> a validated
 * sl_config_t) or by hand in tests. No function here: core reads these
 * structs and never learns where they came from.
 */
#ifndef SL_TYPES_H
#define SL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cidr.h"
#include "core/tz.h"

typedef enum {
    SL_DIALECT_ANTHROPIC,
    SL_DIALECT_OPENAI_CHAT,
    SL_DIALECT_OPENAI_RESPONSES,
    SL_DIALECT_GEMINI,
    SL_DIALECT_BEDROCK,
    SL_DIALECT_COUNT
} sl_dialect_t;

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
    bool
        metrics_open; /* control endpoint only: GET /metrics without the key (listen.control.metrics: open) */
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
    /* bedrock SigV4: the file's `aws`, else the AWS_* variables at load; NULL = none */
    char *aws_access_key_id, *aws_secret_access_key, *aws_session_token;
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
    /* On a context-length request error, the request goes on to these instead (behaviour.md §1.6); weight
     * unused. */
    sl_route_member_t *context_fallback;
    size_t n_context_fallback;
    /* The route's own failover.first_token_secs (behaviour.md §4), when has_first_token_secs. */
    bool has_first_token_secs;
    uint32_t first_token_secs;
} sl_route_t;

typedef struct {
    uint32_t wait_secs;
    uint32_t failures_to_pause;
    uint32_t pause_secs, max_pause_secs;
    uint32_t rate_limit_max_pause_secs;
    uint32_t no_balance_pause_secs;
    uint32_t quota_pause_secs;
    uint32_t idle_timeout_secs, connect_timeout_secs, total_timeout_secs;
    uint32_t first_token_secs; /* 0: no first-token hedge; else its delay (behaviour.md §4) */
} sl_failover_t;

typedef struct {
    char *model_glob;
    /* micro-dollars per million tokens */
    int64_t input, output, cache_read, cache_write;
} sl_price_t;

/* What an instance does while Redis cannot be reached (cluster.md "Redis down"). */
typedef enum { SL_REDIS_DOWN_LOCAL, SL_REDIS_DOWN_CLOSED } sl_redis_down_t;

/*
 * `cluster:` (cluster.md "Config"): where the shared state lives. `redis` is
 * kept as its parts, ${VAR}s expanded; the defaults stand when the section
 * is absent or has problems.
 */
typedef struct {
    bool enabled; /* a valid cluster: section is present; false: one instance on its own */
    /* TCP: a name or an IP literal (IPv6 without its brackets); NULL with a unix socket */
    char *redis_host;
    uint16_t redis_port;   /* TCP; 6379 by default */
    char *redis_unix_path; /* unix:///path: an absolute path; NULL over TCP */
    /* NULL: none; redis://user:pass@ gives both, redis://:pass@ only the password */
    char *redis_user, *redis_password;
    uint32_t redis_db; /* /N (unix: ?db=N), 0..15; 0 by default */
    char *name;        /* the key prefix, 1..64 of [A-Za-z0-9_.-]; "sluice" by default */
    /* 1..128 of [A-Za-z0-9_.:-], unique per instance; NULL: the caller derives hostname:gateway-port */
    char *instance;
    uint32_t timeout_ms;             /* one Redis command, 1..10000; 50 by default */
    sl_redis_down_t when_redis_down; /* local by default */
} sl_cluster_config_t;

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
    char *timezone; /* as written; NULL = the system's zone */
    sl_tz_t *tz;    /* the zone of calendar periods and of times shown: timezone's or the system's; owned
                       (not in the arena), never NULL in a loaded config */
    sl_price_t *pricing;
    size_t n_pricing;
    char *store_path; /* SQLite's file, without store_url */
    char *store_url;  /* PostgreSQL's, ${VAR}s expanded (so it may hold a password); NULL = SQLite */
    char *spool_path; /* with store_url: rows wait here while PostgreSQL is down (cluster.md) */
    uint64_t spool_max_bytes;
    uint32_t retention_days;
    bool redact;
    uint64_t max_body_bytes, max_waiting_bytes;
    uint32_t shutdown_grace_secs;
    sl_cluster_config_t cluster;
    /* OpenTelemetry traces (observability.md): NULL otlp_endpoint = off. */
    char *otlp_endpoint;
    char *service_name;        /* resource attribute service.name */
    uint32_t trace_sample_ppm; /* share of new traces recorded, in millionths (sample: 1.0 = 1000000) */
    struct sl_arena *arena;    /* owns every string and array above but tz */
} sl_config_t;

#endif
