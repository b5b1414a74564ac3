/*
 * exchange.c - the request state machine.
 *
 * The states, their diagram and the reference rule are in exchange_state.h.
 *
 * Every state change goes through exchange_set_state, which checks it
 * against the table of legal transitions and keeps the waiter list and its
 * counter. WRITING writes one of three things to the record (the answer, a
 * release, "outcome unknown"); one callback answers after any of them.
 *
 * `pending` counts the references: callbacks that can still reach the
 * exchange (store commands, the upstream call, the write's retries); it is
 * freed once it has answered and pending is 0. The client may be gone by then: http_server keeps the
 * request until we reply and frees it in http_server_reply.
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
#include "outcome.h"
#include "problem.h"
#include "record.h"
#include "reply.h"
#include "request.h"
#include "store.h"
#include "upstream.h"

/* ---- states ------------------------------------------------------------- */

/* ---- lifetime ------------------------------------------------------------ */

/* ---- answering with an upstream or a stored response ------------------- */

/* ---- Redis failure policy --------------------------------------------- */

/* ---- records we write -------------------------------------------------- */

/* ---- after the upstream: write the record, then answer ----------------- */

/* ---- a new request ------------------------------------------------------ */

static struct exchange *exchange_create(struct exchange_set *set, struct http_req *req)
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
    budget_hold_init(&x->hold_body, set->budget);
    budget_hold_init(&x->hold_answer, set->budget);
    budget_hold_init(&x->hold_record, set->budget);
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
    evhttp_add_header(http_server_output_headers(x->req), "Allow", allow);
}

/* What a request admitted at its head holds until its exchange takes it over. */
struct exchange_admission {
    struct budget_hold hold;        /* its body (as announced) and its answer's reservation */
    size_t answer;                  /* bytes of that reservation */
};

static void exchange_admission_release(void *arg)
{
    struct exchange_admission *a = arg;

    budget_hold_set(&a->hold, 0);
    free(a);
}

/*
 * The exchange of an admitted request takes over what its admission holds:
 * the answer's reservation, and the body trimmed to its length (a chunked
 * body was admitted at the limit).
 */
static void exchange_admit(struct exchange *x)
{
    struct exchange_admission *a = http_server_attached(x->req);

    if (a == NULL)
        return;
    budget_hold_give(&x->hold_answer, &a->hold, a->answer);
    budget_hold_move(&x->hold_body, &a->hold);
    budget_hold_set(&x->hold_body, x->rq.body_len);
}

/*
 * Refuse req at once, before its body is read (or when the listener cannot
 * read it): the problem answer, logged and counted; the connection closes
 * after it. A body too large is refused once its route is known (the
 * answer takes the route's errors.format); a request whose head cannot be
 * read safely has no route, and is answered in the top level's.
 */
static void exchange_refuse_now(struct exchange_set *set, struct http_req *req, enum problem p,
                                int status, const char *detail)
{
    struct exchange *x = exchange_create(set, req);

    http_server_close_after(req);
    if (x == NULL) { /* out of memory before anything is claimed: an answer (oom.h) */
        http_server_reply(req, 500, NULL, NULL);
        return;
    }
    if (p == PROBLEM_BODY_TOO_LARGE && !x->rq.invalid_target)
        x->route = classify_route_of(x->conf, x->rq.path);
    exchange_problem(x, p, status, detail, 0, false);
}

/*
 * A request that forwards without protection, as its head alone says
 * (classify_streams), is streamed both ways (exchange_stream.c), whatever
 * its body's size. True when req is taken so (or answered).
 */
