#include "mask.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#define ELLIPSIS "\xe2\x80\xa6" /* "…", 3 bytes */

/* Longest first: the first match wins. Rows of chars, not pointers: a prefix's first letter is one load. */
static const char key_prefixes[][9] = {"sk-ant-", "sk-proj-", "sk-", "AIza", "AKIA", "ASIA"};
#define SHORTEST_PREFIX  3 /* "sk-" */
#define KEY_AFTER_PREFIX 8 /* a prefixed key is masked when this many key characters follow the prefix */

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
    if (len == 0)
        return 0;
    for (size_t i = 0; i < sizeof(key_prefixes) / sizeof(key_prefixes[0]); i++) {
        if (s[0] != key_prefixes[i][0])
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

/*
 * The word a secret's name holds that starts with c (any case), or NULL;
 * *len its length. Every row's and event's text passes here, so one switch
 * per letter decides, rather than a compare per word.
 */
static const char *
secret_word_starting(char c, size_t *len)
{
#define WORD(w) (*len = sizeof(w) - 1, w)
    switch (c | 0x20) {
    case 'k':
        return WORD("key");
    case 't':
        return WORD("token");
    case 's':
        return WORD("secret");
    case 'a':
        return WORD("authorization");
    default:
        return NULL;
    }
#undef WORD
}

static int
word_names_secret(const char *w, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        size_t k;
        const char *word = secret_word_starting(w[j], &k);
        if (word != NULL && k <= n - j && strncasecmp(w + j, word, k) == 0)
            return 1;
    }
    return 0;
}

static int
is_separator(char c)
{
    return c == ' ' || c == '"' || c == '\'' || c == ':' || c == '=' || c == '\\';
}

static int
is_scheme_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '-' || c == '.';
}

/* What a URL in free text may hold: not blanks, control characters, quotes or angle brackets. */
static int
is_url_char(char c)
{
    unsigned char u = (unsigned char)c;
    return u > 0x20 && u != 0x7F && u != '"' && u != '\'' && u != '<' && u != '>' && u != '`';
}

/* The password in an authority and what follows it, s[0..len) starting just after "://". */
static bool
authority_password(const char *s, size_t len, size_t *at, size_t *n)
{
    if (len == 0 || s[0] == '/')
        return false;
    size_t amp = len;
    while (amp > 0 && s[amp - 1] != '@')
        amp--;
    if (amp == 0)
        return false;
    amp--;
    const char *colon = memchr(s, ':', amp);
    if (colon == NULL)
        return false;
    *at = (size_t)(colon - s) + 1;
    *n = amp - *at;
    return true;
}

bool
sl_url_password(const char *text, size_t len, size_t *at, size_t *n)
{
    size_t s = 0;
    if (len == 0 || !((text[0] >= 'a' && text[0] <= 'z') || (text[0] >= 'A' && text[0] <= 'Z')))
        return false;
    while (s < len && is_scheme_char(text[s]))
        s++;
    if (len - s < 3 || memcmp(text + s, "://", 3) != 0)
        return false;
    size_t off, count;
    if (!authority_password(text + s + 3, len - s - 3, &off, &count))
        return false;
    *at = s + 3 + off;
    *n = count;
    return true;
}

/* A password scrubbed before, or shown as "***" by the config's redaction, or a ${VAR} reference. */
static int
password_is_masked(const char *p, size_t n)
{
    if (n == 3 && memcmp(p, ELLIPSIS, 3) == 0)
        return 1;
    size_t stars = 0;
    while (stars < n && p[stars] == '*')
        stars++;
    if (stars == n)
        return 1;
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] == '$' && p[i + 1] == '{')
            return 1;
    }
    return 0;
}

/*
 * At "://" (text[r]) after a scheme: masks the URL's password, copying what
 * stands before it. Returns the bytes consumed from r (0: no password here,
 * nothing written) and advances *w by what it wrote.
 */
static size_t
scrub_url_password(char *text, size_t len, size_t r, size_t *w)
{
    if (r == 0 || len - r < 4 || text[r + 1] != '/' || text[r + 2] != '/' || !is_scheme_char(text[r - 1]))
        return 0;
    size_t span = run_len(text + r + 3, len - r - 3, is_url_char);
    size_t at, n;
    if (!authority_password(text + r + 3, span, &at, &n) || n == 0 ||
        password_is_masked(text + r + 3 + at, n))
        return 0;
    size_t keep = 3 + at;
    memmove(text + *w, text + r, keep);
    *w += keep;
    if (n >= 3) {
        memcpy(text + *w, ELLIPSIS, 3);
        *w += 3;
    } else {
        memset(text + *w, '*', n);
        *w += n;
    }
    return keep + n;
}

static bool
starts_a_prefix(char c)
{
    for (size_t i = 0; i < sizeof(key_prefixes) / sizeof(key_prefixes[0]); i++) {
        if (key_prefixes[i][0] == c)
            return true;
    }
    return false;
}

/* The three questions may_hold_secret asks of every byte, answered once per byte value before main. */
enum { CLASS_SEPARATOR = 1, CLASS_KEY = 2, CLASS_PREFIX_START = 4 };
static unsigned char byte_class[256];

__attribute__((constructor)) static void
classify_bytes(void)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        byte_class[b] =
            (unsigned char)((is_separator(c) ? CLASS_SEPARATOR : 0) | (is_key_char(c) ? CLASS_KEY : 0) |
                            (starts_a_prefix(c) ? CLASS_PREFIX_START : 0));
    }
}

/*
 * Whether text holds anything sl_scrub_secrets could mask. Each pattern needs
 * a separator (a URL's ':', "Bearer "'s space, the ':' or '=' after a secret
 * word) or a run of key characters that starts like a known prefix and is
 * long enough for one. Most row fields (paths, model names) have neither, so
 * one cheap pass over them decides: the request DB's writer asks it of every
 * row's path and model names.
 */
static bool
may_hold_secret(const char *text, size_t len)
{
    size_t run = 0;
    bool prefixed = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char class = byte_class[(unsigned char)text[i]];
        if (class & CLASS_SEPARATOR)
            return true;
        if (!(class & CLASS_KEY)) {
            run = 0;
            continue;
        }
        if (run++ == 0)
            prefixed = class & CLASS_PREFIX_START;
        if (prefixed && run >= SHORTEST_PREFIX + KEY_AFTER_PREFIX)
            return true;
    }
    return false;
}

size_t
sl_scrub_secrets(char *text, size_t len)
{
    if (!may_hold_secret(text, len))
        return len;
    size_t r = 0, w = 0;
    while (r < len) {
        if (text[r] == ':') {
            size_t used = scrub_url_password(text, len, r, &w);
            if (used > 0) {
                r += used;
                continue;
            }
        }
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
                if (t >= p + KEY_AFTER_PREFIX) {
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
                if (w != r)
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
