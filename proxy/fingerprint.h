/*
 * fingerprint.h - request fingerprints and record ids.
 *
 * The fingerprint tells "same request" from "same key, different request"
 * (draft-ietf-httpapi-idempotency-key-header-06 section 2.4). The record id
 * names the Redis record of one idempotency key in one scope (CONTRACT 5).
 */
#ifndef IDEM_FINGERPRINT_H
#define IDEM_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#define FINGERPRINT_HEX_LEN 32 /* chars, without the NUL */
#define RECORD_ID_HEX_LEN 32

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
 * The record id: SHA-256 (truncated to 128 bits) over the route pattern, the
 * scope header values (absent and empty differ) and the key bytes. A
 * cryptographic hash, so a client cannot craft a key that lands on another
 * scope's record; the raw key never reaches Redis or the logs.
 * scope_values[i] may be NULL (header absent). hex: RECORD_ID_HEX_LEN + 1 bytes.
 * Keeps one digest context per thread (free it with fingerprint_thread_end);
 * aborts if OpenSSL cannot provide SHA-256, as no id is safe to make up.
 */
void record_id_compute(const char *route, const char *const *scope_values, size_t n_scope,
                       const char *key, size_t key_len, char *hex);

/* Free the calling thread's digest context; call as a thread that hashed ends. */
void fingerprint_thread_end(void);

/*
 * A claim's owner token as 32 hex chars + NUL: 64 random bits drawn once per
 * process and a 64-bit counter shared by its threads, so unique across
 * instances, threads and claims. Returns 0, or -1 when the OS has no randomness.
 */
int owner_token_create(char *hex);

#endif
