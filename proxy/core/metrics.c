/*
 * metrics.c - Prometheus text exposition format (version 0.0.4).
 */
#include "metrics.h"


#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "clock.h"

/* Upper bounds in seconds, shared by the latency histograms. */
static const double metrics_bounds[METRICS_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

int metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof(*m));
    m->started_ms = clock_now_ms();
    return pthread_mutex_init(&m->lock, NULL) == 0 ? 0 : -1;
}

/*
 * The count of route and outcome in the array at *arr (*n used of *cap),
 * added when new; NULL when out of memory. Lock held.
 */
static struct metrics_request_count *metrics_route_slot(struct metrics_request_count **arr,
                                                        size_t *n, size_t *cap,
                                                        const char *route, const char *outcome)
{
    struct metrics_request_count *c;
    char *copy;

    for (size_t i = 0; i < *n; i++) {
        c = &(*arr)[i];
        if (strcmp(c->outcome, outcome) == 0 && strcmp(c->route, route) == 0)
            return c;
    }
    if (*n == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 32;
        struct metrics_request_count *grown = realloc(*arr, grown_cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        *arr = grown;
        *cap = grown_cap;
    }
    copy = strdup(route);
    if (copy == NULL)
        return NULL;
    c = &(*arr)[(*n)++];
    *c = (struct metrics_request_count){ copy, outcome, 0 };
    return c;
}

void metrics_count_request(struct metrics *m, const char *route, const char *outcome)
{
    struct metrics_request_count *c;

    pthread_mutex_lock(&m->lock);
    c = metrics_route_slot(&m->requests, &m->n_requests, &m->cap_requests,
                           route != NULL ? route : "", outcome);
    if (c != NULL)
        c->count++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_count_outcome_unknown(struct metrics *m, const char *route)
{
    struct metrics_request_count *c;

    pthread_mutex_lock(&m->lock);
    c = metrics_route_slot(&m->unknown, &m->n_unknown, &m->cap_unknown,
                           route != NULL ? route : "", "");
    if (c != NULL)
        c->count++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_declare_outcome_unknown(struct metrics *m, const char *route)
{
    pthread_mutex_lock(&m->lock);
    (void)metrics_route_slot(&m->unknown, &m->n_unknown, &m->cap_unknown, route, "");
    pthread_mutex_unlock(&m->lock);
}

void metrics_count(struct metrics *m, enum metrics_counter c)
{
    pthread_mutex_lock(&m->lock);
    m->counters[c]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_count_failover(struct metrics *m, const char *to)
{
    pthread_mutex_lock(&m->lock);
    if (strcmp(m->followed_primary, to) != 0) {
        m->counters[METRICS_FAILOVERS_FOLLOWED]++;
        snprintf(m->followed_primary, sizeof(m->followed_primary), "%s", to);
    }
    pthread_mutex_unlock(&m->lock);
}

void metrics_gauge_primary(struct metrics_gauges *g, const char *address)
{
    size_t i = 0;

    while (i < g->n_redis_primaries && strcmp(g->redis_primaries[i].address, address) != 0)
        i++;
    if (i == METRICS_MAX_PRIMARIES)
        return;
    if (i == g->n_redis_primaries) {
        snprintf(g->redis_primaries[i].address, sizeof(g->redis_primaries[i].address), "%s",
                 address);
        g->redis_primaries[i].workers = 0;
        g->n_redis_primaries++;
    }
    g->redis_primaries[i].workers++;
}

void metrics_observe(struct metrics *m, enum metrics_latency which, double seconds)
{
    struct metrics_histogram *h = &m->latency[which];
    size_t i = 0;

    while (i < METRICS_BUCKETS && seconds > metrics_bounds[i])
        i++;
    pthread_mutex_lock(&m->lock);
    h->counts[i]++;
    h->sum += seconds;
    h->count++;
    pthread_mutex_unlock(&m->lock);
}

/* A label value with \ " and newline escaped, as the format requires. */
static void metrics_label_value(struct evbuffer *out, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            evbuffer_add_printf(out, "\\%c", *v);
        else if (*v == '\n')
            evbuffer_add(out, "\\n", 2);
        else
            evbuffer_add(out, v, 1);
    }
}

static void metrics_render_histogram(struct evbuffer *out, const char *name, const char *help,
                                     const struct metrics_histogram *h)
{
    uint64_t cumulative = 0;

    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < METRICS_BUCKETS; i++) {
        cumulative += h->counts[i];
        evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, metrics_bounds[i],
                            (unsigned long long)cumulative);
    }
    cumulative += h->counts[METRICS_BUCKETS];
    evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                        (unsigned long long)cumulative, name, h->sum, name,
                        (unsigned long long)h->count);
}

