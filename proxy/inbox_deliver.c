/*
 * inbox_deliver.c - the consumer of one worker (README "Webhook inbox").
 *
 * Every INBOX_TICK_MS, for each queued route: XREADGROUP as many entries as
 * the route's concurrency leaves room for (no BLOCK: the worker's one Redis
 * connection also carries the claims), deliver each through the upstream
 * client with `Idempotency-Key: <event id>`; a 2xx acknowledges (XACK and
 * XDEL: never MAXLEN), anything else schedules a retry in the route's
 * sorted set after an exponential backoff with full jitter, or moves the
 * entry to the dead-letter stream after max_attempts deliveries or max_age.
 * Due retries go back into the stream (one script, so one worker moves
 * each). Entries idle in another consumer's pending list longer than
 * visibility_timeout (a crashed instance) are taken over with XAUTOCLAIM;
 * the entries this consumer is still delivering are renewed with XCLAIM
 * JUSTID every visibility_timeout/3, so a slow receiver is not handed a
 * second copy by another instance.
 *
 * Delivery is at least once: an acknowledgement lost between the 2xx and
 * the XACK leaves the entry pending, and it is delivered again after
 * visibility_timeout. Order is not promised: retries and takeovers reorder.
 */
#include "inbox.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "upstream.h"

#define INBOX_TICK_MS 50
#define INBOX_PROMOTE_MS 200
#define INBOX_STATS_MS 1000
#define INBOX_PROMOTE_BATCH 100
/* SIGTERM: how long deliveries in flight may finish before they are released to other instances. */
#define INBOX_DRAIN_GRACE_MS 5000

struct inbox_route;

/* What the receiver's answer decided for an entry, until Redis has it. */
enum inbox_settle { SETTLE_NONE, SETTLE_ACK, SETTLE_RETRY, SETTLE_BURY };

/* One entry being delivered; it is this consumer's pending entry until acked, retried or buried. */
struct inbox_delivery {
    struct inbox_route *r;
    char id[64];
    char *event, *method, *target, *client;   /* owned */
    char record[40];                          /* the record id: logs name a delivery by it */
    char *body;                               /* owned, body_len bytes */
    size_t body_len;
    uint64_t received_ms;                     /* unix ms, when the provider's delivery came */
    unsigned attempts;                        /* deliveries before this one */
    struct evkeyvalq headers;
    enum inbox_settle settle;                 /* decided; sent again after a Redis failure */
    bool settling;                            /* its command is in flight */
    bool settle_failed;                       /* logged once */
    unsigned settle_attempts;                 /* SETTLE_RETRY / SETTLE_BURY: attempts so far */
    uint64_t settle_at_ms;                    /* SETTLE_RETRY: due; SETTLE_BURY: died */
    char reason[160];                         /* SETTLE_BURY */
    TAILQ_ENTRY(inbox_delivery) link;
};

struct inbox_route {
    struct inbox *ib;
    const struct route *route;
    const struct delivery_policy *policy;
    struct inbox_keys keys;
    bool group_ready, group_pending, reading, claiming, renewing, promoting, stats_pending;
    unsigned in_flight;                       /* deliveries in the list */
    char claim_from[64];                      /* where the next XAUTOCLAIM scan starts */
    uint64_t next_claim_ms, next_renew_ms, next_promote_ms, next_stats_ms;
    TAILQ_HEAD(, inbox_delivery) deliveries;
};

struct inbox {
    struct event_base *base;
    struct store *store;
    struct upstream *up;
    struct config *cfg;                       /* one reference */
    struct metrics *metrics;
    bool report_gauges;
    char consumer[300];
    struct inbox_route *routes;
    size_t n_routes;
    struct event *tick;
    _Atomic bool stopping;
    uint64_t stopped_ms;                      /* unix ms of inbox_stop */
    _Atomic bool released;                    /* the deliveries in flight were released */
    _Atomic unsigned busy;                    /* Redis commands in flight */
    _Atomic unsigned delivering;              /* deliveries in flight */
    uint64_t rng;                             /* xorshift64 state, for the jitter */
};

