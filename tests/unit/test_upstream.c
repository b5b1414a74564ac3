/*
 * test_upstream.c - the pure part of the upstream client: reading a
 * receiver's Retry-After (RFC 9110 section 10.2.3), delay-seconds or an
 * HTTP-date, which the inbox honours on a 429 or 503. Prints `ok NAME` or
 * `FAIL NAME: why` per case (unit.h); exits 1 if any failed.
 */
#include <stdint.h>
#include <stdio.h>

#include "upstream.h"
#include "unit.h"

/* Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date */
#define EXAMPLE_S INT64_C(784111777)

static const struct {
    const char *name, *value;
    int64_t now_s, want_ms;
} cases[] = {
    { "delay-seconds", "3", EXAMPLE_S, 3000 },
    { "delay-seconds with spaces", "  120 ", EXAMPLE_S, 120000 },
    { "zero", "0", EXAMPLE_S, 0 },
    { "an HTTP-date 4 s ahead", "Sun, 06 Nov 1994 08:49:41 GMT", EXAMPLE_S, 4000 },
    { "an HTTP-date in the past is now", "Sun, 06 Nov 1994 08:49:30 GMT", EXAMPLE_S, 0 },
    { "obsolete RFC 850 date", "Sunday, 06-Nov-94 08:49:47 GMT", EXAMPLE_S, 10000 },
    { "a huge number is a day", "99999999999999", EXAMPLE_S, 86400000 },
    { "negative is neither", "-5", EXAMPLE_S, -1 },
    { "a fraction is neither", "1.5", EXAMPLE_S, -1 },
    { "empty", "", EXAMPLE_S, -1 },
    { "words", "soon", EXAMPLE_S, -1 },
};

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t got = upstream_retry_after_ms(cases[i].value, cases[i].now_s);
        UNIT_CHECK(cases[i].name, got == cases[i].want_ms, "got %lld, want %lld",
                   (long long)got, (long long)cases[i].want_ms);
    }
    UNIT_DONE();
}
