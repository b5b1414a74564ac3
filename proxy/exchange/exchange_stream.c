/*
 * exchange_stream.c - pass-through exchanges, streamed both ways
 * (docs/operations.md#streaming): a request the proxy does not protect (no
 * route, a method the route does not protect, no key where none is
 * required), decided from its head, goes upstream as its body arrives, and
 * the answer goes to the client as it arrives. Each direction holds at most
 * limits.stream_window bytes: the upstream transfer stops sending while the
 * client's body has not come, and stops receiving while the client has not
 * taken the answer (libcurl's pause, http_server's windows). Nothing is
 * claimed or recorded. A client that goes away aborts the upstream transfer;
 * an upstream that breaks off mid-answer cuts the client's answer short (its
 * connection is closed, so the client sees the answer incomplete).
 *
 * The exchange stays PASSING until its answer is over; its one reference is
 * the upstream transfer's.
 */
#include "exchange_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "budget.h"
#include "config.h"
#include "http_server.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"
#include "reply.h"
#include "upstream.h"

/* upstream read: the client's body, as far as it has come. */
static long exchange_stream_read(char *buf, size_t max, void *arg)
{
    struct exchange *x = arg;
    int n;

    if (x->req == NULL)
        return UPSTREAM_READ_ABORT;
    n = evbuffer_remove(http_server_body(x->req), buf, max);
    if (n > 0) {
        http_server_body_resume(x->req); /* room in the window: read on */
        return n;
    }
    if (http_server_body_complete(x->req))
        return 0;
    x->send_paused = true;
    return UPSTREAM_READ_PAUSE;
}

static void exchange_stream_call(struct exchange *x);

/* http_server: more of the client's body, or its end. */
static void exchange_stream_readable(struct http_req *req, void *arg)
{
    struct exchange *x = arg;

    (void)req;
    if (!x->stream_started) {
        exchange_stream_call(x);
        return;
    }
    if (x->send_paused && x->call != NULL) {
        x->send_paused = false;
        upstream_resume_send(x->call);
    }
}

/* http_server: the client took the answer's bytes down to half a window. */
static void exchange_stream_writable(struct http_req *req, void *arg)
{
    struct exchange *x = arg;

    (void)req;
    if (x->recv_paused && x->call != NULL) {
        x->recv_paused = false;
        upstream_resume_recv(x->call);
    }
}

static void exchange_stream_on_done(struct http_req *req, bool written, void *arg);

int exchange_stream_begin(struct exchange *x, long long content_length)
{
    /* content_length: the answer's, as announced also for HEAD (-1 unknown) */
    if (x->req == NULL)
        return -1;
    reply_move_headers(x->req, &x->resp_headers);
    exchange_mark_executed(x); /* a protected answer too large to record: a first execution */
    if (http_server_reply_start(x->req, x->resp_status, NULL, content_length) != 0)
        return -1;
    x->stream_begun = true;
    x->set->unflushed++; /* until the client has the last byte or is gone */
    http_server_on_done(x->req, exchange_stream_on_done, x);
    return 0;
}

int exchange_stream_push(struct exchange *x, struct evbuffer *chunk)
{
    size_t window = config_stream_window(x->conf);

    if (x->req == NULL || http_server_reply_data(x->req, chunk) != 0)
        return -1;
    if (http_server_output_pending(x->req) < window)
        return 0;
    x->recv_paused = true;
    http_server_on_writable(x->req, window / 2, exchange_stream_writable, x);
    return UPSTREAM_DATA_PAUSE;
}

void exchange_stream_take_head(struct exchange *x, int status, const struct evkeyvalq *headers,
                               long long content_length)
{
    const struct evkeyval *h;

    TAILQ_FOREACH(h, headers, next)
        evhttp_add_header(&x->resp_headers, h->key, h->value);
    x->resp_status = status;
    x->resp_length = content_length;
}

/* upstream head: the answer's status and fields go to the client now. */
static int exchange_stream_head(int status, const struct evkeyvalq *headers,
                                long long content_length, void *arg)
{
    struct exchange *x = arg;

    exchange_stream_take_head(x, status, headers, content_length);
    return exchange_stream_begin(x, x->resp_length);
}

/* upstream data: a piece of the answer for the client; pause while its window is full. */
static int exchange_stream_data(struct evbuffer *chunk, void *arg)
{
    return exchange_stream_push(arg, chunk);
}

/* http_server: the client has its answer's last byte (written), or went away first. */
static void exchange_stream_on_done(struct http_req *req, bool written, void *arg)
{
    struct exchange *x = arg;

    if (x->stream_begun)
        x->set->unflushed--;
    if (written || exchange_state_answered(x->state))
        return; /* the answer was over: x is done with req already */
    if (x->state != X_PASSING) {
        /* protected: the upstream goes on (the answer is dropped) and its outcome is recorded */
        http_server_reply_abort(req);
        x->req = NULL;
        if (x->recv_paused && x->call != NULL) {
            x->recv_paused = false;
            upstream_resume_recv(x->call);
        }
        return;
    }
    /* gone mid-exchange: stop the upstream transfer, which will never call back */
    log_msg(LOG_INFO, "exchange: the client went away during a streamed %s; the upstream "
            "transfer is stopped", x->stream_begun ? "answer" : "request");
    if (x->call != NULL) {
        upstream_abort(x->call);
        x->call = NULL;
        x->upstream = UPSTREAM_BROKEN;
    }
    http_server_reply_abort(req);
    x->req = NULL;
    /* the access log's status: the answer's as begun, or nginx's 499 for "the client left" */
    exchange_answered_streamed(x, x->stream_begun ? x->resp_status : 499);
    exchange_unref(x); /* the transfer's */
}

