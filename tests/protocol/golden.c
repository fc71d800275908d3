/*
 * Golden msgpack files: one per sample message (every kind, all optional fields
 * present and absent), named "<sample>.msgpack".
 *
 *   proto-golden check DIR   the C encoding of every sample equals DIR's file,
 *                            and DIR holds no file without a sample
 *   proto-golden write DIR   (re)writes DIR's files after a schema change
 *   proto-golden cross DIR   every sample's file in DIR (written by another codec)
 *                            decodes in C and re-encodes to the same bytes, which
 *                            are also the C encoding of the sample
 *
 * Prints one line per failure and "N passed, M failed"; exits 1 on any failure.
 */
#include "sl_proto_samples.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bytes {
    char *data;
    size_t len;
} bytes_t;

/* Reads path into *out (owned by the caller); returns 0, or -1 when it cannot be read. */
static int
read_file(const char *path, bytes_t *out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t cap = 4096, len = 0, n;
    char *data = malloc(cap);
    while (data != NULL && (n = fread(data + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len < cap)
            continue;
        char *bigger = realloc(data, cap *= 2);
        if (bigger == NULL)
            free(data);
        data = bigger;
    }
    fclose(f);
    if (data == NULL)
        return -1;
    *out = (bytes_t){data, len};
    return 0;
}

static int
write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = fwrite(data, 1, len, f);
    return fclose(f) == 0 && n == len ? 0 : -1;
}

static void
golden_path(char *buf, size_t size, const char *dir, const char *name)
{
    snprintf(buf, size, "%s/%s.msgpack", dir, name);
}

/* Encodes sample i into *out (a fresh sbuffer the caller destroys). */
static int
encode_sample(size_t i, msgpack_sbuffer *out)
{
    sl_proto_message_t m;
    sl_proto_sample_build(i, &m);
    msgpack_sbuffer_init(out);
    int rc = sl_proto_encode(&m, out);
    sl_proto_message_free(&m);
    return rc;
}

static bool
same(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen == blen && memcmp(a, b, alen) == 0;
}

/* Returns NULL when the sample's encoding equals the file, else what is wrong. */
static const char *
check_one(size_t i, const char *dir)
{
    char path[4096];
    bytes_t file;
    msgpack_sbuffer sb;
    golden_path(path, sizeof path, dir, sl_proto_sample_name(i));
    if (read_file(path, &file) != 0)
        return "no golden file (run proto-golden write)";
    const char *why = NULL;
    if (encode_sample(i, &sb) != 0)
        why = "the sample does not encode";
    else if (!same(sb.data, sb.size, file.data, file.len))
        why = "the C encoding differs from the golden file";
    msgpack_sbuffer_destroy(&sb);
    free(file.data);
    return why;
}

static bool
is_sample(const char *file)
{
    for (size_t i = 0; i < sl_proto_sample_count(); i++) {
        const char *name = sl_proto_sample_name(i);
        size_t n = strlen(name);
        if (strncmp(file, name, n) == 0 && strcmp(file + n, ".msgpack") == 0)
            return true;
    }
    return false;
}

/* Counts the files of dir that no sample owns: a removed kind must not leave its golden file. */
static int
count_strays(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        printf("FAIL %s: cannot open\n", dir);
        return 1;
    }
    int strays = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] != '.' && !is_sample(e->d_name)) {
            printf("FAIL %s: no sample has this golden file\n", e->d_name);
            strays++;
        }
    }
    closedir(d);
    return strays;
}

/* Returns NULL when the file decodes and re-encodes to itself and to the C sample. */
static const char *
cross_one(size_t i, const char *dir)
{
    char path[4096];
    bytes_t file;
    sl_proto_message_t m;
    sl_proto_error_t err;
    size_t used = 0;
    golden_path(path, sizeof path, dir, sl_proto_sample_name(i));
    if (read_file(path, &file) != 0)
        return "missing";
    msgpack_sbuffer again, mine;
    msgpack_sbuffer_init(&again);
    int mine_rc = encode_sample(i, &mine);
    const char *why = NULL;
    if (sl_proto_decode(file.data, file.len, &m, &used, &err) != 0 || used != file.len)
        why = "C cannot decode it";
    else if (sl_proto_encode(&m, &again) != 0 || !same(again.data, again.size, file.data, file.len))
        why = "C re-encodes it differently";
    else if (mine_rc != 0 || !same(mine.data, mine.size, file.data, file.len))
        why = "it differs from the C encoding of the sample";
    sl_proto_message_free(&m);
    msgpack_sbuffer_destroy(&mine);
    msgpack_sbuffer_destroy(&again);
    free(file.data);
    return why;
}

static int
write_all(const char *dir)
{
    int failed = 0;
    for (size_t i = 0; i < sl_proto_sample_count(); i++) {
        char path[4096];
        msgpack_sbuffer sb;
        golden_path(path, sizeof path, dir, sl_proto_sample_name(i));
        if (encode_sample(i, &sb) != 0 || write_file(path, sb.data, sb.size) != 0) {
            printf("FAIL %s: cannot write\n", path);
            failed++;
        }
        msgpack_sbuffer_destroy(&sb);
    }
    return failed;
}

int
main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s check|write|cross DIR\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2];
    if (strcmp(mode, "write") == 0)
        return write_all(dir) == 0 ? 0 : 1;
    const char *(*one)(size_t, const char *) = strcmp(mode, "cross") == 0 ? cross_one : check_one;
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sl_proto_sample_count(); i++) {
        const char *why = one(i, dir);
        if (why == NULL) {
            passed++;
        } else {
            printf("FAIL %s: %s\n", sl_proto_sample_name(i), why);
            failed++;
        }
    }
    if (one == check_one)
        failed += count_strays(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
