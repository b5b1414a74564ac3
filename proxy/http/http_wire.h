/*
 * http_wire.h - the byte-level pieces of an HTTP/1.1 message (RFC 9112) that
 * http_server.c writes or checks beside libhttp-parser, which reads the
 * messages: an answer's status line and fields, a field value's trimming,
 * and the head spellings the parser accepts but another parser on the path
 * may read otherwise. Pure: no I/O, no state.
 */
#ifndef IDEM_HTTP_WIRE_H
#define IDEM_HTTP_WIRE_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/http.h>

struct evbuffer;
struct evkeyvalq;

/* The reason phrase of status (RFC 9110 section 15), "Unknown" for one without. Static. */
const char *http_wire_reason(int status);

/* Whether an answer with status carries no body and no Content-Length (1xx, 204, 304: RFC 9110 8.6). */
bool http_wire_status_bodiless(int status);

/*
 * Map libhttp-parser's method number to libevent's enum; false for a
 * method libevent has no name for (the caller answers 501).
 */
bool http_wire_method(unsigned parser_method, enum evhttp_cmd_type *cmd);

/*
 * Write the head of an answer into out: the status line (reason NULL: the
 * standard one), every field of fields except the framing ones this layer
 * owns (Content-Length, Transfer-Encoding, Connection, Date), then Date,
 * then Content-Length: content_length when content_length >= 0 (not for a
 * bodiless status), "Transfer-Encoding: chunked" when chunked, and the
 * Connection field: "close" when close, "keep-alive" when keep_alive_10
 * (an HTTP/1.0 client that asked to keep the connection: RFC 9112 9.3).
 * Returns 0, or -1 when out of memory.
 */
int http_wire_write_head(struct evbuffer *out, int status, const char *reason,
                         const struct evkeyvalq *fields, long long content_length, bool chunked,
                         bool close, bool keep_alive_10);

/*
 * Trim the optional whitespace (RFC 9110 5.5: SP, HTAB) at the end of the
 * field value v of *len bytes: *len shrinks. The parser drops the leading
 * whitespace itself.
 */
void http_wire_rtrim(const char *v, size_t *len);

/*
 * A head spelling the parser takes but a server or proxy on the path may
 * read otherwise (request smuggling, RFC 9112 11.2), in the raw bytes of a
 * request head (request line to the empty line, len bytes): obs-fold, a
 * field continued on a line that starts with SP or HTAB (RFC 9112 5.2 lets
 * a server refuse it, which we do), and an HTAB in the whitespace before
 * a Content-Length or Transfer-Encoding value (some parsers take it as a
 * part of the value). Returns a static human reason, or NULL.
 */
const char *http_wire_head_fault(const char *head, size_t len);

#endif
