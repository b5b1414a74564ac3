/*
 * decide.c - the decision table.
 */
#include "decide.h"

#include <string.h>

enum decision decide_existing(const struct record *rec, const char *fp, uint64_t now_ms,
                              const struct route_policy *policy)
{
    if (policy->fingerprint == FINGERPRINT_REQUEST && strcmp(rec->fingerprint, fp) != 0)
        return DECIDE_MISMATCH;
    switch (rec->state) {
    case RECORD_DONE:
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
    /* The owner stopped renewing: it died mid-flight, so the upstream may have acted. */
    return policy->on_ambiguous == AMBIGUOUS_HOLD ? DECIDE_OUTCOME_UNKNOWN : DECIDE_TAKEOVER;
}

const char *decision_name(enum decision d)
{
    switch (d) {
    case DECIDE_REPLAY: return "replayed";
    case DECIDE_MISMATCH: return "mismatch";
    case DECIDE_WAIT: return "waited";
    case DECIDE_REJECT_IN_FLIGHT: return "in_flight_rejected";
    case DECIDE_OUTCOME_UNKNOWN: return "outcome_unknown";
    case DECIDE_NOT_REPLAYABLE: return "not_replayable";
    case DECIDE_TAKEOVER: return "takeover";
    }
    return "unknown";
}
