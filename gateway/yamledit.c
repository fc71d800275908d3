/*
 * Minimal YAML edits. The parser's events are turned into a small tree of
 * nodes that know where their source text lies; an operation finds the
 * nodes it changes, records byte-range replacements, and the result is the
 * original text with those ranges spliced. Nothing is ever re-emitted, so
 * what no edit touches stays byte for byte.
 */
#include "yamledit.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "core/mask.h"
#include "core/xalloc.h"

#define NONE SIZE_MAX
/* Far deeper than any config; bounds the recursion of the walkers below. */
#define MAX_DEPTH 64
/* The loader's paths fit in 511 bytes; bounds the work of resolving one. */
#define MAX_PATH_LEN 1024
/* A mapping with more entries than this is searched through a sorted index. */
#define INDEX_FROM 16

#define LIT(s) s, sizeof(s) - 1

/* Writes the reason into err; returns false, for `return fail(…)`. */
static bool fail(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool
fail(char *err, size_t err_size, const char *fmt, ...)
{
    if (err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* ---- the tree ------------------------------------------------------------ */

typedef enum { N_SCALAR, N_SEQ, N_MAP, N_ALIAS } node_kind_t;

typedef struct {
    node_kind_t kind;
    bool flow;               /* a flow collection: {…} or […] */
    bool in_flow;            /* inside a flow collection */
    bool plain;              /* a plain (unquoted, not |/>) scalar */
    bool block;              /* a |/> scalar */
    bool anchored;           /* carries an anchor (&a) */
    bool anchor_below;       /* it or a node inside it carries one: removing it would break an alias */
    bool alias_below;        /* it or a node inside it is an alias: copied elsewhere, it may name nothing */
    size_t parent, slot;     /* the collection holding it (NONE for the root) and its place among its nodes */
    size_t start, end;       /* its source text, in bytes; a block collection ends where its last node does */
    size_t value, value_len; /* a scalar's decoded value, in doc.values */
    size_t kids, n_kids;     /* a collection's nodes, in doc.kids: a mapping's as key, value, key, value… */
} node_t;

typedef struct {
    const char *s;
    size_t n, pair;
} key_ref_t;

typedef struct {
    const char *text;
    size_t len;
    node_t *nodes;
    size_t n_nodes, cap_nodes;
    size_t *kids;
    size_t n_kids, cap_kids;
    sl_strbuf_t values;
    size_t root;       /* NONE: the document is empty */
    key_ref_t **index; /* per node, built on first search: a big mapping's keys, sorted */
    /* libyaml's marks count characters: the cursor turns them into byte offsets. */
    size_t cur_char, cur_byte;
} doc_t;

/* The nodes of collections still open while the tree is built. */
typedef struct {
    size_t open[MAX_DEPTH], kid_base[MAX_DEPTH];
    size_t n_open;
    size_t *stack; /* the nodes of every open collection, innermost last */
    size_t n_stack, cap_stack;
} builder_t;

static void *
grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    *cap = cap2;
    return sl_xrealloc(p, cap2 * elem);
}

static size_t
kid(const doc_t *d, size_t node, size_t i)
{
    return d->kids[d->nodes[node].kids + i];
}

static size_t
pairs(const doc_t *d, size_t map)
{
    return d->nodes[map].n_kids / 2;
}

static const node_t *
key_of(const doc_t *d, size_t map, size_t pair)
{
    return &d->nodes[kid(d, map, 2 * pair)];
}

static size_t
value_of(const doc_t *d, size_t map, size_t pair)
{
    return kid(d, map, 2 * pair + 1);
}

static const char *
value_text(const doc_t *d, const node_t *n)
{
    return d->values.data + n->value;
}

static bool
scalar_is(const doc_t *d, const node_t *n, const char *s, size_t len)
{
    return n->kind == N_SCALAR && n->value_len == len && memcmp(value_text(d, n), s, len) == 0;
}

static bool
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static size_t
utf8_width(unsigned char c)
{
    return c < 0x80 ? 1 : c >> 5 == 6 ? 2 : c >> 4 == 14 ? 3 : 4;
}

/* Marks arrive nearly in order, so the cursor moves little between calls. */
static size_t
to_byte(doc_t *d, size_t ch)
{
    while (d->cur_char < ch && d->cur_byte < d->len) {
        d->cur_byte += utf8_width((unsigned char)d->text[d->cur_byte]);
        d->cur_char++;
    }
    while (d->cur_char > ch && d->cur_byte > 0) {
        do
            d->cur_byte--;
        while (d->cur_byte > 0 && ((unsigned char)d->text[d->cur_byte] & 0xC0) == 0x80);
        d->cur_char--;
    }
    return d->cur_byte < d->len ? d->cur_byte : d->len;
}

static size_t
new_node(doc_t *d)
{
    d->nodes = grow(d->nodes, &d->cap_nodes, d->n_nodes + 1, sizeof(node_t));
    d->nodes[d->n_nodes] = (node_t){.parent = NONE};
    return d->n_nodes++;
}

static void
set_scalar(doc_t *d, node_t *n, const yaml_event_t *ev)
{
    n->kind = N_SCALAR;
    n->anchored = n->anchor_below = ev->data.scalar.anchor != NULL;
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    n->value = d->values.len;
    n->value_len = ev->data.scalar.length;
    sl_strbuf_append(&d->values, (const char *)ev->data.scalar.value, ev->data.scalar.length);
    sl_strbuf_append(&d->values, "", 1); /* each value NUL-terminated, for messages and strstr */
    /* A |/> scalar's span runs over its trailing line breaks, which belong to the lines around it. */
    n->block = ev->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
               ev->data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
    if (n->block) {
        while (n->end > n->start && is_space(d->text[n->end - 1]))
            n->end--;
    }
}

static bool
open_node(doc_t *d, builder_t *b, const yaml_event_t *ev, char *err, size_t err_size)
{
    if (b->n_open == MAX_DEPTH)
        return fail(err, err_size, "line %zu: nested deeper than %d levels", ev->start_mark.line + 1,
                    MAX_DEPTH);
    size_t i = new_node(d);
    node_t *n = &d->nodes[i];
    n->start = to_byte(d, ev->start_mark.index);
    n->end = to_byte(d, ev->end_mark.index);
    if (b->n_open > 0) {
        size_t top = b->n_open - 1;
        n->parent = b->open[top];
        n->slot = b->n_stack - b->kid_base[top];
        n->in_flow = d->nodes[n->parent].flow || d->nodes[n->parent].in_flow;
    } else {
        d->root = i;
    }
    b->stack = grow(b->stack, &b->cap_stack, b->n_stack + 1, sizeof(size_t));
    b->stack[b->n_stack++] = i;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        set_scalar(d, n, ev);
        return true;
    case YAML_ALIAS_EVENT:
        n->kind = N_ALIAS;
        n->alias_below = true;
        return true;
    case YAML_SEQUENCE_START_EVENT:
        n->kind = N_SEQ;
        n->flow = ev->data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE;
        n->anchored = ev->data.sequence_start.anchor != NULL;
        break;
    default:
        n->kind = N_MAP;
        n->flow = ev->data.mapping_start.style == YAML_FLOW_MAPPING_STYLE;
        n->anchored = ev->data.mapping_start.anchor != NULL;
        break;
    }
    n->anchor_below = n->anchored;
    b->open[b->n_open] = i;
    b->kid_base[b->n_open] = b->n_stack;
    b->n_open++;
    return true;
}

static void
close_node(doc_t *d, builder_t *b, const yaml_event_t *ev)
{
    b->n_open--;
    size_t i = b->open[b->n_open], base = b->kid_base[b->n_open];
    size_t n_kids = b->n_stack - base;
    if (n_kids > 0) {
        d->kids = grow(d->kids, &d->cap_kids, d->n_kids + n_kids, sizeof(size_t));
        memcpy(d->kids + d->n_kids, b->stack + base, n_kids * sizeof(size_t));
    }
    b->n_stack = base;
    node_t *n = &d->nodes[i];
    n->kids = d->n_kids;
    n->n_kids = n_kids;
    d->n_kids += n_kids;
    for (size_t k = 0; k < n_kids; k++) {
        n->anchor_below |= d->nodes[kid(d, i, k)].anchor_below;
        n->alias_below |= d->nodes[kid(d, i, k)].alias_below;
    }
    /* A block collection's end mark is where the next token starts, past comments and blank lines. */
    if (n->flow)
        n->end = to_byte(d, ev->end_mark.index);
    else if (n_kids > 0)
        n->end = d->nodes[kid(d, i, n_kids - 1)].end;
}

static bool
syntax_error(const yaml_parser_t *p, char *err, size_t err_size)
{
    return fail(err, err_size, "line %zu: %s%s%s%s", p->problem_mark.line + 1,
                p->problem != NULL ? p->problem : "cannot parse", p->context != NULL ? " (" : "",
                p->context != NULL ? p->context : "", p->context != NULL ? ")" : "");
}

static void
doc_free(doc_t *d)
{
    if (d->index != NULL) {
        for (size_t i = 0; i < d->n_nodes; i++)
            free(d->index[i]);
        free(d->index);
    }
    free(d->nodes);
    free(d->kids);
    free(d->values.data);
}

/* Builds the tree of the stream's first document (the one the loader reads). */
static bool
doc_parse(doc_t *d, const char *text, size_t len, char *err, size_t err_size)
{
    *d = (doc_t){.text = text, .len = len, .root = NONE};
    /* libyaml skips a byte order mark without counting it. */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        d->cur_byte = 3;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        fputs("sluice: out of memory\n", stderr);
        abort();
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    builder_t b = {.n_open = 0};
    bool ok = true, done = false;
    while (ok && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            ok = syntax_error(&parser, err, err_size);
            break;
        }
        switch (ev.type) {
        case YAML_SCALAR_EVENT:
        case YAML_ALIAS_EVENT:
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            ok = open_node(d, &b, &ev, err, err_size);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            close_node(d, &b, &ev);
            break;
        case YAML_DOCUMENT_END_EVENT:
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    free(b.stack);
    yaml_parser_delete(&parser);
    if (!ok)
        doc_free(d);
    return ok;
}

/* ---- searching mappings -------------------------------------------------- */

static int
by_key(const void *a, const void *b)
{
    const key_ref_t *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    if (c != 0)
        return c;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return x->pair < y->pair ? -1 : x->pair > y->pair;
}

static key_ref_t *
map_index(doc_t *d, size_t map)
{
    if (d->index == NULL)
        d->index = sl_xcalloc(d->n_nodes, sizeof(key_ref_t *));
    if (d->index[map] == NULL) {
        key_ref_t *refs = sl_xmalloc(pairs(d, map) * sizeof(*refs));
        for (size_t p = 0; p < pairs(d, map); p++) {
            const node_t *k = key_of(d, map, p);
            /* A key that is not a scalar matches nothing: it sorts as the empty string after real ones. */
            refs[p] = k->kind == N_SCALAR ? (key_ref_t){value_text(d, k), k->value_len, p}
                                          : (key_ref_t){"", 0, NONE};
        }
        qsort(refs, pairs(d, map), sizeof(*refs), by_key);
        d->index[map] = refs;
    }
    return d->index[map];
}

/* The first entry of map whose key is key[0..len), or NONE. */
static size_t
map_find(doc_t *d, size_t map, const char *key, size_t len)
{
    size_t n = pairs(d, map);
    if (n <= INDEX_FROM) {
        for (size_t p = 0; p < n; p++) {
            if (scalar_is(d, key_of(d, map, p), key, len))
                return p;
        }
        return NONE;
    }
    const key_ref_t *refs = map_index(d, map);
    key_ref_t want = {key, len, 0};
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (by_key(&refs[mid], &want) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && refs[lo].pair != NONE && refs[lo].n == len && memcmp(refs[lo].s, key, len) == 0
               ? refs[lo].pair
               : NONE;
}

/* Whether node or a collection holding it carries an anchor: an alias elsewhere would see an edit in it. */
static bool
under_anchor(const doc_t *d, size_t node)
{
    for (; node != NONE; node = d->nodes[node].parent) {
        if (d->nodes[node].anchored)
            return true;
    }
    return false;
}

/* ---- edits --------------------------------------------------------------- */

typedef struct {
    size_t off, len;       /* replaces text[off, off + len) */
    size_t text, text_len; /* by edits.pool[text, text + text_len) */
    size_t order;
} edit_t;

typedef struct {
    edit_t *items;
    size_t n, cap;
    sl_strbuf_t pool;
} edits_t;

static void
edits_replace(edits_t *e, size_t off, size_t len, const char *text, size_t text_len)
{
    e->items = grow(e->items, &e->cap, e->n + 1, sizeof(edit_t));
    e->items[e->n] = (edit_t){off, len, e->pool.len, text_len, e->n};
    e->n++;
    sl_strbuf_append(&e->pool, text, text_len);
}

static void
edits_delete(edits_t *e, size_t from, size_t to)
{
    edits_replace(e, from, to - from, "", 0);
}

static void
edits_free(edits_t *e)
{
    free(e->items);
    free(e->pool.data);
}

static int
by_offset(const void *a, const void *b)
{
    const edit_t *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The text with the edits spliced in (caller frees). */
static char *
edits_apply(edits_t *e, const char *text, size_t len)
{
    if (e->n > 0)
        qsort(e->items, e->n, sizeof(edit_t), by_offset);
    sl_strbuf_t out = {0};
    size_t from = 0;
    for (size_t i = 0; i < e->n; i++) {
        const edit_t *x = &e->items[i];
        if (x->off < from) {
            /* In text an earlier deletion removed (an entry under a deleted entry): at most widens it. */
            assert(x->text_len == 0 || x->off + x->len <= from);
            if (x->off + x->len > from)
                from = x->off + x->len;
            continue;
        }
        sl_strbuf_append(&out, text + from, x->off - from);
        sl_strbuf_append(&out, e->pool.data + x->text, x->text_len);
        from = x->off + x->len;
    }
    sl_strbuf_append(&out, text + from, len - from);
    return sl_strbuf_finish(&out);
}

/* ---- lines --------------------------------------------------------------- */

static size_t
line_start(const doc_t *d, size_t off)
{
    while (off > 0 && d->text[off - 1] != '\n')
        off--;
    return off;
}

/* Just past the line break ending off's line (the text's end on its last line). */
static size_t
line_end(const doc_t *d, size_t off)
{
    const char *nl = memchr(d->text + off, '\n', d->len - off);
    return nl != NULL ? (size_t)(nl - d->text) + 1 : d->len;
}

typedef enum { LINE_BLANK, LINE_ITEM, LINE_OTHER } line_prefix_t;

/* What stands before off on its line: indentation, indentation and "- " item indicators, or more. */
static line_prefix_t
line_prefix(const doc_t *d, size_t off)
{
    line_prefix_t kind = LINE_BLANK;
    for (size_t i = line_start(d, off); i < off; i++) {
        if (d->text[i] == '-' && i + 1 < off && d->text[i + 1] == ' ')
            kind = LINE_ITEM;
        else if (d->text[i] != ' ')
            return LINE_OTHER;
    }
    return kind;
}

static void
append_spaces(sl_strbuf_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_strbuf_append(b, " ", 1);
}

/* ---- deleting mapping entries -------------------------------------------- */

typedef struct {
    size_t map, pair;
} mark_t;

static size_t
key_start(const doc_t *d, size_t map, size_t pair)
{
    return key_of(d, map, pair)->start;
}

static size_t
value_end(const doc_t *d, size_t map, size_t pair)
{
    return d->nodes[value_of(d, map, pair)].end;
}

/*
 * Flow: a run of deleted entries goes with the comma after it, or, when it
 * ends the mapping, with the comma before it (a comment between that comma
 * and the run stays, with its line break).
 */
static bool
delete_flow_entries(const doc_t *d, edits_t *e, const mark_t *marks, size_t n, char *err, size_t err_size)
{
    size_t map = marks[0].map;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && marks[j + 1].pair == marks[j].pair + 1)
            j++;
        size_t first = marks[i].pair, last = marks[j].pair, from = key_start(d, map, first);
        if (last + 1 < pairs(d, map)) {
            edits_delete(e, from, key_start(d, map, last + 1));
        } else if (first > 0) {
            size_t prev_end = value_end(d, map, first - 1), comma = prev_end;
            while (comma < d->len && is_space(d->text[comma]))
                comma++;
            if (comma == d->len || d->text[comma] != ',')
                return fail(err, err_size, "cannot find the comma before '%s'",
                            value_text(d, key_of(d, map, first)));
            if (memchr(d->text + comma, '#', from - comma) == NULL) {
                edits_delete(e, prev_end, value_end(d, map, last));
            } else {
                edits_delete(e, prev_end, comma + 1);
                while (from > comma + 1 && (d->text[from - 1] == ' ' || d->text[from - 1] == '\t'))
                    from--;
                edits_delete(e, from, value_end(d, map, last));
            }
        } else {
            edits_delete(e, from, value_end(d, map, last));
        }
        i = j + 1;
    }
    return true;
}

/* Where an entry's value starts: just past the colon after its key, or NONE. */
static size_t
after_colon(const doc_t *d, const node_t *key)
{
    size_t at = key->end;
    while (at < d->len && d->text[at] == ' ')
        at++;
    return at < d->len && d->text[at] == ':' ? at + 1 : NONE;
}

/*
 * Block: an entry goes with its whole lines (its trailing comment too). The
 * first entry of a list item shares its line with "- ": the next kept entry
 * moves up onto it. A mapping left empty becomes {} so that its key keeps
 * the type the loader expects, unless it is refilled: entries are added
 * after its last one by the caller.
 */
static bool
delete_block_entries(const doc_t *d, edits_t *e, const mark_t *marks, size_t n, bool refilled, char *err,
                     size_t err_size)
{
    size_t map = marks[0].map, total = pairs(d, map);
    for (size_t k = 0; k < n; k++) {
        size_t p = marks[k].pair, from = key_start(d, map, p);
        line_prefix_t prefix = line_prefix(d, from);
        if (prefix == LINE_BLANK) {
            edits_delete(e, line_start(d, from), line_end(d, value_end(d, map, p)));
            continue;
        }
        if (prefix != LINE_ITEM || p != 0)
            return fail(err, err_size, "cannot delete '%s': it does not start its line",
                        value_text(d, key_of(d, map, p)));
        size_t kept = 1;
        while (kept < n && marks[kept].pair == kept)
            kept++;
        if (kept == total) {
            if (refilled)
                return fail(err, err_size, "cannot empty the list item '%s' starts and add to it",
                            value_text(d, key_of(d, map, p)));
            edits_replace(e, from, value_end(d, map, total - 1) - from, LIT("{}"));
            return true;
        }
        edits_delete(e, from, key_start(d, map, kept));
    }
    const node_t *m = &d->nodes[map];
    if (n == total && !refilled && m->parent != NONE && d->nodes[m->parent].kind == N_MAP &&
        m->slot % 2 == 1) {
        size_t at = after_colon(d, &d->nodes[kid(d, m->parent, m->slot - 1)]);
        if (at == NONE)
            return fail(err, err_size, "cannot find the colon of the emptied mapping's key");
        edits_replace(e, at, 0, LIT(" {}"));
    }
    return true;
}

/*
 * Deletes the entries marks name, all of one mapping, in ascending order,
 * none repeated; refilled: the caller adds entries to the mapping after.
 */
static bool
delete_entries_of(const doc_t *d, edits_t *e, const mark_t *marks, size_t n, bool refilled, char *err,
                  size_t err_size)
{
    return d->nodes[marks[0].map].flow ? delete_flow_entries(d, e, marks, n, err, err_size)
                                       : delete_block_entries(d, e, marks, n, refilled, err, err_size);
}

static bool
delete_entries(const doc_t *d, edits_t *e, const mark_t *marks, size_t n, char *err, size_t err_size)
{
    return delete_entries_of(d, e, marks, n, false, err, err_size);
}

/* ---- limits -------------------------------------------------------------- */

static const char *const per_slugs[] = {"minute", "hour", "day", "week", "month"};
static const char *const measure_slugs[] = {"requests", "tokens", "cost"};

static bool
limits_valid(const sl_limit_t *limits, size_t n, char *err, size_t err_size)
{
    for (size_t i = 0; i < n; i++) {
        const sl_limit_t *l = &limits[i];
        if ((size_t)l->per >= sizeof(per_slugs) / sizeof(per_slugs[0]) ||
            (size_t)l->measure >= sizeof(measure_slugs) / sizeof(measure_slugs[0]))
            return fail(err, err_size, "limits[%zu]: unknown per or measure", i);
        if (l->amount < 1)
            return fail(err, err_size, "limits[%zu]: the amount must be at least 1", i);
    }
    return true;
}

/* USD from micro-dollars, exactly: the integer part and up to 6 decimals, trailing zeros dropped. */
static void
append_usd(sl_strbuf_t *b, int64_t micros)
{
    char frac[8];
    snprintf(frac, sizeof(frac), "%06" PRId64, micros % 1000000);
    size_t n = 6;
    while (n > 0 && frac[n - 1] == '0')
        n--;
    sl_strbuf_appendf(b, "%" PRId64, micros / 1000000);
    if (n > 0)
        sl_strbuf_appendf(b, ".%.*s", (int)n, frac);
}

static void
append_limit(sl_strbuf_t *b, const sl_limit_t *l)
{
    sl_strbuf_appendf(b, "{per: %s", per_slugs[l->per]);
    if (l->every > 1)
        sl_strbuf_appendf(b, ", every: %" PRIu32, l->every);
    sl_strbuf_appendf(b, ", %s: ", measure_slugs[l->measure]);
    if (l->measure == SL_MEASURE_COST)
        append_usd(b, l->amount);
    else
        sl_strbuf_appendf(b, "%" PRId64, l->amount);
    sl_strbuf_append(b, "}", 1);
}

static void
append_flow_limits(sl_strbuf_t *b, const sl_limit_t *limits, size_t n)
{
    sl_strbuf_append(b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            sl_strbuf_append(b, ", ", 2);
        append_limit(b, &limits[i]);
    }
    sl_strbuf_append(b, "]", 1);
}

static void
append_block_limits(sl_strbuf_t *b, size_t indent, const sl_limit_t *limits, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        append_spaces(b, indent);
        sl_strbuf_append(b, "- ", 2);
        append_limit(b, &limits[i]);
        sl_strbuf_append(b, "\n", 1);
    }
}

static void
edits_replace_buf(edits_t *e, size_t off, size_t len, sl_strbuf_t *b)
{
    edits_replace(e, off, len, b->data, b->len);
    free(b->data);
}

/* An item without limits gets them after its last entry. */
static bool
add_limits(const doc_t *d, edits_t *e, size_t item, const sl_limit_t *limits, size_t n, char *err,
           size_t err_size)
{
    size_t last_end = value_end(d, item, pairs(d, item) - 1);
    sl_strbuf_t b = {0};
    if (d->nodes[item].flow) {
        sl_strbuf_append(&b, LIT(", limits: "));
        append_flow_limits(&b, limits, n);
        edits_replace_buf(e, last_end, 0, &b);
        return true;
    }
    size_t first = key_start(d, item, 0);
    if (line_prefix(d, first) == LINE_OTHER)
        return fail(err, err_size, "cannot tell the item's indentation");
    size_t indent = first - line_start(d, first), at = line_end(d, last_end);
    if (at == d->len && (at == 0 || d->text[at - 1] != '\n'))
        sl_strbuf_append(&b, "\n", 1);
    append_spaces(&b, indent);
    sl_strbuf_append(&b, LIT("limits:\n"));
    append_block_limits(&b, indent + 2, limits, n);
    edits_replace_buf(e, at, 0, &b);
    return true;
}

/*
 * A list is rewritten in its style: a block one line for line at its
 * indentation. Any other value (null, a scalar, a mapping: the loader
 * rejects them) is replaced from the colon on, as a flow list.
 */
static bool
replace_limits(const doc_t *d, edits_t *e, size_t item, size_t pair, const sl_limit_t *limits, size_t n,
               char *err, size_t err_size)
{
    const node_t *v = &d->nodes[value_of(d, item, pair)];
    sl_strbuf_t b = {0};
    if (v->kind == N_SEQ && v->flow) {
        append_flow_limits(&b, limits, n);
        edits_replace_buf(e, v->start, v->end - v->start, &b);
        return true;
    }
    if (v->kind == N_SEQ) {
        if (line_prefix(d, v->start) != LINE_BLANK)
            return fail(err, err_size, "cannot tell the indentation of the limits");
        size_t from = line_start(d, v->start);
        append_block_limits(&b, v->start - from, limits, n);
        edits_replace_buf(e, from, line_end(d, v->end) - from, &b);
        return true;
    }
    size_t from = after_colon(d, key_of(d, item, pair));
    if (from == NONE)
        return fail(err, err_size, "cannot find the colon after limits");
    sl_strbuf_append(&b, " ", 1);
    append_flow_limits(&b, limits, n);
    edits_replace_buf(e, from, v->end - from, &b);
    return true;
}

/* The list item of section whose name is name; NONE after writing err. */
static size_t
find_item(doc_t *d, const char *section, const char *name, char *err, size_t err_size)
{
    size_t p = NONE;
    if (d->root != NONE && d->nodes[d->root].kind == N_MAP)
        p = map_find(d, d->root, section, strlen(section));
    if (p == NONE) {
        fail(err, err_size, "the configuration has no %s", section);
        return NONE;
    }
    size_t list = value_of(d, d->root, p);
    bool aliases = false;
    for (size_t i = 0; d->nodes[list].kind == N_SEQ && i < d->nodes[list].n_kids; i++) {
        size_t item = kid(d, list, i);
        aliases |= d->nodes[item].kind == N_ALIAS;
        if (d->nodes[item].kind != N_MAP)
            continue;
        size_t np = map_find(d, item, "name", 4);
        if (np != NONE && scalar_is(d, &d->nodes[value_of(d, item, np)], name, strlen(name)))
            return item;
    }
    fail(err, err_size, "%s has no item named '%s'%s", section, name,
         aliases ? " (aliases in the list are not followed)" : "");
    return NONE;
}

static bool
edit_limits(doc_t *d, edits_t *e, const char *section, const char *name, const sl_limit_t *limits, size_t n,
            char *err, size_t err_size)
{
    size_t item = find_item(d, section, name, err, err_size);
    if (item == NONE)
        return false;
    if (under_anchor(d, item))
        return fail(err, err_size, "%s[%s]: the item is under an anchor; edit it by hand", section, name);
    size_t p = map_find(d, item, "limits", 6);
    if (p == NONE)
        return n == 0 || add_limits(d, e, item, limits, n, err, err_size);
    size_t value = value_of(d, item, p);
    if (key_of(d, item, p)->anchored || d->nodes[value].anchor_below || d->nodes[value].kind == N_ALIAS)
        return fail(err, err_size, "%s[%s].limits: anchors and aliases are not edited", section, name);
    if (n == 0)
        return delete_entries(d, e, &(mark_t){item, p}, 1, err, err_size);
    return replace_limits(d, e, item, p, limits, n, err, err_size);
}

char *
sl_yamledit_set_limits(const char *yaml, size_t len, const char *section, const char *name,
                       const sl_limit_t *limits, size_t n, char *err, size_t err_size)
{
    doc_t d;
    if (!limits_valid(limits, n, err, err_size) || !doc_parse(&d, yaml, len, err, err_size))
        return NULL;
    edits_t e = {0};
    char *out =
        edit_limits(&d, &e, section, name, limits, n, err, err_size) ? edits_apply(&e, yaml, len) : NULL;
    edits_free(&e);
    doc_free(&d);
    return out;
}

/* ---- secrets ------------------------------------------------------------- */

/*
 * What of a value at a secret position is the secret: all of it, or the
 * password inside a URL (scheme://user:password@host, sl_url_password).
 */
typedef enum { SECRET_WHOLE, SECRET_URL_PASSWORD } secret_kind_t;

/*
 * Where secrets stand (config.md, cluster.md). "[]" is each item of a list,
 * labelled by its name; "*" each entry of a mapping, labelled by its key in
 * lower case (header names are matched in any case).
 */
static const struct {
    secret_kind_t kind;
    const char *seg[5];
} secret_paths[] = {
    {SECRET_WHOLE, {"listen", "control", "key"}},
    {SECRET_WHOLE, {"clients", "[]", "key"}},
    {SECRET_WHOLE, {"providers", "[]", "key"}},
    {SECRET_WHOLE, {"providers", "[]", "aws", "secret_access_key"}},
    {SECRET_WHOLE, {"providers", "[]", "aws", "session_token"}},
    {SECRET_WHOLE, {"providers", "[]", "headers", "*"}},
    {SECRET_URL_PASSWORD, {"cluster", "redis"}},
    {SECRET_URL_PASSWORD, {"store", "url"}},
};

/*
 * Called for every node at or under a secret position, map keys aside; false
 * stops the walk. kind is SECRET_URL_PASSWORD only for the node standing at
 * a URL's position itself: anything under it (the loader rejects a
 * collection there) is a whole secret.
 */
typedef bool (*on_secret_fn)(void *ctx, doc_t *d, size_t node, const char *path, secret_kind_t kind);

typedef struct {
    doc_t *d;
    on_secret_fn fn;
    void *ctx;
    sl_strbuf_t path;
    secret_kind_t kind; /* of the pattern being walked */
} secret_walk_t;

/* Appends ".s" (just "s" at the start) or, with sep '[', "[s]". */
static void
path_push(secret_walk_t *w, char sep, const char *s, size_t n)
{
    if (sep == '[')
        sl_strbuf_append(&w->path, "[", 1);
    else if (w->path.len > 0)
        sl_strbuf_append(&w->path, ".", 1);
    sl_strbuf_append(&w->path, s, n);
    if (sep == '[')
        sl_strbuf_append(&w->path, "]", 1);
}

static void
path_push_place(secret_walk_t *w, size_t i)
{
    char place[24];
    int n = snprintf(place, sizeof(place), "#%zu", i);
    path_push(w, '[', place, (size_t)n);
}

static void
path_pop(secret_walk_t *w, size_t len)
{
    w->path.len = len;
    if (w->path.data != NULL)
        w->path.data[len] = '\0';
}

static void
path_push_key(secret_walk_t *w, const node_t *key, bool lower)
{
    size_t from = w->path.len + (w->path.len > 0);
    path_push(w, '.', value_text(w->d, key), key->value_len);
    for (size_t i = from; lower && i < w->path.len; i++) {
        if (w->path.data[i] >= 'A' && w->path.data[i] <= 'Z')
            w->path.data[i] = (char)(w->path.data[i] - 'A' + 'a');
    }
}

/* An item is labelled by its name; one without a name by its place. */
static void
path_push_item(secret_walk_t *w, size_t item, size_t i)
{
    const node_t *it = &w->d->nodes[item];
    size_t p = it->kind == N_MAP ? map_find(w->d, item, "name", 4) : NONE;
    const node_t *name = p != NONE ? &w->d->nodes[value_of(w->d, item, p)] : NULL;
    if (name != NULL && name->kind == N_SCALAR)
        path_push(w, '[', value_text(w->d, name), name->value_len);
    else
        path_push_place(w, i);
}

static bool
walk_under(secret_walk_t *w, size_t node, secret_kind_t kind)
{
    if (!w->fn(w->ctx, w->d, node, w->path.data, kind))
        return false;
    const node_t *n = &w->d->nodes[node];
    size_t saved = w->path.len;
    bool ok = true;
    if (n->kind == N_SEQ) {
        for (size_t i = 0; i < n->n_kids && ok; i++) {
            path_push_place(w, i);
            ok = walk_under(w, kid(w->d, node, i), SECRET_WHOLE);
            path_pop(w, saved);
        }
    } else if (n->kind == N_MAP) {
        for (size_t p = 0; p < pairs(w->d, node) && ok; p++) {
            if (key_of(w->d, node, p)->kind != N_SCALAR)
                continue;
            path_push_key(w, key_of(w->d, node, p), false);
            ok = walk_under(w, value_of(w->d, node, p), SECRET_WHOLE);
            path_pop(w, saved);
        }
    }
    return ok;
}

static bool
walk_pattern(secret_walk_t *w, size_t node, const char *const *seg)
{
    if (*seg == NULL)
        return walk_under(w, node, w->kind);
    const node_t *n = &w->d->nodes[node];
    size_t saved = w->path.len;
    bool ok = true;
    if (strcmp(*seg, "[]") == 0) {
        for (size_t i = 0; n->kind == N_SEQ && i < n->n_kids && ok; i++) {
            path_push_item(w, kid(w->d, node, i), i);
            ok = walk_pattern(w, kid(w->d, node, i), seg + 1);
            path_pop(w, saved);
        }
        return ok;
    }
    bool any = strcmp(*seg, "*") == 0;
    /* Every entry with the key, duplicates too: the loader rejects them, but they may still hold a secret. */
    for (size_t p = 0; n->kind == N_MAP && p < pairs(w->d, node) && ok; p++) {
        const node_t *key = key_of(w->d, node, p);
        if (key->kind != N_SCALAR || (!any && !scalar_is(w->d, key, *seg, strlen(*seg))))
            continue;
        path_push_key(w, key, any);
        ok = walk_pattern(w, value_of(w->d, node, p), seg + 1);
        path_pop(w, saved);
    }
    return ok;
}

static bool
walk_secrets(doc_t *d, on_secret_fn fn, void *ctx)
{
    secret_walk_t w = {.d = d, .fn = fn, .ctx = ctx};
    sl_strbuf_append(&w.path, "", 0);
    bool ok = true;
    for (size_t i = 0; d->root != NONE && ok && i < sizeof(secret_paths) / sizeof(secret_paths[0]); i++) {
        w.kind = secret_paths[i].kind;
        ok = walk_pattern(&w, d->root, secret_paths[i].seg);
    }
    free(w.path.data);
    return ok;
}

/* A scalar that is neither empty nor null. */
static bool
has_value(const doc_t *d, const node_t *n)
{
    if (n->kind != N_SCALAR || n->value_len == 0)
        return false;
    const char *v = value_text(d, n);
    return !n->plain || (strcmp(v, "~") != 0 && strcasecmp(v, "null") != 0);
}

/* Whether s[0..n) holds a ${VAR} reference. */
static bool
contains_var(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] == '$' && s[i + 1] == '{')
            return true;
    }
    return false;
}

