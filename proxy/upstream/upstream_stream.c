/*
 * upstream_stream.c - streamed transfers (upstream_stream): the request body
 * read from the caller piece by piece, the answer handed on as it arrives,
 * each direction held by the caller and released later: back-pressure both
 * ways, nothing kept whole in memory.
 *
 * Pausing with libcurl 7.88 (curl_easy_pause(3)):
 * - Receive: data answers UPSTREAM_DATA_PAUSE and keeps its piece. curl may
 *   hold more bytes of the same read; our write callback then answers
 *   CURL_WRITEFUNC_PAUSE, so curl keeps that piece itself and reads the
 *   socket no more. No byte reaches data while it holds.
 * - Send: read answers UPSTREAM_READ_PAUSE, passed on as CURL_READFUNC_PAUSE.
 * - Resuming is curl_easy_pause, called only from our own event (the wake),
 *   never inside a curl callback: curl_easy_pause hands the piece it kept to
 *   the write callback before it returns, and the caller must not find data
 *   running inside its own upstream_resume_recv.
 * - Paused in every direction it still has, the transfer's socket gets
 *   CURL_POLL_REMOVE; upstream_socket.c treats it as idle until curl asks
 *   for it again.
 * - An error answer (status >= 300) before the whole body went out makes
 *   curl stop sending; a send pause it still holds would keep the transfer
 *   from ever ending, so the wake lifts it.
 *
 * The caller's callbacks run inside curl's; up->in_callback says so, and
 * upstream_abort then only marks the call (curl refuses to remove a handle
 * from inside its callbacks): the wake, or curl's end of the transfer,
 * frees it from the event loop.
 */
#include "upstream.h"
#include "upstream_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "clock.h"
#include "config.h"

struct upstream_stream {
    struct upstream_call call;      /* first: the call is the transfer */
    struct upstream_stream_cbs cbs;
    long long body_len;             /* the request body's bytes; -1: chunked */
    long long body_sent;            /* bytes read has given so far */
    struct evbuffer *chunk;         /* the piece handed to data */
    struct event wake;              /* applies resumes, and aborts made inside curl */
    struct event timer;             /* upstream.timeout: to the head, then without a byte */
    double start_ms;                /* clock_mono_ms at the start */
    double active_ms;               /* clock_mono_ms of the last progress the timer counts */
    const char *why;                /* our reason for a failure, for the log's cause */
    int status;                     /* the final head's */
    int curl_paused;                /* CURLPAUSE_RECV | CURLPAUSE_SEND as curl holds them */
    bool recv_held;                 /* data said UPSTREAM_DATA_PAUSE; no resume since */
    bool send_held;                 /* read said UPSTREAM_READ_PAUSE; no resume since */
    bool head_seen;                 /* the final head arrived */
    bool completed;                 /* curl ended the transfer (its connection is settled) */
    bool aborted;                   /* no callback any more; freed at the first chance */
    bool finishing;                 /* done is running */
};

static struct upstream_stream *stream_of(struct upstream_call *call)
{
    return (struct upstream_stream *)call;
}

/*
 * Whether the caller holds the transfer, so upstream.timeout must not run:
 * receiving held, or sending held before the head (afterwards the upstream
 * has answered, and a body that never comes should not keep it forever).
 */
static bool stream_held(const struct upstream_stream *s)
{
    return s->recv_held || (s->send_held && !s->head_seen);
}

/* Run upstream.timeout from now. */
static void stream_timer_arm(struct upstream_stream *s)
{
    struct timeval tv = clock_ms_to_timeval(s->call.up->cfg->upstream_timeout_ms);

    s->active_ms = clock_mono_ms();
    evtimer_add(&s->timer, &tv);
}

/* The timer stops while the caller holds the transfer and starts afresh after. */
static void stream_hold_changed(struct upstream_stream *s)
{
    if (stream_held(s))
        evtimer_del(&s->timer);
    else if (!evtimer_pending(&s->timer, NULL))
        stream_timer_arm(s);
}

