/*
 * metrics.h - counters, gauges and histograms for GET /metrics, in the
 * Prometheus text exposition format 0.0.4. One set per process, shared by
 * the worker threads: every function takes the set's lock.
 */
#ifndef IDEM_METRICS_H
#define IDEM_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

#define METRICS_BUCKETS 14

struct metrics_histogram {
    uint64_t counts[METRICS_BUCKETS + 1]; /* per bucket, the last is +Inf; not cumulative */
    double sum;                           /* seconds */
    uint64_t count;
};

struct metrics_request_count {
    char *route;            /* route pattern, or "" for no route; owned */
    const char *outcome;    /* static string */
    uint64_t count;
};

enum metrics_counter {
    METRICS_STORE_ERRORS,           /* Redis unavailable, timed out or erroring */
    METRICS_STORE_ERROR_PASSES,     /* requests forwarded unprotected because of it */
    METRICS_FAILOVERS_FOLLOWED,     /* redis.sentinel named another primary (metrics_count_failover) */
    METRICS_RELOADS,
    METRICS_RELOAD_FAILURES,
    METRICS_WAIT_SHORTFALLS_CLAIM,  /* claims fewer than min_replicas confirmed (or WAIT failed) */
    METRICS_WAIT_SHORTFALLS_RECORD, /* the same for written records (logged only) */
    METRICS_CLUSTER_REFRESHES,      /* redis.cluster: slot maps read */
    METRICS_CLUSTER_MOVED,          /* redis.cluster: commands redirected by MOVED */
    METRICS_CLUSTER_ASK,            /* redis.cluster: commands redirected by ASK */
    METRICS_REASSERT_RESTORED,      /* redis.reassert: writes put back on a new primary */
    METRICS_REASSERT_PRESENT,       /* ... found there already (or a later record of ours) */
    METRICS_REASSERT_SUPERSEDED,    /* ... found another owner's record: may have run twice */
    METRICS_REASSERT_FAILED,        /* ... not answered, or refused */
    METRICS_REASSERT_DROPPED,       /* writes left out of the journal: over max_bytes */
    METRICS_INBOX_ACCEPTED,         /* queued webhook deliveries appended and answered */
    METRICS_INBOX_DELIVERED,        /* acknowledged by the receiver (2xx) */
    METRICS_INBOX_ATTEMPTS,         /* deliveries tried, first tries and retries */
    METRICS_INBOX_RETRIES,          /* retries scheduled */
    METRICS_INBOX_DEAD,             /* moved to a dead-letter stream */
    METRICS_OVERLOADED,             /* refused with 503 overloaded: limits.max_buffered reached */
    METRICS_ADMIN_UNAUTHORIZED_MISSING, /* admin requests refused with 401: no bearer token */
    METRICS_ADMIN_UNAUTHORIZED_INVALID, /* ... with another token, or a malformed one */
    METRICS_ADMIN_THROTTLED,           /* admin requests refused with 429: too many failures */
    METRICS_ADMIN_FORBIDDEN,           /* admin requests refused with 403: a right missing */
    METRICS_RECORDS_RESOLVED,       /* an operator's answer recorded: PUT /records/<id>, bulk */
    METRICS_DECRYPT_KEY_UNAVAILABLE, /* stored values whose key id is not in the keyring */
    METRICS_DECRYPT_UNREADABLE,     /* stored values that failed authentication (seal_open) */
    METRICS_HELD_ANSWERS,           /* retries answered outcome-unknown from a held record */
    METRICS_COUNTERS
};

enum metrics_latency {
    METRICS_UPSTREAM_LATENCY,
    METRICS_REDIS_LATENCY,
    METRICS_REPLICA_WAIT_LATENCY,   /* a won claim's wait for its replicas, batching included */
    METRICS_INBOX_DELIVERY_LATENCY, /* queued delivery: accepted to acknowledged by the receiver */
    METRICS_LATENCIES
};

/* A queued route's inbox, as last polled (metrics_inbox_gauges). */
struct metrics_inbox {
    char *route;            /* route path as written; owned */
    double depth;           /* entries in the stream */
    double oldest_s;        /* age of the oldest undelivered entry, seconds */
    bool paused;            /* POST /inbox/<route>/pause: nothing is delivered */
};

/* The held states of the census (census.h), in the order of their state label. */
enum metrics_held_state {
    METRICS_HELD_CLAIMED_EXPIRED,   /* state="claimed_expired": a claim whose lease ran out */
    METRICS_HELD_OUTCOME_UNKNOWN,   /* state="outcome_unknown" */
    METRICS_HELD_RESOLVED,          /* state="resolved": an operator's answer */
    METRICS_HELD_STATES
};

/* A census of held records (docs/operations.md#held-records), as its pass completed. */
struct metrics_held {
    uint64_t finished_ms;           /* when the pass completed, ms since the epoch */
    struct {
        uint64_t records;
        uint64_t oldest_created_ms;     /* the earliest created time, ms since the epoch; 0: none */
        uint64_t soonest_expiry_ms;     /* when the first expires, ms since the epoch; 0: none */
    } state[METRICS_HELD_STATES];
};

