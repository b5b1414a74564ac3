/*
 * upstream_socket.c - libcurl multi-socket wired onto the event_base, in the
 * shape of curl's docs/examples/multi-event.c: curl tells us which sockets to
 * watch and when to wake it; completed transfers are collected after each
 * curl_multi_socket_action, outside every curl callback, and each is handed
 * to its own finish function (struct upstream_call).
 *
 * A paused transfer (upstream_stream.c) is one curl does not wait on: paused
 * in every direction it still has, curl 7.88 sends CURL_POLL_REMOVE for its
 * socket, which then looks idle here (watched for EV_READ, not in_use).
 * Bytes the upstream sends meanwhile make it readable; we stop watching it,
 * as for an idle connection, and curl asks for it again (CURL_POLL_IN, from
 * curl_easy_pause) when the transfer resumes. Its connection is in use, so
 * curl's prune of dead idle connections leaves it alone.
 */
#include "upstream_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/event.h>
#include <event2/event_struct.h>

#include "clock.h"

static void upstream_on_socket_event(evutil_socket_t fd, short what, void *arg);

/* The socket record of fd, or NULL when curl did not open fd through upstream_open_socket. */
static struct upstream_socket *upstream_socket_find(const struct upstream *up, curl_socket_t fd)
{
    return fd >= 0 && (size_t)fd < up->n_sockets ? up->sockets[fd] : NULL;
}

/* Watch exactly `kind` (EV_READ, EV_WRITE, both, or 0 for nothing) on us. */
static void upstream_socket_watch(struct upstream_socket *us, short kind)
{
    if (kind == us->watched)
        return;
    if (us->watched != 0)
        event_del(&us->ev);
    us->watched = 0;
    if (kind == 0)
        return;
    event_assign(&us->ev, us->up->base, us->fd, kind | EV_PERSIST, upstream_on_socket_event, us);
    if (event_add(&us->ev, NULL) == 0)
        us->watched = kind;
}

/* Hand each transfer curl completed to its kind's finish function. */
static void upstream_check_done(struct upstream *up)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(up->multi, &left)) != NULL) {
        struct upstream_call *call = NULL;
        CURLcode rc = msg->data.result;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&call);
        call->finish(call, rc);
    }
}

/*
 * An event on an upstream socket. While a transfer waits on it, curl handles
 * it. While it idles in curl's pool, readable means the upstream closed it
 * (EOF, RST) or sent bytes nobody asked for: either way it must not carry
 * another request. We stop watching it (epoll is level-triggered: it would
 * wake us on every loop) and leave it to curl, whose liveness check before a
 * reuse, and its prune of dead idle connections (when a transfer starts, at
 * most once a second), see the same and close it through
 * upstream_close_socket. The socket of a paused transfer looks idle too (see
 * the top of this file): unwatched the same way, it keeps its bytes for
 * curl to read when the transfer resumes.
 */
static void upstream_on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    struct upstream_socket *us = arg;
    struct upstream *up = us->up;
    int running = 0;
    int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);

    if (!us->in_use) {
        upstream_socket_watch(us, 0);
        return;
    }
    curl_multi_socket_action(up->multi, fd, action, &running);
    upstream_check_done(up);
}

static void upstream_on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *up = arg;
    int running = 0;

    (void)fd;
    (void)what;
    curl_multi_socket_action(up->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    upstream_check_done(up);
}

static int upstream_sockets_reserve(struct upstream *up, int fd);

/* A record for a socket curl opened itself (struct upstream_socket); NULL when out of memory. */
static struct upstream_socket *upstream_socket_adopt(struct upstream *up, curl_socket_t fd)
{
    struct upstream_socket *us;

    if (fd < 0 || upstream_sockets_reserve(up, fd) != 0 || (us = calloc(1, sizeof(*us))) == NULL)
        return NULL;
    us->up = up;
    us->fd = fd;
    us->foreign = true;
    up->sockets[fd] = us;
    return us;
}

/*
 * CURLMOPT_SOCKETFUNCTION: a transfer waits for `what` on fd, or
 * (CURL_POLL_REMOVE) no transfer uses fd any more. A socket of ours stays
 * registered (EV_READ) until curl closes it; a foreign one (the resolver's)
 * is forgotten at REMOVE, since curl closes it without telling us. -1 (curl
 * fails the transfer) only when there is no memory for a record.
 */
