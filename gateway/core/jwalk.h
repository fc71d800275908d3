/*
 * jwalk: a walk over the members of a JSON object or the elements of an
 * array, for the hot paths that want a few values out of JSON they never
 * parse (a stream chunk per token, a usage object per answer). No
 * allocation, no recursion: values are spans of the caller's bytes, strings
 * are skipped with their escapes, containers by depth.
 *
 * The walk is a hint, not a validation: it stops (bad) at bytes that cannot
 * continue the container it is in, but a value it skips is only matched by
 * depth and a scalar is any run of scalar bytes. Bytes that must be valid
 * JSON are for jscan.h or jansson.
 */
#ifndef SL_JWALK_H
#define SL_JWALK_H

#include <stdbool.h>
#include <stdint.h>

/* A JSON value's bytes, [p, end); a key's are the raw bytes between its quotes. */
typedef struct {
    const char *p, *end;
} sl_jval_t;

/* A walk over the members of an object or the elements of an array (sl_jwalk_open). */
typedef struct {
    const char *p, *end;
    char close; /* '}' or ']' */
    bool first; /* nothing read yet: no comma expected */
    bool bad;   /* stopped at bytes that are not JSON (or ran out of them) */
} sl_jwalk_t;

/* Returns the first byte of [p, end) that is not JSON whitespace, or end. */
const char *sl_jval_skip_space(const char *p, const char *end);

/*
 * Returns the end of the value starting at p (no whitespace skipped), or
 * NULL when there is none or it is cut. Containers are matched by depth
 * only: a hint for the walk, not a validation.
 */
const char *sl_jval_skip_value(const char *p, const char *end);

/*
 * Starts a walk over the container v (leading whitespace allowed) when it
 * opens with `open` ('{' or '['). Returns false, leaving *w untouched, when
 * it does not.
 */
bool sl_jwalk_open(sl_jval_t v, char open, sl_jwalk_t *w);

/*
 * The next member (*key: the raw bytes between its quotes, escapes left as
 * they are; pass NULL for an array) or element (*value). Returns false at
 * the container's end (w->p then just past its closing byte), or with w->bad
 * set when the bytes stop being JSON or run out first; *key and *value are
 * then unspecified.
 */
bool sl_jwalk_next(sl_jwalk_t *w, sl_jval_t *key, sl_jval_t *value);

/* Whether v's raw bytes are exactly the literal lit (no unescaping). */
bool sl_jval_is(sl_jval_t v, const char *lit);

/*
 * v as a token count: a non-negative integer written as 1 to 18 plain
 * digits (so it fits int64 with room to add). Returns -1 for anything else:
 * a sign, a fraction or exponent (1.0, 1e3), a string, null, or more digits.
 */
int64_t sl_jval_count(sl_jval_t v);

#endif
