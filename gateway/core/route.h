/*
 * Routing (behaviour.md §1.1, §1.4, §2): which dialect a request path
 * speaks, and which upstreams may serve a model, in which order, with the
 * model name each should be sent. Pure: the config and a counter come in,
 * plain data goes out; the shell owns the counters and the affinity table.
 */
#ifndef SL_ROUTE_H
#define SL_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/outcome.h"
#include "core/types.h"

/* ---- globs ---------------------------------------------------------------- */

/*
 * Whether s matches the glob pattern: `*` matches any run of bytes (also
 * none), `?` exactly one byte, every other byte itself (case-sensitive; no
 * escapes or classes). Linear in practice, O(|pattern| * |s|) at worst.
 */
bool sl_glob_match(const char *pattern, const char *s);

/* ---- endpoints ------------------------------------------------------------ */

typedef enum {
    SL_OP_GENERATE,     /* messages, chat completions, responses, generateContent, converse */
    SL_OP_COUNT_TOKENS, /* Anthropic count_tokens, Responses input_tokens, Gemini countTokens */
    SL_OP_LIST_MODELS,  /* GET /v1/models, shared by the dialects */
    SL_OP_WEBSOCKET,    /* GET /v1/responses: Responses turns over a WebSocket upgrade */
} sl_op_t;

/* Longest model name a path may carry (a Bedrock inference-profile ARN fits easily). */
#define SL_ENDPOINT_MODEL_MAX 512

typedef struct {
    /*
     * The client's dialect. For SL_OP_LIST_MODELS it is SL_DIALECT_COUNT: the
     * answer's shape follows the anthropic-version header (behaviour.md §9).
     */
    sl_dialect_t dialect;
    sl_op_t op;
    /* The path alone asks for a stream (streamGenerateContent, converse-stream, WebSocket turns). */
    bool stream_by_path;
    /* The model named by the path (Gemini, Bedrock), percent-decoded; "" when the body names it. */
    char model[SL_ENDPOINT_MODEL_MAX];
    /* The query (after '?'), kept aside to be passed on: Claude Code's ?beta=true, Gemini's ?alt=sse. */
    const char *query; /* points into the path given; NULL when there is none */
    size_t query_len;
} sl_endpoint_t;

/*
 * Recognises one of the paths of formats.md from the method and the request
 * target (path plus optional query; neither need be NUL-terminated).
 * Returns true and fills *out when it is one; returns false, leaving *out
 * untouched, for any other method or path (the shell answers 404
 * gw.not_found), including a model in the path that is empty, holds a raw
 * '/', a bad %-escape, a control byte, or is longer than
 * SL_ENDPOINT_MODEL_MAX - 1 bytes. out->query points into path.
 */
bool sl_endpoint_parse(const char *method, size_t method_len, const char *path, size_t path_len,
                       sl_endpoint_t *out);

/* ---- candidates ----------------------------------------------------------- */

typedef struct {
    size_t provider; /* index into config->providers */
    /*
     * The model name to send: the provider's model_map target (owned by the
     * config) or the client's model (the caller's string); both must outlive
     * the list.
     */
    const char *model;
    sl_skip_t skip;
} sl_candidate_t;

/* sl_route_select's `route` when the config has no routes section. */
#define SL_ROUTE_BY_MODELS ((size_t)-1)

/*
 * The ordered candidates for a model requested in a dialect.
 *
 * With routes: the first route whose `match` glob matches the model. Its
 * members in listed order (failover), or, for load_balance, starting at
 * the member the counter picks by weight among the members that can be
 * tried (disabled and not-offered members are never picked, so they are
 * not charged), the rest following in listed order, wrapping round. Every
 * member is in the list; those that cannot serve carry their skip reason
 * (disabled before not_offered).
 *
 * Without routes: every provider whose protocol is the dialect and which
 * offers the model, in config order (disabled ones listed as disabled).
 * Providers of other protocols are not candidates at all here: nobody
 * routed the model to them, and listing them would put a skipped attempt
 * for every other dialect's provider on every request.
 *
 * A provider offers a model when a `models` glob matches it or its
 * model_map has it as a key (a mapping is an explicit offer). The name sent
 * is the model_map target when there is one, else the model itself.
 *
 * counter: any value, e.g. a per-route atomic the shell increments once per
 * request; over any run of W consecutive values (W = the sum of the
 * weights of the members that can be tried) each such member is picked
 * first exactly `weight` times, spread evenly rather than in runs.
 *
 * out must have room for config->n_providers entries (a route never lists
 * a provider twice). Returns true and sets *n and *route (an index into
 * config->routes, or SL_ROUTE_BY_MODELS) when a route matched, or, without
 * routes, when at least one provider of the dialect offers the model.
 * Returns false when nothing matches (the shell answers 404
 * gw.route.no_match); out, *n and *route are then untouched.
 */
bool sl_route_select(const sl_config_t *config, sl_dialect_t dialect, const char *model, uint64_t counter,
                     sl_candidate_t *out, size_t *n, size_t *route);

/*
 * The candidates a request goes on to after a context-length request error
 * (behaviour.md §1.6): route's context_fallback in listed order, each with
 * its model_map target (else the client's model). They serve whatever their
 * `models` globs say (the operator named them for this); a disabled one is
 * skipped as disabled, one of another protocol as not_offered. out must
 * have room for config->n_providers entries. Returns how many were written:
 * 0 when route has none, or is SL_ROUTE_BY_MODELS.
 */
size_t sl_route_context_fallback(const sl_config_t *config, size_t route, sl_dialect_t dialect,
                                 const char *model, sl_candidate_t *out);

#endif
