/*
 * test_upstream_stream.c - streamed transfers (upstream_stream, upstream.h)
 * against real upstreams on loopback, in this process and on one
 * event_base: libevent's evhttp server for whole requests and answers, and
 * a canned server that writes fixed bytes (an interim 103 head, trailers,
 * an answer cut short, an early 413, no answer at all). Each case asserts
 * what the caller sees: the bytes in order, that a held direction gets no
 * byte, which outcome done gets (or that it is not called), and that the
 * buffered upstream_send still behaves on the handles streams used.
 * Prints `ok NAME` or `FAIL NAME: why` per case (unit.h); exits 1 if any
 * failed. Run under ASan too: an abort must leak nothing.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "clock.h"
#include "config.h"
#include "upstream.h"
#include "unit.h"

#define MIB (1024 * 1024)
#define BIG (20 * MIB)
#define TIMEOUT_MS 1000         /* upstream.timeout of both clients */
#define PIECE_MAX 16384         /* CURL_MAX_WRITE_SIZE: the most data is handed at once */

static struct event_base *base;
static unsigned char *pattern;  /* BIG + 1 MiB bytes both sides agree on */

static unsigned char pattern_at(size_t i)
{
    return (unsigned char)((i * 2654435761u) >> 24);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Run the loop until *flag, or fail after limit_ms; true when *flag. */
static bool run_until(const bool *flag, double limit_ms)
{
    double end = clock_mono_ms() + limit_ms;
    struct timeval tick = clock_ms_to_timeval(10);
    /*
     * A tick, not one timer at limit_ms: libevent's clock and clock_mono_ms round
     * differently, so a single timer can fire just before `end` by our clock and
     * leave the loop waiting in epoll with nothing armed (seen under ASan, 1 in 4).
     */
    struct event *deadline = event_new(base, -1, EV_PERSIST, on_deadline, NULL);

    event_add(deadline, &tick); /* so that the loop wakes up even when nothing else happens */
    while (!*flag && clock_mono_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(deadline);
    return *flag;
}

/* Run the loop for ms, whatever happens. */
static void run_for(double ms)
{
    bool never = false;

    run_until(&never, ms);
}

/* ---- the evhttp upstream ---- */

static struct {
    char method[16];
    size_t len;
    bool identical;
    char te[32], cl[32];
    bool expect;
    int requests;
} uploaded;

static int server_closes;   /* connections of /watched answers that closed */

static void on_server_close(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    (void)arg;
    server_closes++;
}

static size_t query_n(struct evhttp_request *req)
{
    const char *q = strchr(evhttp_request_get_uri(req), '=');

    return q != NULL ? (size_t)strtoull(q + 1, NULL, 10) : 0;
}

/* /download?n=N (Content-Length), /chunked?n=N (chunked), /watched?n=N (a close is counted) */
static void on_download(struct evhttp_request *req, void *arg)
{
    const char *uri = evhttp_request_get_uri(req);
    size_t n = query_n(req);
    struct evbuffer *out = evbuffer_new();

    (void)arg;
    if (strncmp(uri, "/watched", 8) == 0)
        evhttp_connection_set_closecb(evhttp_request_get_connection(req), on_server_close, NULL);
    if (strncmp(uri, "/chunked", 8) == 0) {
        evhttp_send_reply_start(req, 200, "OK");
        for (size_t at = 0; at < n; at += 100000) {
            evbuffer_add_reference(out, pattern + at, n - at < 100000 ? n - at : 100000, NULL,
                                   NULL);
            evhttp_send_reply_chunk(req, out);
        }
        evhttp_send_reply_end(req);
    } else {
        evbuffer_add_reference(out, pattern, n, NULL, NULL);
        evhttp_send_reply(req, 200, "OK", out);
    }
    evbuffer_free(out);
}

/* /upload: remembers what arrived (uploaded), answers "ok" */
static void on_upload(struct evhttp_request *req, void *arg)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req), *out = evbuffer_new();
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *te = evhttp_find_header(h, "Transfer-Encoding");
    const char *cl = evhttp_find_header(h, "Content-Length");
    size_t len = evbuffer_get_length(in);

    (void)arg;
    switch (evhttp_request_get_command(req)) {
    case EVHTTP_REQ_POST: snprintf(uploaded.method, sizeof(uploaded.method), "POST"); break;
    case EVHTTP_REQ_PUT: snprintf(uploaded.method, sizeof(uploaded.method), "PUT"); break;
    default: snprintf(uploaded.method, sizeof(uploaded.method), "other"); break;
    }
    uploaded.len = len;
    uploaded.identical = len <= BIG && memcmp(evbuffer_pullup(in, -1), pattern, len) == 0;
    snprintf(uploaded.te, sizeof(uploaded.te), "%s", te != NULL ? te : "");
    snprintf(uploaded.cl, sizeof(uploaded.cl), "%s", cl != NULL ? cl : "");
    uploaded.expect = evhttp_find_header(h, "Expect") != NULL;
    uploaded.requests++;
    evbuffer_add(out, "ok", 2);
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

/* ---- the canned upstream: after a request's head, write `canned` (NULL: nothing) ---- */

static const char *canned;
static size_t canned_len;
static bool canned_close;   /* close once written (else read and drop what comes) */

struct canned_conn {
    struct bufferevent *bev;
    bool answered;
    struct canned_conn *next;
};
static struct canned_conn *canned_conns;

static void canned_free(struct canned_conn *c)
{
    struct canned_conn **p = &canned_conns;

    while (*p != c)
        p = &(*p)->next;
    *p = c->next;
    bufferevent_free(c->bev);
    free(c);
}

static void canned_on_written(struct bufferevent *bev, void *arg)
{
    (void)bev;
    canned_free(arg);
}

static void canned_on_read(struct bufferevent *bev, void *arg)
{
    struct canned_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr end;

    if (c->answered) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0)
        return;
    evbuffer_drain(in, (size_t)end.pos + 4);
    c->answered = true;
    if (canned == NULL)
        return;
    bufferevent_write(bev, canned, canned_len);
    if (canned_close)
        bufferevent_setcb(bev, canned_on_read, canned_on_written, NULL, c);
}

