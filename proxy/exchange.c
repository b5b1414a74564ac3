/*
 * exchange.c - the request state machine.
 *
 *   NEW --classify--> PASSING ----------------------------------> (answer)
 *    |                  ^ on_store_error: pass
 *    +--claim--> CLAIMING --won--> FORWARDING --> RECORDING ----> (answer)
 *                  |  ^                 (lease renewed meanwhile)
 *                  |  +-- TAKEOVER (expired lease, on_ambiguous: release)
 *                  +--existing--> replay | mismatch | outcome unknown | ...
 *                  +--in flight--> WAITING --poll/wake--> CLAIMING again
 *
 * `pending` counts the callbacks that can still reach the exchange (store
 * commands, the upstream call); it is freed once it has answered and
 * pending is 0. The client may be gone by then: evhttp keeps the request
 * until we reply and frees it in evhttp_send_reply.
 */
#include "exchange.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "config.h"
#include "decide.h"
#include "fingerprint.h"
#include "headers.h"
#include "key.h"
#include "log.h"
#include "path.h"
#include "problem.h"
#include "record.h"
#include "server.h"
#include "store.h"
#include "upstream.h"
#include "webhook.h"

#define EXCHANGE_POLL_MIN_MS 10
#define EXCHANGE_POLL_MAX_MS 250

enum exchange_state {
    X_NEW,
    X_PASSING,      /* forwarded unprotected */
    X_CLAIMING,     /* SET NX / takeover / re-read in flight */
    X_WAITING,      /* another request holds the claim */
    X_FORWARDING,   /* we own the claim; upstream call in flight */
    X_RECORDING,    /* upstream answered; writing the record */
    X_ANSWERED,
};

struct exchange {
    struct worker *w;
    struct worker_config *conf;         /* one reference: routes and policies it started under */
    const struct config *cfg;           /* &conf->cfg */
    struct evhttp_request *req;         /* NULL once answered */
    enum exchange_state state;
    const struct route *route;
    const struct route_policy *policy;
    const char *method;                 /* static string */
    char *target;                       /* path with query, origin-form; owned */
    char *path;                         /* the target's path (no query), raw; owned */
    bool invalid_target;                /* control characters, or not a form we forward */
    struct evbuffer *body;              /* the request body, moved from evhttp; owned */
    const char *body_bytes;             /* contiguous view of body */
    size_t body_len;                    /* bytes */
    char client_addr[64];

    char record_key[EXCHANGE_RECORD_KEY_MAX];
    char record_id[RECORD_ID_HEX_LEN + 1];
    char fingerprint[FINGERPRINT_HEX_LEN + 1];
    char owner[33];
    uint64_t created_ms;

    unsigned pending;                   /* callbacks that can still reach us */
    struct event lease_timer;
    struct event wait_timer;
    uint64_t wait_deadline_ms;
    unsigned poll_delay_ms;
    bool waiting_listed;
    bool waited;
    TAILQ_ENTRY(exchange) wait_link;

    /* the upstream answer, kept while the record is written */
    int resp_status;
    struct evkeyvalq resp_headers;
    struct evbuffer *resp_body;

    const char *outcome;                /* for the access log */
    int status;
    double upstream_ms;
    struct timeval started;
};

static void exchange_claim(struct exchange *x);
static void exchange_record_changed(struct worker *w, const char *record_key);
static void exchange_forward(struct exchange *x);
static void exchange_protect(struct exchange *x, const struct evkeyvalq *headers,
                             const char *key, size_t key_len);

/* ---- lifetime ---------------------------------------------------------- */

static void exchange_unlist_waiter(struct exchange *x)
{
    if (!x->waiting_listed)
        return;
    TAILQ_REMOVE(&x->w->waiters, x, wait_link);
    x->waiting_listed = false;
    x->w->waiting--;
}

static void exchange_free(struct exchange *x)
{
    event_del(&x->lease_timer);
    event_del(&x->wait_timer);
    exchange_unlist_waiter(x);
    evhttp_clear_headers(&x->resp_headers);
    if (x->resp_body != NULL)
        evbuffer_free(x->resp_body);
    if (x->body != NULL)
        evbuffer_free(x->body);
    free(x->target);
    free(x->path);
    worker_config_put(x->conf);
    x->w->active--;
    free(x);
}

/* Drop one pending callback's hold; frees the exchange when nothing else can reach it. */
static void exchange_unref(struct exchange *x)
{
    x->pending--;
    if (x->state == X_ANSWERED && x->pending == 0)
        exchange_free(x);
}

static double exchange_elapsed_ms(const struct exchange *x)
{
    struct timeval now, d;

    gettimeofday(&now, NULL);
    timersub(&now, &x->started, &d);
    return (double)d.tv_sec * 1000.0 + (double)d.tv_usec / 1000.0;
}

static void exchange_log(const struct exchange *x)
{
    struct access_entry e = {
        .route = x->route != NULL ? x->route->path : NULL,
        .method = x->method,
        .path = x->path,
        .outcome = x->outcome != NULL ? x->outcome : "unknown",
        .status = x->status,
        .record_id = x->record_id[0] != '\0' ? x->record_id : NULL,
        .upstream_ms = x->upstream_ms,
        .total_ms = exchange_elapsed_ms(x),
    };

    log_access(&e);
}

/*
 * An answer is out of our hands only once evhttp has written it all, or its
 * connection has closed: until then a SIGTERM drain must not end (it would
 * free the connection with the answer unsent). One answer at a time is
 * written per connection, so the connection's close callback is ours until
 * the answer completes.
 */
static void exchange_on_flushed(struct evhttp_request *req, void *arg)
{
    struct worker *w = arg;

    evhttp_connection_set_closecb(evhttp_request_get_connection(req), NULL, NULL);
    w->unflushed--;
}