static void inbox_schedule(struct inbox_route *r);

/* ---- entries ------------------------------------------------------------ */

static void inbox_delivery_free(struct inbox_delivery *d)
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
        } else if (k->len == 8 && memcmp(k->str, "received", 8) == 0) {
            d->received_ms = inbox_number(v);
        } else if (k->len == 8 && memcmp(k->str, "attempts", 8) == 0) {
            d->attempts = (unsigned)inbox_number(v);
        } else if (k->len > 2 && memcmp(k->str, "h:", 2) == 0) {
            char *name = inbox_strndup(k), *value = inbox_strndup(v);
            evhttp_add_header(&d->headers, name + 2, value);
            free(name);
            free(value);
        }
    }
    return d;
}

/* ---- outcomes ----------------------------------------------------------- */

static void inbox_settle(struct inbox_delivery *d);

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
static void inbox_settle(struct inbox_delivery *d)
{
    struct inbox_route *r = d->r;
    struct inbox *ib = r->ib;

    d->settling = true;
    switch (d->settle) {
    case SETTLE_ACK:
        store_inbox_ack(ib->store, &r->keys.k, d->id, inbox_on_settled, d);
        break;
    case SETTLE_RETRY:
        store_inbox_retry(ib->store, &r->keys.k, d->id, d->settle_attempts, d->settle_at_ms,
                          inbox_on_settled, d);
        break;
    case SETTLE_BURY:
        store_inbox_bury(ib->store, &r->keys.k, d->id, d->settle_attempts, d->reason,
                         d->settle_at_ms, inbox_on_settled, d);
        break;
    case SETTLE_NONE:
        d->settling = false;
        break;
    }
}

/* Full jitter (README "Webhook inbox"): uniform in [0, min(max, initial * 2^(attempts-1))]. */
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

/* Not acknowledged: retry later, or the dead-letter stream. why: what the attempt got. */
static void inbox_failed(struct inbox_delivery *d, const char *why)
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
        log_msg(LOG_WARN, "inbox %s: delivery %s dead-lettered: %s", r->route->path,
                d->record[0] ? d->record : d->id, reason);
        metrics_count(ib->metrics, METRICS_INBOX_DEAD);
        d->settle = SETTLE_BURY;
        d->settle_attempts = attempts;
        d->settle_at_ms = now;
        snprintf(d->reason, sizeof(d->reason), "%s", reason);
        inbox_settle(d);
        return;
    }
    uint64_t due = now + inbox_backoff_ms(ib, p, attempts);
    if (due > deadline)
        due = deadline; /* one last attempt at max_age */
    log_msg(LOG_INFO, "inbox %s: delivery %s attempt %u got %s; retry in %llu ms",
            r->route->path, d->record[0] ? d->record : d->id, attempts, why,
            (unsigned long long)(due - now));
    metrics_count(ib->metrics, METRICS_INBOX_RETRIES);
    d->settle = SETTLE_RETRY;
    d->settle_attempts = attempts;
    d->settle_at_ms = due;
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
    if (outcome == UPSTREAM_ANSWERED)
        snprintf(why, sizeof(why), "HTTP %d", resp->status);
    else
        snprintf(why, sizeof(why), "no answer (%s)", detail != NULL ? detail : "failed");
    inbox_failed(d, why);
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

/* Deliver one entry of ours (read or taken over). */
static void inbox_deliver(struct inbox_route *r, const struct store_reply *entry)
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
        inbox_failed(d, "a malformed entry");
        return;
    }
    evhttp_remove_header(&d->headers, "Idempotency-Key");
    evhttp_add_header(&d->headers, "Idempotency-Key", d->event);
    /* only the status counts (README "Webhook inbox"): the receiver's body is dropped */
    if (upstream_send_capped(ib->up, d->method, d->target, &d->headers, d->client, d->body,
                             d->body_len, 0, inbox_on_upstream, d) != 0) {
        metrics_count(ib->metrics, METRICS_INBOX_ATTEMPTS);
        inbox_failed(d, "no answer (the upstream call could not be set up)");
    }
}

