/* The rows' text forms, shared by the SQLite and PostgreSQL stores (store.h). */
#include "store.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

/* ---- names stored in the DB: the protocol's spellings ---------------------- */

static const char *const dialect_names[SL_DIALECT_COUNT] = {"anthropic", "openai_chat", "openai_responses",
                                                            "gemini", "bedrock"};
static const char *const bucket_kind_names[SL_BUCKET_KIND_COUNT] = {"provider", "client"};

const char *
sl_store_dialect_name(sl_dialect_t d)
{
    return dialect_names[d];
}

const char *
sl_store_bucket_kind_name(sl_bucket_kind_t k)
{
    return bucket_kind_names[k];
}

int
sl_store_bucket_kind_parse(const char *s)
{
    for (int i = 0; s != NULL && i < SL_BUCKET_KIND_COUNT; i++) {
        if (strcmp(bucket_kind_names[i], s) == 0)
            return i;
    }
    return -1;
}

bool
sl_store_lone_hop(const sl_request_row_t *r)
{
    if (r->n_attempts != 1 || r->provider == NULL)
        return false;
    const sl_attempt_row_t *a = &r->attempts[0];
    return a->outcome == SL_HOP_SERVED && a->status == r->status && a->status != 0 && a->provider != NULL &&
           strcmp(a->provider, r->provider) == 0 && a->error.code == NULL && a->retry == 0 &&
           a->backoff_ms == SL_ROW_ABSENT && a->skipped == SL_SKIP_NONE && !a->has_reason && !a->hedge;
}

char *
sl_store_args_json(const sl_row_msg_t *m)
{
    if (m->code == NULL || m->nargs == 0)
        return NULL;
    json_t *obj = json_object();
    for (size_t i = 0; i < m->nargs; i++) {
        /* An upstream's text may not be UTF-8, which JSON cannot carry: U+FFFD stands in for it. */
        json_t *v = json_string(m->args[i].value);
        json_object_set_new(obj, m->args[i].name, v != NULL ? v : json_string("\xef\xbf\xbd"));
    }
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    return s;
}

/* ---- decoding ------------------------------------------------------------------ */

static char *
str_or_null(const char *s)
{
    return s != NULL ? sl_xstrdup(s) : NULL;
}

/* For NOT NULL columns: the protocol's required strings are never NULL. */
static char *
str_or_empty(const char *s)
{
    return sl_xstrdup(s != NULL ? s : "");
}

/* Sets *v and returns true when the column is not NULL. Stored numbers are never negative. */
static bool
num_u64(const char *s, uint64_t *v)
{
    if (s == NULL)
        return false;
    long long x = strtoll(s, NULL, 10);
    *v = x > 0 ? (uint64_t)x : 0;
    return true;
}

static uint32_t
num_u32(const char *s, bool *has)
{
    uint64_t v = 0;
    bool present = num_u64(s, &v);
    if (has != NULL)
        *has = present;
    return v <= UINT32_MAX ? (uint32_t)v : UINT32_MAX;
}

/* A stored boolean: SQLite's 0/1, PostgreSQL's t/f. */
static bool
truth(const char *s)
{
    return s != NULL && (strcmp(s, "1") == 0 || strcmp(s, "t") == 0 || strcmp(s, "true") == 0);
}

/* The Msg stored as code, text and args (a JSON object); NULL when code is. */
static sl_proto_msg_t *
decode_msg(const char *code, const char *text, const char *args)
{
    if (code == NULL)
        return NULL;
    sl_proto_msg_t *m = sl_xcalloc(1, sizeof *m);
    m->code = str_or_empty(code);
    m->text = str_or_empty(text);
    json_t *obj = args != NULL ? json_loads(args, 0, NULL) : NULL;
    if (json_is_object(obj) && json_object_size(obj) > 0) {
        m->args = sl_xcalloc(json_object_size(obj), sizeof *m->args);
        const char *name;
        json_t *value;
        json_object_foreach(obj, name, value)
        {
            if (json_is_string(value)) {
                m->args[m->args_len].key = sl_xstrdup(name);
                m->args[m->args_len].value = sl_xstrdup(json_string_value(value));
                m->args_len++;
            }
        }
    }
    json_decref(obj);
    return m;
}

