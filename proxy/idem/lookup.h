/*
 * lookup.h - the record a request would map to, for an operator who holds
 * what a customer quotes (the idempotency key, or a webhook's event id,
 * and the path) and not the record id: the route that path and method
 * match, the key as that route reads it, its scope header values, and from
 * them the record id and Redis key (classify_lookup, identity_compute).
 * `idempotency-proxy record-id` and GET /records/lookup both answer from
 * here. Pure: no I/O.
 */
#ifndef IDEM_LOOKUP_H
#define IDEM_LOOKUP_H

#include <stddef.h>

#include <jansson.h>

#include "config.h"
#include "fingerprint.h"
#include "record_id.h"

struct evkeyvalq;

struct lookup_result {
    const struct route *route;      /* the route that protects the request; borrowed from cfg */
    char record_id[RECORD_ID_HEX_LEN + 1];
    char redis_key[RECORD_KEY_MAX];
    /* the route's scope headers that headers did not carry: the id is that of a
       request without them (borrowed from cfg) */
    const char *absent[CONFIG_MAX_SCOPE_HEADERS];
    size_t n_absent;
};

/*
 * The record of a request to path with method (NULL: any method the route
 * protects; the record id does not depend on it) carrying key and the
 * scope header fields headers, under cfg. key is what the request's key
 * header carries (parsed as a request's), or, on a route with key_from
 * json, the event id at that pointer. Returns 0 with *out set; or -1 with
 * one line in why (whylen bytes, cut to fit, NUL-terminated): no route
 * matches the path, the route does not protect method, or the key or a
 * scope header is refused as a request's would be. Borrows everything.
 */
int lookup_record(const struct config *cfg, const char *method, const char *path,
                  const struct evkeyvalq *headers, const char *key, struct lookup_result *out,
                  char *why, size_t whylen);

/*
 * Add a "Name: value" line (the CLI's --header, the endpoint's header=
 * parameter) to headers (copied in by evhttp_add_header): Name a field name
 * (no space before the colon), the value without its surrounding spaces and
 * tabs. Returns 0, or -1 with a static reason in *why and headers untouched.
 */
int lookup_add_header(struct evkeyvalq *headers, const char *line, const char **why);

/*
 * r as the JSON object both answers print: record_id, redis_key, route (its
 * pattern as the logs write it) and absent_scope_headers. A new reference,
 * or NULL when out of memory.
 */
json_t *lookup_json(const struct lookup_result *r);

#endif