/* A value written out in the file, not a ${VAR} reference. */
static bool
is_literal(const doc_t *d, const node_t *n)
{
    return has_value(d, n) && !contains_var(value_text(d, n), n->value_len);
}

typedef struct {
    edits_t edits;
    char *err;
    size_t err_size;
} redact_t;

static bool
reject_anchor(const node_t *n, const char *path, char *err, size_t err_size)
{
    if (n->kind != N_ALIAS && !n->anchored)
        return true;
    return fail(err, err_size, "%s: anchors and aliases are not supported at a secret", path);
}

/* value[0..len) double-quoted on one line, for YAML. */
static void
append_quoted(sl_strbuf_t *b, const char *value, size_t len)
{
    sl_strbuf_append(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c == '"' || c == '\\')
            sl_strbuf_appendf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            sl_strbuf_appendf(b, "\\x%02X", c);
        else
            sl_strbuf_append(b, (const char *)&c, 1);
    }
    sl_strbuf_append(b, "\"", 1);
}

/* Where the password of a URL scalar is, in its decoded value; false when it has none (or an empty one). */
static bool
url_password(const doc_t *d, const node_t *n, size_t *at, size_t *len)
{
    return n->kind == N_SCALAR && sl_url_password(value_text(d, n), n->value_len, at, len) && *len > 0;
}

