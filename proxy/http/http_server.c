/*
 * http_server.c - a small HTTP/1.1 server over bufferevents (http_server.h).
 * libhttp-parser reads the messages (RFC 9112: request line, fields,
 * Content-Length and chunked framing); this file keeps the bounds and the
 * state of each connection:
 *
 *   HEAD     reading a head (deadline: head_timeout_ms)
 *   BODY     reading a body the head callback accepted
 *   HANDLER  the handler holds the request
 *   WRITING  the answer is being written
 *   LINGER   the answer is out and the connection ends: the write side is
 *            shut, what the client still sends is read and dropped for a
 *            moment, so that closing with unread bytes (a TCP reset) does
 *            not destroy the answer before the client reads it
 */
#include "http_server_int.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include <http_parser.h>

#include "clock.h"
#include "http_wire.h"
#include "log.h"

#define HTTP_SERVER_ACCEPT_PAUSE_MS 100
#define HTTP_SERVER_LINGER_MS 2000
#define HTTP_SERVER_LINGER_BYTES (1024 * 1024) /* read and dropped at most by default, then closed */

static void http_conn_process(struct http_conn *c);

/* Tell req's handler how its answer went, once. */
static void http_req_done(struct http_req *req, bool written)
{
    void (*cb)(struct http_req *, bool, void *) = req->done;

    req->done = NULL;
    if (cb != NULL)
        cb(req, written, req->done_arg);
}

/* ---- connections ---- */

/*
 * The connection that has waited longest for a head (idle on keep-alive, or
 * sending one slowly), which a new connection at the cap replaces; NULL when
 * every connection has a request being read, handled or answered.
 */
static struct http_conn *http_server_evictable(const struct http_server *s)
{
    struct http_conn *c, *oldest = NULL;

    LIST_FOREACH(c, &s->conns, next)
        if (c->state == CONN_HEAD && (oldest == NULL || c->head_since_ms < oldest->head_since_ms))
            oldest = c;
    return oldest;
}

/*
 * Accept while under the cap, or while a connection waiting for a head can
 * make room: idle or slow clients cannot hold every slot against a probe.
 * At the cap with every connection busy, the listener waits (the kernel's
 * backlog holds the next ones).
 */
static void http_server_accept_more(struct http_server *s)
{
    bool want = !s->paused && (s->limits.max_connections == 0 || s->limits.close_over_cap ||
                               s->n_conns < s->limits.max_connections ||
                               http_server_evictable(s) != NULL);

    if (s->lev == NULL)
        return; /* being freed */

    if (want && !s->accepting)
        evconnlistener_enable(s->lev);
    else if (!want && s->accepting)
        evconnlistener_disable(s->lev);
    s->accepting = want;
}

/*
 * Free c now. A request its handler holds stays the handler's (answered
 * later into nothing); one being read or written is told and freed.
 */
void http_conn_free(struct http_conn *c)
{
    struct http_server *s = c->server;
    struct http_req *req = c->req;

    c->req = NULL;
    if (req != NULL) {
        /* a handler that holds req answers (or gives it up) later, maybe from done */
        bool handlers = !req->answered && (c->state == CONN_HANDLER || req->held);
        req->conn = NULL;
        req->peer[0] = '\0';
        http_req_done(req, false);
        if (!handlers)
            http_req_free(req);
    }
    LIST_REMOVE(c, next);
    bufferevent_free(c->bev);
    if (c->deadline != NULL)
        event_free(c->deadline);
    if (c->kick != NULL)
        event_free(c->kick);
    evbuffer_free(c->field);
    evbuffer_free(c->value);
    free(c);
    s->n_conns--;
    http_server_accept_more(s);
}

static void http_conn_arm(struct http_conn *c, unsigned ms)
{
    struct timeval tv = clock_ms_to_timeval(ms);

    event_add(c->deadline, &tv);
}