static void exchange_on_closed_unflushed(struct evhttp_connection *conn, void *arg)
{
    struct worker *w = arg;

    evhttp_connection_set_closecb(conn, NULL, NULL);
    w->unflushed--;
}

static void exchange_track_flush(struct worker *w, struct evhttp_request *req)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);

    if (conn == NULL) /* the client is gone: evhttp_send_reply just frees req */
        return;
    w->unflushed++;
    evhttp_request_set_on_complete_cb(req, exchange_on_flushed, w);
    evhttp_connection_set_closecb(conn, exchange_on_closed_unflushed, w);
}

/* Send the answer; exactly once per exchange. Takes ownership of body (may be NULL). */
static void exchange_reply(struct exchange *x, int status, struct evbuffer *body)
{
    if (x->state == X_ANSWERED) {
        log_msg(LOG_ERROR, "exchange %s: second answer suppressed", x->record_id);
        if (body != NULL)
            evbuffer_free(body);
        return;
    }
    if (x->w->draining) /* move keep-alive clients to another instance */
        evhttp_add_header(evhttp_request_get_output_headers(x->req), "Connection", "close");
    if (body != NULL && evhttp_request_get_command(x->req) == EVHTTP_REQ_HEAD) {
        /* RFC 9110 9.3.2: never a body on HEAD; libevent 2.1 would write it */
        evbuffer_free(body);
        body = NULL;
    }
    x->status = status;
    metrics_count_request(x->w->metrics, x->route != NULL ? x->route->path : NULL,
                          x->outcome != NULL ? x->outcome : "unknown");
    exchange_log(x);
    exchange_track_flush(x->w, x->req);
    evhttp_send_reply(x->req, status, NULL, body);
    if (body != NULL)
        evbuffer_free(body);
    x->req = NULL;
    x->state = X_ANSWERED;
    exchange_unlist_waiter(x);
    if (x->pending == 0)
        exchange_free(x);
}

/*
 * The proxy's own answer: RFC 9457 problem+json, or with `errors.format:
 * stripe` the {"error": {...}} body Stripe's SDKs take for a failure, plus
 * the Stripe-Should-Retry hint their retry loop obeys. retry_after_s > 0
 * adds Retry-After; replayed adds Idempotent-Replayed.
 */
static void exchange_problem(struct exchange *x, enum problem p, int status, const char *detail,
                             int retry_after_s, bool replayed)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(x->req);
    struct evbuffer *body = evbuffer_new();
    const bool stripe = x->cfg->error_format == ERROR_FORMAT_STRIPE;
    size_t len = 0;
    char *json = stripe ? problem_stripe_json(p, detail, &len)
                        : problem_json(p, status, detail, &len);

    if (x->outcome == NULL)
        x->outcome = problem_slug(p);
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
    exchange_reply(x, status, body);
}

/* ---- answering with an upstream or a stored response ------------------- */

/*
 * Move the end-to-end fields of the upstream answer into the client answer
 * (RFC 9110 7.6.1: hop-by-hop ones stay behind); from keeps the rest. A
 * moved entry is freed with the request, as evhttp_add_header's would be. A
 * value with a bare CR or LF is dropped, as evhttp_add_header would refuse it.
 */
static void exchange_move_response_headers(struct exchange *x, struct evkeyvalq *from)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(x->req);
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

/* Answer with the upstream response kept in x (first execution or pass-through). */
static void exchange_reply_upstream(struct exchange *x)
{
    struct evbuffer *body = x->resp_body;

    exchange_move_response_headers(x, &x->resp_headers);
    x->resp_body = NULL;
    exchange_reply(x, x->resp_status, body);
}

/* Replay a finished record (CONTRACT 5: stored status, headers, body; fresh Content-Length). */
static void exchange_reply_replay(struct exchange *x, const struct record *rec)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(x->req);
    struct evbuffer *body = evbuffer_new();
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
    x->outcome = x->waited ? "waited" : "replayed";
    exchange_reply(x, rec->status, body);
}

/* ---- Redis failure policy --------------------------------------------- */

static void exchange_store_failed(struct exchange *x, enum store_status st)
{
    const char *why = st == STORE_TIMEOUT ? "the idempotency store did not answer in time"
                                          : "the idempotency store is unavailable";

    log_msg(LOG_WARN, "exchange %s: store %s", x->record_id,
            st == STORE_TIMEOUT ? "timeout" : st == STORE_ERROR ? "error" : "unavailable");
    if (x->policy->on_store_error == STORE_ERROR_PASS) {
        metrics_count(x->w->metrics, METRICS_STORE_ERROR_PASSES);
        x->outcome = "store-error-passed";
        x->state = X_PASSING;
        exchange_forward(x);
        return;
    }
    x->outcome = "store-error";
    exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503, why, 1, false);
}

/* ---- records we write -------------------------------------------------- */

