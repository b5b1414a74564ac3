/*
 * exchange_claim.c - the protected path of one exchange (README "How a request is handled"): its
 * record identity, the claim, what an existing record means, taking over an
 * expired lease, waiting for another request's answer, and renewing the
 * lease while the upstream works. See exchange.c for the state machine.
 */
#include "exchange_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>

#include "clock.h"
#include "config.h"
#include "decide.h"
#include "log.h"
#include "metrics.h"

#define EXCHANGE_POLL_MIN_MS 10
#define EXCHANGE_POLL_MAX_MS 250

/* ---- lease renewal ----------------------------------------------------- */

/*
 * Whether x holds a lease to keep alive: its request is at the upstream, or
 * its record write failed for want of Redis and is being sent again (also
 * after the client got its answer).
 */
static bool exchange_lease_held(const struct exchange *x)
{
    return x->state == X_FORWARDING || x->write_retrying;
}

bool exchange_store_retryable(enum store_status st)
{
    return st == STORE_UNAVAILABLE || st == STORE_TIMEOUT || st == STORE_LOST;
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
 * EXCHANGE_STORE_RETRY_MS when it failed for want of Redis, so a stall
 * shorter than the lease never lets it lapse.
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
    } else if (exchange_store_retryable(st)) {
        if (!x->renew_failing) /* once per run of failures: a stall must not flood the log */
            log_msg(LOG_WARN, "exchange %s: lease renewal failed (%s); retrying every %d ms",
                    x->record_id, st == STORE_TIMEOUT ? "timeout" : "no connection",
                    EXCHANGE_STORE_RETRY_MS);
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
    x->pending++;
    /*
     * the key lives `retention` from the last renewal, so a call longer than
     * retention keeps its claim, and a dead owner's claim stays visible
     */
    store_replace_owned(x->set->store, x->record_key, x->owner, value, len,
                        x->policy->retention_ms, exchange_on_renewed, x);
    free(value);
}

/* ---- waiting for another request's answer ------------------------------ */

static void exchange_wait(struct exchange *x)
{
    uint64_t now = clock_now_ms();
    uint64_t delay;
    struct timeval tv;

    if (!x->waited) {
        x->waited = true;
        x->wait_deadline_ms = now + x->policy->wait_timeout_ms;
        x->poll_delay_ms = EXCHANGE_POLL_MIN_MS;
    }
    if (now >= x->wait_deadline_ms) {
        x->outcome = OUTCOME_IN_FLIGHT_REJECTED;
        exchange_problem(x, PROBLEM_REQUEST_IN_PROGRESS, 409,
                         "a request with this idempotency key is still in progress; retry later",
                         1, false);
        return;
    }
    if (!exchange_set_state(x, X_WAITING))
        return;
    /* bounded exponential backoff, never past the deadline */
    delay = x->poll_delay_ms;
    if (now + delay > x->wait_deadline_ms)
        delay = x->wait_deadline_ms - now;
    x->poll_delay_ms = x->poll_delay_ms * 2 > EXCHANGE_POLL_MAX_MS ? EXCHANGE_POLL_MAX_MS
                                                                   : x->poll_delay_ms * 2;
    tv = clock_ms_to_timeval(delay);
    evtimer_add(&x->wait_timer, &tv);
}

void exchange_on_wait_timer(evutil_socket_t fd, short what, void *arg)
{
    struct exchange *x = arg;

    (void)fd;
    (void)what;
    event_del(&x->wait_timer); /* a wake-up may have run it early */
    if (x->state == X_WAITING)
        exchange_claim(x); /* the record may be gone (released): claim it again, else read it */
}

void exchange_wake_waiters(struct exchange_set *set, const char *record_key)
{
    struct exchange *x;

    TAILQ_FOREACH(x, &set->waiters, wait_link)
        if (strcmp(x->record_key, record_key) == 0)
            event_active(&x->wait_timer, EV_TIMEOUT, 0);
}

/* ---- the claim and what an existing record means ----------------------- */

static void exchange_on_takeover(enum store_status st, bool applied, void *arg);
static void exchange_on_claim(enum store_status st, const char *value, size_t len, void *arg);

/*
 * Send our claim: SET NX GET (expected NULL), or a takeover of the expired
 * claim `expected` (expected_len bytes, on_ambiguous: release).
 */