/* Ready for the next head on c (a new connection, or the previous answer is out). */
static void http_conn_next(struct http_conn *c)
{
    /* a fresh parser: a head answered at once left its message unfinished */
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    c->parser.lenient_http_headers = c->server->limits.lenient_values;
    c->state = CONN_HEAD;
    c->head_bytes = 0;
    c->fields = 0;
    c->in_value = c->line_done = false;
    c->head_done = c->message_done = c->too_large = c->head_error = false;
    c->body_full = c->body_grew = c->bad_chunk = false;
    c->crlf_at = 0;
    evbuffer_drain(c->field, evbuffer_get_length(c->field));
    evbuffer_drain(c->value, evbuffer_get_length(c->value));
    c->head_since_ms = clock_mono_ms();
    http_conn_arm(c, c->server->limits.idle_timeout_ms != 0 ? c->server->limits.idle_timeout_ms
                                                            : c->server->limits.head_timeout_ms);
    http_server_accept_more(c->server);
}

void http_conn_end_after(struct http_conn *c, const struct http_req *req)
{
    if (!http_should_keep_alive(&c->parser) || req->close ||
        (c->eof && evbuffer_get_length(bufferevent_get_input(c->bev)) == 0))
        c->close_after = true;
}

int http_conn_write_head(struct http_conn *c, const struct http_req *req, const char *reason,
                         long long content_length, bool chunked)
{
    bool keep_alive_10 = !c->close_after && req->major == 1 && req->minor == 0;

    return http_wire_write_head(bufferevent_get_output(c->bev), req->status, reason, &req->out,
                                content_length, chunked, c->close_after, keep_alive_10);
}

/* The status line, fields and body of req's answer into c's output. */
static void http_conn_write(struct http_conn *c, struct http_req *req, const char *reason,
                            struct evbuffer *body)
{
    size_t len = body != NULL ? evbuffer_get_length(body) : 0;

    http_conn_write_head(c, req, reason, (long long)len, false);
    if (body != NULL && req->command != EVHTTP_REQ_HEAD && !http_wire_status_bodiless(req->status))
        evbuffer_add_buffer(bufferevent_get_output(c->bev), body);
}

void http_server_reply(struct http_req *req, int status, const char *reason,
                       struct evbuffer *body)
{
    struct http_conn *c = req->conn;

    if (req->answered)
        return;
    req->answered = true;
    req->status = status;
    if (c == NULL) { /* the client went away */
        http_req_done(req, false);
        http_req_free(req);
        return;
    }
    if (c->state != CONN_HANDLER && c->state != CONN_WRITING) {
        /* from the head: the body stays unread, so the connection ends after this */
        if (req->content_length != 0)
            c->close_after = true;
    }
    http_conn_end_after(c, req);
    event_del(c->deadline);
    c->state = CONN_WRITING;
    http_conn_write(c, req, reason, body);
    http_conn_flush(c);
}

void http_conn_flush(struct http_conn *c)
{
    struct bufferevent *bev = c->bev;

    /*
     * Write in this loop pass: the bufferevent's own write callback is made
     * active (libevent's normal write path: write, then on an empty output
     * delete the write event and call http_conn_on_write) instead of waiting
     * for epoll to report the socket writable in a later pass. The write
     * event's add and delete then fold into nothing in the changelist
     * (worker.c), so an answer that fits the socket costs no epoll_ctl pair;
     * one that does not keeps its write event. evbuffer_write cannot do this:
     * a bufferevent freezes its output's front for its own callback.
     * libevent 2.1 has no setting for it (docs/performance.md).
     */
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        if (c->state == CONN_WRITING)
            http_conn_kick(c); /* all out: finish from the loop */
        return;
    }
    if (bufferevent_get_enabled(bev) & EV_WRITE)
        return; /* its write event is armed already */
    bufferevent_enable(bev, EV_WRITE);
    event_active(&bev->ev_write, EV_WRITE, 1);
}

