/*
 * The request DB (behaviour.md §10, §7): a row per ended request with its
 * attempts, and per-minute usage buckets that survive restarts and request
 * retention. It lives in one SQLite file (the default) or in PostgreSQL
 * (store.url, cluster.md), shared by several instances: store.h is the
 * interface both implement.
 *
 * One writer thread owns the write connection. The data plane only hands it
 * rows through a bounded queue and usage through an in-memory map, both under
 * one mutex that is never held across IO, so a locked DB or a full disk slows
 * nothing but the writer: the rows it cannot write are counted as dropped
 * (sl_recorder_stats) and the shell reports them with a RowsDropped event.
 * Every submitted row is written exactly once or counted as dropped once.
 *
 * Nothing stored carries a credential: the writer strips a `key` query
 * parameter from paths and runs sl_scrub_secrets over every free-text field.
 *
 * The scheduling rules (when to write a batch, flush usage, sweep old rows)
 * and the retention cut-offs are pure functions of a state and a time, at the
 * end of this header.
 */
#ifndef SL_RECORDER_H
#define SL_RECORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "core/msg.h"
#include "core/next_step.h"
#include "core/outcome.h"
#include "sl_proto.h"

/* The schema versions this code writes: SQLite's PRAGMA user_version, PostgreSQL's sluice_schema. */
#define SL_RECORDER_SCHEMA_VERSION 4
#define SL_PG_SCHEMA_VERSION       2

/* Rows waiting for the writer: at 20 000 requests/s, a database that stalls for 1.5 s (a checkpoint) */
#define SL_RECORDER_DEFAULT_QUEUE     32768
#define SL_RECORDER_DEFAULT_BATCH     512
#define SL_RECORDER_DEFAULT_BUSY_MS   1000
#define SL_RECORDER_DEFAULT_RETENTION 30
#define SL_RECORDER_BATCH_DELAY_MS    50      /* longest a row waits for its batch */
#define SL_RECORDER_USAGE_FLUSH_MS    1000    /* usage buckets reach the DB this often */
#define SL_RECORDER_SWEEP_EVERY_MS    3600000 /* a retention pass at most once an hour */
#define SL_RECORDER_DROPS_TOLD_MS     1000    /* rows a full queue refused are told of at most this often */
#define SL_RECORDER_SWEEP_RETRY_MS    60000   /* after a failed sweep step */
#define SL_RECORDER_SWEEP_CHUNK       500     /* rows deleted per transaction */
#define SL_RECORDER_BUCKET_KEEP_DAYS  40      /* usage buckets outlive any calendar month */
#define SL_RECORDER_MAX_BUCKETS       65536   /* pending usage buckets held in memory */
#define SL_HISTORY_DEFAULT_LIMIT      100
#define SL_HISTORY_MAX_LIMIT          500
#define SL_SPOOL_DEFAULT_MAX_BYTES    (256ULL << 20)

/* PostgreSQL's rows per transaction: each commit waits for its WAL to reach the disk (25-55 ms a batch of
 * 512, measured on the benchmarks' VM), so a writer that fell behind catches up by larger batches. */
#define SL_RECORDER_PG_BATCH 4096

/* Optional numbers in rows: absent is -1 for durations, 0 for status and retry. */
#define SL_ROW_ABSENT (-1)

/* Whose usage a bucket counts: the protocol's LimitTarget. */
typedef enum { SL_BUCKET_PROVIDER, SL_BUCKET_CLIENT, SL_BUCKET_KIND_COUNT } sl_bucket_kind_t;

typedef struct {
    char *name, *value; /* owned */
} sl_row_arg_t;

/* A stored Msg {code, args, text}; code NULL = no message. Every string is owned. */
typedef struct {
    char *code;
    char *text;
    sl_row_arg_t *args;
    size_t nargs;
} sl_row_msg_t;

/* One AttemptView. Strings owned; model NULL = absent. */
typedef struct {
    char *provider;
    char *model;
    sl_hop_outcome_t outcome;
    uint32_t status; /* 0 = no head arrived */
    sl_row_msg_t error;
    int64_t ms;
    int64_t pause_ms; /* SL_ROW_ABSENT = not queued */
    uint32_t retry;   /* 1-based round; 0 = first try */
    int64_t backoff_ms;
    sl_skip_t skipped;
    bool has_reason;         /* a failed hop: why the request went on as it did */
    sl_step_reason_t reason; /* read only with has_reason */
    bool hedge;              /* a first-token hedge's hop (behaviour.md §4) */
} sl_attempt_row_t;

