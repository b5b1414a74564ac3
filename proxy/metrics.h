/*
 * metrics.h - counters, gauges and histograms for GET /metrics, in the
 * Prometheus text exposition format 0.0.4. One set per worker; no locking.
 */
#ifndef IDEM_METRICS_H
#define IDEM_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

#define METRICS_BUCKETS 14

struct metrics_histogram {
    uint64_t counts[METRICS_BUCKETS + 1]; /* per bucket, the last is +Inf; not cumulative */
    double sum;                           /* seconds */
    uint64_t count;
};

struct metrics_request_count {
    char *route;            /* route pattern, or "" for no route; owned */
    const char *outcome;    /* static string */
    uint64_t count;
};

struct metrics {
    struct metrics_request_count *requests; /* owned array */
    size_t n_requests, cap_requests;
    uint64_t store_errors;                  /* Redis unavailable, timed out or erroring */
    uint64_t store_error_passes;            /* requests forwarded unprotected because of it */
    uint64_t reloads, reload_failures;
    struct metrics_histogram upstream_latency;
    struct metrics_histogram redis_latency;
};

/* Count one request of route (NULL: none) with outcome (a static string). */
void metrics_count_request(struct metrics *m, const char *route, const char *outcome);

/* Record one latency observation, in seconds. */
void metrics_observe(struct metrics_histogram *h, double seconds);

/*
 * Append the exposition text to out. The gauges are passed in: exchanges in
 * flight, requests waiting for another's answer, upstream transfers in flight,
 * and whether Redis is connected (0/1).
 */
void metrics_render(const struct metrics *m, struct evbuffer *out, unsigned in_flight,
                    unsigned waiting, unsigned upstream_in_flight, int redis_up);

/* Free what metrics_count_request allocated. */
void metrics_deinit(struct metrics *m);

#endif
