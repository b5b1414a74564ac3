/*
 * janitor.h - claims that may have landed in Redis after their request was
 * refused: a claim or a takeover command that timed out, or whose connection
 * dropped.
 *
 * Such a claim holds a key nobody forwards: retries would wait (or get 409
 * under in_flight: reject), then read it as "outcome unknown" or take it
 * over. Nothing was sent upstream, so the janitor releases it
 * (compare-and-set on the owner token, docs/client-contract.md#how-a-request-is-handled
 * "Claim"). A release that deletes nothing does not prove the claim gone: the
 * command may still be on its way, in the dropped socket's buffers or in a
 * stalled Redis's, and land later. So the janitor reads the record until it
 * sees the claim gone: it released it, or the key holds someone else's
 * record (our SET NX cannot land on it); while there is no record it looks
 * again, every JANITOR_RETRY_MS at first, the delay doubling up to
 * JANITOR_RETRY_MAX_MS, until the claim's retention is out. A claim whose
 * lease ended reads as "outcome unknown" under on_ambiguous: hold, though
 * nothing was forwarded, so waiting for the lease is not enough. One janitor
 * per worker, on the worker's event_base.
 *
 * A released claim can come back: a replica that got the claim but not yet
 * its release may be promoted by a failover (redis.sentinel). So the
 * janitor remembers the claims it or its exchanges released that were never
 * forwarded (JANITOR_REMEMBER_MS, at most JANITOR_MAX_REMEMBERED, the oldest
 * forgotten first) and sends their owner-checked release again when the
 * worker's store follows a failover (janitor_failed_over): the retry of such
 * a key then executes once instead of reading as in flight and then as
 * outcome unknown (docs/redis.md#replicated-claims).
 */
#ifndef IDEM_JANITOR_H
#define IDEM_JANITOR_H

#include <stdint.h>
#include <sys/queue.h>

struct event_base;
struct store;
struct orphan_claim;
struct released_claim;

#define JANITOR_RETRY_MS 1000               /* after a store failure; the first recheck */
#define JANITOR_RETRY_MAX_MS 30000          /* the recheck of a claim not (yet) in Redis */
#define JANITOR_MAX_CLAIMS 100000           /* per worker: about 10 MB at most */
#define JANITOR_REMEMBER_MS 120000          /* a released claim is released again after a failover */
#define JANITOR_MAX_REMEMBERED 4096         /* per worker: about 1 MB at most */

/* A claim was released: the record at record_key changed (wake its waiters). */
typedef void janitor_released_cb(const char *record_key, void *arg);

struct janitor {
    struct event_base *base;
    struct store *store;                    /* borrowed */
    TAILQ_HEAD(, orphan_claim) claims;
    unsigned n_claims;                      /* in claims (JANITOR_MAX_CLAIMS) */
    /*
     * Claims Redis has not yet answered for (neither released nor read as
     * absent): what a SIGTERM drain waits for. Any thread may read it.
     */
    _Atomic unsigned pending;
    TAILQ_HEAD(, released_claim) released_claims;   /* oldest first */
    unsigned n_released;                    /* in released_claims (JANITOR_MAX_REMEMBERED) */
    janitor_released_cb *released;
    void *arg;
};

/* Set up j (embedded, zeroed or not); store must outlive every janitor_release. */
void janitor_init(struct janitor *j, struct event_base *base, struct store *store,
                  janitor_released_cb *released, void *arg);

/*
 * Release the claim at record_key (copied) owned by owner (32 hex chars,
 * copied) once Redis shows it, watching for up to retention_ms (ms, the
 * claim's own expiry) while it does not. Out of memory or past
 * JANITOR_MAX_CLAIMS: logged (error), the claim stays until an operator
 * purges it or its retention ends.
 */
void janitor_release(struct janitor *j, const char *record_key, const char *owner,
                     uint64_t retention_ms);

/*
 * Remember that the claim at record_key (copied) owned by owner (32 hex
 * chars, copied), never forwarded, was released: janitor_failed_over
 * releases it again within JANITOR_REMEMBER_MS. Past JANITOR_MAX_REMEMBERED
 * the oldest is forgotten; out of memory, this one is (logged).
 */
void janitor_remember(struct janitor *j, const char *record_key, const char *owner);

/*
 * The store now talks to another primary (a failover followed): send the
 * owner-checked release of every remembered claim again (each once; a store
 * failure is retried every JANITOR_RETRY_MS while it is remembered). A
 * release that deletes nothing is the common case: the new primary had the
 * release too, or never had the claim.
 */
void janitor_failed_over(struct janitor *j);

/* Forget every pending release (at exit, after the store is gone). */
void janitor_deinit(struct janitor *j);

#endif
