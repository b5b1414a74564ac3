/*
 * store_inbox.c - the webhook inbox's commands (README "Webhook inbox"):
 * a route's Redis Stream, its consumer group, the retry schedule and the
 * dead-letter stream, through the store's command path (store_any in
 * store.c: queue, cluster routing, reply classes). The Lua scripts' templates
 * are here; store.c builds and SHA1s them with its own (store_scripts_build).
 */
#include "store.h"
#include "store_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/*
 * The inbox's scripts take the route's four keys, KEYS = stream, retries,
 * payloads, dead (one hash tag: one slot).
 */
const char *const store_inbox_script_template[SCRIPT_COUNT] = {
    [SCRIPT_INBOX_GROUP] =
        "local r = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')\n"
        "if type(r) == 'table' and r.err and not string.find(r.err, 'BUSYGROUP') then\n"
        "  return r\n"
        "end\n"
        "return 1\n",
    [SCRIPT_INBOX_ACK] =
        "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
        "redis.call('XDEL', KEYS[1], ARGV[2])\n"
        "return n\n",
    [SCRIPT_INBOX_RETRY] =
        "local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
        "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
        "redis.call('XDEL', KEYS[1], ARGV[2])\n"
        "if #e == 0 or n == 0 then return 0 end\n"
        "local f = e[1][2]\n"
        "for i = 1, #f, 2 do if f[i] == 'attempts' then f[i + 1] = ARGV[3] end end\n"
        "redis.call('HSET', KEYS[3], ARGV[2], cmsgpack.pack(f))\n"
        "redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])\n"
        "return 1\n",
    [SCRIPT_INBOX_BURY] =
        "local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
        "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
        "if #e == 0 or n == 0 then redis.call('XDEL', KEYS[1], ARGV[2]) return 0 end\n"
        "local f = e[1][2]\n"
        "for i = 1, #f, 2 do if f[i] == 'attempts' then f[i + 1] = ARGV[3] end end\n"
        "table.insert(f, 'reason') table.insert(f, ARGV[4])\n"
        "table.insert(f, 'died') table.insert(f, ARGV[5])\n"
        "redis.call('XADD', KEYS[4], '*', unpack(f))\n"
        "redis.call('XDEL', KEYS[1], ARGV[2])\n"
        "return 1\n",
    [SCRIPT_INBOX_PROMOTE] =
        "local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, "
        "tonumber(ARGV[2]))\n"
        "for _, id in ipairs(due) do\n"
        "  local b = redis.call('HGET', KEYS[3], id)\n"
        "  if b then redis.call('XADD', KEYS[1], '*', unpack(cmsgpack.unpack(b))) end\n"
        "  redis.call('HDEL', KEYS[3], id)\n"
        "  redis.call('ZREM', KEYS[2], id)\n"
        "end\n"
        "return #due\n",
    [SCRIPT_INBOX_STATS] =
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
        "redis.call('XLEN', KEYS[4]) }\n",
    [SCRIPT_INBOX_REDELIVER] =
        "local e = redis.call('XRANGE', KEYS[4], ARGV[1], ARGV[1])\n"
        "if #e == 0 then return 0 end\n"
        "local f, out = e[1][2], {}\n"
        "for i = 1, #f, 2 do\n"
        "  local k, v = f[i], f[i + 1]\n"
        "  if k == 'attempts' then v = '0' elseif k == 'received' then v = ARGV[2] end\n"
        "  if k ~= 'reason' and k ~= 'died' then out[#out + 1] = k out[#out + 1] = v end\n"
        "end\n"
        "redis.call('XADD', KEYS[1], '*', unpack(out))\n"
        "redis.call('XDEL', KEYS[4], ARGV[1])\n"
        "return 1\n",
};

/* A variable-length command's argv and lengths (argc of each, zeroed); out of memory aborts. */
static void store_argv_alloc(size_t argc, const char ***argv, size_t **argvlen)
{
    *argv = calloc(argc, sizeof(**argv));
    *argvlen = calloc(argc, sizeof(**argvlen));
    if (*argv == NULL || *argvlen == NULL) {
        log_msg(LOG_ERROR, "redis: out of memory");
        abort();
    }
}

