/*
 * exchange_forward.c - an exchange on its way out: the upstream call (or
 * the inbox's append), the lease renewed meanwhile, then the record
 * written (sent again while Redis is away, the client answered at once),
 * then the answer; and the on_store_error policy, which forwards
 * unprotected. Calls exchange_life.c only.
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

#include "budget.h"
#include "classify.h"
#include "clock.h"
#include "config.h"
#include "decide.h"
#include "fingerprint.h"
#include "headers.h"
#include "inbox.h"
#include "log.h"
#include "metrics.h"
#include "oom.h"
#include "outcome.h"
#include "problem.h"
#include "record.h"
#include "reply.h"
#include "request.h"
#include "store.h"
#include "upstream.h"

/*
 * Whether x holds a lease to keep alive: its request is at the upstream, or
 * its record write failed for want of Redis and is being sent again (also
 * after the client got its answer).
 */
static bool exchange_lease_held(const struct exchange *x)
{
    return x->state == X_FORWARDING || x->write_retrying;
}

void exchange_lease_rearm(struct exchange *x, uint64_t delay_ms)
{
    struct timeval tv = clock_ms_to_timeval(delay_ms);

    if (x->renew_deadline_ms == 0 && exchange_lease_held(x))
        evtimer_add(&x->lease_timer, &tv);
}

/*
 * One renewal is in flight at a time, so its answer knows which lease it
 * set; the answer arms the next one: after lease/3, or after
 * EXCHANGE_STORE_RETRY_MS when it failed for want of Redis or Redis refused
 * it for now (store_status_retryable), so a stall shorter than the lease
 * never lets it lapse, and once a refusal longer than the lease ends (a
 * primary without its replica refuses everyone's writes, takeovers
 * included) the claim is ours again within that delay.
 */
static void exchange_on_renewed(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;
    uint64_t deadline = x->renew_deadline_ms;
    struct timeval interval = exchange_lease_interval(x);
    uint64_t next_ms = (uint64_t)interval.tv_sec * 1000 + (uint64_t)interval.tv_usec / 1000;

    x->renew_deadline_ms = 0;
    if (st == STORE_OK && applied) {
        if (deadline > x->lease_deadline_ms)
            x->lease_deadline_ms = deadline;
        if (x->renew_failing)
            log_msg(LOG_INFO, "exchange %s: lease renewed again", x->record_id);
        x->renew_failing = false;
        exchange_lease_rearm(x, next_ms);
    } else if (st == STORE_OK) {
        /* while WRITING our own record may have replaced the claim already */
        if (x->state == X_FORWARDING)
            log_msg(LOG_WARN, "exchange %s: lease lost: another request took the record over",
                    x->record_id);
    } else if (store_status_retryable(st)) {
        if (!x->renew_failing) /* once per run of failures: a stall must not flood the log */
            log_msg(LOG_WARN, "exchange %s: lease renewal failed (%s); retrying every %d ms",
                    x->record_id, store_status_name(st), EXCHANGE_STORE_RETRY_MS);
        x->renew_failing = true;
        exchange_lease_rearm(x, EXCHANGE_STORE_RETRY_MS);
    } else {
        log_msg(LOG_WARN, "exchange %s: lease renewal failed", x->record_id);
        exchange_lease_rearm(x, next_ms);
    }
    exchange_unref(x);
}

struct timeval exchange_lease_interval(const struct exchange *x)
{
    uint64_t ms = x->policy->lease_ms / 3;

    return clock_ms_to_timeval(ms < 10 ? 10 : ms);
}

