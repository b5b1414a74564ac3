/*
 * reply.c - the answers of the client listener; see reply.h.
 */
#include "reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "headers.h"
#include "oom.h"
#include "record.h"

struct evbuffer *reply_problem(struct evhttp_request *req, enum problem p, int status,
                               const char *detail, int retry_after_s, bool replayed,
                               bool stripe)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    struct evbuffer *body = oom_check(evbuffer_new(), "a problem answer");
    size_t len = 0;
    char *json = stripe ? problem_stripe_json(p, detail, &len)
                        : problem_json(p, status, detail, &len);

    evhttp_add_header(out, "Content-Type", stripe ? PROBLEM_STRIPE_CONTENT_TYPE
                                                  : PROBLEM_CONTENT_TYPE);
    evhttp_add_header(out, "Cache-Control", "no-store");
    if (stripe)
        evhttp_add_header(out, PROBLEM_STRIPE_RETRY_HEADER, problem_retryable(p) ? "true" : "false");
    if (retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", retry_after_s);
        evhttp_add_header(out, "Retry-After", v);
    }
    if (replayed)
        evhttp_add_header(out, "Idempotent-Replayed", "true");
    if (body != NULL && json != NULL)
        evbuffer_add(body, json, len);
    free(json);
    return body;
}

void reply_move_headers(struct evhttp_request *req, struct evkeyvalq *from)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *connection = evhttp_find_header(from, "Connection");
    struct evkeyval *h, *next;

    for (h = TAILQ_FIRST(from); h != NULL; h = next) {
        next = TAILQ_NEXT(h, next);
        if (header_is_hop_by_hop(h->key) || strcasecmp(h->key, "Content-Length") == 0 ||
            header_named_by_connection(connection, h->key) || strpbrk(h->value, "\r\n") != NULL)
            continue;
        TAILQ_REMOVE(from, h, next);
        TAILQ_INSERT_TAIL(out, h, next);
    }
}

struct evbuffer *reply_replay(struct evhttp_request *req, const struct record *rec)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    struct evbuffer *body = oom_check(evbuffer_new(), "a replayed answer");
    char small[1024];

    /* name and value NUL-terminated in one buffer; no stored field is too long to replay */
    for (size_t i = 0; i < rec->n_headers; i++) {
        const struct record_field *f = &rec->headers[i];
        size_t need = f->name_len + 1 + f->value_len + 1;
        char *name = need <= sizeof(small) ? small : malloc(need);
        if (name != NULL) {
            char *value = name + f->name_len + 1;
            memcpy(name, f->name, f->name_len);
            name[f->name_len] = '\0';
            memcpy(value, f->value, f->value_len);
            value[f->value_len] = '\0';
            evhttp_add_header(out, name, value);
        }
        if (name != small)
            free(name);
    }
    evhttp_add_header(out, "Idempotent-Replayed", "true");
    if (body != NULL)
        evbuffer_add(body, rec->body, rec->body_len);
    return body;
}

/*
 * One client connection. evhttp stops reading a connection while a request
 * is handled (bufferevent_disable(EV_READ) once the request is read) and
 * reads again once the answer is written: with nothing else watching the
 * socket, that is an epoll_ctl to take it out of epoll and one to put it
 * back, per request, as the answer mostly comes in a later loop pass.
 * `watch` is a second EV_READ event on the socket: libevent keeps a socket
 * in epoll while any event wants it, so evhttp's pause and resume change
 * nothing in the kernel. watch itself does nothing while evhttp reads; while
 * evhttp pauses, bytes or an EOF the client sends (a pipelined request, a
 * close) keep the level-triggered socket readable, so on its second call in
 * one pause watch takes itself out (as before: one epoll_ctl) until the
 * answer is sent. Nothing is read here: evhttp reads everything, as before.
 *
 * An answer is out of our hands only once evhttp has written it all, or its
 * connection has closed: until then a SIGTERM drain must not end (it would
 * free the connection with the answer unsent). `answering` says an answer is
 * being written; evhttp's close callback of the connection (reply_on_closed,
 * set once per connection) settles it, removes watch before evhttp closes
 * the socket, and frees the record.
 */
struct reply_conn {
    struct reply_conns *conns;
    struct evhttp_connection *evcon;
    struct bufferevent *bev;        /* evhttp's, for its socket and its read state */
    evutil_socket_t fd;
    struct event watch;
    bool watching;                  /* watch is added */
    int paused_calls;               /* calls of watch since evhttp paused reading */
    bool answering;                 /* counted in conns->unflushed */
    struct budget_hold answer;      /* while answering: the answer's bytes (limits.max_buffered) */
};

void reply_conns_init(struct reply_conns *conns, struct event_base *base,
                      _Atomic unsigned *unflushed)
{
    conns->base = base;
    conns->unflushed = unflushed;
    conns->by_fd = NULL;
    conns->n_by_fd = 0;
}

static void reply_conn_free(struct reply_conn *rc)
{
    if (rc->watching)
        event_del(&rc->watch);
    if (rc->answering)
        (*rc->conns->unflushed)--;
    budget_hold_set(&rc->answer, 0);
    rc->conns->by_fd[rc->fd] = NULL;
    free(rc);
}

void reply_conns_deinit(struct reply_conns *conns)
{
    for (size_t fd = 0; fd < conns->n_by_fd; fd++) {
        struct reply_conn *rc = conns->by_fd[fd];
        if (rc != NULL) {
            evhttp_connection_set_closecb(rc->evcon, NULL, NULL);
            reply_conn_free(rc);
        }
    }
    free(conns->by_fd);
    conns->by_fd = NULL;
    conns->n_by_fd = 0;
}

