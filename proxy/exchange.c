/*
 * exchange.c - the request state machine.
 *
 *   NEW --classify--> PASSING ----------------------------------> ANSWERED
 *    |                  ^ on_store_error: pass
 *    +--claim--> CLAIMING --won--> FORWARDING --> WRITING ------> ANSWERED
 *                  |  ^   |             (lease renewed meanwhile)
 *                  |  |   +--min_replicas--> REPLICATING --confirmed--> FORWARDING
 *                  |  |                        +--shortfall--> 503, claim released --> ANSWERED
 *                  |  |                           (on_store_error: pass: FORWARDING)
 *                  |  +-- takeover (expired lease, on_ambiguous: release)
 *                  +--existing--> replay | mismatch | outcome unknown | ... --> ANSWERED
 *                  +--in flight--> WAITING --poll/wake--> CLAIMING again
 *
 * Every state change goes through exchange_set_state, which checks it
 * against the table of legal transitions and keeps the waiter list and its
 * counter. WRITING writes one of three things to the record (the answer, a
 * release, "outcome unknown"); one callback answers after any of them.
 *
 * `pending` counts the callbacks that can still reach the exchange (store
 * commands, the upstream call); it is freed once it has answered and
 * pending is 0. The client may be gone by then: evhttp keeps the request
 * until we reply and frees it in evhttp_send_reply.
 */
#include "exchange_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "classify.h"
#include "clock.h"
#include "config.h"
#include "decide.h"
#include "fingerprint.h"
#include "headers.h"
#include "inbox.h"
#include "log.h"
#include "metrics.h"
#include "outcome.h"
#include "problem.h"
#include "record.h"
#include "reply.h"
#include "request.h"
#include "store.h"
#include "upstream.h"

#define EXCHANGE_POLL_MIN_MS 10
#define EXCHANGE_POLL_MAX_MS 250


static const char *const exchange_state_names[X_STATES] = {
    "new", "passing", "claiming", "waiting", "replicating", "forwarding", "writing", "answered",
};

/* exchange_legal[from] has bit `to` set when from -> to is a legal transition. */
#define X_BIT(s) (1u << (s))
static const unsigned exchange_legal[X_STATES] = {
    [X_NEW] = X_BIT(X_PASSING) | X_BIT(X_CLAIMING) | X_BIT(X_ANSWERED),
    [X_PASSING] = X_BIT(X_ANSWERED),
    [X_CLAIMING] = X_BIT(X_CLAIMING) | X_BIT(X_WAITING) | X_BIT(X_REPLICATING) |
                   X_BIT(X_FORWARDING) | X_BIT(X_PASSING) | X_BIT(X_ANSWERED),
    [X_WAITING] = X_BIT(X_CLAIMING) | X_BIT(X_ANSWERED),
    [X_REPLICATING] = X_BIT(X_FORWARDING) | X_BIT(X_ANSWERED),
    [X_FORWARDING] = X_BIT(X_WRITING),
    [X_WRITING] = X_BIT(X_ANSWERED),
    [X_ANSWERED] = 0,
};

/* ---- states ------------------------------------------------------------- */

/*
 * The one place a state changes. An illegal transition is a bug: it is
 * logged and refused (false), and the caller must not act on it.
 */
bool exchange_set_state(struct exchange *x, enum exchange_state to)
{
    struct exchange_set *set = x->set;

    if (!(exchange_legal[x->state] & X_BIT(to))) {
        log_msg(LOG_ERROR, "exchange %s: illegal transition %s -> %s refused",
                x->record_id[0] ? x->record_id : "-", exchange_state_names[x->state],
                exchange_state_names[to]);
        return false;
    }
    if (x->state == X_WAITING && to != X_WAITING) {
        TAILQ_REMOVE(&set->waiters, x, wait_link);
        set->waiting--;
    } else if (to == X_WAITING && x->state != X_WAITING) {
        TAILQ_INSERT_TAIL(&set->waiters, x, wait_link);
        set->waiting++;
    }
    x->state = to;
    return true;
}

/* ---- lifetime ------------------------------------------------------------ */