typedef struct {
    uint64_t input, output, cache_read, cache_write;
    bool estimated;
} sl_row_usage_t;

/*
 * One ended request: what a HistoryRow needs, plus the outcome, path, error
 * and ttfb kept for the operator. Every string and the attempts array are
 * owned by the row; provider NULL = none served it.
 */
typedef struct {
    uint64_t id;
    int64_t started_at_ms;
    char *client;
    sl_dialect_t dialect;
    char *model;
    char *provider;
    char *path;
    uint32_t status;
    sl_row_outcome_t outcome;
    sl_row_msg_t error;
    int64_t duration_ms;
    int64_t ttfb_ms, ttft_ms; /* SL_ROW_ABSENT = none */
    bool has_usage;
    sl_row_usage_t usage;
    int64_t cost_micros; /* SL_ROW_ABSENT = unknown */
    sl_attempt_row_t *attempts;
    size_t n_attempts;
    /* The row's own allocation ends here (sl_request_row_new_packed's strings lie before it); recorder.c's.
     */
    const char *block_end;
    char *text_next; /* where sl_request_row_text copies next */
} sl_request_row_t;

/*
 * A zeroed row with n_attempts zeroed attempts and every optional number set
 * to absent. The caller fills it (strings with sl_xstrdup) and owns it until
 * sl_recorder_submit. Never NULL.
 */
sl_request_row_t *sl_request_row_new(size_t n_attempts);
/*
 * The same row in one allocation, with its attempts and text_bytes for its
 * strings (sl_request_row_text): a request ends with one malloc for its row,
 * and the writer frees it with one free. A string the caller sets otherwise
 * (sl_xstrdup) is owned on its own, as in any row, and freed so.
 */
sl_request_row_t *sl_request_row_new_packed(size_t n_attempts, size_t text_bytes);
/* A NUL-terminated copy of s[0..n) in a packed row's text; n + 1 bytes of it must be left. */
char *sl_request_row_text(sl_request_row_t *row, const char *s, size_t n);
/* Frees the row, its attempts and every string; NULL is ignored. */
void sl_request_row_free(sl_request_row_t *row);
/* A copy of msg (code slug, args, text) for a row; the caller owns the result. */
sl_row_msg_t sl_row_msg_from(const sl_msg_t *msg);
/* Frees the message's strings and zeroes it. */
void sl_row_msg_clear(sl_row_msg_t *msg);

/* Where the request DB is: a SQLite file, or PostgreSQL with its spool. Strings borrowed. */
typedef struct {
    const char *path;     /* SQLite; used when url is NULL */
    const char *url;      /* PostgreSQL: a libpq URI, secrets expanded */
    const char *instance; /* the name rows are stored under (PostgreSQL) */
    const char *spool_path;
    uint64_t spool_max_bytes; /* 0 = SL_SPOOL_DEFAULT_MAX_BYTES */
} sl_store_where_t;

typedef enum { SL_STORE_SQLITE, SL_STORE_POSTGRES } sl_store_kind_t;

/* How the request DB is doing, for /healthz, get_providers and StoreChanged. */
typedef struct {
    sl_store_kind_t kind;
    bool degraded;    /* rows cannot reach the DB now: they wait in the spool */
    char reason[256]; /* why, masked; "" when not degraded */
    uint64_t spooled_rows, spool_bytes;
} sl_store_status_t;

/* Zero fields take the SL_RECORDER_DEFAULT_* values. */
typedef struct {
    size_t queue_capacity;    /* rows waiting for the writer */
    size_t batch_max;         /* rows per transaction */
    uint32_t busy_timeout_ms; /* how long a write waits for another connection's lock */
    uint32_t retention_days;  /* request rows older than this are deleted (store.retention_days) */
    uint64_t max_db_bytes;    /* 0 = no cap; past it writes fail like a full disk */
    /*
     * Optional: told of rows counted as dropped because their batch could not
     * be written (a locked DB past busy_timeout_ms, a full disk, a full
     * spool), with the store's reason, and of rows a full queue refused (the
     * writer fell behind), at once and then at most once per
     * SL_RECORDER_DROPS_TOLD_MS. Called on the writer thread, with no lock held.
     */
    void (*on_dropped)(void *ctx, uint64_t rows, const char *reason);
    void *on_dropped_ctx;
    /* Optional: told when the store turns degraded or ok again; on the writer thread, no lock held. */
    void (*on_state)(void *ctx, const sl_store_status_t *now);
    void *on_state_ctx;
} sl_recorder_options_t;

