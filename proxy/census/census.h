/*
 * census.h - the census of held records (docs/operations.md#held-records):
 * how many records are held, by state (a claim whose lease ran out, what a
 * proxy killed mid-flight leaves; outcome-unknown; resolved by an
 * operator), the oldest of each and the first to expire, whatever made
 * them, for the gauges and the alerts.
 *
 * One instance at a time walks the records, across every proxy and worker
 * sharing the Redis: every admin.held_refresh each instance reads the last
 * census from Redis (`PREFIX:census:{held}:result`) into its gauges, and
 * when the last pass started at least 3/4 of a period ago it tries the lock
 * (`SET PREFIX:census:{held}:lock TOKEN NX PX period`). The instance that
 * takes it walks the record keys step by step (store_census_step: at most
 * CENSUS_STEP_KEYS keys every CENSUS_STEP_MS, so a Redis with millions of
 * records pays a bounded cost), renews its lock as it goes, writes the
 * result with its times, and releases the lock. Every instance exports the
 * same census, so Prometheus sees the same values from every pod. Both
 * keys carry one hash tag: one slot under redis.cluster.
 *
 * One census per process, on one worker's loop (the admin worker's, or
 * worker 0's without an admin listener).
 */
#ifndef IDEM_CENSUS_H
#define IDEM_CENSUS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct event_base;
struct metrics;
struct census;

#define CENSUS_STEP_KEYS 250        /* SCAN COUNT of one step */
#define CENSUS_STEP_MS 25           /* from a step's end to the next one's start */
#define CENSUS_RETRY_MS 1000        /* the next tick after one that could not reach Redis */

/*
 * Create the census of the records under key_prefix (redis.key_prefix,
 * copied: an identity key, fixed until a restart) on base, through store
 * (borrowed; must outlive every census call, see census_stop), setting
 * metrics (borrowed) from each result; every period_ms
 * (admin.held_refresh), the first tick period_ms after the start. NULL when
 * out of memory or the OS has no randomness for its lock token.
 */
struct census *census_create(struct event_base *base, struct store *store,
                             struct metrics *metrics, const char *key_prefix,
                             uint64_t period_ms) __attribute__((warn_unused_result));

/*
 * A reload's admin.held_refresh: the next tick period_ms from now, and
 * every period_ms after; a pass under way goes on. NULL c is fine.
 */
void census_set_period(struct census *c, uint64_t period_ms);

/*
 * Stop: no tick or step any more, and the replies still due are dropped.
 * Before store_destroy, whose callbacks run at once. NULL c is fine.
 */
void census_stop(struct census *c);

/* Free c (after census_stop and store_destroy). NULL is fine. */
void census_destroy(struct census *c);

/* ---- the census result, as it is kept in Redis (census_result.c, pure) ---- */

/* What one pass counted. */
struct census_result {
    uint64_t started_ms;            /* when the pass started, ms since the epoch */
    uint64_t finished_ms;           /* when it completed */
    uint64_t keys;                  /* record keys it looked at */
    struct store_held held[STORE_HELD_STATES];
};

/* The held states' names in the result and the gauges' state label, by enum store_held_state. */
extern const char *const census_state_names[STORE_HELD_STATES];

/*
 * r as one JSON object (jansson), {"version": 1, "started_ms", "finished_ms",
 * "keys", "held": {STATE: {"records", "oldest_created_ms",
 * "soonest_expiry_ms"}...}}: a malloc'd NUL-terminated text the caller
 * frees, *len its bytes. NULL when out of memory.
 */
char *census_result_encode(const struct census_result *r, size_t *len);

/*
 * Read len bytes of text (a value of the result key, any bytes) into *r:
 * 0, or -1 when it is not a census result of version 1 (not JSON, a member
 * missing or not a whole number from 0 up, a state missing); *r is then
 * zeroed. Members it does not know are left alone (a later version may add
 * some).
 */
int census_result_decode(const char *text, size_t len, struct census_result *r);

#endif