static bool exchange_head_streams(struct exchange_set *set, struct http_req *req)
{
    struct exchange *x;
    struct request_view v;
    struct classify_input in;
    struct classify_result c;
    char key[CLASSIFY_KEY_MAX];
    bool streams;

    if (set->draining || request_view_init(&v, req) != 0)
        return false; /* exchange_handle refuses it, or answers 500 */
    in = (struct classify_input){
        .method = v.method, .path = v.path, .invalid_target = v.invalid_target,
        .headers = http_server_input_headers(req), .now_s = (int64_t)(clock_now_ms() / 1000),
    };
    streams = classify_streams(set->conf, &in, key, sizeof(key), &c);
    request_view_deinit(&v);
    /* an exchange only for a stream: one read whole gets its own in exchange_handle */
    if (!streams || (x = exchange_create(set, req)) == NULL)
        return false;
    x->route = c.route; /* of set->conf, which x holds a reference to */
    x->outcome = c.verdict == CLASSIFY_PASS_THROUGH ? OUTCOME_PASS_THROUGH : OUTCOME_UNPROTECTED;
    exchange_stream_start(x);
    return true;
}

void exchange_head(struct http_req *req, void *arg)
{
    struct exchange_set *set = arg;
    const char *framing = request_framing_fault(req);
    long long length = http_server_content_length(req);
    struct exchange_admission *a;
    struct exchange *x;
    size_t body, answer;

    if (framing != NULL) {
        /* bytes another parser would frame otherwise must not be read as a request */
        exchange_refuse_now(set, req, PROBLEM_INVALID_FRAMING, 400, framing);
        return;
    }
    if (exchange_head_streams(set, req))
        return;
    if (length > 0 && (unsigned long long)length > set->conf->max_request_body) {
        exchange_refuse_now(set, req, PROBLEM_BODY_TOO_LARGE, 413,
                            "the request body is larger than the configured limit");
        return;
    }
    /*
     * Admission under limits.max_buffered (docs/operations.md#memory), before
     * any body byte is read, so a crowd of slow uploads is counted and bounded:
     * the body as announced (a chunked one at the limit) and the reservation
     * for its answer must fit. What comes later is counted as it arrives and
     * never refused: a forwarded request is never cut off.
     */
    body = length > 0 ? (size_t)length : length < 0 ? set->conf->max_request_body : 0;
    answer = config_answer_reservation(set->conf);
    a = calloc(1, sizeof(*a));
    if (a == NULL || body > SIZE_MAX - answer || !budget_admit(set->budget, body + answer)) {
        free(a);
        x = exchange_create(set, req);
        if (x != NULL) {
            exchange_overloaded(x);
            return;
        }
        metrics_count(set->metrics, METRICS_OVERLOADED);
        http_server_close_after(req);
        http_server_reply(req, 503, NULL, NULL);
        return;
    }
    budget_hold_init(&a->hold, set->budget);
    budget_hold_take(&a->hold, body + answer);
    a->answer = answer;
    http_server_attach(req, a, exchange_admission_release);
    http_server_accept_body(req, set->conf->max_request_body);
}

void exchange_too_large(struct http_req *req, void *arg)
{
    exchange_refuse_now(arg, req, PROBLEM_BODY_TOO_LARGE, 413,
                        "the request body is larger than the configured limit");
}

void exchange_refuse(struct http_req *req, int status, enum http_server_fault fault, void *arg)
{
    switch (fault) {
    case HTTP_SERVER_FAULT_TARGET:
        exchange_refuse_now(arg, req, PROBLEM_INVALID_TARGET, 400,
                            "the request line cannot be read: the target must be a path without "
                            "spaces or control characters, followed by the HTTP version");
        return;
    case HTTP_SERVER_FAULT_FRAMING:
        /* 413: a body past its limit that exchange_too_large did not answer */
        if (status == 413)
            exchange_refuse_now(arg, req, PROBLEM_BODY_TOO_LARGE, 413,
                                "the request body is larger than the configured limit");
        else
            exchange_refuse_now(arg, req, PROBLEM_INVALID_FRAMING, 400,
                                "the header fields or the body's framing cannot be read safely "
                                "(RFC 9112)");
        return;
    case HTTP_SERVER_FAULT_HEAD_TOO_LARGE:
        exchange_refuse_now(arg, req, PROBLEM_HEAD_TOO_LARGE, 431,
                            "the request line and header fields are larger than the proxy reads");
        return;
    case HTTP_SERVER_FAULT_METHOD:
        exchange_refuse_now(arg, req, PROBLEM_METHOD_NOT_IMPLEMENTED, 501,
                            "the proxy serves GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS");
        return;
    }
}

