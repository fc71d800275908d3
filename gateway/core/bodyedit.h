/*
 * Edits to a request body before it goes upstream, without a parse: the
 * spans jscan found are replaced or text is inserted at an offset. Used for
 * the upstream's model name (model_map) and for asking an OpenAI Chat
 * stream to report its usage (behaviour.md §7).
 */
#ifndef SL_BODYEDIT_H
#define SL_BODYEDIT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/jscan.h"
#include "core/xalloc.h"

/* Replace body[off, off + len) by text (len 0: insert at off). */
typedef struct {
    size_t off, len;
    const char *text;
    size_t text_len;
} sl_body_edit_t;

/*
 * body with the edits applied (they must not overlap; any order), as a
 * new malloc'd buffer of *out_len bytes. With no edits, NULL.
 */
char *sl_body_apply(const char *body, size_t len, const sl_body_edit_t *edits, size_t n, size_t *out_len);

/*
 * The edit that makes an OpenAI Chat stream request ask for usage
 * (`stream_options.include_usage: true`), given its scan f. Returns false
 * when the body already asks (include_usage is true): nothing to change.
 * Otherwise *edit replaces a present include_usage value, or inserts the
 * member into stream_options, or inserts stream_options itself right before
 * the body's closing brace, as its last member, so that it also replaces a
 * stream_options that is not an object (null). The edit's text is static.
 */
bool sl_body_ask_for_usage(const char *body, size_t len, const sl_jscan_t *f, sl_body_edit_t *edit);

#endif
