/*
 * The census result as it is kept in Redis (proxy/census/census_result.c,
 * docs/operations.md#held-records): a pass's counts survive the round trip
 * through its JSON, and a value that is not a census result of this version
 * is refused whole, never read as counts.
 */
#include <stdlib.h>
#include <string.h>

#include "census.h"
#include "unit.h"

static const struct census_result sample = {
    .started_ms = 1735689600000ULL,
    .finished_ms = 1735689601234ULL,
    .keys = 1000000,
    .held = {
        [STORE_HELD_CLAIMED_EXPIRED] = { 1, 1735680000000ULL, 1735766400000ULL },
        [STORE_HELD_OUTCOME_UNKNOWN] = { 3, 1735600000000ULL, 1735686400000ULL },
        [STORE_HELD_RESOLVED] = { 0, 0, 0 },
    },
};

static void run_round_trip(void)
{
    size_t len = 0;
    char *text = census_result_encode(&sample, &len);
    const char *shown = text != NULL ? text : "(null)";
    struct census_result back;

    UNIT_CHECK("a result encodes as one JSON object", text != NULL && len == strlen(text) &&
               text[0] == '{', "%s", shown);
    UNIT_CHECK("every state is named as the gauges' state label",
               text != NULL && strstr(text, "\"claimed_expired\"") != NULL &&
                   strstr(text, "\"outcome_unknown\"") != NULL &&
                   strstr(text, "\"resolved\"") != NULL, "%s", shown);
    UNIT_CHECK("the result reads back as it was written",
               text != NULL && census_result_decode(text, len, &back) == 0 &&
                   memcmp(&back, &sample, sizeof(back)) == 0, "%s", shown);
    free(text);
}

#define HELD_OK(ce, ou, re)                                                                   \
    "\"held\": {\"claimed_expired\": " ce ", \"outcome_unknown\": " ou ", \"resolved\": " re "}"
#define ONE "{\"records\": 1, \"oldest_created_ms\": 5, \"soonest_expiry_ms\": 9}"
#define HEAD "\"version\": 1, \"started_ms\": 1, \"finished_ms\": 2, \"keys\": 3, "

static const struct {
    const char *name;
    const char *text;
    int want;
} decode_cases[] = {
    { "a result of version 1 is read", "{" HEAD HELD_OK(ONE, ONE, ONE) "}", 0 },
    { "a member a later version adds is left alone", "{" HEAD HELD_OK(ONE, ONE, ONE)
      ", \"by\": \"pod-1\"}", 0 },
    { "another version is refused", "{\"version\": 2, \"started_ms\": 1, \"finished_ms\": 2, "
      "\"keys\": 3, " HELD_OK(ONE, ONE, ONE) "}", -1 },
    { "no version is refused", "{\"started_ms\": 1, \"finished_ms\": 2, \"keys\": 3, "
      HELD_OK(ONE, ONE, ONE) "}", -1 },
    { "a state missing is refused", "{" HEAD "\"held\": {\"claimed_expired\": " ONE
      ", \"outcome_unknown\": " ONE "}}", -1 },
    { "a negative count is refused", "{" HEAD HELD_OK(ONE, ONE,
      "{\"records\": -1, \"oldest_created_ms\": 5, \"soonest_expiry_ms\": 9}") "}", -1 },
    { "a count as a string is refused", "{" HEAD HELD_OK(ONE, ONE,
      "{\"records\": \"1\", \"oldest_created_ms\": 5, \"soonest_expiry_ms\": 9}") "}", -1 },
    { "a fraction is refused", "{" HEAD HELD_OK(ONE, ONE,
      "{\"records\": 1.5, \"oldest_created_ms\": 5, \"soonest_expiry_ms\": 9}") "}", -1 },
    { "a member given twice is refused", "{" HEAD "\"keys\": 4, " HELD_OK(ONE, ONE, ONE) "}",
      -1 },
    { "not JSON is refused", "IR2C0123", -1 },
    { "an empty value is refused", "", -1 },
    { "a JSON array is refused", "[1, 2, 3]", -1 },
};

static void run_decode(void)
{
    for (size_t i = 0; i < sizeof(decode_cases) / sizeof(decode_cases[0]); i++) {
        struct census_result r;
        int got;

        memset(&r, 0xA5, sizeof(r));
        got = census_result_decode(decode_cases[i].text, strlen(decode_cases[i].text), &r);
        UNIT_CHECK(decode_cases[i].name, got == decode_cases[i].want &&
                   (got == 0 ? r.held[STORE_HELD_RESOLVED].records == 1 && r.keys == 3
                             : r.keys == 0 && r.held[STORE_HELD_RESOLVED].records == 0),
                   "got %d, keys %llu", got, (unsigned long long)r.keys);
    }
}

int main(void)
{
    run_round_trip();
    run_decode();
    UNIT_DONE();
}
