/*
 * inbox_deliver.c - the consumer of one worker (docs/webhooks.md#webhook-inbox).
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
 *
 * Clocks: every turn, renewal, takeover scan and grace period is timed on
 * the monotonic clock, which no NTP step moves: a wall clock stepped back
 * by more than visibility_timeout would stop the renewals, and the other
 * instances would take over live deliveries. The wall clock only stamps
 * what is stored and read by other instances (received, died) and judges
 * max_age from `received`; the retry schedule, shared by every instance,
 * runs on Redis's clock (inbox_store_retry).
 */
#include "inbox_deliver_int.h"

#include "store.h"

static void inbox_schedule(struct inbox_route *r);

/* ---- reading, takeover, renewal, retries -------------------------------- */

static void inbox_on_read(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;

    r->reading = false;
    r->ib->busy--;
    if (st != STORE_OK) {
        r->group_ready = false; /* NOGROUP after a Redis that lost its data: create it again */
        r->probed = false;      /* or a permission taken away: probe again */
        return;
    }
    /* [paused, wait_ms, NIL or XREADGROUP's reply] */
    if (reply->type != STORE_ARR || reply->n != 3 || reply->elem[0].type != STORE_INT)
        return;
    r->paused = reply->elem[0].integer == 1;
    if (!r->paused && reply->elem[1].type == STORE_INT && reply->elem[1].integer > 0) {
        /* over the rate: read again the moment the limiter allows, not a tick late */
        struct timeval tv = clock_ms_to_timeval((uint64_t)reply->elem[1].integer);

        r->read_after_ms = clock_mono_ms() + (double)reply->elem[1].integer;
        evtimer_add(r->wake, &tv);
    }
    reply = &reply->elem[2];
    /* NIL: nothing new, paused or over the rate; else [[stream, [entry...]]] */
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
    /* [paused, wait_ms, NIL or [next cursor, [entry...], [deleted id...]]] */
    if (st != STORE_OK || reply->type != STORE_ARR || reply->n != 3)
        return;
    reply = &reply->elem[2];
    if (reply->type != STORE_ARR || reply->n < 2 ||
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

/* The permission probe's answer: "" or the command the Redis user may not run. */
static void inbox_on_probed(enum store_status st, const struct store_reply *reply, void *arg)
{
    struct inbox_route *r = arg;
    struct inbox *ib = r->ib;

    r->probing = false;
    ib->busy--;
    if (st != STORE_OK || reply->type != STORE_STR) {
        /* EVALSHA itself refused or Redis away: the store's own readiness says so */
        r->next_probe_ms = clock_mono_ms() + INBOX_PROBE_AGAIN_MS;
        return;
    }
    if (reply->len > 0) {
        if (!ib->noperm)
            log_msg(LOG_ERROR, "inbox %s: the Redis user may not run %.*s (NOPERM): queued "
                    "deliveries stop and /readyz answers 503 until the ACL allows it "
                    "(docs/redis.md, \"Webhook inbox user\")", r->route->path, (int)reply->len,
                    reply->str);
        ib->noperm = true;
        r->next_probe_ms = clock_mono_ms() + INBOX_PROBE_AGAIN_MS;
        return;
    }
    if (ib->noperm)
        log_msg(LOG_INFO, "inbox %s: the Redis user may run every command the inbox needs",
                r->route->path);
    ib->noperm = false;
    r->probed = true;
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
    if (st != STORE_OK || reply->type != STORE_ARR || reply->n != 6 ||
        reply->elem[0].type != STORE_INT || reply->elem[3].type != STORE_INT ||
        reply->elem[5].type != STORE_INT)
        return;
    uint64_t now = clock_now_ms(), oldest = (uint64_t)reply->elem[3].integer;
    metrics_inbox_gauges(ib->metrics, r->route->path, (double)reply->elem[0].integer,
                         oldest > 0 && now > oldest ? (double)(now - oldest) / 1000.0 : 0.0,
                         reply->elem[5].integer == 1);
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
    inbox_store_renew(ib->store, &r->keys.k, ib->consumer, ids, n, idle_ms, inbox_on_renewed, r);
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

/* What one route does this turn; now: monotonic ms. */
static void inbox_route_turn(struct inbox_route *r, double now)
{
    struct inbox *ib = r->ib;
    const struct delivery_policy *p = r->policy;
    bool stopping = ib->stopping;
    unsigned room = r->in_flight < p->concurrency ? p->concurrency - r->in_flight : 0;

    if (!store_ready(ib->store)) {
        r->probed = false; /* a new connection may be another node, or another ACL */
        return;
    }
    if (!r->probed) {
        if (!r->probing && !stopping && now >= r->next_probe_ms) {
            r->probing = true;
            ib->busy++;
            inbox_store_probe(ib->store, &r->keys.k, inbox_on_probed, r);
        }
        return;
    }
    if (!r->group_ready) {
        if (!r->group_pending && !stopping) {
            r->group_pending = true;
            ib->busy++;
            inbox_store_ensure_group(ib->store, &r->keys.k, inbox_on_group, r);
        }
        return;
    }
    struct inbox_delivery *d;
    TAILQ_FOREACH(d, &r->deliveries, link)
        if (d->settle != SETTLE_NONE && d->settle_failed && !d->settling && !stopping)
            inbox_settle(d);
    if (!stopping && room > 0 && !r->reading && !r->claiming && now + 1.0 >= r->read_after_ms) {
        if (now >= r->next_claim_ms) {
            uint64_t every = p->visibility_timeout_ms / 4;
            r->next_claim_ms = now + (double)(every < 250 ? 250 : every > 5000 ? 5000 : every);
            r->claiming = true;
            ib->busy++;
            inbox_store_autoclaim(ib->store, &r->keys.k, ib->consumer, p->visibility_timeout_ms,
                                  r->claim_from, room, &r->rate, inbox_on_claimed, r);
        } else {
            r->reading = true;
            ib->busy++;
            inbox_store_read(ib->store, &r->keys.k, ib->consumer, room, &r->rate, inbox_on_read,
                             r);
        }
    }
    if (!stopping && !r->promoting && now >= r->next_promote_ms) {
        r->next_promote_ms = now + INBOX_PROMOTE_MS;
        r->promoting = true;
        ib->busy++;
        inbox_store_promote(ib->store, &r->keys.k, INBOX_PROMOTE_BATCH,
                            p->dead_retention_ms, inbox_on_promoted, r);
    }
    if (!r->renewing && r->in_flight > 0 && now >= r->next_renew_ms && !ib->released) {
        r->next_renew_ms = now + (double)(p->visibility_timeout_ms / 3);
        r->renewing = true;
        inbox_claim_own(r, 0);
    }
    if (ib->report_gauges && !stopping && !r->stats_pending && now >= r->next_stats_ms) {
        r->next_stats_ms = now + INBOX_STATS_MS;
        r->stats_pending = true;
        ib->busy++;
        inbox_store_stats(ib->store, &r->keys.k, inbox_on_stats, r);
    }
}

static void inbox_on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct inbox *ib = arg;
    double now = clock_mono_ms();

    (void)fd;
    (void)what;
    if (ib->stopping && !ib->released && now >= ib->stopped_ms + INBOX_DRAIN_GRACE_MS)
        inbox_release(ib);
    for (size_t i = 0; i < ib->n_routes; i++)
        inbox_route_turn(&ib->routes[i], now);
}

/* The limiter's wait is over. */
static void inbox_on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct inbox_route *r = arg;

    (void)fd;
    (void)what;
    inbox_schedule(r);
}

/* New entries may be waiting: take the next turn now rather than at the next tick. */
static void inbox_schedule(struct inbox_route *r)
{
    if (!r->ib->stopping)
        event_active(r->ib->soon, EV_TIMEOUT, 0);
}

/* ---- lifetime ----------------------------------------------------------- */

/*
 * delivery.rate as GCRA parameters: one delivery every period/count, and a
 * burst of INBOX_RATE_BURST_MS worth of deliveries (at least 2), so that a
 * turn that comes late catches up: in any window of W ms at most
 * W/interval + burst deliveries start, e.g. 22 in a second at 20/s.
 */
static void inbox_rate_init(struct inbox_store_rate *rate, const struct delivery_policy *p)
{
    uint64_t burst;

    *rate = (struct inbox_store_rate){ 0, 0 };
    if (p->rate_count == 0)
        return;
    rate->interval_us = p->rate_period_ms * 1000 / p->rate_count;
    if (rate->interval_us == 0)
        rate->interval_us = 1;
    burst = (uint64_t)p->rate_count * INBOX_RATE_BURST_MS / p->rate_period_ms;
    if (burst < 2)
        burst = 2;
    rate->tolerance_us = rate->interval_us * (burst - 1);
}

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
    ib->soon = event_new(base, -1, 0, inbox_on_tick, ib);
    if (ib->routes == NULL || ib->tick == NULL || ib->soon == NULL) {
        free(ib->routes);
        if (ib->tick != NULL)
            event_free(ib->tick);
        if (ib->soon != NULL)
            event_free(ib->soon);
        free(ib);
        return NULL;
    }
    ib->base = base;
    ib->store = s;
    ib->up = up;
    ib->cfg = config_ref(cfg);
    ib->keyring = cfg->keyring != NULL ? keyring_ref(cfg->keyring) : NULL;
    ib->plaintext_until_ms = cfg->accept_plaintext_until_ms;
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
        r->sign = r->policy;
        r->name = inbox_route_name(r->route);
        inbox_keys_init(&r->keys, cfg->key_prefix, r->route);
        inbox_rate_init(&r->rate, r->policy);
        r->wake = evtimer_new(base, inbox_on_wake, r);
        if (r->wake == NULL || r->name == NULL) {
            log_msg(LOG_ERROR, "inbox: out of memory");
            abort();
        }
        snprintf(r->claim_from, sizeof(r->claim_from), "0-0");
        TAILQ_INIT(&r->deliveries);
    }
    event_add(ib->tick, &tick);
    return ib;
}

