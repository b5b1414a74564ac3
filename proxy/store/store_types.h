/*
 * store_types.h - the small types every header of the store shares: the
 * store object's name, the status every call reports, and the callbacks of
 * the record operations. store.h (the record store) and store_redis.h (the
 * Redis client under it) stand on it, and so do the two private headers
 * (store_int.h, the command layer; store_conn_int.h, the connections).
 */
#ifndef IDEM_STORE_TYPES_H
#define IDEM_STORE_TYPES_H

#include <stdbool.h>
#include <stddef.h>

struct store;

enum store_status {
    STORE_OK = 0,
    STORE_UNAVAILABLE = -1, /* not connected, or the connection dropped */
    STORE_TIMEOUT = -2,     /* no reply within the store's timeout (redis.timeout) */
    STORE_ERROR = -3,       /* the backend answered an error, or an unexpected reply */
    STORE_LOST = -4,        /* sent, then the connection dropped: it may have been applied */
    STORE_REFUSED = -5,     /* the backend refused it for now and so proved it did not run
                               (Redis: NOREPLICAS, BUSY, TRYAGAIN, CLUSTERDOWN, READONLY,
                               LOADING, MASTERDOWN, an unfollowed MOVED or ASK:
                               store_reply.h): nothing was applied, and the same command may
                               succeed later */
    STORE_WRONG_TYPE = -6,  /* the key holds a value of another type than a record (Redis:
                               WRONGTYPE, a hash under the records' prefix, say): not a
                               record the proxy wrote; nothing was done */
};

/*
 * Whether a command that failed with st may succeed when sent again
 * unchanged: no connection, a timeout, a lost connection (each: it may
 * have been applied, so only an idempotent write may be sent again) and a
 * refusal for now (not applied). False for STORE_OK, STORE_ERROR (an
 * error reply that will not change by itself: NOPERM, OOM, an unexpected
 * reply) and STORE_WRONG_TYPE.
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

/*
 * An extension's callback (store_extend_unchanged): applied is false when
 * the record no longer matched (nothing changed); else changed says whether
 * the time to live was raised, and ttl_ms is the time to live it has now
 * (ms; -1: the key has no expiry).
 */
typedef void store_extend_cb(enum store_status st, bool applied, bool changed, long long ttl_ms,
                             void *arg);

/* Integer callback (TTL in ms, deleted count...). */
typedef void store_int_cb(enum store_status st, long long value, void *arg);

/* What a Redis Cluster's slot map did (docs/redis.md#redis-cluster), for metrics (store_redis.h). */
enum store_event {
    STORE_EVENT_MAP_REFRESH,    /* a new slot map was read */
    STORE_EVENT_MOVED,          /* a command was redirected: the slot has moved */
    STORE_EVENT_ASK,            /* a command was redirected: the slot is migrating */
    /* redis.reassert (store_reassert.c) */
    STORE_EVENT_NEW_PRIMARY,    /* a connection is ready on another primary: journal sent */
    STORE_EVENT_REASSERT_RESTORED,   /* a put-back wrote its value (the key had lost it) */
    STORE_EVENT_REASSERT_PRESENT,    /* a put-back found it there (or a later record of ours) */
    STORE_EVENT_REASSERT_SUPERSEDED, /* a put-back found another owner's record */
    STORE_EVENT_REASSERT_FAILED,     /* a put-back got no answer or an error */
    STORE_EVENT_REASSERT_DROPPED,    /* a write left out of the journal: over max_bytes */
};

#endif
