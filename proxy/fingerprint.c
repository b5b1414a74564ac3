/*
 * fingerprint.c - hashing for fingerprints (xxHash) and record ids (OpenSSL).
 */
#include "fingerprint.h"

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

void record_id_compute(const char *route, const char *const *scope_values, size_t n_scope,
                       const char *key, size_t key_len, char *hex)
{
    /* fetched once, reused: an implicit fetch and a context per call cost more than the hash */
    static EVP_MD *sha256;
    static EVP_MD_CTX *ctx;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;

    if (sha256 == NULL)
        sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (ctx == NULL)
        ctx = EVP_MD_CTX_new();
    if (sha256 == NULL || ctx == NULL || EVP_DigestInit_ex(ctx, sha256, NULL) != 1) {
        /* no id is better than a wrong one shared by every key */
        fputs("record_id_compute: OpenSSL SHA-256 unavailable\n", stderr);
        abort();
    }
    EVP_DigestUpdate(ctx, route, strlen(route) + 1);
    for (size_t i = 0; i < n_scope; i++) {
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

int owner_token_create(char *hex)
{
    /*
     * 64 random bits drawn once per process, then a counter: unique across
     * instances and requests without a system call per claim.
     */
    static unsigned char prefix[8];
    static uint64_t counter;
    static int seeded;
    unsigned char bytes[16];

    if (!seeded) {
        if (getrandom(prefix, sizeof(prefix), 0) != (ssize_t)sizeof(prefix))
            return -1;
        seeded = 1;
    }
    counter++;
    memcpy(bytes, prefix, sizeof(prefix));
    for (int i = 0; i < 8; i++)
        bytes[8 + i] = (unsigned char)(counter >> (56 - 8 * i));
    fingerprint_to_hex(bytes, sizeof(bytes), hex);
    return 0;
}
