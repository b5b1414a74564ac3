/*
 * store_reply.c - the error codes of Redis replies and what they mean to the
 * store (store_reply.h).
 */
#include "store_reply.h"

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

const char *store_reply_class_name(enum store_reply_class c)
{
    switch (c) {
    case STORE_REPLY_NOSCRIPT:
        return "script not cached";
    case STORE_REPLY_NOT_NOW:
        return "the node refuses writes for now";
    case STORE_REPLY_NOT_PRIMARY:
        return "not the primary now";
    case STORE_REPLY_FAILED:
        break;
    }
    return "command failed";
}