static void canned_on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        canned_free(arg);
}

static void canned_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                             int socklen, void *arg)
{
    struct canned_conn *c = calloc(1, sizeof(*c));

    (void)l;
    (void)sa;
    (void)socklen;
    (void)arg;
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->next = canned_conns;
    canned_conns = c;
    bufferevent_setcb(c->bev, canned_on_read, NULL, canned_on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static void set_canned(const char *text, size_t len, bool close_after)
{
    canned = text;
    canned_len = len;
    canned_close = close_after;
}

/* ---- a caller of upstream_stream ---- */

struct caller {
    const char *name;
    struct upstream_call *call;
    /* receiving */
    int status, heads;
    long long content_length;
    size_t got, mismatches, max_piece, handed_while_held, pieces;
    bool held;
    int hold_ms;                /* resume after this long (0: next loop) */
    size_t long_hold_at;        /* hold the piece ending past this byte for long_hold_ms */
    int long_hold_ms;
    bool keep_body;             /* keep the body in body instead of matching pattern */
    struct evbuffer *body;
    int abort_at_piece;         /* upstream_abort from inside data at this piece */
    int abort_later_at_piece;   /* hold, then upstream_abort from a timer */
    struct event resume_ev;
    /* sending */
    size_t total, sent, asked_past_end;
    unsigned reads;
    unsigned pause_every;       /* every Nth read holds (0: never) */
    size_t hold_forever_after;  /* after this many bytes, hold and never resume (0: no) */
    bool send_held;
    struct event send_ev;
    /* the end */
    bool done;
    int done_calls;
    enum upstream_outcome outcome;
    int done_status;
    char trailer[64];
    char cause[256];
};

static void caller_init(struct caller *c, const char *name);

static void on_resume_recv(evutil_socket_t fd, short what, void *arg)
{
    struct caller *c = arg;

    (void)fd;
    (void)what;
    if (c->abort_later_at_piece > 0) {
        upstream_abort(c->call);
        return;
    }
    c->held = false;
    upstream_resume_recv(c->call);
}

static void on_resume_send(evutil_socket_t fd, short what, void *arg)
{
    struct caller *c = arg;

    (void)fd;
    (void)what;
    c->send_held = false;
    upstream_resume_send(c->call);
}

static int caller_head(int status, const struct evkeyvalq *headers, long long content_length,
                       void *arg)
{
    struct caller *c = arg;

    (void)headers;
    c->heads++;
    c->status = status;
    c->content_length = content_length;
    return 0;
}

static int caller_data(struct evbuffer *chunk, void *arg)
{
    struct caller *c = arg;
    size_t n = evbuffer_get_length(chunk);
    struct timeval tv;

    if (c->held)
        c->handed_while_held += n;
    c->pieces++;
    if (n > c->max_piece)
        c->max_piece = n;
    if (c->keep_body) {
        evbuffer_add_buffer(c->body, chunk);
    } else {
        unsigned char *p = evbuffer_pullup(chunk, -1);
        for (size_t i = 0; i < n; i++)
            c->mismatches += p[i] != pattern_at(c->got + i);
        evbuffer_drain(chunk, n);
    }
    c->got += n;
    if (c->abort_at_piece > 0 && c->pieces == (size_t)c->abort_at_piece) {
        upstream_abort(c->call);
        return 0;
    }
    if (c->hold_ms < 0)
        return 0;
    tv = clock_ms_to_timeval((uint64_t)c->hold_ms);
    if (c->long_hold_at > 0 && c->got > c->long_hold_at) {
        tv = clock_ms_to_timeval((uint64_t)c->long_hold_ms);
        c->long_hold_at = 0;
    }
    if (c->abort_later_at_piece > 0 && c->pieces < (size_t)c->abort_later_at_piece)
        return 0;
    c->held = true;
    evtimer_add(&c->resume_ev, &tv);
    return UPSTREAM_DATA_PAUSE;
}

static long caller_read(char *buf, size_t max, void *arg)
{
    struct caller *c = arg;
    size_t n = c->total - c->sent;

    c->reads++;
    if (c->send_held)
        return UPSTREAM_READ_PAUSE;
    if (max > n)
        c->asked_past_end += max - n;
    if (c->hold_forever_after > 0 && c->sent >= c->hold_forever_after) {
        c->send_held = true;
        return UPSTREAM_READ_PAUSE;
    }
    if (c->pause_every > 0 && c->reads % c->pause_every == 0) {
        struct timeval tv = { 0, 0 };
        c->send_held = true;
        evtimer_add(&c->send_ev, &tv);
        return UPSTREAM_READ_PAUSE;
    }
    /* odd sizes, so pieces do not line up with curl's buffers */
    if (n > 7001)
        n = 7001;
    if (n > max)
        n = max;
    memcpy(buf, pattern + c->sent, n);
    c->sent += n;
    return (long)n;
}

static void caller_done(enum upstream_outcome outcome, const struct upstream_response *resp,
                        const char *detail, const char *cause, double upstream_ms, void *arg)
{
    struct caller *c = arg;

    (void)detail;
    (void)upstream_ms;
    c->done = true;
    c->done_calls++;
    c->outcome = outcome;
    snprintf(c->cause, sizeof(c->cause), "%s", cause != NULL ? cause : "");
    if (resp != NULL) {
        const char *t = evhttp_find_header(resp->headers, "X-Checksum");
        c->done_status = resp->status;
        snprintf(c->trailer, sizeof(c->trailer), "%s", t != NULL ? t : "");
        if (evbuffer_get_length(resp->body) != 0)
            c->mismatches++;
    }
}

static const struct upstream_stream_cbs caller_cbs = {
    .head = caller_head, .data = caller_data, .read = caller_read, .done = caller_done,
};

static void caller_init(struct caller *c, const char *name)
{
    memset(c, 0, sizeof(*c));
    c->name = name;
    c->content_length = -2;
    c->body = evbuffer_new();
    evtimer_assign(&c->resume_ev, base, on_resume_recv, c);
    evtimer_assign(&c->send_ev, base, on_resume_send, c);
}

static void caller_deinit(struct caller *c)
{
    evtimer_del(&c->resume_ev);
    evtimer_del(&c->send_ev);
    evbuffer_free(c->body);
}

static bool caller_start(struct caller *c, struct upstream *up, const char *method,
                         const char *target, long long body_len)
{
    struct evkeyvalq headers;
    int rc;

    TAILQ_INIT(&headers);
    evhttp_add_header(&headers, "X-Test", c->name);
    rc = upstream_stream(up, method, target, &headers, "192.0.2.1", body_len, &caller_cbs, c,
                         &c->call);
    evhttp_clear_headers(&headers);
    if (rc != 0) {
        unit_failures++;
        printf("FAIL %s: upstream_stream refused to start\n", c->name);
    }
    return rc == 0;
}

/* ---- the cases ---- */

static void download_held_after_every_piece(struct upstream *up, const char *name,
                                            const char *target, size_t n, bool chunked)
{
    struct caller c;

    caller_init(&c, name);
    if (caller_start(&c, up, "GET", target, 0)) {
        run_until(&c.done, 120000);
        UNIT_CHECK(name,
                   c.done && c.outcome == UPSTREAM_ANSWERED && c.status == 200 &&
                       c.done_status == 200 && c.heads == 1 && c.got == n && c.mismatches == 0 &&
                       c.content_length == (chunked ? -1 : (long long)n),
                   "done %d outcome %d status %d heads %d, got %zu of %zu, %zu differ, "
                   "content_length %lld (%s)", c.done, c.outcome, c.status, c.heads, c.got, n,
                   c.mismatches, c.content_length, c.cause);
        UNIT_CHECK("no byte reaches data while it holds, and a piece is at most 16 KiB",
                   c.handed_while_held == 0 && c.max_piece <= PIECE_MAX &&
                       c.pieces >= n / PIECE_MAX,
                   "%zu bytes handed while held, largest piece %zu, %zu pieces",
                   c.handed_while_held, c.max_piece, c.pieces);
    }
    caller_deinit(&c);
}

static void held_longer_than_the_timeout(struct upstream *up)
{
    struct caller c;
    const char *name = "held longer than upstream.timeout, a download still completes";

    caller_init(&c, name);
    c.long_hold_at = 200000;
    c.long_hold_ms = TIMEOUT_MS * 2;
    if (caller_start(&c, up, "GET", "/download?n=1048576", 0)) {
        run_until(&c.done, 20000);
        UNIT_CHECK(name, c.done && c.outcome == UPSTREAM_ANSWERED && c.got == MIB &&
                             c.mismatches == 0 && c.handed_while_held == 0,
                   "done %d outcome %d got %zu, %zu differ (%s)", c.done, c.outcome, c.got,
                   c.mismatches, c.cause);
    }
    caller_deinit(&c);
}

static void upload(struct upstream *up, const char *name, const char *method, size_t n,
                   bool chunked)
{
    struct caller c;
    char cl[32];

    caller_init(&c, name);
    c.total = n;
    c.pause_every = 3;
    c.hold_ms = -1;
    memset(&uploaded, 0, sizeof(uploaded));
    snprintf(cl, sizeof(cl), "%zu", n);
    if (caller_start(&c, up, method, "/upload", chunked ? -1 : (long long)n)) {
        run_until(&c.done, 60000);
        UNIT_CHECK(name,
                   c.done && c.outcome == UPSTREAM_ANSWERED && c.status == 200 && c.got == 2 &&
                       uploaded.requests == 1 && uploaded.len == n && uploaded.identical &&
                       strcmp(uploaded.method, method) == 0 && !uploaded.expect &&
                       strcmp(uploaded.te, chunked ? "chunked" : "") == 0 &&
                       strcmp(uploaded.cl, chunked ? "" : cl) == 0 &&
                       (chunked || c.asked_past_end == 0),
                   "done %d outcome %d status %d; server: %d request(s) %s of %zu bytes "
                   "(identical %d), Transfer-Encoding '%s', Content-Length '%s', Expect %d; "
                   "%zu bytes asked past the end (%s)",
                   c.done, c.outcome, c.status, uploaded.requests, uploaded.method,
                   uploaded.len, uploaded.identical, uploaded.te, uploaded.cl, uploaded.expect,
                   c.asked_past_end, c.cause);
        UNIT_CHECK("the upload held its sends", c.reads > 3 * (unsigned)(n / 7001) / 2,
                   "%u reads", c.reads);
    }
    caller_deinit(&c);
}

static void abort_mid_stream(struct upstream *up, bool from_data)
{
    const char *name = from_data ? "upstream_abort inside data: no done, the connection closed"
                                 : "upstream_abort from a timer while held: no done, the "
                                   "connection closed";
    int closes = server_closes;
    size_t pieces;
    bool closed = false;
    struct caller c;

    caller_init(&c, name);
    if (from_data)
        c.abort_at_piece = 3;
    else
        c.abort_later_at_piece = 5;
    c.hold_ms = 0;
    if (caller_start(&c, up, "GET", "/watched?n=20971520", 0)) {
        for (int i = 0; i < 100 && !closed; i++) {
            run_for(100);
            closed = server_closes > closes;
        }
        pieces = c.pieces;
        run_for(200);
        UNIT_CHECK(name,
                   closed && !c.done && c.done_calls == 0 && upstream_in_flight(up) == 0 &&
                       c.pieces == pieces &&
                       pieces == (size_t)(from_data ? c.abort_at_piece : c.abort_later_at_piece),
                   "server saw a close %d, done %d, in flight %u, %zu pieces (then %zu)", closed,
                   c.done, upstream_in_flight(up), pieces, c.pieces);
    }
    caller_deinit(&c);
}

/* One case on the canned upstream: the answer, then what the caller must see. */
static void canned_case(struct upstream *up, const char *name, const char *answer,
                        bool close_after, long long body_len, struct caller *c)
{
    caller_init(c, name);
    c->keep_body = true;
    c->hold_ms = -1;
    set_canned(answer, answer != NULL ? strlen(answer) : 0, close_after);
    if (caller_start(c, up, body_len != 0 ? "POST" : "GET", "/canned", body_len))
        run_until(&c->done, 10000);
}

static bool body_is(struct caller *c, const char *text)
{
    size_t n = strlen(text);

    return evbuffer_get_length(c->body) == n &&
           memcmp(evbuffer_pullup(c->body, -1), text, n) == 0;
}

static void canned_cases(struct upstream *up)
{
    struct caller c;
    double start;

    canned_case(up, "the final head follows an interim 103, which is skipped",
                "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
                true, 0, &c);
    UNIT_CHECK(c.name, c.done && c.outcome == UPSTREAM_ANSWERED && c.heads == 1 &&
                           c.status == 200 && c.content_length == 2 && body_is(&c, "hi"),
               "done %d outcome %d heads %d status %d content_length %lld (%s)", c.done,
               c.outcome, c.heads, c.status, c.content_length, c.cause);
    caller_deinit(&c);

    canned_case(up, "trailer fields reach done in resp->headers",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n"
                "Connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n"
                "X-Checksum: abc123\r\n\r\n",
                true, 0, &c);
    UNIT_CHECK(c.name, c.done && c.outcome == UPSTREAM_ANSWERED && c.content_length == -1 &&
                           strcmp(c.trailer, "abc123") == 0 && body_is(&c, "hello world"),
               "done %d outcome %d content_length %lld trailer '%s' (%s)", c.done, c.outcome,
               c.content_length, c.trailer, c.cause);
    caller_deinit(&c);

    {
        static char cut[128 + 1000];
        int head = snprintf(cut, sizeof(cut), "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
        memset(cut + head, 'x', 1000);
        cut[head + 1000] = '\0';
        canned_case(up, "an upstream that closes mid-answer is UPSTREAM_BROKEN", cut, true, 0,
                    &c);
    }
    UNIT_CHECK(c.name, c.done && c.outcome == UPSTREAM_BROKEN && c.status == 200 &&
                           evbuffer_get_length(c.body) == 1000,
               "done %d outcome %d status %d, %zu body bytes (%s)", c.done, c.outcome, c.status,
               evbuffer_get_length(c.body), c.cause);
    caller_deinit(&c);

    /* the upload holds forever after its first bytes; the 413 must still end it */
    caller_init(&c, "an early 413 ends an upload that holds forever");
    c.keep_body = true;
    c.hold_ms = -1;
    c.total = MIB;
    c.hold_forever_after = 1;
    {
        static const char too_large[] =
            "HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n";
        set_canned(too_large, sizeof(too_large) - 1, false);
    }
    if (caller_start(&c, up, "POST", "/canned", -1))
        run_until(&c.done, 10000);
    UNIT_CHECK(c.name, c.done && c.outcome == UPSTREAM_ANSWERED && c.status == 413,
               "done %d outcome %d status %d (%s)", c.done, c.outcome, c.status, c.cause);
    caller_deinit(&c);

    start = clock_mono_ms();
    canned_case(up, "no head within upstream.timeout is UPSTREAM_TIMEOUT", NULL, false, 0, &c);
    UNIT_CHECK(c.name, c.done && c.outcome == UPSTREAM_TIMEOUT &&
                           clock_mono_ms() - start >= TIMEOUT_MS * 0.9 &&
                           clock_mono_ms() - start < TIMEOUT_MS * 3,
               "done %d outcome %d after %.0f ms (%s)", c.done, c.outcome,
               clock_mono_ms() - start, c.cause);
    caller_deinit(&c);
}

/* ---- upstream_send on the handles streams used ---- */

struct sent {
    bool done;
    enum upstream_outcome outcome;
    int status;
    size_t len;
    bool identical;
};

static void on_sent(enum upstream_outcome outcome, const struct upstream_response *resp,
                    const char *detail, const char *cause, double upstream_ms, void *arg)
{
    struct sent *s = arg;

    (void)detail;
    (void)cause;
    (void)upstream_ms;
    s->done = true;
    s->outcome = outcome;
    if (resp != NULL) {
        s->status = resp->status;
        s->len = evbuffer_get_length(resp->body);
        s->identical = memcmp(evbuffer_pullup(resp->body, -1), pattern, s->len) == 0;
    }
}

static void send_after_streams(struct upstream *up, struct upstream *canned_up)
{
    struct evkeyvalq headers;
    struct sent s = { 0 };
    double start;
    int rc;

    TAILQ_INIT(&headers);
    memset(&uploaded, 0, sizeof(uploaded));
    rc = upstream_send(up, "POST", "/upload", &headers, NULL, (const char *)pattern, 100000, NULL,
                       on_sent, &s);
    if (rc == 0)
        run_until(&s.done, 10000);
    UNIT_CHECK("upstream_send after streams: a body in memory, Content-Length",
               rc == 0 && s.done && s.outcome == UPSTREAM_ANSWERED && s.status == 200 &&
                   uploaded.requests == 1 && uploaded.len == 100000 && uploaded.identical &&
                   strcmp(uploaded.cl, "100000") == 0 && uploaded.te[0] == '\0',
               "rc %d done %d outcome %d status %d; server: %d request(s), %zu bytes, "
               "Content-Length '%s', Transfer-Encoding '%s'", rc, s.done, s.outcome, s.status,
               uploaded.requests, uploaded.len, uploaded.cl, uploaded.te);

    memset(&s, 0, sizeof(s));
    rc = upstream_send(up, "GET", "/download?n=300000", &headers, NULL, NULL, 0, NULL, on_sent,
                       &s);
    if (rc == 0)
        run_until(&s.done, 10000);
    UNIT_CHECK("upstream_send after streams: the answer kept whole",
               rc == 0 && s.done && s.outcome == UPSTREAM_ANSWERED && s.status == 200 &&
                   s.len == 300000 && s.identical,
               "rc %d done %d outcome %d status %d, %zu bytes, identical %d", rc, s.done,
               s.outcome, s.status, s.len, s.identical);

    /* streams ran on canned_up with no whole-transfer timeout; a send has it again */
    memset(&s, 0, sizeof(s));
    set_canned(NULL, 0, false);
    start = clock_mono_ms();
    rc = upstream_send(canned_up, "GET", "/stall", &headers, NULL, NULL, 0, NULL, on_sent, &s);
    if (rc == 0)
        run_until(&s.done, 10000);
    UNIT_CHECK("upstream_send after streams: upstream.timeout bounds it again",
               rc == 0 && s.done && s.outcome == UPSTREAM_TIMEOUT &&
                   clock_mono_ms() - start < TIMEOUT_MS * 3,
               "rc %d done %d outcome %d after %.0f ms", rc, s.done, s.outcome,
               clock_mono_ms() - start);
}

/* ---- setup ---- */

static uint16_t bound_port(evutil_socket_t fd)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);

    getsockname(fd, (struct sockaddr *)&sin, &len);
    return ntohs(sin.sin_port);
}

int main(void)
{
    struct config cfg = { 0 }, canned_cfg = { 0 };
    char url[64], canned_url[64];
    struct sockaddr_in sin = { .sin_family = AF_INET };
    struct evhttp_bound_socket *bound;
    struct evconnlistener *listener;
    struct upstream *up, *canned_up;
    struct evhttp *http;

    setvbuf(stdout, NULL, _IOLBF, 0);
    /* the test servers write with write(2): a client that closed must not kill the test */
    signal(SIGPIPE, SIG_IGN);
    if (upstream_global_init() != 0)
        return 1;
    pattern = malloc(BIG + MIB);
    for (size_t i = 0; i < BIG + MIB; i++)
        pattern[i] = pattern_at(i);
    base = event_base_new();

    http = evhttp_new(base);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT);
    evhttp_set_cb(http, "/upload", on_upload, NULL);
    evhttp_set_gencb(http, on_download, NULL);
    bound = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    listener = evconnlistener_new_bind(base, canned_on_accept, NULL,
                                       LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                       (struct sockaddr *)&sin, sizeof(sin));
    if (bound == NULL || listener == NULL) {
        printf("FAIL setup: cannot listen on 127.0.0.1\n");
        return 1;
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%u",
             bound_port(evhttp_bound_socket_get_fd(bound)));
    snprintf(canned_url, sizeof(canned_url), "http://127.0.0.1:%u",
             bound_port(evconnlistener_get_fd(listener)));
    cfg.upstream_base = url;
    cfg.upstream_connect_timeout_ms = 2000;
    cfg.upstream_timeout_ms = TIMEOUT_MS;
    canned_cfg = cfg;
    canned_cfg.upstream_base = canned_url;
    up = upstream_create(base, &cfg);
    canned_up = upstream_create(base, &canned_cfg);

    download_held_after_every_piece(up, "a 20 MiB download held after every piece arrives whole",
                                    "/download?n=20971520", BIG, false);
    download_held_after_every_piece(up, "a 5 MiB chunked download held after every piece "
                                        "arrives whole", "/chunked?n=5242880", 5 * MIB, true);
    held_longer_than_the_timeout(up);
    upload(up, "a chunked upload of 8 MiB from a read that holds arrives whole", "POST",
           8 * MIB, true);
    upload(up, "a Content-Length PUT of 3 MiB + 5 from a read that holds arrives whole", "PUT",
           3 * MIB + 5, false);
    abort_mid_stream(up, false);
    abort_mid_stream(up, true);
    canned_cases(canned_up);
    send_after_streams(up, canned_up);
    UNIT_CHECK("nothing left in flight", upstream_in_flight(up) == 0 &&
                                             upstream_in_flight(canned_up) == 0,
               "%u and %u", upstream_in_flight(up), upstream_in_flight(canned_up));

    upstream_destroy(up);
    upstream_destroy(canned_up);
    while (canned_conns != NULL)
        canned_free(canned_conns);
    evconnlistener_free(listener);
    evhttp_free(http);
    event_base_free(base);
    upstream_global_cleanup();
    free(pattern);
    UNIT_DONE();
}
