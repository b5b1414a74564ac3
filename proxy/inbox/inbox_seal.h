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
 * bound (seal.h associated data) to {"delivery", the route's name as
 * written (a prefix route's with its '*'), the event id, the method, the
 * target, the record id, "ID2" (this format's version)}: a value copied to
 * another route, event, method, target or record fails to open. The
 * header fields are inside the sealed value, so no "h:" field may stand
 * beside it (inbox_delivery.c refuses such an entry). Event id, record id,
 * method, target, client address and times stay readable (the admin
 * endpoints list them; the event id is the record's key).
 *
 * Version ID1 (0.4.0) was bound to {"delivery", the route's path, the
 * event id, "ID1"} only; it is opened only when the caller says so
 * (encryption.accept_plaintext_until, docs/data-protection.md).
 */
#ifndef IDEM_INBOX_SEAL_H
#define IDEM_INBOX_SEAL_H

#include <stdbool.h>
#include <stddef.h>

#include "keyring.h"

struct evkeyvalq;

/* Most associated data items of a delivery's seal. */
#define INBOX_SEAL_AAD_MAX 7

/* What a delivery's seal is bound to; every string borrowed, NUL-terminated ("" when absent). */
struct inbox_seal_bind {
    const char *route_name;     /* the route as written, a prefix route's with '*' (ID2) */
    const char *route_path;     /* the route's path, without '*' (ID1 only) */
    const char *event;          /* the event id */
    const char *method;
    const char *target;         /* origin-form, as the entry's "target" field */
    const char *record;         /* the record id, as the entry's "record" field */
};

/*
 * Seal the fields of headers that header_is_queued keeps, and the body (len
 * bytes, may be NULL when 0), of the delivery b describes, as ID2, under
 * kr's encrypting key (all borrowed). *out: a new
 * malloc'd value of *out_len bytes (the caller frees). Returns 0, or -1
 * (out of memory, a field too long, sealing failed).
 */
int inbox_seal(const struct keyring *kr, const struct inbox_seal_bind *b,
               const struct evkeyvalq *headers, const char *body, size_t len,
               char **out, size_t *out_len);

/*
 * Open value (len bytes, as inbox_seal made it) of the delivery b
 * describes with kr (NULL: no keyring); accept_id1: an ID1 value bound to
 * b's route path and event id opens too. Its header fields are
 * added to headers (caller-owned), *body gets a new malloc'd copy of the
 * body (*body_len bytes; the caller frees). key_id (caller-owned,
 * KEYRING_ID_MAX + 1 bytes) gets the value's key id. Returns SEAL_OK,
 * SEAL_KEY_UNAVAILABLE or SEAL_UNREADABLE (seal.h; nothing added then), or
 * -1 when out of memory.
 */
int inbox_seal_open(const struct keyring *kr, const struct inbox_seal_bind *b, bool accept_id1,
                    const char *value, size_t len, struct evkeyvalq *headers, char **body,
                    size_t *body_len, char *key_id);

#endif
