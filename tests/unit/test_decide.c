/* The decision table of README "How a request is handled" and 6, one row per case. */
#include <string.h>

#include "decide.h"
#include "unit.h"

#define NOW 1000000ull
#define FP "11111111111111111111111111111111"
#define OTHER "22222222222222222222222222222222"

static const struct {
    const char *name;
    enum record_state state;
    const char *record_fp;
    uint64_t lease_deadline;
    enum fingerprint_mode fingerprint;
    enum in_flight_mode in_flight;
    enum ambiguous_mode ambiguous;
    enum decision want;
} cases[] = {
    { "finished record replays", RECORD_DONE, FP, 0, FINGERPRINT_REQUEST, IN_FLIGHT_WAIT,
      AMBIGUOUS_HOLD, DECIDE_REPLAY },
    { "finished record, other body: mismatch", RECORD_DONE, OTHER, 0, FINGERPRINT_REQUEST,
      IN_FLIGHT_WAIT, AMBIGUOUS_HOLD, DECIDE_MISMATCH },
    { "live claim, other body: mismatch", RECORD_CLAIMED, OTHER, NOW + 10, FINGERPRINT_REQUEST,
      IN_FLIGHT_WAIT, AMBIGUOUS_HOLD, DECIDE_MISMATCH },
    { "unknown outcome, other body: mismatch", RECORD_UNKNOWN, OTHER, 0, FINGERPRINT_REQUEST,
      IN_FLIGHT_WAIT, AMBIGUOUS_HOLD, DECIDE_MISMATCH },
    { "fingerprint none never mismatches", RECORD_DONE, OTHER, 0, FINGERPRINT_NONE,
      IN_FLIGHT_WAIT, AMBIGUOUS_HOLD, DECIDE_REPLAY },
    { "live claim, wait", RECORD_CLAIMED, FP, NOW + 10, FINGERPRINT_REQUEST, IN_FLIGHT_WAIT,
      AMBIGUOUS_HOLD, DECIDE_WAIT },
    { "live claim, reject", RECORD_CLAIMED, FP, NOW + 10, FINGERPRINT_REQUEST, IN_FLIGHT_REJECT,
      AMBIGUOUS_HOLD, DECIDE_REJECT_IN_FLIGHT },
    { "expired lease, hold: outcome unknown", RECORD_CLAIMED, FP, NOW, FINGERPRINT_REQUEST,
      IN_FLIGHT_WAIT, AMBIGUOUS_HOLD, DECIDE_OUTCOME_UNKNOWN },
    { "expired lease, release: takeover", RECORD_CLAIMED, FP, NOW - 1, FINGERPRINT_REQUEST,
      IN_FLIGHT_WAIT, AMBIGUOUS_RELEASE, DECIDE_TAKEOVER },
    { "outcome unknown record", RECORD_UNKNOWN, FP, 0, FINGERPRINT_REQUEST, IN_FLIGHT_WAIT,
      AMBIGUOUS_RELEASE, DECIDE_OUTCOME_UNKNOWN },
    { "resolved record replays", RECORD_RESOLVED, FP, 0, FINGERPRINT_REQUEST, IN_FLIGHT_WAIT,
      AMBIGUOUS_RELEASE, DECIDE_REPLAY },
    { "resolved record, other body: mismatch", RECORD_RESOLVED, OTHER, 0, FINGERPRINT_REQUEST,
      IN_FLIGHT_WAIT, AMBIGUOUS_HOLD, DECIDE_MISMATCH },
    { "tombstone", RECORD_TOMBSTONE, FP, 0, FINGERPRINT_REQUEST, IN_FLIGHT_WAIT, AMBIGUOUS_HOLD,
      DECIDE_NOT_REPLAYABLE },
};

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct record rec;
        struct route_policy policy;
        memset(&rec, 0, sizeof(rec));
        memset(&policy, 0, sizeof(policy));
        rec.state = cases[i].state;
        strcpy(rec.fingerprint, cases[i].record_fp);
        rec.lease_deadline_ms = cases[i].lease_deadline;
        policy.fingerprint = cases[i].fingerprint;
        policy.in_flight = cases[i].in_flight;
        policy.on_ambiguous = cases[i].ambiguous;
        enum decision d = decide_existing(&rec, FP, NOW, &policy);
        UNIT_CHECK(cases[i].name, d == cases[i].want, "got %s, want %s", outcome_name(decision_outcome(d)),
                   outcome_name(decision_outcome(cases[i].want)));
    }
    /* a queued webhook route takes an expired claim over even with hold (README "Webhook inbox") */
    static const struct {
        const char *name;
        enum record_state state;
        uint64_t lease_deadline;
        enum decision want;
    } queued[] = {
        { "queued: expired lease, hold: takeover", RECORD_CLAIMED, NOW, DECIDE_TAKEOVER },
        { "queued: live claim still waits", RECORD_CLAIMED, NOW + 10, DECIDE_WAIT },
        { "queued: finished record replays", RECORD_DONE, 0, DECIDE_REPLAY },
        { "queued: outcome unknown record stays", RECORD_UNKNOWN, 0, DECIDE_OUTCOME_UNKNOWN },
    };
    for (size_t i = 0; i < sizeof(queued) / sizeof(queued[0]); i++) {
        struct record rec;
        struct route_policy policy;
        memset(&rec, 0, sizeof(rec));
        memset(&policy, 0, sizeof(policy));
        rec.state = queued[i].state;
        strcpy(rec.fingerprint, FP);
        rec.lease_deadline_ms = queued[i].lease_deadline;
        policy.fingerprint = FINGERPRINT_NONE;
        policy.in_flight = IN_FLIGHT_WAIT;
        policy.on_ambiguous = AMBIGUOUS_HOLD;
        policy.webhook = true;
        policy.delivery.mode = DELIVERY_QUEUED;
        enum decision d = decide_existing(&rec, FP, NOW, &policy);
        UNIT_CHECK(queued[i].name, d == queued[i].want, "got %s, want %s",
                   outcome_name(decision_outcome(d)),
                   outcome_name(decision_outcome(queued[i].want)));
    }
    UNIT_DONE();
}
