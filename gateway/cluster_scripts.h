/*
 * The Lua scripts a cluster's instances run in Redis (cluster.md): every
 * change of shared state that must be atomic is one of these, on Redis's
 * clock (TIME). Keys are named by core/cluster_msg.h. Lua in Redis is 5.1:
 * numbers are doubles, exact for the times and amounts used here (< 2^53).
 */
#ifndef SL_CLUSTER_SCRIPTS_H
#define SL_CLUSTER_SCRIPTS_H

#include <stdbool.h>
#include <stddef.h>

#include <stddef.h>

/* Redis's clock in ms (TIME), as every script reads it: `now`. */
#define SL_CLUSTER_LUA_NOW                                                                                   \
    "local t = redis.call('TIME')\n"                                                                         \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

/*
 * A rolling window's use, the one place a script counts it: the counter is
 * a hash of slot number to amount, and a charge in slot k counts while now
 * < (k + 2) * S + W (S the slot's ms, W the window's) — its slot, one margin
 * slot for the upstream's lag and the window, exactly as core/limits.c
 * counts it. Slots out of it are dropped. Returns the use and the slots
 * still counted, {k, amount, when it stops counting} each.
 */
#define SL_CLUSTER_LUA_WINDOW_USE                                                                            \
    "local function window_use(key, S, W, now)\n"                                                            \
    "  local all, used, slots = redis.call('HGETALL', key), 0, {}\n"                                         \
    "  for j = 1, #all, 2 do\n"                                                                              \
    "    local k, x = tonumber(all[j]), tonumber(all[j + 1])\n"                                              \
    "    local e = (k + 2) * S + W\n"                                                                        \
    "    if e > now then\n"                                                                                  \
    "      used = used + x\n"                                                                                \
    "      slots[#slots + 1] = {k, x, e}\n"                                                                  \
    "    else\n"                                                                                             \
    "      redis.call('HDEL', key, all[j])\n"                                                                \
    "    end\n"                                                                                              \
    "  end\n"                                                                                                \
    "  return used, slots\n"                                                                                 \
    "end\n"

/*
 * The heartbeat. KEYS: 1 hb:INSTANCE, 2 instances (a sorted set of live
 * instances by the end of their heartbeat). ARGV: 1 what the heartbeat
 * holds, 2 the instance, 3 its lifetime (ms), 4 the heartbeat keys' prefix
 * (hb: under the cluster's tag, so every key stays in one slot). Returns
 * {Redis's time, live instances, then each live instance's name and
 * heartbeat}.
 */
#define SL_CLUSTER_HEARTBEAT_LUA                                                                             \
    SL_CLUSTER_LUA_NOW                                                                                       \
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"                                                   \
    "redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])\n"                                        \
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"                                                 \
    "local names = redis.call('ZRANGE', KEYS[2], 0, -1)\n"                                                   \
    "local out = {now, #names}\n"                                                                            \
    "for _, name in ipairs(names) do\n"                                                                      \
    "  out[#out + 1] = name\n"                                                                               \
    "  out[#out + 1] = redis.call('GET', ARGV[4] .. name) or ''\n"                                           \
    "end\n"                                                                                                  \
    "return out\n"

