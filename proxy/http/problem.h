/*
 * problem.h - the answers the proxy makes itself, as RFC 9457 problem details
 * (application/problem+json), one stable type URI per cause (README, "Problem details").
 */
#ifndef IDEM_PROBLEM_H
#define IDEM_PROBLEM_H

#include <stdbool.h>
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
    PROBLEM_METHOD_NOT_ALLOWED,     /* a webhook route answers only the methods it verifies */
    PROBLEM_TOO_MANY_HEADER_FIELDS, /* a queued delivery over DELIVERY_MAX_HEADERS */
    PROBLEM_OVERLOADED,             /* limits.max_buffered reached: refused before anything else */
    PROBLEM_ADMIN_UNAUTHORIZED,     /* the admin listener: no bearer token, or not admin.token_file's */
    PROBLEM_INVALID_RESOLUTION,     /* PUT /records/<id>: an answer that cannot be recorded */
    PROBLEM_RECORD_KEY_UNAVAILABLE, /* a stored value's key id is not in the keyring */
    PROBLEM_RECORD_UNREADABLE,      /* a stored value failed authentication (changed in Redis) */
    PROBLEM_HEAD_TOO_LARGE,         /* a request line and fields over the listener's bound */
    PROBLEM_METHOD_NOT_IMPLEMENTED, /* a method the proxy does not serve (CONNECT, TRACE, unknown) */
    PROBLEM_UPSTREAM_ANSWER_LOST,   /* unprotected: sent, then reset, closed or cut short */
    PROBLEM_PRECONDITION_REQUIRED,  /* the admin's change of an operator's resolution without If-Match */
    PROBLEM_PRECONDITION_FAILED,    /* the admin's change with a stale If-Match: the record changed */
    PROBLEM_RE_EXECUTE_NOT_CONFIRMED, /* a purge that would let the request execute again, unconfirmed */
    PROBLEM_ADMIN_FORBIDDEN,        /* an operator without the right the admin request needs */
    PROBLEM_ADMIN_THROTTLED,        /* too many failed authentications from one client address */
    PROBLEM_MISSING_SCOPE,          /* scope_required: a protected request without a scope header */
    PROBLEM_INVALID_BODY,           /* a body its route's fingerprint mode cannot read (json, form) */
    PROBLEM_COUNT
};

#define PROBLEM_TYPE_PREFIX "urn:idempotency-proxy:problem:"
#define PROBLEM_CONTENT_TYPE "application/problem+json"
#define PROBLEM_STRIPE_CONTENT_TYPE "application/json"
/* The header Stripe's SDKs read before their own retry rules (stripe-node _shouldRetry). */
#define PROBLEM_STRIPE_RETRY_HEADER "Stripe-Should-Retry"

/* The default HTTP status of a cause (mismatch may be overridden to 422 by config). */
int problem_status(enum problem p);

/* The cause's slug, e.g. "key-reuse-mismatch". Static string. */
const char *problem_slug(enum problem p);

/* The cause's RFC 9457 `title`, the same on every answer of the cause. Static string. */
const char *problem_title(enum problem p);

/*
 * The JSON document for cause p with the given status and detail (detail may
 * be NULL; it must never carry another request's data). Returns a
 * malloc'd NUL-terminated string the caller frees, length in *len (bytes);
 * NULL on allocation failure.
 */
char *problem_json(enum problem p, int status, const char *detail, size_t *len);

/*
 * The proxy's answer body for cause p: problem_json's document, or with
 * stripe problem_stripe_json's, plus the member "record_id" (in the problem
 * object, or in Stripe's error object) when record_id is not NULL
 * (docs/client-contract.md#outcome-unknown: what a client quotes to support).
 * Same ownership and errors as problem_json.
 */
char *problem_body(enum problem p, int status, const char *detail, const char *record_id,
                   bool stripe, size_t *len);

/*
 * The same answer in the shape Stripe's SDKs recognise as an error (`errors:
 * format: stripe`): {"error": {"type": T, "code": "<slug>", "message": M}},
 * T one of Stripe's error types (problem_stripe_type), M the detail (the
 * title when detail is NULL). Those SDKs decide success by the absence of an
 * `error` member, whatever the status. Same ownership and errors as
 * problem_json: a malloc'd string the caller frees, length in *len (bytes);
 * NULL on allocation failure.
 */
char *problem_stripe_json(enum problem p, const char *detail, size_t *len);

/* Stripe's error type for cause p: "invalid_request_error", "idempotency_error",
   "api_error", or "authentication_error" (the admin listener's 401). Static string. */
const char *problem_stripe_type(enum problem p);

/*
 * Whether a client should retry cause p with the same key
 * (docs/client-contract.md#retrying): true where a retry is the right move
 * (the first request is still running, Redis or the upstream is away, the
 * proxy is draining, an outcome held unknown whose resolution a later retry
 * picks up; the proxy guarantees the retry executes at most once), false
 * where the same request can only get the same refusal (a bad or reused key,
 * a tombstone, a bad signature, target or size). Sent as Stripe-Should-Retry
 * in the stripe format.
 */
bool problem_retryable(enum problem p);

#endif
