/*
 * listener.c - listening sockets; see listener.h.
 */
#include "listener.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "config.h"

#define LISTENER_BACKLOG 511

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
 * A listening socket on ep; with share_port, one of several sockets on the
 * port (SO_REUSEPORT), the kernel spreading connections among them.
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