/* Free the transfer without calling back; one curl had not ended loses its connection. */
static void stream_discard(struct upstream_call *call)
{
    struct upstream_stream *s = stream_of(call);

    event_del(&s->wake);
    evtimer_del(&s->timer);
    if (call->added && !s->completed)
        curl_easy_setopt(call->easy, CURLOPT_FORBID_REUSE, 1L);
    upstream_call_deinit(call);
    if (s->chunk != NULL)
        evbuffer_free(s->chunk);
    free(s);
}

/* No callback of s runs any more; it is freed from the event loop. */
static void stream_mark_aborted(struct upstream_stream *s)
{
    s->aborted = true;
    event_active(&s->wake, 0, 0);
}

/* The end, from the event loop: done once (unless aborted), then free. */
static void stream_end(struct upstream_stream *s, CURLcode rc)
{
    struct upstream_call *call = &s->call;
    struct upstream_response resp = { 0 };
    char cause[512 + CURL_ERROR_SIZE + 32];
    const char *detail;
    enum upstream_outcome outcome;

    if (s->aborted) {
        stream_discard(call);
        return;
    }
    if (rc == CURLE_OK && !s->head_seen) {
        rc = CURLE_WEIRD_SERVER_REPLY;
        s->why = "no final response head";
    }
    if (s->why != NULL)
        snprintf(call->error, sizeof(call->error), "%s", s->why);
    outcome = upstream_call_outcome(call, rc, &detail, cause, sizeof(cause));
    if (outcome == UPSTREAM_ANSWERED) {
        evhttp_clear_headers(&call->response_headers);
        upstream_call_read_fields(call, CURLH_TRAILER);
        evbuffer_drain(s->chunk, evbuffer_get_length(s->chunk));
        resp.status = s->status;
        resp.headers = &call->response_headers;
        resp.body = s->chunk;
    }
    s->finishing = true;
    call->cb(outcome, outcome == UPSTREAM_ANSWERED ? &resp : NULL, detail,
             outcome == UPSTREAM_ANSWERED ? NULL : cause, clock_mono_ms() - s->start_ms,
             call->arg);
    stream_discard(call);
}

/* struct upstream_call's finish: curl ended the transfer. */
static void stream_finish(struct upstream_call *call, CURLcode rc)
{
    struct upstream_stream *s = stream_of(call);

    s->completed = true;
    stream_end(s, rc);
}

static void stream_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct upstream_stream *s = arg;
    double timeout_ms = (double)s->call.up->cfg->upstream_timeout_ms;
    double idle_ms = clock_mono_ms() - s->active_ms;

    (void)fd;
    (void)what;
    if (idle_ms < timeout_ms) {
        /* progress since it was armed: wait for the rest (one timer add, not one per piece) */
        struct timeval tv = clock_ms_to_timeval((uint64_t)(timeout_ms - idle_ms) + 1);
        evtimer_add(&s->timer, &tv);
        return;
    }
    s->why = s->head_seen ? "no body byte within upstream.timeout"
                          : "no response head within upstream.timeout";
    stream_end(s, CURLE_OPERATION_TIMEDOUT);
}

/* The wake: apply the caller's resumes to curl, or free an aborted transfer. */
static void stream_on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct upstream_stream *s = arg;
    int keep = 0;

    (void)fd;
    (void)what;
    if (s->aborted) {
        stream_discard(&s->call);
        return;
    }
    if (s->recv_held)
        keep |= CURLPAUSE_RECV;
    if (s->send_held && !(s->head_seen && s->status >= 300))
        keep |= CURLPAUSE_SEND;
    keep &= s->curl_paused;
    if (keep != s->curl_paused) {
        CURLcode rc;
        s->curl_paused = keep;
        /* may run the write callback (and data) on the piece curl kept */
        rc = curl_easy_pause(s->call.easy, keep);
        if (s->aborted) {
            stream_discard(&s->call);
            return;
        }
        if (rc != CURLE_OK) {
            stream_end(s, rc);
            return;
        }
    }
    stream_hold_changed(s);
}