/* EVALSHA of an inbox script over the route's four keys; args: nargs of ARGV. */
static void store_inbox_eval(struct store *s, enum store_script script,
                             const struct store_inbox_keys *k, int nargs, const char **args,
                             store_reply_cb *cb, void *arg)
{
    const char *argv[16];
    size_t argvlen[16];
    int argc = 0;

    argv[argc++] = "EVALSHA";
    argv[argc++] = store_script_sha(s, script);
    argv[argc++] = "4";
    argv[argc++] = k->stream;
    argv[argc++] = k->retries;
    argv[argc++] = k->payloads;
    argv[argc++] = k->dead;
    for (int i = 0; i < nargs && argc < 16; i++)
        argv[argc++] = args[i];
    for (int i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    store_any(s, (int)script, 0, argc, argv, argvlen, cb, arg);
}

void store_inbox_append(struct store *s, const struct store_inbox_keys *k, size_t nfields,
                        const char *const *fv, const size_t *fvlen, store_reply_cb *cb,
                        void *arg)
{
    size_t argc = 3 + 2 * nfields;
    const char **argv;
    size_t *argvlen;

    store_argv_alloc(argc, &argv, &argvlen);
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
    store_any(s, -1, 0, (int)argc, argv, argvlen, cb, arg);
    free(argv);
    free(argvlen);
}

void store_inbox_ensure_group(struct store *s, const struct store_inbox_keys *k,
                              store_reply_cb *cb, void *arg)
{
    const char *args[] = { k->group };

    store_inbox_eval(s, SCRIPT_INBOX_GROUP, k, 1, args, cb, arg);
}

void store_inbox_read(struct store *s, const struct store_inbox_keys *k, const char *consumer,
                      unsigned count, store_reply_cb *cb, void *arg)
{
    char n[16];
    const char *argv[] = { "XREADGROUP", "GROUP", k->group, consumer, "COUNT", n, "STREAMS",
                           k->stream, ">" };
    size_t argvlen[9];

    snprintf(n, sizeof(n), "%u", count);
    for (int i = 0; i < 9; i++)
        argvlen[i] = strlen(argv[i]);
    store_any(s, -1, 7, 9, argv, argvlen, cb, arg); /* XREADGROUP: the key after STREAMS */
}

void store_inbox_autoclaim(struct store *s, const struct store_inbox_keys *k,
                           const char *consumer, uint64_t min_idle_ms, const char *start,
                           unsigned count, store_reply_cb *cb, void *arg)
{
    char idle[24], n[16];
    const char *argv[] = { "XAUTOCLAIM", k->stream, k->group, consumer, idle, start, "COUNT", n };
    size_t argvlen[8];

    snprintf(idle, sizeof(idle), "%llu", (unsigned long long)min_idle_ms);
    snprintf(n, sizeof(n), "%u", count);
    for (int i = 0; i < 8; i++)
        argvlen[i] = strlen(argv[i]);
    store_any(s, -1, 0, 8, argv, argvlen, cb, arg);
}

void store_inbox_renew(struct store *s, const struct store_inbox_keys *k, const char *consumer,
                       const char *const *ids, size_t n, uint64_t idle_ms, store_reply_cb *cb,
                       void *arg)
{
    size_t argc = 8 + n;
    char idle[24];
    const char **argv;
    size_t *argvlen;

    store_argv_alloc(argc, &argv, &argvlen);
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
    store_any(s, -1, 0, (int)argc, argv, argvlen, cb, arg);
    free(argv);
    free(argvlen);
}

void store_inbox_ack(struct store *s, const struct store_inbox_keys *k, const char *id,
                     store_reply_cb *cb, void *arg)
{
    const char *args[] = { k->group, id };

    store_inbox_eval(s, SCRIPT_INBOX_ACK, k, 2, args, cb, arg);
}

void store_inbox_retry(struct store *s, const struct store_inbox_keys *k, const char *id,
                       unsigned attempts, uint64_t due_ms, store_reply_cb *cb, void *arg)
{
    char n[16], due[24];
    const char *args[] = { k->group, id, n, due };

    snprintf(n, sizeof(n), "%u", attempts);
    snprintf(due, sizeof(due), "%llu", (unsigned long long)due_ms);
    store_inbox_eval(s, SCRIPT_INBOX_RETRY, k, 4, args, cb, arg);
}

void store_inbox_bury(struct store *s, const struct store_inbox_keys *k, const char *id,
                      unsigned attempts, const char *reason, uint64_t now_ms,
                      store_reply_cb *cb, void *arg)
{
    char n[16], now[24];
    const char *args[] = { k->group, id, n, reason, now };

    snprintf(n, sizeof(n), "%u", attempts);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    store_inbox_eval(s, SCRIPT_INBOX_BURY, k, 5, args, cb, arg);
}

void store_inbox_promote(struct store *s, const struct store_inbox_keys *k, uint64_t now_ms,
                         unsigned count, store_reply_cb *cb, void *arg)
{
    char now[24], n[16];
    const char *args[] = { now, n };

    snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    snprintf(n, sizeof(n), "%u", count);
    store_inbox_eval(s, SCRIPT_INBOX_PROMOTE, k, 2, args, cb, arg);
}

void store_inbox_stats(struct store *s, const struct store_inbox_keys *k, store_reply_cb *cb,
                       void *arg)
{
    const char *args[] = { k->group };

    store_inbox_eval(s, SCRIPT_INBOX_STATS, k, 1, args, cb, arg);
}

void store_inbox_dead_list(struct store *s, const struct store_inbox_keys *k, unsigned count,
                           store_reply_cb *cb, void *arg)
{
    char n[16];
    const char *argv[] = { "XRANGE", k->dead, "-", "+", "COUNT", n };
    size_t argvlen[6];

    snprintf(n, sizeof(n), "%u", count);
    for (int i = 0; i < 6; i++)
        argvlen[i] = strlen(argv[i]);
    store_any(s, -1, 0, 6, argv, argvlen, cb, arg);
}

void store_inbox_redeliver(struct store *s, const struct store_inbox_keys *k, const char *id,
                           uint64_t now_ms, store_reply_cb *cb, void *arg)
{
    char now[24];
    const char *args[] = { id, now };

    snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    store_inbox_eval(s, SCRIPT_INBOX_REDELIVER, k, 2, args, cb, arg);
}

void store_inbox_dead_delete(struct store *s, const struct store_inbox_keys *k, const char *id,
                             store_reply_cb *cb, void *arg)
{
    const char *argv[] = { "XDEL", k->dead, id };
    size_t argvlen[] = { 4, strlen(k->dead), strlen(id) };

    store_any(s, -1, 0, 3, argv, argvlen, cb, arg);
}
