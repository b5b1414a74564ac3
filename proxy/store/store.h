/*
 * store.h - the record store: where the proxy keeps its records (claims,
 * stored answers, the outcome-unknown holds) and the operations it does on
 * them. The exchange, the admin API and the janitor use it, and nothing in
 * it is particular to Redis: the Redis client under it (raw commands, Lua,
 * the connections, Sentinel, Cluster) is store_redis.h, which only the
 * inbox (its streams) and the worker (its Redis gauges) use.
 *
 * What a backend provides (one folder implementing this header; the Redis
 * one is proxy/store/, docs/internals.md#the-record-store):
 * - an atomic claim: of two store_claim calls on one key only one wins, and
 *   the loser gets the record the winner wrote;
 * - compare-and-set: store_replace_owned, store_release_owned,
 *   store_takeover, store_delete_if_unchanged, store_replace_unchanged and
 *   store_extend_unchanged apply only while the record is still what the caller says (its owner
 *   token, or its bytes), atomically, and say whether they applied;
 * - expiry: a record lives for the ms it was written with (store_pttl reads
 *   what is left), and is gone after;
 * - the callback rule: every call reports through its callback exactly
 *   once, never synchronously from inside the call (a failure to send is
 *   reported from the event loop too), so callers have one path for every
 *   outcome; a status says whether a write may have been applied
 *   (store_types.h);
 * - a durability wait (store_wait_replicas): how many copies beyond the
 *   one written hold a write, so a claim can be refused when too few do;
 * - readiness (store_ready, store_unready) that any thread may read, the
 *   listing of held records page by page (store_list), and their census
 *   step by step (store_census_step).
 *
 * The Redis backend: one async connection to the Redis primary on the
 * worker's event_base (hiredis >= 1.0 API), or with redis.sentinel the
 * primary Redis Sentinel names, or with redis.cluster one connection per
 * primary of the slot map (docs/redis.md).
 */
#ifndef IDEM_STORE_H
#define IDEM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_types.h"

