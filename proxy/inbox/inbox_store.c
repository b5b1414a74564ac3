/*
 * inbox_store.c - the webhook inbox's commands (docs/webhooks.md#webhook-inbox):
 * a route's Redis Stream, its consumer group, the retry schedule and the
 * dead-letter stream, through the store's public command path
 * (store_command, store_script_run: queue, cluster routing, reply
 * classes). The inbox's Lua scripts are here, plain constants, registered
 * with the store once per process (inbox_store_script).
 */
#include "inbox_store.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "oom.h"

/*
 * Most values a script unpacks into one XADD (Lua's unpack refuses about
 * 8,000). A delivery is bounded on arrival (DELIVERY_MAX_HEADERS, 272
 * values at most), so only an entry an older version queued can be larger:
 * such an entry is never unpacked, or the script would fail on it at every
 * call and stall whatever it moves after it. It goes to the dead-letter
 * stream with its fields kept whole as one msgpack value (`fields`).
 */
#define INBOX_STORE_UNPACK_MAX "4000"

/*
 * dead(f, reason, died): XADD to the dead-letter stream (KEYS[4]) the
 * entry's fields f plus reason and died; an entry over
 * INBOX_STORE_UNPACK_MAX gets its named fields (each once) and the whole
 * list packed as `fields`. now(): Redis's clock in unix ms, the one clock
 * of the retry schedule, which every instance shares: an instance whose
 * own clock stepped would otherwise run the others' retries early or late.
 */
#define INBOX_STORE_LUA_COMMON                                                                  \
    "local function dead(f, reason, died)\n"                                                    \
    "  if #f <= " INBOX_STORE_UNPACK_MAX " then\n"                                              \
    "    table.insert(f, 'reason') table.insert(f, reason)\n"                                   \
    "    table.insert(f, 'died') table.insert(f, died)\n"                                       \
    "    return redis.call('XADD', KEYS[4], '*', unpack(f))\n"                                  \
    "  end\n"                                                                                   \
    "  local out, seen = {}, {}\n"                                                              \
    "  for i = 1, #f - 1, 2 do\n"                                                               \
    "    local k = f[i]\n"                                                                      \
    "    if not seen[k] and (k == 'event' or k == 'record' or k == 'method' or k == 'target'\n" \
    "        or k == 'received' or k == 'attempts' or k == 'client') then\n"                    \
    "      seen[k] = true out[#out + 1] = k out[#out + 1] = f[i + 1]\n"                         \
    "    end\n"                                                                                 \
    "  end\n"                                                                                   \
    "  table.insert(out, 'reason')\n"                                                           \
    "  table.insert(out, reason .. ' (' .. math.floor(#f / 2) .. ' fields: too many to queue '\n"\
    "    .. 'again; kept whole as msgpack in fields)')\n"                                       \
    "  table.insert(out, 'died') table.insert(out, died)\n"                                     \
    "  table.insert(out, 'fields') table.insert(out, cmsgpack.pack(f))\n"                       \
    "  return redis.call('XADD', KEYS[4], '*', unpack(out))\n"                                  \
    "end\n"                                                                                     \
    "local function now()\n"                                                                    \
    "  local t = redis.call('TIME')\n"                                                          \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                      \
    "end\n"

/*
 * The limiter's clock: Redis's, in microseconds. A tat (theoretical arrival
 * time, GCRA) is kept as a Lua number (a double: whole microseconds of
 * today's dates are exact; tostring keeps 14 digits, 0.1 ms).
 */
#define INBOX_STORE_LUA_NOW_US                                                                  \
    "local function now_us()\n"                                                                 \
    "  local t = redis.call('TIME')\n"                                                          \
    "  return tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                      \
    "end\n"

/*
 * The inbox's scripts take the route's six keys, KEYS = stream, retries,
 * payloads, dead, rate, paused (one hash tag: one slot).
 */