/* Encode a record into a malloc'd buffer; NULL on failure. */
static char *exchange_encode(const struct record *rec, size_t *len)
{
    char *buf = malloc(record_encoded_size(rec));

    if (buf == NULL)
        return NULL;
    *len = record_encode(rec, buf);
    if (*len == 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void exchange_record_init(const struct exchange *x, struct record *rec,
                                 enum record_state state)
{
    memset(rec, 0, sizeof(*rec));
    rec->state = state;
    memcpy(rec->owner, x->owner, sizeof(rec->owner));
    memcpy(rec->fingerprint, x->fingerprint, sizeof(rec->fingerprint));
    rec->created_ms = x->created_ms;
}

/* The claim value: state C with a lease deadline of now + lease. */
static char *exchange_claim_value(const struct exchange *x, size_t *len)
{
    struct record rec;

    exchange_record_init(x, &rec, RECORD_CLAIMED);
    rec.lease_deadline_ms = worker_now_ms() + x->policy->lease_ms;
    return exchange_encode(&rec, len);
}

/* ---- lease renewal ----------------------------------------------------- */

static void exchange_on_renewed(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK)
        log_msg(LOG_WARN, "exchange %s: lease renewal failed", x->record_id);
    else if (!applied)
        log_msg(LOG_WARN, "exchange %s: lease lost: another request took the record over",
                x->record_id);
    exchange_unref(x);
}

static void exchange_lease_interval(const struct exchange *x, struct timeval *tv)
{
    uint64_t ms = x->policy->lease_ms / 3;

    if (ms < 10)
        ms = 10;
    tv->tv_sec = (time_t)(ms / 1000);
    tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
}

static void exchange_on_lease_timer(evutil_socket_t fd, short what, void *arg)
{
    struct exchange *x = arg;
    struct timeval tv;
    size_t len;
    char *value;

    (void)fd;
    (void)what;
    if (x->state != X_FORWARDING)
        return;
    value = exchange_claim_value(x, &len);
    if (value != NULL) {
        x->pending++;
        store_replace_owned(x->w->store, x->record_key, x->owner, value, len, 0,
                            exchange_on_renewed, x);
        free(value);
    }
    exchange_lease_interval(x, &tv);
    evtimer_add(&x->lease_timer, &tv);
}

/* ---- after the upstream answered: record, then answer ------------------ */

static bool exchange_status_releases(const struct exchange *x, int status)
{
    /*
     * A webhook receiver that failed must see the provider's redelivery:
     * only its 2xx answers are recorded (CONTRACT 8: duplicates get the stored 2xx).
     */
    if (x->policy->webhook && (status < 200 || status > 299))
        return true;
    for (size_t i = 0; i < x->policy->n_release_statuses; i++)
        if (x->policy->release_statuses[i] == status)
            return true;
    return false;
}

/* The record write finished (or failed): answer with what the upstream said. */
static void exchange_on_recorded(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK)
        log_msg(LOG_ERROR, "exchange %s: the answer could not be recorded; the claim stays "
                "until its lease ends", x->record_id);
    else if (!applied)
        log_msg(LOG_WARN, "exchange %s: record no longer ours; answer not recorded",
                x->record_id);
    exchange_record_changed(x->w, x->record_key);
    if (x->state == X_RECORDING)
        exchange_reply_upstream(x);
    exchange_unref(x);
}

/* The claim was released or marked unknown after an upstream failure: answer the problem. */
static void exchange_on_failure_recorded(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;

    (void)applied;
    if (st != STORE_OK)
        log_msg(LOG_ERROR, "exchange %s: could not update the record after an upstream failure",
                x->record_id);
    exchange_record_changed(x->w, x->record_key);
    if (x->state == X_RECORDING) {
        enum problem p = x->resp_status == 504 ? PROBLEM_UPSTREAM_TIMEOUT
                                               : PROBLEM_UPSTREAM_UNAVAILABLE;
        exchange_problem(x, p, x->resp_status,
                         p == PROBLEM_UPSTREAM_TIMEOUT ? "the upstream did not answer in time"
                                                       : "the upstream could not be reached or "
                                                         "broke off its answer",
                         0, false);
    }
    exchange_unref(x);
}

static void exchange_record_answer(struct exchange *x)
{
    struct record rec;
    const struct evkeyval *h;
    const char *connection = evhttp_find_header(&x->resp_headers, "Connection");
    size_t body_len = evbuffer_get_length(x->resp_body), len;
    char *value;

    exchange_record_init(x, &rec, RECORD_DONE);
    rec.completed_ms = worker_now_ms();
    rec.status = x->resp_status;
    if (body_len > x->cfg->max_stored_response) {
        /* Executed, but too large to keep: retries must learn that, not execute again. */
        rec.state = RECORD_TOMBSTONE;
        x->outcome = "forwarded-not-stored";
    } else {
        TAILQ_FOREACH(h, &x->resp_headers, next) {
            if (!header_is_stored(h->key) || header_named_by_connection(connection, h->key))
                continue;
            if (rec.n_headers == RECORD_MAX_HEADERS) {
                rec.state = RECORD_TOMBSTONE;
                break;
            }
            rec.headers[rec.n_headers++] = (struct record_field){
                h->key, strlen(h->key), h->value, strlen(h->value)
            };
        }
        if (rec.state == RECORD_TOMBSTONE) {
            rec.n_headers = 0;
            x->outcome = "forwarded-not-stored";
        } else {
            rec.body = (const char *)evbuffer_pullup(x->resp_body, -1);
            rec.body_len = body_len;
            x->outcome = "forwarded";
        }
    }
    value = exchange_encode(&rec, &len);
    x->state = X_RECORDING;
    if (value == NULL) {
        log_msg(LOG_ERROR, "exchange %s: cannot encode the record", x->record_id);
        exchange_reply_upstream(x);
        return;
    }
    x->pending++;
    store_replace_owned(x->w->store, x->record_key, x->owner, value, len,
                        x->policy->retention_ms, exchange_on_recorded, x);
    free(value);
}

/* Upstream failed after the claim. Release, or keep an outcome-unknown record. */
static void exchange_record_failure(struct exchange *x, enum upstream_outcome outcome)
{
    bool release = outcome == UPSTREAM_NOT_SENT || x->policy->on_ambiguous == AMBIGUOUS_RELEASE;

    x->state = X_RECORDING;
    x->resp_status = outcome == UPSTREAM_TIMEOUT ? 504 : 502;
    x->outcome = outcome == UPSTREAM_NOT_SENT ? "upstream-error" : "ambiguous";
    if (release) {
        x->pending++;
        store_release_owned(x->w->store, x->record_key, x->owner, exchange_on_failure_recorded,
                            x);
    } else {
        struct record rec;
        size_t len = 0;
        char *value;
        exchange_record_init(x, &rec, RECORD_UNKNOWN);
        rec.completed_ms = worker_now_ms();
        value = exchange_encode(&rec, &len);
        /* Unencodable is harmless here: the claim's lease runs out, which reads the same. */
        x->pending++;
        if (value == NULL)
            exchange_on_failure_recorded(STORE_ERROR, false, x);
        else
            store_replace_owned(x->w->store, x->record_key, x->owner, value, len,
                                x->policy->retention_ms, exchange_on_failure_recorded, x);
        free(value);
    }
}

