/*
 * The control-message decoder (generated from protocol/schema.toml): every
 * message in the input, back to back, is decoded; each one that decodes must
 * encode, and its encoding must decode and encode to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "sl_proto.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    size_t off = 0;
    while (off < size) {
        sl_proto_message_t m;
        sl_proto_error_t err;
        size_t used = 0;
        if (sl_proto_decode(buf + off, size - off, &m, &used, &err) != 0)
            break;
        CHECK(used > 0 && used <= size - off);
        off += used;

        msgpack_sbuffer first, second;
        msgpack_sbuffer_init(&first);
        msgpack_sbuffer_init(&second);
        CHECK(sl_proto_encode(&m, &first) == 0);
        sl_proto_message_free(&m);

        sl_proto_message_t back;
        size_t back_used = 0;
        CHECK(sl_proto_decode(first.data, first.size, &back, &back_used, &err) == 0);
        CHECK(back_used == first.size);
        CHECK(sl_proto_encode(&back, &second) == 0);
        CHECK(second.size == first.size && memcmp(first.data, second.data, first.size) == 0);
        sl_proto_message_free(&back);
        msgpack_sbuffer_destroy(&first);
        msgpack_sbuffer_destroy(&second);
    }
    return 0;
}