typedef struct {
    uint64_t written;       /* rows committed */
    uint64_t dropped;       /* rows lost: queue full, failed write, bad enum, or closing */
    uint64_t usage_dropped; /* usage buckets lost: map full, or a failed flush at flush/close */
    uint64_t swept;         /* request rows deleted by retention */
    char last_error[256];   /* the store's reason for the latest failed write; "" if none */
} sl_recorder_stats_t;

typedef struct sl_recorder sl_recorder_t;

/*
 * Opens the request DB and starts the writer thread. opts may be NULL.
 *
 * SQLite (where->url NULL): the file at where->path is created (or
 * tightened) to mode 0600 before SQLite touches it, WAL journal,
 * synchronous=NORMAL, the schema migrated up to SL_RECORDER_SCHEMA_VERSION.
 * A DB with a newer schema is refused, its contents untouched.
 *
 * PostgreSQL: only the spool file is opened here (created 0600; rows a
 * previous run left in it are written first). The writer connects, and
 * creates or migrates the schema under an advisory lock, in the background;
 * while it cannot, rows go to the spool and the store is degraded.
 *
 * Returns the recorder, or NULL with a reason in err; nothing is left open
 * on failure, though a file created before the failure stays.
 */
sl_recorder_t *sl_recorder_open(const sl_store_where_t *where, const sl_recorder_options_t *opts, char *err,
                                size_t err_size);

/*
 * Hands a row to the writer; never waits for IO. Takes ownership of row in
 * every case: returns true when it was queued, false when it was dropped
 * (queue full, the recorder closing, or an enum out of range), freed and
 * counted.
 */
bool sl_recorder_submit(sl_recorder_t *rec, sl_request_row_t *row);

/*
 * Adds to the usage bucket (kind, name, epoch minute); the writer upserts the
 * accumulated buckets about once a second. name is copied. Returns false, and
 * counts a dropped bucket, when SL_RECORDER_MAX_BUCKETS other buckets are
 * already pending, the recorder is closing, or kind is out of range.
 */
bool sl_recorder_add_usage(sl_recorder_t *rec, sl_bucket_kind_t kind, const char *name, int64_t minute,
                           int64_t requests, int64_t tokens, int64_t cost_micros);

/* Copies the counters into *out. */
void sl_recorder_stats(sl_recorder_t *rec, sl_recorder_stats_t *out);

/* The store's state now. */
void sl_recorder_status(sl_recorder_t *rec, sl_store_status_t *out);

/*
 * Blocks until the writer has nothing due: every row queued is written (or
 * spooled) or dropped, pending usage is flushed (or, on failure, dropped and counted),
 * and a due retention pass has run. Not for the data plane.
 */
void sl_recorder_flush(sl_recorder_t *rec);

/*
 * Writes or drops everything queued, flushes usage, joins the writer and
 * closes the DB; frees rec. Rows submitted from other threads meanwhile are
 * dropped and counted. NULL is ignored.
 */
void sl_recorder_close(sl_recorder_t *rec);

/* ---- reading back, each call on its own connection ------------------------ */

/* Which rows a `history` request wants: the fields of the protocol's `history` message. */
typedef struct {
    uint64_t since_ms; /* rows started at or after */
    uint32_t limit;    /* 0 = SL_HISTORY_DEFAULT_LIMIT; capped at SL_HISTORY_MAX_LIMIT */
    const sl_proto_history_filter_t *filter; /* borrowed; NULL, and each absent field, do not filter */
    const char *cursor;                      /* a previous page's next_cursor; NULL = the newest rows */
} sl_recorder_history_query_t;

