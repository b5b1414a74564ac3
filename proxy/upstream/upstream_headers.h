/*
 * upstream_headers.h - the header fields of a request sent upstream
 * (upstream_headers.c); only upstream_call.c includes it.
 */
#ifndef IDEM_UPSTREAM_HEADERS_H
#define IDEM_UPSTREAM_HEADERS_H

#include <stdbool.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/keyvalq_struct.h>

/*
 * The curl header list for a request with the client's headers (borrowed),
 * its address client_addr (for X-Forwarded-For; may be NULL), and whether
 * it has a body. The list is the caller's (curl_slist_free_all). Out of
 * memory sets *failed and returns what was built so far (the caller frees it).
 */
struct curl_slist *upstream_request_headers(const struct evkeyvalq *headers,
                                            const char *client_addr, bool has_body,
                                            bool *failed);

#endif
