#include "mask.h"

#include <string.h>
#include <strings.h>

#define ELLIPSIS "\xe2\x80\xa6" /* "…", 3 bytes */

/* Longest first: the first match wins. */
static const char *const key_prefixes[] = {"sk-ant-", "sk-proj-", "sk-", "AIza", "AKIA", "ASIA"};

static const char *const secret_words[] = {"key", "token", "secret", "authorization"};

static int
is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Bearer tokens and generic secrets may be base64 or JWTs. */
static int
is_token_char(char c)
{
    return is_key_char(c) || c == '.' || c == '+' || c == '/' || c == '=' || c == '~';
}

static size_t
known_prefix_len(const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof(key_prefixes) / sizeof(key_prefixes[0]); i++) {
        if (len == 0 || s[0] != key_prefixes[i][0])
            continue;
        size_t n = strlen(key_prefixes[i]);
        if (n <= len && memcmp(s, key_prefixes[i], n) == 0)
            return n;
    }
    return 0;
}

/* Writes prefix + "…" + last 4 (or only "…" when short) at dst; returns bytes written. */
static size_t
write_masked(char *dst, const char *tok, size_t tok_len, size_t prefix_len)
{
    char tail[4];
    int show_tail = tok_len >= 12 && tok_len >= prefix_len + 8;
    if (show_tail)
        memcpy(tail, tok + tok_len - 4, 4);
    else
        prefix_len = 0;
    size_t n = 0;
    memmove(dst, tok, prefix_len);
    n += prefix_len;
    memcpy(dst + n, ELLIPSIS, 3);
    n += 3;
    if (show_tail) {
        memcpy(dst + n, tail, 4);
        n += 4;
    }
    return n;
}

char *
sl_mask_key(const char *key, char out[SL_MASKED_KEY_MAX])
{
    size_t len = strlen(key);
    size_t n = write_masked(out, key, len, known_prefix_len(key, len));
    out[n] = '\0';
    return out;
}

static size_t
run_len(const char *s, size_t len, int (*pred)(char))
{
    size_t n = 0;
    while (n < len && pred(s[n]))
        n++;
    return n;
}

/* Every row's and event's text passes here: a word is only compared where its first letter matches. */
static int
word_names_secret(const char *w, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        char c = (char)(w[j] | 0x20);
        for (size_t i = 0; i < sizeof(secret_words) / sizeof(secret_words[0]); i++) {
            if (c != secret_words[i][0])
                continue;
            size_t k = strlen(secret_words[i]);
            if (j + k <= n && strncasecmp(w + j, secret_words[i], k) == 0)
                return 1;
        }
    }
    return 0;
}

static int
is_separator(char c)
{
    return c == ' ' || c == '"' || c == '\'' || c == ':' || c == '=' || c == '\\';
}

size_t
sl_scrub_secrets(char *text, size_t len)
{
    size_t r = 0, w = 0;
    while (r < len) {
        int at_boundary = r == 0 || !is_key_char(text[r - 1]);
        if (at_boundary) {
            size_t rest = len - r;
            /* "Bearer <token>" */
            if (rest > 7 && (text[r] | 0x20) == 'b' && strncasecmp(text + r, "bearer ", 7) == 0) {
                size_t t = run_len(text + r + 7, rest - 7, is_token_char);
                if (t >= 8) {
                    memmove(text + w, text + r, 7);
                    w += 7;
                    w += write_masked(text + w, text + r + 7, t, 0);
                    r += 7 + t;
                    continue;
                }
            }
            /* A key with a known prefix. */
            size_t p = known_prefix_len(text + r, rest);
            if (p > 0) {
                size_t t = run_len(text + r, rest, is_key_char);
                if (t >= p + 8) {
                    w += write_masked(text + w, text + r, t, p);
                    r += t;
                    continue;
                }
            }
            /* A long token after a word such as api_key, access_token, client_secret. */
            size_t word = run_len(text + r, rest, is_key_char);
            if (word > 0 && word_names_secret(text + r, word)) {
                size_t sep = 0;
                while (word + sep < rest && sep < 8 && is_separator(text[r + word + sep]))
                    sep++;
                size_t t = sep > 0 ? run_len(text + r + word + sep, rest - word - sep, is_token_char) : 0;
                if (t >= 20) {
                    memmove(text + w, text + r, word + sep);
                    w += word + sep;
                    const char *tok = text + r + word + sep;
                    w += write_masked(text + w, tok, t, known_prefix_len(tok, t));
                    r += word + sep + t;
                    continue;
                }
                memmove(text + w, text + r, word);
                w += word;
                r += word;
                continue;
            }
        }
        text[w++] = text[r++];
    }
    if (w < len)
        text[w] = '\0';
    return w;
}
