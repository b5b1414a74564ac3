/*
 * bearer.h - the admin listener's bearer token (RFC 6750): the token as the
 * configuration holds it, which is its SHA-256 and a short fingerprint for
 * the audit trail, never the token itself; and the check of a request's
 * Authorization field against it, in constant time. Pure: no I/O (the
 * configuration module reads admin.token_file and hands its text here).
 */
#ifndef IDEM_BEARER_H
#define IDEM_BEARER_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Shortest token admin.token_file may hold, in bytes: 32 characters of
 * base64 or hex are at least 128 bits from `openssl rand -hex 32` or
 * `-base64 32`, which leaves guessing over the network out of reach.
 */
#define BEARER_TOKEN_MIN_LEN 32
/* Longest, in bytes: a field value libevent reads whole and a request line stays short. */
#define BEARER_TOKEN_MAX_LEN 1024
#define BEARER_DIGEST_LEN 32        /* SHA-256, bytes */
/* Hex chars of the token's SHA-256 that the audit trail and the logs name it by. */
#define BEARER_FINGERPRINT_LEN 12

struct bearer_token {
    unsigned char digest[BEARER_DIGEST_LEN];         /* SHA-256 of the token */
    char fingerprint[BEARER_FINGERPRINT_LEN + 1];    /* the first hex chars of digest */
};

/*
 * Make t from the text of a token file (len bytes, borrowed; need not be
 * NUL-terminated): trailing CR and LF are trimmed (a file written by echo or
 * an editor), and what is left must be BEARER_TOKEN_MIN_LEN to
 * BEARER_TOKEN_MAX_LEN characters of an RFC 6750 section 2.1 b64token
 * (ALPHA DIGIT - . _ ~ + / and trailing =), the form a client can send as
 * `Authorization: Bearer <token>`. Returns NULL (t set), or a static reason
 * (t untouched). Aborts when OpenSSL cannot provide SHA-256: no token could
 * ever be checked.
 */
const char *bearer_token_set(struct bearer_token *t, const char *text, size_t len);

enum bearer_verdict {
    BEARER_OK,          /* the configured token */
    BEARER_MISSING,     /* no Authorization field, or another scheme than Bearer */
    BEARER_INVALID,     /* Bearer with another token, a malformed one, or two fields */
};

/*
 * Check a request's Authorization field: value is its value (NULL when
 * absent), lines how many Authorization lines the request has (more than one
 * is ambiguous and refused). The scheme is matched case-insensitively (RFC
 * 9110 section 11.1), then one or more spaces and the b64token. The token
 * sent is hashed and its SHA-256 compared with t's by CRYPTO_memcmp: two
 * digests of one length, so the time the check takes tells a client
 * nothing of the configured token, not even its length. Borrows everything.
 */
enum bearer_verdict bearer_check(const struct bearer_token *t, const char *value, int lines);

/*
 * The first half of bearer_check: parse a request's Authorization field
 * (value, lines as there) and, when it is `Bearer <b64token>` of
 * BEARER_TOKEN_MIN_LEN to BEARER_TOKEN_MAX_LEN characters (a shorter one
 * is BEARER_INVALID: an operators file holds digests, and the proxy cannot
 * tell from one that its token is too short to keep out a guess), write the
 * token's SHA-256 into digest (caller's, BEARER_DIGEST_LEN bytes) and
 * return BEARER_OK; else BEARER_MISSING or BEARER_INVALID as bearer_check
 * says, digest untouched. The caller compares the digest in constant time
 * (an operators file: config_operator_find). Borrows everything.
 */
enum bearer_verdict bearer_sent(const char *value, int lines,
                                unsigned char digest[BEARER_DIGEST_LEN]);

#endif