/*
 * A claim, all or nothing: room in every usage limit (of an upstream or a
 * client key), a max_concurrent slot, the probe's lease — checked in that
 * order, then all taken.
 *
 * KEYS: 1 probe:UPSTREAM, 2 slots:UPSTREAM, 3 busy:UPSTREAM, 4
 * tickets:UPSTREAM, then one counter per limit. ARGV: 1 the claim's name
 * (lease value, slot member), 2 the probe's grace in ms (0: no probe asked
 * for), 3 max_concurrent (0: no slot asked for), 4 a slot's lease in ms, 5
 * the number of limits, 6 the instance, 7 until when its probe defers to an
 * older waiter elsewhere (Redis's clock; 0: it defers to nobody), 8 the
 * heartbeat keys' prefix, 9 until when its slot and its room in upstream
 * limits defer to an older waiter elsewhere (as 7), then five per limit: 'w' (a rolling window: amount,
 * need, slot ms, window ms) or 'p' (a calendar period: amount, need, -, the
 * period's end on Redis's clock).
 *
 * A window's use is window_use's (SL_CLUSTER_LUA_WINDOW_USE). A counter's
 * expiry is set by the reservation that starts its slot or period (later
 * ones would set the same: one command less per claim). Room is what
 * core/limits.c calls room: used < amount and used <= amount - need. The
 * probe's turn, and a free slot's (core/probe_turn.h): the oldest ticket's,
 * unless its instance's heartbeat is gone (such tickets are dropped) or the
 * turn is over.
 *
 * Returns {1, now} taken; {0} the probe is another's; {2} every slot is
 * taken (busy:UPSTREAM is set so releases tell it); {3, verdict, which,
 * recovery}: no room (verdict as sl_limit_verdict_t: 1 window full, 2
 * period used up, 3 never; which: the limit that decided, from 0; recovery:
 * when all could take it, Redis's clock); {4} the probe is an older
 * waiter's on another instance; {5} so is the free slot (busy:UPSTREAM is
 * set, as for {2}) or the room in the upstream's limits.
 */
