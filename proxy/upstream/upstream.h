/*
 * upstream.h - the HTTP client to the one upstream: libcurl multi-socket on
 * the worker's event_base. Only the files of proxy/upstream/ include curl.
 *
 * Two kinds of transfer: buffered (upstream_send, upstream_send_capped: the
 * request body in memory, the answer kept whole, one callback at the end) and
 * streamed (upstream_stream: the request body read piece by piece, the answer
 * handed on as it arrives, each direction paused and resumed by the caller).
 *
 * Never two sends (docs/client-contract.md#how-a-request-is-handled): a request is transmitted at most once. libcurl
 * 7.88 silently resends a request whose reused keep-alive connection dies
 * before any answer ("Connection died, retrying a fresh connect"); we refuse
 * that resend in CURLOPT_PREREQFUNCTION (called once per transmission
 * attempt), so the attempt fails and is reported as UPSTREAM_BROKEN: an
 * ambiguous outcome, not a retry.
 */
#ifndef IDEM_UPSTREAM_H
#define IDEM_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evbuffer;
struct evkeyvalq;
struct config;
struct upstream;
struct budget_hold;
struct upstream_call;

enum upstream_outcome {
    UPSTREAM_ANSWERED,  /* a whole response arrived (any status) */
    UPSTREAM_NOT_SENT,  /* refused, DNS, connect timeout: no byte of the request left */
    UPSTREAM_TIMEOUT,   /* sent, then no whole answer within upstream.timeout */
    UPSTREAM_BROKEN,    /* sent, then reset, truncated, closed, or a resend refused */
};

struct upstream_response {
    int status;
    struct evkeyvalq *headers;  /* the final response's fields, in order; owned by the call */
    struct evbuffer *body;      /* decoded of chunked framing; owned by the call */
};

/*
 * Done callback, run once from the event loop (never inside a curl callback).
 * resp is valid only during the callback (NULL unless UPSTREAM_ANSWERED); the
 * callback may move entries out of resp->headers (each allocated with
 * malloc, freed by evhttp_clear_headers) and drain resp->body to keep them
 * without a copy;
 * detail is a static human string, safe to show a client.
 * cause is NULL when answered, else for the log only (valid during the
 * callback): the upstream address (scheme://host:port or unix:/path, never
 * a path, query or credentials) and libcurl's own reason, e.g.
 * "http://127.0.0.1:3000: Failed to connect to 127.0.0.1 port 3000 after 0 ms:
 * Couldn't connect to server (curl 7)".
 * upstream_ms is the exchange time.
 */
typedef void upstream_done_cb(enum upstream_outcome outcome, const struct upstream_response *resp,
                              const char *detail, const char *cause, double upstream_ms,
                              void *arg);

/*
 * Initialise libcurl for the process: once, on the main thread, before any
 * worker thread starts (curl_global_init is not thread-safe). Returns 0, or
 * -1 when libcurl cannot be initialised.
 */
int upstream_global_init(void);

/* Undo upstream_global_init, after every upstream client is destroyed. */
void upstream_global_cleanup(void);

/* Create the client for base; cfg must outlive it. NULL on failure. */
struct upstream *upstream_create(struct event_base *base, const struct config *cfg);

/* Abort every transfer without calling back, and free. Call before event_base_free. */
void upstream_destroy(struct upstream *up);

/*
 * Send one request upstream. method and target (path with query) are copied;
 * headers are the client's fields (hop-by-hop ones are dropped here, per
 * RFC 9110 7.6.1); body (len bytes, may be NULL when 0) is borrowed and must
 * stay valid until cb runs. client_addr (may be NULL) is appended to
 * X-Forwarded-For. answer (may be NULL; borrowed until cb runs) is grown,
 * as the answer's body arrives, to cover the bytes kept so far (README
 * "Memory": counted under limits.max_buffered, never refused). Returns 0,
 * or -1 when the transfer could not even be set up (then cb is not called).
 */
int upstream_send(struct upstream *up, const char *method, const char *target,
                  const struct evkeyvalq *headers, const char *client_addr, const char *body,
                  size_t len, struct budget_hold *answer, upstream_done_cb *cb, void *arg);

/*
 * upstream_send, keeping at most body_max bytes of the answer's body in
 * resp->body: the rest is read from the socket and dropped, so a caller
 * that needs only the status (the inbox's deliveries) is not grown by a
 * large answer. The answer still counts as UPSTREAM_ANSWERED once whole.
 * Returns 0, or -1 as upstream_send.
 */
int upstream_send_capped(struct upstream *up, const char *method, const char *target,
                         const struct evkeyvalq *headers, const char *client_addr,
                         const char *body, size_t len, size_t body_max, upstream_done_cb *cb,
                         void *arg);

/*
 * How long a Retry-After field value (RFC 9110 section 10.2.3: delay-seconds,
 * or an HTTP-date, parsed by curl_getdate) asks to wait from now_s (unix
 * seconds), in ms: 0 for a date in the past; -1 when value (NUL-terminated,
 * surrounding spaces allowed) is neither. Pure.
 */
int64_t upstream_retry_after_ms(const char *value, int64_t now_s);

/*
 * A streamed transfer's callbacks (upstream_stream). head, data and read run
 * inside libcurl's callbacks: they may call upstream_resume_send,
 * upstream_resume_recv and upstream_abort (on any call), but must not start
 * a transfer (upstream_send or upstream_stream fail there) nor destroy the
 * client. done runs from the event loop, outside curl, and may do anything.
 */