static void exchange_free(struct exchange *x)
{
    event_del(&x->lease_timer);
    event_del(&x->wait_timer);
    event_del(&x->write_timer);
    free(x->write_value);
    evhttp_clear_headers(&x->resp_headers);
    if (x->resp_body != NULL)
        evbuffer_free(x->resp_body);
    request_view_deinit(&x->rq);
    free(x->event_id);
    config_unref(x->conf);
    x->set->active--;
    free(x);
}

/* Drop one pending callback's hold; frees the exchange when nothing else can reach it. */
void exchange_unref(struct exchange *x)
{
    x->pending--;
    if (x->state == X_ANSWERED && x->pending == 0)
        exchange_free(x);
}

static const char *exchange_outcome_name(const struct exchange *x)
{
    return x->outcome == OUTCOME_REFUSED ? problem_slug(x->refusal) : outcome_name(x->outcome);
}

/* The access-log line, as `log.access` says (README "Logs"). */
static void exchange_log(const struct exchange *x)
{
    enum access_log level = x->conf->access_log;

    if (level == ACCESS_LOG_OFF ||
        (level == ACCESS_LOG_ERRORS && x->status < 400 && !outcome_is_error(x->outcome)))
        return;
    struct access_entry e = {
        .route = x->route != NULL ? x->route->path : NULL,
        .method = x->rq.method,
        .path = x->rq.path,
        .outcome = exchange_outcome_name(x),
        .status = x->status,
        .record_id = x->record_id[0] != '\0' ? x->record_id : NULL,
        .upstream_ms = x->upstream_ms,
        .total_ms = clock_mono_ms() - x->started_ms,
    };

    log_access(&e);
}

/* Send the answer; exactly once per exchange. Takes ownership of body (may be NULL). */
static void exchange_reply(struct exchange *x, int status, struct evbuffer *body)
{
    if (!exchange_set_state(x, X_ANSWERED)) {
        if (body != NULL)
            evbuffer_free(body);
        return;
    }
    x->status = status;
    metrics_count_request(x->set->metrics, x->route != NULL ? x->route->path : NULL,
                          exchange_outcome_name(x));
    exchange_log(x);
    reply_send(x->req, status, body, x->set->draining, &x->set->conns);
    x->req = NULL;
    if (x->pending == 0)
        exchange_free(x);
}

/* The proxy's own answer (README "Problem details"); a refusal names the outcome after the problem. */
void exchange_problem(struct exchange *x, enum problem p, int status, const char *detail,
                             int retry_after_s, bool replayed)
{
    if (x->outcome == OUTCOME_UNKNOWN) {
        x->outcome = OUTCOME_REFUSED;
        x->refusal = p;
    }
    exchange_reply(x, status, reply_problem(x->req, p, status, detail, retry_after_s, replayed,
                                            x->conf->error_format == ERROR_FORMAT_STRIPE));
}

/* ---- answering with an upstream or a stored response ------------------- */

/* Answer with the upstream response kept in x (first execution or pass-through). */
static void exchange_reply_upstream(struct exchange *x)
{
    struct evbuffer *body = x->resp_body;

    reply_move_headers(x->req, &x->resp_headers);
    x->resp_body = NULL;
    exchange_reply(x, x->resp_status, body);
}

/* Replay a finished record (README "How a request is handled": stored status, headers, body; fresh Content-Length). */
void exchange_reply_replay(struct exchange *x, const struct record *rec)
{
    x->outcome = x->waited ? OUTCOME_WAITED : OUTCOME_REPLAYED;
    exchange_reply(x, rec->status, reply_replay(x->req, rec));
}

/* ---- Redis failure policy --------------------------------------------- */

void exchange_store_failed(struct exchange *x, enum store_status st)
{
    const char *why = st == STORE_TIMEOUT ? "the idempotency store did not answer in time"
                                          : "the idempotency store is unavailable";

    log_msg(LOG_WARN, "exchange %s: store %s", x->record_id,
            st == STORE_TIMEOUT ? "timeout" : st == STORE_ERROR ? "error" : "unavailable");
    if (x->policy->on_store_error == STORE_ERROR_PASS) {
        metrics_count(x->set->metrics, METRICS_STORE_ERROR_PASSES);
        x->outcome = OUTCOME_STORE_ERROR_PASSED;
        if (exchange_set_state(x, X_PASSING))
            exchange_forward(x);
        return;
    }
    x->outcome = OUTCOME_STORE_ERROR;
    exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503, why, 1, false);
}

