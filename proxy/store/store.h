/*
 * store.h - the record store: one async connection to the Redis primary on
 * the worker's event_base (hiredis >= 1.0 API, hiredict 1.3.1 in the image,
 * with its libevent adapter): names resolved off the loop (evdns), TLS and
 * ACL users, the role checked (a replica is not ready), command timeouts,
 * reconnect with backoff, and the compare-and-set scripts. The connection
 * itself is store_conn.c (store_int.h); with redis.sentinel the primary is
 * found through Redis Sentinel (store_sentinel.c); with redis.cluster each
 * key's commands go to the primary of its slot, one connection per primary
 * (store_cluster.c); docs/redis.md, "Redis Cluster".
 *
 * Every store_* call reports through its callback exactly once, never
 * synchronously from inside the call (a failure to send is reported from the
 * event loop too), so callers have one path for every outcome.
 */
#ifndef IDEM_STORE_H
#define IDEM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct config;
struct store;

enum store_status {
    STORE_OK = 0,
    STORE_UNAVAILABLE = -1, /* not connected, or the connection dropped */
    STORE_TIMEOUT = -2,     /* no reply within redis.timeout */
    STORE_ERROR = -3,       /* Redis answered an error, or an unexpected reply */
    STORE_LOST = -4,        /* sent, then the connection dropped: it may have been applied */
    STORE_REFUSED = -5,     /* Redis refused it for now and so proved it did not run
                               (NOREPLICAS, BUSY, TRYAGAIN, CLUSTERDOWN, READONLY, LOADING,
                               MASTERDOWN, an unfollowed MOVED or ASK: store_reply.h):
                               nothing was applied, and the same command may succeed later */
};

/*
 * Whether a command that failed with st may succeed when sent again
 * unchanged: no connection, a timeout, a lost connection (each: it may
 * have been applied, so only an idempotent write may be sent again) and a
 * refusal for now (not applied). False for STORE_OK and STORE_ERROR (an
 * error reply that will not change by itself: NOPERM, WRONGTYPE, OOM, an
 * unexpected reply).
 */
bool store_status_retryable(enum store_status st);

/* A short name of st for log lines ("timeout", "refused for now", ...); static. */
const char *store_status_name(enum store_status st);

/*
 * Value callback: for store_claim, value == NULL means the claim was won; else
 * it is the record that already held the key. For store_get, NULL means no
 * record. value (len bytes) is only valid during the callback.
 */
typedef void store_value_cb(enum store_status st, const char *value, size_t len, void *arg);

/* Compare-and-set callback: applied is false when the record no longer matched. */
typedef void store_cas_cb(enum store_status st, bool applied, void *arg);

/* Integer callback (TTL in ms, deleted count...). */
typedef void store_int_cb(enum store_status st, long long value, void *arg);

/*
 * Create the store for base and start connecting from the loop's first turn
 * (a failed connection is not an error: it retries with backoff). cfg must
 * outlive the store. NULL with the reason in err (errlen bytes) when the
 * TLS files of redis.tls cannot be used ("redis.tls.ca_file FILE: why"), or
 * on allocation failure.
 */
struct store *store_create(struct event_base *base, const struct config *cfg, char *err,
                           size_t errlen);

/*
 * Close the connection; commands sent get STORE_LOST, queued and unsent
 * ones STORE_UNAVAILABLE, before it returns. Call it with the loop stopped,
 * never from a store callback; it may turn the loop once (EVLOOP_NONBLOCK)
 * to let a cancelled name resolution finish. NULL is fine.
 */
void store_destroy(struct store *s);

/*
 * Called once per command with its round-trip time in seconds and whether it
 * succeeded (a Redis error reply, a timeout or no connection count as failed).
 */
typedef void store_observer(double seconds, bool ok, void *arg);

/* Install the observer (metrics); fn may be NULL. */
void store_set_observer(struct store *s, store_observer *fn, void *arg);

/*
 * Whether the store can serve (for /readyz and metrics): the connection is up
 * and its setup succeeded (TLS, AUTH and SELECT accepted, ROLE master, PING
 * answered). False while resolving, connecting or setting up, after a failed
 * setup, for a replica, and from a timeout or a "not the primary" reply
 * (both drop the connection) until a new connection's setup succeeds.
 * Client commands submitted while a connection is being set up wait for it
 * (still bounded by redis.timeout) and fail with STORE_UNAVAILABLE, unsent,
 * when the setup fails; with no connection at all they fail at once. With
 * redis.cluster: every slot of the map has a primary whose connection is
 * ready. Any thread may ask while s exists.
 */
bool store_ready(const struct store *s);

/*
 * Why the store cannot take claims, for /readyz: NULL when it can, else a
 * static reason: "redis unreachable" (!store_ready), or, with
 * redis.min_replicas, "too few replicas acknowledge writes" after the last
 * WAIT counted fewer than min_replicas acknowledgements or an idle
 * connection's ROLE listed fewer online replicas (every claim would get 503
 * store-unavailable); with redis.cluster, after the slot map listed fewer
 * online replicas for some primary. Any thread may ask while s exists.
 */
const char *store_unready(const struct store *s);

/*
 * The node the store is connected to, "host:port" (or the socket path),
 * into address (len bytes, truncated to fit): true while store_ready (its
 * ROLE said master), false otherwise; with redis.cluster "cluster", true
 * while store_ready. Any thread may ask while s exists.
 */
bool store_primary(struct store *s, char *address, size_t len);

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

/* What a Redis Cluster's slot map did (docs/redis.md#redis-cluster), for metrics. */
enum store_event {
    STORE_EVENT_MAP_REFRESH,    /* a new slot map was read */
    STORE_EVENT_MOVED,          /* a command was redirected: the slot has moved */
    STORE_EVENT_ASK,            /* a command was redirected: the slot is migrating */
};