/* ---- reading, takeover, renewal, retries -------------------------------- */

static void inbox_on_read(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;

    r->reading = false;
    r->ib->busy--;
    if (st != STORE_OK) {
        r->group_ready = false; /* NOGROUP after a Redis that lost its data: create it again */
        return;
    }
    /* NIL: nothing new; else [[stream, [entry...]]] */
    if (reply->type == STORE_ARR && reply->n == 1 && reply->elem[0].type == STORE_ARR &&
        reply->elem[0].n == 2 && reply->elem[0].elem[1].type == STORE_ARR) {
        const struct store_reply *entries = &reply->elem[0].elem[1];
        for (size_t i = 0; i < entries->n; i++)
            inbox_deliver(r, &entries->elem[i]);
        if (entries->n > 0)
            inbox_schedule(r); /* more may be waiting: read again now, not next tick */
    }
}

static void inbox_on_claimed(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;

    r->claiming = false;
    r->ib->busy--;
    /* [next cursor, [entry...], [deleted id...]] */
    if (st != STORE_OK || reply->type != STORE_ARR || reply->n < 2 ||
        reply->elem[0].type != STORE_STR || reply->elem[1].type != STORE_ARR)
        return;
    /* a long pending list is scanned a window per call; the scan wraps at "0-0" */
    if (reply->elem[0].len < sizeof(r->claim_from)) {
        memcpy(r->claim_from, reply->elem[0].str, reply->elem[0].len);
        r->claim_from[reply->elem[0].len] = '\0';
    }
    if (reply->elem[1].n > 0)
        log_msg(LOG_WARN, "inbox %s: took over %zu entries idle longer than "
                "delivery.visibility_timeout", r->route->path, reply->elem[1].n);
    for (size_t i = 0; i < reply->elem[1].n; i++)
        inbox_deliver(r, &reply->elem[1].elem[i]);
}

static void inbox_on_renewed(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;

    (void)reply;
    r->renewing = false;
    r->ib->busy--;
    if (st != STORE_OK)
        log_msg(LOG_WARN, "inbox %s: renewing the entries in delivery failed; another instance "
                "may take them over", r->route->path);
}

static void inbox_on_promoted(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;

    r->promoting = false;
    r->ib->busy--;
    if (st == STORE_OK && reply->type == STORE_INT && reply->integer > 0)
        inbox_schedule(r);
}

static void inbox_on_group(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;

    (void)reply;
    r->group_pending = false;
    r->ib->busy--;
    if (st == STORE_OK) {
        r->group_ready = true;
        inbox_schedule(r);
    }
}

static void inbox_on_stats(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;
    struct inbox *ib = r->ib;

    r->stats_pending = false;
    ib->busy--;
    if (st != STORE_OK || reply->type != STORE_ARR || reply->n != 5 ||
        reply->elem[0].type != STORE_INT || reply->elem[3].type != STORE_INT)
        return;
    uint64_t now = clock_now_ms(), oldest = (uint64_t)reply->elem[3].integer;
    metrics_inbox_gauges(ib->metrics, r->route->path, (double)reply->elem[0].integer,
                         oldest > 0 && now > oldest ? (double)(now - oldest) / 1000.0 : 0.0);
}

/*
 * XCLAIM this consumer's deliveries in flight with IDLE idle_ms: 0 renews
 * them, visibility_timeout releases them to the other instances.
 */