/* value[0..len) with its bytes [at, at + n) replaced by with[0..with_len), double-quoted. */
static void
append_quoted_spliced(sl_strbuf_t *b, const char *value, size_t len, size_t at, size_t n, const char *with,
                      size_t with_len)
{
    sl_strbuf_t v = {0};
    sl_strbuf_append(&v, value, at);
    sl_strbuf_append(&v, with, with_len);
    sl_strbuf_append(&v, value + at + n, len - at - n);
    append_quoted(b, v.data, v.len);
    free(v.data);
}

static bool
redact_one(void *ctx, doc_t *d, size_t node, const char *path, secret_kind_t kind)
{
    redact_t *r = ctx;
    const node_t *n = &d->nodes[node];
    if (!reject_anchor(n, path, r->err, r->err_size))
        return false;
    size_t at, len;
    if (kind == SECRET_WHOLE && is_literal(d, n)) {
        edits_replace(&r->edits, n->start, n->end - n->start, LIT("\"" SL_YAMLEDIT_SECRET_SENTINEL "\""));
    } else if (kind == SECRET_URL_PASSWORD && url_password(d, n, &at, &len) &&
               !contains_var(value_text(d, n) + at, len)) {
        sl_strbuf_t b = {0};
        append_quoted_spliced(&b, value_text(d, n), n->value_len, at, len, LIT(SL_YAMLEDIT_SECRET_SENTINEL));
        edits_replace_buf(&r->edits, n->start, n->end - n->start, &b);
    }
    return true;
}