static void metrics_render_scalar(struct evbuffer *out, const char *name, const char *type,
                                  const char *help, double value)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
                        name, value);
}

/* A counter with one label of n values (static strings), value i counted counts[i]. */
static void metrics_render_labelled(struct evbuffer *out, const char *name, const char *help,
                                    const char *label, const char *const *values,
                                    const uint64_t *counts, size_t n)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < n; i++)
        evbuffer_add_printf(out, "%s{%s=\"%s\"} %llu\n", name, label, values[i],
                            (unsigned long long)counts[i]);
}

/* A counter with one label of two values, a and b (static strings), counted ca and cb. */
static void metrics_render_pair(struct evbuffer *out, const char *name, const char *help,
                                const char *label, const char *a, uint64_t ca, const char *b,
                                uint64_t cb)
{
    const char *const values[] = { a, b };
    const uint64_t counts[] = { ca, cb };

    metrics_render_labelled(out, name, help, label, values, counts, 2);
}

static void metrics_render_inbox(struct metrics *m, struct evbuffer *out);

void metrics_held_set(struct metrics *m, const struct metrics_held *h)
{
    pthread_mutex_lock(&m->lock);
    m->held = *h;
    m->held_known = true;
    pthread_mutex_unlock(&m->lock);
}

/* Seconds from a to b (ms since the epoch), 0 when b is not after a. */
static double metrics_seconds_between(uint64_t a, uint64_t b)
{
    return b > a ? (double)(b - a) / 1000.0 : 0.0;
}

/*
 * The census of held records (docs/operations.md#held-records): every state
 * always, 0 when none; the ages and the time to expiry as of now. Lock held.
 */
static void metrics_render_held(struct metrics *m, struct evbuffer *out)
{
    static const char *const states[METRICS_HELD_STATES] = {
        [METRICS_HELD_CLAIMED_EXPIRED] = "claimed_expired",
        [METRICS_HELD_OUTCOME_UNKNOWN] = "outcome_unknown",
        [METRICS_HELD_RESOLVED] = "resolved",
    };
    static const struct {
        const char *name, *help;
    } gauges[] = {
        { "idempotency_proxy_held_records",
          "Held records by state as the last census of Redis counted them (claimed_expired: a "
          "claim whose lease ran out; outcome_unknown; resolved: an operator's answer); the "
          "same on every instance." },
        { "idempotency_proxy_held_record_oldest_seconds",
          "Age of the oldest held record of a state, since its first request claimed the key; "
          "0 when none." },
        { "idempotency_proxy_held_record_expiry_seconds",
          "Seconds until the first held record of a state expires with its retention (a retry "
          "after that executes again); 0 when none." },
    };
    uint64_t now = clock_now_ms();

    for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
        evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", gauges[g].name,
                            gauges[g].help, gauges[g].name);
        for (int i = 0; i < METRICS_HELD_STATES; i++) {
            uint64_t records = m->held_known ? m->held.state[i].records : 0;
            uint64_t created = m->held.state[i].oldest_created_ms;
            uint64_t expiry = m->held.state[i].soonest_expiry_ms;
            double v = g == 0 ? (double)records
                     : records == 0 ? 0.0
                     : g == 1 ? (created != 0 ? metrics_seconds_between(created, now) : 0.0)
                     : (expiry != 0 ? metrics_seconds_between(now, expiry) : 0.0);

            evbuffer_add_printf(out, "%s{state=\"%s\"} %.*f\n", gauges[g].name, states[i],
                                g == 0 ? 0 : 3, v);
        }
    }
    evbuffer_add_printf(out, "# HELP idempotency_proxy_held_census_age_seconds Seconds since the "
                        "census whose counts the held-record gauges show completed; while none "
                        "has been read, since the process started.\n"
                        "# TYPE idempotency_proxy_held_census_age_seconds gauge\n"
                        "idempotency_proxy_held_census_age_seconds %.3f\n",
                        metrics_seconds_between(m->held_known ? m->held.finished_ms
                                                              : m->started_ms, now));
}