/* c's answer is out: the next request, or the end. */
static void http_conn_written(struct http_conn *c)
{
    struct http_req *req = c->req;
    struct timeval tv;

    c->req = NULL;
    bufferevent_disable(c->bev, EV_WRITE); /* until the next answer does not fit at once */
    if (req != NULL) {
        http_req_done(req, true);
        http_req_free(req);
    }
    if (!c->close_after) {
        http_conn_next(c);
        http_conn_process(c);
        if (c->eof && c->state == CONN_HEAD) /* half-closed, and no whole request left */
            http_conn_free(c);
        return;
    }
    if (c->eof) { /* the client sends nothing more */
        http_conn_free(c);
        return;
    }
    /* a body may be on its way: read and drop it for a moment, then close */
    c->state = CONN_LINGER;
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    evbuffer_drain(bufferevent_get_input(c->bev), evbuffer_get_length(
                                                      bufferevent_get_input(c->bev)));
    tv = clock_ms_to_timeval(HTTP_SERVER_LINGER_MS);
    event_add(c->deadline, &tv);
}

/*
 * Answer c's request (or one made for it) at once from the server: 4xx, 5xx,
 * by the refuse callback, or in plain text.
 */
static void http_conn_refuse(struct http_conn *c, int status, enum http_server_fault fault)
{
    struct http_server *s = c->server;
    struct evbuffer *body;

    if (c->req == NULL && (c->req = http_req_new(c)) == NULL) {
        http_conn_free(c);
        return;
    }
    c->close_after = true;
    c->req->major = c->parser.http_major;
    c->req->minor = c->parser.http_minor;
    if (s->cb.refuse != NULL) {
        s->cb.refuse(c->req, status, fault, s->cb.arg);
        if (c->req == NULL || c->req->answered)
            return;
    }
    body = evbuffer_new();
    if (body != NULL)
        evbuffer_add_printf(body, "%d %s\n", status, http_wire_reason(status));
    evhttp_add_header(&c->req->out, "Content-Type", "text/plain; charset=utf-8");
    http_server_reply(c->req, status, NULL, body);
    if (body != NULL)
        evbuffer_free(body);
}


/* ---- the head ---- */