void exchange_on_lease_timer(evutil_socket_t fd, short what, void *arg)
{
    struct exchange *x = arg;
    struct timeval tv = exchange_lease_interval(x);
    uint64_t deadline;
    size_t len;
    char *value;

    (void)fd;
    (void)what;
    if (!exchange_lease_held(x) || x->renew_deadline_ms != 0)
        return;
    value = exchange_claim_value(x, &len, &deadline);
    if (value == NULL) {
        evtimer_add(&x->lease_timer, &tv);
        return;
    }
    x->renew_deadline_ms = deadline;
    exchange_ref(x);
    /*
     * the key lives `retention` from the last renewal, so a call longer than
     * retention keeps its claim, and a dead owner's claim stays visible
     */
    store_replace_owned(x->set->store, x->record_key, x->owner, value, len,
                        x->policy->retention_ms, exchange_on_renewed, x);
    free(value);
}

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
    } else if (x->upstream == UPSTREAM_ANSWERED) {
        exchange_reply_upstream(x);
    } else if (x->upstream == UPSTREAM_NOT_SENT) {
        exchange_problem(x, PROBLEM_UPSTREAM_UNAVAILABLE, 502,
                         "the upstream could not be reached (refused, not resolved, or no "
                         "connection in time); nothing was sent, retry", 0, false);
    } else if (x->write == WRITE_UNKNOWN) {
        /* sent, answer lost, held: the same answer as every retry's, but for the replay mark */
        exchange_outcome_unknown(x, "the request was sent upstream but its answer was lost "
                                 "(timeout, reset or cut short), so it may or may not have "
                                 "executed; it is held until an operator resolves it: retry "
                                 "with the same key and body after Retry-After to get the "
                                 "resolution, and quote the record_id to support", false);
    } else {
        /*
         * on_ambiguous: release: the claim is gone, nothing is held to pick up.
         * Not outcome-unknown, whose rule tells clients to retry for a
         * resolution: here a retry executes the operation again.
         */
        exchange_release_lost(x);
    }
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
 * lost: it may have landed, or not) or Redis refused it for now (it did not
 * run: NOREPLICAS while a primary has no synced replica, CLUSTERDOWN, a
 * failover's READONLY...). Keep the answer and send the same write
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

    if ((x->state != X_WRITING && !x->write_retrying) || !store_status_retryable(st) ||
        (x->write != WRITE_RELEASE && x->write_value == NULL) ||
        now + EXCHANGE_STORE_RETRY_MS >= exchange_write_deadline(x))
        return false;
    if (!x->write_retrying) {
        log_msg(LOG_WARN, "exchange %s: the record write failed (%s); sending it again every "
                "%d ms for up to %llu ms, while the lease holds", x->record_id,
                store_status_name(st), EXCHANGE_STORE_RETRY_MS,
                (unsigned long long)(exchange_write_deadline(x) - now));
        x->write_retrying = true;
        exchange_ref(x);
        exchange_lease_rearm(x, EXCHANGE_STORE_RETRY_MS / 2);
        exchange_answer_after_write(x);
    }
    evtimer_add(&x->write_timer, &tv);
    return true;
}

/*
 * Our answer found the record no longer ours: a retry took the claim over
 * (on_ambiguous: release) or an operator resolved or purged it while the
 * request was at the upstream with its lease run out (a stalled proxy). An
 * operator's resolution then stands against what the upstream said: an
 * error, so that someone compares the two (docs/operations.md#resolving-a-held-record).
 */
static void exchange_on_overtaken(enum store_status st, const char *value, size_t len,
                                  void *arg)
{
    struct exchange *x = arg;
    struct record rec;

    if (st == STORE_OK && value != NULL && record_decode(value, len, &rec) == 0 &&
        rec.state == RECORD_RESOLVED)
        log_msg(LOG_ERROR, "exchange %s: the upstream answered %d, but an operator resolved the "
                "record while the request was at the upstream (its lease had run out): retries "
                "replay the operator's answer, not the upstream's; compare them "
                "(GET /records/%s)", x->record_id, x->resp_status, x->record_id);
    else
        log_msg(LOG_WARN, "exchange %s: record no longer ours; answer not recorded",
                x->record_id);
    exchange_unref(x);
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
        exchange_ref(x);
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
        exchange_ref(x);
        store_get(x->set->store, x->record_key, exchange_on_overtaken, x);
    } else if (x->write_retrying) {
        log_msg(LOG_INFO, "exchange %s: the record write went through on a later attempt",
                x->record_id);
    }
    if (st == STORE_OK && applied && x->write == WRITE_UNKNOWN)
        metrics_count_outcome_unknown(x->set->metrics,
                                      x->route != NULL ? x->route->path : NULL);
    /*
     * Queued route: appended, but Redis refused the ack record for good (an
     * error reply such as NOPERM or OOM; a lost connection or a refusal for
     * now is retried above with the 2xx already sent). A 2xx would promise a dedupe that is not in place and
     * hide the fault; 503 makes the provider retry, and its retry, once the
     * lease is out, takes the claim over and appends again: a possible
     * duplicate delivery within at least once (docs/webhooks.md#webhook-inbox).
     */
    if (st != STORE_OK && x->write == WRITE_ANSWER && x->event_id != NULL &&
        x->state == X_WRITING)
        x->inbox_unrecorded = true;
    retried = x->write_retrying;
    x->write_retrying = false; /* no more renewals */
    if (x->state == X_ANSWERED_WRITING)
        exchange_set_state(x, X_ANSWERED);
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
    exchange_ref(x);
    if (x->write == WRITE_RELEASE)
        store_release_owned(x->set->store, x->record_key, x->owner, exchange_on_written, x);
    else if (x->write_value == NULL) /* unencodable: the lease runs out, which reads the same */
        exchange_on_written(STORE_ERROR, false, x);
    else
        store_replace_owned(x->set->store, x->record_key, x->owner, x->write_value,
                            x->write_len, x->policy->retention_ms, exchange_on_written, x);
}

