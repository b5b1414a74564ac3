/*
 * listener.h - the listening sockets (each served by an http_server, which
 * pauses accepting when accept(2) runs out of descriptors): SO_REUSEPORT when
 * several workers share the client port, and the lock that keeps a second
 * proxy off the endpoint.
 */
#ifndef IDEM_LISTENER_H
#define IDEM_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct evconnlistener;
struct endpoint;

/*
 * Bind a listening socket on ep (SO_REUSEADDR, SO_REUSEPORT when share_port;
 * with check_port, first a bind without SO_REUSEPORT, so that a port another
 * process holds is refused; close-on-exec, backlog 511), not yet
 * accepting (LEV_OPT_DISABLED), without callbacks: its owner sets them and
 * handles accept errors. Returns NULL with err (errlen bytes) when it
 * cannot bind.
 */
struct evconnlistener *listener_bind(struct event_base *base, const struct endpoint *ep,
                                     bool share_port, bool check_port, char *err, size_t errlen);

/*
 * With SO_REUSEPORT two proxies starting at the same moment could both pass
 * the bind check: take a lock named after ep (an abstract unix socket, gone
 * with the process). Returns its descriptor, or -1 with err.
 */
int listener_lock_endpoint(const struct endpoint *ep, char *err, size_t errlen);

#endif
