/*
 * server.c - listeners, the worker's I/O objects, and configuration reloads.
 */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/event_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "admin.h"
#include "exchange.h"
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
 */
#define SERVER_ACCEPT_PAUSE_MS 100
#define SERVER_BACKLOG 511
#define SERVER_MAX_LISTENERS 4

static struct server_listener {
    struct evconnlistener *lev;
    struct event resume;
    uint64_t paused;                /* times accepting was paused, for the log */
} server_listeners[SERVER_MAX_LISTENERS];

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

    (void)ctx;
    for (size_t i = 0; i < SERVER_MAX_LISTENERS; i++) {
        struct server_listener *sl = &server_listeners[i];
        if (sl->lev != lev)
            continue;
        if (sl->paused++ % 1000 == 0)
            log_msg(LOG_ERROR, "accept: %s; pausing new connections for %d ms (%llu times)",
                    evutil_socket_error_to_string(err), SERVER_ACCEPT_PAUSE_MS,
                    (unsigned long long)sl->paused);
        evconnlistener_disable(lev);
        evtimer_add(&sl->resume, &pause);
        return;
    }
}

static struct evhttp *server_listen(struct event_base *base, const struct endpoint *ep,
                                    struct evhttp_bound_socket **bound, char *err, size_t errlen)
{
    struct evutil_addrinfo hints, *ai = NULL;
    struct server_listener *sl = NULL;
    struct evconnlistener *lev;
    struct evhttp *http;
    char port[8];
    int rc;

    for (size_t i = 0; i < SERVER_MAX_LISTENERS && sl == NULL; i++)
        if (server_listeners[i].lev == NULL)
            sl = &server_listeners[i];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = EVUTIL_AI_PASSIVE;
    snprintf(port, sizeof(port), "%u", ep->port);
    rc = evutil_getaddrinfo(ep->host, port, &hints, &ai);
    if (rc != 0 || sl == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port,
                 rc != 0 ? evutil_gai_strerror(rc) : "too many listeners");
        if (ai != NULL)
            evutil_freeaddrinfo(ai);
        return NULL;
    }
    lev = evconnlistener_new_bind(base, NULL, NULL,
                                  LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE |
                                      LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_DISABLED,
                                  SERVER_BACKLOG, ai->ai_addr, (int)ai->ai_addrlen);
    evutil_freeaddrinfo(ai);
    if (lev == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port,
                 strerror(errno));
        return NULL;
    }
    http = evhttp_new(base);
    *bound = http != NULL ? evhttp_bind_listener(http, lev) : NULL;
    if (*bound == NULL) {
        snprintf(err, errlen, "cannot create the HTTP server");
        evconnlistener_free(lev);
        if (http != NULL)
            evhttp_free(http);
        return NULL;
    }
    sl->lev = lev;
    sl->paused = 0;
    evtimer_assign(&sl->resume, base, server_on_resume, sl);
    evconnlistener_set_error_cb(lev, server_on_accept_error);
    evconnlistener_enable(lev);
    return http;
}

