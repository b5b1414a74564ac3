/*
 * record.h - the Redis record of one idempotency key, and its codec.
 *
 * One Redis string per record (docs/client-contract.md#how-a-request-is-handled). A head
 * that the Lua compare-and-set scripts can read by offset (state and owner
 * token at the same offsets in every version), then the stored answer.
 *
 * Format version 2, "IR2", what the proxy writes for a fingerprint made
 * under `fingerprint: request` or `none` (so that a release before IR3
 * reads it):
 *
 *   off    len  field
 *   0      3    "IR2"                magic + version
 *   3      1    state                C claimed, D done, U outcome unknown, T tombstone,
 *                                    R resolved (an operator's answer, replayed like D;
 *                                    written since 0.5: earlier releases refuse to read it)
 *   4      32   owner token          hex; Lua reads string.sub(v, 5, 36)
 *   36     32   fingerprint          hex (HMAC under the key id's key, or XXH3-128 without)
 *   68     16   lease deadline       ms since the epoch, zero-padded decimal
 *   84     16   created              ms since the epoch
 *   100    16   completed            ms since the epoch, 0 while claimed
 *   116    1    answer               'P' plaintext, 'S' sealed (seal.h)
 *   117    2    L                    key id length, decimal 00..32
 *   119    4    R                    route name length, decimal 0000..RECORD_ROUTE_MAX
 *   123    L    key id               the keyring key that made the fingerprint; "" unkeyed
 *   123+L  R    route name           the route's path as written (logs, admin listing)
 *   H=123+L+R   answer               a claim has none (0 bytes); else the answer below,
 *                                    as is ('P') or as one sealed value ('S')
 *
 * The answer: status (3 decimal digits), header count (5 decimal digits),
 * the headers (each: u16 name length, name, u32 value length, value,
 * big-endian), then the body (the rest, raw bytes). A sealed answer is
 * bound (seal.h associated data) to {"record", the Redis key, the head's H
 * bytes}: the fingerprint, the key id, the format version and every other
 * head field, so a value copied under another key, or a head changed in
 * Redis, fails to open.
 *
 * Format version 3, "IR3", what the proxy writes for a fingerprint made
 * under `fingerprint: json` or `form` (written since 0.5.0; earlier
 * releases refuse to read it): IR2's fixed fields at IR2's offsets (0..122, the magic
 * "IR3"), then
 *
 *   123    1    fingerprint mode     'J' json, 'F' form (how the fingerprint was made)
 *   124    4    G                    bytes of the ignore list, decimal 0000..RECORD_IGNORE_MAX
 *   128    L    key id
 *   128+L  R    route name
 *   128+L+R G   ignore list          the route's fingerprint_ignore when the fingerprint
 *                                    was made: each pointer as 3 decimal digits of its
 *                                    length (1..CONFIG_MAX_IGNORE_POINTER) and its bytes,
 *                                    at most CONFIG_MAX_FINGERPRINT_IGNORE; none for 'F'
 *   H=128+L+R+G answer               as IR2's
 *
 * A retry is fingerprinted the way its record's was: its mode, its ignore
 * list, its key id (canonical.h), whatever its route says since a reload.
 * The sealed answer is bound to the whole head, the mode and list included.
 *
 * Format version 1, "IR1", written before keyrings, still decoded (a record
 * lives for its retention) and never written:
 *
 *   0 "IR1", 3 state, 4 owner, 36 fingerprint (XXH3-128), 68 lease deadline,
 *   84 created, 100 completed, 116 status (3), 119 header count (5),
 *   124 headers, then the body: the answer in plaintext.
 */
#ifndef IDEM_RECORD_H
#define IDEM_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "canonical.h"
#include "keyring.h"

#define RECORD_HEAD_LEN 124     /* IR1's head */
#define RECORD_HEAD2_LEN 123    /* IR2's fixed part, before key id and route name */
#define RECORD_HEAD3_LEN 128    /* IR3's fixed part: IR2's, the mode and the ignore list's length */
/* Longest ignore list an IR3 head holds, bytes */
#define RECORD_IGNORE_MAX (CONFIG_MAX_FINGERPRINT_IGNORE * (3 + CONFIG_MAX_IGNORE_POINTER))
#define RECORD_ROUTE_MAX 4096   /* longest route name kept, bytes (longer ones are cut) */
#define RECORD_STATE_OFFSET 3   /* the Lua scripts of store.c read these two by offset */
#define RECORD_OWNER_OFFSET 4
#define RECORD_OWNER_LEN 32
#define RECORD_MAX_HEADERS 128

enum record_state {
    RECORD_CLAIMED = 'C',
    RECORD_DONE = 'D',
    RECORD_UNKNOWN = 'U',
    RECORD_TOMBSTONE = 'T',
    RECORD_RESOLVED = 'R',  /* done by an operator's resolve: replays like D */
};

struct record_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};

/* A record view. Decoding points name/value/body into the input buffer (no copies). */
struct record {
    enum record_state state;
    char owner[33];
    char fingerprint[33];
    uint64_t lease_deadline_ms;
    uint64_t created_ms;
    uint64_t completed_ms;
    int status;
    size_t n_headers;
    struct record_field headers[RECORD_MAX_HEADERS];
    const char *body;
    size_t body_len;          /* bytes */
    int version;              /* 1, 2 or 3: the format it was decoded from (record_init: 2;
                                 encoding writes 3 for a json or form basis) */
    char key_id[KEYRING_ID_MAX + 1]; /* the key of the fingerprint; "": unkeyed (IR1 too) */
    struct fingerprint_basis basis; /* how the fingerprint was made: IR3's mode and ignore
                                 list (pointers borrow the input); request for IR1 and IR2 */
    const char *route;        /* the route's name (route_len bytes, not NUL-terminated);
                                 IR1: "" */
    size_t route_len;
    /*
     * A decoded IR2 record whose answer is sealed: the sealed value
     * (borrowing the input) and the head it is bound to; status, headers
     * and body stay empty until record_open. NULL otherwise.
     */
    const unsigned char *sealed;
    size_t sealed_len;
    const char *head;         /* the encoded head (head_len bytes) of a decoded record */
    size_t head_len;
};

