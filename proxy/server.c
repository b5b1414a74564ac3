/*
 * server.c - listeners and the worker's I/O objects.
 */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "admin.h"
#include "config.h"
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

static struct evhttp *server_listen(struct event_base *base, const struct endpoint *ep,
                                    struct evhttp_bound_socket **bound, char *err, size_t errlen)
{
    struct evhttp *http = evhttp_new(base);

    if (http == NULL) {
        snprintf(err, errlen, "cannot create the HTTP server");
        return NULL;
    }
    *bound = evhttp_bind_socket_with_handle(http, ep->host, ep->port);
    if (*bound == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port,
                 strerror(errno));
        evhttp_free(http);
        return NULL;
    }
    return http;
}

int worker_init(struct worker *w, struct event_base *base, const struct config *cfg, char *err,
                size_t errlen)
{
    struct evhttp_bound_socket *admin_bound = NULL;
    size_t hard_cap;

    memset(w, 0, sizeof(*w));
    w->base = base;
    w->cfg = cfg;
    TAILQ_INIT(&w->waiters);

    w->http = server_listen(base, &cfg->listen, &w->listener, err, errlen);
    if (w->http == NULL)
        goto failed;
    evhttp_set_gencb(w->http, exchange_handle, w);
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    /*
     * libevent answers past its own limit with a plain 413 before we see the
     * request; below it we answer max_request_body with problem details.
     */
    hard_cap = cfg->max_request_body + (cfg->max_request_body > 65536 ? cfg->max_request_body
                                                                      : 65536);
    evhttp_set_max_body_size(w->http, (ev_ssize_t)hard_cap);
    evhttp_set_max_headers_size(w->http, SERVER_MAX_HEADERS_SIZE);
    evhttp_set_default_content_type(w->http, NULL);
    evhttp_set_timeout(w->http, SERVER_CLIENT_IDLE_S);

    if (cfg->admin_listen.host != NULL) {
        w->admin_http = server_listen(base, &cfg->admin_listen, &admin_bound, err, errlen);
        if (w->admin_http == NULL)
            goto failed;
        evhttp_set_gencb(w->admin_http, admin_handle, w);
        evhttp_set_default_content_type(w->admin_http, NULL);
    }

    w->store = store_create(base, cfg);
    w->upstream = upstream_create(base, cfg);
    if (w->store == NULL || w->upstream == NULL) {
        snprintf(err, errlen, "out of memory");
        goto failed;
    }
    return 0;

failed:
    worker_deinit(w);
    return -1;
}

void worker_stop_accepting(struct worker *w)
{
    if (w->listener != NULL) {
        evhttp_del_accept_socket(w->http, w->listener);
        w->listener = NULL;
    }
    w->draining = true;
}

void worker_deinit(struct worker *w)
{
    /*
     * Store first: its pending callbacks still run (STORE_UNAVAILABLE) and may
     * answer or forward, so the upstream and listeners must still exist.
     */
    store_destroy(w->store);
    w->store = NULL;
    upstream_destroy(w->upstream);
    w->upstream = NULL;
    if (w->http != NULL)
        evhttp_free(w->http);
    w->http = NULL;
    if (w->admin_http != NULL)
        evhttp_free(w->admin_http);
    w->admin_http = NULL;
}
