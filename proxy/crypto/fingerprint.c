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

#include "hex.h"

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
    hex_lower(canon.digest, sizeof(canon.digest), hex);
}

void fingerprint_none(char *hex)
{
    memset(hex, '0', FINGERPRINT_HEX_LEN);
    hex[FINGERPRINT_HEX_LEN] = '\0';
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
    hex_lower(bytes, sizeof(bytes), hex);
    return 0;
}