char *
sl_yamledit_redact_secrets(const char *yaml, size_t len, char *err, size_t err_size)
{
    doc_t d;
    if (!doc_parse(&d, yaml, len, err, err_size))
        return NULL;
    redact_t r = {.err = err, .err_size = err_size};
    char *out = walk_secrets(&d, redact_one, &r) ? edits_apply(&r.edits, yaml, len) : NULL;
    edits_free(&r.edits);
    doc_free(&d);
    return out;
}

/* A node at or under a secret position, by its logical path. */
typedef struct {
    char *path;
    size_t node;
    secret_kind_t kind;
} secret_ref_t;

typedef struct {
    secret_ref_t *items;
    size_t n, cap;
} secret_refs_t;

static bool
collect_one(void *ctx, doc_t *d, size_t node, const char *path, secret_kind_t kind)
{
    secret_refs_t *refs = ctx;
    (void)d;
    refs->items = grow(refs->items, &refs->cap, refs->n + 1, sizeof(secret_ref_t));
    refs->items[refs->n++] = (secret_ref_t){sl_xstrdup(path), node, kind};
    return true;
}

static int
by_path(const void *a, const void *b)
{
    const secret_ref_t *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c != 0 ? c : x->node < y->node ? -1 : x->node > y->node;
}

/* The doc's nodes at secret positions, by path and, for one path, in document order. */
static secret_refs_t
collect_secrets(doc_t *d)
{
    secret_refs_t refs = {0};
    (void)walk_secrets(d, collect_one, &refs);
    if (refs.n > 0)
        qsort(refs.items, refs.n, sizeof(secret_ref_t), by_path);
    return refs;
}

