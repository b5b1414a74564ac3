/*
 * probe.c - the probes: /healthz, /readyz and /metrics (probe.h). Answers
 * through admin_reply.c and calls no other admin file.
 */
#include "probe.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "admin_int.h"
#include "http_server.h"
#include "metrics.h"

bool probe_path(const char *path)
{
    return strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0 ||
           strcmp(path, "/metrics") == 0;
}

static void probe_metrics(const struct probe_env *env, struct http_req *req)
{
    struct evbuffer *body = evbuffer_new();
    struct metrics_gauges g;

    env->gauges(env->arg, &g);
    metrics_render(env->metrics, body, &g);
    admin_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", body);
    evbuffer_free(body);
}

bool probe_answer(const struct probe_env *env, struct http_req *req)
{
    const char *path = evhttp_uri_get_path(http_server_uri(req));
    enum evhttp_cmd_type cmd = http_server_command(req);
    bool read = cmd != EVHTTP_REQ_POST && cmd != EVHTTP_REQ_DELETE && cmd != EVHTTP_REQ_PUT;

    if (path == NULL || !probe_path(path))
        return false;
    if (!read) {
        admin_reply_text(req, 405, "method not allowed\n");
    } else if (strcmp(path, "/healthz") == 0) {
        admin_reply_text(req, 200, "ok\n");
    } else if (strcmp(path, "/readyz") == 0) {
        const char *why = env->unready(env->arg);
        char text[64];
        snprintf(text, sizeof(text), "%s\n", why != NULL ? why : "ready");
        admin_reply_text(req, why != NULL ? 503 : 200, text);
    } else {
        probe_metrics(env, req);
    }
    return true;
}