bool
sl_store_decode_row(const char *const c[SL_RC_COUNT], sl_proto_history_row_t *row)
{
    *row = (sl_proto_history_row_t){0};
    sl_proto_dialect_t dialect;
    /* The stored names are the protocol's slugs, so the generated parsers read them back. */
    if (c[SL_RC_DIALECT] == NULL || sl_proto_dialect_parse(c[SL_RC_DIALECT], &dialect) != 0)
        return false;
    row->dialect = dialect;
    num_u64(c[SL_RC_ID], &row->id);
    num_u64(c[SL_RC_AT], &row->at_ms);
    row->client = str_or_empty(c[SL_RC_CLIENT]);
    row->model = str_or_empty(c[SL_RC_MODEL]);
    row->provider = str_or_null(c[SL_RC_PROVIDER]);
    row->status = num_u32(c[SL_RC_STATUS], NULL);
    num_u64(c[SL_RC_DURATION], &row->duration_ms);
    row->has_ttft_ms = num_u64(c[SL_RC_TTFT], &row->ttft_ms);
    sl_proto_usage_t u = {0};
    if (num_u64(c[SL_RC_USAGE_INPUT], &u.input)) {
        num_u64(c[SL_RC_USAGE_OUTPUT], &u.output);
        num_u64(c[SL_RC_USAGE_CACHE_READ], &u.cache_read);
        num_u64(c[SL_RC_USAGE_CACHE_WRITE], &u.cache_write);
        u.estimated = truth(c[SL_RC_USAGE_ESTIMATED]);
        row->usage = sl_xmalloc(sizeof *row->usage);
        *row->usage = u;
    }
    row->has_cost_micros = num_u64(c[SL_RC_COST], &row->cost_micros);
    return true;
}

bool
sl_store_decode_attempt(const char *const c[SL_AC_COUNT], sl_proto_history_row_t *row)
{
    sl_proto_outcome_t outcome;
    if (c[SL_AC_OUTCOME] == NULL || sl_proto_outcome_parse(c[SL_AC_OUTCOME], &outcome) != 0)
        return false; /* a view cannot hold an outcome it has no name for */
    /* Attempts come one at a time: grow by doubling from 4. */
    size_t n = row->attempts_len;
    if (n == 0 || (n >= 4 && (n & (n - 1)) == 0))
        row->attempts = sl_xrealloc(row->attempts, (n < 4 ? 4 : n * 2) * sizeof *row->attempts);
    sl_proto_attempt_view_t *a = &row->attempts[row->attempts_len++];
    *a = (sl_proto_attempt_view_t){.outcome = outcome};
    a->provider = str_or_empty(c[SL_AC_PROVIDER]);
    a->model = str_or_null(c[SL_AC_MODEL]);
    a->status = num_u32(c[SL_AC_STATUS], &a->has_status);
    a->error = decode_msg(c[SL_AC_ERROR_CODE], c[SL_AC_ERROR_TEXT], c[SL_AC_ERROR_ARGS]);
    num_u64(c[SL_AC_MS], &a->ms);
    a->has_pause_ms = num_u64(c[SL_AC_PAUSE], &a->pause_ms);
    a->retry = num_u32(c[SL_AC_RETRY], &a->has_retry);
    a->has_backoff_ms = num_u64(c[SL_AC_BACKOFF], &a->backoff_ms);
    a->has_skipped =
        c[SL_AC_SKIPPED] != NULL && sl_proto_serve_skip_parse(c[SL_AC_SKIPPED], &a->skipped) == 0;
    a->has_reason = c[SL_AC_REASON] != NULL && sl_proto_step_reason_parse(c[SL_AC_REASON], &a->reason) == 0;
    a->hedge = a->has_hedge = c[SL_AC_HEDGE] != NULL && strcmp(c[SL_AC_HEDGE], "1") == 0;
    return true;
}

bool
sl_store_parse_cursor(const char *s, int64_t *at_ms, int64_t *row)
{
    int64_t v[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        const char *start = s;
        for (; *s >= '0' && *s <= '9'; s++) {
            int d = *s - '0';
            if (v[k] > (INT64_MAX - d) / 10)
                return false;
            v[k] = v[k] * 10 + d;
        }
        if (s == start || *s != (k == 0 ? '.' : '\0'))
            return false;
        s++;
    }
    *at_ms = v[0];
    *row = v[1];
    return true;
}

uint32_t
sl_store_history_limit(const sl_recorder_history_query_t *q)
{
    uint32_t limit = q->limit == 0 ? SL_HISTORY_DEFAULT_LIMIT : q->limit;
    return limit > SL_HISTORY_MAX_LIMIT ? SL_HISTORY_MAX_LIMIT : limit;
}

void
sl_store_free_rows(sl_proto_history_row_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_proto_history_row_free(&rows[i]);
    free(rows);
}
