/*
 * Credential masking. Every place that prints a key or an upstream's error
 * body goes through here, so a credential never reaches a log, an event or
 * the request DB.
 */
#ifndef SL_MASK_H
#define SL_MASK_H

#include <stdbool.h>
#include <stddef.h>

/* Room for any masked key: the longest known prefix, the ellipsis and 4 characters. */
#define SL_MASKED_KEY_MAX 24

/*
 * Writes the masked form of a key into out (NUL-terminated): a known prefix
 * is kept and only the last 4 characters shown, "sk-ant-…abcd"; keys shorter
 * than 12 characters show nothing but "…". Returns out.
 */
char *sl_mask_key(const char *key, char out[SL_MASKED_KEY_MAX]);

/*
 * Masks, in place, everything in text[0..len) that looks like a credential:
 * sk-…, sk-ant-…, AIza…, AKIA…/ASIA… keys, the token after "Bearer ", any
 * 20+ character token after a word containing key, token, secret or
 * authorization, and the password of a URL (scheme://user:password@…, as
 * sl_url_password finds it within the URL's run of non-blank, unquoted
 * characters), which becomes "…" ("*" per byte below 3 bytes; one already
 * masked, all '*' or "…", or holding a ${VAR} reference is kept). The
 * result is never longer than the input; returns its length (the buffer is
 * NUL-terminated if the result is shorter).
 */
size_t sl_scrub_secrets(char *text, size_t len);

/*
 * Where the password of a URL stands, text[0..len) being the whole URL:
 * `scheme://[user]:password@rest`. The userinfo runs from "//" to the last
 * '@' (so a password may hold '@', '/' and ':', taken as written: no
 * %-decoding), the password from the first ':' in it; an authority that
 * starts with '/' (unix:///path) has none, and neither has `user@host`.
 * Returns true and sets *at (offset in text) and *n (0 for "redis://:@h")
 * when there is a password; false, leaving them untouched, otherwise.
 */
bool sl_url_password(const char *text, size_t len, size_t *at, size_t *n);

#endif
