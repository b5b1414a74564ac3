/*
 * exchange_int.h - what the files of the exchange module share (their
 * layers below). Nothing outside the module includes it.
 */
#ifndef IDEM_EXCHANGE_INT_H
#define IDEM_EXCHANGE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/time.h>

#include <event2/event_struct.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>

#include "budget.h"
#include "exchange.h"
#include "exchange_state.h"
#include "fingerprint.h"
#include "janitor.h"
#include "record_id.h"
#include "keyring.h"
#include "meter.h"
#include "outcome.h"
#include "problem.h"
#include "record.h"
#include "reply.h"
#include "request.h"
#include "store.h"
#include "upstream.h"

struct exchange;

/*
 * One worker thread's exchanges (exchange.h): the I/O objects they use, the
 * configuration new requests start under, the waiters and the counters.
 * Only the files of proxy/exchange/ touch its fields; the counters are
 * atomic because other threads read them through exchange.h's calls.
 */
struct exchange_set {
    struct event_base *base;
    struct store *store;                    /* borrowed from the worker */
    struct upstream *upstream;              /* borrowed */
    struct inbox *inbox;                    /* this worker's inbox consumer, or NULL; borrowed */
    struct metrics *metrics;                /* the process's, shared */
    struct budget *budget;                  /* limits.max_buffered: the process's, shared */
    struct config *conf;                    /* new requests start under it; one reference */
    bool draining;                          /* after SIGTERM: refuse new requests */
    uint64_t drain_deadline_ms;             /* wall clock: when the drain ends (draining) */
    _Atomic unsigned active;                /* exchanges not yet freed */
    _Atomic unsigned unflushed;             /* answers still being written out */
    _Atomic unsigned waiting;               /* exchanges in `waiters` */
    TAILQ_HEAD(, exchange) waiters;         /* waiting on another request's record */
    struct janitor janitor;                 /* claims of refused requests to release */
    exchange_wake_cb *wake_others;
    void *wake_arg;
};

/* What WRITING writes to the record once the upstream is done. */
enum exchange_write {
    WRITE_ANSWER,   /* the upstream's answer (or a tombstone): then send it */
    WRITE_RELEASE,  /* delete the claim: the upstream did nothing, or said so */
    WRITE_UNKNOWN,  /* mark the outcome unknown (on_ambiguous: hold) */
};

struct exchange {
    struct exchange_set *set;
    struct config *conf;                /* one reference: routes and policies it started under */
    struct http_req *req;               /* NULL once answered */
    struct upstream_call *call;         /* a streamed exchange's upstream transfer, or NULL */
    bool stream_begun;                  /* its answer's head went to the client */
    bool send_paused, recv_paused;      /* its upstream transfer waits for the client */
    bool stream_started;                /* its upstream transfer was started */
    long long resp_length;              /* the answer's Content-Length, -1 unknown */
    size_t resp_streamed;               /* bytes of the answer streamed to the client */
    enum exchange_state state;
    const struct route *route;
    const struct route_policy *policy;
    struct request_view rq;             /* method, target, path, body, client */

    char record_key[RECORD_KEY_MAX];
    char record_id[RECORD_ID_HEX_LEN + 1];
    char fingerprint[FINGERPRINT_HEX_LEN + 1];
    char key_id[KEYRING_ID_MAX + 1];    /* the keyring key of fingerprint; "": unkeyed */
    char owner[33];
    uint64_t created_ms;
    double replicating_ms;              /* monotonic: when REPLICATING began */

    unsigned pending;                   /* references: callbacks that can still reach us
                                           (exchange_state.h: take where armed, drop where run) */
    struct event lease_timer;
    uint64_t lease_deadline_ms;         /* wall clock: our claim's lease, as last confirmed */
    uint64_t renew_deadline_ms;         /* the lease the claim or renewal in flight sets; 0 none */
    bool renew_failing;                 /* the last renewal failed for want of Redis */
    struct event wait_timer;
    double wait_deadline_ms;            /* monotonic: when waiting ends in a 409 */
    unsigned poll_delay_ms;
    bool waited;
    TAILQ_ENTRY(exchange) wait_link;

    /* the upstream's verdict and answer, kept while the record is written */
    enum upstream_outcome upstream;
    enum exchange_write write;
    char *write_value;                  /* ANSWER, UNKNOWN: the record, kept to send again */
    size_t write_len;
    bool write_retrying;                /* a write failed for want of Redis: sent again */
    uint64_t write_started_ms;          /* wall clock: when WRITING began */
    struct event write_timer;           /* the next attempt of a failed write */
    int resp_status;
    struct evkeyvalq resp_headers;
    struct evbuffer *resp_body;

    /*
     * What x counts under limits.max_buffered (docs/operations.md#memory), from its
     * admission: its body until it is dropped; its answer (a reservation,
     * config_answer_reservation, then the bytes that came), handed to the reply
     * until the client has it; its record while x keeps it (write_value and
     * the store's copies of the write).
     */
    struct budget_hold hold_body;
    struct budget_hold hold_answer;
    struct budget_hold hold_record;

