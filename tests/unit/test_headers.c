/* Hop-by-hop fields (RFC 9110 7.6.1) and what a record stores (README "How a request is handled"). */
#include <stdlib.h>
#include <string.h>

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

/* '-' and '_' alike, any case: how a CGI or WSGI upstream reads a field name */
static const struct {
    const char *a, *b;
    bool same;
} alike[] = {
    { "Idempotency-Record-Id", "idempotency_record_id", true },
    { "Idempotency-Record-Id", "IDEMPOTENCY_RECORD-ID", true },
    { "X_Ledger_Ref", "x-ledger-ref", true },
    { "Idempotency-Record-Id", "Idempotency-Record-Ids", false },
    { "Idempotency-Record-Id", "Idempotency.Record.Id", false },
    { "Idempotency-Record-Id", "IdempotencyRecordId", false },
};

/* fields upstreams or intermediaries act on (upstream.record_id_header may not name one) */
static const struct {
    const char *name;
    bool interpreted;
} interpreted[] = {
    { "X-Forwarded-Proto", true },
    { "x_forwarded_host", true },
    { "X-Forwarded-Prefix", true },
    { "X-Real-IP", true },
    { "Range", true },
    { "If-Match", true },
    { "If-None-Match", true },
    { "If_Unmodified_Since", true },
    { "Via", true },
    { "Max-Forwards", true },
    { "Cache-Control", true },
    { "Pragma", true },
    { "Accept", true },
    { "Accept-Language", true },
    { "Origin", true },
    { "Referer", true },
    { "User-Agent", true },
    { "Prefer", true },
    { "Content-Range", true },
    { "X-HTTP-Method-Override", true },
    { "X-Original-URL", true },
    { "Sec-Fetch-Mode", true },
    { "Idempotency-Record-Id", false },
    { "X-Correlation-Id", false },
    { "X-Request-Id", false },
    { "Accepted-Ref", false },
    { "Ranged", false },
    { "Iffy", false },
};

/* Connection values without the option Idempotency-Record-Id */
static const struct {
    const char *connection, *want;
} without[] = {
    { "keep-alive, Idempotency-Record-Id", "keep-alive" },
    { "idempotency-record-id,close", "close" },
    { "Idempotency-Record-Id", "" },
    { "TE,\tIdempotency-Record-Id ,X-Trace", "TE, X-Trace" },
    { "keep-alive, Idempotency-Record-Ids", "keep-alive, Idempotency-Record-Ids" },
    { "a,b,c", "a, b, c" },
    { "", "" },
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
    for (size_t i = 0; i < sizeof(alike) / sizeof(alike[0]); i++) {
        snprintf(name, sizeof(name), "%s alike %s=%d", alike[i].a, alike[i].b, alike[i].same);
        UNIT_CHECK(name, header_name_alike(alike[i].a, alike[i].b) == alike[i].same, "wrong");
    }
    for (size_t i = 0; i < sizeof(interpreted) / sizeof(interpreted[0]); i++) {
        snprintf(name, sizeof(name), "%s interpreted=%d", interpreted[i].name,
                 interpreted[i].interpreted);
        UNIT_CHECK(name, header_is_interpreted(interpreted[i].name) == interpreted[i].interpreted,
                   "wrong");
    }
    for (size_t i = 0; i < sizeof(without) / sizeof(without[0]); i++) {
        char *got = header_connection_without(without[i].connection, "Idempotency-Record-Id");

        snprintf(name, sizeof(name), "Connection '%s' without the record id field",
                 without[i].connection);
        UNIT_CHECK(name, got != NULL && strcmp(got, without[i].want) == 0, "got '%s'",
                   got != NULL ? got : "(null)");
        free(got);
    }
    UNIT_DONE();
}
