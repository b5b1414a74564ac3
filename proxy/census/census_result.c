/*
 * census_result.c - the census result as it is kept in Redis: one JSON
 * object that an operator can read with redis-cli GET, encoded and read by
 * jansson (census.h).
 */
#include "census.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "json_text.h"

#define CENSUS_RESULT_VERSION 1

const char *const census_state_names[STORE_HELD_STATES] = {
    [STORE_HELD_CLAIMED_EXPIRED] = "claimed_expired",
    [STORE_HELD_OUTCOME_UNKNOWN] = "outcome_unknown",
    [STORE_HELD_RESOLVED] = "resolved",
};

char *census_result_encode(const struct census_result *r, size_t *len)
{
    json_t *held = json_object(), *doc;

    for (int i = 0; held != NULL && i < STORE_HELD_STATES; i++) {
        const struct store_held *h = &r->held[i];

        if (json_object_set_new(held, census_state_names[i],
                                json_pack("{s:I, s:I, s:I}",
                                          "records", (json_int_t)h->records,
                                          "oldest_created_ms", (json_int_t)h->oldest_created_ms,
                                          "soonest_expiry_ms",
                                          (json_int_t)h->soonest_expiry_ms)) != 0) {
            json_decref(held);
            held = NULL;
        }
    }
    if (held == NULL)
        return NULL;
    doc = json_pack("{s:i, s:I, s:I, s:I, s:o}", "version", CENSUS_RESULT_VERSION,
                    "started_ms", (json_int_t)r->started_ms,
                    "finished_ms", (json_int_t)r->finished_ms,
                    "keys", (json_int_t)r->keys, "held", held);
    return json_text(doc, len);
}

/* obj's member name as a whole number from 0 up into *out; false when it is not one. */
static bool census_result_number(const json_t *obj, const char *name, uint64_t *out)
{
    const json_t *v = json_object_get(obj, name);

    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

int census_result_decode(const char *text, size_t len, struct census_result *r)
{
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    const json_t *held = json_object_get(doc, "held");
    uint64_t version = 0;
    bool ok = json_is_object(doc) && json_is_object(held) &&
              census_result_number(doc, "version", &version) &&
              version == CENSUS_RESULT_VERSION &&
              census_result_number(doc, "started_ms", &r->started_ms) &&
              census_result_number(doc, "finished_ms", &r->finished_ms) &&
              census_result_number(doc, "keys", &r->keys);

    for (int i = 0; ok && i < STORE_HELD_STATES; i++) {
        const json_t *st = json_object_get(held, census_state_names[i]);
        struct store_held *h = &r->held[i];

        ok = json_is_object(st) && census_result_number(st, "records", &h->records) &&
             census_result_number(st, "oldest_created_ms", &h->oldest_created_ms) &&
             census_result_number(st, "soonest_expiry_ms", &h->soonest_expiry_ms);
    }
    json_decref(doc);
    if (!ok) {
        memset(r, 0, sizeof(*r));
        return -1;
    }
    return 0;
}