/*
 * Reads one page of the request DB at where as HistoryRows with their
 * attempts (in hop order), newest first (started_at_ms, then insertion order,
 * descending); from PostgreSQL, every instance's rows, each naming its
 * instance. Filters match exactly. Called from the control thread: it opens
 * a connection of its own (read-only for SQLite), never the writer's.
 *
 * Returns 0 with *rows an array of *n_rows rows (NULL when there are none)
 * and *next_cursor an opaque string to ask for the next page with, NULL
 * unless older matching rows exist. The caller owns both: each row goes to
 * sl_proto_history_row_free, then free(*rows) and free(*next_cursor); they
 * have the shape of the `ok` reply's rows and next_cursor, which may take
 * them over. A DB file that does not exist yet, or that has no schema yet,
 * is 0 rows.
 *
 * Names stored by a newer sluice are skipped, not fatal: an unknown skip
 * reason leaves the attempt's skipped absent, an unknown hop outcome leaves
 * the attempt out, an unknown dialect leaves the row out (a page may then
 * hold fewer than limit rows with a next_cursor still set).
 *
 * Returns -1 with a reason in err ("bad cursor" for a cursor not shaped like
 * a next_cursor; an unreadable DB or another schema version), *rows NULL,
 * *n_rows 0 and *next_cursor NULL.
 */
int sl_recorder_history(const sl_store_where_t *where, const sl_recorder_history_query_t *q,
                        sl_proto_history_row_t **rows, size_t *n_rows, char **next_cursor, char *err,
                        size_t err_size);

/* One persisted usage bucket; name is valid only during the call. */
typedef void (*sl_usage_cb)(void *ctx, sl_bucket_kind_t kind, const char *name, int64_t minute,
                            int64_t requests, int64_t tokens, int64_t cost_micros);

/*
 * Calls cb for every usage bucket whose minute contains or follows since_ms,
 * oldest first, to rebuild limit windows at start; from PostgreSQL, this
 * instance's buckets (all its runs summed). Returns the number of buckets,
 * or -1 with a reason in err (then cb may have been called for some).
 */
int64_t sl_recorder_load_usage(const sl_store_where_t *where, int64_t since_ms, sl_usage_cb cb, void *ctx,
                               char *err, size_t err_size);

/* ---- the rules, pure ----------------------------------------------------- */

/* What the writer knows when it decides; times on one monotonic clock. */
typedef struct {
    size_t queued;            /* rows waiting */
    size_t capacity;          /* rows the queue holds at most */
    int64_t oldest_ms;        /* when the oldest waiting row arrived */
    bool usage_pending;       /* buckets added since the last flush */
    int64_t usage_flushed_ms; /* when usage was last flushed */
    int64_t sweep_at_ms;      /* when the next retention step may run */
    int64_t tend_at_ms;       /* when the store wants its own work done (store.h); INT64_MAX = never */
    bool flush_wanted;        /* a flush or close is waiting: do everything due now */
    bool closing;             /* no retention while closing */
} sl_recorder_state_t;

/*
 * The writer is behind when its queue is more than half full: rows are then
 * set aside where the store can (store.h) rather than wait on its server, so
 * that the queue has room before it must refuse any.
 */
bool sl_recorder_behind(size_t queued, size_t capacity);

/* One decision; the writer does the first item set, then decides again. */
typedef struct {
    size_t write_rows; /* write a batch of this many rows; 0 = none */
    bool behind;       /* and the writer is behind (sl_recorder_behind): the store may set it aside */
    bool flush_usage;
    bool sweep;      /* run one retention chunk */
    bool tend;       /* let the store do its own work (reconnect, replay its spool) */
    int64_t wake_ms; /* nothing due: sleep until then (or a signal); INT64_MAX = no deadline */
} sl_recorder_plan_t;

/*
 * Decides the writer's next step. A batch is due when it is full, its oldest
 * row has waited SL_RECORDER_BATCH_DELAY_MS, or a flush is wanted; it is
 * behind (sl_recorder_behind) unless closing: the last rows go to the store
 * itself. Usage every SL_RECORDER_USAGE_FLUSH_MS or at a flush; a sweep step
 * when its time has come and the recorder is not closing; the store's own
 * work last, when due.
 */
sl_recorder_plan_t sl_recorder_plan(const sl_recorder_state_t *s, int64_t now_ms, size_t batch_max);

typedef enum { SL_SWEEP_DONE, SL_SWEEP_MORE, SL_SWEEP_FAILED, SL_SWEEP_RESULT_COUNT } sl_sweep_result_t;

/* When the next retention step may run after one that ended with result at now_ms. */
int64_t sl_recorder_sweep_next(int64_t now_ms, sl_sweep_result_t result);

/* Request rows that started before this epoch ms are deleted. */
int64_t sl_retention_cutoff_ms(int64_t now_ms, uint32_t retention_days);

/* Usage buckets whose epoch minute is before this are deleted: max(retention, 40) days back. */
int64_t sl_bucket_cutoff_minute(int64_t now_ms, uint32_t retention_days);

#endif