static void exchange_on_released_after_answer(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;

    (void)applied;
    if (st != STORE_OK)
        log_msg(LOG_WARN, "exchange %s: release failed; the claim ends with its lease",
                x->record_id);
    exchange_record_changed(x->w, x->record_key);
    if (x->state == X_RECORDING)
        exchange_reply_upstream(x);
    exchange_unref(x);
}

static void exchange_on_upstream(enum upstream_outcome outcome,
                                 const struct upstream_response *resp, const char *detail,
                                 const char *cause, double upstream_ms, void *arg)
{
    struct exchange *x = arg;

    x->upstream_ms = upstream_ms;
    metrics_observe(x->w->metrics, METRICS_UPSTREAM_LATENCY, upstream_ms / 1000.0);
    event_del(&x->lease_timer);
    if (outcome == UPSTREAM_ANSWERED) {
        /* take the answer over without a copy (upstream.h allows it) */
        x->resp_status = resp->status;
        TAILQ_CONCAT(&x->resp_headers, resp->headers, next);
        x->resp_body = evbuffer_new();
        evbuffer_add_buffer(x->resp_body, resp->body);
    } else {
        log_msg(LOG_WARN, "exchange %s: %s: %s", x->record_id[0] ? x->record_id : "-", detail,
                cause != NULL ? cause : "no reason given");
    }

    if (x->state == X_PASSING) {
        if (outcome == UPSTREAM_ANSWERED) {
            if (x->outcome == NULL)
                x->outcome = "pass-through";
            exchange_reply_upstream(x);
        } else {
            exchange_problem(x, outcome == UPSTREAM_TIMEOUT ? PROBLEM_UPSTREAM_TIMEOUT
                                                            : PROBLEM_UPSTREAM_UNAVAILABLE,
                             outcome == UPSTREAM_TIMEOUT ? 504 : 502, detail, 0, false);
        }
    } else if (outcome != UPSTREAM_ANSWERED) {
        exchange_record_failure(x, outcome);
    } else if (exchange_status_releases(x, x->resp_status)) {
        /* The upstream said it did nothing (e.g. 503): forget the key, the retry executes. */
        x->state = X_RECORDING;
        x->outcome = "released";
        x->pending++;
        store_release_owned(x->w->store, x->record_key, x->owner,
                            exchange_on_released_after_answer, x);
    } else {
        exchange_record_answer(x);
    }
    exchange_unref(x);
}

/* Send the request upstream: protected (we hold the claim) or passing. */
static void exchange_forward(struct exchange *x)
{
    if (x->state == X_FORWARDING) {
        struct timeval tv;
        exchange_lease_interval(x, &tv);
        evtimer_add(&x->lease_timer, &tv);
    }
    x->pending++;
    if (upstream_send(x->w->upstream, x->method, x->target,
                      evhttp_request_get_input_headers(x->req), x->client_addr, x->body_bytes,
                      x->body_len, exchange_on_upstream, x) != 0) {
        x->pending--;
        log_msg(LOG_ERROR, "exchange %s: cannot start the upstream call", x->record_id);
        if (x->state == X_FORWARDING) {
            event_del(&x->lease_timer);
            exchange_record_failure(x, UPSTREAM_NOT_SENT);
        } else {
            exchange_problem(x, PROBLEM_UPSTREAM_UNAVAILABLE, 502, "cannot reach the upstream",
                             0, false);
        }
    }
}

/* ---- waiting for another request's answer ------------------------------ */

static void exchange_wait(struct exchange *x)
{
    uint64_t now = worker_now_ms();
    struct timeval tv;

    if (!x->waited) {
        x->waited = true;
        x->wait_deadline_ms = now + x->policy->wait_timeout_ms;
        x->poll_delay_ms = EXCHANGE_POLL_MIN_MS;
    }
    if (now >= x->wait_deadline_ms) {
        x->outcome = "in-flight-rejected";
        exchange_problem(x, PROBLEM_REQUEST_IN_PROGRESS, 409,
                         "a request with this idempotency key is still in progress; retry later",
                         1, false);
        return;
    }
    x->state = X_WAITING;
    if (!x->waiting_listed) {
        TAILQ_INSERT_TAIL(&x->w->waiters, x, wait_link);
        x->waiting_listed = true;
        x->w->waiting++;
    }
    /* bounded exponential backoff, never past the deadline */
    uint64_t delay = x->poll_delay_ms;
    if (now + delay > x->wait_deadline_ms)
        delay = x->wait_deadline_ms - now;
    x->poll_delay_ms = x->poll_delay_ms * 2 > EXCHANGE_POLL_MAX_MS ? EXCHANGE_POLL_MAX_MS
                                                                   : x->poll_delay_ms * 2;
    tv.tv_sec = (time_t)(delay / 1000);
    tv.tv_usec = (suseconds_t)(delay % 1000) * 1000;
    evtimer_add(&x->wait_timer, &tv);
}

static void exchange_on_wait_timer(evutil_socket_t fd, short what, void *arg)
{
    struct exchange *x = arg;

    (void)fd;
    (void)what;
    event_del(&x->wait_timer); /* a wake-up may have run it early */
    if (x->state != X_WAITING)
        return;
    exchange_unlist_waiter(x);
    exchange_claim(x); /* the record may be gone (released): claim it again, else read it */
}

