/*
 * server.c - the worker threads: listeners, each worker's I/O objects,
 * messages between threads, configuration reloads and the SIGTERM drain.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/event_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "admin.h"
#include "exchange.h"
#include "fingerprint.h"
#include "log.h"
#include "store.h"
#include "upstream.h"

#define SERVER_MAX_HEADERS_SIZE (64 * 1024)
#define SERVER_CLIENT_IDLE_S 75

uint64_t worker_now_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

struct worker_config *worker_config_load(const char *file, char *err, size_t errlen)
{
    struct worker_config *wc = calloc(1, sizeof(*wc));

    if (wc == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (config_load(&wc->cfg, file, err, errlen) != 0) {
        free(wc);
        return NULL;
    }
    wc->refs = 1;
    return wc;
}

struct worker_config *worker_config_get(struct worker_config *wc)
{
    wc->refs++;
    return wc;
}

void worker_config_put(struct worker_config *wc)
{
    if (wc == NULL || --wc->refs > 0)
        return;
    config_deinit(&wc->cfg);
    free(wc);
}

/*
 * A listener that hit its file-descriptor limit: accept() keeps failing while
 * the socket stays readable, so pause accepting for a moment instead of
 * spinning (libevent 2.1 evhttp has no connection limit of its own).
 * evconnlistener's error callback gets the evhttp, not the worker, so the
 * listeners sit in one table, found by their evconnlistener under a lock.
 */
#define SERVER_ACCEPT_PAUSE_MS 100
#define SERVER_BACKLOG 511
#define SERVER_MAX_LISTENERS (CONFIG_MAX_WORKERS + 1)

struct server_listener {
    struct evconnlistener *lev;     /* NULL: free slot */
    struct event resume;            /* on the listener's event_base */
    uint64_t paused;                /* times accepting was paused, for the log */
};

static struct server_listener server_listeners[SERVER_MAX_LISTENERS];
static pthread_mutex_t server_listeners_lock = PTHREAD_MUTEX_INITIALIZER;

static void server_on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct server_listener *sl = arg;

    (void)fd;
    (void)what;
    evconnlistener_enable(sl->lev);
}

static void server_on_accept_error(struct evconnlistener *lev, void *ctx)
{
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval pause = { 0, SERVER_ACCEPT_PAUSE_MS * 1000 };
    struct server_listener *sl = NULL;

    (void)ctx;
    pthread_mutex_lock(&server_listeners_lock);
    for (size_t i = 0; i < SERVER_MAX_LISTENERS && sl == NULL; i++)
        if (server_listeners[i].lev == lev)
            sl = &server_listeners[i];
    pthread_mutex_unlock(&server_listeners_lock);
    if (sl == NULL)
        return;
    /* the slot is this thread's own until it releases it: no lock needed from here */
    if (sl->paused++ % 1000 == 0)
        log_msg(LOG_ERROR, "accept: %s; pausing new connections for %d ms (%llu times)",
                evutil_socket_error_to_string(err), SERVER_ACCEPT_PAUSE_MS,
                (unsigned long long)sl->paused);
    evconnlistener_disable(lev);
    evtimer_add(&sl->resume, &pause);
}

/* Take a free slot for lev; NULL when the table is full. */
static struct server_listener *server_listener_take(struct event_base *base,
                                                    struct evconnlistener *lev)
{
    struct server_listener *sl = NULL;

    pthread_mutex_lock(&server_listeners_lock);
    for (size_t i = 0; i < SERVER_MAX_LISTENERS && sl == NULL; i++) {
        if (server_listeners[i].lev == NULL) {
            sl = &server_listeners[i];
            sl->lev = lev;
            sl->paused = 0;
            evtimer_assign(&sl->resume, base, server_on_resume, sl);
        }
    }
    pthread_mutex_unlock(&server_listeners_lock);
    return sl;
}

/* Give a slot back (its listener is being freed); NULL is fine. From the listener's thread. */
static void server_listener_release(struct server_listener *sl)
{
    if (sl == NULL)
        return;
    event_del(&sl->resume);
    pthread_mutex_lock(&server_listeners_lock);
    sl->lev = NULL;
    pthread_mutex_unlock(&server_listeners_lock);
}

