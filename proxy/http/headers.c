/*
 * headers.c - header field classification. Pure.
 */
#include "headers.h"

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
