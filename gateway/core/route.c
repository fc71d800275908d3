/* Globs, endpoint recognition and candidate lists (see route.h). */
#include "route.h"

#include "text.h"

#include <string.h>

/* ---- globs ---------------------------------------------------------------- */

bool
sl_glob_match(const char *pattern, const char *s)
{
    /*
     * Greedy with one backtrack point: on a mismatch, the last `*` absorbs
     * one more byte. Earlier stars never need revisiting, so no recursion.
     */
    const char *star = NULL, *resume = NULL;
    while (*s != '\0') {
        if (*pattern == '*') {
            star = pattern++;
            resume = s;
        } else if (*pattern != '\0' && (*pattern == '?' || *pattern == *s)) {
            pattern++;
            s++;
        } else if (star != NULL) {
            pattern = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*pattern == '*')
        pattern++;
    return *pattern == '\0';
}

/* ---- endpoints ------------------------------------------------------------ */

/* How the rest of a path after a row's prefix is read. */
typedef enum {
    SHAPE_EXACT,        /* nothing may follow the prefix */
    SHAPE_MODEL_ACTION, /* {model}{sep}{action}, split at the last sep */
} shape_t;

/* The Gemini API serves all three and the SDKs differ (formats.md); the hop keeps the client's version. */
static const char *const gemini_versions[] = {"/v1beta", "/v1", "/v1alpha"};

static const struct {
    const char *method, *prefix;
    shape_t shape;
    char sep;
    const char *action;
    sl_dialect_t dialect;
    sl_op_t op;
    bool stream;
    bool versioned; /* the prefix follows one of gemini_versions */
} endpoints[] = {
    {"POST", "/v1/messages", SHAPE_EXACT, 0, NULL, SL_DIALECT_ANTHROPIC, SL_OP_GENERATE, false, false},
    {"POST", "/v1/messages/count_tokens", SHAPE_EXACT, 0, NULL, SL_DIALECT_ANTHROPIC, SL_OP_COUNT_TOKENS,
     false, false},
    {"POST", "/v1/chat/completions", SHAPE_EXACT, 0, NULL, SL_DIALECT_OPENAI_CHAT, SL_OP_GENERATE, false,
     false},
    {"POST", "/v1/responses", SHAPE_EXACT, 0, NULL, SL_DIALECT_OPENAI_RESPONSES, SL_OP_GENERATE, false,
     false},
    {"POST", "/v1/responses/input_tokens", SHAPE_EXACT, 0, NULL, SL_DIALECT_OPENAI_RESPONSES,
     SL_OP_COUNT_TOKENS, false, false},
    {"GET", "/v1/responses", SHAPE_EXACT, 0, NULL, SL_DIALECT_OPENAI_RESPONSES, SL_OP_WEBSOCKET, true, false},
    {"GET", "/v1/models", SHAPE_EXACT, 0, NULL, SL_DIALECT_COUNT, SL_OP_LIST_MODELS, false, false},
    {"POST", "/models/", SHAPE_MODEL_ACTION, ':', "generateContent", SL_DIALECT_GEMINI, SL_OP_GENERATE, false,
     true},
    {"POST", "/models/", SHAPE_MODEL_ACTION, ':', "streamGenerateContent", SL_DIALECT_GEMINI, SL_OP_GENERATE,
     true, true},
    {"POST", "/models/", SHAPE_MODEL_ACTION, ':', "countTokens", SL_DIALECT_GEMINI, SL_OP_COUNT_TOKENS, false,
     true},
    {"POST", "/model/", SHAPE_MODEL_ACTION, '/', "converse", SL_DIALECT_BEDROCK, SL_OP_GENERATE, false,
     false},
    {"POST", "/model/", SHAPE_MODEL_ACTION, '/', "converse-stream", SL_DIALECT_BEDROCK, SL_OP_GENERATE, true,
     false},
};

/*
 * Percent-decodes a path segment into out (NUL-terminated). False for an
 * empty result, a raw '/', a malformed escape, a control byte after
 * decoding (a model name is text), or a result that does not fit.
 */
static bool
decode_segment(const char *p, size_t n, char out[SL_ENDPOINT_MODEL_MAX])
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '/')
            return false;
        if (c == '%') {
            int hi = i + 2 < n ? sl_hex_digit(p[i + 1]) : -1, lo = i + 2 < n ? sl_hex_digit(p[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return false;
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        }
        if (c < 0x20 || c == 0x7F || at + 1 >= SL_ENDPOINT_MODEL_MAX)
            return false;
        out[at++] = (char)c;
    }
    out[at] = '\0';
    return at > 0;
}

