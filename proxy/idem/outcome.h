/*
 * outcome.h - how a client request ended, in one table of names that the
 * access log (`outcome`), the metrics (`outcome` label) and the decision
 * table share. The names are part of the interface (README, dashboards).
 */
#ifndef IDEM_OUTCOME_H
#define IDEM_OUTCOME_H

#include <stdbool.h>

enum outcome {
    OUTCOME_UNKNOWN = 0,        /* never set: a bug, logged as "unknown" */
    OUTCOME_FORWARDED,          /* first execution, answer recorded */
    OUTCOME_FORWARDED_NOT_STORED, /* first execution, answer too large: a tombstone */
    OUTCOME_REPLAYED,
    OUTCOME_WAITED,             /* waited for the first request, then replayed */
    OUTCOME_MISMATCH,
    OUTCOME_IN_FLIGHT_REJECTED,
    OUTCOME_PASS_THROUGH,       /* no route, or a method the route does not protect */
    OUTCOME_UNPROTECTED,        /* protected route, no key, require_key false */
    OUTCOME_RELEASED,           /* upstream said "not processed": claim released */
    OUTCOME_UPSTREAM_ERROR,     /* nothing sent upstream: claim released, 502 */
    OUTCOME_AMBIGUOUS,          /* sent, then timeout/reset: on_ambiguous applied */
    OUTCOME_OUTCOME_UNKNOWN,    /* a retry of an ambiguous request */
    OUTCOME_NOT_REPLAYABLE,     /* a retry of a tombstone */
    OUTCOME_STORE_ERROR,        /* Redis failed, on_store_error: reject */
    OUTCOME_STORE_ERROR_PASSED, /* Redis failed, on_store_error: pass */
    OUTCOME_REFUSED,            /* refused before anything was claimed: named by its problem */
    OUTCOME_QUEUED,             /* webhook inbox: appended to the route's stream, ack_status recorded */
    OUTCOME_COUNT
};

/*
 * The outcome's name, e.g. "forwarded". OUTCOME_REFUSED has no name of its
 * own: the caller names it by the problem's slug (missing-key, ...). Static.
 */
const char *outcome_name(enum outcome o);

/*
 * Whether `log.access: errors` keeps a request that ended in o (whatever its
 * status; a status >= 400 is kept too): everything but the routine endings
 * forwarded, replayed, waited, pass-through and unprotected. So a released
 * claim, an ambiguous answer, a store error passed through, an answer too
 * large to store and every refusal are kept. docs/operations.md#logs.
 */
bool outcome_is_error(enum outcome o);

#endif