static void exchange_send_claim(struct exchange *x, const char *expected, size_t expected_len)
{
    size_t len;
    uint64_t deadline;
    char *value = exchange_claim_value(x, &len, &deadline);

    if (value == NULL) {
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    if (!exchange_set_state(x, X_CLAIMING)) {
        free(value);
        return;
    }
    x->renew_deadline_ms = deadline; /* the lease we hold if it wins */
    x->pending++;
    if (expected == NULL)
        store_claim(x->set->store, x->record_key, value, len, x->policy->retention_ms,
                    exchange_on_claim, x);
    else
        store_takeover(x->set->store, x->record_key, expected, expected_len, value, len,
                       x->policy->retention_ms, exchange_on_takeover, x);
    free(value);
}

static void exchange_on_existing(struct exchange *x, const char *value, size_t len)
{
    struct record rec;
    enum decision d;
    char detail[160];

    if (record_decode(value, len, &rec) != 0) {
        log_msg(LOG_ERROR, "exchange %s: the stored record is malformed", x->record_id);
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    d = decide_existing(&rec, x->fingerprint, clock_now_ms(), x->policy);
    switch (d) {
    case DECIDE_REPLAY:
        exchange_reply_replay(x, &rec);
        return;
    case DECIDE_WAIT:
        exchange_wait(x);
        return;
    case DECIDE_TAKEOVER:
        exchange_send_claim(x, value, len);
        return;
    default:
        break;
    }
    x->outcome = decision_outcome(d);
    if (d == DECIDE_NOT_REPLAYABLE) {
        snprintf(detail, sizeof(detail),
                 "the original request was executed (upstream status %d) but its response was "
                 "too large to store; it will not be executed again",
                 rec.status);
        exchange_problem(x, PROBLEM_RESPONSE_NOT_REPLAYABLE, 502, detail, 0, true);
    } else if (d == DECIDE_OUTCOME_UNKNOWN) {
        exchange_problem(x, PROBLEM_OUTCOME_UNKNOWN, 502,
                         rec.state == RECORD_UNKNOWN
                             ? "the original request was sent upstream but its outcome is "
                               "unknown; an operator must check and purge the record"
                             : "the request that claimed this key stopped without an answer (its "
                               "lease ran out), so it may or may not have reached the upstream; "
                               "an operator must check and purge the record",
                         0, true);
    } else if (d == DECIDE_REJECT_IN_FLIGHT) {
        exchange_problem(x, PROBLEM_REQUEST_IN_PROGRESS, 409,
                         "a request with this idempotency key is in progress; retry later", 1,
                         false);
    } else {
        exchange_problem(x, PROBLEM_KEY_REUSE_MISMATCH, x->policy->mismatch_status,
                         "this idempotency key was already used with a different request "
                         "(method, path, query or body)",
                         0, false);
    }
}

/* ---- replicated claims (redis.min_replicas) ----------------------------- */

static void exchange_on_unreplicated_released(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK) /* nothing was forwarded: the janitor keeps trying */
        janitor_release(&x->set->janitor, x->record_key, x->owner, x->policy->retention_ms);
    else if (applied)
        exchange_record_changed(x->set, x->record_key);
    exchange_unref(x);
}

/*
 * Fewer than min_replicas replicas confirmed the claim, or the WAIT failed
 * (then the claim may or may not be replicated): a failover now could lose
 * it and let a second request execute. A store failure like any other, so
 * on_store_error decides (README "Replicated claims"): reject refuses with
 * 503 before anything is forwarded and releases the claim (owner-checked;
 * the janitor retries when it cannot be sent now); pass forwards, keeping
 * the claim, which still stops a second execution on this primary.
 */
static void exchange_not_replicated(struct exchange *x, enum store_status st,
                                    long long replicas)
{
    unsigned want = x->conf->redis_min_replicas;

    metrics_count(x->set->metrics, METRICS_WAIT_SHORTFALLS_CLAIM);
    if (st == STORE_OK)
        log_msg(LOG_WARN, "exchange %s: the claim reached %lld of %u replicas within "
                "redis.replica_timeout", x->record_id, replicas, want);
    else
        log_msg(LOG_WARN, "exchange %s: WAIT for %u replicas failed (%s); the claim may not be "
                "replicated", x->record_id, want,
                st == STORE_TIMEOUT ? "timeout" : st == STORE_ERROR ? "error reply"
                : "connection lost");
    if (x->policy->on_store_error == STORE_ERROR_PASS) {
        metrics_count(x->set->metrics, METRICS_STORE_ERROR_PASSES);
        if (exchange_set_state(x, X_FORWARDING))
            exchange_forward(x);
        return;
    }
    x->pending++;
    store_release_owned(x->set->store, x->record_key, x->owner,
                        exchange_on_unreplicated_released, x);
    x->outcome = OUTCOME_STORE_ERROR;
    exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503,
                     "the idempotency store could not copy the claim to enough replicas in "
                     "time; nothing was forwarded", 1, false);
}

