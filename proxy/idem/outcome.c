/*
 * outcome.c - the outcome names; see outcome.h.
 */
#include "outcome.h"

static const char *const outcome_names[OUTCOME_COUNT] = {
    [OUTCOME_UNKNOWN] = "unknown",
    [OUTCOME_FORWARDED] = "forwarded",
    [OUTCOME_FORWARDED_NOT_STORED] = "forwarded-not-stored",
    [OUTCOME_REPLAYED] = "replayed",
    [OUTCOME_WAITED] = "waited",
    [OUTCOME_MISMATCH] = "mismatch",
    [OUTCOME_IN_FLIGHT_REJECTED] = "in-flight-rejected",
    [OUTCOME_PASS_THROUGH] = "pass-through",
    [OUTCOME_UNPROTECTED] = "unprotected",
    [OUTCOME_RELEASED] = "released",
    [OUTCOME_UPSTREAM_ERROR] = "upstream-error",
    [OUTCOME_AMBIGUOUS] = "ambiguous",
    [OUTCOME_OUTCOME_UNKNOWN] = "outcome-unknown",
    [OUTCOME_NOT_REPLAYABLE] = "not-replayable",
    [OUTCOME_STORE_ERROR] = "store-error",
    [OUTCOME_STORE_ERROR_PASSED] = "store-error-passed",
    [OUTCOME_REFUSED] = "refused",
    [OUTCOME_QUEUED] = "queued",
};

const char *outcome_name(enum outcome o)
{
    return (unsigned)o < OUTCOME_COUNT ? outcome_names[o] : "unknown";
}

bool outcome_is_error(enum outcome o)
{
    switch (o) {
    case OUTCOME_FORWARDED:
    case OUTCOME_QUEUED:
    case OUTCOME_REPLAYED:
    case OUTCOME_WAITED:
    case OUTCOME_PASS_THROUGH:
    case OUTCOME_UNPROTECTED:
        return false;
    default:
        return true;
    }
}
