/*
 * worker.c - the worker threads: each worker's I/O objects, messages between
 * threads, configuration reloads and the SIGTERM drain.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/event_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "clock.h"
#include "fingerprint.h"
#include "http_server.h"
#include "record_id.h"
#include "listener.h"
#include "log.h"
#include "keyring.h"
#include "seal.h"
#include "store.h"
#include "store_redis.h"
#include "trim.h"
#include "upstream.h"

/*
 * Memory goes back to the system after a burst (trim.h): every
 * WORKER_TRIM_MS, while the process buffers under WORKER_TRIM_QUIET bytes,
 * each worker has its allocator return the free pages it keeps.
 */
#define WORKER_TRIM_MS 5000
#define WORKER_TRIM_QUIET (1024 * 1024)

/* The client listener's bounds (docs/operations.md "Memory", docs/failure-modes.md). */
#define WORKER_MAX_HEADERS_SIZE (64 * 1024)     /* bytes of a request line and fields */
#define WORKER_MAX_HEADER_FIELDS 8192           /* fields of a head (a queued delivery's 128-field
                                                   bound answers its own 431 within it) */
#define WORKER_CLIENT_LINGER_BYTES (16 * 1024 * 1024) /* of a refused body, read and dropped */
#define WORKER_DRAIN_TICK_MS 50
#define WORKER_ADMIN_BODY_SLACK (256 * 1024) /* bytes: base64 padding, fields and JSON */

/*
 * The admin listener reads a large body only for PUT /records/<id>: an
 * answer of up to max_stored_response bytes in base64 (4/3 of it), its
 * header fields and the JSON around them; checked after the token
 * (admin_head).
 */
static void worker_set_admin_body_limit(struct worker *w, size_t max_stored_response)
{
    w->admin.resolve_body_limit = (max_stored_response + 2) / 3 * 4 + WORKER_ADMIN_BODY_SLACK;
}

static unsigned worker_ms(uint64_t ms)
{
    return ms < UINT_MAX ? (unsigned)ms : UINT_MAX;
}

/*
 * The client listener's bounds under cfg: limits.max_connections split
 * evenly among the workers (each has its own listening socket), the header
 * and idle timeouts (docs/configuration.md, limits).
 */
static struct http_server_limits worker_client_limits(const struct config *cfg)
{
    unsigned workers = config_workers(cfg);

    return (struct http_server_limits){
        .max_connections = (cfg->max_connections + workers - 1) / workers,
        .close_over_cap = true,
        .max_head_bytes = WORKER_MAX_HEADERS_SIZE,
        .max_header_fields = WORKER_MAX_HEADER_FIELDS,
        .head_timeout_ms = worker_ms(cfg->header_timeout_ms),
        .idle_timeout_ms = worker_ms(cfg->idle_timeout_ms),
        .read_timeout_ms = worker_ms(cfg->idle_timeout_ms),
        .write_timeout_ms = worker_ms(cfg->idle_timeout_ms),
        .methods = EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                   EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH,
        .linger_bytes = WORKER_CLIENT_LINGER_BYTES,
        .any_target = true,
        .lenient_values = true,
    };
}

/* ---- one worker ------------------------------------------------------------ */

/*
 * A message to a worker from another thread, written to its mailbox pipe in
 * one write(2): smaller than PIPE_BUF, so never torn or interleaved.
 */
enum worker_message_kind { WORKER_MSG_RELOAD, WORKER_MSG_DRAIN, WORKER_MSG_WAKE };

struct worker_message {
    enum worker_message_kind kind;
    struct config *cfg;             /* RELOAD: one reference, the receiver's */
    uint64_t deadline_ms;           /* DRAIN: ms since the epoch */
    char record_key[RECORD_KEY_MAX]; /* WAKE */
};

