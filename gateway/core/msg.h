/*
 * sl_msg_t: one message for a human and a machine, as in the protocol's
 * Msg {code, args, text}: a code from the catalog, named string arguments,
 * and the English text rendered from the code's template.
 */
#ifndef SL_MSG_H
#define SL_MSG_H

#include <stdbool.h>
#include <stddef.h>

#include "codes.h"

#define SL_MSG_MAX_ARGS 8

typedef struct {
    const char *name; /* static: argument names are literals */
    char *value;      /* owned */
} sl_msg_arg_t;

typedef struct {
    sl_code_t code;
    size_t nargs;
    sl_msg_arg_t args[SL_MSG_MAX_ARGS];
    char *text; /* owned; the template with every {name} replaced */
} sl_msg_t;

/* A growable list of messages; owns its messages. Zero-initialise to start. */
typedef struct {
    sl_msg_t *items;
    size_t len, cap;
} sl_msgs_t;

/*
 * Builds a message from a code and a NULL-terminated list of name, value
 * string pairs (names must be string literals). A placeholder with no
 * argument stays as written. Aborts only on out-of-memory.
 */
sl_msg_t sl_msg_make(sl_code_t code, ...);
/*
 * As sl_msg_make, but keeps only the arguments the code's template names:
 * for a caller that knows many facts (a provider, a status, the timeout's
 * seconds) and lets each code's template take the ones it shows.
 */
sl_msg_t sl_msg_make_for(sl_code_t code, ...);

/* Whether a code's template has the placeholder {name}. */
bool sl_msg_template_names(const char *tmpl, const char *name);
/*
 * The name of the template's first placeholder other than {except}, copied
 * into out (NUL-terminated); false when there is none or it does not fit.
 */
bool sl_msg_template_other(const char *tmpl, const char *except, char *out, size_t size);
/* The value of a named argument, or NULL. */
const char *sl_msg_arg(const sl_msg_t *msg, const char *name);
void sl_msg_free(sl_msg_t *msg);

/* Appends a message (taking ownership). */
void sl_msgs_push(sl_msgs_t *list, sl_msg_t msg);
/* Frees every message and the list storage; the list is empty afterwards. */
void sl_msgs_clear(sl_msgs_t *list);

#endif