#define SL_CLUSTER_CLAIM_LUA                                                                                 \
    SL_CLUSTER_LUA_NOW                                                                                       \
    SL_CLUSTER_LUA_WINDOW_USE                                                                                \
    "local function older_elsewhere()\n"                                                                     \
    "  for _ = 1, 16 do\n"                                                                                   \
    "    local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]\n"                                              \
    "    if not head then return false end\n"                                                                \
    "    local inst = string.match(head, '^(.*):%d+$')\n"                                                    \
    "    if inst == ARGV[6] then return false end\n"                                                         \
    "    if inst and redis.call('EXISTS', ARGV[8] .. inst) == 1 then return true end\n"                      \
    "    redis.call('ZREM', KEYS[4], head)\n"                                                                \
    "  end\n"                                                                                                \
    "  return false\n"                                                                                       \
    "end\n"                                                                                                  \
    "local n = tonumber(ARGV[5])\n"                                                                          \
    "local verdict, which, recovery = 0, 0, now\n"                                                           \
    "for i = 1, n do\n"                                                                                      \
    "  local b = 9 + (i - 1) * 5\n"                                                                          \
    "  local kind, amount, need = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])\n"               \
    "  local key = KEYS[4 + i]\n"                                                                            \
    "  local used, v, r = 0, 0, now\n"                                                                       \
    "  local slots\n"                                                                                        \
    "  if kind == 'w' then\n"                                                                                \
    "    local S, W = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])\n"                                        \
    "    used, slots = window_use(key, S, W, now)\n"                                                         \
    "  else\n"                                                                                               \
    "    used = tonumber(redis.call('GET', key) or '0')\n"                                                   \
    "  end\n"                                                                                                \
    "  if not (used < amount and used <= amount - need) then\n"                                              \
    "    if amount <= 0 or need > amount then\n"                                                             \
    "      v = 3\n"                                                                                          \
    "    elseif kind == 'w' then\n"                                                                          \
    "      v = 1\n"                                                                                          \
    "      table.sort(slots, function(x, y) return x[1] > y[1] end)\n"                                       \
    "      local newer = 0\n"                                                                                \
    "      for _, s in ipairs(slots) do\n"                                                                   \
    "        if s[2] ~= 0 then\n"                                                                            \
    "          if not (newer < amount and newer <= amount - need) then break end\n"                          \
    "          r = s[3]\n"                                                                                   \
    "          newer = newer + s[2]\n"                                                                       \
    "        end\n"                                                                                          \
    "      end\n"                                                                                            \
    "    else\n"                                                                                             \
    "      v, r = 2, tonumber(ARGV[b + 5])\n"                                                                \
    "    end\n"                                                                                              \
    "  end\n"                                                                                                \
    "  local recovers = v == 1 or v == 2\n"                                                                  \
    "  if v > verdict or (v == verdict and recovers and r > recovery) then which = i - 1 end\n"              \
    "  if v > verdict then verdict = v end\n"                                                                \
    "  if recovers and r > recovery then recovery = r end\n"                                                 \
    "end\n"                                                                                                  \
    "if verdict > 0 then return {3, verdict, which, recovery} end\n"                                         \
    "if n > 0 and KEYS[4] ~= '-' and now < tonumber(ARGV[9]) and older_elsewhere() then return {5} end\n"    \
    "local max = tonumber(ARGV[3])\n"                                                                        \
    "if max > 0 then\n"                                                                                      \
    "  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"                                               \
    "  if redis.call('ZCARD', KEYS[2]) >= max then\n"                                                        \
    "    redis.call('SET', KEYS[3], '1', 'PX', 10000)\n"                                                     \
    "    return {2}\n"                                                                                       \
    "  end\n"                                                                                                \
    "  if now < tonumber(ARGV[9]) and older_elsewhere() then\n"                                              \
    "    redis.call('SET', KEYS[3], '1', 'PX', 10000)\n"                                                     \
    "    return {5}\n"                                                                                       \
    "  end\n"                                                                                                \
    "end\n"                                                                                                  \
    "if tonumber(ARGV[2]) > 0 then\n"                                                                        \
    "  if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end\n"                                          \
    "  if now < tonumber(ARGV[7]) and older_elsewhere() then return {4} end\n"                               \
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"                                                 \
    "end\n"                                                                                                  \
    "if max > 0 then\n"                                                                                      \
    "  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1])\n"                                      \
    "  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]) * 2)\n"                                              \
    "end\n"                                                                                                  \
    "for i = 1, n do\n"                                                                                      \
    "  local b = 9 + (i - 1) * 5\n"                                                                          \
    "  local need = tonumber(ARGV[b + 3])\n"                                                                 \
    "  local key = KEYS[4 + i]\n"                                                                            \
    "  if need ~= 0 then\n"                                                                                  \
    "    if ARGV[b + 1] == 'w' then\n"                                                                       \
    "      local S, W = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])\n"                                      \
    "      local k = math.floor(now / S)\n"                                                                  \
    "      if redis.call('HINCRBY', key, string.format('%d', k), need) == need then\n"                       \
    "        redis.call('PEXPIREAT', key, string.format('%d', (k + 2) * S + W))\n"                           \
    "      end\n"                                                                                            \
    "    elseif redis.call('INCRBY', key, need) == need then\n"                                              \
    "      redis.call('PEXPIREAT', key, ARGV[b + 5])\n"                                                      \
    "    end\n"                                                                                              \
    "  end\n"                                                                                                \
    "end\n"                                                                                                  \
    "return {1, now}\n"

/*
 * Settlements and usage counted alone, in one batch. KEYS: one counter per
 * change. ARGV: three per change: the slot number of a window's counter or
 * '-' for a period's, the amount to add (negative: an estimate taken back),
 * the counter's expiry on Redis's clock. A change to a slot or period that
 * is gone (expired) adds nothing when it takes back; a counter never drops
 * below 0; an expiry only moves later.
 */