_Static_assert(sizeof(struct worker_message) <= PIPE_BUF, "a message is one atomic pipe write");
_Static_assert(METRICS_MAX_PRIMARIES >= CONFIG_MAX_WORKERS, "a primary per worker fits the gauge");

/* Longest a RELOAD or DRAIN waits for room in a full mailbox, in ms. */
#define WORKER_POST_PATIENCE_MS 2000

/*
 * Post m to w's mailbox. A wake-up is dropped when the mailbox is full (the
 * waiter polls anyway); a reload or drain waits for room up to
 * WORKER_POST_PATIENCE_MS. Returns 0, or -1 when it could not be posted.
 */
static int worker_post(struct worker *w, const struct worker_message *m)
{
    uint64_t give_up = clock_now_ms() + WORKER_POST_PATIENCE_MS;

    for (;;) {
        ssize_t n = write(w->mailbox[1], m, sizeof(*m));
        if (n == (ssize_t)sizeof(*m))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN && m->kind != WORKER_MSG_WAKE &&
            clock_now_ms() < give_up) {
            struct pollfd pfd = { .fd = w->mailbox[1], .events = POLLOUT };
            poll(&pfd, 1, 50);
            continue;
        }
        return -1;
    }
}

/* Takes over the caller's reference to cfg. */
static void worker_apply_config(struct worker *w, struct config *cfg)
{
    worker_set_admin_body_limit(w, cfg->max_stored_response);
    if (w->client != NULL) {
        struct http_server_limits limits = worker_client_limits(cfg);
        http_server_set_limits(w->client, &limits);
    }
    exchange_set_config(w->xs, cfg);
    census_set_period(w->census, cfg->held_refresh_ms);
    inbox_set_config(w->webhook_inbox, cfg); /* keyring, plaintext window, signing secrets */
    store_set_credentials(w->store, cfg);    /* the passwords of its next connections */
    seal_thread_forget();   /* no context keyed from a key reloaded away stays */
    config_unref(cfg);
}

static void worker_on_trim_tick(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    if (budget_used(&w->pool->budget) < WORKER_TRIM_QUIET)
        trim_now();
}

static void worker_stop_accepting(struct worker *w)
{
    if (w->client != NULL)
        http_server_stop_accepting(w->client);
    inbox_stop(w->webhook_inbox); /* no new entries; those in delivery go on */
}

/* Exchanges in flight, answers unsent and claims unreleased, summed over the pool (any thread). */
static unsigned worker_pool_busy(struct worker_pool *p)
{
    unsigned n = 0;

    for (unsigned i = 0; i < p->n; i++)
        n += exchange_set_busy(p->workers[i].xs) + inbox_busy(p->workers[i].webhook_inbox);
    return n;
}

/*
 * A worker's loop ends when the whole pool has drained, not just itself: an
 * idle worker keeps answering late requests on its kept-alive connections
 * with 503 shutting-down while another worker still finishes its own.
 */
static void worker_on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    if (worker_pool_busy(w->pool) == 0) {
        event_base_loopexit(w->base, NULL);
    } else if (clock_now_ms() >= w->drain_deadline_ms) {
        log_msg(LOG_WARN, "worker %u: drain time is up with %u requests in flight, %u answers "
                "unsent, %u claims of refused requests unreleased (they end with their lease, "
                "then read as outcome unknown); exiting", w->index, exchange_set_active(w->xs),
                exchange_set_unflushed(w->xs), exchange_set_unreleased(w->xs));
        event_base_loopexit(w->base, NULL);
    }
}

/* Stop accepting, then end w's loop once no worker has anything in flight or unsent, or at deadline_ms. */
static void worker_drain(struct worker *w, uint64_t deadline_ms)
{
    struct timeval tick = clock_ms_to_timeval(WORKER_DRAIN_TICK_MS);

    if (w->drain_timer != NULL)
        return;
    exchange_set_drain(w->xs, deadline_ms); /* refuse new requests; a write retried stops in time */
    worker_stop_accepting(w);
    w->drain_deadline_ms = deadline_ms;
    w->drain_timer = event_new(w->base, -1, EV_PERSIST, worker_on_drain_tick, w);
    if (w->drain_timer == NULL) {
        event_base_loopexit(w->base, NULL);
        return;
    }
    event_add(w->drain_timer, &tick);
    worker_on_drain_tick(-1, 0, w);
}

