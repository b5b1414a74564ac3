/*
 * exchange_life.c - an exchange's life: its state changes (against
 * exchange_state.c's table), its references, the answer (sent exactly once)
 * and the access-log line, the records it writes, and the waiters its
 * record changes wake. The lowest layer of the exchange: it calls no other
 * exchange file (exchange_int.h has the layers).
 */
#include "exchange_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "budget.h"
#include "canonical.h"
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

static void exchange_send(struct exchange *x, int status, struct evbuffer *body);

/* Move x to state to, keeping the waiter list and its counter. */
static void exchange_enter(struct exchange *x, enum exchange_state to)
{
    struct exchange_set *set = x->set;

    if (x->state == X_WAITING && to != X_WAITING) {
        TAILQ_REMOVE(&set->waiters, x, wait_link);
        set->waiting--;
    } else if (to == X_WAITING && x->state != X_WAITING) {
        TAILQ_INSERT_TAIL(&set->waiters, x, wait_link);
        set->waiting++;
    }
    x->state = to;
}

/*
 * The one place a state changes. An illegal transition is a bug
 * (exchange_transition_check): in debug builds and tests the process aborts
 * naming both states; in release it is refused (false), and the caller must
 * not act on it, nor touch x again: a client not yet answered gets a 500 at
 * once (a request must never hang on a bug), and x is freed as soon as no
 * callback can reach it, which may be before this returns.
 */
bool exchange_set_state(struct exchange *x, enum exchange_state to)
{
    if (!exchange_transition_check(x->record_id, x->state, to)) {
        if (!exchange_state_answered(x->state)) {
            x->outcome = OUTCOME_UNKNOWN; /* a bug: logged and counted as "unknown" */
            exchange_enter(x, X_ANSWERED);
            exchange_send(x, 500, NULL);
        }
        return false;
    }
    exchange_enter(x, to);
    return true;
}