/* evhttp is freeing the connection (before it closes the socket). */
static void reply_on_closed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    reply_conn_free(arg);
}

static void reply_on_watch(evutil_socket_t fd, short what, void *arg)
{
    struct reply_conn *rc = arg;

    (void)fd;
    (void)what;
    if (bufferevent_get_enabled(rc->bev) & EV_READ) {
        rc->paused_calls = 0; /* evhttp reads this */
    } else if (++rc->paused_calls >= 2) {
        event_del(&rc->watch);
        rc->watching = false;
    }
}

static void reply_conn_watch(struct reply_conn *rc)
{
    rc->paused_calls = 0;
    if (!rc->watching && event_add(&rc->watch, NULL) == 0)
        rc->watching = true;
}

/* The record of evcon, made on its first request; NULL when out of memory. */
static struct reply_conn *reply_conn_of(struct reply_conns *conns,
                                        struct evhttp_connection *evcon)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    evutil_socket_t fd = bev != NULL ? bufferevent_getfd(bev) : -1;
    struct reply_conn *rc;

    if (fd < 0)
        return NULL;
    if ((size_t)fd < conns->n_by_fd && (rc = conns->by_fd[fd]) != NULL) {
        if (rc->evcon == evcon)
            return rc;
        /*
         * evhttp freed the old connection without its close callback: libevent
         * 2.1 never does for an incoming one (it calls it whenever the socket
         * is still set), but if it did, the old evcon is gone: drop the record
         * without touching it.
         */
        reply_conn_free(rc);
    }
    if ((size_t)fd >= conns->n_by_fd) {
        size_t n = conns->n_by_fd > 0 ? conns->n_by_fd : 64;
        struct reply_conn **grown;
        while (n <= (size_t)fd)
            n *= 2;
        grown = realloc(conns->by_fd, n * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        memset(grown + conns->n_by_fd, 0, (n - conns->n_by_fd) * sizeof(*grown));
        conns->by_fd = grown;
        conns->n_by_fd = n;
    }
    rc = calloc(1, sizeof(*rc));
    if (rc == NULL)
        return NULL;
    rc->conns = conns;
    rc->evcon = evcon;
    rc->bev = bev;
    rc->fd = fd;
    event_assign(&rc->watch, conns->base, fd, EV_READ | EV_PERSIST, reply_on_watch, rc);
    conns->by_fd[fd] = rc;
    evhttp_connection_set_closecb(evcon, reply_on_closed, rc);
    return rc;
}

void reply_watch(struct reply_conns *conns, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct reply_conn *rc = evcon != NULL ? reply_conn_of(conns, evcon) : NULL;

    if (rc != NULL)
        reply_conn_watch(rc);
}

static void reply_on_flushed(struct evhttp_request *req, void *arg)
{
    struct reply_conn *rc = arg;

    (void)req;
    if (rc->answering) {
        rc->answering = false;
        (*rc->conns->unflushed)--;
    }
    budget_hold_set(&rc->answer, 0);
}

/*
 * The reason phrase of statuses libevent 2.1's table lacks (it stops at 417
 * and 505 and would send "Client Error" for a 422); NULL lets libevent pick.
 * RFC 9110 section 15 and RFC 6585.
 */
static const char *reply_reason(int status)
{
    switch (status) {
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 511: return "Network Authentication Required";
    }
    return NULL;
}

/*
 * Write the answer in this loop iteration instead of the next. evhttp_send_reply
 * only queues it and enables the connection's write event; left alone, epoll
 * reports the socket writable one loop later and the write event is enabled
 * in one loop (an epoll_ctl) and disabled in the next (another). Activating
 * the bufferevent's own write event runs libevent's normal write path
 * (bufferevent_writecb: write, and on an empty buffer disable EV_WRITE and
 * tell evhttp the answer is out) from the active queue of this iteration,
 * outside our call stack, so the enable and disable fold into nothing in the
 * changelist (worker.c). A socket that cannot take it all keeps its write
 * event, as before. libevent 2.1 has no setting for this (docs/performance.md).
 */
static void reply_write_now(struct evhttp_connection *conn)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);

    if (bev != NULL && evbuffer_get_length(bufferevent_get_output(bev)) > 0)
        event_active(&bev->ev_write, EV_WRITE, 1);
}

void reply_send(struct evhttp_request *req, int status, struct evbuffer *body, bool close,
                struct reply_conns *conns, struct budget_hold *held)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    struct reply_conn *rc = conn != NULL ? reply_conn_of(conns, conn) : NULL;

    if (close || (conn != NULL && rc == NULL)) /* no record: out of memory, close after it */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    if (body != NULL && evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        /* RFC 9110 9.3.2: never a body on HEAD; libevent 2.1 would write it */
        evbuffer_free(body);
        body = NULL;
    }
    if (rc != NULL) { /* else the client is gone: evhttp_send_reply just frees req */
        (*conns->unflushed)++;
        rc->answering = true;
        if (body != NULL) /* the bytes stay in evhttp's output until the client read them */
            budget_hold_move(&rc->answer, held);
        evhttp_request_set_on_complete_cb(req, reply_on_flushed, rc);
    }
    budget_hold_set(held, 0);
    evhttp_send_reply(req, status, reply_reason(status), body);
    if (rc != NULL) {
        reply_conn_watch(rc); /* evhttp reads again once this is out */
        reply_write_now(conn);
    }
    if (body != NULL)
        evbuffer_free(body);
}
