/*
 * probe.c - the probes: /healthz, /readyz and /metrics (probe.h), and the
 * health listener that serves them alone. Answers through admin_reply.c
 * and calls no other admin file.
 */
#include "probe.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "admin_int.h"
#include "http_server.h"
#include "listener.h"
#include "metrics.h"

const struct http_server_limits probe_listener_limits = {
    .max_connections = 64,
    .max_head_bytes = 16 * 1024,
    .max_header_fields = 64,
    .head_timeout_ms = 10000,
    .read_timeout_ms = 30000,
    .write_timeout_ms = 30000,
    .methods = EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_DELETE | EVHTTP_REQ_POST |
               EVHTTP_REQ_PUT,
};

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

static void probe_readyz(const struct probe_env *env, struct http_req *req)
{
    const char *away = NULL;
    const char *why = env->unready(env->arg, &away);
    char text[256];

    if (why != NULL)
        snprintf(text, sizeof(text), "%s\n", why);
    else if (away != NULL)
        snprintf(text, sizeof(text), "ready (readiness: process; the store is away: %s)\n", away);
    else
        snprintf(text, sizeof(text), "ready\n");
    admin_reply_text(req, why != NULL ? 503 : 200, text);
}

bool probe_answer(const struct probe_env *env, struct http_req *req)
{
    const char *path = evhttp_uri_get_path(http_server_uri(req));
    enum evhttp_cmd_type cmd = http_server_command(req);
    bool read = cmd != EVHTTP_REQ_POST && cmd != EVHTTP_REQ_DELETE && cmd != EVHTTP_REQ_PUT;

    if (path == NULL || !probe_path(path))
        return false;
    if (!read)
        admin_reply_text(req, 405, "method not allowed\n");
    else if (strcmp(path, "/healthz") == 0)
        admin_reply_text(req, 200, "ok\n");
    else if (strcmp(path, "/readyz") == 0)
        probe_readyz(env, req);
    else
        probe_metrics(env, req);
    return true;
}

/*
 * The health listener's head callback: a method but GET and HEAD, or any
 * body, is refused here, before a body is read; the rest goes on to
 * probe_handle.
 */
static void probe_head(struct http_req *req, void *arg)
{
    enum evhttp_cmd_type cmd = http_server_command(req);

    (void)arg;
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        evhttp_add_header(http_server_output_headers(req), "Allow", "GET, HEAD");
        admin_reply_text(req, 405, "method not allowed\n");
    } else if (http_server_content_length(req) != 0) {
        admin_reply_problem(req, PROBLEM_BODY_TOO_LARGE, "the health listener takes no body");
    }
}

/* The health listener's request callback: a probe, or 404. */
static void probe_handle(struct http_req *req, void *arg)
{
    if (!probe_answer(arg, req))
        admin_reply_text(req, 404, "not found\n");
}

struct http_server *probe_listen(struct event_base *base, const struct endpoint *ep,
                                 struct probe_env *env, char *err, size_t errlen)
{
    struct evconnlistener *lev = listener_bind(base, ep, false, false, err, errlen);
    struct http_server *s;

    if (lev == NULL)
        return NULL;
    s = http_server_new(base, lev, &probe_listener_limits, &(struct http_server_callbacks){
        .head = probe_head, .request = probe_handle, .arg = env,
    });
    if (s == NULL)
        snprintf(err, errlen, "out of memory");
    return s;
}
