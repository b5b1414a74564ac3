/* Fingerprints (XXH3-128 over method, target, body), record ids (SHA-256), owner tokens. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "record_id.h"
#include "unit.h"

/*
 * record_id_compute("header:idempotency-key", [Authorization], ["Bearer one"], "k1"),
 * which is SHA-256("record-id-v2\0header:idempotency-key\0" "1\0" "authorization\0"
 * "1Bearer one\0" "k1") cut to 16 bytes (checked with Python hashlib).
 */
#define PINNED_RECORD_ID "eebfd798fc4c276e7615f6b0f78b792d"
/* fingerprint_request("POST", "/v1/payments", {"a":1}) */
#define PINNED_FINGERPRINT "0f7b48206eb802db104c71e8f6938e0e"

static void fp(const char *method, const char *target, const void *body, size_t len, char *out)
{
    fingerprint_request(method, target, body, len, out);
}

/* Owner tokens drawn by worker threads at once (server.c runs one event loop per thread). */
#define TOKEN_THREADS 4
#define TOKENS_PER_THREAD 20000

static char tokens[TOKEN_THREADS * TOKENS_PER_THREAD][33];

static void *draw_tokens(void *arg)
{
    char (*mine)[33] = arg;

    for (int i = 0; i < TOKENS_PER_THREAD; i++)
        if (owner_token_create(mine[i]) != 0)
            mine[i][0] = '\0';
    return NULL;
}

static int token_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Returns the number of duplicate or failed tokens. */
static int tokens_from_threads(void)
{
    pthread_t t[TOKEN_THREADS];
    int bad = 0;

    for (int i = 0; i < TOKEN_THREADS; i++)
        pthread_create(&t[i], NULL, draw_tokens, tokens[i * TOKENS_PER_THREAD]);
    for (int i = 0; i < TOKEN_THREADS; i++)
        pthread_join(t[i], NULL);
    qsort(tokens, TOKEN_THREADS * TOKENS_PER_THREAD, sizeof(tokens[0]), token_cmp);
    for (int i = 0; i < TOKEN_THREADS * TOKENS_PER_THREAD; i++)
        if (strlen(tokens[i]) != 32 || (i > 0 && strcmp(tokens[i], tokens[i - 1]) == 0))
            bad++;
    return bad;
}

