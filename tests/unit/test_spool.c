/*
 * The spool: batches come back in the order they went in, survive a reopen,
 * a cut-off or damaged last record is dropped at open and nothing before it,
 * the cap refuses a batch whole, and the file empties once all is taken.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spool.h"

static char dir[64], path[128];

static void
setup(void)
{
    strcpy(dir, "/tmp/sluice-spool-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sluice.spool", dir);
}

static void
teardown(void)
{
    unlink(path);
    rmdir(dir);
}

TestSuite(spool, .init = setup, .fini = teardown);

/* A ROWS batch of n requests named tag-0.. (id column) with one NULL cell each, and one attempt. */
static sl_cell_batch_t
rows_batch(const char *tag, size_t n)
{
    sl_cell_batch_t b = {.kind = SL_BATCH_ROWS};
    sl_cell_table_init(&b, 0, 3, n);
    sl_cell_table_init(&b, 1, 2, 1);
    for (size_t i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%zu", tag, i);
        b.tables[0].cells[i * 3] = strdup(id);
        b.tables[0].cells[i * 3 + 2] = strdup("text with \"quotes\" and \xff bytes");
    }
    b.tables[1].cells[0] = strdup(tag);
    return b;
}

static sl_spool_t *
open_spool(uint64_t max_bytes, uint64_t *cut)
{
    char err[256];
    uint64_t ignored;
    sl_spool_t *s = sl_spool_open(path, max_bytes, cut != NULL ? cut : &ignored, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    return s;
}

static void
append(sl_spool_t *s, const char *tag, size_t n)
{
    sl_cell_batch_t b = rows_batch(tag, n);
    char why[256];
    cr_assert(sl_spool_append(s, &b, why, sizeof why), "%s", why);
    sl_cell_batch_free(&b);
}

/* Peeks the next batch, checks it is tag's with n rows, and takes it. */
static void
take_expect(sl_spool_t *s, const char *tag, size_t n)
{
    sl_cell_batch_t b;
    cr_assert(sl_spool_peek(s, &b), "batch %s is there", tag);
    cr_assert_eq(b.kind, SL_BATCH_ROWS);
    cr_assert_eq(b.n_tables, 2);
    cr_assert_eq(b.tables[0].rows, n);
    char id[64];
    snprintf(id, sizeof id, "%s-0", tag);
    cr_assert_str_eq(b.tables[0].cells[0], id);
    cr_assert_null(b.tables[0].cells[1], "a NULL cell stays NULL");
    cr_assert_str_eq(b.tables[0].cells[2], "text with \"quotes\" and \xff bytes", "bytes kept as they were");
    cr_assert_str_eq(b.tables[1].cells[0], tag);
    cr_assert_null(b.tables[1].cells[1]);
    sl_cell_batch_free(&b);
    sl_spool_take(s);
}

static off_t
file_size(void)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return st.st_size;
}

Test(spool, batches_come_back_in_order_across_a_reopen_and_the_file_empties_when_all_are_taken)
{
    sl_spool_t *s = open_spool(1 << 20, NULL);
    cr_assert(sl_spool_empty(s));
    append(s, "a", 3);
    append(s, "b", 1);
    append(s, "c", 2);
    cr_assert_eq(sl_spool_rows(s), 6);
    sl_spool_close(s);

    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "the spool names clients and models: private");

    s = open_spool(1 << 20, NULL);
    cr_assert_eq(sl_spool_rows(s), 6, "counted again at open");
    take_expect(s, "a", 3);
    cr_assert_eq(sl_spool_rows(s), 3);
    cr_assert_not(sl_spool_empty(s));
    take_expect(s, "b", 1);
    take_expect(s, "c", 2);
    cr_assert(sl_spool_empty(s));
    cr_assert_eq(sl_spool_rows(s), 0);
    cr_assert_eq(file_size(), 0, "emptied once every batch is taken");
    sl_cell_batch_t none;
    cr_assert_not(sl_spool_peek(s, &none));
    sl_spool_close(s);
}