static void
secret_refs_free(secret_refs_t *refs)
{
    for (size_t i = 0; i < refs->n; i++)
        free(refs->items[i].path);
    free(refs->items);
}

/* The nth node collected at path, or NONE. */
static size_t
refs_find(const secret_refs_t *refs, const char *path, size_t nth)
{
    size_t lo = 0, hi = refs->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(refs->items[mid].path, path) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    lo += nth;
    return lo < refs->n && strcmp(refs->items[lo].path, path) == 0 ? refs->items[lo].node : NONE;
}

typedef struct {
    doc_t current;
    secret_refs_t secrets; /* of current */
    edits_t edits;
    char *err;
    size_t err_size;
} restore_t;

/*
 * A node of doc c as it is written there, moved to a place inside a flow
 * collection or not (into_flow), unless it would not read the same there: a
 * value over several lines depends on the indentation around it, and a
 * plain one moving into a flow collection may hold what ends a plain scalar
 * there (commas, brackets, ": "). Then double-quoted, on one line (an
 * empty one stays empty: quoted it would be "" rather than nothing).
 */
static void
append_moved(sl_strbuf_t *b, const doc_t *c, const node_t *n, bool into_flow)
{
    const char *src = c->text + n->start;
    size_t len = n->end - n->start;
    if (memchr(src, '\n', len) != NULL || (into_flow && n->plain && !n->in_flow && len > 0))
        append_quoted(b, value_text(c, n), n->value_len);
    else
        sl_strbuf_append(b, src, len);
}

static void
restore_text(const restore_t *r, const node_t *to, const node_t *from, sl_strbuf_t *b)
{
    append_moved(b, &r->current, from, to->in_flow);
}

static bool
no_secret_there(const restore_t *r, const char *path)
{
    return fail(r->err, r->err_size,
                "%s: '" SL_YAMLEDIT_SECRET_SENTINEL "' but the current configuration has no secret there",
                path);
}

/*
 * A URL whose password is "***" gets the current URL's password: the whole
 * current value as written when that is what results (the common round
 * trip), else the new URL double-quoted.
 */
static bool
restore_url_password(restore_t *r, const doc_t *d, const node_t *n, size_t at, size_t len, const node_t *cur,
                     const char *path)
{
    const doc_t *c = &r->current;
    size_t cur_at, cur_len;
    if (cur == NULL || !url_password(c, cur, &cur_at, &cur_len))
        return no_secret_there(r, path);
    const char *v = value_text(d, n), *cv = value_text(c, cur);
    sl_strbuf_t b = {0};
    if (n->value_len - len == cur->value_len - cur_len && at == cur_at && memcmp(v, cv, at) == 0 &&
        memcmp(v + at + len, cv + cur_at + cur_len, n->value_len - at - len) == 0)
        restore_text(r, n, cur, &b);
    else
        append_quoted_spliced(&b, v, n->value_len, at, len, cv + cur_at, cur_len);
    edits_replace_buf(&r->edits, n->start, n->end - n->start, &b);
    return true;
}

/*
 * Gives a "***" at path the value of the current text there (at a URL's
 * position, a "***" password the current URL's password). Of duplicate
 * entries (which the loader rejects), the nth one gets the nth one's.
 */
static bool
restore_one(restore_t *r, doc_t *d, size_t node, const char *path, secret_kind_t kind, size_t nth)
{
    const node_t *n = &d->nodes[node];
    size_t url_at, url_len;
    bool whole = scalar_is(d, n, LIT(SL_YAMLEDIT_SECRET_SENTINEL));
    bool in_url = !whole && kind == SECRET_URL_PASSWORD && url_password(d, n, &url_at, &url_len) &&
                  url_len == strlen(SL_YAMLEDIT_SECRET_SENTINEL) &&
                  memcmp(value_text(d, n) + url_at, LIT(SL_YAMLEDIT_SECRET_SENTINEL)) == 0;
    if (!whole && !in_url)
        return true;
    if (!reject_anchor(n, path, r->err, r->err_size))
        return false;
    size_t at = refs_find(&r->secrets, path, nth);
    const node_t *cur = at != NONE ? &r->current.nodes[at] : NULL;
    if (cur != NULL && !reject_anchor(cur, path, r->err, r->err_size))
        return false;
    if (in_url)
        return restore_url_password(r, d, n, url_at, url_len, cur, path);
    /* A ${VAR} reference is kept too: "***" asks for whatever stands there now. */
    if (cur == NULL || !has_value(&r->current, cur))
        return no_secret_there(r, path);
    sl_strbuf_t b = {0};
    restore_text(r, n, cur, &b);
    edits_replace_buf(&r->edits, n->start, n->end - n->start, &b);
    return true;
}