/* Answer Expect: 100-continue (RFC 9110 section 10.1.1) once the body is wanted. */
static void http_conn_continue(struct http_conn *c)
{
    const char *expect = evhttp_find_header(&c->req->in, "Expect");

    if (expect != NULL && strcasecmp(expect, "100-continue") == 0 &&
        (c->parser.http_major > 1 || (c->parser.http_major == 1 && c->parser.http_minor >= 1)))
        if (evbuffer_add_printf(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n") > 0)
            http_conn_flush(c);
}

static void http_conn_too_large(struct http_conn *c)
{
    struct http_server *s = c->server;

    c->close_after = true;
    if (s->cb.too_large != NULL)
        s->cb.too_large(c->req, s->cb.arg);
    if (c->state != CONN_WRITING)
        http_conn_refuse(c, 413, HTTP_SERVER_FAULT_FRAMING);
}

/* The head is in: bounds, method, target, then the head callback. */
static void http_conn_head(struct http_conn *c)
{
    struct http_server *s = c->server;
    struct http_req *req = c->req;

    struct evbuffer *in;
    const char *fault;

    event_del(c->deadline);
    req->major = c->parser.http_major;
    req->minor = c->parser.http_minor;
    if (!(c->parser.flags & F_CHUNKED) && c->parser.content_length != ULLONG_MAX &&
        c->parser.content_length > (unsigned long long)LLONG_MAX) {
        http_conn_refuse(c, 400, HTTP_SERVER_FAULT_FRAMING); /* a length no file has */
        return;
    }
    req->content_length = (c->parser.flags & F_CHUNKED) ? -1
                          : c->parser.content_length == ULLONG_MAX ? 0
                                                                   : (long long)c->parser.content_length;
    if (!http_wire_method(c->parser.method, &req->command) ||
        (s->limits.methods & (unsigned)req->command) == 0) {
        http_conn_refuse(c, 501, HTTP_SERVER_FAULT_METHOD);
        return;
    }
    req->uri = req->target != NULL
                   ? evhttp_uri_parse_with_flags(req->target, EVHTTP_URI_NONCONFORMANT)
                   : NULL;
    if (req->target == NULL ||
        (!s->limits.any_target && (req->uri == NULL || req->target[0] != '/'))) {
        http_conn_refuse(c, 400, HTTP_SERVER_FAULT_TARGET);
        return;
    }
    in = bufferevent_get_input(c->bev);
    fault = http_wire_head_fault((const char *)evbuffer_pullup(in, (ev_ssize_t)c->head_bytes),
                                 c->head_bytes);
    if (fault != NULL) {
        http_conn_refuse(c, 400, HTTP_SERVER_FAULT_FRAMING);
        return;
    }
    evbuffer_drain(in, c->head_bytes); /* the head is read: the parser has what it needs */
    c->state = CONN_BODY;
    s->cb.head(req, s->cb.arg);
    if (c->state != CONN_BODY)
        return; /* answered */
    if (req->content_length > 0 && (unsigned long long)req->content_length > req->body_limit) {
        http_conn_too_large(c);
        return;
    }
    if (req->content_length != 0)
        http_conn_continue(c);
    http_parser_pause(&c->parser, 0);
}

/* What the parser stopped for, or its error. Returns whether to go on parsing. */
static bool http_conn_after_parse(struct http_conn *c)
{
    struct http_server *s = c->server;
    enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);

    if (c->req != NULL && c->req->held &&
        (c->head_error || c->too_large || c->bad_chunk || (err != HPE_OK && err != HPE_PAUSED))) {
        /*
         * A streamed body that cannot be read on (a bad chunk, trailers past the
         * bounds): its handler holds the request and may have begun an answer,
         * so no second answer is made; the connection ends (from the loop), and
         * the handler learns it from its done callback and stops the upstream.
         */
        c->failed = true;
        http_conn_kick(c);
        return false;
    }
    if (c->head_error) {
        http_conn_refuse(c, 431, HTTP_SERVER_FAULT_HEAD_TOO_LARGE);
        return false;
    }
    if (c->bad_chunk || (err != HPE_OK && err != HPE_PAUSED)) {
        if (c->bad_chunk)
            http_conn_refuse(c, 400, HTTP_SERVER_FAULT_FRAMING);
        else if (err == HPE_HEADER_OVERFLOW)
            http_conn_refuse(c, 431, HTTP_SERVER_FAULT_HEAD_TOO_LARGE);
        else if (err == HPE_INVALID_METHOD)
            http_conn_refuse(c, 501, HTTP_SERVER_FAULT_METHOD);
        else
            http_conn_refuse(c, 400, c->state == CONN_HEAD && !c->line_done
                                         ? HTTP_SERVER_FAULT_TARGET : HTTP_SERVER_FAULT_FRAMING);
        return false;
    }
    if (c->state == CONN_HEAD && c->head_bytes > s->limits.max_head_bytes) {
        http_conn_refuse(c, 431, HTTP_SERVER_FAULT_HEAD_TOO_LARGE);
        return false;
    }
    if (c->head_done) {
        c->head_done = false;
        http_conn_head(c);
        if (c->state != CONN_BODY)
            return false;
    }
    if (c->too_large) {
        http_conn_too_large(c);
        return false;
    }
    if (c->message_done) {
        c->message_done = false;
        c->state = CONN_HANDLER;
        if (c->req->window != 0) { /* streamed: the handler learns it from readable */
            c->req->body_complete = true;
            c->body_grew = true;
            return false;
        }
        s->cb.request(c->req, s->cb.arg);
        return false;
    }
    return !c->body_full;
}

/* Parse what c's input holds, as far as its state lets. */
static void http_conn_process(struct http_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);

    /*
     * A head's bytes stay in the input until the head is whole (http_conn_head
     * checks them, then drains them): no second copy of a head being read.
     */
    while (!c->failed &&
           ((c->state == CONN_HEAD && evbuffer_get_length(in) > c->head_bytes) ||
            (c->state == CONN_BODY && !c->body_full && evbuffer_get_length(in) > 0))) {
        struct evbuffer_iovec v;
        struct evbuffer_ptr at;
        size_t len, n;

        if (c->state == CONN_HEAD &&
            evbuffer_ptr_set(in, &at, c->head_bytes, EVBUFFER_PTR_SET) != 0)
            return;
        if (evbuffer_peek(in, -1, c->state == CONN_HEAD ? &at : NULL, &v, 1) < 1)
            return;
        len = v.iov_len;
        if (c->state == CONN_HEAD) {
            /* never parse more than one byte past the bound */
            size_t room = c->server->limits.max_head_bytes + 1 - c->head_bytes;
            if (len > room)
                len = room;
        }
        c->seg = v.iov_base;
        c->seg_end = c->seg + len;
        if (c->state == CONN_BODY && c->crlf_at != 0 && http_server_crlf_check(c) != 0) {
            http_conn_after_parse(c); /* refused: a bad chunk */
            break;
        }
        n = http_parser_execute(&c->parser, &c->server->settings, v.iov_base, len);
        if (c->state == CONN_HEAD) {
            if (c->head_bytes == 0 && n > 0 && c->server->limits.idle_timeout_ms != 0)
                http_conn_arm(c, c->server->limits.head_timeout_ms); /* the header timeout */
            c->head_bytes += n;
        } else {
            evbuffer_drain(in, n);
        }
        if (!http_conn_after_parse(c))
            break;
    }
    if (c->eof && c->state == CONN_BODY && !c->body_full && !c->failed &&
        evbuffer_get_length(in) == 0) {
        c->failed = true; /* the client closed before its body's end */
        http_conn_kick(c);
    }
    if (c->req != NULL && c->req->window != 0 && c->body_grew) {
        c->body_grew = false;
        c->req->readable_due = true;
        http_conn_kick(c);
    }
}