static void inbox_claim_own(struct inbox_route *r, uint64_t idle_ms)
{
    struct inbox *ib = r->ib;
    const char **ids = calloc(r->in_flight, sizeof(*ids));
    struct inbox_delivery *d;
    size_t n = 0;

    if (ids == NULL) {
        log_msg(LOG_ERROR, "inbox: out of memory");
        abort();
    }
    TAILQ_FOREACH(d, &r->deliveries, link)
        ids[n++] = d->id;
    ib->busy++;
    store_inbox_renew(ib->store, &r->keys.k, ib->consumer, ids, n, idle_ms, inbox_on_renewed, r);
    free(ids);
}

/*
 * SIGTERM's grace is over: whatever is still being delivered is released
 * (its idle time set to visibility_timeout), so another instance delivers
 * it at once; the drain no longer waits for it. The receiver may still get
 * this copy too: at least once, and the Idempotency-Key is the same.
 */
static void inbox_release(struct inbox *ib)
{
    ib->released = true;
    for (size_t i = 0; i < ib->n_routes; i++) {
        struct inbox_route *r = &ib->routes[i];
        if (r->in_flight == 0)
            continue;
        log_msg(LOG_WARN, "inbox %s: shutting down with %u deliveries in flight; released to "
                "the other instances", r->route->path, r->in_flight);
        r->renewing = true;
        inbox_claim_own(r, r->policy->visibility_timeout_ms);
    }
}

/* What one route does this turn. */
static void inbox_route_turn(struct inbox_route *r, uint64_t now)
{
    struct inbox *ib = r->ib;
    const struct delivery_policy *p = r->policy;
    bool stopping = ib->stopping;
    unsigned room = r->in_flight < p->concurrency ? p->concurrency - r->in_flight : 0;

    if (!store_ready(ib->store))
        return;
    if (!r->group_ready) {
        if (!r->group_pending && !stopping) {
            r->group_pending = true;
            ib->busy++;
            store_inbox_ensure_group(ib->store, &r->keys.k, inbox_on_group, r);
        }
        return;
    }
    struct inbox_delivery *d;
    TAILQ_FOREACH(d, &r->deliveries, link)
        if (d->settle != SETTLE_NONE && d->settle_failed && !d->settling && !stopping)
            inbox_settle(d);
    if (!stopping && room > 0 && !r->reading && !r->claiming) {
        if (now >= r->next_claim_ms) {
            uint64_t every = p->visibility_timeout_ms / 4;
            r->next_claim_ms = now + (every < 250 ? 250 : every > 5000 ? 5000 : every);
            r->claiming = true;
            ib->busy++;
            store_inbox_autoclaim(ib->store, &r->keys.k, ib->consumer, p->visibility_timeout_ms,
                                  r->claim_from, room, inbox_on_claimed, r);
        } else {
            r->reading = true;
            ib->busy++;
            store_inbox_read(ib->store, &r->keys.k, ib->consumer, room, inbox_on_read, r);
        }
    }
    if (!stopping && !r->promoting && now >= r->next_promote_ms) {
        r->next_promote_ms = now + INBOX_PROMOTE_MS;
        r->promoting = true;
        ib->busy++;
        store_inbox_promote(ib->store, &r->keys.k, now, INBOX_PROMOTE_BATCH, inbox_on_promoted,
                            r);
    }
    if (!r->renewing && r->in_flight > 0 && now >= r->next_renew_ms && !ib->released) {
        r->next_renew_ms = now + p->visibility_timeout_ms / 3;
        r->renewing = true;
        inbox_claim_own(r, 0);
    }
    if (ib->report_gauges && !stopping && !r->stats_pending && now >= r->next_stats_ms) {
        r->next_stats_ms = now + INBOX_STATS_MS;
        r->stats_pending = true;
        ib->busy++;
        store_inbox_stats(ib->store, &r->keys.k, inbox_on_stats, r);
    }
}

static void inbox_on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct inbox *ib = arg;
    uint64_t now = clock_now_ms();

    (void)fd;
    (void)what;
    if (ib->stopping && !ib->released && now >= ib->stopped_ms + INBOX_DRAIN_GRACE_MS)
        inbox_release(ib);
    for (size_t i = 0; i < ib->n_routes; i++)
        inbox_route_turn(&ib->routes[i], now);
}