static bool
restore_all(restore_t *r, doc_t *d)
{
    secret_refs_t pushed = collect_secrets(d);
    bool ok = true;
    for (size_t i = 0, nth = 0; i < pushed.n && ok; i++) {
        nth = i > 0 && strcmp(pushed.items[i].path, pushed.items[i - 1].path) == 0 ? nth + 1 : 0;
        ok = restore_one(r, d, pushed.items[i].node, pushed.items[i].path, pushed.items[i].kind, nth);
    }
    secret_refs_free(&pushed);
    return ok;
}

char *
sl_yamledit_restore_secrets(const char *new_yaml, size_t new_len, const char *current_yaml,
                            size_t current_len, char *err, size_t err_size)
{
    doc_t d;
    restore_t r = {.err = err, .err_size = err_size};
    if (!doc_parse(&d, new_yaml, new_len, err, err_size))
        return NULL;
    if (!doc_parse(&r.current, current_yaml, current_len, err, err_size)) {
        doc_free(&d);
        return NULL;
    }
    r.secrets = collect_secrets(&r.current);
    char *out = restore_all(&r, &d) ? edits_apply(&r.edits, new_yaml, new_len) : NULL;
    secret_refs_free(&r.secrets);
    edits_free(&r.edits);
    doc_free(&r.current);
    doc_free(&d);
    return out;
}

/* ---- deleting paths ------------------------------------------------------ */

/* The entry of map whose key is the longest prefix of path ending before '.', '[' or the end. */
static size_t
longest_key(doc_t *d, size_t map, const char *path, const char **rest)
{
    size_t found = NONE;
    for (size_t q = 1;; q++) {
        char c = path[q];
        if (c == '.' || c == '[' || c == '\0') {
            size_t p = map_find(d, map, path, q);
            if (p != NONE) {
                found = p;
                *rest = path + q;
            }
        }
        if (c == '\0')
            return found;
    }
}

/* Steps over "[i]" into the list item; NONE when node has no such item. */
static size_t
step_index(const doc_t *d, size_t node, const char **path)
{
    if ((*path)[1] < '0' || (*path)[1] > '9')
        return NONE;
    char *end;
    unsigned long long i = strtoull(*path + 1, &end, 10);
    if (*end != ']' || d->nodes[node].kind != N_SEQ || i >= d->nodes[node].n_kids)
        return NONE;
    *path = end + 1;
    return kid(d, node, (size_t)i);
}

static bool
resolve_path(doc_t *d, const char *path, mark_t *mark, char *err, size_t err_size)
{
    if (strnlen(path, MAX_PATH_LEN + 1) > MAX_PATH_LEN || path[0] == '\0')
        return fail(err, err_size, "'%.40s…': not a path", path);
    size_t node = d->root;
    const char *p = path;
    while (node != NONE) {
        if (d->nodes[node].kind == N_ALIAS)
            return fail(err, err_size, "%s: passes through an alias", path);
        if (*p == '[') {
            node = step_index(d, node, &p);
            if (node != NONE && *p == '\0')
                return fail(err, err_size, "%s: a list item, not a mapping entry", path);
            p += *p == '.';
            continue;
        }
        const char *rest = NULL;
        size_t pair = d->nodes[node].kind == N_MAP && *p != '\0' ? longest_key(d, node, p, &rest) : NONE;
        if (pair == NONE)
            break;
        if (*rest == '\0') {
            if (under_anchor(d, node) || key_of(d, node, pair)->anchored ||
                d->nodes[value_of(d, node, pair)].anchor_below)
                return fail(err, err_size, "%s: under or holding an anchor; delete it by hand", path);
            *mark = (mark_t){node, pair};
            return true;
        }
        node = value_of(d, node, pair);
        p = rest + (*rest == '.');
    }
    return fail(err, err_size, "%s: no such entry", path);
}

static int
by_mark(const void *a, const void *b)
{
    const mark_t *x = a, *y = b;
    if (x->map != y->map)
        return x->map < y->map ? -1 : 1;
    return x->pair < y->pair ? -1 : x->pair > y->pair;
}

/* Sorts marks by mapping and entry and drops repeats; returns how many are left. */
static size_t
sort_marks(mark_t *marks, size_t n)
{
    qsort(marks, n, sizeof(mark_t), by_mark);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept == 0 || by_mark(&marks[kept - 1], &marks[i]) != 0)
            marks[kept++] = marks[i];
    }
    return kept;
}

char *
sl_yamledit_delete_paths(const char *yaml, size_t len, const char *const *paths, size_t n, char *err,
                         size_t err_size)
{
    doc_t d;
    if (!doc_parse(&d, yaml, len, err, err_size))
        return NULL;
    mark_t *marks = sl_xmalloc(n * sizeof(mark_t));
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = resolve_path(&d, paths[i], &marks[i], err, err_size);
    edits_t e = {0};
    size_t kept = ok ? sort_marks(marks, n) : 0;
    for (size_t i = 0, j; i < kept && ok; i = j) {
        for (j = i + 1; j < kept && marks[j].map == marks[i].map;)
            j++;
        ok = delete_entries(&d, &e, marks + i, j - i, err, err_size);
    }
    char *out = ok ? edits_apply(&e, yaml, len) : NULL;
    edits_free(&e);
    free(marks);
    doc_free(&d);
    return out;
}

/* ---- keeping entries ----------------------------------------------------- */

typedef enum { KEEP_NOTHING, KEEP_REPLACE, KEEP_ADD, KEEP_DELETE } keep_op_t;

/* One path: what is done to new, and where the entry stands in the two texts. */
typedef struct {
    const char *path;
    bool top; /* a top-level entry, edited as whole lines */
    keep_op_t op;
    size_t map, pair; /* in new: the mapping holding the entry or to hold it (NONE: none), the entry */
    size_t cur_map, cur_pair; /* the same in current */
} keep_t;

/* Per mapping of new: entries are added to it, all its entries are deleted, an entry was written into it. */
enum { KEEP_ADDED_TO = 1, KEEP_EMPTIED = 2, KEEP_WRITTEN = 4 };

typedef struct {
    doc_t new, cur;
    keep_t *items;
    size_t n;
    unsigned char *flags; /* per node of new */
    mark_t *marks;        /* the entries of new to delete, sorted */
    size_t n_marks;
    bool eof_newline; /* new does not end in a line break, and an insertion at its end has added one */
    edits_t edits;
    char *err;
    size_t err_size;
} keeper_t;

/* Parses text, naming it in the message: two texts are read and either may be the one at fault. */
static bool
doc_parse_named(doc_t *d, const char *which, const char *text, size_t len, char *err, size_t err_size)
{
    char why[256];
    if (doc_parse(d, text, len, why, sizeof(why)))
        return true;
    return fail(err, err_size, "%s: %s", which, why);
}

/* Whole lines are spliced at the top level: a flow mapping there has none to splice. */
static bool
top_level_ok(const doc_t *d, const char *which, char *err, size_t err_size)
{
    if (d->root == NONE)
        return true;
    const node_t *r = &d->nodes[d->root];
    if (r->kind != N_MAP)
        return fail(err, err_size, "%s: the top level is not a mapping", which);
    if (r->flow)
        return fail(err, err_size, "%s: the top-level mapping is flow style; edit it by hand", which);
    return true;
}

static bool
keep_path_ok(const char *path, char *err, size_t err_size)
{
    size_t len = strnlen(path, MAX_PATH_LEN + 1);
    if (len == 0 || len > MAX_PATH_LEN || path[0] == '.' || path[len - 1] == '.' ||
        strstr(path, "..") != NULL)
        return fail(err, err_size, "'%.40s': not a path", path);
    return true;
}

/*
 * Where path's entry stands in d: *map is the mapping holding it or that
 * would (NONE when its parent is absent or not a mapping), *pair the entry
 * (NONE when absent). False when the path passes through an alias: what it
 * names there is another entry's.
 */
static bool
find_entry(doc_t *d, const char *which, const char *path, size_t *map, size_t *pair, char *err,
           size_t err_size)
{
    *map = *pair = NONE;
    size_t node = d->root;
    for (const char *seg = path;;) {
        if (node != NONE && d->nodes[node].kind == N_ALIAS)
            return fail(err, err_size, "%s: passes through an alias in %s", path, which);
        if (node == NONE || d->nodes[node].kind != N_MAP)
            return true;
        const char *dot = strchr(seg, '.');
        size_t p = map_find(d, node, seg, dot != NULL ? (size_t)(dot - seg) : strlen(seg));
        if (dot == NULL) {
            *map = node;
            *pair = p;
            return true;
        }
        if (p == NONE)
            return true;
        node = value_of(d, node, p);
        seg = dot + 1;
    }
}

/*
 * An entry whose text is copied (current) or replaced or deleted (new) may
 * hold no anchor (an alias elsewhere would lose it or see the change) and no
 * alias (copied, it may name nothing); in new, no anchor may hold it either.
 */