/*
 * CURLOPT_HEADERFUNCTION: each line of each head, interim ones and the
 * trailer section included. Only the blank line that ends the final head
 * matters here: its fields are then read with curl_easy_nextheader.
 */
static size_t stream_on_header(char *line, size_t size, size_t nitems, void *userp)
{
    struct upstream_stream *s = userp;
    struct upstream *up = s->call.up;
    size_t n = size * nitems;
    struct curl_header *te;
    curl_off_t length = -1;
    long status = 0;
    int rc;

    if (s->aborted)
        return 0;
    if (s->head_seen || n > 2 || (line[0] != '\r' && line[0] != '\n'))
        return n;
    curl_easy_getinfo(s->call.easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 100 && status < 200)
        return n; /* an interim head (RFC 9110 15.2): the final one follows */
    s->head_seen = true;
    s->status = (int)status;
    stream_hold_changed(s);
    s->active_ms = clock_mono_ms();
    if (s->send_held && status >= 300)
        event_active(&s->wake, 0, 0); /* curl sends no more: lift its send pause */
    if (s->cbs.head == NULL)
        return n;
    upstream_call_read_fields(&s->call, CURLH_HEADER);
    if (curl_easy_header(s->call.easy, "Transfer-Encoding", 0, CURLH_HEADER, -1, &te) !=
        CURLHE_OK)
        curl_easy_getinfo(s->call.easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    up->in_callback++;
    rc = s->cbs.head(s->status, &s->call.response_headers, (long long)length, s->call.arg);
    up->in_callback--;
    evhttp_clear_headers(&s->call.response_headers);
    if (s->aborted || rc != 0) {
        stream_mark_aborted(s);
        return 0;
    }
    return n;
}

/* CURLOPT_WRITEFUNCTION: a piece of the body, decoded of chunked framing. */
static size_t stream_on_write(char *bytes, size_t size, size_t nmemb, void *userp)
{
    struct upstream_stream *s = userp;
    struct upstream *up = s->call.up;
    size_t n = size * nmemb;
    int rc;

    if (s->aborted)
        return 0;
    if (!s->head_seen) {
        s->why = "a body before the final response head";
        return 0;
    }
    if (s->recv_held) {
        s->curl_paused |= CURLPAUSE_RECV;
        return CURL_WRITEFUNC_PAUSE;
    }
    s->active_ms = clock_mono_ms();
    if (s->cbs.data == NULL)
        return n;
    if (evbuffer_add(s->chunk, bytes, n) != 0) {
        s->why = "out of memory for a piece of the body";
        return 0;
    }
    up->in_callback++;
    rc = s->cbs.data(s->chunk, s->call.arg);
    up->in_callback--;
    evbuffer_drain(s->chunk, evbuffer_get_length(s->chunk));
    if (s->aborted || rc < 0) {
        stream_mark_aborted(s);
        return 0;
    }
    if (rc == UPSTREAM_DATA_PAUSE) {
        s->recv_held = true;
        stream_hold_changed(s);
    }
    return n;
}

/* CURLOPT_READFUNCTION: the next bytes of the request body. */
static size_t stream_on_read(char *buf, size_t size, size_t nitems, void *userp)
{
    struct upstream_stream *s = userp;
    struct upstream *up = s->call.up;
    size_t max = size * nitems;
    long n;

    if (s->aborted)
        return CURL_READFUNC_ABORT;
    if (s->body_len >= 0 && (long long)max > s->body_len - s->body_sent)
        max = (size_t)(s->body_len - s->body_sent);
    if (max == 0)
        return 0;
    up->in_callback++;
    n = s->cbs.read(buf, max, s->call.arg);
    up->in_callback--;
    if (s->aborted || n == UPSTREAM_READ_ABORT) {
        stream_mark_aborted(s);
        return CURL_READFUNC_ABORT;
    }
    if (n == UPSTREAM_READ_PAUSE) {
        s->send_held = true;
        s->curl_paused |= CURLPAUSE_SEND;
        stream_hold_changed(s);
        return CURL_READFUNC_PAUSE;
    }
    if (n < 0 || (size_t)n > max) {
        s->why = "the request body's read callback gave a count out of range";
        return CURL_READFUNC_ABORT;
    }
    if (n == 0 && s->body_len >= 0) {
        s->why = "the request body ended before its Content-Length";
        return CURL_READFUNC_ABORT;
    }
    s->body_sent += n;
    s->active_ms = clock_mono_ms();
    return (size_t)n;
}

/* upstream_stream and upstream_stream_whole: the body from cbs->read, or body (len bytes). */
static int stream_start(struct upstream *up, const char *method, const char *target,
                        const struct evkeyvalq *headers, const char *client_addr,
                        long long body_len, const char *body,
                        const struct upstream_stream_cbs *cbs, void *arg,
                        struct upstream_call **out)
{
    bool with_body = body_len != 0 || upstream_method_has_body(method);
    struct upstream_stream *s;
    struct upstream_call *call;
    CURL *e;

    if (cbs == NULL || cbs->done == NULL || body_len < -1 || up->in_callback > 0 ||
        (body_len != 0 && ((cbs->read == NULL && body == NULL) || strcmp(method, "HEAD") == 0)) ||
        (body != NULL && body_len < 0))
        return -1;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    call = &s->call;
    call->cb = cbs->done;
    call->arg = arg;
    call->finish = stream_finish;
    call->discard = stream_discard;
    s->cbs = *cbs;
    s->body_len = body_len;
    event_assign(&s->wake, up->base, -1, 0, stream_on_wake, s);
    evtimer_assign(&s->timer, up->base, stream_on_timer, s);
    if (upstream_call_init(call, up, target, headers, client_addr, with_body) != 0 ||
        (s->chunk = evbuffer_new()) == NULL)
        goto failed;
    e = call->easy;
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, stream_on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, stream_on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
    /* no bound on the whole transfer: the timer bounds the silences (stream_on_timer) */
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 0L);
    if (body_len != 0 && body == NULL) {
        curl_easy_setopt(e, CURLOPT_READFUNCTION, stream_on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, s);
    }
    upstream_call_set_method(call, method, with_body, body, body_len);
    if (upstream_call_add(call) != 0)
        goto failed;
    s->start_ms = clock_mono_ms();
    stream_timer_arm(s);
    *out = call;
    return 0;

failed:
    stream_discard(call);
    return -1;
}

