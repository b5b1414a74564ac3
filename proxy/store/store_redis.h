/*
 * store_redis.h - the Redis client under the record store (store.h): any
 * command of one key (store_command), Lua scripts a module owns
 * (store_script_register, store_script_run), their replies as plain values
 * (no hiredis type leaves the store module), and what only Redis has to
 * say: its Sentinel failovers, its Cluster's slot map, its eviction
 * policy. Commands go through the store's queue, cluster routing, timeout
 * and reply classes (store.c's header says how); the callback rule of
 * store.h holds: every call reports exactly once, never synchronously.
 * The inbox (inbox_store.c: its streams and scripts), the census of held
 * records (its lock and result keys) and the worker (its Redis gauges) use
 * it; the exchange, the admin API and the janitor do not.
 */
#ifndef IDEM_STORE_REDIS_H
#define IDEM_STORE_REDIS_H

#include <stdbool.h>
#include <stddef.h>

#include "store_types.h"

/* ---- replies as plain values ---- */

enum store_reply_type { STORE_NIL, STORE_INT, STORE_STR, STORE_ARR };

/* A Redis reply as plain values; strings are binary-safe and NUL-terminated. */
struct store_reply {
    enum store_reply_type type;
    long long integer;                  /* STORE_INT */
    const char *str;                    /* STORE_STR: len bytes */
    size_t len;
    const struct store_reply *elem;     /* STORE_ARR: n elements */
    size_t n;
};

/* Reply callback: r is NULL unless st is STORE_OK; it is valid only during the callback. */
typedef void store_reply_cb(enum store_status st, const struct store_reply *r, void *arg);

/* ---- commands and scripts of the store's users ---- */

/*
 * Any command of one key, routed by argv[1] (redis.cluster: that key's
 * slot) and queued, bounded and classified like every store command; cb
 * gets the reply as plain values. argv (argc strings of argvlen bytes,
 * binary-safe, borrowed) is copied before the call returns. Out of memory
 * aborts.
 */
void store_command(struct store *s, int argc, const char **argv, const size_t *argvlen,
                   store_reply_cb *cb, void *arg);

#define STORE_SCRIPT_SHA_LEN 40 /* hex SHA1 */

/*
 * A Lua script that a module owns and runs through the store: text, a
 * constant sent as it is (no format function reads it, so a Lua '%' pattern
 * reaches Redis unchanged), and sha, its hex SHA1 for EVALSHA. The owner
 * keeps it in static storage while any store may run it.
 */
struct store_script {
    const char *text;
    char sha[STORE_SCRIPT_SHA_LEN + 1];
};

/*
 * Register script with the store: its sha is computed from its text. Once
 * per script, before its first store_script_run and before another thread
 * may read it (the owner's pthread_once, say).
 */
void store_script_register(struct store_script *script);

/*
 * EVALSHA script (registered) with nkeys keys and nargs arguments (NUL-
 * terminated strings, borrowed, copied before the call returns), routed by
 * keys[0] (redis.cluster: every key must be in that one slot); a Redis that
 * lost its script cache gets the body once (NOSCRIPT). cb gets the reply as
 * plain values. Out of memory aborts.
 */
void store_script_run(struct store *s, const struct store_script *script, int nkeys,
                      const char *const *keys, int nargs, const char *const *args,
                      store_reply_cb *cb, void *arg);

/* ---- what only Redis has to say (the worker's gauges) ---- */

/*
 * Whether the Redis nodes the process's stores are connected to keep every
 * record (README.md#when-a-key-can-execute-twice): 1 when every data
 * connection that could read its node's maxmemory-policy (CONFIG GET, or
 * INFO memory where CONFIG is refused) found noeviction; 0 when one found
 * another policy, which evicts records (volatile-lru, the default of some
 * managed services, evicts exactly them: they all have a TTL); -1 when none
 * could read it (both refused, or not connected yet). The value stays as
 * last read while a connection reconnects. Any thread may ask.
 */
int store_eviction_policy_ok(void);

/*
 * Called on the store's loop when redis.sentinel named a primary other than
 * the one this store was sent to before: a failover followed. from and to
 * are "host:port", borrowed for the call.
 */
typedef void store_failover_observer(const char *from, const char *to, void *arg);

/* Install the failover observer (metrics); fn may be NULL. */
void store_set_failover_observer(struct store *s, store_failover_observer *fn, void *arg);

/* Called on the store's loop for each event of a Cluster's slot map (store_types.h); arg as installed. */
typedef void store_event_observer(enum store_event ev, void *arg);

/* Install the event observer (metrics); fn may be NULL. */
void store_set_event_observer(struct store *s, store_event_observer *fn, void *arg);

/*
 * With many primaries (redis.cluster): how many of them have a ready
 * connection; -1 with one node (redis.url, redis.sentinel: store_primary
 * names it). Any thread may ask while s exists.
 */
int store_primaries_ready(const struct store *s);

#endif
