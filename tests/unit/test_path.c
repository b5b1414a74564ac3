/* Route-matching path normalisation: every spelling of a path lands on one form. */
#include <string.h>

#include "path.h"
#include "unit.h"

static const struct {
    const char *name, *raw, *want;
    int rc;
} cases[] = {
    { "plain path unchanged", "/v1/payments", "/v1/payments", 0 },
    { "root", "/", "/", 0 },
    { "empty", "", "/", 0 },
    { "double slashes collapse", "//v1//payments", "/v1/payments", 0 },
    { "trailing slash dropped", "/webhooks/stripe/", "/webhooks/stripe", 0 },
    { "dot segments", "/v1/./payments", "/v1/payments", 0 },
    { "dot-dot resolves", "/v1/x/../payments", "/v1/payments", 0 },
    { "dot-dot above root stays at root", "/../../v1/payments", "/v1/payments", 0 },
    { "dot-dot of the first segment", "/a/../b", "/b", 0 },
    { "percent-encoded letters decode", "/%761/payment%73", "/v1/payments", 0 },
    { "case folds", "/V1/Payments", "/v1/payments", 0 },
    { "matrix parameters dropped", "/webhooks/stripe;x=1", "/webhooks/stripe", 0 },
    { "encoded slash becomes a separator", "/v1%2Fpayments", "/v1/payments", 0 },
    { "encoded NUL refused", "/v1/pay%00ments", "/", -1 },
};

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[256];
        int rc = path_normalize(cases[i].raw, out, sizeof(out));
        UNIT_CHECK(cases[i].name, rc == cases[i].rc && strcmp(out, cases[i].want) == 0,
                   "got %d \"%s\", want %d \"%s\"", rc, out, cases[i].rc, cases[i].want);
    }
    {
        char small[8];
        UNIT_CHECK("too long for the buffer", path_normalize("/v1/payments", small,
                                                             sizeof(small)) == -1 &&
                                                  strcmp(small, "/") == 0, "fit");
    }
    UNIT_DONE();
}
