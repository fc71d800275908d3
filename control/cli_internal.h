/*
 * What the files of sluicectl's pure half (cli_*.c) share with each other
 * and nobody else: the wire's integer limit and the small texts that more
 * than one kind of output is made of. The public API is cli.h.
 */
#ifndef SL_CLI_INTERNAL_H
#define SL_CLI_INTERNAL_H

#include "cli.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The wire's integers stop at 2^53 - 1 (protocol.md). */
#define WIRE_MAX ((UINT64_C(1) << 53) - 1)

/* ---- cli_text.c ------------------------------------------------------------------------------------ */

/* YYYY-MM-DD HH:MM:SS in local time ("@MS" if the time cannot be shown). */
void sl__cli_date_time(uint64_t ms, char out[32]);
/* Appends each limit's text (sl_cli_limit_text), separated by ", "; nothing when n is 0. */
void sl__cli_limits_append(sl_strbuf_t *b, const sl_proto_limit_t *limits, size_t n);
/* A limit view as "used/limit per span" ("3/30 requests per minute", "$1.50/$20.00 per day"). */
void sl__cli_limit_view_text(const sl_proto_limit_view_t *v, char *out, size_t size);
/* A usage's tokens as "input/output", with a leading ~ when they are estimated. */
void sl__cli_tokens_text(const sl_proto_usage_t *u, char out[48]);
/* A provider's health slug; "disabled" for a disabled one, whatever its breaker says. Static. */
const char *sl__cli_health_text(const sl_proto_provider_view_t *v);
/* Sets *id and returns true for a request event; false (and *id untouched) for the state events. */
bool sl__cli_event_id(const sl_proto_event_t *ev, uint64_t *id);

#endif
