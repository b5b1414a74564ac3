/*
 * metrics.c - Prometheus text exposition format (version 0.0.4).
 */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

/* Upper bounds in seconds, shared by the latency histograms. */
static const double metrics_bounds[METRICS_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

int metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof(*m));
    return pthread_mutex_init(&m->lock, NULL) == 0 ? 0 : -1;
}

/* The count of route and outcome, added when new; NULL when out of memory. Lock held. */
static struct metrics_request_count *metrics_request_slot(struct metrics *m, const char *route,
                                                          const char *outcome)
{
    struct metrics_request_count *c;
    char *copy;

    for (size_t i = 0; i < m->n_requests; i++) {
        c = &m->requests[i];
        if (strcmp(c->outcome, outcome) == 0 && strcmp(c->route, route) == 0)
            return c;
    }
    if (m->n_requests == m->cap_requests) {
        size_t cap = m->cap_requests ? m->cap_requests * 2 : 32;
        struct metrics_request_count *grown = realloc(m->requests, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        m->requests = grown;
        m->cap_requests = cap;
    }
    copy = strdup(route);
    if (copy == NULL)
        return NULL;
    c = &m->requests[m->n_requests++];
    *c = (struct metrics_request_count){ copy, outcome, 0 };
    return c;
}

void metrics_count_request(struct metrics *m, const char *route, const char *outcome)
{
    struct metrics_request_count *c;

    pthread_mutex_lock(&m->lock);
    c = metrics_request_slot(m, route != NULL ? route : "", outcome);
    if (c != NULL)
        c->count++;
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

static void metrics_render_inbox(struct metrics *m, struct evbuffer *out);

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
    metrics_render_scalar(out, "idempotency_proxy_redis_up", "gauge",
                          "1 when the Redis connection of every worker is up.", g->redis_up);
    evbuffer_add_printf(out, "# HELP idempotency_proxy_redis_primary Workers connected to the "
                        "Redis node at address, its ROLE master confirmed.\n"
                        "# TYPE idempotency_proxy_redis_primary gauge\n");
    for (size_t i = 0; i < g->n_redis_primaries; i++) {
        evbuffer_add_printf(out, "idempotency_proxy_redis_primary{address=\"");
        metrics_label_value(out, g->redis_primaries[i].address);
        evbuffer_add_printf(out, "\"} %u\n", g->redis_primaries[i].workers);
    }
    metrics_render_scalar(out, "idempotency_proxy_redis_failovers_followed_total", "counter",
                          "Times redis.sentinel named another primary and the proxy moved to it.",
                          (double)m->counters[METRICS_FAILOVERS_FOLLOWED]);
    if (g->redis_cluster_nodes >= 0) {
        metrics_render_scalar(out, "idempotency_proxy_redis_cluster_nodes", "gauge",
                              "Redis Cluster primaries with a ready connection (the fewest "
                              "over the workers).", g->redis_cluster_nodes);
        metrics_render_scalar(out, "idempotency_proxy_redis_cluster_map_refreshes_total",
                              "counter", "Redis Cluster slot maps read (CLUSTER SHARDS).",
                              (double)m->counters[METRICS_CLUSTER_REFRESHES]);
        evbuffer_add_printf(out, "# HELP idempotency_proxy_redis_cluster_redirections_total "
                            "Redis commands sent again to another node, by kind: moved (the "
                            "slot moved) or ask (the slot is migrating).\n"
                            "# TYPE idempotency_proxy_redis_cluster_redirections_total counter\n"
                            "idempotency_proxy_redis_cluster_redirections_total{kind=\"moved\"} "
                            "%llu\n"
                            "idempotency_proxy_redis_cluster_redirections_total{kind=\"ask\"} "
                            "%llu\n",
                            (unsigned long long)m->counters[METRICS_CLUSTER_MOVED],
                            (unsigned long long)m->counters[METRICS_CLUSTER_ASK]);
    }
    metrics_render_scalar(out, "idempotency_proxy_store_errors_total", "counter",
                          "Redis commands that failed, timed out or found no connection.",
                          (double)m->counters[METRICS_STORE_ERRORS]);
    metrics_render_scalar(out, "idempotency_proxy_store_error_passes_total", "counter",
                          "Requests forwarded unprotected because Redis failed "
                          "(on_store_error: pass).",
                          (double)m->counters[METRICS_STORE_ERROR_PASSES]);
    evbuffer_add_printf(out, "# HELP idempotency_proxy_wait_shortfalls_total Writes that fewer "
                             "than redis.min_replicas replicas confirmed within "
                             "redis.replica_timeout, or whose WAIT failed, by phase: claim "
                             "(refused) or record (logged).\n"
                             "# TYPE idempotency_proxy_wait_shortfalls_total counter\n"
                             "idempotency_proxy_wait_shortfalls_total{phase=\"claim\"} %llu\n"
                             "idempotency_proxy_wait_shortfalls_total{phase=\"record\"} %llu\n",
                        (unsigned long long)m->counters[METRICS_WAIT_SHORTFALLS_CLAIM],
                        (unsigned long long)m->counters[METRICS_WAIT_SHORTFALLS_RECORD]);
    metrics_render_scalar(out, "idempotency_proxy_config_reloads_total", "counter",
                          "Configuration reloads applied (SIGHUP).",
                          (double)m->counters[METRICS_RELOADS]);
    metrics_render_scalar(out, "idempotency_proxy_config_reload_failures_total", "counter",
                          "Configuration reloads refused.",
                          (double)m->counters[METRICS_RELOAD_FAILURES]);
    metrics_render_inbox(m, out);
    pthread_mutex_unlock(&m->lock);
}

void metrics_inbox_gauges(struct metrics *m, const char *route, double depth, double oldest_s)
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
    pthread_mutex_unlock(&m->lock);
}

/* The webhook inbox's counters, histogram and per-route gauges (README "Webhook inbox"). */
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
}

void metrics_deinit(struct metrics *m)
{
    for (size_t i = 0; i < m->n_inboxes; i++)
        free(m->inboxes[i].route);
    free(m->inboxes);
    for (size_t i = 0; i < m->n_requests; i++)
        free(m->requests[i].route);
    free(m->requests);
    pthread_mutex_destroy(&m->lock);
    memset(m, 0, sizeof(*m));
}