static void worker_on_mailbox(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct worker_message m;

    (void)what;
    while (read(fd, &m, sizeof(m)) == (ssize_t)sizeof(m)) {
        switch (m.kind) {
        case WORKER_MSG_RELOAD: worker_apply_config(w, m.cfg); break;
        case WORKER_MSG_DRAIN: worker_drain(w, m.deadline_ms); break;
        case WORKER_MSG_WAKE: exchange_wake_waiters(w->xs, m.record_key); break;
        }
    }
}

/* exchange_wake_cb: tell the other workers that the record at record_key changed. */
static void worker_wake_others(const char *record_key, void *arg)
{
    struct worker *w = arg;
    struct worker_pool *p = w->pool;
    struct worker_message m = { .kind = WORKER_MSG_WAKE };
    size_t len = strlen(record_key);

    if (p->n < 2 || len >= sizeof(m.record_key))
        return;
    memcpy(m.record_key, record_key, len + 1);
    for (unsigned i = 0; i < p->n; i++) {
        struct worker *o = &p->workers[i];
        if (o != w && exchange_set_waiting(o->xs) > 0)
            worker_post(o, &m);
    }
}

static void worker_on_store_command(double seconds, bool ok, void *arg)
{
    struct worker *w = arg;

    metrics_observe(&w->pool->metrics, METRICS_REDIS_LATENCY, seconds);
    if (!ok)
        metrics_count(&w->pool->metrics, METRICS_STORE_ERRORS);
}

/* The worker's store followed a failover (redis.sentinel): count it once per move. */
static void worker_on_failover(const char *from, const char *to, void *arg)
{
    struct worker *w = arg;

    (void)from;
    metrics_count_failover(&w->pool->metrics, to);
    exchange_set_failed_over(w->xs);   /* released claims, released again */
}

/* The worker's store read a slot map or followed a redirection (redis.cluster), or re-asserted. */
static void worker_on_store_event(enum store_event ev, void *arg)
{
    struct worker *w = arg;
    static const enum metrics_counter counter[] = {
        [STORE_EVENT_MAP_REFRESH] = METRICS_CLUSTER_REFRESHES,
        [STORE_EVENT_MOVED] = METRICS_CLUSTER_MOVED,
        [STORE_EVENT_ASK] = METRICS_CLUSTER_ASK,
        [STORE_EVENT_REASSERT_RESTORED] = METRICS_REASSERT_RESTORED,
        [STORE_EVENT_REASSERT_PRESENT] = METRICS_REASSERT_PRESENT,
        [STORE_EVENT_REASSERT_SUPERSEDED] = METRICS_REASSERT_SUPERSEDED,
        [STORE_EVENT_REASSERT_FAILED] = METRICS_REASSERT_FAILED,
        [STORE_EVENT_REASSERT_DROPPED] = METRICS_REASSERT_DROPPED,
    };

    if (ev != STORE_EVENT_NEW_PRIMARY) /* counted as a failover followed */
        metrics_count(&w->pool->metrics, counter[ev]);
}

/*
 * epoll with libevent's changelist: curl and the bufferevents switch a socket's events
 * several times per request; the changelist folds those into at most one
 * epoll_ctl per socket per loop iteration.
 */
static struct event_base *worker_event_base_new(void)
{
    struct event_config *ec = event_config_new();
    struct event_base *base;

    if (ec == NULL)
        return NULL;
    event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    base = event_base_new_with_config(ec);
    event_config_free(ec);
    return base;
}