int main(void)
{
    char a[33], b[33];
    static const unsigned char bin1[] = { 0, 1, 2, 0, 255 }, bin2[] = { 0, 1, 2, 0, 254 };

    fp("POST", "/v1/payments", "{\"a\":1}", 7, a);
    fp("POST", "/v1/payments", "{\"a\":1}", 7, b);
    UNIT_CHECK("same request, same fingerprint", strcmp(a, b) == 0, "%s vs %s", a, b);
    UNIT_CHECK("fingerprint is 32 hex chars", strlen(a) == 32 && strspn(a, "0123456789abcdef") == 32,
               "%s", a);
    fp("POST", "/v1/payments", "{\"a\":2}", 7, b);
    UNIT_CHECK("body changes the fingerprint", strcmp(a, b) != 0, "equal");
    fp("PATCH", "/v1/payments", "{\"a\":1}", 7, b);
    UNIT_CHECK("method changes the fingerprint", strcmp(a, b) != 0, "equal");
    fp("POST", "/v1/payments?x=1", "{\"a\":1}", 7, b);
    UNIT_CHECK("query changes the fingerprint", strcmp(a, b) != 0, "equal");
    fp("POST", "/v1/payment", "s{\"a\":1}", 8, b);
    UNIT_CHECK("path/body boundary is unambiguous", strcmp(a, b) != 0, "equal");
    fp("POST", "/", bin1, sizeof(bin1), a);
    fp("POST", "/", bin2, sizeof(bin2), b);
    UNIT_CHECK("binary bodies after a NUL still count", strcmp(a, b) != 0, "equal");
    fp("POST", "/", NULL, 0, a);
    fp("POST", "/", "", 0, b);
    UNIT_CHECK("empty body, NULL or not", strcmp(a, b) == 0, "differ");
    fingerprint_none(a);
    UNIT_CHECK("none is all zeros", strcmp(a, "00000000000000000000000000000000") == 0, "%s", a);

    char *auth[] = { "Authorization" }, *auth_lower[] = { "authorization" },
         *tenant[] = { "X-Tenant" };
    const char *scope1[] = { "Bearer one" }, *scope2[] = { "Bearer two" }, *absent[] = { NULL },
               *empty[] = { "" };
    const char *src = "header:idempotency-key";
    record_id_compute(src, auth, scope1, 1, "k1", 2, a);
    record_id_compute(src, auth, scope1, 1, "k1", 2, b);
    UNIT_CHECK("record id is stable", strcmp(a, b) == 0, "differ");
    record_id_compute(src, auth, scope2, 1, "k1", 2, b);
    UNIT_CHECK("scope value separates records", strcmp(a, b) != 0, "equal");
    record_id_compute("json:/id", auth, scope1, 1, "k1", 2, b);
    UNIT_CHECK("key source separates records", strcmp(a, b) != 0, "equal");
    record_id_compute("header:x-request-id", auth, scope1, 1, "k1", 2, b);
    UNIT_CHECK("key header separates records", strcmp(a, b) != 0, "equal");
    record_id_compute(src, tenant, scope1, 1, "k1", 2, b);
    UNIT_CHECK("scope header name separates records", strcmp(a, b) != 0, "equal");
    record_id_compute(src, auth_lower, scope1, 1, "k1", 2, b);
    UNIT_CHECK("scope header names are case-insensitive", strcmp(a, b) == 0, "differ");
    record_id_compute(src, auth, scope1, 1, "K1", 2, b);
    UNIT_CHECK("keys are case-sensitive", strcmp(a, b) != 0, "equal");
    /* absent Authorization + key "k1" vs no scope header + key "0k1": the count tells them apart */
    record_id_compute(src, auth, absent, 1, "k1", 2, a);
    record_id_compute(src, NULL, NULL, 0, "0k1", 3, b);
    UNIT_CHECK("scope count is part of the id", strcmp(a, b) != 0, "equal");
    record_id_compute(src, auth, absent, 1, "k1", 2, a);
    record_id_compute(src, auth, empty, 1, "k1", 2, b);
    UNIT_CHECK("absent and empty scope header differ", strcmp(a, b) != 0, "equal");
    /* a key made of hex digits could show through a hex id; it must not */
    record_id_compute(src, NULL, NULL, 0, "0123456789abcdef0123", 20, a);
    UNIT_CHECK("record id hides the key", strlen(a) == RECORD_ID_HEX_LEN &&
               strstr(a, "0123456789abcdef0123") == NULL, "%s", a);

    /*
     * Pinned values: a change here changes every record id in every deployed
     * Redis (retries of earlier keys execute again). Only change them with
     * RECORD_ID_VERSION and the README's "Redis records" section.
     */
    UNIT_CHECK("record id version", RECORD_ID_VERSION == 2, "%d", RECORD_ID_VERSION);
    record_id_compute(src, auth, scope1, 1, "k1", 2, a);
    UNIT_CHECK("pinned record id", strcmp(a, PINNED_RECORD_ID) == 0, "%s", a);
    fp("POST", "/v1/payments", "{\"a\":1}", 7, a);
    UNIT_CHECK("pinned fingerprint", strcmp(a, PINNED_FINGERPRINT) == 0, "%s", a);

    char key[RECORD_KEY_MAX], prefix[CONFIG_MAX_KEY_PREFIX + 2];
    memset(prefix, 'p', sizeof(prefix) - 1);
    prefix[sizeof(prefix) - 1] = '\0';
    UNIT_CHECK("record key is PREFIX:{ID}",
               record_key_format("idem", PINNED_RECORD_ID, key, sizeof(key)) == 0 &&
               strcmp(key, "idem:{" PINNED_RECORD_ID "}") == 0, "%s", key);
    UNIT_CHECK("record key refuses a prefix over the limit",
               record_key_format(prefix, PINNED_RECORD_ID, key, sizeof(key)) == -1 && key[0] == '\0',
               "%s", key);
    prefix[CONFIG_MAX_KEY_PREFIX] = '\0';
    UNIT_CHECK("record key of the longest prefix fits RECORD_KEY_MAX",
               record_key_format(prefix, PINNED_RECORD_ID, key, sizeof(key)) == 0 &&
               strlen(key) == RECORD_KEY_MAX - 1, "%zu", strlen(key));
    UNIT_CHECK("record key never cuts",
               record_key_format("idem", PINNED_RECORD_ID, key, 20) == -1 && key[0] == '\0',
               "%s", key);
    UNIT_CHECK("record key needs a whole id",
               record_key_format("idem", "abc", key, sizeof(key)) == -1, "%s", key);

    UNIT_CHECK("owner token", owner_token_create(a) == 0 && strlen(a) == 32, "failed");
    owner_token_create(b);
    UNIT_CHECK("owner tokens differ", strcmp(a, b) != 0, "equal");
    int bad = tokens_from_threads();
    UNIT_CHECK("owner tokens of 4 threads at once are all distinct", bad == 0,
               "%d duplicate or failed of %d", bad, TOKEN_THREADS * TOKENS_PER_THREAD);
    record_id_thread_end();
    UNIT_DONE();
}