/* Per key id, what was sealed and opened since the process started (g->keys). */
static void metrics_render_keyring(struct evbuffer *out, const struct metrics_gauges *g)
{
    static const struct {
        const char *name, *help;
        bool sealed;
    } kinds[] = {
        { "idempotency_proxy_encrypted_total",
          "Values sealed (records' answers, queued deliveries) by the key id that sealed them.",
          true },
        { "idempotency_proxy_decrypted_total",
          "Stored values opened and authenticated, by the key id that had sealed them.",
          false },
    };

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n", kinds[k].name,
                            kinds[k].help, kinds[k].name);
        for (size_t i = 0; i < g->n_keys; i++) {
            const struct metrics_key_counts *c = &g->keys[i];
            unsigned long long n = kinds[k].sealed ? c->sealed : c->opened;

            if (c->id[0] != '\0') /* key ids are [A-Za-z0-9._-]: no escaping */
                evbuffer_add_printf(out, "%s{key_id=\"%s\"} %llu\n", kinds[k].name, c->id, n);
        }
    }
}

void metrics_render(struct metrics *m, struct evbuffer *out, const struct metrics_gauges *g)
{
    pthread_mutex_lock(&m->lock);
    evbuffer_add_printf(out,
                        "# HELP idempotency_proxy_build_info Version of the running proxy.\n"
                        "# TYPE idempotency_proxy_build_info gauge\n"
                        "idempotency_proxy_build_info{version=\"%s\"} 1\n",
                        IDEM_VERSION);
    evbuffer_add_printf(out, "# HELP idempotency_proxy_requests_total Client requests by route "
                             "and outcome.\n# TYPE idempotency_proxy_requests_total counter\n");
    for (size_t i = 0; i < m->n_requests; i++) {
        evbuffer_add_printf(out, "idempotency_proxy_requests_total{route=\"");
        metrics_label_value(out, m->requests[i].route);
        evbuffer_add_printf(out, "\",outcome=\"%s\"} %llu\n", m->requests[i].outcome,
                            (unsigned long long)m->requests[i].count);
    }
    metrics_render_histogram(out, "idempotency_proxy_upstream_duration_seconds",
                             "Upstream exchange time, request sent to answer read.",
                             &m->latency[METRICS_UPSTREAM_LATENCY]);
    metrics_render_histogram(out, "idempotency_proxy_redis_duration_seconds",
                             "Redis command round-trip time.",
                             &m->latency[METRICS_REDIS_LATENCY]);
    metrics_render_histogram(out, "idempotency_proxy_replica_wait_duration_seconds",
                             "Time a won claim waited for redis.min_replicas replicas (WAIT) "
                             "before it was forwarded or refused.",
                             &m->latency[METRICS_REPLICA_WAIT_LATENCY]);
    metrics_render_scalar(out, "idempotency_proxy_in_flight_requests", "gauge",
                          "Client requests being handled.", g->in_flight);
    metrics_render_scalar(out, "idempotency_proxy_waiting_requests", "gauge",
                          "Requests waiting for another request's answer.", g->waiting);
    metrics_render_scalar(out, "idempotency_proxy_upstream_in_flight", "gauge",
                          "Upstream exchanges in flight.", g->upstream_in_flight);
    metrics_render_scalar(out, "idempotency_proxy_buffered_bytes", "gauge",
                          "Request bodies, upstream answers and records held for the requests "
                          "in flight (limits.max_buffered counts these).",
                          (double)g->buffered_bytes);
    metrics_render_scalar(out, "idempotency_proxy_max_buffered_bytes", "gauge",
                          "limits.max_buffered: new requests are refused (503 overloaded) when "
                          "their body and answer reservation do not fit under it.",
                          (double)g->max_buffered);
    metrics_render_scalar(out, "idempotency_proxy_overloaded_total", "counter",
                          "Requests refused with 503 overloaded before anything was claimed or "
                          "forwarded, for want of room under limits.max_buffered.",
                          (double)m->counters[METRICS_OVERLOADED]);
    metrics_render_scalar(out, "idempotency_proxy_redis_up", "gauge",
                          "1 when the Redis connection of every worker is up.", g->redis_up);
    metrics_render_scalar(out, "idempotency_proxy_redis_eviction_policy_ok", "gauge",
                          "1 when every Redis node whose maxmemory-policy could be read keeps "
                          "records (noeviction), 0 when one may evict them, -1 when none "
                          "could be read.", g->redis_eviction_policy_ok);
    evbuffer_add_printf(out, "# HELP idempotency_proxy_redis_primary Workers connected to the "
                        "Redis node at address, its ROLE master confirmed.\n"
                        "# TYPE idempotency_proxy_redis_primary gauge\n");
    for (size_t i = 0; i < g->n_redis_primaries; i++) {
        evbuffer_add_printf(out, "idempotency_proxy_redis_primary{address=\"");
        metrics_label_value(out, g->redis_primaries[i].address);
        evbuffer_add_printf(out, "\"} %u\n", g->redis_primaries[i].workers);
    }
    metrics_render_scalar(out, "idempotency_proxy_redis_failovers_followed_total", "counter",
                          "Times the proxy moved to another primary: redis.sentinel named one, or the "
                          "node behind redis.url has another replication ID.",
                          (double)m->counters[METRICS_FAILOVERS_FOLLOWED]);
    if (g->redis_cluster_nodes >= 0) {
        metrics_render_scalar(out, "idempotency_proxy_redis_cluster_nodes", "gauge",
                              "Redis Cluster primaries with a ready connection (the fewest "
                              "over the workers).", g->redis_cluster_nodes);
        metrics_render_scalar(out, "idempotency_proxy_redis_cluster_map_refreshes_total",
                              "counter", "Redis Cluster slot maps read (CLUSTER SHARDS).",
                              (double)m->counters[METRICS_CLUSTER_REFRESHES]);
        metrics_render_pair(out, "idempotency_proxy_redis_cluster_redirections_total",
                            "Redis commands sent again to another node, by kind: moved (the "
                            "slot moved) or ask (the slot is migrating).", "kind",
                            "moved", m->counters[METRICS_CLUSTER_MOVED],
                            "ask", m->counters[METRICS_CLUSTER_ASK]);
    }
    {
        /* the METRICS_REASSERT_* counters, in their order in metrics.h */
        static const char *const result[] = { "restored", "present", "superseded", "failed" };
        _Static_assert(METRICS_REASSERT_PRESENT == METRICS_REASSERT_RESTORED + 1 &&
                           METRICS_REASSERT_SUPERSEDED == METRICS_REASSERT_RESTORED + 2 &&
                           METRICS_REASSERT_FAILED == METRICS_REASSERT_RESTORED + 3,
                       "result[] names the METRICS_REASSERT_* counters in order");
        metrics_render_labelled(out, "idempotency_proxy_redis_reasserted_total",
                                "Recent writes sent again to a new primary after a failover "
                                "(redis.reassert), by what they found: restored (the key had "
                                "lost it), present, superseded (another owner's record: that "
                                "key may have run twice), failed.", "result", result,
                                &m->counters[METRICS_REASSERT_RESTORED], 4);
    }
    metrics_render_scalar(out, "idempotency_proxy_redis_reassert_dropped_total", "counter",
                          "Writes left out of the re-assertion journal: it was at "
                          "redis.reassert.max_bytes.",
                          (double)m->counters[METRICS_REASSERT_DROPPED]);
    metrics_render_scalar(out, "idempotency_proxy_store_errors_total", "counter",
                          "Redis commands that failed, timed out or found no connection.",
                          (double)m->counters[METRICS_STORE_ERRORS]);
    metrics_render_scalar(out, "idempotency_proxy_store_error_passes_total", "counter",
                          "Requests forwarded unprotected because Redis failed "
                          "(on_store_error: pass).",
                          (double)m->counters[METRICS_STORE_ERROR_PASSES]);
    metrics_render_pair(out, "idempotency_proxy_wait_shortfalls_total",
                        "Writes that fewer than redis.min_replicas replicas confirmed within "
                        "redis.replica_timeout, or whose WAIT failed, by phase: claim "
                        "(refused) or record (logged).", "phase",
                        "claim", m->counters[METRICS_WAIT_SHORTFALLS_CLAIM],
                        "record", m->counters[METRICS_WAIT_SHORTFALLS_RECORD]);
    metrics_render_pair(out, "idempotency_proxy_admin_unauthorized_total",
                        "Admin requests refused with 401, by reason: missing (no bearer token) "
                        "or invalid (another token, or a malformed one).", "reason",
                        "missing", m->counters[METRICS_ADMIN_UNAUTHORIZED_MISSING],
                        "invalid", m->counters[METRICS_ADMIN_UNAUTHORIZED_INVALID]);
    metrics_render_scalar(out, "idempotency_proxy_admin_throttled_total", "counter",
                          "Admin requests refused with 429 without a token check: their client "
                          "address failed to authenticate too often.",
                          (double)m->counters[METRICS_ADMIN_THROTTLED]);
    metrics_render_scalar(out, "idempotency_proxy_admin_forbidden_total", "counter",
                          "Admin requests refused with 403: the operator lacks the right.",
                          (double)m->counters[METRICS_ADMIN_FORBIDDEN]);
    evbuffer_add_printf(out, "# HELP idempotency_proxy_outcome_unknown_total Records the proxy "
                        "wrote in the outcome-unknown state (sent upstream, no answer read), "
                        "by route; each waits for an operator to resolve or purge it.\n"
                        "# TYPE idempotency_proxy_outcome_unknown_total counter\n");
    for (size_t i = 0; i < m->n_unknown; i++) {
        evbuffer_add_printf(out, "idempotency_proxy_outcome_unknown_total{route=\"");
        metrics_label_value(out, m->unknown[i].route);
        evbuffer_add_printf(out, "\"} %llu\n", (unsigned long long)m->unknown[i].count);
    }
    metrics_render_scalar(out, "idempotency_proxy_held_answers_total", "counter",
                          "Answers given from a held record: retries that got 502 "
                          "outcome-unknown from an outcome-unknown record or a claim whose "
                          "lease ran out (customers hitting a hold; first answers not counted).",
                          (double)m->counters[METRICS_HELD_ANSWERS]);
    metrics_render_held(m, out);
    metrics_render_scalar(out, "idempotency_proxy_records_resolved_total", "counter",
                          "Records an operator resolved, with PUT /records/<id> or each one "
                          "a POST /records/bulk resolved: an outcome-unknown record or an "
                          "expired claim made a resolved one (corrections too).",
                          (double)m->counters[METRICS_RECORDS_RESOLVED]);
    metrics_render_pair(out, "idempotency_proxy_decrypt_failures_total",
                        "Stored records and queued deliveries that could not be decrypted, by "
                        "reason: key_unavailable (their key id is not in the keyring) or "
                        "unreadable (they failed authentication); none was forwarded.",
                        "reason", "key_unavailable",
                        m->counters[METRICS_DECRYPT_KEY_UNAVAILABLE], "unreadable",
                        m->counters[METRICS_DECRYPT_UNREADABLE]);
    metrics_render_keyring(out, g);
    metrics_render_scalar(out, "idempotency_proxy_config_reloads_total", "counter",
                          "Configuration reloads applied (SIGHUP).",
                          (double)m->counters[METRICS_RELOADS]);
    metrics_render_scalar(out, "idempotency_proxy_config_reload_failures_total", "counter",
                          "Configuration reloads refused.",
                          (double)m->counters[METRICS_RELOAD_FAILURES]);
    metrics_render_inbox(m, out);
    pthread_mutex_unlock(&m->lock);
}