/* x->write_timer: the next attempt of a write that failed for want of Redis. */
void exchange_on_write_timer(evutil_socket_t fd, short what, void *arg)
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
    /*
     * The upstream call or the append is over, so the body goes. The record
     * (kept here, copied by the store for the command, and again in the Redis
     * client's output) takes over the count of the body and of the answer's
     * unused reservation, then counts its own: one change, so a request never
     * drops below what it was admitted with and then grows again, which would
     * let another worker's admission take that room first (docs/operations.md#memory).
     */
    exchange_drop_body(x);
    budget_hold_move(&x->hold_record, &x->hold_body);
    if (x->resp_body != NULL && x->hold_answer.bytes > evbuffer_get_length(x->resp_body))
        budget_hold_give(&x->hold_record, &x->hold_answer,
                         x->hold_answer.bytes - evbuffer_get_length(x->resp_body));
    budget_hold_set(&x->hold_record, 3 * len);
    x->write_started_ms = clock_now_ms();
    exchange_write_send(x);
}

/* The upstream's body's length: what was kept, or all that was streamed past the limit. */
static size_t exchange_response_length(struct exchange *x)
{
    return x->stream_begun ? x->resp_streamed : evbuffer_get_length(x->resp_body);
}

/* The upstream's body as one run of bytes; NULL when too large to store (no copy made). */
static const char *exchange_response_bytes(struct exchange *x)
{
    if (exchange_response_length(x) > x->conf->max_stored_response)
        return NULL;
    return (const char *)evbuffer_pullup(x->resp_body, -1);
}

/*
 * The upstream is done with a protected request: record its answer, release
 * the claim (nothing sent, or a release status), or keep "outcome unknown".
 */
static void exchange_finish_protected(struct exchange *x)
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
                                       exchange_response_length(x),
                                       x->conf->max_stored_response) == RECORD_TOMBSTONE
                         ? OUTCOME_FORWARDED_NOT_STORED
                         : x->event_id != NULL ? OUTCOME_QUEUED : OUTCOME_FORWARDED;
        value = exchange_record_encode(x, &rec, &len);
        if (value == NULL) {
            /* executed: never leave the claim to expire, or a retry would execute again */
            log_msg(LOG_ERROR, "exchange %s: cannot encode the record; it is kept as "
                    "outcome unknown", x->record_id);
            x->write = WRITE_UNKNOWN;
            exchange_record_init(x, &rec, RECORD_UNKNOWN);
            rec.completed_ms = clock_now_ms();
            value = exchange_record_encode(x, &rec, &len);
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
            value = exchange_record_encode(x, &rec, &len);
        }
    }
    exchange_write(x, value, len);
}

/*
 * upstream head. Passing: the answer streams to the client from here.
 * Protected: it is kept for the record, up to max_stored_response.
 */
static int exchange_on_upstream_head(int status, const struct evkeyvalq *headers,
                                     long long content_length, void *arg)
{
    struct exchange *x = arg;

    exchange_stream_take_head(x, status, headers, content_length);
    x->resp_body = oom_check(evbuffer_new(), "the upstream's answer");
    if (x->state == X_PASSING)
        exchange_stream_begin(x, x->resp_length); /* a client gone: its bytes are dropped */
    return 0;
}

/*
 * upstream data. A protected answer larger than max_stored_response cannot
 * be recorded (a tombstone: retries get response-not-replayable, never a
 * second execution), so it is not held whole either: what was kept and
 * all that follows stream to the first client, a window at a time
 * (docs/operations.md#streaming). A client gone meanwhile: the rest is read
 * and dropped, and the outcome recorded.
 */