/* Forget the pause timers of every listener of base (their evhttp is being freed). */
static void server_forget_listeners(void)
{
    for (size_t i = 0; i < SERVER_MAX_LISTENERS; i++) {
        if (server_listeners[i].lev != NULL)
            event_del(&server_listeners[i].resume);
        server_listeners[i].lev = NULL;
    }
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

static void server_on_store_command(double seconds, bool ok, void *arg)
{
    struct worker *w = arg;

    metrics_observe(&w->metrics.redis_latency, seconds);
    if (!ok)
        w->metrics.store_errors++;
}

int worker_init(struct worker *w, struct event_base *base, struct worker_config *wc, char *err,
                size_t errlen)
{
    const struct config *cfg = &wc->cfg;
    struct evhttp_bound_socket *admin_bound = NULL;

    memset(w, 0, sizeof(*w));
    w->base = base;
    w->conf = worker_config_get(wc);
    w->boot = worker_config_get(wc);
    TAILQ_INIT(&w->waiters);
    TAILQ_INIT(&w->orphans);

    w->http = server_listen(base, &cfg->listen, &w->listener, err, errlen);
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

    if (cfg->admin_listen.host != NULL) {
        w->admin_http = server_listen(base, &cfg->admin_listen, &admin_bound, err, errlen);
        if (w->admin_http == NULL)
            goto failed;
        evhttp_set_gencb(w->admin_http, admin_handle, w);
        evhttp_set_allowed_methods(w->admin_http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
                                                      EVHTTP_REQ_DELETE);
        evhttp_set_default_content_type(w->admin_http, NULL);
    }

    w->store = store_create(base, cfg);
    w->upstream = upstream_create(base, cfg);
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

static bool server_same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/*
 * What a record id is made of (route pattern, key source, scope headers)
 * must not change under running clients: their retries would land on new
 * records and execute again. Existing routes keep their order and identity;
 * new routes may only be appended. Returns what changed, or NULL.
 */
static const char *server_identity_changed(const struct config *old, const struct config *new)
{
    if (new->n_routes < old->n_routes)
        return "routes (a route was removed; retries of its keys would execute again)";
    for (size_t i = 0; i < old->n_routes; i++) {
        const struct route *a = &old->routes[i], *b = &new->routes[i];
        const struct route_policy *pa = &a->policy, *pb = &b->policy;
        if (a->prefix != b->prefix || strcmp(a->path, b->path) != 0)
            return "routes (a route's path or position changed)";
        if (pa->key_from != pb->key_from || strcasecmp(pa->key_header, pb->key_header) != 0 ||
            !server_same(pa->key_json_pointer, pb->key_json_pointer))
            return "routes (a route's key source changed)";
        if (pa->n_scope_headers != pb->n_scope_headers)
            return "scope_headers";
        for (size_t j = 0; j < pa->n_scope_headers; j++)
            if (strcasecmp(pa->scope_headers[j], pb->scope_headers[j]) != 0)
                return "scope_headers";
    }
    return NULL;
}

/* The first setting that differs and needs a restart, or NULL. */
static const char *server_restart_needed(const struct config *old, const struct config *new)
{
    if (!server_same(old->listen.host, new->listen.host) || old->listen.port != new->listen.port)
        return "listen";
    if (!server_same(old->admin_listen.host, new->admin_listen.host) ||
        old->admin_listen.port != new->admin_listen.port)
        return "admin_listen";
    if (!server_same(old->upstream_url, new->upstream_url) ||
        old->upstream_connect_timeout_ms != new->upstream_connect_timeout_ms ||
        old->upstream_timeout_ms != new->upstream_timeout_ms)
        return "upstream";
    if (!server_same(old->redis_url, new->redis_url) ||
        !server_same(old->redis_password, new->redis_password) ||
        old->redis_timeout_ms != new->redis_timeout_ms)
        return "redis";
    /* a new prefix would hide every record: retries would execute again */
    if (!server_same(old->key_prefix, new->key_prefix))
        return "redis.key_prefix";
    return server_identity_changed(old, new);
}

int worker_reload(struct worker *w, const char *file)
{
    char err[1024];
    struct worker_config *wc = worker_config_load(file, err, sizeof(err));
    const char *changed;

    if (wc == NULL) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: %s", err);
        w->metrics.reload_failures++;
        return -1;
    }
    changed = server_restart_needed(&w->boot->cfg, &wc->cfg);
    if (changed != NULL) {
        log_msg(LOG_ERROR, "reload refused, running configuration kept: %s changed, which "
                "changes record identity or needs a restart", changed);
        worker_config_put(wc);
        w->metrics.reload_failures++;
        return -1;
    }
    server_set_body_limit(w->http, wc->cfg.max_request_body);
    worker_config_put(w->conf);
    w->conf = wc;
    w->metrics.reloads++;
    log_msg(LOG_INFO, "reloaded %s: %zu routes", file, wc->cfg.n_routes);
    return 0;
}

void worker_stop_accepting(struct worker *w)
{
    if (w->listener != NULL) {
        struct evconnlistener *lev = evhttp_bound_socket_get_listener(w->listener);
        for (size_t i = 0; i < SERVER_MAX_LISTENERS; i++) {
            if (server_listeners[i].lev == lev) {
                event_del(&server_listeners[i].resume);
                server_listeners[i].lev = NULL;
            }
        }
        evhttp_del_accept_socket(w->http, w->listener);
        w->listener = NULL;
    }
    w->draining = true;
}

void worker_deinit(struct worker *w)
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
    server_forget_listeners();
    if (w->http != NULL)
        evhttp_free(w->http);
    w->http = NULL;
    if (w->admin_http != NULL)
        evhttp_free(w->admin_http);
    w->admin_http = NULL;
    metrics_deinit(&w->metrics);
    worker_config_put(w->conf);
    w->conf = NULL;
    worker_config_put(w->boot);
    w->boot = NULL;
}