struct evkeyvalq;

/*
 * Start rec as a record of state for the claim of owner (32 hex chars) on a
 * request with fingerprint (32 hex chars), created at created_ms (ms since
 * the epoch); its basis `request`; every other field zero.
 */
void record_init(struct record *rec, enum record_state state, const char *owner,
                 const char *fingerprint, uint64_t created_ms);

/*
 * Fill rec (from record_init) with an upstream answer (docs/client-contract.md#how-a-request-is-handled): status, the stored fields of headers (not
 * hop-by-hop, not named by Connection, see header_is_stored) and the body
 * (body_len bytes). An answer over max_stored bytes, or with more than
 * RECORD_MAX_HEADERS stored fields, or with a field the codec cannot hold
 * (a name over 65,535 bytes), makes rec a tombstone without fields or body. rec borrows headers and body. Returns the state written.
 */
enum record_state record_set_answer(struct record *rec, int status,
                                    const struct evkeyvalq *headers, const char *body,
                                    size_t body_len, size_t max_stored);

/*
 * Encode rec as an IR2 record (an IR3 one when rec->basis is json or form;
 * so throughout below) into a new malloc'd buffer of *len bytes: the one
 * entry point that writes records (claims, answers, an operator's
 * resolution). With a keyring kr (borrowed; NULL: none) and an answer (any
 * state but claimed), the answer is sealed under kr's encrypting key, bound
 * to record_key (the record's Redis key, borrowed) and the head; without
 * one it is stored as is. rec->key_id names the key of rec->fingerprint
 * ("" for an unkeyed one) whatever key seals. Counts KEYRING_SEALED.
 * Returns NULL when rec is unencodable (record_encode), sealing fails, or
 * out of memory.
 */
char *record_encode_alloc(const struct record *rec, const struct keyring *kr,
                          const char *record_key, size_t *len);

/* Bytes record_encode will write for rec (a plaintext IR2 or IR3 record). */
size_t record_encoded_size(const struct record *rec);

/*
 * Encode rec as a plaintext IR2 (IR3) record into out (caller-owned,
 * record_encoded_size(rec) bytes). Returns the bytes written, or 0 when rec
 * cannot be encoded (too many headers, a field too long, status outside
 * 0..999, bad token lengths, a key id over KEYRING_ID_MAX, an ignore list
 * out of its bounds or beside a mode other than json).
 */
size_t record_encode(const struct record *rec, char *out);

/*
 * Set rec's route name to name (borrowed, NUL-terminated; must outlive
 * rec), cut to RECORD_ROUTE_MAX bytes.
 */
void record_set_route(struct record *rec, const char *name);

/*
 * Open the sealed answer of a decoded record (rec->sealed) with kr
 * (borrowed; NULL: no keyring), bound to record_key (borrowed): status,
 * headers and body then point into *plain, a malloc'd buffer the caller
 * frees with record_plain_free once done with rec. A record without a
 * sealed answer returns SEAL_OK at once (*plain NULL). Returns SEAL_OK,
 * SEAL_KEY_UNAVAILABLE (the value's key id, in *key_id, caller-owned
 * KEYRING_ID_MAX + 1 bytes, is not in kr, or there is no keyring) or
 * SEAL_UNREADABLE (authentication failed, or the plaintext is not an
 * answer); *plain is NULL then. -1 when out of memory.
 */
int record_open(struct record *rec, const struct keyring *kr, const char *record_key,
                char **plain, char *key_id);

/*
 * Whether decoded rec is not sealed: an IR1 record (any state: written
 * before keyrings), or an IR2 or IR3 record that holds an answer (any state
 * but claimed) stored as is. Under a keyring such a record was written before
 * it, or forged or downgraded in Redis (docs/data-protection.md). Pure.
 */
bool record_plaintext(const struct record *rec);

/* Wipe and free a plaintext record_open made (plain_len: rec->sealed_len). NULL is fine. */
void record_plain_free(char *plain, size_t plain_len);

/*
 * Decode len bytes at buf (IR1, IR2 or IR3) into *rec; rec's pointers borrow
 * buf, which must outlive rec. A sealed answer is not opened (rec->sealed,
 * record_open), so the head alone needs no keyring. Returns 0, or -1 for
 * anything that is not a well-formed record.
 */
int record_decode(const char *buf, size_t len, struct record *rec);

#define RECORD_ETAG_LEN 34      /* chars of a record's entity tag, quotes included */

/*
 * The entity tag of a record's Redis value (len bytes at value, any bytes,
 * decodable or not): the XXH3-128 of the whole value as 32 lowercase hex
 * characters between double quotes, a strong validator (RFC 9110 section
 * 8.8.3): any change of the value changes it, and its time to live is not
 * part of it. Written NUL-terminated into out (caller-owned,
 * RECORD_ETAG_LEN + 1 bytes). Pure.
 */
void record_etag(const char *value, size_t len, char *out);

#endif
