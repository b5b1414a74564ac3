/*
 * upstream.c - libcurl multi-socket wired onto the event_base, in the shape
 * of curl's docs/examples/multi-event.c: curl tells us which sockets to watch
 * and when to wake it; completed transfers are collected after each
 * curl_multi_socket_action, outside every curl callback.
 */
#include "upstream.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "clock.h"
#include "config.h"
#include "headers.h"
#include "log.h"

/*
 * Reuse an idle upstream connection only while it is younger than this. A
 * request written onto a connection the upstream is closing at that moment
 * is an ambiguous outcome (we never resend), so stay under common upstream
 * keep-alive timeouts (Node.js 5 s, nginx 75 s).
 */
#define UPSTREAM_MAX_IDLE_S 4L
#define UPSTREAM_MAX_IDLE_CONNECTIONS 1024L

/*
 * Easy handles kept for reuse: curl_easy_reset keeps a handle's buffers, so a
 * reused handle spares the per-request allocation of curl's 16 KiB receive
 * and 64 KiB upload buffers.
 */
#define UPSTREAM_HANDLE_POOL 256

struct upstream_call {
    struct upstream *up;
    CURL *easy;
    struct curl_slist *request_headers;
    int transmissions;              /* PREREQFUNCTION calls: request send attempts */
    bool resend_refused;
    struct evkeyvalq response_headers;
    struct evbuffer *response_body;
    upstream_done_cb *cb;
    void *arg;
    char error[CURL_ERROR_SIZE];
    TAILQ_ENTRY(upstream_call) link;
};

struct upstream_socket {
    struct upstream *up;
    struct event ev;
};

struct upstream {
    struct event_base *base;
    const struct config *cfg;
    CURLM *multi;
    struct event timer;
    _Atomic unsigned in_flight; /* read by other threads (metrics) */
    TAILQ_HEAD(, upstream_call) calls;
    CURL *pool[UPSTREAM_HANDLE_POOL];   /* idle, reset easy handles */
    size_t n_pool;
};

static void upstream_check_done(struct upstream *up);

static void upstream_on_event(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *up = arg;
    int running = 0;
    int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);

    curl_multi_socket_action(up->multi, fd, action, &running);
    upstream_check_done(up);
}

static void upstream_on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *up = arg;
    int running = 0;

    (void)fd;
    (void)what;
    curl_multi_socket_action(up->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    upstream_check_done(up);
}

/* CURLMOPT_SOCKETFUNCTION: watch fd for what curl asks, or stop watching it. */
static int upstream_on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct upstream *up = userp;
    struct upstream_socket *us = socketp;
    short kind;

    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (us != NULL) {
            event_del(&us->ev);
            free(us);
        }
        return 0;
    }
    if (us == NULL) {
        us = calloc(1, sizeof(*us));
        if (us == NULL)
            return -1;
        us->up = up;
        curl_multi_assign(up->multi, fd, us);
    } else {
        event_del(&us->ev);
    }
    kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    event_assign(&us->ev, up->base, fd, kind, upstream_on_event, up);
    event_add(&us->ev, NULL);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: arm our one timer; -1 disarms it. */
static int upstream_on_timer_change(CURLM *multi, long timeout_ms, void *userp)
{
    struct upstream *up = userp;
    struct timeval tv;

    (void)multi;
    if (timeout_ms < 0) {
        evtimer_del(&up->timer);
        return 0;
    }
    tv = clock_ms_to_timeval((uint64_t)timeout_ms);
    evtimer_add(&up->timer, &tv);
    return 0;
}

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

static size_t upstream_on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct upstream_call *call = userp;

    if (evbuffer_add(call->response_body, data, size * nmemb) != 0)
        return 0;
    return size * nmemb;
}

static CURL *upstream_handle_get(struct upstream *up)
{
    return up->n_pool > 0 ? up->pool[--up->n_pool] : curl_easy_init();
}

static void upstream_handle_put(struct upstream *up, CURL *easy)
{
    if (up->n_pool < UPSTREAM_HANDLE_POOL) {
        curl_easy_reset(easy);
        up->pool[up->n_pool++] = easy;
    } else {
        curl_easy_cleanup(easy);
    }
}