struct metrics {
    pthread_mutex_t lock;                   /* guards everything below */
    struct metrics_request_count *requests; /* owned array */
    size_t n_requests, cap_requests;
    struct metrics_request_count *unknown;  /* outcome-unknown records written, by route
                                               (outcome ""); owned array */
    size_t n_unknown, cap_unknown;
    uint64_t counters[METRICS_COUNTERS];
    struct metrics_histogram latency[METRICS_LATENCIES];
    char followed_primary[300];             /* the primary the last failover counted led to */
    struct metrics_inbox *inboxes;          /* owned array */
    size_t n_inboxes;
    uint64_t started_ms;                    /* metrics_init's time, ms since the epoch */
    bool held_known;                        /* a census result was set */
    struct metrics_held held;               /* the last one (metrics_held_set) */
};

/* Most distinct primaries /metrics lists: one per worker at most (CONFIG_MAX_WORKERS). */
#define METRICS_MAX_PRIMARIES 64

/* A Redis primary the workers are connected to, and how many of them. */
struct metrics_primary {
    char address[300];              /* host:port, or the socket path */
    unsigned workers;
};

/* Most key ids metrics_render shows (keyring.h: KEYRING_COUNTED_IDS, and "" for the rest). */
#define METRICS_KEY_IDS 65

/* One key id's counts since the process started, as the keyring keeps them (keyring.h). */
struct metrics_key_counts {
    char id[33];                    /* [A-Za-z0-9._-]{1,32}; "": no key id, or past the cap */
    unsigned long long sealed;      /* values sealed under the key */
    unsigned long long opened;      /* stored values opened and authenticated */
};

/* The gauges, summed over the workers by the caller of metrics_render. */
struct metrics_gauges {
    unsigned in_flight;             /* exchanges not yet answered and freed */
    unsigned waiting;               /* requests waiting for another's answer */
    unsigned upstream_in_flight;    /* upstream transfers */
    size_t buffered_bytes;          /* counted in the budget of limits.max_buffered (budget.h) */
    size_t max_buffered;            /* that budget's limit, bytes */
    int redis_up;                   /* 1 when every worker's Redis connection is up */
    struct metrics_primary redis_primaries[METRICS_MAX_PRIMARIES]; /* ready connections */
    size_t n_redis_primaries;
    int redis_cluster_nodes;        /* redis.cluster: primaries with a ready connection, the
                                       fewest over the workers; -1 without a cluster */
    int redis_eviction_policy_ok;   /* 1 noeviction, 0 a policy that evicts, -1 unknown
                                       (store_eviction_policy_ok) */
    struct metrics_key_counts keys[METRICS_KEY_IDS]; /* the keyring's, process-wide */
    size_t n_keys;
};

/* An empty set. Returns 0, or -1 when the lock cannot be created. */
int metrics_init(struct metrics *m);

/* Count one request of route (NULL: none) with outcome (a static string). */
void metrics_count_request(struct metrics *m, const char *route, const char *outcome);

/*
 * Count one record written in the outcome-unknown state for route (NULL:
 * none), idempotency_proxy_outcome_unknown_total{route}: what an alert on
 * held records reads, without a scan of Redis per scrape.
 */
void metrics_count_outcome_unknown(struct metrics *m, const char *route);

/*
 * Show idempotency_proxy_outcome_unknown_total{route} at 0 until its first
 * count (route copied): an alert on increase() sees the first record of a
 * route only when the series existed before it (Prometheus has no earlier
 * sample of a new series to compare with).
 */
void metrics_declare_outcome_unknown(struct metrics *m, const char *route);

/* Add one to counter c. */
void metrics_count(struct metrics *m, enum metrics_counter c);

/*
 * A worker followed a failover to the primary at to ("host:port"): counts
 * METRICS_FAILOVERS_FOLLOWED once per move of the primary, however many
 * workers follow it (a worker that finds the primary the last counted
 * move led to does not count again).
 */
void metrics_count_failover(struct metrics *m, const char *to);

/*
 * Count one worker connected to the primary at address in g (the gauge
 * idempotency_proxy_redis_primary); addresses past METRICS_MAX_PRIMARIES are
 * left out. No lock: g is the caller's.
 */
void metrics_gauge_primary(struct metrics_gauges *g, const char *address);

/*
 * Set the gauges of route's inbox (docs/webhooks.md#webhook-inbox): depth (entries)
 * the oldest undelivered entry's age in seconds, and whether it is paused.
 * route is copied.
 */
void metrics_inbox_gauges(struct metrics *m, const char *route, double depth, double oldest_s,
                          bool paused);

/*
 * Set the census of held records the gauges show (copied): every instance
 * sets the same census, read from Redis (census.h). The gauges compute the
 * ages and the time to expiry from it at each render:
 * idempotency_proxy_held_records{state}, _held_record_oldest_seconds{state},
 * _held_record_expiry_seconds{state} and idempotency_proxy_held_census_age_seconds.
 */
void metrics_held_set(struct metrics *m, const struct metrics_held *h);

/* Record one latency observation of histogram h, in seconds. */
void metrics_observe(struct metrics *m, enum metrics_latency h, double seconds);

/* Append the exposition text of m and the gauges g to out. */
void metrics_render(struct metrics *m, struct evbuffer *out, const struct metrics_gauges *g);

/* Free what metrics_init and metrics_count_request allocated. */
void metrics_deinit(struct metrics *m);

#endif