struct upstream_stream_cbs {
    /*
     * The final response head arrived (RFC 9110 15.2: interim 1xx heads are
     * skipped): its status, its fields in order (borrowed during the call;
     * copy what you keep), and content_length, the Content-Length in bytes
     * or -1 when the body is chunked or ends at close (RFC 9112 6.3; a HEAD
     * request's answer, a 204 or a 304 has no body whatever it says, and a
     * HEAD answer's Content-Length is still given: RFC 9110 9.3.2).
     * Return 0, or -1 to abort as upstream_abort (done is not called).
     * May be NULL.
     */
    int (*head)(int status, const struct evkeyvalq *headers, long long content_length,
                void *arg);
    /*
     * A piece of the answer's body, decoded of chunked framing (at most
     * CURL_MAX_WRITE_SIZE, 16 KiB): move every byte out of chunk
     * (evbuffer_add_buffer, evbuffer_remove); bytes left in it are dropped.
     * Never called before head. Return 0; UPSTREAM_DATA_PAUSE to stop
     * receiving after this piece (it is still yours) until
     * upstream_resume_recv; or -1 to abort as upstream_abort. May be NULL:
     * the body is read and dropped.
     */
    int (*data)(struct evbuffer *chunk, void *arg);
    /*
     * The request body: copy up to max bytes into buf and return how many;
     * 0 at its end; UPSTREAM_READ_PAUSE when none is there yet (read is
     * called again after upstream_resume_send); UPSTREAM_READ_ABORT to abort
     * as upstream_abort. With a body_len >= 0, max never passes the bytes
     * still due, and an end before them fails the transfer (UPSTREAM_BROKEN).
     * NULL only when body_len is 0.
     */
    long (*read)(char *buf, size_t max, void *arg);
    /*
     * Once at the end, as for upstream_send, unless the transfer was
     * aborted. UPSTREAM_ANSWERED means the whole answer was handed to data
     * (possibly while receiving is paused); then resp->status is head's,
     * resp->body is empty, and resp->headers holds the answer's trailer
     * fields (RFC 9112 7.1.2), usually none. The call is gone once done
     * returns.
     */
    upstream_done_cb *done;
};

/* data's return: the piece is taken, receive no more until upstream_resume_recv. */
#define UPSTREAM_DATA_PAUSE 1
/* read's returns: nothing to send yet (until upstream_resume_send); abort the transfer. */
#define UPSTREAM_READ_PAUSE (-1L)
#define UPSTREAM_READ_ABORT (-2L)

/*
 * Start a streamed request upstream: method and target (path with query)
 * are copied, headers are the client's fields (borrowed during the call;
 * hop-by-hop ones are dropped, RFC 9110 7.6.1), client_addr (may be NULL) is
 * appended to X-Forwarded-For. body_len is the request body's length in
 * bytes: it is sent with Content-Length, or chunked (RFC 9112 7.1) when -1,
 * and 0 means none; the body comes from cbs->read. cbs is copied; arg is
 * passed to each callback. *out is the transfer, valid until done returns or
 * upstream_abort is called on it.
 *
 * Time: upstream.timeout bounds the wait for the response head, counted
 * from the start or from the last request bytes read; after the head it
 * bounds the time without a body byte. It does not run while the caller
 * holds a direction (UPSTREAM_DATA_PAUSE, UPSTREAM_READ_PAUSE), so a long
 * transfer that keeps moving is never cut. A failure ends as for
 * upstream_send (never sent twice: see the top of this file).
 *
 * Returns 0, or -1 when the transfer could not even be set up (out of
 * memory, a body with HEAD, or called from inside a curl callback): then no
 * callback runs.
 */
int upstream_stream(struct upstream *up, const char *method, const char *target,
                    const struct evkeyvalq *headers, const char *client_addr, long long body_len,
                    const struct upstream_stream_cbs *cbs, void *arg, struct upstream_call **out)
    __attribute__((warn_unused_result));

/*
 * upstream_stream with the whole request body in memory: body (len bytes,
 * borrowed until done runs or the transfer is aborted) instead of cbs->read,
 * which may be NULL. curl then writes a small body in the same send as the
 * head (one segment, one upstream wakeup). The answer streams as for
 * upstream_stream. Returns 0, or -1 as upstream_stream.
 */
int upstream_stream_whole(struct upstream *up, const char *method, const char *target,
                          const struct evkeyvalq *headers, const char *client_addr,
                          const char *body, size_t len, const struct upstream_stream_cbs *cbs,
                          void *arg, struct upstream_call **out) __attribute__((warn_unused_result));

/*
 * Call read again: its bytes are there (after UPSTREAM_READ_PAUSE). Takes
 * effect from the event loop, never inside this call, so it is safe from
 * any callback; harmless when send is not paused.
 */
void upstream_resume_send(struct upstream_call *call);

/*
 * Hand data the body again (after UPSTREAM_DATA_PAUSE), from the event
 * loop, never inside this call; harmless when receiving is not paused.
 */
void upstream_resume_recv(struct upstream_call *call);

/*
 * Give the transfer up: no callback of it runs any more (done neither), its
 * connection is closed, never reused. call is invalid afterwards. Safe
 * from any callback but the call's own done.
 */
void upstream_abort(struct upstream_call *call);

/* Transfers in flight (both kinds), for drain and metrics; any thread may ask while up exists. */
unsigned upstream_in_flight(const struct upstream *up);

#endif