static void upstream_call_free(struct upstream_call *call)
{
    curl_multi_remove_handle(call->up->multi, call->easy);
    upstream_handle_put(call->up, call->easy);
    curl_slist_free_all(call->request_headers);
    evhttp_clear_headers(&call->response_headers);
    evbuffer_free(call->response_body);
    TAILQ_REMOVE(&call->up->calls, call, link);
    call->up->in_flight--;
    free(call);
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

static void upstream_call_finish(struct upstream_call *call, CURLcode rc)
{
    struct upstream_response resp = { 0 };
    char address[512], cause[sizeof(address) + CURL_ERROR_SIZE + 32];
    const char *detail;
    enum upstream_outcome outcome = upstream_classify(call, rc, &detail);
    curl_off_t total_us = 0;
    long status = 0;

    curl_easy_getinfo(call->easy, CURLINFO_TOTAL_TIME_T, &total_us);
    if (outcome == UPSTREAM_ANSWERED) {
        struct curl_header *h = NULL;
        curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
        while ((h = curl_easy_nextheader(call->easy, CURLH_HEADER, -1, h)) != NULL) {
            /* curl 7.88 gives "\r" for an empty field value, which evhttp would refuse */
            bool empty = h->value[strspn(h->value, " \t\r\n")] == '\0';
            evhttp_add_header(&call->response_headers, h->name, empty ? "" : h->value);
        }
        resp.status = (int)status;
        resp.headers = &call->response_headers;
        resp.body = call->response_body;
    } else {
        /* curl's error buffer says more than curl_easy_strerror, when it has anything */
        upstream_address(call->up->cfg, address, sizeof(address));
        snprintf(cause, sizeof(cause), "%s: %s (curl %d)", address,
                 call->error[0] != '\0' ? call->error : curl_easy_strerror(rc), (int)rc);
    }
    call->cb(outcome, outcome == UPSTREAM_ANSWERED ? &resp : NULL, detail,
             outcome == UPSTREAM_ANSWERED ? NULL : cause, (double)total_us / 1000.0, call->arg);
    upstream_call_free(call);
}

static void upstream_check_done(struct upstream *up)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(up->multi, &left)) != NULL) {
        struct upstream_call *call = NULL;
        CURLcode rc = msg->data.result;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&call);
        upstream_call_finish(call, rc);
    }
}

int upstream_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void upstream_global_cleanup(void)
{
    curl_global_cleanup();
}

struct upstream *upstream_create(struct event_base *base, const struct config *cfg)
{
    struct upstream *up = calloc(1, sizeof(*up));

    if (up == NULL)
        return NULL;
    up->base = base;
    up->cfg = cfg;
    TAILQ_INIT(&up->calls);
    up->multi = curl_multi_init();
    if (up->multi == NULL) {
        free(up);
        return NULL;
    }
    evtimer_assign(&up->timer, base, upstream_on_timeout, up);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETFUNCTION, upstream_on_socket);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETDATA, up);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERFUNCTION, upstream_on_timer_change);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERDATA, up);
    /* keep every idle keep-alive connection: a fresh connect per request costs more than the fd */
    curl_multi_setopt(up->multi, CURLMOPT_MAXCONNECTS, UPSTREAM_MAX_IDLE_CONNECTIONS);
    return up;
}

void upstream_destroy(struct upstream *up)
{
    if (up == NULL)
        return;
    while (!TAILQ_EMPTY(&up->calls))
        upstream_call_free(TAILQ_FIRST(&up->calls));
    while (up->n_pool > 0)
        curl_easy_cleanup(up->pool[--up->n_pool]);
    curl_multi_cleanup(up->multi);
    evtimer_del(&up->timer);
    free(up);
}

unsigned upstream_in_flight(const struct upstream *up)
{
    return up->in_flight;
}

/*
 * Append one raw header line; after a failed allocation *failed stays set and
 * the list is returned unchanged. "Name:" alone tells curl not to send a
 * field it would add itself.
 */
static struct curl_slist *upstream_header_line(struct curl_slist *list, const char *line,
                                               bool *failed)
{
    struct curl_slist *next = *failed ? NULL : curl_slist_append(list, line);

    if (next == NULL)
        *failed = true;
    return next != NULL ? next : list;
}

