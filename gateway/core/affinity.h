/*
 * Conversation affinity (behaviour.md §1.5): which upstream served a
 * conversation, and whether its history is sealed to that upstream's
 * account.
 *
 * - Keys: a conversation is named by a 64-bit SipHash-2-4 of the client and
 *   either its session header or its first user message. SipHash, keyed
 *   with a secret the shell draws at start, because the table is a hash
 *   table fed by clients: an unkeyed hash (FNV-1a) would let one client
 *   flood a bucket. Upstreams are named by the same hash of their provider
 *   name, so entries survive a config reload that reorders providers.
 * - The table: bounded, LRU, idle expiry; O(1) get/put/evict; one
 *   allocation at creation, freed by one call. Single-threaded: the shell
 *   holds it behind a mutex.
 * - sl_affinity_apply: what an entry does to a candidate list.
 */
#ifndef SL_AFFINITY_H
#define SL_AFFINITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jscan.h"
#include "route.h"

/* ---- hashing -------------------------------------------------------------- */

/* A SipHash key: 128 secret bits, drawn once per process by the shell (tests use fixed ones). */
typedef struct {
    uint64_t k0, k1;
} sl_hash_key_t;

/* Incremental SipHash-2-4 state; feed any split of the input, the result is the same. */
typedef struct {
    uint64_t v0, v1, v2, v3;
    uint64_t tail; /* up to 7 bytes not yet compressed, little-endian */
    size_t len;    /* bytes fed so far */
} sl_siphash_t;

void sl_siphash_init(sl_siphash_t *h, const sl_hash_key_t *key);
void sl_siphash_update(sl_siphash_t *h, const void *data, size_t n);
/* The 64-bit SipHash-2-4 of everything fed; h is left as it was, so more may be fed after. */
uint64_t sl_siphash_final(const sl_siphash_t *h);
/* One-shot SipHash-2-4 of data[0..n). */
uint64_t sl_siphash(const sl_hash_key_t *key, const void *data, size_t n);

/* ---- conversation keys ---------------------------------------------------- */

/*
 * The precedence of a request header that names a conversation:
 * 0 for x-sluice-session, 1 for x-claude-code-session-id (Claude Code),
 * 2 for session-id (Codex); -1 for any other name. Case-insensitive. The
 * shell keeps the non-empty value of the lowest rank it sees.
 */
int sl_affinity_session_header_rank(const char *name, size_t len);

/*
 * The key of a conversation named by a session header value, scoped to the
 * client (client is whatever identifies the caller, e.g. its gateway key):
 * two clients that happen to pick the same session name never share an
 * entry.
 */
uint64_t sl_affinity_key_session(const sl_hash_key_t *key, const char *client, size_t client_len,
                                 const char *session, size_t session_len);

/*
 * The key of a conversation with no session header: the client plus its
 * first user message (sl_jscan_t.first_user). Only the message's text
 * pieces (sl_jscan_next_text) are hashed, as sent (escapes undecoded), so
 * cache_control markers that move between turns do not rename the
 * conversation; a message with no text (an image alone) is hashed whole.
 * An absent first_user still gives a key (the client's own): its
 * conversations then share one entry, which only costs stickiness
 * precision.
 */
uint64_t sl_affinity_key_message(const sl_hash_key_t *key, const char *client, size_t client_len,
                                 const char *body, sl_jspan_t first_user);

/*
 * The key under which a Responses answer's id is remembered: record the
 * serving upstream under sl_affinity_key_response(id of the response) as
 * sealed when the answer completes, and look a later request up by its
 * previous_response_id first — the stored response lives on that upstream
 * only, and the request's input no longer holds the first user message.
 */
uint64_t sl_affinity_key_response(const sl_hash_key_t *key, const char *client, size_t client_len,
                                  const char *id, size_t id_len);

/*
 * The name of an upstream in the table: a hash of its provider name, never 0
 * (a pin's "none"). Not keyed: it is a value in the table, never a key, and
 * provider names are the operator's, so no client can aim at a collision.
 */
uint64_t sl_affinity_upstream_id(const char *provider_name);

/* ---- the table ------------------------------------------------------------ */

typedef struct sl_affinity sl_affinity_t;

typedef struct {
    uint64_t upstream; /* sl_affinity_upstream_id of the provider that served the conversation */
    bool sealed;       /* its history is bound to that upstream's account */
    /*
     * The upstream the conversation goes back to once it can take it again
     * (it failed over from there, behaviour.md §1.5); 0 or upstream itself:
     * it is home where it is.
     */
    uint64_t home;
} sl_affinity_pin_t;

