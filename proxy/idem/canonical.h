/*
 * canonical.h - the fingerprint of a keyed request under a route's
 * `fingerprint` mode (docs/client-contract.md#the-fingerprint-and-what-is-recorded),
 * and the canonical forms of a body that the json and form modes
 * fingerprint instead of its bytes:
 *
 *   request  method, request-target and the raw body (fingerprint_request)
 *   json     method, request-target and the body's canonical JSON text:
 *            parsed by jansson (duplicate member names refused), members of
 *            every object sorted by the bytes of their UTF-8 names, no
 *            insignificant whitespace, strings as jansson writes them,
 *            integers as exact signed 64-bit integers, every other number
 *            as the IEEE 754 double it reads as, written with 17
 *            significant digits (so 1 and 1.0 differ); the members and
 *            elements named by fingerprint_ignore left out (an element
 *            becomes null, so positions stay). An empty body is the empty
 *            canonical text, which no JSON text has.
 *   form     method, request-target and the body's parameters
 *            (application/x-www-form-urlencoded as the WHATWG URL standard
 *            parses it: split on '&', empty pairs dropped, split at the first
 *            '=', '+' a space, percent-decoded by libevent), sorted by name
 *            with a stable sort (repeated names keep their order), each pair
 *            as a 4-byte big-endian length and the name's bytes, then the
 *            same for the value. An invalid percent escape, a raw NUL byte or
 *            a name or value that is not UTF-8 once decoded is refused:
 *            two different byte strings never compare equal.
 *   none     nothing: all zeros (fingerprint_none).
 *
 * The hash is the one fingerprint_request or seal_fingerprint (keyed, under
 * a keyring) computes over method, target and the raw or canonical body.
 * Pure: no I/O, no clock; the canonical text is a transient buffer (and
 * jansson's tree of the body, up to about 75 times its bytes for a body of
 * empty objects) freed before the call returns. Both are allocated through
 * meter.h: under the caller's active meter a body whose parsed form passes
 * its cap or budget fails with CANONICAL_FAILED (meter_end says why).
 */
#ifndef IDEM_CANONICAL_H
#define IDEM_CANONICAL_H

#include <stdbool.h>
#include <stddef.h>

#include "keyring.h"
#include "policy.h"

/* Bytes of a `why` buffer: what made a body unreadable, for a problem's detail. */
#define CANONICAL_WHY_MAX 200

/*
 * A fingerprint_ignore list as a fingerprint was made with it: RFC 6901
 * pointers, borrowed (from a route's policy, or from a decoded record),
 * pointer[i] of len[i] bytes, not NUL-terminated.
 */
struct canonical_ignore {
    size_t n;                                   /* 0..CONFIG_MAX_FINGERPRINT_IGNORE */
    const char *pointer[CONFIG_MAX_FINGERPRINT_IGNORE];
    size_t len[CONFIG_MAX_FINGERPRINT_IGNORE];  /* 1..CONFIG_MAX_IGNORE_POINTER bytes */
};

/* How a fingerprint is made, as a record keeps it (record.h): its mode and ignore list. */
struct fingerprint_basis {
    enum fingerprint_mode mode;
    struct canonical_ignore ignore;             /* FINGERPRINT_JSON only; else n == 0 */
};

/* The request a fingerprint is made of; everything borrowed. */
struct canonical_request {
    const char *method;             /* "POST", ... */
    const char *target;             /* origin-form request-target, as sent */
    const char *content_type;       /* the Content-Type field's value; NULL: none */
    int content_type_lines;         /* how many Content-Type fields the request has */
    const char *body;               /* raw bytes; may be NULL when body_len is 0 */
    size_t body_len;                /* bytes */
};

enum canonical_result {
    CANONICAL_FAILED = -1,          /* out of memory, or OpenSSL failed */
    CANONICAL_OK = 0,
    CANONICAL_INVALID_BODY,         /* the body cannot be read under the mode (why says how) */
    CANONICAL_KEY_UNAVAILABLE,      /* the key id is not in the keyring (or there is none) */
};

/* The mode's name as `fingerprint:` spells it ("request", "json", "form", "none"). Static. */
const char *canonical_mode_name(enum fingerprint_mode mode);

/* policy's mode and fingerprint_ignore (borrowed: b must not outlive policy) into *b. */
void canonical_basis_of(struct fingerprint_basis *b, const struct route_policy *policy);

/* Whether a and b make the same fingerprints: one mode and the same pointers in order. Pure. */
bool canonical_basis_equal(const struct fingerprint_basis *a, const struct fingerprint_basis *b);

/*
 * Whether a Content-Type field value (NULL: none) names the media type mode
 * reads (docs/client-contract.md#fingerprint-json): json, application/json or
 * any application/<subtype>+json; form, application/x-www-form-urlencoded;
 * case-insensitive, parameters ignored (RFC 9110 8.3.1). True for the
 * request and none modes, which read no body. Pure.
 */
bool canonical_media_type(enum fingerprint_mode mode, const char *content_type);

/*
 * The canonical JSON text of body (len bytes) with the members and
 * elements of ignore left out (see the top of this file): *out a malloc'd
 * buffer of *out_len bytes the caller frees (NULL and 0 for an empty body).
 * CANONICAL_OK; CANONICAL_INVALID_BODY with why (caller-owned,
 * CANONICAL_WHY_MAX bytes) saying what failed, never the body's bytes: not
 * JSON (RFC 8259) or not UTF-8, a member name repeated or holding \u0000,
 * an integer outside the signed 64-bit range or a number beyond a double,
 * nesting deeper than 2048 levels (jansson's, where every value counts
 * one: in [[1]] the 1 is at level 3); CANONICAL_FAILED out of memory.
 */
int canonical_json(const char *body, size_t len, const struct canonical_ignore *ignore,
                   char **out, size_t *out_len, char *why);

/*
 * The canonical form of an application/x-www-form-urlencoded body (len
 * bytes; see the top of this file): *out a malloc'd buffer of *out_len
 * bytes the caller frees (NULL and 0 when there is no pair). Results as
 * canonical_json's: CANONICAL_INVALID_BODY for a raw NUL byte, a '%' not
 * followed by two hex digits, or a name or value that is not UTF-8 once
 * decoded.
 */
int canonical_form(const char *body, size_t len, char **out, size_t *out_len, char *why);

/*
 * The fingerprint of rq made as basis says, into hex (caller-owned,
 * FINGERPRINT_HEX_LEN + 1 bytes): keyed (seal_fingerprint) under kr's key
 * key_id (NUL-terminated; NULL: kr's encrypting key, or unkeyed without a
 * keyring), unkeyed (fingerprint_request) when key_id is "". A json or form
 * basis first checks the media type (when the body is not empty: a
 * body-less POST needs none) and a single Content-Type field, then reads
 * the body. Returns CANONICAL_OK; CANONICAL_INVALID_BODY with why
 * (caller-owned, CANONICAL_WHY_MAX bytes); CANONICAL_KEY_UNAVAILABLE when
 * key_id is not in kr (or kr is NULL); CANONICAL_FAILED. hex is "" unless
 * CANONICAL_OK. Borrows everything.
 */
int canonical_fingerprint(const struct keyring *kr, const char *key_id,
                          const struct fingerprint_basis *basis,
                          const struct canonical_request *rq, char *hex, char *why);

#endif
