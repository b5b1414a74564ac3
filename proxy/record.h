/*
 * record.h - the Redis record of one idempotency key, and its codec.
 *
 * One Redis string per record (README "How a request is handled"). A fixed-width ASCII head that the
 * Lua compare-and-set scripts can read by offset, then the stored response:
 *
 *   off len
 *   0   3   "IR1"                magic + version
 *   3   1   state                C claimed, D done, U outcome unknown, T tombstone
 *   4   32  owner token          hex; Lua reads string.sub(v, 5, 36)
 *   36  32  fingerprint          hex
 *   68  16  lease deadline       ms since the epoch, zero-padded decimal
 *   84  16  created              ms since the epoch
 *   100 16  completed            ms since the epoch, 0 while claimed
 *   116 3   status               HTTP status, 000 while claimed
 *   119 5   header count         decimal
 *   124     headers              each: u16 name length, name, u32 value length, value (big-endian)
 *           body                 the rest, raw bytes
 */
#ifndef IDEM_RECORD_H
#define IDEM_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RECORD_HEAD_LEN 124
#define RECORD_STATE_OFFSET 3   /* the Lua scripts of store.c read these two by offset */
#define RECORD_OWNER_OFFSET 4
#define RECORD_OWNER_LEN 32
#define RECORD_MAX_HEADERS 128

enum record_state {
    RECORD_CLAIMED = 'C',
    RECORD_DONE = 'D',
    RECORD_UNKNOWN = 'U',
    RECORD_TOMBSTONE = 'T',
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
};

struct evkeyvalq;

/*
 * Start rec as a record of state for the claim of owner (32 hex chars) on a
 * request with fingerprint (32 hex chars), created at created_ms (ms since
 * the epoch); every other field zero.
 */
void record_init(struct record *rec, enum record_state state, const char *owner,
                 const char *fingerprint, uint64_t created_ms);

/*
 * Fill rec (from record_init) with an upstream answer (README "How a request is handled" "Which
 * answers are recorded"): status, the stored fields of headers (not
 * hop-by-hop, not named by Connection, see header_is_stored) and the body
 * (body_len bytes). An answer over max_stored bytes, or with more than
 * RECORD_MAX_HEADERS stored fields, or with a field the codec cannot hold
 * (a name over 65,535 bytes), makes rec a tombstone without fields or body. rec borrows headers and body. Returns the state written.
 */
enum record_state record_set_answer(struct record *rec, int status,
                                    const struct evkeyvalq *headers, const char *body,
                                    size_t body_len, size_t max_stored);

/* Encode rec into a new malloc'd buffer of *len bytes; NULL when unencodable or out of memory. */
char *record_encode_alloc(const struct record *rec, size_t *len);

/* Bytes record_encode will write for rec. */
size_t record_encoded_size(const struct record *rec);

/*
 * Encode rec into out (caller-owned, record_encoded_size(rec) bytes).
 * Returns the bytes written, or 0 when rec cannot be encoded (too many
 * headers, a field too long, status outside 0..999, bad token lengths).
 */
size_t record_encode(const struct record *rec, char *out);

/*
 * Decode len bytes at buf into *rec; rec's pointers borrow buf, which must
 * outlive rec. Returns 0, or -1 for anything that is not a well-formed record.
 */
int record_decode(const char *buf, size_t len, struct record *rec);

#endif