#define SL_AFFINITY_DEFAULT_CAPACITY 100000
#define SL_AFFINITY_DEFAULT_IDLE_MS  (60 * 60 * 1000)

/*
 * A table of at most capacity entries (1 ..= 2^31) that forgets an entry not
 * used for idle_ms (> 0). All memory is allocated here; sl_affinity_free
 * releases it. Aborts only when out of memory.
 */
sl_affinity_t *sl_affinity_new(size_t capacity, int64_t idle_ms);
void sl_affinity_free(sl_affinity_t *t);

/*
 * Looks a conversation up at time now_ms. On a live entry: copies it to
 * *out, marks it used (most recent, idle timer restarted) and returns true.
 * Returns false, leaving *out untouched, when there is none or it has been
 * idle for idle_ms or more (such an entry is dropped). Time is whatever
 * monotonic milliseconds the caller uses; a now_ms earlier than the entry's
 * last use counts as no idle time.
 */
bool sl_affinity_get(sl_affinity_t *t, uint64_t key, int64_t now_ms, sl_affinity_pin_t *out);

/*
 * Records that the upstream served the conversation at now_ms, as its most
 * recent entry. Sealing only grows: a put that is not sealed keeps an
 * existing seal to the same upstream (a later turn without encrypted
 * items does not unbind the history). A put naming another upstream
 * replaces the entry (the old pin was released, sl_affinity_apply). When
 * the table is full, the least recently used entry makes room.
 */
void sl_affinity_put(sl_affinity_t *t, uint64_t key, sl_affinity_pin_t pin, int64_t now_ms);

/* Drops a conversation's entry; returns whether there was one. */
bool sl_affinity_forget(sl_affinity_t *t, uint64_t key);

/* Entries held, including idle ones not yet dropped (they go when met or when their slot is needed). */
size_t sl_affinity_count(const sl_affinity_t *t);

/* ---- applying an entry ---------------------------------------------------- */

typedef enum {
    SL_AFFINITY_NONE,     /* no entry: the list is as routed */
    SL_AFFINITY_STICKY,   /* the upstream that served the conversation was moved first */
    SL_AFFINITY_SEALED,   /* only the pinned upstream remains; the others are skipped pinned_elsewhere */
    SL_AFFINITY_RELEASED, /* the config no longer lets the entry's upstream serve this: as routed */
    SL_AFFINITY_RETURNED, /* sticky, and its home can take it again: home first, the serving upstream second
                           */
} sl_affinity_effect_t;

/* "sticky", "sealed", "returned" (the protocol's Affinity values); NULL for none and released. */
const char *sl_affinity_effect_slug(sl_affinity_effect_t e);

/*
 * Applies a table entry (pin; NULL when the lookup found none) to the
 * candidates of a request, in place. sealed_history says the request
 * itself carries account-bound history (sl_jscan_t.encrypted_content,
 * thinking_signature, or a previous_response_id); it seals a sticky entry.
 *
 * The entry's upstream is the candidate whose provider name hashes to
 * pin->upstream and whose skip is SL_SKIP_NONE. When it is one:
 * - sticky: it moves to the front, the others keep their order behind it.
 *   Whether it lets go when it cannot serve before the deadline is the
 *   caller's decision (it simply tries the next candidate);
 * - sealed: it moves to the front and every other candidate that could be
 *   tried is skipped with SL_SKIP_PINNED_ELSEWHERE (already-skipped ones
 *   keep their reason); the request waits and retries on it alone.
 * - returned: a sticky entry whose home (pin->home, not the serving
 *   upstream) is a candidate that can be tried and that ready says can take
 *   the conversation again (not paused, window not full, breaker not open:
 *   the caller's facts): home goes first, the serving upstream second, the
 *   others keep their order. A hop to home is a hop to a non-last candidate,
 *   held until content, so a failure there fails over invisibly to the
 *   upstream that served the conversation; if home's breaker is half-open,
 *   the request is its probe. ready is asked about home only, and only then.
 * When it is not (the provider was removed, disabled, or no longer offers
 * the model or the dialect), the pin gives way, sealed or not: nothing in
 * the config can serve the history there any more, and another upstream
 * may still accept it — if not, its own request error reaches the client.
 * The list is then unchanged and SL_AFFINITY_RELEASED returned. Pins hold
 * against everything else (throttled, cooling, busy, windows): those are
 * waited for.
 */
typedef bool (*sl_affinity_ready_fn)(void *ctx, size_t provider);

sl_affinity_effect_t sl_affinity_apply(const sl_config_t *config, const sl_affinity_pin_t *pin,
                                       bool sealed_history, sl_affinity_ready_fn ready, void *ready_ctx,
                                       sl_candidate_t *c, size_t n);

#endif
