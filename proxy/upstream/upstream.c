/*
 * upstream.c - libcurl multi-socket wired onto the event_base, in the shape
 * of curl's docs/examples/multi-event.c: curl tells us which sockets to watch
 * and when to wake it; completed transfers are collected after each
 * curl_multi_socket_action, outside every curl callback.
 */
#include "upstream.h"
#include "upstream_headers.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <fcntl.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "budget.h"
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
    size_t body_max;                /* bytes of the answer's body kept; the rest is read, dropped */
    struct budget_hold *answer;     /* covers response_body's bytes as they come; NULL: none */
    upstream_done_cb *cb;
    void *arg;
    char error[CURL_ERROR_SIZE];
    TAILQ_ENTRY(upstream_call) link;
};

/*
 * One upstream socket, from curl's open callback to its close callback. A
 * socket that has carried a request stays registered with the event loop
 * while its connection idles in curl's pool (EV_READ), so reusing it for the
 * next transfer costs no epoll_ctl: curl's socket callback only says which
 * events a transfer waits for, and CURL_POLL_REMOVE (the transfer is done)
 * changes nothing but `in_use`.
 *
 * libcurl 7.88 closes a socket whose connect failed (connect timeout, refused,
 * the losing address of happy eyeballs) with close(2) alone: no close
 * callback, and CURL_POLL_REMOVE only after the close. Such a socket was only
 * ever watched for EV_WRITE (connecting), never asked for CURL_POLL_IN; so
 * only a socket that was (`carried`: connected, it sent a request) is kept
 * watched after CURL_POLL_REMOVE, and a record left behind by a silent close
 * is dropped when its number comes back (upstream_open_socket).
 *
 * curl also asks us to watch sockets it opened itself: the threaded
 * resolver's wake-up socket, while a host name is resolved. Such a socket
 * (`foreign`) gets a record when curl first asks for it, and loses it at
 * CURL_POLL_REMOVE; curl closes it without a close callback, possibly before
 * that REMOVE, so its number can come back first, as after a silent close.
 */
struct upstream_socket {
    struct upstream *up;
    curl_socket_t fd;
    struct event ev;
    short watched;      /* EV_READ|EV_WRITE while ev is added, 0 when not */
    bool in_use;        /* a transfer waits on it (curl asked for events, no REMOVE since) */
    bool carried;       /* curl asked for CURL_POLL_IN once: connected, closed through us */
    bool foreign;       /* curl opened it, not upstream_open_socket (the resolver's) */
};

struct upstream {
    struct event_base *base;
    const struct config *cfg;
    CURLM *multi;
    struct event timer;
    _Atomic unsigned in_flight; /* read by other threads (metrics) */
    TAILQ_HEAD(, upstream_call) calls;
    CURL *pool[UPSTREAM_HANDLE_POOL];   /* idle easy handles, their fixed options set */
    size_t n_pool;
    struct upstream_socket **sockets;   /* by fd: the sockets curl opened through us */
    size_t n_sockets;                   /* length of sockets */
};

static void upstream_check_done(struct upstream *up);
static void upstream_on_socket_event(evutil_socket_t fd, short what, void *arg);

/* The socket record of fd, or NULL when curl did not open fd through upstream_open_socket. */
static struct upstream_socket *upstream_socket_find(const struct upstream *up, curl_socket_t fd)
{
    return fd >= 0 && (size_t)fd < up->n_sockets ? up->sockets[fd] : NULL;
}

/* Watch exactly `kind` (EV_READ, EV_WRITE, both, or 0 for nothing) on us. */
static void upstream_socket_watch(struct upstream_socket *us, short kind)
{
    if (kind == us->watched)
        return;
    if (us->watched != 0)
        event_del(&us->ev);
    us->watched = 0;
    if (kind == 0)
        return;
    event_assign(&us->ev, us->up->base, us->fd, kind | EV_PERSIST, upstream_on_socket_event, us);
    if (event_add(&us->ev, NULL) == 0)
        us->watched = kind;
}

/*
 * An event on an upstream socket. While a transfer waits on it, curl handles
 * it. While it idles in curl's pool, readable means the upstream closed it
 * (EOF, RST) or sent bytes nobody asked for: either way it must not carry
 * another request. We stop watching it (epoll is level-triggered: it would
 * wake us on every loop) and leave it to curl, whose liveness check before a
 * reuse, and its prune of dead idle connections (when a transfer starts, at
 * most once a second), see the same
 * and close it through upstream_close_socket.
 */
static void upstream_on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    struct upstream_socket *us = arg;
    struct upstream *up = us->up;
    int running = 0;
    int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);

    if (!us->in_use) {
        upstream_socket_watch(us, 0);
        return;
    }
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

static int upstream_sockets_reserve(struct upstream *up, int fd);

/* A record for a socket curl opened itself (struct upstream_socket); NULL when out of memory. */
static struct upstream_socket *upstream_socket_adopt(struct upstream *up, curl_socket_t fd)
{
    struct upstream_socket *us;

