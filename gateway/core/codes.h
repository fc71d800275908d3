/*
 * The one table of message codes sluice can emit. Each row: the C constant,
 * the stable dotted slug clients match on, the HTTP status where the code is
 * an answer to a client (0 where it is not), and the English text. `{name}`
 * in a text is replaced by the message argument of that name.
 *
 * The enum, the lookups and the catalog file (build/gateway/message-codes.json)
 * are all produced from this table, so a code cannot be used without being
 * in the catalog.
 */
#ifndef SL_CODES_H
#define SL_CODES_H

#define SL_CODE_TABLE(X)                                                                                     \
    X(SL_CODE_CONFIG_FILE_UNREADABLE, "config.file_unreadable", 0, "cannot read {path}: {reason}")           \
    X(SL_CODE_CONFIG_FILE_TOO_LARGE, "config.file_too_large", 0, "{path} is larger than {max} bytes")        \
    X(SL_CODE_CONFIG_YAML_SYNTAX, "config.yaml_syntax", 0, "line {line}: YAML syntax error: {reason}")       \
    X(SL_CODE_CONFIG_UNKNOWN_FIELD, "config.unknown_field", 0,                                               \
      "{path} (line {line}): unknown field '{field}'{hint}")                                                 \
    X(SL_CODE_CONFIG_UNKNOWN_VALUE, "config.unknown_value", 0,                                               \
      "{path} (line {line}): unknown value '{value}', expected one of: {allowed}")                           \
    X(SL_CODE_CONFIG_WRONG_TYPE, "config.wrong_type", 0, "{path} (line {line}): expected {expected}")        \
    X(SL_CODE_CONFIG_OUT_OF_RANGE, "config.out_of_range", 0,                                                 \
      "{path} (line {line}): {value} is out of range {min}..{max}")                                          \
    X(SL_CODE_CONFIG_MISSING_FIELD, "config.missing_field", 0,                                               \
      "{path} (line {line}): '{field}' is required")                                                         \
    X(SL_CODE_CONFIG_DUPLICATE_KEY, "config.duplicate_key", 0,                                               \
      "{path} (line {line}): '{field}' is given twice (first on line {first_line})")                         \
    X(SL_CODE_CONFIG_DUPLICATE_NAME, "config.duplicate_name", 0,                                             \
      "{path} (line {line}): the name '{name}' is used twice (first on line {first_line})")                  \
    X(SL_CODE_CONFIG_DUPLICATE_CLIENT_KEY, "config.duplicate_client_key", 0,                                 \
      "{path} (line {line}): client '{name}' has the same key as client '{other}'")                          \
    X(SL_CODE_CONFIG_BAD_NAME, "config.bad_name", 0,                                                         \
      "{path} (line {line}): '{value}' is not a valid name (letters, digits, '.', '_', '-')")                \
    X(SL_CODE_CONFIG_UNKNOWN_PROVIDER, "config.unknown_provider", 0,                                         \
      "{path} (line {line}): no provider is named '{name}'")                                                 \
    X(SL_CODE_CONFIG_UNSET_VARIABLE, "config.unset_variable", 0,                                             \
      "{path} (line {line}): environment variable '{variable}' is not set")                                  \
    X(SL_CODE_CONFIG_BAD_VARIABLE, "config.bad_variable", 0,                                                 \
      "{path} (line {line}): '${' is not followed by a variable name and '}'")                               \
    X(SL_CODE_CONFIG_UNSUPPORTED_VERSION, "config.unsupported_version", 0,                                   \
      "{path} (line {line}): config version {value} is not supported (this sluice reads version 1)")         \
    X(SL_CODE_CONFIG_BAD_ADDRESS, "config.bad_address", 0,                                                   \
      "{path} (line {line}): '{value}' is not an IPv4 or IPv6 address")                                      \
    X(SL_CODE_CONFIG_BAD_CIDR, "config.bad_cidr", 0,                                                         \
      "{path} (line {line}): '{value}' is not an address range like 10.0.0.0/8")                             \
    X(SL_CODE_CONFIG_BAD_URL, "config.bad_url", 0,                                                           \
      "{path} (line {line}): '{value}' is not an http:// or https:// URL with a host")                       \
    X(SL_CODE_CONFIG_BAD_HEADER, "config.bad_header", 0,                                                     \
      "{path} (line {line}): '{value}' is not a valid header {part}")                                        \
    X(SL_CODE_CONFIG_UNKNOWN_TIMEZONE, "config.unknown_timezone", 0,                                         \
      "{path} (line {line}): '{value}' is not a known IANA time zone")                                       \
    X(SL_CODE_CONFIG_TLS_INCOMPLETE, "config.tls_incomplete", 0,                                             \
      "{path} (line {line}): TLS needs both 'cert' and 'key'")                                               \
    X(SL_CODE_CONFIG_FILE_MISSING, "config.file_missing", 0, "{path} (line {line}): cannot read '{value}'")  \
    X(SL_CODE_CONFIG_CONTROL_REMOTE_WITHOUT_TLS, "config.control.remote_without_tls", 0,                     \
      "{path} (line {line}): the control endpoint may bind to '{value}' (not loopback) only with tls")       \
    X(SL_CODE_CONFIG_LIMIT_MEASURE, "config.limit.measure", 0,                                               \
      "{path} (line {line}): a limit takes exactly one of requests, tokens, cost")                           \
    X(SL_CODE_CONFIG_LIMIT_EVERY, "config.limit.every", 0,                                                   \
      "{path} (line {line}): 'every' is only for per: minute or per: hour")                                  \
    X(SL_CODE_CONFIG_ROUTE_MEMBERS, "config.route.members", 0,                                               \
      "{path} (line {line}): a route takes exactly one of failover, load_balance, with at least one "        \
      "provider")                                                                                            \
    X(SL_CODE_CONFIG_ROUTE_DUPLICATE_MEMBER, "config.route.duplicate_member", 0,                             \
      "{path} (line {line}): '{name}' appears twice in this route")                                          \
    X(SL_CODE_CONFIG_NOT_FOR_PROTOCOL, "config.not_for_protocol", 0,                                         \
      "{path} (line {line}): '{field}' is only for protocol {protocol}")                                     \
    X(SL_CODE_CONFIG_PAUSE_ORDER, "config.pause_order", 0,                                                   \
      "{path} (line {line}): max_pause_secs ({max}) is less than pause_secs ({value})")                      \
    X(SL_CODE_CONFIG_ROUTE_MIXED_PROTOCOLS, "config.route.mixed_protocols", 0,                               \
      "{path} (line {line}): route mixes protocols ({protocols}); a client is only sent to upstreams of "    \
      "its own dialect")                                                                                     \
    X(SL_CODE_CONFIG_CLUSTER_BAD_REDIS_URL, "config.cluster.bad_redis_url", 0,                               \
      "{path} (line {line}): not a Redis URL: {reason}; expected "                                           \
      "redis://[[user]:password@]host[:port][/db] or unix://[[user]:password@]/path[?db=N]")                 \
    X(SL_CODE_CONFIG_STORE_BAD_URL, "config.store.bad_url", 0,                                               \
      "{path} (line {line}): not a PostgreSQL URL: {reason}; expected "                                      \
      "postgres://user:password@host[:port]/db[?sslmode=...], or ?host=/socket/dir for a unix socket")       \
    X(SL_CODE_CONFIG_STORE_PATH_AND_URL, "config.store.path_and_url", 0,                                     \
      "{path} (line {line}): store takes path (SQLite) or url (PostgreSQL), not both")                       \
    X(SL_CODE_CONFIG_CLUSTER_TLS_UNSUPPORTED, "config.cluster.tls_unsupported", 0,                           \
      "{path} (line {line}): rediss:// (Redis over TLS) is not supported: Debian's hiredis has no TLS; "     \
      "reach Redis through a local TLS tunnel such as stunnel, or over a unix socket (unix:///path)")        \
    X(SL_CODE_CONFIG_CLUSTER_BAD_NAME, "config.cluster.bad_name", 0,                                         \
      "{path} (line {line}): '{value}' is not a cluster name (1 to 64 letters, digits, '.', '_', '-')")      \
    X(SL_CODE_CONFIG_CLUSTER_BAD_INSTANCE, "config.cluster.bad_instance", 0,                                 \
      "{path} (line {line}): '{value}' is not an instance name (1 to 128 letters, digits, '.', '_', "        \
      "':', '-')")                                                                                           \
    X(SL_CODE_CONFIG_NO_PROVIDERS, "config.no_providers", 0,                                                 \
      "no providers are configured: every model request will answer 404")                                    \
    X(SL_CODE_CONFIG_RELOADED, "config.reloaded", 0, "configuration reloaded from {path}")                   \
    X(SL_CODE_CONFIG_REJECTED, "config.rejected", 0,                                                         \
      "configuration in {path} has {count} problem(s); keeping the running one")                             \
    X(SL_CODE_GW_UPSTREAM_CONNECT_FAILED, "gw.upstream.connect_failed", 502,                                 \
      "sluice: could not connect to {provider}: {reason}")                                                   \
    X(SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_HEAD, "gw.upstream.broken_before_head", 502,                         \
      "sluice: the connection to {provider} broke before its answer began")                                  \
    X(SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_CONTENT, "gw.upstream.broken_before_content", 502,                   \
      "sluice: the stream from {provider} broke before any content")                                         \
    X(SL_CODE_GW_UPSTREAM_STREAM_ENDED_EARLY, "gw.upstream.stream_ended_early", 502,                         \
      "sluice: the stream from {provider} ended before any content")                                         \
    X(SL_CODE_GW_UPSTREAM_IDLE_TIMEOUT, "gw.upstream.idle_timeout", 504,                                     \
      "sluice: {provider} sent nothing for {secs} s")                                                        \
    X(SL_CODE_GW_UPSTREAM_TOTAL_TIMEOUT, "gw.upstream.total_timeout", 504,                                   \
      "sluice: {provider} did not finish within {secs} s")                                                   \
    X(SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT, "gw.upstream.broken_after_content", 502,                     \
      "sluice: the stream from {provider} broke after content had been sent")                                \
    X(SL_CODE_GW_UPSTREAM_STATUS, "gw.upstream.status", 502, "sluice: {provider} answered {status}")         \
    X(SL_CODE_GW_UPSTREAM_STREAM_ERROR, "gw.upstream.stream_error", 502,                                     \
      "sluice: {provider} reported an error in the stream: {code}")                                          \
    X(SL_CODE_GW_UPSTREAM_QUOTA_USED_UP, "gw.upstream.quota_used_up", 0, "{provider} has used up its quota") \
    X(SL_CODE_GW_UPSTREAM_NO_BALANCE, "gw.upstream.no_balance", 0, "{provider} has no balance left")         \
    X(SL_CODE_GW_UPSTREAM_AUTH_REJECTED, "gw.upstream.auth_rejected", 0,                                     \
      "{provider} rejected its credentials")                                                                 \
    X(SL_CODE_GW_BREAKER_FAILURES, "gw.breaker.failures", 0,                                                 \
      "{provider} paused until {until} after {count} failures in a row")                                     \
    X(SL_CODE_GW_BREAKER_QUOTA_USED_UP, "gw.breaker.quota_used_up", 0,                                       \
      "{provider} paused until {until}: quota used up")                                                      \
    X(SL_CODE_GW_BREAKER_NO_BALANCE, "gw.breaker.no_balance", 0,                                             \
      "{provider} paused until {until}: no balance")                                                         \
    X(SL_CODE_GW_BREAKER_AUTH_REJECTED, "gw.breaker.auth_rejected", 0,                                       \
      "{provider} paused until the config changes: credentials rejected")                                    \
    X(SL_CODE_GW_BREAKER_RECOVERED, "gw.breaker.recovered", 0, "{provider} is healthy again")                \
    X(SL_CODE_GW_AUTH_MISSING_KEY, "gw.auth.missing_key", 401, "sluice: no gateway key was sent ({where})")  \
    X(SL_CODE_GW_AUTH_UNKNOWN_KEY, "gw.auth.unknown_key", 401, "sluice: the gateway key is not known")       \
    X(SL_CODE_GW_AUTH_LOCAL_ONLY, "gw.auth.local_only", 401,                                                 \
      "sluice: no client keys are configured, so only clients on this machine are served")                   \
    X(SL_CODE_GW_REQUEST_TOO_LARGE, "gw.request.too_large", 413,                                             \
      "sluice: the request body has {size} bytes; the limit is {max}")                                       \
    X(SL_CODE_GW_REQUEST_MALFORMED_JSON, "gw.request.malformed_json", 400,                                   \
      "sluice: the request body is not valid JSON: {detail}")                                                \
    X(SL_CODE_GW_REQUEST_BAD_PATH, "gw.request.bad_path", 400,                                               \
      "sluice: the request path holds bytes that cannot be sent upstream")                                   \
    X(SL_CODE_GW_REQUEST_NO_MODEL, "gw.request.no_model", 400, "sluice: the request names no model")         \
    X(SL_CODE_GW_REQUEST_MALFORMED_HTTP, "gw.request.malformed_http", 400,                                   \
      "sluice: the request is not valid HTTP: {detail}")                                                     \
    X(SL_CODE_GW_REQUEST_HEAD_TOO_LARGE, "gw.request.head_too_large", 431,                                   \
      "sluice: the request head is larger than {max} bytes or has more headers than sluice takes")           \
    X(SL_CODE_GW_REQUEST_BAD_EXPECTATION, "gw.request.bad_expectation", 417,                                 \
      "sluice: the request expects something other than 100-continue, which is all sluice understands")      \
    X(SL_CODE_GW_ROUTE_NO_MATCH, "gw.route.no_match", 404,                                                   \
      "sluice: no configured upstream serves model '{model}' in the {dialect} format")                       \
    X(SL_CODE_GW_DIALECT_NOT_SERVED, "gw.dialect.not_served", 501,                                           \
      "sluice: {what} is not served by this version of sluice")                                              \
    X(SL_CODE_GW_UPSTREAM_BUSY, "gw.upstream.busy", 503,                                                     \
      "sluice: {provider} already has {max} requests in flight (max_concurrent)")                            \
    X(SL_CODE_GW_UPSTREAM_UNUSABLE, "gw.upstream.unusable", 502,                                             \
      "sluice: the request could not be built for {provider}: {reason}")                                     \
    X(SL_CODE_GW_CLIENT_STALLED, "gw.client.stalled", 0,                                                     \
      "the client took nothing for {secs} s; the answer was abandoned")                                      \
    X(SL_CODE_GW_UPSTREAM_PAUSED, "gw.upstream.paused", 0,                                                   \
      "{provider} paused until {until} after {count} rate limits (429) in a row")                            \
    X(SL_CODE_GW_UPSTREAM_PROBING, "gw.upstream.probing", 0,                                                 \
      "{provider}: the rate-limit pause is over; one request probes it")                                     \
    X(SL_CODE_GW_UPSTREAM_PAUSED_MANUALLY, "gw.upstream.paused_manually", 0,                                 \
      "{provider} paused by an operator until {until}")                                                      \
    X(SL_CODE_GW_WAIT_RATE_LIMITED, "gw.wait.rate_limited", 429,                                             \
      "sluice: the upstreams for this model are rate limited and none can take the request before its "      \
      "deadline")                                                                                            \
    X(SL_CODE_GW_WAIT_WINDOW_FULL, "gw.wait.window_full", 429,                                               \
      "sluice: the usage windows of the upstreams for this model are full until after the request's "        \
      "deadline")                                                                                            \
    X(SL_CODE_GW_WAIT_USED_UP, "gw.wait.used_up", 429,                                                       \
      "sluice: the upstreams for this model have used up their usage period")                                \
    X(SL_CODE_GW_WAIT_MIXED, "gw.wait.mixed", 429,                                                           \
      "sluice: no upstream for this model can take the request before its deadline (rate limits, busy "      \
      "slots "                                                                                               \
      "or usage limits)")                                                                                    \
    X(SL_CODE_GW_LIMIT_TOO_LARGE, "gw.limit.too_large", 429,                                                 \
      "sluice: the request is larger than a whole usage limit of {subject} allows ({limit})")                \
    X(SL_CODE_GW_KEY_WINDOW_FULL, "gw.key.window_full", 429,                                                 \
      "sluice: this key's usage limit ({limit}) is reached until after the request's deadline")              \
    X(SL_CODE_GW_KEY_USED_UP, "gw.key.used_up", 429,                                                         \
      "sluice: this key has used up its usage limit ({limit}) until {until}")                                \
    X(SL_CODE_GW_UPSTREAM_WINDOW_FULL, "gw.upstream.window_full", 0,                                         \
      "{provider} has reached its usage limit ({limit}) until {until}")                                      \
    X(SL_CODE_GW_UPSTREAM_PERIOD_USED_UP, "gw.upstream.period_used_up", 0,                                   \
      "{provider} has used up its usage limit ({limit}) until {until}")                                      \
    X(SL_CODE_GW_WS_UPGRADE_REQUIRED, "gw.ws.upgrade_required", 426,                                         \
      "sluice: GET /v1/responses is the Responses WebSocket mode: send it as a WebSocket upgrade")           \
    X(SL_CODE_GW_WS_BAD_EVENT, "gw.ws.bad_event", 400,                                                       \
      "sluice: a WebSocket message must be a JSON object with \"type\": \"response.create\" ({detail})")     \
    X(SL_CODE_GW_WS_TURN_FAILED, "gw.ws.turn_failed", 502,                                                   \
      "sluice: the turn could not be completed ({detail})")                                                  \
    X(SL_CODE_GW_WAIT_OVERLOADED, "gw.wait.overloaded", 503,                                                 \
      "sluice: too many requests are already waiting; try again shortly")                                    \
    X(SL_CODE_GW_SAFE_MODE, "gw.safe_mode", 503,                                                             \
      "sluice: the configuration is invalid, so sluice is in safe mode and serves no requests")              \
    X(SL_CODE_GW_NOT_FOUND, "gw.not_found", 404, "sluice: no such endpoint: {method} {path}")                \
    X(SL_CODE_GW_SHUTTING_DOWN, "gw.shutting_down", 503, "sluice: the gateway is shutting down")             \
    X(SL_CODE_GW_CANCELLED, "gw.cancelled", 503, "sluice: the request was cancelled by an operator")         \
    X(SL_CODE_GW_CLUSTER_UNAVAILABLE, "gw.cluster.unavailable", 503,                                         \
      "sluice: the cluster's shared state (Redis) cannot be reached, and this request's limits need it")     \
    X(SL_CODE_GW_CLUSTER_DEGRADED, "gw.cluster.degraded", 0,                                                 \
      "cluster {cluster}: {reason}; this instance goes on with its share of each limit")                     \
    X(SL_CODE_CONTROL_AUTH_REJECTED, "control.auth.rejected", 0, "the control key is wrong")                 \
    X(SL_CODE_CONTROL_PROTOCOL_MISMATCH, "control.protocol.mismatch", 0,                                     \
      "protocol version mismatch: sluice speaks {ours}, the client {theirs}")                                \
    X(SL_CODE_CONTROL_HELLO_FIRST, "control.hello_first", 0, "the first message must be hello, not {kind}")  \
    X(SL_CODE_CONTROL_BAD_FRAME, "control.bad_frame", 0,                                                     \
      "control messages are msgpack maps in binary frames ({detail})")                                       \
    X(SL_CODE_CONTROL_BAD_MESSAGE, "control.bad_message", 0, "the message could not be read: {detail}")      \
    X(SL_CODE_CONTROL_TOO_LARGE, "control.too_large", 0, "the message is larger than {max} bytes")           \
    X(SL_CODE_CONTROL_NOT_A_REQUEST, "control.not_a_request", 0, "{kind} is not something a client sends")   \
    X(SL_CODE_CONTROL_UNKNOWN_PROVIDER, "control.unknown_provider", 0, "no provider is named '{name}'")      \
    X(SL_CODE_CONTROL_UNKNOWN_CLIENT, "control.unknown_client", 0, "no client key is named '{name}'")        \
    X(SL_CODE_CONTROL_UNKNOWN_REQUEST, "control.unknown_request", 0, "no request {id} is in flight")         \
    X(SL_CODE_CONTROL_BAD_LIMIT, "control.bad_limit", 0, "limits[{index}]: {reason}")                        \
    X(SL_CODE_CONTROL_CONFIG_CONFLICT, "control.config.conflict", 0,                                         \
      "the configuration changed (revision {current}, expected {expected}); get it again")                   \
    X(SL_CODE_CONTROL_CONFIG_REJECTED, "control.config.rejected", 0,                                         \
      "the configuration has {count} problem(s); nothing was changed")                                       \
    X(SL_CODE_CONTROL_CONFIG_SECRET_NOT_SHARED, "control.config.secret_not_shared", 0,                       \
      "in a cluster a new or changed secret must be an environment reference, which each instance reads "    \
      "from its own environment; nothing was changed")                                                       \
    X(SL_CODE_CONTROL_CONFIG_WRITE_FAILED, "control.config.write_failed", 0,                                 \
      "the change was applied but could not be written to {path}: {reason}")                                 \
    X(SL_CODE_CONTROL_HISTORY_FAILED, "control.history_failed", 0,                                           \
      "the request DB could not be read: {reason}")                                                          \
    X(SL_CODE_CONTROL_SAFE_MODE, "control.safe_mode", 0,                                                     \
      "sluice is in safe mode: fix the configuration first (get_config shows the problems)")

typedef enum {
#define SL_CODE_ENUM(name, slug, status, text) name,
    SL_CODE_TABLE(SL_CODE_ENUM)
#undef SL_CODE_ENUM
        SL_CODE_COUNT
} sl_code_t;

/* The dotted slug of a code, e.g. "gw.safe_mode". Never NULL for a valid code. */
const char *sl_code_slug(sl_code_t code);
/* The HTTP status answered with this code, or 0 when it is not a client answer. */
int sl_code_status(sl_code_t code);
/* The English text template with {name} placeholders. */
const char *sl_code_template(sl_code_t code);
/* Looks a slug up; returns 0 and sets *out on success, -1 when unknown. */
int sl_code_from_slug(const char *slug, sl_code_t *out);
/* Whether a slug is well-formed: dotted lowercase segments of [a-z0-9_], 2 or more segments. */
int sl_code_slug_is_well_formed(const char *slug);

#endif
