#include "codes.h"

#include <string.h>

static const struct {
    const char *slug;
    int status;
    const char *text;
} code_rows[SL_CODE_COUNT] = {
#define SL_CODE_ROW(name, slug, status, text) [name] = {slug, status, text},
    SL_CODE_TABLE(SL_CODE_ROW)
#undef SL_CODE_ROW
};

const char *
sl_code_slug(sl_code_t code)
{
    return code < SL_CODE_COUNT ? code_rows[code].slug : "gw.internal";
}

int
sl_code_status(sl_code_t code)
{
    return code < SL_CODE_COUNT ? code_rows[code].status : 500;
}

const char *
sl_code_template(sl_code_t code)
{
    return code < SL_CODE_COUNT ? code_rows[code].text : "";
}

int
sl_code_from_slug(const char *slug, sl_code_t *out)
{
    for (int i = 0; i < SL_CODE_COUNT; i++) {
        if (strcmp(code_rows[i].slug, slug) == 0) {
            *out = (sl_code_t)i;
            return 0;
        }
    }
    return -1;
}

int
sl_code_slug_is_well_formed(const char *slug)
{
    int segments = 0, seg_len = 0;
    for (const char *p = slug;; p++) {
        if (*p == '.' || *p == '\0') {
            if (seg_len == 0)
                return 0;
            segments++;
            seg_len = 0;
            if (*p == '\0')
                break;
        } else if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_') {
            seg_len++;
        } else {
            return 0;
        }
    }
    return segments >= 2;
}