    if (fd < 0 || upstream_sockets_reserve(up, fd) != 0 || (us = calloc(1, sizeof(*us))) == NULL)
        return NULL;
    us->up = up;
    us->fd = fd;
    us->foreign = true;
    up->sockets[fd] = us;
    return us;
}

/*
 * CURLMOPT_SOCKETFUNCTION: a transfer waits for `what` on fd, or
 * (CURL_POLL_REMOVE) no transfer uses fd any more. A socket of ours stays
 * registered (EV_READ) until curl closes it; a foreign one (the resolver's)
 * is forgotten at REMOVE, since curl closes it without telling us. -1 (curl
 * fails the transfer) only when there is no memory for a record.
 */
static int upstream_on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct upstream *up = userp;
    struct upstream_socket *us = upstream_socket_find(up, fd);

    (void)easy;
    (void)socketp;
    if (us == NULL && what == CURL_POLL_REMOVE) /* a silent close ended this one */
        return 0;
    if (us == NULL && (us = upstream_socket_adopt(up, fd)) == NULL)
        return -1;
    if (what == CURL_POLL_REMOVE) {
        us->in_use = false;
        upstream_socket_watch(us, us->carried && !us->foreign ? EV_READ : 0);
        if (us->foreign) {
            up->sockets[fd] = NULL;
            free(us);
        }
        return 0;
    }
    us->in_use = true;
    if (what & CURL_POLL_IN)
        us->carried = true;
    upstream_socket_watch(us, (short)(((what & CURL_POLL_IN) ? EV_READ : 0) |
                                      ((what & CURL_POLL_OUT) ? EV_WRITE : 0)));
    return 0;
}

/* Room for fd in up->sockets; -1 when out of memory. */
static int upstream_sockets_reserve(struct upstream *up, int fd)
{
    size_t n = up->n_sockets > 0 ? up->n_sockets : 64;
    struct upstream_socket **grown;

    if ((size_t)fd < up->n_sockets)
        return 0;
    while (n <= (size_t)fd)
        n *= 2;
    grown = realloc(up->sockets, n * sizeof(*grown));
    if (grown == NULL)
        return -1;
    memset(grown + up->n_sockets, 0, (n - up->n_sockets) * sizeof(*grown));
    up->sockets = grown;
    up->n_sockets = n;
    return 0;
}

/*
 * CURLOPT_OPENSOCKETFUNCTION: open the socket (as curl would, plus
 * SOCK_CLOEXEC) and keep a record of it for the event loop.
 */
static curl_socket_t upstream_open_socket(void *clientp, curlsocktype purpose,
                                          struct curl_sockaddr *addr)
{
    struct upstream *up = clientp;
    struct upstream_socket *us, *stale;
    int fd;

    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKET_BAD;
    fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    /*
     * A record at this number is what a silent close left (see struct
     * upstream_socket). Unwatched, it is dropped. Still watched, its event
     * is still in libevent's map of that number, and libevent adds a number
     * to epoll only when its first event arrives: a new socket under it would
     * never be watched. So curl gets another number, and the record goes when
     * curl's CURL_POLL_REMOVE for it arrives (in the same curl call).
     */
    while (fd >= 0 && (stale = upstream_socket_find(up, fd)) != NULL) {
        int other;
        if (stale->watched == 0) {
            up->sockets[fd] = NULL;
            free(stale);
            break;
        }
        other = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        close(fd);
        fd = other;
    }
    if (fd < 0)
        return CURL_SOCKET_BAD;
    us = upstream_sockets_reserve(up, fd) == 0 ? calloc(1, sizeof(*us)) : NULL;
    if (us == NULL) {
        close(fd);
        return CURL_SOCKET_BAD;
    }
    us->up = up;
    us->fd = fd;
    up->sockets[fd] = us;
    return fd;
}

/*
 * CURLOPT_CLOSESOCKETFUNCTION: the one place a connected upstream socket
 * leaves the event loop, before its number is free again. (libevent's
 * changelist turns a later add under the same number into EPOLL_CTL_MOD,
 * which it retries as ADD when the kernel no longer knows the number.)
 */
static int upstream_close_socket(void *clientp, curl_socket_t fd)
{
    struct upstream *up = clientp;
    struct upstream_socket *us = upstream_socket_find(up, fd);

    if (us != NULL) {
        upstream_socket_watch(us, 0);
        up->sockets[fd] = NULL;
        free(us);
    }
    return close(fd);
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
    size_t n = size * nmemb, have = evbuffer_get_length(call->response_body);
    size_t keep = have >= call->body_max ? 0 : call->body_max - have;

    /* past body_max the bytes are read (the answer must end to count) but not kept */
    if (keep > n)
        keep = n;
    if (keep > 0 && evbuffer_add(call->response_body, data, keep) != 0)
        return 0;
    if (call->answer != NULL)
        budget_hold_cover(call->answer, have + keep);
    return n;
}

