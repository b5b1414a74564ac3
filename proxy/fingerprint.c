/*
 * fingerprint.c - hashing for fingerprints (xxHash) and record ids (OpenSSL).
 */
#include "fingerprint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/evp.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

static void fingerprint_to_hex(const unsigned char *bytes, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 0xf];
    }
    hex[2 * n] = '\0';
}

void fingerprint_request(const char *method, const char *target, const void *body, size_t len,
                         char *hex)
{
    XXH3_state_t state;
    XXH128_canonical_t canon;

    /* NUL separators: neither a method nor a request-target can contain one. */
    XXH3_128bits_reset(&state);
    XXH3_128bits_update(&state, method, strlen(method) + 1);
    XXH3_128bits_update(&state, target, strlen(target) + 1);
    if (len > 0)
        XXH3_128bits_update(&state, body, len);
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&state));
    fingerprint_to_hex(canon.digest, sizeof(canon.digest), hex);
}

void fingerprint_none(char *hex)
{
    memset(hex, '0', FINGERPRINT_HEX_LEN);
    hex[FINGERPRINT_HEX_LEN] = '\0';
}

/*
 * Fetched once, reused: an implicit fetch and a context per call cost more
 * than the hash. The algorithm is shared (OpenSSL's EVP_MD is thread-safe);
 * a context is per thread.
 */
static EVP_MD *fingerprint_sha256;
static pthread_once_t fingerprint_sha256_once = PTHREAD_ONCE_INIT;
static _Thread_local EVP_MD_CTX *fingerprint_ctx;

static void fingerprint_fetch_sha256(void)
{
    fingerprint_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void fingerprint_thread_end(void)
{
    EVP_MD_CTX_free(fingerprint_ctx);
    fingerprint_ctx = NULL;
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

    pthread_once(&fingerprint_sha256_once, fingerprint_fetch_sha256);
    if (fingerprint_ctx == NULL)
        fingerprint_ctx = EVP_MD_CTX_new();
    ctx = fingerprint_ctx;
    if (fingerprint_sha256 == NULL || ctx == NULL ||
        EVP_DigestInit_ex(ctx, fingerprint_sha256, NULL) != 1) {
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
    fingerprint_to_hex(digest, RECORD_ID_HEX_LEN / 2, hex);
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

/*
 * 64 random bits drawn once per process, then a counter every thread draws
 * from atomically: unique across instances, threads and requests without a
 * system call per claim. Two threads must never get one token: the claim's
 * compare-and-set tells owners apart by it.
 */
static unsigned char owner_prefix[8];
static int owner_prefix_ok;
static pthread_once_t owner_prefix_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t owner_counter;

static void owner_draw_prefix(void)
{
    owner_prefix_ok = getrandom(owner_prefix, sizeof(owner_prefix), 0) == (ssize_t)sizeof(owner_prefix);
}

int owner_token_create(char *hex)
{
    unsigned char bytes[16];
    uint64_t counter;

    pthread_once(&owner_prefix_once, owner_draw_prefix);
    if (!owner_prefix_ok)
        return -1;
    counter = ++owner_counter;
    memcpy(bytes, owner_prefix, sizeof(owner_prefix));
    for (int i = 0; i < 8; i++)
        bytes[8 + i] = (unsigned char)(counter >> (56 - 8 * i));
    fingerprint_to_hex(bytes, sizeof(bytes), hex);
    return 0;
}