void exchange_stream_noted(struct exchange *x, enum upstream_outcome outcome, const char *detail,
                           const char *cause, double upstream_ms)
{
    x->call = NULL;
    x->upstream_ms = upstream_ms;
    x->upstream = outcome;
    metrics_observe(x->set->metrics, METRICS_UPSTREAM_LATENCY, upstream_ms / 1000.0);
    if (outcome != UPSTREAM_ANSWERED)
        log_msg(LOG_WARN, "exchange %s: %s%s: %s", x->record_id[0] ? x->record_id : "-", detail,
                x->stream_begun ? " (the client's streamed answer is cut short)" : "",
                cause != NULL ? cause : "no reason given");
}

void exchange_stream_passed(struct exchange *x, enum upstream_outcome outcome,
                            const struct upstream_response *resp, const char *detail)
{
    if (!x->stream_begun) {
        /*
         * no byte of an answer went out: the client gets the proxy's own, as
         * unstreamed; upstream-unavailable only when nothing was sent
         */
        if (outcome == UPSTREAM_TIMEOUT)
            exchange_problem(x, PROBLEM_UPSTREAM_TIMEOUT, 504, detail, 0, false);
        else if (outcome == UPSTREAM_NOT_SENT)
            exchange_problem(x, PROBLEM_UPSTREAM_UNAVAILABLE, 502, detail, 0, false);
        else
            exchange_problem(x, PROBLEM_UPSTREAM_ANSWER_LOST, 502, detail, 0, false);
        return;
    }
    if (outcome == UPSTREAM_ANSWERED && x->req != NULL)
        reply_stream_end(x->req, resp->headers, &x->set->unflushed);
    else
        exchange_stream_cut(x);
    exchange_answered_streamed(x, x->resp_status);
}

/* upstream done: the answer is whole, or the transfer failed. */
static void exchange_stream_done(enum upstream_outcome outcome,
                                 const struct upstream_response *resp, const char *detail,
                                 const char *cause, double upstream_ms, void *arg)
{
    struct exchange *x = arg;

    exchange_stream_noted(x, outcome, detail, cause, upstream_ms);
    exchange_stream_passed(x, outcome, resp, detail);
    exchange_unref(x);
}

void exchange_stream_cut(struct exchange *x)
{
    if (x->req == NULL)
        return;
    /* the client's answer is cut short: closing its connection says so */
    reply_stream_cut(x->req, &x->set->unflushed);
    x->req = NULL;
}

void exchange_stream_start(struct exchange *x)
{
    size_t window = config_stream_window(x->conf);

    /* streams take at most half the budget: unkeyed traffic never locks out the payments */
    if (!budget_admit_share(x->set->budget, 2 * window, 2)) {
        exchange_overloaded(x);
        return;
    }
    budget_hold_take(&x->hold_body, window);
    budget_hold_take(&x->hold_answer, window);
    if (!exchange_set_state(x, X_PASSING))
        return;
    /*
     * The upstream transfer starts at the first readable (the first body
     * bytes, or the end of a request without one): a small body is then
     * whole and goes in the same send as the head, with no pause.
     */
    http_server_stream_body(x->req, window, exchange_stream_readable, x);
    http_server_on_done(x->req, exchange_stream_on_done, x);
    exchange_ref(x); /* the transfer's, from now: on_done may end x before it starts */
}

/* Start x's upstream transfer: the body whole when it has all come, else as it comes. */
static void exchange_stream_call(struct exchange *x)
{
    static const struct upstream_stream_cbs cbs = {
        .head = exchange_stream_head,
        .data = exchange_stream_data,
        .read = exchange_stream_read,
        .done = exchange_stream_done,
    };
    struct evbuffer *body = http_server_body(x->req);
    int rc;

    x->stream_started = true;
    exchange_tag_upstream(x, false); /* passing: no record; the client's field is dropped */
    if (http_server_body_complete(x->req))
        rc = upstream_stream_whole(x->set->upstream, x->rq.method, x->rq.target,
                                   http_server_input_headers(x->req), x->rq.client_addr,
                                   (const char *)evbuffer_pullup(body, -1),
                                   evbuffer_get_length(body), &cbs, x, &x->call);
    else
        rc = upstream_stream(x->set->upstream, x->rq.method, x->rq.target,
                             http_server_input_headers(x->req), x->rq.client_addr,
                             http_server_content_length(x->req), &cbs, x, &x->call);
    if (rc == 0)
        return;
    x->call = NULL;
    log_msg(LOG_ERROR, "exchange: cannot start a streamed upstream call");
    http_server_close_after(x->req);
    exchange_problem(x, PROBLEM_UPSTREAM_UNAVAILABLE, 502, "cannot reach the upstream", 0, false);
    exchange_unref(x);
}
