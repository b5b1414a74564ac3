/*
 * decide.c - the decision table.
 */
#include "decide.h"

#include <string.h>

enum decision decide_existing(const struct record *rec, const char *fp, uint64_t now_ms,
                              const struct route_policy *policy)
{
    if (policy->fingerprint != FINGERPRINT_NONE && strcmp(rec->fingerprint, fp) != 0)
        return DECIDE_MISMATCH;
    switch (rec->state) {
    case RECORD_DONE:
    case RECORD_RESOLVED: /* an operator's answer replays as the upstream's would */
        return DECIDE_REPLAY;
    case RECORD_UNKNOWN:
        return DECIDE_OUTCOME_UNKNOWN;
    case RECORD_TOMBSTONE:
        return DECIDE_NOT_REPLAYABLE;
    case RECORD_CLAIMED:
        break;
    }
    if (now_ms < rec->lease_deadline_ms)
        return policy->in_flight == IN_FLIGHT_WAIT ? DECIDE_WAIT : DECIDE_REJECT_IN_FLIGHT;
    /*
     * A queued route's claim only guards the append to the inbox stream, and
     * the inbox delivers at least once with Idempotency-Key: <event id>: a
     * second append is at worst a duplicate delivery, while holding would lose
     * the event for the whole retention (docs/webhooks.md#webhook-inbox). So an
     * expired claim is always taken over there, whatever on_ambiguous says.
     */
    if (policy->webhook && policy->delivery.mode == DELIVERY_QUEUED)
        return DECIDE_TAKEOVER;
    /* The owner stopped renewing: it died mid-flight, so the upstream may have acted. */
    return policy->on_ambiguous == AMBIGUOUS_HOLD ? DECIDE_OUTCOME_UNKNOWN : DECIDE_TAKEOVER;
}

enum outcome decision_outcome(enum decision d)
{
    switch (d) {
    case DECIDE_REPLAY: return OUTCOME_REPLAYED;
    case DECIDE_MISMATCH: return OUTCOME_MISMATCH;
    case DECIDE_WAIT: return OUTCOME_WAITED;
    case DECIDE_REJECT_IN_FLIGHT: return OUTCOME_IN_FLIGHT_REJECTED;
    case DECIDE_OUTCOME_UNKNOWN: return OUTCOME_OUTCOME_UNKNOWN;
    case DECIDE_NOT_REPLAYABLE: return OUTCOME_NOT_REPLAYABLE;
    case DECIDE_TAKEOVER: return OUTCOME_FORWARDED;
    }
    return OUTCOME_UNKNOWN;
}

bool decide_releases(const struct route_policy *policy, int status)
{
    if (policy->webhook && (status < 200 || status > 299))
        return true;
    for (size_t i = 0; i < policy->n_release_statuses; i++)
        if (policy->release_statuses[i] == status)
            return true;
    return false;
}
