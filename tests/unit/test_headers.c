/* Hop-by-hop fields (RFC 9110 7.6.1) and what a record stores (README "How a request is handled"). */
#include "headers.h"
#include "unit.h"

static const struct {
    const char *name;
    bool hop, stored, forwarded;
} cases[] = {
    { "Connection", true, false, false },
    { "keep-alive", true, false, false },
    { "Transfer-Encoding", true, false, false },
    { "TE", true, false, false },
    { "Trailer", true, false, false },
    { "Upgrade", true, false, false },
    { "Proxy-Authorization", true, false, false },
    { "Proxy-Connection", true, false, false },
    { "Set-Cookie", false, false, true },
    { "WWW-Authenticate", false, false, true },
    { "Content-Length", false, false, false },
    { "Idempotent-Replayed", false, false, true },
    { "Expect", false, true, false },
    { "Content-Type", false, true, true },
    { "X-Request-Id", false, true, true },
    { "Location", false, true, true },
};

int main(void)
{
    char name[128];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(name, sizeof(name), "%s hop-by-hop=%d", cases[i].name, cases[i].hop);
        UNIT_CHECK(name, header_is_hop_by_hop(cases[i].name) == cases[i].hop, "wrong");
        snprintf(name, sizeof(name), "%s stored=%d", cases[i].name, cases[i].stored);
        UNIT_CHECK(name, header_is_stored(cases[i].name) == cases[i].stored, "wrong");
        snprintf(name, sizeof(name), "%s forwarded=%d", cases[i].name, cases[i].forwarded);
        UNIT_CHECK(name, header_is_forwarded(cases[i].name) == cases[i].forwarded, "wrong");
    }
    UNIT_CHECK("named by Connection", header_named_by_connection("close, X-Trace", "x-trace"),
               "not found");
    UNIT_CHECK("not named by Connection", !header_named_by_connection("close, X-Trace-Id", "X-Trace"),
               "prefix matched");
    UNIT_CHECK("no Connection header", !header_named_by_connection(NULL, "X"), "matched");
    UNIT_DONE();
}
