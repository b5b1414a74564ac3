/*
 * headers.h - which header fields cross the proxy, and which are stored.
 */
#ifndef IDEM_HEADERS_H
#define IDEM_HEADERS_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Whether name is a field name: a non-empty RFC 9110 section 5.6.2 token
 * (letters, digits and !#$%&'*+-.^_`|~). Borrows name.
 */
bool header_name_valid(const char *name);

/*
 * Hop-by-hop fields (RFC 9110 section 7.6.1): Connection, Keep-Alive, TE,
 * Trailer, Transfer-Encoding, Upgrade, and every Proxy-* field. Case-insensitive.
 */
bool header_is_hop_by_hop(const char *name);

/*
 * True when name is one of the comma-separated field names in a Connection
 * header value (RFC 9110 7.6.1: those are hop-by-hop too). connection may be NULL.
 */
bool header_named_by_connection(const char *connection, const char *name);

/*
 * Whether an upstream response field is stored in the record and replayed
 * (docs/client-contract.md#how-a-request-is-handled): not hop-by-hop, not Set-Cookie or WWW-Authenticate, not
 * Content-Length (recomputed on replay), not Idempotent-Replayed (ours).
 */
bool header_is_stored(const char *name);

/*
 * Whether a client request field is forwarded upstream: not hop-by-hop, not
 * Content-Length or Expect (the upstream client frames the body itself).
 */
bool header_is_forwarded(const char *name);

/*
 * Whether a client request field is stored with a queued delivery and sent
 * with each attempt (docs/webhooks.md#webhook-inbox): a forwarded field, but not
 * Idempotency-Key, which each attempt sets to the event id.
 */
bool header_is_queued(const char *name);

/*
 * Whether name is a field the proxy keeps for itself, so that
 * upstream.record_id_header may not name it (docs/configuration.md#upstream):
 * hop-by-hop fields; what frames or routes the request (Host, Content-Length,
 * Content-Type, Content-Encoding, Expect); what the proxy sets or reads
 * itself (X-Forwarded-For, Forwarded, Idempotency-Key, Idempotent-Replayed);
 * credentials (Authorization, Cookie). Case-insensitive; borrows name. The routes' own
 * key and scope headers are checked against it by the config.
 */
bool header_is_reserved(const char *name);

/*
 * Whether a and b name the same field once '-' and '_' read alike
 * (case-insensitive): a CGI, WSGI or Rack upstream turns both spellings into
 * one variable (RFC 3875 4.1.18, HTTP_A_B), so a client's "A_B" can stand
 * for the proxy's "A-B" there. Borrows both.
 */
bool header_name_alike(const char *a, const char *b);

/*
 * Whether upstreams or the intermediaries before them act on a request
 * field of this name, so that upstream.record_id_header may not name it
 * (the proxy replaces the client's field on every forwarded request;
 * docs/configuration.md#upstream): the client's address, scheme, host or
 * original target (X-Forwarded-*, X-Real-IP, X-Original-*, Via,
 * Max-Forwards...), method overrides, conditions and ranges (If-*, Range),
 * caching (Cache-Control, Pragma), negotiation and representation
 * (Accept*, Content-*, Prefer), the browser's context (Origin, Referer,
 * User-Agent, Sec-*, Access-Control-*), message signatures. '-' and '_'
 * read alike, case-insensitive; borrows name. Pure.
 */
bool header_is_interpreted(const char *name);

/*
 * A Connection field value without the options equal to name
 * (case-insensitive, as header_named_by_connection compares), the others
 * joined by ", ": so a client cannot nominate a field the proxy adds
 * itself (RFC 9110 7.6.1 strips the fields Connection names). The result
 * is malloc'd, the caller's; NULL when out of memory.
 */
char *header_connection_without(const char *connection, const char *name);

struct evkeyvalq;

/*
 * The value of the last line of field name in headers (case-insensitive),
 * NULL when none; *count says how many lines carry it, so that a caller can
 * refuse a field that must appear once (borrowed from headers).
 */
const char *header_find_all(const struct evkeyvalq *headers, const char *name, int *count);

#endif
