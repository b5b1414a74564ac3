/*
 * janitor.h - claims that may have landed in Redis after their request was
 * refused: a claim or a takeover command that timed out, or whose connection
 * dropped.
 *
 * Such a claim holds a key nobody forwards: retries would wait (or get 409
 * under in_flight: reject), then read it as "outcome unknown" or take it
 * over. Nothing was sent upstream, so the janitor releases it
 * (compare-and-set on the owner token, README "How a request is handled" "Claim") once Redis answers
 * again, retrying every JANITOR_RETRY_MS until the claim would be gone
 * (its retention): a claim whose lease ended reads as "outcome unknown" under
 * on_ambiguous: hold, though nothing was forwarded, so waiting for the lease
 * is not enough. One janitor per worker, on the worker's event_base.
 */
#ifndef IDEM_JANITOR_H
#define IDEM_JANITOR_H

#include <stdint.h>
#include <sys/queue.h>

struct event_base;
struct store;
struct orphan_claim;

#define JANITOR_RETRY_MS 1000
#define JANITOR_MAX_CLAIMS 100000           /* per worker: about 10 MB at most */

/* A claim was released: the record at record_key changed (wake its waiters). */
typedef void janitor_released_cb(const char *record_key, void *arg);

struct janitor {
    struct event_base *base;
    struct store *store;                    /* borrowed */
    TAILQ_HEAD(, orphan_claim) claims;
    _Atomic unsigned pending;               /* claims not yet released; any thread may read */
    janitor_released_cb *released;
    void *arg;
};

/* Set up j (embedded, zeroed or not); store must outlive every janitor_release. */
void janitor_init(struct janitor *j, struct event_base *base, struct store *store,
                  janitor_released_cb *released, void *arg);

/*
 * Release the claim at record_key (copied) owned by owner (32 hex chars,
 * copied) once Redis answers, trying for up to retention_ms (the claim's
 * own expiry). Out of memory or past JANITOR_MAX_CLAIMS: logged (error),
 * the claim stays until an operator purges it or its retention ends.
 */
void janitor_release(struct janitor *j, const char *record_key, const char *owner,
                     uint64_t retention_ms);

/* Forget every pending release (at exit, after the store is gone). */
void janitor_deinit(struct janitor *j);

#endif
