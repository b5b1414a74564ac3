/* Problem details documents (RFC 9457) for every cause of CONTRACT 7. */
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
        "invalid-target", "invalid-framing",
    };

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
    UNIT_DONE();
}
