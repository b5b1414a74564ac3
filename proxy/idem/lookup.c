/*
 * lookup.c - a request's record from the key an operator holds; see lookup.h.
 */
#include "lookup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "classify.h"
#include "headers.h"
#include "identity.h"

int lookup_record(const struct config *cfg, const char *method, const char *path,
                  const struct evkeyvalq *headers, const char *key, struct lookup_result *out,
                  char *why, size_t whylen)
{
    struct classify_result c;
    char *parsed;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (method != NULL && config_method_bit(method) == 0) {
        snprintf(why, whylen, "%s is not a method a route can protect (GET, HEAD, POST, PUT, "
                 "PATCH, DELETE, OPTIONS; upper case)", method);
        return -1;
    }
    parsed = malloc(CLASSIFY_KEY_MAX);
    if (parsed == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    classify_lookup(cfg, method, path, headers, key, parsed, CLASSIFY_KEY_MAX, &c);
    if (c.verdict == CLASSIFY_PASS_THROUGH && c.route == NULL) {
        snprintf(why, whylen, "no route matches the path: the proxy forwards such a request "
                 "without a record");
    } else if (c.verdict == CLASSIFY_PASS_THROUGH) {
        snprintf(why, whylen, "the route %s%s does not protect %s: the proxy forwards such a "
                 "request without a record", c.route->path, c.route->prefix ? "*" : "", method);
    } else if (c.verdict != CLASSIFY_PROTECT) {
        snprintf(why, whylen, "a request with this key would be refused (%d): %s", c.status,
                 c.detail);
    } else if (identity_compute(cfg, &c.route->policy, headers, parsed, c.key_len,
                                out->record_id, out->redis_key, sizeof(out->redis_key)) != 0) {
        snprintf(why, whylen, "the record key does not fit"); /* config_load bounds key_prefix */
    } else {
        const struct route_policy *policy = &c.route->policy;

        out->route = c.route;
        for (size_t i = 0; i < policy->n_scope_headers; i++)
            if (evhttp_find_header(headers, policy->scope_headers[i]) == NULL)
                out->absent[out->n_absent++] = policy->scope_headers[i];
        rc = 0;
    }
    free(parsed);
    return rc;
}

int lookup_add_header(struct evkeyvalq *headers, const char *line, const char **why)
{
    const char *colon = strchr(line, ':'), *value, *end;
    char *name, *copy;
    int rc = -1;

    *why = "expected 'Name: value'";
    if (colon == NULL || colon == line)
        return -1;
    value = colon + 1;
    while (*value == ' ' || *value == '\t')
        value++;
    end = value + strlen(value);
    while (end > value && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    name = strndup(line, (size_t)(colon - line));
    copy = strndup(value, (size_t)(end - value));
    if (name == NULL || copy == NULL)
        *why = "out of memory";
    else if (!header_name_valid(name))
        *why = "the name before ':' is not a header field name (no spaces before the colon)";
    else if (evhttp_add_header(headers, name, copy) != 0)
        *why = "the value has a line break";
    else
        rc = 0;
    free(name);
    free(copy);
    return rc;
}

json_t *lookup_json(const struct lookup_result *r)
{
    json_t *absent = json_array();

    for (size_t i = 0; absent != NULL && i < r->n_absent; i++)
        json_array_append_new(absent, json_string(r->absent[i]));
    return json_pack("{s:s, s:s, s:s, s:o}", "record_id", r->record_id, "redis_key", r->redis_key,
                     "route", r->route->path, "absent_scope_headers", absent);
}