/* Free what worker_init made; safe on a zeroed or half-made worker. On the main thread at exit. */
static void worker_deinit(struct worker *w)
{
    /*
     * Store first: its pending callbacks still run (STORE_LOST) and may
     * answer or forward, so the upstream and listeners must still exist.
     */
    inbox_stop(w->webhook_inbox);
    census_stop(w->census);
    store_destroy(w->store);
    w->store = NULL;
    census_destroy(w->census);
    w->census = NULL;
    exchange_set_destroy(w->xs);
    w->xs = NULL;
    upstream_destroy(w->upstream);
    w->upstream = NULL;
    /* after both: their callbacks may still reach its deliveries; pending entries stay */
    inbox_destroy(w->webhook_inbox);
    w->webhook_inbox = NULL;
    if (w->client_lev != NULL)
        evconnlistener_free(w->client_lev);
    w->client_lev = NULL;
    http_server_free(w->client);
    w->client = NULL;
    http_server_free(w->admin_server);
    w->admin_server = NULL;
    admin_env_deinit(&w->admin);
    http_server_free(w->health_server);
    w->health_server = NULL;
    if (w->drain_timer != NULL)
        event_free(w->drain_timer);
    w->drain_timer = NULL;
    if (w->trim_timer != NULL)
        event_free(w->trim_timer);
    w->trim_timer = NULL;
    if (w->mailbox_event != NULL)
        event_free(w->mailbox_event);
    w->mailbox_event = NULL;
    if (w->mailbox[0] >= 0) { /* a reload posted as the loop ended holds a reference */
        struct worker_message m;
        while (read(w->mailbox[0], &m, sizeof(m)) == (ssize_t)sizeof(m))
            if (m.kind == WORKER_MSG_RELOAD)
                config_unref(m.cfg);
    }
    for (int i = 0; i < 2; i++) {
        if (w->mailbox[i] >= 0)
            close(w->mailbox[i]);
        w->mailbox[i] = -1;
    }
    config_unref(w->boot);
    w->boot = NULL;
    if (w->base != NULL)
        event_base_free(w->base);
    w->base = NULL;
}

static void worker_pool_gauges(void *arg, struct metrics_gauges *g);
static const char *worker_pool_unready(void *arg, const char **away);

