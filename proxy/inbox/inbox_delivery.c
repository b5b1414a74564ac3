/*
 * inbox_delivery.c - one queued delivery: the stream entry read into it,
 * opened (inbox_seal.h) and signed (webhook.h), sent upstream, and what the
 * receiver's answer settles (acknowledge, retry after a backoff, or the
 * dead-letter stream). inbox_deliver.c's header says how the consumer
 * behaves; this file calls none of its functions.
 */
#include "inbox_deliver_int.h"

#include "headers.h"

/* ---- entries ------------------------------------------------------------ */

void inbox_delivery_free(struct inbox_delivery *d)
{
    struct inbox_route *r = d->r;

    TAILQ_REMOVE(&r->deliveries, d, link);
    r->in_flight--;
    r->ib->delivering--;
    evhttp_clear_headers(&d->headers);
    free(d->event);
    free(d->method);
    free(d->target);
    free(d->client);
    free(d->body);
    free(d->sealed);
    free(d);
}

static char *inbox_strndup(const struct store_reply *v)
{
    char *s = malloc(v->len + 1);

    if (s == NULL) {
        log_msg(LOG_ERROR, "inbox: out of memory");
        abort();
    }
    memcpy(s, v->str, v->len);
    s[v->len] = '\0';
    return s;
}

static uint64_t inbox_number(const struct store_reply *v)
{
    char text[24];

    if (v->len == 0 || v->len >= sizeof(text))
        return 0;
    memcpy(text, v->str, v->len);
    text[v->len] = '\0';
    return strtoull(text, NULL, 10);
}

/* An entry [id, [name, value, ...]] as a delivery; NULL when it is not one (deleted: NIL). */
static struct inbox_delivery *inbox_entry_parse(struct inbox_route *r, const struct store_reply *e)
{
    struct inbox_delivery *d;
    const struct store_reply *f;

    if (e->type != STORE_ARR || e->n != 2 || e->elem[0].type != STORE_STR ||
        e->elem[0].len >= sizeof(d->id) || e->elem[1].type != STORE_ARR)
        return NULL;
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        log_msg(LOG_ERROR, "inbox: out of memory");
        abort();
    }
    d->r = r;
    memcpy(d->id, e->elem[0].str, e->elem[0].len);
    TAILQ_INIT(&d->headers);
    f = &e->elem[1];
    for (size_t i = 0; i + 1 < f->n; i += 2) {
        const struct store_reply *k = &f->elem[i], *v = &f->elem[i + 1];
        if (k->type != STORE_STR || v->type != STORE_STR)
            continue;
        if (k->len == 5 && memcmp(k->str, "event", 5) == 0 && d->event == NULL) {
            d->event = inbox_strndup(v);
        } else if (k->len == 6 && memcmp(k->str, "record", 6) == 0 &&
                   v->len < sizeof(d->record)) {
            memcpy(d->record, v->str, v->len);
            d->record[v->len] = '\0';
        } else if (k->len == 6 && memcmp(k->str, "method", 6) == 0 && d->method == NULL) {
            d->method = inbox_strndup(v);
        } else if (k->len == 6 && memcmp(k->str, "target", 6) == 0 && d->target == NULL) {
            d->target = inbox_strndup(v);
        } else if (k->len == 6 && memcmp(k->str, "client", 6) == 0 && d->client == NULL) {
            d->client = inbox_strndup(v);
        } else if (k->len == 4 && memcmp(k->str, "body", 4) == 0 && d->body == NULL) {
            d->body = inbox_strndup(v);
            d->body_len = v->len;
        } else if (k->len == 6 && memcmp(k->str, "sealed", 6) == 0 && d->sealed == NULL) {
            d->sealed = inbox_strndup(v);
            d->sealed_len = v->len;
        } else if (k->len == 8 && memcmp(k->str, "received", 8) == 0) {
            d->received_ms = inbox_number(v);
        } else if (k->len == 8 && memcmp(k->str, "attempts", 8) == 0) {
            d->attempts = (unsigned)inbox_number(v);
        } else if (k->len > 2 && memcmp(k->str, "h:", 2) == 0) {
            char *name = inbox_strndup(k), *value = inbox_strndup(v);
            d->plain_fields++;
            /* the filter of inbox_append: a field it would not queue is not delivered */
            if (header_is_queued(name + 2))
                evhttp_add_header(&d->headers, name + 2, value);
            free(name);
            free(value);
        }
    }
    return d;
}