void exchange_wake_waiters(struct worker *w, const char *record_key)
{
    struct exchange *x;

    TAILQ_FOREACH(x, &w->waiters, wait_link)
        if (x->state == X_WAITING && strcmp(x->record_key, record_key) == 0)
            event_active(&x->wait_timer, EV_TIMEOUT, 0);
}

/* The record at record_key changed: wake its waiters here and in the other workers. */
static void exchange_record_changed(struct worker *w, const char *record_key)
{
    exchange_wake_waiters(w, record_key);
    worker_wake_others(w, record_key);
}

/* ---- claims that may have landed after we gave up on them -------------- */

/*
 * A claim or a takeover that timed out (or whose connection dropped) may
 * still reach Redis after the client got its 503, leaving a claim nobody
 * forwards: retries would wait (or get 409 under in_flight: reject), then read
 * it as "outcome unknown" or take it over. Nothing was sent upstream, so
 * release it (compare-and-set on our owner token) once Redis answers again.
 */
#define ORPHAN_RETRY_MS 1000

struct orphan_claim {
    struct worker *w;
    char record_key[EXCHANGE_RECORD_KEY_MAX];
    char owner[33];
    unsigned attempts_left;
    struct event timer;
    TAILQ_ENTRY(orphan_claim) link;
};

static void orphan_free(struct orphan_claim *o)
{
    event_del(&o->timer);
    TAILQ_REMOVE(&o->w->orphans, o, link);
    o->w->orphaned--;
    free(o);
}

static void orphan_on_released(enum store_status st, bool applied, void *arg);

static void orphan_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct orphan_claim *o = arg;

    (void)fd;
    (void)what;
    if (o->w->store == NULL) /* shutting down: exchange_forget_orphans frees it */
        return;
    store_release_owned(o->w->store, o->record_key, o->owner, orphan_on_released, o);
}

static void orphan_on_released(enum store_status st, bool applied, void *arg)
{
    struct orphan_claim *o = arg;
    struct timeval tv = { ORPHAN_RETRY_MS / 1000, (ORPHAN_RETRY_MS % 1000) * 1000 };

    if (st == STORE_OK) {
        if (applied)
            log_msg(LOG_INFO, "released a claim that reached Redis after its request was "
                    "refused (record key %s)", o->record_key);
        exchange_record_changed(o->w, o->record_key);
        orphan_free(o);
    } else if (o->attempts_left-- > 0) {
        evtimer_add(&o->timer, &tv);
    } else {
        log_msg(LOG_WARN, "gave up releasing a possibly orphaned claim (record key %s); "
                "it ends with its lease", o->record_key);
        orphan_free(o);
    }
}

static void exchange_release_orphan(struct exchange *x)
{
    struct orphan_claim *o = calloc(1, sizeof(*o));
    struct timeval tv = { ORPHAN_RETRY_MS / 1000, (ORPHAN_RETRY_MS % 1000) * 1000 };

    if (o == NULL)
        return;
    o->w = x->w;
    memcpy(o->record_key, x->record_key, sizeof(o->record_key));
    memcpy(o->owner, x->owner, sizeof(o->owner));
    /* until the claim's lease would have ended anyway */
    o->attempts_left = (unsigned)(x->policy->lease_ms / ORPHAN_RETRY_MS) + 1;
    evtimer_assign(&o->timer, x->w->base, orphan_on_timer, o);
    TAILQ_INSERT_TAIL(&x->w->orphans, o, link);
    x->w->orphaned++;
    evtimer_add(&o->timer, &tv);
}

void exchange_forget_orphans(struct worker *w)
{
    while (!TAILQ_EMPTY(&w->orphans))
        orphan_free(TAILQ_FIRST(&w->orphans));
}

/* ---- the claim and what an existing record means ----------------------- */

static void exchange_on_takeover(enum store_status st, bool applied, void *arg);

static void exchange_on_existing(struct exchange *x, const char *value, size_t len)
{
    struct record rec;
    char detail[160];

    if (record_decode(value, len, &rec) != 0) {
        log_msg(LOG_ERROR, "exchange %s: the stored record is malformed", x->record_id);
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    switch (decide_existing(&rec, x->fingerprint, worker_now_ms(), x->policy)) {
    case DECIDE_REPLAY:
        exchange_reply_replay(x, &rec);
        return;
    case DECIDE_MISMATCH:
        x->outcome = "mismatch";
        exchange_problem(x, PROBLEM_KEY_REUSE_MISMATCH, x->policy->mismatch_status,
                         "this idempotency key was already used with a different request "
                         "(method, path, query or body)",
                         0, false);
        return;
    case DECIDE_WAIT:
        exchange_wait(x);
        return;
    case DECIDE_REJECT_IN_FLIGHT:
        x->outcome = "in-flight-rejected";
        exchange_problem(x, PROBLEM_REQUEST_IN_PROGRESS, 409,
                         "a request with this idempotency key is in progress; retry later", 1,
                         false);
        return;
    case DECIDE_OUTCOME_UNKNOWN:
        x->outcome = "outcome-unknown";
        exchange_problem(x, PROBLEM_OUTCOME_UNKNOWN, 502,
                         rec.state == RECORD_UNKNOWN
                             ? "the original request was sent upstream but its outcome is "
                               "unknown; an operator must check and purge the record"
                             : "the request that claimed this key stopped without an answer (its "
                               "lease ran out), so it may or may not have reached the upstream; "
                               "an operator must check and purge the record",
                         0, true);
        return;
    case DECIDE_NOT_REPLAYABLE:
        snprintf(detail, sizeof(detail),
                 "the original request was executed (upstream status %d) but its response was "
                 "too large to store; it will not be executed again",
                 rec.status);
        x->outcome = "not-replayable";
        exchange_problem(x, PROBLEM_RESPONSE_NOT_REPLAYABLE, 502, detail, 0, true);
        return;
    case DECIDE_TAKEOVER: {
        size_t claim_len;
        char *claim = exchange_claim_value(x, &claim_len);
        if (claim == NULL) {
            exchange_store_failed(x, STORE_ERROR);
            return;
        }
        x->state = X_CLAIMING;
        x->pending++;
        store_takeover(x->w->store, x->record_key, value, len, claim, claim_len,
                       x->policy->retention_ms, exchange_on_takeover, x);
        free(claim);
        return;
    }
    }
}

static void exchange_on_claim(enum store_status st, const char *value, size_t len, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK) {
        /* under on_store_error: pass the request is forwarded: its claim must stay */
        if ((st == STORE_TIMEOUT || st == STORE_LOST) &&
            x->policy->on_store_error == STORE_ERROR_REJECT)
            exchange_release_orphan(x);
        exchange_store_failed(x, st);
    } else if (value == NULL) {
        x->state = X_FORWARDING;
        exchange_forward(x);
    } else {
        exchange_on_existing(x, value, len);
    }
    exchange_unref(x);
}

