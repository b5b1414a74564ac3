/*
 * record_id.c - record identity: the record id of one idempotency key in
 * one scope, and its Redis key (record_id.h).
 */
#include "record_id.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "hex.h"

/*
 * Fetched once, reused: an implicit fetch and a context per call cost more
 * than the hash. The algorithm is shared (OpenSSL's EVP_MD is thread-safe);
 * a context is per thread.
 */
static EVP_MD *record_id_sha256;
static pthread_once_t record_id_sha256_once = PTHREAD_ONCE_INIT;
static _Thread_local EVP_MD_CTX *record_id_ctx;

static void record_id_fetch_sha256(void)
{
    record_id_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void record_id_thread_end(void)
{
    EVP_MD_CTX_free(record_id_ctx);
    record_id_ctx = NULL;
}

/* Feeds s lowercased (ASCII) and its NUL: header names are case-insensitive (RFC 9110 5.1). */
static void record_id_update_lower(EVP_MD_CTX *ctx, const char *s)
{
    char chunk[64];
    size_t n = 0;

    for (;; s++) {
        char c = *s;

        chunk[n++] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
        if (c == '\0' || n == sizeof(chunk)) {
            EVP_DigestUpdate(ctx, chunk, n);
            n = 0;
        }
        if (c == '\0')
            return;
    }
}

void record_id_compute(const char *source, char *const *scope_names,
                       const char *const *scope_values, size_t n_scope,
                       const char *key, size_t key_len, char *hex)
{
    _Static_assert(RECORD_ID_VERSION == 2, "RECORD_ID_VERSION_STRING says the same");
    /* "record-id-vN" and the scope count in decimal, each with its NUL, without snprintf */
    static const char version[] = "record-id-v" RECORD_ID_VERSION_STRING;
    EVP_MD_CTX *ctx;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    char count[24];
    size_t count_at = sizeof(count) - 1, n = n_scope;

    pthread_once(&record_id_sha256_once, record_id_fetch_sha256);
    if (record_id_ctx == NULL)
        record_id_ctx = EVP_MD_CTX_new();
    ctx = record_id_ctx;
    if (record_id_sha256 == NULL || ctx == NULL ||
        EVP_DigestInit_ex(ctx, record_id_sha256, NULL) != 1) {
        /* no id is better than a wrong one shared by every key */
        fputs("record_id_compute: OpenSSL SHA-256 unavailable\n", stderr);
        abort();
    }
    /* version and scope count first: every later field is then NUL-delimited or last */
    EVP_DigestUpdate(ctx, version, sizeof(version));
    EVP_DigestUpdate(ctx, source, strlen(source) + 1);
    count[count_at] = '\0';
    do {
        count[--count_at] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    EVP_DigestUpdate(ctx, count + count_at, sizeof(count) - count_at);
    for (size_t i = 0; i < n_scope; i++) {
        record_id_update_lower(ctx, scope_names[i]);
        /* "0" for an absent header, "1value\0" for a present one */
        if (scope_values[i] == NULL) {
            EVP_DigestUpdate(ctx, "0", 1);
        } else {
            EVP_DigestUpdate(ctx, "1", 1);
            EVP_DigestUpdate(ctx, scope_values[i], strlen(scope_values[i]) + 1);
        }
    }
    EVP_DigestUpdate(ctx, key, key_len);
    EVP_DigestFinal_ex(ctx, digest, &digest_len);
    hex_lower(digest, RECORD_ID_HEX_LEN / 2, hex);
}

_Static_assert(RECORD_KEY_MAX == CONFIG_MAX_KEY_PREFIX + 3 + RECORD_ID_HEX_LEN + 1,
               "a record key buffer holds the longest prefix, ':{', the id, '}' and a NUL");

int record_key_format(const char *prefix, const char *record_id, char *out, size_t outsize)
{
    size_t prefix_len = strlen(prefix), id_len = strlen(record_id);

    if (outsize == 0)
        return -1;
    out[0] = '\0';
    if (prefix_len > CONFIG_MAX_KEY_PREFIX || id_len != RECORD_ID_HEX_LEN ||
        prefix_len + 2 + id_len + 2 > outsize)
        return -1;
    /* "PREFIX:{ID}" */
    memcpy(out, prefix, prefix_len);
    memcpy(out + prefix_len, ":{", 2);
    memcpy(out + prefix_len + 2, record_id, id_len);
    memcpy(out + prefix_len + 2 + id_len, "}", 2);
    return 0;
}
