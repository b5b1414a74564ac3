/*
 * upstream.h - the HTTP client to the one upstream: libcurl multi-socket on
 * the worker's event_base. The only file that includes curl.
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

/* Transfers in flight, for drain and metrics; any thread may ask while up exists. */
unsigned upstream_in_flight(const struct upstream *up);

#endif