static void exchange_on_takeover(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK) {
        /* a takeover that may have landed wrote our claim: released like a claim's */
        if ((st == STORE_TIMEOUT || st == STORE_LOST) &&
            x->policy->on_store_error == STORE_ERROR_REJECT)
            exchange_release_orphan(x);
        exchange_store_failed(x, st);
    } else if (applied) {
        log_msg(LOG_WARN, "exchange %s: took over a record whose lease expired", x->record_id);
        x->state = X_FORWARDING;
        exchange_forward(x);
    } else {
        exchange_claim(x); /* it changed under us: look again */
    }
    exchange_unref(x);
}

static void exchange_claim(struct exchange *x)
{
    size_t len;
    char *value = exchange_claim_value(x, &len);

    if (value == NULL) {
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    x->state = X_CLAIMING;
    x->pending++;
    store_claim(x->w->store, x->record_key, value, len, x->policy->retention_ms,
                exchange_on_claim, x);
    free(value);
}

/* ---- classification (CONTRACT 4) --------------------------------------- */

static const char *exchange_method_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    }
    return "GET";
}

/* The key header's value; *count says how many lines carried it (two is an error). */
static const char *exchange_key_header(const struct evkeyvalq *headers, const char *name,
                                       int *count)
{
    const struct evkeyval *h;
    const char *value = NULL;

    *count = 0;
    TAILQ_FOREACH(h, headers, next) {
        if (strcasecmp(h->key, name) == 0) {
            (*count)++;
            value = h->value;
        }
    }
    return value;
}

/* Fill record_id and record_key from route, scope header values and the key. */
static void exchange_identify(struct exchange *x, const struct evkeyvalq *headers,
                              const char *key, size_t key_len)
{
    const char *scope[CONFIG_MAX_SCOPE_HEADERS];

    for (size_t i = 0; i < x->policy->n_scope_headers; i++)
        scope[i] = evhttp_find_header(headers, x->policy->scope_headers[i]);
    record_id_compute(x->policy->record_source, x->policy->scope_headers, scope,
                      x->policy->n_scope_headers, key, key_len, x->record_id);
    /* config_load bounds key_prefix so this cannot fail; a cut key would merge records */
    if (record_key_format(x->cfg->key_prefix, x->record_id, x->record_key,
                          sizeof(x->record_key)) != 0)
        abort();
}

/*
 * Check the provider's signature over the raw body before anything is
 * claimed, so nobody can pre-claim an event id. Answers 401 and returns false
 * when it does not hold. *id_header: for standard-webhooks, the event id
 * header of the spelling that verified (webhook-id or svix-id), else NULL.
 */
static bool exchange_signature_valid(struct exchange *x, const struct evkeyvalq *headers,
                                     const char **id_header)
{
    const struct webhook_headers wh = {
        .webhook_id = evhttp_find_header(headers, "webhook-id"),
        .webhook_timestamp = evhttp_find_header(headers, "webhook-timestamp"),
        .webhook_signature = evhttp_find_header(headers, "webhook-signature"),
        .svix_id = evhttp_find_header(headers, "svix-id"),
        .svix_timestamp = evhttp_find_header(headers, "svix-timestamp"),
        .svix_signature = evhttp_find_header(headers, "svix-signature"),
        .hub_signature_256 = evhttp_find_header(headers, "X-Hub-Signature-256"),
        .stripe_signature = evhttp_find_header(headers, "Stripe-Signature"),
    };
    const char *reason = NULL;
    enum webhook_verdict v;

    v = webhook_verify(x->policy->verify, x->policy->secrets, x->policy->n_secrets, &wh,
                       x->body_bytes, x->body_len, (int64_t)(worker_now_ms() / 1000), &reason,
                       id_header);
    if (v == WEBHOOK_OK)
        return true;
    x->outcome = "signature-invalid";
    exchange_problem(x, PROBLEM_SIGNATURE_INVALID, 401,
                     reason != NULL ? reason : "the webhook signature does not verify", 0, false);
    return false;
}

/*
 * The header that carries the key: key_header, except that a standard-webhooks
 * route keyed by header:webhook-id or header:svix-id takes the id of the
 * spelling whose signature verified (Svix sends svix-*, others webhook-*):
 * the one id the signature covers.
 */
static const char *exchange_key_header_name(const struct exchange *x, const char *signed_id)
{
    const char *name = x->policy->key_header;

    if (signed_id != NULL &&
        (strcasecmp(name, "webhook-id") == 0 || strcasecmp(name, "svix-id") == 0))
        return signed_id;
    return name;
}