static int upstream_on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct upstream *up = userp;
    struct upstream_socket *us = upstream_socket_find(up, fd);

    (void)easy;
    (void)socketp;
    if (us == NULL && what == CURL_POLL_REMOVE) /* a silent close ended this one */
        return 0;
    if (us == NULL && (us = upstream_socket_adopt(up, fd)) == NULL)
        return -1;
    if (what == CURL_POLL_REMOVE) {
        us->in_use = false;
        upstream_socket_watch(us, us->carried && !us->foreign ? EV_READ : 0);
        if (us->foreign) {
            up->sockets[fd] = NULL;
            free(us);
        }
        return 0;
    }
    us->in_use = true;
    if (what & CURL_POLL_IN)
        us->carried = true;
    upstream_socket_watch(us, (short)(((what & CURL_POLL_IN) ? EV_READ : 0) |
                                      ((what & CURL_POLL_OUT) ? EV_WRITE : 0)));
    return 0;
}

/* Room for fd in up->sockets; -1 when out of memory. */
static int upstream_sockets_reserve(struct upstream *up, int fd)
{
    size_t n = up->n_sockets > 0 ? up->n_sockets : 64;
    struct upstream_socket **grown;

    if ((size_t)fd < up->n_sockets)
        return 0;
    while (n <= (size_t)fd)
        n *= 2;
    grown = realloc(up->sockets, n * sizeof(*grown));
    if (grown == NULL)
        return -1;
    memset(grown + up->n_sockets, 0, (n - up->n_sockets) * sizeof(*grown));
    up->sockets = grown;
    up->n_sockets = n;
    return 0;
}

/*
 * CURLOPT_OPENSOCKETFUNCTION: open the socket (as curl would, plus
 * SOCK_CLOEXEC) and keep a record of it for the event loop.
 */
static curl_socket_t upstream_open_socket(void *clientp, curlsocktype purpose,
                                          struct curl_sockaddr *addr)
{
    struct upstream *up = clientp;
    struct upstream_socket *us, *stale;
    int fd;

    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKET_BAD;
    fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    /*
     * A record at this number is what a silent close left (see struct
     * upstream_socket). Unwatched, it is dropped. Still watched, its event
     * is still in libevent's map of that number, and libevent adds a number
     * to epoll only when its first event arrives: a new socket under it would
     * never be watched. So curl gets another number, and the record goes when
     * curl's CURL_POLL_REMOVE for it arrives (in the same curl call).
     */
    while (fd >= 0 && (stale = upstream_socket_find(up, fd)) != NULL) {
        int other;
        if (stale->watched == 0) {
            up->sockets[fd] = NULL;
            free(stale);
            break;
        }
        other = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        close(fd);
        fd = other;
    }
    if (fd < 0)
        return CURL_SOCKET_BAD;
    us = upstream_sockets_reserve(up, fd) == 0 ? calloc(1, sizeof(*us)) : NULL;
    if (us == NULL) {
        close(fd);
        return CURL_SOCKET_BAD;
    }
    us->up = up;
    us->fd = fd;
    up->sockets[fd] = us;
    return fd;
}

/*
 * CURLOPT_CLOSESOCKETFUNCTION: the one place a connected upstream socket
 * leaves the event loop, before its number is free again. (libevent's
 * changelist turns a later add under the same number into EPOLL_CTL_MOD,
 * which it retries as ADD when the kernel no longer knows the number.)
 */
static int upstream_close_socket(void *clientp, curl_socket_t fd)
{
    struct upstream *up = clientp;
    struct upstream_socket *us = upstream_socket_find(up, fd);

    if (us != NULL) {
        upstream_socket_watch(us, 0);
        up->sockets[fd] = NULL;
        free(us);
    }
    return close(fd);
}

/* CURLMOPT_TIMERFUNCTION: arm our one timer; -1 disarms it. */
static int upstream_on_timer_change(CURLM *multi, long timeout_ms, void *userp)
{
    struct upstream *up = userp;
    struct timeval tv;

    (void)multi;
    if (timeout_ms < 0) {
        evtimer_del(&up->timer);
        return 0;
    }
    tv = clock_ms_to_timeval((uint64_t)timeout_ms);
    evtimer_add(&up->timer, &tv);
    return 0;
}


void upstream_socket_wire(struct upstream *up)
{
    evtimer_assign(&up->timer, up->base, upstream_on_timeout, up);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETFUNCTION, upstream_on_socket);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETDATA, up);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERFUNCTION, upstream_on_timer_change);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERDATA, up);
}

void upstream_socket_wire_easy(struct upstream *up, CURL *e)
{
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, upstream_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, up);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, upstream_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, up);
}

void upstream_sockets_free(struct upstream *up)
{
    evtimer_del(&up->timer);
    for (size_t fd = 0; fd < up->n_sockets; fd++) {
        if (up->sockets[fd] != NULL) {
            upstream_socket_watch(up->sockets[fd], 0);
            free(up->sockets[fd]);
        }
    }
    free(up->sockets);
    up->sockets = NULL;
    up->n_sockets = 0;
}