static bool
span_is(const char *p, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(p, lit, n) == 0;
}

/* The length of the Gemini version that path starts with (before its next '/'), or 0. */
static size_t
version_len(const char *path, size_t plen)
{
    for (size_t i = 0; i < sizeof(gemini_versions) / sizeof(gemini_versions[0]); i++) {
        size_t n = strlen(gemini_versions[i]);
        if (plen > n && memcmp(path, gemini_versions[i], n) == 0 && path[n] == '/')
            return n;
    }
    return 0;
}

bool
sl_endpoint_parse(const char *method, size_t method_len, const char *path, size_t path_len,
                  sl_endpoint_t *out)
{
    const char *q = memchr(path, '?', path_len);
    size_t plen = q != NULL ? (size_t)(q - path) : path_len;
    char model[SL_ENDPOINT_MODEL_MAX];
    size_t version = version_len(path, plen);
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
        size_t skip = endpoints[i].versioned ? version : 0;
        size_t pre = skip + strlen(endpoints[i].prefix);
        if (!span_is(method, method_len, endpoints[i].method) || (endpoints[i].versioned && version == 0) ||
            plen < pre || memcmp(path + skip, endpoints[i].prefix, pre - skip) != 0)
            continue;
        model[0] = '\0';
        if (endpoints[i].shape == SHAPE_EXACT) {
            if (plen != pre)
                continue;
        } else {
            const char *rest = path + pre, *sep = NULL;
            for (const char *c = rest; c < path + plen; c++) {
                if (*c == endpoints[i].sep)
                    sep = c;
            }
            if (sep == NULL || !span_is(sep + 1, (size_t)(path + plen - sep - 1), endpoints[i].action) ||
                !decode_segment(rest, (size_t)(sep - rest), model))
                continue;
        }
        out->dialect = endpoints[i].dialect;
        out->op = endpoints[i].op;
        out->stream_by_path = endpoints[i].stream;
        memcpy(out->model, model, strlen(model) + 1);
        out->query = q != NULL ? q + 1 : NULL;
        out->query_len = q != NULL ? path_len - plen - 1 : 0;
        return true;
    }
    return false;
}

/* ---- candidates ----------------------------------------------------------- */

/* The model_map target for model, or NULL when the provider does not rename it. */
static const char *
mapped_name(const sl_provider_t *p, const char *model)
{
    for (size_t i = 0; i < p->n_model_map; i++) {
        if (strcmp(p->model_map[i].name, model) == 0)
            return p->model_map[i].value;
    }
    return NULL;
}

static bool
offers(const sl_provider_t *p, const char *model)
{
    if (mapped_name(p, model) != NULL)
        return true;
    for (size_t i = 0; i < p->n_models; i++) {
        if (sl_glob_match(p->models[i], model))
            return true;
    }
    return false;
}

static sl_candidate_t
candidate(const sl_config_t *config, size_t provider, sl_dialect_t dialect, const char *model)
{
    const sl_provider_t *p = &config->providers[provider];
    const char *mapped = mapped_name(p, model);
    sl_skip_t skip = SL_SKIP_NONE;
    if (p->disabled)
        skip = SL_SKIP_DISABLED;
    else if (p->protocol != dialect || !offers(p, model))
        skip = SL_SKIP_NOT_OFFERED;
    return (sl_candidate_t){provider, mapped != NULL ? mapped : model, skip};
}

static uint64_t
gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/*
 * A stride near total / golden ratio that is coprime with total: stepping
 * by it visits every slot of [0, total) once per cycle, and consecutive
 * steps land about 0.618 of the circle apart, so each member's block of
 * slots is visited evenly spread (the three-distance theorem) instead of
 * in one run.
 */
static uint64_t
golden_stride(uint64_t total)
{
    uint64_t p = (uint64_t)(((unsigned __int128)total * 2654435769u) >> 32); /* 2^32 / golden ratio */
    while (p > 1 && gcd(p, total) != 1)
        p--;
    return p > 0 ? p : 1;
}

