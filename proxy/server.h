/*
 * server.h - workers: each one thread with one event_base, its client
 * listener, Redis store and upstream client. Exchanges belong to a worker.
 */
#ifndef IDEM_SERVER_H
#define IDEM_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config.h"
#include "metrics.h"

struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct store;
struct upstream;
struct exchange;
struct orphan_claim;

/*
 * A loaded configuration shared by the workers and the exchanges that started
 * under it: a SIGHUP reload swaps each worker's, and the old one is freed
 * when its last exchange ends, on whichever thread that is.
 */
struct worker_config {
    struct config cfg;
    _Atomic unsigned refs;
};

struct worker_pool;
struct server_listener;

/*
 * One worker thread's world: its own event_base, client listener (one of
 * several SO_REUSEPORT sockets when there are several workers), Redis
 * connection and upstream client. Only its own thread touches it, except
 * the fields marked atomic, which the admin listener sums for /metrics.
 */
struct worker {
    struct event_base *base;                /* owned */
    struct worker_pool *pool;
    unsigned index;                         /* 0: the main thread, admin listener, signals */
    struct worker_config *conf;             /* current: routes, policies, limits; one ref */
    struct worker_config *boot;             /* listeners, Redis, upstream: fixed until restart; one ref */
    struct store *store;
    struct upstream *upstream;
    struct evhttp *http;
    struct evhttp_bound_socket *listener;
    struct server_listener *listener_slot;
    struct evhttp *admin_http;              /* worker 0 only */
    struct server_listener *admin_slot;
    _Atomic unsigned active;                /* exchanges not yet freed */
    _Atomic unsigned unflushed;             /* answers evhttp is still writing */
    _Atomic unsigned waiting;               /* exchanges in `waiters` */
    TAILQ_HEAD(, exchange) waiters;         /* waiting on another request's record */
    TAILQ_HEAD(, orphan_claim) orphans;     /* claims that may have landed unanswered */
    _Atomic unsigned orphaned;              /* entries in `orphans` */
    bool draining;
    struct event *drain_timer;
    uint64_t drain_deadline_ms;             /* ms since the epoch */
    int inbox[2];                           /* pipe: messages from other threads */
    struct event *inbox_event;
    struct metrics *metrics;                /* the pool's, shared */
};

/* The workers of the process; workers[0] runs on the main thread. */
struct worker_pool {
    struct worker *workers;                 /* n, owned */
    unsigned n;
    pthread_t *threads;                     /* workers[1..n-1]'s; owned */
    unsigned started;                       /* threads running or to be joined */
    int port_lock;                          /* with several workers: the endpoint's lock, or -1 */
    struct metrics metrics;
};

/*
 * Load FILE into a new worker_config holding one reference. NULL on error,
 * with "FILE:LINE: what" in err (errlen bytes).
 */
struct worker_config *worker_config_load(const char *file, char *err, size_t errlen);

/* Take / drop a reference (atomically: any thread); the last put frees it. NULL is fine for put. */
struct worker_config *worker_config_get(struct worker_config *wc);
void worker_config_put(struct worker_config *wc);

/*
 * Set up config_workers(&wc->cfg) workers, each with its own event_base,
 * client listener, store and upstream client (each takes its own references
 * to wc); worker 0 also gets the admin listener. With more than one worker
 * the client listeners share the port through SO_REUSEPORT, after a check
 * that no other socket holds it and with a lock on the endpoint (an abstract
 * unix socket) that a second proxy starting at the same moment cannot take.
 * Nothing runs yet. Returns 0, or -1 with one
 * line in err (errlen bytes), e.g. the port in use; then p is left empty.
 */
int worker_pool_init(struct worker_pool *p, struct worker_config *wc, char *err, size_t errlen);

/*
 * Start a thread running the loop of each of workers[1..n-1]. The threads
 * inherit the caller's signal mask: the caller blocks SIGTERM, SIGINT and
 * SIGHUP before worker_pool_init binds the listeners, and unblocks them in
 * its own thread only once its loop handles them, so the main thread alone
 * takes them. The caller runs workers[0].base itself. Returns 0, or -1 with err when a thread cannot be
 * started (the started ones are told to drain, then joined by worker_pool_join).
 */
int worker_pool_start(struct worker_pool *p, char *err, size_t errlen);

/*
 * SIGHUP, on the main thread: load FILE and hand its routes, policies and
 * limits to every worker for new requests (requests in flight finish under
 * the old ones). Refused, with the reason logged and the running
 * configuration kept, when FILE is invalid or changes what needs a restart
 * (listeners, workers, upstream, redis, record identity). Returns 0 applied,
 * -1 refused.
 */
int worker_pool_reload(struct worker_pool *p, const char *file);

/*
 * SIGTERM, on the main thread: every worker stops accepting and answers
 * what it has in flight; once no worker has an exchange in flight, an
 * answer unwritten or a refused request's claim to release (a claim left
 * behind would read as "outcome unknown" once its lease ends), every loop ends (until then a late request on a kept-alive
 * connection gets 503 shutting-down, whichever worker holds it); at the latest
 * slack_ms after the upstream timeout.
 */
void worker_pool_drain(struct worker_pool *p, uint64_t slack_ms);

/* Wait for the threads worker_pool_start started; after workers[0]'s loop has ended. */
void worker_pool_join(struct worker_pool *p);

/* Free what worker_pool_init made; after worker_pool_join. */
void worker_pool_deinit(struct worker_pool *p);

/*
 * Exchanges in flight, summed over the workers; *unsent: answers evhttp is
 * still writing; *unreleased: claims of refused requests not yet released
 * (Redis stalled). Any thread.
 */
unsigned worker_pool_in_flight(struct worker_pool *p, unsigned *unsent, unsigned *unreleased);

/* The gauges of /metrics, summed over the workers (any thread). */
void worker_pool_gauges(struct worker_pool *p, struct metrics_gauges *g);

/* Why the pool is not ready for traffic ("draining", "redis unreachable"), or NULL. Worker 0's thread. */
const char *worker_pool_unready(struct worker_pool *p);

/*
 * Tell the other workers that the record at record_key changed, so their
 * requests waiting on it look again now rather than at their next poll
 * (CONTRACT 5, "In flight"). Best effort: a wake-up that cannot be posted is dropped,
 * and the waiter's poll finds the record. From w's thread.
 */
void worker_wake_others(struct worker *w, const char *record_key);

/* Wall clock, ms since the epoch (record timestamps, lease deadlines). */
uint64_t worker_now_ms(void);

#endif