static const char *const inbox_store_script_text[INBOX_SCRIPT_COUNT] = {
    [INBOX_SCRIPT_GROUP] =
        "local r = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')\n"
        "if type(r) == 'table' and r.err and not string.find(r.err, 'BUSYGROUP') then\n"
        "  return r\n"
        "end\n"
        "return 1\n",
    [INBOX_SCRIPT_ACK] =
        "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
        "redis.call('XDEL', KEYS[1], ARGV[2])\n"
        "return n\n",
    [INBOX_SCRIPT_RETRY] =
        INBOX_STORE_LUA_COMMON
        "local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
        "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
        "redis.call('XDEL', KEYS[1], ARGV[2])\n"
        "if #e == 0 or n == 0 then return 0 end\n"
        "local f = e[1][2]\n"
        "for i = 1, #f, 2 do if f[i] == 'attempts' then f[i + 1] = ARGV[3] end end\n"
        "redis.call('HSET', KEYS[3], ARGV[2], cmsgpack.pack(f))\n"
        "redis.call('ZADD', KEYS[2], now() + tonumber(ARGV[4]), ARGV[2])\n"
        "return 1\n",
    [INBOX_SCRIPT_BURY] =
        INBOX_STORE_LUA_COMMON
        "local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
        "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
        "if #e == 0 or n == 0 then redis.call('XDEL', KEYS[1], ARGV[2]) return 0 end\n"
        "local f = e[1][2]\n"
        "for i = 1, #f, 2 do if f[i] == 'attempts' then f[i + 1] = ARGV[3] end end\n"
        "dead(f, ARGV[4], ARGV[5])\n"
        "redis.call('XDEL', KEYS[1], ARGV[2])\n"
        "return 1\n",
    [INBOX_SCRIPT_PROMOTE] =
        INBOX_STORE_LUA_COMMON
        "local t = now()\n"
        "local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', t, 'LIMIT', 0, "
        "tonumber(ARGV[1]))\n"
        "for _, id in ipairs(due) do\n"
        "  local b = redis.call('HGET', KEYS[3], id)\n"
        "  if b then\n"
        "    local f = cmsgpack.unpack(b)\n"
        "    if #f <= " INBOX_STORE_UNPACK_MAX " then\n"
        "      redis.call('XADD', KEYS[1], '*', unpack(f))\n"
        "    else\n"
        "      dead(f, 'its retry was due', tostring(t))\n"
        "    end\n"
        "  end\n"
        "  redis.call('HDEL', KEYS[3], id)\n"
        "  redis.call('ZREM', KEYS[2], id)\n"
        "end\n"
        /* delivery.dead_retention: the dead letters' ids are the ms they died at */
        "redis.call('XTRIM', KEYS[4], 'MINID', string.format('%.0f', "
        "math.max(0, t - tonumber(ARGV[2]))))\n"
        "return #due\n",
    [INBOX_SCRIPT_STATS] =
        "local function received(f)\n"
        "  for i = 1, #f, 2 do if f[i] == 'received' then return tonumber(f[i + 1]) end end\n"
        "  return 0\n"
        "end\n"
        "local pending = 0\n"
        "local p = redis.pcall('XPENDING', KEYS[1], ARGV[1])\n"
        "if type(p) == 'table' and not p.err then pending = p[1] end\n"
        "local oldest = 0\n"
        "local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)\n"
        "if #first > 0 then oldest = received(first[1][2]) end\n"
        "local due = redis.call('ZRANGE', KEYS[2], 0, 0)\n"
        "if #due > 0 then\n"
        "  local b = redis.call('HGET', KEYS[3], due[1])\n"
        "  if b then\n"
        "    local r = received(cmsgpack.unpack(b))\n"
        "    if oldest == 0 or (r > 0 and r < oldest) then oldest = r end\n"
        "  end\n"
        "end\n"
        "return { redis.call('XLEN', KEYS[1]), pending, redis.call('ZCARD', KEYS[2]), oldest, "
        "redis.call('XLEN', KEYS[4]), redis.call('EXISTS', KEYS[6]) }\n",
    [INBOX_SCRIPT_REDELIVER] =
        "local e = redis.call('XRANGE', KEYS[4], ARGV[1], ARGV[1])\n"
        "if #e == 0 then return 0 end\n"
        "local f, out = e[1][2], {}\n"
        "if #f > " INBOX_STORE_UNPACK_MAX " then return -1 end\n"
        "for i = 1, #f, 2 do\n"
        "  local k, v = f[i], f[i + 1]\n"
        "  if k == 'fields' then return -1 end\n"
        "  if k == 'attempts' then v = '0' elseif k == 'received' then v = ARGV[2] end\n"
        "  if k ~= 'reason' and k ~= 'died' then out[#out + 1] = k out[#out + 1] = v end\n"
        "end\n"
        "redis.call('XADD', KEYS[1], '*', unpack(out))\n"
        "redis.call('XDEL', KEYS[4], ARGV[1])\n"
        "return 1\n",
    /* ARGV: mode (read | claim), group, consumer, count, interval_us, tolerance_us, idle, start */
    [INBOX_SCRIPT_GATE] =
        INBOX_STORE_LUA_NOW_US
        "if redis.call('EXISTS', KEYS[6]) == 1 then return { 1, 0, false } end\n"
        "local count = tonumber(ARGV[4])\n"
        "local T, tau = tonumber(ARGV[5]), tonumber(ARGV[6])\n"
        "local now = now_us()\n"
        "local tat = tonumber(redis.call('GET', KEYS[5]) or '0') or 0\n"
        "if tat < now then tat = now end\n"
        "if tat > now + tau then\n"
        "  return { 0, math.ceil((tat - tau - now) / 1000), false }\n"
        "end\n"
        "local n = count\n"
        "if T > 0 then n = math.min(count, math.floor((now + tau - tat) / T) + 1) end\n"
        "local r, got\n"
        "if ARGV[1] == 'claim' then\n"
        "  r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[2], ARGV[3], ARGV[7], ARGV[8], 'COUNT', n)\n"
        "  got = #r[2]\n"
        "else\n"
        "  r = redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', n, 'STREAMS', "
        "KEYS[1], '>')\n"
        "  got = 0\n"
        "  if r then got = #r[1][2] end\n"
        "end\n"
        "if T > 0 and got > 0 then\n"
        "  tat = tat + got * T\n"
        "  redis.call('SET', KEYS[5], tostring(tat), 'PX', math.ceil((tat - now) / 1000) + 1000)\n"
        "end\n"
        "return { 0, 0, r }\n",
    /* ARGV: hold_ms, tolerance_us */
    [INBOX_SCRIPT_HOLD] =
        INBOX_STORE_LUA_NOW_US
        "local hold = tonumber(ARGV[1])\n"
        "local now = now_us()\n"
        "local tat = tonumber(redis.call('GET', KEYS[5]) or '0') or 0\n"
        "local held = now + hold * 1000 + tonumber(ARGV[2])\n"
        "if held > tat then\n"
        "  redis.call('SET', KEYS[5], tostring(held), 'PX', math.ceil((held - now) / 1000) + 1000)\n"
        "end\n"
        "return 1\n",
    /* ARGV: after, batch, reason, before_ms, now_ms */
    [INBOX_SCRIPT_REDELIVER_BULK] =
        "local start = ARGV[1]\n"
        "if start ~= '-' then start = '(' .. start end\n"
        "local batch, before = tonumber(ARGV[2]), tonumber(ARGV[4])\n"
        "local es = redis.call('XRANGE', KEYS[4], start, '+', 'COUNT', batch)\n"
        "local moved = 0\n"
        "for _, e in ipairs(es) do\n"
        "  local f, out, reason, died = e[2], {}, '', 0\n"
        "  local packed = #f > " INBOX_STORE_UNPACK_MAX "\n"
        "  for i = 1, #f - 1, 2 do\n"
        "    local k, v = f[i], f[i + 1]\n"
        "    if k == 'reason' then reason = v elseif k == 'died' then died = tonumber(v) or 0 end\n"
        "    if k == 'fields' then packed = true end\n"
        "    if k == 'attempts' then v = '0' elseif k == 'received' then v = ARGV[5] end\n"
        "    if k ~= 'reason' and k ~= 'died' then out[#out + 1] = k out[#out + 1] = v end\n"
        "  end\n"
        "  if not packed and (ARGV[3] == '' or string.find(reason, ARGV[3], 1, true))\n"
        "      and (before == 0 or died < before) then\n"
        "    redis.call('XADD', KEYS[1], '*', unpack(out))\n"
        "    redis.call('XDEL', KEYS[4], e[1])\n"
        "    moved = moved + 1\n"
        "  end\n"
        "end\n"
        "local last = ''\n"
        "if #es == batch then last = es[#es][1] end\n"
        "return { moved, last }\n",
    /*
     * Every command the inbox sends or its scripts call (but GET, SET,
     * DEL and WAIT, the core user's), each with arguments that change
     * nothing: a group that does not exist (NOGROUP), an id no entry has,
     * XX. Redis checks the ACL before it runs a command, so the first one
     * refused is the permission missing. ARGV: group.
     */
    [INBOX_SCRIPT_PROBE] =
        "local g = 'idem-probe-no-such-group'\n"
        "local probes = {\n"
        "  { 'XADD', KEYS[1], 'NOMKSTREAM', '0-0', 'f', 'v' },\n"
        "  { 'XREADGROUP', 'GROUP', g, 'c', 'COUNT', '1', 'STREAMS', KEYS[1], '>' },\n"
        "  { 'XAUTOCLAIM', KEYS[1], g, 'c', '0', '0-0', 'COUNT', '1' },\n"
        "  { 'XCLAIM', KEYS[1], g, 'c', '0', '0-1', 'JUSTID' },\n"
        "  { 'XACK', KEYS[1], g, '0-1' },\n"
        "  { 'XDEL', KEYS[1], '0-1' },\n"
        "  { 'XRANGE', KEYS[4], '+', '+', 'COUNT', '1' },\n"
        "  { 'XLEN', KEYS[1] },\n"
        "  { 'XTRIM', KEYS[4], 'MINID', '0' },\n"
        "  { 'XPENDING', KEYS[1], g },\n"
        "  { 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM' },\n"
        "  { 'HGET', KEYS[3], 'idem-probe' },\n"
        "  { 'HDEL', KEYS[3], 'idem-probe' },\n"
        "  { 'HSET', KEYS[3], 'idem-probe', '' },\n"
        "  { 'HDEL', KEYS[3], 'idem-probe' },\n"
        "  { 'ZADD', KEYS[2], 'XX', '0', 'idem-probe' },\n"
        "  { 'ZRANGE', KEYS[2], '0', '0' },\n"
        "  { 'ZRANGEBYSCORE', KEYS[2], '-inf', '-inf', 'LIMIT', '0', '1' },\n"
        "  { 'ZREM', KEYS[2], 'idem-probe' },\n"
        "  { 'ZCARD', KEYS[2] },\n"
        "  { 'TIME' },\n"
        "  { 'EXISTS', KEYS[6] },\n"
        "}\n"
        "for _, p in ipairs(probes) do\n"
        "  local r = redis.pcall(unpack(p))\n"
        "  if type(r) == 'table' and r.err and (string.find(r.err, 'NOPERM', 1, true)\n"
        "      or string.find(r.err, 'can\\'t run', 1, true)\n"
        "      or string.find(r.err, 'no permissions', 1, true)) then\n"
        "    if p[1] == 'XGROUP' then return 'XGROUP CREATE' end\n"
        "    return p[1]\n"
        "  end\n"
        "end\n"
        "return ''\n",
};