void inbox_kick(struct inbox *ib)
{
    if (ib != NULL && !ib->stopping)
        event_active(ib->soon, EV_TIMEOUT, 0);
}

void inbox_stop(struct inbox *ib)
{
    if (ib != NULL && !ib->stopping) {
        ib->stopped_ms = clock_mono_ms();
        ib->stopping = true;
    }
}

const char *inbox_unready(const struct inbox *ib)
{
    /* /readyz's line holds 63 characters */
    return ib != NULL && ib->noperm ? "redis user may not run an inbox command (NOPERM)" : NULL;
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
    event_free(ib->soon);
    for (size_t i = 0; i < ib->n_routes; i++) {
        struct inbox_route *r = &ib->routes[i];
        while (!TAILQ_EMPTY(&r->deliveries))
            inbox_delivery_free(TAILQ_FIRST(&r->deliveries));
        event_free(r->wake);
        free(r->name);
    }
    free(ib->routes);
    keyring_unref(ib->keyring);
    config_unref(ib->sign_cfg);
    config_unref(ib->cfg);
    free(ib);
}

void inbox_set_config(struct inbox *ib, struct config *cfg)
{
    struct config *was;

    if (ib == NULL)
        return;
    keyring_unref(ib->keyring);
    ib->keyring = cfg->keyring != NULL ? keyring_ref(cfg->keyring) : NULL;
    ib->plaintext_until_ms = cfg->accept_plaintext_until_ms;
    was = ib->sign_cfg;
    ib->sign_cfg = config_ref(cfg);
    for (size_t i = 0; i < ib->n_routes; i++) {
        struct inbox_route *r = &ib->routes[i];

        /* the reload check kept every queued route by its path as written */
        r->sign = r->policy;
        for (size_t j = 0; j < cfg->n_routes; j++) {
            const struct route *route = &cfg->routes[j];

            if (route->policy.delivery.mode == DELIVERY_QUEUED &&
                inbox_route_named(route, r->name)) {
                r->sign = &route->policy.delivery;
                break;
            }
        }
    }
    config_unref(was); /* after: no route points into it any more */
}
