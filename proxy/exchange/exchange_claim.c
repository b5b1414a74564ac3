/*
 * exchange_claim.c - the protected path of one exchange (docs/client-contract.md#how-a-request-is-handled): its
 * record identity, the claim, what an existing record means, taking over an
 * expired lease, waiting for another request's answer, and renewing the
 * lease while the upstream works. See exchange.c for the state machine.
 */
#include "exchange_int.h"
#include "seal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>

#include "canonical.h"
#include "clock.h"
#include "config.h"
#include "decide.h"
#include "headers.h"
#include "http_server.h"
#include "log.h"
#include "metrics.h"
#include "record_id.h"

/* A waiter polls the record every 10 ms at first, doubling up to 250 ms. */
#define EXCHANGE_POLL_MIN_MS 10
#define EXCHANGE_POLL_MAX_MS 250

/* ---- lease renewal ----------------------------------------------------- */

/* ---- waiting for another request's answer ------------------------------ */

/*
 * Wait for the first request's answer, polling with a bounded backoff,
 * until wait_timeout (monotonic: a wall clock stepped back must not keep
 * the client waiting past it), then 409 request-in-progress.
 */
static void exchange_wait(struct exchange *x)
{
    double now = clock_mono_ms();
    uint64_t delay;
    struct timeval tv;

    if (!x->waited) {
        x->waited = true;
        x->wait_deadline_ms = now + (double)x->policy->wait_timeout_ms;
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
    if (now + (double)delay > x->wait_deadline_ms)
        delay = (uint64_t)(x->wait_deadline_ms - now) + 1; /* not a turn before it */
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

/* ---- the claim and what an existing record means ----------------------- */

static void exchange_on_takeover(enum store_status st, bool applied, void *arg);
static void exchange_on_claim(enum store_status st, const char *value, size_t len, void *arg);

/*
 * Send our claim: SET NX GET (expected NULL), or a takeover of the expired
 * claim `expected` (expected_len bytes, on_ambiguous: release). x enters
 * CLAIMING first, from NEW, WAITING (a poll) or CLAIMING, so that a claim
 * value that cannot be made (out of memory, or a wall clock past what a
 * record holds) is a store failure reported from CLAIMING, where both
 * on_store_error policies are legal transitions.
 */
static void exchange_send_claim(struct exchange *x, const char *expected, size_t expected_len)
{
    size_t len;
    uint64_t deadline;
    char *value;

    if (!exchange_set_state(x, X_CLAIMING))
        return;
    value = exchange_claim_value(x, &len, &deadline);
    if (value == NULL) {
        log_msg(LOG_ERROR, "exchange %s: cannot make the claim value", x->record_id);
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    x->renew_deadline_ms = deadline; /* the lease we hold if it wins */
    exchange_ref(x);
    if (expected == NULL)
        store_claim(x->set->store, x->record_key, value, len, x->policy->retention_ms,
                    exchange_on_claim, x);
    else
        store_takeover(x->set->store, x->record_key, expected, expected_len, value, len,
                       x->policy->retention_ms, exchange_on_takeover, x);
    free(value);
}

/*
 * A stored value that cannot be decrypted (r: SEAL_KEY_UNAVAILABLE, or
 * SEAL_UNREADABLE, or -1 for want of memory): the record exists, so the
 * upstream was or may have been called; nothing is forwarded and the
 * record is kept (docs/data-protection.md).
 */
/* 502 record-unreadable, counted: a record exists that this proxy cannot read (logged by the caller). */
static void exchange_refuse_unreadable(struct exchange *x)
{
    metrics_count(x->set->metrics, METRICS_DECRYPT_UNREADABLE);
    exchange_problem(x, PROBLEM_RECORD_UNREADABLE, 502,
                     "the stored record of this idempotency key cannot be read; it will not be "
                     "executed again", 0, false);
}

static void exchange_unreadable(struct exchange *x, int r, const char *key_id)
{
    if (r == SEAL_KEY_UNAVAILABLE) {
        metrics_count(x->set->metrics, METRICS_DECRYPT_KEY_UNAVAILABLE);
        log_msg(LOG_ERROR, "exchange %s: the record's key id \"%s\" is not in the keyring; "
                "nothing forwarded, the record is kept", x->record_id, key_id);
        exchange_problem(x, PROBLEM_RECORD_KEY_UNAVAILABLE, 503,
                         "the stored record of this idempotency key was encrypted under a key "
                         "this proxy does not hold; nothing was forwarded", 30, false);
    } else if (r == SEAL_UNREADABLE) {
        log_msg(LOG_ERROR, "exchange %s: the record (key id \"%s\") fails authentication: "
                "it was changed in Redis; nothing forwarded, the record is kept",
                x->record_id, key_id);
        exchange_refuse_unreadable(x);
    } else {
        /* never on_store_error: pass: a record exists, forwarding could execute twice */
        log_msg(LOG_ERROR, "exchange %s: cannot open the record (out of memory, or OpenSSL "
                "failed); nothing forwarded", x->record_id);
        x->outcome = OUTCOME_STORE_ERROR;
        exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503,
                         "the stored record of this idempotency key could not be read now; "
                         "nothing was forwarded", 1, false);
    }
}

/* Our request as canonical.h reads it (its body, until it is dropped after the forward). */
static void exchange_canonical_request(const struct exchange *x, struct canonical_request *rq)
{
    *rq = (struct canonical_request){
        .method = x->rq.method, .target = x->rq.target,
        .body = x->rq.body_bytes, .body_len = x->rq.body_len,
    };
    /* x->req is there until x is answered, and nothing fingerprints an answered exchange */
    rq->content_type = x->req != NULL ? header_find_all(http_server_input_headers(x->req),
                                                        "Content-Type", &rq->content_type_lines)
                                      : NULL;
}

/*
 * canonical_fingerprint of our request under basis and key_id (NULL: the
 * encrypting key), its json or form mode's parse of the body metered
 * (exchange_meter_begin). When that memory does not fit, x is answered,
 * nothing claimed or forwarded, and CANONICAL_FAILED is returned with
 * *answered set.
 */
static int exchange_canonical(struct exchange *x, const char *key_id,
                              const struct fingerprint_basis *basis, char *fp, char *why,
                              bool *answered)
{
    struct canonical_request rq;
    struct mem_meter m;
    int r;

    exchange_canonical_request(x, &rq);
    exchange_meter_begin(x, &m);
    r = canonical_fingerprint(x->conf->keyring, key_id, basis, &rq, fp, why);
    *answered = exchange_meter_end(x, &m, "its fingerprint (json or form)");
    return *answered ? CANONICAL_FAILED : r;
}

/*
 * The fingerprint of our request as rec's was made, into fp
 * (FINGERPRINT_HEX_LEN + 1 bytes): in rec's mode with rec's ignore list (a
 * reload of the route's fingerprint since never makes a record
 * incomparable), under rec's key id (a rotation since never turns a retry
 * into a mismatch), or unkeyed for a record without one (a plaintext
 * record from before the keyring). A body rec's mode cannot read is not
 * the request rec recorded (that one was read): fp "" then, a mismatch.
 * Nothing to compute on a route that compares nothing now (none). Answers
 * the request itself when rec's key is not in the keyring (or out of
 * memory, or the body's parsed form does not fit: exchange_canonical), and then returns SEAL_KEY_UNAVAILABLE; else SEAL_OK.
 */
static int exchange_compared_fingerprint(struct exchange *x, const struct record *rec, char *fp)
{
    struct fingerprint_basis ours;
    char why[CANONICAL_WHY_MAX];
    bool answered;
    int r;

    memcpy(fp, x->fingerprint, FINGERPRINT_HEX_LEN + 1);
    canonical_basis_of(&ours, x->policy);
    if (x->policy->fingerprint == FINGERPRINT_NONE ||
        (strcmp(rec->key_id, x->key_id) == 0 && canonical_basis_equal(&rec->basis, &ours)))
        return SEAL_OK;
    r = exchange_canonical(x, rec->key_id, &rec->basis, fp, why, &answered);
    if (answered)
        return SEAL_KEY_UNAVAILABLE;
    if (r == CANONICAL_OK)
        return SEAL_OK;
    if (r == CANONICAL_INVALID_BODY) {
        fp[0] = '\0';
        return SEAL_OK;
    }
    if (r == CANONICAL_KEY_UNAVAILABLE)
        keyring_count_id(rec->key_id, strlen(rec->key_id), KEYRING_UNAVAILABLE);
    exchange_unreadable(x, r == CANONICAL_KEY_UNAVAILABLE ? SEAL_KEY_UNAVAILABLE : -1,
                        rec->key_id);
    return SEAL_KEY_UNAVAILABLE;
}

static void exchange_on_existing(struct exchange *x, const char *value, size_t len)
{
    struct record rec;
    enum decision d;
    char detail[160];
    char fp[FINGERPRINT_HEX_LEN + 1], key_id[KEYRING_ID_MAX + 1];
    char *plain = NULL;
    int r;

    if (record_decode(value, len, &rec) != 0) {
        /*
         * A record exists, so the key was or may have been forwarded: never on_store_error:
         * pass. A value this release cannot read (changed in Redis, cut, or written by a
         * later format) is refused like one that fails authentication.
         */
        log_msg(LOG_ERROR, "exchange %s: the stored record is malformed (%zu bytes, not a record "
                "format this release reads); nothing forwarded, the record is kept",
                x->record_id, len);
        exchange_refuse_unreadable(x);
        return;
    }
    if (record_plaintext(&rec) && !config_accepts_plaintext(x->conf, clock_now_ms())) {
        /* written before the keyring, or forged or downgraded in Redis: refused like a bad tag */
        log_msg(LOG_ERROR, "exchange %s: the stored record is not sealed (IR%d, a plaintext "
                "answer) and encryption.accept_plaintext_until does not admit it now; nothing "
                "forwarded, the record is kept", x->record_id, rec.version);
        exchange_refuse_unreadable(x);
        return;
    }
    if (exchange_compared_fingerprint(x, &rec, fp) != SEAL_OK)
        return;
    r = record_open(&rec, x->conf->keyring, x->record_key, &plain, key_id);
    if (r != SEAL_OK) {
        exchange_unreadable(x, r, key_id);
        return;
    }
    d = decide_existing(&rec, fp, clock_now_ms(), x->policy);
    switch (d) {
    case DECIDE_REPLAY:
        exchange_reply_replay(x, &rec);
        record_plain_free(plain, rec.sealed_len);
        return;
    case DECIDE_WAIT:
        record_plain_free(plain, rec.sealed_len);
        exchange_wait(x);
        return;
    case DECIDE_TAKEOVER:
        record_plain_free(plain, rec.sealed_len);
        exchange_send_claim(x, value, len);
        return;
    default:
        break;
    }
    record_plain_free(plain, rec.sealed_len); /* only rec.status is read from here on */
    x->outcome = decision_outcome(d);
    if (d == DECIDE_NOT_REPLAYABLE) {
        snprintf(detail, sizeof(detail),
                 "the original request was executed (upstream status %d) but its response was "
                 "too large to store; it will not be executed again",
                 rec.status);
        exchange_problem(x, PROBLEM_RESPONSE_NOT_REPLAYABLE, 502, detail, 0, true);
    } else if (d == DECIDE_OUTCOME_UNKNOWN) {
        /*
         * a claim whose lease ran out (a proxy that died mid-flight) was never
         * written as outcome-unknown, so nothing counted it: each such answer
         * counts (docs/operations.md#metrics)
         */
        if (rec.state != RECORD_UNKNOWN)
            metrics_count_outcome_unknown(x->set->metrics,
                                          x->route != NULL ? x->route->path : NULL);
        exchange_outcome_unknown(x, rec.state == RECORD_UNKNOWN
                                        ? "the original request was sent upstream but its "
                                          "answer was lost, so it may or may not have "
                                          "executed; it is held until an operator resolves "
                                          "it: retry with the same key and body after "
                                          "Retry-After to get the resolution, and quote the "
                                          "record_id to support"
                                        : "the request that claimed this key stopped without "
                                          "an answer (its lease ran out), so it may or may not "
                                          "have reached the upstream; it is held until an "
                                          "operator resolves it: retry with the same key and "
                                          "body after Retry-After to get the resolution, and "
                                          "quote the record_id to support",
                                 true);
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

    if (st != STORE_OK) { /* nothing was forwarded: the janitor keeps trying */
        janitor_release(&x->set->janitor, x->record_key, x->owner, x->policy->retention_ms);
    } else if (applied) {
        /* a replica may have the claim and not yet this release: again after a failover */
        janitor_remember(&x->set->janitor, x->record_key, x->owner);
        exchange_record_changed(x->set, x->record_key);
    }
    exchange_unref(x);
}

/*
 * Fewer than min_replicas replicas confirmed the claim, or the WAIT failed
 * (then the claim may or may not be replicated): a failover now could lose
 * it and let a second request execute. A store failure like any other, so
 * on_store_error decides (docs/redis.md#replicated-claims): reject refuses with
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
                "replicated", x->record_id, want, store_status_name(st));
    if (x->policy->on_store_error == ON_STORE_ERROR_PASS) {
        metrics_count(x->set->metrics, METRICS_STORE_ERROR_PASSES);
        if (exchange_set_state(x, X_FORWARDING))
            exchange_forward(x);
        return;
    }
    exchange_ref(x);
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
    exchange_ref(x);
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
        x->policy->on_store_error == ON_STORE_ERROR_REJECT)
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

/*
 * Our fingerprint, in our route's mode (canonical.h), keyed under the
 * keyring's encrypting key when there is one. A body the mode cannot read
 * is refused here, before any Redis command: 400 invalid-body, nothing
 * claimed, nothing forwarded. False once x is answered.
 */
static bool exchange_fingerprint(struct exchange *x)
{
    struct fingerprint_basis basis;
    char why[CANONICAL_WHY_MAX], detail[CANONICAL_WHY_MAX + 64];
    bool answered;
    int r;

    canonical_basis_of(&basis, x->policy);
    r = exchange_canonical(x, NULL, &basis, x->fingerprint, why, &answered);
    if (answered)
        return false;
    if (r == CANONICAL_OK)
        return true;
    if (r == CANONICAL_INVALID_BODY) {
        snprintf(detail, sizeof(detail), "%s; nothing was claimed or forwarded", why);
        exchange_problem(x, PROBLEM_INVALID_BODY, 400, detail, 0, false);
        return false;
    }
    /* not a store failure: on_store_error: pass must not forward it unprotected */
    log_msg(LOG_ERROR, "exchange %s: cannot make the fingerprint (out of memory, or OpenSSL "
            "failed); nothing forwarded", x->record_id);
    x->outcome = OUTCOME_STORE_ERROR;
    exchange_problem(x, PROBLEM_STORE_UNAVAILABLE, 503,
                     "the proxy could not fingerprint the request; nothing was forwarded", 1,
                     false);
    return false;
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
    if (x->conf->keyring != NULL) /* the key that seals, and that makes the fingerprint */
        snprintf(x->key_id, sizeof(x->key_id), "%s", keyring_id(x->conf->keyring, 0));
    if (!exchange_fingerprint(x))
        return;
    if (owner_token_create(x->owner) != 0) {
        exchange_store_failed(x, STORE_ERROR);
        return;
    }
    x->created_ms = clock_now_ms();
    exchange_claim(x);
}

