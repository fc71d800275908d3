#include "spool.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/text.h"

#define HEAD_BYTES       8
#define MAX_RECORD_BYTES (256u << 20) /* no batch comes near: a length past it is damage */

/* ---- batches -------------------------------------------------------------------- */

void
sl_cell_table_init(sl_cell_batch_t *b, size_t i, size_t cols, size_t rows)
{
    b->tables[i] = (sl_cell_table_t){
        .cols = cols, .rows = rows, .cells = sl_xcalloc(cols * rows > 0 ? cols * rows : 1, sizeof(char *))};
    if (b->n_tables < i + 1)
        b->n_tables = i + 1;
}

void
sl_cell_batch_free(sl_cell_batch_t *b)
{
    for (size_t t = 0; t < b->n_tables; t++) {
        sl_cell_table_t *tb = &b->tables[t];
        for (size_t i = 0; i < tb->cols * tb->rows; i++)
            free(tb->cells[i]);
        free(tb->cells);
    }
    *b = (sl_cell_batch_t){0};
}

/* ---- records -------------------------------------------------------------------- */

static uint32_t
fnv1a(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

static void
put_u32(char *out, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        out[i] = (char)(v >> (8 * i));
}

static uint32_t
get_u32(const char *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)(unsigned char)in[i] << (8 * i);
    return v;
}

void
sl_spool_encode(const sl_cell_batch_t *b, sl_strbuf_t *out)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1 + 3 * b->n_tables);
    msgpack_pack_uint8(&pk, (uint8_t)b->kind);
    for (size_t t = 0; t < b->n_tables; t++) {
        const sl_cell_table_t *tb = &b->tables[t];
        msgpack_pack_uint64(&pk, tb->cols);
        msgpack_pack_uint64(&pk, tb->rows);
        msgpack_pack_array(&pk, (uint32_t)(tb->cols * tb->rows));
        for (size_t i = 0; i < tb->cols * tb->rows; i++) {
            const char *c = tb->cells[i];
            if (c == NULL) {
                msgpack_pack_nil(&pk);
            } else {
                size_t n = strlen(c);
                msgpack_pack_str(&pk, n);
                msgpack_pack_str_body(&pk, c, n);
            }
        }
    }
    char head[HEAD_BYTES];
    put_u32(head, (uint32_t)sb.size);
    put_u32(head + 4, fnv1a(sb.data, sb.size));
    sl_strbuf_append(out, head, HEAD_BYTES);
    sl_strbuf_append(out, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static bool
get_count(const msgpack_object *o, size_t *out)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > MAX_RECORD_BYTES)
        return false;
    *out = (size_t)o->via.u64;
    return true;
}

static bool
decode_payload(const msgpack_object *root, sl_cell_batch_t *b)
{
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 1 ||
        (root->via.array.size - 1) % 3 != 0 || (root->via.array.size - 1) / 3 > SL_BATCH_MAX_TABLES)
        return false;
    const msgpack_object *item = root->via.array.ptr;
    if (item[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        (item[0].via.u64 != SL_BATCH_ROWS && item[0].via.u64 != SL_BATCH_USAGE))
        return false;
    b->kind = (sl_batch_kind_t)item[0].via.u64;
    for (size_t t = 0; t < (root->via.array.size - 1) / 3; t++) {
        const msgpack_object *o = &item[1 + 3 * t];
        size_t cols, rows;
        if (!get_count(&o[0], &cols) || !get_count(&o[1], &rows) || o[2].type != MSGPACK_OBJECT_ARRAY ||
            (cols > 0 && rows > MAX_RECORD_BYTES / cols) || o[2].via.array.size != cols * rows)
            return false;
        sl_cell_table_init(b, t, cols, rows);
        for (size_t i = 0; i < cols * rows; i++) {
            const msgpack_object *c = &o[2].via.array.ptr[i];
            if (c->type == MSGPACK_OBJECT_STR)
                b->tables[t].cells[i] = sl_xstrndup(c->via.str.ptr, c->via.str.size);
            else if (c->type != MSGPACK_OBJECT_NIL)
                return false;
        }
    }
    return true;
}

size_t
sl_spool_decode(const char *data, size_t len, sl_cell_batch_t *b)
{
    *b = (sl_cell_batch_t){0};
    if (len < HEAD_BYTES)
        return 0;
    uint32_t n = get_u32(data);
    if (n > MAX_RECORD_BYTES || n > len - HEAD_BYTES || fnv1a(data + HEAD_BYTES, n) != get_u32(data + 4))
        return 0;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    bool ok = msgpack_unpack_next(&u, data + HEAD_BYTES, n, &off) == MSGPACK_UNPACK_SUCCESS && off == n &&
              decode_payload(&u.data, b);
    msgpack_unpacked_destroy(&u);
    if (!ok) {
        sl_cell_batch_free(b);
        return 0;
    }
    return HEAD_BYTES + n;
}

/* ---- the file ------------------------------------------------------------------- */

struct sl_spool {
    int fd;
    char *path;
    uint64_t max_bytes;
    uint64_t size;     /* where the next record goes */
    uint64_t read_off; /* the oldest record not yet taken */
    uint64_t rows;
    size_t peeked_len; /* of the record peek returned; 0 = none */
    uint64_t peeked_rows;
};

