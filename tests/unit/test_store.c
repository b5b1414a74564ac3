/*
 * test_store.c - the store's reply classes (store_reply.h): which error
 * replies of Redis fail a command, which also drop the connection (not the
 * primary now: reconnect and check ROLE), which prove the command did not
 * run and may be sent again later (STORE_REFUSED), and NOSCRIPT. One case per code,
 * as Redis and Valkey spell the reply (the code is the first word). Then the
 * cluster's key slots (CRC16-XMODEM of the hash tag, pinned by the
 * specification's check value and by `redis-cli CLUSTER KEYSLOT` of Redis
 * 7.0) and the MOVED / ASK redirections. Then how far behind a replica is,
 * from samples of the primary's offset. Then what a ROLE reply says
 * (store_role_is_primary): master, replica (slave), sentinel, an error, a
 * malformed reply. Then which cursors the listing of held records takes
 * (store_list_cursor_valid).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "store.h"
#include "store_reply.h"
#include "unit.h"

static const struct {
    const char *reply;
    enum store_reply_class want;
    bool refused;   /* proves it did not run, may be sent again later (STORE_REFUSED) */
} cases[] = {
    { "NOSCRIPT No matching script. Please use EVAL.", STORE_REPLY_NOSCRIPT, false },
    /* refused now, connection kept; did not run */
    { "NOREPLICAS Not enough good replicas to write.", STORE_REPLY_NOT_NOW, true },
    { "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
      STORE_REPLY_NOT_NOW, true },
    { "TRYAGAIN Multiple keys request during rehashing of slot", STORE_REPLY_NOT_NOW, true },
    { "CLUSTERDOWN The cluster is down", STORE_REPLY_NOT_NOW, true },
    /* not the primary now: drop, re-resolve, check ROLE; did not run */
    { "READONLY You can't write against a read only replica.", STORE_REPLY_NOT_PRIMARY, true },
    { "LOADING Redis is loading the dataset in memory", STORE_REPLY_NOT_PRIMARY, true },
    { "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
      STORE_REPLY_NOT_PRIMARY, true },
    { "MOVED 3999 127.0.0.1:6381", STORE_REPLY_NOT_PRIMARY, true },
    { "ASK 3999 127.0.0.1:6381", STORE_REPLY_NOT_PRIMARY, true },
    { "READONLY", STORE_REPLY_NOT_PRIMARY, true },           /* a code alone */
    /* everything else: this command failed */
    { "ERR unknown command 'FOO'", STORE_REPLY_FAILED, false },
    { "WRONGTYPE Operation against a key holding the wrong kind of value", STORE_REPLY_WRONG_TYPE,
      false },
    { "NOPERM User idem-proxy has no permissions to run the 'evalsha' command",
      STORE_REPLY_FAILED, false },
    { "OOM command not allowed when used memory > 'maxmemory'.", STORE_REPLY_FAILED, false },
    { "NOAUTH Authentication required.", STORE_REPLY_FAILED, false },
    /* the code is compared whole and exactly */
    { "READONLYX something", STORE_REPLY_FAILED, false },
    { "MOVEDX 1 h:1", STORE_REPLY_FAILED, false },
    { "readonly lower case is not the code", STORE_REPLY_FAILED, false },
    { "ERR READONLY in the text", STORE_REPLY_FAILED, false },
    { " READONLY after a space", STORE_REPLY_FAILED, false },
    { "ASKING", STORE_REPLY_FAILED, false },
    { "", STORE_REPLY_FAILED, false },
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

/* Samples a second apart ending at 10 s: the offset went 100, 200, 300, 400, 500. */
static const struct store_offset_sample history[] = {
    { 6000, 100 }, { 7000, 200 }, { 8000, 300 }, { 9000, 400 }, { 10000, 500 },
};

static const struct {
    const char *name;
    size_t n;           /* of history, the oldest ones */
    long long ack;
    double now_ms;
    double since_ms;
    enum store_replica_lag want;
} lags[] = {
    { "acknowledged the offset now", 5, 500, 10000, 0, STORE_REPLICA_WITHIN },
    { "a second behind (hellos since its last ack)", 5, 400, 10000, 0, STORE_REPLICA_WITHIN },
    { "exactly the bound behind", 5, 200, 10000, 0, STORE_REPLICA_WITHIN },
    { "past the bound behind (a frozen replica)", 5, 150, 10500, 0, STORE_REPLICA_LAGGING },
    { "no offset acknowledged", 5, 0, 10000, 0, STORE_REPLICA_LAGGING },
    { "first sample, behind: cannot say yet", 1, 50, 6000, 0, STORE_REPLICA_UNKNOWN },
    { "first sample, caught up", 1, 100, 6000, 0, STORE_REPLICA_WITHIN },
    { "samples only from long ago, it holds them all", 2, 250, 20000, 0,
      STORE_REPLICA_UNKNOWN },
    { "samples only from long ago, it lacks one", 2, 150, 20000, 0, STORE_REPLICA_LAGGING },
    { "a shortfall at 8.5 s: what it held before does not clear it", 5, 300, 10000, 8500,
      STORE_REPLICA_UNKNOWN },
    { "a shortfall at 8.5 s: acknowledged a later sample", 5, 400, 10000, 8500,
      STORE_REPLICA_WITHIN },
};

static void check_replica_lag(void)
{
    for (size_t i = 0; i < sizeof(lags) / sizeof(lags[0]); i++) {
        enum store_replica_lag got = store_replica_lag(history, lags[i].n, lags[i].ack,
                                                       lags[i].now_ms, 3000, lags[i].since_ms);
        UNIT_CHECK(lags[i].name, got == lags[i].want, "lag %d, want %d", (int)got,
                   (int)lags[i].want);
    }
}

/* A bulk string reply of s (hiredis' layout, as the parser reads it). */
#define ROLE_STR(s) { .type = REDIS_REPLY_STRING, .str = (char *)(s), .len = sizeof(s) - 1 }
/* An error reply of s. */
#define ROLE_ERROR(s) { .type = REDIS_REPLY_ERROR, .str = (char *)(s), .len = sizeof(s) - 1 }

static void check_role(void)
{
    redisReply master = ROLE_STR("master"), slave = ROLE_STR("slave");
    redisReply replica = ROLE_STR("replica"), sentinel = ROLE_STR("sentinel");
    redisReply offset = { .type = REDIS_REPLY_INTEGER, .integer = 3129659 };
    redisReply replicas = { .type = REDIS_REPLY_ARRAY, .elements = 0 };
    redisReply *m_elem[] = { &master, &offset, &replicas };
    redisReply *s_elem[] = { &slave };
    redisReply *r_elem[] = { &replica };
    redisReply *n_elem[] = { &sentinel };
    redisReply *i_elem[] = { &offset };
    static const struct {
        const char *name;
        bool primary;
        const char *why;        /* a part of the reason, when not the primary */
    } want[] = {
        { "master with its offset and replicas", true, NULL },
        { "slave", false, "is a replica (ROLE slave)" },
        { "replica", false, "is a replica (ROLE replica)" },
        { "sentinel", false, "ROLE is sentinel, not master" },
        { "an error (NOPERM)", false, "ROLE failed: NOPERM" },
        { "an empty array", false, "unexpected reply type" },
        { "an array of an integer", false, "unexpected reply type" },
        { "a status, not an array", false, "unexpected reply type" },
    };
    redisReply replies[] = {
        { .type = REDIS_REPLY_ARRAY, .elements = 3, .element = m_elem },
        { .type = REDIS_REPLY_ARRAY, .elements = 1, .element = s_elem },
        { .type = REDIS_REPLY_ARRAY, .elements = 1, .element = r_elem },
        { .type = REDIS_REPLY_ARRAY, .elements = 1, .element = n_elem },
        ROLE_ERROR("NOPERM this user has no permissions to run the 'role' command"),
        { .type = REDIS_REPLY_ARRAY, .elements = 0 },
        { .type = REDIS_REPLY_ARRAY, .elements = 1, .element = i_elem },
        { .type = REDIS_REPLY_STATUS, .str = (char *)"master", .len = sizeof("master") - 1 },
    };

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char what[400] = "";
        bool got = store_role_is_primary(&replies[i], what, sizeof(what));

        UNIT_CHECK(want[i].name, got == want[i].primary, "primary %d, want %d (%s)", got,
                   want[i].primary, what);
        if (want[i].why != NULL)
            UNIT_CHECK(want[i].name, strstr(what, want[i].why) != NULL, "reason \"%s\", want "
                       "\"%s\" in it", what, want[i].why);
    }
}

