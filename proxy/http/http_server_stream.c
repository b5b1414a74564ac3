/*
 * http_server_stream.c - streamed requests and answers of http_server
 * (http_server.h, "streaming"): a body handed on as it arrives, at most a
 * window of it waiting, and an answer written as its pieces come, in
 * Content-Length, chunked (RFC 9112 section 7.1) or close-delimited framing.
 * Back-pressure both ways: parsing stops while the body's window is full
 * (and the connection's input bound then stops reading the socket), and
 * the writable callback tells when the client has taken the answer's bytes.
 */
#include "http_server_int.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>

#include "http_wire.h"

void http_server_stream_body(struct http_req *req, size_t window,
                             void (*readable)(struct http_req *req, void *arg), void *arg)
{
    req->held = true;
    req->window = window > 0 ? window : 1;
    req->body_limit = SIZE_MAX;
    req->readable = readable;
    req->readable_arg = arg;
}

void http_server_body_resume(struct http_req *req)
{
    struct http_conn *c = req->conn;

    if (c == NULL || !c->body_full || evbuffer_get_length(req->body) >= req->window)
        return;
    c->body_full = false;
    http_parser_pause(&c->parser, 0);
    http_conn_kick(c);
}

bool http_server_body_complete(const struct http_req *req)
{
    return req->body_complete;
}

int http_server_reply_start(struct http_req *req, int status, const char *reason,
                            long long content_length)
{
    struct http_conn *c = req->conn;

    if (c == NULL || req->answered || req->replying)
        return -1;
    req->status = status;
    req->replying = true;
    req->bodiless_out = req->command == EVHTTP_REQ_HEAD || http_wire_status_bodiless(status);
    http_conn_end_after(c, req);
    if (content_length < 0 && !req->bodiless_out) {
        if (req->major == 1 && req->minor >= 1)
            req->chunked_out = true;
        else
            c->close_after = true; /* HTTP/1.0: the end of the answer is the end of the connection */
    }
    event_del(c->deadline);
    if (http_conn_write_head(c, req, reason, content_length, req->chunked_out) != 0)
        return -1;
    http_conn_flush(c);
    return 0;
}

int http_server_reply_data(struct http_req *req, struct evbuffer *data)
{
    struct http_conn *c = req->conn;
    struct evbuffer *out;
    size_t len = evbuffer_get_length(data);
    int rc = 0;

    if (c == NULL || !req->replying || req->bodiless_out || len == 0) {
        evbuffer_drain(data, len);
        return c != NULL && req->replying ? 0 : -1;
    }
    out = bufferevent_get_output(c->bev);
    if (req->chunked_out)
        rc |= evbuffer_add_printf(out, "%zx\r\n", len) < 0;
    rc |= evbuffer_add_buffer(out, data);
    if (req->chunked_out)
        rc |= evbuffer_add(out, "\r\n", 2);
    http_conn_flush(c);
    return rc != 0 ? -1 : 0;
}

size_t http_server_output_pending(const struct http_req *req)
{
    return req->conn != NULL ? evbuffer_get_length(bufferevent_get_output(req->conn->bev)) : 0;
}

void http_server_on_writable(struct http_req *req, size_t below,
                             void (*cb)(struct http_req *req, void *arg), void *arg)
{
    struct http_conn *c = req->conn;

    if (c == NULL)
        return;
    req->writable = cb;
    req->writable_arg = arg;
    bufferevent_setwatermark(c->bev, EV_WRITE, below, 0);
}

void http_server_reply_end(struct http_req *req, const struct evkeyvalq *trailers)
{
    struct http_conn *c = req->conn;

    if (req->answered)
        return;
    req->answered = true;
    req->writable = NULL;
    if (c == NULL) { /* the client went away: its handler was told */
        http_req_free(req);
        return;
    }
    if (req->chunked_out) {
        struct evbuffer *out = bufferevent_get_output(c->bev);
        const struct evkeyval *h;
        evbuffer_add(out, "0\r\n", 3);
        if (trailers != NULL)
            TAILQ_FOREACH(h, trailers, next)
                evbuffer_add_printf(out, "%s: %s\r\n", h->key, h->value);
        evbuffer_add(out, "\r\n", 2);
    }
    if (c->state == CONN_BODY)
        c->close_after = true; /* the rest of the body stays unread */
    c->state = CONN_WRITING;
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    http_conn_flush(c); /* done from the loop once nothing is left to write */
}

void http_server_reply_abort(struct http_req *req)
{
    struct http_conn *c = req->conn;

    req->done = NULL; /* the handler knows */
    if (c != NULL) {
        /* a reset, not a FIN: an answer cut short must not look whole (HTTP/1.0 ends at close) */
        struct linger reset = { .l_onoff = 1, .l_linger = 0 };
        setsockopt(bufferevent_getfd(c->bev), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        c->req = NULL;
        req->conn = NULL;
        http_conn_free(c);
    }
    http_req_free(req);
}