/*
 * key_from: json:/pointer (e.g. Stripe's event id). key: keysize bytes, at
 * least key_max_length + 1. Answers 400 and returns false on failure.
 */
static bool exchange_key_from_body(struct exchange *x, char *key, size_t keysize, size_t *key_len)
{
    size_t max = x->policy->key_max_length + 1 < keysize ? x->policy->key_max_length + 1 : keysize;
    int rc = webhook_key_from_json(x->body_bytes != NULL ? x->body_bytes : "", x->body_len,
                                   x->policy->key_json_pointer, key, max, key_len);
    char *checked;
    bool valid;

    if (rc == -1) {
        exchange_problem(x, PROBLEM_MISSING_KEY, 400,
                         "the JSON body has no event id at the configured pointer", 0, false);
        return false;
    }
    checked = rc == 0 ? malloc(max) : NULL;
    valid = checked != NULL &&
            key_parse(key, x->policy->key_max_length, checked, max, key_len) == KEY_OK &&
            strcmp(checked, key) == 0;
    free(checked);
    if (!valid) {
        exchange_problem(x, PROBLEM_INVALID_KEY, 400,
                         "the event id in the JSON body is not a non-empty printable string "
                         "within the configured length",
                         0, false);
        return false;
    }
    return true;
}

static struct exchange *exchange_create(struct worker *w, struct evhttp_request *req)
{
    struct exchange *x = calloc(1, sizeof(*x));
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    const char *target = evhttp_request_get_uri(req);

    if (x == NULL)
        return NULL;
    x->w = w;
    x->conf = worker_config_get(w->conf);
    x->cfg = &x->conf->cfg;
    x->req = req;
    x->state = X_NEW;
    gettimeofday(&x->started, NULL);
    x->method = exchange_method_name(evhttp_request_get_command(req));
    if (target != NULL && target[0] == '/') {
        /* origin-form: the path is everything before '?'; "//x" is a path here, not an authority */
        x->target = strdup(target);
        x->path = x->target != NULL ? strndup(x->target, strcspn(x->target, "?#")) : NULL;
    } else {
        /*
         * absolute-form (RFC 9112 3.2.2), or "*": the upstream gets, and the
         * routes and the fingerprint see, the origin-form path and query.
         */
        const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
        const char *p = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
        const char *q = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
        x->path = strdup(p != NULL && p[0] == '/' ? p : "/");
        if (x->path != NULL && asprintf(&x->target, "%s%s%s", x->path, q != NULL ? "?" : "",
                                        q != NULL ? q : "") < 0)
            x->target = NULL;
        x->invalid_target = target == NULL || uri == NULL || evhttp_uri_get_host(uri) == NULL;
    }
    for (const char *c = x->target; c != NULL && *c != '\0' && !x->invalid_target; c++)
        x->invalid_target = (unsigned char)*c < 0x20 || *c == 0x7f;
    TAILQ_INIT(&x->resp_headers);
    x->body = evbuffer_new();
    if (x->target == NULL || x->path == NULL || x->body == NULL) {
        worker_config_put(x->conf);
        free(x->target);
        free(x->path);
        if (x->body != NULL)
            evbuffer_free(x->body);
        free(x);
        return NULL;
    }
    evbuffer_add_buffer(x->body, evhttp_request_get_input_buffer(req));
    x->body_len = evbuffer_get_length(x->body);
    x->body_bytes = x->body_len > 0 ? (const char *)evbuffer_pullup(x->body, -1) : NULL;
    if (conn != NULL) {
        char *addr = NULL;
        ev_uint16_t port = 0;
        evhttp_connection_get_peer(conn, &addr, &port);
        if (addr != NULL)
            snprintf(x->client_addr, sizeof(x->client_addr), "%s", addr);
    }
    evtimer_assign(&x->lease_timer, w->base, exchange_on_lease_timer, x);
    evtimer_assign(&x->wait_timer, w->base, exchange_on_wait_timer, x);
    w->active++;
    return x;
}

/*
 * Whether libevent 2.1 reads a body for this method at all
 * (evhttp_method_may_have_body in 2.1.12's http.c): not for HEAD or TRACE,
 * whatever the framing headers say.
 */
static bool exchange_method_reads_body(enum evhttp_cmd_type cmd)
{
    return cmd != EVHTTP_REQ_HEAD && cmd != EVHTTP_REQ_TRACE;
}

/*
 * Body framing that libevent 2.1 may have read otherwise than the client (or
 * a proxy in front) meant, or NULL when there is none. libevent takes the
 * first Content-Length through strtoll (a sign, leading blanks and an
 * obs-folded line pass), dechunks only when Transfer-Encoding is exactly
 * "chunked" (else falls back to Content-Length or to no body), and never
 * reads a body for HEAD or TRACE: in each case the bytes it leaves unread
 * are parsed as a next request on the connection, which is request
 * smuggling (RFC 9112 6.1, 6.3, 11.2). Such a request is refused whole and
 * its connection closed. A bodiless method may say "Content-Length: 0":
 * nothing is left unread then.
 */
static const char *exchange_framing_fault(struct evhttp_request *req)
{
    const struct evkeyvalq *headers = evhttp_request_get_input_headers(req);
    int n_cl, n_te;
    const char *cl = exchange_key_header(headers, "Content-Length", &n_cl);
    const char *te = exchange_key_header(headers, "Transfer-Encoding", &n_te);
    bool reads_body = exchange_method_reads_body(evhttp_request_get_command(req));

    if (req->major != 1 || req->minor > 1)
        return "only HTTP/1.0 and HTTP/1.1 requests are served";
    if (n_te > 0) {
        if (n_te > 1 || strcasecmp(te, "chunked") != 0)
            return "Transfer-Encoding must be exactly one 'chunked'";
        if (n_cl > 0)
            return "a request must not carry both Transfer-Encoding and Content-Length";
        if (req->minor == 0)
            return "Transfer-Encoding is not defined for HTTP/1.0 requests";
        if (!reads_body)
            return "this method has no body, so it must not carry Transfer-Encoding";
        return NULL;
    }
    if (n_cl > 1)
        return "Content-Length must appear once";
    if (n_cl == 1) {
        if (cl[0] == '\0' || strspn(cl, "0123456789") != strlen(cl))
            return "Content-Length must be decimal digits only";
        if (!reads_body && strspn(cl, "0") != strlen(cl))
            return "this method has no body, so its Content-Length must be 0";
    }
    return NULL;
}