/* The admin worker's listeners: admin_listen's (admin.h), health_listen's; one set of bounds. */
static int worker_admin_open(struct worker *w, struct worker_pool *p, struct config *cfg,
                             char *err, size_t errlen)
{
    struct evconnlistener *lev;

    /* the rest of w->admin once the store and the exchange set exist (worker_init) */
    w->admin.probe = (struct probe_env){ &p->metrics, worker_pool_gauges, worker_pool_unready, p };
    w->admin.probes = cfg->health_listen.host == NULL;
    if (cfg->health_listen.host != NULL &&
        (w->health_server = probe_listen(w->base, &cfg->health_listen, &w->admin.probe, err,
                                         errlen)) == NULL)
        return -1;
    if (cfg->admin_listen.host == NULL)
        return 0;
    lev = listener_bind(w->base, &cfg->admin_listen, false, false, err, errlen);
    if (lev == NULL)
        return -1;
    w->admin.metrics = &p->metrics;
    worker_set_admin_body_limit(w, cfg->max_stored_response);
    w->admin_server = http_server_new(w->base, lev, &probe_listener_limits,
                                      &(struct http_server_callbacks){
        .head = admin_head, .request = admin_handle, .too_large = admin_too_large,
        .arg = &w->admin,
    });
    if (w->admin_server == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* The client listener of a serving worker (shared: SO_REUSEPORT with the others). */
static int worker_client_open(struct worker *w, struct config *cfg, bool shared, char *err,
                              size_t errlen)
{
    w->client_lev = listener_bind(w->base, &cfg->listen, shared, shared && w->index == 0, err,
                                  errlen);
    return w->client_lev != NULL ? 0 : -1;
}

/* Serve the bound client listener with the exchange set's callbacks (after worker_init made it). */
static int worker_client_serve(struct worker *w, const struct config *cfg)
{
    struct http_server_limits limits = worker_client_limits(cfg);
    struct evconnlistener *lev = w->client_lev;

    w->client_lev = NULL; /* http_server_new takes it over, also when it fails */
    w->client = http_server_new(w->base, lev, &limits, &(struct http_server_callbacks){
        .head = exchange_head, .request = exchange_handle, .too_large = exchange_too_large,
        .refuse = exchange_refuse, .arg = w->xs,
    });
    return w->client != NULL ? 0 : -1;
}

static int worker_init(struct worker *w, struct worker_pool *p, unsigned index,
                       struct config *cfg, char *err, size_t errlen)
{
    bool shared = config_workers(cfg) > 1;

    memset(w, 0, sizeof(*w));
    w->mailbox[0] = w->mailbox[1] = -1;
    w->pool = p;
    w->index = index;
    w->admin_only = index >= config_workers(cfg);
    w->boot = config_ref(cfg);

    w->base = worker_event_base_new();
    if (w->base == NULL) {
        snprintf(err, errlen, "cannot create the event loop");
        goto failed;
    }
    w->trim_timer = event_new(w->base, -1, EV_PERSIST, worker_on_trim_tick, w);
    if (w->trim_timer == NULL ||
        event_add(w->trim_timer, &(struct timeval){ WORKER_TRIM_MS / 1000, 0 }) != 0) {
        snprintf(err, errlen, "out of memory");
        goto failed;
    }
    if (pipe2(w->mailbox, O_NONBLOCK | O_CLOEXEC) != 0 ||
        (w->mailbox_event = event_new(w->base, w->mailbox[0], EV_READ | EV_PERSIST, worker_on_mailbox,
                                    w)) == NULL ||
        event_add(w->mailbox_event, NULL) != 0) {
        snprintf(err, errlen, "cannot create a worker's mailbox: %s", strerror(errno));
        goto failed;
    }

    if (w->admin_only ? worker_admin_open(w, p, cfg, err, errlen) != 0
                      : worker_client_open(w, cfg, shared, err, errlen) != 0)
        goto failed;

    w->store = store_create(w->base, cfg, err, errlen);
    if (w->store == NULL)
        goto failed;
    w->upstream = upstream_create(w->base, cfg);
    if (w->upstream == NULL) {
        snprintf(err, errlen, "out of memory");
        goto failed;
    }
    store_set_observer(w->store, worker_on_store_command, w);
    store_set_failover_observer(w->store, worker_on_failover, w);
    store_set_event_observer(w->store, worker_on_store_event, w);
    /* NULL without a queued route; routes' delivery.mode cannot change on reload */
    if (!w->admin_only)
        w->webhook_inbox = inbox_create(w->base, w->store, w->upstream, cfg, &p->metrics, index,
                                        index == 0);
    if (!w->admin_only && w->webhook_inbox == NULL && inbox_wanted(cfg)) {
        /* accepted deliveries would wait for a consumer that never comes */
        snprintf(err, errlen, "out of memory");
        goto failed;
    }
    w->xs = exchange_set_create(w->base, w->store, w->upstream, w->webhook_inbox, &p->metrics,
                                &p->budget, cfg, worker_wake_others, w);
    if (w->xs == NULL) {
        snprintf(err, errlen, "out of memory");
        goto failed;
    }
    if (w->client_lev != NULL && worker_client_serve(w, cfg) != 0) { /* nothing is accepted before the loop runs */
        snprintf(err, errlen, "out of memory");
        goto failed;
    }
    if (w->admin_only) {
        store_set_claimless(w->store); /* it claims nothing: no journal, no grace */
        w->admin.store = w->store;
        w->admin.set = w->xs;
    }
    /* one census per process, off the data plane when there is an admin worker */
    if (w->admin_only || (index == 0 && p->n == p->serving)) {
        w->census = census_create(w->base, w->store, &p->metrics, cfg->key_prefix,
                                  cfg->held_refresh_ms);
        if (w->census == NULL) {
            snprintf(err, errlen, "cannot start the census of held records: out of memory "
                     "or no randomness");
            goto failed;
        }
    }
    return 0;

failed:
    worker_deinit(w);
    return -1;
}

/* ---- the pool ------------------------------------------------------------- */

/* Every protected route's series of idempotency_proxy_outcome_unknown_total, from 0. */
static void worker_declare_routes(struct worker_pool *p, const struct config *cfg)
{
    for (size_t i = 0; i < cfg->n_routes; i++)
        metrics_declare_outcome_unknown(&p->metrics, cfg->routes[i].path);
}

int worker_pool_init(struct worker_pool *p, struct config *cfg, char *err, size_t errlen)
{
    unsigned serving = config_workers(cfg);
    unsigned n = serving + (cfg->admin_listen.host != NULL || cfg->health_listen.host != NULL);

    memset(p, 0, sizeof(*p));
    p->port_lock = -1;
    trim_setup(); /* before any worker thread allocates */
    budget_init(&p->budget, cfg->max_buffered);
    atomic_store(&p->readiness, cfg->readiness);
    if (metrics_init(&p->metrics) != 0) {
        snprintf(err, errlen, "cannot create the metrics lock");
        return -1;
    }
    worker_declare_routes(p, cfg);
    if (serving > 1 && (p->port_lock = listener_lock_endpoint(&cfg->listen, err, errlen)) < 0) {
        metrics_deinit(&p->metrics);
        return -1;
    }
    p->workers = calloc(n, sizeof(*p->workers));
    p->threads = calloc(n, sizeof(*p->threads));
    if (p->workers == NULL || p->threads == NULL) {
        snprintf(err, errlen, "out of memory");
        worker_pool_deinit(p);
        return -1;
    }
    p->n = n;
    p->serving = serving;
    for (unsigned i = 0; i < n; i++) {
        if (worker_init(&p->workers[i], p, i, cfg, err, errlen) != 0) {
            p->n = i;
            worker_pool_deinit(p);
            return -1;
        }
    }
    return 0;
}

static void *worker_thread_main(void *arg)
{
    struct worker *w = arg;

    event_base_dispatch(w->base);
    record_id_thread_end();
    seal_thread_forget();
    log_thread_end();
    return NULL;
}

int worker_pool_start(struct worker_pool *p, char *err, size_t errlen)
{
    int rc = 0;

    for (unsigned i = 1; i < p->n && rc == 0; i++) {
        rc = pthread_create(&p->threads[i], NULL, worker_thread_main, &p->workers[i]);
        if (rc == 0)
            p->started = i;
        else
            snprintf(err, errlen, "cannot start worker thread %u: %s", i, strerror(rc));
    }
    if (rc != 0) {
        worker_pool_drain(p, 0);
        return -1;
    }
    return 0;
}

int worker_pool_reload(struct worker_pool *p, const char *file)
{
    struct worker *w0 = &p->workers[0];
    const struct config *running = exchange_set_conf(w0->xs); /* until worker_apply_config */
    char err[1024];
    struct config *cfg = config_create(file, err, sizeof(err));
    char why[256];
    int retired;

    if (cfg == NULL) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: %s", err);
        metrics_count(&p->metrics, METRICS_RELOAD_FAILURES);
        return -1;
    }
    /*
     * restart keys against the boot config the listeners, threads and store were made from;
     * identity keys against the running one (config_reload_check says why); then the audit
     * stream is reopened (log.audit: a rotated file starts anew)
     */
    if (config_reload_check(w0->boot, running, cfg, why, sizeof(why)) != CONFIG_RELOAD_LIVE ||
        log_audit_open(cfg->audit_log, why, sizeof(why)) != 0) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: %s", why);
        config_unref(cfg);
        metrics_count(&p->metrics, METRICS_RELOAD_FAILURES);
        return -1;
    }
    /* a renamed record id field: the old name stays the proxy's until restart */
    retired = config_retire_record_id_header(cfg, running);
    if (retired < 0) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: out of memory");
        config_unref(cfg);
        metrics_count(&p->metrics, METRICS_RELOAD_FAILURES);
        return -1;
    }
    if (retired > 0)
        log_msg(LOG_INFO, "upstream.record_id_header was %s: a client's field of that name is "
                "still dropped from forwarded requests until the proxy restarts",
                running->upstream_record_id_header);
    for (unsigned i = 1; i < p->n; i++) {
        struct worker_message m = { .kind = WORKER_MSG_RELOAD, .cfg = config_ref(cfg) };
        if (worker_post(&p->workers[i], &m) != 0) {
            /* the worker is stuck for seconds: it keeps the old routes, and says so */
            log_msg(LOG_ERROR, "worker %u did not take the reload; it keeps the previous "
                    "configuration until the next SIGHUP", i);
            config_unref(cfg);
        }
    }
    /* the keyring travels with its config: the next requests of every worker take both */
    config_keyring_describe(cfg, err, sizeof(err));
    log_msg(LOG_INFO, "reloaded %s: %zu routes; %s", file, cfg->n_routes, err);
    keyring_note_core_dumps();
    log_lines(LOG_INFO, config_secret_changes(running, cfg, err, sizeof(err))); /* no secret */
    if (route_unprotected(running->routes, running->n_routes, cfg->routes, cfg->n_routes,
                          file, err, sizeof(err)) > 0)
        log_lines(LOG_WARN, err);
    if (cfg->n_routes == 0)
        log_msg(LOG_WARN, "%s: no routes: every request is forwarded as it is, with no "
                "idempotency key checked or recorded", file);
    if (config_keyring_warnings(cfg, err, sizeof(err)) > 0)
        log_lines(LOG_WARN, err);
    {
        /* a rotated admin token is on record by its fingerprint (never the token) */
        const char *old = running->admin_token_file != NULL ? running->admin_token.fingerprint
                                                            : "none";
        const char *now = cfg->admin_token_file != NULL ? cfg->admin_token.fingerprint : "none";

        if (strcmp(old, now) != 0)
            log_msg(LOG_INFO, "admin token changed: fingerprint %s, was %s", now, old);
    }
    budget_set_limit(&p->budget, cfg->max_buffered);
    atomic_store(&p->readiness, cfg->readiness);
    worker_declare_routes(p, cfg);
    worker_apply_config(w0, cfg);
    metrics_count(&p->metrics, METRICS_RELOADS);
    return 0;
}