/* ---- records we write -------------------------------------------------- */

void exchange_record_init(const struct exchange *x, struct record *rec,
                                 enum record_state state)
{
    record_init(rec, state, x->owner, x->fingerprint, x->created_ms);
}

/* The claim value: state C with a lease deadline of now + lease. */
char *exchange_claim_value(const struct exchange *x, size_t *len, uint64_t *deadline_ms)
{
    struct record rec;

    exchange_record_init(x, &rec, RECORD_CLAIMED);
    rec.lease_deadline_ms = clock_now_ms() + x->policy->lease_ms;
    *deadline_ms = rec.lease_deadline_ms;
    return record_encode_alloc(&rec, len);
}

/* A record at record_key changed: wake its waiters here and in the other threads. */
void exchange_record_changed(struct exchange_set *set, const char *record_key)
{
    exchange_wake_waiters(set, record_key);
    if (set->wake_others != NULL)
        set->wake_others(record_key, set->wake_arg);
}

/* ---- after the upstream: write the record, then answer ----------------- */

/* What the client gets once the record is written: the upstream's answer, or our problem. */
static void exchange_answer_after_write(struct exchange *x)
{
    if (x->inbox_failed) {
        x->outcome = OUTCOME_STORE_ERROR;
        exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503,
                         "the delivery could not be queued; nothing was recorded; retry", 1,
                         false);
    } else if (x->inbox_unrecorded) {
        x->outcome = OUTCOME_STORE_ERROR;
        exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503,
                         "the delivery was queued but could not be recorded; retry (it may be "
                         "delivered twice)", 1, false);
    } else if (x->upstream == UPSTREAM_ANSWERED)
        exchange_reply_upstream(x);
    else if (x->upstream == UPSTREAM_TIMEOUT)
        exchange_problem(x, PROBLEM_UPSTREAM_TIMEOUT, 504, "the upstream did not answer in time",
                         0, false);
    else
        exchange_problem(x, PROBLEM_UPSTREAM_UNAVAILABLE, 502,
                         "the upstream could not be reached or broke off its answer", 0, false);
}

/*
 * The WAIT after a written record (redis.min_replicas): a shortfall is
 * logged and counted, nothing more. The answer went out already: the
 * replicated claim is what prevents a second execution, and a record lost
 * in a failover leaves that claim, which reads as in flight and then as
 * ambiguous (on_ambiguous: hold: outcome unknown; release: a retry takes
 * it over), never as a fresh key.
 */
static void exchange_on_record_replicated(enum store_status st, long long replicas, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK || replicas < (long long)x->conf->redis_min_replicas) {
        metrics_count(x->set->metrics, METRICS_WAIT_SHORTFALLS_RECORD);
        if (st == STORE_OK)
            log_msg(LOG_WARN, "exchange %s: the record reached %lld of %u replicas within "
                    "redis.replica_timeout; a failover now would leave the claim (outcome "
                    "unknown)", x->record_id, replicas, x->conf->redis_min_replicas);
        else
            log_msg(LOG_WARN, "exchange %s: WAIT for the record's replicas failed; a failover "
                    "now would leave the claim (outcome unknown)", x->record_id);
    }
    exchange_unref(x);
}

/*
 * Until when (wall clock ms) a write that failed for want of Redis is sent
 * again: while our lease, as last confirmed, still stops anyone else from
 * taking the record over, and at most one lease after WRITING began (so the
 * retries end even while renewals succeed); during a drain, early enough
 * that the last attempt is answered before it ends.
 */
static uint64_t exchange_write_deadline(const struct exchange *x)
{
    uint64_t deadline = x->lease_deadline_ms;
    uint64_t margin = x->conf->redis_timeout_ms + 2 * EXCHANGE_STORE_RETRY_MS;

    if (deadline > x->write_started_ms + x->policy->lease_ms)
        deadline = x->write_started_ms + x->policy->lease_ms;
    if (x->set->draining) {
        uint64_t drain = x->set->drain_deadline_ms > margin ? x->set->drain_deadline_ms - margin
                                                             : 0;
        if (deadline > drain)
            deadline = drain;
    }
    return deadline;
}