/* ---- outcomes ----------------------------------------------------------- */


/*
 * The settlement's reply. A failure (Redis down, a lost reply) keeps the
 * delivery, still renewed, and the next turn sends the same settlement
 * again: each is idempotent (an entry already acked, retried or buried
 * reads as gone), so a Redis blip does not cost the receiver a second copy.
 * While shutting down it is left pending instead: taken over after
 * visibility_timeout.
 */
static void inbox_on_settled(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_delivery *d = arg;
    struct inbox *ib = d->r->ib;

    d->settling = false;
    if (st == STORE_OK) {
        if (d->settle == SETTLE_ACK) {
            uint64_t now = clock_now_ms();
            metrics_count(ib->metrics, METRICS_INBOX_DELIVERED);
            metrics_observe(ib->metrics, METRICS_INBOX_DELIVERY_LATENCY,
                            now > d->received_ms ? (double)(now - d->received_ms) / 1000.0 : 0.0);
        } else if (d->settle == SETTLE_BURY) {
            /* counted once Redis holds it: the metric never runs ahead of GET /inbox */
            metrics_count(ib->metrics, METRICS_INBOX_DEAD);
        }
        inbox_delivery_free(d);
        return;
    }
    (void)reply;
    if (ib->stopping) {
        log_msg(LOG_WARN, "inbox %s: entry %s: Redis failed to settle it while shutting down; "
                "it is delivered again after delivery.visibility_timeout", d->r->route->path,
                d->id);
        inbox_delivery_free(d);
        return;
    }
    if (!d->settle_failed)
        log_msg(LOG_WARN, "inbox %s: entry %s: Redis failed to settle it; trying again",
                d->r->route->path, d->id);
    d->settle_failed = true;
}

/* Send d's settlement: XACK+XDEL, the retry, or the dead-letter stream. */
void inbox_settle(struct inbox_delivery *d)
{
    struct inbox_route *r = d->r;
    struct inbox *ib = r->ib;

    d->settling = true;
    switch (d->settle) {
    case SETTLE_ACK:
        inbox_store_ack(ib->store, &r->keys.k, d->id, inbox_on_settled, d);
        break;
    case SETTLE_RETRY:
        inbox_store_retry(ib->store, &r->keys.k, d->id, d->settle_attempts, d->settle_ms,
                          inbox_on_settled, d);
        break;
    case SETTLE_BURY:
        inbox_store_bury(ib->store, &r->keys.k, d->id, d->settle_attempts, d->reason,
                         d->settle_ms, inbox_on_settled, d);
        break;
    case SETTLE_NONE:
        d->settling = false;
        break;
    }
}

/* Full jitter (docs/webhooks.md#webhook-inbox): uniform in [0, min(max, initial * 2^(attempts-1))]. */
static uint64_t inbox_backoff_ms(struct inbox *ib, const struct delivery_policy *p,
                                 unsigned attempts)
{
    uint64_t cap = p->backoff_initial_ms;

    for (unsigned i = 1; i < attempts && cap < p->backoff_max_ms; i++)
        cap *= 2;
    if (cap > p->backoff_max_ms)
        cap = p->backoff_max_ms;
    ib->rng ^= ib->rng << 13;
    ib->rng ^= ib->rng >> 7;
    ib->rng ^= ib->rng << 17;
    return ib->rng % (cap + 1);
}

static void inbox_on_held(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;

    (void)reply;
    r->ib->busy--;
    if (st != STORE_OK)
        log_msg(LOG_WARN, "inbox %s: the receiver's Retry-After could not hold the route in "
                "Redis (%s); only that delivery waits", r->route->path, store_status_name(st));
}