#define SL_CLUSTER_SETTLE_LUA                                                                                \
    SL_CLUSTER_LUA_NOW                                                                                       \
    "for i = 1, #KEYS do\n"                                                                                  \
    "  local f, d, e = ARGV[3 * i - 2], tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])\n"                  \
    "  local key = KEYS[i]\n"                                                                                \
    "  if e > now then\n"                                                                                    \
    "    local changed = false\n"                                                                            \
    "    if f == '-' then\n"                                                                                 \
    "      if d > 0 or redis.call('EXISTS', key) == 1 then\n"                                                \
    "        if redis.call('INCRBY', key, d) < 0 then redis.call('SET', key, 0) end\n"                       \
    "        changed = true\n"                                                                               \
    "      end\n"                                                                                            \
    "    elseif d > 0 or redis.call('HEXISTS', key, f) == 1 then\n"                                          \
    "      if redis.call('HINCRBY', key, f, d) < 0 then redis.call('HSET', key, f, 0) end\n"                 \
    "      changed = true\n"                                                                                 \
    "    end\n"                                                                                              \
    "    if changed then\n"                                                                                  \
    "      local ttl = redis.call('PTTL', key)\n"                                                            \
    "      if ttl < 0 or now + ttl < e then redis.call('PEXPIREAT', key, ARGV[3 * i]) end\n"                 \
    "    end\n"                                                                                              \
    "  end\n"                                                                                                \
    "end\n"                                                                                                  \
    "return 1\n"

/*
 * What each limit has used across the cluster, for the views. KEYS: one
 * counter per limit. ARGV: three per limit: 'w' (a rolling window: slot ms,
 * window ms; window_use, as the claim counts it) or 'p' (a calendar period:
 * -, -). Returns the amounts, in KEYS' order.
 */
#define SL_CLUSTER_USAGE_LUA                                                                                 \
    SL_CLUSTER_LUA_NOW                                                                                       \
    SL_CLUSTER_LUA_WINDOW_USE                                                                                \
    "local out = {}\n"                                                                                       \
    "for i = 1, #KEYS do\n"                                                                                  \
    "  local used = 0\n"                                                                                     \
    "  if ARGV[3 * i - 2] == 'w' then\n"                                                                     \
    "    used = window_use(KEYS[i], tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i]), now)\n"                \
    "  else\n"                                                                                               \
    "    used = tonumber(redis.call('GET', KEYS[i]) or '0')\n"                                               \
    "  end\n"                                                                                                \
    "  out[i] = used\n"                                                                                      \
    "end\n"                                                                                                  \
    "return out\n"

/*
 * A slot given back. KEYS: 1 slots:UPSTREAM, 2 busy:UPSTREAM. ARGV: 1 the
 * slot's member, 2 the "freed" line, 3 the events channel: published only
 * while some instance found every slot taken.
 */
#define SL_CLUSTER_RELEASE_SLOT_LUA                                                                          \
    "redis.call('ZREM', KEYS[1], ARGV[1])\n"                                                                 \
    "if redis.call('EXISTS', KEYS[2]) == 1 then\n"                                                           \
    "  redis.call('PUBLISH', ARGV[3], ARGV[2])\n"                                                            \
    "end\n"                                                                                                  \
    "return 1\n"

/* A probe's lease given back, if it is still the one named ARGV[1]. KEYS: 1 probe:UPSTREAM. */
#define SL_CLUSTER_RELEASE_LEASE_LUA                                                                         \
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"                  \
    "return 0\n"

/*
 * The SHA-1s (hex) of the scripts a connection sends, as EVALSHA names them:
 * each script is hashed once. One per connection's thread (no lock).
 */
typedef struct {
    struct sl_script_sha {
        char *text;         /* owned */
        const char *source; /* the constant it was hashed from, found by address; NULL: none */
        size_t len;
        char hex[41];
    } shas[8];
    size_t n;
} sl_script_shas_t;

/*
 * The script's SHA-1, NULL past the few it keeps (the script then goes
 * whole). constant: script is a string constant (sl_cluster_args_add_static),
 * found again by its address rather than by comparing its kilobytes.
 */
const char *sl_script_sha(sl_script_shas_t *shas, const char *script, size_t len, bool constant);
void sl_script_shas_dispose(sl_script_shas_t *shas);

#endif