/* "Name: value"; "Name;" sends an empty value. Lines up to 1 KiB are built on the stack. */
static struct curl_slist *upstream_header_add(struct curl_slist *list, const char *name,
                                              const char *value, bool *failed)
{
    size_t name_len = strlen(name), value_len = strlen(value);
    size_t need = name_len + 2 + value_len + 1;
    char small[1024], *line;

    if (*failed)
        return list;
    line = need <= sizeof(small) ? small : malloc(need);
    if (line == NULL) {
        *failed = true;
        return list;
    }
    memcpy(line, name, name_len);
    if (value_len == 0) {
        memcpy(line + name_len, ";", 2);
    } else {
        memcpy(line + name_len, ": ", 2);
        memcpy(line + name_len + 2, value, value_len + 1);
    }
    list = upstream_header_line(list, line, failed);
    if (line != small)
        free(line);
    return list;
}

static struct curl_slist *upstream_request_headers(const struct evkeyvalq *headers,
                                                   const char *client_addr, bool has_body,
                                                   bool *failed)
{
    struct curl_slist *list = NULL;
    const char *connection = evhttp_find_header(headers, "Connection");
    const char *xff = evhttp_find_header(headers, "X-Forwarded-For");
    struct evkeyval *h;

    TAILQ_FOREACH(h, headers, next) {
        if (!header_is_forwarded(h->key) || header_named_by_connection(connection, h->key) ||
            strcasecmp(h->key, "X-Forwarded-For") == 0)
            continue;
        list = upstream_header_add(list, h->key, h->value, failed);
    }
    if (client_addr != NULL) {
        char *value = NULL;
        if (xff != NULL ? asprintf(&value, "%s, %s", xff, client_addr) < 0
                        : asprintf(&value, "%s", client_addr) < 0)
            *failed = true;
        else
            list = upstream_header_add(list, "X-Forwarded-For", value, failed);
        free(value);
    } else if (xff != NULL) {
        list = upstream_header_add(list, "X-Forwarded-For", xff, failed);
    }
    /* Stop curl from adding fields the client did not send. */
    list = upstream_header_line(list, "Expect:", failed);
    if (evhttp_find_header(headers, "Accept") == NULL)
        list = upstream_header_line(list, "Accept:", failed);
    if (has_body && evhttp_find_header(headers, "Content-Type") == NULL)
        list = upstream_header_line(list, "Content-Type:", failed);
    return list;
}

int upstream_send(struct upstream *up, const char *method, const char *target,
                  const struct evkeyvalq *headers, const char *client_addr, const char *body,
                  size_t len, upstream_done_cb *cb, void *arg)
{
    const struct config *cfg = up->cfg;
    struct upstream_call *call = calloc(1, sizeof(*call));
    bool failed = false, with_body;
    char *url = NULL;
    CURL *e;

    if (call == NULL)
        return -1;
    call->up = up;
    call->cb = cb;
    call->arg = arg;
    TAILQ_INIT(&call->response_headers);
    call->response_body = evbuffer_new();
    call->easy = e = upstream_handle_get(up);
    if (call->response_body == NULL || e == NULL || asprintf(&url, "%s%s", cfg->upstream_base, target) < 0)
        goto failed;

    with_body = len > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                strcmp(method, "PATCH") == 0;
    call->request_headers = upstream_request_headers(headers, client_addr, with_body, &failed);
    if (failed)
        goto failed;

    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    if (cfg->upstream_unix_path != NULL)
        curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, cfg->upstream_unix_path);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, UPSTREAM_MAX_IDLE_S);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->upstream_connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)cfg->upstream_timeout_ms);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->request_headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, upstream_on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, upstream_on_prereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, call);
    curl_easy_setopt(e, CURLOPT_PRIVATE, call);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->error);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (with_body) {
        /*
         * The body in memory: curl writes a body under 64 KiB in the same send as
         * the head (one segment, one upstream wakeup). curl could rewind it, so
         * the resend guard is upstream_on_prereq alone.
         */
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, len > 0 ? body : "");
        if (strcmp(method, "POST") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }
    free(url);
    url = NULL;
    TAILQ_INSERT_TAIL(&up->calls, call, link);
    up->in_flight++;
    if (curl_multi_add_handle(up->multi, e) != CURLM_OK) {
        TAILQ_REMOVE(&up->calls, call, link);
        up->in_flight--;
        goto failed;
    }
    return 0;

failed:
    free(url);
    if (call->easy != NULL)
        upstream_handle_put(up, call->easy);
    curl_slist_free_all(call->request_headers);
    if (call->response_body != NULL)
        evbuffer_free(call->response_body);
    free(call);
    return -1;
}
