/* Conversation keys, the bounded LRU affinity table, and applying an entry (see affinity.h). */
#include "affinity.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xalloc.h"

/* ---- SipHash-2-4 (Aumasson & Bernstein, 2012) ------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void
sipround(sl_siphash_t *h)
{
    h->v0 += h->v1;
    h->v1 = ROTL(h->v1, 13);
    h->v1 ^= h->v0;
    h->v0 = ROTL(h->v0, 32);
    h->v2 += h->v3;
    h->v3 = ROTL(h->v3, 16);
    h->v3 ^= h->v2;
    h->v0 += h->v3;
    h->v3 = ROTL(h->v3, 21);
    h->v3 ^= h->v0;
    h->v2 += h->v1;
    h->v1 = ROTL(h->v1, 17);
    h->v1 ^= h->v2;
    h->v2 = ROTL(h->v2, 32);
}

static void
compress(sl_siphash_t *h, uint64_t m)
{
    h->v3 ^= m;
    sipround(h);
    sipround(h);
    h->v0 ^= m;
}

/* n (< 8) bytes as the low bytes of a little-endian word. */
static uint64_t
load_le_partial(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i > 0; i--)
        v = (v << 8) | p[i - 1];
    return v;
}

/* One load where the host is little-endian (the compiler folds the memcpy), else byte by byte. */
static uint64_t
load_le64(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
#endif
}

void
sl_siphash_init(sl_siphash_t *h, const sl_hash_key_t *key)
{
    h->v0 = key->k0 ^ 0x736f6d6570736575u;
    h->v1 = key->k1 ^ 0x646f72616e646f6du;
    h->v2 = key->k0 ^ 0x6c7967656e657261u;
    h->v3 = key->k1 ^ 0x7465646279746573u;
    h->tail = 0;
    h->len = 0;
}

void
sl_siphash_update(sl_siphash_t *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    /* Top up a partial word first, then whole words straight from the input, then the rest as the tail. */
    size_t used = h->len % 8;
    if (used != 0) {
        size_t take = n < 8 - used ? n : 8 - used;
        h->tail |= load_le_partial(p, take) << (8 * used);
        h->len += take;
        p += take;
        n -= take;
        if (h->len % 8 != 0)
            return;
        compress(h, h->tail);
        h->tail = 0;
    }
    for (; n >= 8; n -= 8, p += 8, h->len += 8)
        compress(h, load_le64(p));
    h->tail = load_le_partial(p, n);
    h->len += n;
}

uint64_t
sl_siphash_final(const sl_siphash_t *h)
{
    sl_siphash_t s = *h;
    uint64_t b = ((uint64_t)s.len << 56) | s.tail;
    compress(&s, b);
    s.v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        sipround(&s);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint64_t
sl_siphash(const sl_hash_key_t *key, const void *data, size_t n)
{
    sl_siphash_t h;
    sl_siphash_init(&h, key);
    sl_siphash_update(&h, data, n);
    return sl_siphash_final(&h);
}

/* ---- conversation keys ---------------------------------------------------- */

#define NAME(s)                                                                                              \
    {                                                                                                        \
        s, sizeof(s) - 1                                                                                     \
    }
static const struct {
    const char *name;
    size_t len;
} session_headers[] = {NAME("x-sluice-session"), NAME("x-claude-code-session-id"), NAME("session-id")};
#undef NAME

int
sl_affinity_session_header_rank(const char *name, size_t len)
{
    /* Asked of every header of every request: most differ in length from all three. */
    for (size_t i = 0; i < sizeof(session_headers) / sizeof(session_headers[0]); i++) {
        if (session_headers[i].len == len && strncasecmp(session_headers[i].name, name, len) == 0)
            return (int)i;
    }
    return -1;
}

/*
 * Every hashed input is a tag byte naming what it is, then length-prefixed
 * fields, so no two different inputs feed the same bytes (a client "ab" with
 * session "c" is not client "a" with session "bc").
 */
static void
feed_tag(sl_siphash_t *h, char tag)
{
    sl_siphash_update(h, &tag, 1);
}

static void
feed_field(sl_siphash_t *h, const void *p, size_t n)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)n >> (8 * i));
    sl_siphash_update(h, len, sizeof len);
    sl_siphash_update(h, p, n);
}

static uint64_t
keyed_pair(const sl_hash_key_t *key, char tag, const char *a, size_t a_len, const char *b, size_t b_len)
{
    sl_siphash_t h;
    sl_siphash_init(&h, key);
    feed_tag(&h, tag);
    feed_field(&h, a, a_len);
    feed_field(&h, b, b_len);
    return sl_siphash_final(&h);
}

uint64_t
sl_affinity_key_session(const sl_hash_key_t *key, const char *client, size_t client_len, const char *session,
                        size_t session_len)
{
    return keyed_pair(key, 'S', client, client_len, session, session_len);
}

