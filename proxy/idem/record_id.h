/*
 * record_id.h - record identity. The record id names the Redis record of
 * one idempotency key in one scope (docs/client-contract.md#how-a-request-is-handled);
 * the record key is where Redis keeps it.
 */
#ifndef IDEM_RECORD_ID_H
#define IDEM_RECORD_ID_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define RECORD_ID_HEX_LEN 32 /* chars, without the NUL */

/*
 * What record_id_compute hashes, and how. Part of the hashed input: any
 * change to the inputs or their encoding bumps it, and changes every
 * record id (docs/redis.md#records-and-key-layout). 0.1.0 hashed the route pattern (1).
 */
#define RECORD_ID_VERSION 2
#define RECORD_ID_VERSION_STRING "2" /* the same, as hashed */

/* Longest Redis key of a record, "PREFIX:{RECORD_ID}", plus its NUL, in bytes. */
#define RECORD_KEY_MAX (CONFIG_MAX_KEY_PREFIX + sizeof(":{}") - 1 + RECORD_ID_HEX_LEN + 1)

/*
 * The record id: SHA-256 (truncated to 128 bits) over, each unambiguously
 * delimited: "record-id-v" RECORD_ID_VERSION, the key source (source:
 * "header:<lowercased name>" or "json:<pointer>", route_policy.record_source),
 * the number of scope headers, each scope header's name (lowercased here)
 * and value (absent and empty differ), then the key bytes. Which route
 * matched is not part of it, so inserting or reordering routes keeps every
 * id; the fingerprint carries method, path and query, so one key on two
 * paths is a mismatch, not a replay (draft-ietf-httpapi-idempotency-key-
 * header-06 section 2.2 and 2.4). A cryptographic hash, so a client cannot
 * craft a key that lands on another scope's record; the raw key never
 * reaches Redis or the logs.
 * All strings borrowed, NUL-terminated; scope_values[i] may be NULL (header
 * absent); key is key_len bytes. hex: RECORD_ID_HEX_LEN + 1 bytes, caller-owned.
 * Keeps one digest context per thread (free it with fingerprint_thread_end);
 * aborts if OpenSSL cannot provide SHA-256, as no id is safe to make up.
 */
void record_id_compute(const char *source, char *const *scope_names,
                       const char *const *scope_values, size_t n_scope,
                       const char *key, size_t key_len, char *hex);

/*
 * The Redis key of a record, "PREFIX:{RECORD_ID}" (the braces make the id
 * the Redis Cluster hash tag), into out (caller-owned, outsize bytes, at
 * least RECORD_KEY_MAX). Never cuts: returns 0, or -1 (out set to "") when
 * prefix is longer than CONFIG_MAX_KEY_PREFIX, record_id is not
 * RECORD_ID_HEX_LEN chars, or the key does not fit outsize.
 */
int record_key_format(const char *prefix, const char *record_id, char *out, size_t outsize);

/* Free the calling thread's digest context; call as a thread that hashed ends. */
void record_id_thread_end(void);

#endif
