/*
 * What a request DB does for the recorder (recorder.h), one implementation
 * per kind: SQLite (store_sqlite.c, the embedded default) and PostgreSQL
 * (store_pg.c, shared by several instances). The recorder owns the queue,
 * the usage map, the schedule and the counters; a store only writes what it
 * is handed and reads back. Every write runs on the recorder's writer thread,
 * one at a time; the readers run on whatever thread asks, on connections of
 * their own.
 *
 * The rows' text forms (the protocol's slugs, the JSON of a message's args)
 * are shared here, so that both stores write and read the same values.
 */
#ifndef SL_STORE_H
#define SL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recorder.h"

/* One usage bucket's increment, as the recorder hands them over; name borrowed. */
typedef struct {
    sl_bucket_kind_t kind;
    const char *name;
    int64_t minute, requests, tokens, cost_micros;
} sl_usage_delta_t;

typedef struct sl_store sl_store_t;

typedef struct {
    /*
     * Writes rows (already redacted) all or none: true when they are stored
     * (or, PostgreSQL, kept in its spool to be stored), false with a reason
     * when they are lost.
     */
    bool (*write_rows)(sl_store_t *s, sl_request_row_t *const *rows, size_t n, char *why, size_t why_size);
    /*
     * Sets rows (already redacted) aside, all or none, to be written later
     * in their turn, without waiting on a server: what the recorder does with
     * a batch while its queue is more than half full. True when they are
     * kept; false with a reason, nothing kept, when there is no room
     * (PostgreSQL: its spool is at its cap). NULL when the store has nowhere
     * quicker than its database (SQLite: a local commit).
     */
    bool (*set_aside_rows)(sl_store_t *s, sl_request_row_t *const *rows, size_t n, char *why,
                           size_t why_size);
    /*
     * Adds deltas to their buckets, all or none. seq numbers the recorder's
     * flushes (1, 2, ...): a store that may see one flush twice (a replayed
     * spool) applies each seq once.
     */
    bool (*write_usage)(sl_store_t *s, const sl_usage_delta_t *d, size_t n, uint64_t seq, char *why,
                        size_t why_size);
    /* One retention chunk; *swept gets the request rows deleted. */
    sl_sweep_result_t (*sweep)(sl_store_t *s, int64_t wall_ms, uint32_t retention_days, uint64_t *swept,
                               char *why, size_t why_size);
    /*
     * Work of its own (reconnect, replay a spool), called once tend_at has
     * come. NULL, both: the store has none.
     */
    void (*tend)(sl_store_t *s, int64_t now_ms);
    /*
     * When the store next wants tend called, on the monotonic clock;
     * INT64_MAX for never. Asked after every call above: a write that finds
     * the server gone sets it.
     */
    int64_t (*tend_at)(sl_store_t *s);
    /* Its state now; any thread. */
    void (*status)(sl_store_t *s, sl_store_status_t *out);
    void (*close)(sl_store_t *s);
} sl_store_ops_t;

struct sl_store {
    const sl_store_ops_t *ops;
    /*
     * Set by the recorder before its writer starts: a store whose write
     * waits on its server calls this every SL_STORE_WAIT_SLICE_MS of the
     * wait, on the writer's thread, so that rows can be set aside meanwhile.
     * It never calls back into the store but for set_aside_rows.
     */
    void (*while_waiting)(void *ctx);
    void *while_waiting_ctx;
};

#define SL_STORE_WAIT_SLICE_MS 10

/* The SQLite store at path (recorder.h's sl_recorder_open says what opening does); NULL with a reason. */
sl_store_t *sl_store_sqlite_open(const char *path, const sl_recorder_options_t *o, char *err,
                                 size_t err_size);
int sl_store_sqlite_history(const char *path, const sl_recorder_history_query_t *q,
                            sl_proto_history_row_t **rows, size_t *n_rows, char **next_cursor, char *err,
                            size_t err_size);
int64_t sl_store_sqlite_load_usage(const char *path, int64_t since_ms, sl_usage_cb cb, void *ctx, char *err,
                                   size_t err_size);