/*
 * With SO_REUSEPORT every socket of the same user that sets it may bind the
 * port, a second proxy started by mistake included. Two guards keep the port
 * ours alone, as with one worker. A port someone already holds: bind it once
 * without SO_REUSEPORT first (server_port_free). Two proxies starting at the
 * same moment, both past that check before either binds: the first to bind
 * an abstract unix socket named after the endpoint holds it until it exits
 * (the name lives in the network namespace, like the port), the other is
 * refused. Returns the lock's descriptor, or -1 with err.
 */
static int server_lock_endpoint(const struct endpoint *ep, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    int fd, n;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    /* sun_path[0] = '\0': the abstract namespace; no file, gone with the process */
    n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "idempotency-proxy listen %s:%u",
                 ep->host, ep->port);
    if (n < 0 || (size_t)n >= sizeof(sa.sun_path) - 1)
        n = (int)sizeof(sa.sun_path) - 2;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) != 0) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port,
                 errno == EADDRINUSE ? "Address already in use (another idempotency-proxy "
                                       "holds it)" : strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Bind the port once without SO_REUSEPORT: 0 when nobody holds it, else -1 with err. */
static int server_port_free(const struct sockaddr *sa, socklen_t len, const struct endpoint *ep,
                            char *err, size_t errlen)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, rc;

    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port, strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); /* as the listeners do */
    rc = bind(fd, sa, len);
    if (rc != 0)
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port, strerror(errno));
    close(fd);
    return rc == 0 ? 0 : -1;
}

/*
 * An evhttp on base listening on ep; with share_port, one of several sockets
 * on the port (SO_REUSEPORT), the kernel spreading connections among them.
 */
static struct evhttp *server_listen(struct event_base *base, const struct endpoint *ep,
                                    bool share_port, bool check_port,
                                    struct evhttp_bound_socket **bound,
                                    struct server_listener **slot, char *err, size_t errlen)
{
    struct evutil_addrinfo hints, *ai = NULL;
    struct evconnlistener *lev;
    struct evhttp *http;
    unsigned flags = LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
                     LEV_OPT_DISABLED;
    char port[8];
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = EVUTIL_AI_PASSIVE;
    snprintf(port, sizeof(port), "%u", ep->port);
    rc = evutil_getaddrinfo(ep->host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port,
                 evutil_gai_strerror(rc));
        return NULL;
    }
    if (check_port && server_port_free(ai->ai_addr, (socklen_t)ai->ai_addrlen, ep, err,
                                       errlen) != 0) {
        evutil_freeaddrinfo(ai);
        return NULL;
    }
    if (share_port)
        flags |= LEV_OPT_REUSEABLE_PORT;
    lev = evconnlistener_new_bind(base, NULL, NULL, flags, SERVER_BACKLOG, ai->ai_addr,
                                  (int)ai->ai_addrlen);
    evutil_freeaddrinfo(ai);
    if (lev == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port,
                 strerror(errno));
        return NULL;
    }
    *slot = server_listener_take(base, lev);
    http = *slot != NULL ? evhttp_new(base) : NULL;
    *bound = http != NULL ? evhttp_bind_listener(http, lev) : NULL;
    if (*bound == NULL) {
        snprintf(err, errlen, *slot == NULL ? "too many listeners" : "cannot create the HTTP server");
        server_listener_release(*slot);
        *slot = NULL;
        evconnlistener_free(lev);
        if (http != NULL)
            evhttp_free(http);
        return NULL;
    }
    evconnlistener_set_error_cb(lev, server_on_accept_error);
    evconnlistener_enable(lev);
    return http;
}

/*
 * libevent answers past its own body limit with a plain 413 before we see the
 * request; below it we answer max_request_body with problem details.
 */
static void server_set_body_limit(struct evhttp *http, size_t max_request_body)
{
    size_t slack = max_request_body > 65536 ? max_request_body : 65536;

    evhttp_set_max_body_size(http, (ev_ssize_t)(max_request_body + slack));
}

static bool server_same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The first setting that differs and needs a restart, or NULL. */
static const char *server_restart_needed(const struct config *old, const struct config *new)
{
    if (!server_same(old->listen.host, new->listen.host) || old->listen.port != new->listen.port)
        return "listen";
    if (!server_same(old->admin_listen.host, new->admin_listen.host) ||
        old->admin_listen.port != new->admin_listen.port)
        return "admin_listen";
    if (old->workers != new->workers)
        return "workers";
    if (!server_same(old->upstream_url, new->upstream_url) ||
        old->upstream_connect_timeout_ms != new->upstream_connect_timeout_ms ||
        old->upstream_timeout_ms != new->upstream_timeout_ms)
        return "upstream";
    if (!server_same(old->redis_url, new->redis_url) ||
        !server_same(old->redis_password, new->redis_password) ||
        old->redis_timeout_ms != new->redis_timeout_ms)
        return "redis";
    return NULL;
}

