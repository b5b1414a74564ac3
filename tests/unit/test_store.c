/*
 * test_store.c - the store's reply classes (store_reply.h): which error
 * replies of Redis fail a command, which also drop the connection (not the
 * primary now: reconnect and check ROLE), and NOSCRIPT. One case per code,
 * as Redis and Valkey spell the reply (the code is the first word). Then the
 * cluster's key slots (CRC16-XMODEM of the hash tag, pinned by the
 * specification's check value and by `redis-cli CLUSTER KEYSLOT` of Redis
 * 7.0) and the MOVED / ASK redirections.
 */
#include <stdbool.h>
#include <stdint.h>
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

/* Each slot as `redis-cli CLUSTER KEYSLOT KEY` answered (redis-server 7.0.15). */
static const struct {
    const char *key;
    unsigned slot;
} slots[] = {
    { "123456789", 12739 },
    { "a", 15495 },
    { "idem:{abc}", 7638 },
    { "idem:{k-42}", 7194 },
    { "idem:{0123456789abcdef0123456789abcdef}", 1829 },
    { "{user1000}.following", 3443 },
    { "foo{bar}{zap}", 5061 },  /* the first tag only */
    { "idem:{}x", 12275 },      /* an empty tag: the whole key */
    { "foo{}{bar}", 8363 },
    { "foo{{bar}}zap", 4015 },  /* the tag is "{bar" */
};

static const struct {
    const char *reply;
    bool ok, ask;
    unsigned slot;
    const char *host;
    uint16_t port;
} redirects[] = {
    { "MOVED 3999 127.0.0.1:6381", true, false, 3999, "127.0.0.1", 6381 },
    { "ASK 3999 127.0.0.1:6381", true, true, 3999, "127.0.0.1", 6381 },
    { "MOVED 16383 redis-2.example:7000", true, false, 16383, "redis-2.example", 7000 },
    { "MOVED 1 ::1:7000", true, false, 1, "::1", 7000 },
    { "ASK 1 [::1]:7000", true, true, 1, "::1", 7000 },
    { "MOVED 16384 h:1", false, false, 0, NULL, 0 },     /* no such slot */
    { "MOVED 1 h:0", false, false, 0, NULL, 0 },
    { "MOVED 1 h:65536", false, false, 0, NULL, 0 },
    { "MOVED 1 h", false, false, 0, NULL, 0 },
    { "MOVED 1 :7000", false, false, 0, NULL, 0 },
    { "MOVED x h:1", false, false, 0, NULL, 0 },
    { "MOVED 1 h:1 more", false, false, 0, NULL, 0 },
    { "ASKING 1 h:1", false, false, 0, NULL, 0 },
    { "READONLY You can't write against a read only replica.", false, false, 0, NULL, 0 },
    { "", false, false, 0, NULL, 0 },
};

static void check_cluster(void)
{
    UNIT_CHECK("crc16 check value", store_crc16("123456789", 9) == 0x31C3, "0x%04X",
               store_crc16("123456789", 9));
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
        unsigned got = store_key_slot(slots[i].key, strlen(slots[i].key));
        UNIT_CHECK(slots[i].key, got == slots[i].slot, "slot %u, want %u", got, slots[i].slot);
    }
    for (size_t i = 0; i < sizeof(redirects) / sizeof(redirects[0]); i++) {
        char host[64] = "";
        bool ask = false;
        unsigned slot = 0;
        uint16_t port = 0;
        bool ok = store_reply_redirect(redirects[i].reply, strlen(redirects[i].reply), &ask,
                                       &slot, host, sizeof(host), &port);
        UNIT_CHECK(redirects[i].reply, ok == redirects[i].ok &&
                   (!ok || (ask == redirects[i].ask && slot == redirects[i].slot &&
                            strcmp(host, redirects[i].host) == 0 && port == redirects[i].port)),
                   "ok %d ask %d slot %u host %s port %u", ok, ask, slot, host, port);
    }
}

int main(void)
{
    check_cluster();
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
