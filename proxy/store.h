/*
 * store.h - the record store: one async connection to the Redis primary on
 * the worker's event_base (hiredis >= 1.0 API, hiredict 1.3.1 in the image,
 * with its libevent adapter): names resolved off the loop (evdns), TLS and
 * ACL users, the role checked (a replica is not ready), command timeouts,
 * reconnect with backoff, and the compare-and-set scripts. The connection
 * itself is store_conn.c (store_int.h); with redis.sentinel the primary is
 * found through Redis Sentinel (store_sentinel.c); with redis.cluster each
 * key's commands go to the primary of its slot, one connection per primary
 * (store_cluster.c); README "Redis in production", "Redis Cluster".
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
};

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
 * Called on the store's loop when redis.sentinel named a primary other than
 * the one this store was sent to before: a failover followed. from and to
 * are "host:port", borrowed for the call.
 */
typedef void store_failover_observer(const char *from, const char *to, void *arg);

/* Install the failover observer (metrics); fn may be NULL. */
void store_set_failover_observer(struct store *s, store_failover_observer *fn, void *arg);

/* What a Redis Cluster's slot map did (README "Redis Cluster"), for metrics. */
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
 * The claim (README "How a request is handled"): one atomic `SET key value NX GET PX px_ms`
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

/* PTTL key, ms (-2 no key, -1 no expiry). */
void store_pttl(struct store *s, const char *key, store_int_cb *cb, void *arg);

/*
 * How many replicas hold a write (README "Redis in production", "Replicated
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

/* ---- the webhook inbox's commands (README "Webhook inbox") ----------------
 *
 * Each call names keys of one route only, all with the route's hash tag
 * `{...}`, so that one call stays in one cluster slot. The reply comes as
 * plain values (no hiredis type leaves the store module).
 */

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

/* The keys of one route's inbox, all in one slot. */
struct store_inbox_keys {
    const char *stream;     /* the Redis Stream of accepted deliveries */
    const char *retries;    /* sorted set: entry id by due time, ms */
    const char *payloads;   /* hash: entry id -> the fields of a scheduled retry */
    const char *dead;       /* the dead-letter stream */
    const char *group;      /* the consumer group's name */
};

/*
 * XADD stream * fields... (nfields name/value pairs in fv, lengths in fvlen):
 * the new entry's id (STORE_STR). Never MAXLEN: Redis 7.0 trims entries that
 * are still pending; entries are deleted once acknowledged instead.
 */
void store_inbox_append(struct store *s, const struct store_inbox_keys *k, size_t nfields,
                        const char *const *fv, const size_t *fvlen, store_reply_cb *cb,
                        void *arg);

/* XGROUP CREATE stream group 0 MKSTREAM, an existing group counting as success (Lua). */
void store_inbox_ensure_group(struct store *s, const struct store_inbox_keys *k,
                              store_reply_cb *cb, void *arg);

/*
 * XREADGROUP GROUP group consumer COUNT count STREAMS stream > (no BLOCK:
 * the connection is shared with the claims): NIL, or the entries.
 */
void store_inbox_read(struct store *s, const struct store_inbox_keys *k, const char *consumer,
                      unsigned count, store_reply_cb *cb, void *arg);

/*
 * XAUTOCLAIM stream group consumer min_idle_ms start COUNT count: entries
 * left pending longer than min_idle_ms (a crashed instance's) become
 * consumer's; the reply's first element is where the next call starts
 * ("0-0" once the whole pending list was scanned).
 */
void store_inbox_autoclaim(struct store *s, const struct store_inbox_keys *k,
                           const char *consumer, uint64_t min_idle_ms, const char *start,
                           unsigned count, store_reply_cb *cb, void *arg);

/*
 * XCLAIM stream group consumer 0 ids... IDLE idle_ms JUSTID: with idle_ms 0
 * it renews the entries consumer is still delivering, so no other instance
 * takes them; with visibility_timeout it releases them (SIGTERM), so
 * another instance takes them at once.
 */
void store_inbox_renew(struct store *s, const struct store_inbox_keys *k, const char *consumer,
                       const char *const *ids, size_t n, uint64_t idle_ms, store_reply_cb *cb,
                       void *arg);

/* Acknowledged by the receiver: XACK and XDEL id (Lua): STORE_INT 1 when it was pending. */
void store_inbox_ack(struct store *s, const struct store_inbox_keys *k, const char *id,
                     store_reply_cb *cb, void *arg);

/*
 * A failed attempt with attempts left (Lua): the entry's fields, with
 * `attempts` set to attempts, are kept in payloads and scheduled in retries
 * at due_ms (unix ms); then XACK and XDEL. STORE_INT 0 when the entry was
 * gone (acknowledged by someone else).
 */
void store_inbox_retry(struct store *s, const struct store_inbox_keys *k, const char *id,
                       unsigned attempts, uint64_t due_ms, store_reply_cb *cb, void *arg);

/*
 * No attempts or age left (Lua): the entry's fields plus attempts, reason
 * and died (unix ms) go to the dead-letter stream; then XACK and XDEL.
 */
void store_inbox_bury(struct store *s, const struct store_inbox_keys *k, const char *id,
                      unsigned attempts, const char *reason, uint64_t now_ms,
                      store_reply_cb *cb, void *arg);

/* Retries due by now_ms, at most count of them, back into the stream (Lua): STORE_INT moved. */
void store_inbox_promote(struct store *s, const struct store_inbox_keys *k, uint64_t now_ms,
                         unsigned count, store_reply_cb *cb, void *arg);

/*
 * The route's numbers (Lua), STORE_ARR of STORE_INT: depth (XLEN), pending
 * (read, not acknowledged), scheduled retries, the oldest entry's `received`
 * (unix ms, 0 when empty), dead letters.
 */
void store_inbox_stats(struct store *s, const struct store_inbox_keys *k, store_reply_cb *cb,
                       void *arg);

/* XRANGE dead - + COUNT count: the dead letters, oldest first. */
void store_inbox_dead_list(struct store *s, const struct store_inbox_keys *k, unsigned count,
                           store_reply_cb *cb, void *arg);

/*
 * Redeliver dead letter id (Lua): its delivery fields go back into the
 * stream with attempts 0 and a fresh `received`, then it is deleted from
 * the dead stream. STORE_INT 0 when there is no such dead letter.
 */
void store_inbox_redeliver(struct store *s, const struct store_inbox_keys *k, const char *id,
                           uint64_t now_ms, store_reply_cb *cb, void *arg);

/* XDEL dead id: STORE_INT 1 when it was there. */
void store_inbox_dead_delete(struct store *s, const struct store_inbox_keys *k, const char *id,
                             store_reply_cb *cb, void *arg);

#endif
