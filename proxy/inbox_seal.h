/*
 * inbox_seal.h - a queued delivery's header fields and body, sealed
 * (seal.h) in the stream entry under the keyring, and opened again when the
 * entry is read: the one place the inbox encrypts and decrypts. The retries,
 * payloads and dead letters copy the entry's fields, so they hold the same
 * sealed value.
 *
 * With a keyring an entry carries, instead of its "body" and "h:<name>"
 * fields, two fields:
 *
 *   "key"     the key id that sealed it (readable: an operator sees which
 *             key a queued delivery still needs)
 *   "sealed"  one seal.h value of: the header count (u32), each header
 *             field (u16 name length, name, u32 value length, value), then
 *             the body (the rest); all big-endian
 *
 * bound to {"delivery", the route's path, the event id, "ID1" (this
 * format's version)}: a value copied to another route or another event
 * fails to open. Event id, method, target, client address and times stay
 * readable (the admin endpoints list them; the event id is the record's key).
 */
#ifndef IDEM_INBOX_SEAL_H
#define IDEM_INBOX_SEAL_H

#include <stddef.h>

#include "keyring.h"

struct evkeyvalq;

/*
 * Seal the fields of headers that header_is_queued keeps, and the body (len
 * bytes, may be NULL when 0), of a delivery of event_id on the route with
 * path route_path, under kr's encrypting key (all borrowed). *out: a new
 * malloc'd value of *out_len bytes (the caller frees). Returns 0, or -1
 * (out of memory, a field too long, sealing failed).
 */
int inbox_seal(const struct keyring *kr, const char *route_path, const char *event_id,
               const struct evkeyvalq *headers, const char *body, size_t len,
               char **out, size_t *out_len);

/*
 * Open value (len bytes, as inbox_seal made it) of event_id on the route
 * with path route_path with kr (NULL: no keyring): its header fields are
 * added to headers (caller-owned), *body gets a new malloc'd copy of the
 * body (*body_len bytes; the caller frees). key_id (caller-owned,
 * KEYRING_ID_MAX + 1 bytes) gets the value's key id. Returns SEAL_OK,
 * SEAL_KEY_UNAVAILABLE or SEAL_UNREADABLE (seal.h; nothing added then), or
 * -1 when out of memory.
 */
int inbox_seal_open(const struct keyring *kr, const char *route_path, const char *event_id,
                    const char *value, size_t len, struct evkeyvalq *headers, char **body,
                    size_t *body_len, char *key_id);

#endif
