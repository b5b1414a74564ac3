/*
 * route.c - route patterns: normalisation at load, matching, shadowed
 * routes and the reload rule (route.h). Pure: no I/O, no YAML.
 */
#include "route.h"
#include "path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum route_pattern_status route_set_pattern(struct route *route, char **text,
                                            const char **reason)
{
    char *pattern = *text, *match;
    size_t len = strlen(pattern), size;
    bool prefix;
    enum path_status st;

    if (pattern[0] != '/')
        return ROUTE_PATTERN_NOT_ABSOLUTE;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)pattern[i];

        if (c <= ' ' || c == 0x7f || c == '?' || c == '#' || (c == '*' && i != len - 1))
            return ROUTE_PATTERN_BAD_CHAR;
    }
    prefix = pattern[len - 1] == '*';
    if (prefix)
        pattern[--len] = '\0';
    size = path_normalized_size(pattern) + 1; /* + a prefix's trailing '/' */
    match = malloc(size);
    if (match == NULL) {
        pattern[len] = prefix ? '*' : '\0'; /* as written, for the caller's message */
        return ROUTE_PATTERN_NOMEM;
    }
    st = path_normalize(pattern, match, size);
    if (st != PATH_OK) {
        pattern[len] = prefix ? '*' : '\0';
        free(match);
        *reason = path_status_reason(st);
        return ROUTE_PATTERN_UNMATCHABLE;
    }
    if (prefix && len > 0 && (pattern[len - 1] == '/' || pattern[len - 1] == '\\') &&
        strcmp(match, "/") != 0)
        strcat(match, "/");
    route_pattern_free(route);
    route->prefix = prefix;
    route->path = pattern;
    route->path_len = len;
    route->match = match;
    route->match_len = strlen(match);
    *text = NULL;
    return ROUTE_PATTERN_OK;
}

void route_pattern_free(struct route *route)
{
    free(route->path);
    free(route->match);
    route->path = NULL;
    route->match = NULL;
}

const struct route *route_match(const struct route *routes, size_t n, const char *path)
{
    size_t len = strlen(path);

    for (size_t i = 0; i < n; i++) {
        const struct route *route = &routes[i];

        if (route->prefix
                ? len >= route->match_len && strncasecmp(path, route->match, route->match_len) == 0
                : len == route->match_len && strncasecmp(path, route->match, len) == 0)
            return route;
    }
    return NULL;
}

/* Whether every path route b matches is matched by route a. */
static bool route_covers(const struct route *a, const struct route *b)
{
    if (a->prefix)
        return b->match_len >= a->match_len &&
               strncasecmp(b->match, a->match, a->match_len) == 0;
    return !b->prefix && strcasecmp(a->match, b->match) == 0;
}

size_t route_warnings(const struct route *routes, size_t n, const char *file, char *out,
                      size_t outsize)
{
    size_t shadowed = 0, used = 0;

    out[0] = '\0';
    for (size_t j = 0; j < n; j++) {
        const struct route *b = &routes[j];
        for (size_t i = 0; i < j; i++) {
            const struct route *a = &routes[i];
            int len;
            if (!route_covers(a, b))
                continue;
            shadowed++;
            len = snprintf(out + used, outsize - used,
                           "%s:%d: warning: route '%s%s' is never reached: the earlier route at "
                           "line %d ('%s%s') matches every path it matches\n",
                           file, b->line, b->path, b->prefix ? "*" : "", a->line, a->path,
                           a->prefix ? "*" : "");
            if (len > 0)
                used += (size_t)len < outsize - used ? (size_t)len : outsize - used - 1;
            break;
        }
    }
    return shadowed;
}

static bool route_same_string(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The route among n with pattern's path and '*', case-insensitively as matching is; or NULL. */
static const struct route *route_by_pattern(const struct route *routes, size_t n,
                                            const struct route *pattern)
{
    for (size_t i = 0; i < n; i++) {
        const struct route *r = &routes[i];

        if (r->prefix == pattern->prefix && strcasecmp(r->path, pattern->path) == 0)
            return r;
    }
    return NULL;
}

const char *route_reload_refusal(const struct route *running, size_t n_running,
                                 const struct route *next, size_t n_next)
{
    for (size_t i = 0; i < n_next; i++) {
        const struct route *b = &next[i];
        const struct route *a = route_by_pattern(running, n_running, b);

        if (a == NULL)
            continue;
        if (!route_same_string(a->policy.record_source, b->policy.record_source))
            return "the key source (key_header or key_from) of a route";
        if (a->policy.n_scope_headers != b->policy.n_scope_headers)
            return "the scope_headers of a route";
        for (size_t j = 0; j < a->policy.n_scope_headers; j++) {
            if (strcasecmp(a->policy.scope_headers[j], b->policy.scope_headers[j]) != 0)
                return "the scope_headers of a route";
        }
    }
    return NULL;
}