void worker_pool_drain(struct worker_pool *p, uint64_t slack_ms)
{
    struct worker_message m = { .kind = WORKER_MSG_DRAIN };

    m.deadline_ms = clock_now_ms() + p->workers[0].boot->upstream_timeout_ms + slack_ms;
    atomic_store(&p->draining, true);
    for (unsigned i = 1; i <= p->started; i++) {
        if (worker_post(&p->workers[i], &m) != 0)
            log_msg(LOG_ERROR, "worker %u did not take the drain; exit waits for it", i);
    }
    worker_drain(&p->workers[0], m.deadline_ms);
}

void worker_pool_join(struct worker_pool *p)
{
    for (unsigned i = 1; i <= p->started; i++)
        pthread_join(p->threads[i], NULL);
    p->started = 0;
}

void worker_pool_deinit(struct worker_pool *p)
{
    for (unsigned i = 0; i < p->n; i++)
        worker_deinit(&p->workers[i]);
    free(p->workers);
    free(p->threads);
    metrics_deinit(&p->metrics);
    if (p->port_lock >= 0)
        close(p->port_lock);
    memset(p, 0, sizeof(*p));
    p->port_lock = -1;
}

unsigned worker_pool_in_flight(struct worker_pool *p, unsigned *unsent, unsigned *unreleased)
{
    unsigned n = 0;

    *unsent = *unreleased = 0;
    for (unsigned i = 0; i < p->n; i++) {
        n += exchange_set_active(p->workers[i].xs);
        *unsent += exchange_set_unflushed(p->workers[i].xs);
        *unreleased += exchange_set_unreleased(p->workers[i].xs);
    }
    return n;
}

