/*
 * Problem details documents (RFC 9457) for every cause, their Stripe-shaped
 * twins (errors.format: stripe) and the retry hint of each cause.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "problem.h"
#include "unit.h"

int main(void)
{
    static const char *const slugs[] = {
        "missing-key", "invalid-key", "body-too-large", "key-reuse-mismatch",
        "request-in-progress", "outcome-unknown", "store-unavailable", "upstream-unavailable",
        "upstream-timeout", "response-not-replayable", "signature-invalid", "shutting-down",
        "invalid-target", "invalid-framing", "method-not-allowed", "too-many-header-fields",
        "overloaded", "admin-unauthorized", "invalid-resolution", "record-key-unavailable",
        "record-unreadable", "head-too-large", "method-not-implemented",
        "upstream-answer-lost",
        "precondition-required", "precondition-failed", "re-execute-not-confirmed",
        "admin-forbidden", "admin-throttled", "missing-scope", "invalid-body",
    };
    _Static_assert(sizeof(slugs) / sizeof(slugs[0]) == PROBLEM_COUNT, "a slug per problem");

    for (int p = 0; p < PROBLEM_COUNT; p++) {
        size_t len = 0;
        char *text = problem_json((enum problem)p, problem_status((enum problem)p), "why", &len);
        json_t *doc = json_loadb(text, len, 0, NULL);
        char want[128];
        snprintf(want, sizeof(want), PROBLEM_TYPE_PREFIX "%s", slugs[p]);
        UNIT_CHECK(slugs[p],
                   doc != NULL && strcmp(json_string_value(json_object_get(doc, "type")), want) == 0 &&
                       json_integer_value(json_object_get(doc, "status")) == problem_status((enum problem)p) &&
                       json_is_string(json_object_get(doc, "title")) &&
                       strcmp(json_string_value(json_object_get(doc, "title")),
                              problem_title((enum problem)p)) == 0 &&
                       strcmp(json_string_value(json_object_get(doc, "detail")), "why") == 0,
                   "%s", text);
        json_decref(doc);
        free(text);
    }
    {
        size_t len = 0;
        char *text = problem_json(PROBLEM_KEY_REUSE_MISMATCH, 422, "a \"quoted\" detail", &len);
        json_t *doc = json_loadb(text, len, 0, NULL);
        UNIT_CHECK("status override and escaping", doc != NULL &&
                   json_integer_value(json_object_get(doc, "status")) == 422, "%s", text);
        json_decref(doc);
        free(text);
    }
    /* errors.format: stripe, one row per cause: Stripe's error type, the retry hint */
    static const struct {
        enum problem p;
        const char *type;
        bool retryable;
    } stripe_rows[] = {
        { PROBLEM_MISSING_KEY, "invalid_request_error", false },
        { PROBLEM_INVALID_KEY, "invalid_request_error", false },
        { PROBLEM_BODY_TOO_LARGE, "invalid_request_error", false },
        { PROBLEM_KEY_REUSE_MISMATCH, "idempotency_error", false },
        { PROBLEM_REQUEST_IN_PROGRESS, "idempotency_error", true },
        { PROBLEM_OUTCOME_UNKNOWN, "api_error", true }, /* a later retry picks up a resolution */
        { PROBLEM_STORE_UNAVAILABLE, "api_error", true },
        { PROBLEM_UPSTREAM_UNAVAILABLE, "api_error", true },
        { PROBLEM_RECORD_KEY_UNAVAILABLE, "api_error", true },
        { PROBLEM_RECORD_UNREADABLE, "api_error", false },
        { PROBLEM_UPSTREAM_TIMEOUT, "api_error", false },
        { PROBLEM_RESPONSE_NOT_REPLAYABLE, "api_error", false },
        { PROBLEM_SIGNATURE_INVALID, "invalid_request_error", false },
        { PROBLEM_SHUTTING_DOWN, "api_error", true },
        { PROBLEM_INVALID_TARGET, "invalid_request_error", false },
        { PROBLEM_INVALID_FRAMING, "invalid_request_error", false },
        { PROBLEM_METHOD_NOT_ALLOWED, "invalid_request_error", false },
        { PROBLEM_TOO_MANY_HEADER_FIELDS, "invalid_request_error", false },
        { PROBLEM_OVERLOADED, "api_error", true },
        { PROBLEM_ADMIN_UNAUTHORIZED, "authentication_error", false },
        { PROBLEM_INVALID_RESOLUTION, "invalid_request_error", false },
        { PROBLEM_HEAD_TOO_LARGE, "invalid_request_error", false },
        { PROBLEM_METHOD_NOT_IMPLEMENTED, "invalid_request_error", false },
        { PROBLEM_UPSTREAM_ANSWER_LOST, "api_error", false },
        { PROBLEM_PRECONDITION_REQUIRED, "invalid_request_error", false },
        { PROBLEM_PRECONDITION_FAILED, "invalid_request_error", false },
        { PROBLEM_RE_EXECUTE_NOT_CONFIRMED, "invalid_request_error", false },
        { PROBLEM_ADMIN_FORBIDDEN, "permission_error", false },
        { PROBLEM_ADMIN_THROTTLED, "rate_limit_error", false },
        { PROBLEM_MISSING_SCOPE, "invalid_request_error", false },
        { PROBLEM_INVALID_BODY, "invalid_request_error", false },
    };
    UNIT_CHECK("stripe table covers every cause",
               sizeof(stripe_rows) / sizeof(stripe_rows[0]) == PROBLEM_COUNT, "%d", PROBLEM_COUNT);
    for (size_t i = 0; i < sizeof(stripe_rows) / sizeof(stripe_rows[0]); i++) {
        enum problem p = stripe_rows[i].p;
        size_t len = 0;
        char *text = problem_stripe_json(p, "why \"quoted\"", &len);
        json_t *doc = json_loadb(text, len, 0, NULL);
        json_t *err = json_object_get(doc, "error");
        UNIT_CHECK(slugs[p],
                   doc != NULL && json_object_size(doc) == 1 && json_object_size(err) == 3 &&
                       strcmp(json_string_value(json_object_get(err, "type")),
                              stripe_rows[i].type) == 0 &&
                       strcmp(json_string_value(json_object_get(err, "code")), slugs[p]) == 0 &&
                       strcmp(json_string_value(json_object_get(err, "message")),
                              "why \"quoted\"") == 0 &&
                       strcmp(problem_stripe_type(p), stripe_rows[i].type) == 0 &&
                       problem_retryable(p) == stripe_rows[i].retryable,
                   "%s", text);
        json_decref(doc);
        free(text);
    }
    {
        size_t len = 0;
        char *text = problem_stripe_json(PROBLEM_OUTCOME_UNKNOWN, NULL, &len);
        json_t *doc = json_loadb(text, len, 0, NULL);
        const char *msg = json_string_value(json_object_get(json_object_get(doc, "error"),
                                                            "message"));
        UNIT_CHECK("stripe message defaults to the title",
                   msg != NULL && strcmp(msg, "Outcome of the original request is unknown") == 0,
                   "%s", text);
        json_decref(doc);
        free(text);
    }
    /* outcome-unknown names its record in both formats; other answers name none */
    {
        static const char id[] = "9acc2a7218f05568c938e9f73467f97a";
        size_t len = 0;
        char *text = problem_body(PROBLEM_OUTCOME_UNKNOWN, 502, "why", id, false, &len);
        json_t *doc = json_loadb(text, len, 0, NULL);
        const char *got = json_string_value(json_object_get(doc, "record_id"));
        UNIT_CHECK("problem: record_id member", got != NULL && strcmp(got, id) == 0 &&
                   json_object_size(doc) == 5, "%s", text);
        json_decref(doc);
        free(text);
        text = problem_body(PROBLEM_OUTCOME_UNKNOWN, 502, "why", id, true, &len);
        doc = json_loadb(text, len, 0, NULL);
        got = json_string_value(json_object_get(json_object_get(doc, "error"), "record_id"));
        UNIT_CHECK("stripe: record_id in the error object", got != NULL &&
                   strcmp(got, id) == 0 && json_object_size(doc) == 1, "%s", text);
        json_decref(doc);
        free(text);
        text = problem_body(PROBLEM_MISSING_KEY, 400, "why", NULL, false, &len);
        doc = json_loadb(text, len, 0, NULL);
        UNIT_CHECK("no record: no member", doc != NULL &&
                   json_object_get(doc, "record_id") == NULL, "%s", text);
        json_decref(doc);
        free(text);
    }
    UNIT_DONE();
}
