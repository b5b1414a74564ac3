/*
 * upstream_call.c - what every transfer to the upstream shares, buffered or
 * streamed: a pooled easy handle and its options, the request's URL and
 * header fields, the refusal of a resend, and how its end reads as an
 * outcome.
 */
#include "upstream_int.h"
#include "upstream_headers.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "config.h"

/* CURLOPT_PREREQFUNCTION: once per transmission; a second one would be a resend. */
static int upstream_on_prereq(void *clientp, char *conn_primary_ip, char *conn_local_ip,
                              int conn_primary_port, int conn_local_port)
{
    struct upstream_call *call = clientp;

    (void)conn_primary_ip;
    (void)conn_local_ip;
    (void)conn_primary_port;
    (void)conn_local_port;
    if (++call->transmissions > 1) {
        call->resend_refused = true;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}

/*
 * A pooled easy handle, or a new one with the options that never change set
 * once. Handles are not reset between transfers (curl_easy_reset frees and
 * re-initialises every option): each transfer sets what it changes, and
 * upstream_handle_put puts those back.
 */
static CURL *upstream_handle_get(struct upstream *up)
{
    const struct config *cfg = up->cfg;
    CURL *e;

    if (up->n_pool > 0)
        return up->pool[--up->n_pool];
    e = curl_easy_init();
    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    if (cfg->upstream_unix_path != NULL)
        curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, cfg->upstream_unix_path);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, UPSTREAM_MAX_IDLE_S);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->upstream_connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)cfg->upstream_timeout_ms);
    /* the upstream is the configured one: never through an http_proxy / all_proxy that the
     * pod's environment sets for its application ("" disables curl's environment lookup) */
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, upstream_on_prereq);
    upstream_socket_wire_easy(up, e);
    return e;
}

/*
 * Back to the pool, holding no pointer into the finished call, and with
 * every option a streamed transfer sets (upstream_stream.c) as a buffered
 * one expects it: no read or header callback, no POST size, the whole
 * transfer bounded by upstream.timeout, connections reused.
 */
static void upstream_handle_put(struct upstream *up, CURL *easy)
{
    if (up->n_pool < UPSTREAM_HANDLE_POOL) {
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(easy, CURLOPT_POST, 0L);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)-1);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, NULL);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, NULL);
        curl_easy_setopt(easy, CURLOPT_READFUNCTION, NULL);
        curl_easy_setopt(easy, CURLOPT_READDATA, NULL);
        /* both: a header callback of NULL with HEADERDATA set would send heads to WRITEFUNCTION */
        curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, NULL);
        curl_easy_setopt(easy, CURLOPT_HEADERDATA, NULL);
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)up->cfg->upstream_timeout_ms);
        curl_easy_setopt(easy, CURLOPT_FORBID_REUSE, 0L);
        curl_easy_setopt(easy, CURLOPT_PREREQDATA, NULL);
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
        up->pool[up->n_pool++] = easy;
    } else {
        curl_easy_cleanup(easy);
    }
}

int upstream_call_init(struct upstream_call *call, struct upstream *up, const char *target,
                       const struct evkeyvalq *headers, const char *client_addr, bool with_body)
{
    const struct config *cfg = up->cfg;
    size_t base_len = strlen(cfg->upstream_base), target_len = strlen(target);
    char small[2048], *url;
    bool failed = false;
    CURL *e;

    call->up = up;
    TAILQ_INIT(&call->response_headers);
    call->easy = e = upstream_handle_get(up);
    if (e == NULL)
        return -1;
    call->request_headers = upstream_request_headers(headers, client_addr, with_body, &failed);
    if (failed)
        return -1;
    /* base + target; curl copies it (CURLOPT_CURLU would not save the parse: docs/performance.md) */
    url = base_len + target_len < sizeof(small) ? small : malloc(base_len + target_len + 1);
    if (url == NULL)
        return -1;
    memcpy(url, cfg->upstream_base, base_len);
    memcpy(url + base_len, target, target_len + 1);
    curl_easy_setopt(e, CURLOPT_URL, url);
    if (url != small)
        free(url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->request_headers);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, call);
    curl_easy_setopt(e, CURLOPT_PRIVATE, call);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->error);
    return 0;
}

bool upstream_method_has_body(const char *method)
{
    return strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
           strcmp(method, "PATCH") == 0;
}