/*
 * Which member of a load_balance route goes first: the member owning slot
 * (counter mod W) * stride mod W, members owning `weight` consecutive slots
 * in listed order, among the members that can be tried. Equal weights use
 * stride 1, the plain rotation an operator expects from round-robin.
 * Returns r->n_members when no member can be tried.
 *
 * Not nginx's smooth weighted round-robin: that needs per-route state
 * updated under a lock, or an O(W * members) replay from the counter per
 * request; a stride over the slot circle needs only the shared counter and
 * gives the same exact shares per cycle, about as evenly spread.
 */
static size_t
weighted_start(const sl_route_t *r, const sl_candidate_t *c, uint64_t counter)
{
    uint64_t total = 0;
    bool equal = true;
    uint32_t first_weight = 0;
    for (size_t m = 0; m < r->n_members; m++) {
        if (c[m].skip != SL_SKIP_NONE)
            continue;
        if (first_weight == 0)
            first_weight = r->members[m].weight;
        equal &= r->members[m].weight == first_weight;
        total += r->members[m].weight;
    }
    if (total == 0)
        return r->n_members;
    uint64_t stride = equal ? 1 : golden_stride(total);
    uint64_t slot = (uint64_t)(((unsigned __int128)(counter % total) * stride) % total);
    for (size_t m = 0;; m++) {
        if (c[m].skip != SL_SKIP_NONE)
            continue;
        if (slot < r->members[m].weight)
            return m;
        slot -= r->members[m].weight;
    }
}

static void
reverse(sl_candidate_t *c, size_t lo, size_t hi)
{
    for (; lo + 1 < hi; lo++, hi--) {
        sl_candidate_t t = c[lo];
        c[lo] = c[hi - 1];
        c[hi - 1] = t;
    }
}

static size_t
select_in_route(const sl_config_t *config, const sl_route_t *r, sl_dialect_t dialect, const char *model,
                uint64_t counter, sl_candidate_t *out)
{
    for (size_t m = 0; m < r->n_members; m++)
        out[m] = candidate(config, r->members[m].provider, dialect, model);
    if (r->kind != SL_ROUTE_LOAD_BALANCE)
        return r->n_members;
    size_t start = weighted_start(r, out, counter);
    if (start == 0 || start == r->n_members)
        return r->n_members;
    /* Rotate left by start, in place: three reversals. */
    reverse(out, 0, start);
    reverse(out, start, r->n_members);
    reverse(out, 0, r->n_members);
    return r->n_members;
}

bool
sl_route_select(const sl_config_t *config, sl_dialect_t dialect, const char *model, uint64_t counter,
                sl_candidate_t *out, size_t *n, size_t *route)
{
    if (config->has_routes) {
        for (size_t i = 0; i < config->n_routes; i++) {
            const sl_route_t *r = &config->routes[i];
            if (!sl_glob_match(r->match, model))
                continue;
            *n = select_in_route(config, r, dialect, model, counter, out);
            *route = i;
            return true;
        }
        return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < config->n_providers; i++) {
        const sl_provider_t *p = &config->providers[i];
        if (p->protocol == dialect && offers(p, model))
            out[k++] = candidate(config, i, dialect, model);
    }
    if (k == 0)
        return false;
    *n = k;
    *route = SL_ROUTE_BY_MODELS;
    return true;
}

size_t
sl_route_context_fallback(const sl_config_t *config, size_t route, sl_dialect_t dialect, const char *model,
                          sl_candidate_t *out)
{
    if (route >= config->n_routes)
        return 0;
    const sl_route_t *r = &config->routes[route];
    for (size_t m = 0; m < r->n_context_fallback; m++) {
        size_t provider = r->context_fallback[m].provider;
        const sl_provider_t *p = &config->providers[provider];
        const char *mapped = mapped_name(p, model);
        sl_skip_t skip = p->disabled              ? SL_SKIP_DISABLED
                         : p->protocol != dialect ? SL_SKIP_NOT_OFFERED
                                                  : SL_SKIP_NONE;
        out[m] = (sl_candidate_t){provider, mapped != NULL ? mapped : model, skip};
    }
    return r->n_context_fallback;
}
