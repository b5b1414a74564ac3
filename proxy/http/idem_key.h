/*
 * idem_key.h - reading the Idempotency-Key header value
 * (draft-ietf-httpapi-idempotency-key-header-06 section 2: the value is an
 * RFC 8941 sf-string; we also accept the bare form clients commonly send).
 */
#ifndef IDEM_IDEM_KEY_H
#define IDEM_IDEM_KEY_H

#include <stdbool.h>
#include <stddef.h>

enum key_status {
    KEY_OK = 0,
    KEY_EMPTY,          /* "" or "\"\"" */
    KEY_TOO_LONG,       /* longer than max_len bytes after unquoting */
    KEY_BAD_CHAR,       /* outside printable ASCII (0x20-0x7E) */
    KEY_BAD_QUOTING,    /* an sf-string that does not close, bad escape, trailing bytes */
};

/*
 * Parse one header value into the key bytes. `"abc"` (RFC 8941 section 3.3.3
 * sf-string, with \" and \\ escapes) and bare `abc` give the same key `abc`;
 * keys are case-sensitive. Leading/trailing spaces and tabs are ignored (OWS).
 * out: caller-owned, outsize bytes (>= max_len + 1); NUL-terminated on success,
 * *out_len set to the key length in bytes. Returns KEY_OK or the reason.
 */
enum key_status key_parse(const char *value, size_t max_len, char *out, size_t outsize,
                          size_t *out_len);

/*
 * True when a header value is a bare (unquoted) key with a comma. RFC 9110
 * section 5.3 lets an intermediary fold two `Idempotency-Key` lines into one
 * comma-joined line, so such a value may be two keys: the caller refuses it
 * (fail closed). A comma inside an sf-string (`"a,b"`) is one key. Borrows value.
 */
bool key_is_folded_list(const char *value);

/* A short human reason for a key_status, for problem details. Static string. */
const char *key_status_reason(enum key_status st);

#endif