/* The receiver asked for Retry-After: the whole route waits hold_ms, on every instance. */
static void inbox_hold(struct inbox_route *r, uint64_t hold_ms)
{
    if (hold_ms == 0)
        return;
    r->ib->busy++;
    inbox_store_hold(r->ib->store, &r->keys.k, hold_ms, &r->rate, inbox_on_held, r);
}

/* To the dead-letter stream with reason (copied), after attempts deliveries; logged, counted. */
static void inbox_bury(struct inbox_delivery *d, unsigned attempts, const char *reason)
{
    struct inbox_route *r = d->r;

    log_msg(LOG_WARN, "inbox %s: delivery %s dead-lettered: %s", r->route->path,
            d->record[0] ? d->record : d->id, reason);
    d->settle = SETTLE_BURY;
    d->settle_attempts = attempts;
    d->settle_ms = clock_now_ms();
    snprintf(d->reason, sizeof(d->reason), "%s", reason);
    inbox_settle(d);
}

/*
 * Not acknowledged: retry later, or the dead-letter stream. why: what the
 * attempt got. retry_after_ms: the receiver's Retry-After (a 429 or 503),
 * -1 without one: the retry waits at least that long, capped at
 * backoff.max, and never past max_age.
 */
static void inbox_failed(struct inbox_delivery *d, const char *why, int64_t retry_after_ms)
{
    struct inbox_route *r = d->r;
    struct inbox *ib = r->ib;
    const struct delivery_policy *p = r->policy;
    unsigned attempts = d->attempts + 1;
    uint64_t now = clock_now_ms(), deadline = d->received_ms + p->max_age_ms;
    char reason[160];

    if (attempts >= p->max_attempts || now >= deadline) {
        snprintf(reason, sizeof(reason), "%s after %u attempts; the last got %s",
                 attempts >= p->max_attempts ? "max_attempts" : "max_age", attempts, why);
        inbox_bury(d, attempts, reason);
        return;
    }
    uint64_t wait = inbox_backoff_ms(ib, p, attempts);
    if (retry_after_ms >= 0) {
        uint64_t asked = (uint64_t)retry_after_ms;

        if (asked > p->backoff_max_ms)
            asked = p->backoff_max_ms;
        if (wait < asked)
            wait = asked;
        inbox_hold(r, asked);
    }
    if (wait > deadline - now)
        wait = deadline - now; /* one last attempt at max_age */
    log_msg(LOG_INFO, "inbox %s: delivery %s attempt %u got %s; retry in %llu ms",
            r->route->path, d->record[0] ? d->record : d->id, attempts, why,
            (unsigned long long)wait);
    metrics_count(ib->metrics, METRICS_INBOX_RETRIES);
    d->settle = SETTLE_RETRY;
    d->settle_attempts = attempts;
    d->settle_ms = wait;
    inbox_settle(d);
}

static void inbox_on_upstream(enum upstream_outcome outcome, const struct upstream_response *resp,
                              const char *detail, const char *cause, double upstream_ms,
                              void *arg)
{
    struct inbox_delivery *d = arg;
    struct inbox *ib = d->r->ib;
    char why[80];

    (void)cause;
    (void)upstream_ms;
    metrics_count(ib->metrics, METRICS_INBOX_ATTEMPTS);
    if (outcome == UPSTREAM_ANSWERED && resp->status >= 200 && resp->status < 300) {
        d->settle = SETTLE_ACK;
        inbox_settle(d);
        return;
    }
    int64_t retry_after_ms = -1;
    if (outcome == UPSTREAM_ANSWERED && (resp->status == 429 || resp->status == 503) &&
        resp->headers != NULL) {
        const char *ra = evhttp_find_header(resp->headers, "Retry-After");
        if (ra != NULL)
            retry_after_ms = upstream_retry_after_ms(ra, (int64_t)(clock_now_ms() / 1000));
    }
    if (outcome == UPSTREAM_ANSWERED)
        snprintf(why, sizeof(why), "HTTP %d%s", resp->status,
                 retry_after_ms >= 0 ? " with Retry-After" : "");
    else
        snprintf(why, sizeof(why), "no answer (%s)", detail != NULL ? detail : "failed");
    inbox_failed(d, why, retry_after_ms);
}

