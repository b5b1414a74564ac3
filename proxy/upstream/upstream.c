/*
 * upstream.c - the client's life (create, destroy) and its buffered
 * transfers: upstream_send and upstream_send_capped keep the whole answer in
 * memory, up to a cap, and call back once it is whole. Streamed transfers
 * are upstream_stream.c's; what both share is upstream_call.c's, and the
 * wiring of libcurl onto the event_base upstream_socket.c's.
 */
#include "upstream.h"
#include "upstream_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>

#include "budget.h"
#include "config.h"

/* A buffered transfer: the answer's body kept in memory. */
struct upstream_buffered {
    struct upstream_call call;      /* first: the call is the transfer */
    struct evbuffer *response_body;
    size_t body_max;                /* bytes of the answer's body kept; the rest is read, dropped */
    struct budget_hold *answer;     /* covers response_body's bytes as they come; NULL: none */
};

static size_t upstream_on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct upstream_buffered *b = userp;
    size_t n = size * nmemb, have = evbuffer_get_length(b->response_body);
    size_t keep = have >= b->body_max ? 0 : b->body_max - have;

    /* past body_max the bytes are read (the answer must end to count) but not kept */
    if (keep > n)
        keep = n;
    if (keep > 0 && evbuffer_add(b->response_body, data, keep) != 0)
        return 0;
    if (b->answer != NULL)
        budget_hold_cover(b->answer, have + keep);
    return n;
}

static void upstream_buffered_discard(struct upstream_call *call)
{
    struct upstream_buffered *b = (struct upstream_buffered *)call;

    upstream_call_deinit(call);
    if (b->response_body != NULL)
        evbuffer_free(b->response_body);
    free(b);
}

static void upstream_buffered_finish(struct upstream_call *call, CURLcode rc)
{
    struct upstream_buffered *b = (struct upstream_buffered *)call;
    struct upstream_response resp = { 0 };
    char cause[512 + CURL_ERROR_SIZE + 32];
    const char *detail;
    enum upstream_outcome outcome = upstream_call_outcome(call, rc, &detail, cause, sizeof(cause));
    curl_off_t total_us = 0;
    long status = 0;

    curl_easy_getinfo(call->easy, CURLINFO_TOTAL_TIME_T, &total_us);
    if (outcome == UPSTREAM_ANSWERED) {
        curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
        upstream_call_read_fields(call, CURLH_HEADER);
        resp.status = (int)status;
        resp.headers = &call->response_headers;
        resp.body = b->response_body;
    }
    call->cb(outcome, outcome == UPSTREAM_ANSWERED ? &resp : NULL, detail,
             outcome == UPSTREAM_ANSWERED ? NULL : cause, (double)total_us / 1000.0, call->arg);
    upstream_buffered_discard(call);
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
    upstream_socket_wire(up);
    /* keep every idle keep-alive connection: a fresh connect per request costs more than the fd */
    curl_multi_setopt(up->multi, CURLMOPT_MAXCONNECTS, UPSTREAM_MAX_IDLE_CONNECTIONS);
    return up;
}

void upstream_destroy(struct upstream *up)
{
    if (up == NULL)
        return;
    while (!TAILQ_EMPTY(&up->calls)) {
        struct upstream_call *call = TAILQ_FIRST(&up->calls);
        call->discard(call);
    }
    while (up->n_pool > 0)
        curl_easy_cleanup(up->pool[--up->n_pool]);
    curl_multi_cleanup(up->multi); /* closes the idle connections through upstream_close_socket */
    upstream_sockets_free(up);
    free(up);
}

unsigned upstream_in_flight(const struct upstream *up)
{
    return up->in_flight;
}

/* upstream_send and upstream_send_capped: keep body_max bytes, counted in answer (may be NULL). */
static int upstream_start(struct upstream *up, const char *method, const char *target,
                          const struct evkeyvalq *headers, const char *client_addr,
                          const char *body, size_t len, size_t body_max,
                          struct budget_hold *answer, upstream_done_cb *cb, void *arg)
{
    struct upstream_buffered *b = calloc(1, sizeof(*b));
    struct upstream_call *call = &b->call;
    bool with_body = len > 0 || upstream_method_has_body(method);

    if (b == NULL)
        return -1;
    call->cb = cb;
    call->arg = arg;
    call->finish = upstream_buffered_finish;
    call->discard = upstream_buffered_discard;
    b->body_max = body_max;
    b->answer = answer;
    if (upstream_call_init(call, up, target, headers, client_addr, with_body) != 0 ||
        (b->response_body = evbuffer_new()) == NULL)
        goto failed;
    curl_easy_setopt(call->easy, CURLOPT_WRITEFUNCTION, upstream_on_write);
    curl_easy_setopt(call->easy, CURLOPT_WRITEDATA, b);
    upstream_call_set_method(call, method, with_body, len > 0 ? body : NULL, (long long)len);
    if (upstream_call_add(call) != 0)
        goto failed;
    return 0;

failed:
    upstream_buffered_discard(call);
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
