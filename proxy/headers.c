/*
 * headers.c - header field classification. Pure.
 */
#include "headers.h"

#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>

static bool header_in(const char *name, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strcasecmp(name, *list) == 0)
            return true;
    return false;
}

bool header_is_hop_by_hop(const char *name)
{
    static const char *const hop[] = { "Connection", "Keep-Alive", "TE", "Trailer",
                                       "Transfer-Encoding", "Upgrade", NULL };

    return header_in(name, hop) || strncasecmp(name, "Proxy-", 6) == 0;
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
    static const char *const never[] = { "Set-Cookie", "WWW-Authenticate", "Content-Length",
                                         "Idempotent-Replayed", NULL };

    return !header_is_hop_by_hop(name) && !header_in(name, never);
}

bool header_is_forwarded(const char *name)
{
    static const char *const never[] = { "Content-Length", "Expect", NULL };

    return !header_is_hop_by_hop(name) && !header_in(name, never);
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
