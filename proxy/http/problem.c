/*
 * problem.c - RFC 9457 documents and their Stripe-shaped twins, built with jansson.
 */
#include "problem.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "json_text.h"

static const struct problem_kind {
    const char *slug;
    int status;
    const char *title;
    const char *stripe_type;   /* Stripe's error type for the stripe format */
    bool retryable;            /* problem_retryable */
} problem_kinds[PROBLEM_COUNT] = {
    [PROBLEM_MISSING_KEY] = { "missing-key", 400, "Idempotency key required",
        "invalid_request_error", false },
    [PROBLEM_INVALID_KEY] = { "invalid-key", 400, "Invalid idempotency key",
        "invalid_request_error", false },
    [PROBLEM_BODY_TOO_LARGE] = { "body-too-large", 413, "Request body too large",
        "invalid_request_error", false },
    [PROBLEM_KEY_REUSE_MISMATCH] = { "key-reuse-mismatch", 409,
                                     "Idempotency key reused with a different request",
        "idempotency_error", false },
    [PROBLEM_REQUEST_IN_PROGRESS] = { "request-in-progress", 409,
                                      "A request with this idempotency key is in progress",
        "idempotency_error", true },
    [PROBLEM_OUTCOME_UNKNOWN] = { "outcome-unknown", 502,
                                  "Outcome of the original request is unknown",
        "api_error", true },
    [PROBLEM_STORE_UNAVAILABLE] = { "store-unavailable", 503,
                                    "Idempotency store unavailable",
        "api_error", true },
    [PROBLEM_UPSTREAM_UNAVAILABLE] = { "upstream-unavailable", 502, "Upstream unavailable",
        "api_error", true },
    /* sent, and nothing holds it (unprotected, or on_ambiguous: release): no SDK retries alone */
    [PROBLEM_UPSTREAM_TIMEOUT] = { "upstream-timeout", 504, "Upstream timed out",
        "api_error", false },
    [PROBLEM_RESPONSE_NOT_REPLAYABLE] = { "response-not-replayable", 502,
                                          "Original response cannot be replayed",
        "api_error", false },
    [PROBLEM_SIGNATURE_INVALID] = { "signature-invalid", 401, "Webhook signature invalid",
        "invalid_request_error", false },
    [PROBLEM_SHUTTING_DOWN] = { "shutting-down", 503, "Proxy shutting down",
        "api_error", true },
    [PROBLEM_INVALID_TARGET] = { "invalid-target", 400, "Invalid request target",
        "invalid_request_error", false },
    [PROBLEM_INVALID_FRAMING] = { "invalid-framing", 400, "Invalid request framing",
        "invalid_request_error", false },
    [PROBLEM_METHOD_NOT_ALLOWED] = { "method-not-allowed", 405, "Method not allowed",
        "invalid_request_error", false },
    [PROBLEM_TOO_MANY_HEADER_FIELDS] = { "too-many-header-fields", 431,
                                         "Too many header fields to queue",
        "invalid_request_error", false },
    [PROBLEM_OVERLOADED] = { "overloaded", 503, "Proxy overloaded", "api_error", true },
    [PROBLEM_ADMIN_UNAUTHORIZED] = { "admin-unauthorized", 401, "Admin token required",
        "authentication_error", false },
    [PROBLEM_INVALID_RESOLUTION] = { "invalid-resolution", 400,
                                     "Answer cannot be recorded",
        "invalid_request_error", false },
    [PROBLEM_RECORD_KEY_UNAVAILABLE] = { "record-key-unavailable", 503,
                                         "Record key unavailable", "api_error", true },
    [PROBLEM_RECORD_UNREADABLE] = { "record-unreadable", 502, "Record unreadable",
        "api_error", false },
    [PROBLEM_HEAD_TOO_LARGE] = { "head-too-large", 431, "Request head too large",
        "invalid_request_error", false },
    [PROBLEM_METHOD_NOT_IMPLEMENTED] = { "method-not-implemented", 501,
                                         "Method not implemented", "invalid_request_error",
                                         false },
    /* sent, and nothing holds it: a retry may execute it again, so no SDK retries on its own */
    [PROBLEM_UPSTREAM_ANSWER_LOST] = { "upstream-answer-lost", 502, "Upstream answer lost",
        "api_error", false },
    [PROBLEM_PRECONDITION_REQUIRED] = { "precondition-required", 428,
                                        "If-Match required to replace a resolution",
        "invalid_request_error", false },
    [PROBLEM_PRECONDITION_FAILED] = { "precondition-failed", 412,
                                      "Record changed since it was read",
        "invalid_request_error", false },
    [PROBLEM_RE_EXECUTE_NOT_CONFIRMED] = { "re-execute-not-confirmed", 409,
                                           "Purge would let the request execute again",
        "invalid_request_error", false },
    [PROBLEM_ADMIN_FORBIDDEN] = { "admin-forbidden", 403, "Operator lacks the right",
        "permission_error", false },
    [PROBLEM_ADMIN_THROTTLED] = { "admin-throttled", 429, "Too many failed authentications",
        "rate_limit_error", false },
    [PROBLEM_MISSING_SCOPE] = { "missing-scope", 400, "Scope header required",
        "invalid_request_error", false },
    [PROBLEM_INVALID_BODY] = { "invalid-body", 400, "Invalid request body",
        "invalid_request_error", false },
};

int problem_status(enum problem p)
{
    return problem_kinds[p].status;
}

const char *problem_slug(enum problem p)
{
    return problem_kinds[p].slug;
}

const char *problem_title(enum problem p)
{
    return problem_kinds[p].title;
}

/* RFC 9457's members of cause p; NULL when out of memory. */
static json_t *problem_doc(enum problem p, int status, const char *detail)
{
    char type[96];

    snprintf(type, sizeof(type), PROBLEM_TYPE_PREFIX "%s", problem_kinds[p].slug);
    return json_pack("{s:s, s:s, s:i, s:s}", "type", type, "title", problem_kinds[p].title,
                     "status", status, "detail",
                     detail != NULL ? detail : problem_kinds[p].title);
}

/* Stripe's {"error": {...}} of cause p, and its error object in *error; NULL when out of memory. */
static json_t *problem_stripe_doc(enum problem p, const char *detail, json_t **error)
{
    json_t *doc = json_pack("{s:{s:s, s:s, s:s}}", "error", "type",
                            problem_kinds[p].stripe_type, "code", problem_kinds[p].slug,
                            "message", detail != NULL ? detail : problem_kinds[p].title);

    *error = doc != NULL ? json_object_get(doc, "error") : NULL;
    return doc;
}

char *problem_json(enum problem p, int status, const char *detail, size_t *len)
{
    return json_text(problem_doc(p, status, detail), len);
}

char *problem_body(enum problem p, int status, const char *detail, const char *record_id,
                   bool stripe, size_t *len)
{
    json_t *error = NULL;
    json_t *doc = stripe ? problem_stripe_doc(p, detail, &error) : problem_doc(p, status, detail);

    if (!stripe)
        error = doc;
    if (doc != NULL && record_id != NULL &&
        json_object_set_new(error, "record_id", json_string(record_id)) != 0) {
        json_decref(doc);
        return NULL;
    }
    return json_text(doc, len);
}

const char *problem_stripe_type(enum problem p)
{
    return problem_kinds[p].stripe_type;
}

bool problem_retryable(enum problem p)
{
    return problem_kinds[p].retryable;
}

char *problem_stripe_json(enum problem p, const char *detail, size_t *len)
{
    json_t *error;

    return json_text(problem_stripe_doc(p, detail, &error), len);
}