/* Called on the store's loop for each event; arg as installed. */
typedef void store_event_observer(enum store_event ev, void *arg);

/* Install the event observer (metrics); fn may be NULL. */
void store_set_event_observer(struct store *s, store_event_observer *fn, void *arg);

/*
 * With many primaries (redis.cluster): how many of them have a ready
 * connection; -1 with one node (redis.url, redis.sentinel: store_primary
 * names it). Any thread may ask while s exists.
 */
int store_primaries_ready(const struct store *s);

/*
 * The claim (docs/client-contract.md#how-a-request-is-handled): one atomic `SET key value NX GET PX px_ms`
 * (Redis >= 7.0). Wins when no record existed, else hands back the record.
 */
void store_claim(struct store *s, const char *key, const char *value, size_t len,
                 uint64_t px_ms, store_value_cb *cb, void *arg);

/* GET key: the record, or NULL when there is none. */
void store_get(struct store *s, const char *key, store_value_cb *cb, void *arg);

/*
 * Compare-and-set on the owner token (Lua): when the record still carries
 * owner, replace it with value, keeping the key's TTL when px_ms is 0 (a
 * lease renewal) or setting PX px_ms (completion). applied says whether it did.
 * Idempotent: when the record already is value (byte for byte, owner token
 * included), applied is true and nothing changes, so the owner may send the
 * same write again after a timeout or a lost connection.
 */
void store_replace_owned(struct store *s, const char *key, const char *owner, const char *value,
                         size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg);

/* Compare-and-set delete on the owner token (Lua): release a claim. */
void store_release_owned(struct store *s, const char *key, const char *owner, store_cas_cb *cb,
                         void *arg);

/*
 * Take over an expired claim (on_ambiguous: release): when the record is still
 * byte-for-byte `expected`, replace it with value for px_ms (Lua).
 */
void store_takeover(struct store *s, const char *key, const char *expected, size_t expected_len,
                    const char *value, size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg);

/*
 * Operator purge as one compare-and-set (Lua): delete key only while its
 * record is still byte-for-byte `expected` (expected_len bytes, copied before
 * the call returns), the record the caller read and checked; applied is false
 * when it changed in between (or is gone), and nothing was deleted then.
 */
void store_delete_if_unchanged(struct store *s, const char *key, const char *expected,
                               size_t expected_len, store_cas_cb *cb, void *arg);

/*
 * Operator resolve as one compare-and-set (Lua): while key's record is still
 * byte-for-byte `expected` (expected_len bytes), the record the caller read
 * and checked, replace it with value (len bytes), keeping the key's TTL
 * (KEEPTTL: the record's retention goes on as it was). applied is false
 * when it changed in between or is gone; nothing was written then. Both
 * buffers are copied before the call returns.
 */
void store_replace_unchanged(struct store *s, const char *key, const char *expected,
                             size_t expected_len, const char *value, size_t len,
                             store_cas_cb *cb, void *arg);

/* PTTL key, ms (-2 no key, -1 no expiry). */
void store_pttl(struct store *s, const char *key, store_int_cb *cb, void *arg);

/*
 * How many replicas hold a write (docs/redis.md, "Replicated
 * claims"): call it from inside the callback of a write reported STORE_OK
 * (store_claim, store_takeover, store_replace_owned...); the store then sends
 * `WAIT redis.min_replicas redis.replica_timeout` on the connection that
 * carried that write (WAIT counts that connection's writes only), once per
 * loop turn for all the calls of that turn. now: the caller waits on the
 * answer (a claim); false (a record) lets the call wait up to 10 ms for
 * another call's WAIT, which covers it as well. cb gets STORE_OK and the number
 * of replicas that acknowledged the write (compare it with min_replicas:
 * fewer is a shortfall), or STORE_LOST (called elsewhere, or that connection
 * dropped or was replaced before the WAIT was answered: the write may or may
 * not be replicated), STORE_TIMEOUT, STORE_ERROR (e.g. NOPERM: an ACL user
 * without +wait) or STORE_UNAVAILABLE, with 0. Never synchronously.
 */
void store_wait_replicas(struct store *s, bool now, store_int_cb *cb, void *arg);

/* ---- replies as plain values (no hiredis type leaves the store module) ---- */

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

/* ---- the listing of records (admin GET /records?state=) ---- */

/*
 * How many nodes a walk of every record key visits with store_scan: 1 with
 * redis.url or redis.sentinel (the primary), the primaries that own slots
 * in the map with redis.cluster (0 while there is no map).
 */
unsigned store_scan_nodes(struct store *s);

/*
 * `SCAN cursor MATCH match COUNT count` on node (0 .. store_scan_nodes - 1;
 * with redis.cluster the primaries in the order of the lowest slot each
 * owns, store_cluster_primary), never redirected. cb gets STORE_ARR of the
 * next cursor (STORE_STR, "0" when the node's walk is over) and the keys
 * (STORE_ARR of STORE_STR); a node not in the map fails STORE_UNAVAILABLE.
 * cursor and match are copied. Cost on Redis: about count keys looked at.
 */
void store_scan(struct store *s, unsigned node, const char *cursor, const char *match,
                unsigned count, store_reply_cb *cb, void *arg);

/*
 * One key of a listing (Lua): STORE_NIL unless key holds a record in
 * `state` (a record.h state letter), read by its head's state byte (so a
 * finished record's body is not sent); else STORE_ARR of the whole record
 * (STORE_STR) and its PTTL in ms (STORE_INT).
 */
void store_record_peek(struct store *s, const char *key, char state, store_reply_cb *cb,
                       void *arg);

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

#endif
