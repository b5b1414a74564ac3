/*
 * admin.c - probes for Kubernetes-style liveness and readiness.
 */
#include "admin.h"

#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "config.h"
#include "server.h"
#include "store.h"

static void admin_reply_text(struct evhttp_request *req, int status, const char *text)
{
    struct evbuffer *body = evbuffer_new();

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    evbuffer_add(body, text, strlen(text));
    evhttp_send_reply(req, status, NULL, body);
    evbuffer_free(body);
}

void admin_handle(struct evhttp_request *req, void *arg)
{
    struct worker *w = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri != NULL ? evhttp_uri_get_path(uri) : "";

    if (path == NULL)
        path = "";
    if (strcmp(path, "/healthz") == 0) {
        admin_reply_text(req, 200, "ok\n");
    } else if (strcmp(path, "/readyz") == 0) {
        if (w->draining)
            admin_reply_text(req, 503, "draining\n");
        else if (!store_ready(w->store))
            admin_reply_text(req, 503, "redis unreachable\n");
        else
            admin_reply_text(req, 200, "ready\n");
    } else {
        admin_reply_text(req, 404, "not found\n");
    }
}