/*
 * A pooled easy handle, or a new one with the options that never change set
 * once. Handles are not reset between transfers (curl_easy_reset frees and
 * re-initialises every option): upstream_send sets what changes per transfer.
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
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, upstream_on_write);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, upstream_on_prereq);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, upstream_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, up);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, upstream_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, up);
    return e;
}

/* Back to the pool, holding no pointer into the finished call. */
static void upstream_handle_put(struct upstream *up, CURL *easy)
{
    if (up->n_pool < UPSTREAM_HANDLE_POOL) {
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, NULL);
        curl_easy_setopt(easy, CURLOPT_PREREQDATA, NULL);
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
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
    curl_multi_cleanup(up->multi); /* closes the idle connections through upstream_close_socket */
    evtimer_del(&up->timer);

    for (size_t fd = 0; fd < up->n_sockets; fd++) {
        if (up->sockets[fd] != NULL) {
            upstream_socket_watch(up->sockets[fd], 0);
            free(up->sockets[fd]);
        }
    }
    free(up->sockets);
    free(up);
}

unsigned upstream_in_flight(const struct upstream *up)
{
    return up->in_flight;
}

/*
 * The method and body of a transfer on a reused handle: every option a
 * previous transfer may have set (NOBODY, POSTFIELDS, CUSTOMREQUEST) is set
 * again.
 */
static void upstream_set_method(CURL *e, const char *method, bool with_body, const char *body,
                                size_t len)
{
    bool post = strcmp(method, "POST") == 0;

    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
    } else if (with_body) {
        /*
         * The body in memory: curl writes a body under 64 KiB in the same send as
         * the head (one segment, one upstream wakeup). curl could rewind it, so
         * the resend guard is upstream_on_prereq alone.
         */
        curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, len > 0 ? body : "");
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, post ? NULL : method);
    } else {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") == 0 ? NULL : method);
    }
}

/* upstream_send and upstream_send_capped: keep body_max bytes, counted in answer (may be NULL). */
static int upstream_start(struct upstream *up, const char *method, const char *target,
                          const struct evkeyvalq *headers, const char *client_addr,
                          const char *body, size_t len, size_t body_max,
                          struct budget_hold *answer, upstream_done_cb *cb, void *arg)
{
    const struct config *cfg = up->cfg;
    struct upstream_call *call = calloc(1, sizeof(*call));
    bool failed = false, with_body;
    size_t base_len = strlen(cfg->upstream_base), target_len = strlen(target);
    char small[2048], *url = NULL;
    CURL *e;

    if (call == NULL)
        return -1;
    call->up = up;
    call->cb = cb;
    call->arg = arg;
    call->body_max = body_max;
    call->answer = answer;
    TAILQ_INIT(&call->response_headers);
    call->response_body = evbuffer_new();
    call->easy = e = upstream_handle_get(up);
    /* base + target; curl copies it (CURLOPT_CURLU would not save the parse: docs/performance.md) */
    url = base_len + target_len < sizeof(small) ? small : malloc(base_len + target_len + 1);
    if (call->response_body == NULL || e == NULL || url == NULL)
        goto failed;
    memcpy(url, cfg->upstream_base, base_len);
    memcpy(url + base_len, target, target_len + 1);

    with_body = len > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                strcmp(method, "PATCH") == 0;
    call->request_headers = upstream_request_headers(headers, client_addr, with_body, &failed);
    if (failed)
        goto failed;

    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->request_headers);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, call);
    curl_easy_setopt(e, CURLOPT_PRIVATE, call);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->error);
    upstream_set_method(e, method, with_body, body, len);
    if (url != small)
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
    if (url != small)
        free(url);
    if (call->easy != NULL)
        upstream_handle_put(up, call->easy);
    curl_slist_free_all(call->request_headers);
    if (call->response_body != NULL)
        evbuffer_free(call->response_body);
    free(call);
    return -1;
}

int upstream_send(struct upstream *up, const char *method, const char *target,
                  const struct evkeyvalq *headers, const char *client_addr, const char *body,
                  size_t len, struct budget_hold *answer, upstream_done_cb *cb, void *arg)
{
    return upstream_start(up, method, target, headers, client_addr, body, len, SIZE_MAX, answer,
                          cb, arg);
}

int upstream_send_capped(struct upstream *up, const char *method, const char *target,
                         const struct evkeyvalq *headers, const char *client_addr,
                         const char *body, size_t len, size_t body_max, upstream_done_cb *cb,
                         void *arg)
{
    return upstream_start(up, method, target, headers, client_addr, body, len, body_max, NULL,
                          cb, arg);
}

int64_t upstream_retry_after_ms(const char *value, int64_t now_s)
{
    char text[64];
    size_t len;
    time_t when;

    value += strspn(value, " \t");
    len = strlen(value);
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (len == 0 || len >= sizeof(text))
        return -1;
    memcpy(text, value, len);
    text[len] = '\0';
    if (strspn(text, "0123456789") == len) {
        /* delay-seconds: a day at most is plenty (the caller caps it at backoff.max) */
        if (len > 9)
            return 86400000;
        return (int64_t)strtoll(text, NULL, 10) * 1000;
    }
    when = curl_getdate(text, NULL);
    if (when == (time_t)-1)
        return -1;
    return (int64_t)when > now_s ? ((int64_t)when - now_s) * 1000 : 0;
}
