/*
 * listener.h - the listening sockets: an evhttp on each, SO_REUSEPORT when
 * several workers share the client port, a pause when accept(2) runs out of
 * descriptors, and the lock that keeps a second proxy off the endpoint.
 */
#ifndef IDEM_LISTENER_H
#define IDEM_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct evconnlistener;
struct endpoint;
struct listener_slot;

/*
 * An evhttp on base listening on ep; with share_port, one of several sockets
 * on the port (SO_REUSEPORT), the kernel spreading connections among them;
 * with check_port, first a bind without SO_REUSEPORT, so that a port another
 * process holds is refused. *bound and *slot (for listener_release) are set.
 * NULL with one line in err (errlen bytes), e.g. the port in use.
 */
struct evhttp *listener_open(struct event_base *base, const struct endpoint *ep, bool share_port,
                             bool check_port, struct evhttp_bound_socket **bound,
                             struct listener_slot **slot, char *err, size_t errlen);

/*
 * Bind a listening socket on ep (as listener_open does: SO_REUSEADDR,
 * SO_REUSEPORT when share_port, close-on-exec, backlog 511), not yet
 * accepting (LEV_OPT_DISABLED), without callbacks: its owner sets them and
 * handles accept errors. Returns NULL with err (errlen bytes) when it
 * cannot bind.
 */
struct evconnlistener *listener_bind(struct event_base *base, const struct endpoint *ep,
                                     bool share_port, bool check_port, char *err, size_t errlen);

/* Give back the slot of a listener being freed; NULL is fine. From the listener's thread. */
void listener_release(struct listener_slot *slot);

/*
 * With SO_REUSEPORT two proxies starting at the same moment could both pass
 * the bind check: take a lock named after ep (an abstract unix socket, gone
 * with the process). Returns its descriptor, or -1 with err.
 */
int listener_lock_endpoint(const struct endpoint *ep, char *err, size_t errlen);

#endif