_Static_assert(sizeof(((struct metrics_key_counts *)0)->id) == KEYRING_ID_MAX + 1 &&
                   METRICS_KEY_IDS == KEYRING_COUNTED_IDS + 1,
               "metrics.h shows every key id the keyring counts");

/* The keyring's counters (process-wide) into g->keys, for metrics_render. */
static void worker_key_counts(struct metrics_gauges *g)
{
    struct keyring_counts counts[KEYRING_COUNTED_IDS + 1];
    size_t n = keyring_counters_read(counts, KEYRING_COUNTED_IDS + 1);

    for (size_t i = 0; i < n; i++) {
        memcpy(g->keys[i].id, counts[i].id, sizeof(g->keys[i].id));
        g->keys[i].sealed = counts[i].n[KEYRING_SEALED];
        g->keys[i].opened = counts[i].n[KEYRING_OPENED];
    }
    g->n_keys = n;
}

/* admin_env.gauges: the gauges of /metrics, summed over the workers (any thread). */
static void worker_pool_gauges(void *arg, struct metrics_gauges *g)
{
    struct worker_pool *p = arg;

    memset(g, 0, sizeof(*g));
    g->buffered_bytes = budget_used(&p->budget);
    g->max_buffered = budget_limit(&p->budget);
    g->redis_up = 1;
    g->redis_cluster_nodes = -1;
    g->redis_eviction_policy_ok = store_eviction_policy_ok();
    worker_key_counts(g);
    for (unsigned i = 0; i < p->serving; i++) { /* the admin worker has no traffic */
        struct worker *w = &p->workers[i];
        char primary[sizeof(g->redis_primaries[0].address)];
        int n;

        g->in_flight += exchange_set_active(w->xs);
        g->waiting += exchange_set_waiting(w->xs);
        g->upstream_in_flight += upstream_in_flight(w->upstream);
        if (store_primary(w->store, primary, sizeof(primary)))
            metrics_gauge_primary(g, primary);
        n = store_primaries_ready(w->store);
        if (n >= 0 && (g->redis_cluster_nodes < 0 || n < g->redis_cluster_nodes))
            g->redis_cluster_nodes = n;
    }
    /* every worker's connection, the admin worker's too, as /readyz counts them
       (worker_pool_unready): the gauge is 0 whenever readiness is 503 for Redis */
    for (unsigned i = 0; i < p->n; i++)
        if (!store_ready(p->workers[i].store))
            g->redis_up = 0;
}

/*
 * probe_env.unready: why the pool is not ready for traffic, or NULL; under
 * readiness: process the store's reason goes to *away instead. Any thread.
 */
static const char *worker_pool_unready(void *arg, const char **away)
{
    struct worker_pool *p = arg;

    *away = NULL;
    if (atomic_load(&p->draining))
        return "draining";
    /* the admin worker's store too: ready means its record endpoints answer as well */
    for (unsigned i = 0; i < p->n; i++) {
        const char *why = store_unready(p->workers[i].store);
        if (why == NULL)
            why = inbox_unready(p->workers[i].webhook_inbox);
        if (why != NULL && atomic_load(&p->readiness) != READINESS_PROCESS)
            return why;
        if (why != NULL)
            *away = why;
    }
    return NULL;
}