/* New entries may be waiting: take the next turn now rather than at the next tick. */
static void inbox_schedule(struct inbox_route *r)
{
    if (!r->ib->stopping)
        event_active(r->ib->tick, EV_TIMEOUT, 0);
}

/* ---- lifetime ----------------------------------------------------------- */

bool inbox_wanted(const struct config *cfg)
{
    for (size_t i = 0; i < cfg->n_routes; i++)
        if (cfg->routes[i].policy.delivery.mode == DELIVERY_QUEUED)
            return true;
    return false;
}

struct inbox *inbox_create(struct event_base *base, struct store *s, struct upstream *up,
                           struct config *cfg, struct metrics *metrics, unsigned worker,
                           bool report_gauges)
{
    struct timeval tick = clock_ms_to_timeval(INBOX_TICK_MS);
    struct inbox *ib;
    char host[256] = "localhost";
    size_t n = 0;

    for (size_t i = 0; i < cfg->n_routes; i++)
        if (cfg->routes[i].policy.delivery.mode == DELIVERY_QUEUED)
            n++;
    if (n == 0 || (ib = calloc(1, sizeof(*ib))) == NULL)
        return NULL;
    ib->routes = calloc(n, sizeof(*ib->routes));
    ib->tick = event_new(base, -1, EV_PERSIST, inbox_on_tick, ib);
    if (ib->routes == NULL || ib->tick == NULL) {
        free(ib->routes);
        if (ib->tick != NULL)
            event_free(ib->tick);
        free(ib);
        return NULL;
    }
    ib->base = base;
    ib->store = s;
    ib->up = up;
    ib->cfg = config_ref(cfg);
    ib->metrics = metrics;
    ib->report_gauges = report_gauges;
    gethostname(host, sizeof(host) - 1);
    snprintf(ib->consumer, sizeof(ib->consumer), "%s-%ld-%u", host, (long)getpid(), worker);
    ib->rng = (clock_now_ms() ^ ((uint64_t)getpid() << 20) ^ ((uint64_t)worker << 40)) | 1;
    for (size_t i = 0; i < cfg->n_routes; i++) {
        struct inbox_route *r;
        if (cfg->routes[i].policy.delivery.mode != DELIVERY_QUEUED)
            continue;
        r = &ib->routes[ib->n_routes++];
        r->ib = ib;
        r->route = &cfg->routes[i];
        r->policy = &cfg->routes[i].policy.delivery;
        inbox_keys_init(&r->keys, cfg->key_prefix, r->route);
        snprintf(r->claim_from, sizeof(r->claim_from), "0-0");
        TAILQ_INIT(&r->deliveries);
    }
    event_add(ib->tick, &tick);
    return ib;
}

void inbox_kick(struct inbox *ib)
{
    if (ib != NULL && !ib->stopping)
        event_active(ib->tick, EV_TIMEOUT, 0);
}

void inbox_stop(struct inbox *ib)
{
    if (ib != NULL && !ib->stopping) {
        ib->stopped_ms = clock_now_ms();
        ib->stopping = true;
    }
}

unsigned inbox_busy(const struct inbox *ib)
{
    if (ib == NULL)
        return 0;
    return ib->busy + (ib->released ? 0 : ib->delivering);
}

void inbox_destroy(struct inbox *ib)
{
    if (ib == NULL)
        return;
    event_free(ib->tick);
    for (size_t i = 0; i < ib->n_routes; i++) {
        struct inbox_route *r = &ib->routes[i];
        while (!TAILQ_EMPTY(&r->deliveries))
            inbox_delivery_free(TAILQ_FIRST(&r->deliveries));
    }
    free(ib->routes);
    config_unref(ib->cfg);
    free(ib);
}
