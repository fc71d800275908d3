/*
 * The spool (cluster.md, "PostgreSQL request DB"): a file where batches for
 * PostgreSQL wait while it cannot take them, in order, to be written once it
 * is back. It survives a crash or SIGKILL of sluice (the bytes are in the
 * file once an append returns) and is read again at the next start.
 *
 * A batch is stored as text cells, the values of the rows it inserts, so
 * that a batch spooled by one run is written by the next exactly as it would
 * have been. On disk, each batch is one record: its payload's length and
 * FNV-1a checksum (two little-endian u32) and the payload, msgpack
 * [kind, [cols, rows, cell...], ...] with each cell a string or nil. A record
 * cut short by a crash, or damaged, ends the file: opening truncates it there.
 *
 * Used by one thread (the recorder's writer).
 */
#ifndef SL_SPOOL_H
#define SL_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/xalloc.h"

typedef enum { SL_BATCH_ROWS = 1, SL_BATCH_USAGE = 2 } sl_batch_kind_t;

#define SL_BATCH_MAX_TABLES 2

/* One table of a batch: rows × cols cells, row-major; each cell owned, NULL = SQL NULL. */
typedef struct {
    size_t cols, rows;
    char **cells;
} sl_cell_table_t;

/* ROWS: requests then attempts; USAGE: usage buckets. */
typedef struct {
    sl_batch_kind_t kind;
    size_t n_tables;
    sl_cell_table_t tables[SL_BATCH_MAX_TABLES];
} sl_cell_batch_t;

/* Sets up table i of b with rows × cols NULL cells. */
void sl_cell_table_init(sl_cell_batch_t *b, size_t i, size_t cols, size_t rows);
/* Frees every cell and zeroes b. */
void sl_cell_batch_free(sl_cell_batch_t *b);

/* The record of b (length, checksum, payload) appended to out. */
void sl_spool_encode(const sl_cell_batch_t *b, sl_strbuf_t *out);
/*
 * Reads the record at data[0..len): returns its length and fills *b (the
 * caller frees it), or 0 when no whole, intact record starts there (b left
 * zeroed).
 */
size_t sl_spool_decode(const char *data, size_t len, sl_cell_batch_t *b);

typedef struct sl_spool sl_spool_t;

/*
 * Opens or creates the spool at path (mode 0600) holding at most max_bytes.
 * Records a previous run left are kept, up to the first one that is cut
 * short or damaged, where the file is truncated (*cut_bytes says how much
 * went). NULL with a reason when the file cannot be opened or read.
 */
sl_spool_t *sl_spool_open(const char *path, uint64_t max_bytes, uint64_t *cut_bytes, char *err,
                          size_t err_size);
/* Closes the file; what it holds stays for the next run. NULL is ignored. */
void sl_spool_close(sl_spool_t *s);

/*
 * Appends b as one record. False with a reason, nothing appended, when it
 * would take the file past max_bytes or the write fails.
 */
bool sl_spool_append(sl_spool_t *s, const sl_cell_batch_t *b, char *why, size_t why_size);

/*
 * The oldest batch not yet taken, into *b (the caller frees it): true, or
 * false when none is left. sl_spool_take moves past it once it is stored.
 */
bool sl_spool_peek(sl_spool_t *s, sl_cell_batch_t *b);
/* The batch peek gave is done with; once every one is, the file is emptied. */
void sl_spool_take(sl_spool_t *s);

bool sl_spool_empty(const sl_spool_t *s);
/* Request rows (the first table of ROWS batches) waiting, and the bytes the file holds. */
uint64_t sl_spool_rows(const sl_spool_t *s);
uint64_t sl_spool_bytes(const sl_spool_t *s);

#endif