/*
 * The write failed for want of Redis (st: nothing sent, timeout, connection
 * lost): it may have landed, or not. Keep the answer and send the same write
 * again (the scripts are idempotent for their owner) every
 * EXCHANGE_STORE_RETRY_MS while the lease holds, renewing it meanwhile:
 * a stall shorter than the lease must not leave the claim to expire, or a
 * retry would execute again (on_ambiguous: release) or get "outcome
 * unknown" (hold). The client gets its answer at once: it should not wait
 * on Redis for an answer it already has, and one that has it does not
 * retry; a retry of the same key meanwhile finds the claim and waits for
 * the record like any duplicate. The retries hold the exchange (one pending
 * reference) until the write lands or its deadline passes. True when a
 * retry is scheduled.
 */
static bool exchange_write_retry(struct exchange *x, enum store_status st)
{
    uint64_t now = clock_now_ms();
    struct timeval tv = clock_ms_to_timeval(EXCHANGE_STORE_RETRY_MS);

    if ((x->state != X_WRITING && !x->write_retrying) || !exchange_store_retryable(st) ||
        (x->write != WRITE_RELEASE && x->write_value == NULL) ||
        now + EXCHANGE_STORE_RETRY_MS >= exchange_write_deadline(x))
        return false;
    if (!x->write_retrying) {
        log_msg(LOG_WARN, "exchange %s: the record write failed (%s); sending it again every "
                "%d ms for up to %llu ms, while the lease holds", x->record_id,
                st == STORE_TIMEOUT ? "timeout" : "no connection", EXCHANGE_STORE_RETRY_MS,
                (unsigned long long)(exchange_write_deadline(x) - now));
        x->write_retrying = true;
        x->pending++;
        exchange_lease_rearm(x, EXCHANGE_STORE_RETRY_MS / 2);
        exchange_answer_after_write(x);
    }
    evtimer_add(&x->write_timer, &tv);
    return true;
}

/* The one callback of WRITING: whatever was written, or not, the client gets its answer. */
static void exchange_on_written(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;
    bool retried;

    if (exchange_write_retry(x, st)) {
        exchange_unref(x);
        return;
    }
    /* from inside the write's callback (store.h); the WAIT goes out after the answer */
    if (st == STORE_OK && applied && x->write != WRITE_RELEASE &&
        x->conf->redis_min_replicas > 0) {
        x->pending++;
        store_wait_replicas(x->set->store, false, exchange_on_record_replicated, x);
    }

    if (st != STORE_OK) {
        log_msg(x->write == WRITE_ANSWER ? LOG_ERROR : LOG_WARN, "exchange %s: %s",
                x->record_id,
                x->write == WRITE_ANSWER ? "the answer could not be recorded; the claim stays "
                                           "until its lease ends"
                : x->write == WRITE_RELEASE ? "release failed; the claim ends with its lease"
                                            : "could not mark the outcome unknown; the claim "
                                              "ends with its lease, which reads the same");
    } else if (!applied && x->write == WRITE_ANSWER) {
        log_msg(LOG_WARN, "exchange %s: record no longer ours; answer not recorded",
                x->record_id);
    } else if (x->write_retrying) {
        log_msg(LOG_INFO, "exchange %s: the record write went through on a later attempt",
                x->record_id);
    }
    /*
     * Queued route: appended, but Redis refused the ack record (an error
     * reply, not a lost connection: those are retried above with the 2xx
     * already sent). A 2xx would promise a dedupe that is not in place and
     * hide the fault; 503 makes the provider retry, and its retry, once the
     * lease is out, takes the claim over and appends again: a possible
     * duplicate delivery within at least once (README "Webhook inbox").
     */
    if (st != STORE_OK && x->write == WRITE_ANSWER && x->event_id != NULL &&
        x->state == X_WRITING)
        x->inbox_unrecorded = true;
    retried = x->write_retrying;
    x->write_retrying = false; /* no more renewals */
    event_del(&x->lease_timer);
    exchange_record_changed(x->set, x->record_key);
    if (x->state == X_WRITING)
        exchange_answer_after_write(x);
    if (retried)
        exchange_unref(x); /* the retries' hold; this callback's keeps x alive */
    exchange_unref(x);
}