/* ---- one worker ------------------------------------------------------------ */

/*
 * A message to a worker from another thread, written to its inbox pipe in
 * one write(2): smaller than PIPE_BUF, so never torn or interleaved.
 */
enum worker_message_kind { WORKER_MSG_RELOAD, WORKER_MSG_DRAIN, WORKER_MSG_WAKE };

struct worker_message {
    enum worker_message_kind kind;
    struct worker_config *wc;       /* RELOAD: one reference, the receiver's */
    uint64_t deadline_ms;           /* DRAIN: ms since the epoch */
    char record_key[RECORD_KEY_MAX]; /* WAKE */
};

_Static_assert(sizeof(struct worker_message) <= PIPE_BUF, "a message is one atomic pipe write");

/* Longest a RELOAD or DRAIN waits for room in a full inbox, in ms. */
#define WORKER_POST_PATIENCE_MS 2000

/*
 * Post m to w's inbox. A wake-up is dropped when the inbox is full (the
 * waiter polls anyway); a reload or drain waits for room up to
 * WORKER_POST_PATIENCE_MS. Returns 0, or -1 when it could not be posted.
 */
static int worker_post(struct worker *w, const struct worker_message *m)
{
    uint64_t give_up = worker_now_ms() + WORKER_POST_PATIENCE_MS;

    for (;;) {
        ssize_t n = write(w->inbox[1], m, sizeof(*m));
        if (n == (ssize_t)sizeof(*m))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN && m->kind != WORKER_MSG_WAKE &&
            worker_now_ms() < give_up) {
            struct pollfd pfd = { .fd = w->inbox[1], .events = POLLOUT };
            poll(&pfd, 1, 50);
            continue;
        }
        return -1;
    }
}

static void worker_apply_config(struct worker *w, struct worker_config *wc)
{
    server_set_body_limit(w->http, wc->cfg.max_request_body);
    worker_config_put(w->conf);
    w->conf = wc;
}

static void worker_stop_accepting(struct worker *w)
{
    if (w->listener != NULL) {
        server_listener_release(w->listener_slot);
        w->listener_slot = NULL;
        evhttp_del_accept_socket(w->http, w->listener);
        w->listener = NULL;
    }
    w->draining = true;
}

/* Exchanges in flight, answers unsent and claims unreleased, summed over the pool (any thread). */
static unsigned worker_pool_busy(struct worker_pool *p)
{
    unsigned unsent, unreleased, in_flight = worker_pool_in_flight(p, &unsent, &unreleased);

    return in_flight + unsent + unreleased;
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
    } else if (worker_now_ms() >= w->drain_deadline_ms) {
        log_msg(LOG_WARN, "worker %u: drain time is up with %u requests in flight, %u answers "
                "unsent, %u claims of refused requests unreleased (they end with their lease, "
                "then read as outcome unknown); exiting", w->index, (unsigned)w->active,
                (unsigned)w->unflushed, (unsigned)w->orphaned);
        event_base_loopexit(w->base, NULL);
    }
}

