/*
 * fingerprint.h - request fingerprints and claim owner tokens.
 *
 * The fingerprint tells "same request" from "same key, different request"
 * (draft-ietf-httpapi-idempotency-key-header-06 section 2.4). Record
 * identity is record_id.h's.
 */
#ifndef IDEM_FINGERPRINT_H
#define IDEM_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>


#define FINGERPRINT_HEX_LEN 32 /* chars, without the NUL */

/*
 * XXH3-128 over method, request-target (path with query) and the raw body
 * bytes (binary-safe; body may be NULL when len is 0). Writes 32 lowercase hex
 * chars and a NUL into hex (caller-owned, FINGERPRINT_HEX_LEN + 1 bytes).
 */
void fingerprint_request(const char *method, const char *target, const void *body, size_t len,
                         char *hex);

/* The fingerprint of routes with `fingerprint: none`: all zeros, matches itself. */
void fingerprint_none(char *hex);

/*
 * A claim's owner token as 32 hex chars + NUL: 64 random bits drawn once per
 * process and a 64-bit counter shared by its threads, so unique across
 * instances, threads and claims. Returns 0, or -1 when the OS has no randomness.
 */
int owner_token_create(char *hex);

#endif