/* Send what x->write says: the record kept in x->write_value for ANSWER and UNKNOWN. */
static void exchange_write_send(struct exchange *x)
{
    x->pending++;
    if (x->write == WRITE_RELEASE)
        store_release_owned(x->set->store, x->record_key, x->owner, exchange_on_written, x);
    else if (x->write_value == NULL) /* unencodable: the lease runs out, which reads the same */
        exchange_on_written(STORE_ERROR, false, x);
    else
        store_replace_owned(x->set->store, x->record_key, x->owner, x->write_value,
                            x->write_len, x->policy->retention_ms, exchange_on_written, x);
}

/* x->write_timer: the next attempt of a write that failed for want of Redis. */
static void exchange_on_write_timer(evutil_socket_t fd, short what, void *arg)
{
    struct exchange *x = arg;

    (void)fd;
    (void)what;
    if (x->write_retrying)
        exchange_write_send(x);
}

/* Start writing what x->write says; value (len bytes, taken over) is the record for ANSWER and UNKNOWN. */
static void exchange_write(struct exchange *x, char *value, size_t len)
{
    x->write_value = value;
    x->write_len = len;
    x->write_started_ms = clock_now_ms();
    exchange_write_send(x);
}

/* The upstream's body as one run of bytes; NULL when too large to store (no copy made). */
static const char *exchange_response_bytes(struct exchange *x)
{
    if (evbuffer_get_length(x->resp_body) > x->conf->max_stored_response)
        return NULL;
    return (const char *)evbuffer_pullup(x->resp_body, -1);
}

/*
 * The upstream is done with a protected request: record its answer, release
 * the claim (nothing sent, or a release status), or keep "outcome unknown".
 */
void exchange_finish_protected(struct exchange *x)
{
    struct record rec;
    char *value = NULL;
    size_t len = 0;

    if (!exchange_set_state(x, X_WRITING))
        return;
    if (x->upstream == UPSTREAM_ANSWERED && decide_releases(x->policy, x->resp_status)) {
        /* The upstream said it did nothing (e.g. 503): forget the key, the retry executes. */
        x->write = WRITE_RELEASE;
        x->outcome = OUTCOME_RELEASED;
    } else if (x->upstream == UPSTREAM_ANSWERED) {
        x->write = WRITE_ANSWER;
        exchange_record_init(x, &rec, RECORD_DONE);
        rec.completed_ms = clock_now_ms();
        x->outcome = record_set_answer(&rec, x->resp_status, &x->resp_headers,
                                       exchange_response_bytes(x),
                                       evbuffer_get_length(x->resp_body),
                                       x->conf->max_stored_response) == RECORD_TOMBSTONE
                         ? OUTCOME_FORWARDED_NOT_STORED
                         : x->event_id != NULL ? OUTCOME_QUEUED : OUTCOME_FORWARDED;
        value = record_encode_alloc(&rec, &len);
        if (value == NULL) {
            /* executed: never leave the claim to expire, or a retry would execute again */
            log_msg(LOG_ERROR, "exchange %s: cannot encode the record; it is kept as "
                    "outcome unknown", x->record_id);
            x->write = WRITE_UNKNOWN;
            exchange_record_init(x, &rec, RECORD_UNKNOWN);
            rec.completed_ms = clock_now_ms();
            value = record_encode_alloc(&rec, &len);
        }
    } else {
        bool release = x->upstream == UPSTREAM_NOT_SENT ||
                       x->policy->on_ambiguous == AMBIGUOUS_RELEASE;
        x->outcome = x->upstream == UPSTREAM_NOT_SENT ? OUTCOME_UPSTREAM_ERROR
                                                      : OUTCOME_AMBIGUOUS;
        x->write = release ? WRITE_RELEASE : WRITE_UNKNOWN;
        if (!release) {
            exchange_record_init(x, &rec, RECORD_UNKNOWN);
            rec.completed_ms = clock_now_ms();
            value = record_encode_alloc(&rec, &len);
        }
    }
    exchange_write(x, value, len);
}