void http_conn_kick(struct http_conn *c)
{
    event_active(c->kick, EV_TIMEOUT, 1);
}

/* Deferred work of c (http_conn_kick), from the loop. */
static void http_conn_on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    struct http_req *req = c->req;

    (void)fd;
    (void)what;
    if (c->failed) {
        http_conn_free(c);
        return;
    }
    if (c->state == CONN_WRITING) { /* an answer ended with nothing left to write */
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            http_conn_written(c);
        return;
    }
    if (c->state == CONN_BODY && !c->body_full)
        http_conn_process(c); /* may free nothing: parsing only flags */
    if (req != NULL && req == c->req && req->readable_due && req->readable != NULL) {
        req->readable_due = false;
        req->readable(req, req->readable_arg); /* may end c */
    }
}

/* ---- bufferevent callbacks ---- */

static void http_conn_on_read(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    if (c->state == CONN_LINGER) {
        c->lingered += evbuffer_get_length(in);
        evbuffer_drain(in, evbuffer_get_length(in));
        if (c->lingered > (c->server->limits.linger_bytes != 0 ? c->server->limits.linger_bytes
                                                               : HTTP_SERVER_LINGER_BYTES))
            http_conn_free(c);
    } else
        http_conn_process(c);
}

static void http_conn_on_write(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;

    (void)bev;
    if (c->state == CONN_WRITING) {
        http_conn_written(c);
    } else if (c->req != NULL && c->req->writable != NULL) { /* a streamed answer drained */
        void (*cb)(struct http_req *, void *) = c->req->writable;
        c->req->writable = NULL;
        cb(c->req, c->req->writable_arg);
    }
}

