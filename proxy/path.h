/*
 * path.h - the request path as route matching sees it.
 *
 * Routes must catch every spelling of a protected path that the upstream may
 * treat as the same endpoint, or a client could skip the idempotency check
 * (and a webhook route's signature check) with `//v1/payments`,
 * `/v1/x/../payments`, `/v1/payment%73` or `/V1/payments`. Matching a few
 * paths too many only protects them; matching one too few executes twice.
 */
#ifndef IDEM_PATH_H
#define IDEM_PATH_H

#include <stddef.h>

/*
 * Normalise raw (the path of the request-target, without the query) for
 * route matching: percent-decoded (RFC 3986 2.1, via libevent), ";params"
 * dropped from each segment, empty and "." segments removed and ".."
 * segments resolved (RFC 3986 5.2.4), no trailing slash, lower case.
 * out: caller-owned, outsize bytes. Returns 0, or -1 when the result does
 * not fit or the path decodes to a NUL byte (then out holds "/").
 */
int path_normalize(const char *raw, char *out, size_t outsize);

#endif