/*
 * The PostgreSQL store at where->url. Opening does no IO but the spool's:
 * the writer connects (and migrates the schema) on its first write or tend,
 * and until it can, rows wait in the spool. NULL with a reason when the
 * spool cannot be opened.
 */
sl_store_t *sl_store_pg_open(const sl_store_where_t *where, const sl_recorder_options_t *o, char *err,
                             size_t err_size);
int sl_store_pg_history(const sl_store_where_t *where, const sl_recorder_history_query_t *q,
                        sl_proto_history_row_t **rows, size_t *n_rows, char **next_cursor, char *err,
                        size_t err_size);
int64_t sl_store_pg_load_usage(const sl_store_where_t *where, int64_t since_ms, sl_usage_cb cb, void *ctx,
                               char *err, size_t err_size);

/* ---- the rows' text forms, shared by both stores ----------------------------------------------- */

const char *sl_store_dialect_name(sl_dialect_t d);
const char *sl_store_bucket_kind_name(sl_bucket_kind_t k);
/* -1 for a name this code does not know (a newer sluice's). */
int sl_store_bucket_kind_parse(const char *s);

/*
 * True when the row's one attempt is the hop that served it and says nothing
 * the row does not (same provider and status, no error, retry, backoff, skip,
 * reason or hedge): the SQLite store then keeps that hop's ms, model and
 * pause in the request's own row, and its `attempts` view reads them back.
 */
bool sl_store_lone_hop(const sl_request_row_t *r);

/* The JSON object of a message's args ({"name": "value", ...}); NULL without code or args. Caller frees. */
char *sl_store_args_json(const sl_row_msg_t *m);

/*
 * A HistoryRow's fields as text columns, NULL for SQL NULL, in the order of
 * sl_store_row_col_t: the readers of both stores select these columns and
 * decode them here. Returns false, leaving *row zeroed, for a dialect this
 * code does not know.
 */
typedef enum {
    SL_RC_ID,
    SL_RC_AT,
    SL_RC_CLIENT,
    SL_RC_DIALECT,
    SL_RC_MODEL,
    SL_RC_PROVIDER,
    SL_RC_STATUS,
    SL_RC_DURATION,
    SL_RC_TTFT,
    SL_RC_USAGE_INPUT,
    SL_RC_USAGE_OUTPUT,
    SL_RC_USAGE_CACHE_READ,
    SL_RC_USAGE_CACHE_WRITE,
    SL_RC_USAGE_ESTIMATED,
    SL_RC_COST,
    SL_RC_COUNT
} sl_store_row_col_t;
bool sl_store_decode_row(const char *const cols[SL_RC_COUNT], sl_proto_history_row_t *row);

/* An AttemptView's columns, the same way. */
typedef enum {
    SL_AC_PROVIDER,
    SL_AC_MODEL,
    SL_AC_OUTCOME,
    SL_AC_STATUS,
    SL_AC_ERROR_CODE,
    SL_AC_ERROR_TEXT,
    SL_AC_ERROR_ARGS,
    SL_AC_MS,
    SL_AC_PAUSE,
    SL_AC_RETRY,
    SL_AC_BACKOFF,
    SL_AC_SKIPPED,
    SL_AC_REASON,
    SL_AC_HEDGE,
    SL_AC_COUNT
} sl_store_attempt_col_t;
/* Appends the attempt to row; false (row untouched) for an outcome this code has no name for. */
bool sl_store_decode_attempt(const char *const cols[SL_AC_COUNT], sl_proto_history_row_t *row);

/* "<started_at_ms>.<row>" of a page's last row: two decimal numbers within int64, nothing else. */
bool sl_store_parse_cursor(const char *s, int64_t *at_ms, int64_t *row);
/* The page size a query asks for, clamped. */
uint32_t sl_store_history_limit(const sl_recorder_history_query_t *q);
void sl_store_free_rows(sl_proto_history_row_t *rows, size_t n);

#endif
