/*
 * store_sentinel_reply.c - what a sentinel's answer to `SENTINEL MASTER
 * NAME` says (store_reply.h; docs/redis.md#sentinel): the address and
 * config-epoch of the primary it names. Pure: no I/O, no state.
 *
 * The reply is the master's fields as name/value pairs: a flat array under
 * RESP2, a map under RESP3 (hiredis gives both as element[] pairs). The
 * config-epoch is the epoch of the failover that made the named node the
 * primary (0 before any), the same at every sentinel that has caught up:
 * the one number that orders two sentinels' answers
 * (https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/#configuration-propagation).
 */
#include "store_reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether r is a bulk or simple string equal to s. */
static bool sentinel_reply_is(const redisReply *r, const char *s)
{
    return (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

/* The value of field name in the pairs of r, or NULL. */
static const redisReply *sentinel_reply_field(const redisReply *r, const char *name)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (sentinel_reply_is(r->element[i], name))
            return r->element[i + 1];
    return NULL;
}

/* A decimal string value (no sign, no space) into *out, at most max; false otherwise. */
static bool sentinel_reply_number(const redisReply *v, unsigned long long max,
                                  unsigned long long *out)
{
    char *end = NULL;

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0 || v->len > 20 ||
        v->str[0] < '0' || v->str[0] > '9')
        return false;
    *out = strtoull(v->str, &end, 10);
    return end == v->str + v->len && *out <= max;
}

bool store_sentinel_master_read(const redisReply *r, const char *master,
                                struct sentinel_master *out, char *why, size_t whylen)
{
    const redisReply *ip;
    unsigned long long port = 0, epoch = 0;

    if (r->type == REDIS_REPLY_ERROR) {
        if (strstr(r->str, "No such master") != NULL)
            snprintf(why, whylen, "does not monitor a master named '%.200s'", master);
        else
            snprintf(why, whylen, "SENTINEL MASTER failed: %.200s", r->str);
        return false;
    }
    if (r->type == REDIS_REPLY_NIL ||
        ((r->type == REDIS_REPLY_ARRAY || r->type == REDIS_REPLY_MAP) && r->elements == 0)) {
        snprintf(why, whylen, "does not monitor a master named '%.200s'", master);
        return false;
    }
    if (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_MAP) {
        snprintf(why, whylen, "SENTINEL MASTER: unexpected reply");
        return false;
    }
    ip = sentinel_reply_field(r, "ip");
    if (ip == NULL || ip->type != REDIS_REPLY_STRING || ip->len == 0 ||
        ip->len >= sizeof(out->host) || strlen(ip->str) != ip->len ||
        !sentinel_reply_number(sentinel_reply_field(r, "port"), 65535, &port) || port == 0 ||
        !sentinel_reply_number(sentinel_reply_field(r, "config-epoch"), UINT64_MAX, &epoch)) {
        snprintf(why, whylen, "SENTINEL MASTER: no ip, port or config-epoch in the reply");
        return false;
    }
    memcpy(out->host, ip->str, ip->len + 1);
    out->port = (uint16_t)port;
    out->epoch = epoch;
    return true;
}
