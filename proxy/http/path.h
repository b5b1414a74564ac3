/*
 * path.h - the request path as route matching sees it.
 *
 * Routes must catch every spelling of a protected path that the upstream may
 * treat as the same endpoint, or a client could skip the idempotency check
 * (and a webhook route's signature check) with `//v1/payments`,
 * `/v1/x/../payments`, `/v1/payment%73`, `/V1/payments` or `/v1\payments`
 * (a WHATWG URL parser reads '\' as '/'). Matching a few paths too many only
 * protects them; matching one too few executes twice. A spelling whose
 * meaning depends on the upstream (an encoded slash, an encoded '?') is
 * refused instead of guessed: Envoy's normalize_path + merge_slashes +
 * path_with_escaped_slashes_action: REJECT_REQUEST is the model. A path
 * that a URL parser may read as "//host/path" is checked by the classifier
 * (classify.c), which knows the routes.
 */
#ifndef IDEM_PATH_H
#define IDEM_PATH_H

#include <stddef.h>

enum path_status {
    PATH_OK = 0,
    PATH_ENCODED_SLASH,     /* %2F or %5C: one segment or two depends on the upstream */
    PATH_ENCODED_DELIMITER, /* decodes to '?', '#', NUL or another control character */
    PATH_BAD_UTF8,          /* not UTF-8 after decoding (RFC 3629 4), overlong forms included */
    PATH_TOO_LONG,          /* out is smaller than path_normalized_size(raw) */
    PATH_NO_MEMORY,
};

/*
 * Normalise raw (the path of the request-target, without the query, or a
 * route pattern without its '*') for route matching: '\' read as '/'
 * (WHATWG URL path state), each segment percent-decoded (RFC 3986 2.1, via
 * libevent), ";params" dropped from each segment, empty and "." segments
 * removed and ".." segments resolved, never above the root (RFC 3986
 * 5.2.4), no trailing slash, ASCII lower case.
 * out: caller-owned, outsize bytes; path_normalized_size(raw) always fits.
 * Returns PATH_OK, or the reason the path is refused (then out holds "/"
 * when outsize >= 2).
 */
enum path_status path_normalize(const char *raw, char *out, size_t outsize);

/* Bytes out needs for raw, NUL included: the result is never longer than raw + 1 ("" -> "/"). */
size_t path_normalized_size(const char *raw);

/* A short human reason for a refused path, for problem details. Static string. */
const char *path_status_reason(enum path_status st);

#endif
