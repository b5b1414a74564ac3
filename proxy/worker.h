/*
 * worker.h - the worker threads: each one thread with one event_base, its
 * client listener, Redis store, upstream client and exchange set; and with
 * admin_listen or health_listen, one more thread, the admin worker, whose
 * loop serves only those listeners (http_server.h) with its own store, off
 * the data plane's loops. Between threads: a mailbox pipe per worker for reloads,
 * the drain and wake-ups.
 */
#ifndef IDEM_WORKER_H
#define IDEM_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "admin.h"
#include "budget.h"
#include "census.h"
#include "config.h"
#include "exchange.h"
#include "inbox.h"
#include "metrics.h"

struct event_base;
struct evconnlistener;
struct http_server;
struct store;
struct upstream;
struct worker_pool;

/*
 * One worker thread's world. Only its own thread touches it, except the
 * exchange set's atomic counters, which other threads sum (drain, metrics)
 * through exchange.h's calls.
 */
struct worker {
    struct event_base *base;                /* owned */
    struct worker_pool *pool;
    unsigned index;                         /* 0: the main thread, signals */
    bool admin_only;                        /* the admin worker: no client listener, no inbox */
    struct config *boot;                    /* listeners, Redis, upstream: fixed until restart; one ref */
    struct store *store;
    struct upstream *upstream;
    struct exchange_set *xs;                /* its requests, owned; exchange_set_conf(xs) is the
                                               running config */
    struct inbox *webhook_inbox;            /* queued routes' consumer (inbox.h); NULL: none */
    struct census *census;                  /* the held records' census (census.h): on one
                                               worker of the process; NULL on the others */
    struct evconnlistener *client_lev;      /* bound, until client takes it over */
    struct http_server *client;             /* the client listener (a serving worker) */
    struct http_server *admin_server;       /* the admin worker only; NULL without admin_listen */
    struct http_server *health_server;      /* the admin worker only: health_listen's, or NULL */
    struct admin_env admin;                 /* the admin worker only */
    struct event *drain_timer;
    struct event *trim_timer;               /* the allocator gives free pages back */
    uint64_t drain_deadline_ms;             /* ms since the epoch */
    int mailbox[2];                         /* pipe: messages from other threads (not the
                                               webhook inbox) */
    struct event *mailbox_event;
};

/*
 * The workers of the process; workers[0] runs on the main thread;
 * workers[serving], when n > serving, is the admin worker.
 */
struct worker_pool {
    struct worker *workers;                 /* n, owned */
    unsigned n;
    unsigned serving;                       /* workers with a client listener (workers: N) */
    atomic_bool draining;                   /* SIGTERM came: /readyz says so */
    atomic_int readiness;                   /* enum readiness of the config applied last */
    pthread_t *threads;                     /* workers[1..n-1]'s; owned */
    unsigned started;                       /* threads running or to be joined */
    int port_lock;                          /* with several workers: the endpoint's lock, or -1 */
    struct metrics metrics;
    struct budget budget;                   /* limits.max_buffered, shared by the workers */
};

/*
 * Set up config_workers(cfg) workers, each with its own event_base, client
 * listener, store and upstream client (each takes its own references to
 * cfg); with admin_listen or health_listen, one more worker (the admin
 * worker) gets those listeners, its own store and the census of held
 * records, and nothing else. With more than one worker the
 * client listeners share the port through SO_REUSEPORT, after a check that
 * no other socket holds it and with a lock on the endpoint
 * (listener_lock_endpoint). Nothing runs yet. Returns 0, or -1 with one line
 * in err (errlen bytes), e.g. the port in use; then p is left empty.
 */
int worker_pool_init(struct worker_pool *p, struct config *cfg, char *err, size_t errlen);

/*
 * Start a thread running the loop of each of workers[1..n-1]. The threads
 * inherit the caller's signal mask: the caller blocks SIGTERM, SIGINT and
 * SIGHUP before worker_pool_init binds the listeners, and unblocks them in
 * its own thread only once its loop handles them, so the main thread alone
 * takes them. The caller runs workers[0].base itself. Returns 0, or -1 with
 * err when a thread cannot be started (the started ones are told to drain,
 * then joined by worker_pool_join).
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
 * behind would read as "outcome unknown" once its lease ends), every loop
 * ends (until then a late request on a kept-alive connection gets 503
 * shutting-down, whichever worker holds it); at the latest slack_ms after
 * the upstream timeout.
 */
void worker_pool_drain(struct worker_pool *p, uint64_t slack_ms);

/* Wait for the threads worker_pool_start started; after workers[0]'s loop has ended. */
void worker_pool_join(struct worker_pool *p);

/* Free what worker_pool_init made; after worker_pool_join. */
void worker_pool_deinit(struct worker_pool *p);

/*
 * Exchanges in flight, summed over the workers; *unsent: answers still
 * being written; *unreleased: claims of refused requests not yet released
 * (Redis stalled). Any thread.
 */
unsigned worker_pool_in_flight(struct worker_pool *p, unsigned *unsent, unsigned *unreleased);

#endif