    char *event_id;                     /* the key: a queued webhook route's event id; owned */
    bool inbox_failed;                  /* queued: the append failed, the provider gets 503 */
    bool inbox_unrecorded;              /* queued: appended, but the ack record write failed: 503 */

    enum outcome outcome;               /* for the access log and metrics */
    enum problem refusal;               /* OUTCOME_REFUSED: named by this problem */
    int status;
    double upstream_ms;
    double started_ms;                  /* monotonic */
};

/*
 * The layers: each file calls only the ones below it.
 *   exchange.c          the set and a request's arrival (classify, admit, create)
 *   exchange_claim.c    the protected path: identity, claim, existing records, waiting
 *   exchange_forward.c  upstream or append, the lease, writing the record, on_store_error
 *   exchange_life.c     states, references, the answer, records, waking waiters
 *   exchange_state.c    the legal-transition table and the reference rule (pure)
 */

/* ---- exchange_life.c ---- */

/* The one place a state changes; false (logged) for an illegal transition. */
bool exchange_set_state(struct exchange *x, enum exchange_state to);

/* Take one reference where a callback that will reach x is armed (exchange_state.h). */
void exchange_ref(struct exchange *x);

/* Drop one reference where its callback runs; frees x when answered and nothing else can reach it. */
void exchange_unref(struct exchange *x);

/* Free x now: only before any callback was armed (exchange_create's failures). */
void exchange_free(struct exchange *x);

/* The request body is needed no more: freed now; its count (hold_body) is the caller's. */
void exchange_drop_body(struct exchange *x);

/* Send the answer; exactly once per exchange. Takes ownership of body (may be NULL). */
void exchange_reply(struct exchange *x, int status, struct evbuffer *body);

/* Send the upstream's answer kept in x (resp_status, resp_headers, resp_body). */
void exchange_reply_upstream(struct exchange *x);

/*
 * The upstream's answer to x, a protected request it executed (FORWARDING:
 * streamed as a tombstone; WRITING: recorded, or released), goes out with
 * its fields moved to the client's answer: an Idempotent-Replayed field the
 * upstream sent is dropped, and on a route with replayed_header_on_first
 * it is marked Idempotent-Replayed: false (reply_mark_executed). Nothing
 * for a request that passes.
 */
void exchange_mark_executed(struct exchange *x);

/*
 * A streamed exchange's answer is over (whole, or cut short): x enters
 * ANSWERED with status, is counted and logged, gives its holds back and
 * forgets its request; freed once no callback can reach it.
 */
void exchange_answered_streamed(struct exchange *x, int status);

/*
 * The head of a request whose verdict the head decides and that forwards
 * without protection (classify_streams): admit it (two stream windows under
 * limits.max_buffered), then stream it both ways (exchange_stream.c). x is
 * the new exchange, its route and outcome set.
 */
void exchange_stream_start(struct exchange *x);

/*
 * Streaming an answer (exchange_stream.c), for exchange_forward.c too:
 * take_head keeps the upstream's status, fields (copied into resp_headers)
 * and length (for HEAD too, the one announced); begin sends the head to the
 * client (the fields move out of resp_headers; 0, or -1 when the client is
 * gone); push hands it a piece (moved out of chunk; 0, UPSTREAM_DATA_PAUSE
 * until the client has taken half a window, -1 when the client is gone);
 * cut closes the client's connection mid-answer (a client gone already:
 * nothing).
 */
void exchange_stream_take_head(struct exchange *x, int status, const struct evkeyvalq *headers,
                               long long content_length);
int exchange_stream_begin(struct exchange *x, long long content_length);
int exchange_stream_push(struct exchange *x, struct evbuffer *chunk);
void exchange_stream_cut(struct exchange *x);

/*
 * An upstream transfer of x is over (its done callback): noted keeps its
 * outcome and time (and logs a failure); passed answers an exchange that was
 * passing: the stream ended or cut short, or the proxy's 502/504 when no byte
 * of an answer went out.
 */
void exchange_stream_noted(struct exchange *x, enum upstream_outcome outcome, const char *detail,
                           const char *cause, double upstream_ms);
void exchange_stream_passed(struct exchange *x, enum upstream_outcome outcome,
                            const struct upstream_response *resp, const char *detail);

/*
 * 503 overloaded + Retry-After: 1 (limits.max_buffered, docs/operations.md#memory),
 * counted; answered from the head, so the body stays unread and the
 * connection closes after it. Nothing was claimed or forwarded.
 */
void exchange_overloaded(struct exchange *x);

/*
 * Count the memory x's body is parsed into from here to exchange_meter_end
 * (key_from: json, a json or form fingerprint) in m (caller-owned) under
 * limits.max_buffered, one body at most a quarter of it (meter.h,
 * docs/operations.md#memory).
 */