static void exchange_on_upstream(enum upstream_outcome outcome,
                                 const struct upstream_response *resp, const char *detail,
                                 const char *cause, double upstream_ms, void *arg)
{
    struct exchange *x = arg;

    x->upstream_ms = upstream_ms;
    x->upstream = outcome;
    metrics_observe(x->set->metrics, METRICS_UPSTREAM_LATENCY, upstream_ms / 1000.0);
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

    if (x->state == X_FORWARDING) {
        exchange_finish_protected(x);
    } else if (outcome == UPSTREAM_ANSWERED) {
        if (x->outcome == OUTCOME_UNKNOWN)
            x->outcome = OUTCOME_PASS_THROUGH;
        exchange_reply_upstream(x);
    } else {
        exchange_problem(x, outcome == UPSTREAM_TIMEOUT ? PROBLEM_UPSTREAM_TIMEOUT
                                                        : PROBLEM_UPSTREAM_UNAVAILABLE,
                         outcome == UPSTREAM_TIMEOUT ? 504 : 502, detail, 0, false);
    }
    exchange_unref(x);
}

/*
 * Queued webhook route (README "Webhook inbox"): the delivery is in the
 * stream, or not. In: record the ack_status answer, then answer it. Not:
 * release the claim (nothing recorded), then 503 so the provider retries.
 */
static void exchange_on_appended(bool ok, void *arg)
{
    struct exchange *x = arg;

    event_del(&x->lease_timer);
    if (ok) {
        metrics_count(x->set->metrics, METRICS_INBOX_ACCEPTED);
        inbox_kick(x->set->inbox); /* this worker reads it now, not at its next poll */
        x->upstream = UPSTREAM_ANSWERED;
        x->resp_status = x->policy->delivery.ack_status;
        x->resp_body = evbuffer_new();
        if (x->resp_body == NULL) {
            log_msg(LOG_ERROR, "exchange %s: out of memory", x->record_id);
            abort();
        }
    } else {
        log_msg(LOG_WARN, "exchange %s: the delivery could not be queued; the provider gets "
                "503", x->record_id);
        x->upstream = UPSTREAM_NOT_SENT;
        x->inbox_failed = true;
    }
    exchange_finish_protected(x);
    exchange_unref(x);
}

/* Send the request upstream: protected (we hold the claim) or passing. */
void exchange_forward(struct exchange *x)
{
    if (x->state == X_FORWARDING && x->event_id != NULL) {
        struct timeval tv = exchange_lease_interval(x);
        evtimer_add(&x->lease_timer, &tv);
        x->pending++;
        inbox_append(x->set->store, x->conf, x->route, x->event_id, x->record_id,
                     x->rq.method, x->rq.target, x->rq.client_addr,
                     evhttp_request_get_input_headers(x->req), x->rq.body_bytes,
                     x->rq.body_len, exchange_on_appended, x);
        return;
    }
    if (x->state == X_FORWARDING) {
        struct timeval tv = exchange_lease_interval(x);
        evtimer_add(&x->lease_timer, &tv);
    }
    x->pending++;
    if (upstream_send(x->set->upstream, x->rq.method, x->rq.target,
                      evhttp_request_get_input_headers(x->req), x->rq.client_addr, x->rq.body_bytes,
                      x->rq.body_len, exchange_on_upstream, x) == 0)
        return;
    x->pending--;
    log_msg(LOG_ERROR, "exchange %s: cannot start the upstream call", x->record_id);
    if (x->state == X_FORWARDING) {
        event_del(&x->lease_timer);
        x->upstream = UPSTREAM_NOT_SENT;
        exchange_finish_protected(x);
    } else {
        exchange_problem(x, PROBLEM_UPSTREAM_UNAVAILABLE, 502, "cannot reach the upstream", 0,
                         false);
    }
}

/* ---- a new request ------------------------------------------------------ */

static struct exchange *exchange_create(struct exchange_set *set, struct evhttp_request *req)
{
    struct exchange *x = calloc(1, sizeof(*x));

    if (x == NULL)
        return NULL;
    if (request_view_init(&x->rq, req) != 0) {
        free(x);
        return NULL;
    }
    x->set = set;
    x->conf = config_ref(set->conf);
    x->req = req;
    x->state = X_NEW;
    x->started_ms = clock_mono_ms();
    TAILQ_INIT(&x->resp_headers);
    evtimer_assign(&x->lease_timer, set->base, exchange_on_lease_timer, x);
    evtimer_assign(&x->wait_timer, set->base, exchange_on_wait_timer, x);
    evtimer_assign(&x->write_timer, set->base, exchange_on_write_timer, x);
    set->active++;
    return x;
}