static int exchange_on_upstream_data(struct evbuffer *chunk, void *arg)
{
    struct exchange *x = arg;
    size_t len = evbuffer_get_length(chunk);
    int rc;

    x->resp_streamed += len;
    if (!x->stream_begun && x->state == X_FORWARDING) {
        evbuffer_add_buffer(x->resp_body, chunk);
        budget_hold_cover(&x->hold_answer, evbuffer_get_length(x->resp_body));
        if (evbuffer_get_length(x->resp_body) <= x->conf->max_stored_response)
            return 0;
        x->resp_streamed = evbuffer_get_length(x->resp_body);
        if (exchange_stream_begin(x, x->resp_length) != 0) {
            x->stream_begun = true; /* counted as streamed: the client is gone */
            evbuffer_drain(x->resp_body, evbuffer_get_length(x->resp_body));
            budget_hold_set(&x->hold_answer, 0);
            return 0;
        }
        chunk = x->resp_body;
    }
    if (!x->stream_begun || x->req == NULL) {
        evbuffer_drain(chunk, evbuffer_get_length(chunk));
        return 0;
    }
    rc = exchange_stream_push(x, chunk);
    if (chunk == x->resp_body)
        budget_hold_set(&x->hold_answer, config_stream_window(x->conf));
    if (rc < 0) /* the client is gone: drop the rest; a protected outcome is still recorded */
        return 0;
    return rc;
}

static void exchange_on_upstream(enum upstream_outcome outcome,
                                 const struct upstream_response *resp, const char *detail,
                                 const char *cause, double upstream_ms, void *arg)
{
    struct exchange *x = arg;

    exchange_stream_noted(x, outcome, detail, cause, upstream_ms);
    event_del(&x->lease_timer);
    if (x->state == X_FORWARDING) {
        exchange_finish_protected(x);
    } else if (x->state == X_PASSING) {
        if (x->outcome == OUTCOME_UNKNOWN && outcome == UPSTREAM_ANSWERED)
            x->outcome = OUTCOME_PASS_THROUGH;
        exchange_stream_passed(x, outcome, resp, detail);
    }
    exchange_unref(x);
}

/*
 * Queued webhook route (docs/webhooks.md#webhook-inbox): the delivery is in the
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
        x->resp_body = oom_check(evbuffer_new(), "the ack answer of a queued delivery");
    } else {
        log_msg(LOG_WARN, "exchange %s: the delivery could not be queued; the provider gets "
                "503", x->record_id);
        x->upstream = UPSTREAM_NOT_SENT;
        x->inbox_failed = true;
    }
    exchange_finish_protected(x);
    exchange_unref(x);
}

static const struct upstream_stream_cbs exchange_upstream_cbs = {
    .head = exchange_on_upstream_head,
    .data = exchange_on_upstream_data,
    .done = exchange_on_upstream,
};

/* Send the request upstream: protected (we hold the claim) or passing. */
void exchange_forward(struct exchange *x)
{
    exchange_tag_upstream(x, x->state == X_FORWARDING);
    if (x->state == X_FORWARDING && x->event_id != NULL) {
        struct timeval tv = exchange_lease_interval(x);
        evtimer_add(&x->lease_timer, &tv);
        exchange_ref(x);
        inbox_append(x->set->store, x->conf, x->route, x->event_id, x->record_id,
                     x->rq.method, x->rq.target, x->rq.client_addr,
                     http_server_input_headers(x->req), x->rq.body_bytes,
                     x->rq.body_len, exchange_on_appended, x);
        return;
    }
    if (x->state == X_FORWARDING) {
        struct timeval tv = exchange_lease_interval(x);
        evtimer_add(&x->lease_timer, &tv);
    }
    exchange_ref(x);
    if (upstream_stream_whole(x->set->upstream, x->rq.method, x->rq.target,
                              http_server_input_headers(x->req), x->rq.client_addr,
                              x->rq.body_bytes, x->rq.body_len, &exchange_upstream_cbs, x,
                              &x->call) == 0)
        return;
    exchange_unref(x); /* the call was never armed; x is not answered, so it stays */
    x->call = NULL;
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

void exchange_store_failed(struct exchange *x, enum store_status st)
{
    const char *why = st == STORE_TIMEOUT ? "the idempotency store did not answer in time"
                                          : "the idempotency store is unavailable";

    log_msg(LOG_WARN, "exchange %s: store failed (%s)", x->record_id, store_status_name(st));
    if (x->policy->on_store_error == ON_STORE_ERROR_PASS) {
        metrics_count(x->set->metrics, METRICS_STORE_ERROR_PASSES);
        x->outcome = OUTCOME_STORE_ERROR_PASSED;
        if (exchange_set_state(x, X_PASSING))
            exchange_forward(x);
        return;
    }
    x->outcome = OUTCOME_STORE_ERROR;
    exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503, why, 1, false);
}
