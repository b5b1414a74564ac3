/*
 * reply.c - the answers of the client listener; see reply.h.
 */
#include "reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "headers.h"
#include "http_server.h"
#include "oom.h"
#include "record.h"

struct evbuffer *reply_problem(struct http_req *req, enum problem p, int status,
                               const char *detail, int retry_after_s, bool replayed,
                               const char *record_id, bool stripe)
{
    struct evkeyvalq *out = http_server_output_headers(req);
    struct evbuffer *body = oom_check(evbuffer_new(), "a problem answer");
    size_t len = 0;
    char *json = problem_body(p, status, detail, record_id, stripe, &len);

    evhttp_add_header(out, "Content-Type", stripe ? PROBLEM_STRIPE_CONTENT_TYPE
                                                  : PROBLEM_CONTENT_TYPE);
    evhttp_add_header(out, "Cache-Control", "no-store");
    if (stripe)
        evhttp_add_header(out, PROBLEM_STRIPE_RETRY_HEADER, problem_retryable(p) ? "true" : "false");
    if (retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", retry_after_s);
        evhttp_add_header(out, "Retry-After", v);
    }
    if (replayed)
        evhttp_add_header(out, "Idempotent-Replayed", "true");
    if (record_id != NULL)
        evhttp_add_header(out, REPLY_RECORD_ID_HEADER, record_id);
    if (body != NULL && json != NULL)
        evbuffer_add(body, json, len);
    free(json);
    return body;
}

void reply_move_headers(struct http_req *req, struct evkeyvalq *from)
{
    struct evkeyvalq *out = http_server_output_headers(req);
    const char *connection = evhttp_find_header(from, "Connection");
    struct evkeyval *h, *next;

    for (h = TAILQ_FIRST(from); h != NULL; h = next) {
        next = TAILQ_NEXT(h, next);
        if (header_is_hop_by_hop(h->key) || strcasecmp(h->key, "Content-Length") == 0 ||
            header_named_by_connection(connection, h->key) || strpbrk(h->value, "\r\n") != NULL)
            continue;
        TAILQ_REMOVE(from, h, next);
        TAILQ_INSERT_TAIL(out, h, next);
    }
}

void reply_mark_executed(struct http_req *req, bool say_false)
{
    struct evkeyvalq *out = http_server_output_headers(req);

    while (evhttp_remove_header(out, "Idempotent-Replayed") == 0)
        ;
    if (say_false)
        evhttp_add_header(out, "Idempotent-Replayed", "false");
}

struct evbuffer *reply_replay(struct http_req *req, const struct record *rec)
{
    struct evkeyvalq *out = http_server_output_headers(req);
    struct evbuffer *body = oom_check(evbuffer_new(), "a replayed answer");
    char small[1024];

    /* name and value NUL-terminated in one buffer; no stored field is too long to replay */
    for (size_t i = 0; i < rec->n_headers; i++) {
        const struct record_field *f = &rec->headers[i];
        size_t need = f->name_len + 1 + f->value_len + 1;
        char *name = need <= sizeof(small) ? small : malloc(need);
        if (name != NULL) {
            char *value = name + f->name_len + 1;
            memcpy(name, f->name, f->name_len);
            name[f->name_len] = '\0';
            memcpy(value, f->value, f->value_len);
            value[f->value_len] = '\0';
            evhttp_add_header(out, name, value);
        }
        if (name != small)
            free(name);
    }
    evhttp_add_header(out, "Idempotent-Replayed", "true");
    if (body != NULL)
        evbuffer_add(body, rec->body, rec->body_len);
    return body;
}

/* An answer being written: the drain's count and the bytes it holds. */
struct reply_flight {
    _Atomic unsigned *unflushed;
    struct budget_hold answer;      /* the answer's bytes (limits.max_buffered) */
};

static void reply_on_done(struct http_req *req, bool written, void *arg)
{
    struct reply_flight *f = arg;

    (void)req;
    (void)written;
    (*f->unflushed)--;
    budget_hold_set(&f->answer, 0);
    free(f);
}

static void reply_on_stream_flushed(struct http_req *req, bool written, void *arg)
{
    _Atomic unsigned *unflushed = arg;

    (void)req;
    (void)written;
    (*unflushed)--;
}

void reply_stream_end(struct http_req *req, const struct evkeyvalq *trailers,
                      _Atomic unsigned *unflushed)
{
    http_server_on_done(req, reply_on_stream_flushed, unflushed);
    http_server_reply_end(req, trailers);
}

void reply_stream_cut(struct http_req *req, _Atomic unsigned *unflushed)
{
    http_server_reply_abort(req);
    (*unflushed)--;
}

void reply_send(struct http_req *req, int status, struct evbuffer *body, bool close,
                _Atomic unsigned *unflushed, struct budget_hold *held)
{
    struct reply_flight *f = calloc(1, sizeof(*f));

    if (close || f == NULL) /* no flight: out of memory, close after it */
        http_server_close_after(req);
    if (f != NULL) {
        f->unflushed = unflushed;
        (*unflushed)++;
        if (body != NULL) /* the bytes stay in the connection's output until the client read them */
            budget_hold_move(&f->answer, held);
        http_server_on_done(req, reply_on_done, f);
    }
    budget_hold_set(held, 0);
    http_server_reply(req, status, NULL, body);
    if (body != NULL)
        evbuffer_free(body);
}