void exchange_meter_begin(struct exchange *x, struct mem_meter *m);

/*
 * Stop counting in m. When it refused, x is answered (413 body-too-large:
 * reading this body for what `reading` names needs more than a quarter of
 * limits.max_buffered; 503 overloaded: the budget is full now, retry),
 * nothing claimed or forwarded, and true is returned; false when it fit.
 */
bool exchange_meter_end(struct exchange *x, struct mem_meter *m, const char *reading);

/* The proxy's own answer (docs/client-contract.md). */
void exchange_problem(struct exchange *x, enum problem p, int status, const char *detail,
                      int retry_after_s, bool replayed);

/*
 * 502 outcome-unknown for x's held record (docs/client-contract.md#outcome-unknown):
 * the problem's record_id member, Idempotency-Record-Id and Retry-After
 * (REPLY_OUTCOME_UNKNOWN_RETRY_AFTER_S); replayed (a retry that found the
 * record held, counted in idempotency_proxy_held_answers_total) adds
 * Idempotent-Replayed: true, the first answer has none. detail is static.
 */
void exchange_outcome_unknown(struct exchange *x, const char *detail, bool replayed);

/*
 * A protected request sent upstream whose answer was lost, on a route with
 * on_ambiguous: release (the claim is released: a retry executes again):
 * 504 upstream-timeout after a timeout, else 502 upstream-answer-lost, each
 * naming the record (record_id member, Idempotency-Record-Id), no
 * Retry-After, and in the Stripe format Stripe-Should-Retry as the cause
 * says (docs/client-contract.md#outcome-unknown, "Under on_ambiguous:
 * release").
 */
void exchange_release_lost(struct exchange *x);

/*
 * Just before x's request leaves for the upstream or the inbox, whether it
 * is protected or passes: every field the client sent under
 * upstream.record_id_header, or under a name that setting had before a
 * reload, is dropped, '-' and '_' alike in any case (a client must not
 * choose the correlation, nor forge it for a CGI or WSGI upstream, which
 * reads both spellings as one); a protected request (FORWARDING, a queued
 * delivery) then gets that field set to its record id, and a Connection
 * option naming it is removed so that the hop-by-hop strip keeps it
 * (docs/operations.md#correlating-with-the-upstream). Changes x's
 * request's fields in place: nothing reads them after the forward. Out of
 * memory aborts (oom.h: the claim is held). With the setting "" only the
 * earlier names are dropped.
 */
void exchange_tag_upstream(struct exchange *x, bool protected);

/* Replay a finished record. */
void exchange_reply_replay(struct exchange *x, const struct record *rec);

/* Start rec as a record of x's claim. */
void exchange_record_init(const struct exchange *x, struct record *rec, enum record_state state);

/* rec as the value of x's record (sealed, bound to its Redis key), malloc'd (len bytes); NULL on failure. */
char *exchange_record_encode(const struct exchange *x, const struct record *rec, size_t *len);

/*
 * The claim value (state C, lease deadline now + lease, also put in
 * *deadline_ms, wall clock), malloc'd (len bytes); NULL on failure.
 */
char *exchange_claim_value(const struct exchange *x, size_t *len, uint64_t *deadline_ms);

/* The record at record_key changed: wake its waiters in every thread. */
void exchange_record_changed(struct exchange_set *set, const char *record_key);

/* ---- exchange_forward.c ---- */

/* Send the request upstream: protected (state FORWARDING) or passing. */
void exchange_forward(struct exchange *x);

/* Redis failed: the on_store_error policy (503, or forward unprotected). */
void exchange_store_failed(struct exchange *x, enum store_status st);

/* How often a held lease is renewed: lease/3, at least 10 ms. */
struct timeval exchange_lease_interval(const struct exchange *x);

/*
 * How long to wait before sending a renewal or a record write again that
 * failed for want of Redis (no connection, timeout, connection lost) or
 * that Redis refused for now (store_status_retryable).
 */
#define EXCHANGE_STORE_RETRY_MS 200

/* Renew the lease again in delay_ms, unless a renewal is in flight (its answer re-arms). */
void exchange_lease_rearm(struct exchange *x, uint64_t delay_ms);

/* The timer callbacks of x->lease_timer and x->write_timer. */
void exchange_on_lease_timer(evutil_socket_t fd, short what, void *arg);
void exchange_on_write_timer(evutil_socket_t fd, short what, void *arg);

/* ---- exchange_claim.c ---- */

/* The key is valid: record identity, fingerprint, owner token, then the claim. */
void exchange_protect(struct exchange *x, const struct evkeyvalq *headers, const char *key,
                      size_t key_len);

/* Claim (again): SET NX GET. */
void exchange_claim(struct exchange *x);

/* The timer callback of x->wait_timer. */
void exchange_on_wait_timer(evutil_socket_t fd, short what, void *arg);

#endif