static void http_conn_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct http_conn *c = arg;

    if ((what & BEV_EVENT_EOF) && (c->state == CONN_HANDLER || c->state == CONN_WRITING)) {
        /*
         * A half-close: the client still reads its answer, and those of the
         * requests it pipelined before; the connection ends after the last.
         */
        c->eof = true;
        if (evbuffer_get_length(bufferevent_get_input(bev)) == 0)
            c->close_after = true;
        return;
    }
    if ((what & BEV_EVENT_EOF) && c->state == CONN_BODY && c->req != NULL && c->req->held &&
        (evbuffer_get_length(bufferevent_get_input(bev)) > 0 || c->body_full)) {
        /* a streamed body whose last bytes wait in the input: read them, then see */
        c->eof = true;
        return;
    }
    if ((what & BEV_EVENT_TIMEOUT) && (what & BEV_EVENT_READING) &&
        (c->state == CONN_HANDLER || c->state == CONN_WRITING)) {
        bufferevent_enable(bev, EV_READ); /* a client waiting for its answer is not idle */
        return;
    }
    http_conn_free(c); /* EOF, error, or a read or write timeout */
}

/* The head's deadline, or the end of a linger. */
static void http_conn_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_conn_free(arg);
}

static void http_server_on_accept(struct evconnlistener *lev, evutil_socket_t fd,
                                  struct sockaddr *sa, int salen, void *arg)
{
    struct http_server *s = arg;
    struct http_conn *c = calloc(1, sizeof(*c));
    struct timeval rd = clock_ms_to_timeval(s->limits.read_timeout_ms);
    struct timeval wr = clock_ms_to_timeval(s->limits.write_timeout_ms);

    (void)lev;
    if (s->limits.max_connections != 0 && s->n_conns >= s->limits.max_connections) {
        struct http_conn *oldest = s->limits.close_over_cap ? NULL : http_server_evictable(s);

        if (oldest == NULL) { /* every connection busy, or none evicted: close this one */
            evutil_closesocket(fd);
            free(c);
            s->refused++;
            http_server_accept_more(s);
            return;
        }
        http_conn_free(oldest);
    }
    if (c != NULL)
        c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (c == NULL || c->bev == NULL || (c->field = evbuffer_new()) == NULL ||
        (c->value = evbuffer_new()) == NULL ||
        (c->kick = event_new(s->base, -1, 0, http_conn_on_kick, c)) == NULL ||
        (c->deadline = evtimer_new(s->base, http_conn_on_deadline, c)) == NULL) {
        if (c != NULL && c->bev != NULL)
            bufferevent_free(c->bev);
        else
            evutil_closesocket(fd);
        if (c != NULL) {
            if (c->field != NULL)
                evbuffer_free(c->field);
            if (c->value != NULL)
                evbuffer_free(c->value);
            if (c->kick != NULL)
                event_free(c->kick);
        }
        free(c);
        return;
    }
    if (getnameinfo(sa, (socklen_t)salen, c->peer, sizeof(c->peer), NULL, 0, NI_NUMERICHOST) != 0)
        c->peer[0] = '\0';
    c->server = s;
    LIST_INSERT_HEAD(&s->conns, c, next);
    s->n_conns++;
    http_server_accept_more(s);
    bufferevent_setcb(c->bev, http_conn_on_read, http_conn_on_write, http_conn_on_event, c);
    bufferevent_set_timeouts(c->bev, &rd, &wr);
    /* a client that pipelines while its request is handled waits: bounded input */
    bufferevent_setwatermark(c->bev, EV_READ, 0, s->limits.max_head_bytes + 1);
    /* EV_WRITE (on by default) only while an answer waits for the socket (http_conn_flush) */
    bufferevent_disable(c->bev, EV_WRITE);
    bufferevent_enable(c->bev, EV_READ);
    http_conn_next(c);
}

static void http_server_on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;

    (void)fd;
    (void)what;
    s->paused = false;
    http_server_accept_more(s);
}