static bool
entry_free(const doc_t *d, const char *which, const char *path, size_t map, size_t pair, bool edited,
           char *err, size_t err_size)
{
    const node_t *v = &d->nodes[value_of(d, map, pair)];
    if (key_of(d, map, pair)->anchored || v->anchor_below || v->alias_below)
        return fail(err, err_size, "%s: an anchor or alias stands at or under it in %s; edit it by hand",
                    path, which);
    if (edited && under_anchor(d, map))
        return fail(err, err_size, "%s: under an anchor in %s; edit it by hand", path, which);
    return true;
}

/* A scalar whose text lies on one line: it can be put anywhere a scalar goes on a line. */
static bool
one_line_scalar(const doc_t *d, const node_t *n)
{
    return n->kind == N_SCALAR && !n->block && memchr(d->text + n->start, '\n', n->end - n->start) == NULL;
}

static bool
one_line_ok(const doc_t *d, const char *which, const char *path, const node_t *n, char *err, size_t err_size)
{
    if (one_line_scalar(d, n))
        return true;
    return fail(err, err_size, "%s: not a one-line scalar in %s; only a top-level entry is copied whole",
                path, which);
}

/* The column of a top-level key, which must start its line; NONE after writing err (whose: which key). */
static size_t
top_column(const doc_t *d, const char *which, const char *path, const char *whose, size_t key_off, char *err,
           size_t err_size)
{
    if (line_prefix(d, key_off) == LINE_BLANK)
        return key_off - line_start(d, key_off);
    fail(err, err_size, "%s: %s does not start its line in %s", path, whose, which);
    return NONE;
}

/* Current's lines go into new as they are: both must indent their top-level keys alike. */
static bool
top_lines_ok(keeper_t *k, const keep_t *it)
{
    size_t want = top_column(&k->cur, "current", it->path, "its key",
                             key_start(&k->cur, it->cur_map, it->cur_pair), k->err, k->err_size);
    if (want == NONE)
        return false;
    if (it->map == NONE)
        return true; /* new is empty: current's indentation is as good as any */
    bool add = it->op == KEEP_ADD;
    size_t have = top_column(&k->new, "new", it->path, add ? "the first top-level key" : "its key",
                             key_start(&k->new, it->map, add ? 0 : it->pair), k->err, k->err_size);
    if (have == NONE)
        return false;
    if (have != want)
        return fail(k->err, k->err_size, "%s: new and current indent their top-level keys differently",
                    it->path);
    return true;
}

static bool
nested_ok(keeper_t *k, const keep_t *it)
{
    const doc_t *c = &k->cur;
    if (!one_line_ok(c, "current", it->path, &c->nodes[value_of(c, it->cur_map, it->cur_pair)], k->err,
                     k->err_size))
        return false;
    if (it->op == KEEP_ADD)
        return one_line_ok(c, "current", it->path, key_of(c, it->cur_map, it->cur_pair), k->err, k->err_size);
    const doc_t *d = &k->new;
    const node_t *v = &d->nodes[value_of(d, it->map, it->pair)];
    if (!one_line_ok(d, "new", it->path, v, k->err, k->err_size))
        return false;
    if (v->start == v->end && after_colon(d, key_of(d, it->map, it->pair)) == NONE)
        return fail(k->err, k->err_size, "%s: cannot find the colon after its key in new", it->path);
    return true;
}

/* Finds the entry in both texts and decides what is done to new, checking that it can be. */
static bool
keep_plan(keeper_t *k, keep_t *it)
{
    const char *path = it->path;
    if (!find_entry(&k->new, "new", path, &it->map, &it->pair, k->err, k->err_size) ||
        !find_entry(&k->cur, "current", path, &it->cur_map, &it->cur_pair, k->err, k->err_size))
        return false;
    bool in_new = it->pair != NONE, in_cur = it->cur_pair != NONE;
    if (in_cur &&
        !entry_free(&k->cur, "current", path, it->cur_map, it->cur_pair, false, k->err, k->err_size))
        return false;
    if (in_new && !entry_free(&k->new, "new", path, it->map, it->pair, true, k->err, k->err_size))
        return false;
    if (!in_cur) {
        it->op = in_new ? KEEP_DELETE : KEEP_NOTHING;
        return true;
    }
    it->op = in_new ? KEEP_REPLACE : KEEP_ADD;
    if (it->op == KEEP_ADD && !it->top && it->map == NONE)
        return fail(k->err, k->err_size, "%s: new has no mapping to add it to", path);
    if (it->op == KEEP_ADD && it->map != NONE && under_anchor(&k->new, it->map))
        return fail(k->err, k->err_size, "%s: under an anchor in new; edit it by hand", path);
    return it->top ? top_lines_ok(k, it) : nested_ok(k, it);
}

/* Inserts b at off in new; the first insertion at the end of a text without a final line break adds one. */
static void
insert_lines(keeper_t *k, size_t off, sl_strbuf_t *b)
{
    const doc_t *d = &k->new;
    if (off == d->len && d->len > 0 && d->text[d->len - 1] != '\n' && !k->eof_newline) {
        edits_replace(&k->edits, off, 0, "\n", 1);
        k->eof_newline = true;
    }
    edits_replace_buf(&k->edits, off, 0, b);
}

/* Current's lines of a top-level entry: its key's line through its value's last (trailing comment too). */
static void
current_lines(const keeper_t *k, const keep_t *it, size_t *from, size_t *to)
{
    const doc_t *c = &k->cur;
    *from = line_start(c, key_start(c, it->cur_map, it->cur_pair));
    *to = line_end(c, value_end(c, it->cur_map, it->cur_pair));
}

/* At the end of new's top-level mapping (or of the text, when it is empty), always ending its line. */
static void
append_top(keeper_t *k, const keep_t *it)
{
    const doc_t *d = &k->new;
    size_t from, to;
    current_lines(k, it, &from, &to);
    sl_strbuf_t b = {0};
    sl_strbuf_append(&b, k->cur.text + from, to - from);
    if (b.len == 0 || b.data[b.len - 1] != '\n')
        sl_strbuf_append(&b, "\n", 1);
    insert_lines(k, d->root != NONE ? line_end(d, d->nodes[d->root].end) : d->len, &b);
}

/* New's lines of the entry become current's; the last line break is new's, so the text ends as it did. */
static void
replace_top(keeper_t *k, const keep_t *it)
{
    const doc_t *d = &k->new;
    size_t from = line_start(d, key_start(d, it->map, it->pair)),
           to = line_end(d, value_end(d, it->map, it->pair));
    size_t cfrom, cto;
    current_lines(k, it, &cfrom, &cto);
    bool had_nl = to > from && d->text[to - 1] == '\n', has_nl = cto > cfrom && k->cur.text[cto - 1] == '\n';
    sl_strbuf_t b = {0};
    sl_strbuf_append(&b, k->cur.text + cfrom, cto - cfrom - (has_nl && !had_nl));
    if (had_nl && !has_nl)
        sl_strbuf_append(&b, "\n", 1);
    edits_replace_buf(&k->edits, from, to - from, &b);
}

static bool
only_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!is_space(s[i]))
            return false;
    }
    return true;
}

/*
 * New's value becomes current's. An empty value has no text of its own (its
 * span is a point after the colon or before the next token): current's goes
 * after the colon with a space. An emptied block value takes the space
 * before it too; in a flow mapping `key:}` would not parse, so it stays.
 */
static void
replace_scalar(keeper_t *k, const keep_t *it)
{
    const doc_t *d = &k->new;
    const node_t *v = &d->nodes[value_of(d, it->map, it->pair)];
    const node_t *cv = &k->cur.nodes[value_of(&k->cur, it->cur_map, it->cur_pair)];
    size_t colon = after_colon(d, key_of(d, it->map, it->pair));
    sl_strbuf_t b = {0};
    if (v->start == v->end && cv->start < cv->end)
        sl_strbuf_append(&b, " ", 1);
    append_moved(&b, &k->cur, cv, v->in_flow);
    if (b.len > 0) {
        if (v->start == v->end)
            edits_replace_buf(&k->edits, colon, 0, &b);
        else
            edits_replace_buf(&k->edits, v->start, v->end - v->start, &b);
        return;
    }
    free(b.data);
    size_t from = v->start;
    if (!v->in_flow && colon != NONE && colon <= v->start && only_space(d->text + colon, v->start - colon))
        from = colon;
    if (from < v->end)
        edits_delete(&k->edits, from, v->end);
}

/* The column of a block mapping's keys: where its first one starts (after "- " in a list item). */
static size_t
block_indent(const doc_t *d, size_t map)
{
    size_t first = key_start(d, map, 0);
    return line_prefix(d, first) == LINE_OTHER ? NONE : first - line_start(d, first);
}

/*
 * Current's entry goes into new's mapping as `key: value`: a block one gets
 * a line after its last entry at its keys' indentation; a flow one
 * `, key: value` before its closing brace (no comma when it is empty or all
 * its entries are deleted, until one is written).
 */