uint64_t
sl_affinity_key_response(const sl_hash_key_t *key, const char *client, size_t client_len, const char *id,
                         size_t id_len)
{
    return keyed_pair(key, 'R', client, client_len, id, id_len);
}

uint64_t
sl_affinity_key_message(const sl_hash_key_t *key, const char *client, size_t client_len, const char *body,
                        sl_jspan_t first_user)
{
    sl_siphash_t h;
    sl_siphash_init(&h, key);
    feed_tag(&h, 'M');
    feed_field(&h, client, client_len);
    size_t cursor = 0, pieces = 0;
    sl_jspan_t text;
    while (sl_jscan_next_text(body, first_user, &cursor, &text)) {
        feed_tag(&h, 'T');
        feed_field(&h, body + text.off, text.len);
        pieces++;
    }
    if (pieces == 0 && first_user.len != 0) {
        feed_tag(&h, 'W');
        feed_field(&h, body + first_user.off, first_user.len);
    }
    return sl_siphash_final(&h);
}

/* FNV-1a, 64 bits: asked several times per request, of a name of a few bytes. */
uint64_t
sl_affinity_upstream_id(const char *provider_name)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (const unsigned char *p = (const unsigned char *)provider_name; *p != '\0'; p++)
        h = (h ^ *p) * 0x100000001b3u;
    return h != 0 ? h : 1;
}

/* ---- the table ------------------------------------------------------------ */

#define NIL UINT32_MAX

typedef struct {
    uint64_t key, upstream, home;
    int64_t last_ms;
    uint32_t newer, older; /* the LRU list */
    uint32_t chain;        /* next in the bucket; next free slot while free */
    bool sealed;
} entry_t;

struct sl_affinity {
    entry_t *entries;
    uint32_t *buckets;
    uint32_t mask;      /* buckets - 1; buckets is a power of two >= capacity */
    uint32_t capacity;  /* slots */
    uint32_t fresh;     /* slots never used yet start here */
    uint32_t free_head; /* slots used and released */
    uint32_t count;
    uint32_t newest, oldest;
    int64_t idle_ms;
};

/* Idle entries dropped from the old end per put: a bounded cost per call that outpaces arrivals. */
#define SWEEP_PER_PUT 2

sl_affinity_t *
sl_affinity_new(size_t capacity, int64_t idle_ms)
{
    assert(capacity >= 1 && capacity <= ((size_t)1 << 31) && idle_ms > 0);
    size_t buckets = 1;
    while (buckets < capacity)
        buckets <<= 1;
    /* One block: the header, the entries, the buckets (alignment descends). */
    size_t head = (sizeof(sl_affinity_t) + 7) & ~(size_t)7;
    char *block = sl_xmalloc(head + capacity * sizeof(entry_t) + buckets * sizeof(uint32_t));
    sl_affinity_t *t = (sl_affinity_t *)block;
    t->entries = (entry_t *)(block + head);
    t->buckets = (uint32_t *)(block + head + capacity * sizeof(entry_t));
    memset(t->buckets, 0xFF, buckets * sizeof(uint32_t));
    t->mask = (uint32_t)(buckets - 1);
    t->capacity = (uint32_t)capacity;
    t->fresh = 0;
    t->free_head = NIL;
    t->count = 0;
    t->newest = t->oldest = NIL;
    t->idle_ms = idle_ms;
    return t;
}

void
sl_affinity_free(sl_affinity_t *t)
{
    free(t);
}

size_t
sl_affinity_count(const sl_affinity_t *t)
{
    return t->count;
}

static uint32_t
find(const sl_affinity_t *t, uint64_t key)
{
    uint32_t i = t->buckets[key & t->mask];
    while (i != NIL && t->entries[i].key != key)
        i = t->entries[i].chain;
    return i;
}

static void
lru_unlink(sl_affinity_t *t, uint32_t i)
{
    entry_t *e = &t->entries[i];
    if (e->newer != NIL)
        t->entries[e->newer].older = e->older;
    else
        t->newest = e->older;
    if (e->older != NIL)
        t->entries[e->older].newer = e->newer;
    else
        t->oldest = e->newer;
}

static void
lru_push_newest(sl_affinity_t *t, uint32_t i)
{
    entry_t *e = &t->entries[i];
    e->newer = NIL;
    e->older = t->newest;
    if (t->newest != NIL)
        t->entries[t->newest].newer = i;
    t->newest = i;
    if (t->oldest == NIL)
        t->oldest = i;
}

static void
drop(sl_affinity_t *t, uint32_t i)
{
    uint32_t *link = &t->buckets[t->entries[i].key & t->mask];
    while (*link != i)
        link = &t->entries[*link].chain;
    *link = t->entries[i].chain;
    lru_unlink(t, i);
    t->entries[i].chain = t->free_head;
    t->free_head = i;
    t->count--;
}