/* accept(2) failed (EMFILE, ENFILE, ENOBUFS): pause accepting instead of spinning. */
static void http_server_on_accept_error(struct evconnlistener *lev, void *arg)
{
    struct http_server *s = arg;
    struct timeval pause = clock_ms_to_timeval(HTTP_SERVER_ACCEPT_PAUSE_MS);
    int err = EVUTIL_SOCKET_ERROR();

    (void)lev;
    if (!s->paused)
        log_msg(LOG_ERROR, "accept: %s; pausing new connections for %d ms",
                evutil_socket_error_to_string(err), HTTP_SERVER_ACCEPT_PAUSE_MS);
    s->paused = true;
    http_server_accept_more(s);
    evtimer_add(s->resume, &pause);
}

struct http_server *http_server_new(struct event_base *base, struct evconnlistener *lev,
                                    const struct http_server_limits *limits,
                                    const struct http_server_callbacks *cb)
{
    struct http_server *s = calloc(1, sizeof(*s));

    if (s == NULL || (s->resume = evtimer_new(base, http_server_on_resume, s)) == NULL) {
        free(s);
        evconnlistener_free(lev);
        return NULL;
    }
    s->base = base;
    s->lev = lev;
    s->limits = *limits;
    s->cb = *cb;
    LIST_INIT(&s->conns);
    http_server_parser_settings(&s->settings);
    evconnlistener_set_cb(lev, http_server_on_accept, s);
    evconnlistener_set_error_cb(lev, http_server_on_accept_error);
    s->accepting = false;
    http_server_accept_more(s);
    return s;
}

void http_server_free(struct http_server *s)
{
    if (s == NULL)
        return;
    if (s->lev != NULL)
        evconnlistener_free(s->lev);
    s->lev = NULL;
    s->paused = true; /* no re-enabling from here on */
    s->accepting = false;
    while (!LIST_EMPTY(&s->conns))
        http_conn_free(LIST_FIRST(&s->conns));
    event_free(s->resume);
    free(s);
}

void http_server_set_limits(struct http_server *s, const struct http_server_limits *limits)
{
    s->limits = *limits;
    http_server_accept_more(s);
}

unsigned long long http_server_refused(const struct http_server *s)
{
    return s != NULL ? s->refused : 0;
}

void http_server_stop_accepting(struct http_server *s)
{
    if (s->lev != NULL)
        evconnlistener_free(s->lev);
    s->lev = NULL;
    s->accepting = false;
}

unsigned http_server_connections(const struct http_server *s)
{
    return s != NULL ? s->n_conns : 0;
}

enum evhttp_cmd_type http_server_command(const struct http_req *req) { return req->command; }
const char *http_server_target(const struct http_req *req) { return req->target; }
const struct evhttp_uri *http_server_uri(const struct http_req *req) { return req->uri; }
struct evkeyvalq *http_server_input_headers(struct http_req *req) { return &req->in; }
struct evkeyvalq *http_server_output_headers(struct http_req *req) { return &req->out; }
struct evbuffer *http_server_body(struct http_req *req) { return req->body; }
struct evkeyvalq *http_server_input_trailers(struct http_req *req) { return &req->trailers; }
void http_server_close_after(struct http_req *req) { req->close = true; }
void *http_server_attached(const struct http_req *req) { return req->attached; }

void http_server_attach(struct http_req *req, void *data, void (*release)(void *data))
{
    req->attached = data;
    req->release = release;
}

void http_server_version(const struct http_req *req, int *major, int *minor)
{
    *major = req->major;
    *minor = req->minor;
}
long long http_server_content_length(const struct http_req *req) { return req->content_length; }
const char *http_server_peer(const struct http_req *req) { return req->peer; }
int http_server_status(const struct http_req *req) { return req->status; }

void http_server_accept_body(struct http_req *req, size_t max_bytes)
{
    req->body_limit = max_bytes;
}

void http_server_on_done(struct http_req *req,
                         void (*cb)(struct http_req *req, bool written, void *arg), void *arg)
{
    req->done = cb;
    req->done_arg = arg;
}