struct event_base;
struct config;

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
 * The credentials of a reload (cfg's redis.password and
 * redis.sentinel.password; s takes a reference to cfg): every connection
 * set up from now on (a reconnect after a drop, a failover, a sentinel
 * asked, a cluster node) sends them; connections already set up stay as
 * they are, their AUTH done (docs/redis.md#authentication). The user
 * names stay the boot config's (a reload cannot change them). On s's
 * loop's thread only.
 */
void store_set_credentials(struct store *s, struct config *cfg);

/*
 * Called once per command with its round-trip time in seconds and whether it
 * succeeded (an error reply, a timeout or no connection count as failed).
 */
typedef void store_observer(double seconds, bool ok, void *arg);

/*
 * s makes no claims (the admin worker's store: records, listings, the
 * census): it keeps no journal and has no grace after a new primary
 * (redis.reassert, docs/redis.md#re-assertion-after-a-failover). Call it
 * before the loop runs.
 */
void store_set_claimless(struct store *s);

/* Install the observer (metrics); fn may be NULL. */
void store_set_observer(struct store *s, store_observer *fn, void *arg);

/*
 * Whether the store can serve (for /readyz and metrics): connected, and the
 * connection's setup succeeded (with Redis: TLS, AUTH and SELECT accepted,
 * ROLE master, PING answered). False while connecting or setting up, after
 * a failed setup, for a node that is not the primary, and from a timeout
 * or a "not the primary" reply (both drop the connection) until a new
 * connection's setup succeeds. Calls made while a connection is being set
 * up wait for it (still bounded by the timeout) and fail with
 * STORE_UNAVAILABLE, unsent, when the setup fails; with no connection at
 * all they fail at once. With redis.cluster: every slot of the map has a
 * primary whose connection is ready. Any thread may ask while s exists.
 */
bool store_ready(const struct store *s);

/*
 * Why the store cannot take claims, for /readyz: NULL when it can, else a
 * static reason: "redis unreachable" (!store_ready), or, with
 * redis.min_replicas, "too few replicas acknowledge writes" when the
 * durability wait or the idle health check last counted fewer copies than
 * that (every claim would get 503 store-unavailable), or, with
 * redis.reassert, "putting back recent writes after a failover" for
 * redis.reassert.grace after the store followed a new primary (claims and
 * takeovers then fail with STORE_UNAVAILABLE, unsent;
 * docs/redis.md#re-assertion-after-a-failover). Any thread may ask while s
 * exists.
 */
const char *store_unready(const struct store *s);

/*
 * The node the store is connected to, "host:port" (or the socket path),
 * into address (len bytes, truncated to fit): true while store_ready (it is
 * the primary), false otherwise; with many primaries (redis.cluster)
 * "cluster", true while store_ready. Any thread may ask while s exists.
 */
bool store_primary(struct store *s, char *address, size_t len);

/*
 * The claim (docs/client-contract.md#how-a-request-is-handled): atomic (with
 * Redis, one `SET key value NX GET PX px_ms`, Redis >= 7.0). Wins when no
 * record existed, and the record value is kept for px_ms; else hands back
 * the record that held the key.
 */
void store_claim(struct store *s, const char *key, const char *value, size_t len,
                 uint64_t px_ms, store_value_cb *cb, void *arg);

/* The record of key, or NULL when there is none. */
void store_get(struct store *s, const char *key, store_value_cb *cb, void *arg);

/*
 * Compare-and-set on the owner token: when the record still carries owner,
 * replace it with value, kept for px_ms (a lease renewal and the
 * completion both pass the route's retention) unless the key lives longer
 * already, or keeping its time to live when px_ms is 0. applied says whether
 * it did. Idempotent: when the record already is value (byte for byte,
 * owner token included), applied is true and nothing changes, so the owner
 * may send the same write again after a timeout or a lost connection.
 */
void store_replace_owned(struct store *s, const char *key, const char *owner, const char *value,
                         size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg);

/* Compare-and-set delete on the owner token: release a claim. */
void store_release_owned(struct store *s, const char *key, const char *owner, store_cas_cb *cb,
                         void *arg);

/*
 * Take over an expired claim (on_ambiguous: release): when the record is still
 * byte-for-byte `expected`, replace it with value for px_ms (compare-and-set).
 */
void store_takeover(struct store *s, const char *key, const char *expected, size_t expected_len,
                    const char *value, size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg);

/*
 * Operator purge as one compare-and-set: delete key only while its record
 * is still byte-for-byte `expected` (expected_len bytes, copied before the
 * call returns), the record the caller read and checked; applied is false
 * when it changed in between (or is gone), and nothing was deleted then.
 */
void store_delete_if_unchanged(struct store *s, const char *key, const char *expected,
                               size_t expected_len, store_cas_cb *cb, void *arg);

/*
 * Operator resolve as one compare-and-set: while key's record is still
 * byte-for-byte `expected` (expected_len bytes), the record the caller read
 * and checked, replace it with value (len bytes), keeping the key's time to
 * live (the record's retention goes on as it was). applied is false when
 * it changed in between or is gone; nothing was written then. Both buffers
 * are copied before the call returns.
 */
void store_replace_unchanged(struct store *s, const char *key, const char *expected,
                             size_t expected_len, const char *value, size_t len,
                             store_cas_cb *cb, void *arg);

/*
 * Operator extension as one compare-and-set: while key's record is still
 * byte-for-byte `expected` (expected_len bytes, copied before the call
 * returns), set its time to live to ttl_ms from now unless it is at least
 * that already (a record's life is never shortened here; the value stays
 * as it is). cb says whether it applied, whether the time to live changed,
 * and the time to live the record has now (store_extend_cb).
 */
void store_extend_unchanged(struct store *s, const char *key, const char *expected,
                            size_t expected_len, uint64_t ttl_ms, store_extend_cb *cb,
                            void *arg);

/* key's time to live left, ms (-2 no record, -1 no expiry). */
void store_pttl(struct store *s, const char *key, store_int_cb *cb, void *arg);

/*
 * The durability wait: how many replicas hold a write (docs/redis.md,
 * "Replicated claims"): call it from inside the callback of a write
 * reported STORE_OK (store_claim, store_takeover, store_replace_owned...);
 * the store then asks the node that took that write (with Redis, `WAIT
 * redis.min_replicas redis.replica_timeout` on the connection that carried
 * it: WAIT counts that connection's writes only), once per loop turn for
 * all the calls of that turn. now: the caller waits on the answer (a
 * claim); false (a record) lets the call wait up to 10 ms for another
 * call's wait, which covers it as well. cb gets STORE_OK and the number of
 * replicas that acknowledged the write (compare it with min_replicas:
 * fewer is a shortfall), or STORE_LOST (called elsewhere, or that
 * connection dropped or was replaced before the wait was answered: the
 * write may or may not be replicated), STORE_TIMEOUT, STORE_ERROR (the
 * backend refused the wait: with Redis, an ACL user without +wait) or
 * STORE_UNAVAILABLE, with 0. Never synchronously.
 */
void store_wait_replicas(struct store *s, bool now, store_int_cb *cb, void *arg);

/* ---- the listing of held records (admin GET /records?state=) ---- */

/* One record of a listing's page; borrowed for the page's callback. */
struct store_listed {
    const char *key;        /* its key, "PREFIX:{ID}" (NUL-terminated) */
    const char *value;      /* the record, len bytes */
    size_t len;
    long long ttl_ms;       /* its time to live left, ms */
};

/*
 * Whether a record (value, len bytes) that the walk found in a state
 * asked for is listed (a claim whose lease has not run out is not, say);
 * called on the loop as the records are read, arg as given.
 */
typedef bool store_list_keep(const char *value, size_t len, void *arg);

/*
 * A page: st STORE_OK with n records (batch by batch in the walk's order,
 * the records of one batch in record-id order) and next, the cursor of the
 * next page (NULL: the walk is over); else why (a static text for the
 * answer: "redis answered ... with an error (NOPERM: ...)" when Redis
 * refused a command of the walk, "redis unavailable: ..." when the backend
 * failed otherwise, "out of memory" when the page could not be held) and
 * n 0. Everything is borrowed for the call.
 */
typedef void store_list_cb(enum store_status st, const struct store_listed *records, size_t n,
                           const char *next, const char *why, void *arg);

/* Bytes of a listing's cursor at most, with its NUL. */
#define STORE_LIST_CURSOR_MAX 128

/*
 * Whether cursor is one a listing's page gave as next ("0" too: the start;
 * an earlier release's too). Pure.
 */
bool store_list_cursor_valid(const char *cursor);

/*
 * The next page of the records under prefix (redis.key_prefix, copied) in
 * one of `states` (record.h state letters, e.g. "CUR"; copied, at most 8)
 * that keep accepts: at most limit
 * (1..1000) of them, from cursor (NULL or "0": the start; else a next that
 * store_list_cursor_valid accepts), with a bounded cost (with Redis: at
 * most 8 SCANs of at least 100 keys on one node after another, the primary
 * or each primary of a cluster, and one look per key that sends a record
 * back only in those states, so a finished record's body stays in Redis).
 * Only keys whose record id is 32 lowercase hex characters are looked at.
 * A record held for the whole walk is listed, whatever happens meanwhile
 * to the others (resolved, purged, expired: a cursor says where the walk is
 * by record id, never by a count); one that changes meanwhile may or may
 * not be, or twice. A command Redis refuses (NOPERM) fails the page: never
 * a page that leaves records out. cb runs once, never from inside this
 * call. Out of memory in the call aborts (later, a page that cannot be held
 * fails with "out of memory").
 */
void store_list(struct store *s, const char *prefix, const char *states, unsigned limit,
                const char *cursor, store_list_keep *keep, store_list_cb *cb, void *arg);

/* ---- the census of held records (census.h, docs/operations.md#held-records) ---- */

/*
 * The held states the census counts: a claim whose lease ran out (what a
 * proxy that died mid-flight leaves), outcome-unknown, and resolved by an
 * operator. A live claim is a request in flight, not counted.
 */
enum store_held_state {
    STORE_HELD_CLAIMED_EXPIRED,
    STORE_HELD_OUTCOME_UNKNOWN,
    STORE_HELD_RESOLVED,
    STORE_HELD_STATES
};

/* The records of one held state a walk counted so far. */
struct store_held {
    uint64_t records;
    uint64_t oldest_created_ms;     /* the earliest created time among them, ms since the
                                       epoch; 0: none */
    uint64_t soonest_expiry_ms;     /* when the first of them expires, ms since the epoch
                                       (the step's clock plus its time to live); 0: none */
};

#define STORE_CENSUS_CURSOR_MAX 24

/* Where a census walk is, and what it counted. Zeroed (store_census_init) before its first step. */
struct store_census_walk {
    bool started;                   /* the first step ran: nodes is set */
    bool done;                      /* every node was walked: held is the whole count */
    unsigned node, nodes;           /* the node walked, of how many */
    char scan[STORE_CENSUS_CURSOR_MAX]; /* its SCAN cursor, "0" at its start */
    uint64_t keys;                  /* record keys looked at */
    struct store_held held[STORE_HELD_STATES];
};

/* Start w afresh: nothing walked, nothing counted. */
void store_census_init(struct store_census_walk *w);

/*
 * A step's end: st STORE_OK (w advanced, perhaps done), else why (static
 * text) and the walk is over unfinished: start a new one.
 */
typedef void store_census_cb(enum store_status st, const char *why, void *arg);

/*
 * One step of census walk w (caller-owned, untouched by anyone else until
 * cb) over the records under prefix (redis.key_prefix, copied): at most one
 * SCAN of count keys (its COUNT) on one node, the primary or each primary
 * of a cluster in turn, and the keys it found classified where they are
 * (with Redis: by one short script per batch of at most STORE_CENSUS_BATCH
 * keys, one per key with redis.cluster, that reads each record's head and
 * sends back only counts, the oldest created time and the shortest time to
 * live per held state; no record leaves Redis). A claim counts as expired
 * when its lease deadline is not after now_ms (ms since the epoch). SCAN's
 * guarantee holds: a record held for the whole walk is counted, one that
 * changes meanwhile may or may not be, or twice. cb runs once, never from
 * inside this call. Out of memory aborts.
 */
void store_census_step(struct store *s, const char *prefix, struct store_census_walk *w,
                       uint64_t now_ms, unsigned count, store_census_cb *cb, void *arg);

#define STORE_CENSUS_BATCH 100      /* keys per census script at most (one node) */

#endif