static bool
idle(const sl_affinity_t *t, uint32_t i, int64_t now_ms)
{
    return now_ms - t->entries[i].last_ms >= t->idle_ms;
}

static void
touch(sl_affinity_t *t, uint32_t i, int64_t now_ms)
{
    if (now_ms > t->entries[i].last_ms)
        t->entries[i].last_ms = now_ms;
    lru_unlink(t, i);
    lru_push_newest(t, i);
}

bool
sl_affinity_get(sl_affinity_t *t, uint64_t key, int64_t now_ms, sl_affinity_pin_t *out)
{
    uint32_t i = find(t, key);
    if (i == NIL)
        return false;
    if (idle(t, i, now_ms)) {
        drop(t, i);
        return false;
    }
    touch(t, i, now_ms);
    out->upstream = t->entries[i].upstream;
    out->sealed = t->entries[i].sealed;
    out->home = t->entries[i].home;
    return true;
}

static uint32_t
take_slot(sl_affinity_t *t)
{
    if (t->free_head == NIL) {
        if (t->fresh < t->capacity)
            return t->fresh++;
        drop(t, t->oldest);
    }
    uint32_t i = t->free_head;
    t->free_head = t->entries[i].chain;
    return i;
}

void
sl_affinity_put(sl_affinity_t *t, uint64_t key, sl_affinity_pin_t pin, int64_t now_ms)
{
    for (int k = 0; k < SWEEP_PER_PUT && t->oldest != NIL && idle(t, t->oldest, now_ms); k++)
        drop(t, t->oldest);
    uint32_t i = find(t, key);
    if (i != NIL) {
        entry_t *e = &t->entries[i];
        e->sealed = pin.sealed || (e->sealed && e->upstream == pin.upstream);
        e->upstream = pin.upstream;
        e->home = pin.home;
        touch(t, i, now_ms);
        return;
    }
    i = take_slot(t);
    entry_t *e = &t->entries[i];
    e->key = key;
    e->upstream = pin.upstream;
    e->home = pin.home;
    e->sealed = pin.sealed;
    e->last_ms = now_ms;
    uint32_t *bucket = &t->buckets[key & t->mask];
    e->chain = *bucket;
    *bucket = i;
    lru_push_newest(t, i);
    t->count++;
}

bool
sl_affinity_forget(sl_affinity_t *t, uint64_t key)
{
    uint32_t i = find(t, key);
    if (i == NIL)
        return false;
    drop(t, i);
    return true;
}

/* ---- applying an entry ---------------------------------------------------- */

const char *
sl_affinity_effect_slug(sl_affinity_effect_t e)
{
    static const char *const slugs[] = {
        [SL_AFFINITY_NONE] = NULL,     [SL_AFFINITY_STICKY] = "sticky",     [SL_AFFINITY_SEALED] = "sealed",
        [SL_AFFINITY_RELEASED] = NULL, [SL_AFFINITY_RETURNED] = "returned",
    };
    return (unsigned)e < sizeof(slugs) / sizeof(slugs[0]) ? slugs[e] : NULL;
}

/* The first candidate that can be tried whose provider hashes to upstream; n when none. */
static size_t
find_candidate(const sl_config_t *config, uint64_t upstream, const sl_candidate_t *c, size_t n)
{
    size_t at = 0;
    while (at < n && (c[at].skip != SL_SKIP_NONE ||
                      sl_affinity_upstream_id(config->providers[c[at].provider].name) != upstream))
        at++;
    return at;
}

/* Moves c[at] to the front; the candidates before it keep their order behind it. */
static void
move_first(sl_candidate_t *c, size_t at)
{
    sl_candidate_t chosen = c[at];
    memmove(c + 1, c, at * sizeof(*c));
    c[0] = chosen;
}

sl_affinity_effect_t
sl_affinity_apply(const sl_config_t *config, const sl_affinity_pin_t *pin, bool sealed_history,
                  sl_affinity_ready_fn ready, void *ready_ctx, sl_candidate_t *c, size_t n)
{
    if (pin == NULL)
        return SL_AFFINITY_NONE;
    size_t at = find_candidate(config, pin->upstream, c, n);
    if (at == n)
        return SL_AFFINITY_RELEASED;
    move_first(c, at);
    bool sealed = pin->sealed || sealed_history;
    if (!sealed && pin->home != 0 && pin->home != pin->upstream && ready != NULL) {
        size_t home = find_candidate(config, pin->home, c, n);
        if (home < n && ready(ready_ctx, c[home].provider)) {
            move_first(c, home);
            return SL_AFFINITY_RETURNED;
        }
    }
    if (!sealed)
        return SL_AFFINITY_STICKY;
    for (size_t j = 1; j < n; j++) {
        if (c[j].skip == SL_SKIP_NONE)
            c[j].skip = SL_SKIP_PINNED_ELSEWHERE;
    }
    return SL_AFFINITY_SEALED;
}