/* Allow: the methods of the set (RFC 9110 15.5.6: a 405 lists what the target takes). */
static void exchange_add_allow(struct exchange *x, unsigned methods)
{
    static const char *const names[] = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE",
                                         "OPTIONS" };
    char allow[64] = "";

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (methods & config_method_bit(names[i]))
            snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
                     allow[0] != '\0' ? ", " : "", names[i]);
    }
    evhttp_add_header(evhttp_request_get_output_headers(x->req), "Allow", allow);
}

void exchange_handle(struct evhttp_request *req, void *arg)
{
    struct exchange_set *set = arg;
    struct exchange *x = exchange_create(set, req);
    const struct evkeyvalq *headers = evhttp_request_get_input_headers(req);
    struct classify_input in;
    struct classify_result c;
    const char *framing;
    char key[CLASSIFY_KEY_MAX];

    reply_watch(&set->conns, req);
    if (x == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    framing = request_framing_fault(req);
    if (framing != NULL) {
        /* what libevent left unread must not be read as a request: close the connection */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        exchange_problem(x, PROBLEM_INVALID_FRAMING, 400, framing, 0, false);
        return;
    }
    if (set->draining) {
        /*
         * A new request on a kept-alive connection after SIGTERM: refuse it
         * unforwarded, or the drain could end with it sent and unanswered.
         */
        exchange_problem(x, PROBLEM_SHUTTING_DOWN, 503,
                         "this proxy instance is shutting down; retry", 1, false);
        return;
    }
    in = (struct classify_input){
        .method = x->rq.method, .path = x->rq.path, .invalid_target = x->rq.invalid_target,
        .headers = headers, .body = x->rq.body_bytes, .body_len = x->rq.body_len,
        .now_s = (int64_t)(clock_now_ms() / 1000),
    };
    classify_request(x->conf, &in, key, sizeof(key), &c);
    x->route = c.route;
    switch (c.verdict) {
    case CLASSIFY_REFUSE:
        if (c.problem == PROBLEM_METHOD_NOT_ALLOWED)
            exchange_add_allow(x, c.route->policy.methods);
        exchange_problem(x, c.problem, c.status, c.detail, 0, false);
        return;
    case CLASSIFY_PASS_THROUGH:
    case CLASSIFY_UNPROTECTED:
        x->outcome = c.verdict == CLASSIFY_PASS_THROUGH ? OUTCOME_PASS_THROUGH
                                                        : OUTCOME_UNPROTECTED;
        if (exchange_set_state(x, X_PASSING))
            exchange_forward(x);
        return;
    case CLASSIFY_PROTECT:
        x->policy = &x->route->policy;
        exchange_protect(x, headers, key, c.key_len);
        return;
    }
}

/* ---- the set ------------------------------------------------------------ */

static void exchange_on_released(const char *record_key, void *arg)
{
    exchange_record_changed(arg, record_key);
}

void exchange_set_init(struct exchange_set *set, struct event_base *base, struct store *store,
                       struct upstream *upstream, struct metrics *metrics, struct config *conf,
                       exchange_wake_cb *wake_others, void *wake_arg)
{
    memset(set, 0, sizeof(*set));
    set->base = base;
    set->store = store;
    set->upstream = upstream;
    set->metrics = metrics;
    set->conf = config_ref(conf);
    TAILQ_INIT(&set->waiters);
    reply_conns_init(&set->conns, base, &set->unflushed);
    janitor_init(&set->janitor, base, store, exchange_on_released, set);
    set->wake_others = wake_others;
    set->wake_arg = wake_arg;
}

void exchange_set_config(struct exchange_set *set, struct config *conf)
{
    struct config *old = set->conf;

    set->conf = config_ref(conf);
    config_unref(old);
}

unsigned exchange_set_busy(const struct exchange_set *set)
{
    return set->active + set->unflushed + set->janitor.pending;
}

void exchange_set_deinit(struct exchange_set *set)
{
    reply_conns_deinit(&set->conns);
    janitor_deinit(&set->janitor);
    config_unref(set->conf);
    set->conf = NULL;
}