static uint64_t
rows_of(const sl_cell_batch_t *b)
{
    return b->kind == SL_BATCH_ROWS && b->n_tables > 0 ? b->tables[0].rows : 0;
}

/* The record at off, read whole; 0 when none is there intact. buf is reused across calls. */
static size_t
read_record(sl_spool_t *s, uint64_t off, sl_strbuf_t *buf, sl_cell_batch_t *b)
{
    *b = (sl_cell_batch_t){0};
    char head[HEAD_BYTES];
    if (off + HEAD_BYTES > s->size || pread(s->fd, head, HEAD_BYTES, (off_t)off) != HEAD_BYTES)
        return 0;
    uint32_t n = get_u32(head);
    if (n > MAX_RECORD_BYTES || off + HEAD_BYTES + n > s->size)
        return 0;
    buf->len = 0;
    sl_strbuf_append(buf, head, HEAD_BYTES);
    if (buf->cap < HEAD_BYTES + (size_t)n) {
        buf->cap = HEAD_BYTES + (size_t)n;
        buf->data = sl_xrealloc(buf->data, buf->cap);
    }
    if (pread(s->fd, buf->data + HEAD_BYTES, n, (off_t)(off + HEAD_BYTES)) != (ssize_t)n)
        return 0;
    return sl_spool_decode(buf->data, HEAD_BYTES + n, b);
}

sl_spool_t *
sl_spool_open(const char *path, uint64_t max_bytes, uint64_t *cut_bytes, char *err, size_t err_size)
{
    *cut_bytes = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || fchmod(fd, 0600) != 0) {
        sl_text_reason(err, err_size, "cannot open the spool %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    sl_spool_t *s = sl_xcalloc(1, sizeof *s);
    s->fd = fd;
    s->path = sl_xstrdup(path);
    s->max_bytes = max_bytes;
    s->size = (uint64_t)st.st_size;
    sl_strbuf_t buf = {0};
    uint64_t off = 0;
    for (;;) {
        sl_cell_batch_t b;
        size_t n = read_record(s, off, &buf, &b);
        if (n == 0)
            break;
        s->rows += rows_of(&b);
        sl_cell_batch_free(&b);
        off += n;
    }
    free(buf.data);
    if (off < s->size) {
        *cut_bytes = s->size - off;
        if (ftruncate(fd, (off_t)off) != 0) {
            sl_text_reason(err, err_size, "cannot cut the damaged end of the spool %s: %s", path,
                           strerror(errno));
            sl_spool_close(s);
            return NULL;
        }
        s->size = off;
    }
    return s;
}

void
sl_spool_close(sl_spool_t *s)
{
    if (s == NULL)
        return;
    close(s->fd);
    free(s->path);
    free(s);
}

bool
sl_spool_append(sl_spool_t *s, const sl_cell_batch_t *b, char *why, size_t why_size)
{
    sl_strbuf_t rec = {0};
    sl_spool_encode(b, &rec);
    bool ok = false;
    if (s->size + rec.len > s->max_bytes) {
        sl_text_reason(why, why_size, "the spool %s is full (%llu of %llu bytes)", s->path,
                       (unsigned long long)s->size, (unsigned long long)s->max_bytes);
    } else {
        ssize_t w = pwrite(s->fd, rec.data, rec.len, (off_t)s->size);
        if (w == (ssize_t)rec.len) {
            s->size += rec.len;
            s->rows += rows_of(b);
            ok = true;
        } else {
            sl_text_reason(why, why_size, "cannot write the spool %s: %s", s->path,
                           w < 0 ? strerror(errno) : "short write");
            /* A partial record would end the file at the next open; cut it now so later ones count. */
            if (ftruncate(s->fd, (off_t)s->size) != 0)
                sl_text_reason(why, why_size, "cannot write the spool %s: %s", s->path, strerror(errno));
        }
    }
    free(rec.data);
    return ok;
}

bool
sl_spool_peek(sl_spool_t *s, sl_cell_batch_t *b)
{
    sl_strbuf_t buf = {0};
    size_t n = read_record(s, s->read_off, &buf, b);
    free(buf.data);
    s->peeked_len = n;
    s->peeked_rows = n > 0 ? rows_of(b) : 0;
    return n > 0;
}

void
sl_spool_take(sl_spool_t *s)
{
    if (s->peeked_len == 0)
        return;
    s->read_off += s->peeked_len;
    s->rows -= s->peeked_rows < s->rows ? s->peeked_rows : s->rows;
    s->peeked_len = 0;
    /* All written: the file starts over, so that what it holds is only what still waits. */
    if (s->read_off >= s->size && ftruncate(s->fd, 0) == 0) {
        s->size = s->read_off = 0;
        s->rows = 0;
    }
}

bool
sl_spool_empty(const sl_spool_t *s)
{
    return s->read_off >= s->size;
}

uint64_t
sl_spool_rows(const sl_spool_t *s)
{
    return s->rows;
}

uint64_t
sl_spool_bytes(const sl_spool_t *s)
{
    return s->size - s->read_off;
}
