#include "msg.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

static const char *
find_arg(const sl_msg_t *msg, const char *name, size_t name_len)
{
    for (size_t i = 0; i < msg->nargs; i++) {
        if (strlen(msg->args[i].name) == name_len && memcmp(msg->args[i].name, name, name_len) == 0)
            return msg->args[i].value;
    }
    return NULL;
}

bool
sl_msg_template_names(const char *tmpl, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strchr(tmpl, '{'); p != NULL; p = strchr(p + 1, '{')) {
        if (strncmp(p + 1, name, len) == 0 && p[1 + len] == '}')
            return true;
    }
    return false;
}

bool
sl_msg_template_other(const char *tmpl, const char *except, char *out, size_t size)
{
    size_t except_len = strlen(except);
    for (const char *p = strchr(tmpl, '{'); p != NULL; p = strchr(p + 1, '{')) {
        const char *close = strchr(p + 1, '}');
        if (close == NULL)
            return false;
        size_t len = (size_t)(close - p - 1);
        if (len == 0 || (len == except_len && strncmp(p + 1, except, len) == 0))
            continue;
        if (len >= size)
            return false;
        memcpy(out, p + 1, len);
        out[len] = '\0';
        return true;
    }
    return false;
}

static char *
render(const sl_msg_t *msg, const char *tmpl)
{
    sl_strbuf_t out = {0};
    for (const char *p = tmpl; *p;) {
        const char *close;
        if (*p == '{' && (close = strchr(p + 1, '}')) != NULL) {
            const char *value = find_arg(msg, p + 1, (size_t)(close - p - 1));
            if (value != NULL) {
                sl_strbuf_append(&out, value, strlen(value));
                p = close + 1;
                continue;
            }
        }
        sl_strbuf_append(&out, p, 1);
        p++;
    }
    return sl_strbuf_finish(&out);
}

/* Builds a message from the pairs in ap; with only_named, the pairs whose name the template lacks are left
 * out. */
static sl_msg_t
make(sl_code_t code, bool only_named, va_list ap)
{
    sl_msg_t msg = {.code = code};
    const char *tmpl = sl_code_template(code);
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL) {
        const char *value = va_arg(ap, const char *);
        if (msg.nargs < SL_MSG_MAX_ARGS && (!only_named || sl_msg_template_names(tmpl, name))) {
            msg.args[msg.nargs].name = name;
            msg.args[msg.nargs].value = sl_xstrdup(value != NULL ? value : "");
            msg.nargs++;
        }
    }
    msg.text = render(&msg, tmpl);
    return msg;
}

sl_msg_t
sl_msg_make(sl_code_t code, ...)
{
    va_list ap;
    va_start(ap, code);
    sl_msg_t msg = make(code, false, ap);
    va_end(ap);
    return msg;
}

sl_msg_t
sl_msg_make_for(sl_code_t code, ...)
{
    va_list ap;
    va_start(ap, code);
    sl_msg_t msg = make(code, true, ap);
    va_end(ap);
    return msg;
}

const char *
sl_msg_arg(const sl_msg_t *msg, const char *name)
{
    return find_arg(msg, name, strlen(name));
}

void
sl_msg_free(sl_msg_t *msg)
{
    for (size_t i = 0; i < msg->nargs; i++)
        free(msg->args[i].value);
    free(msg->text);
    memset(msg, 0, sizeof(*msg));
}

void
sl_msgs_push(sl_msgs_t *list, sl_msg_t msg)
{
    if (list->len == list->cap) {
        list->cap = list->cap ? list->cap * 2 : 8;
        list->items = sl_xrealloc(list->items, list->cap * sizeof(*list->items));
    }
    list->items[list->len++] = msg;
}

void
sl_msgs_clear(sl_msgs_t *list)
{
    for (size_t i = 0; i < list->len; i++)
        sl_msg_free(&list->items[i]);
    free(list->items);
    memset(list, 0, sizeof(*list));
}