/* A variable-length command's argv and lengths (argc of each, zeroed); out of memory aborts. */
static void inbox_store_argv_alloc(size_t argc, const char ***argv, size_t **argvlen)
{
    *argv = oom_check(calloc(argc, sizeof(**argv)), "an inbox command's arguments");
    *argvlen = oom_check(calloc(argc, sizeof(**argvlen)), "an inbox command's arguments");
}

/* The scripts as the store runs them: inbox_store_script_text's, registered once. */
static struct store_script inbox_store_scripts[INBOX_SCRIPT_COUNT];
static pthread_once_t inbox_store_scripts_once = PTHREAD_ONCE_INIT;

static void inbox_store_scripts_register(void)
{
    for (int i = 0; i < INBOX_SCRIPT_COUNT; i++) {
        inbox_store_scripts[i].text = inbox_store_script_text[i];
        store_script_register(&inbox_store_scripts[i]);
    }
}

const struct store_script *inbox_store_script(enum inbox_script id)
{
    pthread_once(&inbox_store_scripts_once, inbox_store_scripts_register);
    return &inbox_store_scripts[id];
}

/* EVALSHA of an inbox script over the route's six keys; args: nargs of ARGV. */
static void inbox_store_eval(struct store *s, enum inbox_script script,
                             const struct inbox_store_keys *k, int nargs, const char **args,
                             store_reply_cb *cb, void *arg)
{
    const char *keys[] = { k->stream, k->retries, k->payloads, k->dead, k->rate, k->paused };

    store_script_run(s, inbox_store_script(script), 6, keys, nargs, args, cb, arg);
}

