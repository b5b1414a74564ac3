/*
 * admin_reply.c - the admin listener's answers, and how they name a
 * record's route.
 */
#include "admin_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "http_server.h"
#include "record.h"

void admin_reply(struct http_req *req, int status, const char *content_type,
                 struct evbuffer *body)
{
    evhttp_add_header(http_server_output_headers(req), "Content-Type", content_type);
    evhttp_add_header(http_server_output_headers(req), "Cache-Control", "no-store");
    http_server_reply(req, status, NULL, body);
}

void admin_reply_text(struct http_req *req, int status, const char *text)
{
    struct evbuffer *body = evbuffer_new();

    if (body != NULL)
        evbuffer_add(body, text, strlen(text));
    admin_reply(req, status, "text/plain; charset=utf-8", body);
    if (body != NULL)
        evbuffer_free(body);
}

void admin_reply_json(struct http_req *req, int status, json_t *doc)
{
    struct evbuffer *body = evbuffer_new();
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

    if (body != NULL && text != NULL) {
        evbuffer_add(body, text, strlen(text));
        evbuffer_add(body, "\n", 1);
    }
    free(text);
    json_decref(doc);
    admin_reply(req, status, "application/json", body);
    if (body != NULL)
        evbuffer_free(body);
}

void admin_reply_error(struct http_req *req, int status, const char *error)
{
    admin_reply_json(req, status, json_pack("{s:s}", "error", error));
}

void admin_reply_problem(struct http_req *req, enum problem p, const char *detail)
{
    struct evbuffer *body = evbuffer_new();
    size_t len = 0;
    char *text = problem_json(p, problem_status(p), detail, &len);

    if (body != NULL && text != NULL)
        evbuffer_add(body, text, len);
    free(text);
    admin_reply(req, problem_status(p), PROBLEM_CONTENT_TYPE, body);
    if (body != NULL)
        evbuffer_free(body);
}

const char *admin_record_route(const struct record *rec, char *out, size_t outsize)
{
    if (rec->route == NULL || rec->route_len == 0)
        return NULL;
    snprintf(out, outsize, "%.*s", (int)(rec->route_len < (size_t)INT_MAX ? rec->route_len : 0),
             rec->route);
    return out;
}