/* Stop accepting, then end w's loop once no worker has anything in flight or unsent, or at deadline_ms. */
static void worker_drain(struct worker *w, uint64_t deadline_ms)
{
    struct timeval tick = { 0, 50 * 1000 };

    if (w->drain_timer != NULL)
        return;
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

static void worker_on_inbox(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct worker_message m;

    (void)what;
    while (read(fd, &m, sizeof(m)) == (ssize_t)sizeof(m)) {
        switch (m.kind) {
        case WORKER_MSG_RELOAD: worker_apply_config(w, m.wc); break;
        case WORKER_MSG_DRAIN: worker_drain(w, m.deadline_ms); break;
        case WORKER_MSG_WAKE: exchange_wake_waiters(w, m.record_key); break;
        }
    }
}

void worker_wake_others(struct worker *w, const char *record_key)
{
    struct worker_pool *p = w->pool;
    struct worker_message m = { .kind = WORKER_MSG_WAKE };
    size_t len = strlen(record_key);

    if (p->n < 2 || len >= sizeof(m.record_key))
        return;
    memcpy(m.record_key, record_key, len + 1);
    for (unsigned i = 0; i < p->n; i++) {
        struct worker *o = &p->workers[i];
        if (o != w && o->waiting > 0)
            worker_post(o, &m);
    }
}

static void server_on_store_command(double seconds, bool ok, void *arg)
{
    struct worker *w = arg;

    metrics_observe(w->metrics, METRICS_REDIS_LATENCY, seconds);
    if (!ok)
        metrics_count(w->metrics, METRICS_STORE_ERRORS);
}

/*
 * epoll with libevent's changelist: curl and evhttp switch a socket's events
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
    store_destroy(w->store);
    w->store = NULL;
    exchange_forget_orphans(w);
    upstream_destroy(w->upstream);
    w->upstream = NULL;
    server_listener_release(w->listener_slot);
    w->listener_slot = NULL;
    server_listener_release(w->admin_slot);
    w->admin_slot = NULL;
    if (w->http != NULL)
        evhttp_free(w->http);
    w->http = NULL;
    if (w->admin_http != NULL)
        evhttp_free(w->admin_http);
    w->admin_http = NULL;
    if (w->drain_timer != NULL)
        event_free(w->drain_timer);
    w->drain_timer = NULL;
    if (w->inbox_event != NULL)
        event_free(w->inbox_event);
    w->inbox_event = NULL;
    if (w->inbox[0] >= 0) { /* a reload posted as the loop ended holds a reference */
        struct worker_message m;
        while (read(w->inbox[0], &m, sizeof(m)) == (ssize_t)sizeof(m))
            if (m.kind == WORKER_MSG_RELOAD)
                worker_config_put(m.wc);
    }
    for (int i = 0; i < 2; i++) {
        if (w->inbox[i] >= 0)
            close(w->inbox[i]);
        w->inbox[i] = -1;
    }
    worker_config_put(w->conf);
    w->conf = NULL;
    worker_config_put(w->boot);
    w->boot = NULL;
    if (w->base != NULL)
        event_base_free(w->base);
    w->base = NULL;
}

static int worker_init(struct worker *w, struct worker_pool *p, unsigned index,
                       struct worker_config *wc, char *err, size_t errlen)
{
    const struct config *cfg = &wc->cfg;
    struct evhttp_bound_socket *admin_bound = NULL;
    bool shared = p->n > 1;

    memset(w, 0, sizeof(*w));
    w->inbox[0] = w->inbox[1] = -1;
    w->pool = p;
    w->index = index;
    w->metrics = &p->metrics;
    w->conf = worker_config_get(wc);
    w->boot = worker_config_get(wc);
    TAILQ_INIT(&w->waiters);
    TAILQ_INIT(&w->orphans);

    w->base = worker_event_base_new();
    if (w->base == NULL) {
        snprintf(err, errlen, "cannot create the event loop");
        goto failed;
    }
    if (pipe2(w->inbox, O_NONBLOCK | O_CLOEXEC) != 0 ||
        (w->inbox_event = event_new(w->base, w->inbox[0], EV_READ | EV_PERSIST, worker_on_inbox,
                                    w)) == NULL ||
        event_add(w->inbox_event, NULL) != 0) {
        snprintf(err, errlen, "cannot create a worker's inbox: %s", strerror(errno));
        goto failed;
    }

    w->http = server_listen(w->base, &cfg->listen, shared, shared && index == 0, &w->listener,
                            &w->listener_slot, err, errlen);
    if (w->http == NULL)
        goto failed;
    evhttp_set_gencb(w->http, exchange_handle, w);
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    server_set_body_limit(w->http, cfg->max_request_body);
    evhttp_set_max_headers_size(w->http, SERVER_MAX_HEADERS_SIZE);
    evhttp_set_default_content_type(w->http, NULL);
    evhttp_set_timeout(w->http, SERVER_CLIENT_IDLE_S);
    /* read the rest of an oversized body before answering, so the client sees the 413 */
    evhttp_set_flags(w->http, EVHTTP_SERVER_LINGERING_CLOSE);

