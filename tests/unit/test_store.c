/*
 * test_store.c - the store's reply classes (store_reply.h): which error
 * replies of Redis fail a command, which also drop the connection (not the
 * primary now: reconnect and check ROLE), and NOSCRIPT. One case per code,
 * as Redis and Valkey spell the reply (the code is the first word).
 */
#include <string.h>

#include "store_reply.h"
#include "unit.h"

static const struct {
    const char *reply;
    enum store_reply_class want;
} cases[] = {
    { "NOSCRIPT No matching script. Please use EVAL.", STORE_REPLY_NOSCRIPT },
    /* refused now, connection kept */
    { "NOREPLICAS Not enough good replicas to write.", STORE_REPLY_NOT_NOW },
    { "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
      STORE_REPLY_NOT_NOW },
    { "TRYAGAIN Multiple keys request during rehashing of slot", STORE_REPLY_NOT_NOW },
    { "CLUSTERDOWN The cluster is down", STORE_REPLY_NOT_NOW },
    /* not the primary now: drop, re-resolve, check ROLE */
    { "READONLY You can't write against a read only replica.", STORE_REPLY_NOT_PRIMARY },
    { "LOADING Redis is loading the dataset in memory", STORE_REPLY_NOT_PRIMARY },
    { "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
      STORE_REPLY_NOT_PRIMARY },
    { "MOVED 3999 127.0.0.1:6381", STORE_REPLY_NOT_PRIMARY },
    { "ASK 3999 127.0.0.1:6381", STORE_REPLY_NOT_PRIMARY },
    { "READONLY", STORE_REPLY_NOT_PRIMARY },                 /* a code alone */
    /* everything else: this command failed */
    { "ERR unknown command 'FOO'", STORE_REPLY_FAILED },
    { "WRONGTYPE Operation against a key holding the wrong kind of value", STORE_REPLY_FAILED },
    { "NOPERM User idem-proxy has no permissions to run the 'evalsha' command",
      STORE_REPLY_FAILED },
    { "OOM command not allowed when used memory > 'maxmemory'.", STORE_REPLY_FAILED },
    { "NOAUTH Authentication required.", STORE_REPLY_FAILED },
    /* the code is compared whole and exactly */
    { "READONLYX something", STORE_REPLY_FAILED },
    { "MOVEDX 1 h:1", STORE_REPLY_FAILED },
    { "readonly lower case is not the code", STORE_REPLY_FAILED },
    { "ERR READONLY in the text", STORE_REPLY_FAILED },
    { " READONLY after a space", STORE_REPLY_FAILED },
    { "ASKING", STORE_REPLY_FAILED },
    { "", STORE_REPLY_FAILED },
};

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum store_reply_class got = store_reply_class(cases[i].reply, strlen(cases[i].reply));
        UNIT_CHECK(cases[i].reply, got == cases[i].want, "class %d, want %d (%s)", (int)got,
                   (int)cases[i].want, store_reply_class_name(cases[i].want));
    }
    /* only len bytes count: "READONLY" followed by more text in the buffer */
    UNIT_CHECK("length bounds the code", store_reply_class("READONLYX", 8) ==
               STORE_REPLY_NOT_PRIMARY, "READONLYX with len 8");
    UNIT_CHECK("NULL is a failed command", store_reply_class(NULL, 0) == STORE_REPLY_FAILED,
               "NULL");
    UNIT_DONE();
}