void inbox_store_append(struct store *s, const struct inbox_store_keys *k, size_t nfields,
                        const char *const *fv, const size_t *fvlen, store_reply_cb *cb,
                        void *arg)
{
    size_t argc = 3 + 2 * nfields;
    const char **argv;
    size_t *argvlen;

    inbox_store_argv_alloc(argc, &argv, &argvlen);
    argv[0] = "XADD";
    argv[1] = k->stream;
    argv[2] = "*";
    argvlen[0] = 4;
    argvlen[1] = strlen(k->stream);
    argvlen[2] = 1;
    for (size_t i = 0; i < 2 * nfields; i++) {
        argv[3 + i] = fv[i];
        argvlen[3 + i] = fvlen[i];
    }
    store_command(s, (int)argc, argv, argvlen, cb, arg);
    free(argv);
    free(argvlen);
}

void inbox_store_ensure_group(struct store *s, const struct inbox_store_keys *k,
                              store_reply_cb *cb, void *arg)
{
    const char *args[] = { k->group };

    inbox_store_eval(s, INBOX_SCRIPT_GROUP, k, 1, args, cb, arg);
}

/* The gate script (inbox_store_read, inbox_store_autoclaim); idle and start for a claim only. */
static void inbox_store_gate(struct store *s, const struct inbox_store_keys *k, const char *mode,
                             const char *consumer, unsigned count,
                             const struct inbox_store_rate *rate, uint64_t min_idle_ms,
                             const char *start, store_reply_cb *cb, void *arg)
{
    char n[16], interval[24], tolerance[24], idle[24];
    const char *args[] = { mode, k->group, consumer, n, interval, tolerance, idle, start };

    snprintf(n, sizeof(n), "%u", count);
    snprintf(interval, sizeof(interval), "%llu", (unsigned long long)rate->interval_us);
    snprintf(tolerance, sizeof(tolerance), "%llu", (unsigned long long)rate->tolerance_us);
    snprintf(idle, sizeof(idle), "%llu", (unsigned long long)min_idle_ms);
    inbox_store_eval(s, INBOX_SCRIPT_GATE, k, 8, args, cb, arg);
}

