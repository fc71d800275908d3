/*
 * The text PostgreSQL is handed and answers with (store_pg.c), as pure
 * functions: array literals for a batch's columns, text made valid UTF-8
 * (a TEXT column refuses anything else, and would take its batch down),
 * and which failures are the server's or the network's rather than the
 * batch's.
 */
#ifndef SL_PG_TEXT_H
#define SL_PG_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "xalloc.h"

/*
 * The array literal of n cells taken every stride-th from cells ("{...}"):
 * each cell double-quoted with '"' and '\' escaped, NULL as the bare NULL.
 * Any element type reads a quoted element, so one form serves text, bigint
 * and boolean columns. The caller frees.
 */
char *sl_pg_array_literal(const char *const *cells, size_t n, size_t stride);

/*
 * One line of COPY's text format for n cells appended to out: the cells
 * separated by tabs, '\\', tab, newline and carriage return escaped, NULL as
 * \N, ended by a newline.
 */
void sl_pg_copy_line(sl_strbuf_t *out, const char *const *cells, size_t n);

/* A copy of s (NULL stays NULL) with each byte that starts no well-formed UTF-8 sequence as U+FFFD. */
char *sl_pg_utf8_copy(const char *s);

/*
 * Whether a failure with this SQLSTATE may pass if the same batch is sent
 * again later: the connection's (08), resources (53), operator intervention
 * (57: a shutdown, a cancelled statement), a rollback (40: deadlock,
 * serialization), a system error (58). Anything else (a data or schema
 * error) fails the same way every time. NULL (no SQLSTATE: the client lost
 * the server) is transient.
 */
bool sl_pg_sqlstate_transient(const char *sqlstate);

#endif