/* The listing's cursors (store_list.c): NODE-SCAN-0, or NODE-SCAN-ID-END after a page cut a batch. */
static void check_list_cursor(void)
{
    static const struct {
        const char *cursor;
        bool valid;
    } cursors[] = {
        { "0", true },
        { "0-1536-0", true },
        { "2-18446744073709551615-0", true },
        { "0-1536-3", true },       /* an earlier release's count: read as nothing passed over */
        { "0-1536-9acc2a7218f05568c938e9f73467f97a-0", true },
        { "1-7-00000000000000000000000000000000-4096", true },
        { "", false },
        { "x", false },
        { "0-0", false },
        { "0--0", false },
        { "-0-0", false },
        { "1234567890-0-0", false },                        /* node: 9 digits at most */
        { "0-123456789012345678901234-0", false },          /* a SCAN cursor is 64-bit */
        { "0-0-1234567890", false },                        /* a count of 10 digits */
        { "0-0-9ACC2A7218F05568C938E9F73467F97A-0", false }, /* ids are lowercase */
        { "0-0-9acc2a7218f05568c938e9f73467f97-0", false },  /* 31 characters */
        { "0-0-9acc2a7218f05568c938e9f73467f97a", false },
        { "0-0-9acc2a7218f05568c938e9f73467f97a-", false },
        { "0-0-9acc2a7218f05568c938e9f73467f97a-0-1", false },
        { "0-0-9acc2a7218f05568c938e9f73467f97a-x", false },
    };

    for (size_t i = 0; i < sizeof(cursors) / sizeof(cursors[0]); i++)
        UNIT_CHECK(cursors[i].cursor, store_list_cursor_valid(cursors[i].cursor) ==
                   cursors[i].valid, "valid %d, want %d",
                   store_list_cursor_valid(cursors[i].cursor), cursors[i].valid);
    UNIT_CHECK("the longest cursor fits STORE_LIST_CURSOR_MAX",
               strlen("999999999-18446744073709551615-9acc2a7218f05568c938e9f73467f97a-"
                      "18446744073709551615") < STORE_LIST_CURSOR_MAX, "%d",
               STORE_LIST_CURSOR_MAX);
}

int main(void)
{
    check_role();
    check_list_cursor();
    check_cluster();
    check_replica_lag();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum store_reply_class got = store_reply_class(cases[i].reply, strlen(cases[i].reply));
        UNIT_CHECK(cases[i].reply, got == cases[i].want, "class %d, want %d (%s)", (int)got,
                   (int)cases[i].want, store_reply_class_name(cases[i].want));
        UNIT_CHECK(cases[i].reply, store_reply_class_refused(got) == cases[i].refused,
                   "refused %d, want %d", store_reply_class_refused(got), cases[i].refused);
    }
    /* only len bytes count: "READONLY" followed by more text in the buffer */
    UNIT_CHECK("length bounds the code", store_reply_class("READONLYX", 8) ==
               STORE_REPLY_NOT_PRIMARY, "READONLYX with len 8");
    UNIT_CHECK("NULL is a failed command", store_reply_class(NULL, 0) == STORE_REPLY_FAILED,
               "NULL");
    UNIT_DONE();
}
