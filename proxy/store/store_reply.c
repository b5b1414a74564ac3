/*
 * store_reply.c - the error codes of Redis replies and what they mean to the
 * store, a cluster redirection, a replica's lag and what ROLE says
 * (store_reply.h). Pure: no I/O, no state.
 */
#include "store_reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct store_reply_code {
    const char *code;
    enum store_reply_class cls;
};

static const struct store_reply_code store_reply_codes[] = {
    { "NOSCRIPT", STORE_REPLY_NOSCRIPT },
    /* refused for now; the node is still the one to talk to */
    { "NOREPLICAS", STORE_REPLY_NOT_NOW },  /* min-replicas-to-write not met */
    { "BUSY", STORE_REPLY_NOT_NOW },        /* a script or function runs too long */
    { "TRYAGAIN", STORE_REPLY_NOT_NOW },    /* cluster: keys of a slot in migration */
    { "CLUSTERDOWN", STORE_REPLY_NOT_NOW },
    /* not the primary now: reconnect and check ROLE */
    { "READONLY", STORE_REPLY_NOT_PRIMARY },   /* a replica (demoted primary) */
    { "LOADING", STORE_REPLY_NOT_PRIMARY },    /* still loading its data set */
    { "MASTERDOWN", STORE_REPLY_NOT_PRIMARY }, /* a replica that lost its primary */
    { "MOVED", STORE_REPLY_NOT_PRIMARY },      /* cluster: another node owns the slot */
    { "ASK", STORE_REPLY_NOT_PRIMARY },
    /* a value of another type under the key: not a record */
    { "WRONGTYPE", STORE_REPLY_WRONG_TYPE },
    { NULL, STORE_REPLY_FAILED },
};

enum store_reply_class store_reply_class(const char *err, size_t len)
{
    size_t word = 0;

    if (err == NULL)
        return STORE_REPLY_FAILED;
    while (word < len && err[word] != ' ')
        word++;
    for (const struct store_reply_code *c = store_reply_codes; c->code != NULL; c++) {
        if (strlen(c->code) == word && memcmp(c->code, err, word) == 0)
            return c->cls;
    }
    return STORE_REPLY_FAILED;
}

bool store_reply_class_refused(enum store_reply_class c)
{
    return c == STORE_REPLY_NOT_NOW || c == STORE_REPLY_NOT_PRIMARY;
}

const char *store_reply_class_name(enum store_reply_class c)
{
    switch (c) {
    case STORE_REPLY_NOSCRIPT:
        return "script not cached";
    case STORE_REPLY_NOT_NOW:
        return "the node refuses writes for now";
    case STORE_REPLY_NOT_PRIMARY:
        return "not the primary now";
    case STORE_REPLY_WRONG_TYPE:
        return "another type than a string under the key";
    case STORE_REPLY_FAILED:
        break;
    }
    return "command failed";
}

uint16_t store_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    /* bit by bit: keys are short, and there is no table to share between threads */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

unsigned store_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);

    if (open != NULL) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);

        if (close != NULL && close > key + from) {
            key += from;
            len = (size_t)(close - key);
        }
    }
    return store_crc16(key, len) % STORE_CLUSTER_SLOTS;
}

bool store_reply_redirect(const char *err, size_t len, bool *ask, unsigned *slot, char *host,
                          size_t hostlen, uint16_t *port)
{
    char buf[320], *end, *colon, *h = NULL;
    unsigned long n, p;

    if (err == NULL || len >= sizeof(buf))
        return false;
    memcpy(buf, err, len);
    buf[len] = '\0';
    *ask = strncmp(buf, "ASK ", 4) == 0;
    if (*ask)
        h = buf + 4;
    else if (strncmp(buf, "MOVED ", 6) == 0)
        h = buf + 6;
    if (h == NULL || *h < '0' || *h > '9')
        return false;
    n = strtoul(h, &end, 10);
    if (*end != ' ' || n >= STORE_CLUSTER_SLOTS)
        return false;
    h = end + 1;
    colon = strrchr(h, ':');
    if (colon == NULL || colon[1] < '0' || colon[1] > '9')
        return false;
    p = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || p == 0 || p > 65535)
        return false;
    *colon = '\0';
    if (h[0] == '[' && colon > h + 1 && colon[-1] == ']') {
        h++;
        colon[-1] = '\0';
    }
    if (h[0] == '\0' || strlen(h) >= hostlen || strchr(h, ' ') != NULL)
        return false;
    snprintf(host, hostlen, "%s", h);
    *slot = (unsigned)n;
    *port = (uint16_t)p;
    return true;
}

enum store_replica_lag store_replica_lag(const struct store_offset_sample *samples, size_t n,
                                         long long ack, double now_ms, double bound_ms,
                                         double since_ms)
{
    enum store_replica_lag lag = STORE_REPLICA_UNKNOWN;

    for (size_t i = 0; i < n; i++) {
        bool recent = now_ms - samples[i].at_ms <= bound_ms;

        if (recent && samples[i].at_ms >= since_ms && samples[i].offset <= ack)
            return STORE_REPLICA_WITHIN;
        if (!recent && samples[i].offset > ack)
            lag = STORE_REPLICA_LAGGING;
    }
    return lag;
}

/* ROLE: ["master", offset, replicas] on a primary; "slave" (or "replica"), "sentinel" otherwise. */
bool store_role_is_primary(const redisReply *r, char *what, size_t len)
{
    const char *role;

    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(what, len, "ROLE failed: %.200s (the proxy checks that the node is the "
                 "primary: allow +role for its user)", r->str);
        return false;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        snprintf(what, len, "ROLE failed: unexpected reply type %d", r->type);
        return false;
    }
    role = r->element[0]->str;
    if (strcmp(role, "master") == 0)
        return true;
    if (strcmp(role, "slave") == 0 || strcmp(role, "replica") == 0)
        snprintf(what, len, "the node is a replica (ROLE %.20s), not the primary", role);
    else
        snprintf(what, len, "the node's ROLE is %.40s, not master (the primary)", role);
    return false;
}