void exchange_handle(struct http_req *req, void *arg)
{
    struct exchange_set *set = arg;
    struct exchange *x = exchange_create(set, req);
    const struct evkeyvalq *headers = http_server_input_headers(req);
    struct classify_input in;
    struct classify_result c;
    struct mem_meter m;
    char key[CLASSIFY_KEY_MAX];

    if (x == NULL) { /* out of memory before anything is claimed: an answer (oom.h) */
        http_server_reply(req, 500, NULL, NULL);
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
    /* key_from: json parses the body: metered as a fingerprint's parse is */
    exchange_meter_begin(x, &m);
    classify_request(x->conf, &in, key, sizeof(key), &c);
    x->route = c.route;
    if (exchange_meter_end(x, &m, "its idempotency key (key_from: json)"))
        return;
    switch (c.verdict) {
    case CLASSIFY_REFUSE:
        if (c.problem == PROBLEM_METHOD_NOT_ALLOWED)
            exchange_add_allow(x, c.route->policy.methods);
        exchange_problem(x, c.problem, c.status, c.detail, 0, false);
        return;
    case CLASSIFY_PASS_THROUGH:
    case CLASSIFY_UNPROTECTED:
        exchange_admit(x);
        x->outcome = c.verdict == CLASSIFY_PASS_THROUGH ? OUTCOME_PASS_THROUGH
                                                        : OUTCOME_UNPROTECTED;
        if (exchange_set_state(x, X_PASSING))
            exchange_forward(x);
        return;
    case CLASSIFY_PROTECT:
        exchange_admit(x);
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

struct exchange_set *exchange_set_create(struct event_base *base, struct store *store,
                                         struct upstream *upstream, struct inbox *inbox,
                                         struct metrics *metrics, struct budget *budget,
                                         struct config *conf, exchange_wake_cb *wake_others,
                                         void *wake_arg)
{
    struct exchange_set *set = calloc(1, sizeof(*set));

    if (set == NULL)
        return NULL;
    set->base = base;
    set->store = store;
    set->upstream = upstream;
    set->inbox = inbox;
    set->metrics = metrics;
    set->budget = budget;
    set->conf = config_ref(conf);
    TAILQ_INIT(&set->waiters);
    janitor_init(&set->janitor, base, store, exchange_on_released, set);
    set->wake_others = wake_others;
    set->wake_arg = wake_arg;
    return set;
}

void exchange_set_config(struct exchange_set *set, struct config *conf)
{
    struct config *old = set->conf;

    set->conf = config_ref(conf);
    config_unref(old);
}

const struct config *exchange_set_conf(const struct exchange_set *set)
{
    return set->conf;
}

void exchange_set_drain(struct exchange_set *set, uint64_t deadline_ms)
{
    set->drain_deadline_ms = deadline_ms;
    set->draining = true;
}

unsigned exchange_set_active(const struct exchange_set *set)
{
    return set->active;
}

unsigned exchange_set_waiting(const struct exchange_set *set)
{
    return set->waiting;
}

unsigned exchange_set_unflushed(const struct exchange_set *set)
{
    return set->unflushed;
}

unsigned exchange_set_unreleased(const struct exchange_set *set)
{
    return set->janitor.pending;
}

unsigned exchange_set_busy(const struct exchange_set *set)
{
    return set->active + set->unflushed + set->janitor.pending;
}

void exchange_set_failed_over(struct exchange_set *set)
{
    janitor_failed_over(&set->janitor);
}

void exchange_set_destroy(struct exchange_set *set)
{
    if (set == NULL)
        return;
    janitor_deinit(&set->janitor);
    config_unref(set->conf);
    free(set);
}
