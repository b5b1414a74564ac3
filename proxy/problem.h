/*
 * problem.h - the answers the proxy makes itself, as RFC 9457 problem details
 * (application/problem+json), one stable type URI per cause (CONTRACT 7).
 */
#ifndef IDEM_PROBLEM_H
#define IDEM_PROBLEM_H

#include <stddef.h>

enum problem {
    PROBLEM_MISSING_KEY,
    PROBLEM_INVALID_KEY,
    PROBLEM_BODY_TOO_LARGE,
    PROBLEM_KEY_REUSE_MISMATCH,
    PROBLEM_REQUEST_IN_PROGRESS,
    PROBLEM_OUTCOME_UNKNOWN,
    PROBLEM_STORE_UNAVAILABLE,
    PROBLEM_UPSTREAM_UNAVAILABLE,
    PROBLEM_UPSTREAM_TIMEOUT,
    PROBLEM_RESPONSE_NOT_REPLAYABLE,
    PROBLEM_SIGNATURE_INVALID,
    PROBLEM_SHUTTING_DOWN,
    PROBLEM_INVALID_TARGET,
    PROBLEM_INVALID_FRAMING,        /* body framing the server library may read otherwise */
    PROBLEM_COUNT
};

#define PROBLEM_TYPE_PREFIX "urn:idempotency-proxy:problem:"
#define PROBLEM_CONTENT_TYPE "application/problem+json"

/* The default HTTP status of a cause (mismatch may be overridden to 422 by config). */
int problem_status(enum problem p);

/* The cause's slug, e.g. "key-reuse-mismatch". Static string. */
const char *problem_slug(enum problem p);

/*
 * The JSON document for cause p with the given status and detail (detail may
 * be NULL; it must never carry another request's data). Returns a
 * malloc'd NUL-terminated string the caller frees, length in *len (bytes);
 * NULL on allocation failure.
 */
char *problem_json(enum problem p, int status, const char *detail, size_t *len);

#endif