/* Whether this consumer is delivering entry id right now. */
static bool inbox_delivering(const struct inbox_route *r, const struct store_reply *entry)
{
    const struct inbox_delivery *d;

    if (entry->type != STORE_ARR || entry->n < 1 || entry->elem[0].type != STORE_STR)
        return false;
    TAILQ_FOREACH(d, &r->deliveries, link)
        if (strlen(d->id) == entry->elem[0].len &&
            memcmp(d->id, entry->elem[0].str, entry->elem[0].len) == 0)
            return true;
    return false;
}

/*
 * Refuse an entry this proxy did not write as it is (docs/webhooks.md,
 * "Dead letters"): straight to the dead letters with reason, counted as
 * unreadable, never signed or sent.
 */
static void inbox_refuse(struct inbox_delivery *d, const char *reason)
{
    metrics_count(d->r->ib->metrics, METRICS_DECRYPT_UNREADABLE);
    log_msg(LOG_ERROR, "inbox %s: delivery %s refused: %s", d->r->route->path,
            d->record[0] ? d->record : d->id, reason);
    inbox_bury(d, d->attempts, reason);
}

/*
 * Open a sealed entry's header fields and body (inbox_seal.h) with the
 * keyring of the last config; accept_id1: a 0.4.0 (ID1) value opens too.
 * One that fails authentication goes to the dead letters with the reason,
 * never delivered garbled; one whose key is not in the keyring (a rotation
 * step applied out of order across instances) or that could not be opened
 * for want of memory is a failed attempt, retried after the backoff and
 * dead-lettered only at max_attempts or max_age. Returns false then.
 */
static bool inbox_delivery_open(struct inbox_delivery *d, bool accept_id1)
{
    struct inbox_route *rt = d->r;
    struct inbox *ib = rt->ib;
    struct inbox_seal_bind b = { rt->name, rt->route->path, d->event, d->method, d->target,
                                 d->record };
    char key_id[KEYRING_ID_MAX + 1], why[200];
    int r;

    r = inbox_seal_open(ib->keyring, &b, accept_id1, d->sealed, d->sealed_len, &d->headers,
                        &d->body, &d->body_len, key_id);
    if (r == SEAL_OK)
        return true;
    if (r == SEAL_UNREADABLE) {
        snprintf(why, sizeof(why), "fails authentication (key id \"%s\"): changed in Redis, or "
                 "moved to another route, target, method or record", key_id);
        inbox_refuse(d, why);
        return false;
    }
    if (r == SEAL_KEY_UNAVAILABLE)
        metrics_count(ib->metrics, METRICS_DECRYPT_KEY_UNAVAILABLE);
    snprintf(why, sizeof(why), "%s (key id \"%s\")",
             r == SEAL_KEY_UNAVAILABLE ? "a delivery whose key is not in the keyring"
                                       : "a delivery that could not be opened (out of memory)",
             key_id);
    log_msg(LOG_WARN, "inbox %s: delivery %s cannot be decrypted: %s", rt->route->path,
            d->record[0] ? d->record : d->id, why);
    inbox_failed(d, why, -1);
    return false;
}

/*
 * Whether the entry may be delivered as the keyring of the last config
 * reads it: with a keyring, only sealed (ID2; ID1 and plaintext only
 * before encryption.accept_plaintext_until), and a sealed entry never with
 * a plaintext body or "h:" field beside it (changed in Redis: the sealed
 * value holds both). Refuses, or opens, the entry itself otherwise and
 * returns false.
 */