void metrics_inbox_gauges(struct metrics *m, const char *route, double depth, double oldest_s,
                          bool paused)
{
    size_t i;

    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->n_inboxes && strcmp(m->inboxes[i].route, route) != 0; i++)
        ;
    if (i == m->n_inboxes) {
        struct metrics_inbox *grown = realloc(m->inboxes, (i + 1) * sizeof(*grown));
        char *copy = strdup(route);
        if (grown != NULL)
            m->inboxes = grown;
        if (grown == NULL || copy == NULL) {
            free(copy);
            pthread_mutex_unlock(&m->lock);
            return;
        }
        m->inboxes[i].route = copy;
        m->n_inboxes++;
    }
    m->inboxes[i].depth = depth;
    m->inboxes[i].oldest_s = oldest_s;
    m->inboxes[i].paused = paused;
    pthread_mutex_unlock(&m->lock);
}

/* The webhook inbox's counters, histogram and per-route gauges (docs/webhooks.md#webhook-inbox). */
static void metrics_render_inbox(struct metrics *m, struct evbuffer *out)
{
    static const struct {
        enum metrics_counter c;
        const char *name, *help;
    } counters[] = {
        { METRICS_INBOX_ACCEPTED, "idempotency_proxy_inbox_accepted_total",
          "Queued webhook deliveries appended to a route's stream and answered." },
        { METRICS_INBOX_DELIVERED, "idempotency_proxy_inbox_delivered_total",
          "Queued deliveries the receiver acknowledged with a 2xx." },
        { METRICS_INBOX_ATTEMPTS, "idempotency_proxy_inbox_attempts_total",
          "Queued deliveries tried, first tries and retries." },
        { METRICS_INBOX_RETRIES, "idempotency_proxy_inbox_retries_scheduled_total",
          "Retries scheduled after a failed delivery." },
        { METRICS_INBOX_DEAD, "idempotency_proxy_inbox_dead_lettered_total",
          "Queued deliveries moved to a dead-letter stream." },
    };

    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
        metrics_render_scalar(out, counters[i].name, "counter", counters[i].help,
                              (double)m->counters[counters[i].c]);
    metrics_render_histogram(out, "idempotency_proxy_inbox_delivery_duration_seconds",
                             "Queued delivery: accepted from the provider to acknowledged by "
                             "the receiver.", &m->latency[METRICS_INBOX_DELIVERY_LATENCY]);
    evbuffer_add_printf(out, "# HELP idempotency_proxy_inbox_depth Entries in a queued route's "
                        "stream.\n# TYPE idempotency_proxy_inbox_depth gauge\n");
    for (size_t i = 0; i < m->n_inboxes; i++) {
        evbuffer_add_printf(out, "idempotency_proxy_inbox_depth{route=\"");
        metrics_label_value(out, m->inboxes[i].route);
        evbuffer_add_printf(out, "\"} %.17g\n", m->inboxes[i].depth);
    }
    evbuffer_add_printf(out, "# HELP idempotency_proxy_inbox_oldest_age_seconds Age of a queued "
                        "route's oldest undelivered entry.\n"
                        "# TYPE idempotency_proxy_inbox_oldest_age_seconds gauge\n");
    for (size_t i = 0; i < m->n_inboxes; i++) {
        evbuffer_add_printf(out, "idempotency_proxy_inbox_oldest_age_seconds{route=\"");
        metrics_label_value(out, m->inboxes[i].route);
        evbuffer_add_printf(out, "\"} %.17g\n", m->inboxes[i].oldest_s);
    }
    evbuffer_add_printf(out, "# HELP idempotency_proxy_inbox_paused 1 while a queued route's "
                        "deliveries are paused (POST /inbox/<route>/pause), else 0.\n"
                        "# TYPE idempotency_proxy_inbox_paused gauge\n");
    for (size_t i = 0; i < m->n_inboxes; i++) {
        evbuffer_add_printf(out, "idempotency_proxy_inbox_paused{route=\"");
        metrics_label_value(out, m->inboxes[i].route);
        evbuffer_add_printf(out, "\"} %d\n", m->inboxes[i].paused ? 1 : 0);
    }
}

void metrics_deinit(struct metrics *m)
{
    for (size_t i = 0; i < m->n_inboxes; i++)
        free(m->inboxes[i].route);
    free(m->inboxes);
    for (size_t i = 0; i < m->n_requests; i++)
        free(m->requests[i].route);
    free(m->requests);
    for (size_t i = 0; i < m->n_unknown; i++)
        free(m->unknown[i].route);
    free(m->unknown);
    pthread_mutex_destroy(&m->lock);
    memset(m, 0, sizeof(*m));
}
