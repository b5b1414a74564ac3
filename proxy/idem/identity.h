/*
 * identity.h - the record a protected request maps to: its record id and
 * Redis key, made from the route's key source and scope header values, the
 * idempotency key and redis.key_prefix (record_id_compute and
 * record_key_format, record_id.h). Pure. The admin lookup (`record-id`,
 * GET /records/lookup) computes it here, from the same inputs as the
 * exchange's identity step (exchange_claim.c), so that it lands on the
 * record a request with that key claims.
 */
#ifndef IDEM_IDENTITY_H
#define IDEM_IDENTITY_H

#include <stddef.h>

#include "config.h"
#include "fingerprint.h"
#include "record_id.h"

struct evkeyvalq;

/*
 * The record id (RECORD_ID_HEX_LEN hex chars and a NUL into record_id,
 * caller-owned RECORD_ID_HEX_LEN + 1 bytes) and Redis key ("PREFIX:{ID}"
 * into record_key, record_key_size bytes, at least RECORD_KEY_MAX) of the
 * request that policy (a route of cfg) protects with key (key_len bytes):
 * each of policy's scope headers is read from headers (classify refuses one
 * sent twice), and a header the request does not carry counts as absent,
 * which is a scope of its own (classify refuses it only under
 * scope_required). Returns 0,
 * or -1 when record_key is too small (config_load bounds key_prefix so
 * that RECORD_KEY_MAX always fits). Borrows everything.
 */
int identity_compute(const struct config *cfg, const struct route_policy *policy,
                     const struct evkeyvalq *headers, const char *key, size_t key_len,
                     char *record_id, char *record_key, size_t record_key_size);

#endif