static bool
add_nested(keeper_t *k, const keep_t *it)
{
    const doc_t *d = &k->new, *c = &k->cur;
    const node_t *m = &d->nodes[it->map], *cv = &c->nodes[value_of(c, it->cur_map, it->cur_pair)];
    unsigned char *flags = &k->flags[it->map];
    sl_strbuf_t b = {0};
    if (m->flow && ((*flags & KEEP_WRITTEN) || (m->n_kids > 0 && !(*flags & KEEP_EMPTIED))))
        sl_strbuf_append(&b, ", ", 2);
    size_t indent = m->flow ? 0 : block_indent(d, it->map);
    if (indent == NONE) {
        free(b.data);
        return fail(k->err, k->err_size, "%s: cannot tell the indentation of its mapping in new", it->path);
    }
    append_spaces(&b, indent);
    /* The key as written: the paths name plain keys, which read the same in a flow mapping. */
    const node_t *key = key_of(c, it->cur_map, it->cur_pair);
    sl_strbuf_append(&b, c->text + key->start, key->end - key->start);
    sl_strbuf_append(&b, ":", 1);
    if (cv->start < cv->end || m->flow)
        sl_strbuf_append(&b, " ", 1);
    append_moved(&b, c, cv, m->flow);
    *flags |= KEEP_WRITTEN;
    if (!m->flow) {
        sl_strbuf_append(&b, "\n", 1);
        insert_lines(k, line_end(d, value_end(d, it->map, pairs(d, it->map) - 1)), &b);
        return true;
    }
    size_t at = m->n_kids > 0 ? value_end(d, it->map, pairs(d, it->map) - 1) : m->start;
    if (m->n_kids == 0) {
        /* An empty one: just inside its brace (past a tag, if it has one). */
        while (at < m->end && d->text[at] != '{')
            at++;
        at++;
    }
    edits_replace_buf(&k->edits, at, 0, &b);
    return true;
}

/* A path and its place among those given. */
typedef struct {
    const char *path;
    size_t at;
} given_t;

static int
by_path_text(const void *a, const void *b)
{
    return strcmp(((const given_t *)a)->path, ((const given_t *)b)->path);
}

static int
by_path_then_place(const void *a, const void *b)
{
    int c = by_path_text(a, b);
    size_t x = ((const given_t *)a)->at, y = ((const given_t *)b)->at;
    return c != 0 ? c : x < y ? -1 : x > y;
}

/*
 * The paths to work on, once each: a repeat is dropped, and so is a path
 * under a top-level path also given (that entry comes whole, with what is
 * under it). Kept in the order given, which is the order of what is appended.
 */
static void
keep_select(keeper_t *k, const char *const *paths, size_t n)
{
    given_t *sorted = sl_xmalloc((n > 0 ? n : 1) * sizeof(given_t));
    for (size_t i = 0; i < n; i++)
        sorted[i] = (given_t){paths[i], i};
    qsort(sorted, n, sizeof(given_t), by_path_then_place);
    bool *drop = sl_xcalloc(n > 0 ? n : 1, sizeof(bool));
    for (size_t i = 0; i < n; i++) {
        const char *p = sorted[i].path, *dot = strchr(p, '.');
        drop[sorted[i].at] = i > 0 && strcmp(sorted[i - 1].path, p) == 0;
        if (dot == NULL)
            continue;
        char *top = sl_xstrdup(p);
        top[dot - p] = '\0';
        given_t want = {top, 0};
        drop[sorted[i].at] |= bsearch(&want, sorted, n, sizeof(given_t), by_path_text) != NULL;
        free(top);
    }
    k->items = sl_xmalloc((n > 0 ? n : 1) * sizeof(keep_t));
    for (size_t i = 0; i < n; i++) {
        if (!drop[i])
            k->items[k->n++] = (keep_t){.path = paths[i], .top = strchr(paths[i], '.') == NULL};
    }
    free(drop);
    free(sorted);
}

/*
 * Which mappings of new get entries (a block one emptied then is not given
 * {}) and which lose all of theirs (a flow one then takes its first added
 * entry without a comma): known before any edit is made.
 */
static void
keep_flags(keeper_t *k)
{
    k->flags = sl_xcalloc(k->new.n_nodes > 0 ? k->new.n_nodes : 1, 1);
    k->marks = sl_xmalloc((k->n > 0 ? k->n : 1) * sizeof(mark_t));
    for (size_t i = 0; i < k->n; i++) {
        const keep_t *it = &k->items[i];
        if (it->op == KEEP_ADD && it->map != NONE)
            k->flags[it->map] |= KEEP_ADDED_TO;
        if (it->op == KEEP_DELETE)
            k->marks[k->n_marks++] = (mark_t){it->map, it->pair};
    }
    k->n_marks = k->n_marks > 0 ? sort_marks(k->marks, k->n_marks) : 0;
    for (size_t i = 0, j; i < k->n_marks; i = j) {
        for (j = i + 1; j < k->n_marks && k->marks[j].map == k->marks[i].map;)
            j++;
        if (j - i == pairs(&k->new, k->marks[i].map))
            k->flags[k->marks[i].map] |= KEEP_EMPTIED;
    }
}

/* Deletes the entries of new planned for deletion, a mapping at a time, as sl_yamledit_delete_paths does. */
static bool
keep_deletes(keeper_t *k)
{
    bool ok = true;
    for (size_t i = 0, j; i < k->n_marks && ok; i = j) {
        size_t map = k->marks[i].map;
        for (j = i + 1; j < k->n_marks && k->marks[j].map == map;)
            j++;
        ok = delete_entries_of(&k->new, &k->edits, k->marks + i, j - i, (k->flags[map] & KEEP_ADDED_TO) != 0,
                               k->err, k->err_size);
    }
    return ok;
}

static size_t
depth_of(const doc_t *d, size_t node)
{
    size_t depth = 0;
    for (; node != NONE; node = d->nodes[node].parent)
        depth++;
    return depth;
}

/*
 * Additions, deepest mapping first: at one offset the line added to an
 * inner block mapping must come before the one added to a mapping holding
 * it, and nested entries before top-level ones appended after them. Every
 * insertion is recorded before the other edits, so that at an offset where
 * a deletion or replacement starts it stays in front of it.
 */
static bool
keep_adds(keeper_t *k)
{
    size_t max_depth = 0;
    for (size_t i = 0; i < k->n; i++) {
        if (k->items[i].op == KEEP_ADD && !k->items[i].top) {
            size_t depth = depth_of(&k->new, k->items[i].map);
            max_depth = depth > max_depth ? depth : max_depth;
        }
    }
    for (size_t depth = max_depth; depth > 0; depth--) {
        for (size_t i = 0; i < k->n; i++) {
            const keep_t *it = &k->items[i];
            if (it->op != KEEP_ADD || it->top || depth_of(&k->new, it->map) != depth)
                continue;
            if (!add_nested(k, it))
                return false;
        }
    }
    for (size_t i = 0; i < k->n; i++) {
        if (k->items[i].op == KEEP_ADD && k->items[i].top)
            append_top(k, &k->items[i]);
    }
    return true;
}

static bool
keep_all(keeper_t *k, const char *const *paths, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!keep_path_ok(paths[i], k->err, k->err_size))
            return false;
    }
    if (!top_level_ok(&k->new, "new", k->err, k->err_size) ||
        !top_level_ok(&k->cur, "current", k->err, k->err_size))
        return false;
    keep_select(k, paths, n);
    for (size_t i = 0; i < k->n; i++) {
        if (!keep_plan(k, &k->items[i]))
            return false;
    }
    keep_flags(k);
    /* Additions first (see keep_adds). */
    if (!keep_adds(k))
        return false;
    for (size_t i = 0; i < k->n; i++) {
        const keep_t *it = &k->items[i];
        if (it->op == KEEP_REPLACE && it->top)
            replace_top(k, it);
        else if (it->op == KEEP_REPLACE)
            replace_scalar(k, it);
    }
    return keep_deletes(k);
}

char *
sl_yamledit_keep_entries(const char *new_yaml, size_t new_len, const char *current_yaml, size_t current_len,
                         const char *const *paths, size_t n, char *err, size_t err_size)
{
    keeper_t k = {.err = err, .err_size = err_size};
    if (!doc_parse_named(&k.new, "new", new_yaml, new_len, err, err_size))
        return NULL;
    if (!doc_parse_named(&k.cur, "current", current_yaml, current_len, err, err_size)) {
        doc_free(&k.new);
        return NULL;
    }
    char *out = keep_all(&k, paths, n) ? edits_apply(&k.edits, new_yaml, new_len) : NULL;
    edits_free(&k.edits);
    free(k.items);
    free(k.flags);
    free(k.marks);
    doc_free(&k.cur);
    doc_free(&k.new);
    return out;
}