void upstream_call_set_method(struct upstream_call *call, const char *method, bool with_body,
                              const char *body, long long len)
{
    CURL *e = call->easy;
    bool post = strcmp(method, "POST") == 0;

    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
    } else if (with_body && (body != NULL || len == 0)) {
        /*
         * The body in memory: curl writes a body under 64 KiB in the same send as
         * the head (one segment, one upstream wakeup). curl could rewind it, so
         * the resend guard is upstream_on_prereq alone.
         */
        curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, len > 0 ? body : "");
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, post ? NULL : method);
    } else if (with_body) {
        /*
         * The body from CURLOPT_READFUNCTION. POST, not UPLOAD: curl's upload
         * is PUT, and its POST keeps any method through CUSTOMREQUEST. A size
         * of -1 makes curl (7.66 and later) send it chunked. It cannot be
         * rewound, and upstream_on_prereq refuses a resend before curl tries.
         */
        curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, post ? NULL : method);
    } else {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") == 0 ? NULL : method);
    }
}

int upstream_call_add(struct upstream_call *call)
{
    struct upstream *up = call->up;

    TAILQ_INSERT_TAIL(&up->calls, call, link);
    up->in_flight++;
    if (curl_multi_add_handle(up->multi, call->easy) != CURLM_OK) {
        TAILQ_REMOVE(&up->calls, call, link);
        up->in_flight--;
        return -1;
    }
    call->added = true;
    return 0;
}

void upstream_call_deinit(struct upstream_call *call)
{
    struct upstream *up = call->up;

    if (call->added) {
        curl_multi_remove_handle(up->multi, call->easy);
        TAILQ_REMOVE(&up->calls, call, link);
        up->in_flight--;
        call->added = false;
    }
    if (call->easy != NULL)
        upstream_handle_put(up, call->easy);
    call->easy = NULL;
    curl_slist_free_all(call->request_headers);
    call->request_headers = NULL;
    evhttp_clear_headers(&call->response_headers);
}

static enum upstream_outcome upstream_classify(const struct upstream_call *call, CURLcode rc,
                                               const char **detail)
{
    if (rc == CURLE_OK) {
        *detail = "answered";
        return UPSTREAM_ANSWERED;
    }
    if (call->resend_refused) {
        *detail = "connection died after the request was sent; resend refused";
        return UPSTREAM_BROKEN;
    }
    if (call->transmissions == 0) {
        *detail = rc == CURLE_OPERATION_TIMEDOUT ? "connect timeout" : "upstream unreachable";
        return UPSTREAM_NOT_SENT;
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        *detail = "timeout after the request was sent";
        return UPSTREAM_TIMEOUT;
    }
    *detail = "connection broken after the request was sent";
    return UPSTREAM_BROKEN;
}

/*
 * Where the upstream is, for log lines: scheme://host:port, or unix:/path.
 * upstream_base is taken apart by libcurl's URL parser, so its path never
 * shows (the config refuses credentials in the url anyway).
 */
static void upstream_address(const struct config *cfg, char *out, size_t outsize)
{
    CURLU *u;
    char *scheme = NULL, *host = NULL, *port = NULL;

    if (cfg->upstream_unix_path != NULL) {
        snprintf(out, outsize, "unix:%s", cfg->upstream_unix_path);
        return;
    }
    snprintf(out, outsize, "the upstream");
    u = curl_url();
    if (u == NULL)
        return;
    if (curl_url_set(u, CURLUPART_URL, cfg->upstream_base, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
        snprintf(out, outsize, "%s://%s:%s", scheme, host, port);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
}

enum upstream_outcome upstream_call_outcome(const struct upstream_call *call, CURLcode rc,
                                            const char **detail, char *cause,
                                            size_t cause_size)
{
    enum upstream_outcome outcome = upstream_classify(call, rc, detail);
    char address[512];

    if (outcome != UPSTREAM_ANSWERED) {
        /* curl's error buffer says more than curl_easy_strerror, when it has anything */
        upstream_address(call->up->cfg, address, sizeof(address));
        snprintf(cause, cause_size, "%s: %s (curl %d)", address,
                 call->error[0] != '\0' ? call->error : curl_easy_strerror(rc), (int)rc);
    }
    return outcome;
}

void upstream_call_read_fields(struct upstream_call *call, unsigned int origin)
{
    struct curl_header *h = NULL;

    while ((h = curl_easy_nextheader(call->easy, origin, -1, h)) != NULL) {
        /* curl 7.88 gives "\r" for an empty field value, which evhttp would refuse */
        bool empty = h->value[strspn(h->value, " \t\r\n")] == '\0';
        evhttp_add_header(&call->response_headers, h->name, empty ? "" : h->value);
    }
}
