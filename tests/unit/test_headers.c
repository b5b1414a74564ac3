/* Hop-by-hop fields (RFC 9110 7.6.1) and what a record stores (README "How a request is handled"). */
#include "headers.h"
#include "unit.h"

static const struct {
    const char *name;
    bool hop, stored, forwarded, reserved;
} cases[] = {
    { "Connection", true, false, false, true },
    { "keep-alive", true, false, false, true },
    { "Transfer-Encoding", true, false, false, true },
    { "TE", true, false, false, true },
    { "Trailer", true, false, false, true },
    { "Upgrade", true, false, false, true },
    { "Proxy-Authorization", true, false, false, true },
    { "Proxy-Connection", true, false, false, true },
    { "Set-Cookie", false, false, true, false },
    { "WWW-Authenticate", false, false, true, false },
    { "Content-Length", false, false, false, true },
    { "Idempotent-Replayed", false, false, true, true },
    { "Expect", false, true, false, true },
    { "Content-Type", false, true, true, true },
    { "X-Request-Id", false, true, true, false },
    { "Location", false, true, true, false },
    { "host", false, true, true, true },
    { "Idempotency-Key", false, true, true, true },
    { "authorization", false, true, true, true },
    { "X-Forwarded-For", false, true, true, true },
    { "Idempotency-Record-Id", false, true, true, false },
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
        snprintf(name, sizeof(name), "%s reserved=%d", cases[i].name, cases[i].reserved);
        UNIT_CHECK(name, header_is_reserved(cases[i].name) == cases[i].reserved, "wrong");
    }
    UNIT_CHECK("named by Connection", header_named_by_connection("close, X-Trace", "x-trace"),
               "not found");
    UNIT_CHECK("not named by Connection", !header_named_by_connection("close, X-Trace-Id", "X-Trace"),
               "prefix matched");
    UNIT_CHECK("no Connection header", !header_named_by_connection(NULL, "X"), "matched");
    UNIT_DONE();
}
