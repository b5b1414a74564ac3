/*
 * headers.c - header field classification. Pure.
 */
#include "headers.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>

struct header_name {
    const char *name;
    size_t len;
};

#define HEADER_NAME(s) { s, sizeof(s) - 1 }

/* name (len bytes) is in list; lengths are compared first, so most names cost no strcasecmp. */
static bool header_in(const char *name, size_t len, const struct header_name *list)
{
    for (; list->name != NULL; list++)
        if (list->len == len && strncasecmp(name, list->name, len) == 0)
            return true;
    return false;
}

bool header_name_valid(const char *name)
{
    if (*name == '\0')
        return false;
    for (; *name != '\0'; name++) {
        char c = *name;

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("!#$%&'*+-.^_`|~", c) != NULL))
            return false;
    }
    return true;
}

static bool header_hop_by_hop(const char *name, size_t len)
{
    static const struct header_name hop[] = {
        HEADER_NAME("Connection"), HEADER_NAME("Keep-Alive"), HEADER_NAME("TE"),
        HEADER_NAME("Trailer"), HEADER_NAME("Transfer-Encoding"), HEADER_NAME("Upgrade"),
        { NULL, 0 },
    };

    return header_in(name, len, hop) || (len >= 6 && strncasecmp(name, "Proxy-", 6) == 0);
}

bool header_is_hop_by_hop(const char *name)
{
    return header_hop_by_hop(name, strlen(name));
}

bool header_named_by_connection(const char *connection, const char *name)
{
    size_t name_len = strlen(name);
    const char *p = connection;

    if (connection == NULL)
        return false;
    while (*p != '\0') {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, " \t,");
        if (n == name_len && strncasecmp(p, name, n) == 0)
            return true;
        p += n;
    }
    return false;
}

bool header_is_stored(const char *name)
{
    static const struct header_name never[] = {
        HEADER_NAME("Set-Cookie"), HEADER_NAME("WWW-Authenticate"),
        HEADER_NAME("Content-Length"), HEADER_NAME("Idempotent-Replayed"), { NULL, 0 },
    };
    size_t len = strlen(name);

    return !header_hop_by_hop(name, len) && !header_in(name, len, never);
}

bool header_is_forwarded(const char *name)
{
    static const struct header_name never[] = {
        HEADER_NAME("Content-Length"), HEADER_NAME("Expect"), { NULL, 0 },
    };
    size_t len = strlen(name);

    return !header_hop_by_hop(name, len) && !header_in(name, len, never);
}

bool header_is_queued(const char *name)
{
    return header_is_forwarded(name) && strcasecmp(name, "Idempotency-Key") != 0;
}

bool header_is_reserved(const char *name)
{
    static const struct header_name kept[] = {
        HEADER_NAME("Host"), HEADER_NAME("Content-Length"), HEADER_NAME("Content-Type"),
        HEADER_NAME("Content-Encoding"), HEADER_NAME("Expect"), HEADER_NAME("X-Forwarded-For"),
        HEADER_NAME("Forwarded"), HEADER_NAME("Idempotency-Key"),
        HEADER_NAME("Idempotent-Replayed"), HEADER_NAME("Authorization"), HEADER_NAME("Cookie"),
        { NULL, 0 },
    };
    size_t len = strlen(name);

    return header_hop_by_hop(name, len) || header_in(name, len, kept);
}

/* c as header_name_alike compares it: lower case, '_' as '-'. */
static char header_fold(char c)
{
    return c == '_' ? '-' : (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* The first len bytes of a and b are alike (header_name_alike). */
static bool header_alike_n(const char *a, const char *b, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (header_fold(a[i]) != header_fold(b[i]))
            return false;
    return true;
}

bool header_name_alike(const char *a, const char *b)
{
    size_t len = strlen(a);

    return strlen(b) == len && header_alike_n(a, b, len);
}

bool header_is_interpreted(const char *name)
{
    static const struct header_name exact[] = {
        HEADER_NAME("Accept"), HEADER_NAME("Cache-Control"), HEADER_NAME("Date"),
        HEADER_NAME("Digest"), HEADER_NAME("Early-Data"), HEADER_NAME("From"),
        HEADER_NAME("Front-End-Https"), HEADER_NAME("Max-Forwards"), HEADER_NAME("Origin"),
        HEADER_NAME("Pragma"), HEADER_NAME("Prefer"), HEADER_NAME("Range"),
        HEADER_NAME("Referer"), HEADER_NAME("Repr-Digest"), HEADER_NAME("Signature"),
        HEADER_NAME("Signature-Input"), HEADER_NAME("True-Client-IP"), HEADER_NAME("User-Agent"),
        HEADER_NAME("Via"), HEADER_NAME("Want-Digest"), HEADER_NAME("X-Client-IP"),
        HEADER_NAME("X-HTTP-Method"), HEADER_NAME("X-HTTP-Method-Override"),
        HEADER_NAME("X-Method-Override"), HEADER_NAME("X-Real-IP"), HEADER_NAME("X-Rewrite-URL"),
        HEADER_NAME("X-Scheme"), HEADER_NAME("X-Url-Scheme"), { NULL, 0 },
    };
    /* families: a new member is interpreted as its siblings are */
    static const struct header_name prefix[] = {
        HEADER_NAME("Accept-"), HEADER_NAME("Access-Control-"), HEADER_NAME("Content-"),
        HEADER_NAME("If-"), HEADER_NAME("Sec-"), HEADER_NAME("X-Forwarded"),
        HEADER_NAME("X-Original-"), { NULL, 0 },
    };
    size_t len = strlen(name);

    for (const struct header_name *h = exact; h->name != NULL; h++)
        if (h->len == len && header_alike_n(name, h->name, len))
            return true;
    for (const struct header_name *h = prefix; h->name != NULL; h++)
        if (h->len <= len && header_alike_n(name, h->name, h->len))
            return true;
    return false;
}

char *header_connection_without(const char *connection, const char *name)
{
    /* every kept option gains at most ", " over the separator it had */
    size_t name_len = strlen(name), used = 0;
    char *out = malloc(2 * strlen(connection) + 1);
    const char *p = connection;

    if (out == NULL)
        return NULL;
    while (*p != '\0') {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, " \t,");
        if (n > 0 && !(n == name_len && strncasecmp(p, name, n) == 0)) {
            if (used > 0) {
                memcpy(out + used, ", ", 2);
                used += 2;
            }
            memcpy(out + used, p, n);
            used += n;
        }
        p += n;
    }
    out[used] = '\0';
    return out;
}

const char *header_find_all(const struct evkeyvalq *headers, const char *name, int *count)
{
    const struct evkeyval *h;
    const char *value = NULL;

    *count = 0;
    TAILQ_FOREACH(h, headers, next) {
        if (strcasecmp(h->key, name) == 0) {
            (*count)++;
            value = h->value;
        }
    }
    return value;
}