static void exchange_on_claim_replicated(enum store_status st, long long replicas, void *arg)
{
    struct exchange *x = arg;

    metrics_observe(x->set->metrics, METRICS_REPLICA_WAIT_LATENCY,
                    (clock_mono_ms() - x->replicating_ms) / 1000.0);
    if (st != STORE_OK || replicas < (long long)x->conf->redis_min_replicas)
        exchange_not_replicated(x, st, replicas);
    else if (exchange_set_state(x, X_FORWARDING))
        exchange_forward(x);
    exchange_unref(x);
}

/*
 * We hold the claim: forward, or with redis.min_replicas first WAIT until
 * that many replicas hold it (called from inside the claim's or the
 * takeover's reply callback: store_wait_replicas needs its connection).
 */
static void exchange_won(struct exchange *x)
{
    x->lease_deadline_ms = x->renew_deadline_ms;
    x->renew_deadline_ms = 0;
    if (x->conf->redis_min_replicas == 0) {
        if (exchange_set_state(x, X_FORWARDING))
            exchange_forward(x);
        return;
    }
    if (!exchange_set_state(x, X_REPLICATING))
        return;
    x->replicating_ms = clock_mono_ms();
    x->pending++;
    store_wait_replicas(x->set->store, true, exchange_on_claim_replicated, x);
}

/*
 * Our claim or takeover got no answer (timeout, lost connection): it may have
 * landed. Under on_store_error: reject nothing is forwarded, so the janitor
 * releases what may have landed; under pass the request is forwarded and its
 * claim must stay. Then the store-failure policy answers.
 */
static void exchange_claim_failed(struct exchange *x, enum store_status st)
{
    if ((st == STORE_TIMEOUT || st == STORE_LOST) &&
        x->policy->on_store_error == STORE_ERROR_REJECT)
        janitor_release(&x->set->janitor, x->record_key, x->owner, x->policy->retention_ms);
    exchange_store_failed(x, st);
}

static void exchange_on_claim(enum store_status st, const char *value, size_t len, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK) {
        exchange_claim_failed(x, st);
    } else if (value == NULL) {
        exchange_won(x);
    } else {
        exchange_on_existing(x, value, len);
    }
    exchange_unref(x);
}

static void exchange_on_takeover(enum store_status st, bool applied, void *arg)
{
    struct exchange *x = arg;

    if (st != STORE_OK) {
        exchange_claim_failed(x, st);
    } else if (applied) {
        log_msg(LOG_WARN, "exchange %s: took over a record whose lease expired", x->record_id);
        exchange_won(x);
    } else {
        exchange_claim(x); /* it changed under us: look again */
    }
    exchange_unref(x);
}

void exchange_claim(struct exchange *x)
{
    exchange_send_claim(x, NULL, 0);
}

/* ---- identity ----------------------------------------------------------- */

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
    if (record_key_format(x->conf->key_prefix, x->record_id, x->record_key,
                          sizeof(x->record_key)) != 0)
        abort();
}

/* The key is valid: compute the record identity and fingerprint, then claim. */
void exchange_protect(struct exchange *x, const struct evkeyvalq *headers,
                             const char *key, size_t key_len)
{
    exchange_identify(x, headers, key, key_len);
    if (x->policy->delivery.mode == DELIVERY_QUEUED &&
        (x->event_id = strndup(key, key_len)) == NULL) {
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    if (x->policy->fingerprint == FINGERPRINT_REQUEST)
        fingerprint_request(x->rq.method, x->rq.target, x->rq.body_bytes, x->rq.body_len, x->fingerprint);
    else
        fingerprint_none(x->fingerprint);
    if (owner_token_create(x->owner) != 0) {
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    x->created_ms = clock_now_ms();
    exchange_claim(x);
}