int upstream_stream(struct upstream *up, const char *method, const char *target,
                    const struct evkeyvalq *headers, const char *client_addr, long long body_len,
                    const struct upstream_stream_cbs *cbs, void *arg, struct upstream_call **out)
{
    return stream_start(up, method, target, headers, client_addr, body_len, NULL, cbs, arg, out);
}

int upstream_stream_whole(struct upstream *up, const char *method, const char *target,
                          const struct evkeyvalq *headers, const char *client_addr,
                          const char *body, size_t len, const struct upstream_stream_cbs *cbs,
                          void *arg, struct upstream_call **out)
{
    return stream_start(up, method, target, headers, client_addr, (long long)len,
                        len > 0 ? body : "", cbs, arg, out);
}

void upstream_resume_send(struct upstream_call *call)
{
    struct upstream_stream *s = stream_of(call);

    if (s->aborted || s->finishing)
        return;
    s->send_held = false;
    event_active(&s->wake, 0, 0);
}

void upstream_resume_recv(struct upstream_call *call)
{
    struct upstream_stream *s = stream_of(call);

    if (s->aborted || s->finishing)
        return;
    s->recv_held = false;
    event_active(&s->wake, 0, 0);
}

void upstream_abort(struct upstream_call *call)
{
    struct upstream_stream *s = stream_of(call);

    if (s->aborted || s->finishing)
        return;
    if (call->up->in_callback > 0) {
        stream_mark_aborted(s);
        return;
    }
    s->aborted = true;
    stream_discard(call);
}
