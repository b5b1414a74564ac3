/*
 * decide.h - what to do with a request whose claim found an existing record.
 * Pure: the table of docs/client-contract.md#how-a-request-is-handled and 6, unit-tested case by case.
 */
#ifndef IDEM_DECIDE_H
#define IDEM_DECIDE_H

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"
#include "outcome.h"
#include "record.h"

enum decision {
    DECIDE_REPLAY,            /* finished record, same fingerprint: stored answer */
    DECIDE_MISMATCH,          /* same key, other fingerprint: mismatch_status (draft 2.7) */
    DECIDE_WAIT,              /* live claim, in_flight: wait -> poll until it finishes */
    DECIDE_REJECT_IN_FLIGHT,  /* live claim, in_flight: reject -> 409 + Retry-After (draft 2.7) */
    DECIDE_OUTCOME_UNKNOWN,   /* ambiguous record, or expired lease under on_ambiguous: hold */
    DECIDE_NOT_REPLAYABLE,    /* tombstone: executed, answer too large to store */
    DECIDE_TAKEOVER,          /* expired lease under on_ambiguous: release -> claim it again */
};

/*
 * Decide for an existing record rec, the request's fingerprint fp (hex,
 * made as rec's was: its mode, ignore list and key id; "" for a body that
 * mode cannot read), the wall clock now_ms and the route policy. A route
 * whose fingerprint is none compares nothing. A mismatch wins over every
 * state (docs/client-contract.md#how-a-request-is-handled: "whatever the record's state").
 */
enum decision decide_existing(const struct record *rec, const char *fp, uint64_t now_ms,
                              const struct route_policy *policy);

/* The outcome a decision ends in (DECIDE_TAKEOVER: forwarded, once it wins). */
enum outcome decision_outcome(enum decision d);

/*
 * Whether an upstream answer of status releases the claim instead of being
 * recorded (docs/client-contract.md#how-a-request-is-handled): a status in
 * release_statuses, or on a webhook route anything but 2xx (docs/webhooks.md: the
 * provider's redelivery must reach the receiver again).
 */
bool decide_releases(const struct route_policy *policy, int status);

#endif