Test(spool, a_batch_peeked_but_not_taken_comes_again_and_a_reopen_starts_from_the_first_not_emptied)
{
    sl_spool_t *s = open_spool(1 << 20, NULL);
    append(s, "a", 1);
    append(s, "b", 1);
    sl_cell_batch_t b;
    cr_assert(sl_spool_peek(s, &b));
    sl_cell_batch_free(&b);
    take_expect(s, "a", 1);
    /* b peeked, the write failed: it is still the next one. */
    cr_assert(sl_spool_peek(s, &b));
    sl_cell_batch_free(&b);
    take_expect(s, "b", 1);
    append(s, "c", 1);
    sl_spool_close(s);
    /* Taken batches live on until the file empties: a crash may write them again (the store's inserts skip
     * them). */
    s = open_spool(1 << 20, NULL);
    take_expect(s, "c", 1);
    sl_spool_close(s);
}

Test(spool, a_record_cut_short_or_damaged_ends_the_file_at_open_and_what_came_before_is_kept)
{
    sl_spool_t *s = open_spool(1 << 20, NULL);
    append(s, "a", 2);
    off_t after_a = file_size();
    append(s, "b", 2);
    off_t after_b = file_size();
    sl_spool_close(s);

    /* A crash in the middle of b's write. */
    cr_assert_eq(truncate(path, after_b - 5), 0);
    uint64_t cut = 0;
    s = open_spool(1 << 20, &cut);
    cr_assert_eq(cut, (uint64_t)(after_b - 5 - after_a));
    cr_assert_eq(sl_spool_rows(s), 2);
    cr_assert_eq(file_size(), after_a, "cut at the last whole record");
    append(s, "c", 1);
    sl_spool_close(s);

    /* A flipped byte inside c's payload: its checksum no longer matches. */
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    char byte;
    cr_assert_eq(pread(fd, &byte, 1, after_a + 12), 1);
    byte ^= 0x40;
    cr_assert_eq(pwrite(fd, &byte, 1, after_a + 12), 1);
    close(fd);
    s = open_spool(1 << 20, &cut);
    cr_assert_gt(cut, 0);
    take_expect(s, "a", 2);
    cr_assert(sl_spool_empty(s));
    sl_spool_close(s);
}

Test(spool, a_batch_past_the_cap_is_refused_whole_and_the_next_that_fits_goes_in)
{
    sl_spool_t *s = open_spool(400, NULL);
    append(s, "a", 1);
    uint64_t used = sl_spool_bytes(s);
    sl_cell_batch_t big = rows_batch("big", 50);
    char why[256];
    cr_assert_not(sl_spool_append(s, &big, why, sizeof why));
    cr_assert(strstr(why, "full") != NULL, "%s", why);
    sl_cell_batch_free(&big);
    cr_assert_eq(sl_spool_bytes(s), used, "nothing of it written");
    cr_assert_eq(sl_spool_rows(s), 1);
    append(s, "b", 1);
    take_expect(s, "a", 1);
    take_expect(s, "b", 1);
    sl_spool_close(s);
}

Test(spool, a_record_decodes_to_what_was_encoded_and_garbage_decodes_to_nothing)
{
    sl_cell_batch_t b = {.kind = SL_BATCH_USAGE};
    sl_cell_table_init(&b, 0, 2, 2);
    b.tables[0].cells[0] = strdup("provider");
    b.tables[0].cells[3] = strdup("42");
    sl_strbuf_t out = {0};
    sl_spool_encode(&b, &out);
    sl_cell_batch_t back;
    cr_assert_eq(sl_spool_decode(out.data, out.len, &back), out.len);
    cr_assert_eq(back.kind, SL_BATCH_USAGE);
    cr_assert_eq(back.n_tables, 1);
    cr_assert_str_eq(back.tables[0].cells[0], "provider");
    cr_assert_null(back.tables[0].cells[1]);
    cr_assert_null(back.tables[0].cells[2]);
    cr_assert_str_eq(back.tables[0].cells[3], "42");
    sl_cell_batch_free(&back);
    for (size_t cut = 0; cut < out.len; cut++)
        cr_assert_eq(sl_spool_decode(out.data, cut, &back), 0, "cut at %zu", cut);
    cr_assert_eq(sl_spool_decode("\x05\x00\x00\x00\x00\x00\x00\x00hello", 13, &back), 0);
    sl_cell_batch_free(&b);
    free(out.data);
}