void inbox_store_read(struct store *s, const struct inbox_store_keys *k, const char *consumer,
                      unsigned count, const struct inbox_store_rate *rate, store_reply_cb *cb,
                      void *arg)
{
    inbox_store_gate(s, k, "read", consumer, count, rate, 0, "0-0", cb, arg);
}

void inbox_store_autoclaim(struct store *s, const struct inbox_store_keys *k,
                           const char *consumer, uint64_t min_idle_ms, const char *start,
                           unsigned count, const struct inbox_store_rate *rate,
                           store_reply_cb *cb, void *arg)
{
    inbox_store_gate(s, k, "claim", consumer, count, rate, min_idle_ms, start, cb, arg);
}

void inbox_store_hold(struct store *s, const struct inbox_store_keys *k, uint64_t hold_ms,
                      const struct inbox_store_rate *rate, store_reply_cb *cb, void *arg)
{
    char hold[24], tolerance[24];
    const char *args[] = { hold, tolerance };

    snprintf(hold, sizeof(hold), "%llu", (unsigned long long)hold_ms);
    snprintf(tolerance, sizeof(tolerance), "%llu", (unsigned long long)rate->tolerance_us);
    inbox_store_eval(s, INBOX_SCRIPT_HOLD, k, 2, args, cb, arg);
}

void inbox_store_set_paused(struct store *s, const struct inbox_store_keys *k, bool paused,
                            store_reply_cb *cb, void *arg)
{
    const char *set[] = { "SET", k->paused, "1" }, *del[] = { "DEL", k->paused };
    size_t setlen[] = { 3, strlen(k->paused), 1 }, dellen[] = { 3, strlen(k->paused) };

    if (paused)
        store_command(s, 3, set, setlen, cb, arg);
    else
        store_command(s, 2, del, dellen, cb, arg);
}

void inbox_store_redeliver_bulk(struct store *s, const struct inbox_store_keys *k,
                                const char *after, unsigned batch, const char *reason,
                                uint64_t before_ms, uint64_t now_ms, store_reply_cb *cb,
                                void *arg)
{
    char n[16], before[24], now[24];
    const char *args[] = { after, n, reason, before, now };

    snprintf(n, sizeof(n), "%u", batch);
    snprintf(before, sizeof(before), "%llu", (unsigned long long)before_ms);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    inbox_store_eval(s, INBOX_SCRIPT_REDELIVER_BULK, k, 5, args, cb, arg);
}