/*
 * Everything after routing for a protected method: signature, key, claim.
 * key: key_size bytes (key_max_length + 1), scratch for the parsed key.
 */
static void exchange_handle_protected(struct exchange *x, const struct evkeyvalq *headers,
                                      char *key, size_t key_size)
{
    const char *raw_key;
    const char *signed_id = NULL;       /* standard-webhooks: the id header that verified */
    size_t key_len = 0;
    int key_lines;
    enum key_status ks;

    if (x->policy->verify != VERIFY_NONE && !exchange_signature_valid(x, headers, &signed_id))
        return;
    if (x->policy->key_from == KEY_FROM_JSON) {
        if (!exchange_key_from_body(x, key, key_size, &key_len))
            return;
        exchange_protect(x, headers, key, key_len);
        return;
    }
    raw_key = exchange_key_header(headers, exchange_key_header_name(x, signed_id), &key_lines);
    if (key_lines == 0 && x->policy->webhook) {
        /* a signed delivery without its event id is malformed, whatever require_key says */
        exchange_problem(x, PROBLEM_MISSING_KEY, 400,
                         "the webhook delivery carries no event id header", 0, false);
        return;
    }
    if (key_lines == 0) {
        if (x->policy->require_key) {
            exchange_problem(x, PROBLEM_MISSING_KEY, 400,
                             "this route requires an idempotency key header", 0, false);
            return;
        }
        x->outcome = "unprotected";
        x->state = X_PASSING;
        exchange_forward(x);
        return;
    }
    if (key_lines > 1) {
        exchange_problem(x, PROBLEM_INVALID_KEY, 400,
                         "the idempotency key header appears more than once", 0, false);
        return;
    }
    ks = key_parse(raw_key, x->policy->key_max_length, key, key_size, &key_len);
    if (ks != KEY_OK) {
        exchange_problem(x, PROBLEM_INVALID_KEY, 400, key_status_reason(ks), 0, false);
        return;
    }
    exchange_protect(x, headers, key, key_len);
}

/* The route for x->path, normalised (path.h); false after answering 400 when it cannot be. */
static bool exchange_route(struct exchange *x)
{
    size_t size = path_normalized_size(x->path);
    char *normalized = malloc(size);
    enum path_status st = normalized != NULL ? path_normalize(x->path, normalized, size)
                                             : PATH_NO_MEMORY;

    /* never match the raw path instead: it is a spelling the routes were not written for */
    if (st == PATH_OK)
        x->route = config_match_route(x->cfg, normalized);
    free(normalized);
    if (st != PATH_OK) {
        exchange_problem(x, PROBLEM_INVALID_TARGET, 400, path_status_reason(st), 0, false);
        return false;
    }
    return true;
}

void exchange_handle(struct evhttp_request *req, void *arg)
{
    struct worker *w = arg;
    struct exchange *x = exchange_create(w, req);
    const struct evkeyvalq *headers = evhttp_request_get_input_headers(req);
    const char *framing;
    size_t key_size;
    char *key;

    if (x == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    framing = exchange_framing_fault(req);
    if (framing != NULL) {
        /* what libevent left unread must not be read as a request: close the connection */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        exchange_problem(x, PROBLEM_INVALID_FRAMING, 400, framing, 0, false);
        return;
    }
    if (w->draining) {
        /*
         * A new request on a kept-alive connection after SIGTERM: refuse it
         * unforwarded, or the drain could end with it sent and unanswered.
         */
        exchange_problem(x, PROBLEM_SHUTTING_DOWN, 503,
                         "this proxy instance is shutting down; retry", 1, false);
        return;
    }
    if (x->invalid_target) {
        exchange_problem(x, PROBLEM_INVALID_TARGET, 400,
                         "the request target has a control character or an unsupported form", 0,
                         false);
        return;
    }
    if (!exchange_route(x))
        return;
    if (x->body_len > x->cfg->max_request_body) {
        exchange_problem(x, PROBLEM_BODY_TOO_LARGE, 413,
                         "the request body is larger than the configured limit", 0, false);
        return;
    }
    if (x->route == NULL || !(x->route->policy.methods & config_method_bit(x->method))) {
        /* the route (if any) stays for the access log and metrics: the method is not protected */
        x->outcome = "pass-through";
        x->state = X_PASSING;
        exchange_forward(x);
        return;
    }
    x->policy = &x->route->policy;
    /* sized from the configured maximum, so no key the config allows is refused as too long */
    key_size = x->policy->key_max_length + 1;
    key = malloc(key_size);
    if (key == NULL) {
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    exchange_handle_protected(x, headers, key, key_size);
    free(key);
}

/* The key is valid: compute the record identity and fingerprint, then claim. */
static void exchange_protect(struct exchange *x, const struct evkeyvalq *headers,
                             const char *key, size_t key_len)
{
    exchange_identify(x, headers, key, key_len);
    if (x->policy->fingerprint == FINGERPRINT_REQUEST)
        fingerprint_request(x->method, x->target, x->body_bytes, x->body_len, x->fingerprint);
    else
        fingerprint_none(x->fingerprint);
    if (owner_token_create(x->owner) != 0) {
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    x->created_ms = worker_now_ms();
    exchange_claim(x);
}
