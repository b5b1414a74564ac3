/*
 * listener.c - listening sockets; see listener.h.
 */
#include "listener.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "clock.h"
#include "config.h"
#include "log.h"

/*
 * A listener that hit its file-descriptor limit: accept() keeps failing while
 * the socket stays readable, so pause accepting for a moment instead of
 * spinning (libevent 2.1 evhttp has no connection limit of its own).
 * evconnlistener's error callback gets the evhttp, not the worker, so the
 * listeners sit in one table, found by their evconnlistener under a lock.
 */
#define LISTENER_ACCEPT_PAUSE_MS 100
#define LISTENER_BACKLOG 511
#define LISTENER_MAX (CONFIG_MAX_WORKERS + 1)

struct listener_slot {
    struct evconnlistener *lev;     /* NULL: free slot */
    struct event resume;            /* on the listener's event_base */
    uint64_t paused;                /* times accepting was paused, for the log */
};

static struct listener_slot listener_slots[LISTENER_MAX];
static pthread_mutex_t listener_slots_lock = PTHREAD_MUTEX_INITIALIZER;

static void listener_on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct listener_slot *sl = arg;

    (void)fd;
    (void)what;
    evconnlistener_enable(sl->lev);
}

static void listener_on_accept_error(struct evconnlistener *lev, void *ctx)
{
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval pause = clock_ms_to_timeval(LISTENER_ACCEPT_PAUSE_MS);
    struct listener_slot *sl = NULL;

    (void)ctx;
    pthread_mutex_lock(&listener_slots_lock);
    for (size_t i = 0; i < LISTENER_MAX && sl == NULL; i++)
        if (listener_slots[i].lev == lev)
            sl = &listener_slots[i];
    pthread_mutex_unlock(&listener_slots_lock);
    if (sl == NULL)
        return;
    /* the slot is this thread's own until it releases it: no lock needed from here */
    if (sl->paused++ % 1000 == 0)
        log_msg(LOG_ERROR, "accept: %s; pausing new connections for %d ms (%llu times)",
                evutil_socket_error_to_string(err), LISTENER_ACCEPT_PAUSE_MS,
                (unsigned long long)sl->paused);
    evconnlistener_disable(lev);
    evtimer_add(&sl->resume, &pause);
}

/* Take a free slot for lev; NULL when the table is full. */
static struct listener_slot *listener_slot_take(struct event_base *base,
                                                    struct evconnlistener *lev)
{
    struct listener_slot *sl = NULL;

    pthread_mutex_lock(&listener_slots_lock);
    for (size_t i = 0; i < LISTENER_MAX && sl == NULL; i++) {
        if (listener_slots[i].lev == NULL) {
            sl = &listener_slots[i];
            sl->lev = lev;
            sl->paused = 0;
            evtimer_assign(&sl->resume, base, listener_on_resume, sl);
        }
    }
    pthread_mutex_unlock(&listener_slots_lock);
    return sl;
}

/* Give a slot back (its listener is being freed); NULL is fine. From the listener's thread. */
void listener_release(struct listener_slot *sl)
{
    if (sl == NULL)
        return;
    event_del(&sl->resume);
    pthread_mutex_lock(&listener_slots_lock);
    sl->lev = NULL;
    pthread_mutex_unlock(&listener_slots_lock);
}

/*
 * With SO_REUSEPORT every socket of the same user that sets it may bind the
 * port, a second proxy started by mistake included. Two guards keep the port
 * ours alone, as with one worker. A port someone already holds: bind it once
 * without SO_REUSEPORT first (listener_port_free). Two proxies starting at the
 * same moment, both past that check before either binds: the first to bind
 * an abstract unix socket named after the endpoint holds it until it exits
 * (the name lives in the network namespace, like the port), the other is
 * refused. Returns the lock's descriptor, or -1 with err.
 */
int listener_lock_endpoint(const struct endpoint *ep, char *err, size_t errlen)
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
static int listener_port_free(const struct sockaddr *sa, socklen_t len, const struct endpoint *ep,
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
struct evconnlistener *listener_bind(struct event_base *base, const struct endpoint *ep,
                                     bool share_port, bool check_port, char *err, size_t errlen)
{
    struct evutil_addrinfo hints, *ai = NULL;
    struct evconnlistener *lev;
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
    if (check_port && listener_port_free(ai->ai_addr, (socklen_t)ai->ai_addrlen, ep, err,
                                       errlen) != 0) {
        evutil_freeaddrinfo(ai);
        return NULL;
    }
    if (share_port)
        flags |= LEV_OPT_REUSEABLE_PORT;
    lev = evconnlistener_new_bind(base, NULL, NULL, flags, LISTENER_BACKLOG, ai->ai_addr,
                                  (int)ai->ai_addrlen);
    evutil_freeaddrinfo(ai);
    if (lev == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%u: %s", ep->host, ep->port,
                 strerror(errno));
        return NULL;
    }
    return lev;
}

struct evhttp *listener_open(struct event_base *base, const struct endpoint *ep,
                                    bool share_port, bool check_port,
                                    struct evhttp_bound_socket **bound,
                                    struct listener_slot **slot, char *err, size_t errlen)
{
    struct evconnlistener *lev = listener_bind(base, ep, share_port, check_port, err, errlen);
    struct evhttp *http;

    if (lev == NULL)
        return NULL;
    *slot = listener_slot_take(base, lev);
    http = *slot != NULL ? evhttp_new(base) : NULL;
    *bound = http != NULL ? evhttp_bind_listener(http, lev) : NULL;
    if (*bound == NULL) {
        snprintf(err, errlen, *slot == NULL ? "too many listeners" : "cannot create the HTTP server");
        listener_release(*slot);
        *slot = NULL;
        evconnlistener_free(lev);
        if (http != NULL)
            evhttp_free(http);
        return NULL;
    }
    evconnlistener_set_error_cb(lev, listener_on_accept_error);
    evconnlistener_enable(lev);
    return http;
}

