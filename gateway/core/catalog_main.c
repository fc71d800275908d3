/*
 * Prints the message-code catalog as JSON, from the one table in codes.h.
 * Run by the build; the output is build/gateway/message-codes.json.
 */
#include <stdio.h>

#include "codes.h"

static void
print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

int
main(void)
{
    puts("[");
    for (int i = 0; i < SL_CODE_COUNT; i++) {
        printf("  {\"code\": ");
        print_json_string(sl_code_slug((sl_code_t)i));
        printf(", \"status\": %d, \"text\": ", sl_code_status((sl_code_t)i));
        print_json_string(sl_code_template((sl_code_t)i));
        printf("}%s\n", i + 1 < SL_CODE_COUNT ? "," : "");
    }
    puts("]");
    return 0;
}