void exchange_free(struct exchange *x)
{
    event_del(&x->lease_timer);
    event_del(&x->wait_timer);
    event_del(&x->write_timer);
    budget_hold_set(&x->hold_body, 0);
    budget_hold_set(&x->hold_answer, 0);
    budget_hold_set(&x->hold_record, 0);
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

/* Take one reference where a callback that will reach x is armed. */
void exchange_ref(struct exchange *x)
{
    exchange_ref_take(&x->pending);
}

/* Drop one reference where its callback runs; frees x when answered and nothing else can reach it. */
void exchange_unref(struct exchange *x)
{
    if (exchange_ref_drop(&x->pending, x->record_id) && x->state == X_ANSWERED)
        exchange_free(x);
}

static const char *exchange_outcome_name(const struct exchange *x)
{
    return x->outcome == OUTCOME_REFUSED ? problem_slug(x->refusal) : outcome_name(x->outcome);
}

/* The access-log line, as `log.access` says (docs/operations.md#logs). */
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

/*
 * The request body is needed no more (sent upstream, or answered): free it
 * now rather than when http_server frees the request once the answer is written
 * out, which for a slow reader is much later (docs/operations.md#memory). Its count,
 * hold_body, is the caller's to give back or hand on.
 */
void exchange_drop_body(struct exchange *x)
{
    if (x->req != NULL) {
        struct evbuffer *in = http_server_body(x->req);
        evbuffer_drain(in, evbuffer_get_length(in));
    }
    x->rq.body_bytes = NULL;
    x->rq.body_len = 0;
}

/* Send the answer; exactly once per exchange. Takes ownership of body (may be NULL). */
void exchange_reply(struct exchange *x, int status, struct evbuffer *body)
{
    if (!exchange_set_state(x, x->write_retrying ? X_ANSWERED_WRITING : X_ANSWERED)) {
        if (body != NULL)
            evbuffer_free(body);
        return;
    }
    exchange_send(x, status, body);
}

/* x has just entered ANSWERED: count, log and send the answer; free x if nothing can reach it. */
static void exchange_send(struct exchange *x, int status, struct evbuffer *body)
{
    x->status = status;
    metrics_count_request(x->set->metrics, x->route != NULL ? x->route->path : NULL,
                          exchange_outcome_name(x));
    exchange_log(x);
    /*
     * The answer is counted until the client has it (a reservation left unused
     * goes back), and first: a replay larger than the reservation grows the
     * count before the body's goes, not after (see exchange_write).
     */
    budget_hold_set(&x->hold_answer, body != NULL ? evbuffer_get_length(body) : 0);
    exchange_drop_body(x);
    budget_hold_set(&x->hold_body, 0);
    if (x->stream_begun) {
        /* the upstream's answer went to the client as it came (exchange_forward.c): end it */
        if (body != NULL)
            evbuffer_free(body);
        if (x->req != NULL && x->upstream == UPSTREAM_ANSWERED)
            reply_stream_end(x->req, NULL, &x->set->unflushed);
        else if (x->req != NULL) /* cut short: closing the connection says so */
            reply_stream_cut(x->req, &x->set->unflushed);
    } else {
        reply_send(x->req, status, body, x->set->draining, &x->set->unflushed, &x->hold_answer);
    }
    x->req = NULL;
    if (x->pending == 0 && x->state == X_ANSWERED)
        exchange_free(x);
}

void exchange_answered_streamed(struct exchange *x, int status)
{
    if (!exchange_set_state(x, X_ANSWERED))
        return;
    x->status = status;
    metrics_count_request(x->set->metrics, x->route != NULL ? x->route->path : NULL,
                          exchange_outcome_name(x));
    exchange_log(x);
    budget_hold_set(&x->hold_body, 0);
    budget_hold_set(&x->hold_answer, 0);
    x->req = NULL;
    if (x->pending == 0)
        exchange_free(x);
}

void exchange_overloaded(struct exchange *x)
{
    metrics_count(x->set->metrics, METRICS_OVERLOADED);
    http_server_close_after(x->req);
    exchange_problem(x, PROBLEM_OVERLOADED, 503,
                     "the proxy holds as many request and answer bytes as it may "
                     "(limits.max_buffered); nothing was claimed or forwarded; retry", 1, false);
}

/* The part of limits.max_buffered one body's parsed form may take at most. */
#define EXCHANGE_PARSE_SHARE 4

void exchange_meter_begin(struct exchange *x, struct mem_meter *m)
{
    meter_begin(m, x->set->budget, budget_limit(x->set->budget) / EXCHANGE_PARSE_SHARE);
}

bool exchange_meter_end(struct exchange *x, struct mem_meter *m, const char *reading)
{
    char detail[160];

    switch (meter_end(m)) {
    case METER_FITS:
        return false;
    case METER_OVER_CAP:
        snprintf(detail, sizeof(detail), "reading this body for %s needs more memory than a "
                 "quarter of limits.max_buffered; nothing was claimed or forwarded", reading);
        exchange_problem(x, PROBLEM_BODY_TOO_LARGE, 413, detail, 0, false);
        return true;
    case METER_OVER_BUDGET:
        exchange_overloaded(x);
        return true;
    }
    return true;
}

/*
 * The shape of x's own answers (docs/client-contract.md#errors-per-route):
 * its route's errors.format, the top level's for a request no route
 * matched (or answered before its route was known).
 */
static bool exchange_answers_stripe(const struct exchange *x)
{
    enum error_format f = x->route != NULL ? x->route->policy.error_format
                                           : x->conf->error_format;

    return f == ERROR_FORMAT_STRIPE;
}

/*
 * The proxy's own answer, naming record_id (NULL: none); a refusal names
 * the outcome after the problem.
 */
static void exchange_answer_problem(struct exchange *x, enum problem p, int status,
                                    const char *detail, int retry_after_s, bool replayed,
                                    const char *record_id)
{
    if (x->outcome == OUTCOME_UNKNOWN) {
        x->outcome = OUTCOME_REFUSED;
        x->refusal = p;
    }
    if (x->stream_begun) { /* the client has the upstream's answer, cut short or whole */
        exchange_reply(x, x->resp_status, NULL);
        return;
    }
    exchange_reply(x, status, reply_problem(x->req, p, status, detail, retry_after_s, replayed,
                                            record_id, exchange_answers_stripe(x)));
}

/* The proxy's own answer (docs/client-contract.md#problem-details). */
void exchange_problem(struct exchange *x, enum problem p, int status, const char *detail,
                             int retry_after_s, bool replayed)
{
    exchange_answer_problem(x, p, status, detail, retry_after_s, replayed, NULL);
}

void exchange_outcome_unknown(struct exchange *x, const char *detail, bool replayed)
{
    /* a customer hitting a hold (docs/operations.md#metrics); the first answer is not one */
    if (replayed)
        metrics_count(x->set->metrics, METRICS_HELD_ANSWERS);
    exchange_answer_problem(x, PROBLEM_OUTCOME_UNKNOWN, 502, detail,
                            REPLY_OUTCOME_UNKNOWN_RETRY_AFTER_S, replayed, x->record_id);
}

void exchange_release_lost(struct exchange *x)
{
    static const char detail[] =
        "the request was sent upstream but its answer was lost, so it may or may not have "
        "executed; this route does not hold such requests (on_ambiguous: release): a retry "
        "with the same key executes it again, so find out first (quote the record_id)";

    if (x->upstream == UPSTREAM_TIMEOUT)
        exchange_answer_problem(x, PROBLEM_UPSTREAM_TIMEOUT, 504, detail, 0, false,
                                x->record_id);
    else
        exchange_answer_problem(x, PROBLEM_UPSTREAM_ANSWER_LOST, 502, detail, 0, false,
                                x->record_id);
}

/* Drop every field of in whose name is alike name ('-' and '_' alike, any case). */
static void exchange_drop_alike(struct evkeyvalq *in, const char *name)
{
    for (;;) {
        const struct evkeyval *h;
        const char *found = NULL;

        TAILQ_FOREACH(h, in, next)
            if (header_name_alike(h->key, name)) {
                found = h->key;
                break;
            }
        /* the first field named found is h: any earlier one would be alike too */
        if (found == NULL || evhttp_remove_header(in, found) != 0)
            return;
    }
}

void exchange_tag_upstream(struct exchange *x, bool protected)
{
    struct evkeyvalq *in = http_server_input_headers(x->req);
    const char *name = x->conf->upstream_record_id_header;
    struct evkeyval *h;

    for (size_t i = 0; i < x->conf->n_upstream_record_id_retired; i++)
        exchange_drop_alike(in, x->conf->upstream_record_id_retired[i]);
    if (name == NULL)
        return;
    exchange_drop_alike(in, name);
    if (!protected)
        return;
    /*
     * The upstream strips the fields a Connection option names (RFC 9110
     * 7.6.1): the client's of this name are gone, so its option is void and
     * must not strip ours. Field values are malloc'd, as libevent's are.
     */
    TAILQ_FOREACH(h, in, next) {
        if (strcasecmp(h->key, "Connection") != 0 || !header_named_by_connection(h->value, name))
            continue;
        char *value = oom_check(header_connection_without(h->value, name),
                                "the Connection field of a forwarded request");
        free(h->value);
        h->value = value;
    }
    /* the claim is ours by now: no answer can stand for a half-built request (oom.h) */
    if (evhttp_add_header(in, name, x->record_id) != 0)
        oom_abort("the record id field of a forwarded request");
}

void exchange_mark_executed(struct exchange *x)
{
    if (x->req != NULL && x->policy != NULL &&
        (x->state == X_FORWARDING || x->state == X_WRITING))
        reply_mark_executed(x->req, x->policy->replayed_header_on_first);
}

/* Answer with the upstream response kept in x (first execution or pass-through). */
void exchange_reply_upstream(struct exchange *x)
{
    struct evbuffer *body = x->resp_body;

    if (!x->stream_begun) {
        reply_move_headers(x->req, &x->resp_headers);
        exchange_mark_executed(x);
    }
    x->resp_body = NULL;
    exchange_reply(x, x->resp_status, body);
}

/* Replay a finished record (docs/client-contract.md#how-a-request-is-handled: stored status, headers, body; fresh Content-Length). */
void exchange_reply_replay(struct exchange *x, const struct record *rec)
{
    x->outcome = x->waited ? OUTCOME_WAITED : OUTCOME_REPLAYED;
    exchange_reply(x, rec->status, reply_replay(x->req, rec));
}

void exchange_record_init(const struct exchange *x, struct record *rec,
                                 enum record_state state)
{
    record_init(rec, state, x->owner, x->fingerprint, x->created_ms);
    memcpy(rec->key_id, x->key_id, sizeof(rec->key_id));
    canonical_basis_of(&rec->basis, x->policy); /* json and form records are IR3 */
    record_set_route(rec, x->route->path);
}

/* rec as the value of our record: sealed under our config's keyring, bound to our Redis key. */
char *exchange_record_encode(const struct exchange *x, const struct record *rec,
                                    size_t *len)
{
    return record_encode_alloc(rec, x->conf->keyring, x->record_key, len);
}

/* The claim value: state C with a lease deadline of now + lease. */
char *exchange_claim_value(const struct exchange *x, size_t *len, uint64_t *deadline_ms)
{
    struct record rec;

    exchange_record_init(x, &rec, RECORD_CLAIMED);
    rec.lease_deadline_ms = clock_now_ms() + x->policy->lease_ms;
    *deadline_ms = rec.lease_deadline_ms;
    return exchange_record_encode(x, &rec, len);
}

/* A record at record_key changed: wake its waiters here and in the other threads. */
void exchange_record_changed(struct exchange_set *set, const char *record_key)
{
    exchange_wake_waiters(set, record_key);
    if (set->wake_others != NULL)
        set->wake_others(record_key, set->wake_arg);
}

void exchange_wake_waiters(struct exchange_set *set, const char *record_key)
{
    struct exchange *x;

    TAILQ_FOREACH(x, &set->waiters, wait_link)
        if (strcmp(x->record_key, record_key) == 0)
            event_active(&x->wait_timer, EV_TIMEOUT, 0);
}