    if (index == 0 && cfg->admin_listen.host != NULL) {
        w->admin_http = server_listen(w->base, &cfg->admin_listen, false, false, &admin_bound,
                                      &w->admin_slot, err, errlen);
        if (w->admin_http == NULL)
            goto failed;
        evhttp_set_gencb(w->admin_http, admin_handle, w);
        evhttp_set_allowed_methods(w->admin_http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
                                                      EVHTTP_REQ_DELETE);
        evhttp_set_default_content_type(w->admin_http, NULL);
    }

    w->store = store_create(w->base, cfg);
    w->upstream = upstream_create(w->base, cfg);
    if (w->store == NULL || w->upstream == NULL) {
        snprintf(err, errlen, "out of memory");
        goto failed;
    }
    store_set_observer(w->store, server_on_store_command, w);
    return 0;

failed:
    worker_deinit(w);
    return -1;
}

/* ---- the pool ------------------------------------------------------------- */

int worker_pool_init(struct worker_pool *p, struct worker_config *wc, char *err, size_t errlen)
{
    unsigned n = config_workers(&wc->cfg);

    memset(p, 0, sizeof(*p));
    p->port_lock = -1;
    if (metrics_init(&p->metrics) != 0) {
        snprintf(err, errlen, "cannot create the metrics lock");
        return -1;
    }
    if (n > 1 && (p->port_lock = server_lock_endpoint(&wc->cfg.listen, err, errlen)) < 0) {
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
    for (unsigned i = 0; i < n; i++) {
        if (worker_init(&p->workers[i], p, i, wc, err, errlen) != 0) {
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
    fingerprint_thread_end();
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
    char err[1024];
    struct worker_config *wc = worker_config_load(file, err, sizeof(err));
    const char *changed;

    if (wc == NULL) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: %s", err);
        metrics_count(&p->metrics, METRICS_RELOAD_FAILURES);
        return -1;
    }
    /* the listeners, threads and connections were made from the boot config */
    changed = server_restart_needed(&w0->boot->cfg, &wc->cfg);
    if (changed != NULL) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: %s changed, which "
                "needs a restart", changed);
        worker_config_put(wc);
        metrics_count(&p->metrics, METRICS_RELOAD_FAILURES);
        return -1;
    }
    /* identity against the running config: a second SIGHUP must not undo what a first kept */
    changed = config_reload_refusal(&w0->conf->cfg, &wc->cfg);
    if (changed != NULL) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: %s changed, which "
                "changes record identity (retries of earlier keys would execute again)", changed);
        worker_config_put(wc);
        metrics_count(&p->metrics, METRICS_RELOAD_FAILURES);
        return -1;
    }
    for (unsigned i = 1; i < p->n; i++) {
        struct worker_message m = { .kind = WORKER_MSG_RELOAD, .wc = worker_config_get(wc) };
        if (worker_post(&p->workers[i], &m) != 0) {
            /* the worker is stuck for seconds: it keeps the old routes, and says so */
            log_msg(LOG_ERROR, "worker %u did not take the reload; it keeps the previous "
                    "configuration until the next SIGHUP", i);
            worker_config_put(wc);
        }
    }
    worker_apply_config(w0, wc);
    metrics_count(&p->metrics, METRICS_RELOADS);
    log_msg(LOG_INFO, "reloaded %s: %zu routes", file, wc->cfg.n_routes);
    return 0;
}

void worker_pool_drain(struct worker_pool *p, uint64_t slack_ms)
{
    struct worker_message m = { .kind = WORKER_MSG_DRAIN };

    m.deadline_ms = worker_now_ms() + p->workers[0].boot->cfg.upstream_timeout_ms + slack_ms;
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
        n += p->workers[i].active;
        *unsent += p->workers[i].unflushed;
        *unreleased += p->workers[i].orphaned;
    }
    return n;
}

void worker_pool_gauges(struct worker_pool *p, struct metrics_gauges *g)
{
    memset(g, 0, sizeof(*g));
    g->redis_up = 1;
    for (unsigned i = 0; i < p->n; i++) {
        struct worker *w = &p->workers[i];
        g->in_flight += w->active;
        g->waiting += w->waiting;
        g->upstream_in_flight += upstream_in_flight(w->upstream);
        if (!store_ready(w->store))
            g->redis_up = 0;
    }
}

const char *worker_pool_unready(struct worker_pool *p)
{
    if (p->workers[0].draining)
        return "draining";
    for (unsigned i = 0; i < p->n; i++)
        if (!store_ready(p->workers[i].store))
            return "redis unreachable";
    return NULL;
}