static bool inbox_delivery_readable(struct inbox_delivery *d)
{
    struct inbox *ib = d->r->ib;
    bool plaintext_ok = ib->keyring == NULL || clock_now_ms() < ib->plaintext_until_ms;

    if (d->sealed != NULL && (d->body != NULL || d->plain_fields > 0)) {
        inbox_refuse(d, "tampered: plaintext fields (body or h:) beside the sealed value; "
                     "changed in Redis");
        return false;
    }
    if (d->sealed != NULL)
        return inbox_delivery_open(d, plaintext_ok);
    if (!plaintext_ok) {
        inbox_refuse(d, "not sealed: a plaintext entry under encryption.keyring (written in "
                     "Redis, or queued before the keyring and past accept_plaintext_until)");
        return false;
    }
    return true;
}

/*
 * delivery.sign: this attempt carries the proxy's own Standard Webhooks
 * headers, timed now, instead of the provider's signature headers (which a
 * receiver would refuse as stale on a retry after 5 minutes). 0, or -1
 * when the event id cannot be a webhook-id or signing failed.
 */
static int inbox_sign(struct inbox_delivery *d)
{
    const struct delivery_policy *p = d->r->sign; /* the last reload's secrets */
    struct evkeyval *h, *next;
    char signature[WEBHOOK_SIGNATURE_MAX], ts[24];
    int64_t now_s = (int64_t)(clock_now_ms() / 1000);

    for (h = TAILQ_FIRST(&d->headers); h != NULL; h = next) {
        next = TAILQ_NEXT(h, next);
        if (webhook_is_signature_header(h->key))
            evhttp_remove_header(&d->headers, h->key);
    }
    if (strchr(d->event, '\r') != NULL || strchr(d->event, '\n') != NULL ||
        webhook_sign(p->sign_secrets, p->n_sign_secrets, d->event, now_s, d->body, d->body_len,
                     signature, sizeof(signature)) < 0)
        return -1;
    snprintf(ts, sizeof(ts), "%lld", (long long)now_s);
    evhttp_add_header(&d->headers, "webhook-id", d->event);
    evhttp_add_header(&d->headers, "webhook-timestamp", ts);
    evhttp_add_header(&d->headers, "webhook-signature", signature);
    return 0;
}

/* Deliver one entry of ours (read or taken over). */
void inbox_deliver(struct inbox_route *r, const struct store_reply *entry)
{
    struct inbox *ib = r->ib;
    struct inbox_delivery *d;

    /* a renewal that failed lets XAUTOCLAIM hand us our own entry: one copy at a time */
    if (inbox_delivering(r, entry))
        return;
    d = inbox_entry_parse(r, entry);
    if (d == NULL)
        return; /* deleted meanwhile (XAUTOCLAIM lists those apart) */
    TAILQ_INSERT_TAIL(&r->deliveries, d, link);
    r->in_flight++;
    ib->delivering++;
    if (d->event == NULL || d->method == NULL || d->target == NULL) {
        /* not ours to read: keep it for an operator rather than lose it */
        d->attempts = r->policy->max_attempts;
        inbox_failed(d, "a malformed entry", -1);
        return;
    }
    if (!inbox_delivery_readable(d))
        return;
    evhttp_remove_header(&d->headers, "Idempotency-Key");
    evhttp_add_header(&d->headers, "Idempotency-Key", d->event);
    if (r->sign->n_sign_secrets > 0 && inbox_sign(d) < 0) {
        d->attempts = r->policy->max_attempts;
        inbox_failed(d, "an entry that cannot be signed", -1);
        return;
    }
    /* only the status counts (docs/webhooks.md#webhook-inbox): the receiver's body is dropped */
    if (upstream_send_capped(ib->up, d->method, d->target, &d->headers, d->client, d->body,
                             d->body_len, 0, inbox_on_upstream, d) != 0) {
        metrics_count(ib->metrics, METRICS_INBOX_ATTEMPTS);
        inbox_failed(d, "no answer (the upstream call could not be set up)", -1);
    }
}