void inbox_store_renew(struct store *s, const struct inbox_store_keys *k, const char *consumer,
                       const char *const *ids, size_t n, uint64_t idle_ms, store_reply_cb *cb,
                       void *arg)
{
    size_t argc = 8 + n;
    char idle[24];
    const char **argv;
    size_t *argvlen;

    inbox_store_argv_alloc(argc, &argv, &argvlen);
    argv[0] = "XCLAIM";
    argv[1] = k->stream;
    argv[2] = k->group;
    argv[3] = consumer;
    argv[4] = "0";
    for (size_t i = 0; i < n; i++)
        argv[5 + i] = ids[i];
    snprintf(idle, sizeof(idle), "%llu", (unsigned long long)idle_ms);
    argv[5 + n] = "IDLE";
    argv[6 + n] = idle;
    argv[7 + n] = "JUSTID";
    for (size_t i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    store_command(s, (int)argc, argv, argvlen, cb, arg);
    free(argv);
    free(argvlen);
}

void inbox_store_ack(struct store *s, const struct inbox_store_keys *k, const char *id,
                     store_reply_cb *cb, void *arg)
{
    const char *args[] = { k->group, id };

    inbox_store_eval(s, INBOX_SCRIPT_ACK, k, 2, args, cb, arg);
}

void inbox_store_retry(struct store *s, const struct inbox_store_keys *k, const char *id,
                       unsigned attempts, uint64_t delay_ms, store_reply_cb *cb, void *arg)
{
    char n[16], delay[24];
    const char *args[] = { k->group, id, n, delay };

    snprintf(n, sizeof(n), "%u", attempts);
    snprintf(delay, sizeof(delay), "%llu", (unsigned long long)delay_ms);
    inbox_store_eval(s, INBOX_SCRIPT_RETRY, k, 4, args, cb, arg);
}

void inbox_store_bury(struct store *s, const struct inbox_store_keys *k, const char *id,
                      unsigned attempts, const char *reason, uint64_t now_ms,
                      store_reply_cb *cb, void *arg)
{
    char n[16], now[24];
    const char *args[] = { k->group, id, n, reason, now };

    snprintf(n, sizeof(n), "%u", attempts);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    inbox_store_eval(s, INBOX_SCRIPT_BURY, k, 5, args, cb, arg);
}

void inbox_store_promote(struct store *s, const struct inbox_store_keys *k, unsigned count,
                         uint64_t dead_retention_ms, store_reply_cb *cb, void *arg)
{
    char n[16], keep[24];
    const char *args[] = { n, keep };

    snprintf(n, sizeof(n), "%u", count);
    snprintf(keep, sizeof(keep), "%llu", (unsigned long long)dead_retention_ms);
    inbox_store_eval(s, INBOX_SCRIPT_PROMOTE, k, 2, args, cb, arg);
}

void inbox_store_stats(struct store *s, const struct inbox_store_keys *k, store_reply_cb *cb,
                       void *arg)
{
    const char *args[] = { k->group };

    inbox_store_eval(s, INBOX_SCRIPT_STATS, k, 1, args, cb, arg);
}

void inbox_store_dead_list(struct store *s, const struct inbox_store_keys *k, unsigned count,
                           store_reply_cb *cb, void *arg)
{
    char n[16];
    const char *argv[] = { "XRANGE", k->dead, "-", "+", "COUNT", n };
    size_t argvlen[6];

    snprintf(n, sizeof(n), "%u", count);
    for (int i = 0; i < 6; i++)
        argvlen[i] = strlen(argv[i]);
    store_command(s, 6, argv, argvlen, cb, arg);
}

void inbox_store_redeliver(struct store *s, const struct inbox_store_keys *k, const char *id,
                           uint64_t now_ms, store_reply_cb *cb, void *arg)
{
    char now[24];
    const char *args[] = { id, now };

    snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    inbox_store_eval(s, INBOX_SCRIPT_REDELIVER, k, 2, args, cb, arg);
}

void inbox_store_probe(struct store *s, const struct inbox_store_keys *k, store_reply_cb *cb,
                       void *arg)
{
    const char *args[] = { k->group };

    inbox_store_eval(s, INBOX_SCRIPT_PROBE, k, 1, args, cb, arg);
}

void inbox_store_dead_delete(struct store *s, const struct inbox_store_keys *k, const char *id,
                             store_reply_cb *cb, void *arg)
{
    const char *argv[] = { "XDEL", k->dead, id };
    size_t argvlen[] = { 4, strlen(k->dead), strlen(id) };

    store_command(s, 3, argv, argvlen, cb, arg);
}
